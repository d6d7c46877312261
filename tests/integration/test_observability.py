"""Observability end to end: ``/metrics``, the time wheel (JSON + PNG), the schedule
preview, ``/api/v1/stats?node_id=`` and ``/api/v1/cluster/stats``.

First against the REST app over a LocalContext (in process: route validation and schemas), then
against a real single ``molens-node`` (the key Prometheus series move when tasks fire), then a
real 3-node cluster (stats aggregated from every node in one call; a killed node is marked).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from .api_server import Served, check_schema, delayed, serve
from .conftest import Cluster, NodeProc, free_ports, wait_for

_http = urllib3.PoolManager(retries=False, timeout=10)


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        r = _http.request("GET", url, redirect=False)
    except urllib3.exceptions.HTTPError:
        return 0, {}, b""
    return r.status, dict(r.headers), r.data


def _json(url: str) -> tuple[int, Any]:
    status, _, data = _get(url)
    return status, json.loads(data) if data else None


def _post(url: str, body: Any) -> tuple[int, Any]:
    r = _http.request("POST", url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return r.status, json.loads(r.data)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, keyed by (name, sorted labels)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(
        v for (n, lab), v in samples.items() if n == name and all(dict(lab).get(k) == x for k, x in labels.items())
    )


# ------------------------------------------------------------------------------------- LocalContext


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("obs-local")) as s:
        yield s


def test_metrics_page_parses_and_reads_task_counts_live(served: Served) -> None:
    st, h, body = served.call("GET", "/metrics")
    assert st == 200 and h["Content-Type"].startswith("text/plain; version=0.0.4")
    before = _sum(_samples(body.decode()), "molens_tasks", status="pending")
    assert served.call("POST", "/api/v1/tasks", delayed())[0] == 201
    after = _sum(_samples(served.call("GET", "/metrics")[2].decode()), "molens_tasks", status="pending")
    assert after == before + 1


def test_wheel_distribution_counts_every_due_task_in_the_right_level(served: Served) -> None:
    for ms in (2_000, 600_000, 3 * 86_400_000):
        assert served.call("POST", "/api/v1/tasks", delayed(interval_ms=ms))[0] == 201
    st, _, body = served.call("GET", "/api/v1/timewheel/distribution")
    assert st == 200
    check_schema(body, "WheelDistribution")
    assert body["timers"] == sum(lv["total"] for lv in body["levels"]) + body["overflow"]
    assert body["timers"] == served.task_count()
    totals = [lv["total"] for lv in body["levels"]]
    assert totals[0] >= 1 and totals[1] >= 1 and totals[2] >= 1  # 2 s, 10 min, 3 days ahead
    assert all(len(lv["counts"]) == body["wheel_size"] for lv in body["levels"])


def test_wheel_png_is_a_png_of_the_asked_width_and_bad_parameters_are_400(served: Served) -> None:
    st, h, body = served.call("GET", "/api/v1/timewheel/distribution.png?width=1000&level=1")
    assert st == 200 and h["Content-Type"] == "image/png"
    img = Image.open(io.BytesIO(body))
    img.verify()
    assert Image.open(io.BytesIO(body)).size[0] == 1000
    for query, field in (("width=100", "width"), ("width=abc", "width"), ("level=9", "level"), ("level=-1", "level"),
                         ("width=800&levle=1", "levle")):
        st, _, err = served.call("GET", f"/api/v1/timewheel/distribution.png?{query}")
        assert st == 400 and err["error"]["field"] == field, (query, err)


def test_schedule_preview_cron_in_a_dst_zone_and_errors_name_the_field(served: Served) -> None:
    # 2026-03-29 01:00 UTC; 02:30 does not exist in Berlin that night: it fires once at 03:00 CEST
    st, _, body = served.call(
        "GET", "/api/v1/schedule/preview?cron_expr=30+2+*+*+*&timezone=Europe/Berlin&after=1774746000000&count=3"
    )
    assert st == 200, body
    check_schema(body, "SchedulePreview")
    assert body["local"] == [
        "2026-03-30T02:30:00.000+02:00",
        "2026-03-31T02:30:00.000+02:00",
        "2026-04-01T02:30:00.000+02:00",
    ]
    st, _, body = served.call(
        "GET", "/api/v1/schedule/preview?cron_expr=30+2+*+*+*&timezone=Europe/Berlin&after=1774738800000&count=2"
    )
    assert body["items"][0] == 1774746000000 and body["local"][0] == "2026-03-29T03:00:00.000+02:00"
    st, _, body = served.call("GET", "/api/v1/schedule/preview?type=periodic&interval_ms=60000&after=1000&count=5")
    assert st == 200 and body["items"] == [61_000, 121_000, 181_000, 241_000, 301_000]
    for query, field in (
        ("cron_expr=61+*+*+*+*", "cron_expr"),
        ("cron_expr=*+*+*+*+*&timezone=Mars/Base", "timezone"),
        ("interval_ms=10", "interval_ms"),
        ("interval_ms=1000&cron_expr=*+*+*+*+*", "cron_expr"),
        ("interval_ms=1000&count=0", "count"),
        ("interval_ms=1000&bogus=1", "bogus"),
        ("type=weekly&interval_ms=1000", "type"),
    ):
        st, _, err = served.call("GET", f"/api/v1/schedule/preview?{query}")
        assert st == 400 and err["error"]["field"] == field, (query, err)


def test_schedule_preview_at_the_end_of_year_9999(served: Served) -> None:
    """The last millisecond the API takes: shown to the millisecond in UTC; in a zone ahead of UTC
    it is the year 10000, which no local time shows: a 400 naming the zone, not a 500."""
    last = 253_402_300_799_999
    st, _, body = served.call("GET", f"/api/v1/schedule/preview?type=delayed&run_at={last}&timezone=UTC")
    assert st == 200 and body["local"] == ["9999-12-31T23:59:59.999+00:00"], body
    for query in (f"type=delayed&run_at={last}", "interval_ms=1000&after=253402300790000"):
        st, _, err = served.call("GET", f"/api/v1/schedule/preview?{query}&timezone=Etc/GMT-14")
        assert (st, err["error"]["field"]) == (400, "timezone"), (query, err)


def test_stats_and_cluster_stats_of_a_single_node(served: Served) -> None:
    st, _, body = served.call("GET", "/api/v1/stats?node_id=n1")
    assert st == 200 and body["node_id"] == "n1"
    check_schema(body, "Stats")
    st, _, body = served.call("GET", "/api/v1/stats?node_id=nope")
    assert st == 404 and body["error"]["field"] == "node_id"
    st, _, body = served.call("GET", "/api/v1/cluster/stats")
    assert st == 200 and [n["node_id"] for n in body["nodes"]] == ["n1"]
    check_schema(body, "ClusterStats")


# ---------------------------------------------------------------------------------- one real node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    c = Cluster(tmp_path_factory.mktemp("obs1"), 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_for(lambda: _get(_base(n) + "/readyz")[0] == 200, 30, "the HTTP API to be ready")
        yield n
    finally:
        c.kill_all()


def _metrics(n: NodeProc) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    st, _, data = _get(_base(n) + "/metrics")
    assert st == 200
    return _samples(data.decode())


@pytest.mark.slow
def test_key_series_move_when_tasks_fire(node: NodeProc) -> None:
    base = _base(node)
    m0 = _metrics(node)
    for key in ("molens_raft_term", "molens_raft_commit_index", "molens_raft_applied_index", "molens_is_leader"):
        assert _sum(m0, key) >= 1, key
    assert _sum(m0, "molens_disk_bytes", part="lmdb") > 0
    cb = base + "/api/v1/test/callback"
    n = 5
    for i in range(n):
        st, _ = _post(base + "/api/v1/tasks", {"type": "delayed", "interval_ms": 100 + 50 * i, "callback_url": cb})
        assert st == 201
    near = _post(base + "/api/v1/tasks", {"type": "delayed", "interval_ms": 300_000, "callback_url": cb})[1]
    far = _post(base + "/api/v1/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": cb})[1]

    def moved() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        m = _metrics(node)
        ok = _sum(m, "molens_fires_total", kind="callback", outcome="success") - _sum(
            m0, "molens_fires_total", kind="callback", outcome="success"
        )
        return m if ok >= n else None

    m1 = wait_for(moved, 30, f"{n} successful fires in /metrics")
    host = "127.0.0.1:" + str(node.settings["http"]["port"])
    assert _sum(m1, "molens_callback_latency_seconds_count", host=host) >= n
    assert _sum(m1, "molens_callback_latency_seconds_sum", host=host) >= n * 0.1  # the test endpoint waits 100 ms
    assert _sum(m1, "molens_fire_lateness_seconds_count") >= n
    assert _sum(m1, "molens_fire_send_delay_seconds_count") >= n
    assert _sum(m1, "molens_raft_commit_index") > _sum(m0, "molens_raft_commit_index")
    assert _sum(m1, "molens_scheduler_events_total", event="dispatched_accepted") >= n
    wait_for(lambda: _sum(_metrics(node), "molens_tasks", status="done") >= n, 20, "tasks done in /metrics")
    wait_for(lambda: _sum(_metrics(node), "molens_history_rows") >= n, 20, "history rows in /metrics")  # cached 5 s
    m2 = _metrics(node)
    # the 5-minute task waits in the wheel; the 1-hour one only in `due`, beyond the 10-minute horizon
    assert _sum(m2, "molens_wheel_timers") == 1

    # the same fires in the dashboard's stats
    st, stats = _json(base + "/api/v1/stats")
    assert st == 200
    check_schema(stats, "Stats")
    assert stats["fires_total"] >= n and stats["success_rate"] == 1.0 and stats["fires_per_s"] > 0
    assert stats["lateness_p99_ms"] is not None and stats["disk"]["lmdb_bytes"] > 0
    # and per worker (the console's Workers page): failed attempts, callback latency of recent attempts
    assert 0 <= stats["fires_failed"] <= stats["fires_total"] - n
    assert stats["callback_latency_p50_ms"] >= 100 and stats["callback_latency_p99_ms"] >= stats["callback_latency_p50_ms"]

    # and the 5-minute task in the wheel: level 0 (10 ms buckets, 5.12 s) cannot hold it; level 1 can
    st, wheel = _json(base + "/api/v1/timewheel/distribution")
    assert st == 200
    check_schema(wheel, "WheelDistribution")
    assert wheel["levels"][1]["total"] == 1 and wheel["timers"] == 1, wheel
    # and, separately, the far future read from `due`: the 1-hour task on its UTC day
    assert wheel["window"]["horizon_ms"] == 600_000 and wheel["window"]["until_ms"] > near["next_run_at"]
    far_day = far["next_run_at"] // 86_400_000 * 86_400_000
    assert wheel["far_future"]["from_ms"] == wheel["window"]["until_ms"] and wheel["far_future"]["total"] >= 1
    assert any(d["start_ms"] == far_day and d["count"] >= 1 for d in wheel["far_future"]["days"]), wheel["far_future"]
    st, _, png = _get(base + "/api/v1/timewheel/distribution.png")
    assert st == 200 and Image.open(io.BytesIO(png)).size[0] == 800
    assert _http.request("DELETE", f"{base}/api/v1/tasks/{far['id']}").status == 200
    assert _http.request("DELETE", f"{base}/api/v1/tasks/{near['id']}").status == 200


# ------------------------------------------------------------------------------------ 3-node cluster


def _full_cluster_stats(c: Cluster, what: str) -> tuple[NodeProc, NodeProc, Any]:
    """Start ``c``, wait until every node serves HTTP and a follower's cluster stats hold every node
    without an error; (leader, that follower, the stats)."""
    c.start()
    leader = c.leader(timeout=30)
    for n in c.nodes.values():
        wait_for(lambda n=n: _get(_base(n) + "/readyz")[0] == 200, 30, f"{n.node_id} HTTP ready")
    follower = c.followers()[0]

    def full() -> Any:
        st, body = _json(_base(follower) + "/api/v1/cluster/stats")
        return body if st == 200 and all("error" not in x for x in body["nodes"]) else None

    return leader, follower, wait_for(full, 20, what)


def test_cluster_stats_come_from_every_node_in_one_call_and_a_dead_node_is_marked(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        leader, follower, body = _full_cluster_stats(c, "every node in cluster stats")
        check_schema(body, "ClusterStats")
        nodes = body["nodes"]
        assert nodes[0]["node_id"] == leader.node_id  # leader first
        assert sorted(x["node_id"] for x in nodes) == ["n1", "n2", "n3"]
        assert all(x["role"] in ("leader", "follower") and x["term"] >= 1 and x["lag"] >= 0 for x in nodes)

        st, other = _json(_base(follower) + f"/api/v1/stats?node_id={leader.node_id}")
        assert st == 200 and other["node_id"] == leader.node_id and other["role"] == "leader"

        # the wheel lives on the leader: a follower answers with the leader's (no cross-origin hop)
        cb = _base(leader) + "/api/v1/test/callback"
        assert _post(_base(leader) + "/api/v1/tasks", {"type": "delayed", "interval_ms": 300_000, "callback_url": cb})[0] == 201
        st, h, png = _get(_base(follower) + "/api/v1/timewheel/distribution.png?level=0&width=600")
        assert st == 200 and h["X-Molens-Served-By"] == _base(leader)
        assert Image.open(io.BytesIO(png)).size[0] == 600
        st, wheel = _json(_base(follower) + "/api/v1/timewheel/distribution")
        assert st == 200 and wheel["timers"] == 1 and wheel["levels"][1]["total"] == 1
        st, _, err = _get(_base(follower) + "/api/v1/timewheel/distribution.png?width=5")
        assert st == 400 and json.loads(err)["error"]["field"] == "width"  # validated before asking

        victim = next(n for n in c.nodes.values() if n is not leader and n is not follower)
        victim.kill()
        st, body = _json(_base(leader) + "/api/v1/cluster/stats")
        assert st == 200
        dead = [x for x in body["nodes"] if x["node_id"] == victim.node_id]
        assert dead and "error" in dead[0]
        st, err = _json(_base(leader) + f"/api/v1/stats?node_id={victim.node_id}")
        assert st == 503 and err["error"]["field"] == "node_id"
    finally:
        c.kill_all()


def test_members_fetch_each_others_stats_at_peer_http_addr_while_clients_are_sent_to_http_addr(
    tmp_path: Path,
) -> None:
    """As in the compose cluster: each peer's ``http_addr`` is what clients use (there, the port
    published on the host, which a container cannot reach) and ``peer_http_addr`` where the members
    reach it. Here ``http_addr`` is a port nobody listens on: cluster stats still come from every
    node, and a follower's 307 still names the leader's ``http_addr``."""
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    unused = dict(zip(c.nodes, free_ports(3), strict=True))
    for n in c.nodes.values():
        peers = [{**p, "peer_http_addr": p["http_addr"], "http_addr": f"127.0.0.1:{unused[p['id']]}"}
                 for p in n.settings["cluster"]["peers"]]
        n.settings["cluster"]["peers"] = peers
        n.configure({})
    try:
        leader, follower, body = _full_cluster_stats(c, "every node in cluster stats, reached at peer_http_addr")
        assert sorted(x["node_id"] for x in body["nodes"]) == ["n1", "n2", "n3"]
        r = urllib3.request("POST", _base(follower) + "/api/v1/tasks", json={"type": "delayed", "interval_ms": 1000,
                            "callback_url": "http://127.0.0.1:9/cb"}, redirect=False, retries=False, timeout=10)
        assert r.status == 307 and r.headers["X-Molens-Leader"] == f"http://127.0.0.1:{unused[leader.node_id]}"
    finally:
        c.kill_all()


def test_schedule_preview_describes_the_schedule_in_english_and_chinese(served: Served) -> None:
    s = served
    st, _, body = s.call("GET", "/api/v1/schedule/preview?cron_expr=30+9+*+*+1-5&timezone=Asia/Shanghai")
    assert st == 200, body
    assert body["description"] == {"en": "At 09:30, Monday through Friday", "zh": "在 09:30, 周一 到 周五"}
    st, _, body = s.call("GET", "/api/v1/schedule/preview?interval_ms=90000")
    assert st == 200 and body["description"] == {"en": "Every 90 seconds", "zh": "每 90 秒"}, body
    st, _, body = s.call("GET", "/api/v1/schedule/preview?type=delayed&interval_ms=5000")
    assert st == 200 and body["description"] is None, body
