"""Durable Raft log on lmdb, plus compressed checksummed snapshot files.

:class:`LmdbLog` implements :class:`~molens.raft.log.LogView` and the :class:`~molens.raft.log.MemoryLog`
mutators with the same semantics (a randomized test compares the two), so the node can swap one for
the other. Layout under ``data_dir``::

    raft/data.mdb        lmdb: db "log" (big-endian u64 index -> term u64 | kind u8 | data),
                         db "meta" (hard state, membership, log offset, current snapshot meta)
    snapshots/snap-<index>-<term>-<sha>.snap   compressed FSM snapshots (see :class:`SnapshotStore`)
    snapshots/receiving.part   a snapshot arriving from the leader (see :class:`SnapshotReceiver`)

Durability invariants (what the RaftPeer relies on):

* Every mutator is ONE lmdb write transaction; :meth:`LmdbLog.save` does everything a ``Ready``
  needs (snapshot install, entry append / suffix truncation, hard state, membership) in one
  transaction. The RaftPeer does not save a Ready that changed only the commit index (volatile
  in Raft): the stored commit may lag behind the state machine's applied index. With the default ``durable=True`` the environment is opened ``sync=True,
  metasync=True``: when the mutator returns, the transaction is on disk (lmdb's commit is its data
  pages fdatasync'd, then the meta page written and fdatasync'd -- lmdb's own atomic-commit protocol;
  measured ~0.2 ms per commit here, see ``scripts/bench/raft_storage.py``). So the node may send the
  messages of a Ready as soon as ``save`` returns; term, vote and commit are written together.
  ``durable=False`` (tests) skips both syncs: safe against kill -9 (the page cache
  survives), not against power loss.
* A crash at any point leaves either the old or the new state of a transaction, never a mix:
  truncation of a conflicting suffix and the append that replaces it are in the same transaction.
* Snapshot files are written to a temp name, fsync'd, renamed, and the directory fsync'd BEFORE the
  lmdb transaction that makes them current commits. A crash in between leaves an unreferenced file,
  which is pruned at the next open. The current snapshot is verified (sha256) at open and on load;
  a corrupted or missing file raises :class:`SnapshotCorruptError` instead of silently restarting
  from an empty state.
* A snapshot from the leader is gathered in a file as its chunks arrive (:class:`SnapshotReceiver`)
  and, once whole and checked, compressed into a snapshot file like any other. Installing it:
  call ``save(snapshot=...)`` (the file is recorded and the log reset past it, durably) THEN
  restore the FSM from it. If the process dies in between, at the next start the FSM's
  ``applied_index`` is below ``snapshot().meta.index``: the node restores the FSM from
  :meth:`LmdbLog.export_snapshot` before applying anything.

Every fsync and rename of a snapshot file goes through the ``disk`` (:mod:`molens.disk`): the simulators
pass one that loses, at a simulated power loss, what was not synced.

Thread-safety: one owner thread (the RaftPeer actor) calls everything; reads and writes are not
meant to be interleaved from several threads.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import tempfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgpack

from molens.disk import OS_DISK, Disk, stall
from molens.raft.errors import (
    CompactedError,
    EntryUnavailableError,
    LogError,
    SnapshotCorruptError,
    StorageError,
)
from molens.raft.log import (
    ENTRY_KINDS,
    ENTRY_OVERHEAD,
    Entry,
    HardState,
    Membership,
    Snapshot,
    SnapshotBytes,
    SnapshotMeta,
    make_entry,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_KEY = struct.Struct(">Q")
_ENTRY_HEAD = struct.Struct(">QB")
_OFFSET = struct.Struct(">QQ")

_META_HARD = b"hard_state"
_META_MEMBERSHIP = b"membership"
_META_OFFSET = b"offset"
_META_SNAPSHOT = b"snapshot"

_SNAP_MAGIC = b"MOLSNAP1"
_SNAP_HEAD_LEN = struct.Struct(">I")
_PIECE = 1 << 20


def _as_bytes(data: bytes | SnapshotBytes) -> bytes:
    return data if isinstance(data, bytes) else data[0 : len(data)]
"""Bytes read, compressed or decompressed at a time when a snapshot file is streamed."""
_SNAP_NAME = re.compile(r"^snap-(\d{20})-(\d{20})-([0-9a-f]{12})\.snap$")

DEFAULT_MAP_SIZE = 256 * 1024 * 1024
MAX_MAP_SIZE = 1 << 40






def _membership_to_wire(m: Membership) -> list[list[str]]:
    return [list(m.voters), list(m.learners)]


def _membership_from_wire(raw: Any) -> Membership:
    voters, learners = raw
    return Membership(tuple(voters), tuple(learners))


def _encode_entry(e: Entry) -> bytes:
    return _ENTRY_HEAD.pack(e.term, int(e.kind)) + e.data


def _decode_entry(index: int, raw: bytes | memoryview) -> Entry:
    term, kind = _ENTRY_HEAD.unpack_from(raw)
    return make_entry(index, term, ENTRY_KINDS[kind], bytes(raw[_ENTRY_HEAD.size :]))


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A verified snapshot file on disk: its meta, path and checksum of the compressed payload."""

    meta: SnapshotMeta
    path: Path
    sha256: str
    size: int
    """Uncompressed size of the FSM snapshot data."""


class StreamedSnapshot:
    """A snapshot's data read from its (compressed) file as the core asks for it: ``len`` from the
    header, and slices decompressed on the way, one piece at a time. The core sends a snapshot in
    chunks at rising offsets, each again until it is answered (the last one is kept for that), and
    from 0 again after a failure, so nothing is decompressed twice in a transfer and neither the heap nor the disk holds a second copy, and no step costs more than one
    chunk's work on the Raft thread. The file was checked (checksum, size) when the log recorded
    or opened it. Owned by the log, which closes it when no transfer needs it; the log opens the file
    as it hands the snapshot out (:meth:`open`), so a transfer goes on reading it after the log has
    recorded newer snapshots and pruned this file."""

    __slots__ = ("_dec", "_f", "_last", "_payload_at", "_pending", "_pos", "file", "path", "size")

    def __init__(self, path: Path, size: int, payload_at: int, file: SnapshotFile | None = None) -> None:
        self.path = path
        self.size = size
        self.file = file
        """The checked file it reads, when made by :meth:`SnapshotStore.streamed`: :meth:`LmdbLog.save`
        then records that file instead of writing the data again."""
        self._payload_at = payload_at
        self._f: Any = None
        self._dec: Any = None
        self._pending = b""
        self._pos = 0
        self._last: tuple[int, int, bytes] | None = None
        """The last slice served: the core sends a chunk again until the follower answers it."""

    def __len__(self) -> int:
        return self.size

    def open(self) -> StreamedSnapshot:
        """Open the file now (a no-op when open): what is open stays readable after the file is removed."""
        if self._f is None:
            self._f = open(self.path, "rb")  # noqa: SIM115 - kept open across calls, closed by close()
        return self

    def _reset(self) -> None:
        self.open()
        self._f.seek(self._payload_at)
        self._dec = zlib.decompressobj()
        self._pending = b""
        self._pos = 0

    def _next(self, n: int) -> bytes:
        """The next ``n`` bytes of the data from ``_pos`` (fewer only at its end)."""
        parts = [self._pending]
        have = len(self._pending)
        dec = self._dec
        while have < n:
            want = min(_PIECE, n - have)
            if dec.unconsumed_tail:
                data = dec.decompress(dec.unconsumed_tail, want)
            else:
                piece = self._f.read(_PIECE >> 2)  # small reads: the unconsumed tail is copied each step
                data = dec.decompress(piece, want) if piece else dec.flush()
                if not piece and not data:
                    break
            parts.append(data)
            have += len(data)
        buf = b"".join(parts)
        out, self._pending = buf[:n], buf[n:]
        self._pos += len(out)
        return out

    def __getitem__(self, key: slice, /) -> bytes:
        if not isinstance(key, slice):
            raise TypeError("a streamed snapshot is read by slices")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("a streamed snapshot is read by contiguous slices")
        last = self._last
        if last is not None and last[0] == start and last[1] == stop:
            return last[2]
        if self._dec is None or start < self._pos:
            self._reset()
        try:
            while self._pos < start:
                self._next(min(_PIECE, start - self._pos))
            out = self._next(max(0, stop - start))
        except zlib.error as exc:
            raise SnapshotCorruptError(f"{self.path}: {exc}") from exc
        if len(out) != max(0, stop - start):
            raise SnapshotCorruptError(f"{self.path}: data shorter than its header's {self.size} bytes")
        self._last = (start, stop, out)
        return out

    def __bytes__(self) -> bytes:
        return self[0 : self.size]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StreamedSnapshot):
            return self.size == other.size and bytes(self) == bytes(other)
        if isinstance(other, bytes | bytearray | memoryview):
            return len(other) == self.size and bytes(self) == bytes(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        self._dec = None
        self._last = None


class SnapshotStore:
    """Snapshot files under ``data_dir/snapshots``: zlib-compressed, sha256-checksummed, atomic.

    File format: ``MOLSNAP1`` | u32 header length | msgpack header | zlib(data). The header holds
    index, term, membership, the uncompressed size and the sha256 of the compressed payload. Files
    are named ``snap-<index:020>-<term:020>-<sha256[:12]>.snap``: the newest sorts last, and a second
    snapshot at the same index with other bytes never overwrites the file the log still points to.
    """

    def __init__(
        self, directory: str | os.PathLike[str], keep: int = 3, level: int = 1, *, disk: Disk = OS_DISK
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.disk = disk
        """Every fsync and rename of the snapshot files goes through it (molens.disk)."""
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.level = level

    def path_for(self, meta: SnapshotMeta, sha256: str) -> Path:
        return self.dir / f"snap-{meta.index:020d}-{meta.term:020d}-{sha256[:12]}.snap"

    @staticmethod
    def _header(meta: SnapshotMeta, size: int, digest: str) -> bytes:
        return bytes(msgpack.packb(
            {
                "index": meta.index,
                "term": meta.term,
                "membership": _membership_to_wire(meta.membership),
                "context": meta.context,
                "size": size,
                "sha256": digest,
                "codec": "zlib",
            },
            use_bin_type=True,
        ))

    def _commit(self, meta: SnapshotMeta, size: int, digest: str, write_payload: Callable[[Any], None]) -> SnapshotFile:
        """Write header + payload (by ``write_payload(file)``) to the file named for ``meta`` durably
        (temp + fsync + rename + dir fsync)."""
        header = self._header(meta, size, digest)
        path = self.path_for(meta, digest)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(_SNAP_MAGIC)
                f.write(_SNAP_HEAD_LEN.pack(len(header)))
                f.write(header)
                write_payload(f)
                f.flush()
                self.disk.fsync(f.fileno())
            self.disk.replace(tmp, path)
        except BaseException:  # a full disk: leave no partial file taking the space
            tmp.unlink(missing_ok=True)
            raise
        self.disk.fsync_dir(self.dir)
        return SnapshotFile(meta, path, digest, size)

    def write(self, meta: SnapshotMeta, data: bytes) -> SnapshotFile:
        """Write ``data`` for ``meta`` durably (temp + fsync + rename + dir fsync)."""
        payload = zlib.compress(data, self.level)
        digest = hashlib.sha256(payload).hexdigest()
        sf = self._commit(meta, len(data), digest, lambda f: f.write(payload))
        log.info("snapshot written index=%d term=%d bytes=%d compressed=%d", meta.index, meta.term,
                 len(data), len(payload))
        return sf

    def write_file(self, meta: SnapshotMeta, src: Path, *, expect_crc32: int | None = None) -> SnapshotFile:
        """Like :meth:`write` for the contents of ``src``, compressed piece by piece: memory stays
        bounded by ``_PIECE`` however large the state machine (the compressed payload goes to a temp
        file first, since the header before it carries its checksum). With ``expect_crc32`` the
        contents are checked against that CRC-32 as they are read, and a mismatch raises
        :class:`SnapshotCorruptError` before anything is written where the log could record it."""
        comp = zlib.compressobj(self.level)
        sha = hashlib.sha256()
        crc = 0
        size = 0
        # a name of its own: the snapshot thread and a follower gathering one may both be here
        fd, name = tempfile.mkstemp(prefix="payload-", suffix=".tmp", dir=self.dir)
        os.close(fd)
        staged = Path(name)
        try:
            with open(src, "rb") as inp, open(staged, "wb") as out:
                while piece := inp.read(_PIECE):
                    size += len(piece)
                    if expect_crc32 is not None:
                        crc = zlib.crc32(piece, crc)
                    z = comp.compress(piece)
                    sha.update(z)
                    out.write(z)
                z = comp.flush()
                sha.update(z)
                out.write(z)
            if expect_crc32 is not None and crc != expect_crc32:
                raise SnapshotCorruptError(f"{src}: CRC-32 {crc:08x} of its {size} bytes, expected {expect_crc32:08x}")
            compressed = staged.stat().st_size

            def copy(f: Any) -> None:
                with open(staged, "rb") as inp2:
                    while piece := inp2.read(_PIECE):
                        f.write(piece)

            sf = self._commit(meta, size, sha.hexdigest(), copy)
        finally:
            staged.unlink(missing_ok=True)
        log.info("snapshot written index=%d term=%d bytes=%d compressed=%d", meta.index, meta.term, size, compressed)
        return sf

    def _open_payload(self, path: Path) -> tuple[Any, dict[str, Any]]:
        """The file positioned at its payload, and its header (magic and header checked)."""
        try:
            f = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
        except OSError as exc:
            raise SnapshotCorruptError(f"{path}: cannot read: {exc}") from exc
        try:
            if f.read(len(_SNAP_MAGIC)) != _SNAP_MAGIC:
                raise ValueError("bad magic")
            (hlen,) = _SNAP_HEAD_LEN.unpack(f.read(_SNAP_HEAD_LEN.size))
            head = msgpack.unpackb(f.read(hlen), raw=False)
            if not isinstance(head, dict):
                raise ValueError("bad header")
        except (ValueError, TypeError, struct.error, msgpack.UnpackException) as exc:
            f.close()
            raise SnapshotCorruptError(f"{path}: {exc}") from exc
        return f, head

    def payload_offset(self, path: Path) -> int:
        """Where the compressed payload starts in a snapshot file."""
        f, _ = self._open_payload(path)
        with f:
            return int(f.tell())

    def streamed(self, sf: SnapshotFile) -> StreamedSnapshot:
        """The data of the checked file ``sf``, to be read by slices (nothing is read until then)."""
        return StreamedSnapshot(sf.path, sf.size, self.payload_offset(sf.path), sf)

    def remove_leftovers(self) -> None:
        """At start: remove what a stopped node left half-done here (a snapshot being received or
        checked, compressed payloads being staged, snapshot files being written); nothing else may
        be writing them yet."""
        for p in (*self.dir.glob("receiv*.part"), *self.dir.glob("payload*.tmp"), *self.dir.glob("*.snap.tmp")):
            if p.exists():
                log.info("snapshot leftover removed path=%s bytes=%d", p.name, p.stat().st_size)
                p.unlink(missing_ok=True)

    def stream(
        self, path: Path, expect_sha256: str | None = None, out: Any | None = None
    ) -> SnapshotFile:
        """Verify a snapshot file piece by piece (checksum, size, header against the name) and, when
        ``out`` is a writable binary file, write its uncompressed data there; memory stays bounded by
        ``_PIECE``. Raises :class:`SnapshotCorruptError` on any mismatch."""
        f, head = self._open_payload(path)
        try:
            sha = hashlib.sha256()
            dec = zlib.decompressobj()
            size = 0
            while piece := f.read(_PIECE):
                sha.update(piece)
                while piece:  # at most _PIECE out at a time, however well it compressed
                    data = dec.decompress(piece, _PIECE)
                    size += len(data)
                    if out is not None:
                        out.write(data)
                    piece = dec.unconsumed_tail
            tail = dec.flush()
            size += len(tail)
            if out is not None:
                out.write(tail)
            digest = sha.hexdigest()
            if digest != head["sha256"]:
                raise ValueError("sha256 mismatch")
            if expect_sha256 is not None and digest != expect_sha256:
                raise ValueError("sha256 differs from the one recorded in the log")
            if size != head["size"] or not dec.eof:
                raise ValueError("size mismatch")
            meta = SnapshotMeta(
                head["index"], head["term"], _membership_from_wire(head["membership"]), head.get("context", b"")
            )
        except (ValueError, KeyError, TypeError, zlib.error) as exc:
            raise SnapshotCorruptError(f"{path}: {exc}") from exc
        finally:
            f.close()
        if path.name != self.path_for(meta, digest).name:
            raise SnapshotCorruptError(f"{path}: header says index={meta.index} term={meta.term}")
        return SnapshotFile(meta, path, digest, size)

    def files(self) -> list[Path]:
        """Snapshot files present, oldest (lowest index) first."""
        return sorted(p for p in self.dir.iterdir() if _SNAP_NAME.match(p.name))

    def prune(self, current: Path | None, *, spare_newer: bool = True) -> list[Path]:
        """Keep ``current`` and the newest others up to ``keep`` files in all, and (``spare_newer``)
        every file of a higher index than ``current``: it may be a snapshot received from the leader
        and checked on another thread, about to be recorded. At open nothing is about to be
        recorded, so nothing is spared. (Temp files go at start, :meth:`remove_leftovers`: another
        thread may be writing one now.)"""
        others = [p for p in self.files() if p != current]
        n_keep_others = self.keep - (1 if current is not None else 0)
        doomed = others[: max(0, len(others) - n_keep_others)]
        if spare_newer and current is not None and (m := _SNAP_NAME.match(current.name)):
            doomed = [p for p in doomed if _snap_index(p) <= int(m.group(1))]
        for p in doomed:
            p.unlink(missing_ok=True)
            log.info("snapshot pruned path=%s", p.name)
        return doomed


def _snap_index(path: Path) -> int:
    m = _SNAP_NAME.match(path.name)
    return int(m.group(1)) if m else 0


RECEIVING = "receiving.part"
"""The file in the snapshot directory that gathers a snapshot arriving from the leader."""


class SnapshotReceiver:
    """A snapshot arriving from the leader, gathered in ``snapshots/receiving.part`` chunk by chunk
    as the Raft core accepts them (``Ready.snapshot_chunks``), so a follower holds one chunk in
    memory however large the snapshot. After the last chunk the file is sealed (renamed to one of
    its own: the next transfer may begin) and checked, on a thread that is not the Raft actor's
    (it takes seconds per GB): its CRC-32 against the one the core computed of the chunks, while
    it is compressed into a snapshot file of the store, which the log records when the snapshot is
    installed; the state machine restores from the sealed file. What a stopped node left is removed
    at start (:meth:`SnapshotStore.remove_leftovers`).

    The node's shell::

        rcv = SnapshotReceiver(log.snapshots)
        rcv.write(chunk.offset, chunk.data)                 # every chunk of a Ready, in order
        path = rcv.seal()                                   # after the last one
        sf = rcv.check(meta, chunk.crc, path)               # another thread: None when it failed
        core.snapshot_received(meta, log.snapshots.streamed(sf) if sf else None)
        log.save(snapshot=rd.snapshot); fsm.restore(path); path.unlink()

    A write that fails (a full disk) may be done again: a chunk lands at its offset and the file
    ends after it. The gathered file is not fsync'd: a restart removes it, and what must last is
    written durably from it (the compressed snapshot file, the state machine's own copy).
    """

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self.path = store.dir / RECEIVING
        self._f: Any = None
        self._sealed = 0

    @property
    def size(self) -> int:
        """Bytes gathered so far."""
        return self.path.stat().st_size if self.path.exists() else 0

    def write(self, offset: int, data: bytes) -> None:
        """Write a chunk at ``offset``: 0 starts a new snapshot; any other must follow what is there."""
        if offset == 0:
            self._close()
            self._f = open(self.path, "wb")  # noqa: SIM115 - kept open across chunks, closed by _close()
        elif self._f is None:
            if offset > self.size:
                raise StorageError(f"{self.path}: chunk at {offset} after {self.size} bytes")
            self._f = open(self.path, "r+b")  # noqa: SIM115 - as above
        f = self._f
        f.seek(offset)
        f.write(data)
        f.truncate()

    def seal(self) -> Path:
        """The last chunk is written: the gathered file, renamed to a name of its own."""
        self._close()
        self._sealed += 1
        sealed = self.store.dir / f"received-{self._sealed}.part"
        self.store.disk.replace(self.path, sealed)
        return sealed

    def check(self, meta: SnapshotMeta, crc: int, path: Path) -> SnapshotFile | None:
        """Check the sealed file ``path`` against ``crc`` while compressing it into the store
        (:meth:`SnapshotStore.write_file`) and return that snapshot file, or None when the check
        failed (``path`` is then removed). Any thread; raises what writing raises (a full disk)."""
        try:
            return self.store.write_file(meta, path, expect_crc32=crc)
        except SnapshotCorruptError as exc:
            log.warning("snapshot received index=%d term=%d failed its check: %s", meta.index, meta.term, exc)
            path.unlink(missing_ok=True)
            return None

    def _close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class LmdbLog:
    """lmdb-backed stable Raft log; the :class:`~molens.raft.log.MemoryLog` semantics on disk.

    ``membership`` is used only when ``data_dir`` holds no log yet (bootstrap); afterwards the stored
    membership wins. ``map_size`` grows by doubling on demand (``MapFullError`` is handled).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        membership: Membership | None = None,
        *,
        durable: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        keep_snapshots: int = 3,
        snapshot_level: int = 1,
        cache_max_bytes: int = 64 << 20,
        disk: Disk = OS_DISK,
    ) -> None:
        root = Path(data_dir)
        self._raft_dir = root / "raft"
        self._raft_dir.mkdir(parents=True, exist_ok=True)
        self.snapshots = SnapshotStore(root / "snapshots", keep=keep_snapshots, level=snapshot_level, disk=disk)
        self.snapshots.remove_leftovers()
        self._durable = durable
        self._env = lmdb.open(
            str(self._raft_dir),
            map_size=map_size,
            max_dbs=4,
            sync=durable,
            metasync=durable,
            readahead=False,
        )
        self._log_db = self._env.open_db(b"log")
        self._meta_db = self._env.open_db(b"meta")
        self._closed = False
        self._snap_data: bytes | SnapshotBytes | None = None
        self._retired: list[StreamedSnapshot] = []
        """Streams of snapshots the log has since replaced, left open for a transfer still reading them
        (:meth:`snapshot`), closed by :meth:`release_snapshot_data` once none is."""
        # the newest entries as they were saved (contiguous, from index _cache_first): apply and
        # replication read them back without an lmdb read and decode, and the leader applies the
        # very data objects it proposed (TaskStore.encode_proposal then skips decoding them)
        self._cache: list[Entry] = []
        self._cache_first = 0
        self._cache_bytes = 0
        self.cache_max_bytes = cache_max_bytes
        self.cache_hits = 0
        self.syncs = 0
        """Write transactions committed (each one durable when ``durable``)."""
        try:
            self._load(membership or Membership())
        except BaseException:
            self._closed = True
            self._env.close()  # a refused open must not keep the environment locked in this process
            raise

    # --- recovery -----------------------------------------------------------------------------
    def _load(self, initial: Membership) -> None:
        with self._env.begin(write=False) as txn:
            raw_off = txn.get(_META_OFFSET, db=self._meta_db)
        if raw_off is None:
            snap = SnapshotMeta(membership=initial)

            def init(txn: lmdb.Transaction) -> None:
                txn.put(_META_OFFSET, _OFFSET.pack(0, 0), db=self._meta_db)
                self._put_hard(txn, HardState())
                txn.put(_META_MEMBERSHIP, msgpack.packb(_membership_to_wire(initial)), db=self._meta_db)
                self._put_snap(txn, snap, None)

            self._write(init)
        with self._env.begin(write=False) as txn:
            off, off_term = _OFFSET.unpack(bytes(txn.get(_META_OFFSET, db=self._meta_db) or b""))
            self._off: int = off
            self._off_term: int = off_term
            term, vote, commit = msgpack.unpackb(txn.get(_META_HARD, db=self._meta_db), raw=False)
            self._hard = HardState(term, vote, commit)
            self._membership = _membership_from_wire(
                msgpack.unpackb(txn.get(_META_MEMBERSHIP, db=self._meta_db), raw=False)
            )
            s = msgpack.unpackb(txn.get(_META_SNAPSHOT, db=self._meta_db), raw=False)
            cur = txn.cursor(db=self._log_db)
            self._last: int = off
            self._last_term: int = off_term
            if cur.last():
                self._last = int(_KEY.unpack(bytes(cur.key()))[0])
                self._last_term = int(_ENTRY_HEAD.unpack_from(cur.value())[0])
        self._snap_meta = SnapshotMeta(
            s["index"], s["term"], _membership_from_wire(s["membership"]), s.get("context", b"")
        )
        self._snap_file: SnapshotFile | None = None
        if s["file"] is not None:
            path = self.snapshots.dir / s["file"]
            sf = self.snapshots.stream(path, expect_sha256=s["sha256"])  # checked, not kept in memory
            if sf.meta != self._snap_meta:
                raise SnapshotCorruptError(f"{path}: meta {sf.meta} differs from the log's {self._snap_meta}")
            self._snap_file = sf
        self.snapshots.prune(self._snap_file.path if self._snap_file else None, spare_newer=False)
        log.info(
            "raft log opened dir=%s first=%d last=%d term=%d commit=%d snapshot=%d",
            self._raft_dir, self._off + 1, self._last, self._hard.term, self._hard.commit,
            self._snap_meta.index,
        )

    # --- transactions -------------------------------------------------------------------------
    def _write(self, fn: Callable[[lmdb.Transaction], _T]) -> _T:
        """Run ``fn`` in one write transaction (one durable commit), growing the map if full."""
        if self._closed:
            raise StorageError("log is closed")
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    out = fn(txn)
                if self._durable:
                    stall()  # an injected slow disk (fault tests): lmdb's commit fdatasyncs by itself
                self.syncs += 1
                return out
            except lmdb.MapFullError:
                size = self._env.info()["map_size"] * 2
                if size > MAX_MAP_SIZE:
                    raise
                log.info("raft log map grows map_size=%d", size)
                self._env.set_mapsize(size)

    def _put_hard(self, txn: lmdb.Transaction, hs: HardState) -> None:
        txn.put(_META_HARD, msgpack.packb([hs.term, hs.vote, hs.commit]), db=self._meta_db)

    def _put_snap(self, txn: lmdb.Transaction, meta: SnapshotMeta, sf: SnapshotFile | None) -> None:
        txn.put(
            _META_SNAPSHOT,
            msgpack.packb(
                {
                    "index": meta.index,
                    "term": meta.term,
                    "membership": _membership_to_wire(meta.membership),
                    "context": meta.context,
                    "file": sf.path.name if sf else None,
                    "sha256": sf.sha256 if sf else None,
                }
            ),
            db=self._meta_db,
        )

    def _delete_range(self, txn: lmdb.Transaction, lo: int, hi: int | None) -> int:
        """Delete log keys in ``[lo, hi)`` (``hi=None``: to the end). Returns the count."""
        cur = txn.cursor(db=self._log_db)
        n = 0
        if not cur.set_range(_KEY.pack(lo)):
            return 0
        end = None if hi is None else _KEY.pack(hi)
        while True:
            key = bytes(cur.key())
            if not key or (end is not None and key >= end):
                break
            cur.delete()
            n += 1
        return n

    # --- LogView ------------------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, Membership]:
        return self._hard, self._membership

    def first_index(self) -> int:
        return self._off + 1

    def last_index(self) -> int:
        return self._last

    def term(self, index: int) -> int:
        if index < self._off:
            raise CompactedError(index)
        if index > self._last:
            raise EntryUnavailableError(index)
        if index == self._off:
            return self._off_term
        if index == self._last:
            return self._last_term
        with self._env.begin(write=False, db=self._log_db) as txn:
            raw = txn.get(_KEY.pack(index))
        if raw is None:
            raise StorageError(f"log hole at index {index}")
        return int(_ENTRY_HEAD.unpack_from(raw)[0])

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo <= self._off:
            raise CompactedError(lo)
        if hi > self._last + 1:
            raise EntryUnavailableError(hi)
        out: list[Entry] = []
        if lo >= hi:
            return out
        cache, first = self._cache, self._cache_first
        if cache and first <= lo and hi <= first + len(cache):
            self.cache_hits += 1
            window = cache[lo - first : hi - first]
            if max_bytes is None:
                return window
            total = 0
            for n, e in enumerate(window):
                total += len(e.data) + ENTRY_OVERHEAD  # Entry.size(), inlined: this runs per entry sent
                if total > max_bytes and n:
                    return window[:n]
            return window
        total = 0
        with self._env.begin(write=False, db=self._log_db, buffers=True) as txn:
            cur = txn.cursor()
            if not cur.set_key(_KEY.pack(lo)):
                raise StorageError(f"log hole at index {lo}")
            index = lo
            for key, raw in cur.iternext(keys=True, values=True):
                if index >= hi:
                    break
                if _KEY.unpack(key)[0] != index:
                    raise StorageError(f"log hole at index {index}")
                e = _decode_entry(index, raw)
                total += e.size()
                if max_bytes is not None and total > max_bytes and out:
                    break
                out.append(e)
                index += 1
        if not out or (max_bytes is None and len(out) < hi - lo):
            raise StorageError(f"log hole in [{lo}, {hi})")
        return out

    def snapshot(self) -> Snapshot:
        """The snapshot with its data: read from its file by slices as they are asked for
        (:class:`StreamedSnapshot`), held until :meth:`release_snapshot_data`. Its file is open from
        here on: a newer snapshot recorded meanwhile prunes the file, not what a transfer reads."""
        if self._snap_data is None and self._snap_file is not None:
            sf = self._snap_file
            self._snap_data = StreamedSnapshot(sf.path, sf.size, self.snapshots.payload_offset(sf.path)).open()
        return Snapshot(self._snap_meta, self._snap_data or b"")

    @property
    def snapshot_held(self) -> bool:
        """Whether the snapshot's data is held: a file open to stream it from (a leader sending),
        or what a follower just received (until installed), or a replaced one's stream still open."""
        return self._snap_data is not None or bool(self._retired)

    def release_snapshot_data(self) -> None:
        """Let go of what :meth:`snapshot` opened, or of received data now installed (the file stays):
        a store of millions of tasks must not keep a second copy of itself on the heap. Call it only
        when no transfer is reading any snapshot: replaced ones' streams are closed too."""
        for stream in self._retired:
            stream.close()
        self._retired.clear()
        if self._snap_file is not None:
            if isinstance(self._snap_data, StreamedSnapshot):
                self._snap_data.close()
            self._snap_data = None

    def _retire_stream(self) -> None:
        """The snapshot is being replaced: its stream, if one was handed out, stays open for a transfer
        that may still be reading it (the file itself may be pruned) until :meth:`release_snapshot_data`."""
        if isinstance(self._snap_data, StreamedSnapshot):
            self._retired.append(self._snap_data)

    # --- extras for the node ------------------------------------------------------------------
    def hard_state(self) -> HardState:
        return self._hard

    def membership(self) -> Membership:
        return self._membership

    def snapshot_meta(self) -> SnapshotMeta:
        """The current snapshot's metadata without loading its data."""
        return self._snap_meta

    def snapshot_file(self) -> SnapshotFile | None:
        return self._snap_file

    def export_snapshot(self, dest: str | os.PathLike[str]) -> SnapshotMeta:
        """Write the current snapshot's (uncompressed, verified) FSM data to ``dest`` for ``restore``."""
        tmp = Path(str(dest) + ".tmp")
        with open(tmp, "wb") as f:
            data = self._snap_data
            if (data is None or isinstance(data, StreamedSnapshot)) and self._snap_file is not None:
                self.snapshots.stream(self._snap_file.path, self._snap_file.sha256, out=f)
            else:
                f.write(_as_bytes(self.snapshot().data))
            f.flush()
            self.snapshots.disk.fsync(f.fileno())
        self.snapshots.disk.replace(tmp, dest)
        return self._snap_meta

    # --- mutation -----------------------------------------------------------------------------
    def save(
        self,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
        membership: Membership | None = None,
    ) -> None:
        """Persist what a ``Ready`` carries in ONE durable transaction: snapshot, entries, hard state.

        Order inside the transaction is etcd's: install the snapshot, append (truncating a conflicting
        suffix), then hard state and membership. Returns once it is on disk (``durable``).
        """
        sf: SnapshotFile | None = None
        if snapshot is not None and snapshot.meta.index > self._snap_meta.index:
            data = snapshot.data
            if isinstance(data, StreamedSnapshot) and data.file is not None and data.file.meta == snapshot.meta:
                sf = data.file  # gathered, checked and written as it arrived (SnapshotReceiver)
            else:
                sf = self.snapshots.write(snapshot.meta, _as_bytes(data))
        def txn_fn(txn: lmdb.Transaction) -> _Staged:
            state = _Staged(self)
            if snapshot is not None and sf is not None:
                state.install_snapshot(txn, snapshot, sf)
            if entries:
                state.append(txn, list(entries))
            if hard_state is not None:
                self._put_hard(txn, hard_state)
            if membership is not None:
                txn.put(_META_MEMBERSHIP, msgpack.packb(_membership_to_wire(membership)), db=self._meta_db)
            return state

        self._write(txn_fn).publish()
        if hard_state is not None:
            self._hard = hard_state
        if membership is not None:
            self._membership = membership
        if sf is not None:
            self._retire_stream()
            self._snap_data = snapshot.data if snapshot is not None else None
            self.snapshots.prune(sf.path)

    def set_hard_state(self, hs: HardState) -> None:
        self.save(hard_state=hs)

    def set_membership(self, membership: Membership) -> None:
        self.save(membership=membership)

    def append(self, entries: list[Entry]) -> None:
        """Append, replacing any existing suffix from ``entries[0].index`` (one transaction)."""
        if entries:
            self.save(entries=entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install a snapshot received from the leader: the log restarts after it."""
        self.save(snapshot=snap)

    def create_snapshot(self, index: int, membership: Membership, data: bytes) -> Snapshot:
        """Record a snapshot of the applied state at ``index`` (must be in the log)."""
        meta = SnapshotMeta(index, self.term(index), membership)
        self.record_snapshot(meta, self.snapshots.write(meta, data))
        return Snapshot(meta, data)

    def record_snapshot(self, meta: SnapshotMeta, sf: SnapshotFile) -> SnapshotMeta:
        """Record a snapshot file already written by ``self.snapshots.write`` or ``write_file`` --
        the slow part (compress, fsync), which may run on another thread -- as the log's snapshot.
        Its data is not kept in memory (:meth:`snapshot` reads it back when a follower needs it)."""

        def txn_fn(txn: lmdb.Transaction) -> None:
            self._put_snap(txn, meta, sf)

        self._write(txn_fn)
        self._retire_stream()
        self._snap_meta, self._snap_file, self._snap_data = meta, sf, None
        self.snapshots.prune(sf.path)
        return meta

    # --- tail cache (actor thread only, like the rest of the log) -------------------------------
    def _cache_clear(self) -> None:
        self._cache, self._cache_first, self._cache_bytes = [], 0, 0

    def _cache_add(self, entries: list[Entry]) -> None:
        """Entries just made durable: a conflicting cached suffix goes, then they are appended
        (the cache restarts at them when it would not be contiguous); the oldest half is dropped
        once over ``cache_max_bytes``."""
        if self.cache_max_bytes <= 0:
            return
        first = entries[0].index
        cache = self._cache
        if cache and first <= self._cache_first:
            self._cache_clear()
            cache = self._cache
        elif cache and first <= self._cache_first + len(cache) - 1:
            del cache[first - self._cache_first :]
            self._cache_bytes = sum(e.size() for e in cache)
        if not cache or self._cache_first + len(cache) != first:
            self._cache = cache = []
            self._cache_first, self._cache_bytes = first, 0
        cache.extend(entries)
        self._cache_bytes += sum(len(e.data) for e in entries) + ENTRY_OVERHEAD * len(entries)
        if self._cache_bytes > self.cache_max_bytes:
            drop = len(cache) // 2 or len(cache)
            self._cache_bytes -= sum(e.size() for e in cache[:drop])
            del cache[:drop]
            self._cache_first += drop

    def _cache_trim(self, through: int) -> None:
        """Forget cached entries up to ``through`` (compacted)."""
        n = through - self._cache_first + 1
        if n <= 0 or not self._cache:
            return
        if n >= len(self._cache):
            self._cache_clear()
            return
        self._cache_bytes -= sum(e.size() for e in self._cache[:n])
        del self._cache[:n]
        self._cache_first += n

    def compact(self, index: int) -> None:
        """Discard entries up to and including ``index`` (range delete); ``index`` <= snapshot index."""
        if index <= self._off:
            return
        if index > self._snap_meta.index:
            raise LogError(f"compact {index} past snapshot {self._snap_meta.index}")
        term = self.term(index)

        def txn_fn(txn: lmdb.Transaction) -> int:
            n = self._delete_range(txn, self._off + 1, index + 1)
            txn.put(_META_OFFSET, _OFFSET.pack(index, term), db=self._meta_db)
            return n

        n = self._write(txn_fn)
        self._off, self._off_term = index, term
        self._cache_trim(index)
        log.debug("raft log compacted through=%d removed=%d", index, n)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._retire_stream()
            self._snap_data = None
            self.release_snapshot_data()
            self._env.close()

    def __enter__(self) -> LmdbLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Staged:
    """In-memory bounds changed by a transaction, published only after it commits."""

    def __init__(self, owner: LmdbLog) -> None:
        self.o = owner
        self.off = owner._off
        self.off_term = owner._off_term
        self.last = owner._last
        self.last_term = owner._last_term
        self.snap: tuple[SnapshotMeta, SnapshotFile] | None = None
        self.appended: list[Entry] = []

    def install_snapshot(self, txn: lmdb.Transaction, snap: Snapshot, sf: SnapshotFile) -> None:
        o = self.o
        txn.drop(o._log_db, delete=False)
        txn.put(_META_OFFSET, _OFFSET.pack(snap.meta.index, snap.meta.term), db=o._meta_db)
        txn.put(_META_MEMBERSHIP, msgpack.packb(_membership_to_wire(snap.meta.membership)), db=o._meta_db)
        o._put_snap(txn, snap.meta, sf)
        self.off = self.last = snap.meta.index
        self.off_term = self.last_term = snap.meta.term
        self.snap = (snap.meta, sf)

    def append(self, txn: lmdb.Transaction, entries: list[Entry]) -> None:
        first = entries[0].index
        if first <= self.off:
            entries = [e for e in entries if e.index > self.off]
            if not entries:
                return
            first = entries[0].index
        if first > self.last + 1:
            raise EntryUnavailableError(f"gap: appending {first} after {self.last}")
        if first <= self.last:
            self.o._delete_range(txn, first, None)
        cur = txn.cursor(db=self.o._log_db)
        items = [(_KEY.pack(e.index), _encode_entry(e)) for e in entries]
        cur.putmulti(items, append=True)
        self.last = entries[-1].index
        self.last_term = entries[-1].term
        self.appended = entries

    def publish(self) -> None:
        o = self.o
        o._off, o._off_term, o._last, o._last_term = self.off, self.off_term, self.last, self.last_term
        if self.snap is not None:
            o._snap_meta, o._snap_file = self.snap
            o._membership = self.snap[0].membership
            o._cache_clear()
        if self.appended:
            o._cache_add(self.appended)


__all__ = [
    "LmdbLog",
    "SnapshotCorruptError",
    "SnapshotFile",
    "SnapshotReceiver",
    "SnapshotStore",
    "StorageError",
    "StreamedSnapshot",
]
