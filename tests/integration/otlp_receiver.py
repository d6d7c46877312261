"""A minimal OTLP/HTTP traces receiver on 127.0.0.1 for tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` (what OpenTelemetry's ``OTLPSpanExporter`` sends), decoded with
``opentelemetry-proto``; every span is kept as a :class:`Span` (ids as hex, as in a ``traceparent``)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True, slots=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service_instance: str


class OtlpReceiver:
    """Started on a free port; :attr:`endpoint` is the URL to export to; :meth:`close` stops it."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.posts = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def of_trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def take(self, body: bytes) -> None:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        out = []
        for rs in req.resource_spans:
            res = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(Span(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(), start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano, attributes={kv.key: _value(kv.value) for kv in s.attributes},
                        service_instance=str(res.get("service.instance.id", "")),
                    ))
        with self._lock:
            self.spans.extend(out)
            self.posts += 1

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _handler(rec: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_response(400)
                self.end_headers()
                return
            rec.take(body)
            out = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    return Handler


def main() -> None:
    """``python -m tests.integration.otlp_receiver``: serve, print the endpoint, and when standard
    input closes print how many spans arrived (benchmarks keep the receiver's CPU out of their own)."""
    import sys

    rec = OtlpReceiver()
    print(rec.endpoint, flush=True)
    sys.stdin.read()
    rec.close()
    print(len(rec.spans), flush=True)


if __name__ == "__main__":
    main()
