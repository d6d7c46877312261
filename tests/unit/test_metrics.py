"""/metrics building blocks: live values read at scrape time, fire-time instruments fed by the
scheduler's stats hook, bounded host labels, and output that prometheus-client's parser reads."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from molens.actors.messages import SetObserver
from molens.actors.stats import ReportingDeliverer, Stats, StatsBuffer, StatsClient
from molens.delivery import Deliverer, FireRequest
from molens.model import FireKind
from molens.node_context import LeaderChanges
from molens.web.metrics import MAX_HOSTS, MetricsSnapshot, NodeMetrics, url_host
from molens.web.node_stats import attempts


def _parse(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _snap(**kw: object) -> MetricsSnapshot:
    base = MetricsSnapshot(
        node_id="n1",
        role="leader",
        tasks={"pending": 3, "done": 1},
        raft={"term": 2, "commit_index": 10, "applied_index": 9, "leader_changes": 1},
        wheel={"timers": 3, "overflow": 0},
        queues={"fire_pool_queued": 4},
        history_rows=7,
        disk_bytes={"lmdb": 4096, "free": 1 << 30},
        scheduler={"dispatched_accepted": 5.0},
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_live_values_are_read_at_every_scrape() -> None:
    current = [_snap()]
    m = NodeMetrics(lambda: current[0])
    s = _parse(m.render())
    assert s[("molens_tasks", (("status", "pending"),))] == 3
    assert s[("molens_raft_term", ())] == 2
    assert s[("molens_raft_commit_index", ())] == 10
    assert s[("molens_raft_leader_changes_total", ())] == 1
    assert s[("molens_is_leader", ())] == 1
    assert s[("molens_wheel_timers", ())] == 3
    assert s[("molens_queue_depth", (("queue", "fire_pool_queued"),))] == 4
    assert s[("molens_history_rows", ())] == 7
    assert s[("molens_disk_bytes", (("part", "lmdb"),))] == 4096
    assert s[("molens_scheduler_events_total", (("event", "dispatched_accepted"),))] == 5
    current[0] = _snap(tasks={"pending": 0, "done": 4}, role="follower", wheel={})
    s = _parse(m.render())
    assert s[("molens_tasks", (("status", "done"),))] == 4
    assert s[("molens_is_leader", ())] == 0
    assert ("molens_wheel_timers", ()) not in s  # a follower has no wheel: the series is absent


@pytest.fixture
def stats() -> Iterator[StatsClient]:
    """A running Stats actor; ``to_json`` (an ask) returns once every earlier message is handled."""
    ref = Stats.start()
    try:
        yield StatsClient(ref)
    finally:
        ref.stop()


def test_fire_hooks_count_outcomes_latency_by_host_and_lateness(stats: StatsClient) -> None:
    m = NodeMetrics(_snap)
    stats.ref.tell(SetObserver(m.fires))
    req = FireRequest(
        fire_id="t-1", task_id="t", attempt=1, kind=FireKind.CALLBACK, url="http://cb.example:8080/x?y=1",
        body=b"{}", scene="default", timeout_ms=1000,
    )

    class Result:
        kind = FireKind.CALLBACK
        outcome = "success"
        latency_ms = 120.0

    stats.delivered([(req, Result(), 0.0)] * 3)  # type: ignore[list-item]
    buf = StatsBuffer(stats)  # how an actor sends its samples: one StatsBatch per flush
    buf.sample("fire_lateness", [2.0, 40.0])
    buf.sample("dispatch_lag", [-90.0, 3.0, 7.0])
    buf.sample("plan_to_send", [1.0])
    buf.sample("something_else", [1.0])
    buf.flush(0)
    stats.to_json()
    s = _parse(m.render())
    assert s[("molens_fires_total", (("kind", "callback"), ("outcome", "success")))] == 3
    assert s[("molens_callback_latency_seconds_count", (("host", "cb.example:8080"),))] == 3
    assert abs(s[("molens_callback_latency_seconds_sum", (("host", "cb.example:8080"),))] - 0.36) < 1e-9
    assert s[("molens_callback_latency_seconds_bucket", (("host", "cb.example:8080"), ("le", "0.25")))] == 3
    assert s[("molens_fire_lateness_seconds_count", ())] == 2
    assert s[("molens_fire_lateness_seconds_bucket", (("le", "0.005"),))] == 1
    assert s[("molens_fire_plan_lag_seconds_count", ())] == 3
    assert s[("molens_fire_plan_lag_seconds_bucket", (("le", "0.005"),))] == 2  # planned ahead counts as 0
    assert s[("molens_fire_send_delay_seconds_count", ())] == 1


def test_fire_lateness_is_measured_from_the_due_time_to_the_request_start_on_the_worker(stats: StatsClient) -> None:
    due = int(time.time() * 1000) - 250  # the request started 50 ms late and took 200 ms
    req = FireRequest(
        fire_id="t-1", task_id="t", attempt=1, kind=FireKind.CALLBACK, url="http://cb/x", body=b"{}",
        scene="default", timeout_ms=1000, not_before_ms=due,
    )

    class Answered200msLater(Deliverer):
        def _deliver(self, req: FireRequest, timeout_ms: int | None = None) -> Any:  # deliver() records it
            class Result:
                kind = FireKind.CALLBACK
                outcome = "success"
                latency_ms = 200.0

            return Result()

    class Reporting(ReportingDeliverer, Answered200msLater):
        pass

    d = Reporting(urllib3.PoolManager(), "n1")
    d.deliver(req)
    d.deliver(FireRequest(
        fire_id="t-2", task_id="t", attempt=1, kind=FireKind.CALLBACK, url="http://cb/x", body=b"{}",
        scene="default", timeout_ms=1000,
    ))
    stats.delivered(d.take())
    late = stats.to_json()["timings"]["fire_lateness"]
    assert 50 <= late["max_ms"] < 50 + 1_000, late
    assert late["n"] == 1  # no due time known: no sample


def test_reporting_deliverer_reports_every_attempt_even_a_failed_one(stats: StatsClient) -> None:
    m = NodeMetrics(_snap)
    stats.ref.tell(SetObserver(m.fires))
    http = urllib3.PoolManager(retries=False)
    d = ReportingDeliverer(http, "n1")
    req = FireRequest(
        fire_id="t-1", task_id="t", attempt=1, kind=FireKind.CALLBACK, url="http://127.0.0.1:9/cb",
        body=b"{}", scene="default", timeout_ms=500,
    )
    result = d.deliver(req)  # port 9 (discard) is closed here: a network error, at once
    stats.delivered(d.take())
    stats.to_json()
    s = _parse(m.render())
    assert s[("molens_fires_total", (("kind", "callback"), ("outcome", result.outcome.value)))] == 1
    assert s[("molens_callback_latency_seconds_count", (("host", "127.0.0.1:9"),))] == 1


class Result:
    """A successful attempt's result, as the fire hooks read it."""

    kind = FireKind.CALLBACK
    outcome = "success"
    latency_ms = 1.0


def test_past_the_bound_the_flows_holding_fires_are_exported_first() -> None:
    """A tenant's many idle flows with early keys cannot push a held flow out of the series that
    MolensFlowHeldLong reads."""
    from molens.schedule.flows import FlowState
    from molens.web.metrics import MAX_FLOW_SERIES

    idle = [FlowState(key=f"a{i:04}", rate=1, in_flight=0, queued=0, throttled_until_ms=0, effective_rate_per_s=None)
            for i in range(MAX_FLOW_SERIES + 100)]
    held = [FlowState(key="zz-held", rate=0, in_flight=0, queued=7, throttled_until_ms=0, effective_rate_per_s=5.0),
            FlowState(key="zz-throttled", rate=0, in_flight=0, queued=0, throttled_until_ms=1_800_000_000_000,
                      effective_rate_per_s=None)]
    s = _parse(NodeMetrics(lambda: _snap(flows=[*idle, *held])).render())
    flows = {dict(k[1])["flow"] for k in s if k[0] == "molens_flow_rate"}
    assert len(flows) == MAX_FLOW_SERIES and {"zz-held", "zz-throttled"} <= flows
    assert s[("molens_flow_queued", (("flow", "zz-held"),))] == 7


@pytest.mark.parametrize("hosts_seen", [MAX_HOSTS + 50, 20 * MAX_HOSTS])
def test_host_labels_are_bounded(hosts_seen: int) -> None:
    """However many hosts pass (past the URL cache's emptying too), at most MAX_HOSTS get a label."""
    m = NodeMetrics(_snap)

    for i in range(hosts_seen):
        for path in ("a", "b"):
            req = FireRequest(
                fire_id="t-1", task_id="t", attempt=1, kind=FireKind.CALLBACK, url=f"http://h{i}.example/{path}",
                body=b"", scene="default", timeout_ms=1000,
            )
            m.fires.delivered(req, Result())
    s = _parse(m.render())
    hosts = {dict(k[1])["host"] for k in s if k[0] == "molens_callback_latency_seconds_count"}
    assert len(hosts) == MAX_HOSTS + 1 and "other" in hosts
    assert hosts - {"other"} == {f"h{i}.example" for i in range(MAX_HOSTS)}
    assert s[("molens_callback_latency_seconds_count", (("host", "other"),))] == 2 * (hosts_seen - MAX_HOSTS)


def test_url_host_keeps_the_port_and_drops_the_rest() -> None:
    assert url_host("https://API.example.com:8443/a/b?c=d") == "api.example.com:8443"
    assert url_host("http://[::1]:80/") == "::1:80"
    assert url_host("not a url") == "?"


def test_flows_are_exported_per_flow_and_throttled_attempts_are_counted() -> None:
    from molens.schedule.flows import FlowState

    flows = [
        FlowState(key="api:443", rate=12, in_flight=3, queued=40, throttled_until_ms=0, effective_rate_per_s=20.0),
        FlowState(key="slow", rate=0, in_flight=0, queued=5, throttled_until_ms=1_800_000_000_000,
                  effective_rate_per_s=None),
    ]
    s = _parse(NodeMetrics(lambda: _snap(flows=flows, scheduler={"throttled": 2.0})).render())
    assert s[("molens_flow_rate", (("flow", "api:443"),))] == 12
    assert s[("molens_flow_in_flight", (("flow", "api:443"),))] == 3
    assert s[("molens_flow_queued", (("flow", "api:443"),))] == 40
    assert s[("molens_flow_rate_limit", (("flow", "api:443"),))] == 20
    assert s[("molens_flow_throttled", (("flow", "api:443"),))] == 0
    assert s[("molens_flow_throttled", (("flow", "slow"),))] == 1
    assert ("molens_flow_rate_limit", (("flow", "slow"),)) not in s  # unlimited
    assert s[("molens_throttled_total", ())] == 2
    assert not any(name.startswith("molens_flow_") for name, _ in _parse(NodeMetrics(lambda: _snap()).render()))


def test_a_workers_figures_count_failed_attempts_and_time_each_answer(stats: StatsClient) -> None:
    """What the Workers page shows per node: attempts, the failed ones, and callback latency p50/p99."""
    m = NodeMetrics(_snap)
    stats.tell(SetObserver(m.fires))
    req = FireRequest(
        fire_id="t-1", task_id="t", attempt=1, kind=FireKind.CALLBACK, url="http://cb/x", body=b"{}",
        scene="default", timeout_ms=1000,
    )

    def result(outcome: str, latency_ms: float) -> Any:
        return type("Result", (), {"kind": FireKind.CALLBACK, "outcome": outcome, "latency_ms": latency_ms})()

    attempts_made = [result("success", 10.0)] * 3 + [result("http_error", 30.0), result("timeout", 1000.0)]
    stats.delivered([(req, r, 0.0) for r in attempts_made])
    lat = stats.to_json()["timings"]["callback_latency"]
    assert (lat["n"], lat["p50_ms"], lat["max_ms"]) == (5, 10.0, 1000.0)
    assert attempts(m.fires.fires) == 5
    assert attempts(m.fires.fires, failed=True) == 2


def test_namespace_series_are_labelled_by_namespace_only_and_go_with_the_namespace() -> None:
    pending = {"default": 2, "pay": 5}
    owner = {"t1": "pay", "t2": "default"}
    m = NodeMetrics(lambda: _snap(namespaces=dict(pending)), owner.get)

    class Failed(Result):
        outcome = "timeout"

    def fire(tid: str, result: Result) -> None:
        m.fires.delivered(FireRequest(fire_id=f"{tid}-1", task_id=tid, attempt=1, kind=FireKind.CALLBACK,
                                      url="http://h/", body=b"", scene="default", timeout_ms=1000), result)

    fire("t1", Result())
    fire("t1", Failed())
    fire("t2", Result())
    fire("gone", Result())  # a task the replica no longer holds: counted under no namespace
    m.namespaces.add("creates", "pay", 3)
    m.namespaces.add("quota_refusals", "pay", quota="creates_per_s")
    text = m.render()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: it comes with Debian's prometheus package"
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert not [line for line in lint.stdout.decode().splitlines() if "molens_namespace_" in line], lint.stdout
    s = _parse(text)
    want = {("creates_total", "pay"): 3, ("creates_total", "default"): 0, ("fires_total", "pay"): 2,
            ("fire_failures_total", "pay"): 1, ("fires_total", "default"): 1, ("fire_failures_total", "default"): 0,
            ("pending_tasks", "pay"): 5, ("pending_tasks", "default"): 2}
    assert {k: s[(f"molens_namespace_{k[0]}", (("namespace", k[1]),))] for k in want} == want
    assert s[("molens_namespace_quota_refusals_total", (("namespace", "pay"), ("quota", "creates_per_s")))] == 1
    labels = {k for name, lbl in s if name.startswith("molens_namespace_") for k, _ in lbl}
    assert labels == {"namespace", "quota"}
    assert {v for name, lbl in s if name.startswith("molens_namespace_") for k, v in lbl if k == "namespace"} == {
        "default", "pay"}
    del pending["pay"]  # the namespace is deleted: its series go, and its counts are forgotten
    s = _parse(m.render())
    assert not [k for k in s if ("namespace", "pay") in k[1]]
    pending["pay"] = 0  # made again: it starts from nothing
    s = _parse(m.render())
    assert s[("molens_namespace_creates_total", (("namespace", "pay"),))] == 0


def test_pending_tasks_per_namespace_come_from_the_replicas_counts() -> None:
    from molens.fsm import tenancy
    from molens.fsm.tenancy import Namespace
    from molens.web.metrics import pending_by_namespace

    meta = {tenancy.NS_PREFIX + "pay": tenancy.encode(Namespace(name="pay")), tenancy.NS_PREFIX + "ops": b"",
            tenancy.LIVE_PREFIX + "pay": tenancy.encode_count(4)}

    def scan(prefix: str) -> list[tuple[str, bytes]]:
        return sorted((k, v) for k, v in meta.items() if k.startswith(prefix))

    out = pending_by_namespace(scan, {"pending": 6, "running": 1, "done": 9}, {"done"})
    assert out == {"pay": 4, "ops": 0, "default": 3}


def test_results_of_the_wrong_worker_count_those_the_pool_dropped_and_go_absent_while_stats_is_silent() -> None:
    """Results a follower passed on name another worker's fires: dropped by the leader's RPC thread or
    by its FireWorkerPool (frames that reached this node before it led), both in one counter."""
    from types import SimpleNamespace

    from molens.node_context import NodeContext

    sched = SimpleNamespace(rpc=SimpleNamespace(stats=lambda: {"handshake_refused": 1, "forged_sender": 0}),
                            rpc_refused={"B": 0, "R": 2, "H": 0, "results_wrong_worker": 3})
    ctx = SimpleNamespace(scheduler=sched)
    both = NodeContext._refused(ctx, {}, {"results_wrong_worker": 4, "fires_sent": 9})  # type: ignore[arg-type]
    assert both["rpc"]["results_wrong_worker"] == 7 and both["rpc"]["R"] == 2
    none_passed = NodeContext._refused(ctx, {}, {"fires_sent": 9})  # type: ignore[arg-type]
    assert none_passed["rpc"]["results_wrong_worker"] == 3
    silent = NodeContext._refused(ctx, {}, {})  # type: ignore[arg-type]
    assert "results_wrong_worker" not in silent["rpc"] and silent["rpc"]["R"] == 2
    s = _parse(NodeMetrics(lambda: _snap(refused=both)).render())
    assert s[("molens_rpc_results_wrong_worker_total", ())] == 7
    s = _parse(NodeMetrics(lambda: _snap(refused=silent)).render())
    assert ("molens_rpc_results_wrong_worker_total", ()) not in s  # absent, not a reset to fewer
    assert s[("molens_rpc_frames_refused_total", (("tag", "R"),))] == 2


def test_a_leader_change_is_from_one_leader_to_another() -> None:
    """The first leader a node learns of after it starts is no change (a rolling restart would count
    one per node), nor the same leader elected again after a spell without one; each move to
    another node is one."""
    seen = LeaderChanges()
    for leader in (None, "n1", None, "n1", "n1", "n2", None, "n3", "n1"):
        seen.seen(leader)
    assert seen.count == 3
