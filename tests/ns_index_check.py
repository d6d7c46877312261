"""Whether a task store's namespace index is the one its records imply (``molens.fsm.ns_index``):
read from the store's lmdb file in one read transaction, beside a node that has it open or after."""

from __future__ import annotations

import struct
from pathlib import Path

import lmdb
import msgspec

from molens.fsm import ns_index
from molens.fsm.audit import AuditEntry
from molens.model import Task
from molens.schema import DeadLetter

_U64 = struct.Struct(">Q")


def mismatches(fsm_dir: Path, most: int = 5) -> list[str]:
    """What is wrong with the index of the store in ``fsm_dir`` (empty: nothing): keys it lacks,
    keys it holds that no record implies, a mark that is not the applied index."""
    env = lmdb.open(str(fsm_dir), readonly=True, max_dbs=32, map_size=64 << 30)
    try:
        with env.begin() as txn:
            tasks, dead, trail, meta, index = (env.open_db(n, txn=txn, create=False) for n in (
                b"tasks", b"dead", b"audit", b"meta", ns_index.DB_NAME))
            want: set[bytes] = set()
            task_dec, dead_dec, audit_dec = (msgspec.msgpack.Decoder(t) for t in (Task, DeadLetter, AuditEntry))
            for k, v in txn.cursor(db=tasks):
                want.update(ns_index.task_entries(task_dec.decode(v), bytes(k)))
            for k, v in txn.cursor(db=dead):
                dl = dead_dec.decode(v)
                want.add(ns_index.dead_key(dl, _U64.pack(dl.at_ms) + bytes(k)))
            for k, v in txn.cursor(db=trail):
                want.add(ns_index.audit_key(audit_dec.decode(v), bytes(k)))
            have = {bytes(k) for k in txn.cursor(db=index).iternext(values=False)}
            at = ns_index.marked_at(txn, index)
            applied = txn.get(b"applied_index", db=meta)
    finally:
        env.close()
    have.discard(ns_index.MARK)
    out = [f"missing {k!r}" for k in sorted(want - have)[:most]]
    out += [f"stale {k!r}" for k in sorted(have - want)[:most]]
    applied_at = _U64.unpack(applied)[0] if applied is not None else 0
    if at != applied_at:
        out.append(f"marked at {at}, applied {applied_at}")
    return out
