"""Tasks, executions, their enums, validation of user input and task ids (docs/architecture.md#task-rules).

Everything here is pure: validation takes ``now_ms`` and the policy/limits as arguments, never reads
a clock, a config file or DNS. The web layer calls :func:`validate_create` before proposing a
``CreateTasks`` command; the leader then assigns ids with :func:`new_task_id` (replicas receive
the id inside the command, so they agree).

Decisions recorded here:

- **One error per request.** Fields are checked in a fixed order and the first bad one raises a
  :class:`ValidationError` naming it; unknown fields are rejected (a typo must not silently fall
  back to a default). Types are strict: ``true`` is not an int, ``1.0`` is not an int.
- **Callback host policy** checks the URL's host *as written*: names are matched against
  allow/deny host lists (``.example.com`` matches subdomains), IP literals (including the
  inet_aton forms ``2852039166``/``0xa9.0xfe.0xa9.0xfe`` and IPv4-mapped IPv6) against CIDR lists.
  No DNS lookup happens here (pure code, and the answer could change before the fire anyway); a
  name that resolves to a denied address is refused by the fire worker at connect time
  (:func:`address_denial`, called by ``molens.delivery`` for every address the name resolves to).
  Link-local ``169.254.0.0/16`` (cloud metadata), ``fd00:ec2::254`` and
  ``metadata.google.internal`` are denied by default; loopback is allowed (the built-in test
  endpoints live there). Deny wins over allow; a non-empty allow list admits only what it names.
- **Task ids** are ULID-like: 48-bit creation ms + 80 random bits, 26 Crockford base32 characters,
  so ids sort by creation time and lmdb range scans are in creation order.
- **max_fails "auto"** is an hour's worth of periods clamped to 3..100; for cron the period is the
  gap between the next two fire times after creation.
- ``ack_url`` is only meaningful for delayed at_least_once tasks: periodic tasks ignore it (dropped
  at validation, as docs/architecture.md#task-rules says); with ``at_most_once`` it is rejected, because the ACK
  protocol retries and the user asked for at most one request.

Size: the task's fields, their validation and their JSON shape are kept together.
"""

from __future__ import annotations

import base64
import enum
import functools
import ipaddress
import json
import logging
import os
import re
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring as _encode_str
from typing import Any
from urllib.parse import urlsplit

from molens.errors import (
    IllegalTransitionError,
    MolensError,
    NotFoundError,
    PayloadTooLargeError,
    ValidationError,
)
from molens.schedule import cron

log = logging.getLogger(__name__)

# -------------------------------------------------------------------------------------------------
# errors


# -------------------------------------------------------------------------------------------------
# enums


class TaskType(enum.StrEnum):
    DELAYED = "delayed"
    PERIODIC = "periodic"


class Status(enum.StrEnum):
    PENDING = "pending"
    """Waiting for its next occurrence (has a due time unless the task is being dispatched)."""
    FIRING = "firing"
    """An occurrence is in flight or waiting for a retry."""
    AWAITING_ACK = "awaiting_ack"
    """Callback answered 2xx; the ACK probe is scheduled or in flight."""
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    INACTIVE = "inactive"


TERMINAL_STATUSES = frozenset({Status.DONE, Status.FAILED, Status.INACTIVE})


class Reliability(enum.StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


class FireKind(enum.StrEnum):
    """Value of the ``X-Molens-Kind`` header."""

    CALLBACK = "callback"
    ACK = "ack"


class Outcome(enum.StrEnum):
    """What a worker (or the Monitor) observed for one HTTP attempt."""

    RESPONSE = "response"
    """An HTTP response arrived; see the status code."""
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"
    LOST = "lost"
    """No result before the fire's deadline (worker or leader lost); proposed by the Monitor."""


class ExecutionResult(enum.StrEnum):
    SUCCESS = "success"
    FAILED = "failed"
    """Non-2xx answer other than 404."""
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"
    NOT_FOUND = "not_found"
    LOST = "lost"
    """at_least_once attempt that produced no result before its deadline; it is fired again."""
    UNKNOWN = "unknown"
    """at_most_once fire with no result: it may or may not have been delivered, and never will be again."""
    ACK_SUCCESS = "ack_success"
    ACK_FAILED = "ack_failed"


# -------------------------------------------------------------------------------------------------
# policy and limits


@dataclass(frozen=True, slots=True)
class CallbackPolicy:
    """Which callback hosts are acceptable (see the module docstring for the matching rules)."""

    allow_hosts: tuple[str, ...] = ()
    allow_cidrs: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ("metadata.google.internal",)
    deny_cidrs: tuple[str, ...] = ("169.254.0.0/16", "fd00:ec2::254/128", "fe80::/10")
    schemes: tuple[str, ...] = ("http", "https")

    def __post_init__(self) -> None:
        for c in (*self.allow_cidrs, *self.deny_cidrs):
            ipaddress.ip_network(c, strict=False)  # fail at config time, not at the first request


@dataclass(frozen=True, slots=True)
class Limits:
    """Named bounds on task fields; built from the node config (defaults match conf/node.yaml)."""

    max_payload_bytes: int = 65_536
    default_max_retries: int = 3
    max_retries: int = 20
    max_timeout_ms: int = 300_000
    default_timeout_ms: int = 5_000
    default_ack_delay_ms: int = 1_000
    max_ack_delay_ms: int = 86_400_000
    min_period_ms: int = 1_000
    max_delay_ms: int = 5 * 365 * 86_400_000
    max_url_length: int = 2_048
    max_idempotency_key: int = 128
    max_cron_length: int = 256


DEFAULT_POLICY = CallbackPolicy()
DEFAULT_LIMITS = Limits()

# -------------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A validated create request: what the user asked for, with defaults resolved."""

    type: TaskType
    callback_url: str
    interval_ms: int | None = None
    run_at: int | None = None
    cron_expr: str | None = None
    timezone: str = "UTC"
    ack_url: str | None = None
    ack_delay_ms: int = 1_000
    payload_json: bytes = b"null"
    """The payload as the exact callback body (compact UTF-8 JSON); see :attr:`payload`."""
    scene: str = "default"
    timeout_ms: int = 5_000
    max_retries: int = 3
    max_fails: int = 3
    reliability: Reliability = Reliability.AT_LEAST_ONCE
    idempotency_key: str | None = None

    @property
    def payload(self) -> Any:
        """The payload as a JSON value (decoded on each access; the body is kept encoded)."""
        return json.loads(self.payload_json)


@dataclass(frozen=True, slots=True)
class Task:
    """A task as replicated in the state store.

    ``due_ms`` is the time of the next action (callback occurrence, retry or ACK probe) and is
    indexed; ``None`` while a fire is in flight or when nothing is scheduled. ``seq`` numbers the
    current occurrence (fire id ``{id}-{seq}``); ``sched_ms`` is its scheduled instant, from which a
    periodic task computes the next one (fixed rate). ``attempt`` counts callback attempts of the
    current occurrence, ``ack_attempt`` ACK probes. ``inflight`` is the fire id in flight, if any.
    """

    id: str
    spec: TaskSpec
    status: Status
    created_ms: int
    updated_ms: int
    due_ms: int | None
    sched_ms: int
    seq: int = 1
    attempt: int = 0
    ack_attempt: int = 0
    fail_count: int = 0
    inflight: str | None = None
    last_result: ExecutionResult | None = None
    last_status_code: int | None = None
    last_response: str | None = None
    last_fire_ms: int | None = None

    @property
    def fire_id(self) -> str:
        return f"{self.id}-{self.seq}"

    def to_json(self) -> dict[str, Any]:
        """The bare JSON object the REST API returns (times are epoch ms)."""
        s = self.spec
        return {
            "id": self.id,
            "type": s.type.value,
            "status": self.status.value,
            "interval_ms": s.interval_ms,
            "run_at": s.run_at,
            "cron_expr": s.cron_expr,
            "timezone": s.timezone,
            "callback_url": s.callback_url,
            "ack_url": s.ack_url,
            "ack_delay_ms": s.ack_delay_ms,
            "payload": s.payload,
            "scene": s.scene,
            "timeout_ms": s.timeout_ms,
            "max_retries": s.max_retries,
            "max_fails": s.max_fails,
            "reliability": s.reliability.value,
            "idempotency_key": s.idempotency_key,
            "created_at": self.created_ms,
            "updated_at": self.updated_ms,
            "next_run_at": self.due_ms,
            "seq": self.seq,
            "attempt": self.attempt,
            "ack_attempt": self.ack_attempt,
            "fail_count": self.fail_count,
            "last_execution_result": self.last_result.value if self.last_result else None,
            "last_status_code": self.last_status_code,
            "last_response": self.last_response,
            "last_fire_at": self.last_fire_ms,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Task:
        spec = TaskSpec(
            type=TaskType(d["type"]),
            callback_url=d["callback_url"],
            interval_ms=d["interval_ms"],
            run_at=d["run_at"],
            cron_expr=d["cron_expr"],
            timezone=d["timezone"],
            ack_url=d["ack_url"],
            ack_delay_ms=d["ack_delay_ms"],
            payload_json=encode_payload(d["payload"]),
            scene=d["scene"],
            timeout_ms=d["timeout_ms"],
            max_retries=d["max_retries"],
            max_fails=d["max_fails"],
            reliability=Reliability(d["reliability"]),
            idempotency_key=d["idempotency_key"],
        )
        lr = d["last_execution_result"]
        return cls(
            id=d["id"],
            spec=spec,
            status=Status(d["status"]),
            created_ms=d["created_at"],
            updated_ms=d["updated_at"],
            due_ms=d["next_run_at"],
            sched_ms=d.get("sched_at", d["next_run_at"] or d["created_at"]),
            seq=d["seq"],
            attempt=d["attempt"],
            ack_attempt=d["ack_attempt"],
            fail_count=d["fail_count"],
            last_result=ExecutionResult(lr) if lr else None,
            last_status_code=d["last_status_code"],
            last_response=d["last_response"],
            last_fire_ms=d["last_fire_at"],
        )


_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_NULL = "null"
_ENUM_JSON: dict[Any, str] = {
    m: _JSON_ENCODER.encode(m.value) for e in (TaskType, Status, Reliability, ExecutionResult) for m in e
}
_ENUM_JSON[None] = _NULL


def _j(v: Any) -> str:
    """One JSON value as the compact encoder writes it (``str`` and ``int`` without its overhead)."""
    if v is None:
        return _NULL
    if v.__class__ is str:
        return _encode_str(v)
    if v.__class__ is int:
        return int.__repr__(v)
    return _JSON_ENCODER.encode(v)


# The fields in to_json's order; always-int fields formatted with :d (the dataclasses hold ints).
def _task_json_head(t: Task) -> str:
    s = t.spec
    return (
        f'{{"id":{_j(t.id)},"type":{_ENUM_JSON[s.type]},"status":{_ENUM_JSON[t.status]},'
        f'"interval_ms":{_j(s.interval_ms)},"run_at":{_j(s.run_at)},"cron_expr":{_j(s.cron_expr)},'
        f'"timezone":{_j(s.timezone)},"callback_url":{_j(s.callback_url)},"ack_url":{_j(s.ack_url)},'
        f'"ack_delay_ms":{s.ack_delay_ms:d},"payload":'
    )


def _task_json_tail(t: Task) -> str:
    s = t.spec
    return (
        f',"scene":{_j(s.scene)},"timeout_ms":{s.timeout_ms:d},"max_retries":{s.max_retries:d},'
        f'"max_fails":{s.max_fails:d},"reliability":{_ENUM_JSON[s.reliability]},'
        f'"idempotency_key":{_j(s.idempotency_key)},"created_at":{t.created_ms:d},'
        f'"updated_at":{t.updated_ms:d},"next_run_at":{_j(t.due_ms)},"seq":{t.seq:d},'
        f'"attempt":{t.attempt:d},"ack_attempt":{t.ack_attempt:d},"fail_count":{t.fail_count:d},'
        f'"last_execution_result":{_ENUM_JSON[t.last_result]},"last_status_code":{_j(t.last_status_code)},'
        f'"last_response":{_j(t.last_response)},"last_fire_at":{_j(t.last_fire_ms)}}}'
    )


def tasks_json(tasks: Sequence[Task | None]) -> bytes:
    """The compact UTF-8 JSON array ``[t.to_json() or null, ...]``: the same bytes as ``json.dumps``
    with ``separators=(",", ":"), ensure_ascii=False``, written field by field with each task's
    stored payload bytes spliced in. Encoding 500 ``to_json()`` dicts (payloads decoded just to be
    encoded again) was the biggest single cost of a batch create's answer; tests pin the equality.
    """
    items = [
        b"null" if t is None else b"".join((_task_json_head(t).encode(), t.spec.payload_json, _task_json_tail(t).encode()))
        for t in tasks
    ]
    return b"[" + b",".join(items) + b"]"


@dataclass(frozen=True, slots=True)
class Execution:
    """One HTTP attempt (callback or ACK probe) as recorded in the history."""

    task_id: str
    fire_id: str
    seq: int
    attempt: int
    kind: FireKind
    result: ExecutionResult
    status_code: int | None
    latency_ms: int | None
    worker: str
    url: str
    scene: str
    fired_ms: int
    finished_ms: int
    response_head: str | None = None
    id: int | None = None
    """History row id (assigned by the history database; ``None`` before insert)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "fire_id": self.fire_id,
            "seq": self.seq,
            "attempt": self.attempt,
            "kind": self.kind.value,
            "result": self.result.value,
            "status_code": self.status_code,
            "latency_ms": self.latency_ms,
            "worker": self.worker,
            "url": self.url,
            "scene": self.scene,
            "fired_at": self.fired_ms,
            "finished_at": self.finished_ms,
            "response_head": self.response_head,
        }


# -------------------------------------------------------------------------------------------------
# task ids

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_PAIR_SHIFTS = tuple(range(120, -1, -10))
_TASK_ID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")


def new_task_id(now_ms: int, random80: int) -> str:
    """A 26-character id sorting by ``now_ms``; ``random80`` is 80 random bits chosen by the leader."""
    if not 0 <= now_ms < 1 << 48:
        raise ValueError("now_ms out of range for a task id")
    n = (now_ms << 80) | (random80 & ((1 << 80) - 1))
    return "".join([_CROCKFORD_PAIRS[(n >> shift) & 1023] for shift in _PAIR_SHIFTS])  # 13 x 10 bits


_B32_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())


def task_ids_from_bytes(now_ms: int, raw: bytes) -> list[str]:
    """``new_task_id(now_ms, r)`` for each 10-byte big-endian ``r`` in ``raw``, in one pass: the
    first 10 characters (the ms) are shared, and the 80 random bits of each id are its 16 base-32
    digits, which ``base64.b32encode`` writes for all ids at once (RFC 4648 alphabet, translated)."""
    if len(raw) % 10:
        raise ValueError("raw must hold 10 bytes per id")
    prefix = new_task_id(now_ms, 0)[:10]
    digits = base64.b32encode(raw).translate(_B32_TO_CROCKFORD).decode()
    return [prefix + digits[i : i + 16] for i in range(0, len(digits), 16)]


class TaskIds:
    """Thread-safe source of :func:`new_task_id` ids, the 80 random bits drawn from a buffer.

    One ``getrandom()`` system call per id was a tenth of a batch create's server CPU; the buffer
    takes one per ``buffer_ids`` ids.
    """

    def __init__(self, buffer_ids: int = 1024) -> None:
        self._size = 10 * buffer_ids
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0

    def new(self, now_ms: int) -> str:
        with self._lock:
            pos = self._pos
            if pos >= len(self._buf):
                self._buf, pos = os.urandom(self._size), 0
            self._pos = pos + 10
            random80 = int.from_bytes(self._buf[pos : pos + 10], "big")
        return new_task_id(now_ms, random80)

    def new_many(self, now_ms: int, n: int) -> list[str]:
        """``n`` ids for ``now_ms`` (a batch create's), a quarter of the CPU of ``n`` calls to ``new``."""
        size = 10 * n
        with self._lock:
            pos = self._pos
            if pos + size > len(self._buf):
                self._buf, pos = os.urandom(max(self._size, size)), 0
            self._pos = pos + size
            raw = self._buf[pos : pos + size]
        return task_ids_from_bytes(now_ms, raw)


def task_id_ms(task_id: str) -> int:
    """Creation ms encoded in a task id."""
    n = 0
    for ch in task_id[:10]:
        n = (n << 5) | _CROCKFORD.index(ch)
    return n  # 26 chars hold 130 bits, the top two are zero: the first 10 chars are the 48-bit ms


def is_task_id(s: str) -> bool:
    return bool(_TASK_ID_RE.match(s))


# -------------------------------------------------------------------------------------------------
# validation

_FIELDS = frozenset(
    {
        "type",
        "interval_ms",
        "run_at",
        "cron_expr",
        "timezone",
        "callback_url",
        "ack_url",
        "ack_delay_ms",
        "payload",
        "scene",
        "timeout_ms",
        "max_retries",
        "max_fails",
        "reliability",
        "idempotency_key",
    }
)
_SCENE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_INET_ATON_RE = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?$")

_MISSING = object()
_TASK_TYPES = {t.value: t for t in TaskType}
_RELIABILITIES = {r.value: r for r in Reliability}


def _int(req: dict[str, Any], name: str, lo: int, hi: int | None, default: Any = _MISSING) -> Any:
    v = req.get(name, _MISSING)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise ValidationError(f"{name} is required", name)
        return default
    if type(v) is not int:
        raise ValidationError(f"{name} must be an integer, got {_json_type(v)}", name)
    if v < lo or (hi is not None and v > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValidationError(f"{name} must be in {rng}, got {v}", name)
    return v


def _str(req: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    v = req.get(name, _MISSING)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise ValidationError(f"{name} is required", name)
        return default
    if not isinstance(v, str):
        raise ValidationError(f"{name} must be a string, got {_json_type(v)}", name)
    return v


def _json_type(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _host_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address an IP-literal host denotes, as a resolver would read it; ``None`` for names."""
    h = host.strip("[]")
    try:
        ip = ipaddress.ip_address(h.split("%", 1)[0])
    except ValueError:
        if _INET_ATON_RE.match(h):
            try:
                return ipaddress.IPv4Address(socket.inet_aton(h))
            except OSError:
                return None
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _host_matches(host: str, patterns: tuple[str, ...]) -> bool:
    for p in patterns:
        p = p.lower().rstrip(".")
        if p.startswith("."):
            if host.endswith(p) or host == p[1:]:
                return True
        elif host == p:
            return True
    return False


@functools.lru_cache(maxsize=64)
def _networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Parsed once per policy: parsing CIDRs dominated batch validation before."""
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def _ip_in(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, cidrs: tuple[str, ...]) -> bool:
    return any(ip.version == net.version and ip in net for net in _networks(cidrs))


def check_url(url: Any, name: str, policy: CallbackPolicy, limits: Limits) -> str:
    """Check a callback/ACK URL against syntax and the host policy; returns it unchanged."""
    if not isinstance(url, str):
        raise ValidationError(f"{name} must be a string, got {_json_type(url)}", name)
    return _check_url_str(url, name, policy, limits)


@functools.lru_cache(maxsize=4096)
def _check_url_str(url: str, name: str, policy: CallbackPolicy, limits: Limits) -> str:
    """The string checks, cached: a batch usually repeats a few callback URLs (errors are not cached)."""
    if not url:
        raise ValidationError(f"{name} must not be empty", name)
    if len(url) > limits.max_url_length:
        raise ValidationError(f"{name} is longer than {limits.max_url_length} characters", name)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ValidationError(f"{name} contains whitespace or control characters", name)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ValidationError(f"{name} is not a valid URL: {e}", name) from None
    scheme = parts.scheme.lower()
    if scheme not in policy.schemes:
        raise ValidationError(f"{name} must be an {' or '.join(policy.schemes)} URL", name)
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise ValidationError(f"{name} has no host", name)
    if port == 0:
        raise ValidationError(f"{name} has an invalid port 0", name)
    if parts.fragment:
        raise ValidationError(f"{name} must not contain a fragment", name)
    ip = _host_ip(host)
    if ip is None and not _HOSTNAME_RE.match(host):
        raise ValidationError(f"{name} has an invalid host {host!r}", name)
    why = _host_verdict(host, ip, policy)
    if why is not None:
        raise ValidationError(f"{name} host {host} is {why}", name)
    return url


def _host_verdict(
    host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None, policy: CallbackPolicy
) -> str | None:
    """The host policy rule, shared by validation and the fire worker: None when ``host`` (lower
    case, no trailing dot), reached at ``ip`` (None: a name, address unknown), passes; else why not.
    Deny wins; a non-empty allow list admits the host by name or by address."""
    if _host_matches(host, policy.deny_hosts) or (ip is not None and _ip_in(ip, policy.deny_cidrs)):
        return "denied by the callback host policy"
    if policy.allow_hosts or policy.allow_cidrs:
        ok = _host_matches(host, policy.allow_hosts) or (ip is not None and _ip_in(ip, policy.allow_cidrs))
        if not ok:
            return "not in the callback host allow list"
    return None


def address_denial(host: str, address: str, policy: CallbackPolicy) -> str | None:
    """Why the fire worker must not connect to ``address`` (one address a resolver returned for the
    callback host ``host``), or None when it may: the rules of :func:`check_url`, applied to the
    address the host resolves to at fire time instead of the one it is written as (DNS rebinding)."""
    host = host.lower().rstrip(".")
    ip = _host_ip(address)
    if ip is None:  # fail closed: not an address a resolver should return
        return f"callback host {host} resolves to {address!r}, not an IP address"
    why = _host_verdict(host, ip, policy)
    return None if why is None else f"callback host {host} resolves to {ip}, {why}"


_PAYLOAD_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_payload(payload: Any) -> bytes:
    """The exact callback body: compact JSON, UTF-8, NaN/Infinity refused."""
    return _PAYLOAD_ENCODER.encode(payload).encode()


def auto_max_fails(period_ms: int) -> int:
    """An hour's worth of periods, clamped to 3..100."""
    return max(3, min(100, 3_600_000 // max(1, period_ms)))


def validate_create(
    request: Any,
    policy: CallbackPolicy = DEFAULT_POLICY,
    limits: Limits = DEFAULT_LIMITS,
    now_ms: int = 0,
) -> TaskSpec:
    """Validate one create request (a parsed JSON object) and resolve defaults.

    Raises :class:`ValidationError` (or :class:`PayloadTooLargeError`) for the first bad field.
    ``now_ms`` bounds ``run_at`` and resolves the period of a cron expression for ``max_fails``.
    """
    if not isinstance(request, dict):
        raise ValidationError(f"a task must be a JSON object, got {_json_type(request)}", None)
    for k in request:
        if k not in _FIELDS:
            raise ValidationError(f"unknown field {k!r}", str(k))

    raw_type = _str(request, "type")
    ttype = _TASK_TYPES.get(raw_type)
    if ttype is None:
        raise ValidationError("type must be 'delayed' or 'periodic'", "type")

    max_delay = limits.max_delay_ms
    interval_ms = run_at = cron_expr = None
    timezone = _str(request, "timezone", "UTC")

    if ttype is TaskType.DELAYED:
        if request.get("cron_expr") is not None:
            raise ValidationError("cron_expr is only for periodic tasks", "cron_expr")
        has_iv = request.get("interval_ms") is not None
        has_at = request.get("run_at") is not None
        if has_iv and has_at:
            raise ValidationError("give interval_ms or run_at, not both", "run_at")
        if has_at:
            run_at = _int(request, "run_at", 0, now_ms + max_delay)
        else:
            if not has_iv:
                raise ValidationError("delayed tasks need interval_ms or run_at", "interval_ms")
            interval_ms = _int(request, "interval_ms", 0, max_delay)
    else:
        if request.get("run_at") is not None:
            raise ValidationError("run_at is only for delayed tasks", "run_at")
        has_iv = request.get("interval_ms") is not None
        has_cron = request.get("cron_expr") is not None
        if has_iv and has_cron:
            raise ValidationError("give interval_ms or cron_expr, not both", "cron_expr")
        if has_cron:
            cron_expr = _str(request, "cron_expr")
            if len(cron_expr) > limits.max_cron_length:
                raise ValidationError(f"cron_expr is longer than {limits.max_cron_length}", "cron_expr")
        elif not has_iv:
            raise ValidationError("periodic tasks need interval_ms or cron_expr", "interval_ms")
        else:
            interval_ms = _int(request, "interval_ms", limits.min_period_ms, max_delay)

    if request.get("timezone") is not None or cron_expr is not None:
        try:
            cron.validate_timezone(timezone)
        except ValueError as e:
            raise ValidationError(str(e) or f"unknown timezone {timezone!r}", "timezone") from None
    if cron_expr is not None:
        try:
            cron.validate_cron(cron_expr, timezone)
        except ValueError as e:
            fld = getattr(e, "field", "cron_expr") or "cron_expr"
            raise ValidationError(str(e) or "invalid cron expression", fld) from None

    if request.get("callback_url") is None:
        raise ValidationError("callback_url is required", "callback_url")
    callback_url = check_url(request["callback_url"], "callback_url", policy, limits)

    reliability_raw = _str(request, "reliability", Reliability.AT_LEAST_ONCE.value)
    reliability = _RELIABILITIES.get(reliability_raw)
    if reliability is None:
        raise ValidationError("reliability must be 'at_least_once' or 'at_most_once'", "reliability")

    ack_url = None
    if request.get("ack_url") is not None:
        ack_url = check_url(request["ack_url"], "ack_url", policy, limits)
        if ttype is TaskType.PERIODIC:
            ack_url = None  # docs/architecture.md#task-rules: periodic tasks ignore ack_url
        elif reliability is Reliability.AT_MOST_ONCE:
            raise ValidationError("ack_url needs reliability at_least_once", "ack_url")
    ack_delay_ms = _int(request, "ack_delay_ms", 0, limits.max_ack_delay_ms, limits.default_ack_delay_ms)

    payload = request.get("payload")
    try:
        body = encode_payload(payload)
    except (TypeError, ValueError, RecursionError) as e:
        raise ValidationError(f"payload is not JSON: {e}", "payload") from None
    if len(body) > limits.max_payload_bytes:
        raise PayloadTooLargeError(
            f"payload is {len(body)} bytes encoded, more than {limits.max_payload_bytes}", "payload"
        )

    scene = _str(request, "scene", "default")
    if not _SCENE_RE.match(scene):
        raise ValidationError("scene must match [A-Za-z0-9_.-]{1,64}", "scene")
    timeout_ms = _int(request, "timeout_ms", 1, limits.max_timeout_ms, limits.default_timeout_ms)
    max_retries = _int(request, "max_retries", 0, limits.max_retries, limits.default_max_retries)

    if ttype is TaskType.PERIODIC:
        if request.get("max_fails") is not None:
            max_fails = _int(request, "max_fails", 1, None)
        elif interval_ms is not None:
            max_fails = auto_max_fails(interval_ms)
        else:
            assert cron_expr is not None
            first = cron.next_cron_fire(cron_expr, timezone, now_ms)
            second = cron.next_cron_fire(cron_expr, timezone, first)
            max_fails = auto_max_fails(second - first)
    else:
        max_fails = _int(request, "max_fails", 1, None, 1)

    key = _str(request, "idempotency_key", None)
    if key is not None and not 1 <= len(key) <= limits.max_idempotency_key:
        raise ValidationError(f"idempotency_key must be 1..{limits.max_idempotency_key} characters", "idempotency_key")

    return TaskSpec(
        type=ttype,
        callback_url=callback_url,
        interval_ms=interval_ms,
        run_at=run_at,
        cron_expr=cron_expr,
        timezone=timezone,
        ack_url=ack_url,
        ack_delay_ms=ack_delay_ms,
        payload_json=body,
        scene=scene,
        timeout_ms=timeout_ms,
        max_retries=max_retries,
        max_fails=max_fails,
        reliability=reliability,
        idempotency_key=key,
    )


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_POLICY",
    "TERMINAL_STATUSES",
    "CallbackPolicy",
    "Execution",
    "ExecutionResult",
    "FireKind",
    "IllegalTransitionError",
    "Limits",
    "MolensError",
    "NotFoundError",
    "Outcome",
    "PayloadTooLargeError",
    "Reliability",
    "Status",
    "Task",
    "TaskIds",
    "TaskSpec",
    "TaskType",
    "ValidationError",
    "address_denial",
    "auto_max_fails",
    "check_url",
    "encode_payload",
    "is_task_id",
    "task_ids_from_bytes",
    "new_task_id",
    "task_id_ms",
    "tasks_json",
    "validate_create",
]
