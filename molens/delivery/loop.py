"""FireLoop: the fire pool's ``http://`` attempts on one thread, with non-blocking sockets and a selector.

Why (docs/architecture.md#fire-loop): a blocking urllib3 POST costs 400-550 us of CPU per fire on
this machine's Python -- urllib3's layers and, mostly, one thread per attempt handing the GIL back
and forth -- the largest single cost of a fire. One thread waiting on many sockets at once and
parsing just the status line and the few headers the rules need costs 20-60 us per attempt. The
rules of an attempt are the same as ``Deliverer.deliver``'s (``molens.delivery``, which builds the
headers and classifies the answer for both); what changes is who waits.

- **Connections**: the host is resolved and every address checked against the callback host
  policy as on the urllib3 path (``molens.delivery.vetted_resolve``) -- on the loop for an IP
  literal, by a few resolver threads (``connect_threads``) for a name, so a slow DNS answer never
  stalls the loop -- then the loop connects without blocking to those same addresses in order
  (the next one when one refuses). A receiver that never answers a SYN holds only its own
  attempts (each until its budget), never another host's. An open connection is kept per
  ``(host, port)`` for reuse (at most ``concurrency`` idle per host) and watched while idle: a peer
  that closes it is noticed and the socket dropped before it could be reused.
- **One attempt** = the request bytes (request line, ``Host``, ``Accept-Encoding: identity``,
  ``Content-Length``, the Deliverer's headers, the body) written as the socket accepts them, then
  the answer read: interim 1xx answers skipped, the status line and headers (at most
  :data:`MAX_HEAD_BYTES`), then the body by ``Content-Length``, chunked transfer coding, or until
  the peer closes. The first ``head_limit`` bytes of the body are kept, up to ``drain_limit`` more
  read and dropped; a longer body ends the attempt there and closes the connection.
- **Time**: the attempt's budget (its ``timeout_ms``, less if its deadline is nearer) covers
  connecting, sending and reading. Past it: ``timeout`` when no status line had arrived, otherwise
  the status that did arrive (the receiver has answered; retrying a 2xx would deliver twice), and
  the connection is closed either way.
- A connection that fails before a status line is a ``network_error``; after one, the answer
  stands and the connection is closed.
- **Tick** (``tick_ms``, ``worker.loop_tick_ms``): the loop makes at most one pass per tick --
  fires that came due and answers that arrived meanwhile are handled together. Paced fires (each
  held for its own due time, a few ms apart) otherwise cost a pass each for the request and one
  for the answer, and a pass's wake-up costs this VM more than the POST itself: 1,000 paced fires/s
  took 131-150 us of CPU each without a tick and 81-102 with 2-3 ms. The price: a fire goes out up
  to one tick after its due time (never before), and an answer is read up to one tick after it
  arrived, so ``latency_ms`` is exact to the tick. 0 = no tick (every event at once).

``https://`` attempts are not carried here: ``FirePool`` gives them to a few threads running the
urllib3 path (TLS, SNI and certificate checks as before).
"""

from __future__ import annotations

import collections
import errno
import heapq
import ipaddress
import itertools
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from molens.delivery import (
    NO_RETRY_HEADER,
    THROTTLE_STATUSES,
    CallbackDenied,
    Deliverer,
    DeliveryOutcome,
    FireRequest,
    FireResult,
    elapsed_ms,
    outcome_for_status,
    retry_after_ms,
    vetted_resolve,
)
from molens.errors import MolensError

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
"""Status line + headers of one answer; more is a ``network_error`` (and the connection closed)."""
_RECV = 65536
_NO_RETRY = NO_RETRY_HEADER.lower().encode()


class _Conn:
    """One keep-alive connection; ``ex`` is the attempt using it (None while idle)."""

    __slots__ = ("closed", "dialing", "events", "ex", "key", "sock")

    def __init__(self, sock: socket.socket, key: tuple[str, int]) -> None:
        self.sock = sock
        self.key = key
        self.ex: _Exchange | None = None
        self.events = 0
        self.closed = False
        self.dialing: list[tuple[Any, ...]] | None = None
        """While connecting: the addresses still to try after this one (None once connected)."""


class _Exchange:
    """One attempt in flight: the request still to write and what has been read of the answer."""

    __slots__ = (
        "buf",
        "chunk_left",
        "close_after",
        "conn",
        "deadline",
        "done",
        "drained",
        "head",
        "headers",
        "key",
        "latency_ms",
        "left",
        "mode",
        "out",
        "req",
        "seq",
        "start",
        "status",
    )

    def __init__(self, req: FireRequest, start: float, deadline: float, key: tuple[str, int], out: bytes, seq: int) -> None:
        self.req = req
        self.start = start
        self.deadline = deadline
        self.key = key
        self.seq = seq
        self.conn: _Conn | None = None
        self.out = memoryview(out)
        self.buf = bytearray()
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        self.head = bytearray()
        self.left = 0
        """length mode: body bytes still to come."""
        self.mode: str = ""
        """"" before the status line; then "length", "chunked" or "close" (until the peer closes)."""
        self.chunk_left = -1
        """chunked mode: bytes left of the current chunk (+2 for its CRLF); -1 = at a size line; -2 = in trailers."""
        self.drained = 0
        self.close_after = False
        self.latency_ms = -1.0
        self.done = False


class _Malformed(MolensError):
    """An answer that is not HTTP/1.x as this loop reads it (caught in this module: a network error)."""


class NameResolutionError(MolensError):
    """The callback host's name did not resolve (named as urllib3 names it, for the same error text)."""


class FireLoop:
    """Carries out ``http://`` attempts on one thread (see the module docstring).

    ``take(limit)`` is called on the loop thread to get new work (at most ``limit`` requests) and
    the ms until more may be ready without a ``wake()`` (fires held for their time; None: never);
    ``finish(req, result_or_None)`` is called on it for every request taken (None: not sent, its
    deadline had passed). ``start()`` / ``stop()``; ``wake()`` is safe from any thread.
    ``tick_ms``: at most one pass per tick (module docstring); ``passes`` counts them."""

    def __init__(
        self,
        deliverer: Deliverer,
        concurrency: int,
        take: Callable[[int], tuple[list[FireRequest], int | None]],
        finish: Callable[[FireRequest, FireResult | None], None],
        wall_ms: Callable[[], int],
        name: str = "fireworker",
        connect_threads: int = 4,
        tick_ms: float = 0.0,
    ) -> None:
        self._d = deliverer
        self._tick_s = max(0.0, tick_ms) / 1000.0
        self.concurrency = concurrency
        self._take = take
        self._finish = finish
        self._wall_ms = wall_ms
        self._name = name
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._woken = threading.Event()
        self._connect_q: queue.SimpleQueue[tuple[_Exchange, str, int] | None] = queue.SimpleQueue()
        """Names to resolve (a resolver thread each), with the attempt waiting for them."""
        self._connectors = [
            threading.Thread(target=self._run_connector, name=f"{name}-connect-{i}", daemon=True)
            for i in range(max(1, connect_threads))
        ]
        self._resolved: collections.deque[tuple[_Exchange, list[tuple[Any, ...]] | None, BaseException | None]] = (
            collections.deque()
        )
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._active = 0
        self._timers: list[tuple[float, int, _Exchange]] = []
        self._seq = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.opened = 0
        """Connections opened so far (for tests and stats: keep-alive reuse shows as few)."""
        self.passes = 0
        """Selector passes so far (with a tick: at most one per tick while busy)."""

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self._name}-loop", daemon=True)
        self._thread.start()
        for t in self._connectors:
            t.start()

    def stop(self, timeout_s: float) -> bool:
        """Finish the attempts in flight (each within its own budget), then end. True when it ended."""
        end = time.monotonic() + timeout_s
        self._stopping = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout_s)
        for _ in self._connectors:
            self._connect_q.put(None)
        for t in self._connectors:
            if t.ident is not None:
                t.join(max(0.0, end - time.monotonic()))
        alive = [t for t in (self._thread, *self._connectors) if t is not None and t.is_alive()]
        if not alive:
            self._close_all()
        return not alive

    def wake(self) -> None:
        if not self._woken.is_set():
            self._woken.set()
            try:
                os.write(self._wake_w, b"x")
            except (BlockingIOError, OSError):
                pass

    @property
    def active(self) -> int:
        return self._active

    # --- the loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        sel = self._sel
        tick = self._tick_s
        woke = time.monotonic()
        while True:
            self._woken.clear()
            ready_in_ms: int | None = None
            while True:  # again when some ended at once (expired, bad URL)
                batch, ready_in_ms = self._take(max(0, self.concurrency - self._active))
                if not batch:
                    break
                for req in batch:
                    self._begin(req)
            while self._resolved:
                self._dial(*self._resolved.popleft())
            if self._stopping and self._active == 0:
                return
            timers = self._timers
            while timers and timers[0][2].done:
                heapq.heappop(timers)
            wait = max(0.0, timers[0][0] - time.monotonic()) if timers else None
            if ready_in_ms is not None:
                held_s = max(0.0, ready_in_ms / 1000.0)
                wait = held_s if wait is None else min(wait, held_s)
            if self._stopping and wait is None:
                wait = 0.05
            if tick:
                # at most one pass per tick: what came due or arrived meanwhile is handled together
                # (a thread's wake-up costs more CPU here than a POST's own work)
                rest = woke + tick - time.monotonic()
                if rest > 0.0:
                    time.sleep(rest)
                    if wait is not None:
                        wait = max(0.0, wait - rest)
            events = sel.select(wait)
            woke = time.monotonic()
            self.passes += 1
            for key, mask in events:
                conn = key.data
                if conn is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                if conn.dialing is not None:
                    if mask & selectors.EVENT_WRITE:
                        self._dialed(conn)
                    continue
                if mask & selectors.EVENT_WRITE and conn.ex is not None:
                    self._send(conn)
                if mask & selectors.EVENT_READ and not conn.closed:
                    self._recv(conn)
            if timers:
                now = time.monotonic()
                while timers and (timers[0][2].done or timers[0][0] <= now):
                    _, _, ex = heapq.heappop(timers)
                    if not ex.done:
                        self._expire(ex)

    def _begin(self, req: FireRequest) -> None:
        """Start one attempt: budget, request bytes, a connection (idle, or opened by a connector)."""
        timeout_ms = req.timeout_ms
        if req.deadline_ms:
            timeout_ms = min(timeout_ms, req.deadline_ms - self._wall_ms())
        if timeout_ms <= 0:
            log.warning("fire=%s not sent: deadline passed while queued", req.fire_id)
            self._finish(req, None)
            return
        start = time.monotonic()
        budget_s = max(1, timeout_ms) / 1000.0
        try:
            scheme, host, port, target = self._d.target(req.url)
            if scheme != "http":
                raise ValueError(f"not an http URL: {req.url!r}")
            out = self._d.request_bytes(req, host, port, target)
        except Exception as e:  # a bad URL or header value: a network_error, as on the urllib3 path
            self._finish(req, self._d.failed_result(req, start, DeliveryOutcome.NETWORK_ERROR, e))
            return
        key = (host, port)
        ex = _Exchange(req, start, start + budget_s, key, out, next(self._seq))
        self._active += 1
        heapq.heappush(self._timers, (ex.deadline, ex.seq, ex))
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                self._use(conn, ex)
                return
        if _is_ip(host):  # nothing to look up: check it here
            try:
                infos = vetted_resolve(host, port, self._d.callback_policy)
            except Exception as e:
                self._dial(ex, None, e)
            else:
                self._dial(ex, infos, None)
        else:
            self._connect_q.put((ex, host, port))

    def _run_connector(self) -> None:
        """A resolver thread: resolve and check a name; hand the addresses (or the error) to the loop."""
        while (job := self._connect_q.get()) is not None:
            ex, host, port = job
            try:
                self._resolved.append((ex, vetted_resolve(host, port, self._d.callback_policy), None))
            except Exception as e:  # every failure becomes this attempt's result
                self._resolved.append((ex, None, e))
            self.wake()

    def _dial(self, ex: _Exchange, infos: list[tuple[Any, ...]] | None, err: BaseException | None) -> None:
        """Connect without blocking to the first of ``infos`` that does not fail at once (the
        others are tried when it fails later, :meth:`_dialed`); none left: the attempt's result."""
        if ex.done:  # its budget ran out while resolving
            return
        rest = list(infos or ())
        while rest:
            family, kind, proto, _, sockaddr = rest.pop(0)
            sock = None
            try:
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                code = sock.connect_ex(sockaddr)
            except OSError as e:
                if sock is not None:
                    sock.close()
                err = e
                continue
            if code in (0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
                conn = _Conn(sock, ex.key)
                conn.dialing = rest
                conn.events = selectors.EVENT_WRITE
                self._sel.register(sock, selectors.EVENT_WRITE, conn)
                conn.ex = ex
                ex.conn = conn
                return
            sock.close()
            err = ConnectionError(code, f"Failed to establish a new connection: {os.strerror(code)}")
        self._unreachable(ex, err or OSError(f"no address for {ex.key[0]}"))

    def _dialed(self, conn: _Conn) -> None:
        """A connecting socket became writable: connected (send the request), or failed (the next address)."""
        ex = conn.ex
        code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        rest = conn.dialing or []
        if code == 0 and ex is not None and not ex.done:
            conn.dialing = None
            self.opened += 1
            self._use(conn, ex)
            return
        self._close(conn)
        if ex is None or ex.done:
            return
        ex.conn = None
        self._dial(ex, rest, ConnectionError(code, f"Failed to establish a new connection: {os.strerror(code)}"))

    def _unreachable(self, ex: _Exchange, err: BaseException) -> None:
        """No connection for this attempt: the policy refused the host, or it did not resolve or connect."""
        if isinstance(err, CallbackDenied):
            self._complete(ex, self._d.refused_result(ex.req, ex.start, err.message))
            return
        if isinstance(err, socket.gaierror):
            err = NameResolutionError(f"Failed to resolve '{ex.key[0]}' ({err})")
        outcome = DeliveryOutcome.TIMEOUT if isinstance(err, TimeoutError) else DeliveryOutcome.NETWORK_ERROR
        self._complete(ex, self._d.failed_result(ex.req, ex.start, outcome, err))

    def _use(self, conn: _Conn, ex: _Exchange) -> None:
        conn.ex = ex
        ex.conn = conn
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        ex = conn.ex
        assert ex is not None
        try:
            n = conn.sock.send(ex.out)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._close(conn)
            self._complete(ex, self._d.failed_result(ex.req, ex.start, DeliveryOutcome.NETWORK_ERROR, e))
            return
        ex.out = ex.out[n:]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if len(ex.out) else 0)
        if want != conn.events:
            conn.events = want
            self._sel.modify(conn.sock, want, conn)

    def _recv(self, conn: _Conn) -> None:
        ex = conn.ex
        try:
            data = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close(conn)
            if ex is not None:
                self._broken(ex, e)
            return
        if ex is None:  # an idle connection: the peer closed it (or sent what nobody asked for)
            self._close(conn)
            return
        if not data:
            self._close(conn)
            if ex.mode == "close":
                self._answer(ex, reusable=False)
            else:
                self._broken(ex, ConnectionResetError("connection closed before the whole answer arrived"))
            return
        try:
            self._feed(ex, data)
        except _Malformed as e:
            self._close(conn)
            self._broken(ex, e)

    # --- parsing ---------------------------------------------------------------------------------
    def _feed(self, ex: _Exchange, data: bytes) -> None:
        if not ex.mode:
            ex.buf += data
            while True:
                end = ex.buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(ex.buf) > MAX_HEAD_BYTES:
                        raise _Malformed(f"answer head longer than {MAX_HEAD_BYTES} bytes")
                    return
                if end > MAX_HEAD_BYTES:
                    raise _Malformed(f"answer head longer than {MAX_HEAD_BYTES} bytes")
                lines = bytes(ex.buf[:end]).split(b"\r\n")
                del ex.buf[: end + 4]
                parts = lines[0].split(None, 2)
                if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
                    raise _Malformed(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
                status = int(parts[1])
                if status < 100:
                    raise _Malformed(f"status {status}")
                if status < 200 and status != 101:
                    continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
                headers: dict[bytes, bytes] = {}
                for ln in lines[1:]:
                    name, sep, value = ln.partition(b":")
                    if not sep:
                        raise _Malformed(f"not a header line: {ln[:80]!r}")
                    name = name.strip().lower()
                    value = value.strip()
                    if name == b"content-length" and name in headers and headers[name] != value:
                        raise _Malformed("differing Content-Length headers")
                    headers[name] = value
                ex.status = status
                ex.headers = headers
                mode = self._body_mode(ex, parts[0] == b"HTTP/1.0")
                rest = bytes(ex.buf)
                ex.buf = bytearray()
                if mode == "length" and ex.left == 0:
                    self._answer(ex, reusable=not rest)
                    return
                if rest:
                    self._body(ex, rest)
                return
        self._body(ex, data)

    def _body_mode(self, ex: _Exchange, http10: bool) -> str:
        """Set how the body is framed (``ex.mode``, ``ex.left``, ``ex.close_after``); returns the mode."""
        h = ex.headers
        conn_tokens = h.get(b"connection", b"").lower()
        ex.close_after = b"close" in conn_tokens or (http10 and b"keep-alive" not in conn_tokens)
        te = h.get(b"transfer-encoding")
        if ex.status in (101, 204, 304):
            ex.mode, ex.left = "length", 0
            ex.close_after = ex.close_after or ex.status == 101
        elif te is not None:
            if te.lower().rsplit(b",", 1)[-1].strip() != b"chunked":
                raise _Malformed(f"transfer coding {te[:40]!r}")
            ex.mode = "chunked"
        elif b"content-length" in h:
            cl = h[b"content-length"]
            if not cl.isdigit():
                raise _Malformed(f"Content-Length {cl[:40]!r}")
            ex.mode, ex.left = "length", int(cl)
        else:
            ex.mode = "close"
            ex.close_after = True
        return ex.mode

    def _take_body(self, ex: _Exchange, data: bytes | memoryview) -> bool:
        """Keep/drop ``data`` of the body; True when the limits are reached (stop reading)."""
        room = self._d.head_limit - len(ex.head)
        if room > 0:
            ex.head += data[:room]
            data = data[room:]
            if len(ex.head) >= self._d.head_limit and ex.latency_ms < 0:
                ex.latency_ms = elapsed_ms(ex.start)
        ex.drained += len(data)
        return ex.drained > self._d.drain_limit

    def _body(self, ex: _Exchange, data: bytes) -> None:
        if ex.mode == "length":
            take = data[: ex.left]
            ex.left -= len(take)
            if self._take_body(ex, take) or (
                ex.left > self._d.drain_limit and len(ex.head) >= self._d.head_limit
            ):
                self._answer(ex, reusable=False)
            elif ex.left == 0:
                self._answer(ex, reusable=len(data) == len(take))
            return
        if ex.mode == "close":
            if self._take_body(ex, data):
                self._answer(ex, reusable=False)
            return
        # chunked
        buf = ex.buf
        buf += data
        pos = 0
        while True:
            if ex.chunk_left >= 0:
                if ex.chunk_left > 2:
                    n = min(ex.chunk_left - 2, len(buf) - pos)
                    if n <= 0:
                        break
                    if self._take_body(ex, memoryview(buf)[pos : pos + n]):
                        self._answer(ex, reusable=False)
                        return
                    pos += n
                    ex.chunk_left -= n
                    continue
                if len(buf) - pos < ex.chunk_left:
                    break
                if buf[pos : pos + ex.chunk_left] != b"\r\n"[2 - ex.chunk_left :]:
                    raise _Malformed("chunk not followed by CRLF")
                pos += ex.chunk_left
                ex.chunk_left = -1
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > 4096:
                    raise _Malformed("chunk size line too long")
                break
            line = bytes(buf[pos:eol])
            pos = eol + 2
            if ex.chunk_left == -2:  # trailers, until an empty line
                if not line:
                    del buf[:pos]
                    self._answer(ex, reusable=not buf)
                    return
                continue
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Malformed(f"chunk size {size_text[:20]!r}") from None
            if size < 0:
                raise _Malformed("negative chunk size")
            ex.chunk_left = -2 if size == 0 else size + 2
        del buf[:pos]

    # --- endings ---------------------------------------------------------------------------------
    def _answer(self, ex: _Exchange, reusable: bool) -> None:
        """The answer is in (or enough of it): the result; the connection goes back idle or closes."""
        conn = ex.conn
        if conn is not None:
            conn.ex = None
            ex.conn = None
            # an answer that came before the whole request was written leaves the rest of the
            # request on this connection: it cannot carry another one
            if reusable and not ex.close_after and not conn.closed and not len(ex.out):
                self._keep_idle(conn)
            else:
                self._close(conn)
        self._complete(ex, self._result(ex))

    def _result(self, ex: _Exchange) -> FireResult:
        status = ex.status
        h = ex.headers
        no_retry = status >= 300 and h.get(_NO_RETRY, b"").strip().lower() == b"true"
        ra = 0
        if status in THROTTLE_STATUSES:
            value = h.get(b"retry-after")
            ra = retry_after_ms(value.decode("latin-1") if value is not None else None, self._wall_ms(), self._d.max_retry_after_ms)
        return FireResult(
            fire_id=ex.req.fire_id, kind=ex.req.kind, status_code=status, outcome=outcome_for_status(status),
            response_head=bytes(ex.head), latency_ms=ex.latency_ms if ex.latency_ms >= 0 else elapsed_ms(ex.start),
            worker=self._d.node_id, no_retry=no_retry, retry_after_ms=ra,
        )

    def _broken(self, ex: _Exchange, e: BaseException) -> None:
        """The connection failed mid-attempt: after a status line the answer stands, before it a network_error."""
        if ex.status:
            ex.conn = None
            self._complete(ex, self._result(ex))
        else:
            self._complete(ex, self._d.failed_result(ex.req, ex.start, DeliveryOutcome.NETWORK_ERROR, e))

    def _expire(self, ex: _Exchange) -> None:
        conn = ex.conn
        if conn is not None:
            conn.ex = None
            ex.conn = None
            self._close(conn)
        if ex.status:
            self._complete(ex, self._result(ex))
        else:
            budget_ms = round((ex.deadline - ex.start) * 1000)
            self._complete(ex, self._d.failed_result(
                ex.req, ex.start, DeliveryOutcome.TIMEOUT, TimeoutError(f"Timeout: no answer within {budget_ms} ms"),
            ))

    def _complete(self, ex: _Exchange, result: FireResult) -> None:
        if ex.done:
            return
        ex.done = True
        self._active -= 1
        self._d.record(ex.req, result)
        self._finish(ex.req, result)

    # --- connections -----------------------------------------------------------------------------
    def _keep_idle(self, conn: _Conn) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= self.concurrency:
            self._close(conn)
            return
        if conn.events != selectors.EVENT_READ:
            conn.events = selectors.EVENT_READ
            self._sel.modify(conn.sock, selectors.EVENT_READ, conn)
        idle.append(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def _close_all(self) -> None:
        for idle in list(self._idle.values()):
            for conn in list(idle):
                self._close(conn)
        self._idle.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._sel.close()


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


__all__ = ["MAX_HEAD_BYTES", "FireLoop"]
