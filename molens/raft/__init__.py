"""Consensus: a pure Raft core, its messages, storage and transport. Knows nothing about tasks.

Its errors form one tree under :class:`molens.raft.errors.RaftError` (drawn in that module).
"""
