"""``/metrics``: the node's Prometheus registry (``prometheus-client``), text format 0.0.4.

Two kinds of series:

- **Live values read at scrape time** by :class:`LiveCollector` from a :class:`MetricsSnapshot`
  the context builds on demand (nothing duplicated, nothing to keep in step): tasks by status,
  Raft term / commit / applied / last index, leader changes seen, whether this node leads, the
  wheel size and overflow, queue depths (fire pool queued / in flight / free, fires in flight,
  wheel backlog), history rows, disk usage per part, and the scheduler's own counters.
- **Events observed when they happen** by :class:`FireMetrics`, the scheduler's stats observer
  (the Stats actor's observer, see :mod:`molens.actors.stats`): every HTTP attempt this node's
  fire pool makes (``molens_fires_total{kind,outcome}``, ``molens_callback_latency_seconds{host}``)
  the lateness of those attempts (``molens_fire_lateness_seconds``: due -> HTTP request started on
  this worker), and the leader's timings (``molens_fire_plan_lag_seconds``: due -> planned, 0 when
  planned ahead; ``molens_fire_send_delay_seconds``: planned -> sent to the worker). Fires are counted on the
  worker that made them, so ``sum()`` over the cluster's nodes is the cluster's rate.

Host labels are bounded: after :data:`MAX_HOSTS` distinct hosts, the rest share ``host="other"``.

Per namespace (``molens_namespace_*``, label ``namespace``, never a task id): the tasks created
through this node's API, the quota refusals it answered (``quota`` names the quota), the attempts
its fire pool made and those that failed (:class:`NamespaceCounters`), and the replica's unfinished
tasks. Only namespaces that exist are exported: a deleted namespace's series go, and its counters
are forgotten, so the label set is bounded by the namespaces an admin made.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from molens.fsm import tenancy
from molens.schedule.flows import FlowState
from molens.schema import DEFAULT_NAMESPACE
from molens.wallclock import wall_ms
from molens.web.fire_series import FireSeries

log = logging.getLogger(__name__)

disable_created_metrics()  # type: ignore[no-untyped-call]  # no ``*_created`` series beside each counter and histogram: nothing reads them

MAX_HOSTS = 200
"""Distinct ``host`` label values of the callback latency histogram (then ``other``)."""
MAX_TASK_NAMESPACES = 65_536
"""Task ids whose namespace the fire counters remember (then they start over)."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""Text format 0.0.4: what every Prometheus version parses (the series names need no escaping)."""


class _Request(Protocol):
    @property
    def url(self) -> str: ...
    @property
    def attempt(self) -> int: ...


class _Result(Protocol):
    @property
    def kind(self) -> Any: ...
    @property
    def outcome(self) -> Any: ...
    @property
    def latency_ms(self) -> float: ...


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Live values of one node at scrape time (absent parts are simply not exported)."""

    node_id: str
    role: str
    tasks: Mapping[str, int]
    raft: Mapping[str, int] = field(default_factory=dict)
    """``term``, ``commit_index``, ``applied_index``, ``last_index``, ``leader_changes``..."""
    wheel: Mapping[str, int] = field(default_factory=dict)
    """``timers``, ``overflow`` (leader only)."""
    queues: Mapping[str, int] = field(default_factory=dict)
    """Queue depths by name (``fire_pool_queued``, ``fire_pool_in_flight``, ``fires_in_flight``...)."""
    history_rows: int | None = None
    disk_bytes: Mapping[str, int] = field(default_factory=dict)
    """Bytes by part (``lmdb``, ``history``, ``raft``, ``snapshots``) and ``free``."""
    scheduler: Mapping[str, float] = field(default_factory=dict)
    """The scheduler's monotonic counters (the Stats actor's), exported as ``molens_scheduler_<name>_total``."""
    refused: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Per node port (``raft``, ``rpc``): ``handshake_refused`` (failed CURVE handshakes of peers
    dialling in), ``forged_sender`` (frames whose claimed sender is not the node its key belongs
    to), and for ``rpc`` the frames the scheduler refused by tag (``B``, ``R``, ``H``)."""
    clock: Mapping[str, int] = field(default_factory=dict)
    """``skew_ms`` (median offset of the voters' clocks from this node's) and ``skewed`` (1 when this
    node's clock is off from the majority's: it does not lead)."""
    storage: Mapping[str, int] = field(default_factory=dict)
    """``full`` (1 while writes to this node's disk fail: docs/architecture.md#full-disk), ``stalls``
    (times they started failing) and ``retries`` (failed retries)."""
    flows: Sequence[FlowState] = ()
    """The leader's flows (docs/architecture.md#flow-control); empty off the leader."""
    not_fired: Mapping[str, int] = field(default_factory=dict)
    """Occurrences this replica's applies decided not to fire, by reason (every reason, zeros included)."""
    lateness_p99_s: float | None = None
    """p99 of the recent lateness of this node's attempts (due -> request started); None before any."""
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    """``stored`` (dead letters in the local replica), ``written`` (by kind: written by this replica's
    applies since the process started), ``outbox`` (failure notifications waiting)."""
    namespaces: Mapping[str, int] | None = None
    """Every namespace that exists -> its unfinished tasks in the local replica (None: not known)."""


def pending_by_namespace(scan_meta: Callable[[str], list[tuple[str, bytes]]], tasks: Mapping[str, int],
                         terminal: Iterable[str]) -> dict[str, int]:
    """Every namespace of a replica -> its unfinished tasks: the counts the state machine keeps for
    each namespace but ``default``, whose share is what the others leave of all unfinished tasks."""
    live = {k.removeprefix(tenancy.LIVE_PREFIX): tenancy.decode_count(v) for k, v in scan_meta(tenancy.LIVE_PREFIX)}
    out = {k.removeprefix(tenancy.NS_PREFIX): 0 for k, _ in scan_meta(tenancy.NS_PREFIX)}
    for ns in out:
        out[ns] = live.get(ns, 0)
    done = frozenset(terminal)
    out[DEFAULT_NAMESPACE] = max(0, sum(n for st, n in tasks.items() if st not in done) - sum(out.values()))
    return out


class NamespaceCounters:
    """This node's counts of events per namespace: ``creates``, ``fires``, ``fire_failures``,
    ``quota_holds`` and ``quota_refusals`` by quota. :meth:`families` exports those of the namespaces given and forgets
    the others (a namespace deleted, or never made: its counts go with it)."""

    EVENTS = ("creates", "fires", "fire_failures", "quota_holds")

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], int] = {}
        """(event, namespace, quota or "") -> count."""
        self._lock = threading.Lock()

    def add(self, event: str, ns: str, n: int = 1, quota: str = "") -> None:
        key = (event, ns, quota)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def families(self, pending: Mapping[str, int]) -> Iterator[Metric]:
        """The ``molens_namespace_*`` families of the namespaces in ``pending`` (name -> unfinished tasks)."""
        with self._lock:
            for key in [k for k in self._counts if k[1] not in pending]:
                del self._counts[key]
            counts = dict(self._counts)
        helps = {
            "creates": "Tasks created through this node's API, by namespace",
            "fires": "HTTP attempts made by this node's fire pool, by the task's namespace",
            "fire_failures": "Attempts made by this node's fire pool that did not succeed, by the task's namespace",
            "quota_holds": "Creates refused over creates_per_s that this node held first: their connection sent "
                           "them before the Retry-After it was given had passed, by namespace",
        }
        for event in self.EVENTS:
            c = CounterMetricFamily(f"molens_namespace_{event}", helps[event], labels=["namespace"])
            for ns in sorted(pending):
                c.add_metric([ns], counts.get((event, ns, ""), 0))
            yield c
        q = CounterMetricFamily("molens_namespace_quota_refusals",
                                "Requests this node refused over a namespace's quota, by namespace and quota",
                                labels=["namespace", "quota"])
        for (event, ns, quota), n in sorted(counts.items()):
            if event == "quota_refusals":
                q.add_metric([ns, quota], n)
        yield q
        yield _by_label(GaugeMetricFamily, "molens_namespace_pending_tasks",
                        "Unfinished tasks in the local replica, by namespace", "namespace", pending)


class LiveCollector(Collector):
    """Reads a :class:`MetricsSnapshot` at every scrape and turns it into metric families."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot], namespaces: NamespaceCounters) -> None:
        self._snapshot = snapshot
        self._namespaces = namespaces

    def describe(self) -> list[Metric]:
        return []  # no fixed set: keeps registration from calling collect()

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        yield _by_label(GaugeMetricFamily, "molens_tasks", "Tasks in the local replica by status", "status", s.tasks)
        yield GaugeMetricFamily(
            "molens_is_leader", "1 when this node is the Raft leader", value=1 if s.role == "leader" else 0
        )
        for key, help_ in (
            ("term", "Current Raft term"),
            ("commit_index", "Raft commit index known to this node"),
            ("applied_index", "Last log index applied to the state machine"),
            ("last_index", "Last index in this node's Raft log"),
            ("snapshot_index", "Index of the latest local snapshot"),
        ):
            if key in s.raft:
                yield GaugeMetricFamily(f"molens_raft_{key}", help_, value=s.raft[key])
        yield from _present(s.raft, "leader_changes", CounterMetricFamily, "molens_raft_leader_changes",
                            "Leader changes this node has seen: from one leader to another (not the first it learns of after it "
                            "starts, nor the same node elected again)")
        yield from _present(s.wheel, "timers", GaugeMetricFamily, "molens_wheel_timers",
                            "Timers in the leader's time wheel")
        yield from _present(s.wheel, "overflow", GaugeMetricFamily, "molens_wheel_overflow",
                            "Timers beyond the top wheel level")
        if s.queues:
            yield _by_label(GaugeMetricFamily, "molens_queue_depth", "Items waiting or in flight by queue", "queue",
                            s.queues)
        if s.history_rows is not None:
            yield GaugeMetricFamily("molens_history_rows", "Execution records in the local history", value=s.history_rows)
        if s.disk_bytes:
            yield _by_label(GaugeMetricFamily, "molens_disk_bytes", "Disk usage of the data directory by part", "part",
                            s.disk_bytes)
        yield from _present(s.clock, "skew_ms", GaugeMetricFamily, "molens_clock_skew_ms",
                            "Median offset of the voters' clocks from this node's (ms)")
        yield from _present(s.clock, "skewed", GaugeMetricFamily, "molens_clock_skewed",
                            "1 when this node's clock is off from the majority's (it does not lead)")
        if s.refused:
            hs = CounterMetricFamily(
                "molens_transport_handshake_refused",
                "Incoming node connections that failed the CURVE handshake (no key, unlisted key, plaintext)",
                labels=["port"],
            )
            fs = CounterMetricFamily(
                "molens_transport_forged_frames",
                "Frames dropped because their claimed sender is not the node their CURVE key belongs to",
                labels=["port"],
            )
            rf = CounterMetricFamily(
                "molens_rpc_frames_refused",
                "Worker RPC frames refused: a fire batch not from the leader of its term, results or "
                "heartbeats from a non-member",
                labels=["tag"],
            )
            for port, counts in sorted(s.refused.items()):
                hs.add_metric([port], counts.get("handshake_refused", 0))
                fs.add_metric([port], counts.get("forged_sender", 0))
            for tag in ("B", "R", "H"):
                if tag in s.refused.get("rpc", {}):
                    rf.add_metric([tag], s.refused["rpc"][tag])
            ww = CounterMetricFamily(
                "molens_rpc_results_wrong_worker",
                "Results dropped by the leader because they name a worker other than the member that sent them",
            )
            yield hs
            yield fs
            yield rf
            if "results_wrong_worker" in s.refused.get("rpc", {}):
                ww.add_metric([], s.refused["rpc"]["results_wrong_worker"])
                yield ww
        if "full" in s.storage:
            yield GaugeMetricFamily(
                "molens_storage_full", "1 while this node cannot write its Raft log, task store or history (writes refused)",
                value=s.storage["full"],
            )
            yield CounterMetricFamily(
                "molens_storage_stalls", "Times this node's disk writes started failing for want of space",
                value=s.storage.get("stalls", 0),
            )
            yield CounterMetricFamily(
                "molens_storage_retries", "Failed retries of a write that failed for want of space",
                value=s.storage.get("retries", 0),
            )
        if "stored" in s.dead_letters:
            yield GaugeMetricFamily("molens_dead_letters_stored", "Dead letters in the local replica",
                                    value=s.dead_letters["stored"])
            dl = CounterMetricFamily("molens_dead_letters", "Dead letters written (occurrences that failed for good)",
                                     labels=["kind"])
            for k, v in sorted(s.dead_letters.items()):
                if k.startswith("written:"):
                    dl.add_metric([k.removeprefix("written:")], v)
            yield dl
        yield from _present(s.dead_letters, "outbox", GaugeMetricFamily, "molens_notifications_outbox",
                            "Failure notifications waiting for their target")
        if s.flows:
            # past the bound, the flows that hold fires go first: MolensFlowHeldLong must see them
            # whatever keys a tenant gave its other flows
            held = sorted(s.flows, key=lambda f: (not (f.queued or f.throttled_until_ms), f.key))
            yield from _flow_families(held[:MAX_FLOW_SERIES])
        yield from _present(s.scheduler, "throttled", CounterMetricFamily, "molens_throttled",
                            "Attempts answered 429/503 with a Retry-After (their flow held until then)")
        if s.not_fired:
            yield _by_label(
                CounterMetricFamily, "molens_occurrences_not_fired",
                "Decisions not to fire scheduled occurrences (each one history row, for one or more instants), "
                "by reason; every replica counts the entries it applies",
                "reason", s.not_fired,
            )
        yield from _present(s.scheduler, "flow_held", CounterMetricFamily, "molens_fires_held_by_flow",
                            "Due fires the leader held back by their flow's limits, pause or Retry-After")
        if s.lateness_p99_s is not None:
            yield GaugeMetricFamily(
                "molens_fire_lateness_p99_seconds",
                "p99 of the lateness of this node's recent attempts (due -> request started; last 2048)",
                value=s.lateness_p99_s,
            )
        if s.scheduler:
            yield _by_label(CounterMetricFamily, "molens_scheduler_events",
                            "Scheduler events on this node by kind (process lifetime)", "event", s.scheduler)
        if s.namespaces is not None:
            yield from self._namespaces.families(s.namespaces)


MAX_FLOW_SERIES = 500
"""Most flows exported per scrape: those holding fires (queued or throttled) first, then by key (the
leader forgets a flow without settings after a minute idle)."""


def _present(
    source: Mapping[str, float], key: str, kind: type[GaugeMetricFamily | CounterMetricFamily], name: str, help_: str,
) -> Iterator[Metric]:
    """The one-value family ``name`` of ``source[key]``, when the snapshot has that value."""
    if key in source:
        yield kind(name, help_, value=source[key])


def _by_label(
    kind: type[GaugeMetricFamily | CounterMetricFamily], name: str, help_: str, label: str, values: Mapping[str, float],
) -> Metric:
    """The family ``name`` with one sample per entry of ``values``, labelled ``label``, in key order."""
    fam = kind(name, help_, labels=[label])
    for key, v in sorted(values.items()):
        fam.add_metric([key], v)
    return fam


def _flow_families(flows: Sequence[FlowState]) -> Iterator[Metric]:
    fams = {
        "rate": GaugeMetricFamily("molens_flow_rate", "Fires the leader let go in the last second, by flow", labels=["flow"]),
        "in_flight": GaugeMetricFamily("molens_flow_in_flight", "Fires sent and not yet answered, by flow", labels=["flow"]),
        "queued": GaugeMetricFamily("molens_flow_queued", "Due fires held back by the flow's limits or pause", labels=["flow"]),
        "throttled": GaugeMetricFamily(
            "molens_flow_throttled", "1 while a receiver's Retry-After holds the flow", labels=["flow"]
        ),
        "limit": GaugeMetricFamily(
            "molens_flow_rate_limit", "The rate enforced now (fires/s; an adaptive flow's backed-off rate)", labels=["flow"]
        ),
    }
    for f in flows:
        fams["rate"].add_metric([f.key], f.rate)
        fams["in_flight"].add_metric([f.key], f.in_flight)
        fams["queued"].add_metric([f.key], f.queued)
        fams["throttled"].add_metric([f.key], 1 if f.throttled_until_ms else 0)
        if f.effective_rate_per_s is not None:
            fams["limit"].add_metric([f.key], f.effective_rate_per_s)
    yield from fams.values()


def url_host(url: str) -> str:
    """``https://api.example.com:8443/x`` -> ``api.example.com:8443`` (``?`` when unparseable)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "?"


class FireMetrics:
    """Counters and histograms observed as fires happen (the scheduler's stats observer), and the
    same events in the hour and day :attr:`series` of the console's charts."""

    def __init__(self, registry: CollectorRegistry, namespaces: NamespaceCounters | None = None,
                 namespace_of: Callable[[str], str | None] | None = None, clock: Callable[[], int] = wall_ms) -> None:
        self.series = FireSeries()
        self._clock = clock
        self._namespaces = namespaces
        self._namespace_of = namespace_of
        self._task_namespaces: dict[str, str] = {}
        """task id -> namespace (it never changes), at most :data:`MAX_TASK_NAMESPACES` held."""
        self.fires = Counter(
            "molens_fires", "HTTP attempts made by this node's fire pool", ["kind", "outcome"], registry=registry
        )
        self.latency = Histogram(
            "molens_callback_latency_seconds",
            "Callback/ACK HTTP latency by URL host (attempts made by this node)",
            ["host"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.lateness = Histogram(
            "molens_fire_lateness_seconds",
            "Due time -> HTTP request started by this node's worker (what a receiver sees)",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.plan_lag = Histogram(
            "molens_fire_plan_lag_seconds",
            "Due time -> fire planned by the leader's dispatcher (0 when planned ahead)",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.send_delay = Histogram(
            "molens_fire_send_delay_seconds",
            "Fire planned -> sent to its worker (the Dispatched entry's commit)",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self._hosts: dict[str, str] = {}
        """URL -> its ``host`` label: a cache, emptied when it holds ``4 * MAX_HOSTS`` URLs."""
        self._labelled: set[str] = set()
        """The hosts given a label of their own, for the process's life (a series once exported stays)."""
        self._lock = threading.Lock()

    def _host(self, url: str) -> str:
        h = self._hosts.get(url)
        if h is None:
            h = url_host(url)
            with self._lock:
                if len(self._hosts) >= 4 * MAX_HOSTS:
                    self._hosts.clear()
                if h not in self._labelled:
                    if len(self._labelled) < MAX_HOSTS:
                        self._labelled.add(h)
                    else:
                        h = "other"
                self._hosts[url] = h
        return h

    # --- the StatsObserver protocol (molens.actors.stats) ----------------------------------------
    def delivered(self, req: _Request, result: _Result) -> None:
        kind = getattr(result.kind, "value", str(result.kind))
        outcome = getattr(result.outcome, "value", str(result.outcome))
        self.fires.labels(kind, outcome).inc()
        self.latency.labels(self._host(req.url)).observe(max(0.0, result.latency_ms) / 1000)
        self.series.attempt(self._clock(), failed=outcome != "success", retry=req.attempt > 1)
        if self._namespaces is not None and (ns := self._task_namespace(req)) is not None:
            self._namespaces.add("fires", ns)
            if outcome != "success":
                self._namespaces.add("fire_failures", ns)

    def _task_namespace(self, req: _Request) -> str | None:
        tid = getattr(req, "task_id", None)
        if not isinstance(tid, str) or self._namespace_of is None:
            return None
        ns = self._task_namespaces.get(tid)
        if ns is None:
            ns = self._namespace_of(tid)
            if ns is not None:
                if len(self._task_namespaces) >= MAX_TASK_NAMESPACES:
                    self._task_namespaces.clear()
                self._task_namespaces[tid] = ns
        return ns

    def sampled(self, name: str, values_ms: list[float]) -> None:
        if name == "fire_lateness":
            h = self.lateness
            self.series.lateness(self._clock(), values_ms)
        elif name == "dispatch_lag":
            h = self.plan_lag
        elif name == "plan_to_send":
            h = self.send_delay
        else:
            return
        for v in values_ms:
            h.observe(max(0.0, v) / 1000)


class NodeMetrics:
    """One node's registry: the live collector plus the fire-time instruments."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot],
                 namespace_of: Callable[[str], str | None] | None = None) -> None:
        """``namespace_of``: a task id's namespace in the local replica (None: not there)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.namespaces = NamespaceCounters()
        self.fires = FireMetrics(self.registry, self.namespaces, namespace_of)
        self.registry.register(LiveCollector(snapshot, self.namespaces))

    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family a node may export (docs/observability.md's table is made of these)."""

    name: str
    """As scraped (a counter's ``_total``, a histogram's base name)."""
    type: str
    labels: tuple[str, ...]
    help: str


def catalogue() -> list[Family]:
    """Every metric family a node can export, read from the collectors themselves: a snapshot with
    every part filled, and one observation of each fire-time instrument. ``scripts/metrics_table.py``
    writes docs/observability.md's table from it; a test keeps the two in step."""
    snap = MetricsSnapshot(
        node_id="n1", role="leader", tasks={"pending": 1}, raft=dict.fromkeys(
            ("term", "commit_index", "applied_index", "last_index", "snapshot_index", "leader_changes"), 1),
        wheel={"timers": 1, "overflow": 0}, queues={"fires_in_flight": 1}, history_rows=1, disk_bytes={"free": 1},
        scheduler={"throttled": 1, "flow_held": 1}, refused={"raft": {"handshake_refused": 0}, "rpc": {"B": 0, "results_wrong_worker": 0}},
        clock={"skew_ms": 1, "skewed": 0}, storage={"full": 0}, not_fired={"skipped_overlap": 0}, lateness_p99_s=0.1,
        flows=(FlowState("f", 1, 1, 1, 0, 1.0),), dead_letters={"stored": 0, "outbox": 0, "written:unknown": 0},
        namespaces={"default": 1},
    )
    metrics = NodeMetrics(lambda: snap)
    metrics.namespaces.add("quota_refusals", "default", quota="creates_per_s")
    req = type("Req", (), {"url": "http://h/", "attempt": 1})()
    res = type("Res", (), {"kind": "callback", "outcome": "success", "latency_ms": 1.0})()
    metrics.fires.delivered(req, res)
    for name in ("fire_lateness", "dispatch_lag", "plan_to_send"):
        metrics.fires.sampled(name, [1.0])
    out = []
    for fam in metrics.registry.collect():
        labels = sorted({k for smp in fam.samples for k in smp.labels if k != "le"})
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out.append(Family(name, fam.type, tuple(labels), fam.documentation))
    return sorted(out, key=lambda f: f.name)


__all__ = [
    "CONTENT_TYPE",
    "Family",
    "catalogue",
    "FireMetrics",
    "LiveCollector",
    "MetricsSnapshot",
    "NamespaceCounters",
    "NodeMetrics",
    "pending_by_namespace",
    "url_host",
]
