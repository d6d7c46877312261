"""The file operations that decide what survives a power loss: fsync, rename, directory fsync.

Everything that must outlive a power cut goes through a :class:`Disk`: a file's bytes are durable
once :meth:`Disk.fsync` returned on it, a name (a new file, a rename, an unlink) once
:meth:`Disk.fsync_dir` returned on its directory. :data:`OS_DISK` is the real one. The storage
layer (``SnapshotStore``, ``LmdbLog``, ``molens.lmdb_snapshot``) takes a ``disk`` argument so that a
simulator can pass one that records these calls and, at a simulated power loss, drops what was
written but not yet synced (``tests/sim/disk.py``). lmdb's own files are not seen here: with
``sync=True`` lmdb fdatasyncs each commit itself.

A slow disk, for fault tests: :func:`set_sync_delay_ms` makes every sync of this process wait that
long first -- :class:`OsDisk`'s and the Raft log's durable commits (``LmdbLog`` calls :func:`stall`).
0 (no delay) unless a test switches it on through the admin socket's ``fault`` command, which a node
serves only with ``node.fault_injection`` (docs/deploy.md#admin-socket).
"""

from __future__ import annotations

import os
import time
from typing import Protocol

StrPath = str | os.PathLike[str]

_sync_delay_s = 0.0


def set_sync_delay_ms(ms: int) -> None:
    """Make every sync of this process wait ``ms`` first (0: none); a slow disk, for fault tests."""
    global _sync_delay_s
    _sync_delay_s = max(0, int(ms)) / 1000


def sync_delay_ms() -> int:
    return round(_sync_delay_s * 1000)


def stall() -> None:
    """Wait the injected sync delay (nothing unless :func:`set_sync_delay_ms` set one)."""
    if _sync_delay_s:
        time.sleep(_sync_delay_s)


class Disk(Protocol):
    """What the storage layer asks of the file system for durability."""

    def fsync(self, fd: int) -> None:
        """The bytes written to the open file ``fd`` are on disk when this returns."""

    def replace(self, src: StrPath, dst: StrPath) -> None:
        """Rename ``src`` to ``dst`` atomically (durable only after :meth:`fsync_dir` of its directory)."""

    def fsync_dir(self, path: StrPath) -> None:
        """The names in directory ``path`` (creations, renames, unlinks) are on disk when this returns."""


class OsDisk:
    """The real file system."""

    def fsync(self, fd: int) -> None:
        stall()
        os.fsync(fd)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        os.replace(src, dst)

    def fsync_dir(self, path: StrPath) -> None:
        stall()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_DISK: Disk = OsDisk()

__all__ = ["OS_DISK", "Disk", "OsDisk", "StrPath", "set_sync_delay_ms", "stall", "sync_delay_ms"]
