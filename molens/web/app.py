"""The REST API (docs/api.md) as a Bottle app: :func:`make_app(ctx) <make_app>`.

Every route is registered through :class:`Api.route`, which adds, in this order: the bearer-token
check (unless the route is open), the leader check for writes (a follower answers ``307`` with
``Location`` on the leader plus ``X-Molens-Leader``; with no leader ``503`` + ``Retry-After``), the
``X-Molens-Role`` header, and rendering of any :class:`~molens.model.MolensError` as
``{"error": {"code", "message", "field"}}``. Handlers only validate, build FSM commands, call
:meth:`ApiContext.propose` and render.

Decisions recorded here:

- **Batch create is atomic**: every item is validated first; if any is bad the answer is ``400``
  with ``{"items": [null...], "errors": [{"index", "error"}], "error": {...}}`` and nothing is
  proposed. Otherwise all tasks go in ONE ``CreateTasks`` entry (all or nothing in the log).
- **Task listing** is in id (= creation) order, or with ``order`` newest first (``-created``) or by
  next run, soonest first (``next_run``: from the store's due index, so only tasks with a next run
  are listed). Filters (``status`` comma list, ``type``, ``scene``,
  ``url`` substring, case-insensitive) are applied while scanning, except that in id order a
  ``status`` or ``scene`` filter scans that index of the store instead; one request examines at most
  :data:`MAX_SCAN` tasks, and once it has examined more than ``limit`` (the filter is skipping
  tasks) it stops after :data:`MAX_SCAN_MS`, so a request stays short on a loaded node too. A page
  may therefore hold fewer than ``limit`` items with a non-null ``next_cursor``: keep following the
  cursor until it is null. Cursors are opaque. The answer says how many tasks it examined
  (``scanned``), so a client can show how far a search got and ask before searching further (the
  console does). A ``q`` text search walks the node's search index (:mod:`molens.fsm.search`)
  instead, in id order, the other filters applied to its matches.
- **Open routes** (no token): ``/healthz``, ``/readyz``, ``/api/v1/openapi.json`` and the test
  endpoints (they are callback targets; the fire worker sends no bearer token).
- **Content type**: JSON bodies must be ``application/json`` (or ``*+json``, or no content type),
  in UTF-8 (a ``charset`` other than ``utf-8`` is refused); anything else is ``415``. Bodies over ``max_body_bytes`` are ``413`` before being read.
- A task id that is not well formed is simply not found (``404``), like an unknown one.
- Token and bodies are never logged.

Other modules (``molens.web.observability``) add routes by calling :meth:`Api.route` on the :class:`Api` returned by
:func:`build_api` (and the paths to :mod:`molens.web.openapi`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import bottle
import msgspec

from molens import model, tracing
from molens.delivery import (
    KEYS_FIRST_VERSION,
    LAST_FIRE_VERSION,
    QUOTA_VERSION,
    RESUME_TRIGGER_VERSION,
    RESUME_VERSION,
    TRIGGER_AHEAD_VERSION,
)
from molens.fsm import tenancy
from molens.fsm.audit import is_audited
from molens.fsm.commands import (
    Audited,
    AuditNote,
    AuditStamp,
    BackfillTask,
    Command,
    CreateItem,
    CreateTasks,
    DeleteTasks,
    PauseTasks,
    ResumeTasks,
    TriggerTask,
    UpdateTask,
)
from molens.fsm.machine import (
    MAX_BACKFILL,
    TOO_MANY_OCCURRENCES,
    Created,
    acking,
    backfill_instants,
    idem_key,
)
from molens.model import (
    DEFAULT_LIMITS,
    ExecutionResult,
    IllegalTransitionError,
    MolensError,
    NotFoundError,
    PreconditionFailed,
    QuotaExceeded,
    Status,
    Task,
    TaskType,
    ValidationError,
)
from molens.schema import (
    DEFAULT_NAMESPACE,
    NAMESPACE_PATTERN,
    SCENE_PATTERN,
    create_type,
    python_pattern,
    request_error,
    task_json,
    view,
)
from molens.tracing import Spans
from molens.web import access, export, openapi
from molens.web.api_context import ApiContext
from molens.web.audit import install_audit, request_stamp
from molens.web.body import Body, body_refused, depth_error, too_deep, whole_int
from molens.web.body import decode as body_json
from molens.web.cursors import decode_cursor, encode_cursor
from molens.web.dead_letters import install_dead_letters
from molens.web.errors import (
    BodyTooLarge,
    InternalError,
    LeaderElsewhere,
    MethodNotAllowed,
    NoLeader,
    RouteNotFound,
    TooManyRequests,
    Unavailable,
    UnsupportedMediaType,
)
from molens.web.fire_series import Span
from molens.web.flows import install_flows
from molens.web.observability import install_observability
from molens.web.openapi import MAX_HEADER_TEXT, MAX_STATS_WINDOW_MS, MAX_URL_FILTER
from molens.web.quotas import MAX_HELD, MAX_SLOT_WAIT_S, CreateRate, CreateSlots, Impatience
from molens.web.server_texts import localize, negotiate
from molens.web.tenancy import install_tenancy
from molens.web.ui import UI_PREFIX, install_ui

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
MAX_SCAN = 5_000
"""Most tasks one list request examines: bounds a filtered scan over a large store (~10 ms quiet)."""
MAX_SCAN_MS = 20
"""How long a list request goes on examining tasks once it has examined more than it may return."""
DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000
DEFAULT_STATS_WINDOW_MS = 3_600_000

Handler = Callable[..., Any]

_JSON_CT = "application/json"
_BODY_KEY = "molens.body"
"""Where the body guard leaves the bytes it read (the WSGI environ of the request)."""
_TYPES = frozenset(t.value for t in TaskType)
_SCENE = re.compile(python_pattern(SCENE_PATTERN))
_NAMESPACE = re.compile(python_pattern(NAMESPACE_PATTERN))


def _charset(params: str) -> str | None:
    """The ``charset`` of a media type's parameters (lowercase, unquoted), or None."""
    for p in params.split(";"):
        k, _, v = p.partition("=")
        if k.strip().lower() == "charset":
            return v.strip().strip('"').lower()
    return None


def _no_route_message(path_info: str) -> str:
    """A 404's message: the path (as UTF-8; WSGI gives it as latin-1), or that it is not UTF-8 at
    all (Bottle drops such bytes from the path it routes, so that path is not the one asked for)."""
    try:
        path = path_info.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return "no route: the path is not valid UTF-8"
    return f"no route {path[:200]}"


def _absent_namespaces(ctx: ApiContext, names: set[str]) -> set[str]:
    """The namespaces of ``names`` that do not exist (``default`` always does). One this replica
    does not hold is looked for again after a read barrier: a leader that has not applied its
    predecessor's last writes would refuse a namespace already acknowledged."""
    def absent() -> set[str]:
        return {ns for ns in names if ns != DEFAULT_NAMESPACE and ctx.get_meta(tenancy.NS_PREFIX + ns) is None}

    missing = absent()
    if missing:
        ctx.read_barrier(ctx.settings.propose_timeout_s)
        missing = absent()
    return missing


class BatchInvalid(ValidationError):
    """At least one item of a batch create is invalid; carries every item's error."""

    def __init__(self, count: int, errors: list[tuple[int, MolensError]]) -> None:
        first_ix, first = errors[0]
        field = f"tasks[{first_ix}]" + (f".{first.field}" if first.field else "")
        super().__init__(
            f"{len(errors)} of {count} tasks are invalid (first: tasks[{first_ix}]: {first.message}); "
            "nothing was created",
            field,
        )
        self.count = count
        self.errors = errors

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        body["items"] = [None] * self.count
        body["errors"] = [{"index": i, **e.to_json()} for i, e in self.errors]
        return body


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class _BatchBody(msgspec.Struct, forbid_unknown_fields=True):
    tasks: list[msgspec.Raw]
    """Each item is decoded and validated on its own, so every bad one is listed."""


def _batch_items(body: bytes) -> list[msgspec.Raw]:
    try:
        return msgspec.json.decode(body, type=_BatchBody).tasks
    except msgspec.ValidationError as exc:
        err = request_error(exc, DEFAULT_LIMITS)
        if err.field == "tasks":
            raise ValidationError("tasks must be an array of task objects", "tasks") from None
        if err.field in (None, "body"):
            raise ValidationError('the body must be an object {"tasks": [...]}', "body") from None
        raise err from None
    except msgspec.DecodeError as exc:
        raise request_error(exc, DEFAULT_LIMITS) from None


@functools.cache
def _batch_type(limits: model.Limits) -> type[msgspec.Struct]:
    """``{"tasks": [TaskCreate, ...]}``: a batch decoded and bounded in one pass."""
    return msgspec.defstruct(
        "TaskBatch", [("tasks", list[create_type(limits)])], forbid_unknown_fields=True, module=__name__  # type: ignore[misc]
    )


def _typed_batch(body: bytes, limits: model.Limits) -> list[Any] | None:
    """The batch's create requests, decoded in one pass; None when anything in the body is bad (then
    :func:`_batch_items` and each item on its own say what, every bad item listed)."""
    try:
        tasks: list[Any] = msgspec.json.decode(body, type=_batch_type(limits)).tasks  # type: ignore[attr-defined]
    except (msgspec.MsgspecError, RecursionError):
        return None
    return tasks


class _NamespaceOnly(msgspec.Struct):
    """A create read for its namespace and idempotency key alone (every other field skipped unread)."""

    namespace: object = DEFAULT_NAMESPACE
    idempotency_key: object = None


class _NamespacesOnly(msgspec.Struct):
    tasks: list[_NamespaceOnly]


_NAMESPACE_ONLY = msgspec.json.Decoder(_NamespaceOnly)
_NAMESPACES_ONLY = msgspec.json.Decoder(_NamespacesOnly)


def quick_creates(body: bytes, batch: bool) -> list[tuple[str, object]] | None:
    """The namespace and idempotency key of each task a create (``batch``: a batch create) names,
    read without decoding its tasks; None when the body is not plainly that (the full decoding then
    says why)."""
    try:
        items = _NAMESPACES_ONLY.decode(body).tasks if batch else [_NAMESPACE_ONLY.decode(body)]
    except (msgspec.MsgspecError, RecursionError):
        return None
    out = [(it.namespace, it.idempotency_key) for it in items]
    return out if all(isinstance(ns, str) for ns, _ in out) else None  # type: ignore[return-value]


class _BatchAnswer(msgspec.Struct):
    """A batch create's answer, encoded in one pass: the tasks' JSON (:func:`molens.schema.view`)
    written straight into the answer instead of joined to it (half a megabyte for 500 tasks)."""

    items: list[Any]
    errors: msgspec.Raw


_ANSWER = msgspec.json.Encoder()


class _TaskRef(msgspec.Struct):
    """An item of a batch create's answer under ``Prefer: return=minimal``: the task's id alone."""

    id: str


def prefers_minimal(prefer: str | None) -> bool:
    """Whether a ``Prefer`` header (RFC 7240) asks for ``return=minimal``. Preferences are a
    comma-separated list of ``token[=value]`` with ``;`` parameters, tokens case-insensitive, a
    value possibly quoted; any other preference (or a malformed one) is ignored, as the RFC asks."""
    if not prefer:
        return False
    for pref in prefer[:1000].split(","):
        token, _, value = pref.split(";", 1)[0].partition("=")
        if token.strip().lower() == "return" and value.strip().strip('"').lower() == "minimal":
            return True
    return False


def _header_text(name: str) -> str | None:
    """A request header as text: WSGI hands headers over as latin-1; the bytes must be UTF-8."""
    raw = bottle.request.environ.get("HTTP_" + name.upper().replace("-", "_"))
    if raw is None:
        return None
    try:
        return str(raw.encode("latin-1").decode("utf-8"))
    except UnicodeError:
        raise ValidationError(f"{name} is not valid UTF-8", name) from None


def _trace_header() -> str | None:
    """The request's ``traceparent`` header when it is a valid one; an invalid header is ignored, as
    W3C Trace Context asks of a receiver (an invalid body field is a 400)."""
    raw = bottle.request.environ.get("HTTP_TRACEPARENT")
    if not isinstance(raw, str):
        return None
    tp = raw.strip()
    return tp if tracing.is_valid(tp) else None


def _traced(spec: model.TaskSpec, header: str | None) -> model.TaskSpec:
    """``spec`` with the request's ``traceparent`` header (:func:`_trace_header`) when its body gave none."""
    if spec.traceparent is not None or header is None:
        return spec
    return msgspec.structs.replace(spec, traceparent=header)


def _trace_create(spans: Spans, t: Task, start_ns: int, commit_ns: int) -> None:
    """The create and commit spans of a traced task (``tracing.otlp_endpoint`` set)."""
    tp = t.spec.traceparent
    if tp is not None:
        spans.create(tp, t.id, start_ns, commit_ns, time.time_ns(), {"molens.task_id": t.id, "molens.scene": t.spec.scene})


_EMPTY_BODY_MAX = 64
"""A route that takes no body still takes ``{}`` (whitespace around it included) up to this size."""


def _openapi_path(rule: str) -> str:
    return re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", rule)


_INT_RE = re.compile(r"-?([0-9]{1,20})(?:\.0{1,20})?")
"""An integer parameter: ASCII digits, a sign, and a zero fraction (JSON Schema counts ``7.0`` as an integer)."""
_ROW_ID_RE = re.compile(r"[0-9]{1,18}")


def _quote(s: str, n: int = 40) -> str:
    """``s`` for an error message: cut to ``n`` characters, non-printable ones escaped."""
    return ascii(s[:n])


# -------------------------------------------------------------------------------------------------


class Api:
    """The routes of one app over one context (see the module docstring)."""

    def __init__(self, ctx: ApiContext, app: bottle.Bottle) -> None:
        self.ctx = ctx
        self.app = app
        self.access = access.Access(ctx, ctx.settings.auth_token)
        self.create_rate = CreateRate()
        self.impatience = Impatience()
        self.held = threading.BoundedSemaphore(MAX_HELD)
        self.slots = CreateSlots()
        self.sleep: Callable[[float], None] = time.sleep
        """How a refused create is held (:meth:`admit_creates`); a test records it instead."""
        self._rates: dict[str, tuple[bytes, float | None]] = {}
        """namespace -> (its record as last read, its ``creates_per_s``)."""
        self.routes: list[tuple[str, str]] = []
        """(method, OpenAPI path) of every route registered through :meth:`route`."""

    # ------------------------------------------------------------------ plumbing

    def route(
        self, method: str, rule: str, *, write: bool = False, body: Body | None = None,
        needs: access.Rule | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register ``handler`` at ``rule`` with auth, the body guard, leader check, role header and
        error rendering. Who may call it is the route's entry in :data:`molens.web.access.RULES`
        (or ``needs``, given here); a route with neither is refused.

        ``body`` says what the route takes (:class:`~molens.web.body.Body`; by default none for
        GET/HEAD/DELETE, JSON for POST/PUT/PATCH): a body where none is taken is refused, a JSON one
        is bounded in size and depth before the handler runs, and the handler reads it with
        :meth:`read_body` / :meth:`read_json`. A handler returns ``(status, body)`` where ``body`` is
        JSON-able (or ``bytes`` already encoded), or a ``bottle.HTTPResponse``.
        """
        takes = body if body is not None else Body.default_for(method)
        path = _openapi_path(rule)
        if needs is None:
            if (method, path) not in access.RULES:
                raise KeyError(f"{method} {path} has no rule in molens.web.access.RULES: say who may call it")
            needs = access.RULES[(method, path)]

        def deco(fn: Handler) -> Handler:
            @functools.wraps(fn)
            def wrapper(**kw: Any) -> Any:
                assert needs is not None
                return self._handle(fn, kw, write=write, needs=needs, takes=takes)

            self.app.route(rule, method, wrapper)
            self.routes.append((method, path))
            return fn

        return deco

    def _handle(self, fn: Handler, kw: dict[str, Any], *, write: bool, needs: access.Rule, takes: Body) -> Any:
        resp = bottle.response
        t0 = time.perf_counter()
        try:
            self.ctx.request_seen()
            li = self.ctx.leader_info()
            resp.set_header("X-Molens-Role", li.role)
            # a namespace's data, a key's secret, an export's ticket: never kept by a cache on the way
            resp.set_header("Cache-Control", "no-store")
            open_ = needs.need is access.Need.OPEN
            self.access.admit(needs)
            if li.role == "removed" and not open_:  # stale replica: answers nothing (docs/architecture.md#node-ports)
                raise Unavailable("this node was removed from the cluster; ask a member")
            self._guard_body(takes)
            if write and not li.is_leader:
                if li.leader_url:
                    raise LeaderElsewhere(li.leader_url, li.leader_id)
                raise NoLeader()
            result = fn(**kw)
            if isinstance(result, bottle.HTTPResponse):
                return result  # non-JSON answers (PNG, Prometheus text, static UI files)
            status, body = result
        except MolensError as exc:
            status, body = self._error(exc)
        except Exception:
            log.exception("unhandled error method=%s path=%s", bottle.request.method, bottle.request.path)
            status, body = 500, InternalError("internal error; see the node log").to_json()
        resp.status = status
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "http method=%s path=%s status=%d ms=%.1f",
                bottle.request.method,
                bottle.request.path,
                status,
                (time.perf_counter() - t0) * 1000,
            )
        resp.content_type = _JSON_CT
        lang = negotiate(bottle.request.get_header("Accept-Language"))
        if lang != "en" and localize(body, lang):  # messages and event texts in the reader's language
            resp.set_header("Content-Language", lang)
        return body if isinstance(body, bytes) else _dumps(body)

    def _error(self, exc: MolensError) -> tuple[int, Any]:
        resp = bottle.response
        if isinstance(exc, LeaderElsewhere) and not exc.leader_url:
            exc = NoLeader()  # a follower that cannot name the leader's address: retry later
        if isinstance(exc, LeaderElsewhere) and exc.leader_url:
            req = bottle.request
            qs = req.query_string
            resp.set_header("Location", exc.leader_url.rstrip("/") + req.path + (f"?{qs}" if qs else ""))
            resp.set_header("X-Molens-Leader", exc.leader_url)
            if exc.leader_id:
                resp.set_header("X-Molens-Leader-Id", exc.leader_id)
        elif exc.http_status in (503, 507):
            resp.set_header("Retry-After", str(self.ctx.settings.retry_after_s))
        elif exc.http_status == 401:
            resp.set_header("WWW-Authenticate", 'Bearer realm="molens"')
        elif isinstance(exc, TooManyRequests | QuotaExceeded):
            resp.set_header("Retry-After", str(exc.retry_after_s))
            if isinstance(exc, QuotaExceeded) and exc.namespace:
                self.ctx.metrics().namespaces.add("quota_refusals", exc.namespace, quota=str(exc.field))
        return exc.http_status, exc.to_json()

    def read_json(self) -> Any:
        """The request body parsed as JSON (415/413/400 as the module docstring says)."""
        return body_json(self.read_body())

    @staticmethod
    def has_body() -> bool:
        """Whether the request came with a body (for a route whose body is optional)."""
        return _BODY_KEY in bottle.request.environ

    def read_body(self) -> bytes:
        """The request body's bytes, as the route's guard let them through (:meth:`_guard_body`)."""
        raw = bottle.request.environ.get(_BODY_KEY)
        if raw is None:
            raise ValidationError("request body is empty; expected JSON", "body")
        assert isinstance(raw, bytes)
        return raw

    def _guard_body(self, takes: Body) -> None:
        """The one gate every request body passes, whatever the route: refused where the route takes
        none; else read within ``max_body_bytes``, its Content-Type checked, and a JSON one bounded in
        depth (``max_json_depth``) before any decoder recurses into it. Kept for :meth:`read_body`."""
        req = bottle.request
        length = req.content_length
        if takes is Body.NONE:
            if length > 0:  # nothing, or an empty object (what many clients send with every POST)
                raw = bytes(req.environ["wsgi.input"].read(min(length, _EMPTY_BODY_MAX)))
                if length > _EMPTY_BODY_MAX or b"".join(raw.split()) != b"{}":
                    raise body_refused(req.method)
            return
        if length == 0:
            if takes is Body.JSON:
                raise ValidationError("request body is empty; expected JSON", "body")
            return
        ctype, _, params = (req.content_type or "").partition(";")
        ctype = ctype.strip().lower()
        json_type = not ctype or ctype == _JSON_CT or ctype.endswith("+json")
        if takes is not Body.ANY:
            if not ctype:  # a web page's fetch or form can send a body without one, and needs no consent
                raise UnsupportedMediaType("a request body needs Content-Type: application/json", "Content-Type")
            if not json_type:
                raise UnsupportedMediaType(f"Content-Type must be application/json, got {ctype[:80]}", "Content-Type")
            charset = _charset(params)
            if charset is not None and charset not in ("utf-8", "utf8"):
                raise UnsupportedMediaType(f"JSON bodies are UTF-8, got charset={charset[:40]}", "Content-Type")
        s = self.ctx.settings
        limit = s.max_body_bytes
        if length > limit:
            raise BodyTooLarge(f"request body is {length} bytes, more than {limit}", "body")
        raw = bytes(req.environ["wsgi.input"].read(length if length >= 0 else limit + 1))
        if len(raw) > limit:
            raise BodyTooLarge(f"request body is more than {limit} bytes", "body")
        if takes is not Body.ANY and not raw.strip():
            if takes is Body.JSON:
                raise ValidationError("request body is empty; expected JSON", "body")
            return
        if json_type and too_deep(raw, s.max_json_depth):
            raise depth_error(s.max_json_depth)
        req.environ[_BODY_KEY] = raw

    def _create_rate_of(self, ns: str) -> float | None:
        """Namespace ``ns``'s ``creates_per_s`` as this node's replica holds it now (its record is
        read each time; decoded again only when it changed)."""
        raw = self.ctx.get_meta(tenancy.NS_PREFIX + ns)
        if raw is None:
            return None
        known = self._rates.get(ns)
        if known is None or known[0] != raw:
            known = (raw, tenancy.decode_namespace(raw).quotas.creates_per_s)
            self._rates[ns] = known
        return known[1]

    def made_already(self, namespace: str, key: object) -> bool:
        """Whether a create with idempotency key ``key`` in ``namespace`` is spared its
        ``creates_per_s`` token: the namespace has the quota and this node's replica holds the key's
        task (the create makes nothing; it answers that task). A namespace without the quota costs
        no lookup."""
        if not isinstance(key, str) or not 0 < len(key) <= self.ctx.settings.limits.max_idempotency_key or "\x00" in key:
            return False  # the full decoding refuses it
        if namespace == DEFAULT_NAMESPACE or not (_NAMESPACE.match(namespace) and access.visible(namespace)):
            return False  # no quota, or a name the validation or the authorization refuses next
        if self._create_rate_of(namespace) is None:
            return False
        task_id = self.ctx.get_idem(idem_key(namespace, key) or key)
        return task_id is not None and self.ctx.get_task(task_id) is not None

    def admit_creates(self, namespaces: list[str], *, take: bool = True) -> None:
        """The ``creates_per_s`` quota of each namespace of a create (one entry per task): 429
        ``quota_exceeded`` with ``Retry-After`` when one is over (the leader's token buckets).
        ``take=False`` only asks (:meth:`CreateRate.wait`): a create the bucket would refuse is
        refused before it is parsed and validated; namespaces the key may not act in are left to
        the full check (their answer is 403, not 429)."""
        check = self.create_rate.take if take else self.create_rate.wait
        for ns, n, rate in self._quota_rates(collections.Counter(namespaces).items(), screen=not take):
            if wait := check(ns, n, rate, time.monotonic()):
                # Only the early check holds: the taking one runs in the namespace's create slot
                # (create_slots), and a hold there would keep the slot from the creates that wait
                # for it. An impatient client's next create meets the early check and is held there.
                self._hold_impatient(ns, wait, hold=not take)
                raise QuotaExceeded(f"namespace {ns} takes at most {rate:g} creates per second; nothing was "
                                         "created", "creates_per_s", wait, namespace=ns)

    def charge_creates(self, namespaces: list[str]) -> None:
        """Charge the ``creates_per_s`` bucket of each namespace of creates that :meth:`made_already`
        spared their token and that made a task after all: the task their key named was deleted
        before the create applied (a delete and a keyed create again, raced, made tasks at any rate)."""
        for ns, n, rate in self._quota_rates(collections.Counter(namespaces).items(), screen=False):
            self.create_rate.charge(ns, n, rate, time.monotonic())

    @contextlib.contextmanager
    def create_slots(self, namespaces: list[str] | None) -> Iterator[None]:
        """Hold a slot of each namespace of a create that has a ``creates_per_s`` quota while it is
        decoded, validated and proposed (:class:`molens.web.quotas.CreateSlots`), waiting for one
        at most ``MAX_SLOT_WAIT_S`` (then it goes on without). ``None`` (a body that does not
        plainly name its namespaces): nothing held, the validation refuses it."""
        held: list[str] = []
        try:
            ordered = sorted(set(namespaces or ()))  # one order on every thread
            for ns, _, rate in self._quota_rates(((ns, 1) for ns in ordered), screen=True):
                if self.slots.acquire(ns, rate, MAX_SLOT_WAIT_S):
                    held.append(ns)
            yield
        finally:
            for ns in held:
                self.slots.release(ns)

    def _quota_rates(self, counts: Iterable[tuple[str, int]], *, screen: bool) -> Iterator[tuple[str, int, float]]:
        """``(namespace, count, creates_per_s)`` of each of ``counts`` with a ``creates_per_s`` quota.
        ``screen``: only names that are namespace names the key may act in (the early checks; the
        others are refused by the validation or the authorization that follow, 400 or 403, not 429)."""
        for ns, n in counts:
            if ns == DEFAULT_NAMESPACE or (screen and not (_NAMESPACE.match(ns) and access.visible(ns))):
                continue
            rate = self._create_rate_of(ns)
            if rate is not None:
                yield ns, n, rate

    def _hold_impatient(self, ns: str, retry_after_s: int, *, hold: bool = True) -> None:
        """Before a create of ``ns`` is refused: with ``hold``, hold it if its connection was told
        to wait and has not (:class:`molens.web.quotas.Impatience`; at most ``MAX_HELD`` at once,
        the rest answered at once); then remember the ``Retry-After`` it is about to be given."""
        env = bottle.request.environ
        conn = f"{env.get('REMOTE_ADDR', '')}:{env.get('REMOTE_PORT', '')}"
        wait_s = self.impatience.hold_s(conn, ns, time.monotonic()) if hold else 0.0
        if wait_s and self.held.acquire(blocking=False):
            try:
                self.ctx.metrics().namespaces.add("quota_holds", ns)
                self.sleep(wait_s)
            finally:
                self.held.release()
        self.impatience.told(conn, ns, time.monotonic() + retry_after_s)

    def stamp(self) -> AuditStamp:
        """Who makes the request in progress (:func:`molens.web.audit.request_stamp`)."""
        return request_stamp(bool(self.ctx.settings.auth_token))

    def propose_one(self, cmd: Command) -> list[Any]:
        """Propose ``cmd`` for the caller; a change a caller makes goes wrapped in ``Audited`` with
        who made it (docs/architecture.md#audit-trail), and its results are the command's."""
        if is_audited(cmd):
            cmd = Audited(cmd.now_ms, self.stamp(), cmd)
        out = self.ctx.propose([cmd], self.ctx.settings.propose_timeout_s)
        return out[0]

    # ------------------------------------------------------------------ query parameters

    @staticmethod
    def q_raw(name: str) -> str | None:
        """A query parameter as given; ``None`` when absent; an empty value is refused (a client
        that means "no filter" leaves the parameter out)."""
        raw = bottle.request.query.get(name)
        if raw is not None and raw == "":
            raise ValidationError(f"{name} is empty; leave it out for the default", name)
        return None if raw is None else str(raw)

    @staticmethod
    def q_int(name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
        """An integer parameter: ASCII digits only (no sign other than '-', no spaces, no '_')."""
        raw = Api.q_raw(name)
        if raw is None:
            return default
        if not _INT_RE.fullmatch(raw):
            raise ValidationError(f"{name} must be an integer, got {_quote(raw)}", name)
        v = int(raw.partition(".")[0], 10)
        if v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise ValidationError(f"{name} must be in {rng}, got {_quote(raw)}", name)
        return v

    @staticmethod
    def q_ms(name: str, default: int | None) -> int | None:
        """An epoch-ms parameter (0 .. the end of year 9999)."""
        return Api.q_int(name, default, 0, model.MAX_EPOCH_MS)

    @staticmethod
    def q_str(name: str) -> str | None:
        if Api.q_raw(name) is None:
            return None
        raw = bottle.request.query.getunicode(name)
        if raw is None:
            raise ValidationError(f"{name} is not valid UTF-8", name)
        return str(raw)

    def q_cursor(self, kind: str, position: re.Pattern[str]) -> str | None:
        """The position in the ``cursor`` parameter, a cursor of ``kind`` whose position matches
        ``position`` (anything else this API did not issue: 400); ``None`` without one."""
        raw = self.q_raw("cursor")
        if raw is None:
            return None
        pos = decode_cursor(kind, raw, access.principal().cursor_key)
        if not position.fullmatch(pos):
            raise ValidationError("cursor is not a cursor this API issued", "cursor")
        return pos

    def next_cursor(self, kind: str, position: str | None) -> str | None:
        """The cursor of ``position`` for the request's key (sealed for a key of some namespaces:
        :mod:`molens.web.cursors`), None for None."""
        return None if position is None else encode_cursor(kind, position, access.principal().cursor_key)

    def q_limit(self) -> int:
        v = self.q_int("limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        assert v is not None
        return v


UPDATE_ATTEMPTS = 5
_ETAG_RE = re.compile(r'\s*(?:W/)?"?([0-9]{1,18})"?\s*')


def _etag(t: Task) -> str:
    """A task's entity tag: the version of its definition (what ``If-Match`` compares)."""
    return f'"{t.version}"'


def _if_match() -> frozenset[int] | None:
    """The versions ``If-Match`` accepts (``"3"``, ``W/"3"``, ``3``, a list of them); None when
    absent or ``*``."""
    raw = _header_text("If-Match")
    if raw is None or raw.strip() == "*":
        return None
    if len(raw) > MAX_HEADER_TEXT:
        raise ValidationError(f"If-Match is longer than {MAX_HEADER_TEXT} characters", "If-Match")
    out = set()
    for part in raw.split(","):
        m = _ETAG_RE.fullmatch(part)
        if m is None:
            raise ValidationError(f"If-Match must be a task version such as \"3\", got {_quote(raw)}", "If-Match")
        out.add(int(m.group(1)))
    return frozenset(out)


def task_or_404(ctx: ApiContext, task_id: str) -> Task:
    """The task, if it exists and the request's key may see its namespace; else the same 404."""
    t = ctx.get_task(task_id) if model.is_task_id(task_id) else None
    missing = NotFoundError(f"task {task_id[:64]} not found", "task_id")
    if t is None:
        raise missing
    access.hide(t.namespace, missing)
    return t


def task_for_write(ctx: ApiContext, task_id: str, refuses: Callable[[Task], bool] | None = None) -> Task:
    """The task a write on the leader starts from (:func:`task_or_404`). A refusal this replica alone
    would decide (a 404, or ``refuses(task)``: an ``If-Match`` naming another version) is decided
    again after a read barrier: a deposed leader that has not noticed yet, or a new one that has not
    applied its predecessor's last writes, would refuse from an older state than one already
    acknowledged (a 412 after the version it names was answered). The barrier costs a quorum round
    on refusals only; a write that goes ahead is checked again where it applies. A task the key may
    not see pays it too: its 404 is a missing task's, and must not come sooner."""
    if model.is_task_id(task_id):
        t = ctx.get_task(task_id)
        if t is None or not access.visible(t.namespace) or (refuses is not None and refuses(t)):
            ctx.read_barrier(ctx.settings.propose_timeout_s)
    return task_or_404(ctx, task_id)


def _item(res: Any) -> Any:
    if isinstance(res, BaseException):
        if isinstance(res, MolensError):
            raise res
        raise InternalError(f"the state machine failed: {type(res).__name__}")
    return res


# -------------------------------------------------------------------------------------------------
# routes


_ORDERS = {"created": "t", "-created": "r", "next_run": "n"}
"""List orders and their cursor kinds: id (= creation) order, newest first, soonest next run first."""


def _ordered(
    ctx: ApiContext, order: str, position: str, statuses: set[str] | None = None, scene: str | None = None,
    namespaces: frozenset[str] | None = None,
) -> Iterator[tuple[str, Task | None]]:
    """``(cursor position, task)`` in ``order`` after ``position``; None for a due entry whose
    task moved on meanwhile (it still counts toward the scan bound). In id order with a status or
    scene filter, only the matching tasks, read from the store's index (a page costs a page).
    ``namespaces`` (None: every one) reads only theirs, from the store's namespace index: another
    namespace's tasks are never walked, so they neither cost a page nor shape it."""
    bad = ValidationError("cursor is not a cursor this API issued", "cursor")
    if order == "next_run":
        after = None
        if position:
            ms, _, tid = position.partition(":")
            if not _ROW_ID_RE.fullmatch(ms) or int(ms) > model.MAX_EPOCH_MS or not model.is_task_id(tid):
                raise bad
            after = (int(ms), tid)
        for due_ms, tid in ctx.scan_due(after, namespaces):
            t = ctx.get_task(tid)
            yield f"{due_ms}:{tid}", (t if t is not None and t.wake_ms == due_ms else None)
        return
    if position and not model.is_task_id(position):
        raise bad
    if statuses or scene is not None or namespaces is not None:
        tasks = ctx.scan_tasks_where(sorted(statuses or ()), scene, position, reverse=order != "created",
                                     namespaces=namespaces)
    else:
        tasks = ctx.scan_tasks(position) if order == "created" else ctx.scan_tasks_before(position)
    for t in tasks:
        yield t.id, t


def _check_payload_quota(ctx: ApiContext, spec: model.TaskSpec) -> None:
    """A changed payload within its namespace's ``max_payload_bytes``, as a create's is (429
    ``quota_exceeded``): read from this node's replica, as the create quotas' early screens are."""
    ns = spec.namespace
    if ns == DEFAULT_NAMESPACE:
        return
    raw = ctx.get_meta(tenancy.NS_PREFIX + ns)
    limit = None if raw is None else tenancy.decode_namespace(raw).quotas.max_payload_bytes
    size = len(spec.payload_json or b"")
    if limit is not None and size > limit:
        raise QuotaExceeded(f"namespace {ns}: a payload of {size} bytes, more than its max_payload_bytes "
                            f"{limit}; nothing was changed", "max_payload_bytes", namespace=ns)


def _install_tasks(api: Api) -> None:
    ctx = api.ctx

    def validate(body: bytes, now: int, key: str | None = None, *, whole_body: bool = True) -> model.TaskSpec:
        s = ctx.settings
        return model.decode_create(body, s.policy, s.limits, now, idempotency_key=key, whole_body=whole_body)

    @api.route("POST", f"{PREFIX}/tasks", write=True)
    def create_task() -> tuple[int, Any]:
        start_ns = time.time_ns()
        body = api.read_body()
        key = _header_text("Idempotency-Key")
        early = None
        if (quick := quick_creates(body, batch=False)) is not None:  # 429 before decoding and validating
            early = [ns for ns, k in quick if not api.made_already(ns, key or k)]
            api.admit_creates(early, take=False)
        with api.create_slots(early):
            return create_one(start_ns, body, key)

    def create_one(start_ns: int, body: bytes, key: str | None) -> tuple[int, Any]:
        now = ctx.now_ms()
        spec = _traced(validate(body, now, key), _trace_header())
        access.require(spec.namespace)
        spared = api.made_already(spec.namespace, spec.idempotency_key)
        if not spared:
            api.admit_creates([spec.namespace])
        commit_ns = time.time_ns()
        create = CreateTasks(now, (CreateItem(ctx.new_task_id(), spec),), ctx.replicas_read(KEYS_FIRST_VERSION))
        res = _item(api.propose_one(create)[0])
        assert isinstance(res, Created)
        spans = ctx.settings.spans
        if res.created:
            if spared:
                api.charge_creates([spec.namespace])
            ctx.metrics().namespaces.add("creates", spec.namespace)
            if spans.enabled:
                _trace_create(spans, res.task, start_ns, commit_ns)
        return (201 if res.created else 200), task_json(res.task)

    @api.route("POST", f"{PREFIX}/tasks/batch", write=True)
    def create_batch() -> tuple[int, Any]:
        start_ns = time.time_ns()
        body = api.read_body()
        prefer = _header_text("Prefer")
        s = ctx.settings
        reqs = _typed_batch(body, s.limits)
        early = None if reqs is None else [ns for r in reqs if not api.made_already(
            ns := r.namespace or DEFAULT_NAMESPACE, r.idempotency_key)]
        if early is not None:  # 429 before validating (a batch the decoder refused is answered 400 anyway)
            api.admit_creates(early, take=False)
        with api.create_slots(early):
            return create_many(start_ns, body, prefer, reqs)

    def create_many(start_ns: int, body: bytes, prefer: str | None, reqs: list[Any] | None) -> tuple[int, Any]:
        s = ctx.settings
        raws = _batch_items(body) if reqs is None else []
        count = len(reqs) if reqs is not None else len(raws)
        if count > s.max_batch:
            raise ValidationError(f"a batch holds at most {s.max_batch} tasks, got {count}", "tasks")
        now = ctx.now_ms()
        specs: list[model.TaskSpec | ValidationError]
        if reqs is not None:
            specs = model.resolve_creates(reqs, s.policy, s.limits, now)
        else:
            specs = []
            for t in raws:
                try:
                    specs.append(validate(t, now, whole_body=False))
                except ValidationError as exc:
                    specs.append(exc)
        items: list[CreateItem] = []
        errors: list[tuple[int, MolensError]] = []
        ids = ctx.new_task_ids(count)
        keys: dict[tuple[str, str], int] = {}
        """(namespace, idempotency key) -> item: a key is its namespace's (two namespaces may each use it)."""
        trace_header = _trace_header()
        for i, spec in enumerate(specs):
            if isinstance(spec, ValidationError):
                errors.append((i, spec))
                continue
            spec = _traced(spec, trace_header)
            try:
                k = spec.idempotency_key
                if k is not None:
                    if (spec.namespace, k) in keys:
                        raise ValidationError(
                            f"idempotency_key {_quote(k)} is also the key of item {keys[spec.namespace, k]} of "
                            "this batch", "idempotency_key",
                        )
                    keys[spec.namespace, k] = i
                items.append(CreateItem(ids[i], spec))
            except ValidationError as exc:
                errors.append((i, exc))
        if errors:
            raise BatchInvalid(count, errors)
        for ns in {it.spec.namespace for it in items}:  # a batch naming a namespace the key may not use: refused whole
            access.require(ns)
        absent = _absent_namespaces(ctx, {it.spec.namespace for it in items})
        if absent:  # refused whole, as an invalid item refuses it
            raise BatchInvalid(count, [
                (i, NotFoundError(f"namespace {it.spec.namespace} not found", "namespace"))
                for i, it in enumerate(items) if it.spec.namespace in absent
            ])
        if not items:
            return 200, {"items": [], "errors": []}
        spared = [api.made_already(it.spec.namespace, it.spec.idempotency_key) for it in items]
        api.admit_creates([it.spec.namespace for it, sp in zip(items, spared, strict=True) if not sp])
        commit_ns = time.time_ns()
        results = api.propose_one(CreateTasks(now, tuple(items), ctx.replicas_read(KEYS_FIRST_VERSION)))
        if len(results) != len(items):  # the whole entry failed (undecodable / apply raised): one error
            _item(results[0] if results else InternalError("no result for the batch"))
            raise InternalError("the state machine answered a batch of the wrong size")
        if isinstance(results[0], QuotaExceeded):  # a namespace's quota refused the batch whole
            raise results[0]
        out: list[Task | None] = []
        errs: list[dict[str, Any]] = []
        created = False
        made: dict[str, int] = {}
        spans = ctx.settings.spans
        owed: list[str] = []
        for i, r in enumerate(results):
            if isinstance(r, Created):
                out.append(r.task)
                created = created or r.created
                if r.created:
                    made[r.task.namespace] = made.get(r.task.namespace, 0) + 1
                    if spared[i]:
                        owed.append(r.task.namespace)
                    if spans.enabled:
                        _trace_create(spans, r.task, start_ns, commit_ns)
            else:
                out.append(None)
                err = r if isinstance(r, MolensError) else InternalError(type(r).__name__)
                errs.append({"index": i, **err.to_json()})
        if owed:
            api.charge_creates(owed)
        counters = ctx.metrics().namespaces
        for ns, n in made.items():
            counters.add("creates", ns, n)
        if prefers_minimal(prefer):  # ids only: a bulk loader needs no echo of its tasks
            bottle.response.set_header("Preference-Applied", "return=minimal")
            refs = [None if t is None else _TaskRef(t.id) for t in out]
            return (201 if created else 200), _ANSWER.encode(_BatchAnswer(refs, msgspec.Raw(_dumps(errs))))
        # {"items": [...], "errors": [...]} as _dumps would write it, payloads spliced in as stored
        answer = _BatchAnswer([None if t is None else view(type(t)).render(t) for t in out], msgspec.Raw(_dumps(errs)))
        return (201 if created else 200), _ANSWER.encode(answer)

    def task_query() -> Callable[[str, int], tuple[list[Task], str | None, int, bool]]:
        """The list's filters read from the query (400 for a bad one), as a function of (cursor
        position, page size) that answers ``(tasks, next position or None, scanned, partial)``."""
        statuses: set[str] | None = None
        raw_status = api.q_str("status")
        if raw_status is not None and len(raw_status) > MAX_HEADER_TEXT:
            raise ValidationError(f"status is longer than {MAX_HEADER_TEXT} characters", "status")
        if raw_status:
            statuses = set()
            for s in raw_status.split(","):
                try:
                    statuses.add(Status(s).value)
                except ValueError:
                    allowed = ", ".join(x.value for x in Status)
                    raise ValidationError(f"status must be one of {allowed}, got {s[:40]!r}", "status") from None
        ttype = api.q_str("type")
        if ttype is not None and ttype not in _TYPES:
            raise ValidationError("type must be 'delayed' or 'periodic'", "type")
        scene = api.q_str("scene")
        if scene is not None and not _SCENE.match(scene):
            raise ValidationError(f"scene must match {SCENE_PATTERN.strip('^$')}", "scene")
        url = api.q_str("url")
        if url is not None and len(url) > MAX_URL_FILTER:
            raise ValidationError(f"url filter is longer than {MAX_URL_FILTER}", "url")
        url_l = url.lower() if url else None
        order = api.q_str("order") or "created"
        if order not in _ORDERS:
            raise ValidationError(f"order must be one of {', '.join(_ORDERS)}, got {order[:40]!r}", "order")
        q = api.q_str("q")
        if q is not None and len(q) > MAX_URL_FILTER:
            raise ValidationError(f"q is longer than {MAX_URL_FILTER}", "q")
        if q and order == "next_run":
            raise ValidationError("q searches in id order: order must be created or -created", "order")
        namespaces = access.readable()
        index = ctx.task_search() if q else None

        def page(position: str, limit: int) -> tuple[list[Task], str | None, int, bool]:
            """Up to ``limit`` matching tasks after ``position``, where the next page starts, how
            many of the tasks examined the key may see (``scanned``: another namespace's are not
            counted, nor told of), and whether the search index is partial. A full page has a next
            one only when a task the key may see follows: read on past other namespaces' tasks, the
            cursor would say that one of them matched (with ``limit=1``, letter by letter, what
            another namespace's payloads hold)."""
            items: list[Task] = []
            examined = scanned = 0
            last = ""
            more = False
            deadline = time.monotonic() + MAX_SCAN_MS / 1000
            found: Iterator[tuple[str, Task | None]]
            if index is not None and q:
                if position and not model.is_task_id(position):
                    raise ValidationError("cursor is not a cursor this API issued", "cursor")
                # the index yields only the key's namespaces' tasks: another namespace's that hold the
                # text are not walked, counted or stopped on, so the cursor does not tell of them
                found = ((tid, ctx.get_task(tid))
                         for tid in index.matches(q, position, reverse=order != "created", namespaces=namespaces))
            else:
                found = _ordered(ctx, order, position, statuses, scene, namespaces)
            for pos, t in found:
                # a page whose tasks all match costs the page; only a skipping scan stops on time
                if examined >= MAX_SCAN or (examined > limit and time.monotonic() >= deadline):
                    more = True
                    break
                visible = t is not None and (namespaces is None or t.spec.namespace in namespaces)
                if visible and len(items) >= limit:
                    more = True
                    break
                examined += 1
                last = pos
                if t is None or not visible:
                    continue
                scanned += 1
                if statuses is not None and t.status.value not in statuses:
                    continue
                if ttype is not None and t.spec.type.value != ttype:
                    continue
                if scene is not None and t.spec.scene != scene:
                    continue
                if url_l is not None and url_l not in t.spec.callback_url.lower():
                    continue
                items.append(t)
            return items, (last if more else None), scanned, index is not None and index.partial

        return page

    @api.route("GET", f"{PREFIX}/tasks")
    def list_tasks() -> Any:
        fmt = export.export_format(api)
        page = task_query()
        if fmt is not None:
            def rows(pos: str | None) -> tuple[list[dict[str, Any]], str | None]:
                items, nxt, _, _ = page(pos or "", export.PAGE)
                return [t.to_json() for t in items], nxt

            return export.stream("tasks", fmt, export.columns("Task"), export.paged(rows))
        kind = _ORDERS[api.q_str("order") or "created"]
        raw_cursor = api.q_raw("cursor")
        at = decode_cursor(kind, raw_cursor, access.principal().cursor_key) if raw_cursor else ""
        items, last, scanned, partial = page(at, api.q_limit())
        nxt = api.next_cursor(kind, last)
        # {"items": [...], "next_cursor": ..., "scanned": n} as _dumps would write it, payloads spliced in
        return 200, (
            b'{"items":' + model.tasks_json(items) + b',"next_cursor":' + _dumps(nxt)
            + b',"scanned":' + str(scanned).encode() + (b',"partial":true' if partial else b"") + b"}"
        )

    @api.route("GET", f"{PREFIX}/tasks/<task_id>")
    def get_task(task_id: str) -> tuple[int, Any]:
        consistency = api.q_raw("consistency") or "local"
        if consistency not in ("local", "linearizable"):
            raise ValidationError(f"consistency must be local or linearizable, got {_quote(consistency)}", "consistency")
        if consistency == "linearizable":
            ctx.read_barrier(ctx.settings.propose_timeout_s)
        t = task_or_404(ctx, task_id)
        bottle.response.set_header("ETag", _etag(t))
        return 200, task_json(t)

    @api.route("PATCH", f"{PREFIX}/tasks/<task_id>", write=True)
    def update_task(task_id: str) -> tuple[int, Any]:
        body = api.read_body()
        wanted = _if_match()
        s = ctx.settings
        for _ in range(UPDATE_ATTEMPTS):  # without If-Match, a concurrent update is merged over, not refused
            t = task_for_write(ctx, task_id, None if wanted is None else lambda t: t.version not in wanted)
            now = ctx.now_ms()
            spec = model.decode_update(body, t.spec, s.policy, s.limits, now)  # a bad body is a 400 at any version
            if wanted is not None and t.version not in wanted:
                raise PreconditionFailed(
                    f"task {t.id} is at version {t.version}, not {' or '.join(map(str, sorted(wanted)))}", "If-Match"
                )
            if spec.payload_json != t.spec.payload_json:
                _check_payload_quota(ctx, spec)
            if spec.ack_url is None and t.spec.ack_url is not None and acking(t):
                raise IllegalTransitionError(
                    f"task {t.id} is waiting for its ACK: ack_url cannot be removed until that ends "
                    "(the callback was answered 2xx and would not be sent again)", "ack_url")
            res = api.propose_one(UpdateTask(now, t.id, spec, t.version, ctx.replicas_read(LAST_FIRE_VERSION),
                                             ctx.replicas_read(RESUME_VERSION), ctx.replicas_read(QUOTA_VERSION)))[0]
            if isinstance(res, PreconditionFailed) and wanted is None:
                continue
            nt = _item(res)
            assert isinstance(nt, Task)
            bottle.response.set_header("ETag", _etag(nt))
            return 200, task_json(nt)
        raise Unavailable(f"task {task_id} kept changing under {UPDATE_ATTEMPTS} updates; try again")

    def by_id(cmd: Callable[[int, str], Command], task_id: str) -> tuple[int, Any]:
        task_for_write(ctx, task_id)  # no entry for junk ids; a 404 confirmed by a read barrier
        res = _item(api.propose_one(cmd(ctx.now_ms(), task_id))[0])
        assert isinstance(res, Task)
        return 200, task_json(res)

    @api.route("DELETE", f"{PREFIX}/tasks/<task_id>", write=True)
    def delete_task(task_id: str) -> tuple[int, Any]:
        return by_id(lambda now, tid: DeleteTasks(now, (tid,)), task_id)

    @api.route("POST", f"{PREFIX}/tasks/<task_id>/pause", write=True, body=Body.NONE)
    def pause_task(task_id: str) -> tuple[int, Any]:
        return by_id(lambda now, tid: PauseTasks(now, (tid,)), task_id)

    @api.route("POST", f"{PREFIX}/tasks/<task_id>/resume", write=True, body=Body.OPTIONAL_JSON)
    def resume_task(task_id: str) -> tuple[int, Any]:
        from_schedule = False
        if api.has_body():  # optional {"resume_from": "now" | "schedule"}
            body = api.read_json()
            if not isinstance(body, dict) or set(body) - {"resume_from"}:
                raise ValidationError('the body is optional: {"resume_from": "now" | "schedule"}', "body")
            where = body.get("resume_from", "now")
            if where not in ("now", "schedule"):
                raise ValidationError(f"resume_from must be 'now' or 'schedule', got {_quote(str(where))}",
                                      "resume_from")
            from_schedule = where == "schedule"
        drops, records = ctx.replicas_read(RESUME_VERSION), ctx.replicas_read(RESUME_TRIGGER_VERSION)
        quota = ctx.replicas_read(QUOTA_VERSION)
        return by_id(lambda now, tid: ResumeTasks(now, (tid,), from_schedule, drops, records, quota), task_id)

    @api.route("POST", f"{PREFIX}/tasks/<task_id>/trigger", write=True, body=Body.NONE)
    def trigger_task(task_id: str) -> tuple[int, Any]:
        refuses, ahead = ctx.replicas_read(RESUME_TRIGGER_VERSION), ctx.replicas_read(TRIGGER_AHEAD_VERSION)
        return by_id(lambda now, tid: TriggerTask(now, tid, refuses, ahead), task_id)

    @api.route("POST", f"{PREFIX}/tasks/<task_id>/backfill", write=True)
    def backfill_task(task_id: str) -> tuple[int, Any]:
        body = api.read_json()
        if not isinstance(body, dict) or set(body) != {"start", "end"}:
            raise ValidationError('the body is {"start": epoch ms, "end": epoch ms}', "body")
        for name in ("start", "end"):
            v = whole_int(body[name])
            if v is None or not 0 <= v <= model.MAX_EPOCH_MS:
                raise ValidationError(f"{name} must be an epoch ms in 0..{model.MAX_EPOCH_MS}", name)
            body[name] = v
        start, end = body["start"], body["end"]
        if start >= end:
            raise ValidationError("start must be before end", "end")
        now = ctx.now_ms()
        if end > now:
            raise ValidationError(f"end must not be after now ({now}): a backfill fires past occurrences", "end")
        t = task_for_write(ctx, task_id)
        if t.spec.type is not TaskType.PERIODIC:
            raise IllegalTransitionError("only a periodic task has a schedule to backfill", "type")
        instants = backfill_instants(t, start, end, MAX_BACKFILL + 1)
        if len(instants) > MAX_BACKFILL:
            err = ValidationError(
                f"[start, end) holds more than {MAX_BACKFILL:,} occurrences of the schedule; split the range", "end"
            )
            err.reason = TOO_MANY_OCCURRENCES
            raise err
        res = _item(api.propose_one(BackfillTask(now, t.id, start, end))[0])
        assert isinstance(res, Task)
        return 200, msgspec.json.encode({
            "occurrences": len(instants),
            "first": instants[0] if instants else None,
            "last": instants[-1] if instants else None,
            "task": msgspec.Raw(task_json(res)),
        })


def _install_executions(api: Api) -> None:
    ctx = api.ctx

    def listing(task_id: str | None, checked: bool) -> Any:
        """A page of executions (of ``task_id``'s, whose namespace is ``checked`` already or not), or
        with ``?format=`` an export of every matching one."""
        fmt = export.export_format(api)
        result = api.q_str("result")
        if result is not None:
            try:
                result = ExecutionResult(result).value
            except ValueError:
                allowed = ", ".join(x.value for x in ExecutionResult)
                raise ValidationError(f"result must be one of {allowed}", "result") from None
        since = api.q_ms("since", None)
        until = api.q_ms("until", None)  # until before since: an empty range, an empty page
        raw_cursor = api.q_raw("cursor")
        cursor = None
        if raw_cursor:
            cursor = decode_cursor("e", raw_cursor, access.principal().cursor_key)
            if not _ROW_ID_RE.fullmatch(cursor):
                raise ValidationError("cursor is not a cursor this API issued", "cursor")
        limit = api.q_limit()
        namespaces = access.readable()
        hidden = False
        if task_id is not None and not checked and namespaces is not None:
            t = ctx.get_task(task_id)
            hidden = t is None or t.spec.namespace not in namespaces  # not one it may see: nothing to list

        def page(at: str | None, n: int) -> tuple[list[dict[str, Any]], str | None]:
            if hidden:
                return [], None
            if namespaces is None or task_id is not None:  # every row is one the key may see
                got = ctx.history.list_executions(
                    task_id=task_id, result=result, since_ms=since, until_ms=until, cursor=at, limit=n
                )
                return [e.to_json() for e in got.items], got.next_cursor
            return visible_page(at, n, namespaces)

        def visible_page(at: str | None, n: int, namespaces: frozenset[str]) -> tuple[list[dict[str, Any]], str | None]:
            """A page of the executions of the tasks of ``namespaces`` (an execution is its task's
            namespace's), read on past other namespaces' rows until it holds ``n``, as the task list
            does: at most ``MAX_SCAN`` rows, and after ``n`` of them no longer than ``MAX_SCAN_MS``."""
            out: list[dict[str, Any]] = []
            seen: dict[str, bool] = {}
            examined = 0
            deadline = time.monotonic() + MAX_SCAN_MS / 1000
            while True:
                got = ctx.history.list_executions(
                    task_id=None, result=result, since_ms=since, until_ms=until, cursor=at, limit=max(n, 200)
                )
                for e in got.items:
                    if examined >= MAX_SCAN or (examined > n and time.monotonic() >= deadline):
                        return out, at
                    if e.task_id not in seen:
                        t = ctx.get_task(e.task_id)
                        seen[e.task_id] = t is not None and t.spec.namespace in namespaces
                    if seen[e.task_id] and len(out) >= n:  # a next page only for a row it may see
                        return out, at
                    examined += 1
                    at = str(e.id)
                    if seen[e.task_id]:
                        out.append(e.to_json())
                if got.next_cursor is None:
                    return out, None

        if fmt is not None:
            name = "executions" if task_id is None or not checked else f"task-{task_id}-history"
            return export.stream(name, fmt, export.columns("Execution"),
                                 export.paged(lambda at: page(at, export.PAGE)))
        rows, nxt = page(cursor, limit)
        return 200, {"items": rows, "next_cursor": api.next_cursor("e", nxt)}

    @api.route("GET", f"{PREFIX}/tasks/<task_id>/executions")
    def task_executions(task_id: str) -> Any:
        task_or_404(ctx, task_id)
        return listing(task_id, True)

    @api.route("GET", f"{PREFIX}/executions")
    def executions() -> Any:
        tid = api.q_str("task_id")
        if tid is not None and not model.is_task_id(tid):
            raise ValidationError("task_id is not a task id", "task_id")
        return listing(tid, False)


def _install_cluster(api: Api) -> None:
    ctx = api.ctx

    @api.route("GET", f"{PREFIX}/cluster/status")
    def cluster_status() -> tuple[int, Any]:
        return 200, ctx.cluster_status()

    @api.route("GET", f"{PREFIX}/cluster/leader")
    def cluster_leader() -> tuple[int, Any]:
        return 200, ctx.leader_info().to_json()

    @api.route("GET", f"{PREFIX}/cluster/stats")
    def cluster_stats() -> tuple[int, Any]:
        return 200, ctx.cluster_stats()

    @api.route("POST", f"{PREFIX}/cluster/transfer-leader", write=True, body=Body.OPTIONAL_JSON)
    def transfer_leader() -> tuple[int, Any]:
        body = api.read_json() if api.has_body() else {}
        if not isinstance(body, dict):
            raise ValidationError('the body must be an object {"to": "node id"} (or empty)', "body")
        for k in body:
            if k != "to":
                raise ValidationError(f"unknown field {k!r}", str(k))
        to = body.get("to")
        if to is not None:
            voters = {n.get("id") for n in ctx.cluster_status().get("nodes", []) if n.get("suffrage", "voter") == "voter"}
            if not isinstance(to, str):
                raise ValidationError("to must be a node id (a string) or null", "to")
            if to not in voters or to == ctx.settings.node_id:
                raise IllegalTransitionError(f"{to[:64]!r} is not another voter of the cluster", "to")
        # On record before it happens: once it has, this node is no leader and cannot propose the note.
        me = ctx.settings.node_id
        api.propose_one(AuditNote(ctx.now_ms(), api.stamp(), "cluster.transfer_leader", me,
                                  {"leader": {"old": me, "new": to}}))
        try:
            return 200, ctx.transfer_leader(to)
        except (LeaderElsewhere, NoLeader) as exc:  # it moved meanwhile: a 307 would have the new leader hand over too
            raise IllegalTransitionError(f"leadership moved before this node handed it over ({exc}); this "
                                         "request transferred nothing", "to") from exc

    @api.route("GET", f"{PREFIX}/stats")
    def stats() -> tuple[int, Any]:
        node_id = api.q_str("node_id")
        local = api.q_str("local")
        if local not in (None, "0", "1", "true", "false"):
            raise ValidationError("local must be 1 or 0", "local")
        if node_id is not None and node_id != ctx.settings.node_id:
            if local in ("1", "true"):  # this node only: another node is not found here
                raise NotFoundError(f"node {node_id[:64]!r} is not this node (local=1 answers for this node only)",
                                    "node_id")
            return 200, ctx.node_stats(node_id)  # asked of that node's API (?local=1)
        return 200, ctx.stats()

    @api.route("GET", f"{PREFIX}/stats/series")
    def stats_series() -> tuple[int, Any]:
        span = api.q_str("range") or Span.HOUR.value
        if span not in set(Span):
            raise ValidationError(f"range must be one of {', '.join(Span)}", "range")
        local = api.q_str("local")
        if local not in (None, "0", "1", "true", "false"):
            raise ValidationError("local must be 1 or 0", "local")
        return 200, ctx.fire_series(Span(span), local in ("1", "true"))

    @api.route("GET", f"{PREFIX}/stats/urls")
    def url_stats() -> tuple[int, Any]:
        now = ctx.now_ms()
        until = api.q_ms("until", now)
        assert until is not None
        since = api.q_ms("since", max(0, until - DEFAULT_STATS_WINDOW_MS))
        assert since is not None
        # a window wider than the most it serves is cut to its last MAX_STATS_WINDOW_MS (the answer's since
        # says so); an empty one (until <= since) has no calls in it
        since = max(since, until - MAX_STATS_WINDOW_MS)
        bucket = api.q_int("bucket_ms", 300_000, 60_000, MAX_STATS_WINDOW_MS)
        assert bucket is not None
        url = api.q_str("url")
        if url is not None and len(url) > MAX_URL_FILTER:
            raise ValidationError(f"url is longer than {MAX_URL_FILTER} characters", "url")
        limit = api.q_limit()
        rows = ctx.history.url_stats(since, until, url) if until > since else []
        rows.sort(key=lambda r: (-r.count, r.url))
        items = []
        for r in rows[:limit]:
            trend = ctx.history.url_trend(r.url, since, until, bucket)
            items.append(
                {
                    "url": r.url,
                    "count": r.count,
                    "p50_ms": r.p50_ms,
                    "p90_ms": r.p90_ms,
                    "p99_ms": r.p99_ms,
                    "trend": [
                        {
                            "bucket_ms": p.bucket_ms,
                            "count": p.count,
                            "p50_ms": p.p50_ms,
                            "p90_ms": p.p90_ms,
                            "p99_ms": p.p99_ms,
                        }
                        for p in trend
                    ],
                }
            )
        return 200, {"since": since, "until": until, "bucket_ms": bucket, "items": items}


_OK = _dumps({"ok": True})


def _install_misc(api: Api) -> None:
    ctx = api.ctx

    def test_endpoint() -> tuple[int, Any]:
        time.sleep(ctx.settings.test_endpoint_delay_ms / 1000)
        return 200, _OK

    @api.route("POST", f"{PREFIX}/test/callback", body=Body.ANY)
    def test_callback() -> tuple[int, Any]:
        return test_endpoint()

    @api.route("POST", f"{PREFIX}/test/ack", body=Body.ANY)
    def test_ack() -> tuple[int, Any]:
        return test_endpoint()

    doc = _dumps(openapi.document(ctx.settings.wheel_levels))

    @api.route("GET", f"{PREFIX}/openapi.json")
    def openapi_json() -> tuple[int, Any]:
        return 200, doc

    # Readable from any origin: a console whose node stopped answering asks the other members
    # who leads (docs/architecture.md#console); both answers are open and carry no secret.
    @api.route("GET", "/healthz")
    def healthz() -> tuple[int, Any]:
        bottle.response.set_header("Access-Control-Allow-Origin", "*")
        return 200, {"ok": True, "node_id": ctx.settings.node_id}

    @api.route("GET", "/readyz")
    def readyz() -> tuple[int, Any]:
        bottle.response.set_header("Access-Control-Allow-Origin", "*")
        problem = ctx.clock_problem() or ctx.storage_problem()
        if problem:
            raise Unavailable(f"not ready: {problem}")
        li = ctx.leader_info()
        if li.role == "removed":
            raise Unavailable("not ready: this node was removed from the cluster")
        if li.is_leader or li.leader_id or li.leader_url:
            return 200, {"ready": True, "node_id": ctx.settings.node_id, "role": li.role, "leader_id": li.leader_id}
        raise NoLeader("not ready: no leader is known")


def build_api(ctx: ApiContext, static_dir: Path | None = None) -> Api:
    """The app and its route registry (more routes are added through :meth:`Api.route`).

    The built console is served from ``static_dir`` (default ``molens/web/static``) at ``/ui/``.
    """
    app = bottle.Bottle(catchall=True)
    api = Api(ctx, app)

    def json_error(err: bottle.HTTPError) -> bytes:
        if err.status_code == 405:
            exc: MolensError = MethodNotAllowed(f"method {bottle.request.method} is not allowed here")
        elif err.status_code == 404:
            env = bottle.request.environ
            exc = RouteNotFound(_no_route_message(env.get("bottle.raw_path", env.get("PATH_INFO", ""))))
        else:
            exc = InternalError("internal error; see the node log")
            if err.status_code < 500:
                exc = MolensError(str(err.body)[:200], code="http_error")
        bottle.response.content_type = _JSON_CT
        try:
            bottle.response.set_header("X-Molens-Role", ctx.leader_info().role)
        except Exception:  # an error page must render even if the context cannot answer
            log.debug("no role for an error page", exc_info=True)
        return _dumps(exc.to_json())

    for code in (400, 404, 405, 413, 500):
        app.error_handler[code] = json_error

    def method_override() -> None:
        # POST + X-HTTP-Method-Override: PATCH is a PATCH (clients that cannot send PATCH, such as
        # Java's HttpURLConnection); no other method can be reached this way
        env = bottle.request.environ
        if env.get("REQUEST_METHOD") == "POST" and str(env.get("HTTP_X_HTTP_METHOD_OVERRIDE", "")).upper() == "PATCH":
            env["REQUEST_METHOD"] = "PATCH"

    app.add_hook("before_request", method_override)

    def no_body_for_the_console() -> None:
        # the console's files take no body either (Api.route guards every other route)
        req = bottle.request
        if req.content_length > 0 and (req.path in ("/", UI_PREFIX) or req.path.startswith(UI_PREFIX + "/")):
            err = body_refused(req.method)
            raise bottle.HTTPResponse(_dumps(err.to_json()), err.http_status, {"Content-Type": _JSON_CT})

    app.add_hook("before_request", no_body_for_the_console)

    _install_tasks(api)
    _install_executions(api)
    _install_cluster(api)
    _install_misc(api)
    install_observability(api)
    install_dead_letters(api)
    install_flows(api)
    install_tenancy(api)
    install_audit(api)
    export.install_exports(api)
    install_ui(app, static_dir, connect_origins=_MemberOrigins(ctx))
    _shadow_static_paths(api)
    return api


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _shadow_static_paths(api: Api) -> None:
    """Every method a path without parameters lacks answers ``405`` with ``Allow`` from the route
    table: without it ``GET /dead-letters/redrive`` reached ``GET /dead-letters/{dead_id}`` and the
    ``Allow`` of an ``OPTIONS`` listed that route's methods too. (HEAD keeps Bottle's GET fallback.)"""
    by_path: dict[str, set[str]] = {}
    for method, path in api.routes:
        by_path.setdefault(path, set()).add(method)
    for path, methods in by_path.items():
        if "{" in path:
            continue
        allow = ", ".join(sorted(methods))

        def not_here(allow: str = allow, path: str = path) -> bytes:
            bottle.response.status = 405
            bottle.response.set_header("Allow", allow)
            bottle.response.content_type = _JSON_CT
            return _dumps(MethodNotAllowed(f"{path} takes {allow} only").to_json())

        api.app.route(path, [m for m in _METHODS if m not in methods], not_here)


class _MemberOrigins:
    """The HTTP origins of the cluster's members, for the console's CSP (it probes their ``/readyz``).
    Asked of the context at most every :attr:`TTL_S`, so loading the console costs no Raft round trip."""

    TTL_S = 10.0

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self._at = -self.TTL_S
        self._origins: list[str] = []

    def __call__(self) -> list[str]:
        now = time.monotonic()
        if now - self._at >= self.TTL_S:
            out = []
            for n in self.ctx.cluster_status().get("nodes", []):
                url = n.get("http_url")
                if isinstance(url, str) and re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", url.rstrip("/")):
                    out.append(url.rstrip("/"))
            self._origins, self._at = out, now
        return self._origins


def make_app(ctx: ApiContext, static_dir: Path | None = None) -> bottle.Bottle:
    """The WSGI app of the REST API and the console over ``ctx``."""
    return build_api(ctx, static_dir).app


__all__ = ["MAX_SCAN", "MAX_SCAN_MS", "PREFIX", "Api", "BatchInvalid", "build_api", "decode_cursor", "encode_cursor", "make_app"]
