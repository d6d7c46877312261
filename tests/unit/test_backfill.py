"""Backfill of a periodic task's past occurrences (docs/architecture.md#backfill), through
machine.apply: the occurrences scheduled in ``[start, end)`` fire now, in order, each its own
occurrence, then the regular schedule resumes; bounds, pause, update and the refusals."""

from __future__ import annotations

from molens.errors import ValidationError
from molens.fsm.commands import BackfillTask, PauseTasks, ResumeTasks, TriggerTask, UpdateTask
from molens.fsm.machine import MAX_BACKFILL, backfill_instants
from molens.model import (
    ExecutionResult,
    IllegalTransitionError,
    NotFoundError,
    Status,
    Task,
    decode_update,
)
from tests.unit.test_fsm_machine import H

IV = 10_000


def _periodic(h: H, **kw: object) -> Task:
    return h.create(type="periodic", interval_ms=IV, **kw)


def _backfill(h: H, tid: str, start: int, end: int) -> object:
    return h.apply(BackfillTask(h.now, tid, start, end)).results[0]


def _late(h: H, t: Task, ms: int) -> int:
    """Run the task on time up to ``t.created_ms + ms``; the instant it is pending at then."""
    c = t.created_ms
    while True:
        u = h.t(t.id)
        assert u.due_ms is not None
        if u.due_ms > c + ms:
            h.now = c + ms
            return u.sched_ms
        h.cycle(t.id)


def test_backfill_fires_the_range_now_in_order_each_its_own_occurrence_then_resumes() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    pending = _late(h, t, 95_000)  # occurrences 1..9 ran; the 10th (100 s) is pending
    assert pending == c + 100_000 and h.t(t.id).seq == 10
    res = _backfill(h, t.id, c + 15_000, c + 55_000)
    assert isinstance(res, Task) and res.due_ms == h.now
    fired = [h.cycle(t.id) for _ in range(5)]
    assert [f.scheduled_ms for f in fired] == [c + 20_000, c + 30_000, c + 40_000, c + 50_000, c + 100_000]
    assert [f.fire.fire_id for f in fired] == [f"{t.id}-{k}" for k in range(10, 15)]
    assert [f.not_before_ms for f in fired[:4]] == [c + 95_000 + k * 50 for k in range(4)]  # now, one after another
    assert fired[4].not_before_ms == c + 100_000  # the regular schedule, on time again
    u = h.t(t.id)
    assert u.backfill is None and u.sched_ms == c + 110_000
    rows = [e.response_head for e in h.s.executions if e.result is ExecutionResult.BACKFILL]
    assert rows == [f"backfill of the occurrences scheduled in [{c + 15_000}, {c + 55_000}) ms, the first at "
                    f"{c + 20_000}"]


def test_an_occurrence_running_finishes_before_the_backfill_starts() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    _late(h, t, 35_000)
    fr = h.fire_due(t.id)  # the 40 s occurrence is in flight
    assert fr.scheduled_ms == c + 40_000
    res = _backfill(h, t.id, c + 1, c + 25_000)
    assert isinstance(res, Task) and res.inflight == fr.fire.fire_id  # nothing else fires meanwhile
    assert isinstance(h.dispatch(t.id).results[0], IllegalTransitionError)
    h.answer(t.id, 200)
    fired = [h.cycle(t.id) for _ in range(3)]
    assert [f.scheduled_ms for f in fired] == [c + 10_000, c + 20_000, c + 50_000]
    assert [f.fire.fire_id for f in fired] == [f"{t.id}-{k}" for k in (5, 6, 7)]


def test_regular_instants_that_passed_during_the_backfill_follow_catchup() -> None:
    h = H()
    t = _periodic(h, catchup="none")
    c = t.created_ms
    _late(h, t, 45_000)  # 10 .. 40 s ran; 50 s is pending
    _backfill(h, t.id, c + 1, c + 35_000)
    h.now = c + 85_000  # the backfill's first occurrence runs late, past the regular 50 s .. 80 s
    fired = [h.cycle(t.id) for _ in range(3)]
    assert [f.scheduled_ms for f in fired] == [c + 10_000, c + 20_000, c + 30_000]
    assert isinstance(h.dispatch(t.id).results[0], IllegalTransitionError)  # 50 s was missed
    fr = h.cycle(t.id)  # none: the regular instants missed (50 .. 80 s) are skipped, 90 s fires
    assert fr.scheduled_ms == c + 90_000
    skipped = [e.response_head for e in h.s.executions if e.result is ExecutionResult.SKIPPED]
    assert skipped == [f"skipped the occurrences scheduled in [{c + 50_000}, {c + 90_000}) ms: missed (catchup none)"]


def test_a_backfill_that_covers_the_pending_instant_does_not_fire_it_twice() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    h.now = c + 25_000  # down: the 10 s occurrence is pending, late
    _backfill(h, t.id, c + 10_000, c + 25_000)
    fired = [h.cycle(t.id) for _ in range(3)]
    assert [f.scheduled_ms for f in fired] == [c + 10_000, c + 20_000, c + 30_000]


def test_bounds_hold_for_backfilled_occurrences() -> None:
    h = H()
    t = _periodic(h, start_at=h.now + 30_000, end_at=h.now + 1_000_000, max_runs=4)
    s = h.now + 30_000
    h.now = s + 5_000
    assert backfill_instants(h.t(t.id), s - 100_000, s + 25_000, 100) == [s, s + 10_000, s + 20_000]
    h.t(t.id)
    _backfill(h, t.id, s - 100_000, s + 5_000)  # nothing before start_at: only s
    fired = [h.cycle(t.id) for _ in range(3)]
    assert [f.scheduled_ms for f in fired] == [s, s + 10_000, s + 20_000]  # s backfilled, the regular s+10 s ...
    h.now = s + 60_000
    _backfill(h, t.id, s, s + 50_000)
    h.cycle(t.id)  # occurrence 4: the last max_runs allows
    u = h.t(t.id)
    assert u.status is Status.DONE and u.seq == 4 and u.backfill is None


def test_the_grid_reaches_back_before_the_create() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    assert backfill_instants(t, c - 25_000, c + 1, 100) == [c - 20_000, c - 10_000, c]
    assert backfill_instants(t, c - 20_000, c - 10_000, 100) == [c - 20_000]
    assert backfill_instants(t, c - 20_000, c - 10_000, 0) == []
    cr = h.create(type="periodic", interval_ms=None, cron_expr="*/5 * * * *")
    hour = 3_600_000
    base = c - c % hour - 24 * hour
    got = backfill_instants(cr, base, base + hour, 100)
    assert got == [base + k * 300_000 for k in range(12)]


def test_end_at_clips_the_range() -> None:
    h = H()
    t = _periodic(h, end_at=h.now + 25_000)
    c = t.created_ms
    h.now = c + 24_000
    assert backfill_instants(h.t(t.id), c + 1, c + 24_000, 100) == [c + 10_000, c + 20_000]
    assert backfill_instants(h.t(t.id), c + 1, c + 60_000, 100) == [c + 10_000, c + 20_000]


def test_a_paused_task_backfills_when_resumed() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    _late(h, t, 35_000)  # 40 s is pending
    h.apply(PauseTasks(h.now, (t.id,)))
    res = _backfill(h, t.id, c + 1, c + 25_000)
    assert isinstance(res, Task) and res.status is Status.PAUSED and res.due_ms is None
    h.now = c + 500_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == h.now  # resume_from now drops what passed while paused, not the backfill
    fired = [h.cycle(t.id) for _ in range(3)]
    assert [f.scheduled_ms for f in fired][:2] == [c + 10_000, c + 20_000]
    assert fired[2].scheduled_ms == c + 40_000  # then resumes where it stood; catchup one fires it at once


def test_a_schedule_change_moves_the_backfill_to_the_new_grid() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    _late(h, t, 65_000)  # 70 s is pending
    _backfill(h, t.id, c + 1, c + 65_000)
    spec = decode_update(b'{"interval_ms": 20000}', h.t(t.id).spec, now_ms=h.now)
    u = h.apply(UpdateTask(h.now, t.id, spec, 1)).results[0]
    assert isinstance(u, Task) and u.due_ms == h.now and u.sched_ms == c + 20_000
    fired = [h.cycle(t.id) for _ in range(4)]
    assert [f.scheduled_ms for f in fired] == [c + 20_000, c + 40_000, c + 60_000, c + 80_000]


def test_refusals() -> None:
    h = H()
    p = _periodic(h)
    d = h.create(interval_ms=60_000)
    now = h.now = p.created_ms + 1_000
    assert isinstance(_backfill(h, "0" * 26, 0, now), NotFoundError)
    assert isinstance(_backfill(h, d.id, 0, now), IllegalTransitionError)
    assert isinstance(_backfill(h, p.id, now - 5, now + 1), ValidationError)  # end after now
    assert isinstance(_backfill(h, p.id, now, now), ValidationError)
    assert _backfill(h, p.id, now - 100, now) == h.t(p.id)  # no instant in range: nothing changes
    assert isinstance(_backfill(h, p.id, now - 100 * IV, now), Task)
    again = _backfill(h, p.id, now - 100 * IV, now)
    assert isinstance(again, IllegalTransitionError) and "one backfill at a time" in str(again)
    assert isinstance(h.apply(TriggerTask(h.now, p.id)).results[0], IllegalTransitionError)


def test_at_most_max_backfill_occurrences_per_request() -> None:
    h = H()
    t = h.create(type="periodic", interval_ms=None, cron_expr="* * * * * *")  # every second, also before the create
    c = t.created_ms
    h.now = c + 1
    start = c - (MAX_BACKFILL + 5) * 1_000
    assert len(backfill_instants(h.t(t.id), start, c, MAX_BACKFILL + 1)) == MAX_BACKFILL + 1
    _backfill(h, t.id, start, c)
    fired = [h.cycle(t.id).scheduled_ms for _ in range(MAX_BACKFILL + 1)]
    assert fired[:MAX_BACKFILL] == list(range(start, start + MAX_BACKFILL * 1_000, 1_000))
    assert fired[MAX_BACKFILL] > c  # then the regular schedule: the 5 left over never fire
    assert h.t(t.id).backfill is None


def test_no_backfill_while_a_redrive_reruns_an_older_occurrence() -> None:
    from molens.fsm.commands import RedriveDeadLetters
    from tests.unit.test_dead_letters import dead
    from tests.unit.test_retry_policy import answer

    h = H()
    p = h.create(type="periodic", interval_ms=IV, max_retries=0)
    c = p.created_ms
    h.fire_due(p.id)
    answer(h, p.id, 500)  # occurrence 1 (10 s) is a dead letter
    [d] = dead(h)
    h.apply(RedriveDeadLetters(h.now, (d.id,)))
    refused = _backfill(h, p.id, c + 1, h.now)
    assert isinstance(refused, IllegalTransitionError) and "redriving" in str(refused)
    h.fire_due(p.id)
    answer(h, p.id, 200)  # the redrive ends: the task is back at its own occurrence 2 (20 s)
    assert h.t(p.id).rewound is None and h.t(p.id).seq == 2
    h.now = c + 35_000
    assert isinstance(_backfill(h, p.id, c + 1, c + 25_000), Task)
    fired = [h.cycle(p.id).scheduled_ms for _ in range(3)]
    assert fired == [c + 10_000, c + 20_000, c + 30_000]  # 20 s, covered by the range, does not fire twice


def test_regular_instants_before_a_later_range_are_recorded_as_skipped() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    h.now = c + 55_000  # down: 10 s is pending, late
    _backfill(h, t.id, c + 30_000, c + 45_000)
    fired = [h.cycle(t.id).scheduled_ms for _ in range(3)]
    assert fired == [c + 30_000, c + 40_000, c + 50_000]  # then the schedule after the range
    rows = [e.response_head for e in h.s.executions if e.result is ExecutionResult.SKIPPED]
    assert rows[0] == (f"skipped the occurrences scheduled in [{c + 10_000}, {c + 30_000}) ms: before the "
                       "backfilled range, after which the schedule resumes")


def test_a_range_after_a_running_occurrence_records_the_regular_instants_between_as_skipped() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    h.fire_due(t.id)  # 10 s runs
    h.now = c + 45_000
    _backfill(h, t.id, c + 30_000, c + 45_000)
    h.answer(t.id, 200)
    fired = [h.cycle(t.id).scheduled_ms for _ in range(3)]
    assert fired == [c + 30_000, c + 40_000, c + 50_000]
    rows = [e.response_head for e in h.s.executions if e.result is ExecutionResult.SKIPPED]
    assert rows[0] == (f"skipped the occurrences scheduled in [{c + 20_000}, {c + 30_000}) ms: before the "
                       "backfilled range, after which the schedule resumes")
