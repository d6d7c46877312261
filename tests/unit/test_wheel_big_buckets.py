"""Big reached buckets are sorted window by window (``_CHUNK_MIN``): same answers as a sorted reference.

The property tests in test_wheel.py use small buckets; these drive buckets past the chunking
threshold (lowered here so that many windows, removals, moves and jumps across windows happen).
"""

from __future__ import annotations

import random

import pytest

from molens.schedule import wheel as wheel_mod
from molens.schedule.wheel import HierarchicalWheel

T0 = 1_790_000_000_000


def _check(w: HierarchicalWheel[int], pending: dict[int, tuple[int, int]]) -> None:
    assert len(w) == len(pending)
    earliest = min((d for d, _ in pending.values()), default=None)
    deadline = w.next_deadline()
    if earliest is None:
        assert deadline is None
    else:
        assert deadline is not None and deadline <= earliest
    counted = sum(c.count for lv in range(w.levels) for c in w.distribution(lv))
    assert counted == len(pending) - w.overflow_count


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("chunk_min", [5, 200])
def test_chunked_big_buckets_hand_out_every_timer_once_in_due_order(
    seed: int, chunk_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wheel_mod, "_CHUNK_MIN", chunk_min)
    rng = random.Random(seed)
    w: HierarchicalWheel[int] = HierarchicalWheel(tick_ms=10, wheel_size=8, start_ms=T0)
    pending: dict[int, tuple[int, int]] = {}
    seq = 0
    span = rng.choice([2_000, 20_000, 200_000])
    for key in range(2_000):
        due = T0 + rng.randrange(span) if rng.random() < 0.9 else T0 + rng.randrange(3) * 640  # ties at edges
        w.add(key, due)
        pending[key] = (due, seq)
        seq += 1
    now = T0
    while pending:
        r = rng.random()
        if r < 0.15:
            key = rng.randrange(2_400)
            assert w.remove(key) == (pending.pop(key, None) is not None)
        elif r < 0.3:
            key = rng.randrange(2_400)
            due = now + rng.randrange(-50, span // 4)
            w.add(key, due)
            pending[key] = (due, seq)
            seq += 1
        else:
            now += rng.choice([1, 7, 10, 10, 10, 33, 640, 5_000, span // 10])
            got = w.advance(now)
            want = sorted((v, k) for k, v in pending.items() if v[0] <= now)
            assert got == [k for _, k in want]
            for k in got:
                del pending[k]
        if rng.random() < 0.05:
            _check(w, pending)
    _check(w, pending)
    assert w.advance(now + 10 * span) == []


def test_a_real_size_big_bucket_comes_out_in_order() -> None:
    rng = random.Random(7)
    w: HierarchicalWheel[int] = HierarchicalWheel(tick_ms=10, start_ms=T0)
    n = 30_000  # one level-2 bucket past the threshold once the clock reaches it
    start = T0 + 3_000_000 - T0 % 2_621_440
    dues = [start + 2_621_440 + rng.randrange(2_621_440) for _ in range(n)]
    for k, d in enumerate(dues):
        w.add(k, d)
    out: list[int] = []
    now = T0
    while len(w):
        deadline = w.next_deadline()
        assert deadline is not None
        now = max(now + 10, deadline)
        out += w.advance(now)
    assert out == sorted(range(n), key=lambda k: (dues[k], k))
