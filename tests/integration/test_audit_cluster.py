"""The audit trail on a real 3-node cluster: 1,000 changes by three actors with the leader kill -9'd
half way (and brought back after the log it missed was compacted into a snapshot) leave exactly
those 1,000 entries, with their actors, on every replica.

The actors are three API keys made through the API with the bootstrap token. Each change is sent
after the answer to the one before, and the leader is killed between two of them, so every change
has a known outcome.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import urllib3

from .conftest import Cluster, NodeProc, wait_for
from .rest import wait_serving

pytestmark = pytest.mark.integration

TOKEN = "audit-cluster-bootstrap"
SETTINGS = {"raft": {"snapshot_every_entries": 200, "keep_log_tail": 50}, "http": {"auth_token": TOKEN}}
NAMES = ("alice", "bob", "carol")
CHANGES = 1_000
KILL_AT, BACK_AT = 500, 800
_http = urllib3.PoolManager(retries=False, timeout=30, maxsize=4)


def _send(n: NodeProc, secret: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    r = _http.request(method, n.http_url + path, body=None if body is None else json.dumps(body).encode(),
                      headers={"Content-Type": "application/json", "Authorization": f"Bearer {secret}"}, redirect=False)
    return r.status, (json.loads(r.data) if r.data else None)


def _make_keys(leader: NodeProc, role: str) -> list[tuple[str, str, str]]:
    """Three keys of every namespace, ``(id, name, secret)``, made with the bootstrap token."""
    out = []
    for name in NAMES:
        st, k = _send(leader, TOKEN, "POST", "/api/v1/keys", {"name": name, "role": role, "namespaces": ["*"]})
        assert st == 201, k
        out.append((k["id"], name, k["secret"]))
    return out


def _trail(n: NodeProc) -> list[dict[str, Any]]:
    r = _http.request("GET", n.http_url + "/api/v1/audit?format=jsonl", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 200, r.data[:300]
    return [json.loads(line) for line in r.data.decode().splitlines()]


class Driver:
    """Sends changes to whoever leads. A 307 or ``no_leader`` (nothing applied) goes to the leader; a
    write whose outcome is unknown (leadership lost under it: it happens on a loaded machine) is sent
    again, as a client would: a create under the same idempotency key, and a pause, resume or delete
    whose retry finds it done (409/404) had applied the first time. Either way the change is made
    once, and must be on record once."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.leader = c.leader(timeout=60)
        wait_serving(self.leader)
        self.keys = _make_keys(self.leader, "writer")
        self.expected: list[tuple[str, str, str]] = [("bootstrap", "key.create", k[0]) for k in self.keys]
        self.unknown = 0

    def change(self, i: int, method: str, path: str, action: str, body: Any = None, target: str = "") -> Any:
        _, name, secret = self.keys[i % 3]
        retried = False
        while True:
            try:
                st, out = _send(self.leader, secret, method, path, body)
            except urllib3.exceptions.HTTPError:
                st, out = 0, None
            code = out["error"]["code"] if st >= 300 and out else ""
            if st == 307 or code == "no_leader":
                self.leader = self.c.leader(timeout=60)
                continue
            if st == 0 or code == "outcome_unknown":
                self.unknown += 1
                retried = True
                self.leader = self.c.leader(timeout=60)
                continue
            done_before = retried and ((st == 409 and action in ("task.pause", "task.resume"))
                                       or (st == 404 and action == "task.delete"))
            assert 200 <= st < 300 or done_before, (i, method, path, st, out)
            self.expected.append((name, action, target or out["id"]))
            return out


def test_a_thousand_changes_by_three_actors_across_a_leader_kill_are_on_every_replica_once(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 3, extra=SETTINGS, state_machine="tasks")
    try:
        c.start()
        d = Driver(c)
        killed: NodeProc | None = None
        index_at_kill = 0
        cb = {"type": "delayed", "interval_ms": 3_600_000, "callback_url": "http://127.0.0.1:9/cb"}
        i = 0
        while i < CHANGES:
            if i == KILL_AT:
                killed = d.leader
                index_at_kill = killed.call("status")["commit_index"]
                killed.kill()
                d.leader = c.leader(timeout=60)
                wait_serving(d.leader)
            if i == BACK_AT:
                assert killed is not None
                d.leader.call("snapshot")
                assert d.leader.call("status")["first_index"] > index_at_kill + 1, "the log is compacted past it"
                killed.start()
            b = i // 5
            x = d.change(i, "POST", "/api/v1/tasks", "task.create", {**cb, "idempotency_key": f"c{i}"})["id"]
            y = d.change(i + 1, "POST", "/api/v1/tasks", "task.create", {**cb, "idempotency_key": f"c{i + 1}"})["id"]
            d.change(i + 2, "POST", f"/api/v1/tasks/{x}/pause", "task.pause", target=x)
            d.change(i + 3, "POST", f"/api/v1/tasks/{x}/resume", "task.resume", target=x)
            if b % 2:
                d.change(i + 4, "PATCH", f"/api/v1/tasks/{y}", "task.patch", {"timeout_ms": 7_000}, target=y)
            else:
                d.change(i + 4, "DELETE", f"/api/v1/tasks/{y}", "task.delete", target=y)
            i += 5
        assert len(d.expected) == CHANGES + 3
        print(f"audit cluster: changes={CHANGES} outcome_unknown_retries={d.unknown}")
        c.wait_converged(timeout=120)
        want = list(reversed(d.expected))
        trails = {}
        for n in c.nodes.values():
            wait_for(lambda n=n: len(_trail(n)) >= CHANGES + 3 or None, 60, f"{n.node_id}'s audit trail")  # type: ignore[misc]
            trails[n.node_id] = _trail(n)
            got = [(a["actor"]["name"], a["action"], a["target"]) for a in trails[n.node_id]]
            assert got == want, n.node_id
            assert {a["actor"]["key_id"] for a in trails[n.node_id]} == {"bootstrap", *(k[0] for k in d.keys)}
        first = next(iter(trails.values()))
        assert all(t == first for t in trails.values())  # ids, times, changes: the same entries everywhere
        assert killed is not None and killed.call("stats")["snapshots_installed"] >= 1  # caught up by a snapshot
    finally:
        c.kill_all()


def test_membership_changes_and_a_leadership_transfer_are_on_every_replica(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 3, extra={"http": {"auth_token": TOKEN}}, state_machine="tasks")
    try:
        c.start()
        leader = c.leader(timeout=60)
        wait_serving(leader)
        made = _make_keys(leader, "admin")
        alice, keys = made[0], [k[0] for k in made]
        n4 = c.add_joiner("n4")
        n4.start().wait_ready()
        wait_for(lambda: "n4" in (c.leader().status() or {}).get("voters", []) or None, 60, "n4 to join as a voter")
        leader = c.leader(exclude=("n4",))
        leader.call("remove_node", id="n4", timeout_s=30)
        n4.kill()
        leader = c.leader(timeout=60)
        st, out = _send(leader, alice[2], "POST", "/api/v1/cluster/transfer-leader", {})
        assert st == 200, out
        c.leader(timeout=60)
        c.wait_converged(timeout=60)
        want = [*(("bootstrap", "key.create", k) for k in keys), ("admin socket", "cluster.add_node", "n4"), ("admin socket", "cluster.remove_node", "n4"),
                ("alice", "cluster.transfer_leader", leader.node_id)]
        trails = [_trail(n) for n in c.running()]
        for t in trails:
            assert [(a["actor"]["name"], a["action"], a["target"]) for a in reversed(t)] == want
            assert t == trails[0]
        assert trails[0][0]["changes"] == {"leader": {"old": leader.node_id, "new": None}}
    finally:
        c.kill_all()
