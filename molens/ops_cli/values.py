"""How the ``molens`` command reads what an operator types: times, durations, JSON, and the closed
sets of words the API takes (kept equal to ``molens.schema``'s enums by a unit test, since this
package must not import the server's schema)."""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

TASK_TYPES = ("delayed", "periodic")
STATUSES = ("pending", "firing", "awaiting_ack", "paused", "done", "failed", "inactive")
RELIABILITIES = ("at_least_once", "at_most_once")
CATCHUPS = ("one", "none", "all")
OVERLAPS = ("skip", "buffer_one", "allow")
DEAD_LETTER_KINDS = ("retries_exhausted", "non_retryable", "ack_failed", "unknown")
EXECUTION_RESULTS = (
    "success", "failed", "timeout", "network_error", "not_found", "lost", "unknown", "ack_success", "ack_failed",
    "skipped", "updated", "backfill",
)
LIST_ORDERS = ("created", "newest", "next_run", "-created")
"""``newest`` is the API's ``-created`` (which the shell passes only as ``--order=-created``)."""
RESUME_FROM = ("now", "schedule")
ROLES = ("admin", "writer", "reader")
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)?")
_RELATIVE = re.compile(r"(?:now)?([+-])(\d+)(ms|s|m|h|d)")


def duration_ms(text: str) -> int:
    """``500`` (ms), ``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` -> milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (give ms, or a number with ms, s, m, h or d)")
    return int(m.group(1)) * _UNIT_MS[m.group(2) or "ms"]


def instant_ms(text: str) -> int:
    """An instant as epoch ms: digits (epoch ms), ``now``, ``now-1h`` / ``-1h`` / ``+30m``, or ISO 8601
    (``2026-12-04T09:00:00Z``, ``2026-12-04 09:00+01:00``; without an offset: UTC)."""
    s = text.strip()
    if s.isascii() and s.isdigit():
        return int(s)
    if s == "now":
        return int(time.time() * 1000)
    m = _RELATIVE.fullmatch(s)
    if m is not None:
        delta = int(m.group(2)) * _UNIT_MS[m.group(3)]
        return int(time.time() * 1000) + (delta if m.group(1) == "+" else -delta)
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (give epoch ms, now, now-1h / +30m, or ISO 8601 such as 2026-12-04T09:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def json_value(text: str) -> Any:
    """A JSON value (``--payload``); a bare word is refused rather than guessed at."""
    try:
        return json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not JSON: {text!r:.80} (a string needs its quotes: '\"text\"')"
        ) from None


def field_assignment(text: str) -> tuple[str, Any]:
    """``FIELD=VALUE`` (``--set``): VALUE as JSON when it parses, else as a string."""
    name, eq, raw = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected FIELD=VALUE, got {text!r:.80}")
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw


def positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    return _positive(text, "seconds")


def rate(text: str) -> float:
    return _positive(text, "a number")


def _positive(text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}")
    return v


def name_list(text: str) -> list[str]:
    """``payments,orders`` (or ``*``) -> the namespace names, each checked."""
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s != "*" and not _NAMESPACE.fullmatch(s)]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"not a namespace name: {', '.join(bad) or text!r} "
                                         "(names match [a-z0-9][a-z0-9_-]{0,62}, or '*' for every one)")
    return out


def status_list(text: str) -> list[str]:
    """``pending,paused`` -> the statuses, each checked."""
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s not in STATUSES]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"unknown status {', '.join(bad) or text!r}; statuses: {', '.join(STATUSES)}")
    return out
