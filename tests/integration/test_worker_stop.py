"""A worker stopped gracefully while fires wait in its queue: the fires it had not started go back to
the leader as not sent (docs/architecture.md#not-sent), which plans them again on another worker, so
every at_most_once task is delivered once and none ends ``unknown``. Before, the stopping worker
dropped them: the leader settled each at its deadline as an attempt with no result, and an
at_most_once task failed without its callback ever having left a node.

Three real nodes, one fire at a time per worker (``worker.concurrency: 1``) and a receiver that holds
every request until the test lets it go, so each worker has one attempt in flight and the others
queued when a follower is stopped."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from .callback_server import CallbackServer
from .conftest import Cluster, wait_for
from .rest import call, send_json, task_cluster

pytestmark = pytest.mark.integration

TASKS = 12


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with task_cluster(tmp_path, extra={"worker": {"concurrency": 1}}) as c:
        yield c


@pytest.mark.parametrize("who", ["follower", "leader"])
def test_fires_queued_at_a_stopping_worker_are_sent_elsewhere_not_lost(
    cluster: Cluster, callback_server: CallbackServer, who: str,
) -> None:
    leader = cluster.leader()
    run_at = int(time.time() * 1000) + 1_500
    ids = []
    for i in range(TASKS):
        status, t = send_json("POST", leader.http_url + "/api/v1/tasks", {
            "type": "delayed", "run_at": run_at, "callback_url": callback_server.url("/gate"),
            "reliability": "at_most_once", "timeout_ms": 20_000, "payload": {"n": i},
        })
        assert status == 201, t
        ids.append(t["id"])
    # one attempt in flight at each worker, the others queued behind them
    wait_for(lambda: callback_server.in_gate == 3, 20, "an attempt in flight at each of the three workers")
    wait_for(lambda: all(call(leader, "GET", f"/api/v1/tasks/{i}")[1]["status"] == "firing" for i in ids),
             20, "every task to be firing")
    stopped = leader if who == "leader" else cluster.followers()[0]
    assert stopped.proc is not None
    stopped.proc.send_signal(signal.SIGTERM)
    # its HTTP API stops first (a leader's term then waits up to 5 s for its fires' results, and it
    # hands leadership over), then its fire pool, which drops its queue at once and waits for the
    # attempt in flight: let the held requests go only once the pool has begun to stop
    wait_for(lambda: call(stopped, "GET", "/healthz")[0] == 0, 20, f"{stopped.node_id}'s HTTP API to stop")
    reader = cluster.leader(timeout=30, exclude=(stopped.node_id,)) if who == "leader" else leader
    time.sleep(1.0)
    callback_server.gate.set()
    assert stopped.proc.wait(60) == 0

    def settled() -> dict[str, str] | None:
        st = {i: call(reader, "GET", f"/api/v1/tasks/{i}")[1]["status"] for i in ids}
        return st if all(s in ("done", "failed") for s in st.values()) else None

    statuses = wait_for(settled, 60, "every task to end")
    assert Counter(statuses.values()) == {"done": TASKS}, statuses
    sent = Counter(json.loads(r.body)["n"] for r in callback_server.recorded("/gate"))
    assert sent == dict.fromkeys(range(TASKS), 1), "each at_most_once task's callback was sent once"
    log = stopped.log_path.read_text(errors="replace")
    assert "fires not started answered as not sent" in log, "the stopped worker held no queued fire: nothing was tested"
