"""The state digest compares state, not layouts (docs/deploy.md#rolling-upgrade): a record an
earlier release wrote lacks the fields appended since, so a replica that applied the log under
that release holds other bytes for the same state; ``TaskStore.digest_state`` hashes every record as
this release writes it (``molens.fsm.store.canonical_record``), so such replicas digest alike, and
a record of this release is hashed as it is stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

import molens.lmdb_snapshot as lmdb_snapshot
from molens.fsm.commands import (
    Audited,
    AuditStamp,
    CreateItem,
    CreateTasks,
    Dispatched,
    DispatchItem,
    FlowSettings,
    PutApiKey,
    PutFlow,
    PutMeta,
    PutNamespace,
    ResultItem,
    Results,
)
from molens.fsm.store import TaskStore
from molens.fsm.tenancy import ApiKey, KeyRole, Namespace, Quotas
from molens.model import FireKind, Outcome, new_task_id
from tests.unit.test_fsm_store import T0, URL, Log, spec

STAMP = AuditStamp("k1", "alice", "127.0.0.1")


def _filled(data_dir: Path) -> TaskStore:
    """A store holding a record of every kind: namespaces, a key, tasks and their audit entries
    (with task images), a fire record, a dead letter and its notices, a flow, a meta value."""
    s = TaskStore(data_dir, durable=False)
    log = Log(s)
    tids = [new_task_id(T0, i) for i in range(1, 4)]
    log.apply(
        PutNamespace(T0, Namespace(name="team-a", quotas=Quotas(max_pending_tasks=10)), True),
        PutApiKey(T0, ApiKey(id="k1", name="alice", role=KeyRole.WRITER, namespaces=("team-a",), salt=b"s" * 16,
                             digest=b"d" * 32, created_ms=T0)),
        Audited(T0, STAMP, CreateTasks(T0, (
            CreateItem(tids[0], spec(max_retries=0, notify_url=URL, payload={"n": 1})),
            CreateItem(tids[1], spec(namespace="team-a")),
            CreateItem(tids[2], spec(type="periodic", interval_ms=60_000, scene="s")),
        ))),
        PutFlow(T0, "127.0.0.1:9", FlowSettings(rate_per_s=5.0, burst=2, updated_ms=T0)),
        PutMeta(T0, "config", b"\x01\x02"),
    )
    t = s.get_task(tids[0])
    assert t is not None
    at = T0 + 1_000
    log.apply(Dispatched(at, (DispatchItem(fire_id=t.fire_id, task_id=t.id, attempt=1, worker="n1",
                                           deadline_ms=at + 10_000),)))
    t2 = s.get_task(tids[1])
    assert t2 is not None
    log.apply(
        Dispatched(at, (DispatchItem(fire_id=t2.fire_id, task_id=t2.id, attempt=1, worker="n1",
                                     deadline_ms=at + 10_000),)),
        Results(at + 5, (ResultItem(fire_id=t.fire_id, kind=FireKind.CALLBACK, status_code=500,
                                    outcome=Outcome.RESPONSE, response_head="", latency_ms=5, worker="n1",
                                    attempt=1),)),
    )
    for db, want in ((b"tasks", 3), (b"fires", 1), (b"dead", 1), (b"outbox", 2), (b"flows", 1), (b"audit", 3)):
        assert _count(s, db) == want, db
    return s


def _count(s: TaskStore, db: bytes) -> int:
    with s._env.begin() as txn:
        return int(txn.stat(s._dbs[db])["entries"])


def _rewrite(s: TaskStore, db: bytes, change: Callable[[bytes, Any], Any], prefix: bytes = b"") -> int:
    """Every record of ``db`` whose key starts with ``prefix`` stored as ``change(key, fields)`` says
    (msgpack): how many."""
    n = 0
    with s._env.begin(write=True) as txn:
        cur = txn.cursor(db=s._dbs[db])
        for k, v in list(cur):
            if not bytes(k).startswith(prefix):
                continue
            fields = msgpack.unpackb(v, raw=False, strict_map_key=False)
            txn.put(k, msgpack.packb(change(bytes(k), fields), use_bin_type=True), db=s._dbs[db])
            n += 1
    return n


def _stored(s: TaskStore) -> tuple[int, str]:
    """The digest of the bytes as they are stored (what the digest was before it canonicalised)."""
    return lmdb_snapshot.digest_state(s._env, s._meta, tuple(s._dbs.items()),
                                      volatile=(b"applied_index", b"applied_term", b"counts"))


def test_a_record_of_this_release_is_hashed_as_it_is_stored(tmp_path: Path) -> None:
    s = _filled(tmp_path / "a")
    try:
        assert s.digest_state() == _stored(s)
    finally:
        s.close()


def _drop_last(k: bytes, fields: list[Any]) -> list[Any]:
    """The record as a release before its last field wrote it (the field holds its default here)."""
    assert fields[-1] in (None, "", "default"), fields[-1]
    return fields[:-1]


def _drop_quota(k: bytes, fields: Any) -> Any:
    """A namespace record as a release before ``fires_per_s`` wrote it (a map of quotas without it)."""
    quotas = fields[1]
    assert quotas.pop("fires_per_s") is None
    return fields


def _same(k: bytes, fields: Any) -> Any:
    return fields


@pytest.mark.parametrize(("db", "prefix", "this", "earlier"), [
    (b"tasks", b"", _same, _drop_last),  # ack_from_ms, appended in version 8
    # not_before_ms: a fire an earlier release wrote reads as 0
    (b"fires", b"", lambda k, f: [*f[:-1], 0], lambda k, f: f[:-1]),
    (b"dead", b"", _same, _drop_last),  # namespace (read as the default one, which it is here)
    (b"outbox", b"", _same, _drop_last),  # traceparent
    (b"audit", b"", _same, _drop_last),  # the entry's id (given by the store when it is read)
    (b"meta", b"m:ns:", _same, _drop_quota),
])
def test_a_record_an_earlier_release_wrote_digests_like_this_releases(
    tmp_path: Path, db: bytes, prefix: bytes, this: Callable[[bytes, Any], Any], earlier: Callable[[bytes, Any], Any],
) -> None:
    a, b = _filled(tmp_path / "a"), _filled(tmp_path / "b")
    try:
        assert _rewrite(a, db, this, prefix) == _rewrite(b, db, earlier, prefix) >= 1
        assert _stored(a) != _stored(b), "the layouts differ on disk"
        assert a.digest_state() == b.digest_state()
    finally:
        a.close()
        b.close()


def test_a_field_an_earlier_release_lacked_but_whose_value_differs_still_shows(tmp_path: Path) -> None:
    """Hashing in this release's layout hides no difference of state: a task whose last field holds
    another value, or a dead letter of another namespace read as the default one, digests apart."""
    a, b, c = _filled(tmp_path / "a"), _filled(tmp_path / "b"), _filled(tmp_path / "c")
    try:
        _rewrite(b, b"tasks", lambda k, f: [*f[:-1], 12345])
        _rewrite(c, b"dead", lambda k, f: [*f[:-1], "team-a"])
        assert len({a.digest_state(), b.digest_state(), c.digest_state()}) == 3
    finally:
        a.close()
        b.close()
        c.close()
