"""Catch-up of missed periodic occurrences (docs/architecture.md#catch-up), through machine.apply:
``catchup`` one / none / all with ``catchup_window_ms``, ``resume_from`` schedule, and the
``skipped`` history rows."""

from __future__ import annotations

import pytest

from molens.errors import ValidationError
from molens.fsm.commands import PauseTasks, ResumeTasks
from molens.model import (
    ExecutionResult,
    FireKind,
    IllegalTransitionError,
    Outcome,
    Status,
    Task,
    validate_create,
)
from tests.unit.test_fsm_machine import URL, H

IV = 10_000


def _periodic(h: H, **kw: object) -> Task:
    return h.create(type="periodic", interval_ms=IV, **kw)


def _skips(h: H) -> list[str]:
    return [e.response_head or "" for e in h.s.executions if e.result is ExecutionResult.SKIPPED]


def _instants(h: H, tid: str, n: int) -> list[int]:
    """Fire the task ``n`` times as fast as it comes due, answering 200; the instants fired."""
    return [h.cycle(tid).scheduled_ms for _ in range(n)]


def test_one_fires_a_single_late_occurrence_for_the_missed_ones_and_records_them() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    h.now = c + 65_000  # down for the occurrences at 10 .. 60 s
    assert _instants(h, t.id, 1) == [c + 10_000]
    u = h.t(t.id)
    assert u.due_ms == c + 70_000 and u.seq == 2
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 20_000}, {c + 70_000}) ms: due while the "
                         "cluster was down, the task paused or an occurrence ran (catchup one)"]


def test_none_skips_every_missed_occurrence_and_continues_at_the_next_instant() -> None:
    h = H()
    t = _periodic(h, catchup="none")
    c = t.created_ms
    h.now = c + 65_000
    out = h.dispatch(t.id)
    assert isinstance(out.results[0], IllegalTransitionError) and not out.writes.fires
    u = h.t(t.id)
    assert (u.due_ms, u.sched_ms, u.seq, u.status) == (c + 70_000, c + 70_000, 1, Status.PENDING)
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 10_000}, {c + 70_000}) ms: missed (catchup none)"]
    assert _instants(h, t.id, 2) == [c + 70_000, c + 80_000]


def test_none_still_fires_an_occurrence_that_is_late_but_not_missed() -> None:
    h = H()
    t = _periodic(h, catchup="none")
    h.now = t.created_ms + 19_900  # the next instant (20 s) is not due yet
    out = h.dispatch(t.id)
    assert out.results == [None] and _skips(h) == []


def test_all_fires_every_missed_occurrence_oldest_first_then_the_schedule_goes_on() -> None:
    h = H()
    t = _periodic(h, catchup="all")
    c = t.created_ms
    h.now = c + 65_000
    fired = [h.cycle(t.id) for _ in range(7)]
    assert [f.scheduled_ms for f in fired] == [c + k * 10_000 for k in range(1, 8)]
    assert [f.fire.fire_id for f in fired] == [f"{t.id}-{k}" for k in range(1, 8)]  # each its own fire id
    assert fired[6].not_before_ms == c + 70_000  # caught up: back on time
    assert _skips(h) == []


def test_all_goes_back_at_most_catchup_window_ms() -> None:
    h = H()
    t = _periodic(h, catchup="all", catchup_window_ms=25_000)
    c = t.created_ms
    h.now = c + 65_000  # the window reaches back to 40 s
    assert _instants(h, t.id, 4) == [c + 40_000, c + 50_000, c + 60_000, c + 70_000]
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 10_000}, {c + 40_000}) ms: more than "
                         "catchup_window_ms ago (catchup all)"]


@pytest.mark.parametrize(("catchup", "first"), [("one", 10_000), ("none", 40_000), ("all", 10_000)])
def test_resume_from_schedule_treats_the_paused_time_as_missed(catchup: str, first: int) -> None:
    h = H()
    t = _periodic(h, catchup=catchup)
    c = t.created_ms
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now = c + 35_000
    h.apply(ResumeTasks(h.now, (t.id,), from_schedule=True))
    assert h.t(t.id).due_ms == c + 10_000  # the instant it was waiting for
    if catchup == "none":
        h.dispatch(t.id)
    assert _instants(h, t.id, 1) == [c + first]


def test_resume_from_now_drops_what_passed_while_paused_whatever_the_catchup() -> None:
    h = H()
    t = _periodic(h, catchup="all")
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now = t.created_ms + 35_000
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == t.created_ms + 40_000 and _skips(h) == []


@pytest.mark.parametrize("records_dropped", [True, False])
def test_the_instants_a_resume_from_now_drops_between_occurrences_are_one_skipped_row(records_dropped: bool) -> None:
    """With ``records_dropped`` (every replica of version 8) the instants a resume from now drops are
    written as one ``skipped`` row and counted ``dropped_paused``, as those dropped mid-retry are; an
    entry of the release before writes none, as that release did."""
    h = H()
    t = _periodic(h, catchup="one")
    c = t.created_ms
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now = c + 35_000
    out = h.apply(ResumeTasks(h.now, (t.id,), False, True, records_dropped))
    assert h.t(t.id).due_ms == c + 40_000
    if records_dropped:
        assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 10_000}, {c + 40_000}) ms: came due while "
                             "the task was paused (resume_from now)"]
        assert out.writes.counts == {"dropped_paused": 1}
    else:
        assert _skips(h) == [] and out.writes.counts == {}
    h.apply(PauseTasks(h.now, (t.id,)))  # resumed before its next instant: nothing dropped, no row
    h.apply(ResumeTasks(h.now + 1_000, (t.id,), False, True, records_dropped))
    assert len(_skips(h)) == (1 if records_dropped else 0)


def test_instants_that_come_due_while_an_occurrence_runs_are_recorded_as_skipped() -> None:
    h = H()
    t = _periodic(h)
    c = t.created_ms
    h.fire_due(t.id)
    h.answer(t.id, 200, after_ms=25_000)  # a slow receiver: 20 s and 30 s came due meanwhile
    assert h.t(t.id).due_ms == c + 40_000
    assert len(_skips(h)) == 1 and f"[{c + 20_000}, {c + 40_000})" in _skips(h)[0]
    rows = [e for e in h.s.executions if e.kind is FireKind.EVENT]
    assert [(e.fire_id, e.seq) for e in rows] == [(f"{t.id}-1", 1)]


@pytest.mark.parametrize("field", ["catchup", "catchup_window_ms"])
def test_catchup_is_only_for_periodic_tasks(field: str) -> None:
    value = "all" if field == "catchup" else 1_000
    with pytest.raises(ValidationError) as e:
        validate_create({"type": "delayed", "interval_ms": 1_000, "callback_url": URL, field: value})
    assert e.value.field == field


def test_an_at_most_once_occurrence_lost_with_its_worker_is_followed_at_once_by_the_next_instant() -> None:
    """The lost fire was running nowhere while the next instant came due: that instant is missed to
    the fault (catch-up one fires it at once), not skipped as an overlap (docs/architecture.md#lost-workers)."""
    h = H()
    t = _periodic(h, reliability="at_most_once")
    c = t.created_ms
    h.fire_due(t.id)
    h.answer(t.id, None, Outcome.LOST, after_ms=10_500)  # settled just after the next instant (20 s)
    u = h.t(t.id)
    assert u.last_result is ExecutionResult.UNKNOWN
    assert (u.seq, u.sched_ms, u.due_ms) == (2, c + 20_000, h.now)  # fires now, for its own instant
    assert _skips(h) == []
    assert _instants(h, t.id, 2) == [c + 20_000, c + 30_000]


def test_a_lost_occurrence_with_catchup_none_still_skips_what_passed() -> None:
    h = H()
    t = _periodic(h, reliability="at_most_once", catchup="none")
    h.fire_due(t.id)
    h.answer(t.id, None, Outcome.LOST, after_ms=10_500)
    assert h.t(t.id).due_ms == t.created_ms + 30_000


def test_none_fires_the_occurrence_it_skipped_to_even_if_that_one_is_late_too() -> None:
    """A scheduler lagging by more than a period must still fire: none skips once, not forever."""
    h = H()
    t = _periodic(h, catchup="none")
    c = t.created_ms
    h.now = c + 25_000
    h.dispatch(t.id)  # missed: skipped to 30 s
    h.now = c + 45_000  # late again: 40 s has come too
    out = h.dispatch(t.id)
    assert out.results == [None]
    fr = next(e for e in out.effects if hasattr(e, "scheduled_ms"))
    assert fr.scheduled_ms == c + 30_000
    h.answer(t.id, 200)
    h.now = c + 75_000
    assert isinstance(h.dispatch(t.id).results[0], IllegalTransitionError)  # a new occurrence: missed again


@pytest.mark.parametrize("drops_paused", [False, True])
@pytest.mark.parametrize(("catchup", "overlap"), [("one", "skip"), ("all", "skip"), ("one", "buffer_one"),
                                                  ("none", "buffer_one")])
def test_resume_from_now_in_the_middle_of_a_retry_drops_what_came_due_while_paused(
    catchup: str, overlap: str, drops_paused: bool,
) -> None:
    """Paused while an occurrence waits for its retry, resumed from now much later: the retry goes,
    then the next occurrence is the first instant after the resume, as for a task paused between
    occurrences (docs/api.md: now "drops what a periodic task missed while paused"). Without
    ``drops_paused`` (a member of the release before) the entry applies as that release did:
    catchup all fired every paused instant, buffer_one the first of them."""
    h = H()
    t = _periodic(h, catchup=catchup, overlap=overlap, retry={"max_retries": 3, "initial_ms": 1_000})
    c = t.created_ms
    h.fire_due(t.id)
    h.answer(t.id, 500)  # the occurrence at 10 s fails: its retry waits
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now = c + 65_000  # paused over the instants at 20 .. 60 s
    h.apply(ResumeTasks(h.now, (t.id,), False, drops_paused))
    fired = []
    for _ in range(3):
        fr = h.cycle(t.id)
        fired.append((fr.scheduled_ms - c, fr.fire.attempt))
    paused = [(at, 1) for at in range(20_000, 61_000, 10_000)]
    if drops_paused:
        assert fired == [(10_000, 2), (70_000, 1), (80_000, 1)]
    elif catchup == "all":
        assert fired == [(10_000, 2), *paused[:2]]
    elif overlap == "buffer_one":
        assert fired == [(10_000, 2), (20_000, 1), (70_000, 1)]
    else:
        assert fired == [(10_000, 2), (70_000, 1), (80_000, 1)]


@pytest.mark.parametrize("drops_paused", [False, True])
def test_a_paused_delayed_task_resumed_before_its_time_keeps_its_jitter_offset(drops_paused: bool) -> None:
    h = H()
    t = h.create(type="delayed", interval_ms=600_000, jitter_ms=300_000)
    assert t.due_ms is not None and t.due_ms > t.sched_ms  # this id's offset is not 0
    h.apply(PauseTasks(h.now, (t.id,)))
    h.apply(ResumeTasks(h.now + 1_000, (t.id,), False, drops_paused))
    assert h.t(t.id).due_ms == (t.due_ms if drops_paused else t.sched_ms)


def test_the_instants_a_resume_from_now_drops_mid_retry_are_one_skipped_row() -> None:
    h = H()
    t = _periodic(h, catchup="all", retry={"max_retries": 3, "initial_ms": 1_000})
    c = t.created_ms
    h.fire_due(t.id)
    h.answer(t.id, 500)
    h.apply(PauseTasks(h.now, (t.id,)))
    h.now = c + 65_000
    h.apply(ResumeTasks(h.now, (t.id,), False, True))
    h.fire_due(t.id)
    assert h.answer(t.id, 200).writes.counts == {"dropped_paused": 1}
    assert _skips(h) == [f"skipped the occurrences scheduled in [{c + 20_000}, {c + 70_000}) ms: came due while the "
                         "task was paused (resume_from now)"]
