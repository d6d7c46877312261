"""Stats: the actor that owns the scheduler's counters, gauges and recent timings of one node.

Owns a :class:`StatsBook`. Receives ``StatsBatch`` (each actor's counts and samples, at most every
``STATS_FLUSH_MS``, through its :class:`StatsBuffer`), ``Count``, ``Gauge`` and
``Delivered`` (``tell``, through a :class:`StatsClient`) and ``SetObserver``;
answers ``GetStats`` (``ask``: ``/api/v1/stats``, ``/metrics``). Runs on its own pykka thread, so
the metrics observer (``molens.web.metrics.FireMetrics``) runs there too, off the HTTP threads. A
message it fails to handle stops the node (``fatal``, as the other node actors do): the counters
would otherwise stand still while the node runs on. Meanwhile a :class:`StatsClient` drops what it
is told and answers ``{}``, so the stats and ``/metrics`` go on without the counters.

Timings (ms): ``fire_lateness`` (due -> the HTTP request started on this node's worker, the
lateness a receiver sees), ``dispatch_lag`` (due -> planned by the leader, negative when planned
ahead), ``plan_to_send`` (planned -> sent to the worker).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, cast

import pykka

from molens.actors.messages import Count, Delivered, Gauge, GetStats, SetObserver, StatsBatch
from molens.delivery import Deliverer, FireRequest, FireResult
from molens.tracing import NO_SPANS, Spans, span_url

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
    "not_sent",
    "lost",
    "lost_on_worker",
    "clock_holds",
    "expired",
    "proposals_failed",
    "worker_refused",
    "results_forwarded",
    "results_dropped",
    "throttled",
    "flow_held",
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

    def __init__(self, fatal: Callable[[BaseException], None] | None = None) -> None:
        super().__init__()
        self.book = StatsBook()
        self.observer: StatsObserver | None = None
        self.handled = 0
        self._fatal = fatal
        """Stops the node when this actor fails: pykka would stop this actor alone, and the node's
        counters, timings and metrics would stand still while it runs on."""

    def on_failure(
        self, exception_type: type[BaseException] | None, exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        log.error("stats actor failed: %r", exception_value)
        if self._fatal is not None:
            self._fatal(exception_value or RuntimeError("stats actor failed"))

    def on_receive(self, message: Any) -> Any:
        self.handled += 1
        book = self.book
        if isinstance(message, StatsBatch):
            c = book.counters
            for k, v in message.counts:
                c[k] = c.get(k, 0) + v
            for name, values in message.samples:
                self._sample(name, values)
        elif isinstance(message, Count):
            c = book.counters
            for k, v in message.values:
                c[k] = c.get(k, 0) + v
        elif isinstance(message, Delivered):
            self._delivered(message)
        elif isinstance(message, Gauge):
            book.gauges.update(message.values)
        elif isinstance(message, GetStats):
            return {**book.to_json(), "stats_messages": self.handled}
        elif isinstance(message, SetObserver):
            self.observer = message.observer
        else:
            return super().on_receive(message)
        return None

    def _sample(self, name: str, values: list[float]) -> None:
        self.book.sample(name, values)
        if self.observer is not None:
            try:
                self.observer.sampled(name, values)
            except Exception:  # metrics must never stop the stats actor
                log.exception("stats observer failed")

    def _delivered(self, m: Delivered) -> None:
        late = [started - req.not_before_ms for req, _r, started in m.attempts if req.not_before_ms > 0]
        if late:
            self._sample("fire_lateness", late)
        self._sample("callback_latency", [r.latency_ms for _q, r, _s in m.attempts])
        obs = self.observer
        if obs is not None:
            try:
                for req, result, _s in m.attempts:
                    obs.delivered(req, result)
            except Exception:  # metrics must never stop the stats actor
                log.exception("stats observer failed")


class StatsClient:
    """How other actors talk to Stats: one ``tell`` per call, each a batch. A Stats that has
    stopped (the node is stopping) is no error: what is told is dropped, :meth:`to_json` answers ``{}``."""

    def __init__(self, ref: pykka.ActorRef[Stats]) -> None:
        self.ref = ref

    def tell(self, msg: Any) -> None:
        try:
            self.ref.tell(msg)
        except pykka.ActorDeadError:  # stopping: counts no longer matter
            pass

    def add(self, **counts: float) -> None:
        self.tell(Count(tuple(counts.items())))

    def gauge(self, **values: Any) -> None:
        self.tell(Gauge(tuple(values.items())))

    def delivered(self, attempts: list[tuple[FireRequest, FireResult, float]]) -> None:
        if attempts:
            self.tell(Delivered(attempts))

    def to_json(self, timeout: float = 2.0) -> dict[str, Any]:
        """Everything Stats holds; ``{}`` when it has stopped, does not answer within ``timeout``, or
        fails to answer (pykka hands an asker the exception and keeps the actor: logged here, so
        the stats and ``/metrics`` answer without the counters instead of 500)."""
        try:
            return cast(dict[str, Any], self.ref.ask(GetStats(), timeout=timeout))
        except (pykka.ActorDeadError, pykka.Timeout):
            return {}
        except Exception:
            log.exception("stats actor failed to answer GetStats")
            return {}

    def get(self, name: str) -> float:
        return float(self.to_json().get(name, 0))


STATS_FLUSH_MS = 100
"""An actor's counts and samples reach Stats at most this often (one ``StatsBatch``)."""


class StatsBuffer:
    """One actor's counts and samples, sent to Stats as one ``StatsBatch`` at most every
    ``STATS_FLUSH_MS``: a mailbox message per flush, not per event. Owned by that actor's thread;
    the actor calls :meth:`flush_due` after each message and wakes for :meth:`next_flush`."""

    def __init__(self, client: StatsClient, every_ms: int = STATS_FLUSH_MS) -> None:
        self.client = client
        self.every_ms = every_ms
        self._counts: dict[str, float] = {}
        self._samples: dict[str, list[float]] = {}
        self._last = 0

    def add(self, **counts: float) -> None:
        c = self._counts
        for k, v in counts.items():
            c[k] = c.get(k, 0) + v

    def sample(self, name: str, values: list[float]) -> None:
        if values:
            self._samples.setdefault(name, []).extend(values)

    def gauge(self, **values: Any) -> None:
        self.client.gauge(**values)

    def next_flush(self) -> int | None:
        return self._last + self.every_ms if self._counts or self._samples else None

    def flush_due(self, now_ms: int) -> None:
        if (self._counts or self._samples) and now_ms >= self._last + self.every_ms:
            self.flush(now_ms)

    def flush(self, now_ms: int) -> None:
        if self._counts or self._samples:
            self.client.tell(StatsBatch(tuple(self._counts.items()), tuple(self._samples.items())))
            self._counts, self._samples = {}, {}
        self._last = now_ms


class ReportingDeliverer(Deliverer):
    """A :class:`~molens.delivery.Deliverer` that keeps every attempt for the Stats actor; the
    FireWorkerPool actor hands them over with each results batch (:meth:`take`)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._lock = threading.Lock()
        self._attempts: list[tuple[FireRequest, FireResult, float]] = []

    spans: Spans = NO_SPANS
    """Where the ``molens.fire`` spans of traced tasks go (``molens.tracing``)."""

    def record(self, req: FireRequest, result: FireResult) -> None:
        started_ms = time.time() * 1000 - float(result.latency_ms)
        with self._lock:
            self._attempts.append((req, result, started_ms))
        if req.traceparent and self.spans.enabled:
            self._trace(req, result, started_ms)

    def _trace(self, req: FireRequest, result: FireResult, started_ms: float) -> None:
        attrs: dict[str, Any] = {"molens.task_id": req.task_id, "molens.fire_id": req.fire_id,
                                 "molens.attempt": req.attempt, "molens.kind": req.kind.value,
                                 "molens.outcome": result.outcome.value, "molens.worker": self.node_id,
                                 "url.full": span_url(req.url)}
        if result.status_code is not None:
            attrs["http.response.status_code"] = result.status_code
        start_ns = int(started_ms * 1_000_000)
        self.spans.fire(req.traceparent, req.task_id, req.fire_id, req.kind.value, req.attempt, start_ns,
                        start_ns + int(result.latency_ms * 1_000_000), attrs)

    def take(self) -> list[tuple[FireRequest, FireResult, float]]:
        with self._lock:
            out, self._attempts = self._attempts, []
        return out


__all__ = ["COUNTERS", "STATS_FLUSH_MS", "ReportingDeliverer", "Stats", "StatsBook", "StatsBuffer", "StatsClient", "StatsObserver"]
