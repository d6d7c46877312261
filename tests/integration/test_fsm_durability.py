"""A node's task store is log-backed (docs/architecture.md#fsm-durability): its batches are not
fsync'd, the Raft log and the snapshot files are. Real 3-node cluster: a follower killed -9 keeps its
store (the page cache held it) and replays only what it missed; a follower whose store was left open
by an earlier boot (as after a power loss; the marker file says which boot had it open) discards it,
restores its own snapshot and replays the log after it, and ends with the leader's state; a clean
stop marks the store closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from molens.lmdb_snapshot import BOOT_MARKER, CLOSED_MARK, boot_id

from .conftest import Cluster, NodeProc
from .rest import call, wait_serving

pytestmark = pytest.mark.skipif(boot_id() is None, reason="the system has no boot id to read")


def _create(n: NodeProc, count: int, tag: str) -> None:
    tasks = [
        {"type": "delayed", "interval_ms": 3_600_000, "callback_url": "http://127.0.0.1:9/x", "payload": {"t": tag, "i": i}}
        for i in range(count)
    ]
    st, out = call(n, "POST", "/api/v1/tasks/batch", {"tasks": tasks})
    assert st == 201, out


def _converged_digests(c: Cluster) -> dict[str, Any]:
    stats = c.wait_converged(timeout=60)
    digests = {nid: (d["applied_index"], d["digest"]) for nid, d in ((nid, c.nodes[nid].call("digest")) for nid in stats)}
    assert len(set(digests.values())) == 1, f"FSM digests differ: {digests}"
    return stats


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_store_left_open_by_an_earlier_boot_is_rebuilt_from_the_snapshot_and_the_log(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 3, state_machine="tasks")
    try:
        c.start()
        leader = c.leader(timeout=30)
        wait_serving(leader)
        _create(leader, 200, "before-snapshot")
        follower = c.followers()[0]
        _converged_digests(c)
        marker = follower.data_dir / "fsm" / BOOT_MARKER
        assert marker.read_text() == boot_id(), "a running node's store is marked open in this boot"
        snap = follower.call("snapshot", timeout_s=30)
        assert snap["index"] > 0
        _create(leader, 100, "after-snapshot")
        _converged_digests(c)

        # killed -9: the same boot, the page cache held the store: kept, only the missed tail replayed
        follower.kill()
        _create(leader, 50, "while-killed")
        follower.start().wait_ready()
        stats = _converged_digests(c)[follower.node_id]
        assert stats["fsm"]["discarded_after_os_stop"] is False and stats["fsm"]["sync"] == "log"
        assert stats["started_applied_index"] > snap["index"] and stats["fsm_restored_at_start"] == 0

        # killed again, and its marker says another boot had the store open (a power loss): rebuilt
        follower.kill()
        _create(leader, 50, "while-down")
        marker.write_text("00000000-0000-4000-8000-000000000000")
        follower.start().wait_ready()
        stats = _converged_digests(c)[follower.node_id]
        assert stats["fsm"]["discarded_after_os_stop"] is True
        assert stats["fsm_restored_at_start"] == 1, "restored from its own snapshot before replaying"
        assert stats["started_applied_index"] == snap["index"]
        assert marker.read_text() == boot_id()
        st, page = call(leader, "GET", "/api/v1/stats")
        assert st == 200 and page["tasks_total"] == 400

        follower.stop()
        assert marker.read_text() == CLOSED_MARK, "a clean stop syncs the store and marks it closed"
    finally:
        c.kill_all()
