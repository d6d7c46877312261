"""An in-memory twin of a RaftPeer's log (:class:`molens.raft.log.PeerLog`): entries, hard state and
the snapshot's meta in memory (:class:`molens.raft.log.MemoryLog`), nothing synced. Snapshot files
still go through a :class:`~molens.raft.storage.SnapshotStore` (the state machine snapshots to a file),
in the directory given; a peer that takes no snapshot writes nothing there."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from molens.raft.log import Entry, HardState, Membership, MemoryLog, Snapshot, SnapshotMeta
from molens.raft.storage import SnapshotFile, SnapshotStore, StreamedSnapshot


class MemoryPeerLog(MemoryLog):
    """What a RaftPeer needs of its log, in memory; its snapshot files in ``snapshot_dir``."""

    def __init__(self, membership: Membership, snapshot_dir: Path) -> None:
        super().__init__(membership)
        self.snapshots = SnapshotStore(snapshot_dir)
        self.syncs = 0
        self.cache_hits = 0
        self._file: SnapshotFile | None = None
        self._held: StreamedSnapshot | None = None
        self.closed = False

    # --- the snapshot: its file in the store, read back by slices when a follower needs it ---------
    def snapshot(self) -> Snapshot:
        if self._file is None:
            return super().snapshot()
        if self._held is None:
            self._held = self.snapshots.streamed(self._file)
        return Snapshot(self.snapshot_meta(), self._held)

    @property
    def snapshot_held(self) -> bool:
        return self._held is not None

    def release_snapshot_data(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

    def snapshot_file(self) -> SnapshotFile | None:
        return self._file

    def record_snapshot(self, meta: SnapshotMeta, sf: SnapshotFile) -> SnapshotMeta:
        self.release_snapshot_data()
        self._snap = Snapshot(meta)
        self._file = sf
        self.snapshots.prune(sf.path)
        return meta

    def export_snapshot(self, dest: str | os.PathLike[str]) -> SnapshotMeta:
        with open(dest, "wb") as f:
            if self._file is not None:
                self.snapshots.stream(self._file.path, self._file.sha256, out=f)
            else:
                f.write(bytes(self.snapshot().data))
        return self.snapshot_meta()

    # --- a Ready saved ---------------------------------------------------------------------------
    def hard_state(self) -> HardState:
        return self.initial_state()[0]

    def save(
        self,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
    ) -> None:
        if snapshot is not None and snapshot.meta.index > self.snapshot_meta().index:
            data = snapshot.data
            if isinstance(data, StreamedSnapshot) and data.file is not None and data.file.meta == snapshot.meta:
                sf = data.file  # gathered and checked as it arrived (SnapshotReceiver)
            else:
                sf = self.snapshots.write(snapshot.meta, bytes(data))
            self.apply_snapshot(Snapshot(snapshot.meta))
            self.record_snapshot(snapshot.meta, sf)
        self.append(list(entries))
        if hard_state is not None:
            self.set_hard_state(hard_state)
        self.syncs += 1

    def close(self) -> None:
        self.release_snapshot_data()
        self.closed = True
