"""Trace context of a task (W3C ``traceparent``) and the optional export of its spans over OTLP/HTTP
(docs/observability.md#traces).

A create may carry a ``traceparent`` (the body field, else the request's header); the task stores
it, and every request the task causes carries one in the same trace with a span id of its own:

- a callback or ACK attempt: :func:`attempt_traceparent`, whose span id is a hash of (fire id,
  kind, attempt), so a retry gets a new one and every node derives the same one without storing it;
- a failure notification: a random span id per POST (:func:`fresh_traceparent`).

Example: a create with ``traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01``
makes task ``01J...``; its second callback attempt carries
``00-4bf92f3577b34da6a3ce929d0e0e4736-<hash of 01J...-1, callback, 2>-01``.

With ``tracing.otlp_endpoint`` set (and the ``otel`` extra installed) a node exports the spans of a
traced task: ``molens.create`` (the API request, child of the creator's span), ``molens.commit``
(the Raft commit of the create), ``molens.fire`` (one per attempt: its span id is the one the
receiver saw) and ``molens.result`` (the commit of that attempt's result). Without the setting
:data:`NO_SPANS` stands in: nothing from OpenTelemetry is imported and every hook is one attribute
test on the fire path (``if spans.enabled``).

The span ids of ``molens.create`` and ``molens.commit`` are hashes of the task id as well, so the
worker that sends attempt 3 and the leader that commits its result (other nodes, maybe another term)
name their parent without asking anyone.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
"""What a stored ``traceparent`` is: W3C Trace Context version 00, lower-case hex."""
_TRACEPARENT = re.compile(TRACEPARENT_PATTERN[:-1] + r"\Z")
ZERO_TRACEPARENT = r"^00-(0{32}-|[0-9a-f]{32}-0{16}-)"
"""A ``traceparent`` whose trace id or parent id is all zeros: W3C Trace Context calls it invalid."""
_ZERO = re.compile(ZERO_TRACEPARENT)
_ZERO_SPAN = "0" * 16


def is_valid(tp: str) -> bool:
    """``tp`` is a version-00 ``traceparent`` whose trace id and parent id are not all zeros."""
    return bool(_TRACEPARENT.match(tp)) and not _ZERO.match(tp)


def span_id(*parts: str) -> str:
    """A span id (16 hex digits, never all zeros) that is a hash of ``parts``: the same on every node."""
    h = hashlib.blake2b(":".join(parts).encode(), digest_size=8).hexdigest()
    return h if h != _ZERO_SPAN else "0000000000000001"


def create_span_id(task_id: str) -> str:
    return span_id(task_id, "create")


def commit_span_id(task_id: str) -> str:
    return span_id(task_id, "commit")


def attempt_span_id(fire_id: str, kind: str, attempt: int) -> str:
    return span_id(fire_id, kind, str(attempt))


def attempt_traceparent(tp: str, fire_id: str, kind: str, attempt: int) -> str:
    """The ``traceparent`` header of one callback or ACK attempt of a task created with ``tp``."""
    return f"00-{tp[3:35]}-{attempt_span_id(fire_id, kind, attempt)}-{tp[53:55]}"


def span_url(url: str) -> str:
    """A callback URL as a span carries it (``url.full``): the value of every query parameter
    replaced by ``REDACTED`` (OpenTelemetry's HTTP conventions: a query often carries a token, and
    a trace backend is read more widely than the task); user info never reaches here (the API
    refuses it). The path goes as it is."""
    base, sep, query = url.partition("?")
    if not sep:
        return url
    query = query.partition("#")[0]
    parts = [p.partition("=")[0] + "=REDACTED" if "=" in p else p for p in query.split("&")]
    return base + "?" + "&".join(parts)


def fresh_traceparent(tp: str) -> str:
    """``tp``'s trace with a new random span id (a notification POST)."""
    return f"00-{tp[3:35]}-{random.getrandbits(64) or 1:016x}-{tp[53:55]}"


class Spans:
    """Where a node's spans go: nowhere (this class, :data:`NO_SPANS`) or an OTLP/HTTP endpoint
    (:class:`OtlpSpans`). Times are epoch nanoseconds; ``tp`` is the task's stored ``traceparent``."""

    enabled = False

    def create(self, tp: str, task_id: str, start_ns: int, commit_ns: int, end_ns: int,
               attrs: Mapping[str, Any]) -> None:
        """The create request (``start_ns``..``end_ns``) and, inside it, its commit (``commit_ns``..)."""

    def fire(self, tp: str, task_id: str, fire_id: str, kind: str, attempt: int, start_ns: int, end_ns: int,
             attrs: Mapping[str, Any]) -> None:
        """One callback or ACK attempt, as the worker that sent it saw it."""

    def result(self, tp: str, fire_id: str, kind: str, attempt: int, start_ns: int, end_ns: int,
               attrs: Mapping[str, Any]) -> None:
        """The commit of one attempt's result (proposed at ``start_ns``, committed at ``end_ns``)."""

    def shutdown(self) -> None:
        """Export what is buffered and stop (a node stopping)."""


NO_SPANS = Spans()


class OtlpSpans(Spans):
    """Spans handed to OpenTelemetry's ``BatchSpanProcessor`` and ``OTLPSpanExporter`` (protobuf
    over HTTP). Built as finished ``ReadableSpan`` records with the ids above, not through a
    tracer: the ids must be the ones the receivers saw, and a span's start may be on another node."""

    enabled = True

    def __init__(self, endpoint: str, node_id: str, timeout_s: float = 10.0) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

        from molens import __version__

        self._ReadableSpan, self._SpanContext, self._TraceFlags = ReadableSpan, SpanContext, TraceFlags
        self._internal, self._client = SpanKind.INTERNAL, SpanKind.CLIENT
        self._resource = Resource.create(
            {"service.name": "molens", "service.version": __version__, "service.instance.id": node_id}
        )
        self._scope = InstrumentationScope("molens", __version__)
        # a queue of 16k spans rides out a burst of fires (the SDK's 2,048 is 1 s at 1,000 fires/s);
        # past it spans are dropped (and logged by the SDK), never the fires
        self._processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s),
                                             max_queue_size=16_384, schedule_delay_millis=1_000)

    def _ctx(self, trace: str, span: str, flags: str, remote: bool = False) -> Any:
        return self._SpanContext(int(trace, 16), int(span, 16), is_remote=remote,
                                 trace_flags=self._TraceFlags(int(flags, 16)))

    def _emit(self, name: str, tp: str, span: str, parent: str, start_ns: int, end_ns: int,
              attrs: Mapping[str, Any], *, client: bool = False, remote_parent: bool = False) -> None:
        trace, flags = tp[3:35], tp[53:55]
        self._processor.on_end(self._ReadableSpan(
            name, context=self._ctx(trace, span, flags), parent=self._ctx(trace, parent, flags, remote_parent),
            resource=self._resource, attributes=dict(attrs), kind=self._client if client else self._internal,
            start_time=start_ns, end_time=max(start_ns, end_ns), instrumentation_scope=self._scope,
        ))

    def create(self, tp: str, task_id: str, start_ns: int, commit_ns: int, end_ns: int,
               attrs: Mapping[str, Any]) -> None:
        c = create_span_id(task_id)
        self._emit("molens.create", tp, c, tp[36:52], start_ns, end_ns, attrs, remote_parent=True)
        self._emit("molens.commit", tp, commit_span_id(task_id), c, commit_ns, end_ns, attrs)

    def fire(self, tp: str, task_id: str, fire_id: str, kind: str, attempt: int, start_ns: int, end_ns: int,
             attrs: Mapping[str, Any]) -> None:
        self._emit("molens.fire", tp, attempt_span_id(fire_id, kind, attempt), create_span_id(task_id),
                   start_ns, end_ns, attrs, client=True)

    def result(self, tp: str, fire_id: str, kind: str, attempt: int, start_ns: int, end_ns: int,
               attrs: Mapping[str, Any]) -> None:
        a = attempt_span_id(fire_id, kind, attempt)
        self._emit("molens.result", tp, span_id(a, "result"), a, start_ns, end_ns, attrs)

    def shutdown(self) -> None:
        self._processor.shutdown()  # type: ignore[no-untyped-call]


def open_spans(otlp_endpoint: str, node_id: str) -> Spans:
    """:data:`NO_SPANS` when ``otlp_endpoint`` is empty, else an :class:`OtlpSpans` exporting to it;
    ``ImportError`` naming the ``otel`` extra when OpenTelemetry is not installed."""
    if not otlp_endpoint:
        return NO_SPANS
    try:
        spans = OtlpSpans(otlp_endpoint, node_id)
    except ImportError as exc:
        raise ImportError(
            f"tracing.otlp_endpoint is set but OpenTelemetry is not installed ({exc}): "
            "pip install 'molens[server,otel]'"
        ) from exc
    scheme, sep, rest = otlp_endpoint.partition("://")
    host, at, path = rest.partition("/")
    shown = f"{scheme}{sep}{host.rpartition('@')[2]}{at}{path}"  # any user:password@ left out
    log.info("tracing: spans of traced tasks go to %s (OTLP/HTTP)", shown)
    return spans


__all__ = [
    "NO_SPANS", "TRACEPARENT_PATTERN", "ZERO_TRACEPARENT", "OtlpSpans", "Spans", "attempt_span_id", "attempt_traceparent",
    "commit_span_id", "create_span_id", "fresh_traceparent", "is_valid", "open_spans", "span_id", "span_url",
]
