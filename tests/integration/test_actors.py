"""One pykka actor per concern on a real node: the node-level ones everywhere, the leader-only ones on
the leader alone, and on the new leader after a leader is killed (docs/architecture.md#actors)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import Cluster, NodeProc, wait_for

pytestmark = pytest.mark.integration

NODE_ACTORS = {"RaftPeer": 1, "FireWorkerPool": 1, "Stats": 1, "ClockProbe": 1}
LEADER_ACTORS = {"TimeWheel": 1, "Dispatcher": 1, "Monitor": 1, "Cleaner": 1, "Notifier": 1}


def _actors(p: NodeProc) -> dict[str, int]:
    reply = p.call("actors")
    assert reply["ok"], reply
    actors: dict[str, int] = reply["actors"]
    return actors


def _settled(procs: list[NodeProc], leader: str) -> dict[str, dict[str, int]] | None:
    """Every node's actors once they are exactly what its role says (actors of a term just ended
    may take a moment to stop)."""
    seen = {p.node_id: _actors(p) for p in procs}
    want = {p.node_id: {**NODE_ACTORS, **(LEADER_ACTORS if p.node_id == leader else {})} for p in procs}
    return seen if seen == want else None


def _wait_settled(procs: list[NodeProc], leader: str) -> dict[str, Any]:
    def last() -> str:
        return repr({p.node_id: _actors(p) for p in procs})

    try:
        return wait_for(lambda: _settled(procs, leader), 20, "actors per role")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {last()}") from None


def test_a_single_node_runs_one_actor_per_concern(make_cluster: Any) -> None:
    c: Cluster = make_cluster(1, state_machine="tasks")
    leader = c.leader()
    _wait_settled(c.running(), leader.node_id)


def test_leader_only_actors_run_on_the_leader_and_move_to_the_new_leader_after_kill_9(make_cluster: Any) -> None:
    c: Cluster = make_cluster(3, state_machine="tasks")
    leader = c.leader()
    _wait_settled(c.running(), leader.node_id)
    leader.kill()
    new = c.leader(exclude=(leader.node_id,))
    assert new.node_id != leader.node_id
    _wait_settled(c.running(), new.node_id)
