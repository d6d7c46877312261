"""The near-term window (molens/schedule/horizon.py): only timers within the horizon in the wheel,
slices read at most ``slice_limit`` entries, nothing lost or handed out twice at a slice boundary,
also when wheel effects reach it after a slice was read from a newer state of the index."""

from __future__ import annotations

import bisect
import random
from collections import deque

import pytest

from molens.schedule.horizon import HorizonWheel

NOW = 1_700_000_000_000


class Index:
    """A due index in memory: sorted ``(due_ms, key)``, as the store keeps it in lmdb."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str]] = []
        self.due: dict[str, int] = {}
        self.reads: list[tuple[tuple[int, str], int, int]] = []

    def put(self, key: str, due: int | None) -> None:
        old = self.due.pop(key, None)
        if old is not None:
            self.rows.remove((old, key))
        if due is not None:
            self.due[key] = due
            bisect.insort(self.rows, (due, key))

    def read(self, start: tuple[int, str], until: int, limit: int) -> list[tuple[int, str]]:
        self.reads.append((start, until, limit))
        i = bisect.bisect_left(self.rows, start)
        out = []
        for r in self.rows[i:]:
            if r[0] >= until or len(out) >= limit:
                break
            out.append(r)
        return out


def fill(w: HorizonWheel, idx: Index, now: int) -> None:
    while w.load_wanted(now):
        w.load(idx.read, now)


def test_the_wheel_holds_only_the_horizon_and_a_slice_reads_at_most_its_limit() -> None:
    idx = Index()
    for i in range(100):
        idx.put(f"t{i:03}", NOW + i * 1_000)  # one a second for 100 s
    w = HorizonWheel(10, NOW, horizon_ms=10_000, slice_limit=3)
    fill(w, idx, NOW)
    assert len(w) == 10  # due in [NOW, NOW + 10 s)
    assert all(limit == 3 for _s, _u, limit in idx.reads) and len(idx.reads) == 4  # 3 + 3 + 3 + 1
    assert w.loaded_until_ms == NOW + 10_000
    assert not w.load_wanted(NOW + w.top_up_ms - 1) and w.load_wanted(NOW + w.top_up_ms)
    assert w.next_load_ms() == NOW + w.top_up_ms


def test_a_slice_boundary_inside_one_millisecond_loses_and_repeats_nothing() -> None:
    idx = Index()
    keys = [f"k{i:02}" for i in range(20)]
    for k in keys:
        idx.put(k, NOW + 500)  # twenty timers due in the same ms: slices of 3 cut through it
    w = HorizonWheel(10, NOW, horizon_ms=2_000, slice_limit=3)
    fill(w, idx, NOW)
    assert w.loaded == 20 and len(w) == 20
    assert w.advance(NOW + 500) == keys


def test_an_add_at_the_boundary_waits_in_the_index_for_its_slice() -> None:
    idx = Index()
    w = HorizonWheel(10, NOW, horizon_ms=1_000, slice_limit=100)
    fill(w, idx, NOW)
    edge = w.loaded_until_ms
    for key, due in (("before", edge - 1), ("at", edge), ("after", edge + 1)):
        idx.put(key, due)
        w.add(key, due)
    assert len(w) == 1  # only the one before the boundary
    got: list[str] = []
    now = NOW
    while now < NOW + 5_000:
        fill(w, idx, now)
        got += w.advance(now)
        now += 10
    assert got == ["before", "at", "after"]


def test_an_add_moves_a_key_out_of_the_window_and_back() -> None:
    idx = Index()
    w = HorizonWheel(10, NOW, horizon_ms=1_000)
    fill(w, idx, NOW)
    w.add("a", NOW + 100)
    assert len(w) == 1
    w.add("a", NOW + 60_000)  # moved beyond the horizon: out of the wheel, the index has it
    assert len(w) == 0 and w.advance(NOW + 200) == []
    w.add("a", NOW + 300)
    assert w.advance(NOW + 300) == ["a"]


def test_requeue_puts_a_handed_out_key_back_whatever_the_window() -> None:
    w = HorizonWheel(10, NOW, horizon_ms=1_000)
    w.requeue("a", NOW + 5_000)
    assert w.advance(NOW + 5_000) == ["a"]


@pytest.mark.parametrize("seed", range(300))
def test_lagging_effects_and_a_loader_reading_newer_state_hand_out_each_due_once(seed: int) -> None:
    """The store applies first and the wheel hears of it later (the mailbox): slices may read a newer
    index than the effects the wheel has seen. Every timer still comes out once, at its due time."""
    rng = random.Random(seed)
    idx = Index()
    horizon = rng.choice([100, 300, 1_000])
    w = HorizonWheel(10, NOW, horizon_ms=horizon, slice_limit=rng.choice([1, 2, 5, 50]))
    lag: deque[tuple[int, str, int | None]] = deque()  # (deliver at, key, due) in apply order
    out: dict[str, list[tuple[int, int]]] = {}  # key -> [(handed out at, due then)]
    now = NOW
    n = 0
    end = NOW + 5_000
    while now < end + 4 * horizon + 100:
        for _ in range(rng.randint(0, 3)):  # applied entries: create, move, delete
            if now >= end:
                break
            r = rng.random()
            if r < 0.6 or not idx.due:
                n += 1
                key, due = f"k{n}", now + rng.choice([0, 1, horizon - 1, horizon, horizon + 1, rng.randint(0, 3 * horizon)])
            elif r < 0.85:
                key, due = rng.choice(sorted(idx.due)), now + rng.randint(0, 3 * horizon)
            else:
                key, due = rng.choice(sorted(idx.due)), None
            idx.put(key, due)
            lag.append((now + rng.randint(0, 30), key, due))
        while lag and lag[0][0] <= now:  # effects reach the wheel in log order
            _, key, due = lag.popleft()
            if due is None:
                w.remove(key)
            else:
                w.add(key, due)
        if rng.random() < 0.7:  # a slow loader sometimes skips a turn
            w.load(idx.read, now) if w.load_wanted(now) else None
        for key in w.advance(now):
            due = idx.due.get(key)
            if due is not None and due <= now:  # the state machine refuses a stale one
                out.setdefault(key, []).append((now, due))
                idx.put(key, None)  # dispatched: no longer due
                lag.append((now + rng.randint(0, 30), key, None))
        now += 10
    assert not idx.due or min(idx.due.values()) > now - 10  # everything due was handed out
    for key, outs in out.items():
        assert len(outs) == 1, (key, outs)
    assert w.max_size <= len(out) + 1
