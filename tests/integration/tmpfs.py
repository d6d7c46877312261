"""A small tmpfs whose free space a test can take and give back: a full disk on a real node.

:class:`Tmpfs` mounts one (``mount -t tmpfs``: root, or a mount namespace of one's own), :meth:`Tmpfs.fill`
writes a filler file until the kernel answers ENOSPC, :meth:`Tmpfs.free` deletes it ("space returns"),
:meth:`Tmpfs.unmount` takes it away (lazily: a node killed a moment ago may still hold a file open).
:func:`put_data_dir_on` moves a node's ``data_dir`` onto one before the node starts. A tmpfs that
cannot be mounted raises :class:`TmpfsError` saying why.
"""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import yaml

from .conftest import NodeProc, _merge


class TmpfsError(RuntimeError):
    """The tmpfs could not be mounted (the message says why)."""


class Tmpfs:
    """A tmpfs of ``size`` bytes at ``path``; :meth:`fill` takes all its free space, :meth:`free`
    gives it back."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        try:
            r = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                capture_output=True, text=True, check=False,
            )
        except OSError as exc:  # no mount command
            raise TmpfsError(f"cannot mount a tmpfs here: {exc}") from exc
        if r.returncode != 0:
            raise TmpfsError(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
        self.data = path / "data"
        self.filler = path / "filler"

    def fill(self) -> int:
        """Write the filler until ENOSPC; returns its size."""
        chunk = b"\0" * (1 << 16)
        n = 0
        with open(self.filler, "ab", buffering=0) as f:
            for size in (1 << 16, 4096):  # then what is left, page by page
                while True:
                    try:
                        n += f.write(chunk[:size])
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        return n

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)


def put_data_dir_on(n: NodeProc, t: Tmpfs) -> None:
    """Point node ``n``'s ``data_dir`` into ``t`` (its config rewritten; before the node starts)."""
    n.settings = _merge(n.settings, {"node": {"data_dir": str(t.data)}})
    n.data_dir = t.data
    n.config_path.write_text(yaml.safe_dump(n.settings, sort_keys=False))
