"""Overlap of periodic occurrences (docs/architecture.md#overlap), through machine.apply: instants
that come due while an occurrence runs are skipped (``skip``, the default), the first of them
fires as soon as it ended (``buffer_one``), told apart from instants missed before it started,
which follow ``catchup``, or each fires at its time beside the running ones (``allow``)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from molens.errors import ValidationError
from molens.fsm.commands import (
    BackfillTask,
    Command,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    ExpireItem,
    PauseTasks,
    RedriveDeadLetters,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
    UpdateTask,
)
from molens.fsm.machine import SendFire, WheelAdd
from molens.model import (
    ExecutionResult,
    IllegalTransitionError,
    NotFoundError,
    Outcome,
    Reliability,
    Status,
    Task,
    validate_create,
)
from molens.schema import MAX_RUNNING
from tests.unit.test_catch_up import IV
from tests.unit.test_fsm_machine import URL, H


def _periodic(h: H, **kw: object) -> Task:
    return h.create(type="periodic", interval_ms=IV, **kw)


def _skips(h: H) -> list[str]:
    return [e.response_head or "" for e in h.s.executions if e.result is ExecutionResult.SKIPPED]


def _slow(h: H, tid: str, until: int) -> int:
    """Fire the task when due and answer 200 at ``until``; the instant it fired."""
    fr = h.fire_due(tid)
    h.answer(tid, 200, after_ms=until - h.now)
    return fr.scheduled_ms


def test_skip_drops_the_instants_that_came_due_while_the_occurrence_ran() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    assert t.spec.overlap == "skip"
    assert _slow(h, t.id, c + 45_000) == c + 10_000
    u = h.t(t.id)
    assert (u.sched_ms, u.due_ms, u.buffered) == (c + 50_000, c + 50_000, False)
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 20_000}, {c + 50_000}) ms: due while the "
                         "cluster was down, the task paused or an occurrence ran (catchup one)"]


def test_buffer_one_fires_the_first_instant_that_came_due_during_the_run_as_soon_as_it_ended() -> None:
    h = H()
    t = _periodic(h, overlap="buffer_one")
    c = t.created_ms
    _slow(h, t.id, c + 45_000)  # 20, 30 and 40 s came due while it ran
    u = h.t(t.id)
    assert (u.sched_ms, u.due_ms, u.buffered, u.seq) == (c + 20_000, c + 45_000, True, 2)
    assert _skips(h) == []
    fr = h.cycle(t.id)  # the buffered one, at once; then 30 and 40 s are in the past and came due before it started
    assert (fr.scheduled_ms, fr.not_before_ms) == (c + 20_000, c + 45_000)
    u = h.t(t.id)
    assert (u.sched_ms, u.buffered) == (c + 50_000, False)
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 30_000}, {c + 50_000}) ms: due while the "
                         "cluster was down, the task paused or an occurrence ran (catchup one)"]


def test_buffer_one_tells_instants_missed_before_the_start_from_those_due_during_the_run() -> None:
    h = H()
    t = _periodic(h, overlap="buffer_one")
    c = t.created_ms
    h.now = c + 35_000  # down: 10, 20 and 30 s passed before the occurrence started
    _slow(h, t.id, c + 37_000)  # nothing came due while it ran
    u = h.t(t.id)
    assert (u.sched_ms, u.buffered) == (c + 40_000, False)  # catchup one: the late fire stood for 20 and 30 s
    h2 = H()
    t2 = _periodic(h2, overlap="buffer_one")
    h2.now = c + 35_000
    _slow(h2, t2.id, c + 47_000)  # 40 s came due while it ran
    u2 = h2.t(t2.id)
    assert (u2.sched_ms, u2.due_ms, u2.buffered) == (c + 40_000, c + 47_000, True)
    assert _skips(h2) == [f"skipped the occurrences scheduled in [{c + 20_000}, {c + 40_000}) ms: due before the "
                          "occurrence started (catchup one)"]


def test_a_buffered_occurrence_is_not_skipped_by_catchup_none() -> None:
    h = H()
    t = _periodic(h, overlap="buffer_one", catchup="none")
    c = t.created_ms
    _slow(h, t.id, c + 45_000)
    fr = h.cycle(t.id)  # late (its next instant, 30 s, is due) yet it fires: it was buffered, not missed
    assert fr.scheduled_ms == c + 20_000


def test_the_run_of_an_occurrence_spans_its_retries() -> None:
    h = H()
    t = _periodic(h, overlap="buffer_one")
    c = t.created_ms
    h.cycle(t.id, code=500)  # attempt 1 at 10 s fails; the retry is due a second later
    assert h.t(t.id).started_ms == c + 10_000
    _slow(h, t.id, c + 25_000)  # attempt 2 answers at 25 s
    u = h.t(t.id)
    assert (u.sched_ms, u.buffered) == (c + 20_000, True)  # 20 s came due during the run that began at 10 s


def test_overlap_is_for_periodic_tasks() -> None:
    with pytest.raises(ValidationError) as e:
        validate_create({"type": "delayed", "interval_ms": 1_000, "callback_url": URL, "overlap": "buffer_one"})
    assert e.value.field == "overlap"
    with pytest.raises(ValidationError) as e:
        validate_create({"type": "periodic", "interval_ms": 1_000, "callback_url": URL, "overlap": "all"})
    assert e.value.field == "overlap" and "'skip' or 'buffer_one' or 'allow'" in str(e.value)
    spec = validate_create({"type": "delayed", "interval_ms": 1_000, "callback_url": URL, "overlap": "skip"})
    assert spec.overlap == "skip"


# -------------------------------------------------------------------------------------------------
# allow: each occurrence runs at its time beside the ones still running


def _fire_next(h: H, tid: str, fire_id: str | None = None) -> SendFire:
    """Advance to the task's next action (its occurrence or a running one's retry; the one of
    ``fire_id`` if given) and send it."""
    t = h.t(tid)
    action = next((a for a in t.actions() if a[0] == fire_id), None) if fire_id else t.next_action()
    assert action is not None, t
    fire_id, attempt, due = action
    h.now = max(h.now, due)
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=fire_id, task_id=tid, attempt=attempt, worker="w1",
                                                  deadline_ms=h.now + 60_000),)))
    assert out.results == [None], out.results
    (fr,) = [e for e in out.effects if isinstance(e, SendFire)]
    return fr


def _answer(h: H, fr: SendFire, code: int | None = 200, outcome: Outcome = Outcome.RESPONSE,
            at: int | None = None) -> object:
    if at is not None:
        h.now = at
    out = h.apply(Results(h.now, (ResultItem(
        fire_id=fr.fire.fire_id, kind=fr.fire.kind, status_code=code, outcome=outcome, response_head="body",
        latency_ms=1, worker="w1", attempt=fr.fire.attempt,
    ),)))
    return out.results[0]


def test_allow_fires_each_instant_at_its_time_while_the_earlier_ones_still_run() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    c = t.created_ms
    f1 = _fire_next(h, t.id)
    u = h.t(t.id)  # the occurrence left for running; the task waits for its next instant
    assert (u.status, u.seq, u.sched_ms, u.due_ms, u.inflight) == ("pending", 2, c + 20_000, c + 20_000, None)
    assert [(r.seq, r.inflight) for r in u.running] == [(1, True)]
    f2 = _fire_next(h, t.id)
    f3 = _fire_next(h, t.id)
    assert [f.fire.fire_id for f in (f1, f2, f3)] == [f"{t.id}-1", f"{t.id}-2", f"{t.id}-3"]
    assert [f.scheduled_ms for f in (f1, f2, f3)] == [c + 10_000, c + 20_000, c + 30_000]
    assert [f.not_before_ms for f in (f1, f2, f3)] == [c + 10_000, c + 20_000, c + 30_000]
    assert len(h.t(t.id).running) == 3 and len(h.s.fires) == 3
    assert _answer(h, f2, at=c + 35_000) is None  # each result settles its own occurrence
    assert [r.seq for r in h.t(t.id).running] == [1, 3]
    _answer(h, f1)
    _answer(h, f3)
    u = h.t(t.id)
    assert (u.running, u.status, u.sched_ms, h.s.fires) == ((), "pending", c + 40_000, {})
    rows = sorted((e.seq, e.fire_id, e.result) for e in h.s.executions if e.kind == "callback")
    assert rows == [(1, f"{t.id}-1", "success"), (2, f"{t.id}-2", "success"), (3, f"{t.id}-3", "success")]
    assert _skips(h) == []


def test_allow_a_late_result_or_duplicate_settles_nothing() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    f1 = _fire_next(h, t.id)
    _answer(h, f1)
    assert isinstance(_answer(h, f1), NotFoundError)
    assert h.t(t.id).running == ()


def test_allow_retries_each_occurrence_on_its_own_with_the_same_fire_id_and_instant() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    c = t.created_ms
    f1 = _fire_next(h, t.id)
    _answer(h, f1, 500, at=c + 10_500)  # fails: its retry is due a second later, before the next instant
    (r,) = h.t(t.id).running
    assert (r.attempt, r.inflight, r.due_ms) == (1, False, c + 11_500)
    assert h.t(t.id).wake_ms == c + 11_500
    retry = _fire_next(h, t.id)
    assert (retry.fire.fire_id, retry.fire.attempt, retry.scheduled_ms) == (f"{t.id}-1", 2, c + 10_000)
    f2 = _fire_next(h, t.id)  # the next instant, while the retry is in flight
    assert (f2.fire.fire_id, f2.fire.attempt) == (f"{t.id}-2", 1)
    _answer(h, retry)
    _answer(h, f2)
    assert h.t(t.id).running == () and h.t(t.id).fail_count == 0


def test_allow_an_occurrence_that_fails_for_good_leaves_its_own_dead_letter_and_counts_a_failure() -> None:
    h = H()
    t = _periodic(h, overlap="allow", max_retries=0, max_fails=2)
    c = t.created_ms
    f1 = _fire_next(h, t.id)
    f2 = _fire_next(h, t.id)
    _answer(h, f2, 500)
    assert [d.fire_id for d in h.s.dead.values()] == [f"{t.id}-2"]
    (dl,) = h.s.dead.values()
    assert (dl.seq, dl.sched_ms) == (2, c + 20_000)
    u = h.t(t.id)
    assert (u.fail_count, u.status, [r.seq for r in u.running]) == (1, "pending", [1])
    _answer(h, f1, 500)
    u = h.t(t.id)
    assert (u.fail_count, u.status, u.due_ms, u.running) == (2, "inactive", None, ())


def test_allow_a_404_makes_the_task_inactive_and_the_others_still_report() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    f1 = _fire_next(h, t.id)
    f2 = _fire_next(h, t.id)
    _answer(h, f1, 404)
    u = h.t(t.id)
    assert (u.status, u.due_ms, [r.seq for r in u.running]) == ("inactive", None, [2])
    _answer(h, f2)
    assert h.t(t.id).running == () and h.s.fires == {}


def test_allow_at_most_once_lost_is_unknown_and_never_sent_again() -> None:
    h = H()
    t = _periodic(h, overlap="allow", reliability="at_most_once")
    f1 = _fire_next(h, t.id)
    _fire_next(h, t.id)
    _answer(h, f1, None, Outcome.LOST)
    u = h.t(t.id)
    assert [r.seq for r in u.running] == [2]
    action = u.next_action()
    assert action is not None and action[0] == f"{t.id}-3"  # the next occurrence, not occurrence 1 again
    stale = h.apply(Dispatched(h.now, (DispatchItem(fire_id=f"{t.id}-1", task_id=t.id, attempt=2, worker="w1",
                                                    deadline_ms=h.now + 1),)))
    assert isinstance(stale.results[0], IllegalTransitionError)


def test_allow_at_least_once_lost_fires_again_at_once_with_the_next_attempt() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    f1 = _fire_next(h, t.id)
    _answer(h, f1, None, Outcome.LOST)
    (r,) = h.t(t.id).running
    assert (r.due_ms, r.attempt) == (h.now, 1)
    again = _fire_next(h, t.id)
    assert (again.fire.fire_id, again.fire.attempt) == (f"{t.id}-1", 2)
    assert _answer(h, f1) is not None  # the lost attempt's late result is not applied...
    late = [e for e in h.s.executions if e.fire_id == f"{t.id}-1" and e.attempt == 1 and e.result == "success"]
    assert len(late) == 1  # ... but on record


def test_allow_runs_at_most_max_running_at_once_and_skips_an_instant_beyond() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    c = t.created_ms
    for _ in range(MAX_RUNNING):
        _fire_next(h, t.id)
    u = h.t(t.id)
    assert len(u.running) == MAX_RUNNING and u.sched_ms == c + (MAX_RUNNING + 1) * IV
    h.now = u.due_ms or 0
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 1),)))
    assert isinstance(out.results[0], IllegalTransitionError)
    assert not [e for e in out.effects if isinstance(e, SendFire)]
    v = h.t(t.id)
    assert (v.seq, v.sched_ms, v.due_ms) == (u.seq, u.sched_ms + IV, u.sched_ms + IV)
    lo, hi = c + (MAX_RUNNING + 1) * IV, c + (MAX_RUNNING + 2) * IV
    assert _skips(h) == [f"skipped the occurrences scheduled in [{lo}, {hi}) ms: {MAX_RUNNING} occurrences "
                         "still running (overlap allow)"]


def test_allow_pause_holds_running_retries_and_resume_sends_them() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    f1 = _fire_next(h, t.id)
    f2 = _fire_next(h, t.id)
    _answer(h, f1, 500)
    h.apply(PauseTasks(h.now, (t.id,)))
    u = h.t(t.id)
    assert (u.status, u.wake_ms, [r.due_ms for r in u.running]) == ("paused", None, [None, None])
    _answer(h, f2, 500)  # a fire in flight still reports; its retry waits for the resume
    assert h.t(t.id).wake_ms is None
    h.now += 60_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    u = h.t(t.id)
    assert [r.due_ms for r in u.running] == [h.now, h.now]
    assert _fire_next(h, t.id).fire.attempt == 2


def test_allow_delete_removes_every_running_fire_record() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    _fire_next(h, t.id)
    _fire_next(h, t.id)
    h.apply(DeleteTasks(h.now, (t.id,)))
    assert h.s.fires == {} and h.s.get_task(t.id) is None


def test_allow_update_judges_a_running_fire_by_the_reliability_it_was_sent_with() -> None:
    h = H()
    t = _periodic(h, overlap="allow", reliability="at_most_once")
    f1 = _fire_next(h, t.id)
    spec = msgspec.structs.replace(t.spec, reliability=Reliability.AT_LEAST_ONCE)
    out = h.apply(UpdateTask(h.now, t.id, spec, 1))
    assert isinstance(out.results[0], Task)
    assert h.t(t.id).running[0].occ_spec is not None
    _answer(h, f1, 500)
    u = h.t(t.id)
    assert u.running == () and [d.fire_id for d in h.s.dead.values()] == [f"{t.id}-1"]  # sent at_most_once: no retry


def test_allow_bounds_end_the_task_and_the_running_occurrences_finish() -> None:
    h = H()
    t = _periodic(h, overlap="allow", max_runs=2)
    f1 = _fire_next(h, t.id)
    f2 = _fire_next(h, t.id)
    u = h.t(t.id)
    assert (u.status, u.due_ms, len(u.running)) == ("done", None, 2)
    assert not h.apply(Expire(h.now, (ExpireItem(t.id, u.updated_ms),))).results[0]  # not while they run
    _answer(h, f1)
    _answer(h, f2)
    assert h.t(t.id).running == () and h.t(t.id).status == "done"


def test_allow_a_redriven_occurrence_runs_beside_the_schedule_and_ends() -> None:
    h = H()
    t = _periodic(h, overlap="allow", max_retries=0)
    f1 = _fire_next(h, t.id)
    _answer(h, f1, 500)
    (dl,) = h.s.dead.values()
    h.apply(RedriveDeadLetters(h.now, (dl.id,)))
    fr = _fire_next(h, t.id)
    assert (fr.fire.fire_id, fr.fire.attempt, fr.scheduled_ms) == (f"{t.id}-1", 2, t.created_ms + IV)
    _answer(h, fr)
    u = h.t(t.id)
    assert (u.rewound, u.seq, u.status) == (None, 2, "pending")


def _own_slot_waits_while_max_running_run(h: H, tid: str, start: Callable[[int], Command]) -> None:
    """``start`` (a backfill or a redrive) puts an occurrence in the task's own slot while
    ``MAX_RUNNING`` run: it is not planned, and a Dispatched item for it is refused, until one of
    them ends; then it is due at once and fires, never a ``MAX_RUNNING + 1``-th at once."""
    running = [_fire_next(h, tid) for _ in range(MAX_RUNNING)]
    assert len(h.t(tid).running) == MAX_RUNNING
    h.now += 100
    out = h.apply(start(h.now))
    assert not isinstance(out.results[0], Exception), out.results
    u = h.t(tid)
    assert u.rewound is not None or u.backfill is not None
    assert (u.actions(), u.wake_ms) == ([], None)  # nothing to plan while they all run
    h.now += 500
    refused = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=tid, attempt=u.attempt + 1,
                                                      worker="w1", deadline_ms=h.now + 60_000),)))
    assert isinstance(refused.results[0], IllegalTransitionError)
    assert not [e for e in refused.effects if isinstance(e, SendFire)]
    h.now += 500
    ended = h.apply(Results(h.now, (ResultItem(
        fire_id=running[0].fire.fire_id, kind=running[0].fire.kind, status_code=200, outcome=Outcome.RESPONSE,
        response_head="body", latency_ms=1, worker="w1", attempt=1,
    ),)))
    assert WheelAdd(tid, h.now) in ended.effects  # one ended: due at once, the wheel told
    v = h.t(tid)
    assert (len(v.running), v.due_ms, v.wake_ms) == (MAX_RUNNING - 1, h.now, h.now)
    fr = _fire_next(h, tid)
    assert (fr.fire.fire_id, fr.not_before_ms) == (u.fire_id, h.now)
    assert len(h.s.fires) == MAX_RUNNING


def test_allow_a_backfill_waits_while_max_running_run_and_starts_when_one_ends() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    c = t.created_ms
    _own_slot_waits_while_max_running_run(h, t.id, lambda now: BackfillTask(now, t.id, c + 15_000, c + 35_000))


def test_allow_a_redrive_waits_while_max_running_run_and_starts_when_one_ends() -> None:
    h = H()
    t = _periodic(h, overlap="allow", max_retries=0, max_fails=5)
    _answer(h, _fire_next(h, t.id), 500)
    (dl,) = h.s.dead.values()
    _own_slot_waits_while_max_running_run(h, t.id, lambda now: RedriveDeadLetters(now, (dl.id,)))


def test_a_task_no_longer_allow_starts_no_occurrence_beside_max_running_still_running() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    running = [_fire_next(h, t.id) for _ in range(MAX_RUNNING)]
    h.apply(UpdateTask(h.now, t.id, msgspec.structs.replace(t.spec, overlap="skip"), 1))
    u = h.t(t.id)
    assert u.held and (u.actions(), u.wake_ms) == ([], None)
    h.now = (u.due_ms or 0) + 100
    _answer(h, running[0])
    v = h.t(t.id)
    assert not v.held and v.next_action() == (v.fire_id, 1, h.now)


def test_allow_max_fails_reached_by_a_running_one_waits_for_the_own_slot_and_a_queued_redrive_runs() -> None:
    """A running occurrence that fails for good at ``max_fails`` does not make the task inactive
    while its own slot still holds an occurrence in progress (a backfilled one waiting for its
    retry): that would drop the retry, and a redrive queued behind it would never run (simulation
    seed 2779). The task goes inactive when that one fails too, and the redrive then starts."""
    h = H()
    t = _periodic(h, overlap="allow", max_retries=1, max_fails=2)
    c = t.created_ms
    f1 = _fire_next(h, t.id)
    _answer(h, f1, 500)
    _answer(h, _fire_next(h, t.id), 500)  # occurrence 1 dead after its retry: fail_count 1
    (dl,) = h.s.dead.values()
    f2 = _fire_next(h, t.id)  # occurrence 2 running
    h.now += 1
    assert isinstance(h.apply(BackfillTask(h.now, t.id, c, c + 5_000)).results[0], Task)
    own = _fire_next(h, t.id)  # the backfilled occurrence, in the task's own slot
    assert own.fire.fire_id == f"{t.id}-3" and h.t(t.id).backfill is not None
    _answer(h, own, 500)  # it waits for its retry
    h.apply(RedriveDeadLetters(h.now, (dl.id,)))  # queued behind it
    assert h.t(t.id).redrives
    h.now += 5_000  # the own one's retry is due first; occurrence 2 fails meanwhile
    _answer(h, f2, 500)
    _answer(h, _fire_next(h, t.id, f"{t.id}-2"), 500)  # occurrence 2 dead: fail_count reaches max_fails
    u = h.t(t.id)
    assert (u.status, u.fail_count, u.seq, u.attempt) == ("firing", 2, 3, 1)
    retry = _fire_next(h, t.id)
    assert (retry.fire.fire_id, retry.fire.attempt) == (f"{t.id}-3", 2)
    _answer(h, retry, 500)  # the own one fails for good too: inactive, and the queued redrive starts
    v = h.t(t.id)
    assert (v.status, v.seq, v.redrives) == ("firing", 1, ())
    assert v.rewound is not None and v.rewound.status == "inactive"


def test_allow_snapshot_record_round_trips_and_an_old_record_reads_with_nothing_running() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    _fire_next(h, t.id)
    u = h.t(t.id)
    raw = msgspec.msgpack.encode(u)
    assert msgspec.msgpack.decode(raw, type=Task) == u
    # written before ``running`` (and ``not_sent``, ``waiting``, ``resumed_ms``, ``ack_from_ms``)
    old = msgspec.msgpack.encode(msgspec.msgpack.decode(raw)[:-5])
    assert msgspec.msgpack.decode(old, type=Task).running == ()
    before_waiting = msgspec.msgpack.encode(msgspec.msgpack.decode(raw)[:-3])
    assert msgspec.msgpack.decode(before_waiting, type=Task) == u  # a record of the release before ``waiting``
    before_resumed = msgspec.msgpack.encode(msgspec.msgpack.decode(raw)[:-2])
    assert msgspec.msgpack.decode(before_resumed, type=Task) == u  # ... and before ``resumed_ms``
    before_ack_from = msgspec.msgpack.encode(msgspec.msgpack.decode(raw)[:-1])
    assert msgspec.msgpack.decode(before_ack_from, type=Task) == u  # ... and before ``ack_from_ms``


def test_allow_a_running_retry_due_at_the_same_ms_as_the_next_occurrence_stays_on_the_wheel() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    c = t.created_ms
    f1 = _fire_next(h, t.id)
    _answer(h, f1, None, Outcome.LOST, at=c + 20_000)  # at_least_once: sent again at once, at 20 s
    u = h.t(t.id)
    assert u.running[0].due_ms == u.due_ms == u.wake_ms == c + 20_000
    assert u.next_action() == (f"{t.id}-2", 1, c + 20_000)  # a tie: the task's own occurrence first
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=f"{t.id}-2", task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 1),)))
    assert WheelAdd(t.id, c + 20_000) in out.effects  # the wheel handed the task out: re-armed for the retry
    assert h.t(t.id).next_action() == (f"{t.id}-1", 2, c + 20_000)


def test_allow_a_schedule_change_never_moves_the_next_occurrence_onto_one_sent_ahead() -> None:
    h = H()
    t = _periodic(h, overlap="allow")
    c = t.created_ms
    h.now = c + 9_500  # dispatch ahead: the 10 s occurrence is planned (and running) half a second early
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=f"{t.id}-1", task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 60_000),)))
    assert out.results == [None]
    spec = msgspec.structs.replace(t.spec, jitter_ms=200)
    h.apply(UpdateTask(h.now, t.id, spec, 1))  # the first instant after now is 10 s: already sent
    u = h.t(t.id)
    assert (u.seq, u.sched_ms) == (2, c + 20_000)


def _catch_up_burst(h: H) -> tuple[Task, list[SendFire]]:
    """An allow task with ``catchup`` all whose cluster was down for 20 instants: the first
    ``MAX_RUNNING`` missed ones start back to back, each as soon as the one before was sent."""
    t = _periodic(h, overlap="allow", catchup="all")
    h.now = t.created_ms + 20 * IV + 1
    running = [_fire_next(h, t.id) for _ in range(MAX_RUNNING)]
    assert [fr.scheduled_ms for fr in running] == [t.created_ms + k * IV for k in range(1, MAX_RUNNING + 1)]
    return t, running


def test_allow_catchup_all_missed_instant_waits_for_one_of_max_running_to_end_instead_of_being_skipped() -> None:
    h = H()
    t, running = _catch_up_burst(h)
    c = t.created_ms
    u = h.t(t.id)
    assert (u.sched_ms, u.due_ms) == (c + (MAX_RUNNING + 1) * IV, h.now)
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 60_000),), catchup_waits=True))
    assert isinstance(out.results[0], IllegalTransitionError)
    assert not [e for e in out.effects if isinstance(e, SendFire)]
    v = h.t(t.id)
    assert _skips(h) == []  # catchup all: every instant within catchup_window_ms fires
    assert (v.seq, v.sched_ms) == (u.seq, u.sched_ms)
    assert v.held and (v.actions(), v.wake_ms) == ([], None)  # not planned again while they all run
    h.now += 20
    _answer(h, running[0])
    w = h.t(t.id)
    assert not w.held and w.next_action() == (u.fire_id, 1, h.now)  # one ended: the waiting one is due at once
    fired = [_fire_next(h, t.id).scheduled_ms]
    while h.t(t.id).sched_ms < h.now and len(h.t(t.id).running) < MAX_RUNNING:
        fired.append(_fire_next(h, t.id).scheduled_ms)
    assert fired == [c + (MAX_RUNNING + 1) * IV]  # in order, none skipped, never more than MAX_RUNNING at once
    assert len(h.t(t.id).running) == MAX_RUNNING and not h.t(t.id).waiting


def test_allow_catchup_all_instant_is_skipped_with_max_running_when_a_replica_of_the_release_before_may_apply() -> None:
    """A ``Dispatched`` entry without ``catchup_waits`` (a leader that has not heard every member
    advertise ``CATCHUP_WAIT_VERSION``) is applied as the release before did: the instant is
    skipped, so replicas of both releases apply the same log alike."""
    h = H()
    t, _ = _catch_up_burst(h)
    c = t.created_ms
    u = h.t(t.id)
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 60_000),)))
    assert isinstance(out.results[0], IllegalTransitionError)
    v = h.t(t.id)
    assert not v.held and not v.waiting and v.sched_ms == c + 21 * IV
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + (MAX_RUNNING + 1) * IV}, {c + 21 * IV}) ms: "
                         f"{MAX_RUNNING} occurrences still running (overlap allow)"]


def test_dispatched_of_the_release_before_decodes_without_catchup_waits() -> None:
    old = msgspec.msgpack.encode([21, 5, [["f-1", "f", 1, "w1", 9]]])
    new = Dispatched(5, (DispatchItem(fire_id="f-1", task_id="f", attempt=1, worker="w1", deadline_ms=9),),
                     catchup_waits=True)
    assert msgspec.msgpack.decode(old, type=Command).catchup_waits is False  # type: ignore[union-attr]
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(new), type=Command) == new


@pytest.mark.parametrize("refuses_planned", [True, False])
def test_allow_trigger_while_an_occurrence_planned_ahead_is_on_its_way(refuses_planned: bool) -> None:
    """An allow task's occurrence sent ahead of its instant (the dispatch lead) runs beside the task;
    a trigger then would make the schedule go on at the first instant after it, that occurrence's
    own, so the instant would fire twice. With ``refuses_planned`` (every replica of version 8) it is
    refused, as a trigger while a fire is in flight is; an entry of the release before applies as
    that release did (the instant fires twice: the reason for the flag)."""
    h = H()
    t = _periodic(h, overlap="allow")
    u = h.t(t.id)
    h.now = (u.due_ms or 0) - 300  # the leader plans the fire 300 ms ahead of its instant
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 60_000),)))
    (planned,) = [e for e in out.effects if isinstance(e, SendFire)]
    assert planned.scheduled_ms > h.now and len(h.t(t.id).running) == 1
    res = h.apply(TriggerTask(h.now, t.id, refuses_planned)).results[0]
    if refuses_planned:
        assert isinstance(res, IllegalTransitionError) and res.http_status == 409
        assert h.t(t.id).sched_ms == planned.scheduled_ms + IV  # untouched
        h.now = planned.scheduled_ms  # once its instant has come, a trigger applies
        assert h.apply(TriggerTask(h.now, t.id, refuses_planned)).results[0].due_ms == h.now
        triggered = _fire_next(h, t.id)
        assert triggered.scheduled_ms == h.now and h.t(t.id).sched_ms == planned.scheduled_ms + IV
    else:
        assert res.due_ms == h.now
        _fire_next(h, t.id)
        assert h.t(t.id).sched_ms == planned.scheduled_ms  # the planned instant taken again


@pytest.mark.parametrize("refuses_sent_ahead", [True, False])
def test_a_trigger_before_the_instant_of_an_attempt_sent_ahead_and_settled_lost(refuses_sent_ahead: bool) -> None:
    """An at_most_once occurrence sent ahead of its instant, its worker lost before the instant: the
    occurrence is settled lost and the task waits for its next instant, but the lost worker may still
    send the attempt at its instant. A trigger then would make the schedule go on at the first instant
    after it, that one, so it would fire twice (found by the scheduler simulation, seed 58000205).
    With ``refuses_sent_ahead`` (every replica of version 10) it is refused until that instant; an
    entry of the release before applies as that release did."""
    h = H()
    t = _periodic(h, reliability="at_most_once")
    u = h.t(t.id)
    h.now = (u.due_ms or 0) - 300  # planned 300 ms ahead of its instant
    out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=t.id, attempt=1, worker="w1",
                                                  deadline_ms=h.now + 60_000),), keeps_last_fire=True))
    (planned,) = [e for e in out.effects if isinstance(e, SendFire)]
    h.answer(t.id, None, Outcome.LOST, after_ms=50)  # its worker lost: the occurrence ends, unknown
    after = h.t(t.id)
    assert after.status is Status.PENDING and after.sched_ms == planned.scheduled_ms + IV and h.now < planned.scheduled_ms
    res = h.apply(TriggerTask(h.now, t.id, True, refuses_sent_ahead)).results[0]
    if refuses_sent_ahead:
        assert isinstance(res, IllegalTransitionError) and res.http_status == 409
        assert h.t(t.id) == after  # untouched
        h.now = planned.scheduled_ms  # once its instant has come, a trigger applies
        assert h.apply(TriggerTask(h.now, t.id, True, True)).results[0].due_ms == h.now
        _fire_next(h, t.id)
        assert h.t(t.id).sched_ms == planned.scheduled_ms  # the triggered one, at that instant (now)
        h.answer(t.id, 200)
        assert h.t(t.id).sched_ms == planned.scheduled_ms + IV
    else:
        assert res.due_ms == h.now
        _fire_next(h, t.id)
        h.answer(t.id, 200)
        assert h.t(t.id).sched_ms == planned.scheduled_ms  # the lost attempt's instant taken again
