"""Retry-After on a real node (docs/architecture.md#retry-policy): a receiver answering
``429 Retry-After: 2`` gets the next attempt at least 2 s later, and those throttled attempts do not
use up ``max_retries``; the retry policy's own backoff on a real node."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from .conftest import Cluster, wait_for
from .recording_receiver import RecordingReceiver
from .rest import call, wait_serving


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_429_with_retry_after_waits_that_long_and_does_not_use_up_max_retries(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        # three 429s (Retry-After: 2) and then 200, with max_retries 1: delivered, not failed
        st, t = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "max_retries": 1,
            "callback_url": receiver.url("/throttle/2/3/thr")})
        assert st == 201, t
        wait_for(lambda: call(n, "GET", f"/api/v1/tasks/{t['id']}")[1]["status"] in ("done", "failed"), 60,
                 "the throttled task to end")
        st, done = call(n, "GET", f"/api/v1/tasks/{t['id']}")
        assert done["status"] == "done" and done["attempt"] == 4
        rs = receiver.by_tag("thr")
        assert [r.headers["X-Molens-Attempt"] for r in rs] == ["1", "2", "3", "4"]
        assert {r.headers["X-Fire-ID"] for r in rs} == {f"{t['id']}-1"}
        gaps = [b.at_ms - a.at_ms for a, b in itertools.pairwise(rs)]
        assert all(g >= 2_000 for g in gaps), gaps  # each retry waited for the time the receiver gave
        # the policy's own retries (no Retry-After): 500s, at least 300 ms apart, failed after 1 + 2 attempts
        st, f = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "callback_url": receiver.url("/status/500/fixed"),
            "retry": {"max_retries": 2, "backoff": "fixed", "initial_ms": 300}})
        assert st == 201, f
        wait_for(lambda: call(n, "GET", f"/api/v1/tasks/{f['id']}")[1]["status"] == "failed", 60, "the 500s to fail")
        rs = receiver.by_tag("fixed")
        assert len(rs) == 3
        gaps = [b.at_ms - a.at_ms for a, b in itertools.pairwise(rs)]
        assert all(g >= 300 for g in gaps), gaps
    finally:
        c.stop_all()


@pytest.mark.timeout(120)
def test_a_namespaces_flow_key_is_its_own_so_its_receivers_retry_after_holds_no_other_namespace(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    """Two namespaces name the same flow_key: each gets its own flow (``<namespace>~<flow_key>``). One
    namespace's receiver answering ``429 Retry-After: 3600`` holds that namespace's flow for the hour,
    and the other namespace's task in a flow of the same name fires at once (one flow for both let
    a writer of one namespace hold another's fires with its own receiver's answer)."""
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        for ns in ("team-a", "team-b"):
            st, out = call(n, "POST", "/api/v1/namespaces", {"name": ns})
            assert st == 201, out
        st, a = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "namespace": "team-a", "flow_key": "shared",
            "callback_url": receiver.url("/throttle/3600/1/team-a")})
        assert st == 201, a
        wait_for(lambda: receiver.by_tag("team-a"), 30, "team-a's first attempt (answered 429, Retry-After: 3600)")
        flows = wait_for(lambda: {f["key"]: f for f in call(n, "GET", "/api/v1/flows")[1]["items"]
                                  if f["throttled_until"]} or None, 30, "team-a's flow to be held")
        assert set(flows) == {"team-a~shared"}, flows  # not "shared", not team-b's
        st, b = call(n, "POST", "/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "namespace": "team-b", "flow_key": "shared",
            "callback_url": receiver.url("/ok/team-b")})
        assert st == 201, b
        wait_for(lambda: receiver.by_tag("team-b"), 30, "team-b's task in its own flow named shared")
        assert len(receiver.by_tag("team-a")) == 1  # still held, for the hour its receiver asked
        # a namespace's flow is set by that key; a key of no namespace's form is refused
        st, out = call(n, "PUT", "/api/v1/flows/team-b~shared", {"rate_per_s": 5})
        assert st == 200 and out["key"] == "team-b~shared" and out["rate_per_s"] == 5, out
        st, out = call(n, "PUT", "/api/v1/flows/Team-B~shared", {"rate_per_s": 5})
        assert st == 400 and out["error"]["field"] == "key", out
    finally:
        c.stop_all()
