"""RaftPeer's typed requests, on three peers in one process: in-memory transports (the twin in
``tests/memory_transport.py``) and unsynced lmdb logs in a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from molens.actors.peer_errors import MembershipRefused
from molens.actors.peer_handle import RaftPeerHandle, lmdb_log
from molens.actors.peer_messages import LeaderChange
from molens.config import PeerConfig, RaftSettings
from molens.kv import KVStateMachine, encode_get, encode_put
from molens.raft.core import NotLeaderError
from tests.memory_transport import MemoryNet
from tests.polling import wait_until

IDS = ("n1", "n2", "n3")
ADDR = {"n1": "127.0.0.1:1", "n2": "127.0.0.1:2", "n3": "127.0.0.1:3", "n4": "127.0.0.1:4"}
"""Raft addresses for the address book only: nothing binds or dials them in memory."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, RaftPeerHandle]]:
    net = MemoryNet()
    peers = tuple(PeerConfig(id=i, raft_addr=ADDR[i], rpc_addr="", http_addr="") for i in IDS)
    handles: dict[str, RaftPeerHandle] = {}
    fsms: list[KVStateMachine] = []
    try:
        for i in IDS:
            d = tmp_path / i
            d.mkdir()
            cfg = RaftSettings(bind_addr=ADDR[i], tick_ms=10)
            fsm = KVStateMachine(d, durable=False)
            fsms.append(fsm)
            handles[i] = RaftPeerHandle.start(
                i, cfg, d, fsm, peers, IDS, log=lmdb_log(cfg, d, IDS, durable=False), transport=net.transport(i),
            )
        wait_until(lambda: _leader(handles) is not None, "a leader", timeout=20.0)
        yield handles
    finally:
        for h in handles.values():
            h.stop()
        for f in fsms:
            f.close()


def _leader(handles: dict[str, RaftPeerHandle]) -> str | None:
    leaders = {h.standing.leader for h in handles.values()}
    one = leaders.pop() if len(leaders) == 1 else None
    return one if one is not None and handles[one].standing.leader == one else None


def test_status_stats_and_known_peers_are_answered_by_every_peer(cluster: dict[str, RaftPeerHandle]) -> None:
    for nid, h in cluster.items():
        st = h.status()
        assert st["node_id"] == nid and sorted(st["voters"]) == list(IDS)
        assert "saved_commit" in h.stats()
        assert sorted(h.known_peers()) == list(IDS)


def test_a_transfer_hands_leadership_to_the_named_voter_and_the_old_leader_hears_it(
    cluster: dict[str, RaftPeerHandle],
) -> None:
    lead = _leader(cluster)
    assert lead is not None
    to = next(i for i in IDS if i != lead)
    changes: list[LeaderChange] = []
    now = cluster[lead].subscribe(changes.append)
    assert now.is_leader and now.node_id == lead
    wait_until(lambda: cluster[lead].status()["peers"] and all(
        p.get("match", 0) >= cluster[lead].status()["commit_index"] for p in cluster[lead].status()["peers"]
    ), "the followers to catch up", timeout=20.0)
    stepped_down = cluster[lead].wait_until_not_leader()
    assert cluster[lead].transfer_leader(to) == {"to": to}
    assert stepped_down.result(20) is True
    wait_until(lambda: _leader(cluster) == to, f"{to} to lead", timeout=20.0)
    wait_until(lambda: any(c.leader_id == to for c in changes), "the old leader's subscriber to hear of the new one", timeout=20.0)
    seqs = [now.seq, *(c.seq for c in list(changes))]  # counted: a stale answer is told from a newer change
    assert now.seq >= 1 and seqs == sorted(set(seqs)), seqs
    assert cluster[to].propose(encode_put("k", "v")).result(20) is True
    assert cluster[to].propose(encode_get("k")).result(20) == b"v"


def test_operations_only_a_leader_carries_out_are_refused_by_a_follower(cluster: dict[str, RaftPeerHandle]) -> None:
    lead = _leader(cluster)
    follower = next(i for i in IDS if i != lead)
    for op in (
        lambda: cluster[follower].transfer_leader(None),
        lambda: cluster[follower].remove_node(lead or ""),
        lambda: cluster[follower].add_node(PeerConfig(id="n4", raft_addr=ADDR["n4"], rpc_addr="", http_addr="")),
    ):
        with pytest.raises(NotLeaderError) as exc:
            op()
        assert exc.value.leader_id == lead


def test_the_leader_refuses_to_add_itself_and_reads_are_linearizable(cluster: dict[str, RaftPeerHandle]) -> None:
    lead = _leader(cluster)
    assert lead is not None
    with pytest.raises(MembershipRefused):
        cluster[lead].add_node(PeerConfig(id=lead, raft_addr=ADDR[lead], rpc_addr="", http_addr=""))
    assert cluster[lead].propose(encode_put("r", "1")).result(20) is True
    assert cluster[lead].read_index(10.0) >= cluster[lead].status()["commit_index"] - 1
    assert cluster[lead].snapshot_now().result(30)["index"] > 0
