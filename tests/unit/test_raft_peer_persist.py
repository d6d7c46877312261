"""What the RaftPeer makes durable in a Ready cycle (molens/actors/raft_peer.py ``_persist``): a
Ready that changed only the commit index is not saved on its own; a restart then starts from the
stored commit index and the state machine skips what it applied already."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from molens.actors.peer_handle import RaftPeerHandle, lmdb_log, zmq_transport
from molens.config import PeerConfig, RaftSettings
from molens.kv import KVStateMachine, encode_get, encode_put
from tests.polling import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _single_node(tmp_path: Path, fsm: Any) -> RaftPeerHandle:
    addr = f"127.0.0.1:{_free_port()}"
    cfg = RaftSettings(bind_addr=addr, tick_ms=10)
    me = PeerConfig(id="n1", raft_addr=addr, rpc_addr="127.0.0.1:1", http_addr="127.0.0.1:2")
    peer = RaftPeerHandle.start(
        "n1", cfg, tmp_path, fsm, (me,), ("n1",),
        log=lmdb_log(cfg, tmp_path, ("n1",), durable=False), transport=zmq_transport("n1", cfg),
    )
    wait_until(lambda: peer.standing.leader == "n1", "n1 to lead")
    return peer


def test_a_change_of_the_commit_index_alone_is_not_saved_and_a_restart_applies_nothing_twice(tmp_path: Path) -> None:
    fsm = KVStateMachine(tmp_path, durable=False)
    peer = _single_node(tmp_path, fsm)
    try:
        for i in range(3):
            assert peer.propose(encode_put("k", f"v{i}")).result(10) is True
        # one node: each entry is saved, then commits in a Ready of its own, which is not saved
        assert peer.stats()["commits_unsaved"] >= 3
        stored = peer.stats()["saved_commit"]
        assert stored < fsm.applied_index()
    finally:
        peer.stop()
        fsm.close()
    fsm = KVStateMachine(tmp_path, durable=False)
    applied = fsm.applied_index()
    peer = _single_node(tmp_path, fsm)  # starts below the state machine's index: it skips those entries
    try:
        assert peer.propose(encode_get("k")).result(10) == b"v2"
        assert fsm.applied_index() > applied
        st = peer.stats()["fsm"]
        assert st["applied_index"] == fsm.applied_index() and st["skipped_total"] >= 1  # handed again, skipped
    finally:
        peer.stop()
        fsm.close()
