"""Random command sequences keep the machine's invariants, and replicas agree (hypothesis)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molens.fsm.commands import (
    BackfillTask,
    Command,
    CreateItem,
    CreateTasks,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    ExpireItem,
    PauseTasks,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
    encode,
)
from molens.fsm.machine import expired_fires
from molens.fsm.memstate import MemoryState
from molens.fsm.store import TaskStore
from molens.model import TERMINAL_STATUSES, FireKind, Outcome, Status, new_task_id, validate_create
from molens.raft.log import Entry, EntryKind

T0 = 1_700_000_000_000
ACTIVE = {Status.PENDING, Status.FIRING, Status.AWAITING_ACK}

REQS = [
    {"type": "delayed", "interval_ms": 500},
    {"type": "delayed", "interval_ms": 0, "max_retries": 2},
    {"type": "delayed", "interval_ms": 100, "ack_url": "http://127.0.0.1/ack", "ack_delay_ms": 300},
    {"type": "delayed", "interval_ms": 200, "reliability": "at_most_once"},
    {"type": "periodic", "interval_ms": 1000, "max_retries": 1, "max_fails": 3},
    {"type": "periodic", "interval_ms": 1500, "reliability": "at_most_once", "max_fails": 2},
    {"type": "periodic", "interval_ms": 1000, "max_retries": 1, "overlap": "buffer_one", "catchup": "none"},
]


def check_invariants(s: MemoryState) -> None:
    for fid, f in s.fires.items():
        t = s.tasks.get(f.task_id)
        assert t is not None and t.inflight == fid, (f, t)
    due = set()
    for t in s.tasks.values():
        if t.inflight is not None:
            assert t.inflight in s.fires
        if t.due_ms is not None:
            due.add((t.due_ms, t.id))
        if t.status in TERMINAL_STATUSES or t.status is Status.PAUSED:
            assert t.due_ms is None, t
        if t.status in ACTIVE and t.inflight is None:
            assert t.due_ms is not None, f"stuck task: {t}"  # nothing active may be forgotten
        assert t.attempt <= t.spec.max_retries + 1
        if t.status is not Status.INACTIVE:
            assert t.fail_count < t.spec.max_fails
    assert due == s.due


class Driver:
    def __init__(self) -> None:
        self.s = MemoryState()
        self.now = T0
        self.n = 0
        self.log: list[Command] = []

    def apply(self, cmd: Command) -> None:
        self.log.append(cmd)
        self.s.apply(cmd)
        check_invariants(self.s)

    def step(self, op: int, pick: int, outcome: int) -> None:
        s, now = self.s, self.now
        ids = sorted(s.tasks)
        tid = ids[pick % len(ids)] if ids else "none"
        if op == 0:
            self.n += 1
            r = {"callback_url": "http://127.0.0.1/cb", **REQS[pick % len(REQS)]}
            spec = validate_create(r, now_ms=now)
            self.apply(CreateTasks(now, (CreateItem(new_task_id(now, self.n), spec),)))
        elif op == 1:
            self.now += [10, 300, 1000, 4000][pick % 4]
        elif op == 2:  # the dispatcher plans every due task
            items = []
            for due, t_id in sorted(s.due):
                if due > now:
                    break
                t = s.tasks[t_id]
                att = (t.ack_attempt if t.status is Status.AWAITING_ACK else t.attempt) + 1
                items.append(DispatchItem(
                    fire_id=t.fire_id, task_id=t_id, attempt=att, worker="w", deadline_ms=now + 2000,
                ))
            if items:
                self.apply(Dispatched(now, tuple(items)))
        elif op == 3 and s.fires:  # a worker answers one fire
            f = s.fires[sorted(s.fires)[pick % len(s.fires)]]
            code, oc = [(200, Outcome.RESPONSE), (404, Outcome.RESPONSE), (500, Outcome.RESPONSE),
                        (None, Outcome.TIMEOUT), (None, Outcome.NETWORK_ERROR)][outcome % 5]
            self.apply(Results(now, (ResultItem(
                fire_id=f.fire_id, kind=f.kind, status_code=code, outcome=oc, response_head="", latency_ms=5,
                worker="w",
            ),)))
        elif op == 4:  # the monitor
            lost = expired_fires(list(s.fires.values()), now)
            if lost:
                self.apply(Results(now, tuple(lost)))
        elif op == 5:
            self.apply(PauseTasks(now, (tid,)))
        elif op == 6:
            self.apply(ResumeTasks(now, (tid,)))
        elif op == 7:
            self.apply(TriggerTask(now, tid))
        elif op == 8 and pick % 5 == 0:
            self.apply(DeleteTasks(now, (tid,)))
        elif op == 9 and ids:
            t = s.tasks[tid]
            self.apply(Expire(now, (ExpireItem(tid, t.updated_ms),)))
        elif op == 10 and s.fires:  # a duplicate / late result of an old fire id
            self.apply(Results(now, (ResultItem(
                fire_id=f"{tid}-0", kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
                response_head="", latency_ms=1, worker="w",
            ),)))
        elif op == 11:  # a backfill of a past range (docs/architecture.md#backfill)
            start = now - [500, 3000, 8000, 20000][pick % 4]
            self.apply(BackfillTask(now, tid, start, now - outcome * 700))


ops = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 1000), st.integers(0, 4)), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_random_commands_keep_invariants_and_replicas_agree(steps: list[tuple[int, int, int]]) -> None:
    d = Driver()
    for op, pick, outcome in steps:
        d.step(op, pick, outcome)
    replica = MemoryState()
    for c in d.log:
        replica.apply(c)
    assert replica.digest() == d.s.digest()


def test_lmdb_store_agrees_with_memory_state_on_a_long_random_run(tmp_path: Path) -> None:
    import random

    rng = random.Random(42)
    d = Driver()
    for _ in range(3000):
        d.step(rng.choice([0, 1, 1, 2, 2, 3, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11]), rng.randrange(1000), rng.randrange(5))
    store = TaskStore(tmp_path)
    entries: list[Any] = [Entry(i + 1, 1, EntryKind.NORMAL, encode(c)) for i, c in enumerate(d.log)]
    for i in range(0, len(entries), 97):
        store.apply_batch(entries[i : i + 97])
    assert {t.id: t for t in store.scan_tasks()} == d.s.tasks
    assert list(store.scan_due()) == sorted(d.s.due)
    assert {f.fire_id: f for f in store.scan_fires()} == d.s.fires
    # a terminal task with dead letters is kept (so they can be redriven) until they are gone
    with_dead = {dl.task_id for dl in d.s.dead.values()}
    assert with_dead, "the random run produced no dead letter"
    terminal = sorted((t.updated_ms, t.id) for t in d.s.tasks.values()
                      if t.status in TERMINAL_STATUSES and t.id not in with_dead)
    assert [(i.updated_ms, i.task_id) for i in store.scan_expirable(2**62, 10**6)] == terminal
    assert {dl.id: dl for dl in store.list_dead(limit=10**6)[0]} == d.s.dead
    assert store.dead_count() == len(d.s.dead)
    counts = store.counts()
    for st_ in Status:
        assert counts[st_.value] == sum(1 for t in d.s.tasks.values() if t.status is st_)
    store.close()
