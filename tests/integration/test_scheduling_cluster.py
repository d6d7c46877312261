"""A 3-node scheduling cluster over REST: follower routing (307 to the leader, reads served locally),
scheduling carrying on across a graceful leader stop and a restart, and 503 + Retry-After without a
quorum. One cluster for the module; the tests run in order and the last one takes the quorum away.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import send, task_cluster, wait_serving


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


@pytest.fixture(scope="module")
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with task_cluster(tmp_path_factory.mktemp("sched3")) as c:
        yield c


def test_a_write_to_a_follower_answers_307_to_the_leader_and_reads_are_served_locally(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    leader = cluster.leader()
    follower = cluster.followers()[0]
    body = {"type": "delayed", "interval_ms": 200, "callback_url": receiver.url("/ok/routed")}
    r = send("POST", _base(follower) + "/api/v1/tasks", body)
    assert r.status == 307
    assert r.headers["Location"] == _base(leader) + "/api/v1/tasks"
    assert r.headers["X-Molens-Leader"] == _base(leader)
    assert r.headers["X-Molens-Leader-Id"] == leader.node_id
    r = send("POST", r.headers["Location"], body)
    assert r.status == 201
    tid = json.loads(r.data)["id"]
    wait_for(lambda: receiver.by_tag("routed"), 20, "the callback")

    def done_on_follower() -> bool:
        g = send("GET", _base(follower) + f"/api/v1/tasks/{tid}")
        return g.status == 200 and json.loads(g.data)["status"] == "done" and g.headers["X-Molens-Role"] == "follower"

    wait_for(done_on_follower, 20, "the follower's replica to show the task done")


def test_cluster_status_on_the_leader_says_when_each_peer_was_last_heard(cluster: Cluster) -> None:
    leader = cluster.leader()

    def contacts() -> dict[str, int] | None:
        r = send("GET", _base(leader) + "/api/v1/cluster/status")
        nodes = json.loads(r.data)["nodes"]
        got = {n["id"]: n.get("last_contact_ms") for n in nodes if n["id"] != leader.node_id}
        return got if len(got) == 2 and all(isinstance(v, int) for v in got.values()) else None

    seen = wait_for(contacts, 20, "last_contact_ms for both followers")
    # followers answer every heartbeat, so the leader heard from them within a few election timeouts
    assert all(0 <= ms < 10_000 for ms in seen.values()), seen


@pytest.mark.slow
def test_a_periodic_task_keeps_firing_across_a_graceful_leader_stop_and_restart(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    leader = cluster.leader()
    r = send("POST", _base(leader) + "/api/v1/tasks",
             {"type": "periodic", "interval_ms": 1000, "callback_url": receiver.url("/ok/steady")})
    assert r.status == 201
    tid = json.loads(r.data)["id"]
    wait_for(lambda: len(receiver.by_tag("steady")) >= 2, 20, "two occurrences")
    assert leader.stop() == 0
    new = cluster.leader(timeout=20)
    assert new is not leader
    before = len(receiver.by_tag("steady"))
    wait_for(lambda: len(receiver.by_tag("steady")) >= before + 2, 20, "occurrences from the new leader")
    leader.start()
    leader.wait_ready()
    wait_serving(leader, 30)
    cluster.wait_converged()
    fires = [r.headers["X-Fire-ID"] for r in receiver.by_tag("steady")]
    seqs = [int(f.rsplit("-", 1)[1]) for f in fires]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "no occurrence twice, none out of order"
    assert send("DELETE", _base(cluster.leader()) + f"/api/v1/tasks/{tid}").status in (200, 204)


def test_without_a_quorum_writes_answer_503_with_retry_after(cluster: Cluster, receiver: RecordingReceiver) -> None:
    survivor = cluster.followers()[0]
    for n in cluster.running():
        if n is not survivor:
            n.kill()
    wait_for(lambda: (survivor.status() or {}).get("role") != "leader" and (survivor.status() or {}).get("leader_id") is None,
             20, "the survivor to know it has no leader")
    r = send("POST", _base(survivor) + "/api/v1/tasks",
             {"type": "delayed", "interval_ms": 1000, "callback_url": receiver.url("/ok/none")})
    assert r.status == 503, r.data
    assert int(r.headers["Retry-After"]) >= 1
    assert json.loads(r.data)["error"]["code"]

