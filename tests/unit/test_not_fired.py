"""Counting what did not fire (docs/observability.md#metrics): the state machine counts each decision
not to fire (``Writes.counts``, keys ``machine.NOT_FIRED``) where it makes it, so every replica that
applies the same entries counts the same; through machine.apply and the in-memory replica."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import lmdb

from molens.fsm.commands import Command, encode
from molens.fsm.machine import NOT_FIRED, Applied
from molens.fsm.store import TaskStore
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


def test_an_apply_tried_again_after_the_store_grew_counts_its_entries_once(tmp_path: Path) -> None:
    """The lmdb store applies a batch again when its map was full: the not-fired and dead-letter
    tallies (``molens_occurrences_not_fired_total``, ``molens_dead_letters_total``) of the failed
    attempt are dropped, so each entry counts once, as on a replica whose map had room."""
    h, sent = H(), []
    mem_apply = h.s.apply

    def recording(cmd: Command) -> Applied:
        sent.append(cmd)
        return mem_apply(cmd)

    h.s.apply = recording  # type: ignore[method-assign]
    t = h.create(type="periodic", interval_ms=IV, catchup="none")
    h.now = t.created_ms + 65_000
    h.dispatch(t.id)  # one instant skipped
    d = h.create(type="delayed", interval_ms=1_000, retry={"max_retries": 0})
    h.now += 2_000
    h.fire_due(d.id)
    h.answer(d.id, code=500)  # one dead letter
    assert _counts(h) == {"skipped_catchup_none": 1} and h.s.dead
    store = TaskStore(tmp_path / "fsm", durable=False, map_size=1 << 20)  # room to double once per entry
    write_days, calls = store._write_days, itertools.count()

    def full_every_other_time(txn: Any, days: dict[int, int]) -> None:
        if next(calls) % 2 == 0:
            raise lmdb.MapFullError("map full (injected)")
        write_days(txn, days)

    store._write_days = full_every_other_time  # type: ignore[method-assign]
    for i, cmd in enumerate(sent):
        store.apply_batch([(i + 1, encode(cmd))])
    assert next(calls) == 2 * len(sent)  # every entry's first attempt failed
    assert {k: v for k, v in store.not_fired.items() if v} == {"skipped_catchup_none": 1}
    assert store.dead_written == {"retries_exhausted": 1}
    store.close()
