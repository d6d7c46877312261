"""Counting what did not fire on a real 3-node cluster (docs/observability.md#what-did-not-fire): a
periodic task whose occurrence outlasts its period skips the instants that came due meanwhile, and
ends at ``max_runs``; every replica counts those decisions alike (each applies the same entries), in
``/api/v1/stats`` and ``/metrics``. A fire held by a paused flow is counted by the leader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import urllib3

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import call, wait_serving


def _not_fired(n: NodeProc) -> dict[str, int] | None:
    st, stats = call(n, "GET", "/api/v1/stats?local=1")
    return stats["not_fired"] if st == 200 else None


def _metric(n: NodeProc, reason: str) -> float:
    text = urllib3.request("GET", n.http_url + "/metrics", retries=False, timeout=10).data.decode()
    m = re.search(rf'^molens_occurrences_not_fired_total{{reason="{reason}"}} (\S+)$', text, re.M)
    assert m is not None, reason
    return float(m.group(1))


def _create(c: Cluster, body: dict[str, object]) -> dict[str, object]:
    """Create on the leader, asking again (same idempotency key) when an election moved it meanwhile."""
    out: dict[str, object] = {}

    def created() -> bool:
        st, t = call(c.leader(timeout=30), "POST", "/api/v1/tasks", body)
        out.update(t if st in (200, 201) else {})
        return st in (200, 201)

    wait_for(created, 30, "the create")
    return out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_replica_counts_the_skipped_and_dropped_occurrences_and_the_leader_the_held_fires(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        # every second, each occurrence answered after 2.5 s: the instants due meanwhile are skipped;
        # done after 2 occurrences (the third is dropped by max_runs)
        t = _create(c, {"type": "periodic", "interval_ms": 1000, "max_runs": 2, "idempotency_key": "long",
                        "callback_url": receiver.url("/slow/2500/long")})
        wait_for(lambda: call(n, "GET", f"/api/v1/tasks/{t['id']}")[1]["status"] == "done", 60, "the task done")
        want = {"skipped_overlap": 2, "dropped_max_runs": 1}
        for x in c.nodes.values():
            wait_for(lambda x=x: {k: v for k, v in (_not_fired(x) or {}).items() if v} == want, 30,
                     f"{x.node_id} to count what it applied")
            assert _metric(x, "skipped_overlap") == 2 and _metric(x, "dropped_max_runs") == 1
            assert _metric(x, "skipped_catchup_none") == 0  # every reason is exported, zeros included

        wait_for(lambda: call(c.leader(timeout=30), "PUT", "/api/v1/flows/held", {"paused": True})[0] == 200, 30,
                 "the flow paused")
        _create(c, {"type": "delayed", "interval_ms": 10, "flow_key": "held", "idempotency_key": "held",
                    "callback_url": receiver.url("/ok/held")})

        def holder() -> NodeProc | None:  # the leader that held it counts it
            return next((x for x in c.nodes.values() if (_not_fired(x) or {}).get("held_by_flow", 0) >= 1), None)

        held = wait_for(holder, 30, "the held fire counted")
        text = urllib3.request("GET", held.http_url + "/metrics", retries=False, timeout=10).data.decode()
        assert re.search(r"^molens_fires_held_by_flow_total [1-9]", text, re.M)
        assert not receiver.by_tag("held")
    finally:
        c.stop_all()
