"""Consensus: a pure Raft core, its messages, storage and transport. Knows nothing about tasks."""
