"""The time wheel against a sorted reference model, plus its edge cases (levels, overflow, re-add)."""

from __future__ import annotations

import gc
import os
import tracemalloc
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molens.schedule.wheel import DEFAULT_HORIZON_MS, HierarchicalWheel

YEAR_MS = 365 * 86_400_000
KEYS = 41  # small key pool: lots of re-adds, moves and removes of the same keys
T0 = 1_790_000_000_000


@dataclass
class Reference:
    """The obvious implementation: a dict of key -> (due, add order), sorted on every advance."""

    pending: dict[object, tuple[int, int]] = field(default_factory=dict)
    seq: int = 0

    def add(self, key: object, due: int) -> None:
        self.pending[key] = (due, self.seq)
        self.seq += 1

    def remove(self, key: object) -> bool:
        return self.pending.pop(key, None) is not None

    def advance(self, now: int) -> list[object]:
        due = sorted((v, k) for k, v in self.pending.items() if v[0] <= now)
        for _, k in due:
            del self.pending[k]
        return [k for _, k in due]

    def earliest(self) -> int | None:
        return min((v[0] for v in self.pending.values()), default=None)


def check_same(wheel: HierarchicalWheel[object], ref: Reference) -> None:
    assert len(wheel) == len(ref.pending)
    for key, (due, _) in ref.pending.items():
        assert key in wheel
        assert wheel.due_of(key) == due
    for key in range(KEYS):
        if key not in ref.pending:  # never added, removed, or handed out
            assert key not in wheel and wheel.due_of(key) is None
    deadline = wheel.next_deadline()
    earliest = ref.earliest()
    if earliest is None:
        assert deadline is None
    else:
        # Never later than the first due timer (so a shell sleeping until it is never late).
        assert deadline is not None and deadline <= earliest
    counted = sum(c.count for lv in range(wheel.levels) for c in wheel.distribution(lv))
    assert counted + wheel.overflow_count == len(wheel)


offsets = st.one_of(
    st.integers(-50, 50),  # overdue and current tick
    st.integers(0, 2_000),  # low levels
    st.integers(0, 10**7),  # higher levels
    st.integers(0, 10**12),  # beyond the top level of small test wheels: overflow
)
steps = st.one_of(st.just(0), st.integers(0, 30), st.integers(0, 5_000), st.integers(0, 10**9), st.integers(0, 10**12))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, KEYS - 1), offsets),
        st.tuples(st.just("remove"), st.integers(0, KEYS - 1), st.just(0)),
        st.tuples(st.just("advance"), st.just(0), steps),
        st.tuples(st.just("deadline"), st.just(0), st.just(0)),
        # eight keys 3 ms apart: dense buckets, read a part at a time
        st.tuples(st.just("spread"), st.integers(0, KEYS - 1), offsets),
        # the key fired last: re-added (a periodic task's next occurrence) or removed
        st.tuples(st.just("readd_fired"), st.integers(0, 3), offsets),
        st.tuples(st.just("remove_fired"), st.integers(0, 3), st.just(0)),
    ),
    max_size=120,
)


_advance_small = st.tuples(st.just("advance"), st.just(0), st.integers(1, 25))
_touch_fired = st.one_of(
    st.tuples(st.just("readd_fired"), st.integers(0, 3), st.integers(0, 300)),
    st.tuples(st.just("remove_fired"), st.integers(0, 3), st.just(0)),
)
dense_ops = st.lists(
    st.one_of(
        st.tuples(st.just("spread"), st.integers(0, KEYS - 1), st.integers(0, 300)),
        _advance_small,
        _advance_small,
        _advance_small,
        _touch_fired,
        _touch_fired,
        st.tuples(st.just("remove"), st.integers(0, KEYS - 1), st.just(0)),
        st.tuples(st.just("add"), st.integers(0, KEYS - 1), st.integers(0, 300)),
    ),
    min_size=20,
    max_size=150,
)


@settings(max_examples=int(os.environ.get("WHEEL_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tick=st.sampled_from([1, 3, 10]),
    size=st.sampled_from([2, 3, 4, 16, 512]),
    horizon=st.sampled_from([1, 1_000, 10**6, 10**9]),
    start=st.integers(-(10**6), 10**6),
    script=ops,
)
def test_wheel_matches_sorted_reference(tick: int, size: int, horizon: int, start: int, script: list[tuple[str, int, int]]) -> None:
    """Random adds/removes/advances: every timer comes out exactly once, never early, in due order."""
    run_script(HierarchicalWheel(tick_ms=tick, wheel_size=size, start_ms=start, horizon_ms=horizon), start, script)


@settings(max_examples=int(os.environ.get("WHEEL_EXAMPLES", "200")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tick=st.sampled_from([1, 10]), size=st.sampled_from([4, 8, 16]), script=dense_ops)
def test_dense_buckets_read_in_small_steps_match_reference(tick: int, size: int, script: list[tuple[str, int, int]]) -> None:
    """Opened buckets read a part at a time, with fired keys re-added or removed meanwhile."""
    run_script(HierarchicalWheel(tick_ms=tick, wheel_size=size, start_ms=0), 0, script)


def run_script(wheel: HierarchicalWheel[object], start: int, script: list[tuple[str, int, int]]) -> None:
    ref = Reference()
    now = start
    fired: list[object] = []
    for op, key, arg in script:
        if op in ("readd_fired", "remove_fired"):
            if not fired:
                continue
            key = fired[key % len(fired)]  # type: ignore[assignment]
            op = op.split("_")[0] if op == "remove_fired" else "add"
        if op == "add":
            wheel.add(key, now + arg)
            ref.add(key, now + arg)
        elif op == "spread":
            for j in range(8):
                wheel.add((key + j) % KEYS, now + arg + 3 * j)
                ref.add((key + j) % KEYS, now + arg + 3 * j)
        elif op == "remove":
            assert wheel.remove(key) == ref.remove(key)
        elif op == "advance":
            now += arg
            got = wheel.advance(now)
            assert got == ref.advance(now)
            fired = got or fired
        else:
            deadline = wheel.next_deadline()
            if deadline is not None and deadline > now:
                # Sleeping until the deadline: nothing is due before it.
                assert wheel.advance(deadline - 1) == ref.advance(deadline - 1)
                now = deadline - 1
            elif deadline is not None:
                got = wheel.advance(now)
                assert got == ref.advance(now)
                fired = got or fired
        check_same(wheel, ref)
    # Drain by following next_deadline, as the leader's shell does.
    for _ in range(10_000):
        deadline = wheel.next_deadline()
        if deadline is None:
            break
        now = max(now, deadline)
        assert wheel.advance(now) == ref.advance(now)
        check_same(wheel, ref)
    assert len(wheel) == 0 and not ref.pending


def test_default_levels_cover_five_years_without_overflow() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(start_ms=T0)
    assert wheel.tick_ms == 10
    assert DEFAULT_HORIZON_MS >= 5 * YEAR_MS
    wheel.add("five-years", T0 + 5 * YEAR_MS + 2 * 86_400_000)
    assert wheel.overflow_count == 0
    top = wheel.levels - 1
    assert (wheel.wheel_size - 1) * wheel.level_span_ms(top) >= 5 * YEAR_MS


def test_timer_beyond_top_level_waits_in_overflow_and_fires_on_time() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, wheel_size=4, start_ms=0, horizon_ms=1_000)
    far = 50 * YEAR_MS + 7
    wheel.add("far", far)
    wheel.add("near", 35)
    assert wheel.overflow_count == 1
    assert wheel.advance(far - 1) == ["near"]
    assert wheel.overflow_count == 0 and "far" in wheel
    assert wheel.advance(far) == ["far"]


def test_long_empty_stretch_is_one_step() -> None:
    """Ten years of 1 ms ticks with nothing due: must not walk 3e11 ticks."""
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=1, start_ms=0)
    wheel.add("a", 10 * YEAR_MS)
    wheel.add("b", 10 * YEAR_MS + 1)
    assert wheel.advance(10 * YEAR_MS - 1) == []
    assert wheel.next_deadline() == 10 * YEAR_MS
    assert wheel.advance(20 * YEAR_MS) == ["a", "b"]
    assert wheel.next_deadline() is None


def test_deadline_follows_empty_ticks_to_the_next_bucket() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=0)
    wheel.add("x", 1_234_567)
    calls = 0
    while (deadline := wheel.next_deadline()) is not None:
        fired = wheel.advance(deadline)
        calls += 1
        if fired:
            assert fired == ["x"] and deadline == 1_234_567
    assert calls <= 2 * wheel.levels + 2  # one wake per cascade, not per tick


def test_current_tick_fires_in_exact_due_order_not_tick_order() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, start_ms=1_000)
    for key, due in [("c", 1_017), ("a", 1_011), ("b", 1_015), ("a2", 1_011)]:
        wheel.add(key, due)
    assert wheel.advance(1_010) == []
    assert wheel.next_deadline() == 1_011
    assert wheel.advance(1_011) == ["a", "a2"]
    assert wheel.next_deadline() == 1_015
    assert wheel.advance(1_016) == ["b"]
    assert wheel.advance(1_017) == ["c"]


def test_ties_come_out_in_add_order_across_levels() -> None:
    """Equal due times added at different moments (different levels) keep add order."""
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=1, wheel_size=4, start_ms=0)
    wheel.add("first", 1_000)  # a high level
    wheel.advance(990)
    wheel.add("second", 1_000)  # level 0
    wheel.add("zero", 995)
    assert wheel.advance(1_000) == ["zero", "first", "second"]


def test_readd_moves_the_timer() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, start_ms=0)
    wheel.add("t", 100_000)
    wheel.add("t", 50)
    assert len(wheel) == 1 and wheel.due_of("t") == 50
    assert wheel.advance(60) == ["t"]
    assert wheel.advance(200_000) == []


def test_remove_after_cascade_and_in_current_tick() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, wheel_size=4, start_ms=0)
    for i in range(20):
        wheel.add(f"k{i}", 1_000 + i)
    assert wheel.advance(999) == []  # the high-level bucket has cascaded by now
    assert wheel.remove("k3") and not wheel.remove("k3")
    assert wheel.advance(1_005) == ["k0", "k1", "k2", "k4", "k5"]
    assert wheel.remove("k7")  # in the current tick's heap
    assert wheel.advance(1_008) == ["k6", "k8"]
    assert "k7" not in wheel and wheel.due_of("k7") is None
    assert wheel.advance(2_000) == [f"k{i}" for i in range(9, 20)]


def test_overdue_add_fires_on_next_advance_and_clock_never_rewinds() -> None:
    wheel: HierarchicalWheel[tuple[str, int]] = HierarchicalWheel(tick_ms=10, start_ms=5_000)
    wheel.add(("task", 1), 10)
    assert wheel.next_deadline() == 10
    assert wheel.advance(4_000) == [("task", 1)]
    assert wheel.current_ms == 5_000


def test_distribution_reports_occupancy_per_bucket_window() -> None:
    wheel: HierarchicalWheel[int] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=0)
    for i in range(5):
        wheel.add(i, 25)  # level 0, window 2
    wheel.add(99, 700)  # beyond level 1 (8 x 80 ms): level 2
    wheel.add(98, 300)  # level 1 window 3
    row0 = wheel.distribution(0)
    assert len(row0) == 8 and row0[2].count == 5 and row0[2].start_ms == 20 and row0[2].span_ms == 10
    row1 = wheel.distribution(1)
    assert row1[3].count == 1 and row1[3].span_ms == 80
    assert sum(c.count for c in wheel.distribution(2)) == 1
    with pytest.raises(ValueError):
        wheel.distribution(wheel.levels)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        HierarchicalWheel(tick_ms=0)
    with pytest.raises(ValueError):
        HierarchicalWheel(wheel_size=1)


def test_pending_timer_costs_at_most_200_bytes_of_heap() -> None:
    """Scaled-down form of scripts/bench/wheel.py's memory figure (the bench measures 1,000,000)."""
    n = 100_000
    keys = [f"01J{i:023d}" for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        wheel: HierarchicalWheel[str] = HierarchicalWheel(start_ms=T0)
        for i, key in enumerate(keys):
            wheel.add(key, T0 + (i * 7_919) % 3_600_000)
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(wheel) == n
    assert used / n <= 200


def test_handed_out_key_is_gone_and_can_come_back() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=0)
    for i in range(30):
        wheel.add(f"k{i}", 100 + 10 * i)  # spread over level-1 buckets: opened as sorted runs
    assert wheel.advance(150) == [f"k{i}" for i in range(6)]
    assert not wheel.remove("k2") and "k2" not in wheel and len(wheel) == 24
    wheel.add("k2", 155)  # a periodic task's next occurrence, same key
    wheel.add("k9", 151)  # moved out of an opened run
    assert wheel.remove("k10")  # removed from inside an opened run
    assert wheel.next_deadline() == 151
    assert wheel.advance(200) == ["k9", "k2", "k6", "k7", "k8"]
    assert sum(c.count for lv in range(wheel.levels) for c in wheel.distribution(lv)) == len(wheel) == 19


def test_big_bucket_opens_in_exact_order_with_ties_in_add_order() -> None:
    """More than 20,000 timers in one bucket (the second-sort path), many with equal due times."""
    wheel: HierarchicalWheel[int] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=0)
    n = 25_000
    dues = [700 + (i * 7_919) % 600 for i in range(n)]  # one level-2 bucket (640 ms wide)
    for i, due in enumerate(dues):
        wheel.add(i, due)
    wheel.remove(17)
    got: list[int] = []
    for now in range(0, 1_400, 3):
        got.extend(wheel.advance(now))
    assert got == sorted((i for i in range(n) if i != 17), key=lambda i: (dues[i], i))


def test_deadline_skips_removed_timers_at_the_head_of_an_opened_bucket() -> None:
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=0)
    for i in range(6):
        wheel.add(f"a{i}", 200 + i)  # one level-1 bucket [160, 240), opened at 160
    wheel.add("b", 700)
    assert wheel.advance(160) == [] and wheel.next_deadline() == 200
    assert wheel.remove("a0") and wheel.remove("a1")
    assert wheel.next_deadline() == 202
    for i in range(2, 6):
        wheel.remove(f"a{i}")
    assert wheel.next_deadline() == 640  # the bucket holding "b"
    assert sum(c.count for c in wheel.distribution(1)) == 0
    assert wheel.advance(700) == ["b"] and len(wheel) == 0


def test_keys_handed_out_from_a_partly_read_bucket_are_gone() -> None:
    """Handed-out keys linger (stale) in the index until their bucket is used up: never visible."""
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=0)
    for i in range(8):
        wheel.add(f"k{i}", 170 + 10 * i)  # one level-1 bucket, [160, 240)
    assert wheel.advance(185) == ["k0", "k1"]
    assert len(wheel) == 6 and "k0" not in wheel and wheel.due_of("k1") is None
    assert not wheel.remove("k0")
    wheel.add("k1", 500)  # re-added after firing
    assert len(wheel) == 7 and wheel.due_of("k1") == 500
    wheel.add("k2", 600)  # moved while still pending
    assert wheel.remove("k3")
    assert wheel.advance(240) == ["k4", "k5", "k6", "k7"]
    assert len(wheel) == 2 and sorted(k for k in ("k0", "k1", "k2", "k3") if k in wheel) == ["k1", "k2"]
    assert wheel.advance(1_000) == ["k1", "k2"] and len(wheel) == 0
