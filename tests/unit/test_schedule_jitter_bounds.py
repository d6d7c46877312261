"""Jitter (a fixed offset per occurrence) and a periodic task's bounds (start_at, end_at, max_runs),
through the pure state machine (docs/architecture.md#task-rules)."""

from __future__ import annotations

import pytest

from molens.errors import ValidationError
from molens.fsm.machine import jitter
from molens.model import Status, new_task_id, validate_create
from tests.unit.test_fsm_machine import T0, URL, H

MIN = 60_000


@pytest.fixture
def h() -> H:
    return H()


def test_jitter_is_fixed_per_task_and_occurrence_and_within_the_window() -> None:
    ids = [new_task_id(T0, i) for i in range(2000)]
    offs = [jitter(t, 1, 60_000) for t in ids]
    assert all(0 <= o < 60_000 for o in offs)
    assert offs == [jitter(t, 1, 60_000) for t in ids]  # every replica, every leader
    assert len({o // 6_000 for o in offs}) == 10  # spread over every tenth of the window
    assert jitter(ids[0], 1, 60_000) != jitter(ids[0], 2, 60_000) or jitter(ids[0], 3, 60_000) != jitter(ids[0], 1, 60_000)
    assert jitter(ids[0], 1, 0) == 0 and jitter(ids[0], 1, 1) == 0


def test_a_jittered_periodic_occurrence_is_due_at_its_instant_plus_its_offset(h: H) -> None:
    t = h.create(type="periodic", interval_ms=MIN, jitter_ms=30_000)
    assert t.sched_ms == T0 + MIN
    assert t.due_ms == T0 + MIN + jitter(t.id, 1, 30_000)
    h.cycle(t.id)
    t2 = h.t(t.id)
    assert t2.seq == 2 and t2.sched_ms == T0 + 2 * MIN  # the grid stays nominal
    assert t2.due_ms == T0 + 2 * MIN + jitter(t.id, 2, 30_000)


def test_a_jittered_delayed_task(h: H) -> None:
    t = h.create(interval_ms=5_000, jitter_ms=10_000)
    assert t.sched_ms == T0 + 5_000 and t.due_ms == T0 + 5_000 + jitter(t.id, 1, 10_000)


def test_max_runs_ends_a_periodic_task_done(h: H) -> None:
    t = h.create(type="periodic", interval_ms=MIN, max_runs=3)
    for n in (1, 2, 3):
        assert h.t(t.id).seq == n and h.t(t.id).status is Status.PENDING
        h.cycle(t.id)
    assert h.t(t.id).status is Status.DONE and h.t(t.id).due_ms is None


def test_end_at_ends_a_periodic_task_before_an_occurrence_at_or_after_it(h: H) -> None:
    t = h.create(type="periodic", interval_ms=MIN, end_at=T0 + 3 * MIN)  # occurrences at +1 and +2 only
    h.cycle(t.id)
    assert h.t(t.id).sched_ms == T0 + 2 * MIN
    h.cycle(t.id)
    assert h.t(t.id).status is Status.DONE


def test_start_at_is_the_first_occurrence_of_an_interval_task_and_bounds_a_cron_one(h: H) -> None:
    t = h.create(type="periodic", interval_ms=MIN, start_at=T0 + 10 * MIN + 7)
    assert t.sched_ms == T0 + 10 * MIN + 7
    h.cycle(t.id)
    assert h.t(t.id).sched_ms == T0 + 11 * MIN + 7
    c = h.create(type="periodic", interval_ms=None, cron_expr="0 * * * *", start_at=T0 + 5 * 3_600_000)
    assert c.sched_ms >= T0 + 5 * 3_600_000 and c.sched_ms % 3_600_000 == 0


@pytest.mark.parametrize("back", [0, 1, 3 * MIN + 5])
def test_a_start_at_not_after_the_create_places_the_grid_and_its_first_instant_after_the_create_runs(
    h: H, back: int,
) -> None:
    """docs/api.md, ``start_at``: only instants after the create's time are the schedule's; a
    ``start_at`` at that very ms or before it places the grid (``start_at + k * interval_ms``)."""
    t = h.create(type="periodic", interval_ms=MIN, start_at=T0 - back)
    first = T0 - back + (back // MIN + 1) * MIN
    assert t.sched_ms == first and first > T0 and (first - (T0 - back)) % MIN == 0


def test_a_trigger_before_start_at_runs_one_now_and_start_at_still_runs(h: H) -> None:
    """docs/api.md, trigger: a manual run is not one of the schedule's instants, so it may come
    before ``start_at``; the schedule then begins at ``start_at`` as created."""
    from molens.fsm.commands import TriggerTask

    t = h.create(type="periodic", interval_ms=MIN, start_at=T0 + 10 * MIN)
    h.now = T0 + MIN
    out = h.apply(TriggerTask(h.now, t.id, True))
    assert out.results[0].status is Status.PENDING and h.t(t.id).due_ms == T0 + MIN
    h.cycle(t.id)
    assert h.t(t.id).sched_ms == T0 + 10 * MIN and h.t(t.id).due_ms == T0 + 10 * MIN
    h.cycle(t.id)
    assert h.t(t.id).sched_ms == T0 + 11 * MIN


def test_a_schedule_with_no_occurrence_before_end_at_is_done_at_once(h: H) -> None:
    t = h.create(type="periodic", interval_ms=10 * MIN, end_at=T0 + MIN)
    assert t.status is Status.DONE and t.due_ms is None


def test_resume_past_end_at_ends_the_task(h: H) -> None:
    from molens.fsm.commands import PauseTasks, ResumeTasks

    t = h.create(type="periodic", interval_ms=MIN, end_at=T0 + 5 * MIN)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now = T0 + 10 * MIN
    out = h.apply(ResumeTasks(h.now, (t.id,)))
    assert out.results[0].status is Status.DONE


@pytest.mark.parametrize(("field", "value"), [("start_at", T0), ("end_at", T0 + MIN), ("max_runs", 3)])
def test_bounds_are_for_periodic_tasks_only(field: str, value: int) -> None:
    with pytest.raises(ValidationError) as ei:
        validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL, field: value}, now_ms=T0)
    assert ei.value.field == field


def test_end_at_must_be_after_now_and_start_at() -> None:
    base = {"type": "periodic", "interval_ms": MIN, "callback_url": URL}
    for extra in ({"end_at": T0}, {"start_at": T0 + 5 * MIN, "end_at": T0 + 5 * MIN}):
        with pytest.raises(ValidationError) as ei:
            validate_create({**base, **extra}, now_ms=T0)
        assert ei.value.field == "end_at"
    with pytest.raises(ValidationError) as ei:
        validate_create({**base, "jitter_ms": 86_400_001}, now_ms=T0)
    assert ei.value.field == "jitter_ms"
