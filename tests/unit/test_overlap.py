"""Overlap of periodic occurrences (docs/architecture.md#overlap), through machine.apply: instants
that come due while an occurrence runs are skipped (``skip``, the default) or the first of them
fires as soon as it ended (``buffer_one``), told apart from instants missed before it started,
which follow ``catchup``."""

from __future__ import annotations

import pytest

from molens.errors import ValidationError
from molens.model import ExecutionResult, Task, validate_create
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
        validate_create({"type": "periodic", "interval_ms": 1_000, "callback_url": URL, "overlap": "allow"})
    assert e.value.field == "overlap" and "'skip' or 'buffer_one'" in str(e.value)
    spec = validate_create({"type": "delayed", "interval_ms": 1_000, "callback_url": URL, "overlap": "skip"})
    assert spec.overlap == "skip"
