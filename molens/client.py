"""Python SDK for the Molens REST API: :class:`MolensClient` and :class:`BatchingClient`.

>>> c = MolensClient(["http://127.0.0.1:18081", "http://127.0.0.1:18082"], token=None)
>>> t = c.create(type="delayed", interval_ms=5000, callback_url="http://127.0.0.1:18081/api/v1/test/callback")
>>> c.get(t["id"])["status"]
'pending'

Behaviour:

- **Leader discovery.** Requests go to the node believed to lead (first the first URL). A follower
  answers writes with ``307``; the client re-sends the same request (body included) to
  ``Location`` and remembers that node. On a connection error it moves to the next URL.
- **Retries** with exponential backoff and jitter (``backoff_base_s * 2^n``, capped at
  ``backoff_max_s``, times a random factor in [0.5, 1]), bounded by ``max_attempts`` and
  ``retry_deadline_s``: on connection errors, on ``503`` (no leader / outcome unknown /
  unavailable) and on ``507`` (the leader's disk is full; nothing applied); a retry goes only with
  at least ``MIN_ATTEMPT_S`` (0.1 s) of the deadline left (a backoff leaves that much), else the
  client gives up as at the deadline. Other errors are raised
  at once as typed :class:`ApiError` subclasses (a ``429`` carries its ``Retry-After`` as
  ``retry_after_s`` and is not waited out). A redirect from an ``https://`` node to a plain
  ``http://`` address is not followed (the token would go unencrypted): the next node is asked.
- **Idempotency.** :meth:`MolensClient.create` and :meth:`~MolensClient.create_many` give every task
  without an ``idempotency_key`` a fresh one (time-ordered, 80 random bits), so a retry after a lost response returns the
  task created by the first attempt instead of creating a duplicate. Pause/resume/delete are retried
  too (trigger is not); if a retry after an unknown outcome meets ``404``/``409``/``412``/``429`` (the
  first attempt may have done it: a create's retry meets a full quota when the first one made the
  task), :class:`OutcomeUnknownError` is raised rather than a misleading refusal.
- Reads go to the same node as writes, so a client reads its own writes.
- **Namespaces.** ``namespace=`` on the client is the namespace its creates name and its lists,
  executions, dead letters and bulk dead-letter actions are limited to; each of those calls takes
  its own ``namespace=`` too. Left out everywhere: creates go to the server's ``default`` and lists
  show every namespace the key may read (docs/api.md#namespaces). An admin key manages namespaces
  and keys (:meth:`MolensClient.create_namespace`, :meth:`MolensClient.create_api_key`, ...).

Thread-safe: one client may be shared by threads (one keep-alive connection pool per node).

The module is the whole SDK: the standard library and three leaf modules of the package
(``molens.errors``, ``molens.wallclock``, its version), no server dependency. Where ``msgspec`` is
importable (a Molens server's environment has it) it decodes the answers: the same dicts at under
half the CPU (a batch create's answer of 500 tasks parses in ~2.2 µs per task instead of ~5.0 with
the ``json`` module). Bodies are always encoded by the ``json`` module, so
what a request accepts does not depend on it (msgspec would also encode ``bytes`` as base64 and
``datetime`` as text, where ``json`` raises ``TypeError``).
"""

from __future__ import annotations

import builtins
import http.client
import json
import logging
import os
import random
import re
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from enum import StrEnum
from typing import Any, NoReturn
from urllib.parse import quote, urlencode, urlsplit

from molens import __version__
from molens.errors import MolensError
from molens.wallclock import MAX_EPOCH_MS  # the latest instant the API takes (the server's bound)

try:  # optional (see above)
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - the test environment has it; tests force the fallback
    _msgspec = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
"""Consecutive redirects followed before the client takes them for a loop (nodes naming each other
as leader while an election settles) and backs off before asking again."""

Task = dict[str, Any]
"""A task as the API returns it (see ``Task`` in the OpenAPI document)."""

MAX_PAGE_SIZE = 1_000
"""Items per page the API serves at most (its ``limit``)."""
MAX_BULK = 10_000
"""Dead letters one bulk redrive or delete acts on at most."""
MAX_FILTER_CHARS = 300
"""The longest ``task_id`` or ``flow`` a dead-letter filter takes."""
MAX_PREVIEW = 100
"""Fire times one schedule preview gives at most."""
MIN_ATTEMPT_S = 0.1
"""The least of the retry deadline a retry is sent with: a backoff leaves it this much, and with less
left the client gives up as at the deadline. An attempt sent with a millisecond cannot be answered,
and for a write it made a clean failure (every node answered 503, nothing applied) an unknown outcome."""


def _no_time_for_another(deadline: float) -> bool:
    """Whether too little of the retry deadline is left to send another attempt (:data:`MIN_ATTEMPT_S`)."""
    return deadline - time.monotonic() < MIN_ATTEMPT_S


DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
"""The longest answer body read (``max_response_bytes``), as the Go SDK's: a page of 1,000 tasks of
the largest default payload is about 76 MiB; a longer one is no node's answer."""
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
"""What a namespace name may be (docs/api.md#namespaces)."""


class Role(StrEnum):
    """What an API key may do (docs/api.md#keys-and-roles)."""

    ADMIN = "admin"
    """Everything: tasks, flows, dead letters, namespaces, keys, cluster membership."""
    WRITER = "writer"
    """Create and change tasks, dead letters and the own flows (``<namespace>~<flow_key>``) of its
    namespaces, and read them."""
    READER = "reader"
    """Read tasks, executions, dead letters and the own flows of its namespaces."""


class ResumeFrom(StrEnum):
    """Where :meth:`MolensClient.resume` takes a periodic task up again."""

    NOW = "now"
    """Drop what it missed while paused (the API's default)."""
    SCHEDULE = "schedule"
    """The instant it was waiting for; its ``catchup`` applies to what it missed."""


class _TaskType(StrEnum):
    DELAYED = "delayed"
    PERIODIC = "periodic"


class DeadLetterKind(StrEnum):
    """Why an occurrence failed for good (docs/api.md#dead-letters)."""

    RETRIES_EXHAUSTED = "retries_exhausted"
    NON_RETRYABLE = "non_retryable"
    ACK_FAILED = "ack_failed"
    UNKNOWN = "unknown"


class SeriesRange(StrEnum):
    """The windows of :meth:`MolensClient.stats_series` (the server's ``molens.web.fire_series.Span``)."""

    HOUR = "hour"
    DAY = "day"


# -------------------------------------------------------------------------------------------------
# errors


class ClientError(MolensError):
    """Base of every error the SDK raises.

    Raised by :meth:`MolensClient.create_many` / ``create_many_ids``, it also says how far the call
    got: ``created``, the tasks created by the batches before the one that failed (``created[i]`` is
    the ``i``-th task given), and ``idempotency_keys``, the key of every task given, in order (the
    ones the client made up included): create again with them and the tasks that exist are
    returned, the others created, never a duplicate."""

    code = "client_error"
    idempotency_keys: tuple[str, ...] = ()
    created: tuple[dict[str, Any], ...] = ()


class ApiError(ClientError):
    """The API answered with an error body ``{"error": {"code", "message", "field"}}`` (and ``reason``
    where ``code`` is too coarse, such as ``never_fires``)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None, body: Any = None) -> None:
        super().__init__(message, field, code)
        self.status = status
        self.http_status = status
        self.body = body
        err = body.get("error") if isinstance(body, dict) else None
        reason = err.get("reason") if isinstance(err, dict) else None
        self.reason = reason if isinstance(reason, str) else None

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.status} {self.code}: {self.message}{where}"


class BadRequestError(ApiError):
    """400 / 413 / 415: the request is invalid; ``field`` names the culprit."""


class BatchRejectedError(BadRequestError):
    """A batch create was rejected (nothing created); ``item_errors`` maps item index -> error."""

    def __init__(self, status: int, code: str, message: str, field: str | None, body: Any) -> None:
        super().__init__(status, code, message, field, body)
        self.item_errors: dict[int, ApiError] = {
            int(e["index"]): _item_error(e) for e in (body or {}).get("errors", [])}


class UnauthorizedError(ApiError):
    """401: missing or wrong bearer token."""


class ForbiddenError(ApiError):
    """403 ``forbidden``: the key's role may not do this (a reader's write), or the request names a
    namespace outside the key's."""


class TooManyRequestsError(ApiError):
    """429: slowed down; ``retry_after_s`` (from ``Retry-After``, None if absent) says for how long."""

    retry_after_s: int | None = None


class QuotaExceededError(TooManyRequestsError):
    """429 ``quota_exceeded``: a namespace's quota refused the request whole (nothing was created);
    ``quota`` names it (``creates_per_s``, ``max_pending_tasks``, ``max_payload_bytes``)."""

    @property
    def quota(self) -> str | None:
        err = self.body.get("error") if isinstance(self.body, dict) else None
        q = err.get("quota") if isinstance(err, dict) else None
        return str(q) if q is not None else self.field


class TaskNotFoundError(ApiError):
    """404: no such task (or flow, or dead letter: every 404 of the API)."""


class ConflictError(ApiError):
    """409: the operation is illegal in the task's current status."""


class PreconditionFailedError(ConflictError):
    """412: the task's definition is no longer the version given as ``if_version``."""


class UnavailableError(ApiError):
    """503 after every retry: no leader, or the cluster is not serving."""


class InsufficientStorageError(UnavailableError):
    """507 after every retry: the leader cannot write its disk (nothing was applied); it retries by
    itself once space is freed. ``retry_after_s`` is the node's ``Retry-After``."""

    retry_after_s: int | None = None


class OutcomeUnknownError(ClientError):
    """A write may or may not have happened (lost response and the retry could not tell).

    From :meth:`MolensClient.create` / ``create_many``: ``idempotency_keys`` holds the keys the
    request carried (the ones the client made up included), in order; creating again with the same
    keys returns the tasks that were created and creates the others, never a duplicate."""

    code = "outcome_unknown"


class BatchPartlyCreatedError(ClientError):
    """A batch was applied but some of its items were not created (their namespace was deleted
    while the batch was in flight: docs/api.md#post-apiv1tasksbatch), so
    :meth:`MolensClient.create_many` stops there. ``tasks`` follows the tasks given, in order: each
    created task (earlier batches' too), or None (refused, or in a batch never sent);
    ``item_errors`` maps the index of each refused one to its error."""

    code = "batch_partly_created"

    def __init__(self, tasks: list[Task | None], item_errors: dict[int, ApiError]) -> None:
        first = min(item_errors)
        made = sum(t is not None for t in tasks)
        super().__init__(f"{made} of {len(tasks)} tasks created; task {first} was not: {item_errors[first]}")
        self.tasks = tasks
        self.item_errors = item_errors


class ConnectionFailedError(ClientError):
    """No node could be reached within the retry budget."""

    code = "connection_failed"


def _error_class(status: int, code: str) -> type[ApiError]:
    if status in (400, 413, 415):
        return BadRequestError
    if status == 429:
        return QuotaExceededError if code == "quota_exceeded" else TooManyRequestsError
    return {
        401: UnauthorizedError, 403: ForbiddenError, 404: TaskNotFoundError, 409: ConflictError,
        412: PreconditionFailedError, 503: UnavailableError, 507: InsufficientStorageError,
    }.get(status, ApiError)


def _item_error(entry: Mapping[str, Any]) -> ApiError:
    """One item's error of a batch answer, ``{"index", "error": {"code", "message", "field"}}``: a
    ``not_found`` (the item's namespace) is the 404 the API lists it as, an ``internal`` a 500, any
    other a 400 (as the Go and Java SDKs label them)."""
    err = entry.get("error", {})
    code = str(err.get("code", "internal"))
    status = 404 if code == "not_found" else 500 if code == "internal" else 400
    return _error_class(status, code)(status, code, str(err.get("message", "")), err.get("field"), entry)


def _raise_for(status: int, body: Any, path: str, retry_after: str | None = None) -> None:
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        raise ApiError(status, "http_error", f"HTTP {status} from {path}", None, body)
    code = str(err.get("code", "http_error"))
    message = str(err.get("message", ""))
    field = err.get("field")
    if isinstance(body, dict) and "errors" in body and status == 400:
        raise BatchRejectedError(status, code, message, field, body)
    exc = _error_class(status, code)(status, code, message, field, body)
    if isinstance(exc, TooManyRequestsError | InsufficientStorageError) and retry_after is not None:
        wait = retry_after.strip()
        if wait.isascii() and wait.isdigit():
            exc.retry_after_s = int(wait)
    raise exc


# -------------------------------------------------------------------------------------------------


def _id(name: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _task_path(task_id: str) -> str:
    return "/api/v1/tasks/" + quote(_id("task_id", task_id), safe="")


def _dead_path(dead_id: str) -> str:
    return "/api/v1/dead-letters/" + quote(_id("dead_id", dead_id), safe="")


def _flow_path(key: str) -> str:
    return "/api/v1/flows/" + quote(_id("key", key), safe="")


def _namespace(name: str, value: Any) -> str:
    """A namespace name, refused with ValueError before any request unless it is one."""
    if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
        raise ValueError(f"{name} must match [a-z0-9][a-z0-9_-]{{0,62}}, got {value!r:.80}")
    return value


def _namespace_path(name: str) -> str:
    return "/api/v1/namespaces/" + _namespace("name", name)


def _key_path(key_id: str) -> str:
    return "/api/v1/keys/" + quote(_id("key_id", key_id), safe="")


def _choice(values: type[StrEnum], value: Any, name: str) -> str:
    try:
        return str(values(value).value)
    except ValueError:
        allowed = ", ".join(repr(v.value) for v in values)
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}") from None


def _bounded(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in {lo}..{hi:,}, got {value!r}")
    return value


def _dead_filter(
    task_id: str | None, flow: str | None, kind: DeadLetterKind | str | None, since: int | None, until: int | None,
) -> dict[str, Any]:
    """A dead-letter filter as the API takes it (the fields given), checked before any request."""
    out: dict[str, Any] = {}
    for name, text in (("task_id", task_id), ("flow", flow)):
        if text is not None:
            if not isinstance(text, str) or not 0 < len(text) <= MAX_FILTER_CHARS:
                raise ValueError(f"{name} must be a string of 1..{MAX_FILTER_CHARS} characters, got {text!r:.80}")
            out[name] = text
    if kind is not None:
        out["kind"] = _choice(DeadLetterKind, kind, "kind")
    for name, ms in (("since", since), ("until", until)):
        if ms is not None:
            out[name] = _bounded(name, ms, 0, MAX_EPOCH_MS)
    if since is not None and until is not None and until < since:
        raise ValueError(f"until ({until}) must not be before since ({since})")
    return out


_LIST_ORDERS = ("created", "-created", "next_run")


def _base(url: str, *, path_ok: bool = False) -> str:
    """A node's base URL (``scheme://host[:port]``), refused with ValueError unless it is one (a path
    but ``/``, a query, a fragment or credentials included: the API is served at the root, and a
    path-prefixed proxy would answer every route 404). ``path_ok``: the URL of a redirect, whose
    path is the route's (its base alone is kept)."""
    shown = _shown_url(url) if isinstance(url, str) else url
    try:
        p = urlsplit(url)
        p.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"a node URL must be http://HOST[:PORT] or https://..., got {shown!r:.120}") from None
    if p.username is not None or p.password is not None:
        raise ValueError(f"a node URL takes no user or password (a token is given on its own), "
                         f"got {shown!r:.120}")
    if p.scheme not in ("http", "https") or not p.hostname or (
            not path_ok and (p.path not in ("", "/") or p.query or p.fragment)):
        raise ValueError(f"a node URL must be http://HOST[:PORT] or https://... (no path: the API is served at "
                         f"the root), got {shown!r:.120}")
    return f"{p.scheme}://{p.netloc}"


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
"""The user info of a URL (``user:password@``), replaced before a URL is shown."""


def _shown_url(url: str) -> str:
    """``url`` as an error may quote it: a password in it is never echoed."""
    return _USERINFO.sub(r"\1***@", url)


def _give_up(unknown: bool, cause: BaseException | None, exc: ApiError) -> NoReturn:
    """Raise ``exc``, the answer that ended a request's retries, unless an earlier attempt of the
    write may have been applied (``unknown``): then that is what the caller must know (a create's
    key finds out), whatever ended the retries."""
    if unknown:
        raise OutcomeUnknownError(f"{exc.message} after a lost response; the first attempt may have been "
                                  "applied") from cause
    raise exc


_PREFER_MINIMAL = {"Prefer": "return=minimal"}


def _dumps(body: Any) -> bytes:
    """A request body as JSON bytes; an object JSON cannot hold raises ``TypeError``."""
    return json.dumps(body).encode()


def _loads(data: bytes) -> Any:
    """An answer's JSON; ``ValueError`` when it is not JSON (``msgspec.DecodeError`` is one)."""
    if _msgspec is not None:
        return _msgspec.json.decode(data)
    return json.loads(data)


def _new_key() -> str:
    """An idempotency key of 32 hex digits: the wall-clock ms (48 bits) then 80 random bits.

    Keys that sort by time land next to each other in the server's idempotency index: a batch of
    500 touches a few B-tree pages instead of 500 pages scattered over the whole index (random
    keys made every replica write ~4 KiB per create once the index outgrew the cache; batch
    ingest fell from 19.7k to 13.8k creates/s as a 3-node store grew to 500k tasks). The 80
    random bits keep keys unique across clients and within a millisecond.
    """
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


class _TransportError(ConnectionError):
    """No complete answer from a node. ``sent``: the request may have reached it (False only when
    the connection could not be opened, so the request never left)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class _AnswerTooLarge(Exception):
    """An answer whose body is longer than the client's ``max_response_bytes``: no node's answer."""

    def __init__(self, status: int, max_bytes: int) -> None:
        super().__init__(f"an answer ({status}) longer than max_response_bytes ({max_bytes:,}); is this a molens node?")
        self.status = status


class _Answer:
    __slots__ = ("data", "headers", "status")

    def __init__(self, status: int, headers: http.client.HTTPMessage, data: bytes) -> None:
        self.status = status
        self.headers = headers
        self.data = data


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket with something to read was closed by the server (or got bytes
    nobody asked for): either way it is not fit for another request."""
    if _poll is None:  # platforms without poll(2)
        return bool(select.select([sock], [], [], 0)[0])
    p = _poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(0))


_poll = getattr(select, "poll", None)
_FIXED_HEADERS = f"User-Agent: molens-python/{__version__}\r\nAccept-Encoding: identity\r\n"
"""Sent with every request: who asks, and that the answer must not be compressed (without the
header any coding is acceptable, and a proxy in front of the nodes may gzip; this client reads
bodies as they come)."""


class _NodePool:
    """Keep-alive HTTP/1.1 connections to one node, shared by threads (the standard library only).

    A request takes the most recently used idle connection (or opens one), sends its head and body in
    one write, and reads the answer with ``http.client.HTTPResponse`` (sized or chunked bodies);
    the connection goes back unless the answer closes it, at most ``maxsize`` kept idle. An idle
    connection is polled before use: one the server closed in the meantime (its keep-alive
    timeout) is dropped rather than written to, so no request is lost to a stale socket.

    Why not urllib3 (which this SDK used before): its layers cost ~350 us more of the client's CPU
    per request than this on the project's 2-core test machine, for the same socket work
    (docs/architecture.md#the-python-sdks-transport)."""

    def __init__(
        self, scheme: str, host: str, port: int | None, maxsize: int, connect_s: float, read_s: float,
        max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        https = scheme == "https"
        self._host = host
        self._port = port or (443 if https else 80)
        self._tls = ssl.create_default_context() if https else None
        name = f"[{host}]" if ":" in host else host
        self._host_header = name if port is None else f"{name}:{port}"
        self._maxsize = maxsize
        self._connect_s = connect_s
        self._read_s = read_s
        self._max_bytes = max_bytes
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False

    def _connect(self, within_s: float | None) -> socket.socket:
        connect_s = self._connect_s if within_s is None else max(min(self._connect_s, within_s), 0.001)
        try:
            sock = socket.create_connection((self._host, self._port), timeout=connect_s)
        except OSError as exc:
            raise _TransportError(f"cannot connect to {self._host_header}: {exc}", sent=False) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock.settimeout(connect_s)  # the handshake too
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
            sock.settimeout(self._read_s)
        except OSError as exc:  # TLS handshake (certificate) failures are OSErrors too
            sock.close()
            raise _TransportError(f"cannot connect to {self._host_header}: {exc}", sent=False) from exc
        return sock

    def _take(self, within_s: float | None) -> socket.socket:
        while True:
            with self._lock:
                sock = self._idle.pop() if self._idle else None
            if sock is None:
                return self._connect(within_s)
            if not _dropped(sock):
                return sock
            sock.close()

    def _give(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._maxsize:
                self._idle.append(sock)
                return
        sock.close()

    def request(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str], within_s: float | None = None
    ) -> _Answer:
        """One request; ``within_s`` shortens the connect and read timeouts (what is left of a retry
        deadline). An answer body longer than ``max_bytes`` raises :class:`_AnswerTooLarge`."""
        sock = self._take(within_s)
        shortened = within_s is not None and within_s < self._read_s
        if shortened:
            sock.settimeout(max(within_s or 0.0, 0.001))
        head = f"{method} {path} HTTP/1.1\r\nHost: {self._host_header}\r\n{_FIXED_HEADERS}"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        try:
            sock.sendall(head.encode("latin-1") + body if body else head.encode("latin-1"))
            r = http.client.HTTPResponse(sock, method=method)
            r.begin()
            data = r.read(self._max_bytes + 1)
            if len(data) > self._max_bytes:
                sock.close()  # the rest is never read
                raise _AnswerTooLarge(r.status, self._max_bytes)
        except (OSError, http.client.HTTPException) as exc:
            sock.close()
            raise _TransportError(f"{method} {path} to {self._host_header}: {type(exc).__name__}: {exc}", sent=True) from exc
        if r.will_close:
            sock.close()
        else:
            if shortened:
                sock.settimeout(self._read_s)
            self._give(sock)
        return _Answer(r.status, r.headers, data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()


class MolensClient:
    """A client of one Molens cluster (see the module docstring for routing and retries).

    ``urls`` are the nodes' HTTP base URLs (any subset; the leader is discovered). ``timeout`` is
    the per-request read timeout in seconds. ``namespace``: the namespace creates name and lists
    are limited to when a call gives none (None: the server's ``default`` for creates, every
    readable namespace for lists).
    """

    def __init__(
        self,
        urls: Sequence[str] | str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        max_attempts: int = 8,
        retry_deadline_s: float = 30.0,
        backoff_base_s: float = 0.05,
        backoff_max_s: float = 2.0,
        pool_maxsize: int = 16,
        namespace: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.namespace = None if namespace is None else _namespace("namespace", namespace)
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise ValueError("give at least one node URL")
        for name, v in (("timeout", timeout), ("retry_deadline_s", retry_deadline_s),
                        ("backoff_base_s", backoff_base_s), ("backoff_max_s", backoff_max_s)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"{name} must be a number > 0, got {v!r}")
        for name, n in (("max_attempts", max_attempts), ("pool_maxsize", pool_maxsize),
                        ("max_response_bytes", max_response_bytes)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be an int >= 1, got {n!r}")
        self._urls = [_base(u) for u in urls]
        self._lock = threading.Lock()
        self._target = self._urls[0]
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            if not all(" " < c <= "~" for c in token):  # printable ASCII: no header injection, no mangling
                raise ValueError("token must be printable ASCII without spaces")
            self._headers["Authorization"] = f"Bearer {token}"
        self._pool_maxsize = pool_maxsize
        self._connect_s = min(timeout, 5.0)
        self._read_s = timeout
        self._max_response_bytes = max_response_bytes
        self._pools: dict[str, _NodePool] = {}
        """One keep-alive pool per node base URL (the given ones and those redirects named)."""
        self.max_attempts = max_attempts
        self.retry_deadline_s = retry_deadline_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._rng = random.Random()

    # ------------------------------------------------------------------ tasks

    def create(self, task: Mapping[str, Any] | None = None, /, **fields: Any) -> Task:
        """Create one task from ``task`` and/or keyword fields (docs/architecture.md#task-rules); returns it.

        An ``idempotency_key`` is added when missing, so retries never create a duplicate. When the
        key matched an existing task, that task is returned. When no attempt got an answer after the
        request was sent, :class:`OutcomeUnknownError` carries the key (``idempotency_keys``): create
        again with it to learn whether the task exists, without making a second one.
        """
        body = self._keyed({**(task or {}), **fields})
        try:
            _, out = self._request("POST", "/api/v1/tasks", body, safe_retry=True)
        except OutcomeUnknownError as exc:
            exc.idempotency_keys = (str(body["idempotency_key"]),)
            raise
        return dict(out)

    def create_many(self, tasks: Sequence[Mapping[str, Any]], *, namespace: str | None = None) -> builtins.list[Task]:
        """Create tasks in batches of at most 1,000 (each one replicated entry); returns them in order.
        ``namespace``: of every task that names none (else the client's).

        Raises :class:`BatchRejectedError` (with ``item_errors`` by index within the failing batch)
        when a batch holds an invalid task or one naming a namespace that does not exist; earlier
        batches stay created. Raises :class:`BatchPartlyCreatedError` (every task created so far,
        and the errors, by index among ``tasks``) when a batch was applied without some of its items.
        Whatever it raises carries ``created`` (the earlier batches' tasks) and ``idempotency_keys``
        (every task's key, in order: :class:`ClientError`), so that the call can be made again
        without creating a task twice.
        """
        return self._create_all(tasks, minimal=False, namespace=namespace)

    def create_many_ids(self, tasks: Sequence[Mapping[str, Any]], *, namespace: str | None = None) -> builtins.list[str]:
        """As :meth:`create_many`, but returns the tasks' ids alone: the server answers each item with
        its id (``Prefer: return=minimal``), which spares it the echo of every task and this client
        the parsing of it -- for bulk loads that need no more (about half the client's CPU per task)."""
        return [str(t["id"]) for t in self._create_all(tasks, minimal=True, namespace=namespace)]

    def _create_all(
        self, tasks: Sequence[Mapping[str, Any]], minimal: bool, namespace: str | None
    ) -> builtins.list[Task]:
        out: builtins.list[Task] = []
        namespace = self._ns(namespace)  # checked even when there is no task to carry it
        bodies = [self._keyed(t, namespace) for t in tasks]
        try:
            for i in range(0, len(bodies), 1000):
                items = self._create_batch_items(bodies[i : i + 1000], minimal)
                refused = {i + j: it for j, it in enumerate(items) if isinstance(it, ApiError)}
                if refused:
                    made: builtins.list[Task | None] = [*out, *(None if isinstance(it, ApiError) else it
                                                                for it in items)]
                    raise BatchPartlyCreatedError(made + [None] * (len(bodies) - len(made)), refused)
                out.extend(it for it in items if not isinstance(it, ApiError))
        except ClientError as exc:  # how far it got, and the keys to go on with
            exc.created = tuple(out)
            exc.idempotency_keys = tuple(str(b["idempotency_key"]) for b in bodies)
            raise
        return out

    def _keyed(self, t: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """A create's body with an idempotency key and, when it names none, the namespace given
        (else the client's, else none: the server's ``default``)."""
        d = dict(t)
        if d.get("idempotency_key") is None:
            d["idempotency_key"] = _new_key()
        if d.get("namespace") is None:
            ns = self._ns(namespace)
            if ns is not None:
                d["namespace"] = ns
            else:
                d.pop("namespace", None)
        return d

    def _ns(self, namespace: str | None) -> str | None:
        """The namespace a call acts in: its own, else the client's (None: the server decides)."""
        return self.namespace if namespace is None else _namespace("namespace", namespace)

    def _create_batch_items(
        self, bodies: Sequence[Mapping[str, Any]], minimal: bool = False
    ) -> builtins.list[Task | ApiError]:
        """One batch request; per item the task (``minimal``: ``{"id": ...}`` alone), or the error
        the state machine gave it."""
        headers = _PREFER_MINIMAL if minimal else None
        try:
            _, out = self._request("POST", "/api/v1/tasks/batch", {"tasks": bodies}, safe_retry=True, headers=headers)
        except OutcomeUnknownError as exc:
            exc.idempotency_keys = tuple(str(b["idempotency_key"]) for b in bodies)
            raise
        missing = ApiError(500, "internal", "the server returned no task for this item")
        items: builtins.list[Task | ApiError] = [dict(t) if t is not None else missing for t in out["items"]]
        for e in out.get("errors", []):
            items[int(e["index"])] = _item_error(e)
        return items

    def get(self, task_id: str, *, consistency: str = "local") -> Task:
        """The task, or :class:`TaskNotFoundError`. ``consistency="linearizable"``: confirmed with the
        leader's quorum first, so it reflects every write acknowledged before the call
        (docs/api.md#get-apiv1taskstask_id); ``"local"``: the answering node's replica as it is."""
        if consistency not in ("local", "linearizable"):
            raise ValueError(f"consistency must be 'local' or 'linearizable', got {consistency!r:.80}")
        path = _task_path(task_id) + ("?consistency=linearizable" if consistency == "linearizable" else "")
        return dict(self._request("GET", path)[1])

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        type: str | None = None,
        scene: str | None = None,
        url: str | None = None,
        order: str = "created",
        page_size: int = 100,
        namespace: str | None = None,
    ) -> Iterator[Task]:
        """Every matching task, following cursors lazily; ``order``: ``created`` (oldest first),
        ``-created`` (newest first) or ``next_run`` (soonest next run first, only tasks that have one).
        ``namespace``: that namespace's alone (else the client's; neither: every one the key reads)."""
        if order not in _LIST_ORDERS:
            raise ValueError(f"order must be one of {', '.join(_LIST_ORDERS)}, got {order!r:.80}")
        q: dict[str, Any] = {"limit": _bounded("page_size", page_size, 1, MAX_PAGE_SIZE)}
        if order != "created":
            q["order"] = order
        if status:
            q["status"] = status if isinstance(status, str) else ",".join(status)
        for k, v in (("type", type), ("scene", scene), ("url", url), ("namespace", self._ns(namespace))):
            if v:
                q[k] = v
        return self._pages("/api/v1/tasks", q)

    def update(
        self, task_id: str, changes: Mapping[str, Any] | None = None, /, *, if_version: int | None = None,
        **fields: Any,
    ) -> Task:
        """Change the task's definition in place (``PATCH``): the fields given replace the stored
        ones, ``None`` resets one to its default. With ``if_version`` (a task's ``version``) the
        change applies only if the task is still at that version, else
        :class:`PreconditionFailedError`; without it, to the current version."""
        body = {**(changes or {}), **fields}
        headers = {"If-Match": f'"{if_version}"'} if if_version is not None else None
        # without If-Match the same patch again changes nothing: safe to retry after a lost answer
        if if_version is not None:
            _bounded("if_version", if_version, 0, 10**18 - 1)
        return dict(self._request("PATCH", _task_path(task_id), body, safe_retry=if_version is None,
                                  headers=headers)[1])

    def delete(self, task_id: str) -> Task:
        """Delete the task and its history; returns it as it was."""
        return self._act("DELETE", _task_path(task_id))

    def pause(self, task_id: str) -> Task:
        """Take a pending, firing or awaiting_ack task off the schedule (:class:`ConflictError` otherwise)."""
        return self._act("POST", _task_path(task_id) + "/pause")

    def resume(self, task_id: str, *, resume_from: ResumeFrom | str | None = None) -> Task:
        """Put a paused (or inactive periodic) task back on the schedule (docs/api.md, resume).

        ``resume_from`` (a :class:`ResumeFrom` or its value): ``"now"`` (the API's default) drops
        what a periodic task missed while paused; ``"schedule"`` takes up the instant it was
        waiting for and applies the task's ``catchup`` to what it missed. Anything else is a
        ``ValueError`` before any request.
        """
        if resume_from is None:
            return self._act("POST", _task_path(task_id) + "/resume")
        body = {"resume_from": _choice(ResumeFrom, resume_from, "resume_from")}
        return self._act("POST", _task_path(task_id) + "/resume", body)

    def trigger(self, task_id: str) -> Task:
        """Run the task's upcoming occurrence now."""
        return self._act("POST", _task_path(task_id) + "/trigger", resend=False)

    def backfill(self, task_id: str, *, start: int, end: int) -> dict[str, Any]:
        """Fire the periodic task's occurrences scheduled in ``[start, end)`` (epoch ms, ``end``
        not after now) now, oldest first, then resume its schedule (at most 10,000; docs/api.md#backfill).
        Returns ``{"occurrences": n, "first": ms, "last": ms, "task": {...}}``. Not retried after an
        unknown outcome (a second backfill of the range would fire it twice, or be refused while
        the first runs)."""
        start = _bounded("start", start, 0, MAX_EPOCH_MS)
        end = _bounded("end", end, 0, MAX_EPOCH_MS)
        if start >= end:
            raise ValueError(f"start ({start}) must be before end ({end})")
        return dict(self._request("POST", _task_path(task_id) + "/backfill", {"start": start, "end": end},
                                  safe_retry=False)[1])

    def _act(self, method: str, path: str, body: Any = None, *, resend: bool = True) -> Task:
        """A task action. ``resend``: sending it again after a lost answer does no harm (pause,
        resume, delete: a repeat is refused with 404/409, which then raises OutcomeUnknownError);
        a trigger sent twice would fire twice."""
        return dict(self._request(method, path, body, safe_retry=resend)[1])

    def executions(
        self,
        task_id: str | None = None,
        *,
        result: str | None = None,
        since: int | None = None,
        until: int | None = None,
        page_size: int = 100,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Executions newest first (of one task, or all: ``task_id=None``), following cursors lazily.
        ``since``/``until`` are epoch ms (``since`` inclusive, ``until`` exclusive); ``namespace``
        (else the client's) limits the list of all executions to that namespace's."""
        q: dict[str, Any] = {"limit": _bounded("page_size", page_size, 1, MAX_PAGE_SIZE)}
        if result is not None:
            if not isinstance(result, str) or not result:
                raise ValueError(f"result must be an execution result such as 'success', got {result!r:.80}")
            q["result"] = result
        q.update(_dead_filter(None, None, None, since, until))  # the same time checks
        ns = self._ns(namespace)
        if ns is not None and task_id is None:
            q["namespace"] = ns
        path = _task_path(task_id) + "/executions" if task_id is not None else "/api/v1/executions"
        return self._pages(path, q)

    # ------------------------------------------------------------------ dead letters

    def dead_letters(
        self,
        *,
        task_id: str | None = None,
        flow: str | None = None,
        kind: DeadLetterKind | str | None = None,
        since: int | None = None,
        until: int | None = None,
        page_size: int = 100,
        namespace: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Dead letters newest first (occurrences that failed for good: docs/api.md#dead-letters),
        filtered, following cursors lazily. ``since``/``until`` are epoch ms, inclusive;
        ``namespace`` as for :meth:`list`."""
        q: dict[str, Any] = {"limit": _bounded("page_size", page_size, 1, MAX_PAGE_SIZE),
                             **self._dead_filter(task_id, flow, kind, since, until, namespace)}
        return self._pages("/api/v1/dead-letters", q)

    def _dead_filter(
        self, task_id: str | None, flow: str | None, kind: DeadLetterKind | str | None, since: int | None,
        until: int | None, namespace: str | None,
    ) -> dict[str, Any]:
        """A dead-letter filter with the call's namespace (else the client's)."""
        out = _dead_filter(task_id, flow, kind, since, until)
        ns = self._ns(namespace)
        if ns is not None:
            out["namespace"] = ns
        return out

    def dead_letter(self, dead_id: str) -> dict[str, Any]:
        """One dead letter by id (:class:`TaskNotFoundError`, the client's 404, when there is none)."""
        return dict(self._request("GET", _dead_path(dead_id))[1])

    def redrive(self, dead_id: str) -> dict[str, Any]:
        """Deliver a dead letter's occurrence again (same fire id, attempts continuing); for an
        at_most_once task the answer carries a ``warning``. Not retried after an unknown outcome."""
        return dict(self._request("POST", _dead_path(dead_id) + "/redrive", None, safe_retry=False)[1])

    def redrive_matching(
        self,
        *,
        task_id: str | None = None,
        flow: str | None = None,
        kind: DeadLetterKind | str | None = None,
        since: int | None = None,
        until: int | None = None,
        limit: int | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Redrive every dead letter matching the filter (none: every dead letter the key may change),
        at most ``limit`` (default and most :data:`MAX_BULK`); ``{"matched", "redriven", "error_count",
        "errors", "more"}`` (``more``: call again; with ``interrupted``, a leader change stopped it after
        ``redriven`` of them, and calling again does the rest). ``namespace`` (else the client's) limits
        it to that namespace's. Not retried after an unknown outcome."""
        body = self._dead_filter(task_id, flow, kind, since, until, namespace)
        if limit is not None:
            body["limit"] = _bounded("limit", limit, 1, MAX_BULK)
        return dict(self._request("POST", "/api/v1/dead-letters/redrive", body, safe_retry=False)[1])

    def delete_dead_letter(self, dead_id: str) -> dict[str, Any]:
        """Delete one dead letter: ``{"deleted": 1}`` (:class:`TaskNotFoundError` when there is none)."""
        return dict(self._request("DELETE", _dead_path(dead_id), None)[1])

    def delete_dead_letters(
        self,
        *,
        task_id: str | None = None,
        flow: str | None = None,
        kind: DeadLetterKind | str | None = None,
        since: int | None = None,
        until: int | None = None,
        limit: int | None = None,
        all: bool = False,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Delete the dead letters matching the filter, at most ``limit`` (default and most
        :data:`MAX_BULK`); ``{"matched", "deleted", "error_count", "errors", "more"}`` (``more``:
        call again; ``interrupted`` as for :meth:`redrive_matching`). An empty filter deletes every dead letter only with ``all=True``; without it
        the API refuses it (:class:`BadRequestError`, field ``all``). With ``limit`` it is not sent
        twice after a lost answer (:class:`OutcomeUnknownError`): a second one could delete ``limit``
        more. Without it, it is sent again, and the answer counts what that second request deleted
        (not what the lost one did); ``more`` is still right. ``namespace`` (else the
        client's) limits it to that namespace's; the client's own namespace is no filter (so
        ``all=True`` deletes every one of that namespace's), a ``namespace`` given to the call is."""
        if not isinstance(all, bool):
            raise ValueError(f"all must be a bool, got {all!r}")
        q = _dead_filter(task_id, flow, kind, since, until)
        if namespace is not None or q or all:  # the client's namespace alone is no filter: all=True first
            q = self._dead_filter(task_id, flow, kind, since, until, namespace)
        if limit is not None:
            q["limit"] = _bounded("limit", limit, 1, MAX_BULK)
        if all:
            q["all"] = "true"
        path = "/api/v1/dead-letters" + (f"?{urlencode(q)}" if q else "")
        # deleting what still matches again does no harm, unless a limit bounds how many may go: sent
        # again after a lost answer, it could delete up to ``limit`` more
        return dict(self._request("DELETE", path, None, safe_retry=limit is None)[1])

    # ------------------------------------------------------------------ flows

    def flows(self) -> builtins.list[dict[str, Any]]:
        """Every flow with settings or recent fires, with the leader's live figures (docs/api.md#flows)."""
        return list(self._request("GET", "/api/v1/flows")[1]["items"])

    def flow(self, key: str) -> dict[str, Any]:
        """One flow (``TaskNotFoundError``, the client's 404, when it has no settings and no fires)."""
        return dict(self._request("GET", _flow_path(key))[1])

    def set_flow(
        self,
        key: str,
        *,
        rate_per_s: float | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
        paused: bool = False,
        adaptive: bool = False,
    ) -> dict[str, Any]:
        """Set flow ``key``'s limits, replaced whole (``None``: unlimited); replicated through Raft."""
        body = {"rate_per_s": rate_per_s, "burst": burst, "concurrency": concurrency, "paused": paused,
                "adaptive": adaptive}
        return dict(self._request("PUT", _flow_path(key), body)[1])

    def delete_flow(self, key: str) -> dict[str, Any]:
        """Forget flow ``key``'s limits (its fires go unlimited)."""
        return dict(self._request("DELETE", _flow_path(key), None, safe_retry=False)[1])

    def pause_flow(self, key: str) -> dict[str, Any]:
        """Hold every fire of flow ``key`` until :meth:`resume_flow` (only the paused flag changes)."""
        return dict(self._request("POST", _flow_path(key) + "/pause")[1])

    def resume_flow(self, key: str) -> dict[str, Any]:
        return dict(self._request("POST", _flow_path(key) + "/resume")[1])

    # ------------------------------------------------------------------ namespaces and keys (admin)

    def namespaces(self) -> builtins.list[dict[str, Any]]:
        """The namespaces the key may read, ``default`` first: ``{"name", "quotas", "created_at",
        "updated_at"}`` each."""
        return list(self._pages("/api/v1/namespaces", {}))

    def get_namespace(self, name: str) -> dict[str, Any]:
        """One namespace (:class:`TaskNotFoundError`, the client's 404, when it does not exist or
        lies outside the key's namespaces)."""
        return dict(self._request("GET", _namespace_path(name))[1])

    def create_namespace(self, name: str, *, quotas: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Admin: make namespace ``name`` with ``quotas`` (``max_pending_tasks``, ``creates_per_s``,
        ``max_payload_bytes``, ``fires_per_s``; each left out: unlimited). :class:`ConflictError` if it exists."""
        body: dict[str, Any] = {"name": _namespace("name", name)}
        if quotas is not None:
            body["quotas"] = dict(quotas)
        return dict(self._request("POST", "/api/v1/namespaces", body)[1])

    def update_namespace(self, name: str, *, quotas: Mapping[str, Any]) -> dict[str, Any]:
        """Admin: replace the namespace's quotas whole (:class:`ConflictError` for ``default``)."""
        return dict(self._request("PATCH", _namespace_path(name), {"quotas": dict(quotas)})[1])

    def delete_namespace(self, name: str) -> dict[str, Any]:
        """Admin: delete an empty namespace (:class:`ConflictError` while it holds tasks, and for
        ``default``)."""
        return dict(self._request("DELETE", _namespace_path(name))[1])

    def api_keys(self) -> builtins.list[dict[str, Any]]:
        """Admin: every API key, oldest first, never a secret: ``{"id", "name", "role", "namespaces",
        "created_at", "last_used_at"}`` each."""
        return list(self._pages("/api/v1/keys", {}))

    def get_api_key(self, key_id: str) -> dict[str, Any]:
        """Admin: one key, without its secret."""
        return dict(self._request("GET", _key_path(key_id))[1])

    def create_api_key(self, name: str, *, role: Role | str, namespaces: Sequence[str]) -> dict[str, Any]:
        """Admin: a new API key ``role`` (a :class:`Role` or its value) of ``namespaces`` (names, or
        ``["*"]`` for every one). The answer's ``secret`` is shown this once: give it to
        :class:`MolensClient` as ``token``. Not sent twice after a lost answer (that would make two
        keys)."""
        if isinstance(namespaces, str) or not namespaces:
            raise ValueError(f"namespaces must be a non-empty list of names or ['*'], got {namespaces!r:.80}")
        names = [n if n == "*" else _namespace("namespaces", n) for n in namespaces]
        body = {"name": _id("name", name), "role": _choice(Role, role, "role"), "namespaces": names}
        return dict(self._request("POST", "/api/v1/keys", body, safe_retry=False)[1])

    def delete_api_key(self, key_id: str) -> dict[str, Any]:
        """Admin: revoke a key on every node (:class:`ConflictError` for ``bootstrap``)."""
        return dict(self._request("DELETE", _key_path(key_id))[1])

    # ------------------------------------------------------------------ cluster

    def cluster_status(self) -> dict[str, Any]:
        return dict(self._request("GET", "/api/v1/cluster/status")[1])

    def transfer_leader(self, to: str | None = None) -> dict[str, Any]:
        """Have the leader hand leadership to voter ``to`` (default: the most caught-up live one);
        answers once it stepped down (docs/api.md#post-apiv1clustertransfer-leader). Not sent twice
        after a lost answer (a second one would move leadership again)."""
        body = {} if to is None else {"to": _id("to", to)}
        return dict(self._request("POST", "/api/v1/cluster/transfer-leader", body, safe_retry=False)[1])

    def leader(self) -> dict[str, Any]:
        """``{"leader_id", "leader_url", "term", "role"}`` as the answering node sees it."""
        return dict(self._request("GET", "/api/v1/cluster/leader")[1])

    def cluster_stats(self) -> dict[str, Any]:
        """Every member's :meth:`stats`, leader first."""
        return dict(self._request("GET", "/api/v1/cluster/stats")[1])

    def stats(self, *, node_id: str | None = None, local: bool = False) -> dict[str, Any]:
        """One node's statistics and task counts: the answering node's, or ``node_id``'s (asked
        through it); ``local=True``: the answering node's own, never passed on."""
        q: dict[str, Any] = {}
        if node_id is not None:
            q["node_id"] = _id("node_id", node_id)
        if local:
            if node_id is not None:
                raise ValueError("local=True asks the answering node only; give node_id or local, not both")
            q["local"] = "1"
        return dict(self._request("GET", "/api/v1/stats" + (f"?{urlencode(q)}" if q else ""))[1])

    def stats_series(self, range: str = "hour", *, local: bool = False) -> dict[str, Any]:
        """Fires, failures, retries and lateness per bucket over the last ``range`` (``hour``: 10 s
        buckets, ``day``: 5 min): the cluster's, or with ``local=True`` the answering node's own."""
        q = {"range": _choice(SeriesRange, range, "range"), **({"local": "1"} if local else {})}
        return dict(self._request("GET", f"/api/v1/stats/series?{urlencode(q)}")[1])

    def url_stats(
        self,
        *,
        since: int | None = None,
        until: int | None = None,
        url: str | None = None,
        bucket_ms: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """Callback latency per URL over ``[since, until)`` (epoch ms; the API's default: the last
        hour), busiest first, each with a ``trend`` by ``bucket_ms``: ``{"since", "until",
        "bucket_ms", "items"}``."""
        q: dict[str, Any] = {}
        for name, ms in (("since", since), ("until", until)):
            if ms is not None:
                q[name] = _bounded(name, ms, 0, MAX_EPOCH_MS)
        if since is not None and until is not None and until <= since:
            raise ValueError(f"until ({until}) must be after since ({since})")
        if url is not None:
            q["url"] = _id("url", url)
        if bucket_ms is not None:
            q["bucket_ms"] = _bounded("bucket_ms", bucket_ms, 60_000, MAX_EPOCH_MS)
        if limit is not None:
            q["limit"] = _bounded("limit", limit, 1, MAX_PAGE_SIZE)
        return dict(self._request("GET", "/api/v1/stats/urls" + (f"?{urlencode(q)}" if q else ""))[1])

    def healthz(self) -> dict[str, Any]:
        """``{"ok": true, "node_id"}``: the answering node is alive."""
        return dict(self._request("GET", "/healthz")[1])

    def readyz(self) -> dict[str, Any]:
        """``{"ready": true, "node_id", "role", "leader_id"}``: the answering node knows a leader
        (its ``503`` is retried like any other; :class:`UnavailableError` after the last try)."""
        return dict(self._request("GET", "/readyz")[1])

    # ------------------------------------------------------------------ observability

    def schedule_preview(
        self,
        *,
        type: str = "periodic",
        cron_expr: str | None = None,
        timezone: str | None = None,
        interval_ms: int | None = None,
        run_at: int | None = None,
        count: int | None = None,
        after: int | None = None,
    ) -> dict[str, Any]:
        """The next fire times of a schedule, validated as a create would be (the API's
        :class:`BadRequestError` names a bad field): ``{"items", "local", "timezone", "after",
        "description"}``. A periodic schedule takes ``cron_expr`` or ``interval_ms``, a delayed one
        ``interval_ms`` or ``run_at``; ``count`` 1..100 (default 5) times after ``after`` (default now)."""
        q: dict[str, Any] = {"type": _choice(_TaskType, type, "type")}
        for name, text in (("cron_expr", cron_expr), ("timezone", timezone)):
            if text is not None:
                q[name] = _id(name, text)
        if interval_ms is not None:
            q["interval_ms"] = _bounded("interval_ms", interval_ms, 0, MAX_EPOCH_MS)
        for name, ms in (("run_at", run_at), ("after", after)):
            if ms is not None:
                q[name] = _bounded(name, ms, 0, MAX_EPOCH_MS)
        if count is not None:
            q["count"] = _bounded("count", count, 1, MAX_PREVIEW)
        return dict(self._request("GET", f"/api/v1/schedule/preview?{urlencode(q)}")[1])

    def wheel_distribution(self) -> dict[str, Any]:
        """How the leader's time wheel is filled, per level and slot (a follower passes the request
        on to the leader): ``{"time_ms", "tick_ms", "wheel_size", "timers", "overflow", "levels",
        "window", "far_future"}``."""
        return dict(self._request("GET", "/api/v1/timewheel/distribution")[1])

    def wheel_distribution_png(self, *, level: int | None = None, width: int | None = None) -> bytes:
        """The same as a PNG heatmap: every level, or one (0..63; the API refuses a level the wheel
        does not have), ``width`` 400..4000 pixels (default 800)."""
        q: dict[str, Any] = {}
        if level is not None:
            q["level"] = _bounded("level", level, 0, 63)
        if width is not None:
            q["width"] = _bounded("width", width, 400, 4000)
        path = "/api/v1/timewheel/distribution.png" + (f"?{urlencode(q)}" if q else "")
        return bytes(self._request("GET", path, raw=True)[1]["raw"])

    def metrics(self) -> str:
        """The answering node's metrics in the Prometheus text format (``/metrics``)."""
        return bytes(self._request("GET", "/metrics", raw=True)[1]["raw"]).decode()

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    def __enter__(self) -> MolensClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport

    def _pages(self, path: str, q: dict[str, Any]) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            qq = dict(q)
            if cursor:
                qq["cursor"] = cursor
            _, page = self._request("GET", f"{path}?{urlencode(qq)}" if qq else path)
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def _backoff(self, n: int, deadline: float) -> None:
        """Sleep before attempt ``n + 1``, leaving it at least :data:`MIN_ATTEMPT_S` of the deadline."""
        # the exponent capped: 2 ** 1100 is past a float (max_attempts may be large)
        delay = min(self.backoff_max_s, self.backoff_base_s * (2 ** min(n - 1, 64))) * self._rng.uniform(0.5, 1.0)
        time.sleep(max(0.0, min(delay, deadline - time.monotonic() - MIN_ATTEMPT_S)))

    def _pool(self, base: str) -> _NodePool:
        """The keep-alive pool of a node (a dict lookup)."""
        pool = self._pools.get(base)
        if pool is None:
            with self._lock:
                pool = self._pools.get(base)
                if pool is None:
                    p = urlsplit(base)
                    pool = _NodePool(
                        p.scheme, p.hostname or "", p.port, self._pool_maxsize, self._connect_s, self._read_s,
                        self._max_response_bytes,
                    )
                    self._pools[base] = pool
        return pool

    def _next_node(self, failed: str) -> str:
        with self._lock:
            i = self._urls.index(failed) if failed in self._urls else -1
            self._target = self._urls[(i + 1) % len(self._urls)]
            return self._target

    def _request(
        self, method: str, path: str, body: Any = None, *, safe_retry: bool = True,
        headers: Mapping[str, str] | None = None, raw: bool = False,
    ) -> tuple[int, dict[str, Any]]:
        """Send with redirects, retries and backoff; returns ``(status, json)`` of a 2xx answer.

        ``safe_retry``: retrying after an unknown outcome cannot do harm (reads, keyed creates).
        ``raw``: a 2xx answer is not JSON (PNG, Prometheus text); its bytes are ``json["raw"]``.
        """
        data = _dumps(body) if body is not None else None
        extra = dict(headers or {})
        headers = {**self._headers, **extra} if data is None else {
            **self._headers, **extra, "Content-Length": str(len(data))}
        deadline = time.monotonic() + self.retry_deadline_s
        target = self._target
        attempt = 0
        redirects = 0
        unknown = False  # an earlier attempt may have been applied
        last_exc: BaseException | None = None
        answered: tuple[int, dict[str, Any], str | None] | None = None
        """A node's last 503 / 507 answer (status, body, ``Retry-After``): the cluster is there, not serving."""
        while True:
            attempt += 1
            try:
                r = self._pool(target).request(method, path, data, headers, deadline - time.monotonic())
            except _AnswerTooLarge as exc:  # a write answered at all may have been applied
                _give_up(unknown or method != "GET", exc, ApiError(502, "http_error", f"{method} {path}: {exc}"))
            except _TransportError as exc:
                unknown = unknown or (exc.sent and method != "GET")
                last_exc = exc
                log.debug("request failed node=%s attempt=%d: %s", target, attempt, type(exc).__name__)
                if unknown and not safe_retry:  # sending it again could apply it twice (a backfill fires twice)
                    raise OutcomeUnknownError(f"{method} {path}: no answer; it may have been applied") from exc
                if attempt >= self.max_attempts or _no_time_for_another(deadline):
                    if unknown:  # a keyed create: sent, maybe applied; the same key finds out
                        raise OutcomeUnknownError(
                            f"{method} {path}: no answer after {attempt} attempts ({exc}); it may have been applied"
                        ) from exc
                    if answered is not None:  # some node answered "no leader" or "disk full": say that, not "unreachable"
                        _raise_for(*answered[:2], path, answered[2])
                    raise ConnectionFailedError(
                        f"{method} {path}: no node answered after {attempt} attempts ({exc})"
                    ) from exc
                target = self._next_node(target)
                redirects = 0  # loop detection counts consecutive redirects only (a dead leader is not a loop)
                self._backoff(attempt, deadline)
                continue
            status = r.status
            if status in (307, 308):
                loc = r.headers.get("Location", "")
                shown = _shown_url(loc)
                try:
                    leader = _base(loc, path_ok=True)
                except ValueError:
                    _give_up(unknown, last_exc, UnavailableError(
                        status, "redirect", f"{method} {path}: bad redirect to {shown!r:.200}"))
                if target.startswith("https://") and leader.startswith("http://"):
                    # the bearer token would go unencrypted (a node behind a TLS proxy names its plain
                    # address): ask the next configured node instead, as after a failed attempt. The
                    # parsed scheme is compared (``HTTP://`` is plain http too)
                    if len(self._urls) == 1 or attempt >= self.max_attempts or _no_time_for_another(deadline):
                        _give_up(unknown, last_exc, UnavailableError(
                            status, "redirect", f"{method} {path}: the leader's address {leader} is plain http; "
                            "not following it from https (give the client every node's https URL)"))
                    target = self._next_node(target)
                    self._backoff(attempt, deadline)
                    continue
                if redirects >= MAX_REDIRECTS:
                    # nodes name each other as leader: an election is settling. Back off and ask
                    # again, as after a failed attempt; a loop that outlasts the retries is an error
                    if attempt >= self.max_attempts or _no_time_for_another(deadline):
                        _give_up(unknown, last_exc, UnavailableError(
                            status, "redirect", f"{method} {path}: looping redirect to {shown!r:.200}"))
                    redirects = 0
                    self._backoff(attempt, deadline)
                    continue
                redirects += 1
                attempt -= 1  # following the leader is not a failure
                target = leader
                with self._lock:
                    self._target = target
                continue
            if raw and 200 <= status < 300:
                with self._lock:
                    self._target = target
                return status, {"raw": r.data}
            if 300 <= status < 400:  # not a node's answer: a proxy's or another server's redirect
                _give_up(unknown, last_exc, ApiError(
                    status, "http_error", f"{method} {path}: unexpected redirect {status} to "
                    f"{_shown_url(r.headers.get('Location', ''))[:200]!r}; is this a molens node?"))
            try:
                parsed = _loads(r.data) if r.data else {}
            except ValueError:
                parsed = {"error": {"code": "http_error", "message": r.data[:200].decode("utf-8", "replace")}}
                status = status if status >= 400 else 502  # a 2xx that is not JSON is no node's answer
            if not isinstance(parsed, dict):
                parsed = {"error": {"code": "http_error", "message": f"unexpected JSON from {path}"}}
                status = status if status >= 400 else 502
            if r.status in (502, 504):
                # a proxy's: no node answers these, so the node behind it did not answer in time and
                # may have had the request: as a lost answer (a write's outcome is unknown), the next node
                unknown = unknown or method != "GET"
                last_exc = ApiError(status, "http_error", f"{method} {path}: {status} from a proxy")
                log.debug("proxy answered %d node=%s attempt=%d", status, target, attempt)
                if unknown and not safe_retry:
                    raise OutcomeUnknownError(f"{method} {path}: a proxy answered {status}; it may have been "
                                              "applied") from last_exc
                if attempt >= self.max_attempts or _no_time_for_another(deadline):
                    if unknown:
                        raise OutcomeUnknownError(f"{method} {path}: a proxy answered {status} after {attempt} "
                                                  "attempts; it may have been applied") from last_exc
                    _raise_for(status, parsed, path)
                target = self._next_node(target)
                redirects = 0
                self._backoff(attempt, deadline)
                continue
            if status in (503, 507):  # 507: the leader's disk is full, nothing applied; it recovers by itself
                answered = (status, parsed, r.headers.get("Retry-After"))
                code = str((parsed.get("error") or {}).get("code", "unavailable"))
                unknown = unknown or code == "outcome_unknown"
                if unknown and not safe_retry:
                    raise OutcomeUnknownError(f"{method} {path}: leadership changed; it may have been applied")
                if attempt >= self.max_attempts or _no_time_for_another(deadline):
                    if unknown:
                        raise OutcomeUnknownError(f"{method} {path}: leadership changed; it may have been applied")
                    _raise_for(status, parsed, path, r.headers.get("Retry-After"))
                retry_after = r.headers.get("Retry-After")
                if code == "no_leader" and len(self._urls) > 1:
                    target = self._next_node(target)
                self._backoff(attempt, deadline)
                if retry_after and retry_after.isascii() and retry_after.isdigit() and attempt > 2:
                    time.sleep(max(0.0, min(float(retry_after), deadline - time.monotonic() - MIN_ATTEMPT_S)))
                continue
            if status >= 400:
                # after a lost answer a refusal cannot tell whether the first attempt applied: a
                # keyed create's retry meets a full quota (429) even when the first one made the task
                if unknown and status in (404, 409, 412, 429) and method != "GET":
                    raise OutcomeUnknownError(
                        f"{method} {path}: answered {status} after a lost response; the first attempt "
                        "may have been applied"
                    ) from last_exc
                _raise_for(status, parsed, path, r.headers.get("Retry-After"))
            with self._lock:
                self._target = target
            return status, parsed


# -------------------------------------------------------------------------------------------------


class BatchingClient:
    """Collects :meth:`submit` calls into batch creates (flush by count or interval) on a thread.

    Each submitted task gets a :class:`~concurrent.futures.Future` resolved with the created task
    or failed with its own error: an invalid task fails only its future, the rest of its batch is
    re-sent at once. :meth:`close` flushes everything first. ``max_pending`` bounds the queue:
    :meth:`submit` blocks while it is full. ``senders`` threads send batches concurrently (more
    than one overlaps the network and apply latency of one batch with the next). ``ids_only``:
    the futures resolve with ``{"id": ...}`` alone (the batches ask for ``Prefer: return=minimal``),
    for loads that need no more of the created tasks.
    """

    def __init__(
        self,
        client: MolensClient,
        *,
        max_batch: int = 500,
        flush_interval_s: float = 0.05,
        max_pending: int = 100_000,
        senders: int = 1,
        ids_only: bool = False,
    ) -> None:
        if not 1 <= max_batch <= 1000:
            raise ValueError("max_batch must be in 1..1000")
        if max_pending < 1 or senders < 1 or not flush_interval_s > 0:
            raise ValueError("max_pending and senders must be >= 1 and flush_interval_s > 0 (submit would wait forever)")
        self.client = client
        self.ids_only = ids_only
        self.max_batch = max_batch
        self.flush_interval_s = flush_interval_s
        self.max_pending = max_pending
        self._queue: deque[tuple[dict[str, Any], Future[Task]]] = deque()
        self._cv = threading.Condition()
        self._sending: dict[int, int] = {}
        """The batches being sent, each a run of submits: first -> end (submit numbers, from 0)."""
        self._closing = False
        self._oldest = 0.0
        self._submitted = 0
        """Tasks submitted so far; ``_taken`` of them have left the queue."""
        self._taken = 0
        self._flush_upto = 0
        """A flush wants every task up to this count sent without waiting for a full batch."""
        self._threads = [
            threading.Thread(target=self._run, name=f"molens-batcher-{i}", daemon=True) for i in range(max(1, senders))
        ]
        for t in self._threads:
            t.start()

    def submit(self, task: Mapping[str, Any] | None = None, /, **fields: Any) -> Future[Task]:
        """Queue one task for creation; the future resolves with the created task. A future cancelled
        before its batch is sent is left out of it (never created); once sent it cannot be cancelled.
        Raises :class:`ClientError` once :meth:`close` has begun, also for a call that was waiting
        for room in the queue then."""
        body = self.client._keyed({**(task or {}), **fields})
        fut: Future[Task] = Future()
        with self._cv:
            while not self._closing and len(self._queue) >= self.max_pending:
                self._cv.wait()
            if self._closing:
                raise ClientError("the batching client is closed")
            first = not self._queue
            if first:
                self._oldest = time.monotonic()
            self._queue.append((body, fut))
            self._submitted += 1
            if first or len(self._queue) >= self.max_batch:
                self._cv.notify_all()  # start the interval clock, or send a full batch now
        return fut

    def flush(self, timeout: float | None = None) -> None:
        """Send everything submitted so far and wait until it has been answered (what other threads
        submit meanwhile is not waited for, and batches as usual)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            upto = self._flush_upto = max(self._flush_upto, self._submitted)
            self._cv.notify_all()
            while self._taken < upto or any(first < upto for first in self._sending):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("flush timed out: tasks submitted before it are not answered yet")
                self._cv.wait(left)

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender threads. ``TimeoutError`` when ``timeout`` ends first: tasks
        submitted are not all answered yet (they are still sent, and their futures resolve, while the
        process lives; the threads are daemons, so an exit drops what is left)."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            with self._cv:
                left = len(self._queue) + sum(end - first for first, end in self._sending.items())
            raise TimeoutError(f"close timed out: {left} submitted tasks are not answered yet")

    def __enter__(self) -> BatchingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    n = len(self._queue)
                    if n >= self.max_batch or (n and (self._closing or self._taken < self._flush_upto)):
                        break
                    if not n:
                        if self._closing:
                            return
                        self._cv.wait()
                        continue
                    left = self._oldest + self.flush_interval_s - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                taken = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
                first = self._taken
                self._taken += len(taken)
                if self._queue:
                    self._oldest = time.monotonic()
                # a future cancelled meanwhile is left out; the others can no longer be cancelled
                batch = [(b, f) for b, f in taken if f.set_running_or_notify_cancel()]
                self._sending[first] = self._taken
                self._cv.notify_all()
            try:
                self._send(batch)
            finally:
                with self._cv:
                    del self._sending[first]
                    self._cv.notify_all()

    def _send(self, batch: builtins.list[tuple[dict[str, Any], Future[Task]]]) -> None:
        while batch:
            try:
                results = self.client._create_batch_items([b for b, _ in batch], self.ids_only)
            except BatchRejectedError as exc:
                keep = []
                for i, (body, fut) in enumerate(batch):
                    err = exc.item_errors.get(i)
                    if err is not None:
                        fut.set_exception(err)
                    else:
                        keep.append((body, fut))
                if len(keep) == len(batch):  # nothing attributable: do not loop forever
                    for _, fut in batch:
                        fut.set_exception(exc)
                    return
                batch = keep
                continue
            except OutcomeUnknownError as exc:  # each future gets its own task's key to create again with
                for body, fut in batch:
                    own = OutcomeUnknownError(str(exc))
                    own.idempotency_keys = (str(body["idempotency_key"]),)
                    own.__cause__ = exc
                    fut.set_exception(own)
                return
            except BaseException as exc:
                for _, fut in batch:
                    fut.set_exception(exc)
                return
            for (_, fut), r in zip(batch, results):
                if isinstance(r, ApiError):
                    fut.set_exception(r)
                else:
                    fut.set_result(r)
            return


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "MAX_BULK",
    "MIN_ATTEMPT_S",
    "MAX_PAGE_SIZE",
    "ApiError",
    "BadRequestError",
    "BatchPartlyCreatedError",
    "BatchRejectedError",
    "BatchingClient",
    "ClientError",
    "ConflictError",
    "ConnectionFailedError",
    "DeadLetterKind",
    "ForbiddenError",
    "MolensClient",
    "OutcomeUnknownError",
    "PreconditionFailedError",
    "QuotaExceededError",
    "ResumeFrom",
    "Role",
    "SeriesRange",
    "TaskNotFoundError",
    "TooManyRequestsError",
    "UnauthorizedError",
    "UnavailableError",
]
