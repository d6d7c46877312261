"""The Raft log contract: entries, hard state, snapshots, the LogView the core reads and the
PeerLog a RaftPeer writes.

Shaped like etcd's ``raft.Storage``: the core keeps its own unstable tail in memory and reads the
*stable* log through :class:`LogView`. The node appends what a ``Ready`` hands it to stable storage,
then calls ``advance``. :class:`MemoryLog` is the in-memory implementation used by the simulator and
tests; ``storage.py`` implements the same protocol over lmdb. :class:`PeerLog` is what the RaftPeer
actor needs on top (saving a Ready, snapshot files): ``storage.LmdbLog`` in a node, an in-memory twin
in tests (``tests/memory_log.py``).

Index conventions (as etcd): the log always has a "dummy" position at ``snapshot.index`` whose term
is ``snapshot.term``; real entries run ``first_index() .. last_index()`` with
``first_index() == snapshot.index + 1``. An empty log has snapshot index 0, term 0.

How ``RaftCore`` reads this at start-up: term, vote and commit come from ``initial_state()``; the
membership is the snapshot's when ``snapshot().meta.index > 0``, else ``initial_state()``'s when it
names any member, else the bootstrap peers given to the core; then every ``CONF_CHANGE`` entry in
``first_index() .. last_index()`` is replayed on top (a node uses the newest configuration in its
log, committed or not). So storage need not track membership beyond the snapshot's.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from molens.raft.errors import CompactedError, EntryUnavailableError, LogError

if TYPE_CHECKING:
    from molens.raft.storage import SnapshotFile, SnapshotStore


class EntryKind(enum.IntEnum):
    NORMAL = 0
    """Application data; an empty ``data`` is the leader's no-op at the start of a term."""
    CONF_CHANGE = 1
    """A membership change (encoded by the core)."""


ENTRY_KINDS: dict[int, EntryKind] = {int(k): k for k in EntryKind}
"""Stored or wire value -> kind: a dict lookup (KeyError when unknown) costs a fraction of
``EntryKind(value)``, and decoding does it for every entry."""

ENTRY_OVERHEAD = 24
"""What :meth:`Entry.size` adds to the data's length for an entry's index, term and framing."""


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""

    def size(self) -> int:
        """Approximate encoded size, used for byte-bounded batches."""
        return len(self.data) + ENTRY_OVERHEAD


_new = object.__new__
_set_index, _set_term, _set_kind, _set_data = (
    Entry.__dict__[f].__set__ for f in ("index", "term", "kind", "data")
)


def make_entry(index: int, term: int, kind: EntryKind, data: bytes) -> Entry:
    """``Entry(index, term, kind, data)`` at about 60 % of its cost, for the paths that make one
    per entry replicated (proposing, decoding a message): a frozen dataclass's ``__init__`` goes
    through ``object.__setattr__`` for every field, this sets the slots through their descriptors."""
    e: Entry = _new(Entry)
    _set_index(e, index)
    _set_term(e, term)
    _set_kind(e, kind)
    _set_data(e, data)
    return e


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it leaves the node."""

    term: int = 0
    vote: str | None = None
    commit: int = 0


@dataclass(frozen=True, slots=True)
class Membership:
    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int = 0
    term: int = 0
    membership: Membership = field(default_factory=Membership)
    context: bytes = b""
    """Opaque to Raft, carried with the snapshot: the runtime puts the members' addresses here, which
    otherwise travel only in conf-change entries that a compacted log no longer holds."""


class SnapshotBytes(Protocol):
    """What the core needs of a snapshot's data to send it in chunks: its length and byte slices.
    ``bytes`` is one; durable storage hands out a file-backed one so a large state machine is not
    read into memory to be sent."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: slice, /) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    meta: SnapshotMeta
    data: bytes | SnapshotBytes = b""


class LogView(Protocol):
    """Read access to the stable log, as the core needs it."""

    def initial_state(self) -> tuple[HardState, Membership]:
        """The hard state and membership recovered from storage at start-up."""
        ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term(self, index: int) -> int:
        """Term of ``index`` for ``snapshot.index <= index <= last_index``; raises Compacted/Unavailable."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries in ``[lo, hi)``; at least one entry even past ``max_bytes``."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest snapshot (meta index 0 when there is none), data included: may read it from disk."""
        ...

    def snapshot_meta(self) -> SnapshotMeta:
        """The latest snapshot's metadata, without its data."""
        ...


class PeerLog(LogView, Protocol):
    """The stable log a RaftPeer is handed and owns (it closes it): the core's :class:`LogView`, the
    write of a ``Ready`` in one durable step, and the snapshot files (:class:`SnapshotStore`: the
    state machine snapshots to a file, which the store compresses, checks and streams to followers).
    Actor thread only, but ``snapshots``, which the peer's snapshot threads also write to."""

    snapshots: SnapshotStore
    syncs: int
    """Write transactions committed (the peer's stats)."""
    cache_hits: int
    """Entries read back from memory rather than storage (the peer's stats)."""

    @property
    def snapshot_held(self) -> bool:
        """Whether :meth:`snapshot` data is held (a file open to stream, or data just received)."""
        ...

    def hard_state(self) -> HardState: ...

    def save(
        self,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
    ) -> None:
        """Make what a ``Ready`` carries durable in one step: snapshot, then entries (replacing a
        conflicting suffix), then hard state."""
        ...

    def snapshot_file(self) -> SnapshotFile | None:
        """The file of the current snapshot, None when there is none."""
        ...

    def record_snapshot(self, meta: SnapshotMeta, sf: SnapshotFile) -> SnapshotMeta:
        """Make ``sf`` (written by ``snapshots``) the current snapshot."""
        ...

    def export_snapshot(self, dest: str | os.PathLike[str]) -> SnapshotMeta:
        """Write the current snapshot's uncompressed state-machine data to ``dest`` (to restore from)."""
        ...

    def release_snapshot_data(self) -> None:
        """Let go of the data :meth:`snapshot` holds; the file stays."""
        ...

    def compact(self, index: int) -> None:
        """Discard entries up to and including ``index`` (at most the snapshot index)."""
        ...

    def close(self) -> None: ...


class MemoryLog:
    """In-memory stable log: the simulator's "disk". Also the reference for ``storage.py``."""

    def __init__(self, membership: Membership | None = None) -> None:
        self._hard = HardState()
        self._snap = Snapshot(SnapshotMeta(membership=membership or Membership()))
        self._membership = membership or Membership()
        # _ents[0] is the dummy entry at snapshot.index
        self._ents: list[Entry] = [Entry(0, 0)]

    # --- LogView ---------------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, Membership]:
        return self._hard, self._membership

    def first_index(self) -> int:
        return self._ents[0].index + 1

    def last_index(self) -> int:
        return self._ents[0].index + len(self._ents) - 1

    def term(self, index: int) -> int:
        off = self._ents[0].index
        if index < off:
            raise CompactedError(index)
        if index - off >= len(self._ents):
            raise EntryUnavailableError(index)
        return self._ents[index - off].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        off = self._ents[0].index
        if lo <= off:
            raise CompactedError(lo)
        if hi > self.last_index() + 1:
            raise EntryUnavailableError(hi)
        out = self._ents[lo - off : hi - off]
        if max_bytes is None or not out:
            return list(out)
        total = 0
        for n, e in enumerate(out):
            total += e.size()
            if total > max_bytes and n > 0:
                return list(out[:n])
        return list(out)

    def snapshot(self) -> Snapshot:
        return self._snap

    def snapshot_meta(self) -> SnapshotMeta:
        return self._snap.meta

    # --- mutation, driven by the node after a Ready -----------------------------------------
    def set_hard_state(self, hs: HardState) -> None:
        self._hard = hs

    def set_membership(self, membership: Membership) -> None:
        self._membership = membership

    def append(self, entries: list[Entry]) -> None:
        """Append, replacing any existing suffix from ``entries[0].index`` (the core decided it conflicts)."""
        if not entries:
            return
        off = self._ents[0].index
        first = entries[0].index
        if first <= off:
            # entries already covered by the snapshot: skip them
            entries = [e for e in entries if e.index > off]
            if not entries:
                return
            first = entries[0].index
        if first > self.last_index() + 1:
            raise EntryUnavailableError(f"gap: appending {first} after {self.last_index()}")
        del self._ents[first - off :]
        self._ents.extend(entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install a snapshot received from the leader: the log restarts after it."""
        if snap.meta.index <= self._snap.meta.index:
            return
        self._snap = snap
        self._membership = snap.meta.membership
        self._ents = [Entry(snap.meta.index, snap.meta.term)]

    def create_snapshot(self, index: int, membership: Membership, data: bytes) -> Snapshot:
        """Record a snapshot of the applied state at ``index`` (must be in the log)."""
        snap = Snapshot(SnapshotMeta(index, self.term(index), membership), data)
        self._snap = snap
        return snap

    def compact(self, index: int) -> None:
        """Discard entries up to and including ``index``; ``index`` must be <= the snapshot index."""
        off = self._ents[0].index
        if index <= off:
            return
        if index > self._snap.meta.index:
            raise LogError(f"compact {index} past snapshot {self._snap.meta.index}")
        term = self.term(index)
        self._ents = [Entry(index, term), *self._ents[index - off + 1 :]]
