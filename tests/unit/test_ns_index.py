"""The task store's namespace index: it follows every write, lists a namespace's rows as the global
indexes filtered would, fills pages of its own only, and is rebuilt when a store opens without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest

from molens.fsm import ns_index
from molens.fsm.commands import (
    Audited,
    AuditStamp,
    Command,
    CreateItem,
    CreateTasks,
    DeleteDeadLetters,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    PauseTasks,
    PutNamespace,
    ResultItem,
    Results,
    ResumeTasks,
    TrimAudit,
    encode,
)
from molens.fsm.history import History
from molens.fsm.store import AuditFilter, TaskStore
from molens.fsm.tenancy import Namespace
from molens.model import FireKind, Outcome, new_task_id, validate_create
from molens.raft.log import Entry, EntryKind
from tests.ns_index_check import mismatches

T0 = 1_700_000_000_000
URL = "http://127.0.0.1:9/cb"
ALICE = AuditStamp("k1", "alice", "10.0.0.1")
NAMESPACES = ("ta", "tb", "tc")


class Log:
    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.index = store.applied_index()

    def apply(self, *cmds: Command) -> None:
        out = []
        for c in cmds:
            self.index += 1
            out.append(Entry(self.index, 1, EntryKind.NORMAL, encode(c)))
        self.store.apply_batch(out)


def _open(path: Path) -> TaskStore:
    return TaskStore(path, history=History(path / "history.sqlite"))


def _fill(store: TaskStore) -> dict[str, str]:
    """Tasks of three namespaces, interleaved, through creates, pauses, deletes, failed fires (dead
    letters), a dead letter deleted and an audit trim; returns each task's namespace."""
    lg = Log(store)
    lg.apply(*(Audited(T0, ALICE, PutNamespace(T0, Namespace(name=ns), True)) for ns in NAMESPACES))
    owner: dict[str, str] = {}
    items = []
    for i in range(30):
        tid = new_task_id(T0, i)
        ns = NAMESPACES[(i * 7) % 3 if i % 5 else 0]
        owner[tid] = ns
        s = validate_create({"type": "delayed", "interval_ms": 1000 + (i * 37) % 11 * 100, "callback_url": URL,
                             "scene": f"s{i % 2}", "max_retries": 0, "namespace": ns}, now_ms=T0)
        items.append(CreateItem(tid, s))
    for n in range(0, 30, 6):
        lg.apply(Audited(T0 + n, ALICE, CreateTasks(T0 + n, tuple(items[n:n + 6]))))
    ids = list(owner)
    lg.apply(Audited(T0 + 40, ALICE, PauseTasks(T0 + 40, tuple(ids[1:30:4]))))
    lg.apply(Audited(T0 + 41, ALICE, DeleteTasks(T0 + 41, tuple(ids[2:30:9]))))
    fired = [tid for n, tid in enumerate(ids) if n % 3 == 0 and n % 9 != 2 and n % 4 != 1]
    at = T0 + 5_000
    lg.apply(Dispatched(at, tuple(DispatchItem(fire_id=f"{t}-1", task_id=t, attempt=1, worker="w",
                                               deadline_ms=at + 5000) for t in fired)))
    lg.apply(Results(at + 10, tuple(ResultItem(
        fire_id=f"{t}-1", kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w") for t in fired)))
    dead, _ = store.list_dead(limit=100)
    assert len(dead) == len(fired)
    lg.apply(Audited(at + 20, ALICE, DeleteDeadLetters(at + 20, (dead[0].id,))))
    lg.apply(TrimAudit(at + 30, 3))
    for tid in ids[2:30:9]:
        del owner[tid]
    return owner


def _dump(store: TaskStore) -> list[bytes]:
    with store._env.begin(db=store._by_ns) as txn:
        return [bytes(k) for k in txn.cursor().iternext(values=False)]


def _pages(read: Any, limit: int) -> list[Any]:
    """Every row of a paged list; each page but the last full."""
    out: list[Any] = []
    cursor = None
    while True:
        page, cursor = read(cursor, limit)
        out += page
        if cursor is None:
            return out
        assert len(page) == limit, "a page of one namespace came back short"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = _open(tmp_path / "n1")
    yield s
    s.close()


def test_each_namespace_lists_what_the_global_indexes_filtered_list(store: TaskStore) -> None:
    owner = _fill(store)
    tasks = list(store.scan_tasks())
    due = list(store.scan_due())
    dead, _ = store.list_dead(limit=1000)
    trail, _ = store.list_audit(AuditFilter(), limit=1000)
    assert dead and trail and {t.spec.namespace for t in tasks} == set(NAMESPACES)
    for ns in NAMESPACES:
        mine = [t.id for t in tasks if owner[t.id] == ns]
        assert [t.id for t in store.scan_tasks_where(namespaces=[ns], chunk=2)] == mine
        assert [t.id for t in store.scan_tasks_where(namespaces=[ns], reverse=True, chunk=2)] == mine[::-1]
        assert [t.id for t in store.scan_tasks_where(namespaces=[ns], after=mine[1], chunk=2)] == mine[2:]
        for status in ("pending", "paused", "failed"):
            assert [t.id for t in store.scan_tasks_where(statuses=[status], namespaces=[ns])] == \
                [t.id for t in tasks if owner[t.id] == ns and t.status.value == status], (ns, status)
        assert [t.id for t in store.scan_tasks_where(scene="s1", namespaces=[ns])] == \
            [t.id for t in tasks if owner[t.id] == ns and t.spec.scene == "s1"]
        assert list(store.scan_due(chunk=2, namespaces=[ns])) == [d for d in due if owner[d[1]] == ns]
        assert list(store.scan_due(after=due[3], namespaces=[ns])) == [d for d in due[4:] if owner[d[1]] == ns]
        scope = frozenset((ns,))
        assert _pages(lambda c, n, s=scope: store.list_dead(cursor=c, limit=n, scan_budget=n, namespaces=s), 2) == \
            [d for d in dead if d.namespace == ns]
        assert _pages(lambda c, n, s=scope: store.list_audit(AuditFilter(namespaces=s), cursor=c, limit=n,
                                                             scan_budget=n), 2) == \
            [a for a in trail if a.namespace == ns]
        assert store.list_audit(AuditFilter(namespace=ns), limit=1000)[0] == [a for a in trail if a.namespace == ns]
    two = ["ta", "tc"]
    assert [t.id for t in store.scan_tasks_where(namespaces=two, reverse=True)] == \
        [t.id for t in reversed(tasks) if owner[t.id] in two]
    assert list(store.scan_due(namespaces=two)) == [d for d in due if owner[d[1]] in two]
    assert store.list_audit(AuditFilter(namespace="ta", namespaces=frozenset({"tb"})))[0] == []
    assert list(store.scan_tasks_where(namespaces=[])) == []


def test_the_index_written_with_each_apply_is_the_one_a_rebuild_writes(tmp_path: Path, store: TaskStore) -> None:
    _fill(store)
    written = _dump(store)
    assert len(written) > 50
    store._check_ns_index()  # current: nothing to do
    assert _dump(store) == written
    with store._env.begin(write=True) as txn:  # as a release without the index leaves it: behind, stale
        txn.delete(written[5], db=store._by_ns)
        ns_index.mark(txn, store._by_ns, store.applied_index() - 4)
    path = store.dir.parent
    store.close()
    found = mismatches(path / "fsm")
    assert found == [f"missing {written[5]!r}", f"marked at {store.applied_index() - 4}, applied {store.applied_index()}"]
    again = _open(path)
    try:
        assert _dump(again) == written
    finally:
        again.close()
    assert mismatches(path / "fsm") == []


def test_a_snapshot_without_the_index_gets_it_built_when_restored(
    tmp_path: Path, store: TaskStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A snapshot of a release without the index holds no ``by_namespace`` database; the restoring
    node builds it (in transactions of ``REBUILD_CHUNK`` records)."""
    monkeypatch.setattr(ns_index, "REBUILD_CHUNK", 7)
    _fill(store)
    written = _dump(store)
    old = tmp_path / "old"
    store.snapshot(tmp_path / "snap.mdb")
    env = lmdb.open(str(tmp_path / "snap.mdb"), subdir=False, max_dbs=32, lock=False)
    db = env.open_db(ns_index.DB_NAME)
    with env.begin(write=True) as txn:
        txn.drop(db, delete=True)
    env.close()
    other = _open(old)
    try:
        other.restore(tmp_path / "snap.mdb")
        assert _dump(other) == written
        assert other.digest() == store.digest()
    finally:
        other.close()


def test_a_task_that_changes_status_while_a_list_reads_on_is_listed_once(store: TaskStore) -> None:
    """The list of a namespace merges its statuses' keys. Read lazily, each status in transactions
    of its own, a task that turned paused after the paused keys had been read (none past the page)
    and before the pending ones were read again was in neither: the list skipped it."""
    lg = Log(store)
    lg.apply(Audited(T0, ALICE, PutNamespace(T0, Namespace(name="ta"), True)))
    ids = [new_task_id(T0, i) for i in range(60)]
    s = validate_create({"type": "delayed", "interval_ms": 1000, "callback_url": URL, "namespace": "ta"}, now_ms=T0)
    lg.apply(CreateTasks(T0, tuple(CreateItem(tid, s) for tid in ids)))
    for reverse in (False, True):
        order = ids[::-1] if reverse else ids
        walk = store.scan_tasks_where(namespaces=["ta"], reverse=reverse, chunk=7)
        seen = [next(walk).id for _ in range(20)]
        moved = order[45]
        lg.apply(PauseTasks(T0 + 1, (moved,)) if not reverse else ResumeTasks(T0 + 2, (moved,)))
        seen += [t.id for t in walk]
        assert seen == order, f"reverse={reverse}"
