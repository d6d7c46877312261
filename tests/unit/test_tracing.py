"""Trace context rules (molens.tracing) and where they reach the wire: the fire batch frame, the
stored notice, the notification plan, an attempt's headers."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import msgpack
import msgspec
import urllib3

from molens import tracing
from molens.actors.notifier import NoticePlan
from molens.actors.stats import ReportingDeliverer
from molens.delivery import (
    Deliverer,
    DeliveryOutcome,
    FireRequest,
    FireResult,
    decode_fire_batch,
    encode_fire_batch,
)
from molens.model import FireKind
from molens.schema import Notice, NoticeType

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _req(tp: str = "", attempt: int = 1, kind: FireKind = FireKind.CALLBACK) -> FireRequest:
    return FireRequest(fire_id="T-1", task_id="T", attempt=attempt, kind=kind, url="http://127.0.0.1:9/x",
                       body=b"null", scene="default", timeout_ms=1000, traceparent=tp)


def test_a_traceparent_is_version_00_lower_hex_with_non_zero_ids() -> None:
    assert tracing.is_valid(TP)
    for bad in (TP.upper(), "01" + TP[2:], TP[:-1], f"00-{'0' * 32}-00f067aa0ba902b7-01",
                f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01", TP + "\n"):
        assert not tracing.is_valid(bad), bad


def test_each_attempt_gets_its_own_span_id_in_the_tasks_trace_the_same_on_every_node() -> None:
    d = Deliverer(urllib3.PoolManager(), "n1")
    heads = [d.headers_for(_req(TP, a, k))["traceparent"] for k in (FireKind.CALLBACK, FireKind.ACK) for a in (1, 2)]
    assert all(h.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and h.endswith("-01") for h in heads)
    assert len({h[36:52] for h in heads}) == 4 and "00f067aa0ba902b7" not in {h[36:52] for h in heads}
    assert heads == [Deliverer(urllib3.PoolManager(), "n2").headers_for(_req(TP, a, k))["traceparent"]
                     for k in (FireKind.CALLBACK, FireKind.ACK) for a in (1, 2)]
    assert "traceparent" not in d.headers_for(_req())


def test_the_fire_batch_carries_the_traceparent_and_still_reads_frames_without_it() -> None:
    assert decode_fire_batch(encode_fire_batch([_req(TP), _req()])) == [_req(TP), _req()]
    # an untraced fire is the 11-field item a worker of the previous version reads
    item = msgpack.unpackb(encode_fire_batch([_req()]), raw=False)[1][0]
    assert len(item) == 11


def test_a_notice_stored_before_the_field_decodes_without_a_trace() -> None:
    n = Notice(id="a", type=NoticeType.TASK_FAILED, task_id="T", fire_id="T-1", at_ms=1, detail="d", url="u")
    old = msgspec.msgpack.encode(n)[:-1]  # array_like: drop the trailing field, as the previous layout wrote
    old = bytes([old[0] - 1]) + old[1:]
    assert msgspec.msgpack.decode(old, type=Notice) == n


def test_notifications_of_different_traces_go_in_different_posts() -> None:
    def notice(i: int, tp: str | None) -> Notice:
        return Notice(id=str(i), type=NoticeType.TASK_FAILED, task_id=f"T{i}", fire_id="", at_ms=i, detail="",
                      url="http://r/", traceparent=tp)
    other = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    batches, _ = NoticePlan(100, 10_000).plan(5, [notice(1, TP), notice(2, None), notice(3, TP), notice(4, other)])
    assert sorted(([n.id for n in b.notices], b.traceparent) for b in batches) == sorted(
        [(["1", "3"], TP), (["2"], None), (["4"], other)])


def test_a_task_stored_before_the_field_decodes_without_a_trace() -> None:
    from molens import model
    from molens.fsm import store

    spec = model.validate_create({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x",
                                  "traceparent": TP})
    t = model.Task(id="01HF7YAT000000000000000001", spec=spec, status=model.Status.PENDING, created_ms=1,
                   updated_ms=1, due_ms=2, sched_ms=2)
    rec = msgspec.msgpack.decode(store.task_to_bytes(t))
    assert rec[1][-2:] == [TP, "default"]
    del rec[1][-2:]  # the spec as the layout before the field (and the namespace after it) wrote it
    old = store.task_from_bytes(msgspec.msgpack.encode(rec))
    assert old.spec.traceparent is None and old == msgspec.structs.replace(
        t, spec=msgspec.structs.replace(spec, traceparent=None))


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported() -> None:
    import subprocess
    import sys

    code = ("import sys; from molens import tracing; import molens.node, molens.scheduler, molens.web.app; "
            "assert tracing.open_spans('', 'n1') is tracing.NO_SPANS; "
            "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'opentelemetry'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


class _Captured(tracing.Spans):
    enabled = True

    def __init__(self) -> None:
        self.fires: list[dict[str, object]] = []

    def fire(self, tp: str, task_id: str, fire_id: str, kind: str, attempt: int, start_ns: int, end_ns: int,
             attrs: Mapping[str, Any]) -> None:
        self.fires.append(dict(attrs))


def test_an_attempts_span_carries_its_url_with_every_query_value_redacted() -> None:
    """A callback URL's query often carries a token (``?token=...``); the trace backend is read
    more widely than the task, so ``url.full`` goes with each value replaced (OpenTelemetry's HTTP
    conventions), names and path kept."""
    assert tracing.span_url("http://h:81/a/b") == "http://h:81/a/b"
    assert tracing.span_url("https://h/hook?token=s3cret&flag&x=1#frag") == "https://h/hook?token=REDACTED&flag&x=REDACTED"
    spans = _Captured()
    d = ReportingDeliverer(urllib3.PoolManager(), "n1")
    d.spans = spans
    req = dataclasses.replace(_req(TP), url="http://127.0.0.1:9/hook?token=s3cret&order=42")
    d.record(req, FireResult(fire_id=req.fire_id, kind=req.kind, status_code=200, outcome=DeliveryOutcome.SUCCESS,
                             response_head=b"", latency_ms=1.0, worker="n1"))
    assert [f["url.full"] for f in spans.fires] == ["http://127.0.0.1:9/hook?token=REDACTED&order=REDACTED"]
    assert "s3cret" not in repr(spans.fires)
