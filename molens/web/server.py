"""Serving the REST app with waitress: bounded bodies, a thread pool, a clean stop.

:class:`ApiServer` binds at construction (so a port conflict fails at start, and port 0 picks a
free one), runs waitress's event loop on its own thread, and :meth:`ApiServer.stop` stops accepting,
lets requests in progress finish (bounded), then closes every connection and joins the worker
threads. ``threads`` bounds concurrent requests; the built-in test endpoints hold a thread for
100 ms each, so size it for the callback rate they must absorb.

HTTP framing is strict: a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused
with 400 and its connection closed (RFC 9112 section 6.3: a proxy in front that trusted the length
would otherwise see a different next request than waitress does: request smuggling); waitress
itself refuses duplicate or invalid ``Content-Length`` and unknown transfer codings, and closes the
connection after each of its own errors. Those errors (400, 413, 431, 501 for requests it cannot
parse) carry the API's JSON error body too, code ``http_error`` (:class:`_JsonErrorTask`), but for
a body past the size limit: ``body_too_large``, as the app answers it.

``python -m molens.web.server --data-dir DIR [--port P]`` serves the API over a
:class:`~molens.web.local_context.LocalContext` (no Raft, nothing fires): for the SDK's tests, the
ingest benchmark and API development.
"""

from __future__ import annotations

import argparse
import io
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import bottle
from waitress import wasyncore
from waitress.buffers import ReadOnlyFileBasedBuffer
from waitress.channel import ClientDisconnected
from waitress.server import create_server
from waitress.task import ErrorTask, WSGITask

from molens.config import HttpConfig
from molens.web.edge import SWEEP_MAX, EdgeChannel, error_body, sweep

log = logging.getLogger(__name__)

SEND_CHUNK = 1 << 20
"""Most bytes one ``send()`` is offered: the kernel takes what its (auto-tuned) buffer holds."""

SWEEP_S = 0.2
"""How often the I/O loop checks the edge's deadlines: a deadline is carried out at most this much
(plus one loop pass, at most 0.2 s when idle) after it passed."""

JOIN_LIMIT = 64 << 10
"""Largest body joined to its status line and headers (one copy, one send); a larger one is sent
from its own bytes. Not waitress's ``send_bytes``: that is 1 (flush at once), which would leave
every answer in two sends."""


class _JsonErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's own error answers in the API's error shape (it closes the connection after)."""

    def execute(self) -> None:
        e = self.request.error
        limit = getattr(self.channel.server, "molens_max_body", None)
        if e.code == 413 and limit is not None:  # a chunked body past the limit: the app's own 413
            code, message = "body_too_large", f"request body is more than {limit} bytes"
        else:
            code, message = "http_error", f"{e.reason}: {e.body}"[:300]
        body = error_body(code, message, "body" if code == "body_too_large" else None)
        self.status = f"{e.code} {e.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class _OneSendTask(WSGITask):  # type: ignore[misc]
    """A WSGI task whose status line and headers go out with the first piece of the body, in one
    send (waitress sends them apart: two syscalls, two TCP segments, two wake-ups of the client).

    A body of :data:`JOIN_LIMIT` or more (a batch create answers half a megabyte) is neither joined to
    the headers nor copied into the output buffer: it is queued as a read-only buffer of its own
    (as waitress queues ``wsgi.file_wrapper``), sent from the bytes themselves, the headers in a
    send of their own just before it."""

    def write(self, data: bytes) -> None:
        if self.wrote_header or not data:
            super().write(data)
            return
        ch = self.channel
        ch.held = []
        try:
            super().write(data)
        finally:
            held, ch.held = ch.held, None
            if len(held) > 1 and len(held[-1]) >= JOIN_LIMIT:
                body = ReadOnlyFileBasedBuffer(io.BytesIO(held[-1]))  # BytesIO shares the bytes
                body.prepare()
                ch.write_all_soon([b"".join(held[:-1]), body])
            elif held:
                ch.write_soon(b"".join(held))


class _StrictChannel(EdgeChannel):
    """waitress's channel with strict framing, JSON errors, and an I/O loop that keeps off the
    output while a task thread writes it.

    A task thread sends its answer itself (``write_soon`` appends to the output buffer and sends at
    once, holding the buffer's lock). waitress's ``writable`` says yes as soon as the buffer holds a
    byte, so in the window between the append and the send (long when the writer waits for the GIL)
    the loop polled the socket for POLLOUT, found it writable at once, failed to take the lock and
    went round again, several loop passes (each over every connection) per answer instead of one
    (docs/architecture.md#http-server). Here the loop leaves the output to the writer while it writes, and the writer wakes the loop
    for whatever it could not send (a full socket buffer), after it let go of the lock. Above the
    high watermark the writer waits for the loop to drain, so the loop flushes then as before."""

    error_task_class = _JsonErrorTask
    task_class = _OneSendTask
    _task_writing = False
    held: list[bytes] | None = None
    """Set by :class:`_OneSendTask` while it writes: what it writes is collected and sent at once."""

    def writable(self) -> bool:
        # waitress's rule (output waiting, or a close to carry out), minus output a task thread is
        # sending below the high watermark; asked of every connection on every loop pass
        if self.will_close or self.close_when_flushed:
            return True
        n = self.total_outbufs_len
        return bool(n) and (not self._task_writing or n > self.adj.outbuf_high_watermark)

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        # waitress sends at most SO_SNDBUF's initial value per send() (16 KiB here, though the kernel
        # grows the buffer): 30 syscalls for a batch answer
        self.sendbuf_len: int = max(int(self.sendbuf_len), SEND_CHUNK)

    def write_soon(self, data: Any) -> int:
        if self.held is not None and isinstance(data, bytes):
            if not self.connected:
                raise ClientDisconnected
            self.held.append(data)
            return len(data)
        return self.write_all_soon([data])

    def write_all_soon(self, pieces: list[Any]) -> int:
        """``write_soon`` of each piece in turn, the loop kept off the output until the last is in."""
        self._task_writing = True
        try:
            return sum(int(super(_StrictChannel, self).write_soon(p)) for p in pieces)
        finally:
            self._task_writing = False
            if self.total_outbufs_len and self.connected:
                self.server.pull_trigger()


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """A server's ``http`` section (address, body and connection limits, the edge's limits) and how
    it runs."""

    http: HttpConfig = field(default_factory=HttpConfig)
    threads: int = 16
    stop_grace_s: float = 5.0


class ApiServer:
    """A waitress server for one WSGI app on one address (see the module docstring)."""

    def __init__(self, app: bottle.Bottle, options: ServerOptions | None = None) -> None:
        self.options = o = options or ServerOptions()
        # waitress warns "Task queue depth is N" on every burst of more requests than threads: noise
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        self._map: dict[int, Any] = {}
        self._server = create_server(
            app,
            map=self._map,
            host=o.http.host,
            port=o.http.port,
            threads=o.threads,
            # waitress's own 413 guards chunked bodies; the app answers JSON 413 by Content-Length first
            max_request_body_size=o.http.max_body_bytes + 1024,
            connection_limit=o.http.max_connections,
            # the edge's own checks come first (molens/web/edge.py); waitress's are the backstop
            max_request_header_size=o.http.max_head_bytes + 1024,
            channel_timeout=max(1, o.http.keepalive_timeout_ms // 1000),
            ident="molens",
            clear_untrusted_proxy_headers=True,
            expose_tracebacks=False,
            asyncore_use_poll=True,
        )
        self._server.channel_class = _StrictChannel
        self._server.adj.molens_edge = o.http  # what the edge's parser and channels read
        self._server.molens_clients = {}  # open connections per client address
        self._next_sweep = 0.0
        self._server.molens_max_body = o.http.max_body_bytes  # what _JsonErrorTask's 413 names
        self._server.pull_trigger = self._pull_trigger  # what waitress's channels call
        self._wake_pending = False
        self.port: int = self._server.effective_port
        self.host: str = o.http.host
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> ApiServer:
        self._thread = threading.Thread(target=self._run, name=f"http-{self.port}", daemon=True)
        self._thread.start()
        log.info("http api listening url=%s threads=%d", self.url, self.options.threads)
        return self

    def _pull_trigger(self) -> None:
        """Wake the I/O loop so it looks at every connection again, unless a wake-up is already on its
        way: the loop clears :attr:`_wake_pending` before each pass, so a pass after any skipped
        pull sees what that pull meant to show (a task thread pulls after each answer: most pulls
        of a busy server find the loop not yet round, and each write is a syscall that lets go of
        the GIL)."""
        if self._wake_pending:
            return
        self._wake_pending = True
        self._server.trigger.pull_trigger()

    def _pass(self, timeout: float) -> None:
        self._wake_pending = False
        wasyncore.loop(timeout=timeout, map=self._map, use_poll=True, count=1)
        now = time.monotonic()
        if now >= self._next_sweep:  # the edge's deadlines (molens/web/edge.py), a few times a second
            ended = sweep(list(self._map.values()), now)
            self._next_sweep = now if ended >= SWEEP_MAX else now + SWEEP_S  # more due: again next pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._pass(SWEEP_S)
        # graceful: no new connections; let requests in progress finish and their answers go out
        srv = self._server
        srv.accepting = False
        disp = srv.task_dispatcher
        deadline = time.monotonic() + self.options.stop_grace_s
        while time.monotonic() < deadline:
            pending_out = any(getattr(ch, "total_outbufs_len", 0) > 0 for ch in list(self._map.values()))
            if not self.requests_in_progress() and not disp.queue and not pending_out:
                break
            self._pass(0.05)
        disp.shutdown(cancel_pending=True, timeout=self.options.stop_grace_s)
        wasyncore.close_all(self._map)

    def requests_in_progress(self) -> int:
        """Requests read and not yet answered (queued or running), over all connections."""
        return sum(len(getattr(ch, "requests", ()) or ()) for ch in list(self._map.values()))

    def stop(self) -> None:
        """Stop accepting, finish what is in progress (bounded), close everything. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            try:
                self._server.trigger.pull_trigger()
            except OSError:
                pass
            self._thread.join(timeout=self.options.stop_grace_s * 2 + 5)
            self._thread = None
        else:
            self._server.task_dispatcher.shutdown(timeout=1)
            wasyncore.close_all(self._map)
        log.info("http api stopped url=%s", self.url)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Serve the API over a LocalContext until SIGTERM/SIGINT; prints ``listening URL``."""
    from molens.web.api_context import ApiSettings
    from molens.web.app import make_app
    from molens.web.local_context import LocalContext

    ap = argparse.ArgumentParser(prog="python -m molens.web.server", description=__doc__)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18081)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--token", default="")
    ap.add_argument("--durable", action="store_true", help="fsync every applied batch")
    ap.add_argument("--role", default="leader", help="answer as this role (tests): leader|follower|candidate")
    ap.add_argument("--leader-url", default=None, help="with --role follower: the leader's base URL")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    ctx = LocalContext(args.data_dir, ApiSettings(auth_token=args.token), durable=args.durable)
    ctx.role = args.role
    ctx.leader_url = args.leader_url
    server = ApiServer(make_app(ctx), ServerOptions(HttpConfig(host=args.host, port=args.port), threads=args.threads))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    print(f"listening {server.url}", flush=True)
    stop.wait()
    server.stop()
    ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
