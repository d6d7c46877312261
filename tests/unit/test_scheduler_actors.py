"""The pure parts of the leader actors, without threads or sockets: DispatchPlan planning and worker
choice, FireWatch deadlines, ExpiryScan rate limit, LeaderWheel effects."""

from __future__ import annotations

import collections
import dataclasses

import msgpack
import msgspec
import pytest

from molens.actors.cleaner import ExpiryScan
from molens.actors.dispatcher import DispatchPlan
from molens.actors.fireworker import WorkerHeartbeat, decode_heartbeat, heartbeat_frame
from molens.actors.monitor import FireWatch, WorkerWatch
from molens.actors.timewheel import LeaderWheel
from molens.delivery import FIRE_BATCH_VERSION
from molens.fsm.commands import Expire, ExpireItem, ResultItem, TrimAudit
from molens.fsm.machine import FireRecord, WheelAdd, WheelRemove
from molens.model import FireKind, Outcome, Status, Task, validate_create
from molens.schedule.flows import FlowControl
from molens.schema import Running

NOW = 1_767_225_600_000


def _task(tid: str, due: int | None = NOW, status: Status = Status.PENDING, inflight: str | None = None) -> Task:
    spec = validate_create({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x"}, now_ms=NOW)
    return Task(
        id=tid, spec=spec, status=status, created_ms=NOW, updated_ms=NOW, due_ms=due, sched_ms=NOW,
        inflight=inflight,
    )


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _dispatcher(tasks: dict[str, Task], local_free: int = 10, clock: Clock | None = None) -> DispatchPlan:
    return DispatchPlan("n1", tasks.get, lambda: local_free, 1_000, clock or Clock())


def test_plan_skips_tasks_not_due_in_flight_or_gone_and_numbers_the_next_attempt() -> None:
    tasks = {
        "a": _task("a"),
        "b": _task("b", due=NOW + 1),
        "c": _task("c", inflight="c-1"),
        "d": msgspec.structs.replace(_task("d"), attempt=2, status=Status.FIRING),
        "e": msgspec.structs.replace(_task("e"), status=Status.AWAITING_ACK, ack_attempt=1, spec=msgspec.structs.replace(
            _task("e").spec, ack_url="http://127.0.0.1:9/ack")),
        "f": _task("f", status=Status.PAUSED),
    }
    d = _dispatcher(tasks)
    items, later = d.plan(["a", "b", "c", "d", "e", "f", "gone"], NOW, limit=100)
    assert later == []
    assert [(i.task_id, i.fire_id, i.attempt) for i in items] == [("a", "a-1", 1), ("d", "d-1", 3), ("e", "e-1", 2)]
    assert all(i.deadline_ms == NOW + 5_000 + 1_000 for i in items)  # timeout_ms + dispatch_timeout_ms
    assert d.lags == [0, 0, 0]


def test_a_task_awaiting_its_ack_without_an_ack_url_is_not_planned(caplog: pytest.LogCaptureFixture) -> None:
    """Its ack_url removed while the ACK phase began (a PATCH racing the callback's answer): a
    Dispatched entry with its item would fail to apply whole, every other task's fire with it."""
    ackless = msgspec.structs.replace(_task("e"), status=Status.AWAITING_ACK, ack_attempt=1)
    assert ackless.spec.ack_url is None
    d = _dispatcher({"a": _task("a"), "e": ackless})
    for _ in range(2):
        items, later = d.plan(["e", "a"], NOW, limit=100)
        assert [i.task_id for i in items] == ["a"] and later == []
    assert caplog.text.count("task e awaits its ACK but has no ack_url") == 1


def test_plan_with_a_lead_takes_tasks_due_within_it_and_counts_the_deadline_from_the_due_time() -> None:
    tasks = {"a": _task("a", due=NOW - 5), "b": _task("b", due=NOW + 100), "c": _task("c", due=NOW + 101)}
    d = _dispatcher(tasks)
    items, later = d.plan(["a", "b", "c"], NOW, limit=100, lead_ms=100)
    assert later == [] and [i.task_id for i in items] == ["a", "b"]
    # deadline = max(now, due) + timeout_ms + dispatch_timeout_ms: the wait before the due time is not
    # taken from the fire's time to answer
    assert [i.deadline_ms for i in items] == [NOW + 6_000, NOW + 100 + 6_000]
    assert d.lags == [5, -100]


def test_plan_sends_every_due_occurrence_of_an_allow_task_in_one_go() -> None:
    """docs/architecture.md#overlap: the task's own occurrence and its running ones' retries due by
    the lead are planned together (one wheel key per task), earliest first; one not due waits."""
    run = (Running(seq=1, sched_ms=NOW - 2_000, attempt=1, due_ms=NOW - 10, inflight=False),
           Running(seq=2, sched_ms=NOW - 1_000, attempt=1, due_ms=None, inflight=True),
           Running(seq=3, sched_ms=NOW - 500, attempt=2, due_ms=NOW + 500, inflight=False))
    tasks = {"a": msgspec.structs.replace(_task("a"), seq=4, running=run)}
    d = _dispatcher(tasks)
    items, later = d.plan(["a"], NOW, limit=100)
    assert later == [] and [(i.fire_id, i.attempt) for i in items] == [("a-1", 2), ("a-4", 1)]
    items, _ = _dispatcher(tasks).plan(["a"], NOW, limit=100, lead_ms=500)
    assert [(i.fire_id, i.attempt) for i in items] == [("a-1", 2), ("a-4", 1), ("a-3", 3)]
    items, _ = _dispatcher(tasks, local_free=1).plan(["a"], NOW, limit=100)
    assert [i.fire_id for i in items] == ["a-1"]  # the rest when the wheel hands the task out again


def test_plan_keeps_what_exceeds_the_limit_or_the_capacity_for_later() -> None:
    tasks = {k: _task(k) for k in "abcde"}
    items, later = _dispatcher(tasks).plan(list("abcde"), NOW, limit=2)
    assert [i.task_id for i in items] == ["a", "b"] and later == ["c", "d", "e"]
    items, later = _dispatcher(tasks, local_free=3).plan(list("abcde"), NOW, limit=100)
    assert len(items) == 3 and later == ["d", "e"]


def test_workers_are_picked_round_robin_weighted_by_free_capacity_and_dead_ones_are_skipped() -> None:
    tasks = {f"t{i}": _task(f"t{i}") for i in range(60)}
    clock = Clock()
    d = _dispatcher(tasks, local_free=10, clock=clock)
    d.report("n2", 20)
    d.report("n3", 30)
    items, later = d.plan(list(tasks), NOW, limit=100)
    assert later == []
    assert collections.Counter(i.worker for i in items) == {"n1": 10, "n2": 20, "n3": 30}
    assert [i.worker for i in items[:6]] != sorted(i.worker for i in items[:6])  # interleaved, not in blocks
    clock.t += d.liveness_s + 1
    d.report("n2", 20)
    assert set(d.live_workers()) == {"n1", "n2"}


def test_a_worker_silent_for_three_report_intervals_gets_no_new_fires_before_it_is_counted_lost() -> None:
    tasks = {f"t{i}": _task(f"t{i}") for i in range(10)}
    clock = Clock()
    d = _dispatcher(tasks, local_free=10, clock=clock)
    d.report("n2", 10)
    clock.t += 1.6  # more than 3 x 500 ms since n2's last report, less than worker_lost_ms (2 s)
    items, _ = d.plan(list(tasks), NOW, limit=100)
    assert {i.worker for i in items} == {"n1"}
    assert set(d.live_workers()) == {"n1"}
    d.report("n2", 10)
    items, _ = d.plan(list(tasks), NOW, limit=100)
    assert {i.worker for i in items} == {"n2"}  # n1's capacity went to the first plan


def test_items_given_back_free_their_worker_capacity_and_flow_slot() -> None:
    tasks = {k: _task(k) for k in "abc"}
    d = _dispatcher(tasks, local_free=0)
    d.report("n2", 3)
    flows = FlowControl(credit_ms=10)
    items, _ = d.plan(["a", "b", "c"], NOW, limit=10, flows=flows)
    assert d.live_workers()["n2"] == 0 and flows.in_flight == 3
    refused = DispatchPlan.refused(items, [None, "refused", "refused"])  # the entry's results, item by item
    assert refused == items[1:]
    d.give_back(refused, flows)
    assert d.live_workers()["n2"] == 2 and flows.in_flight == 1


def _fire(fid: str, attempt: int = 1, deadline: int = NOW + 100, kind: FireKind = FireKind.CALLBACK) -> FireRecord:
    return FireRecord(
        fire_id=fid, task_id=fid.split("-")[0], kind=kind, attempt=attempt, worker="n2", deadline_ms=deadline,
        dispatched_ms=NOW,
    )


def test_monitor_reports_a_fire_lost_only_if_the_same_attempt_is_still_in_flight_at_its_deadline() -> None:
    store = {"a-1": _fire("a-1"), "b-1": _fire("b-1", attempt=2), "c-1": _fire("c-1", kind=FireKind.ACK)}
    m = FireWatch(store.get)
    m.watch([_fire("a-1"), _fire("b-1"), _fire("c-1"), _fire("d-1")])  # b and c moved on, d answered
    assert m.in_flight == 4 and m.next_deadline() == NOW + 100
    assert m.due(NOW + 99) == []
    lost = m.due(NOW + 100)
    assert [(r.fire_id, r.outcome, r.attempt) for r in lost] == [("a-1", Outcome.LOST, 1)]
    assert m.in_flight == 0 and m.next_deadline() is None
    assert m.due(NOW + 10_000) == []


def test_monitor_answered_fires_stop_counting_as_in_flight() -> None:
    m = FireWatch(lambda _fid: None)
    m.watch([_fire("a-1")])
    m.answered("a-1")
    assert m.in_flight == 0


def test_a_late_result_of_an_earlier_attempt_leaves_the_open_attempt_in_flight() -> None:
    m = FireWatch(lambda _fid: None)
    m.watch([_fire("a-1", attempt=2)])
    m.answered("a-1", attempt=1)  # the lost worker's late answer for attempt 1
    assert m.in_flight == 1
    m.answered("a-1", attempt=2)
    assert m.in_flight == 0


def test_a_member_speaking_for_a_fire_planned_for_another_worker_is_not_taken() -> None:
    """A worker's results name itself (checked at the port); one that reports a fire whose open
    attempt was planned for another worker is dropped here: taken, it ended the fire's watch (no
    deadline any more) and freed its flow slot, though the state machine refuses it."""
    m = FireWatch(lambda _fid: None)
    m.watch([_fire("a-1"), _fire("b-1")])  # both planned for n2

    def result(fid: str, worker: str) -> ResultItem:
        return ResultItem(fire_id=fid, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
                          response_head="", latency_ms=1, worker=worker, attempt=1)

    ok, wrong = m.from_their_workers([result("a-1", "n3"), result("b-1", "n2"), result("z-1", "n3")])
    assert [it.fire_id for it in ok] == ["b-1", "z-1"]  # z-1 is not watched: the state machine judges it
    assert [(it.fire_id, it.worker) for it in wrong] == [("a-1", "n3")]
    assert m.in_flight == 2 and m.workers() == ["n2"]
    everything = [result("b-1", "n2")]
    assert m.from_their_workers(everything) == (everything, [])


def test_a_late_result_of_an_attempt_settled_lost_is_taken_only_from_the_worker_it_was_planned_for() -> None:
    """An attempt settled lost (its deadline passed, its worker silent, or gone from the worker's
    heartbeat) is no longer watched; its worker may still answer it, and that late result goes on
    record. Another member reporting it was taken too, so a result of an attempt it never had went
    on record as if sent. Now the watch remembers who each settled attempt was planned for."""
    store = {"a-1": _fire("a-1"), "b-1": _fire("b-1"), "c-1": _fire("c-1")}
    m = FireWatch(store.get)
    m.watch(store.values())
    assert [r.fire_id for r in m.due(NOW + 100)] == ["a-1", "b-1", "c-1"]  # all three on n2, past their deadline

    def result(fid: str, worker: str, attempt: int = 1) -> ResultItem:
        return ResultItem(fire_id=fid, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
                          response_head="", latency_ms=1, worker=worker, attempt=attempt)

    ok, wrong = m.from_their_workers([result("a-1", "n2"), result("b-1", "n3"), result("c-1", "n3", attempt=2),
                                      result("z-1", "n3")])
    assert [(it.fire_id, it.worker) for it in ok] == [("a-1", "n2"), ("c-1", "n3"), ("z-1", "n3")]
    assert [(it.fire_id, it.worker) for it in wrong] == [("b-1", "n3")]  # n2's attempt, reported by n3


def test_fires_on_a_worker_silent_for_worker_lost_ms_are_settled_at_once_not_at_their_deadline() -> None:
    far = NOW + 60_000
    store = {
        "a-1": _fire("a-1", deadline=far),
        "b-1": dataclasses.replace(_fire("b-1", deadline=far), worker="n3"),
        "c-1": _fire("c-1", attempt=2, deadline=far),  # moved on meanwhile (its result committed)
        "l-1": dataclasses.replace(_fire("l-1", deadline=far), worker="n1"),  # the leader's own pool
    }
    fw = FireWatch(store.get)
    fw.watch([store["a-1"], store["b-1"], _fire("c-1", deadline=far), store["l-1"]])
    ww = WorkerWatch("n1", lost_ms=2_000, start_ms=NOW)
    ww.heard("n2", NOW + 500)
    ww.heard("n3", NOW + 1_500)
    assert ww.lost(fw.workers(), NOW + 2_400) == []
    assert ww.next_check(fw.workers()) == NOW + 2_500
    gone = ww.lost(fw.workers(), NOW + 2_500)
    assert gone == ["n2"]
    lost = fw.on_lost_workers(gone)
    assert [(r.fire_id, r.outcome, r.attempt, r.worker) for r in lost] == [("a-1", Outcome.LOST, 1, "n2")]
    assert fw.in_flight == 2 and sorted(fw.workers()) == ["n1", "n3"]
    assert ww.take_lost() == ("n2",)
    ww.heard("n2", NOW + 3_000)  # back: usable again
    assert ww.take_lost() == () and ww.lost(["n1"], far + 1) == []
    # the deadline backstop no longer reports the settled fire once its result is on record
    del store["a-1"]
    assert [r.fire_id for r in fw.due(far)] == ["b-1", "l-1"]


def test_an_open_fire_a_live_worker_no_longer_holds_is_settled_once_it_had_time_to_arrive() -> None:
    far = NOW + 60_000
    store = {f: _fire(f, deadline=far) for f in ("old-1", "held-1", "new-1", "gone-1")}
    fw = FireWatch(store.get)
    fw.watch([store["old-1"]])  # from a previous term (Rebuild): never sent by this leader
    fw.watch([store["held-1"], store["gone-1"]], now_ms=NOW)
    fw.watch([store["new-1"]], now_ms=NOW + 900)  # may still be on its way to the worker
    lost = fw.not_held("n2", frozenset({"held-1"}), watched_by_ms=NOW + 1_500 - 1_000)
    assert sorted(r.fire_id for r in lost) == ["gone-1", "old-1"]
    assert all(r.outcome is Outcome.LOST and r.attempt == 1 for r in lost)
    assert fw.in_flight == 2
    assert fw.not_held("n3", frozenset(), watched_by_ms=far) == []  # nothing open on n3


def test_heartbeats_of_older_workers_hold_nothing_known() -> None:
    assert decode_heartbeat(msgpack.packb(7)) == WorkerHeartbeat(7, None, None)
    assert decode_heartbeat(heartbeat_frame(3, ["a-1"])[1:]) == WorkerHeartbeat(3, frozenset({"a-1"}), FIRE_BATCH_VERSION)
    assert decode_heartbeat(heartbeat_frame(3, None)[1:]) == WorkerHeartbeat(3, None, None)


def test_a_worker_never_heard_from_in_a_new_term_counts_from_the_term_start() -> None:
    ww = WorkerWatch("n1", lost_ms=2_000, start_ms=NOW)
    assert ww.next_check(["n2"]) == NOW + 2_000
    assert ww.lost(["n2"], NOW + 1_999) == []
    assert ww.lost(["n2"], NOW + 2_000) == ["n2"]


def test_a_deposed_leader_silent_since_before_the_election_is_lost_counting_from_its_last_raft_contact() -> None:
    # the new leader last heard n2 (the old leader) 800 ms before its term began, n3 (a voter) 10 ms before
    ww = WorkerWatch("n1", lost_ms=2_000, start_ms=NOW, heard={"n2": NOW - 800, "n3": NOW - 10, "n1": NOW - 5_000})
    assert ww.next_check(["n1", "n2", "n3"]) == NOW + 1_200
    assert ww.lost(["n1", "n2", "n3"], NOW + 1_200) == ["n2"]
    assert ww.lost(["n3"], NOW + 1_989) == [] and ww.lost(["n3"], NOW + 1_990) == ["n3"]
    ww.heard("n2", NOW + 1_500)  # it came back (SIGCONT): usable again
    assert "n2" not in ww.take_lost()


def test_a_worker_the_monitor_counts_lost_gets_no_fires_until_it_reports_again() -> None:
    tasks = {f"t{i}": _task(f"t{i}") for i in range(4)}
    d = _dispatcher(tasks, local_free=2)
    d.report("n2", 10)
    d.forget("n2")
    items, _ = d.plan(list(tasks), NOW, limit=10)
    assert {i.worker for i in items} == {"n1"} and len(items) == 2
    d.report("n2", 10)
    assert "n2" in d.live_workers()


def test_cleaner_proposes_at_most_the_rate_once_a_second_and_one_at_a_time() -> None:
    seen: list[tuple[int, int]] = []

    def scan(before: int, limit: int) -> list[ExpireItem]:
        seen.append((before, limit))
        return [ExpireItem(f"t{i}", 0) for i in range(limit)]

    c = ExpiryScan(scan, retention_minutes=1, rate_limit_qps=5)
    cmd = c.run(NOW)
    assert cmd is not None and len(cmd.items) == 5 and seen == [(NOW - 60_000, 5)]
    assert c.run(NOW + 2_000) is None  # busy until done
    c.done(5)
    assert c.run(NOW + 500) is None  # not before a second has passed
    assert c.run(NOW + 1_000) is not None
    assert c.expired == 5


def test_cleaner_trims_the_audit_trail_only_when_nothing_else_expires() -> None:
    tasks: list[ExpireItem] = [ExpireItem("t1", 0)]
    points: list[int | None] = [7, None]
    asked: list[int] = []

    def trim(now: int) -> int | None:
        asked.append(now)
        return points.pop(0)

    c = ExpiryScan(lambda b, n: tasks[:n], retention_minutes=1, rate_limit_qps=5, trim_audit=trim)
    first = c.run(NOW)
    assert isinstance(first, Expire) and asked == []  # tasks first
    c.done(1)
    tasks.clear()
    cmd = c.run(NOW + 1_000)
    assert isinstance(cmd, TrimAudit) and cmd.before_index == 7 and asked == [NOW + 1_000]
    c.done(0)
    assert c.run(NOW + 2_000) is None and c.expired == 1 and c.dead_expired == 0


def test_leader_wheel_fills_its_window_then_follows_adds_and_removes() -> None:
    index = [(NOW + 20, "b"), (NOW + 50, "a"), (NOW + 60_000, "far")]

    def read(start: tuple[int, str], until: int, limit: int) -> list[tuple[int, str]]:
        return [r for r in index if r >= start and r[0] < until][:limit]

    w = LeaderWheel(10, NOW, horizon_ms=10_000, slice_limit=1)
    assert w.fill(read, NOW) == 2  # "far" is beyond the horizon: left in the index
    w.apply([WheelRemove("a"), WheelAdd("c", NOW + 30), WheelAdd("b", NOW + 40), WheelAdd("d", NOW + 20_000)])
    assert len(w) == 2  # b and c; d only in the index
    assert w.advance(NOW + 35) == ["c"]
    assert w.advance(NOW + 100) == ["b"]
