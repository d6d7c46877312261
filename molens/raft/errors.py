"""The errors of the Raft package, one tree (the package imports nothing else from Molens)::

    RaftError
    ├── NotLeaderError (leader_id: the leader this node knows of) -- the one "not the leader"
    ├── ProposalDroppedError (leadership transfer in progress, or removed from the cluster)
    ├── ConfChangeError (a membership change refused)
    │   └── ConfChangePending (refused for now: asked too early in a term, or another change in flight)
    ├── LogError (log access the core must handle)
    │   ├── CompactedError (below the first index: only in the snapshot)
    │   ├── EntryUnavailableError (above the last index)
    │   └── StorageError (lmdb log / snapshot files) ── SnapshotCorruptError
    ├── FSMError (a caller bug: entries out of order, an unusable snapshot file)
    ├── CodecError (also a ValueError: a message that cannot be decoded)
    └── TransportError (ZeroMQ endpoints: bind, CURVE keys)
"""

from __future__ import annotations


class RaftError(Exception):
    """Base of the errors the core raises to its caller."""


class NotLeaderError(RaftError):
    """The operation needs the leader; ``leader_id`` is the one this node knows of, if any. The one
    "not the leader" error of Molens: RaftPeer, the admin socket and the node API raise or map this."""

    def __init__(self, leader_id: str | None) -> None:
        super().__init__(f"not the leader (leader={leader_id})")
        self.leader_id = leader_id


class ProposalDroppedError(RaftError):
    """The leader cannot take proposals right now (leadership transfer, or removed from the cluster)."""


class ConfChangeError(RaftError):
    """A membership change that is refused: invalid, too early in the term, or another in flight."""


class ConfChangePending(ConfChangeError):
    """A membership change refused for now: the leader has not committed an entry of its term yet, or
    another change is still uncommitted. The same change asked again shortly may be taken."""


class LogError(RaftError):
    """Base for log access errors the core must handle."""


class CompactedError(LogError):
    """The requested index is below the first available index (it lives only in the snapshot)."""


class EntryUnavailableError(LogError):
    """The requested index is above the last index."""


class StorageError(LogError):
    """The stored log or a snapshot file cannot be used."""


class SnapshotCorruptError(StorageError):
    """A snapshot file is missing, truncated, or fails its checksum; it is refused."""


class FSMError(RaftError):
    """A caller bug: entries handed to the FSM out of order, or an unusable snapshot file."""


class CodecError(RaftError, ValueError):
    """Bytes that do not decode to a known message."""


class TransportError(RaftError):
    """The endpoint cannot be started or used (bad keys, closed, bind failure)."""


__all__ = [
    "CodecError",
    "CompactedError",
    "ConfChangeError",
    "ConfChangePending",
    "EntryUnavailableError",
    "FSMError",
    "LogError",
    "NotLeaderError",
    "ProposalDroppedError",
    "RaftError",
    "SnapshotCorruptError",
    "StorageError",
    "TransportError",
]
