"""Stats: the actor that owns the scheduler's counters, gauges and recent timings of one node.

Owns a :class:`StatsBook`. Receives ``Count``, ``Gauge``, ``Sampled`` and ``Delivered`` batches
(``tell``, from every other scheduler actor through a :class:`StatsClient`) and ``SetObserver``;
answers ``GetStats`` (``ask``: ``/api/v1/stats``, ``/metrics``). Runs on its own pykka thread, so
the metrics observer (``molens.web.metrics.FireMetrics``) runs there too, off the HTTP threads.

Timings (ms): ``fire_lateness`` (due -> the HTTP request started on this node's worker, the
lateness a receiver sees), ``dispatch_lag`` (due -> planned by the leader, negative when planned
ahead), ``plan_to_send`` (planned -> sent to the worker).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Protocol

import pykka

from molens.actors.messages import Count, Delivered, Gauge, GetStats, Sampled, SetObserver
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
"""Recent samples kept per timing (a ring), for p50/p99/max."""


class StatsBook:
    """Monotonic counters (this process's lifetime), gauges, and rings of recent timings."""

    def __init__(self) -> None:
        self.counters: dict[str, float] = dict.fromkeys(COUNTERS, 0)
        self.gauges: dict[str, Any] = {}
        self.rings: dict[str, collections.deque[float]] = {}

    def sample(self, name: str, values: list[float]) -> None:
        ring = self.rings.get(name)
        if ring is None:
            ring = self.rings[name] = collections.deque(maxlen=SAMPLES)
        ring.extend(values)

    def timings(self) -> dict[str, dict[str, float]]:
        out = {}
        for k, ring in self.rings.items():
            xs = sorted(ring)
            if xs:
                out[k] = {
                    "p50_ms": round(xs[len(xs) // 2], 1),
                    "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 1),
                    "max_ms": round(xs[-1], 1),
                    "n": len(xs),
                }
        return out

    def to_json(self) -> dict[str, Any]:
        return {**self.counters, **self.gauges, "timings": self.timings()}


class Stats(pykka.ThreadingActor):
    """The node's stats actor (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.book = StatsBook()
        self.observer: StatsObserver | None = None

    def on_receive(self, message: Any) -> Any:
        book = self.book
        if isinstance(message, Count):
            c = book.counters
            for k, v in message.values:
                c[k] = c.get(k, 0) + v
        elif isinstance(message, Sampled):
            book.sample(message.name, message.values)
            if self.observer is not None:
                self._observe(lambda o: o.sampled(message.name, message.values))
        elif isinstance(message, Delivered):
            late = [started - req.not_before_ms for req, _r, started in message.attempts if req.not_before_ms > 0]
            if late:
                book.sample("fire_lateness", late)
            obs = self.observer
            if obs is not None:
                if late:
                    self._observe(lambda o: o.sampled("fire_lateness", late))
                for req, result, _s in message.attempts:
                    self._observe(lambda o: o.delivered(req, result))  # noqa: B023 (called at once)
        elif isinstance(message, Gauge):
            book.gauges.update(message.values)
        elif isinstance(message, GetStats):
            return book.to_json()
        elif isinstance(message, SetObserver):
            self.observer = message.observer
        else:
            return super().on_receive(message)
        return None

    def _observe(self, fn: Any) -> None:
        try:
            fn(self.observer)
        except Exception:  # metrics must never stop the stats actor
            log.exception("stats observer failed")


class StatsClient:
    """How other actors talk to Stats: one ``tell`` per call, each a batch."""

    def __init__(self, ref: pykka.ActorRef[Stats]) -> None:
        self.ref = ref

    def _tell(self, msg: Any) -> None:
        try:
            self.ref.tell(msg)
        except pykka.ActorDeadError:  # stopping: counts no longer matter
            pass

    def add(self, **counts: float) -> None:
        self._tell(Count(tuple(counts.items())))

    def gauge(self, **values: Any) -> None:
        self._tell(Gauge(tuple(values.items())))

    def sample(self, name: str, values: list[float]) -> None:
        if values:
            self._tell(Sampled(name, values))

    def delivered(self, attempts: list[tuple[FireRequest, FireResult, float]]) -> None:
        if attempts:
            self._tell(Delivered(attempts))

    def to_json(self, timeout: float = 2.0) -> dict[str, Any]:
        try:
            return self.ref.ask(GetStats(), timeout=timeout)  # type: ignore[no-any-return]
        except (pykka.ActorDeadError, pykka.Timeout):
            return {}

    def get(self, name: str) -> float:
        return float(self.to_json().get(name, 0))


class ReportingDeliverer(Deliverer):
    """A :class:`~molens.delivery.Deliverer` that keeps every attempt for the Stats actor; the
    FireWorkerPool actor hands them over with each results batch (:meth:`take`)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._lock = threading.Lock()
        self._attempts: list[tuple[FireRequest, FireResult, float]] = []

    def deliver(self, req: FireRequest, timeout_ms: int | None = None) -> FireResult:
        result = super().deliver(req, timeout_ms)
        started_ms = time.time() * 1000 - float(result.latency_ms)
        with self._lock:
            self._attempts.append((req, result, started_ms))
        return result

    def take(self) -> list[tuple[FireRequest, FireResult, float]]:
        with self._lock:
            out, self._attempts = self._attempts, []
        return out


__all__ = ["COUNTERS", "ReportingDeliverer", "Stats", "StatsBook", "StatsClient", "StatsObserver"]
