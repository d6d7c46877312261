"""The HTTP edge: the limits and deadlines a hostile client meets before a request reaches the app.

waitress gives a total header size (``431``), a body size (``413``), a connection limit and an idle
timeout checked every 30 s. What it lacks is added here, in one layer around its parser and channel
(:class:`EdgeParser`, :class:`EdgeChannel`) and one sweep of the connections (:func:`sweep`), so no
route has to think about it:

- **Request line**: ``METHOD SP target SP HTTP/1.x CRLF``, at most ``max_request_line_bytes``
  (``414``). A line ending in a bare LF, or without a version (HTTP/0.9: ``GET /path``), is answered
  ``400`` as soon as its LF arrives (waitress waited for a CRLF CRLF that never came).
- **Head**: at most ``max_header_count`` header lines and ``max_head_bytes`` in all (``431``); a
  header line ending in a bare LF is ``400``.
- **Chunked bodies**: a chunk size of more than 16 hex digits (or a size line of 1 KiB) is
  ``400``; a chunk larger than what is left of the body limit is ``413``, both before its bytes
  arrive (waitress waited for them).
- **Deadlines** (checked by :func:`sweep`, which the server runs a few times a second): the request
  head must be complete ``head_timeout_ms`` after its first byte (a new connection: after it was
  accepted); a body may pause at most ``body_idle_timeout_ms`` between bytes; both answer ``408``
  and close. A connection idle between requests is closed after ``keepalive_timeout_ms``. A
  connection with an answer waiting of which no byte could be sent for ``send_idle_timeout_ms``
  (a client that stopped reading) is closed, output and all: the thread writing that answer, held
  once more than waitress's high watermark is waiting, is let go.
- **Connections per client address**: at most ``max_connections_per_client`` at once; one more is
  answered ``429`` and closed.

Every answer here is the API's JSON error body (code ``http_error``) and closes the connection: after
a malformed request the stream cannot be trusted to hold a next one. Worked example: with the
defaults, ``GET /x\\n`` is answered ``400 "request line ends in a bare LF"`` at once; a client that
sends one header byte per second is answered ``408`` 10 s after its first byte, whatever it sends.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.utilities import BadRequest, Error, RequestEntityTooLarge, RequestHeaderFieldsTooLarge

if TYPE_CHECKING:
    from molens.config import HttpConfig


class UriTooLong(BadRequest):  # type: ignore[misc]
    code = 414
    reason = "URI Too Long"


class RequestTimeout(BadRequest):  # type: ignore[misc]
    code = 408
    reason = "Request Timeout"


class TooManyConnections(BadRequest):  # type: ignore[misc]
    code = 429
    reason = "Too Many Requests"


_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^\x00-\x20\x7f]+ HTTP/1\.[01]")
MAX_CHUNK_HEX = 16
MAX_CHUNK_LINE = 1024


def error_body(code: str, message: str, field: str | None = None) -> bytes:
    """The API's error body (docs/api.md) for an answer made below the app."""
    return json.dumps({"error": {"code": code, "message": message, **({"field": field} if field else {})}}).encode()


def _answer(e: Error) -> bytes:
    body = error_body("http_error", f"{e.reason}: {e.body}"[:300])
    head = (
        f"HTTP/1.1 {e.code} {e.reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\nServer: molens\r\n\r\n"
    )
    return head.encode("latin-1") + body


class EdgeParser(HTTPRequestParser):  # type: ignore[misc]
    """waitress's request parser with the request-line, head and chunk rules of the module docstring."""

    def received(self, data: bytes) -> int:
        if self.completed:
            return 0
        if self.body_rcv is None:
            problem = self._head_problem(self.header_plus + data)
            if problem is not None:
                return self._refuse(problem, len(data))
        n = int(super().received(data))
        br = self.body_rcv
        if self.chunked and br is not None and not self.completed:
            left = self.adj.max_request_body_size - self.body_bytes_received
            if br.chunk_remainder >= 16**MAX_CHUNK_HEX or len(br.control_line) > MAX_CHUNK_LINE:
                self._refuse(BadRequest("a chunk size line is longer than 16 hex digits"), 0)
            elif br.chunk_remainder > left:
                self._refuse(RequestEntityTooLarge(f"a chunk of {br.chunk_remainder} bytes is past the body limit"), 0)
        return n

    def _refuse(self, error: Error, consumed: int) -> int:
        if not hasattr(self, "command"):  # what an error answer reads of the request (as waitress's own 431)
            super().parse_header(b"GET / HTTP/1.0\r\n")
        self.error = error
        self.completed = True
        return consumed

    def _head_problem(self, s: bytes) -> Error | None:
        lim: HttpConfig = self.adj.molens_edge
        end = s.find(b"\r\n\r\n")
        head = s if end < 0 else s[: end + 2]
        start = len(head) - len(head.lstrip(b"\r\n"))  # blank lines before a request are allowed (RFC 9112 2.2)
        nl = head.find(b"\n", start)
        if (nl if nl >= 0 else len(head)) - start > lim.max_request_line_bytes:
            return UriTooLong(f"the request line is longer than {lim.max_request_line_bytes} bytes")
        if nl < 0:
            return None
        if head[nl - 1 : nl] != b"\r":
            return BadRequest("the request line ends in a bare LF (CRLF expected)")
        if not _REQUEST_LINE.fullmatch(head, start, nl - 1):
            return BadRequest("the request line must be METHOD SP target SP HTTP/1.x")
        lines = head.count(b"\n", nl + 1)
        if head.count(b"\r\n", nl + 1) != lines:
            return BadRequest("a header line ends in a bare LF (CRLF expected)")
        if lines > lim.max_header_count:
            return RequestHeaderFieldsTooLarge(f"more than {lim.max_header_count} header lines")
        if len(head) - start > lim.max_head_bytes:
            return RequestHeaderFieldsTooLarge(f"the request head is longer than {lim.max_head_bytes} bytes")
        return None

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        if self.chunked and "CONTENT_LENGTH" in self.headers:
            # RFC 9112 6.3: a proxy in front that trusted the length would see another next request
            raise ParsingError("a request must not have both Content-Length and Transfer-Encoding")


class EdgeChannel(HTTPChannel):  # type: ignore[misc]
    """waitress's channel with the edge's parser, its deadlines' clocks and the per-address bound."""

    parser_class = EdgeParser
    _since = 0.0
    """When the request being read (or, before any, the connection) began: its head's deadline runs from here."""
    _last_read = 0.0
    _counted: str | None = None

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map=map)
        self._since = self._last_read = time.monotonic()
        self._reading: object = None
        self._served = False
        clients: dict[str, int] = server.molens_clients
        host = str(addr[0]) if isinstance(addr, tuple) else str(addr)
        clients[host] = clients.get(host, 0) + 1
        self._counted = host
        lim: HttpConfig = adj.molens_edge
        if clients[host] > lim.max_connections_per_client:
            self.refuse(TooManyConnections(f"more than {lim.max_connections_per_client} connections from {host}"))

    def received(self, data: bytes) -> bool:
        now = time.monotonic()
        self._last_read = now
        out = bool(super().received(data))
        if self.request is not None and self.request is not self._reading:
            self._reading = self.request
            self._since = now
        if self.request is None:
            self._reading = None
        return out

    def service(self) -> None:
        self._served = True
        super().service()

    def refuse(self, error: Error) -> None:
        """Answer ``error`` from the I/O loop (no task thread) and close once it is sent."""
        self.request = None
        try:
            self.write_soon(_answer(error))
        except Exception:  # the client is gone: nothing to answer
            self.will_close = True
        self.close_when_flushed = True

    def overdue(self, now: float) -> Error | bool | Abort | None:
        """What the edge's deadlines say of this connection at ``now``: an error to answer, True to
        close it without a word (idle keep-alive), :data:`ABORT` to close it at once, output and
        all (an answer no byte of which left for ``send_idle_timeout_ms``), or None."""
        lim: HttpConfig = self.adj.molens_edge
        if self.total_outbufs_len and time.time() - float(self.last_activity) > lim.send_idle_timeout_ms / 1000:
            return ABORT  # an answer waiting on a client that reads nothing: its thread may be held
        if self.will_close or self.close_when_flushed or self.requests:
            return None
        req = self.request
        if req is None and not self._served and now - self._since > lim.head_timeout_ms / 1000:
            return RequestTimeout(f"no request head within {lim.head_timeout_ms} ms")
        if req is not None and not req.headers_finished and now - self._since > lim.head_timeout_ms / 1000:
            return RequestTimeout(f"the request head took longer than {lim.head_timeout_ms} ms")
        if req is not None and req.headers_finished and now - self._last_read > lim.body_idle_timeout_ms / 1000:
            return RequestTimeout(f"no body bytes for {lim.body_idle_timeout_ms} ms")
        if req is None and self._served and not self.total_outbufs_len:
            return time.time() - float(self.last_activity) > lim.keepalive_timeout_ms / 1000
        return None

    def del_channel(self, map: Any = None) -> None:
        host, self._counted = self._counted, None
        if host is not None:
            clients: dict[str, int] = self.server.molens_clients
            left = clients.get(host, 1) - 1
            if left > 0:
                clients[host] = left
            else:
                clients.pop(host, None)
        super().del_channel(map)


class Abort:
    """:meth:`EdgeChannel.overdue`'s verdict for a connection to close at once."""


ABORT = Abort()


SWEEP_MAX = 32
"""Most connections one sweep ends: 500 slow clients whose deadlines pass together are answered over
several loop passes, with other connections' requests served between them."""


def sweep(channels: list[Any], now: float) -> int:
    """Carry out the deadlines of the :class:`EdgeChannel` s in ``channels``, at most :data:`SWEEP_MAX`
    of them; how many it ended (the caller sweeps again at its next pass when that is the most)."""
    ended = 0
    for ch in channels:
        if ended >= SWEEP_MAX:
            break
        if not isinstance(ch, EdgeChannel):
            continue
        verdict = ch.overdue(now)
        if verdict is None or verdict is False:
            continue
        ended += 1
        if verdict is ABORT:
            # the socket takes no more: a close left to the loop's write would never come. Closing
            # here wakes a task thread waiting for the output to drain (waitress's high watermark)
            ch.handle_close()
        elif verdict is True:
            ch.will_close = True
        else:
            ch.refuse(verdict)
    return ended


__all__ = ["ABORT", "Abort", "EdgeChannel", "EdgeParser", "error_body", "sweep"]
