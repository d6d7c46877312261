"""Snapshots of an lmdb state machine: a consistent compacted copy out, a checked copy back in.

Shared by every lmdb state machine (the task store and the key-value FSM): the copy is made in one
read transaction that also reads the ``applied_index`` it reflects, written to a temp file, fsync'd
and renamed; a restore stages the file next to the environment, opens it read-only to check it, and
swaps it in with an fsync of the directory. ``write_durably`` writes a small file by the same rules.

A state machine whose commits are not fsync'd (log-backed: everything in it is a function of the
Raft log and the snapshot files, docs/architecture.md#fsm-durability) guards its file with the boot
id instead: :func:`guard_boot` at open (a store left open by an earlier boot may be torn: it is
removed, and the node rebuilds it from the snapshot and the log), :func:`mark_closed` after a
clean close. Every fsync and rename goes through a :class:`~molens.disk.Disk` (the real one by
default; a simulator passes one that can lose what was not synced).

:class:`StateFile` is what both state machines build on: the file under ``data_dir/fsm/``, its
sync mode, its boot guard at open, a map that doubles when full, a snapshot out, a checked
snapshot swapped in and a clean close, all under one lock (a snapshot may copy the map on another
thread: lmdb must not remap or close under a live read transaction).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from molens.disk import OS_DISK, Disk

log = logging.getLogger(__name__)

U64 = struct.Struct(">Q")
META_APPLIED = b"applied_index"
"""Key of the applied index in a state machine's ``meta`` database."""

T = TypeVar("T")


def digest_state(
    env: lmdb.Environment, meta_db: Any, dbs: Sequence[tuple[bytes, Any]], volatile: Collection[bytes] = (),
    canonical: Callable[[bytes, bytes, bytes], bytes] | None = None,
) -> tuple[int, str]:
    """``(applied_index, sha256)`` of a state machine, read in one transaction (any thread): for each
    ``(name, db)`` in turn its name, then every record in key order as its length-prefixed key and
    value; the ``volatile`` keys of ``meta_db`` are left out. Replicas with equal state have equal
    digests. ``canonical(name, key, value)``: the value to hash in place of the stored one (a record
    an earlier release wrote, in this release's layout)."""
    h = hashlib.sha256()
    with env.begin() as txn:
        raw = txn.get(META_APPLIED, db=meta_db)
        for name, db in dbs:
            h.update(name)
            for k, v in txn.cursor(db=db):
                if db is meta_db and bytes(k) in volatile:
                    continue
                key, value = bytes(k), bytes(v)
                if canonical is not None:
                    value = canonical(name, key, value)
                h.update(U64.pack(len(key)) + key + U64.pack(len(value)) + value)
    return (U64.unpack(raw)[0] if raw is not None else 0), h.hexdigest()


def snapshot_env(env: lmdb.Environment, meta_db: Any, dest: Path, disk: Disk = OS_DISK) -> int:
    """Write a consistent compacted copy of ``env`` to ``dest`` (temp file, fsync, rename); returns
    the ``applied_index`` recorded in ``meta_db`` by the same read transaction."""
    tmp = dest.with_name(dest.name + ".tmp")
    with env.begin() as txn:
        raw = txn.get(META_APPLIED, db=meta_db)
        index = U64.unpack(raw)[0] if raw is not None else 0
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            env.copyfd(fd, compact=True, txn=txn)
            disk.fsync(fd)
        finally:
            os.close(fd)
    disk.replace(tmp, dest)
    return int(index)


def stage_env_file(
    src: Path, env_dir: Path, check: Callable[[lmdb.Environment], T], disk: Disk = OS_DISK
) -> tuple[Path, T]:
    """Copy a snapshot file into ``env_dir`` (fsync'd) and open it read-only for ``check``; on an
    lmdb error the staged copy is removed and the error re-raised. Returns the staged path and what
    ``check`` returned."""
    staged = env_dir / "data.mdb.restore"
    with open(src, "rb") as fin, open(staged, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
        fout.flush()
        disk.fsync(fout.fileno())
    try:
        probe = lmdb.open(str(staged), subdir=False, readonly=True, lock=False, max_dbs=8)
        try:
            found = check(probe)
        finally:
            probe.close()
    except lmdb.Error:
        staged.unlink(missing_ok=True)
        raise
    return staged, found


def fsync_dir(path: Path, disk: Disk = OS_DISK) -> None:
    """Make the renames in directory ``path`` durable."""
    disk.fsync_dir(path)


def write_durably(path: Path, text: str, disk: Disk = OS_DISK) -> None:
    """Replace the small file ``path`` with ``text``: temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        disk.fsync(f.fileno())
    disk.replace(tmp, path)
    disk.fsync_dir(path.parent)


BOOT_MARKER = "open-boot"
"""File beside a log-backed environment: the boot id of the system that has it open, or
:data:`CLOSED_MARK` after a clean close (the environment synced)."""
CLOSED_MARK = "closed"
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    """This boot's id (Linux), ``None`` where the system has none to read."""
    try:
        return BOOT_ID_PATH.read_text().strip() or None
    except OSError:
        return None


def guard_boot(env_dir: Path, boot: str, what: str, disk: Disk = OS_DISK) -> bool:
    """Before opening the log-backed environment in ``env_dir``: if an earlier boot left it open,
    its unsynced pages may have reached the disk in any order, so it is removed (True returned: the
    node restores the state from its snapshot and the Raft log); then this boot is recorded as the
    one holding it open. ``what`` names the store in the warning."""
    marker = env_dir / BOOT_MARKER
    try:
        seen = marker.read_text().strip()
    except FileNotFoundError:
        seen = CLOSED_MARK
    discarded = False
    if seen not in (CLOSED_MARK, boot) and (env_dir / "data.mdb").exists():
        log.warning(
            "%s dir=%s was open when the system stopped (boot %s, now %s): its unsynced writes "
            "may be torn, so it is discarded and rebuilt from the snapshot and the Raft log",
            what, env_dir, seen, boot,
        )
        for name in ("data.mdb", "lock.mdb"):
            (env_dir / name).unlink(missing_ok=True)
        discarded = True
    write_durably(marker, boot, disk)
    return discarded


def mark_closed(env: lmdb.Environment, env_dir: Path, disk: Disk = OS_DISK) -> None:
    """A clean close of a log-backed environment: synced, then marked closed (the next boot may
    trust it). The caller closes ``env`` after."""
    env.sync(True)
    write_durably(env_dir / BOOT_MARKER, CLOSED_MARK, disk)


def swap_env_file(staged: Path, env_dir: Path, disk: Disk = OS_DISK) -> None:
    """Make a staged copy the environment's data file (the environment must be closed)."""
    disk.replace(staged, env_dir / "data.mdb")
    disk.fsync_dir(env_dir)


MAX_MAP_SIZE = 1 << 40
"""The largest map a state machine grows to (1 TiB)."""


class StateFile:
    """The one lmdb file of a state machine under ``data_dir/fsm/`` (module docstring).

    ``log_backed`` (a Raft node's state machine) with ``durable``: commits are not fsync'd and the
    file is guarded by the boot id; ``durable`` alone: each commit is fsync'd; neither: no syncs
    (tests). A subclass opens its databases in :meth:`_open` (called by its own ``__init__`` and
    after a restore) with :meth:`_open_env`, and keeps its ``meta`` database in ``_meta``."""

    _env: lmdb.Environment
    _meta: Any
    full_error: type[Exception] = RuntimeError
    """What :meth:`_grow` raises when the map is already :data:`MAX_MAP_SIZE`."""

    def __init__(self, data_dir: str | os.PathLike[str], *, what: str, durable: bool, log_backed: bool,
                 map_size: int) -> None:
        self.dir = Path(data_dir) / "fsm"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.what = what
        """What the logs call it ("task store", "kv fsm")."""
        self._boot = boot_id() if durable and log_backed else None
        self._durable = durable and self._boot is None
        self.discarded_after_os_stop = False
        """True when this open found the file left open by an earlier boot and started it empty."""
        self._map_size = map_size
        self._env_lock = threading.Lock()

    def _open(self) -> None:
        raise NotImplementedError

    def _open_env(self, max_dbs: int) -> lmdb.Environment:
        """The environment, after the boot guard (a file an earlier boot left open is removed)."""
        if self._boot is not None and guard_boot(self.dir, self._boot, self.what):
            self.discarded_after_os_stop = True
        return lmdb.open(str(self.dir), map_size=self._map_size, max_dbs=max_dbs, sync=self._durable,
                         metasync=False, readahead=False)

    @property
    def sync_mode(self) -> str:
        """``log`` (guarded by the boot id), ``batch`` (each commit fsync'd) or ``none``."""
        return "log" if self._boot is not None else "batch" if self._durable else "none"

    def _grow(self) -> None:
        size = self._env.info()["map_size"] * 2
        if size > MAX_MAP_SIZE:
            raise self.full_error(f"{self.what} map is full")
        log.info("%s map grows map_size=%d", self.what, size)
        with self._env_lock:
            self._env.set_mapsize(size)
        self._map_size = size

    def _snapshot_to(self, dest: Path) -> int:
        """:func:`snapshot_env` of this file; returns the applied index it holds."""
        with self._env_lock:
            return snapshot_env(self._env, self._meta, dest)

    def _swap_in(self, src: Path, check: Callable[[lmdb.Environment], T],
                 then: Callable[[], None] | None = None) -> T:
        """Make the snapshot file ``src`` this file (:func:`stage_env_file` with ``check``, then
        :func:`swap_env_file`), reopen it and run ``then`` under the lock; returns what ``check``
        returned. A file that is not such a snapshot raises ``lmdb.Error`` (the staged copy removed,
        this file untouched), for the caller to say what it expected."""
        staged, found = stage_env_file(src, self.dir, check)
        with self._env_lock:
            self._env.close()
            swap_env_file(staged, self.dir)
            self._open()
            if then is not None:
                then()
        return found

    def _close_env(self) -> None:
        with self._env_lock:
            if self._boot is not None:  # synced, then marked closed: the next boot may trust it
                mark_closed(self._env, self.dir)
            self._env.close()


__all__ = [
    "BOOT_ID_PATH", "BOOT_MARKER", "CLOSED_MARK", "MAX_MAP_SIZE", "META_APPLIED", "StateFile", "U64", "boot_id",
    "digest_state", "fsync_dir",
    "guard_boot",
    "mark_closed", "snapshot_env", "stage_env_file", "swap_env_file", "write_durably",
]
