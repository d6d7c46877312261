"""Every transition of docs/architecture.md#task-rules, driven through machine.apply on an in-memory state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from molens.fsm.commands import (
    Command,
    CreateItem,
    CreateTasks,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    ExpireItem,
    PauseTasks,
    PutMeta,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
)
from molens.fsm.machine import (
    DEFAULT_CONFIG,
    Applied,
    Created,
    SendFire,
    WheelAdd,
    WheelRemove,
    expired_fires,
    reconcile_on_leadership,
)
from molens.fsm.memstate import MemoryState
from molens.model import (
    ExecutionResult,
    FireKind,
    IllegalTransitionError,
    NotFoundError,
    Outcome,
    Status,
    Task,
    new_task_id,
    validate_create,
)

T0 = 1_700_000_000_000
URL = "http://127.0.0.1:9/cb"
ACK = "http://127.0.0.1:9/ack"


class H:
    """A tiny driver: create tasks, fire them when due, answer the fires."""

    def __init__(self) -> None:
        self.s = MemoryState()
        self.now = T0
        self.n = 0

    def apply(self, cmd: Command) -> Applied:
        return self.s.apply(cmd)

    def create(self, **req: Any) -> Task:
        r: dict[str, Any] = {"type": "delayed", "interval_ms": 1000, "callback_url": URL}
        r.update(req)
        spec = validate_create(r, now_ms=self.now)
        self.n += 1
        out = self.apply(CreateTasks(self.now, (CreateItem(new_task_id(self.now, self.n), spec),)))
        c = out.results[0]
        assert isinstance(c, Created)
        return c.task

    def t(self, tid: str) -> Task:
        t = self.s.get_task(tid)
        assert t is not None
        return t

    def dispatch(self, tid: str, worker: str = "w1", attempt: int | None = None) -> Applied:
        t = self.t(tid)
        if attempt is None:
            attempt = (t.ack_attempt if t.status is Status.AWAITING_ACK else t.attempt) + 1
        return self.apply(
            Dispatched(self.now, (DispatchItem(
                fire_id=t.fire_id, task_id=tid, attempt=attempt, worker=worker, deadline_ms=self.now +
                t.spec.timeout_ms + 1000,
            ),))
        )

    def fire_due(self, tid: str) -> SendFire:
        """Advance to the task's due time, dispatch, and return the fire request."""
        due = self.t(tid).due_ms
        assert due is not None, self.t(tid)
        self.now = max(self.now, due)
        out = self.dispatch(tid)
        assert out.results == [None], out.results
        reqs = [e for e in out.effects if isinstance(e, SendFire)]
        assert len(reqs) == 1
        return reqs[0]

    def answer(
        self, tid: str, code: int | None = 200, outcome: Outcome = Outcome.RESPONSE, after_ms: int = 50
    ) -> Applied:
        t = self.t(tid)
        assert t.inflight is not None
        f = self.s.get_fire(t.inflight)
        assert f is not None
        self.now += after_ms
        return self.apply(
            Results(self.now, (ResultItem(
                fire_id=f.fire_id, kind=f.kind, status_code=code, outcome=outcome, response_head="body",
                latency_ms=after_ms, worker="w1", attempt=f.attempt,
            ),))
        )

    def cycle(self, tid: str, code: int | None = 200, outcome: Outcome = Outcome.RESPONSE) -> SendFire:
        fr = self.fire_due(tid)
        self.answer(tid, code, outcome)
        return fr


@pytest.fixture
def h() -> H:
    return H()


# ------------------------------------------------------------------ create, idempotency


def test_create_delayed_schedules_first_occurrence(h: H) -> None:
    spec = validate_create({"type": "delayed", "interval_ms": 5000, "callback_url": URL}, now_ms=T0)
    out = h.apply(CreateTasks(T0, (CreateItem("A" * 26, spec),)))
    t = out.results[0].task
    assert out.results[0].created and t.status is Status.PENDING
    assert t.due_ms == T0 + 5000 and t.seq == 1 and t.fire_id == "A" * 26 + "-1"
    assert out.effects == [WheelAdd("A" * 26, T0 + 5000, new=True)]


def test_create_delayed_run_at_in_the_past_fires_now(h: H) -> None:
    t = h.create(interval_ms=None, run_at=T0 - 10_000)
    assert t.due_ms == T0 - 10_000
    assert h.dispatch(t.id).results == [None]


def test_same_idempotency_key_returns_first_task(h: H) -> None:
    a = h.create(idempotency_key="k")
    spec = validate_create({"type": "delayed", "interval_ms": 7, "callback_url": URL, "idempotency_key": "k"})
    out = h.apply(CreateTasks(h.now, (CreateItem("Z" * 26, spec), CreateItem("Y" * 26, spec))))
    assert [r.created for r in out.results] == [False, False]
    assert all(r.task == a for r in out.results)
    assert len(h.s.tasks) == 1 and out.effects == []


def test_idempotency_key_within_one_batch(h: H) -> None:
    spec = validate_create({"type": "delayed", "interval_ms": 7, "callback_url": URL, "idempotency_key": "k"})
    out = h.apply(CreateTasks(h.now, (CreateItem("Z" * 26, spec), CreateItem("Y" * 26, spec))))
    assert [r.created for r in out.results] == [True, False]
    assert out.results[1].task.id == "Z" * 26


def test_replayed_create_with_same_id_is_not_duplicated(h: H) -> None:
    spec = validate_create({"type": "delayed", "interval_ms": 7, "callback_url": URL})
    cmd = CreateTasks(h.now, (CreateItem("Z" * 26, spec),))
    h.apply(cmd)
    assert h.apply(cmd).results[0].created is False and len(h.s.tasks) == 1


# ------------------------------------------------------------------ dispatch


def test_dispatch_refused_more_than_the_dispatch_lead_before_due(h: H) -> None:
    t = h.create(interval_ms=DEFAULT_CONFIG.max_dispatch_lead_ms + 1)
    out = h.dispatch(t.id)
    assert isinstance(out.results[0], IllegalTransitionError) and h.s.fires == {}
    assert h.t(t.id).status is Status.PENDING and h.t(t.id).due_ms == t.due_ms


def test_dispatch_ahead_within_the_lead_carries_the_due_time_as_not_before(h: H) -> None:
    lead = DEFAULT_CONFIG.max_dispatch_lead_ms
    t = h.create(interval_ms=lead)
    out = h.dispatch(t.id)
    assert out.results == [None]
    fr = next(e for e in out.effects if isinstance(e, SendFire))
    assert t.due_ms == h.now + lead and fr.not_before_ms == t.due_ms
    # the fire counts as made at its due time, not when it was planned
    assert h.t(t.id).last_fire_ms == t.due_ms and fr.fire.dispatched_ms == h.now


def test_dispatch_plans_a_fire_with_headers_material(h: H) -> None:
    t = h.create(payload={"a": 1}, scene="s1", timeout_ms=700)
    fr = h.fire_due(t.id)
    assert fr.fire.fire_id == f"{t.id}-1" and fr.fire.attempt == 1 and fr.fire.kind is FireKind.CALLBACK
    assert (fr.url, fr.body, fr.scene, fr.timeout_ms) == (URL, b'{"a":1}', "s1", 700)
    nt = h.t(t.id)
    assert nt.status is Status.FIRING and nt.due_ms is None and nt.inflight == fr.fire.fire_id


def test_no_second_fire_while_one_is_in_flight(h: H) -> None:
    t = h.create()
    h.fire_due(t.id)
    out = h.dispatch(t.id, attempt=2)
    assert isinstance(out.results[0], IllegalTransitionError)
    assert len(h.s.fires) == 1


def test_stale_fire_id_or_attempt_refused(h: H) -> None:
    t = h.create()
    h.now = t.due_ms or 0
    out = h.apply(Dispatched(h.now, (DispatchItem(
        fire_id=f"{t.id}-2", task_id=t.id, attempt=1, worker="w", deadline_ms=h.now + 1,
    ),)))
    assert isinstance(out.results[0], IllegalTransitionError)
    assert isinstance(h.dispatch(t.id, attempt=3).results[0], IllegalTransitionError)


def test_dispatch_unknown_task_is_not_found(h: H) -> None:
    out = h.apply(Dispatched(h.now, (DispatchItem(
        fire_id="x-1", task_id="x", attempt=1, worker="w", deadline_ms=1,
    ),)))
    assert isinstance(out.results[0], NotFoundError)


# ------------------------------------------------------------------ results: delayed


def test_delayed_success_is_done_and_recorded(h: H) -> None:
    t = h.create()
    h.cycle(t.id, 201)
    nt = h.t(t.id)
    assert nt.status is Status.DONE and nt.due_ms is None and nt.inflight is None
    assert nt.last_result is ExecutionResult.SUCCESS and nt.last_status_code == 201 and nt.last_response == "body"
    (e,) = h.s.executions
    assert (e.result, e.attempt, e.fire_id, e.kind) == (ExecutionResult.SUCCESS, 1, f"{t.id}-1", FireKind.CALLBACK)
    assert h.s.fires == {}


def test_delayed_404_fails(h: H) -> None:
    t = h.create()
    h.cycle(t.id, 404)
    assert h.t(t.id).status is Status.FAILED and h.t(t.id).last_result is ExecutionResult.NOT_FOUND


def test_at_least_once_retries_after_1_2_4_seconds_then_fails(h: H) -> None:
    t = h.create(max_retries=3)
    fire_ids, attempts = set(), []
    for expected_delay in (1000, 2000, 4000):
        fr = h.cycle(t.id, 500)
        fire_ids.add(fr.fire.fire_id)
        attempts.append(fr.fire.attempt)
        nt = h.t(t.id)
        assert nt.status is Status.FIRING and nt.due_ms == h.now + expected_delay
    fr = h.cycle(t.id, 503)
    attempts.append(fr.fire.attempt)
    fire_ids.add(fr.fire.fire_id)
    assert attempts == [1, 2, 3, 4] and fire_ids == {f"{t.id}-1"}
    assert h.t(t.id).status is Status.FAILED and h.t(t.id).due_ms is None
    assert [e.result for e in h.s.executions] == [ExecutionResult.FAILED] * 4


@pytest.mark.parametrize(
    ("outcome", "result"), [(Outcome.TIMEOUT, ExecutionResult.TIMEOUT), (Outcome.NETWORK_ERROR, ExecutionResult.NETWORK_ERROR)]
)
def test_timeout_and_network_error_are_retried(h: H, outcome: Outcome, result: ExecutionResult) -> None:
    t = h.create(max_retries=1)
    h.cycle(t.id, None, outcome)
    assert h.t(t.id).status is Status.FIRING and h.t(t.id).last_result is result
    h.cycle(t.id, 200)
    assert h.t(t.id).status is Status.DONE


def test_max_retries_zero_fails_at_once(h: H) -> None:
    t = h.create(max_retries=0)
    h.cycle(t.id, 500)
    assert h.t(t.id).status is Status.FAILED


def test_at_most_once_never_retries(h: H) -> None:
    t = h.create(reliability="at_most_once", max_retries=5)
    h.cycle(t.id, None, Outcome.TIMEOUT)
    assert h.t(t.id).status is Status.FAILED and len(h.s.executions) == 1


# ------------------------------------------------------------------ ack phase


def test_ack_phase_success(h: H) -> None:
    t = h.create(ack_url=ACK, ack_delay_ms=3000)
    h.cycle(t.id, 200)
    nt = h.t(t.id)
    assert nt.status is Status.AWAITING_ACK and nt.due_ms == h.now + 3000
    fr = h.fire_due(t.id)
    assert fr.fire.kind is FireKind.ACK and fr.url == ACK and fr.fire.fire_id == f"{t.id}-1" and fr.fire.attempt == 1
    h.answer(t.id, 204)
    assert h.t(t.id).status is Status.DONE and h.t(t.id).last_result is ExecutionResult.ACK_SUCCESS


def test_ack_failure_retries_up_to_ack_ttl_then_failed(h: H) -> None:
    t = h.create(ack_url=ACK, ack_delay_ms=1000)
    h.cycle(t.id, 200)
    for i in (1, 2):
        fr = h.cycle(t.id, 500)
        assert fr.fire.attempt == i
        assert h.t(t.id).status is Status.AWAITING_ACK and h.t(t.id).due_ms == h.now + 1000
    h.cycle(t.id, None, Outcome.TIMEOUT)
    assert h.t(t.id).status is Status.FAILED and h.t(t.id).last_result is ExecutionResult.ACK_FAILED
    assert [e.kind for e in h.s.executions] == [FireKind.CALLBACK] + [FireKind.ACK] * 3


def test_ack_second_probe_succeeds(h: H) -> None:
    t = h.create(ack_url=ACK)
    h.cycle(t.id, 200)
    h.cycle(t.id, 409)
    h.cycle(t.id, 200)
    assert h.t(t.id).status is Status.DONE


# ------------------------------------------------------------------ periodic


def test_periodic_success_schedules_next_fixed_rate_occurrence(h: H) -> None:
    t = h.create(type="periodic", interval_ms=10_000)
    assert t.due_ms == T0 + 10_000
    h.fire_due(t.id)
    h.answer(t.id, 200, after_ms=3_700)  # slow callback must not shift the schedule
    nt = h.t(t.id)
    assert nt.status is Status.PENDING and nt.due_ms == T0 + 20_000 and nt.seq == 2
    fr = h.cycle(t.id)
    assert fr.fire.fire_id == f"{t.id}-2"
    assert h.t(t.id).due_ms == T0 + 30_000


def test_periodic_never_drifts_over_many_occurrences(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000)
    for k in range(1, 50):
        fr = h.fire_due(t.id)
        assert h.now == T0 + k * 1000 and fr.fire.fire_id == f"{t.id}-{k}"
        h.answer(t.id, 200, after_ms=k * 7 % 900)


def test_periodic_404_goes_inactive(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000)
    h.cycle(t.id, 404)
    nt = h.t(t.id)
    assert nt.status is Status.INACTIVE and nt.due_ms is None and nt.last_result is ExecutionResult.NOT_FOUND


def test_periodic_goes_inactive_exactly_at_max_fails(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000, max_retries=0, max_fails=3)
    h.cycle(t.id, 500)
    h.cycle(t.id, 500)
    assert h.t(t.id).fail_count == 2 and h.t(t.id).status is Status.PENDING
    h.cycle(t.id, 500)
    assert h.t(t.id).fail_count == 3 and h.t(t.id).status is Status.INACTIVE


def test_periodic_fail_count_resets_on_success(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000, max_retries=0, max_fails=3)
    h.cycle(t.id, 500)
    h.cycle(t.id, 500)
    h.cycle(t.id, 200)
    assert h.t(t.id).fail_count == 0
    h.cycle(t.id, 500)
    h.cycle(t.id, 500)
    assert h.t(t.id).status is Status.PENDING


def test_periodic_occurrence_fails_only_after_its_retries(h: H) -> None:
    t = h.create(type="periodic", interval_ms=60_000, max_retries=2, max_fails=5)
    h.cycle(t.id, 500)
    h.cycle(t.id, 500)
    assert h.t(t.id).fail_count == 0 and h.t(t.id).seq == 1
    h.cycle(t.id, 500)
    nt = h.t(t.id)
    assert nt.fail_count == 1 and nt.seq == 2 and nt.due_ms == T0 + 120_000


def test_periodic_no_overlap_instants_passed_while_retrying_are_skipped(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000, max_retries=3, max_fails=10)
    # occurrence 1 retries for 1+2+4 s: occurrences at +2..+8 s are never started concurrently
    for _ in range(3):
        h.cycle(t.id, 500)
        assert h.t(t.id).seq == 1
    h.fire_due(t.id)
    h.answer(t.id, 500)
    nt = h.t(t.id)
    assert h.now == T0 + 8_200
    assert nt.seq == 2 and nt.due_ms == T0 + 9_000  # the next instant on the grid, no burst
    h.cycle(t.id, 200)
    assert h.t(t.id).due_ms == T0 + 10_000


def test_periodic_missed_while_down_collapse_into_the_one_late_fire(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000)
    h.now = T0 + 5_500  # the cluster was down: instants 1..5 s passed
    out = h.dispatch(t.id)
    assert out.results == [None]  # the overdue occurrence fires at once
    h.answer(t.id, 200)
    nt = h.t(t.id)
    assert nt.seq == 2 and nt.due_ms == T0 + 6_000  # and stood for all the missed ones


def test_periodic_instant_equal_to_now_fires_right_away(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000)
    h.fire_due(t.id)
    h.answer(t.id, 200, after_ms=1000)  # the answer arrives exactly at the next instant
    assert h.t(t.id).due_ms == h.now == T0 + 2_000


def test_periodic_ignores_ack_url(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000, ack_url=ACK)
    h.cycle(t.id, 200)
    assert h.t(t.id).status is Status.PENDING


# ------------------------------------------------------------------ failover / monitor


def test_lost_at_least_once_fire_is_refired_same_id_next_attempt(h: H) -> None:
    t = h.create()
    fr = h.fire_due(t.id)
    plan = reconcile_on_leadership(h.s, h.now)
    fires = list(plan.inflight)
    assert [f.fire_id for f in fires] == [fr.fire.fire_id]
    assert expired_fires(fires, h.now) == []
    h.now = fr.fire.deadline_ms
    (lost,) = expired_fires(fires, h.now)
    h.apply(Results(h.now, (lost,)))
    nt = h.t(t.id)
    assert nt.status is Status.FIRING and nt.due_ms == h.now and nt.last_result is ExecutionResult.LOST
    fr2 = h.fire_due(t.id)
    assert fr2.fire.fire_id == fr.fire.fire_id and fr2.fire.attempt == 2


def test_lost_at_most_once_fire_is_unknown_and_never_refired(h: H) -> None:
    t = h.create(reliability="at_most_once")
    fr = h.fire_due(t.id)
    h.now = fr.fire.deadline_ms
    h.apply(Results(h.now, tuple(expired_fires(list(h.s.scan_fires()), h.now))))
    nt = h.t(t.id)
    assert nt.status is Status.FAILED and nt.last_result is ExecutionResult.UNKNOWN and nt.due_ms is None
    assert isinstance(h.dispatch(t.id, attempt=2).results[0], IllegalTransitionError)
    # the real answer arriving late is stale
    late = h.apply(Results(h.now, (ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w1",
    ),)))
    assert isinstance(late.results[0], NotFoundError) and h.t(t.id).status is Status.FAILED


def test_lost_periodic_at_most_once_moves_on_without_counting_a_failure(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000, reliability="at_most_once")
    h.cycle(t.id, None, Outcome.LOST)
    nt = h.t(t.id)
    assert nt.status is Status.PENDING and nt.seq == 2 and nt.fail_count == 0


def test_reconcile_streams_due_entries_in_order(h: H) -> None:
    a = h.create(interval_ms=5000)
    b = h.create(interval_ms=1000)
    assert list(reconcile_on_leadership(h.s, h.now).due) == [(T0 + 1000, b.id), (T0 + 5000, a.id)]


def test_late_result_of_an_attempt_given_up_is_not_credited_to_the_retry(h: H) -> None:
    t = h.create(max_retries=3)
    fr = h.fire_due(t.id)
    h.now = fr.fire.deadline_ms
    h.apply(Results(h.now, (expired_fires(list(h.s.scan_fires()), h.now)[0],)))
    fr2 = h.fire_due(t.id)
    assert fr2.fire.attempt == 2
    late = ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w1", attempt=1,
    )
    out = h.apply(Results(h.now, (late,)))
    assert isinstance(out.results[0], NotFoundError)
    assert h.t(t.id).inflight == fr2.fire.fire_id and h.t(t.id).status is Status.FIRING  # no retry on top
    h.answer(t.id, 200)
    assert h.t(t.id).status is Status.DONE


def test_late_result_of_a_lost_attempt_is_recorded_in_the_history_and_changes_nothing(h: H) -> None:
    t = h.create(max_retries=3)
    fr = h.fire_due(t.id)
    h.now += 2_000  # the Monitor settles the attempt of a lost worker
    h.apply(Results(h.now, (expired_fires(list(h.s.scan_fires()), fr.fire.deadline_ms)[0],)))
    h.fire_due(t.id)
    before = h.t(t.id)
    late = ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
        response_head="ok", latency_ms=1, worker="w2", attempt=1,
    )
    out = h.apply(Results(h.now, (late,)))
    assert isinstance(out.results[0], NotFoundError) and h.t(t.id) == before
    rows = [(e.attempt, e.result, e.worker) for e in h.s.executions if e.task_id == t.id]
    assert rows == [(1, ExecutionResult.LOST, "w1"), (1, ExecutionResult.SUCCESS, "w2")]
    h.answer(t.id, 200)  # the re-sent attempt's answer applies as usual
    done = h.t(t.id)
    assert done.status is Status.DONE
    # still recorded after the re-sent attempt ended (the stopped worker came back later still)
    assert isinstance(h.apply(Results(h.now, (late,))).results[0], NotFoundError) and h.t(t.id) == done
    assert len([e for e in h.s.executions if e.task_id == t.id]) == 4


def test_late_result_of_an_unknown_at_most_once_fire_is_recorded_and_the_task_stays_failed(h: H) -> None:
    t = h.create(reliability="at_most_once")
    fr = h.fire_due(t.id)
    h.apply(Results(h.now, tuple(expired_fires(list(h.s.scan_fires()), fr.fire.deadline_ms))))
    before = h.t(t.id)
    late = ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w2", attempt=1,
    )
    assert isinstance(h.apply(Results(h.now, (late,))).results[0], NotFoundError)
    assert h.t(t.id) == before and before.status is Status.FAILED
    assert [e.result for e in h.s.executions if e.task_id == t.id] == [ExecutionResult.UNKNOWN, ExecutionResult.SUCCESS]


def test_duplicate_result_is_ignored(h: H) -> None:
    t = h.create(max_retries=3)
    fr = h.fire_due(t.id)
    item = ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w1",
    )
    h.apply(Results(h.now, (item,)))
    snapshot = h.t(t.id)
    out = h.apply(Results(h.now, (item,)))
    assert isinstance(out.results[0], NotFoundError) and h.t(t.id) == snapshot


def test_result_from_a_worker_the_fire_was_not_dispatched_to_changes_nothing(h: H) -> None:
    t = h.create(max_retries=3)
    fr = h.fire_due(t.id)
    before, fire = h.t(t.id), h.s.get_fire(fr.fire.fire_id)
    n_exec = len(h.s.executions)
    forged = ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w2", attempt=fr.fire.attempt,
    )
    out = h.apply(Results(h.now, (forged,)))
    assert isinstance(out.results[0], IllegalTransitionError) and out.effects == []
    assert h.t(t.id) == before and h.s.get_fire(fr.fire.fire_id) == fire and len(h.s.executions) == n_exec
    assert h.answer(t.id, 200).results == [None]  # the worker it went to still answers for it
    assert h.t(t.id).status is Status.DONE and h.s.get_fire(fr.fire.fire_id) is None


# ------------------------------------------------------------------ pause / resume / trigger / delete


def test_pause_removes_from_wheel_and_resume_reschedules(h: H) -> None:
    t = h.create(interval_ms=5000)
    out = h.apply(PauseTasks(h.now, (t.id,)))
    assert out.effects == [WheelRemove(t.id)] and h.t(t.id).status is Status.PAUSED
    assert isinstance(h.apply(PauseTasks(h.now, (t.id,))).results[0], IllegalTransitionError)
    h.now += 1000
    out = h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).status is Status.PENDING and h.t(t.id).due_ms == T0 + 5000
    assert out.effects == [WheelAdd(t.id, T0 + 5000)]


def test_resume_delayed_whose_time_passed_fires_now(h: H) -> None:
    t = h.create(interval_ms=5000)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now += 60_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == h.now


def test_resume_periodic_skips_what_was_missed_while_paused(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now += 10_500
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == T0 + 11_000


@pytest.mark.parametrize("code", [200, 404])
def test_illegal_transitions_answer_409(h: H, code: int) -> None:
    t = h.create()
    h.cycle(t.id, code)  # done or failed
    for cmd in (PauseTasks(h.now, (t.id,)), ResumeTasks(h.now, (t.id,)), TriggerTask(h.now, t.id)):
        r = h.apply(cmd).results[0]
        assert isinstance(r, IllegalTransitionError) and r.http_status == 409


def test_resume_of_pending_task_is_illegal(h: H) -> None:
    t = h.create()
    assert isinstance(h.apply(ResumeTasks(h.now, (t.id,))).results[0], IllegalTransitionError)


def test_operations_on_unknown_task_are_404(h: H) -> None:
    for cmd in (
        PauseTasks(h.now, ("nope",)),
        ResumeTasks(h.now, ("nope",)),
        TriggerTask(h.now, "nope"),
        DeleteTasks(h.now, ("nope",)),
    ):
        r = h.apply(cmd).results[0]
        assert isinstance(r, NotFoundError) and r.http_status == 404


def test_pause_while_in_flight_then_success_completes_delayed(h: H) -> None:
    t = h.create()
    h.fire_due(t.id)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.answer(t.id, 200)
    assert h.t(t.id).status is Status.DONE


def test_pause_while_in_flight_periodic_stays_paused_then_resumes(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000)
    h.fire_due(t.id)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.answer(t.id, 200)
    nt = h.t(t.id)
    assert nt.status is Status.PAUSED and nt.due_ms is None and nt.inflight is None
    h.now += 5_200
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).status is Status.PENDING and h.t(t.id).due_ms == T0 + 7000


def test_pause_during_retries_resumes_the_retry_chain(h: H) -> None:
    t = h.create(max_retries=3)
    h.cycle(t.id, 500)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now += 100_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    nt = h.t(t.id)
    assert nt.status is Status.FIRING and nt.due_ms == h.now and nt.seq == 1
    assert h.fire_due(t.id).fire.attempt == 2


def test_pause_during_ack_phase_resumes_ack_phase(h: H) -> None:
    t = h.create(ack_url=ACK)
    h.cycle(t.id, 200)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).status is Status.AWAITING_ACK
    assert h.fire_due(t.id).fire.kind is FireKind.ACK


@pytest.mark.parametrize("ack_from", [True, False])
@pytest.mark.parametrize("paused_first", [True, False])
def test_resume_in_the_ack_phase_keeps_ack_delay(h: H, ack_from: bool, paused_first: bool) -> None:
    """Paused while the callback is out (its 2xx applied while paused) or after it (waiting for the
    probe), then resumed soon after: the probe goes ``ack_delay_ms`` after the 2xx, not at the
    resume. A ``Results`` entry of the release before (no ``ack_from``) leaves no time to wait from,
    and the probe goes at the resume, as that release did."""
    t = h.create(ack_url=ACK, ack_delay_ms=10_000)
    h.fire_due(t.id)
    if paused_first:
        h.apply(PauseTasks(h.now, (t.id,)))
    r = h.t(t.id)
    f = h.s.get_fire(r.inflight or "")
    assert f is not None
    h.now += 50
    h.apply(Results(h.now, (ResultItem(
        fire_id=f.fire_id, kind=f.kind, status_code=200, outcome=Outcome.RESPONSE, response_head="",
        latency_ms=50, worker="w1", attempt=f.attempt,
    ),), ack_from))
    ok_at = h.now
    assert h.t(t.id).ack_from_ms == (ok_at if ack_from else None)
    if not paused_first:
        assert h.t(t.id).due_ms == ok_at + 10_000
        h.now += 1_000
        h.apply(PauseTasks(h.now, (t.id,)))
    h.now += 2_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    nt = h.t(t.id)
    assert nt.status is Status.AWAITING_ACK and nt.due_ms == (ok_at + 10_000 if ack_from else h.now)
    h.now = ok_at + 20_000  # resumed after the delay: the probe is due at once
    h.apply(PauseTasks(h.now, (t.id,)))
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == h.now


def test_a_failed_probe_held_by_a_pause_waits_ack_delay_from_the_failure(h: H) -> None:
    t = h.create(ack_url=ACK, ack_delay_ms=10_000)
    h.cycle(t.id, 200)
    fr = h.fire_due(t.id)
    assert fr.fire.kind is FireKind.ACK
    h.now += 50
    h.apply(Results(h.now, (ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.ACK, status_code=500, outcome=Outcome.RESPONSE, response_head="",
        latency_ms=50, worker="w1", attempt=fr.fire.attempt,
    ),), ack_from=True))
    failed_at = h.now
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now += 3_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == failed_at + 10_000 and h.t(t.id).ack_attempt == 1


def test_resume_inactive_periodic_resets_fail_count(h: H) -> None:
    t = h.create(type="periodic", interval_ms=1000, max_retries=0, max_fails=1)
    h.cycle(t.id, 500)
    assert h.t(t.id).status is Status.INACTIVE
    h.now += 300
    h.apply(ResumeTasks(h.now, (t.id,)))
    nt = h.t(t.id)
    assert nt.status is Status.PENDING and nt.fail_count == 0 and nt.seq == 2 and nt.due_ms == T0 + 2000


def test_trigger_runs_now_and_periodic_schedule_continues(h: H) -> None:
    t = h.create(type="periodic", interval_ms=60_000)
    h.now += 5_000
    h.apply(TriggerTask(h.now, t.id))
    assert h.t(t.id).due_ms == h.now
    h.cycle(t.id)
    assert h.t(t.id).due_ms == T0 + 60_000 and h.t(t.id).seq == 2


def test_trigger_delayed_runs_now(h: H) -> None:
    t = h.create(interval_ms=3_600_000)
    h.apply(TriggerTask(h.now, t.id))
    h.cycle(t.id)
    assert h.t(t.id).status is Status.DONE


def test_trigger_while_firing_or_paused_is_illegal(h: H) -> None:
    t = h.create()
    h.fire_due(t.id)
    assert isinstance(h.apply(TriggerTask(h.now, t.id)).results[0], IllegalTransitionError)
    u = h.create()
    h.apply(PauseTasks(h.now, (u.id,)))
    assert isinstance(h.apply(TriggerTask(h.now, u.id)).results[0], IllegalTransitionError)


def test_delete_removes_task_fire_key_and_history(h: H) -> None:
    t = h.create(idempotency_key="k", max_retries=2)
    h.cycle(t.id, 500)
    fr = h.fire_due(t.id)
    out = h.apply(DeleteTasks(h.now, (t.id,)))
    assert out.results[0].id == t.id and out.writes.history_deletes == [t.id]
    assert h.s.tasks == {} and h.s.fires == {} and h.s.idem == {} and h.s.executions == []
    late = h.apply(Results(h.now, (ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
        response_head="", latency_ms=1, worker="w1",
    ),)))
    assert isinstance(late.results[0], NotFoundError) and h.s.executions == []
    assert h.create(idempotency_key="k").id != t.id  # the key is free again


def test_delete_pending_emits_wheel_remove(h: H) -> None:
    t = h.create()
    assert h.apply(DeleteTasks(h.now, (t.id,))).effects == [WheelRemove(t.id)]


def test_expire_only_terminal_and_unchanged(h: H) -> None:
    a = h.create()
    b = h.create()
    h.cycle(b.id)
    done = h.t(b.id)
    out = h.apply(Expire(h.now, (ExpireItem(a.id, a.updated_ms), ExpireItem(b.id, done.updated_ms - 1))))
    assert out.results == [False, False]
    out = h.apply(Expire(h.now, (ExpireItem(b.id, done.updated_ms),)))
    assert out.results == [True] and set(h.s.tasks) == {a.id}


def test_put_meta(h: H) -> None:
    h.apply(PutMeta(h.now, "membership", b"x"))
    assert h.s.meta == {"membership": b"x"}
    h.apply(PutMeta(h.now, "membership", None))
    assert h.s.meta == {}


# ------------------------------------------------------------------ cron

def test_cron_periodic_fires_on_cron_instants(h: H) -> None:
    h.now = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    t = h.create(type="periodic", interval_ms=None, cron_expr="*/15 * * * * *")
    assert t.due_ms == 1_700_000_010_000
    assert t.spec.max_fails == 100
    h.cycle(t.id)
    assert h.t(t.id).due_ms == 1_700_000_025_000


def test_cron_auto_max_fails_uses_the_cron_period(h: H) -> None:
    t = h.create(type="periodic", interval_ms=None, cron_expr="0 * * * *")
    assert t.spec.max_fails == 3


def _utc(*a: int) -> int:
    return int(datetime(*a, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("tz", "start", "expected"),
    [
        # 02:30 does not exist on 2026-03-29 in Berlin: it fires once at 03:00 CEST (01:00 UTC)
        ("Europe/Berlin", _utc(2026, 3, 27, 12), [_utc(2026, 3, 28, 1, 30), _utc(2026, 3, 29, 1), _utc(2026, 3, 30, 0, 30)]),
        # 01:30 happens twice on 2026-11-01 in New York: it fires once, on the first pass (EDT)
        ("America/New_York", _utc(2026, 10, 30, 12), [_utc(2026, 10, 31, 5, 30), _utc(2026, 11, 1, 5, 30), _utc(2026, 11, 2, 6, 30)]),
    ],
)
def test_cron_task_fires_once_across_dst_changes(h: H, tz: str, start: int, expected: list[int]) -> None:
    h.now = start
    expr = "30 2 * * *" if tz == "Europe/Berlin" else "30 1 * * *"
    t = h.create(type="periodic", interval_ms=None, cron_expr=expr, timezone=tz)
    got = []
    for _ in expected:
        got.append(h.cycle(t.id).fire.dispatched_ms)
    assert got == expected


def test_response_head_kept_to_512_characters_and_task_json_round_trips(h: H) -> None:
    t = h.create(payload={"k": [1, "é"]}, idempotency_key="key")
    fr = h.fire_due(t.id)
    h.apply(Results(h.now, (ResultItem(
        fire_id=fr.fire.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
        response_head="x" * 600, latency_ms=3, worker="w1", attempt=1,
    ),)))
    nt = h.t(t.id)
    assert nt.last_response == "x" * 512 and h.s.executions[-1].response_head == "x" * 512
    j = nt.to_json()
    assert j["payload"] == {"k": [1, "é"]} and j["status"] == "done" and j["last_outcome"] == "success"
    assert Task.from_json(j).to_json() == j


def test_periodic_without_a_next_instant_goes_inactive(h: H, monkeypatch: pytest.MonkeyPatch) -> None:
    from molens.fsm import machine

    t = h.create(type="periodic", interval_ms=1000)
    h.fire_due(t.id)

    def no_more(*a: object) -> int:
        raise ValueError("no next fire")

    monkeypatch.setattr(machine, "next_after_misfire", no_more)
    monkeypatch.setattr(machine, "next_scheduled", no_more)
    h.answer(t.id, 200)
    assert h.t(t.id).status is Status.INACTIVE and h.t(t.id).due_ms is None
