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
