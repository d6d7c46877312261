"""What a RaftPeer's caller can be told went wrong, and how a storage failure is recognised.

The tree (under :class:`molens.errors.MolensError`)::

    RaftPeerError            a proposal's or an operation's outcome
    ├── ProposalRefused      nothing was appended: retrying is safe
    │   ├── NoTransferTarget
    │   ├── MembershipRefused
    │   └── StorageFull
    └── LeadershipLost       appended, outcome UNKNOWN

"Not the leader" is :class:`molens.raft.core.NotLeaderError` (carries the known leader id).
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
from pathlib import Path

import lmdb

from molens.errors import MolensError


class RaftPeerError(MolensError):
    """Base of the errors a proposal future can fail with."""


class ProposalRefused(RaftPeerError):
    """Not appended (leadership transfer in progress, overloaded, stopping, or superseded)."""


class NoTransferTarget(ProposalRefused):
    """A leadership transfer with no other live voter to hand over to."""


class MembershipRefused(ProposalRefused):
    """A membership change that would break the address book: adding the leader itself, or a
    member at another Raft address (remove it first to move it)."""


class StorageFull(ProposalRefused):
    """Not appended: this node cannot write its Raft log, task store or history now (disk or lmdb
    map full); it retries by itself and takes writes again once a write succeeds."""


class LeadershipLost(RaftPeerError):
    """Appended, then leadership was lost before it applied here: the outcome is unknown."""


def storage_failure(exc: BaseException, data_dir: Path | None = None) -> str | None:
    """Why ``exc`` is a write that failed for want of space (a reason for the log and ``/readyz``),
    or None when it is something else (a bug, a corrupt file: the actor stops as before).

    lmdb reports a data-page write that hit ENOSPC as a plain ``Input/output error`` of
    ``mdb_txn_commit`` (the transaction is aborted whole); the reason then names the free space."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        reason = _space_reason(cur)
        if reason is not None:
            if data_dir is not None:
                with contextlib.suppress(OSError):
                    reason += f" ({shutil.disk_usage(data_dir).free} bytes free in {data_dir})"
            return reason
        cur = cur.__cause__ or cur.__context__
    return None


def _space_reason(exc: BaseException) -> str | None:
    if isinstance(exc, lmdb.MapFullError):
        return f"lmdb map full: {exc}"
    if isinstance(exc, lmdb.DiskError):
        return f"lmdb disk error: {exc}"
    if isinstance(exc, lmdb.Error) and not isinstance(exc, lmdb.PanicError):
        text = str(exc)
        if "Input/output error" in text or "No space left" in text or "Disk quota" in text:
            return f"lmdb write failed, disk full? {text}"
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{exc.strerror}: {exc.filename or ''}".rstrip(": ")
    if isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return f"history database: {exc}"
    if isinstance(exc, MolensError) and "map is full" in str(exc):
        return str(exc)
    return None
