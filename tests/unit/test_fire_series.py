"""The hour and day series behind the dashboard's charts (molens/web/fire_series.py): buckets roll
over with time, memory is fixed whatever the rate or the clock does, members' series add up, and
the fire-time observer feeds them."""

from __future__ import annotations

import doctest

import pytest
from prometheus_client import CollectorRegistry

from molens.actors.messages import SetObserver
from molens.actors.stats import Stats, StatsBuffer, StatsClient
from molens.delivery import DeliveryOutcome, FireRequest, FireResult
from molens.model import FireKind
from molens.web import fire_series
from molens.web.fire_series import FIELDS, SHAPES, FireSeries, Ring, Span, merge
from molens.web.metrics import FireMetrics

T0 = 1_795_978_200_000  # a multiple of 5 min: the start of a bucket in both rings


def col(ring: Ring, now_ms: int, name: str) -> list[float]:
    i = FIELDS.index(name)
    return [c[i] for _, c in ring.read(now_ms)]


def test_module_examples_hold() -> None:
    assert doctest.testmod(fire_series).failed == 0


def test_a_bucket_rolls_over_when_time_passes_its_end() -> None:
    r = Ring(step_ms=10_000, slots=6)
    r.add(T0 + 9_999, fires=1.0)
    r.add(T0 + 10_000, fires=1.0, failures=1.0)
    assert col(r, T0 + 10_000, "fires")[-2:] == [1.0, 1.0]
    assert col(r, T0 + 10_000, "failures")[-2:] == [0.0, 1.0]
    # read later: the window slides, buckets nothing was added to are zeros, nothing is lost early
    assert col(r, T0 + 30_000, "fires") == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    starts = [t for t, _ in r.read(T0 + 30_000)]
    assert starts == [T0 - 20_000 + 10_000 * k for k in range(6)]
    # six buckets on, the first two have left the window
    assert col(r, T0 + 70_000, "fires") == [0.0] * 6


def test_a_slot_reused_by_a_later_bucket_starts_from_zero() -> None:
    r = Ring(step_ms=10_000, slots=3)
    for k in range(3):
        r.add(T0 + k * 10_000, fires=float(k + 1), lateness_max_ms=50.0)
    r.add(T0 + 30_000, fires=1.0, lateness_max_ms=2.0)  # the slot of T0, reused
    assert col(r, T0 + 30_000, "fires") == [2.0, 3.0, 1.0]
    assert col(r, T0 + 30_000, "lateness_max_ms") == [50.0, 50.0, 2.0]


def test_a_time_older_than_the_ring_is_dropped_and_a_late_one_inside_it_counted() -> None:
    r = Ring(step_ms=10_000, slots=3)
    r.add(T0 + 50_000, fires=1.0)
    r.add(T0 + 20_000, fires=7.0)  # three buckets back: outside
    r.add(T0 + 30_000, fires=2.0)  # two back: inside (an attempt reported after the next bucket began)
    assert col(r, T0 + 50_000, "fires") == [2.0, 0.0, 1.0]


def test_memory_is_fixed_whatever_the_clock_does() -> None:
    r = Ring(step_ms=10_000, slots=4)
    r.add(T0, fires=1.0)
    r.add(T0 + 10**12, fires=1.0)  # a clock jump far ahead: one pass over the slots, not over the gap
    assert len(r.read(T0 + 10**12)) == 4 and col(r, T0 + 10**12, "fires") == [0.0, 0.0, 0.0, 1.0]
    r.add(T0, fires=5.0)  # and back again: too old, dropped
    assert sum(col(r, T0 + 10**12, "fires")) == 1.0
    assert len(r._cells) == 4
    with pytest.raises(ValueError):
        Ring(step_ms=0, slots=4)


def test_the_hour_and_the_day_have_their_shapes_and_the_answer_its_columns() -> None:
    s = FireSeries()
    s.attempt(T0 + 1_000, failed=False, retry=False)
    s.attempt(T0 + 2_000, failed=True, retry=False)
    s.attempt(T0 + 12_000, failed=True, retry=True)
    s.lateness(T0 + 2_000, [3.0, 9.0, -1.0])  # a fire started before its due time counts as 0 late
    s.lateness(T0 + 3_000, [])
    hour = s.to_json(Span.HOUR, T0 + 15_000)
    day = s.to_json(Span.DAY, T0 + 15_000)
    assert (hour["step_ms"], len(hour["t_ms"])) == SHAPES[Span.HOUR] == (10_000, 360)
    assert (day["step_ms"], len(day["t_ms"])) == (300_000, 288)
    assert hour["t_ms"][-1] == T0 + 10_000 and day["t_ms"][-1] == T0
    assert (hour["fires"][-2:], hour["failures"][-2:], hour["retries"][-2:]) == ([2, 1], [1, 1], [0, 1])
    assert (day["fires"][-1], day["failures"][-1], day["retries"][-1]) == (3, 2, 1)
    assert (hour["lateness_n"][-2], hour["lateness_sum_ms"][-2], hour["lateness_max_ms"][-2]) == (3, 12.0, 9.0)
    assert set(FIELDS) <= hour.keys() and all(len(hour[f]) == 360 for f in FIELDS)
    assert sum(hour["fires"][:-2]) == 0


def test_members_series_add_up_and_the_max_stays_a_max() -> None:
    a, b = FireSeries(), FireSeries()
    a.attempt(T0 + 1_000, failed=True, retry=False)
    a.lateness(T0 + 1_000, [4.0])
    b.attempt(T0 + 2_000, failed=False, retry=True)
    b.attempt(T0 + 2_000, failed=False, retry=False)
    b.lateness(T0 + 2_000, [10.0, 2.0])
    now = T0 + 5_000
    out = merge(Span.HOUR, now, [a.to_json(Span.HOUR, now), b.to_json(Span.HOUR, now)])
    assert (out["fires"][-1], out["failures"][-1], out["retries"][-1]) == (3, 1, 1)
    assert (out["lateness_n"][-1], out["lateness_sum_ms"][-1], out["lateness_max_ms"][-1]) == (3, 16.0, 10.0)
    assert out["t_ms"] == a.to_json(Span.HOUR, now)["t_ms"]


def test_a_member_whose_clock_is_ahead_counts_in_the_buckets_it_shares() -> None:
    ahead = FireSeries()
    ahead.attempt(T0 + 1_000, failed=False, retry=False)
    ahead.attempt(T0 + 21_000, failed=False, retry=False)  # beyond this node's newest bucket
    mine_now = T0 + 5_000
    out = merge(Span.HOUR, mine_now, [ahead.to_json(Span.HOUR, T0 + 25_000), {"step_ms": 300_000, "t_ms": [T0]},
                                      {"t_ms": "broken"}])
    assert out["fires"][-1] == 1 and sum(out["fires"]) == 1 and out["t_ms"][-1] == T0


def test_the_stats_observer_feeds_the_series() -> None:
    now = [T0 + 1_000]
    m = FireMetrics(CollectorRegistry(), clock=lambda: now[0])
    ref = Stats.start()
    try:
        stats = StatsClient(ref)
        stats.ref.tell(SetObserver(m))

        def attempt(n: int, outcome: DeliveryOutcome) -> tuple[FireRequest, FireResult, float]:
            req = FireRequest(fire_id="t-1", task_id="t", attempt=n, kind=FireKind.CALLBACK, url="http://cb/",
                              body=b"", scene="default", timeout_ms=1000, not_before_ms=T0)
            res = FireResult(fire_id="t-1", kind=FireKind.CALLBACK, status_code=500, outcome=outcome,
                             response_head=b"", latency_ms=5.0, worker="n1")
            return req, res, float(T0 + 20)

        stats.delivered([attempt(1, DeliveryOutcome.HTTP_ERROR), attempt(2, DeliveryOutcome.SUCCESS)])
        buf = StatsBuffer(stats)
        buf.sample("fire_lateness", [7.0])
        buf.flush(0)
        stats.to_json()  # an ask after the tells: they have been handled
    finally:
        ref.stop()
    out = m.series.to_json(Span.HOUR, now[0])
    assert (out["fires"][-1], out["failures"][-1], out["retries"][-1]) == (2, 1, 1)
    # lateness from the delivered attempts (started 20 ms after due, twice) and the sampled one
    assert (out["lateness_n"][-1], out["lateness_sum_ms"][-1], out["lateness_max_ms"][-1]) == (3, 47.0, 20.0)
