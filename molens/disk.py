"""The file operations that decide what survives a power loss: fsync, rename, directory fsync.

Everything that must outlive a power cut goes through a :class:`Disk`: a file's bytes are durable
once :meth:`Disk.fsync` returned on it, a name (a new file, a rename, an unlink) once
:meth:`Disk.fsync_dir` returned on its directory. :data:`OS_DISK` is the real one. The storage
layer (``SnapshotStore``, ``LmdbLog``, ``molens.lmdb_snapshot``) takes a ``disk`` argument so that a
simulator can pass one that records these calls and, at a simulated power loss, drops what was
written but not yet synced (``tests/sim/disk.py``). lmdb's own files are not seen here: with
``sync=True`` lmdb fdatasyncs each commit itself.
"""

from __future__ import annotations

import os
from typing import Protocol

StrPath = str | os.PathLike[str]


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
        os.fsync(fd)

    def replace(self, src: StrPath, dst: StrPath) -> None:
        os.replace(src, dst)

    def fsync_dir(self, path: StrPath) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


OS_DISK: Disk = OsDisk()

__all__ = ["OS_DISK", "Disk", "OsDisk", "StrPath"]
