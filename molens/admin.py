"""The ZeroMQ admin socket: one JSON request, one JSON reply (docs/deploy.md#admin-socket).

Request ``{"cmd": "status" | "stop" | "transfer_leader" | "snapshot" | "digest" | "add_node" | "remove_node" |
"reload_keys" | "stats" | "actors" | "propose" | "fault", ...}``; reply ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. A
request carrying ``"id"`` gets it echoed in the reply. A request that does not decode to such an object
(malformed, or nested deeper than the decoder goes) is answered ``"bad request: ..."``; one over
:data:`MAX_REQUEST_BYTES` has its connection dropped by ZeroMQ. The socket has no authentication: a
bind off loopback is logged as a warning.

The server binds a ROUTER, which is wire-compatible with REQ clients (a REQ client sees exactly REP
behaviour) but lets a handler answer later: a handler returns a dict, or a
``concurrent.futures.Future`` of one (e.g. a proposal waiting for commit). Slow answers therefore do
not hold up ``status``, and DEALER clients may pipeline many requests (benchmarks do).

:class:`AdminClient` is the blocking REQ client used by the CLI, with a timeout.
"""

from __future__ import annotations

import collections
import ipaddress
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import zmq

from molens.config import zmq_endpoint
from molens.errors import MolensError

log = logging.getLogger(__name__)

Reply = dict[str, Any]

REPLY_HWM = 100_000
"""Replies queued towards one admin client before new ones are dropped (and logged)."""
MAX_DEFERRED = 5_000
"""Requests waiting for a deferred answer (e.g. proposals) before the server stops reading more."""
RECV_BATCH = 64
"""Requests read per loop turn, so finished answers go out between bursts."""
MAX_REQUEST_BYTES = 64 * 1024 * 1024
"""Largest request frame read (``zmq.MAXMSGSIZE``; ZeroMQ drops the connection of a larger one).
The largest legitimate request is a ``propose`` of raw entries (base64); this is the Raft
transport's own bound on a message (``TransportConfig.max_message_bytes``), so no entry the
cluster could replicate is refused here. Every other command is a few hundred bytes."""
Handler = Callable[[dict[str, Any]], "Reply | Future[Reply]"]


class AdminError(MolensError):
    """The admin socket could not be reached or answered badly."""


class AdminServer:
    """Serves admin requests on ``bind_addr`` from its own thread until :meth:`close`."""

    def __init__(
        self,
        bind_addr: str,
        handler: Handler,
        ctx: zmq.Context[Any] | None = None,
        max_deferred: int = MAX_DEFERRED,
    ) -> None:
        self._handler = handler
        self.max_deferred = max_deferred
        self._deferred = 0
        self._ctx = ctx or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        # replies are bounded by the requests a client has in flight; a ROUTER at its HWM drops
        # silently, so allow plenty and make a drop visible (ROUTER_MANDATORY raises instead)
        self._sock.setsockopt(zmq.SNDHWM, REPLY_HWM)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        try:
            self._sock.bind(zmq_endpoint(bind_addr))
        except zmq.ZMQError as exc:
            self._sock.close()
            raise AdminError(f"cannot bind admin socket {bind_addr}: {exc}") from exc
        self.bind_addr = bind_addr
        bound = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if not _is_loopback(bound):
            log.warning(
                "admin socket bound off loopback addr=%s: it has no authentication, and anyone who reaches it "
                "can stop this node and change the cluster's membership; keep it on 127.0.0.1 or a trusted network",
                bound,
            )
        self._done: collections.deque[tuple[list[bytes], Reply]] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        self._signaled = False
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="admin", daemon=True)

    def start(self) -> AdminServer:
        self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._sock.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    # --- I/O thread ------------------------------------------------------------------------------
    def _wake(self) -> None:
        if self._signaled:  # one pending wake-up is enough (the I/O thread drains everything)
            return
        self._signaled = True
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # pipe full (a wake-up is already pending) or closed

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        reading = True
        while not self._stop.is_set():
            # backpressure: with max_deferred answers outstanding, stop reading requests (clients'
            # sends then block in ZeroMQ) instead of queueing unbounded work behind the node
            want = self._deferred < self.max_deferred
            if want != reading:
                poller.modify(self._sock, zmq.POLLIN if want else 0)
                reading = want
            events = dict(poller.poll(1000))
            if self._wake_r in events:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
                # cleared after reading the pipe and before draining: a completion from now on
                # writes a fresh byte; one before is drained below (clearing first could leave
                # the flag set with the pipe empty, and the next answer waiting for the poll timeout)
                self._signaled = False
            while self._done:
                envelope, reply = self._done.popleft()
                self._deferred -= 1
                self._send(envelope, reply)
            if reading and self._sock in events:
                for _ in range(RECV_BATCH):
                    if self._deferred >= self.max_deferred:
                        break
                    try:
                        frames = self._sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    try:
                        self._on_request(frames)
                    except Exception:  # one request must never end the thread (the socket would stay bound, mute)
                        log.exception("admin request failed")
                time.sleep(0)  # yield the GIL: a request flood must not starve the Raft actor
        # answer what finished while stopping (e.g. the reply to "stop")
        while self._done:
            envelope, reply = self._done.popleft()
            self._send(envelope, reply)

    def _send(self, envelope: list[bytes], reply: Reply) -> None:
        try:
            body = json.dumps(reply, separators=(",", ":"), default=str).encode()
        except (ValueError, TypeError, RecursionError) as exc:  # e.g. an echoed "id" nested too deep to encode
            body = json.dumps({"ok": False, "error": f"bad request: reply not encodable: {exc}"}).encode()
        try:
            self._sock.send_multipart([*envelope, body], zmq.NOBLOCK)
        except zmq.Again:
            log.warning("admin reply dropped: client is not reading (%d replies queued)", REPLY_HWM)
        except zmq.ZMQError as exc:
            log.debug("admin reply dropped: %s (client gone)", exc)

    def _on_request(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            return
        envelope, body = frames[:-1], frames[-1]
        try:
            req = json.loads(body)
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise ValueError('expected a JSON object with a string "cmd"')
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the decoder's stack
            self._send(envelope, {"ok": False, "error": f"bad request: {exc}"})
            return
        rid = req.get("id")
        try:
            result = self._handler(req)
        except Exception as exc:
            log.exception("admin cmd=%s failed", req.get("cmd"))
            result = {"ok": False, "error": f"internal error: {exc}"}
        if isinstance(result, Future):
            self._deferred += 1
            result.add_done_callback(lambda f: self._finish(envelope, rid, f))
        else:
            self._send(envelope, _with_id(result, rid))

    def _finish(self, envelope: list[bytes], rid: Any, fut: Future[Reply]) -> None:
        try:
            reply = fut.result()
        except Exception as exc:
            reply = {"ok": False, "error": f"internal error: {exc}"}
        self._done.append((envelope, _with_id(reply, rid)))
        self._wake()


def _with_id(reply: Reply, rid: Any) -> Reply:
    if rid is None:
        return reply
    return {**reply, "id": rid}


def _is_loopback(endpoint: str) -> bool:
    """Whether a bound ZeroMQ endpoint (``tcp://127.0.0.1:18111``, ``tcp://[::1]:18111``) is on loopback."""
    host = endpoint.removeprefix("tcp://").rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AdminClient:
    """Blocking client: ``AdminClient("127.0.0.1:18111").call("status")``. One thread at a time
    (it owns a ZeroMQ socket); give each thread its own client."""

    def __init__(self, addr: str, timeout_s: float = 5.0, ctx: zmq.Context[Any] | None = None) -> None:
        self.addr = addr
        self.timeout_s = timeout_s
        self._ctx = ctx or zmq.Context.instance()
        self._sock: zmq.Socket[Any] | None = None

    def _socket(self) -> zmq.Socket[Any]:
        if self._sock is None:
            s = self._ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, int(self.timeout_s * 1000))
            s.connect(zmq_endpoint(self.addr))
            self._sock = s
        return self._sock

    def request(self, req: dict[str, Any], timeout_s: float | None = None) -> Reply:
        """Send ``req`` and return the reply dict (``ok`` may be false); AdminError when no answer."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        sock = self._socket()
        try:
            sock.send(json.dumps(req).encode())
            if not sock.poll(int(timeout * 1000), zmq.POLLIN):
                raise AdminError(f"no answer from admin socket {self.addr} within {timeout:g} s")
            reply = json.loads(sock.recv())
        except (AdminError, zmq.ZMQError, ValueError) as exc:
            self.close()  # a REQ socket is stuck after a lost reply: start afresh next time
            if isinstance(exc, AdminError):
                raise
            raise AdminError(f"admin socket {self.addr}: {exc}") from exc
        if not isinstance(reply, dict):
            raise AdminError(f"admin socket {self.addr}: reply is not a JSON object")
        return reply

    def call(self, cmd: str, timeout_s: float | None = None, **args: Any) -> Reply:
        """``request({"cmd": cmd, **args})``; raises AdminError when the reply is not ok."""
        reply = self.request({"cmd": cmd, **args}, timeout_s)
        if not reply.get("ok"):
            msg = str(reply.get("error", "request failed"))
            if reply.get("detail"):
                msg += f": {reply['detail']}"
            if reply.get("leader_id"):
                msg += f" (leader {reply['leader_id']})"
            raise AdminError(msg)
        return reply

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
