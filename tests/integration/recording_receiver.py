"""A recording callback receiver for scheduling tests: a keep-alive HTTP/1.1 server on 127.0.0.1.

Behaviour by path (the last path segment is a free-form tag tests use to tell tasks apart):
``/ok/TAG`` 200 ``ok``; ``/status/N/TAG`` answers N; ``/big/N/TAG`` 200 with N bytes ``0123456789...``;
``/flaky/K/TAG`` answers 500 to the first K requests of TAG, then 200; ``/slowfirst/MS/TAG`` answers
the first request of TAG 200 after MS ms (a callback still running when its worker is lost), later
ones at once; ``/slow/MS/TAG`` answers every request 200 after MS ms, and the receiver keeps how many
requests of each path prefix (all but the tag) it held at once (:meth:`RecordingReceiver.max_concurrent`);
``/throttle/S/K/TAG`` answers the first K requests of TAG ``429`` with ``Retry-After: S``;
``/noretry/N/TAG`` answers N with ``X-Molens-No-Retry: true`` (in-process receiver only). Every request is recorded with
its receive time (epoch ms), path, headers and body. Run in-process (:class:`RecordingReceiver`) or as
its own process (``python -m tests.integration.recording_receiver PORT OUT.jsonl [HOST]``: asyncio, a minimal
HTTP/1.1 parser, one JSON line per request, flushed every 50 ms) for the benchmarks, so the receiver is
neither slow nor competing with the benchmark's own threads.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any


@dataclass(frozen=True, slots=True)
class Received:
    at_ms: int
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str = ""
    """The sender's IP address (which node fired, where nodes have addresses of their own)."""

    @property
    def tag(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def kind(self) -> str:
        return self.headers.get("X-Molens-Kind", "")


def _answer(path: str, counts: collections.Counter[str]) -> tuple[int, bytes]:
    parts = path.strip("/").split("/")
    if parts[0] in ("status", "noretry") and len(parts) >= 2:
        return int(parts[1]), b'{"status": %s}' % parts[1].encode()
    if parts[0] == "big" and len(parts) >= 2:
        n = int(parts[1])
        return 200, (b"0123456789" * (n // 10 + 1))[:n]
    if parts[0] == "flaky" and len(parts) >= 2:
        counts[path] += 1
        return (500, b"not yet") if counts[path] <= int(parts[1]) else (200, b"ok")
    if parts[0] == "throttle" and len(parts) >= 3:
        counts[path] += 1
        return (429, b"slow down") if counts[path] <= int(parts[2]) else (200, b"ok")
    return 200, b"ok"


class ReceiverServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    """The listen backlog: it is set when the server binds, so it must be a class attribute (a burst
    of new connections from three workers' pools overflowed the default of 5: SYNs dropped, callbacks
    failing as network errors a second later)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection a worker reset (killed, frozen, cut off by a fault) is expected here, not a
        traceback on the console; anything else is printed as the standard library does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class RecordingReceiver:
    """In-process receiver thread; ``requests`` grows as callbacks arrive."""

    def __init__(self, out: IO[str] | None = None, port: int = 0, host: str = "127.0.0.1") -> None:
        self.requests: list[Received] = []
        self.lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._answered: collections.Counter[str] = collections.Counter()
        self._open: collections.Counter[str] = collections.Counter()
        self._max_open: collections.Counter[str] = collections.Counter()
        self._out = out
        self.host = host
        self.httpd = ReceiverServer((host, port), _handler(self))
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="recv", daemon=True
        )
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def record(self, r: Received) -> tuple[int, bytes, float]:
        """Records ``r``; returns the answer and how long to hold it (seconds)."""
        with self.lock:
            self.requests.append(r)
            code, body = _answer(r.path, self._counts)
            hold = 0.0
            parts = r.path.strip("/").split("/")
            if parts[0] == "slowfirst" and len(parts) >= 2:
                self._counts[r.path] += 1
                if self._counts[r.path] == 1:
                    hold = int(parts[1]) / 1000
            if parts[0] == "slow" and len(parts) >= 2:
                hold = int(parts[1]) / 1000
            prefix = r.path.rsplit("/", 1)[0]
            self._open[prefix] += 1
            self._max_open[prefix] = max(self._max_open[prefix], self._open[prefix])
            if self._out is not None:
                self._out.write(
                    json.dumps(
                        {
                            "at": r.at_ms,
                            "path": r.path,
                            "fire": r.headers.get("X-Fire-ID", ""),
                            "attempt": r.headers.get("X-Molens-Attempt", ""),
                            "kind": r.kind,
                            "body": r.body.decode(errors="replace"),
                        }
                    )
                    + "\n"
                )
        return code, body, hold

    def answered(self, tag: str) -> int:
        """How many requests of ``tag`` have had their answer written."""
        with self.lock:
            return self._answered[tag]

    def mark_answered(self, r: Received) -> None:
        with self.lock:
            self._answered[r.tag] += 1

    def closing(self, r: Received) -> None:
        """``r``'s answer is about to be written: it no longer counts as held (before the sender can
        have read the answer, so a limit of N in flight is never seen as N + 1)."""
        with self.lock:
            self._open[r.path.rsplit("/", 1)[0]] -= 1

    def max_concurrent(self, prefix: str) -> int:
        """The most requests under path ``prefix`` (a path without its tag) held at once."""
        with self.lock:
            return self._max_open[prefix]

    def by_tag(self, tag: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.tag == tag]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(rec: RecordingReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            at = time.time_ns() // 1_000_000
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            r = Received(at, self.path, {k: v for k, v in self.headers.items()}, body, self.client_address[0])
            code, answer, hold = rec.record(r)
            if hold:
                time.sleep(hold)  # the endpoint's own slowness, not a test waiting for an effect
            self.send_response(code)
            if code == 429 and r.path.startswith("/throttle/"):
                self.send_header("Retry-After", r.path.split("/")[2])
            if r.path.startswith("/noretry/"):  # the receiver ends this occurrence's retries
                self.send_header("X-Molens-No-Retry", "true")
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            rec.closing(r)
            self.wfile.write(answer)
            self.wfile.flush()
            rec.mark_answered(r)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


async def _serve_fast(port: int, out: IO[str], host: str = "127.0.0.1") -> None:
    """The same recording on asyncio with a minimal HTTP/1.1 parser: a few tens of µs per request,
    so the receiver is not what limits a benchmark (``http.server`` tops out near 1,300 requests/s)."""
    counts: collections.Counter[str] = collections.Counter()
    pending: list[str] = []

    async def flush() -> None:
        while True:
            await asyncio.sleep(0.05)
            if pending:
                out.write("".join(pending))
                out.flush()
                pending.clear()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                at = time.time_ns() // 1_000_000
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                body = await reader.readexactly(n) if n else b""
                code, answer = _answer(path, counts)
                pending.append(
                    json.dumps(
                        {
                            "at": at,
                            "path": path,
                            "fire": headers.get("x-fire-id", ""),
                            "attempt": headers.get("x-molens-attempt", ""),
                            "kind": headers.get("x-molens-kind", ""),
                            "body": body.decode(errors="replace"),
                        }
                    )
                    + "\n"
                )
                writer.write(
                    b"HTTP/1.1 %d X\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                    % (code, len(answer), answer)
                )
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port, backlog=1024)
    print(f"listening {port}", flush=True)
    task = asyncio.ensure_future(flush())
    async with server:
        await server.serve_forever()
    task.cancel()


def main(argv: list[str]) -> int:
    port, path = int(argv[0]), argv[1]
    host = argv[2] if len(argv) > 2 else "127.0.0.1"  # a container's receiver listens on its own network
    with open(path, "a", buffering=1 << 16) as out:
        try:
            asyncio.run(_serve_fast(port, out, host))
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
