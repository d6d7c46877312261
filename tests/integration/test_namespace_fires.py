"""A namespace's ``fires_per_s`` quota on a real 3-node cluster (docs/api.md#namespaces): the
namespace's due fires go at its rate, another namespace's due at the same time are not held, and
the quota holds on the leader that follows a kill -9. What the receiver saw is the evidence: fires
are counted over windows of seconds with a generous band; no single fire is timed, and nothing
waits by sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import send, send_json, wait_serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RATE = 5
WINDOW_MS = 4_000
LOW, HIGH = 12, 30
"""Fires of the capped namespace in any window of WINDOW_MS: 5/s makes 20 (21 with the first);
unlimited, the 100 due at once would all go within a few hundred ms."""


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _arrivals(rec: RecordingReceiver, prefix: str) -> list[int]:
    """Receive times of the first attempt of each task whose path starts with ``prefix``."""
    first: dict[str, int] = {}
    for r in rec.requests:
        if r.path.startswith(prefix):
            first[r.path] = min(first.get(r.path, r.at_ms), r.at_ms)
    return sorted(first.values())


def _fires_counted(c: Cluster, namespace: str) -> float:
    """``molens_namespace_fires_total`` of ``namespace`` summed over the nodes (each counts its own)."""
    total = 0.0
    for n in c.nodes.values():
        r = send("GET", f"{_base(n)}/metrics")
        assert r.status == 200
        total += sum(smp.value for fam in text_string_to_metric_families(r.data.decode()) for smp in fam.samples
                     if smp.name == "molens_namespace_fires_total" and smp.labels == {"namespace": namespace})
    return total


def _in_window(times: list[int], start: int) -> int:
    return sum(1 for t in times if start <= t < start + WINDOW_MS)


def test_fires_per_s_holds_a_namespace_at_its_rate_across_a_leader_kill_and_not_another(
    make_cluster: Callable[..., Cluster], receiver: RecordingReceiver
) -> None:
    cluster = make_cluster(3, state_machine="tasks")
    base = _base(cluster.leader(timeout=30))
    wait_serving(cluster.leader(timeout=30), 30)
    for body in ({"name": "capped", "quotas": {"fires_per_s": RATE}}, {"name": "free"}):
        st, out = send_json("POST", f"{base}/api/v1/namespaces", body)
        assert st == 201, out
    due = int(time.time() * 1000) + 2_000
    tasks = [{"type": "delayed", "run_at": due, "callback_url": receiver.url(f"/ok/capped-{i}"), "namespace": "capped"}
             for i in range(100)]
    tasks += [{"type": "delayed", "run_at": due, "callback_url": receiver.url(f"/ok/free-{i}"), "namespace": "free"}
              for i in range(20)]
    st, out = send_json("POST", f"{base}/api/v1/tasks/batch", {"tasks": tasks})
    assert st == 201, out

    free = wait_for(lambda: _arrivals(receiver, "/ok/free-") if len(_arrivals(receiver, "/ok/free-")) == 20 else None,
                    30, "every fire of the namespace without a quota")
    capped = wait_for(lambda: _arrivals(receiver, "/ok/capped-") if len(_arrivals(receiver, "/ok/capped-")) >= 30
                      else None, 60, "30 fires of the capped namespace")
    assert free[-1] < capped[29], "the free namespace's fires waited behind the capped one's"
    n = _in_window(capped, capped[0])
    print(f"capped namespace: {n} fires in the first {WINDOW_MS} ms")
    assert LOW <= n <= HIGH, f"{n} fires of the capped namespace in {WINDOW_MS} ms at {RATE}/s"

    wait_for(lambda: _fires_counted(cluster, "free") == 20 or None, 30, "the 20 fires of free in /metrics")
    wait_for(lambda: _fires_counted(cluster, "capped") >= 30 or None, 30, "the fires of capped in /metrics")

    old = cluster.leader()
    old.kill()
    new = cluster.leader(timeout=30, exclude=(old.node_id,))
    wait_serving(new, 30)
    st, out = send_json("GET", f"{_base(new)}/api/v1/namespaces/capped")
    assert st == 200 and out["quotas"]["fires_per_s"] == RATE
    killed_at = int(time.time() * 1000)

    def after_kill() -> list[int] | None:
        later = [t for t in _arrivals(receiver, "/ok/capped-") if t > killed_at]
        return later if later and later[-1] - later[0] >= WINDOW_MS else None

    later = wait_for(after_kill, 60, f"{WINDOW_MS} ms of the capped namespace's fires from the new leader")
    n = _in_window(later, later[0])
    print(f"capped namespace: {n} fires in {WINDOW_MS} ms from the new leader")
    assert LOW <= n <= HIGH, f"{n} fires of the capped namespace in {WINDOW_MS} ms after the leader's kill"

    st, out = send_json("PATCH", f"{_base(new)}/api/v1/namespaces/capped", {"quotas": {}})
    assert st == 200, out
    wait_for(lambda: len(_arrivals(receiver, "/ok/capped-")) == 100 or None, 30,
             "the rest of the capped namespace's fires once its quota is lifted")
