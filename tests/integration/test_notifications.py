"""Failure notifications on a real 3-node cluster (docs/architecture.md#notifications): signed,
batched POSTs to the task's ``notify_url`` (or the node default ``notifications.url``) for a failed
task and its dead letter, delivered at least once across kill -9 of the leader: the target refuses
until the leader is dead, and the next leader delivers from the replicated outbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from molens.signing import namespace_secret, verify_signature

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import call, wait_serving

SECRET = "notify-secret-0123456789"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_notifications_arrive_signed_and_at_least_once_across_a_leader_kill_9(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    # the default target answers 500 to its first 1,000 requests: nothing is delivered before the kill
    default_url = receiver.url("/flaky/1000/default")
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}, "worker": {"signing_secret": SECRET},
                                    "notifications": {"url": default_url}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        st, t = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "max_retries": 0, "callback_url": receiver.url("/status/500/cb"),
            "notify_url": receiver.url("/flaky/2/own")})
        assert st == 201 and t["notify_url"] == receiver.url("/flaky/2/own")
        st, d = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "max_retries": 0, "callback_url": receiver.url("/status/500/cb2")})
        assert st == 201 and d["notify_url"] == default_url  # the node default, resolved at create
        st, _ = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "notify_url": "http://169.254.169.254/x",
            "callback_url": receiver.url("/ok/x")})
        assert st == 400  # the callback host policy applies to notify_url
        # the leader tries the task's own target (refused twice) and the default one (refused)
        wait_for(lambda: receiver.by_tag("own") and receiver.by_tag("default"), 30, "the first notification tries")
        n.kill()
        n2 = c.leader(timeout=30, exclude=(n.node_id,))
        wait_for(lambda: len(receiver.by_tag("own")) >= 3, 60, "the new leader's delivery to the task's target")
        own = receiver.by_tag("own")
        delivered = own[2]  # /flaky/2: the third request is the first answered 2xx
        assert delivered.headers["X-Molens-Kind"] == "notification"
        assert verify_signature(delivered.headers, delivered.body, [SECRET])
        # the task's namespace's key signs its notifications too (docs/receiver.md#one-key-per-namespace)
        assert verify_signature(delivered.headers, delivered.body, [namespace_secret(SECRET, "default")])
        events = json.loads(delivered.body)["events"]
        assert sorted(e["type"] for e in events) == ["dead_letter", "task_failed"]
        assert {e["task_id"] for e in events} == {t["id"]} and all(e["fire_id"] == f"{t['id']}-1" for e in events)
        ids = {e["id"] for e in events}
        for r in own[:2]:  # the refused tries carried the same events: the receiver de-duplicates by id
            assert {e["id"] for e in json.loads(r.body)["events"]} <= ids
        # acknowledged: out of every replica's outbox, and not sent again; the default target keeps
        # refusing, so the other task's two notifications wait there (retried, backing off), not lost
        wait_for(lambda: all(_outbox(x) == 2 for x in c.nodes.values() if x.running), 30,
                 "the acknowledged notifications out of every replica's outbox", interval=0.2)
        count = len(receiver.by_tag("own"))
        tries = len(receiver.by_tag("default"))
        wait_for(lambda: len(receiver.by_tag("default")) > tries, 30, "the default target tried again")
        assert len(receiver.by_tag("own")) == count
        refused = json.loads(receiver.by_tag("default")[-1].body)["events"]
        assert sorted(e["type"] for e in refused) == ["dead_letter", "task_failed"]
        assert {e["task_id"] for e in refused} == {d["id"]}
        # the node's notifications.url is the operator's: the cluster's secret alone signs what goes there
        ops = receiver.by_tag("default")
        assert all(verify_signature(r.headers, r.body, [SECRET]) for r in ops)
        assert not any(verify_signature(r.headers, r.body, [namespace_secret(SECRET, "default")]) for r in ops)
        assert n2.running
    finally:
        c.stop_all()


def _outbox(n: NodeProc) -> int | None:
    st, stats = call(n, "GET", "/api/v1/stats?local=1")
    if st != 200:
        return None
    return int(stats.get("notifications", {}).get("outbox", -1))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_flow_its_receiver_holds_with_retry_after_is_announced_paused_then_resumed(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}, "worker": {"signing_secret": SECRET},
                                    "notifications": {"url": receiver.url("/ok/node")}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        st, t = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "callback_url": receiver.url("/throttle/1/2/held")})
        assert st == 201, t
        events: list[dict[str, Any]] = []

        def got_both() -> bool:
            events[:] = [e for r in receiver.by_tag("node") for e in json.loads(r.body)["events"]]
            return {"flow_paused", "flow_resumed"} <= {e["type"] for e in events}

        wait_for(got_both, 60, "flow_paused and flow_resumed notifications")
        flow = f"127.0.0.1:{receiver.port}"
        paused = next(e for e in events if e["type"] == "flow_paused")
        resumed = next(e for e in events if e["type"] == "flow_resumed")
        assert flow in paused["detail"] and flow in resumed["detail"] and paused["at"] <= resumed["at"]
        assert paused["task_id"] is None and paused["fire_id"] is None
        assert all(verify_signature(r.headers, r.body, [SECRET]) for r in receiver.by_tag("node"))
        # a flow's notices belong to no namespace: the cluster's secret alone signs them
        assert not any(verify_signature(r.headers, r.body, [namespace_secret(SECRET, "default")])
                       for r in receiver.by_tag("node"))
        wait_for(lambda: call(n, "GET", f"/api/v1/tasks/{t['id']}")[1]["status"] == "done", 30, "the task done")
    finally:
        c.stop_all()
