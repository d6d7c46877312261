"""A real 3-node Raft cluster (processes on 127.0.0.1) with the KV state machine.

Writes go through the admin ``propose`` command (documented in molens/node.py as the test/benchmark
path) with KV commands. One cluster is shared by the module; tests run in file order and each
leaves three nodes running. Durations docs/benchmarks.md quotes (failover, graceful hand-over) are
measured and printed, never asserted.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
import pytest
import zmq

from molens.admin import AdminError
from molens.kv import encode_put

from .conftest import Cluster, NodeProc, wait_for

pytestmark = pytest.mark.integration

REPLY_TIMEOUT_S = 1.0
SLOW_REPLY_S = 30.0
"""A live node that has answered nothing for this long counts as gone (its writes: unknown)."""


@dataclass
class WriteOutcome:
    acked: set[bytes] = field(default_factory=set)
    unknown: set[bytes] = field(default_factory=set)
    retries: int = 0

    def merge(self, other: WriteOutcome) -> None:
        self.acked |= other.acked
        self.unknown |= other.unknown
        self.retries += other.retries


class KvWriter:
    """Concurrent clients writing ``key -> key`` through the leader's admin socket.

    Each client pipelines up to ``window`` proposals on a DEALER. A write refused without effect
    (not_leader, refused) is retried at the current leader; a write whose reply says
    ``leadership_lost`` or that gets no reply in time (its node died) has an UNKNOWN outcome and
    is recorded as such, not retried.
    """

    def __init__(self, cluster: Cluster, keys: list[bytes], clients: int = 8, window: int = 32) -> None:
        self.cluster = cluster
        self.keys = keys
        self.clients = clients
        self.window = window
        self.outcome = WriteOutcome()
        self.acked_count = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self) -> KvWriter:
        shards = [self.keys[i :: self.clients] for i in range(self.clients)]
        for shard in shards:
            t = threading.Thread(target=self._client, args=(shard,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def join(self, timeout: float = 120.0) -> WriteOutcome:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "writer clients did not finish"
        if self.errors:
            raise self.errors[0]
        return self.outcome

    def run(self) -> WriteOutcome:
        return self.start().join()

    def _alive(self, admin_addr: str) -> bool:
        return any(n.admin_addr == admin_addr and n.running for n in list(self.cluster.nodes.values()))

    def _leader_addr(self) -> str:
        return self.cluster.leader(timeout=30).admin_addr

    def _client(self, keys: list[bytes]) -> None:
        try:
            self._client_loop(keys)
        except BaseException as exc:
            self.errors.append(exc)

    def _client_loop(self, keys: list[bytes]) -> None:
        out = WriteOutcome()
        todo = list(reversed(keys))
        ids = itertools.count()
        ctx = zmq.Context.instance()
        while todo:
            addr = self._leader_addr()
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://{addr}")
            inflight: dict[int, bytes] = {}
            last_reply = time.monotonic()
            try:
                while todo or inflight:
                    while todo and len(inflight) < self.window:
                        key = todo.pop()
                        rid = next(ids)
                        inflight[rid] = key
                        req = {
                            "cmd": "propose",
                            "id": rid,
                            "data": base64.b64encode(encode_put(key, key)).decode(),
                        }
                        sock.send_multipart([b"", json.dumps(req).encode()])
                    if not sock.poll(int(REPLY_TIMEOUT_S * 1000)):
                        if self._alive(addr) and time.monotonic() - last_reply < SLOW_REPLY_S:
                            continue  # a slow machine, not a dead node: keep waiting
                        out.unknown |= set(inflight.values())  # the node went away: outcome unknown
                        inflight.clear()
                        break
                    last_reply = time.monotonic()
                    _, body = sock.recv_multipart()
                    reply = json.loads(body)
                    key = inflight.pop(reply["id"])
                    if reply["ok"]:
                        out.acked.add(key)
                        with self._lock:
                            self.acked_count += 1
                    elif reply.get("outcome") == "unknown":
                        out.unknown.add(key)
                    else:  # nothing happened: safe to retry at the (new) leader
                        out.retries += 1
                        todo.append(key)
                        if reply.get("error") == "not_leader":
                            break
            finally:
                sock.close(0)
            # whatever was still in flight when we broke off for a new leader is unknown
            out.unknown |= set(inflight.values())
        with self._lock:
            self.outcome.merge(out)


def keys(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:06d}".encode() for i in range(n)]


def read_kv(node: NodeProc) -> dict[bytes, bytes]:
    """The node's KV state straight from its lmdb (read-only; fine while the node runs)."""
    env = lmdb.open(str(node.data_dir / "fsm"), readonly=True, max_dbs=2, lock=True)
    try:
        db = env.open_db(b"kv", create=False)
        with env.begin(db=db) as txn:
            return {bytes(k): bytes(v) for k, v in txn.cursor()}
    finally:
        env.close()


def assert_converged(cluster: Cluster) -> dict[str, dict[str, Any]]:
    stats = cluster.wait_converged(timeout=60)
    states = {nid: cluster.nodes[nid].call("digest") for nid in stats}
    digests = {nid: (d["applied_index"], d["digest"]) for nid, d in states.items()}
    assert len(set(digests.values())) == 1, f"FSM digests differ: {digests}"
    return stats


def assert_writes(
    cluster: Cluster, outcome: WriteOutcome, node: NodeProc | None = None
) -> dict[bytes, bytes]:
    """Digests are equal everywhere (checked first), so one node's content speaks for all."""
    assert_converged(cluster)
    kv = read_kv(node or cluster.leader())
    missing = [k for k in outcome.acked if kv.get(k) != k]
    assert not missing, f"{len(missing)} acknowledged writes missing, e.g. {missing[:3]}"
    return kv


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # keep_log_tail is small so the snapshot-install test can compact past a stopped follower;
    # snapshots are only taken on request (snapshot_every_entries default is far above our writes)
    c = Cluster(tmp_path_factory.mktemp("raft3"), 3, extra={"raft": {"keep_log_tail": 100}})
    try:
        c.start()
        yield c
    finally:
        c.kill_all()


def _ensure_all_running(cluster: Cluster) -> None:
    for node in cluster.nodes.values():
        if not node.running:
            node.start()
    for node in cluster.nodes.values():
        node.wait_ready()


def test_leader_elected_and_10k_concurrent_writes_replicate_identically(cluster: Cluster) -> None:
    leader = cluster.leader()
    st = leader.status()
    assert st is not None and st["role"] == "leader"
    assert sorted(st["voters"]) == ["n1", "n2", "n3"]
    t0 = time.monotonic()
    outcome = KvWriter(cluster, keys("bulk", 10_000), clients=8, window=32).run()
    took = time.monotonic() - t0
    print(f"\n10000 writes from 8 clients in {took:.2f} s ({10_000 / took:.0f}/s)")
    assert len(outcome.acked) == 10_000 and not outcome.unknown
    kv = assert_writes(cluster, outcome)
    assert len(kv) == 10_000


def test_kill9_leader_during_writes_loses_no_acknowledged_write(cluster: Cluster) -> None:
    old = cluster.leader()
    writer = KvWriter(cluster, keys("failover", 4_000), clients=4, window=16).start()
    wait_for(lambda: writer.acked_count >= 1_000, 60, "1000 writes acknowledged before the kill")
    old_commit = max(st["commit_index"] for st in cluster.statuses().values())
    t_kill = time.monotonic()
    old.kill()
    # a new leader is elected and commits (its no-op, and client writes) past the old commit
    new = cluster.leader(timeout=15, exclude=(old.node_id,))
    wait_for(
        lambda: (s := new.status()) is not None and s["commit_index"] > old_commit and s["role"] == "leader",
        15,
        "the new leader to commit",
        interval=0.005,
    )
    print(
        f"\nkill -9 leader {old.node_id} -> {new.node_id} committing after {(time.monotonic() - t_kill) * 1000:.0f} ms"
    )
    outcome = writer.join()
    print(f"acked={len(outcome.acked)} unknown={len(outcome.unknown)} retried={outcome.retries}")
    old.start().wait_ready()
    kv = assert_writes(cluster, outcome)
    present = [k for k in outcome.unknown if k in kv]
    assert all(kv[k] == k for k in present)
    print(
        f"unknown-outcome writes present everywhere: {len(present)}, absent everywhere: {len(outcome.unknown) - len(present)}"
    )


def test_restarted_follower_replays_only_missing_entries(cluster: Cluster) -> None:
    follower = cluster.followers()[0]
    follower.kill()
    outcome = KvWriter(cluster, keys("catchup", 5_000), clients=4, window=32).run()
    assert len(outcome.acked) == 5_000
    follower.start().wait_ready()
    assert_writes(cluster, outcome, node=follower)
    s = follower.call("stats")
    started = s["started_applied_index"]
    assert started > 10_000, "the follower restarted from its own data, not from zero"
    assert s["fsm"]["applied_total"] == s["fsm"]["applied_index"] - started  # only the missing tail
    assert s["fsm"]["applied_total"] >= 5_000
    assert s["snapshots_installed"] == 0 and s["fsm_restored_at_start"] == 0


def test_follower_behind_compacted_log_catches_up_by_snapshot(cluster: Cluster) -> None:
    follower = cluster.followers()[0]
    follower_last = follower.call("status")["last_index"]
    follower.kill()
    outcome = KvWriter(cluster, keys("snap", 1_000), clients=4, window=32).run()
    leader = cluster.leader()
    snap = leader.call("snapshot")
    st = leader.call("status")
    assert st["first_index"] > follower_last + 1, "the leader's log is compacted past the follower"
    assert snap["index"] == st["snapshot_index"]
    follower.start().wait_ready()
    assert_writes(cluster, outcome, node=follower)
    s = follower.call("stats")
    assert s["snapshots_installed"] == 1
    assert s["fsm"]["applied_total"] < s["fsm"]["applied_index"] - s["started_applied_index"]


@pytest.mark.slow
def test_follower_killed_while_receiving_a_snapshot_drops_the_partial_file_and_gets_it_whole(
    cluster: Cluster,
) -> None:
    """A follower gathers an arriving snapshot in ``snapshots/receiving.part`` chunk by chunk. Killed
    -9 halfway, it removes that file at start, the leader sends the snapshot again from its first
    chunk, and the follower installs it whole (docs/architecture.md#snapshots)."""
    import os

    follower = cluster.followers()[0]
    follower.kill()
    leader = cluster.leader()
    # ~48 MiB of incompressible values: 48 chunks of 1 MiB, time to catch the transfer halfway
    for i in range(48):
        data = encode_put(b"big-%02d" % i, os.urandom(1 << 20))
        r = leader.call("propose", data=base64.b64encode(data).decode(), timeout_s=30)
        assert r["ok"], r
    outcome = KvWriter(cluster, keys("snap-restart", 200), clients=2, window=16).run()
    leader.call("snapshot", timeout_s=60)
    part = follower.data_dir / "snapshots" / "receiving.part"
    follower.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (part.exists() and 4 << 20 <= part.stat().st_size < 40 << 20):
        time.sleep(0.001)
    follower.kill()
    assert part.exists(), "the follower was not caught mid-transfer"
    half = part.stat().st_size
    follower.start().wait_ready()
    assert_writes(cluster, outcome, node=follower)
    s = follower.call("stats")
    assert s["snapshots_installed"] == 1 and not s["snapshot_held"]
    assert s["snapshot_chunks_received"] >= 48  # the whole, from the first chunk
    assert not part.exists() and not list(part.parent.glob("received-*.part"))
    print(f"\nkilled with {half >> 20} MiB of the snapshot gathered; it came again whole after the restart")


@pytest.mark.slow
def test_whole_cluster_restart_recovers_without_reapplying(cluster: Cluster) -> None:
    before = assert_converged(cluster)
    applied = {nid: s["fsm"]["applied_index"] for nid, s in before.items()}
    kv_before = read_kv(cluster.leader())
    cluster.stop_all()
    cluster.start()
    cluster.leader()
    after = assert_converged(cluster)
    for nid, s in after.items():
        # everything applied before is still there (a hand-over during the stop may add a no-op)
        assert applied[nid] <= s["started_applied_index"] <= applied[nid] + 2
        # and only entries after it are applied: the new terms' no-ops, nothing from zero
        assert s["fsm"]["applied_total"] == s["fsm"]["applied_index"] - s["started_applied_index"] <= 3
    assert read_kv(cluster.leader()) == kv_before


def test_graceful_leader_stop_hands_over_quickly(cluster: Cluster) -> None:
    old = cluster.leader()
    probe = base64.b64encode(encode_put(b"handover", b"1")).decode()
    others = [n for n in cluster.running() if n is not old]
    t0 = time.monotonic()
    old.admin().call("stop")

    def new_leader_commits() -> bool:
        for n in others:
            st = n.status()
            if st and st["role"] == "leader":
                return bool(n.admin().request({"cmd": "propose", "data": probe}, timeout_s=2).get("ok"))
        return False

    wait_for(new_leader_commits, 15, "a new leader to commit after the graceful stop", interval=0.005)
    print(
        f"\ngraceful stop of leader {old.node_id}: new leader committed after {(time.monotonic() - t0) * 1000:.0f} ms"
    )
    assert old.proc is not None and old.proc.wait(45) == 0
    old.start().wait_ready()
    assert_converged(cluster)


@pytest.mark.slow
def test_fourth_node_joins_as_voter_then_is_removed_while_writes_continue(cluster: Cluster) -> None:
    writer = KvWriter(cluster, keys("member", 6_000), clients=2, window=8).start()
    n4 = cluster.add_joiner("n4").start()
    n4.wait_ready()

    def n4_is_voter() -> bool:
        st = cluster.leader().status()
        n4st = n4.status()
        return bool(st and n4st and "n4" in st["voters"] and n4st["role"] == "follower")

    wait_for(n4_is_voter, 60, "n4 to join and be promoted to voter")
    # n4 leads, then is removed: as a leader it hands leadership over before it goes
    # the reply comes once the old leader stepped down; a transfer may abort (n4 still catching
    # up under the writes), so ask again until n4 leads
    def n4_leads() -> bool:
        lead = cluster.leader()
        if lead is n4:
            return True
        try:
            lead.call("transfer_leader", to="n4", timeout_s=10)
        except AdminError:
            return False
        return cluster.leader() is n4

    wait_for(n4_leads, 45, "n4 to take over leadership", interval=0.5)
    reply = n4.call("remove_node", id="n4", timeout_s=30)
    assert reply["via"] in ("n1", "n2", "n3")

    def n4_removed() -> bool:
        # n4 itself may never learn of its removal: ask the others only
        for nid in ("n1", "n2", "n3"):
            st = cluster.nodes[nid].status()
            if st and st["role"] == "leader":
                return "n4" not in st["voters"] + st["learners"]
        return False

    wait_for(n4_removed, 30, "n4 to be removed")
    n4.stop()
    del cluster.nodes["n4"]
    outcome = writer.join()
    assert len(outcome.acked) + len(outcome.unknown) == 6_000
    print(
        f"\nmembership changes under writes: acked={len(outcome.acked)} unknown={len(outcome.unknown)} retried={outcome.retries}"
    )
    kv = assert_writes(cluster, outcome)
    assert all(kv[k] == k for k in outcome.unknown if k in kv)
    assert sorted(cluster.leader().call("status")["voters"]) == ["n1", "n2", "n3"]


def test_add_node_refuses_bad_fields_the_leader_itself_and_a_member_at_another_address(cluster: Cluster) -> None:
    """``add-node`` checks what it is given as ``cluster.peers`` entries are checked, and never re-points
    a member: a mistyped id or address, the leader's own id, or a member's id with another Raft
    address change neither the membership nor the address book (each node's ``peers.json``)."""
    leader = cluster.leader()
    lid = leader.node_id
    follower = next(n for n in cluster.nodes.values() if n.node_id != lid and n.running)
    before = leader.call("status")
    book_file = leader.data_dir / "peers.json"  # written when the book changes
    book = book_file.read_text() if book_file.exists() else None
    peers = {p["id"]: p for p in leader.settings["cluster"]["peers"]}
    mine, theirs = peers[lid], peers[follower.node_id]
    bad = [
        ({"id": "bad id!", "raft_addr": "127.0.0.1:40999"}, "id: must match"),
        ({"id": "n9\n", "raft_addr": "127.0.0.1:40999"}, "id: must match"),
        ({"id": "n9", "raft_addr": "notanaddr"}, "raft_addr: must be host:port"),
        ({"id": "n9", "raft_addr": "127.0.0.1:40999", "http_addr": "127.0.0.1:0"}, "http_addr: port must be"),
        ({"id": "n9"}, "raft_addr: is required"),
        ({"id": lid, "raft_addr": "127.0.0.1:40998"}, "is this node"),
        ({"id": follower.node_id, "raft_addr": "127.0.0.1:40997"}, "already a member at raft_addr"),
    ]
    for args, message in bad:
        with pytest.raises(AdminError, match=re.escape(message)):
            leader.call("add_node", **args)
    same = leader.call("add_node", id=follower.node_id, raft_addr=theirs["raft_addr"])
    assert same["already_member"] and not same["updated"]
    for p in (mine, theirs):  # the addresses left out are kept, not blanked
        assert {k: same["peers"][p["id"]][k] for k in p} == p
    after = leader.call("status")
    assert (after["voters"], after["learners"]) == (before["voters"], before["learners"])
    assert (book_file.read_text() if book_file.exists() else None) == book


@pytest.mark.slow
def test_member_added_while_a_follower_was_down_is_learned_from_the_snapshot(cluster: Cluster) -> None:
    """A member's address travels in its conf-change entry; once the log is compacted past it, a
    follower that was down learns the address from the snapshot it installs (snapshot context).
    Without it, that follower could become leader and never replicate to the new member."""
    follower = cluster.followers()[0]
    follower.kill()
    n5 = cluster.add_joiner("n5").start()
    n5.wait_ready()
    n5_raft = n5.settings["raft"]["bind_addr"]

    def n5_is_voter() -> dict[str, Any] | None:
        st: dict[str, Any] | None = cluster.leader().status()
        n5st = n5.status()
        return st if st and n5st and "n5" in st["voters"] and n5st["role"] == "follower" else None

    joined_at = wait_for(n5_is_voter, 60, "n5 to join as a voter")["last_index"]
    KvWriter(cluster, keys("learn", 400), clients=2, window=8).run()
    leader = cluster.leader()
    leader.call("snapshot", timeout_s=30)
    assert leader.status()["first_index"] > joined_at, "the log is compacted past n5's conf change"
    follower.start().wait_ready()

    def follower_knows_n5() -> bool:
        st = follower.status()
        peers = {p["id"]: p for p in st["peers"]} if st else {}
        return peers.get("n5", {}).get("raft_addr") == n5_raft

    wait_for(follower_knows_n5, 30, f"{follower.node_id} to learn n5's address from the snapshot")
    assert follower.call("stats")["snapshots_installed"] == 1
    # neither side keeps the snapshot's data on its heap once the transfer is over
    assert not follower.call("stats")["snapshot_held"]
    wait_for(lambda: not leader.call("stats")["snapshot_held"], 10, "the leader to drop the snapshot it sent")
    assert_converged(cluster)
    # leave the module's cluster as it was: n1..n3
    leader = cluster.leader()
    if leader is n5:
        leader.call("transfer_leader")
        leader = cluster.leader(exclude=("n5",))
    leader.call("remove_node", id="n5", timeout_s=30)

    def n5_removed() -> bool:
        st = cluster.leader(exclude=("n5",)).status()
        return bool(st) and "n5" not in st["voters"] + st["learners"]

    wait_for(n5_removed, 30, "n5 to be removed")
    n5.stop()
    del cluster.nodes["n5"]
    assert_converged(cluster)


@pytest.mark.slow
def test_molens_node_start_status_stop_as_a_user_types_them(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    from .conftest import ROOT, free_ports

    raft, rpc, http, admin = free_ports(4)
    data = tmp_path / "data"
    text = (ROOT / "conf" / "node.yaml").read_text()
    cfg = yaml.safe_load(text)
    cfg["node"]["data_dir"] = str(data)
    cfg["raft"]["bind_addr"] = f"127.0.0.1:{raft}"
    cfg["rpc"]["bind_addr"] = f"127.0.0.1:{rpc}"
    cfg["http"]["port"] = http
    cfg["admin"]["bind_addr"] = f"127.0.0.1:{admin}"
    conf = tmp_path / "conf" / "node.yaml"
    conf.parent.mkdir()
    conf.write_text(yaml.safe_dump(cfg))
    exe = str(Path(sys.executable).with_name("molens-node"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, "conf/node.yaml", *args], cwd=tmp_path, capture_output=True, text=True, timeout=90
        )

    try:
        r = run("start")
        assert r.returncode == 0, r.stderr
        assert "started" in r.stdout
        pid = int((data / "node.pid").read_text())
        r = run("start")
        assert r.returncode == 1 and f"already running (pid {pid}" in r.stderr
        st = wait_for(
            lambda: (
                (r := run("status", "--json")).returncode == 0
                and json.loads(r.stdout)["role"] == "leader"
                and json.loads(r.stdout)
            ),
            30,
            "the single node to lead",
        )
        for k in (
            "node_id",
            "role",
            "term",
            "leader_id",
            "last_index",
            "commit_index",
            "applied_index",
            "peers",
        ):
            assert k in st
        r = run("status")
        assert r.returncode == 0 and "role      leader" in r.stdout
        # the container HEALTHCHECK: GET /readyz over loopback
        wait_for(lambda: run("ready").returncode == 0, 30, "molens-node ready to answer 0")
        # operator actions on the admin socket
        r = run("snapshot")
        assert r.returncode == 0 and re.fullmatch(r"n1: snapshot at index \d+\n", r.stdout), r.stdout + r.stderr
        snap_index = int(r.stdout.split()[-1])
        assert json.loads(run("status", "--json").stdout)["snapshot_index"] == snap_index
        r = run("digest")
        assert r.returncode == 0 and re.fullmatch(r"n1: applied \d+ digest [0-9a-f]{64}\n", r.stdout), r.stdout
        r = run("stats")
        assert r.returncode == 0 and json.loads(r.stdout)["snapshots_taken"] == 1
        r = run("actors")
        assert r.returncode == 0 and json.loads(r.stdout)["RaftPeer"] == 1, r.stdout + r.stderr
        r = run("transfer-leader")  # a single voter has nobody to hand over to
        assert r.returncode == 1 and "n1: transfer-leader:" in r.stderr and "no other live voter" in r.stderr
        r = run("restart")
        assert r.returncode == 0 and "stopped" in r.stdout and "started" in r.stdout, r.stderr
        assert int((data / "node.pid").read_text()) != pid
        r = run("stop")
        assert r.returncode == 0 and "stopped" in r.stdout
        assert not (data / "node.pid").exists()
        r = run("status")
        assert r.returncode == 1 and r.stdout == "" and r.stderr == "n1: not running\n", r.stdout + r.stderr
        r = run("ready")
        assert r.returncode == 1 and r.stderr.startswith(f"not ready: http://127.0.0.1:{http}/readyz: "), r.stderr
        for args, what in ((("status", "n2"), "status: a node id ('n2') is for add-node and remove-node only"),
                           (("stats", "--to", "n2"), "stats: --to is for transfer-leader only"),
                           (("add-node",), "add-node: give the node's id"),
                           (("remove-node",), "remove-node: give the node's id"),
                           (("add-node", "n4"), "add-node: --raft-addr is required")):
            r = run(*args)  # an argument the action would ignore is refused, not dropped
            assert r.returncode == 2 and r.stderr.strip().endswith(f"error: {what}"), r.stderr
        for action in ("digest", "snapshot", "stats"):  # said at once, not after the command's own wait
            r = run(action)
            assert r.returncode == 1 and r.stderr.strip() == f"error: n1: {action}: not running", r.stderr
        assert (data / "node.log").stat().st_size > 0
        (tmp_path / "bad.yaml").write_text("raft:\n  election_ticks: 1\n")
        r = subprocess.run(
            [exe, "bad.yaml", "start"], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2
        assert r.stderr.strip() == "config error: raft.election_ticks: must be an integer >= 2"
        (tmp_path / "broken.yaml").write_text("raft: [1,2\n")
        r = subprocess.run(
            [exe, "broken.yaml", "start"], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr  # one line, as every config error
        assert r.stderr.startswith("config error: broken.yaml: invalid YAML: line 2, column 1: "), r.stderr
    finally:
        run("stop")


def test_in_process_peer_api_futures_not_leader_and_leadership_events(tmp_path: Path) -> None:
    """The RaftPeerHandle API the scheduler will use, on three in-process nodes."""
    from concurrent.futures import Future

    from molens.actors.peer_messages import LeaderChange
    from molens.config import load_dict
    from molens.kv import KVStateMachine, encode_get
    from molens.node import Node
    from molens.raft.core import NotLeaderError

    from .conftest import free_ports

    ids = ["a", "b", "c"]
    ports = {nid: free_ports(4) for nid in ids}
    peers = [
        {
            "id": nid,
            "raft_addr": f"127.0.0.1:{p[0]}",
            "rpc_addr": f"127.0.0.1:{p[1]}",
            "http_addr": f"127.0.0.1:{p[2]}",
            "admin_addr": f"127.0.0.1:{p[3]}",
        }
        for nid, p in ports.items()
    ]
    nodes = {}
    for nid, p in ports.items():
        cfg = load_dict(
            {
                "node": {"id": nid, "data_dir": str(tmp_path / nid), "cpus": "all"},  # in pytest's process
                "cluster": {"peers": peers},
                "raft": {"bind_addr": f"127.0.0.1:{p[0]}", "snapshot_every_entries": 50, "keep_log_tail": 10},
                "rpc": {"bind_addr": f"127.0.0.1:{p[1]}"},
                "http": {"port": p[2]},
                "admin": {"bind_addr": f"127.0.0.1:{p[3]}"},
            },
            env={},
        )
        nodes[nid] = Node(cfg, fsm_factory=KVStateMachine)  # the KV FSM, whatever the default is
    events: list[LeaderChange] = []
    try:
        for n in nodes.values():
            n.start()
        for n in nodes.values():
            assert n.peer is not None
            events.append(n.peer.subscribe(events.append))  # the state now, then every change

        def leader() -> str | None:
            for nid, n in nodes.items():
                assert n.peer is not None
                if n.peer.status()["role"] == "leader":
                    return nid
            return None

        lid = wait_for(leader, 15, "a leader")
        wait_for(
            lambda: any(e.is_leader and e.node_id == lid for e in events) or None, 15, "a leadership event"
        )
        lead = nodes[lid].peer
        assert lead is not None
        futs = lead.propose_many([encode_put(b"k", b"v"), encode_get(b"k")])
        assert [f.result(10) for f in futs] == [True, b"v"]
        # automatic snapshots every 50 applied entries, log compacted behind them (tail of 10)
        results = [
            f.result(10) for f in lead.propose_many([encode_put(b"n%d" % i, b"1") for i in range(200)])
        ]
        assert results == [True] * 200
        def compacted() -> dict[str, Any] | None:  # snapshots are taken on a background thread
            st: dict[str, Any] = lead.status()
            return st if st["snapshot_index"] >= 150 else None

        st = wait_for(compacted, 15, "a snapshot past 150")
        assert st["first_index"] == st["snapshot_index"] - 10 + 1
        assert lead.stats()["snapshots_taken"] >= 1  # checked once per Raft cycle
        other = next(n for nid, n in nodes.items() if nid != lid)
        assert other.peer is not None
        wait_for(
            lambda: other.peer is not None and other.peer.status()["leader_id"] == lid,
            15,
            "follower knows leader",
        )
        fut: Future[object] = other.peer.propose(encode_put(b"x", b"y"))
        with pytest.raises(NotLeaderError) as exc:
            fut.result(10)
        assert exc.value.leader_id == lid
        # leadership moves on a graceful stop of the leader; subscribers of the others hear it
        nodes[lid].stop()
        new = wait_for(
            lambda: next((e for e in events if e.is_leader and e.node_id != lid), None),
            15,
            "new leader event",
        )
        assert new.term > 0
    finally:
        for n in nodes.values():
            n.stop()


def _solo_config(tmp_path: Path) -> tuple[Any, str]:
    """A one-node cluster's config (snapshots only on request, log tail 5) and its admin address."""
    from molens.config import load_dict

    from .conftest import free_ports

    raft, rpc, http, admin = free_ports(4)
    addrs = {
        "raft_addr": f"127.0.0.1:{raft}",
        "rpc_addr": f"127.0.0.1:{rpc}",
        "http_addr": f"127.0.0.1:{http}",
        "admin_addr": f"127.0.0.1:{admin}",
    }
    cfg = load_dict(
        {
            "node": {"id": "solo", "data_dir": str(tmp_path / "solo"), "cpus": "all"},  # in pytest's process
            "cluster": {"peers": [{"id": "solo", **addrs}]},
            "raft": {"bind_addr": addrs["raft_addr"], "snapshot_every_entries": 1_000_000, "keep_log_tail": 5},
            "rpc": {"bind_addr": addrs["rpc_addr"]},
            "http": {"port": http},
            "admin": {"bind_addr": addrs["admin_addr"]},
        },
        env={},
    )
    return cfg, addrs["admin_addr"]


def _put_all(peer: Any, prefix: bytes, n: int) -> None:
    """``n`` KV puts through the peer, every one committed and applied."""
    assert [f.result(10) for f in peer.propose_many([encode_put(prefix + b"%d" % i, b"1") for i in range(n)])] == [True] * n


def _start_solo(node: Any) -> Any:
    """Start a one-node cluster's node; its peer once it leads."""
    node.start()
    peer = node.peer
    assert peer is not None
    wait_for(lambda: peer.status()["role"] == "leader", 15, "the single node to lead")
    return peer


def test_snapshot_runs_beside_the_raft_actor_which_keeps_committing(tmp_path: Path) -> None:
    """While the state machine is being copied (held open here), the peer keeps answering,
    committing and applying; the snapshot is recorded and the log compacted once the copy ends.
    (On the actor thread, a 1M-task snapshot took 4.6 s of silence: the leader lost its term.)"""
    from molens.kv import KVStateMachine
    from molens.node import Node

    copying, release = threading.Event(), threading.Event()

    class GatedFSM(KVStateMachine):
        def snapshot(self, path: Any) -> int:
            copying.set()
            assert release.wait(30), "test never released the snapshot"
            return super().snapshot(path)

    cfg, admin = _solo_config(tmp_path)
    node = Node(cfg, fsm_factory=GatedFSM)
    try:
        peer = _start_solo(node)
        _put_all(peer, b"a", 50)
        snap = peer.snapshot_now()
        assert copying.wait(10)
        # the copy is held open: writes still commit and apply, status answers
        _put_all(peer, b"b", 50)
        st = peer.status()
        assert st["snapshot_index"] == 0 and peer.stats()["snapshot_running"] is True
        assert not snap.done()
        release.set()
        index = snap.result(30)["index"]
        assert index >= 51  # what was applied when the copy began (bootstrap entry + 50 puts), at least
        st = peer.status()
        assert st["snapshot_index"] == index and st["first_index"] == index - 5 + 1
        assert peer.stats()["snapshots_taken"] == 1 and peer.stats()["snapshot_running"] is False
        assert peer.stats()["log_cache_hits"] > 0  # committed entries came back from the tail cache
        # the admin digest is computed off the actor, with the applied index of the same read
        from molens.admin import AdminClient

        with AdminClient(admin) as client:
            d = client.call("digest")
        assert d["applied_index"] == peer.status()["applied_index"]
        assert node.fsm is not None and d["digest"] == node.fsm.digest()  # type: ignore[attr-defined]
    finally:
        release.set()
        node.stop()


def test_failed_snapshot_is_reported_and_retried_later_not_in_a_loop(tmp_path: Path) -> None:
    from molens.admin import AdminClient, AdminError
    from molens.kv import KVStateMachine
    from molens.node import Node

    attempts: list[int] = []

    class DiskFullOnce(KVStateMachine):
        def snapshot(self, path: Any) -> int:
            attempts.append(1)
            if len(attempts) == 1:
                raise OSError(28, "No space left on device")
            return super().snapshot(path)

    cfg, admin = _solo_config(tmp_path)
    node = Node(cfg, fsm_factory=DiskFullOnce)
    try:
        peer = _start_solo(node)
        _put_all(peer, b"k", 20)
        with AdminClient(admin) as client:
            with pytest.raises(AdminError, match="No space left on device"):
                client.call("snapshot", timeout_s=30)
            stats = peer.stats()
            assert stats["snapshot_failures"] == 1 and stats["snapshot_running"] is False
            # more writes and Raft cycles: no automatic retry within the pause
            _put_all(peer, b"m", 20)
            assert len(attempts) == 1
            # an operator's request does not wait for the pause
            index = client.call("snapshot", timeout_s=30)["index"]
        assert index == peer.status()["snapshot_index"] > 0 and len(attempts) == 2
    finally:
        node.stop()


def test_a_snapshot_overtaken_by_a_newer_one_is_dropped_not_counted_as_failed(tmp_path: Path) -> None:
    """A follower's own background snapshot can lose the race with a leader's snapshot install:
    its meta is then refused (the log holds a newer snapshot) and it ends as superseded."""
    from molens.actors.peer_messages import SnapshotDone, SnapshotMetaAt
    from molens.kv import KVStateMachine
    from molens.node import Node

    cfg, _ = _solo_config(tmp_path)
    node = Node(cfg, fsm_factory=KVStateMachine)
    try:
        peer = _start_solo(node)
        _put_all(peer, b"s", 10)
        index = peer.snapshot_now().result(30)["index"]
        assert index > 0
        # a job that copied the state at an older index asks for its meta: refused
        assert peer.ref.ask(SnapshotMetaAt(index - 1)) is None
        peer.ref.ask(SnapshotDone(
            meta=None, sf=None, error=None, seconds=0.1,
        ))
        stats = peer.stats()
        assert stats["snapshot_failures"] == 0 and stats["snapshots_taken"] == 1
        assert peer.status()["snapshot_index"] == index
        # and the next automatic or requested snapshot is not held back
        _put_all(peer, b"t", 10)
        assert peer.snapshot_now().result(30)["index"] > index
    finally:
        node.stop()


def test_a_removal_that_cannot_commit_is_reported_as_of_unknown_outcome(tmp_path: Path) -> None:
    """Both followers down: removing one leaves a membership whose quorum is down, so the entry
    cannot commit. The reply said ok ("n3: removed"); it says the outcome is unknown, and why."""
    c = Cluster(tmp_path, 3)
    try:
        c.start()
        lead = c.leader(timeout=30)
        others = [n for n in c.nodes.values() if n is not lead]
        for n in others:
            n.kill()
        reply = lead.admin().request({"cmd": "remove_node", "id": others[1].node_id}, timeout_s=40)
        assert reply.get("ok") is False and reply.get("outcome") == "unknown", reply
        assert "did not commit" in reply["error"] and isinstance(reply.get("index"), int)
    finally:
        c.kill_all()


def test_transfer_leader_to_the_leader_itself_is_refused_at_once(cluster: Cluster) -> None:
    """Raft takes a transfer to itself as done: the command waited its election timeouts and then
    said the transfer did not complete (is it caught up and reachable?)."""
    lead = cluster.leader(timeout=30)
    reply = lead.admin().request({"cmd": "transfer_leader", "to": lead.node_id}, timeout_s=10)
    assert reply["ok"] is False and "leads already" in reply["error"], reply
    assert cluster.leader(timeout=30).node_id == lead.node_id
