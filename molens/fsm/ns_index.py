"""The task store's namespace index: each namespace's tasks, due entries, dead letters and audit
entries under a prefix of their own, so a list for a key of some namespaces reads only theirs.

A list walked the store's global indexes and skipped what the key may not see, counting the
skipped rows toward its page's scan bound: a small namespace on a busy cluster paged through the
others' rows (thousands of empty pages), and how soon a page stopped told a key how much another
namespace held. Read from this index, a page costs the key's own rows and nothing else shapes it.

One lmdb database, ``by_namespace``, keys ``namespace | 0x00 | kind | rest`` -> ``b""``:

- ``s`` status ``| 0x00 |`` task id: a status filter's list, and (every task has a status) the
  whole list in id (= creation) order, the statuses merged; a scene filter is checked per task
  among them (a scene key too would cost every create a third put for a filter seldom used)
- ``d`` ``Task.wake_ms`` (u64 big-endian) ``|`` task id: ``order=next_run``
- ``x`` ``at_ms`` (u64) ``|`` dead letter id: the store's ``dead_at`` key
- ``a`` raft index (u64) ``|`` n (u32): the store's ``audit`` key, under the namespace the entry
  is read as (:func:`molens.fsm.audit.flow_namespace`)

It is derived and not in the digest (snapshots carry it): each apply writes it in the transaction of the records
it describes, with :data:`MARK`, the applied index it is current at. A store whose mark is not its
applied index (written by a release without this index, or a snapshot of one) has it rebuilt when
it opens (:func:`rebuild`), in transactions of :data:`REBUILD_CHUNK` records.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
from collections.abc import Callable
from typing import Any

import lmdb

from molens.fsm import audit
from molens.fsm.audit import AuditEntry
from molens.model import Status, Task
from molens.schema import DeadLetter

log = logging.getLogger(__name__)

DB_NAME = b"by_namespace"
MARK = b"\x00applied"
"""The applied index the index was last written at (no namespace is empty, so no other key starts with 0x00)."""
REBUILD_CHUNK = 50_000
"""Records read and indexed per write transaction of a rebuild (one transaction of a large store's
every record would outgrow lmdb's dirty-page bound)."""

STATUS, DUE, DEAD, AUDIT = b"s", b"d", b"x", b"a"

_U64 = struct.Struct(">Q")
_STATUS_SUB = {s: s.value.encode() + b"\x00" for s in Status}


@functools.lru_cache(maxsize=4096)
def head(namespace: str) -> bytes:
    """The prefix of every key of ``namespace`` (remembered: every write of a task builds it)."""
    return namespace.encode() + b"\x00"


def status_prefix(namespace: str, status: Status | str) -> bytes:
    return head(namespace) + STATUS + _STATUS_SUB[Status(status)]


_PREFIXES: dict[str, tuple[dict[Status, bytes], bytes]] = {}


def _prefixes(namespace: str) -> tuple[dict[Status, bytes], bytes]:
    """``namespace``'s key prefixes: by status, and the due index's (remembered: every write of a
    task needs them)."""
    p = _PREFIXES.get(namespace)
    if p is None:
        if len(_PREFIXES) >= 4096:
            _PREFIXES.clear()
        h = head(namespace)
        p = _PREFIXES[namespace] = ({st: h + STATUS + sub for st, sub in _STATUS_SUB.items()}, h + DUE)
    return p


def task_entries(t: Task, k: bytes) -> list[bytes]:
    """The keys task ``t`` (id ``k``) has in the index."""
    by_status, due = _prefixes(t.spec.namespace)
    keys = [by_status[t.status] + k]
    if t.wake_ms is not None:
        keys.append(due + _U64.pack(t.wake_ms) + k)
    return keys


def record(ops: dict[bytes, bool], old: Task | None, new: Task | None, k: bytes) -> None:
    """The index's changes for a task (id ``k``) written from ``old`` to ``new`` (None: absent), into
    ``ops`` (key -> True to put, False to delete; a later change of a key replaces an earlier one).
    A task never changes namespace."""
    if old is None or new is None:
        t = new if old is None else old
        if t is not None:
            keep = old is None
            for ik in task_entries(t, k):
                ops[ik] = keep
        return
    by_status, due = _prefixes(new.spec.namespace)
    if new.status is not old.status:
        ops[by_status[old.status] + k] = False
        ops[by_status[new.status] + k] = True
    if new.wake_ms != old.wake_ms:
        if old.wake_ms is not None:
            ops[due + _U64.pack(old.wake_ms) + k] = False
        if new.wake_ms is not None:
            ops[due + _U64.pack(new.wake_ms) + k] = True


def dead_key(dl: DeadLetter, at_key: bytes) -> bytes:
    """The key of a dead letter whose ``dead_at`` key is ``at_key``."""
    return head(dl.namespace) + DEAD + at_key


def audit_key(a: AuditEntry, key: bytes) -> bytes:
    """The key of an audit entry stored under ``key``, as the namespace it is read as."""
    return head(audit.flow_namespace(a) or a.namespace) + AUDIT + key


def rebuild(
    env: lmdb.Environment, index_db: Any, applied: int, sources: list[tuple[Any, Callable[[bytes, bytes], list[bytes]]]],
) -> int:
    """Write the index afresh from ``sources`` (a database and the keys each of its records has),
    then :data:`MARK` it at ``applied``; returns the records read. Each transaction indexes a chunk
    of one source; a crash in between leaves no mark, so the next open starts over."""
    with env.begin(write=True) as txn:
        txn.drop(index_db, delete=False)
    n = 0
    t0 = time.monotonic()
    for db, keys_of in sources:
        start: bytes | None = None
        while True:
            with env.begin(write=True) as txn:
                cur = txn.cursor(db=db)
                ok = cur.set_range(start) if start is not None else cur.first()
                read = 0
                while ok and read < REBUILD_CHUNK:
                    k = bytes(cur.key())
                    for ik in keys_of(k, bytes(cur.value())):
                        txn.put(ik, b"", db=index_db)
                    read += 1
                    ok = cur.next()
                start = bytes(cur.key()) if ok else None
            n += read
            if read and n % (REBUILD_CHUNK * 20) < read:
                log.info("namespace index rebuild records=%d seconds=%.0f", n, time.monotonic() - t0)
            if start is None:
                break
    with env.begin(write=True) as txn:
        txn.put(MARK, _U64.pack(applied), db=index_db)
    return n


def mark(txn: lmdb.Transaction, index_db: Any, applied: int) -> None:
    txn.put(MARK, _U64.pack(applied), db=index_db)


def marked_at(txn: lmdb.Transaction, index_db: Any) -> int | None:
    raw = txn.get(MARK, db=index_db)
    return None if raw is None else int(_U64.unpack(raw)[0])


__all__ = [
    "AUDIT", "DB_NAME", "DEAD", "DUE", "MARK", "REBUILD_CHUNK", "STATUS", "audit_key", "dead_key", "head", "mark",
    "marked_at", "rebuild", "record", "status_prefix", "task_entries",
]
