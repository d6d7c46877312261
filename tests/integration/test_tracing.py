"""Traces that follow a task to its requests (docs/observability.md#traces), on real nodes: the
create's W3C ``traceparent`` is stored, every callback, ACK probe and failure notification of the
task carries one in the same trace (a span id of its own per attempt), and with
``tracing.otlp_endpoint`` the node exports create, commit, fire and result spans to a real OTLP/HTTP
receiver (protobuf over HTTP, decoded with opentelemetry-proto)."""

from __future__ import annotations

import json
import logging
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
            path: str = "/api/v1/tasks") -> tuple[int, dict[str, object], str]:
    """``(status, answer, the URL that answered)``; a 307 (the leader moved: nothing was created) is
    followed to the leader it names."""
    base = n.http_url
    for _ in range(5):
        r = urllib3.request("POST", base + path, body=json.dumps(body).encode(),
                            headers={"Content-Type": "application/json", **headers}, retries=False, timeout=15)
        answer = json.loads(r.data)
        if r.status != 307 or not answer["error"].get("leader"):
            break
        base = answer["error"]["leader"]
    return r.status, answer, base


def _span_of(header: str) -> str:
    m = _TP.match(header)
    assert m is not None and m.group(1) == TRACE, header
    return m.group(2)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_traced_create_puts_its_trace_on_every_request_and_exports_create_commit_fire_result(
        tmp_path: Path, receiver: RecordingReceiver, otlp: OtlpReceiver) -> None:
    # the default Raft tick, not a fast one: an election on a loaded machine settles an ACK probe in
    # flight lost, which counts as a failed probe that never reached the receiver (in one CI run only
    # two of the three probes arrived), and this test counts what the receiver got
    c = Cluster(tmp_path, 3, extra={"tracing": {"otlp_endpoint": otlp.endpoint}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        # the callback fails once (a retry: a second span id), the ACK probes all fail (ack_failed:
        # a dead letter and a task_failed notification to notify_url)
        st, t, at = _create(n, {
            "type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/flaky/1/cb"),
            "ack_url": receiver.url("/status/500/ack"), "ack_delay_ms": 10, "retry": {"initial_ms": 10},
            "notify_url": receiver.url("/ok/notify")}, {"traceparent": f"00-{TRACE}-{PARENT}-01"})
        assert st == 201, t
        took = next(x.node_id for x in c.nodes.values() if x.http_url == at)
        assert t["traceparent"] == f"00-{TRACE}-{PARENT}-01"
        tid = str(t["id"])
        wait_for(lambda: receiver.by_tag("notify"), 60, "the failure notification")

        cbs, acks, notes = receiver.by_tag("cb"), receiver.by_tag("ack"), receiver.by_tag("notify")
        assert len(cbs) >= 2 and len(acks) >= 3  # more only if an election made an attempt lost and re-sent
        fire_id = f"{tid}-1"
        sent = [(r, kind) for kind, rs in (("callback", cbs), ("ack", acks)) for r in rs]
        spans = [_span_of(r.headers["traceparent"]) for r, _kind in sent]
        assert spans == [attempt_span_id(fire_id, kind, int(r.headers["X-Molens-Attempt"])) for r, kind in sent]
        every = spans + [_span_of(r.headers["traceparent"]) for r in notes]
        assert len(set(every)) == len(every) and PARENT not in every  # a span id of its own per request
        events = [e for r in notes for e in json.loads(r.body)["events"]]
        assert {e["type"] for e in events} == {"task_failed", "dead_letter"}

        # the spans: create (child of the creator's span), commit, a fire and a result per attempt
        def exported() -> bool:
            got = otlp.of_trace(TRACE)
            return ({x.span_id for x in got if x.name == "molens.fire"} == set(spans)
                    and {x.parent_id for x in got if x.name == "molens.result"} == set(spans))
        wait_for(exported, 30, "the fire and result spans exported over OTLP/HTTP", interval=0.1)
        got = otlp.of_trace(TRACE)
        by_name = {s.name: [x for x in got if x.name == s.name] for s in got}
        (create,), (commit,) = by_name["molens.create"], by_name["molens.commit"]
        assert create.parent_id == PARENT and commit.parent_id == create.span_id
        assert create.attributes["molens.task_id"] == tid and create.service_instance == took
        assert create.start_ns <= commit.start_ns <= commit.end_ns <= create.end_ns
        fires = {f.span_id: f for f in by_name["molens.fire"]}
        assert all(f.parent_id == create.span_id for f in fires.values())
        answered = [500] + [200] * (len(cbs) - 1) + [500] * len(acks)  # /flaky/1 then /status/500
        assert [fires[x].attributes["http.response.status_code"] for x in spans] == answered
        fires_list = list(fires.values())
        # whichever node's worker sent an attempt, its span names the create as the leader made it
        assert {f.attributes["molens.worker"] for f in fires_list} <= set(c.nodes)
        assert all(f.service_instance == f.attributes["molens.worker"] for f in fires_list)
    finally:
        c.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_body_traceparent_wins_over_the_header_and_a_bad_header_is_ignored(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    with one_task_node(tmp_path) as n:
        own = f"00-{TRACE}-{PARENT}-01"
        other = f"00-{'a' * 32}-{'b' * 16}-01"
        st, t, _ = _create(n, {"type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/ok/body"),
                            "traceparent": own}, {"traceparent": other})
        assert st == 201 and t["traceparent"] == own
        st, bad, _ = _create(n, {"type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/ok/bad")},
                          {"traceparent": "00-nonsense"})
        assert st == 201 and bad["traceparent"] is None  # W3C: a receiver ignores an invalid traceparent
        st, err, _ = _create(n, {"type": "delayed", "interval_ms": 10, "callback_url": receiver.url("/ok/x"),
                              "traceparent": f"00-{'0' * 32}-{PARENT}-01"}, {})
        assert st == 400 and err["error"]["field"] == "traceparent", err
        # a batch: the header goes to each item without a traceparent of its own
        st, b, _ = _create(n, {"tasks": [
            {"type": "delayed", "interval_ms": 60_000, "callback_url": receiver.url("/ok/b1"), "traceparent": own},
            {"type": "delayed", "interval_ms": 60_000, "callback_url": receiver.url("/ok/b2")}]},
            {"traceparent": other}, "/api/v1/tasks/batch")
        assert st == 201 and [x["traceparent"] for x in b["items"]] == [own, other], b
        wait_for(lambda: receiver.by_tag("body") and receiver.by_tag("bad"), 30, "both callbacks")
        assert _span_of(receiver.by_tag("body")[0].headers["traceparent"]) != PARENT
        assert "traceparent" not in receiver.by_tag("bad")[0].headers
        st, got = call(n, "GET", f"/api/v1/tasks/{t['id']}")
        assert st == 200 and got["traceparent"] == own


def test_the_endpoint_is_logged_without_the_credentials_its_url_holds(caplog: pytest.LogCaptureFixture) -> None:
    from molens.tracing import open_spans

    with caplog.at_level(logging.INFO, logger="molens.tracing"):
        spans = open_spans("http://collector:s3cr@t-pw@127.0.0.1:9/v1/traces", "n1")
    try:
        assert "http://127.0.0.1:9/v1/traces" in caplog.text
        assert "s3cr" not in caplog.text and "collector" not in caplog.text
    finally:
        spans.shutdown()
