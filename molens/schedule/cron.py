"""Next fire instants for cron and fixed-rate schedules (croniter + zoneinfo); pure, epoch ms in UTC.

Expressions: 5 fields ``minute hour day-of-month month day-of-week``, or 6 with **seconds first**
(``second minute hour dom month dow``). Lists, ranges, steps, month/day names, ``?``, ``L``, ``W``
and ``#`` follow croniter; ``5L``/``friL`` (the last Friday, Quartz's and cronsim's spelling) is
read as croniter's ``L5``. Day-of-month and day-of-week follow Debian cron: OR-ed when both are
restricted, AND-ed when either *starts with* ``*`` (``*/10`` too). Also accepted, as their 5-field
equivalents: ``@yearly``/``@annually`` ``0 0 1 1 *``, ``@monthly`` ``0 0 1 * *``, ``@weekly``
``0 0 * * 0``, ``@daily``/``@midnight`` ``0 0 * * *``, ``@hourly`` ``0 * * * *``. Refused, naming
the field: 7 fields (years), croniter's hashed ``H`` and random ``R`` (replicas would disagree),
and expressions that never fire.

Time zones (IANA names) and DST, as Debian cron (docs/api.md#cron-expressions). Matching is on the
local wall clock of ``timezone``. An expression at a specific time (its minute and hour fields do
not start with ``*``) fires once per matching wall time:

* a wall time that does not exist (spring-forward gap) fires once, at the first instant after the
  gap (the transition instant) -- several gap times, or a gap time and the wall time ending the gap,
  are one fire;
* a wall time that happens twice (fall-back overlap) fires once, on its first pass.

A *wildcard* expression (its minute or hour field starts with ``*``, or it has 6 fields) follows
real time instead: it fires at every real instant whose wall time matches, so wall times in a gap
never fire and repeated ones fire on both passes.

The result is strictly increasing, without duplicates, whatever the zone. Computation is in UTC
instants; croniter is only asked for the next matching *naive wall time* (no tz), which it does
with plain calendar arithmetic. (A trap avoided: croniter 7's own tz-aware mode fires a daily
``30 2 * * *`` twice in Europe/Berlin on 2026-10-25, at 02:30+02:00 and 02:30+01:00.) Parsed expressions are cached (``functools.lru_cache``), and so is
the last answer per expression and zone.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from molens.errors import ValidationError

log = logging.getLogger(__name__)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: a lone h or r (not inside a month/day name): croniter's hashed and random values
_NONDETERMINISTIC = re.compile(r"(?<![a-z])[hr](?![a-z])", re.IGNORECASE)
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_US = timedelta(microseconds=1)
ZONES: frozenset[str] = frozenset(available_timezones() - {"Factory", "localtime", "posixrules"})
"""The time zones a schedule may name: the IANA zones and their links on this system, without the
files that name no place (``Factory``, ``localtime``, ``posixrules``) or keep leap seconds
(``right/...``, ``posix/...``: never listed). The OpenAPI document lists the same names."""

#: validation looks for a first fire from here (any fixed instant: the result must not depend on it)
_VALIDATE_FROM_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


#: per (expr, tz), the last query and its answer: many tasks on one expression ask about the same
#: instant (a burst of results at the top of the hour), and any ``after`` in ``[query, answer)`` has
#: that same answer. Tuples are replaced whole, so threads need no lock.
_last: dict[tuple[str, str], tuple[int, int]] = {}
_LAST_MAX = 4096


NEVER_FIRES = "never_fires"
"""The ``reason`` of a well-formed cron expression that has no fire time."""


class ScheduleError(ValidationError, ValueError):
    """A bad cron expression, time zone or interval (400 ``invalid_argument``); ``str()`` is a
    one-line reason. Also a ``ValueError``: the callers that step a schedule catch ``ValueError``,
    which croniter and zoneinfo raise too.

    ``field`` names the request field at fault: ``cron_expr``, ``timezone`` or ``interval_ms``;
    ``reason``, when set, says why in a word that does not change with the language of the message
    (``never_fires``: a well-formed expression with no fire time, such as ``0 0 30 2 *``).
    """

    def __init__(self, message: str, field: str = "cron_expr", reason: str | None = None) -> None:
        super().__init__(message, field)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A periodic schedule: fixed rate (``interval_ms`` from ``anchor_ms``) or cron in ``timezone``.

    Fixed-rate instants are ``anchor_ms + k * interval_ms``; cron instants are the expression's, from
    ``anchor_ms`` on. Exactly one of ``interval_ms`` and ``cron_expr`` is set.
    """

    anchor_ms: int
    interval_ms: int | None
    cron_expr: str | None
    timezone: str = "UTC"


@dataclass(frozen=True, slots=True)
class _Cron:
    """A parsed expression: a croniter over naive wall times (guarded: croniter objects are stateful).

    ``wildcard``: the minute or hour field starts with ``*`` (or the expression has seconds): such
    an expression follows real time across DST changes (see the module docstring)."""

    its: tuple[croniter, ...]
    """One croniter; or, for a restricted day-of-month OR a restricted day-of-week, one per day
    field (the other ``*``): croniter itself AND-s them when the weekday uses ``L`` or ``#``."""
    wildcard: bool
    lock: threading.Lock

    def next_wall(self, after: datetime) -> datetime:
        """First matching naive wall time strictly after ``after``."""
        found: list[datetime] = []
        with self.lock:
            for it in self.its:
                try:
                    found.append(it.get_next(datetime, start_time=after))
                except CroniterBadDateError:
                    if len(self.its) == 1:
                        raise
        if not found:
            raise CroniterBadDateError("no match")
        return min(found)


# -- validation -------------------------------------------------------------------------------------


def validate_timezone(tz: str) -> None:
    """Raise :class:`ScheduleError` (field ``timezone``) unless ``tz`` is a known IANA zone name."""
    _zone(tz)


def validate_cron(expr: str, tz: str = "UTC") -> None:
    """Raise :class:`ScheduleError` unless ``expr`` is an accepted expression that fires at all."""
    _zone(tz)
    _parse(expr)
    next_cron_fire(expr, tz, _VALIDATE_FROM_MS)


@functools.lru_cache(maxsize=1024)
def _zone(tz: str) -> ZoneInfo:
    if not isinstance(tz, str) or not tz or tz != tz.strip():
        raise ScheduleError(f"unknown time zone {tz!r}", "timezone")
    if tz not in ZONES:
        why = "names no place" if ("/" not in tz or tz.startswith(("right/", "posix/"))) and _loads(tz) else "is unknown"
        raise ScheduleError(f"time zone {tz[:64]!r} {why}: use an IANA name such as Europe/Berlin", "timezone")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown time zone {tz!r}: use an IANA name such as Europe/Berlin", "timezone") from None


@functools.lru_cache(maxsize=4096)
def _parse(expr: str) -> _Cron:
    if not isinstance(expr, str):
        raise ScheduleError("cron_expr must be a string")
    text = " ".join(expr.split())
    text = MACROS.get(text.lower(), text)
    if text.startswith("@"):
        raise ScheduleError(f"unknown cron macro {text!r}; use one of {', '.join(sorted(MACROS))}")
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise ScheduleError(
            f"cron_expr has {len(fields)} fields; give 5 (minute hour day month weekday) "
            "or 6 with seconds first"
        )
    if _NONDETERMINISTIC.search(text):
        raise ScheduleError("cron_expr: hashed (H) and random (R) values are not supported")
    six = len(fields) == 6
    if backwards := _backwards_range(fields, six):
        raise ScheduleError(backwards)
    minute, hour, dom, _month, dow = fields[1:] if six else fields
    # the last given weekday of the month: Quartz and cronsim write 5L (friL), croniter L5
    fields[-1] = dow = _LAST_WEEKDAY.sub(lambda m: "L" + _DAY_NUMBERS.get(m.group(1).lower(), m.group(1)), dow)
    # Debian cron: a day-of-month or day-of-week field starting with * (*/10 too) makes the two AND-ed
    day_or = not (dom.startswith("*") or dow.startswith("*"))
    variants = [fields]
    if day_or and dom != "?" and dow != "?":  # both restricted: either day field may match
        d = len(fields) - 3
        variants = [[*fields[:d], dom, fields[d + 1], "*"], [*fields[:d], "*", fields[d + 1], dow]]
    try:
        its = tuple(
            croniter(" ".join(v), _EPOCH, ret_type=datetime, second_at_beginning=six, day_or=False) for v in variants
        )
    except (CroniterError, ValueError, TypeError, KeyError, IndexError) as e:
        why = " ".join(str(e).split())
        raise ScheduleError(_which_field(expr, fields, six) or f"invalid cron_expr {expr!r}: {why}") from None
    wildcard = six or minute.startswith("*") or hour.startswith("*")
    return _Cron(its, wildcard, threading.Lock())


def _loads(tz: str) -> bool:
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


_MONTH_NUMBERS = {m: i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
_RANGE = re.compile(r"([0-9a-z]+)-([0-9a-z]+)(?:/[0-9]+)?", re.IGNORECASE)


def _backwards_range(fields: list[str], six: bool) -> str | None:
    """The refusal of a range written high to low (``1-0``): croniter reads it as the whole field."""
    names = ("second", *_FIELD_NAMES) if six else _FIELD_NAMES
    for name, field in zip(names, fields, strict=True):
        words = _DAY_NUMBERS if name == "day-of-week" else _MONTH_NUMBERS if name == "month" else {}
        for item in field.split(","):
            m = _RANGE.fullmatch(item)
            if m is None:
                continue
            lo, hi = (words.get(x.lower(), x) for x in m.groups())
            if str(lo).isdigit() and str(hi).isdigit() and int(lo) > int(hi):
                return (f"the {name} field's range {item} runs backwards: a range goes low to high "
                        "(write one that wraps around as two, such as 22-23,0-2)")
    return None


_LAST_WEEKDAY = re.compile(r"\b([0-7]|sun|mon|tue|wed|thu|fri|sat)L\b", re.IGNORECASE)
_DAY_NUMBERS = {d: str(i) for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")


def _which_field(expr: str, fields: list[str], six: bool) -> str | None:
    """The refusal naming the field croniter cannot read (each tried alone, the others ``*``)."""
    names = ("second", *_FIELD_NAMES) if six else _FIELD_NAMES
    for i, name in enumerate(names):
        probe = ["*"] * len(fields)
        probe[i] = fields[i]
        try:
            croniter(" ".join(probe), _EPOCH, second_at_beginning=six)
        except (CroniterError, ValueError, TypeError, KeyError, IndexError) as e:
            why = " ".join(str(e).split())
            return f"invalid cron_expr {expr!r}: the {name} field {fields[i]!r} is not valid ({why})"
    return None


# -- wall clock <-> instants -------------------------------------------------------------------------


def _wall(ms: int, zone: ZoneInfo) -> datetime:
    """Local wall time of an instant, naive (``fold`` says which pass of an overlap)."""
    return (_EPOCH_UTC + ms * _MS).astimezone(zone).replace(tzinfo=None)


def _instant(wall: datetime, zone: ZoneInfo, fold: int) -> int:
    offset = wall.replace(tzinfo=zone, fold=fold).utcoffset()
    assert offset is not None
    return (wall.replace(fold=0) - _EPOCH - offset) // _MS


def _transition(lo: int, hi: int, zone: ZoneInfo) -> int:
    """First instant in ``(lo, hi]`` with the UTC offset of ``hi`` (one transition in between)."""
    after = (_EPOCH_UTC + hi * _MS).astimezone(zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (_EPOCH_UTC + mid * _MS).astimezone(zone).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi


def _first_instant(wall: datetime, zone: ZoneInfo) -> int:
    """The one instant at which a matching wall time fires (its second pass aside)."""
    s0 = _instant(wall, zone, 0)
    s1 = _instant(wall, zone, 1)
    if s0 == s1:
        return s0
    if _wall(s0, zone) == wall.replace(fold=0):
        return min(s0, s1)  # an overlap: the first pass
    # A gap: the wall time does not exist; fire at the first instant after it.
    return _transition(min(s0, s1), max(s0, s1), zone)


# -- next fire ---------------------------------------------------------------------------------------


def next_cron_fire(expr: str, tz: str, after_ms: int) -> int:
    """First fire instant of ``expr`` in zone ``tz`` strictly after ``after_ms`` (epoch ms, UTC).

    DST rules are in the module docstring. Raises :class:`ScheduleError` for a bad expression or
    zone, or when the expression never fires again (croniter gives up after 50 years).
    """
    memo_key = (expr, tz)
    hit = _last.get(memo_key)
    if hit is not None and hit[0] <= after_ms < hit[1]:
        return hit[1]  # nothing fires in (hit[0], hit[1]): same answer
    cron = _parse(expr)
    zone = _zone(tz)
    try:
        wall = _wall(after_ms, zone)
        best = _next_first_pass(cron, zone, after_ms, wall)
        if cron.wildcard:
            second = _next_second_pass(cron, zone, after_ms, wall)
            if second is not None and second < best:
                best = second
    except CroniterBadDateError:
        raise ScheduleError(f"cron_expr {expr!r} never fires after {after_ms}", reason=NEVER_FIRES) from None
    except (OverflowError, ValueError):  # past datetime's year 9999 ("year 10000 is out of range")
        raise ScheduleError(f"cron_expr {expr!r}: no fire time before the year 10000 after {after_ms}") from None
    if len(_last) >= _LAST_MAX:
        _last.clear()
    _last[memo_key] = (after_ms, best)
    return best


def _next_first_pass(cron: _Cron, zone: ZoneInfo, after_ms: int, wall: datetime) -> int:
    """Smallest first-pass (or gap) fire instant > ``after_ms``.

    Wall times map to first-pass instants monotonically, so candidates are walked in wall order.
    A candidate at or before ``after_ms`` (``after_ms`` on an overlap's second pass, or in a gap's
    collapse) makes the walk jump: instants run at wall-clock speed from the candidate's instant,
    so the wall time matching ``after_ms`` on that pass is ``wall(s) + (after_ms - s)``.
    """
    start = wall.replace(fold=0)
    for _ in range(1_000):  # two rounds at most in practice: one jump past an overlap or gap
        cand = cron.next_wall(start)
        s = _first_instant(cand, zone)
        if cron.wildcard and _wall(s, zone) != cand:  # a wall time in a gap: it never happens
            start = _wall(s, zone).replace(fold=0) - _US  # s is the gap's end: go on from there
            continue
        if s > after_ms:
            return s
        start = max(_wall(s, zone).replace(fold=0) + (after_ms - s) * _MS, cand)
    raise ScheduleError(f"no next fire found after {after_ms} (time zone data?)", "timezone")


def _next_second_pass(cron: _Cron, zone: ZoneInfo, after_ms: int, wall: datetime) -> int | None:
    """For every-hour expressions: the smallest second-pass fire > ``after_ms`` in the overlap that
    ``after_ms`` lies in (first or second pass), if any. Overlaps further on cannot win: their first
    pass comes first."""
    first = _instant(wall, zone, 0)
    second = _instant(wall, zone, 1)
    if first >= second or _wall(second, zone).replace(fold=0) != wall.replace(fold=0):
        return None  # wall time of after_ms is not repeated
    t = _transition(first, second, zone)  # the fall-back instant: the second pass starts here
    overlap_start = _wall(t, zone).replace(fold=0)
    overlap_end = overlap_start + (second - first) * _MS
    start = overlap_start + (after_ms - t) * _MS if after_ms >= t else overlap_start - _US
    cand = cron.next_wall(start)
    if cand >= overlap_end:
        return None
    return t + (cand - overlap_start) // _MS


def next_fixed_rate(anchor_ms: int, interval_ms: int, after_ms: int) -> int:
    """First ``anchor_ms + k * interval_ms`` strictly after ``after_ms`` (k >= 0; k >= 1 once started)."""
    if not isinstance(interval_ms, int) or interval_ms < 1:
        raise ScheduleError(f"interval_ms must be a positive integer, got {interval_ms!r}", "interval_ms")
    if after_ms < anchor_ms:
        return anchor_ms
    return anchor_ms + ((after_ms - anchor_ms) // interval_ms + 1) * interval_ms


def next_fire_after(spec: ScheduleSpec, after_ms: int) -> int:
    """The schedule's first instant strictly after ``after_ms`` (cron: and not before ``anchor_ms``)."""
    if spec.cron_expr is not None:
        if spec.interval_ms is not None:
            raise ScheduleError("give interval_ms or cron_expr, not both")
        return next_cron_fire(spec.cron_expr, spec.timezone, max(after_ms, spec.anchor_ms - 1))
    if spec.interval_ms is None:
        raise ScheduleError("a periodic schedule needs interval_ms or cron_expr", "interval_ms")
    return next_fixed_rate(spec.anchor_ms, spec.interval_ms, after_ms)


def preview(spec: ScheduleSpec, after_ms: int, n: int) -> list[int]:
    """The next ``n`` fire instants after ``after_ms`` (for the UI)."""
    out: list[int] = []
    t = after_ms
    for _ in range(n):
        t = next_fire_after(spec, t)
        out.append(t)
    return out


def next_after_misfire(spec: ScheduleSpec, due_ms: int, now_ms: int) -> int:
    """The occurrence to schedule after the one due at ``due_ms`` ran at ``now_ms``.

    Rule (docs/architecture.md#task-rules): the first schedule instant ``t`` with ``t > due_ms`` and ``t >= now_ms``. On
    time, that is simply the next instant. If the occurrence ran late -- the cluster was down, or
    the previous occurrence was still firing or retrying -- every instant in ``(due_ms, now_ms)`` was
    missed, and the late fire stood for all of them: they collapse into that one fire and the
    schedule continues on its own grid (``anchor + k * interval`` or the cron instants), never from
    ``now_ms`` or completion, so it never drifts. An instant equal to ``now_ms`` is not missed: it is
    returned and fires right away.
    """
    return next_fire_after(spec, max(due_ms, now_ms - 1))
