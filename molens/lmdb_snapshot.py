"""Snapshots of an lmdb state machine: a consistent compacted copy out, a checked copy back in.

Shared by every lmdb state machine (the task store and the key-value FSM): the copy is made in one
read transaction that also reads the ``applied_index`` it reflects, written to a temp file, fsync'd
and renamed; a restore stages the file next to the environment, opens it read-only to check it, and
swaps it in with an fsync of the directory. ``write_durably`` writes a small file by the same rules
(the task store's boot marker, docs/architecture.md#fsm-durability).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lmdb

U64 = struct.Struct(">Q")
META_APPLIED = b"applied_index"
"""Key of the applied index in a state machine's ``meta`` database."""

T = TypeVar("T")


def snapshot_env(env: lmdb.Environment, meta_db: Any, dest: Path) -> int:
    """Write a consistent compacted copy of ``env`` to ``dest`` (temp file, fsync, rename); returns
    the ``applied_index`` recorded in ``meta_db`` by the same read transaction."""
    tmp = dest.with_name(dest.name + ".tmp")
    with env.begin() as txn:
        raw = txn.get(META_APPLIED, db=meta_db)
        index = U64.unpack(raw)[0] if raw is not None else 0
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            env.copyfd(fd, compact=True, txn=txn)
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, dest)
    return int(index)


def stage_env_file(src: Path, env_dir: Path, check: Callable[[lmdb.Environment], T]) -> tuple[Path, T]:
    """Copy a snapshot file into ``env_dir`` (fsync'd) and open it read-only for ``check``; on an
    lmdb error the staged copy is removed and the error re-raised. Returns the staged path and what
    ``check`` returned."""
    staged = env_dir / "data.mdb.restore"
    with open(src, "rb") as fin, open(staged, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
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


def fsync_dir(path: Path) -> None:
    """Make the renames in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, text: str) -> None:
    """Replace the small file ``path`` with ``text``: temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def swap_env_file(staged: Path, env_dir: Path) -> None:
    """Make a staged copy the environment's data file (the environment must be closed)."""
    os.replace(staged, env_dir / "data.mdb")
    fsync_dir(env_dir)


__all__ = [
    "META_APPLIED", "U64", "fsync_dir", "snapshot_env", "stage_env_file", "swap_env_file", "write_durably",
]
