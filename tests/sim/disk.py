"""A disk that can lose power: the product's storage writes real files, this :class:`SimDisk` is the
:class:`~molens.disk.Disk` it syncs them through, and :meth:`SimDisk.power_loss` puts back what
a power cut would leave.

What it knows: a file's bytes at its last ``fsync`` (they move with the file when it is renamed);
each tracked directory's names at its last ``fsync_dir`` and the renames done since. At a power loss
of the directories under a root, per directory a random suffix of the renames since its last
``fsync_dir`` is undone (last first), a name that was never made durable goes, and each file keeps
its synced bytes plus a random prefix of what was written after them (a file rewritten since its
sync keeps only the synced bytes). What it does not model: lmdb's own files (lmdb syncs its commits
itself; a directory holding them is tracked for the other files only) and unlinks (taken as durable
at once: a removed file never comes back).

    disk = SimDisk()
    disk.track(node_dir / "snapshots")           # before the product writes there
    log = LmdbLog(node_dir, membership, disk=disk)
    ...
    disk.power_loss(node_dir, rng)               # the node lost power: unsynced writes go
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from molens.disk import StrPath

SIM_ROOT = "/dev/shm" if Path("/dev/shm").is_dir() else None
"""Where simulated nodes keep their files (a RAM disk where there is one: real fsyncs cost nothing)."""

LMDB_FILES = frozenset({"data.mdb", "lock.mdb"})
"""lmdb's own files: synced by lmdb (``sync=True``) or guarded by the boot id, never touched here."""


@dataclass(slots=True)
class _Rename:
    src: str
    dst: str
    dst_before: bytes | None
    """What ``dst`` durably held before the rename (None: no such name)."""


@dataclass(slots=True)
class _Dir:
    names: set[str] = field(default_factory=set)
    """Names durable at the last ``fsync_dir``."""
    renames: list[_Rename] = field(default_factory=list)
    """Renames since then, in order."""


class SimDisk:
    """Records what was synced under the tracked directories; drops the rest at a power loss."""

    def __init__(self) -> None:
        self.synced: dict[str, bytes] = {}
        self.dirs: dict[str, _Dir] = {}
        self.losses = 0
        self.dropped_bytes = 0
        self.undone_renames = 0

    def track(self, directory: StrPath) -> None:
        """Track ``directory`` (created if missing): what it holds now counts as durable."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        st = self.dirs.setdefault(str(d), _Dir())
        st.names = set(os.listdir(d))
        st.renames.clear()
        for name in st.names:
            p = d / name
            if name not in LMDB_FILES and p.is_file():
                self.synced[str(p)] = p.read_bytes()

    def _tracked(self, path: str) -> _Dir | None:
        return self.dirs.get(os.path.dirname(path))

    # --- the Disk protocol -------------------------------------------------------------------
    def fsync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if self._tracked(path) is not None:
            with open(path, "rb") as f:
                self.synced[path] = f.read()

    def replace(self, src: StrPath, dst: StrPath) -> None:
        s, d = os.path.abspath(src), os.path.abspath(dst)
        st = self._tracked(d)
        if st is not None:
            before = None
            if os.path.basename(d) in st.names and os.path.exists(d):
                before = self.synced.get(d, Path(d).read_bytes())
            st.renames.append(_Rename(s, d, before))
            if s in self.synced:
                self.synced[d] = self.synced.pop(s)
            else:
                self.synced.pop(d, None)
        os.replace(s, d)

    def fsync_dir(self, path: StrPath) -> None:
        st = self.dirs.get(os.path.abspath(path))
        if st is not None:
            st.names = set(os.listdir(path))
            st.renames.clear()

    # --- the fault -----------------------------------------------------------------------------
    def power_loss(self, root: StrPath, rng: random.Random) -> None:
        """The machine holding ``root`` lost power: every tracked directory under it is put back to
        one state a power cut could leave (see the module docstring)."""
        self.losses += 1
        top = os.path.abspath(root)
        for dname, st in self.dirs.items():
            if dname != top and not dname.startswith(top + os.sep):
                continue
            keep = rng.randint(0, len(st.renames))
            for rn in reversed(st.renames[keep:]):
                self.undone_renames += 1
                if os.path.exists(rn.dst):
                    os.replace(rn.dst, rn.src)
                    if rn.dst in self.synced:
                        self.synced[rn.src] = self.synced.pop(rn.dst)
                if rn.dst_before is not None:
                    Path(rn.dst).write_bytes(rn.dst_before)
                    self.synced[rn.dst] = rn.dst_before
            born = {os.path.basename(rn.dst) for rn in st.renames[:keep]}
            for name in sorted(os.listdir(dname)):
                p = os.path.join(dname, name)
                if name in LMDB_FILES or not os.path.isfile(p):
                    continue
                if name not in st.names and name not in born:
                    self.dropped_bytes += os.path.getsize(p)
                    os.unlink(p)
                    self.synced.pop(p, None)
                    continue
                with open(p, "rb") as f:
                    cur = f.read()
                syn = self.synced.get(p, b"")
                new = cur[: len(syn) + rng.randint(0, len(cur) - len(syn))] if cur.startswith(syn) else syn
                if new != cur:
                    self.dropped_bytes += len(cur) - len(new)
                    with open(p, "wb") as f:
                        f.write(new)
                self.synced[p] = new
            st.names = set(os.listdir(dname))
            st.renames.clear()


__all__ = ["LMDB_FILES", "SIM_ROOT", "SimDisk"]
