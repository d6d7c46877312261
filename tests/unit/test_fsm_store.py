"""The lmdb task store: one transaction per batch with applied_index, scans, snapshot/restore."""

from __future__ import annotations

import random
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

import molens.lmdb_snapshot as lmdb_snapshot
from molens.fsm import tenancy
from molens.fsm.commands import (
    Command,
    CreateItem,
    CreateTasks,
    DeleteDeadLetters,
    DeleteNamespace,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    PauseTasks,
    PutMeta,
    PutNamespace,
    ResultItem,
    Results,
    encode,
)
from molens.fsm.history import History
from molens.fsm.machine import Created, SendFire, WheelAdd
from molens.fsm.memstate import MemoryState
from molens.fsm.store import (
    DAY_MS,
    DEAD_CURSOR,
    EntryResult,
    StoreError,
    TaskStore,
    task_from_bytes,
    task_to_bytes,
)
from molens.fsm.tenancy import Namespace, Quotas
from molens.model import (
    ExecutionResult,
    FireKind,
    Outcome,
    Status,
    ValidationError,
    new_task_id,
    validate_create,
)
from molens.raft.log import Entry, EntryKind

T0 = 1_700_000_000_000
URL = "http://127.0.0.1:9/cb"


def spec(**kw: Any) -> Any:
    r: dict[str, Any] = {"type": "delayed", "interval_ms": 1000, "callback_url": URL}
    r.update(kw)
    return validate_create(r, now_ms=T0)


class Log:
    """Feeds commands to a store as Raft entries with increasing indexes."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.index = store.applied_index()

    def entries(self, cmds: list[Command]) -> list[Entry]:
        out = []
        for c in cmds:
            self.index += 1
            out.append(Entry(self.index, 1, EntryKind.NORMAL, encode(c)))
        return out

    def apply(self, *cmds: Command) -> list[Any]:
        return self.store.apply_batch(self.entries(list(cmds)))


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = TaskStore(tmp_path / "n1", history=History(tmp_path / "n1" / "history.sqlite", max_records_per_task=3))
    yield s
    s.close()


def test_task_record_round_trips() -> None:
    from molens.fsm.machine import first_due  # noqa: F401  (import check)

    ms = MemoryState()
    ms.apply(CreateTasks(T0, (CreateItem("A" * 26, spec(payload={"x": [1, 2]}, idempotency_key="k")),)))
    t = ms.tasks["A" * 26]
    assert task_from_bytes(task_to_bytes(t)) == t


def test_batch_applies_in_one_transaction_and_records_applied_index(tmp_path: Path, store: TaskStore) -> None:
    lg = Log(store)
    ids = [new_task_id(T0, i) for i in range(5)]
    res = lg.apply(*(CreateTasks(T0, (CreateItem(i, spec(
        interval_ms=1000 * (5 - n),
    )),)) for n, i in enumerate(ids)))
    assert all(isinstance(r, EntryResult) and isinstance(r.results[0], Created) for r in res)
    assert store.applied_index() == 5 and len(store) == 5
    assert [tid for _, tid in store.scan_due()] == list(reversed(ids))
    store.close()
    reopened = TaskStore(tmp_path / "n1")
    assert reopened.applied_index() == 5 and reopened.counts()["pending"] == 5
    reopened.close()


def test_replayed_entries_are_skipped_and_gaps_refused(store: TaskStore) -> None:
    lg = Log(store)
    es = lg.entries([CreateTasks(T0, (CreateItem(new_task_id(T0, 1), spec()),))])
    store.apply_batch(es)
    assert store.apply_batch(es) == [None] and len(store) == 1
    with pytest.raises(StoreError):
        store.apply_batch([Entry(store.applied_index() + 2, 1, EntryKind.NORMAL, b"")])


def test_noop_conf_change_and_garbage_entries_advance_index_without_change(store: TaskStore) -> None:
    before = store.digest()
    out = store.apply_batch(
        [Entry(1, 1, EntryKind.NORMAL, b""), Entry(2, 1, EntryKind.CONF_CHANGE, b"xx"), Entry(3, 1, EntryKind.NORMAL, b"\xc1")]
    )
    assert out[0] is None and out[1] is None and isinstance(out[2], ValueError)
    assert store.applied_index() == 3 and store.digest() == before


def test_commands_in_one_batch_see_each_other(store: TaskStore) -> None:
    lg = Log(store)
    tid = new_task_id(T0, 1)
    res = lg.apply(
        CreateTasks(T0, (CreateItem(tid, spec(interval_ms=0)),)),
        Dispatched(T0, (DispatchItem(
            fire_id=f"{tid}-1", task_id=tid, attempt=1, worker="w", deadline_ms=T0 + 9000,
        ),)),
        Results(T0 + 20, (ResultItem(
            fire_id=f"{tid}-1", kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
            response_head="ok", latency_ms=20, worker="w",
        ),)),
    )
    assert res[1].results == [None] and any(isinstance(e, SendFire) for e in res[1].effects)
    t = store.get_task(tid)
    assert t is not None and t.status is Status.DONE
    assert list(store.scan_due()) == [] and list(store.scan_fires()) == []
    assert store.counts()["done"] == 1 and store.counts()["pending"] == 0
    assert store.history is not None
    (e,) = store.history.list_executions(task_id=tid).items
    assert e.result is ExecutionResult.SUCCESS and e.response_head == "ok"


def test_effects_reach_on_applied_after_commit_with_their_term(tmp_path: Path) -> None:
    seen: list[EntryResult] = []
    s = TaskStore(tmp_path, on_applied=seen.extend)
    tid = new_task_id(T0, 3)
    Log(s).apply(CreateTasks(T0, (CreateItem(tid, spec()),)), PutMeta(T0, "x", b"y"))
    assert [(r.index, r.term, r.effects) for r in seen] == [(1, 1, [WheelAdd(tid, T0 + 1000, new=True)])]
    s.close()


def test_scans_stream_in_chunks(store: TaskStore) -> None:
    lg = Log(store)
    rng = random.Random(5)
    items = tuple(CreateItem(new_task_id(T0, i), spec(
        interval_ms=rng.randrange(0, 10**6),
    )) for i in range(300))
    lg.apply(CreateTasks(T0, items))
    due = list(store.scan_due(chunk=7))
    assert len(due) == 300 and due == sorted(due)
    tasks = list(store.scan_tasks(chunk=11))
    assert [t.id for t in tasks] == sorted(i.task_id for i in items)
    page = list(store.scan_tasks(after=tasks[149].id, chunk=11))
    assert [t.id for t in page] == [t.id for t in tasks[150:]]


def test_read_due_is_one_bounded_range_of_the_due_index(store: TaskStore) -> None:
    lg = Log(store)
    items = tuple(CreateItem(new_task_id(T0, i), spec(interval_ms=(i // 3) * 100)) for i in range(30))
    lg.apply(CreateTasks(T0, items))
    due = list(store.scan_due())
    assert store.read_due((0, ""), T0 + 10**9, 1000) == due
    assert store.read_due((0, ""), T0 + 500, 1000) == [r for r in due if r[0] < T0 + 500]
    first = store.read_due((0, ""), T0 + 10**9, 4)
    assert first == due[:4]  # the limit cuts inside a millisecond: resume after the last key
    last_due, last_key = first[-1]
    assert store.read_due((last_due, last_key + "\x00"), T0 + 10**9, 4) == due[4:8]
    assert store.read_due((T0 + 10**9, ""), T0 + 10**9, 4) == []


def test_store_matches_memory_state_and_snapshot_restores_it(tmp_path: Path, store: TaskStore) -> None:
    lg, ms = Log(store), MemoryState()
    cmds: list[Command] = []
    ids = [new_task_id(T0, i) for i in range(20)]
    cmds.append(CreateTasks(T0, tuple(CreateItem(t, spec(interval_ms=0, max_retries=2)) for t in ids)))
    cmds.append(Dispatched(T0, tuple(DispatchItem(
        fire_id=f"{t}-1", task_id=t, attempt=1, worker="w", deadline_ms=T0 + 5000,
    ) for t in ids)))
    cmds.append(
        Results(
            T0 + 10,
            tuple(ResultItem(
                fire_id=f"{t}-1", kind=FireKind.CALLBACK, status_code=500 if n % 2 else 200,
                outcome=Outcome.RESPONSE, response_head="", latency_ms=5, worker="w",
            ) for n, t in enumerate(ids)),
        )
    )
    cmds.append(DeleteTasks(T0 + 11, (ids[0], ids[1])))
    cmds.append(PutMeta(T0 + 12, "membership", b"n1,n2"))
    for c in cmds:
        lg.apply(c)
        ms.apply(c)
    for t in ids:
        assert store.get_task(t) == ms.get_task(t)
    assert list(store.scan_due()) == list(ms.scan_due())
    assert store.get_meta("membership") == b"n1,n2"
    snap = tmp_path / "snap.mdb"
    assert store.snapshot(snap) == store.applied_index()
    other = TaskStore(tmp_path / "n2", history=History(tmp_path / "n2" / "h.sqlite"))
    other.restore(snap)
    assert other.digest() == store.digest() and other.applied_index() == store.applied_index()
    assert other.counts() == store.counts()
    other.close()


def test_restore_keeps_the_history_of_tasks_the_snapshot_holds_and_drops_the_others(
    tmp_path: Path, store: TaskStore
) -> None:
    """The restored store is asked about the tasks the history holds (a snapshot of millions of
    tasks is not listed in memory to decide)."""

    def fired(lg: Log, tids: list[str]) -> None:
        lg.apply(
            CreateTasks(T0, tuple(CreateItem(t, spec(interval_ms=0)) for t in tids)),
            Dispatched(T0, tuple(DispatchItem(
                fire_id=f"{t}-1", task_id=t, attempt=1, worker="w", deadline_ms=T0 + 9000,
            ) for t in tids)),
            Results(T0 + 1, tuple(ResultItem(
                fire_id=f"{t}-1", kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE,
                response_head="", latency_ms=1, worker="w",
            ) for t in tids)),
        )

    kept = [new_task_id(T0, i) for i in range(3)]
    fired(Log(store), kept)
    snap = tmp_path / "snap.mdb"
    store.snapshot(snap)
    h = History(tmp_path / "n2" / "h.sqlite")
    other = TaskStore(tmp_path / "n2", history=h)
    gone = [new_task_id(T0, i) for i in range(10, 13)]
    fired(Log(other), kept[:1] + gone)
    assert {t: h.count(t) for t in kept[:1] + gone} == {t: 1 for t in kept[:1] + gone}
    other.restore(snap)
    assert h.count(kept[0]) == 1 and all(h.count(t) == 0 for t in gone)
    other.close()


def test_restore_refuses_a_non_snapshot(tmp_path: Path, store: TaskStore) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"not lmdb" * 100)
    with pytest.raises(StoreError):
        store.restore(bad)
    assert store.applied_index() == 0


def test_history_trimmed_per_task_and_deleted_with_task(store: TaskStore) -> None:
    lg = Log(store)
    tid = new_task_id(T0, 9)
    lg.apply(CreateTasks(T0, (CreateItem(tid, spec(
        type="periodic", interval_ms=1000, max_fails=100, max_retries=0,
    )),)))
    now = T0
    for k in range(1, 6):
        now = T0 + k * 1000
        lg.apply(
            Dispatched(now, (DispatchItem(
                fire_id=f"{tid}-{k}", task_id=tid, attempt=1, worker="w", deadline_ms=now + 9000,
            ),)),
            Results(now + 1, (ResultItem(
                fire_id=f"{tid}-{k}", kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE,
                response_head="", latency_ms=1, worker="w",
            ),)),
        )
    assert store.history is not None
    rows = store.history.list_executions(task_id=tid).items
    assert [r.seq for r in rows] == [5, 4, 3]
    lg.apply(DeleteTasks(now, (tid,)))
    assert store.history.count(tid) == 0


def test_history_not_duplicated_when_lmdb_commit_was_lost(tmp_path: Path) -> None:
    """History commits before lmdb; a replay of entries it already holds adds nothing."""
    h = History(tmp_path / "h.sqlite")
    s = TaskStore(tmp_path / "a", history=h)
    lg = Log(s)
    tid = new_task_id(T0, 1)
    es = lg.entries(
        [
            CreateTasks(T0, (CreateItem(tid, spec(interval_ms=0)),)),
            Dispatched(T0, (DispatchItem(
                fire_id=f"{tid}-1", task_id=tid, attempt=1, worker="w", deadline_ms=T0 + 9000,
            ),)),
            Results(T0 + 1, (ResultItem(
                fire_id=f"{tid}-1", kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
                response_head="", latency_ms=1, worker="w",
            ),)),
        ]
    )
    s.apply_batch(es)
    assert h.count() == 1
    s.close()
    # a fresh lmdb (as if its commit had been lost) replays the same entries into the same history
    h2 = History(tmp_path / "h.sqlite")
    s2 = TaskStore(tmp_path / "b", history=h2)
    s2.apply_batch(es[:2])
    s2.apply_batch(es[2:])
    assert h2.count() == 1 and h2.applied_index() == 3
    s2.close()


def test_scan_expirable_lists_terminal_tasks_by_last_update(store: TaskStore) -> None:
    lg = Log(store)
    ids = [new_task_id(T0, i) for i in range(4)]
    lg.apply(CreateTasks(T0, tuple(CreateItem(t, spec(interval_ms=0, max_retries=0)) for t in ids)))
    lg.apply(Dispatched(T0, tuple(DispatchItem(
        fire_id=f"{t}-1", task_id=t, attempt=1, worker="w", deadline_ms=T0 + 5000,
    ) for t in ids[:3])))
    for n, t in enumerate(ids[:3]):
        code = 200 if n else 500
        lg.apply(Results(T0 + 10 + n, (ResultItem(
            fire_id=f"{t}-1", kind=FireKind.CALLBACK, status_code=code, outcome=Outcome.RESPONSE,
            response_head="", latency_ms=1, worker="w",
        ),)))
    # ids[0] failed for good: it has a dead letter and is kept until that is gone
    assert [dl.task_id for dl in store.list_dead()[0]] == [ids[0]]
    items = store.scan_expirable(T0 + 12, 10)
    assert [(i.task_id, i.updated_ms) for i in items] == [(ids[1], T0 + 11)]
    assert len(store.scan_expirable(T0 + 100, 1)) == 1
    lg.apply(Expire(T0 + 100, tuple(items)))
    assert store.get_task(ids[1]) is None
    assert [i.task_id for i in store.scan_expirable(T0 + 100, 10)] == [ids[2]]
    lg.apply(DeleteDeadLetters(T0 + 100, (f"{ids[0]}-1.1",)))
    assert store.dead_count() == 0
    assert [i.task_id for i in store.scan_expirable(T0 + 100, 10)] == [ids[0], ids[2]]


def test_an_entry_whose_apply_raises_changes_nothing_and_does_not_stop_the_store(
    store: TaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from molens.fsm import machine

    lg = Log(store)
    before = store.digest()

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(machine, "_create", boom)
    out = lg.apply(CreateTasks(T0, (CreateItem(new_task_id(T0, 1), spec()),)))
    assert isinstance(out[0], StoreError) and out[0].code == "internal"
    assert store.digest() == before and store.applied_index() == 1
    monkeypatch.undo()
    lg.apply(CreateTasks(T0, (CreateItem(new_task_id(T0, 2), spec()),)))
    assert len(store) == 1


def test_apply_batch_accepts_index_data_pairs(store: TaskStore) -> None:
    tid = new_task_id(T0, 5)
    out = store.apply_batch([(1, encode(CreateTasks(T0, (CreateItem(tid, spec()),)))), (2, b"")])
    assert isinstance(out[0], EntryResult) and out[0].term == 0 and out[1] is None
    assert store.applied_index() == 2 and store.get_task(tid) is not None


def test_own_proposals_apply_without_decoding_and_leave_the_same_state(tmp_path: Path) -> None:
    """encode_proposal: the leader applies the command object it proposed; a replica decoding the
    same bytes ends in the same state with the same results."""
    rng = random.Random(5)
    ids = [new_task_id(T0, i) for i in range(40)]
    cmds: list[Command] = [
        CreateTasks(T0, tuple(CreateItem(t, spec(
            payload={"i": n}, idempotency_key=f"k{n % 30}",
        )) for n, t in enumerate(ids))),
        Dispatched(T0 + 1000, tuple(DispatchItem(
            fire_id=f"{t}-1", task_id=t, attempt=1, worker="n1", deadline_ms=T0 + 11_000,
        ) for t in ids[:20])),
        Results(
            T0 + 1010,
            tuple(
                ResultItem(
                    fire_id=f"{t}-1", kind=FireKind.CALLBACK, status_code=rng.choice([200, 404, 500]),
                    outcome=Outcome.RESPONSE, response_head="x", latency_ms=5, worker="n1",
                )
                for t in ids[:20]
            ),
        ),
        DeleteTasks(T0 + 1020, tuple(ids[30:35])),
    ]
    leader = TaskStore(tmp_path / "leader")
    replica = TaskStore(tmp_path / "replica")
    datas = [leader.encode_proposal(c) for c in cmds]
    entries = [Entry(i + 1, 1, EntryKind.NORMAL, d) for i, d in enumerate(datas)]
    got = leader.apply_batch(entries)
    assert leader.decodes_skipped == len(cmds)
    # equal bytes in another object (read back from disk, received from a leader) are decoded
    want = replica.apply_batch([Entry(e.index, e.term, e.kind, bytes(bytearray(e.data))) for e in entries])
    assert replica.decodes_skipped == 0
    assert [(r.results, r.effects) for r in got] == [(r.results, r.effects) for r in want]
    assert leader.digest() == replica.digest()
    leader.close()
    replica.close()


def test_proposals_that_never_apply_are_forgotten_within_a_bound(store: TaskStore) -> None:
    from molens.fsm import store as store_mod

    for n in range(store_mod._KNOWN_MAX * 3):
        store.encode_proposal(DeleteTasks(T0, (f"t{n}",)))
    assert len(store._known) <= store_mod._KNOWN_MAX


def _where(store: TaskStore, **kw: Any) -> list[str]:
    return [t.id for t in store.scan_tasks_where(chunk=3, **kw)]


def test_status_and_scene_indexes_follow_every_change_and_page_in_id_order(store: TaskStore) -> None:
    lg = Log(store)
    ids = [new_task_id(T0, i) for i in range(12)]
    lg.apply(CreateTasks(T0, tuple(CreateItem(tid, spec(scene="a" if i % 2 else "b")) for i, tid in enumerate(ids))))
    lg.apply(PauseTasks(T0 + 1, tuple(ids[:5])))
    lg.apply(DeleteTasks(T0 + 2, (ids[0], ids[7])))
    paused, pending = ids[1:5], [tid for tid in ids[5:] if tid != ids[7]]
    assert _where(store, statuses=["paused"]) == paused
    assert _where(store, statuses=["pending"]) == pending
    assert _where(store, statuses=["paused", "pending"]) == sorted(paused + pending)
    assert _where(store, statuses=["paused", "pending"], reverse=True) == sorted(paused + pending, reverse=True)
    assert _where(store, statuses=["pending"], after=pending[2]) == pending[3:]
    assert _where(store, statuses=["pending"], after=pending[2], reverse=True) == pending[:2][::-1]
    assert _where(store, scene="a") == [tid for i, tid in enumerate(ids) if i % 2 and tid != ids[7]]
    assert _where(store, statuses=["paused"], scene="b") == [ids[2], ids[4]]
    assert _where(store, statuses=["done"]) == []
    assert store.counts()["paused"] == 4 and store.counts()["pending"] == 6


def test_due_entries_are_counted_per_day_on_apply(store: TaskStore) -> None:
    lg = Log(store)
    ids = [new_task_id(T0, i) for i in range(6)]
    lg.apply(CreateTasks(T0, tuple(CreateItem(tid, spec(interval_ms=(i // 2) * DAY_MS)) for i, tid in enumerate(ids))))
    day0 = T0 // DAY_MS * DAY_MS
    assert store.due_by_day(T0, 10) == [(day0, 2), (day0 + DAY_MS, 2), (day0 + 2 * DAY_MS, 2)]
    lg.apply(PauseTasks(T0 + 1, (ids[2],)), DeleteTasks(T0 + 1, (ids[4], ids[5])))
    assert store.due_by_day(T0, 10) == [(day0, 2), (day0 + DAY_MS, 1)]
    assert store.due_by_day(T0 + DAY_MS, 1) == [(day0 + DAY_MS, 1)]


def test_a_store_of_format_2_gets_its_indexes_built_when_it_opens(tmp_path: Path) -> None:
    s = TaskStore(tmp_path)
    lg = Log(s)
    ids = [new_task_id(T0, i) for i in range(5)]
    lg.apply(CreateTasks(T0, tuple(CreateItem(tid, spec(scene="x")) for tid in ids)), PauseTasks(T0, (ids[1],)))
    want = s.digest()
    env, meta = s._env, s._meta
    with env.begin(write=True) as txn:  # what format 2 wrote: no index databases, format 2
        for db in (s._by_status, s._by_scene, s._due_days):
            txn.drop(db, delete=True)
        txn.put(b"format", struct.pack(">Q", 2), db=meta)
    s.close()
    s = TaskStore(tmp_path)
    assert s.digest() == want
    assert _where(s, statuses=["paused"]) == [ids[1]] and _where(s, scene="x") == ids
    assert s.due_by_day(T0, 2) == [(T0 // DAY_MS * DAY_MS, 4)]
    s.close()


# --- log-backed stores: no fsync per batch, the boot id guards the file (docs/architecture.md#fsm-durability)

def _boot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, boot: str) -> Path:
    path = tmp_path / "boot_id"
    path.write_text(boot + "\n")
    monkeypatch.setattr(lmdb_snapshot, "BOOT_ID_PATH", path)
    return path


def _fill(data_dir: Path, n: int) -> list[str]:
    s = TaskStore(data_dir, log_backed=True)
    ids = [new_task_id(T0 + i, i) for i in range(n)]
    Log(s).apply(*[CreateTasks(T0, (CreateItem(t, spec()),)) for t in ids])
    s.close()
    return ids


def test_log_backed_store_does_not_sync_batches_and_marks_a_clean_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _boot(monkeypatch, tmp_path, "boot-a")
    s = TaskStore(tmp_path, log_backed=True)
    assert s.stats()["sync"] == "log"
    assert (tmp_path / "fsm" / lmdb_snapshot.BOOT_MARKER).read_text() == "boot-a"  # open in this boot
    s.close()
    assert (tmp_path / "fsm" / lmdb_snapshot.BOOT_MARKER).read_text() == lmdb_snapshot.CLOSED_MARK
    ids = _fill(tmp_path, 3)
    _boot(monkeypatch, tmp_path, "boot-b")  # closed cleanly, then the machine restarted: kept
    again = TaskStore(tmp_path, log_backed=True)
    assert again.applied_index() == 3 and again.get_task(ids[0]) is not None
    assert not again.discarded_after_os_stop
    again.close()


def test_log_backed_store_left_open_is_kept_after_a_process_death_and_rebuilt_after_a_system_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import subprocess
    import sys

    boot = _boot(monkeypatch, tmp_path, "boot-a")
    data = tmp_path / "node"
    # a process that applies 5 entries and dies without closing the store (its pages in the page cache)
    code = (
        "import os, sys; from pathlib import Path; sys.path.insert(0, sys.argv[3])\n"
        "import molens.lmdb_snapshot as g\n"
        "g.BOOT_ID_PATH = Path(sys.argv[2])\n"
        "import molens.fsm.store as m\n"
        "from tests.unit.test_fsm_store import Log, CreateTasks, CreateItem, spec, new_task_id, T0\n"
        "s = m.TaskStore(sys.argv[1], log_backed=True)\n"
        "Log(s).apply(*[CreateTasks(T0, (CreateItem(new_task_id(T0 + i, i), spec()),)) for i in range(5)])\n"
        "os._exit(0)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", code, str(data), str(boot), root], check=True, cwd=root)
    assert (data / "fsm" / lmdb_snapshot.BOOT_MARKER).read_text() == "boot-a"
    same = TaskStore(data, log_backed=True)  # the same boot: the page cache held every write
    assert same.applied_index() == 5 and not same.discarded_after_os_stop
    assert same.stats()["discarded_after_os_stop"] is False
    # its pages are never synced here; left open, the machine "restarts"
    same._env.close()
    _boot(monkeypatch, tmp_path, "boot-b")
    with caplog.at_level("WARNING"):
        rebuilt = TaskStore(data, log_backed=True)
    assert rebuilt.discarded_after_os_stop and rebuilt.applied_index() == 0 and len(rebuilt) == 0
    assert "open when the system stopped" in caplog.text
    assert (data / "fsm" / lmdb_snapshot.BOOT_MARKER).read_text() == "boot-b"
    rebuilt.close()


def test_a_store_that_is_not_log_backed_or_has_no_boot_id_syncs_every_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = TaskStore(tmp_path / "plain")
    assert s.stats()["sync"] == "batch"
    s.close()
    assert not (tmp_path / "plain" / "fsm" / lmdb_snapshot.BOOT_MARKER).exists()
    monkeypatch.setattr(lmdb_snapshot, "BOOT_ID_PATH", tmp_path / "absent")
    s = TaskStore(tmp_path / "no-boot-id", log_backed=True)
    assert s.stats()["sync"] == "batch"
    s.close()
    s = TaskStore(tmp_path / "tests", durable=False, log_backed=True)
    assert s.stats()["sync"] == "none"
    s.close()


def test_a_tasks_dead_letters_list_newest_first_past_ten_occurrences(store: TaskStore) -> None:
    """Their ids sort as text (-10.1 before -2.1): filtered by task, the list was in id order, and a
    page of the five newest showed occurrences 1, 10, 11, 12, 2."""
    lg = Log(store)
    t = new_task_id(T0, 1)
    lg.apply(CreateTasks(T0, (CreateItem(t, spec(type="periodic", interval_ms=1000, max_retries=0, max_fails=100)),)))
    for seq in range(1, 13):
        at = T0 + seq * 1000
        lg.apply(Dispatched(at, (DispatchItem(fire_id=f"{t}-{seq}", task_id=t, attempt=1, worker="w",
                                              deadline_ms=at + 5000),)))
        lg.apply(Results(at + 10, (ResultItem(
            fire_id=f"{t}-{seq}", kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE,
            response_head="", latency_ms=1, worker="w",
        ),)))
    page, nxt = store.list_dead(task_id=t, limit=5)
    assert [d.seq for d in page] == [12, 11, 10, 9, 8] and nxt is not None
    seen = [d.seq for d in page]
    while nxt is not None:
        assert DEAD_CURSOR.fullmatch(nxt), nxt  # the API takes back every position the store issues
        page, nxt = store.list_dead(task_id=t, limit=5, cursor=nxt)
        seen += [d.seq for d in page]
    assert seen == list(range(12, 0, -1))
    with pytest.raises(ValidationError):
        store.list_dead(task_id=t, cursor="10.1")  # not a cursor this list gives
    assert not DEAD_CURSOR.fullmatch("10.1")


class _CountingEnv:
    """An lmdb environment that counts read transactions and can hold one open (``hold``: the
    transaction has begun, then waits for ``release``)."""

    def __init__(self, env: Any) -> None:
        self.env, self.reads = env, 0
        self.hold: threading.Event | None = None
        self.release = threading.Event()

    def begin(self, *a: Any, **kw: Any) -> Any:
        txn = self.env.begin(*a, **kw)
        if not kw.get("write"):
            self.reads += 1
            if self.hold is not None:
                self.hold.set()
                self.release.wait(10)
        return txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def test_meta_records_are_read_from_memory_until_an_apply_writes_them(tmp_path: Path) -> None:
    s = TaskStore(tmp_path, durable=False)
    ns_key = tenancy.NS_PREFIX + "pay"
    put = [PutNamespace(T0, Namespace(name="pay"), True)]
    s.apply_batch([(1, encode(put[0]))])
    env = _CountingEnv(s._env)
    s._env = env
    first = s.get_meta(ns_key)
    assert first is not None and tenancy.decode_namespace(first).name == "pay"
    assert s.get_meta(ns_key) == first and s.get_meta("ns:none") is None and s.get_meta("ns:none") is None
    assert env.reads == 2  # one per record, the absent one too
    s.apply_batch([(2, encode(PutNamespace(T0, Namespace(name="pay", quotas=Quotas(creates_per_s=5)), False)))])
    changed = s.get_meta(ns_key)
    assert changed is not None and tenancy.decode_namespace(changed).quotas.creates_per_s == 5
    s.apply_batch([(3, encode(DeleteNamespace(T0, "pay")))])
    assert s.get_meta(ns_key) is None
    assert env.reads == 4
    s.close()


def test_a_meta_read_that_began_before_an_apply_does_not_keep_the_old_record(tmp_path: Path) -> None:
    s = TaskStore(tmp_path, durable=False)
    ns_key = tenancy.NS_PREFIX + "pay"
    s.apply_batch([(1, encode(PutNamespace(T0, Namespace(name="pay"), True)))])
    env = _CountingEnv(s._env)
    s._env = env
    env.hold = threading.Event()
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(s.get_meta(ns_key)))
    reader.start()
    assert env.hold.wait(10)  # the reader's transaction sees the namespace
    env.hold = None
    s.apply_batch([(2, encode(DeleteNamespace(T0, "pay")))])
    env.release.set()
    reader.join(10)
    assert got and got[0] is not None  # what its transaction saw
    assert s.get_meta(ns_key) is None  # not what it saw: the apply came after its read began
    s.close()


def test_a_restore_leaves_no_meta_record_read_before_it(tmp_path: Path) -> None:
    s = TaskStore(tmp_path / "a", durable=False)
    ns_key = tenancy.NS_PREFIX + "pay"
    s.apply_batch([(1, encode(PutNamespace(T0, Namespace(name="pay"), True)))])
    s.snapshot(tmp_path / "snap")
    s.apply_batch([(2, encode(DeleteNamespace(T0, "pay")))])
    assert s.get_meta(ns_key) is None
    s.restore(tmp_path / "snap")
    assert s.get_meta(ns_key) is not None
    s.close()
