"""``GET /api/v1/stats/series`` on a real 3-node cluster: fires, failures and retries made by the
members' fire pools appear in the hour and day series, every member answers the same cluster-wide
sum of the members' own series, and a member that does not answer is named, not counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from molens.client import MolensClient

from .api_server import check_schema
from .conftest import Cluster, NodeProc, free_ports, wait_for

_http = urllib3.PoolManager(retries=False, timeout=10)


def _get(n: NodeProc, path: str) -> tuple[int, Any]:
    r = _http.request("GET", n.http_url + path, redirect=False)
    return r.status, json.loads(r.data)


def _post(n: NodeProc, path: str, body: Any) -> tuple[int, Any]:
    r = _http.request("POST", n.http_url + path, body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"}, redirect=False)
    return r.status, json.loads(r.data)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("series"), 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        c.leader(timeout=30)
        for n in c.nodes.values():
            wait_for(lambda n=n: _http.request("GET", n.http_url + "/readyz").status == 200, 30, f"{n.node_id} ready")
        yield c
    finally:
        c.kill_all()


def _totals(body: dict[str, Any]) -> tuple[int, int, int, int]:
    return sum(body["fires"]), sum(body["failures"]), sum(body["retries"]), sum(body["lateness_n"])


def test_fires_failures_and_retries_appear_in_the_cluster_series(cluster: Cluster) -> None:
    leader = cluster.leader()
    cb = leader.http_url + "/api/v1/test/callback"
    dead = f"http://127.0.0.1:{free_ports(1)[0]}/nobody-listens"
    ok_n = 6
    for i in range(ok_n):
        st, body = _post(leader, "/api/v1/tasks", {"type": "delayed", "interval_ms": 100 + 20 * i, "callback_url": cb})
        assert st == 201, body
    retry = {"max_retries": 2, "backoff": "fixed", "initial_ms": 100, "jitter": "none"}
    st, body = _post(leader, "/api/v1/tasks", {"type": "delayed", "interval_ms": 100, "callback_url": dead, "retry": retry})
    assert st == 201, body
    failing = body["id"]
    wait_for(lambda: _get(leader, f"/api/v1/tasks/{failing}")[1].get("status") == "failed", 30, "the failing task to fail")

    follower = cluster.followers()[0]

    def counted() -> dict[str, Any] | None:
        st, body = _get(follower, "/api/v1/stats/series")
        # 6 successes + 3 attempts of the failing task (the first and 2 retries)
        return body if st == 200 and not body["missing"] and _totals(body)[:3] == (ok_n + 3, 3, 2) else None

    hour = wait_for(counted, 30, "the fires in the follower's cluster-wide hour series")
    check_schema(hour, "FireSeries")
    assert hour["range"] == "hour" and hour["step_ms"] == 10_000 and len(hour["t_ms"]) == 360
    assert sorted(hour["nodes"]) == ["n1", "n2", "n3"]
    # every attempt had a due time: as many lateness samples as fires, none late by more than the run
    assert hour["lateness_n"] and _totals(hour)[3] == ok_n + 3
    assert max(hour["lateness_max_ms"]) < 30_000

    st, day = _get(leader, "/api/v1/stats/series?range=day")
    assert st == 200 and day["step_ms"] == 300_000 and len(day["t_ms"]) == 288
    assert _totals(day)[:3] == (ok_n + 3, 3, 2)
    check_schema(day, "FireSeries")

    # the cluster's series is the sum of what each member's fire pool made (local=1)
    locals_ = [_get(n, "/api/v1/stats/series?local=1")[1] for n in cluster.nodes.values()]
    assert sorted(x["node_id"] for x in locals_) == ["n1", "n2", "n3"]
    assert tuple(map(sum, zip(*(_totals(x) for x in locals_), strict=True))) == _totals(hour)
    assert all("nodes" not in x for x in locals_)

    # the same through the Python client
    with MolensClient([follower.http_url]) as c:
        assert _totals(c.stats_series("day"))[:3] == (ok_n + 3, 3, 2)
        assert c.stats_series(local=True)["node_id"] == follower.node_id

    st, err = _get(leader, "/api/v1/stats/series?range=week")
    assert st == 400 and err["error"]["field"] == "range"
    st, err = _get(leader, "/api/v1/stats/series?local=yes")
    assert st == 400 and err["error"]["field"] == "local"


def test_a_member_that_does_not_answer_is_named_and_not_counted(cluster: Cluster) -> None:
    leader = cluster.leader()
    victim = next(n for n in cluster.nodes.values() if n is not leader)
    victim.kill()
    try:
        st, body = _get(leader, "/api/v1/stats/series")
        assert st == 200
        assert [m["node_id"] for m in body["missing"]] == [victim.node_id] and body["missing"][0]["error"]
        assert victim.node_id not in body["nodes"] and leader.node_id in body["nodes"]
    finally:
        victim.start()
        victim.wait_ready()
