"""Hostile peers against a CURVE cluster of real node processes (docs/architecture.md#node-ports).

- a plain DEALER and a DEALER with an unlisted key fail the handshake on both node ports (Raft and
  worker RPC), the receiving node counts them (``molens_transport_handshake_refused_total``), and a
  fire batch sent that way fires nothing;
- a fire batch sent with a listed key that is not the leader's fires nothing, whether it names its
  own node as sender (not the leader of the term), claims to be the leader (the key belongs to
  another node) or carries an old term; without CURVE the claimed-sender rule still holds;
- a 4th node joins a running CURVE cluster with no restart (its key added, ``reload-keys``,
  ``add-node``) and gets the replicated state; removed again, it reports ``removed``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import urllib3
import yaml
import zmq
import zmq.auth

from molens.actors.fireworker import results_frame
from molens.delivery import DeliveryOutcome, FireKind, FireRequest, FireResult, encode_fire_batch
from molens.raft.transport import bin_header

from .conftest import Cluster, NodeProc, _merge, free_ports, wait_for
from .recording_receiver import RecordingReceiver

pytestmark = [pytest.mark.skipif(not zmq.has("curve"), reason="libzmq built without CURVE"), pytest.mark.slow]

_http = urllib3.PoolManager(retries=False, timeout=10)
QUIET_S = 2.0
"""How long a refused frame is given to (wrongly) fire after the node counted it."""


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _req(method: str, url: str, body: Any = None) -> urllib3.BaseHTTPResponse:
    data = json.dumps(body).encode() if body is not None else None
    return _http.request(method, url, body=data, headers={"Content-Type": "application/json"}, redirect=False)


def _ready(n: NodeProc) -> bool:
    try:
        return _req("GET", _base(n) + "/readyz").status == 200
    except urllib3.exceptions.HTTPError:
        return False


class Keys:
    """CURVE certificates for n1..n4 and a rogue; ``public`` lists n1..n3 (the cluster's allow list)."""

    def __init__(self, root: Path) -> None:
        self.secret = root / "secret"
        self.public = root / "public"
        self.secret.mkdir(parents=True)
        self.public.mkdir()
        for name in ("n1", "n2", "n3", "n4", "rogue"):
            zmq.auth.create_certificates(self.secret, name)
        for name in ("n1", "n2", "n3"):
            self.list(name)

    def list(self, name: str) -> None:
        (self.public / f"{name}.key").write_bytes((self.secret / f"{name}.key").read_bytes())

    def pair(self, name: str) -> tuple[bytes, bytes]:
        public, secret = zmq.auth.load_certificate(self.secret / f"{name}.key_secret")
        assert secret is not None
        return public, secret

    def node_settings(self, name: str) -> dict[str, Any]:
        return {"raft": {"curve": {
            "enabled": True, "secret_key_file": str(self.secret / f"{name}.key_secret"),
            "public_keys_dir": str(self.public),
        }}}


def _configure(node: NodeProc, extra: dict[str, Any]) -> None:
    node.settings = _merge(node.settings, extra)
    node.config_path.write_text(yaml.safe_dump(node.settings, sort_keys=False))


def _start(c: Cluster) -> Cluster:
    c.start()
    c.leader(timeout=30)
    for n in c.nodes.values():
        wait_for(lambda n=n: _ready(n), 30, f"{n.node_id} HTTP ready")
    return c


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path / "keys")


@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.fixture
def curve_cluster(make_cluster: Callable[..., Cluster], keys: Keys) -> Cluster:
    c = make_cluster(3, start=False, state_machine="tasks")
    for nid, node in c.nodes.items():
        _configure(node, keys.node_settings(nid))
    return _start(c)


class Peer:
    """A DEALER the test drives as an attacker would: any routing id, any key (or none)."""

    def __init__(self, addr: str, routing_id: str, keys: Keys | None = None, key: str = "",
                 server: str = "") -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, routing_id.encode())
        if keys is not None:
            public, secret = keys.pair(key)
            self.sock.curve_publickey = public
            self.sock.curve_secretkey = secret
            self.sock.curve_serverkey = keys.pair(server)[0]
        self.sock.connect(f"tcp://{addr}")

    def send(self, claimed: str, payload: bytes) -> None:
        """One frame as the transport writes it: ``msgpack([from_id, payload])``."""
        frame = b"".join((b"\x92", msgpack.packb(claimed), bin_header(len(payload)), payload))
        try:
            self.sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection (the handshake failed): that is the point

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def _batch(url: str, tag: str, term: int | None) -> bytes:
    """A fire batch frame: ``B`` + msgpack(term) + batch, or the format without a term."""
    now = int(time.time() * 1000)
    fire = FireRequest(fire_id=f"FORGED-{tag}-1", task_id=f"FORGED-{tag}", attempt=1, kind=FireKind.CALLBACK,
                       url=url, body=b"{}", scene="default", timeout_ms=2000, deadline_ms=now + 60_000)
    batch = encode_fire_batch([fire])
    return b"B" + (msgpack.packb(term) if term is not None else b"") + batch


def _rpc_stats(n: NodeProc) -> dict[str, Any]:
    st: dict[str, Any] = n.call("stats").get("rpc", {})
    st.setdefault("refused", {}).setdefault("B", 0)
    st.setdefault("transport", {}).setdefault("forged_sender", 0)
    st["transport"].setdefault("handshake_refused", 0)
    return st


def _refused_metric(n: NodeProc, port: str) -> float:
    text = _req("GET", _base(n) + "/metrics").data.decode()
    for line in text.splitlines():
        if line.startswith(f'molens_transport_handshake_refused_total{{port="{port}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _stays_empty(rec: RecordingReceiver, tag: str) -> None:
    deadline = time.monotonic() + QUIET_S
    while time.monotonic() < deadline:
        assert not rec.by_tag(tag), f"a forged batch fired: {rec.by_tag(tag)}"
        time.sleep(0.05)


def _real_fire(c: Cluster, rec: RecordingReceiver, tag: str) -> None:
    """Positive control: a task created through the API fires (the path the forgeries try works)."""
    r = _req("POST", _base(c.leader()) + "/api/v1/tasks",
             {"type": "delayed", "interval_ms": 100, "callback_url": rec.url(f"/ok/{tag}")})
    assert r.status == 201, r.data
    wait_for(lambda: rec.by_tag(tag), 20, "the real task's callback")


def test_plain_and_rogue_dealers_fail_on_both_node_ports_and_are_counted(
    curve_cluster: Cluster, keys: Keys, receiver: RecordingReceiver
) -> None:
    target = curve_cluster.nodes["n1"]
    addrs = {"raft": target.settings["raft"]["bind_addr"], "rpc": target.settings["rpc"]["bind_addr"]}
    before = {port: _refused_metric(target, port) for port in addrs}
    peers = []
    for port, addr in addrs.items():
        peers.append((port, Peer(addr, "n2")))  # plaintext
        peers.append((port, Peer(addr, "n2", keys, key="rogue", server="n1")))  # a key nobody listed
    term = target.status()["term"]  # type: ignore[index]
    try:
        def refused_on_both() -> bool:
            for _port, p in peers:
                p.send("n2", _batch(receiver.url("/ok/handshake"), "handshake", term))
                p.send("n2", _batch(receiver.url("/ok/handshake"), "handshake", None))
            assert not receiver.by_tag("handshake"), f"a forged batch fired: {receiver.by_tag('handshake')}"
            st = target.status() or {}
            return (
                _refused_metric(target, "raft") >= before["raft"] + 2
                and _refused_metric(target, "rpc") >= before["rpc"] + 2
                and st.get("refused", {}).get("handshake_refused", 0) >= 2
                and _rpc_stats(target)["transport"]["handshake_refused"] >= 2
            )

        wait_for(refused_on_both, 20, "n1 to count refused handshakes on its Raft and RPC ports", interval=0.2)
        _stays_empty(receiver, "handshake")
        assert "handshake refused" in target.tail(400)
    finally:
        for _port, p in peers:
            p.close()
    assert target.status()["term"] == term  # type: ignore[index]  # nothing reached Raft either


def test_forged_fire_batches_from_a_listed_key_that_is_not_the_leader_fire_nothing(
    curve_cluster: Cluster, keys: Keys, receiver: RecordingReceiver
) -> None:
    leader = curve_cluster.leader()
    f1, f2 = [n for n in curve_cluster.followers()]
    worker = f2  # the node the forgeries try to make fire; f1's key signs them
    term = worker.status()["term"]  # type: ignore[index]
    rpc = worker.settings["rpc"]["bind_addr"]
    url = receiver.url
    own = Peer(rpc, f1.node_id, keys, key=f1.node_id, server=worker.node_id)
    as_leader = Peer(rpc, leader.node_id, keys, key=f1.node_id, server=worker.node_id)
    try:
        def refused() -> bool:
            own.send(f1.node_id, _batch(url("/ok/own"), "own", term))  # a member, not the leader
            own.send(f1.node_id, _batch(url("/ok/noterm"), "noterm", None))  # the format without a term
            own.send(f1.node_id, _batch(url("/ok/oldterm"), "oldterm", term - 1))
            as_leader.send(leader.node_id, _batch(url("/ok/claims"), "claims", term))  # f1's key, the leader's id
            for tag in ("own", "noterm", "oldterm", "claims"):
                assert not receiver.by_tag(tag), f"a forged batch fired: {receiver.by_tag(tag)}"
            st = _rpc_stats(worker)
            return st["refused"]["B"] >= 2 and st["transport"]["forged_sender"] >= 1
        wait_for(refused, 20, "the worker to refuse the forged batches", interval=0.2)
        for tag in ("own", "noterm", "oldterm", "claims"):
            _stays_empty(receiver, tag)
        assert "frame refused" in worker.tail(400) and "frame dropped" in worker.tail(400)
    finally:
        own.close()
        as_leader.close()
    _real_fire(curve_cluster, receiver, "real")


def test_without_curve_a_fire_batch_claiming_a_member_that_does_not_lead_fires_nothing(
    make_cluster: Callable[..., Cluster], receiver: RecordingReceiver
) -> None:
    c = _start(make_cluster(3, start=False, state_machine="tasks"))
    leader = c.leader()
    f1, worker = c.followers()
    term = worker.status()["term"]  # type: ignore[index]
    plain = Peer(worker.settings["rpc"]["bind_addr"], f1.node_id)
    try:
        def refused() -> bool:
            plain.send(f1.node_id, _batch(receiver.url("/ok/plain"), "plain", term))
            plain.send(f1.node_id, _batch(receiver.url("/ok/plainold"), "plainold", None))
            for tag in ("plain", "plainold"):
                assert not receiver.by_tag(tag), f"a forged batch fired: {receiver.by_tag(tag)}"
            return _rpc_stats(worker)["refused"]["B"] >= 1
        wait_for(refused, 20, "the worker to refuse a batch from a node that does not lead", interval=0.2)
        _stays_empty(receiver, "plain")
        _stays_empty(receiver, "plainold")
    finally:
        plain.close()
    assert leader.status()["role"] == "leader"  # type: ignore[index]
    _real_fire(c, receiver, "plainreal")


def test_without_curve_raft_messages_with_fields_of_the_wrong_type_are_dropped_and_the_leader_leads_on(
    make_cluster: Callable[..., Cluster], receiver: RecordingReceiver
) -> None:
    """A frame that names a member as sender and carries a Raft message whose fields have other
    types than declared (a term that is a string) is counted and dropped at the codec. Before, it
    reached the core, whose comparison raised inside the Raft actor and stopped it."""
    c = _start(make_cluster(3, start=False, state_machine="tasks"))
    leader = c.leader()
    follower = c.followers()[0]
    term = leader.status()["term"]  # type: ignore[index]
    fid, lid = follower.node_id, leader.node_id
    bad = [
        [1, fid, lid, "x", 0, 0, False, False],  # RequestVote, term a string
        [5, fid, lid, term, "zz", b""],  # Heartbeat, commit a string
        [4, fid, lid, term, None, False, 0, 0],  # AppendResponse, index nil
        [6, fid, lid, term, 7],  # HeartbeatResponse, ctx an integer
    ]
    before = leader.call("stats")["bad_messages"]
    plain = Peer(leader.settings["raft"]["bind_addr"], fid)
    try:
        def counted() -> bool:
            for raw in bad:
                plain.send(fid, msgpack.packb(raw, use_bin_type=True))
            return bool(leader.call("stats")["bad_messages"] >= before + len(bad))
        wait_for(counted, 20, "the leader to count the malformed messages", interval=0.2)
    finally:
        plain.close()
    st = leader.status()
    assert st["role"] == "leader" and st["term"] == term, st  # type: ignore[index]
    _real_fire(c, receiver, "afterbad")
    assert leader.status()["term"] == term  # type: ignore[index]


def test_without_curve_appends_out_of_order_and_frames_claiming_the_receiver_itself_are_dropped(
    make_cluster: Callable[..., Cluster], receiver: RecordingReceiver
) -> None:
    """Appends that name the leader and are well typed but cannot be placed (an entry that
    does not follow ``prev_index``, one before it, terms past the message's or going down, a negative
    index) are counted and dropped at the codec. Before, the core met them: an entry at or before
    the committed index raised inside the Raft actor and an entry past a gap raised IndexError; either
    stopped the actor, and the node exited. A frame that claims to be from the receiving node
    itself is dropped at the port (``forged_sender``)."""
    c = _start(make_cluster(3, start=False, state_machine="tasks"))
    leader = c.leader()
    follower, other = c.followers()
    st = follower.status()
    term, commit = st["term"], st["commit_index"]  # type: ignore[index]
    lid, fid, oid = leader.node_id, follower.node_id, other.node_id
    app = 3  # MsgTag.APP: [tag, frm, to, term, prev_index, prev_term, entries, commit]
    bad = [
        [app, lid, fid, term, commit, term, [[commit + 5, term, 0, b""]], commit],  # a gap
        [app, lid, fid, term, commit, term, [[commit, term, 0, b""]], commit],  # at the committed index
        [app, lid, fid, term, commit, term, [[commit + 1, term + 1, 0, b""]], commit],  # a term past the message's
        [app, lid, fid, term, commit, term, [[commit + 1, term, 0, b""], [commit + 2, term - 1, 0, b""]], commit],
        [app, lid, fid, term, -1, 0, [], commit],  # a negative index
    ]
    before = follower.call("stats")["bad_messages"]
    forged_before = follower.call("status")["refused"]["forged_sender"]
    # sent on a connection of the other follower's id, which the follower takes over from it
    # (ROUTER_HANDOVER), rather than the leader's: the leader's appends must still reach it after
    plain = Peer(follower.settings["raft"]["bind_addr"], oid)
    itself = Peer(follower.settings["raft"]["bind_addr"], fid)
    try:
        def counted() -> bool:
            for raw in bad:
                plain.send(oid, msgpack.packb(raw, use_bin_type=True))
            itself.send(fid, msgpack.packb(bad[1], use_bin_type=True))
            return bool(follower.call("stats")["bad_messages"] >= before + len(bad)
                        and follower.call("status")["refused"]["forged_sender"] > forged_before)
        wait_for(counted, 20, "the follower to count the appends it cannot place", interval=0.2)
    finally:
        plain.close()
        itself.close()
    assert follower.proc is not None and follower.proc.poll() is None, "the follower exited"
    _real_fire(c, receiver, "afterappends")
    st = follower.status()
    assert st["role"] == "follower" and st["term"] == term and st["commit_index"] > commit, st  # type: ignore[index]
    assert follower.call("stats")["conflicting_appends"] == 0


def _cli(node: NodeProc, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "molens.cli", str(node.config_path), *args],
                          capture_output=True, text=True, timeout=60)


def test_a_fourth_node_joins_a_running_curve_cluster_without_restarts_and_a_removed_node_says_so(
    curve_cluster: Cluster, keys: Keys, receiver: RecordingReceiver
) -> None:
    c = curve_cluster
    leader = c.leader()
    pids = {n.node_id: n.pid for n in c.nodes.values()}
    r = _req("POST", _base(leader) + "/api/v1/tasks",
             {"type": "delayed", "interval_ms": 3_600_000, "callback_url": receiver.url("/ok/later")})
    assert r.status == 201, r.data
    tid = json.loads(r.data)["id"]

    keys.list("n4")  # the operator hands out n4's public key ...
    for n in list(c.nodes.values()):  # ... and has every member re-read the directory
        out = _cli(n, "reload-keys")
        assert out.returncode == 0, out.stderr
        assert "n4" in out.stdout
    # n4 knows the members' addresses (to answer the leader) but asks only an address where nothing
    # listens to add it: the operator's add-node does
    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    members = c.nodes["n1"].settings["cluster"]["peers"]
    n4 = c.add_joiner("n4", _merge(keys.node_settings("n4"),
                                   {"cluster": {"join_addrs": [nowhere], "peers": members}}))
    n4.start()
    n4.wait_ready()
    a = n4.settings
    out = _cli(c.nodes["n1"], "add-node", "n4", "--raft-addr", a["raft"]["bind_addr"],
               "--rpc-addr", a["rpc"]["bind_addr"], "--http-addr", f"127.0.0.1:{a['http']['port']}",
               "--admin-addr", a["admin"]["bind_addr"])
    assert out.returncode == 0, out.stderr
    assert "n4: added (as a learner) at index" in out.stdout

    def voter() -> bool:
        st = n4.status() or {}
        return st.get("role") == "follower" and "n4" in st.get("voters", [])

    wait_for(voter, 60, "n4 to catch up and be promoted to voter")
    c.wait_converged(30)

    def task_on_n4() -> bool:
        g = _req("GET", _base(n4) + f"/api/v1/tasks/{tid}")
        return g.status == 200 and json.loads(g.data)["id"] == tid

    wait_for(task_on_n4, 20, "n4's replica to hold the task created before it joined")
    assert {n: c.nodes[n].pid for n in pids} == pids  # nobody restarted
    assert all(c.nodes[n].running for n in pids)

    lead_term = c.leader().status()["term"]  # type: ignore[index]
    out = _cli(c.nodes["n1"], "remove-node", "n4")
    assert out.returncode == 0, out.stderr

    def removed() -> dict[str, Any] | None:
        st = n4.status() or {}
        return st if st.get("role") == "removed" and st.get("removed") else None

    wait_for(removed, 60, "n4 to learn it was removed")
    g = _req("GET", _base(n4) + f"/api/v1/tasks/{tid}")
    assert g.status == 503  # a removed node serves no stale reads
    assert _req("GET", _base(n4) + "/readyz").status == 503
    assert c.leader().node_id in pids
    assert c.leader().status()["term"] == lead_term  # type: ignore[index]  # n4's campaigns disturbed nobody


def _results(fire_id: str, worker: str) -> bytes:
    """A results frame saying ``worker`` carried out attempt 1 of ``fire_id``, answered 200 ``FORGED``."""
    r = FireResult(fire_id=fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=DeliveryOutcome.SUCCESS,
                   response_head=b"FORGED", latency_ms=1.0, worker=worker)
    return results_frame(8, {fire_id: 1}, [r])


def test_a_member_reporting_results_for_a_fire_dispatched_to_another_worker_is_ignored(
    curve_cluster: Cluster, keys: Keys, receiver: RecordingReceiver
) -> None:
    leader = curve_cluster.leader()
    f1, f2 = curve_cluster.followers()
    rpc = leader.settings["rpc"]["bind_addr"]
    r = _req("POST", _base(leader) + "/api/v1/tasks", {
        "type": "delayed", "interval_ms": 100, "timeout_ms": 20_000, "callback_url": receiver.url("/slow/4000/bound"),
    })
    assert r.status == 201, r.data
    fire_id = json.loads(r.data)["id"] + "-1"
    wait_for(lambda: receiver.by_tag("bound"), 20, "the real callback to be held by the receiver")
    # each follower, with its own key and id, answers for the fire as one of the two other nodes:
    # whichever node the fire went to, some of these speak for it from another member
    forgers = [(f, [n.node_id for n in (leader, f1, f2) if n is not f]) for f in (f1, f2)]
    peers = [Peer(rpc, f.node_id, keys, key=f.node_id, server=leader.node_id) for f, _ in forgers]
    try:
        def counted() -> bool:
            for p, (f, others) in zip(peers, forgers, strict=True):
                for w in others:
                    p.send(f.node_id, _results(fire_id, w))
            return bool(_rpc_stats(leader)["refused"].get("results_wrong_worker", 0) >= 4)
        wait_for(counted, 20, "the leader to drop the results naming another worker", interval=0.2)
    finally:
        for p in peers:
            p.close()
    tid = fire_id.rsplit("-", 1)[0]
    wait_for(lambda: json.loads(_req("GET", f"{_base(leader)}/api/v1/tasks/{tid}").data)["status"] == "done", 30,
             "the real worker's result")
    execs = json.loads(_req("GET", f"{_base(leader)}/api/v1/tasks/{tid}/executions").data)["items"]
    assert [(e["result"], e["execution_result"]) for e in execs] == [("success", "ok")], execs
    assert "name another worker; ignored" in leader.tail(400)
    metrics = _req("GET", _base(leader) + "/metrics").data.decode().splitlines()
    dropped = [float(x.rsplit(" ", 1)[1]) for x in metrics if x.startswith("molens_rpc_results_wrong_worker_total ")]
    assert dropped and dropped[0] >= 4, dropped
