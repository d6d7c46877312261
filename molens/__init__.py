"""Molens: a Raft-replicated scheduler for delayed, periodic and cron HTTP callbacks."""

__version__ = "0.1.0"
