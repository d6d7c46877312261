"""Traces that follow a task to its requests (docs/observability.md#traces), on real nodes: the
create's W3C ``traceparent`` is stored, every callback, ACK probe and failure notification of the
task carries one in the same trace (a span id of its own per attempt), and with
``tracing.otlp_endpoint`` the node exports create, commit, fire and result spans to a real OTLP/HTTP
receiver (protobuf over HTTP, decoded with opentelemetry-proto)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from molens.tracing import attempt_span_id

from .conftest import Cluster, NodeProc, wait_for
from .otlp_receiver import OtlpReceiver
from .recording_receiver import RecordingReceiver
from .rest import call, one_task_node, wait_serving

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
_TP = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.close()


def _create(n: NodeProc, body: dict[str, object], headers: dict[str, str],
            path: str = "/api/v1/tasks") -> tuple[int, dict[str, object]]:
    r = urllib3.request("POST", n.http_url + path, body=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json", **headers}, retries=False, timeout=15)
    return r.status, json.loads(r.data)


def _span_of(header: str) -> str:
    m = _TP.match(header)
    assert m is not None and m.group(1) == TRACE, header
    return m.group(2)


@pytest.mark.timeout(120)
def test_a_traced_create_puts_its_trace_on_every_request_and_exports_create_commit_fire_result(
        tmp_path: Path, receiver: RecordingReceiver, otlp: OtlpReceiver) -> None:
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}, "tracing": {"otlp_endpoint": otlp.endpoint}},
                state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        # the callback fails once (a retry: a second span id), the ACK probes all fail (ack_failed:
        # a dead letter and a task_failed notification to notify_url)
        st, t = _create(n, {
            "type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/flaky/1/cb"),
            "ack_url": receiver.url("/status/500/ack"), "ack_delay_ms": 10, "retry": {"initial_ms": 10},
            "notify_url": receiver.url("/ok/notify")}, {"traceparent": f"00-{TRACE}-{PARENT}-01"})
        assert st == 201, t
        assert t["traceparent"] == f"00-{TRACE}-{PARENT}-01"
        tid = str(t["id"])
        wait_for(lambda: receiver.by_tag("notify"), 60, "the failure notification")

        cbs, acks, notes = receiver.by_tag("cb"), receiver.by_tag("ack"), receiver.by_tag("notify")
        assert len(cbs) == 2 and len(acks) == 3
        spans = [_span_of(r.headers["traceparent"]) for r in cbs + acks + notes]
        assert len(set(spans)) == len(spans) and PARENT not in spans  # a span id of its own per request
        fire_id = f"{tid}-1"
        assert spans[:2] == [attempt_span_id(fire_id, "callback", a) for a in (1, 2)]
        assert spans[2:5] == [attempt_span_id(fire_id, "ack", a) for a in (1, 2, 3)]
        events = [e for r in notes for e in json.loads(r.body)["events"]]
        assert {e["type"] for e in events} == {"task_failed", "dead_letter"}

        # the spans: create (child of the creator's span), commit, a fire and a result per attempt
        def exported() -> bool:
            names = [s.name for s in otlp.of_trace(TRACE)]
            return names.count("molens.fire") == 5 and names.count("molens.result") == 5
        wait_for(exported, 30, "the fire and result spans exported over OTLP/HTTP")
        got = otlp.of_trace(TRACE)
        by_name = {s.name: [x for x in got if x.name == s.name] for s in got}
        (create,), (commit,) = by_name["molens.create"], by_name["molens.commit"]
        assert create.parent_id == PARENT and commit.parent_id == create.span_id
        assert create.attributes["molens.task_id"] == tid and create.service_instance == n.node_id
        assert create.start_ns <= commit.start_ns <= commit.end_ns <= create.end_ns
        fires = by_name["molens.fire"]
        assert sorted(f.span_id for f in fires) == sorted(spans[:5])  # the ids the receiver saw
        assert all(f.parent_id == create.span_id for f in fires)
        assert sorted(f.attributes["http.response.status_code"] for f in fires) == [200, 500, 500, 500, 500]
        assert sorted(r.parent_id for r in by_name["molens.result"]) == sorted(spans[:5])
        # whichever node's worker sent an attempt, its span names the create as the leader made it
        assert {f.attributes["molens.worker"] for f in fires} <= set(c.nodes)
        assert {f.service_instance for f in fires} == {f.attributes["molens.worker"] for f in fires}
    finally:
        c.stop_all()


@pytest.mark.timeout(120)
def test_the_body_traceparent_wins_over_the_header_and_a_bad_header_is_ignored(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    with one_task_node(tmp_path) as n:
        own = f"00-{TRACE}-{PARENT}-01"
        other = f"00-{'a' * 32}-{'b' * 16}-01"
        st, t = _create(n, {"type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/ok/body"),
                            "traceparent": own}, {"traceparent": other})
        assert st == 201 and t["traceparent"] == own
        st, bad = _create(n, {"type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/ok/bad")},
                          {"traceparent": "00-nonsense"})
        assert st == 201 and bad["traceparent"] is None  # W3C: a receiver ignores an invalid traceparent
        st, err = _create(n, {"type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/ok/x"),
                              "traceparent": f"00-{'0' * 32}-{PARENT}-01"}, {})
        assert st == 400 and err["error"]["field"] == "traceparent", err
        # a batch: the header goes to each item without a traceparent of its own
        st, b = _create(n, {"tasks": [
            {"type": "delayed", "interval_ms": 60_000, "callback_url": receiver.url("/ok/b1"), "traceparent": own},
            {"type": "delayed", "interval_ms": 60_000, "callback_url": receiver.url("/ok/b2")}]},
            {"traceparent": other}, "/api/v1/tasks/batch")
        assert st == 201 and [x["traceparent"] for x in b["items"]] == [own, other], b
        wait_for(lambda: receiver.by_tag("body") and receiver.by_tag("bad"), 30, "both callbacks")
        assert _span_of(receiver.by_tag("body")[0].headers["traceparent"]) != PARENT
        assert "traceparent" not in receiver.by_tag("bad")[0].headers
        st, got = call(n, "GET", f"/api/v1/tasks/{t['id']}")
        assert st == 200 and got["traceparent"] == own
