"""A real HTTP/1.1 keep-alive server on 127.0.0.1 for delivery tests; behaviour picked by path.

Paths: ``/ok`` (200 "ok"), ``/status/N``, ``/bytes/N`` (200 with N bytes), ``/endless`` (chunked body
that never ends), ``/trickle`` (declares 1 MB, sends a byte at a time forever), ``/trickle-head``
(a status line, then a header a byte at a time forever), ``/hang`` (answers only
when released), ``/redirect`` (302 to /ok), ``/gate`` (counts concurrent requests, waits for the gate).
Every request is recorded (path, headers, body, client port). ``stop()`` releases everything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from .recording_receiver import ReceiverServer


@dataclass(frozen=True, slots=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int


class CallbackServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.gate = threading.Event()
        self.in_gate = 0
        self.max_in_gate = 0
        self.httpd = ReceiverServer(("127.0.0.1", 0), _make_handler(self))
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="callback-server", daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def recorded(self, path: str | None = None) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    def stop(self) -> None:
        self.stopping.set()
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def _make_handler(srv: CallbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n) if n else b""
            with srv.lock:
                srv.requests.append(Recorded(self.path, dict(self.headers.items()), body, self.client_address[1]))
            try:
                self._answer()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _send(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _answer(self) -> None:
            p = self.path
            if p == "/ok":
                self._send(200, b"ok")
            elif p.startswith("/status/"):
                self._send(int(p.rsplit("/", 1)[1]), b"status body")
            elif p.startswith("/bytes/"):
                n = int(p.rsplit("/", 1)[1])
                self.send_response(200)
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = bytes(range(256)) * 256
                sent = 0
                while sent < n and not srv.stopping.is_set():
                    part = chunk[: min(len(chunk), n - sent)]
                    self.wfile.write(part)
                    sent += len(part)
            elif p == "/endless":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                piece = b"x" * 8192
                while not srv.stopping.is_set():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            elif p == "/trickle":
                self.send_response(200)
                self.send_header("Content-Length", "1000000")
                self.end_headers()
                self.wfile.write(b"y" * 100)
                self.wfile.flush()
                while not srv.stopping.wait(0.02):
                    self.wfile.write(b"y")
                    self.wfile.flush()
            elif p == "/trickle-head":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                self.wfile.flush()
                while not srv.stopping.wait(0.02):
                    self.wfile.write(b"z")
                    self.wfile.flush()
            elif p == "/hang":
                srv.gate.wait(30)
                self._send(200, b"late")
            elif p == "/redirect":
                self._send(302, b"", {"Location": "/ok"})
            elif p == "/gate":
                with srv.lock:
                    srv.in_gate += 1
                    srv.max_in_gate = max(srv.max_in_gate, srv.in_gate)
                srv.gate.wait(30)
                with srv.lock:
                    srv.in_gate -= 1
                self._send(200, b"gated")
            else:
                self._send(404, b"no such path")

    return Handler
