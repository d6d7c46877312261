"""Counting what did not fire (docs/observability.md#metrics): the state machine counts each decision
not to fire (``Writes.counts``, keys ``machine.NOT_FIRED``) where it makes it, so every replica that
applies the same entries counts the same; through machine.apply and the in-memory replica."""

from __future__ import annotations

from molens.fsm.machine import NOT_FIRED
from tests.unit.test_catch_up import IV
from tests.unit.test_fsm_machine import H
from tests.unit.test_overlap import _slow


def _counts(h: H) -> dict[str, int]:
    assert set(h.s.not_fired) <= set(NOT_FIRED)
    return {k: v for k, v in h.s.not_fired.items() if v}


def test_instants_due_while_an_occurrence_ran_count_as_skipped_by_overlap() -> None:
    h = H()
    t = h.create(type="periodic", interval_ms=IV)
    _slow(h, t.id, t.created_ms + 45_000)  # 20, 30, 40 s came due while it ran
    assert _counts(h) == {"skipped_overlap": 1}


def test_missed_instants_count_by_catchup_rule() -> None:
    one, none, window = H(), H(), H()
    for h, kw in ((one, {}), (none, {"catchup": "none"}), (window, {"catchup": "all", "catchup_window_ms": 20_000})):
        t = h.create(type="periodic", interval_ms=IV, **kw)
        h.now = t.created_ms + 65_000  # down for the instants at 10 .. 60 s
        if h is one:
            h.cycle(t.id)  # the late fire stands for the others, counted when the next occurrence is set
        else:
            h.dispatch(t.id)  # none: refused, moved past the missed instants; all: the window's first fires
    assert _counts(one) == {"collapsed_catchup_one": 1}
    assert _counts(none) == {"skipped_catchup_none": 1}
    assert _counts(window) == {"skipped_catchup_window": 1}


def test_the_bounds_that_end_a_task_count_as_dropped() -> None:
    runs, end = H(), H()
    t = runs.create(type="periodic", interval_ms=IV, max_runs=2)
    u = end.create(type="periodic", interval_ms=IV, end_at=end.now + 25_000)
    for h, tid in ((runs, t.id), (end, u.id)):
        h.cycle(tid)
        h.cycle(tid)
        assert h.t(tid).status == "done"
    assert _counts(runs) == {"dropped_max_runs": 1}
    assert _counts(end) == {"dropped_end_at": 1}


def test_a_replica_applying_the_same_entries_counts_the_same() -> None:
    a, b = H(), H()
    for h in (a, b):
        t = h.create(type="periodic", interval_ms=IV, catchup="none")
        h.now = t.created_ms + 65_000
        h.dispatch(t.id)
    assert _counts(a) == _counts(b) == {"skipped_catchup_none": 1}
