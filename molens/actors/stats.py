"""Counters of the leader's scheduler and the node's worker side, as JSON for ``/api/v1/stats``."""

from __future__ import annotations

import threading
from typing import Any

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


class SchedulerStats:
    """Monotonic counters (this process's lifetime) plus gauges set by the leader session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c: dict[str, float] = dict.fromkeys(COUNTERS, 0)
        self._g: dict[str, Any] = {}

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
            return {**self._c, **self._g}


__all__ = ["COUNTERS", "SchedulerStats"]
