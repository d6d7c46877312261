"""Cron and fixed-rate next-fire rules, DST checked against a brute-force scan of real instants."""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from molens.errors import ValidationError
from molens.schedule.cron import (
    ZONES,
    ScheduleError,
    ScheduleSpec,
    next_after_misfire,
    next_cron_fire,
    next_fire_after,
    next_fixed_rate,
    preview,
    validate_cron,
    validate_timezone,
)

HOUR = 3_600_000
DAY = 24 * HOUR


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


# -- a brute-force reference ------------------------------------------------------------------------


def field_set(text: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = b = int(rng)
            if step:
                b = hi
        out.update(range(a, b + 1, int(step or 1)))
    return out


class Matcher:
    """Simple cron fields only (numbers, *, lists, ranges, steps); day fields must be *."""

    def __init__(self, expr: str) -> None:
        f = expr.split()
        six = len(f) == 6
        if not six:
            f = ["0", *f]
        self.sec, self.min, self.hour = field_set(f[0], 0, 59), field_set(f[1], 0, 59), field_set(f[2], 0, 23)
        assert f[3:] == ["*", "*", "*"]
        # Debian cron: a job whose minute or hour starts with * follows real time across DST changes
        # (gap wall times never come, overlap ones come twice); cronsim treats 6-field ones so too
        self.wildcard = six or f[1].startswith("*") or f[2].startswith("*")
        self.step_s = 1 if len(expr.split()) == 6 else 60

    def matches(self, wall: datetime) -> bool:
        return wall.second in self.sec and wall.minute in self.min and wall.hour in self.hour


def expected_fires(expr: str, tz: str, lo: int, hi: int) -> list[int]:
    """Every fire in [lo, hi) by scanning every real instant at the expression's resolution."""
    m, zone = Matcher(expr), ZoneInfo(tz)
    fires: set[int] = set()
    step = m.step_s * 1000
    t = lo - lo % step
    prev_off = None
    while t < hi:
        aware = datetime.fromtimestamp(t / 1000, UTC).astimezone(zone)
        off = aware.utcoffset()
        assert off is not None
        if prev_off is not None and off > prev_off and not m.wildcard:
            # spring forward: a job at a specific time runs once at the transition instant
            tr = t - step
            while datetime.fromtimestamp((tr + 1000) / 1000, UTC).astimezone(zone).utcoffset() == prev_off:
                tr += 1000
            tr += 1000
            gap_start = datetime.fromtimestamp(tr / 1000, UTC) + prev_off
            gap_end = datetime.fromtimestamp(tr / 1000, UTC) + off
            w = gap_start
            while w < gap_end:
                if m.matches(w):
                    fires.add(tr)
                    break
                w += timedelta(seconds=m.step_s)
        prev_off = off
        wall = aware.replace(tzinfo=None)
        if m.matches(wall) and (aware.fold == 0 or m.wildcard):
            fires.add(t)
        t += step
    return sorted(f for f in fires if lo <= f < hi)


def computed_fires(expr: str, tz: str, lo: int, hi: int) -> list[int]:
    out: list[int] = []
    t = next_cron_fire(expr, tz, lo - 1)
    while t < hi:
        assert not out or t > out[-1]
        out.append(t)
        t = next_cron_fire(expr, tz, t)
    return out


TRANSITIONS = {
    # zone: (spring-forward instant, fall-back instant) in 2026
    "Europe/Berlin": (ms("2026-03-29T01:00:00+00:00"), ms("2026-10-25T01:00:00+00:00")),
    "America/New_York": (ms("2026-03-08T07:00:00+00:00"), ms("2026-11-01T06:00:00+00:00")),
}
CASES = [
    # expression, half-width of the window around the transition
    ("30 2 * * *", 3 * DAY),  # daily in the Berlin gap/overlap hour
    ("30 1 * * *", 3 * DAY),  # daily in the New York overlap hour
    ("0 2 * * *", 3 * DAY),  # daily at the first wall time of the New York gap
    ("59 2 * * *", 3 * DAY),
    ("0 3 * * *", 3 * DAY),  # the wall time ending the gap
    ("15 1-3 * * *", 3 * DAY),
    ("0 * * * *", 2 * DAY),  # hourly
    ("45 * * * *", 2 * DAY),
    ("0 */2 * * *", 2 * DAY),
    ("*/7 * * * *", DAY),
    ("* * * * *", DAY),  # every minute
    ("* * * * * *", 2 * HOUR),  # every second (6 fields, seconds first)
    ("*/13 * * * * *", 3 * HOUR),
    ("30 * 2 * * *", DAY),  # 6 fields restricted to the gap/overlap hour
]


@pytest.mark.parametrize("tz", sorted(TRANSITIONS))
@pytest.mark.parametrize("which", ["spring", "fall"])
@pytest.mark.parametrize(("expr", "half"), CASES)
def test_dst_transitions_match_brute_force(tz: str, which: str, expr: str, half: int) -> None:
    """No duplicates, no missed real instants, strictly increasing; for a job at a specific time
    gaps fire once at the transition and overlaps once (first pass); a job whose minute or hour
    starts with * fires at the real instants whose wall time matches (none in a gap, both passes)."""
    center = TRANSITIONS[tz][0 if which == "spring" else 1]
    lo, hi = center - half, center + half
    assert computed_fires(expr, tz, lo, hi) == expected_fires(expr, tz, lo, hi)


def transitions_2026(tz: str) -> list[int]:
    """UTC instants (s resolution) at which ``tz`` changes offset during 2026."""
    zone = ZoneInfo(tz)

    def off(t: int) -> object:
        return datetime.fromtimestamp(t / 1000, UTC).astimezone(zone).utcoffset()

    out = []
    t, end = ms("2026-01-01T00:00:00+00:00"), ms("2027-01-01T00:00:00+00:00")
    while t < end:
        if off(t) != off(t + DAY):
            lo, hi = t, t + DAY
            while hi - lo > 1000:
                mid = (lo + hi) // 2 // 1000 * 1000
                lo, hi = (mid, hi) if off(mid) == off(lo) else (lo, mid)
            out.append(hi)
        t += DAY
    return out


@pytest.mark.parametrize("tz", ["Australia/Sydney", "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kolkata"])
@pytest.mark.parametrize("expr", ["30 2 * * *", "0 2 * * *", "15,45 * * * *", "*/10 * * * *", "*/20 * * * * *"])
def test_other_zones_including_half_hour_dst(tz: str, expr: str) -> None:
    """Southern hemisphere, Lord Howe's 30-minute shift, a zone without DST in 2026."""
    half = HOUR if len(expr.split()) == 6 else 6 * HOUR
    centers = transitions_2026(tz) or [ms("2026-06-01T00:00:00+00:00")]
    for center in centers:
        lo, hi = center - half, center + half
        assert computed_fires(expr, tz, lo, hi) == expected_fires(expr, tz, lo, hi)


@functools.cache
def expected_around(expr: str, tz: str, which: str) -> tuple[int, ...]:
    center = TRANSITIONS[tz][0 if which == "spring" else 1]
    return tuple(expected_fires(expr, tz, center - 3 * HOUR, center + 3 * HOUR))


@settings(max_examples=int(os.environ.get("CRON_EXAMPLES", "300")), deadline=None)
@given(
    expr=st.sampled_from(["30 2 * * *", "30 1 * * *", "0 * * * *", "*/7 * * * *", "*/13 * * * * *", "30 * 2 * * *"]),
    tz=st.sampled_from(sorted(TRANSITIONS)),
    which=st.sampled_from(["spring", "fall"]),
    offset=st.integers(-2 * HOUR, 2 * HOUR),
)
def test_next_fire_from_any_instant_near_a_transition(expr: str, tz: str, which: str, offset: int) -> None:
    """From any millisecond (inside gaps' collapse, either pass of an overlap): the first expected fire after it."""
    center = TRANSITIONS[tz][0 if which == "spring" else 1]
    after = center + offset
    fires = [f for f in expected_around(expr, tz, which) if f > after]
    got = next_cron_fire(expr, tz, after)
    if fires:
        assert got == fires[0]
    else:
        assert got >= center + 3 * HOUR  # beyond the scanned window


def test_gap_time_fires_once_at_first_instant_after_gap() -> None:
    # Berlin 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00Z); 02:30 does not exist.
    assert next_cron_fire("30 2 * * *", "Europe/Berlin", ms("2026-03-28T12:00:00+00:00")) == ms("2026-03-29T01:00:00+00:00")
    # New York 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00Z).
    assert next_cron_fire("30 2 * * *", "America/New_York", ms("2026-03-08T00:00:00+00:00")) == ms("2026-03-08T07:00:00+00:00")
    # and the next day is normal again
    assert next_cron_fire("30 2 * * *", "America/New_York", ms("2026-03-08T07:00:00+00:00")) == ms("2026-03-09T06:30:00+00:00")


def test_repeated_time_fires_once_on_first_pass() -> None:
    # New York 2026-11-01: 01:30 EDT (05:30Z) and 01:30 EST (06:30Z); only the first.
    first = next_cron_fire("30 1 * * *", "America/New_York", ms("2026-11-01T00:00:00+00:00"))
    assert first == ms("2026-11-01T05:30:00+00:00")
    assert next_cron_fire("30 1 * * *", "America/New_York", first) == ms("2026-11-02T06:30:00+00:00")
    # asked from inside the second pass, it does not fire again that day
    assert next_cron_fire("30 1 * * *", "America/New_York", ms("2026-11-01T06:10:00+00:00")) == ms("2026-11-02T06:30:00+00:00")


def test_wildcard_hour_expressions_skip_gap_wall_times() -> None:
    # New York 2026-03-08: 02:30 EST does not exist; `30 * * * *` fires 01:30 EST then 03:30 EDT (Debian)
    t = next_cron_fire("30 * * * *", "America/New_York", ms("2026-03-08T06:00:00+00:00"))
    assert t == ms("2026-03-08T06:30:00+00:00")
    assert next_cron_fire("30 * * * *", "America/New_York", t) == ms("2026-03-08T07:30:00+00:00")


def test_every_hour_expressions_fire_on_both_passes_of_an_overlap() -> None:
    t = ms("2026-11-01T04:30:00+00:00")  # 00:30 EDT
    fires = []
    for _ in range(4):
        t = next_cron_fire("0 * * * *", "America/New_York", t)
        fires.append(t)
    assert fires == [ms(f"2026-11-01T0{h}:00:00+00:00") for h in (5, 6, 7, 8)]


def test_six_fields_put_seconds_first() -> None:
    after = ms("2026-05-01T00:00:00+00:00")
    assert next_cron_fire("15 30 2 * * *", "UTC", after) == ms("2026-05-01T02:30:15+00:00")
    assert next_cron_fire("30 2 * * *", "UTC", after) == ms("2026-05-01T02:30:00+00:00")


def test_next_fire_is_strictly_after() -> None:
    at = ms("2026-05-01T02:30:00+00:00")
    assert next_cron_fire("30 2 * * *", "UTC", at) == at + DAY
    assert next_cron_fire("30 2 * * *", "UTC", at - 1) == at
    assert next_cron_fire("* * * * * *", "UTC", at + 999) == at + 1000


def test_day_fields_names_and_macros() -> None:
    after = ms("2026-05-01T12:00:00+00:00")  # a Friday
    assert next_cron_fire("0 9 * * MON-FRI", "UTC", after) == ms("2026-05-04T09:00:00+00:00")
    assert next_cron_fire("0 0 L * *", "UTC", after) == ms("2026-05-31T00:00:00+00:00")
    assert next_cron_fire("@daily", "UTC", after) == ms("2026-05-02T00:00:00+00:00")
    assert next_cron_fire("@hourly", "Europe/Berlin", after) == ms("2026-05-01T13:00:00+00:00")
    assert next_cron_fire("0 0 29 2 *", "UTC", after) == ms("2028-02-29T00:00:00+00:00")


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "* * * *",
        "* * * * * * *",  # 7 fields: years
        "0 0 * * * 2026",
        "61 * * * *",
        "*/0 * * * *",
        "0 0 30 2 *",  # never fires
        "H * * * *",
        "R * * * *",
        "@every_5m",
        "0 0 * 13 *",
        "bogus",
    ],
)
def test_bad_cron_expressions_are_refused_with_the_field(expr: str) -> None:
    with pytest.raises(ScheduleError) as e:
        validate_cron(expr)
    assert e.value.field == "cron_expr"
    assert str(e.value) and "\n" not in str(e.value)
    # only a well-formed expression without a fire time says so in a word (clients branch on it, not on text)
    assert e.value.reason == ("never_fires" if expr == "0 0 30 2 *" else None)


def test_a_schedule_error_is_a_validation_error_answered_as_400_and_still_a_value_error() -> None:
    with pytest.raises(ValidationError) as e:
        validate_cron("0 0 30 2 *")
    assert isinstance(e.value, ValueError)
    assert e.value.http_status == 400
    assert e.value.to_json()["error"] == {
        "code": "invalid_argument", "message": str(e.value), "field": "cron_expr", "reason": "never_fires",
    }


@pytest.mark.parametrize("tz", ["", "Mars/Olympus", "../etc/passwd", " UTC", "Europe/Berlin/"])
def test_bad_time_zones_are_refused_with_the_field(tz: str) -> None:
    with pytest.raises(ScheduleError) as e:
        validate_timezone(tz)
    assert e.value.field == "timezone"
    with pytest.raises(ScheduleError) as e2:
        validate_cron("* * * * *", tz)
    assert e2.value.field == "timezone"


def test_good_inputs_validate() -> None:
    validate_timezone("UTC")
    validate_timezone("America/New_York")
    validate_cron("0 9 * * MON-FRI", "Europe/Berlin")
    validate_cron("*/5 * * * * *")
    validate_cron("  0   9 * * 1 ")


def test_fixed_rate_is_from_the_anchor_never_from_completion() -> None:
    assert next_fixed_rate(1_000, 60_000, 0) == 1_000
    assert next_fixed_rate(1_000, 60_000, 1_000) == 61_000
    assert next_fixed_rate(1_000, 60_000, 60_999) == 61_000
    assert next_fixed_rate(1_000, 60_000, 61_000) == 121_000
    with pytest.raises(ScheduleError) as e:
        next_fixed_rate(0, 0, 5)
    assert e.value.field == "interval_ms"


@settings(max_examples=300, deadline=None)
@given(anchor=st.integers(-(10**12), 10**12), interval=st.integers(1, 10**9), after=st.integers(-(10**12), 2 * 10**12))
def test_fixed_rate_property(anchor: int, interval: int, after: int) -> None:
    t = next_fixed_rate(anchor, interval, after)
    assert t > after and (t - anchor) % interval == 0 and t >= anchor
    assert t - interval <= after or t == anchor


def test_spec_dispatch_and_preview() -> None:
    rate = ScheduleSpec(anchor_ms=0, interval_ms=1_000, cron_expr=None)
    assert preview(rate, 0, 3) == [1_000, 2_000, 3_000]
    cron = ScheduleSpec(anchor_ms=ms("2026-05-01T00:00:00+00:00"), interval_ms=None, cron_expr="0 12 * * *", timezone="Europe/Berlin")
    assert preview(cron, cron.anchor_ms, 2) == [ms("2026-05-01T10:00:00+00:00"), ms("2026-05-02T10:00:00+00:00")]
    # cron instants before the anchor are not part of the schedule
    assert next_fire_after(cron, 0) == ms("2026-05-01T10:00:00+00:00")
    with pytest.raises(ScheduleError):
        next_fire_after(ScheduleSpec(0, None, None), 0)
    with pytest.raises(ScheduleError):
        next_fire_after(ScheduleSpec(0, 5, "* * * * *"), 0)


def test_misfire_on_time_keeps_the_grid() -> None:
    spec = ScheduleSpec(anchor_ms=0, interval_ms=60_000, cron_expr=None)
    # ran 2.5 s late: next is still on the grid
    assert next_after_misfire(spec, 60_000, 62_500) == 120_000


def test_missed_occurrences_collapse_into_the_late_fire_then_the_grid_continues() -> None:
    spec = ScheduleSpec(anchor_ms=0, interval_ms=60_000, cron_expr=None)
    # due at 60 s, the cluster was down until 10 min 30 s: the late fire stands for 120 s..600 s
    assert next_after_misfire(spec, 60_000, 630_000) == 660_000
    # an instant equal to now is not missed: it fires right away
    assert next_after_misfire(spec, 60_000, 660_000) == 660_000
    cron = ScheduleSpec(anchor_ms=0, interval_ms=None, cron_expr="*/5 * * * *")
    due = ms("2026-05-01T10:00:00+00:00")
    assert next_after_misfire(cron, due, due + 17 * 60_000) == due + 20 * 60_000


def test_parsed_expressions_are_cached_and_thread_safe() -> None:
    import threading

    after = ms("2026-05-01T00:00:00+00:00")
    expected = [next_cron_fire("*/5 * * * *", "Europe/Berlin", after + i * 60_000) for i in range(200)]
    results: list[list[int]] = []

    def work() -> None:
        results.append([next_cron_fire("*/5 * * * *", "Europe/Berlin", after + i * 60_000) for i in range(200)])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [expected] * 4


def test_last_answer_memo_never_changes_results() -> None:
    """Queries in any order give what a fresh computation gives (the memo only serves [query, answer))."""
    import random

    from molens.schedule import cron as cron_mod

    rng = random.Random(5)
    center = TRANSITIONS["America/New_York"][1]
    afters = [center + rng.randrange(-2 * HOUR, 2 * HOUR) for _ in range(300)]
    for expr in ("*/7 * * * *", "30 1 * * *", "0 * * * *"):
        fresh = []
        for a in afters:
            cron_mod._last.clear()
            fresh.append(next_cron_fire(expr, "America/New_York", a))
        assert [next_cron_fire(expr, "America/New_York", a) for a in afters] == fresh
        assert [next_cron_fire(expr, "America/New_York", a) for a in sorted(afters)] == sorted(fresh)


@pytest.mark.parametrize("expr", ["1-0 * * * *", "0 23-1 * * *", "0 0 * * sat-sun", "0 0 * dec-jan *",
                                  "0 0 9-1/2 * *", "0 0 * * 1,5-2", "30 1-0 * * * *"])
def test_a_range_written_backwards_is_refused_not_read_as_the_whole_field(expr: str) -> None:
    with pytest.raises(ScheduleError) as e:
        validate_cron(expr)
    assert e.value.field == "cron_expr" and "runs backwards" in str(e.value)


@pytest.mark.parametrize("tz", ["posixrules", "Factory", "localtime", "right/UTC", "posix/UTC", "right/Europe/Berlin"])
def test_a_zone_file_that_names_no_place_is_refused(tz: str) -> None:
    with pytest.raises(ScheduleError) as e:
        validate_timezone(tz)
    assert e.value.field == "timezone" and "names no place" in str(e.value)


def test_the_zone_list_holds_the_iana_places_and_their_links() -> None:
    assert {"UTC", "Etc/GMT+5", "Europe/Berlin", "America/New_York", "Asia/Shanghai", "GB"} <= ZONES
    assert not {"posixrules", "Factory", "localtime"} & ZONES
    assert not any(z.startswith(("right/", "posix/")) for z in ZONES)
    for tz in ("Etc/GMT+5", "GB"):
        validate_timezone(tz)
