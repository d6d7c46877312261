"""Fires, failures, retries and lateness over the last hour and the last day, kept in memory by
each node for the console's charts (``GET /api/v1/stats/series``).

Counted on the node whose fire pool made the HTTP attempt (the same events as
``molens_fires_total``), so the cluster's series is the sum of its members' (:func:`merge`):

- ``fires``: attempts (callbacks and ACK probes), ``failures``: those whose outcome was not
  ``success``, ``retries``: those numbered 2 or more (``X-Molens-Attempt``);
- ``lateness_n`` / ``lateness_sum_ms`` / ``lateness_max_ms``: due time -> HTTP request started, of
  the attempts that had a due time (a mean is ``sum / n``; both add up across nodes, a max is a max).

A :class:`Ring` is a fixed number of epoch-aligned buckets; a :class:`FireSeries` holds two (per
10 s for an hour, per 5 min for a day), so its memory is fixed whatever the fire rate. Counts live
only in the process: a restarted node starts from zeros.

>>> r = Ring(step_ms=10_000, slots=3)
>>> r.add(25_000, fires=2.0); r.add(31_000, fires=1.0, failures=1.0)
>>> [(t, c[0], c[1]) for t, c in r.read(now_ms=35_000)]
[(10000, 0.0, 0.0), (20000, 2.0, 0.0), (30000, 1.0, 1.0)]
>>> r.add(62_000, fires=5.0)  # three buckets later: 20 s and 30 s roll out, the 40 s and 50 s are empty
>>> [(t, c[0]) for t, c in r.read(now_ms=62_000)]
[(40000, 0.0), (50000, 0.0), (60000, 5.0)]
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from typing import Any

FIELDS = ("fires", "failures", "retries", "lateness_n", "lateness_sum_ms", "lateness_max_ms")
"""The columns of every bucket, in order; ``lateness_max_ms`` merges by max, the rest by sum."""
_MAX = FIELDS.index("lateness_max_ms")


class Span(enum.StrEnum):
    """The windows a node keeps (``range`` of the route)."""

    HOUR = "hour"
    DAY = "day"


SHAPES: Mapping[Span, tuple[int, int]] = {Span.HOUR: (10_000, 360), Span.DAY: (300_000, 288)}
"""``(step_ms, slots)``: per 10 s for an hour (360 buckets), per 5 min for a day (288 buckets)."""


class Ring:
    """``slots`` buckets of ``step_ms``, the newest the one that holds the latest ``add``. Not
    thread-safe (:class:`FireSeries` holds the lock). A bucket is numbered ``t // step_ms``; one
    more than ``slots`` behind the newest is gone, and its slot is reused, zeroed."""

    def __init__(self, step_ms: int, slots: int) -> None:
        if step_ms <= 0 or slots <= 0:
            raise ValueError("step_ms and slots must be positive")
        self.step_ms = step_ms
        self.slots = slots
        self._cells = [[0.0] * len(FIELDS) for _ in range(slots)]
        self._head: int | None = None
        """Number of the newest bucket written (None: nothing yet)."""

    def add(self, at_ms: int, **values: float) -> None:
        """Add ``values`` (keys of :data:`FIELDS`; ``lateness_max_ms`` is a max) to the bucket of ``at_ms``.
        A time older than the ring is dropped; a newer one rolls the ring forward."""
        b = at_ms // self.step_ms
        head = self._head
        if head is None or b > head:
            start = b - self.slots + 1 if head is None else max(head + 1, b - self.slots + 1)
            for k in range(start, b + 1):
                self._cells[k % self.slots] = [0.0] * len(FIELDS)
            self._head = head = b
        elif b <= head - self.slots:
            return
        cell = self._cells[b % self.slots]
        for name, v in values.items():
            i = FIELDS.index(name)
            cell[i] = max(cell[i], v) if i == _MAX else cell[i] + v

    def read(self, now_ms: int) -> list[tuple[int, list[float]]]:
        """The ``slots`` buckets that end with the one of ``now_ms``, oldest first, as
        ``(start_ms, counts in FIELDS order)``; a bucket nothing was added to is zeros."""
        nb = now_ms // self.step_ms
        head = self._head
        out = []
        for k in range(nb - self.slots + 1, nb + 1):
            live = head is not None and head - self.slots < k <= head
            out.append((k * self.step_ms, list(self._cells[k % self.slots]) if live else [0.0] * len(FIELDS)))
        return out


class FireSeries:
    """The node's two rings behind one lock: written by the Stats actor's observer, read by HTTP threads."""

    def __init__(self) -> None:
        self._rings = {span: Ring(*shape) for span, shape in SHAPES.items()}
        self._lock = threading.Lock()

    def attempt(self, at_ms: int, *, failed: bool, retry: bool) -> None:
        """One HTTP attempt finished at ``at_ms``."""
        with self._lock:
            for ring in self._rings.values():
                ring.add(at_ms, fires=1.0, failures=float(failed), retries=float(retry))

    def lateness(self, at_ms: int, values_ms: Iterable[float]) -> None:
        """Lateness samples (due -> request started) observed at ``at_ms``."""
        vs = [max(0.0, v) for v in values_ms]
        if not vs:
            return
        with self._lock:
            for ring in self._rings.values():
                ring.add(at_ms, lateness_n=float(len(vs)), lateness_sum_ms=sum(vs), lateness_max_ms=max(vs))

    def to_json(self, span: Span, now_ms: int) -> dict[str, Any]:
        """The series of ``span`` up to ``now_ms``: ``{"range", "step_ms", "time_ms", "t_ms": [...], <field>: [...]}``."""
        ring = self._rings[span]
        with self._lock:
            rows = ring.read(now_ms)
        return _columns(span, now_ms, rows)


def _columns(span: Span, now_ms: int, rows: list[tuple[int, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"range": span.value, "step_ms": SHAPES[span][0], "time_ms": now_ms,
                           "t_ms": [t for t, _ in rows]}
    for i, name in enumerate(FIELDS):
        out[name] = [round(c[i], 1) if name.endswith("_ms") else int(c[i]) for _, c in rows]
    return out


def merge(span: Span, now_ms: int, answers: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Several nodes' :meth:`FireSeries.to_json` answers as one series over this node's window
    (buckets are epoch-aligned, so a bucket of one node is the same bucket on another; one outside
    the window, from a clock ahead or behind, is left out)."""
    step, slots = SHAPES[span]
    first = now_ms // step - slots + 1
    rows = [((first + k) * step, [0.0] * len(FIELDS)) for k in range(slots)]
    for a in answers:
        ts = a.get("t_ms")
        if not isinstance(ts, list) or a.get("step_ms") != step:
            continue
        for j, t in enumerate(ts):
            k = t // step - first if isinstance(t, int) else -1
            if not 0 <= k < len(rows):
                continue
            cell = rows[k][1]
            for i, name in enumerate(FIELDS):
                col = a.get(name)
                v = col[j] if isinstance(col, list) and j < len(col) and isinstance(col[j], int | float) else 0
                cell[i] = max(cell[i], v) if i == _MAX else cell[i] + v
    return _columns(span, now_ms, rows)


__all__ = ["FIELDS", "SHAPES", "FireSeries", "Ring", "Span", "merge"]
