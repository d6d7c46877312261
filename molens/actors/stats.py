"""Counters of the leader's scheduler and the node's worker side, as JSON for ``/api/v1/stats``.

Hook for ``/metrics``: :attr:`SchedulerStats.observer` (a :class:`StatsObserver`, set by the node's
API context) sees every timing sample and, through :class:`ReportingDeliverer`, every HTTP attempt
of this node's fire pool, as they happen.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Protocol

from molens.delivery import Deliverer, FireRequest, FireResult

log = logging.getLogger(__name__)


class StatsObserver(Protocol):
    """Told about events as they happen (``molens.web.metrics.FireMetrics``); must be quick."""

    def sampled(self, name: str, values_ms: list[float]) -> None: ...

    def delivered(self, req: FireRequest, result: FireResult) -> None: ...

COUNTERS = (
    "terms_led",
    "rebuild_tasks",
    "rebuild_fires",
    "dispatched_proposed",
    "dispatched_accepted",
    "fires_sent",
    "fires_sent_local",
    "results_received",
    "results_proposed",
    "lost",
    "expired",
    "proposals_failed",
    "worker_refused",
    "results_forwarded",
    "results_dropped",
)


SAMPLES = 2048
"""Recent samples kept per timing (a ring), for p50/p99/max in ``to_json``."""


class SchedulerStats:
    """Monotonic counters (this process's lifetime), gauges set by the leader session, and recent
    timings in ms (``fire_lateness``: due -> the HTTP request started on this node's worker, the
    lateness a receiver sees; ``dispatch_lag``: due -> planned by the leader, negative when planned
    ahead; ``plan_to_send``: planned -> sent to the worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c: dict[str, float] = dict.fromkeys(COUNTERS, 0)
        self._g: dict[str, Any] = {}
        self._t: dict[str, collections.deque[float]] = {}
        self.observer: StatsObserver | None = None

    def sample(self, name: str, values: list[float]) -> None:
        with self._lock:
            ring = self._t.get(name)
            if ring is None:
                ring = self._t[name] = collections.deque(maxlen=SAMPLES)
            ring.extend(values)
        obs = self.observer
        if obs is not None:
            obs.sampled(name, values)

    def delivered(self, req: FireRequest, result: FireResult) -> None:
        if req.not_before_ms > 0:  # the due time the leader planned for (DESIGN §3, dispatch ahead)
            started_ms = time.time() * 1000 - float(result.latency_ms)
            self.sample("fire_lateness", [started_ms - req.not_before_ms])
        obs = self.observer
        if obs is not None:
            obs.delivered(req, result)

    def timings(self) -> dict[str, dict[str, float]]:
        with self._lock:
            rings = {k: sorted(v) for k, v in self._t.items()}
        out = {}
        for k, xs in rings.items():
            if xs:
                out[k] = {
                    "p50_ms": round(xs[len(xs) // 2], 1),
                    "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 1),
                    "max_ms": round(xs[-1], 1),
                    "n": len(xs),
                }
        return out

    def add(self, **counts: float) -> None:
        with self._lock:
            for k, v in counts.items():
                self._c[k] = self._c.get(k, 0) + v

    def gauge(self, **values: Any) -> None:
        with self._lock:
            self._g.update(values)

    def get(self, name: str) -> float:
        with self._lock:
            return self._c.get(name, 0)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            out = {**self._c, **self._g}
        out["timings"] = self.timings()
        return out


class ReportingDeliverer(Deliverer):
    """A :class:`~molens.delivery.Deliverer` that reports every attempt to ``stats.delivered``."""

    def __init__(self, stats: SchedulerStats, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._stats = stats

    def deliver(self, req: FireRequest, timeout_ms: int | None = None) -> FireResult:
        result = super().deliver(req, timeout_ms)
        try:
            self._stats.delivered(req, result)
        except Exception:  # metrics must never cost a result
            log.exception("stats observer failed fire=%s", req.fire_id)
        return result


__all__ = ["COUNTERS", "ReportingDeliverer", "SchedulerStats", "StatsObserver"]
