"""The rules of a task (docs/architecture.md#task-rules): validation of a create request, the
callback host policy, limits and task ids. The task's fields, and the records the API shows (an
execution, a dead letter), are declared in :mod:`molens.schema` (re-exported here).

Everything here is pure: validation takes ``now_ms`` and the policy/limits as arguments, never reads
a clock, a config file or DNS. The web layer calls :func:`decode_create` on the request body before
proposing a ``CreateTasks`` command; the leader then assigns ids with :func:`new_task_id` (replicas
receive the id inside the command, so they agree).

Decisions recorded here:

- **One error per request.** The body is decoded into the schema's request type (shape, types and
  bounds, in the order of the document), then the rules between fields are checked in a fixed
  order; the first bad field raises a :class:`ValidationError` naming it. Unknown fields are
  rejected (a typo must not silently fall back to a default). Types are strict: ``true`` is not an
  int, ``1.0`` is not an int; null means "absent".
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
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import json
import logging
import os
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec

from molens import tracing
from molens.errors import (
    IllegalTransitionError,
    MolensError,
    NotFoundError,
    PayloadTooLargeError,
    PreconditionFailed,
    QuotaExceeded,
    ValidationError,
)
from molens.schedule import cron
from molens.schema import (
    ACK_RELIABILITY,
    DEFAULT_RETRY,
    PERIODIC_ONLY,
    SCHEDULE_FIELDS,
    SCHEDULES,
    CatchUp,
    Execution,
    ExecutionResult,
    FailureKind,
    FireKind,
    Outcome,
    Overlap,
    Reliability,
    RetryPolicy,
    Status,
    Task,
    TaskSpec,
    TaskType,
    create_type,
    per_value_patterns,
    request_error,
    rule_defaulted,
    spec_defaults,
    spec_fields,
    tasks_json,
    whole_numbers,
)

log = logging.getLogger(__name__)

TERMINAL_STATUSES = frozenset({Status.DONE, Status.FAILED, Status.INACTIVE})

# -------------------------------------------------------------------------------------------------
# policy and limits


@dataclass(frozen=True, slots=True)
class CallbackPolicy:
    """Which callback hosts are acceptable (see the module docstring for the matching rules)."""

    allow_hosts: tuple[str, ...] = ()
    allow_cidrs: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ("metadata.google.internal",)
    deny_cidrs: tuple[str, ...] = ("169.254.0.0/16", "fd00:ec2::254/128", "fe80::/10", "100.100.100.200/32",
                                   "168.63.129.16/32")
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
    default_retry: RetryPolicy = DEFAULT_RETRY
    """The node's retry policy for a task that gives none (``scheduler.retry``); its ``max_retries``
    is ``default_max_retries``."""
    default_notify_url: str = ""
    """``notifications.url``: the notification target of a task that gives none ("" = none)."""


from molens.wallclock import MAX_EPOCH_MS  # noqa: E402 -- re-exported: model.MAX_EPOCH_MS

"""The last millisecond of year 9999 (UTC): the largest time any field or parameter may hold, so
that every time can be stored (SQLite, msgpack int64) and shown as a date."""


def check_epoch_ms(v: int, name: str) -> int:
    """``v`` if it is a time this API supports (0..:data:`MAX_EPOCH_MS`); else a ValidationError."""
    if not 0 <= v <= MAX_EPOCH_MS:
        raise ValidationError(f"{name} must be epoch ms in 0..{MAX_EPOCH_MS} (up to year 9999), got {v}", name)
    return v


DEFAULT_POLICY = CallbackPolicy()
DEFAULT_LIMITS = Limits()

# -------------------------------------------------------------------------------------------------
# task ids

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_PAIR_SHIFTS = tuple(range(120, -1, -10))
TASK_ID_PATTERN = "^[0-9A-HJKMNP-TV-Z]{26}$"
"""A task id: 26 Crockford base32 characters (the OpenAPI document states the same pattern)."""
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)


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


_BYTE_TO_CROCKFORD = bytes(_CROCKFORD[b & 31].encode()[0] for b in range(256))


def task_ids_from_digits(now_ms: int, raw: bytes) -> list[str]:
    """``new_task_id(now_ms, r)`` for each 16 bytes of ``raw``, ``r`` the 80 bits made of the low
    five bits of each byte in turn: the 16 base-32 digits of each id are one ``bytes.translate``
    (uniform bytes give uniform digits, 256 being 8 x 32), with no per-id arithmetic."""
    if len(raw) % 16:
        raise ValueError("raw must hold 16 bytes per id")
    prefix = new_task_id(now_ms, 0)[:10]
    digits = raw.translate(_BYTE_TO_CROCKFORD).decode()
    return [prefix + digits[i : i + 16] for i in range(0, len(digits), 16)]


class TaskIds:
    """Thread-safe source of :func:`new_task_id` ids, the 80 random bits drawn from a buffer.

    One ``getrandom()`` system call per id was a tenth of a batch create's server CPU; the buffer
    takes one per ``buffer_ids`` ids.

    Ids never go down: each sorts above every id this source gave before, so the API's id order is
    the order in which one leader took the creates (``GET /tasks`` lists in creation order, and a
    client that creates one task after another sees them listed so, in the same millisecond too).
    An id that would not sort above the last keeps the last one's millisecond and takes its random
    part plus a random step of up to 2^32 (ULID's monotonic rule, still unguessable); a batch whose
    lowest id would not takes the next millisecond.
    """

    def __init__(self, buffer_ids: int = 1024) -> None:
        self._size = 10 * buffer_ids
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0
        self._last = ""
        """The greatest id given out."""

    def new(self, now_ms: int) -> str:
        with self._lock:
            pos = self._pos
            if pos >= len(self._buf):
                self._buf, pos = os.urandom(self._size), 0
            self._pos = pos + 10
            random80 = int.from_bytes(self._buf[pos : pos + 10], "big")
            tid = new_task_id(now_ms, random80)
            last = self._last
            if tid <= last:
                ms, r = task_id_ms(last), task_id_random(last) + 1 + (random80 & 0xFFFF_FFFF)
                tid = new_task_id(ms, r) if r < 1 << 80 else new_task_id(ms + 1, random80)
            self._last = tid
        return tid

    def floor(self, task_id: str) -> None:
        """Give only ids above ``task_id`` from now on (a new leader: the greatest id in its store)."""
        with self._lock:
            if task_id > self._last:
                self._last = task_id

    def new_many(self, now_ms: int, n: int) -> list[str]:
        """``n`` ids for ``now_ms`` (a batch create's), 16 random bytes each
        (:func:`task_ids_from_digits`): a tenth of the CPU of ``n`` calls to ``new``.

        In ascending order, so a batch's items get ids in the order they were sent and every replica
        inserts the batch's keys into its B-trees one after another rather than at random places
        among each other (3-6 % less CPU per applied create, docs/benchmarks.md)."""
        if n <= 0:
            return []
        size = 16 * n
        with self._lock:
            pos = self._pos
            if pos + size > len(self._buf):
                self._buf, pos = os.urandom(max(self._size, size)), 0
            self._pos = pos + size
            raw = self._buf[pos : pos + size]
            ids = task_ids_from_digits(now_ms, raw)
            ids.sort()
            if ids[0] <= self._last:
                ids = task_ids_from_digits(max(now_ms, task_id_ms(self._last) + 1), raw)
                ids.sort()
            self._last = ids[-1]
        return ids


def task_id_random(task_id: str) -> int:
    """The 80 random bits of a task id."""
    n = 0
    for ch in task_id[10:]:
        n = (n << 5) | _CROCKFORD.index(ch)
    return n


def task_id_ms(task_id: str) -> int:
    """Creation ms encoded in a task id."""
    n = 0
    for ch in task_id[:10]:
        n = (n << 5) | _CROCKFORD.index(ch)
    return n  # 26 chars hold 130 bits, the top two are zero: the first 10 chars are the 48-bit ms


def is_task_id(s: str) -> bool:
    return bool(_TASK_ID_RE.fullmatch(s))


# -------------------------------------------------------------------------------------------------
# validation

_INET_ATON_RE = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?$")


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
        if _INET_ATON_RE.fullmatch(h):
            try:
                return ipaddress.IPv4Address(socket.inet_aton(h))
            except OSError:
                return None
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        return _embedded_ipv4(ip) or ip
    return ip


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and reaches: IPv4-mapped (``::ffff:a.b.c.d``),
    IPv4-compatible (``::a.b.c.d``), NAT64 (``64:ff9b::/96``, and RFC 8215's local-use
    ``64:ff9b:1::/48`` in the RFC 6052 /48 layout), 6to4 (``2002::/16``) and Teredo (the client).
    The host policy is applied to that IPv4 address: ``[::169.254.169.254]`` is the metadata
    address."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    n = int(ip)
    if n >> 32 == 0 and n > 1:  # ::a.b.c.d (:: and ::1 are not IPv4)
        return ipaddress.IPv4Address(n)
    if ip in _NAT64:
        return ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if ip in _NAT64_LOCAL:  # RFC 6052 prefix /48: IPv4 in bits 48..63 and 72..87
        b = ip.packed
        return ipaddress.IPv4Address(bytes((b[6], b[7], b[9], b[10])))
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


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
    if "\\" in url:  # parsers disagree on it: http://127.0.0.1\@evil.com/ is either host
        raise ValidationError(f"{name} contains a backslash; write %5C if the path needs one", name)
    if _bad_text(url):
        raise ValidationError(f"{name} holds a lone UTF-16 surrogate", name)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ValidationError(f"{name} is not a valid URL: {e}", name) from None
    scheme = parts.scheme.lower()
    if scheme not in policy.schemes:
        raise ValidationError(f"{name} must be an {' or '.join(policy.schemes)} URL", name)
    if "@" in parts.netloc:
        raise ValidationError(
            f"{name} must not hold credentials (user:password@host): they would be stored and shown "
            "with the task; let the receiver check X-Molens-Signature instead",
            name,
        )
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise ValidationError(f"{name} has no host", name)
    if port == 0:
        raise ValidationError(f"{name} has an invalid port 0", name)
    if parts.fragment:
        raise ValidationError(f"{name} must not contain a fragment", name)
    ip = _host_ip(host)
    if ip is None and not _HOSTNAME_RE.fullmatch(host):
        raise ValidationError(f"{name} has an invalid host {host!r}", name)
    why = _host_verdict(host, ip, policy)
    if why is not None:
        raise ValidationError(f"{name} host {host} is {why}", name)
    return url


_THIS_HOST = (ipaddress.IPv4Address("0.0.0.0"), ipaddress.IPv6Address("::"))
"""Addresses a connect() reaches this host at (Linux and the BSDs take them for loopback)."""
_LOOPBACK: dict[int, ipaddress.IPv4Address | ipaddress.IPv6Address] = {
    4: ipaddress.IPv4Address("127.0.0.1"), 6: ipaddress.IPv6Address("::1")}


def _host_verdict(
    host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None, policy: CallbackPolicy
) -> str | None:
    """The host policy rule, shared by validation and the fire worker: None when ``host`` (lower
    case, no trailing dot), reached at ``ip`` (None: a name, address unknown), passes; else why not.
    Deny wins; a non-empty allow list admits the host by name or by address. The unspecified
    address (``0.0.0.0``, ``0``, ``::``) reaches this host: it is matched as loopback."""
    if ip is not None and ip in _THIS_HOST:
        ip = _LOOPBACK[ip.version]
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
    """Validate one create request given as Python values (a parsed JSON object): encoded once and
    checked exactly as :func:`decode_create` checks the request body."""
    if not isinstance(request, dict):
        raise ValidationError(f"a task must be a JSON object, got {_json_type(request)}", None)
    try:
        body = _PAYLOAD_ENCODER.encode(request).encode()
    except (TypeError, ValueError, RecursionError, UnicodeError):
        raise _unencodable(request) from None
    return decode_create(body, policy, limits, now_ms)


def _unencodable(request: dict[Any, Any]) -> ValidationError:
    """The error naming the first key or value of ``request`` that is not JSON."""
    for k, v in request.items():
        if not isinstance(k, str) or _bad_text(k):
            return ValidationError("a field name is not a JSON string (lone surrogate?)", None)
        try:
            _PAYLOAD_ENCODER.encode(v).encode()
        except UnicodeError:
            return ValidationError(f"{k} holds a lone UTF-16 surrogate", k)
        except (TypeError, ValueError, RecursionError) as e:
            return ValidationError(f"{k} is not JSON: {e}", k)
    return ValidationError("the task is not JSON", None)


def _check_utf8(payload_json: bytes) -> None:
    """A payload is kept as the bytes sent, which the decoder skips over without reading them as
    text: bytes that are not UTF-8 would reach every answer and the receiver as they came."""
    if not payload_json.isascii():
        try:
            payload_json.decode()
        except UnicodeDecodeError as e:
            raise ValidationError(f"payload is not valid UTF-8 (byte {e.start} of the payload)", "payload") from None


def _bad_text(s: str) -> bool:
    try:
        s.encode()
    except UnicodeError:
        return True
    return False


def decode_create(
    body: bytes,
    policy: CallbackPolicy = DEFAULT_POLICY,
    limits: Limits = DEFAULT_LIMITS,
    now_ms: int = 0,
    *,
    idempotency_key: str | None = None,
    spec_type: type[TaskSpec] = TaskSpec,
    whole_body: bool = True,
    carried: frozenset[str] = frozenset(),
) -> TaskSpec:
    """Decode and validate one create request body (JSON bytes) and resolve defaults.

    Shape and bounds come from the schema (:func:`molens.schema.create_type`); the rules between
    fields are applied here. Raises :class:`ValidationError` (or :class:`PayloadTooLargeError`)
    naming the first bad field. ``idempotency_key`` (the ``Idempotency-Key`` header) applies when
    the body has none (one that differs from the body's is refused); ``whole_body`` is False when ``body`` is one item of a batch. ``now_ms``
    bounds ``run_at`` and resolves the period of a cron expression for ``max_fails``; ``carried``
    names (JSON names) fields an update keeps from the stored definition, which are not checked
    against ``now_ms`` again (a task whose ``end_at`` has passed can still have its scene changed).
    """
    try:
        req = msgspec.json.decode(body, type=create_type(limits, spec_type))
    except (msgspec.MsgspecError, RecursionError) as e:
        if isinstance(e, RecursionError):
            raise ValidationError("request body is nested too deeply", "body") from None
        if isinstance(e, msgspec.ValidationError) and "got `float`" in str(e) and (ints := whole_numbers(body)):
            return decode_create(ints, policy, limits, now_ms, idempotency_key=idempotency_key, spec_type=spec_type,
                                 whole_body=whole_body, carried=carried)
        raise request_error(e, limits, spec_type, whole_body=whole_body) from None
    return resolve_create(req, policy, limits, now_ms, idempotency_key=idempotency_key, spec_type=spec_type,
                          carried=carried)


def resolve_create(
    req: Any,
    policy: CallbackPolicy = DEFAULT_POLICY,
    limits: Limits = DEFAULT_LIMITS,
    now_ms: int = 0,
    *,
    idempotency_key: str | None = None,
    spec_type: type[TaskSpec] = TaskSpec,
    carried: frozenset[str] = frozenset(),
) -> TaskSpec:
    """The second half of :func:`decode_create`: the rules between the fields of ``req`` (a decoded
    ``create_type(limits, spec_type)``) and the defaults."""
    fields = spec_fields(spec_type)
    given: dict[str, Any] = {f.encode_name: getattr(req, f.encode_name) for f in fields}
    for name, regex, declared in per_value_patterns(spec_type):
        v = given[name]
        if v is not None and not regex.match(v):
            raise ValidationError(f"{name} must match {declared.strip('^$')}", name)
    if given["payload"] is msgspec.UNSET:
        given["payload"] = None
    out = dict(spec_defaults(limits, spec_type))
    out.update({f.name: given[f.encode_name] for f in fields if given[f.encode_name] is not None})
    if idempotency_key and out.get("idempotency_key") not in (None, idempotency_key):
        raise ValidationError(
            "the Idempotency-Key header and the body's idempotency_key differ; give one, or both the same",
            "Idempotency-Key",
        )
    if out.get("idempotency_key") is None and idempotency_key:
        if not 1 <= len(idempotency_key) <= limits.max_idempotency_key:
            raise ValidationError(
                f"Idempotency-Key must be 1..{limits.max_idempotency_key} characters", "Idempotency-Key"
            )
        if "\x00" in idempotency_key:  # the store keeps another namespace's keys as "namespace NUL key"
            raise ValidationError("Idempotency-Key must not hold a NUL character", "Idempotency-Key")
        out["idempotency_key"] = idempotency_key
    _apply_rules(out, given, policy, limits, now_ms, carried)
    return spec_type(**out)


def resolve_creates(
    reqs: list[Any],
    policy: CallbackPolicy = DEFAULT_POLICY,
    limits: Limits = DEFAULT_LIMITS,
    now_ms: int = 0,
    *,
    spec_type: type[TaskSpec] = TaskSpec,
) -> list[TaskSpec | ValidationError]:
    """:func:`resolve_create` of each decoded request of one batch: its spec, or the
    :class:`ValidationError` it raised (any other error propagates, as from a loop over them).

    Items of a batch usually differ only in ``payload`` and ``idempotency_key``, which no rule
    between fields reads: the rest is resolved once per distinct shape and each item is that spec
    with its own payload (compacted and bounded as :func:`resolve_create` does) and key. An item
    whose shape fails is resolved on its own, so its error is exactly :func:`resolve_create`'s.
    """
    memo: dict[Any, TaskSpec | None] = {}
    replace, unset, fmt = msgspec.structs.replace, msgspec.UNSET, msgspec.json.format
    max_payload = limits.max_payload_bytes
    out: list[TaskSpec | ValidationError] = []
    for req in reqs:
        shape = replace(req, payload=unset, idempotency_key=None)
        try:
            tmpl = memo.get(shape, unset)
        except TypeError:  # a field of an unhashable type (a spec_type of tests): resolve on its own
            tmpl = None
        if tmpl is unset:
            try:
                tmpl = resolve_create(shape, policy, limits, now_ms, spec_type=spec_type)
            except Exception:
                tmpl = None
            memo[shape] = tmpl
        raw = req.payload
        body = b"null" if raw is unset else fmt(raw, indent=-1)
        if tmpl is None or len(body) > max_payload or not body.isascii():
            try:
                out.append(resolve_create(req, policy, limits, now_ms, spec_type=spec_type))
            except ValidationError as exc:
                out.append(exc)
            continue
        out.append(replace(tmpl, payload_json=body, idempotency_key=req.idempotency_key))
    return out


_FIXED_KEYS = ("type", "idempotency_key", "namespace")
_PATCH_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])


def decode_update(
    body: bytes,
    current: TaskSpec,
    policy: CallbackPolicy = DEFAULT_POLICY,
    limits: Limits = DEFAULT_LIMITS,
    now_ms: int = 0,
) -> TaskSpec:
    """The definition a PATCH body (a JSON merge patch: RFC 7396, top-level fields only) makes of
    ``current``, validated exactly as a create (docs/api.md#update-a-task).

    A field given replaces the stored one, ``null`` resets it to its default, a field left out is
    kept. Giving one of ``interval_ms``, ``run_at``, ``cron_expr`` replaces the schedule: the other
    two are dropped unless also given. ``type`` and ``idempotency_key`` cannot change."""
    try:
        patch = _PATCH_DECODER.decode(body)
    except msgspec.ValidationError:
        raise ValidationError("the body must be a JSON object (a merge patch of the task)", "body") from None
    except msgspec.DecodeError as e:
        raise request_error(e, limits, type(current)) from None
    spec_type = type(current)
    fields = spec_fields(spec_type)
    names = {f.encode_name for f in fields}
    for k in patch:
        if k not in names:
            raise ValidationError(f"unknown field {k[:64]!a}", k[:64] if not _bad_text(k) else None)
    for name in _FIXED_KEYS:
        if name in patch and bytes(patch[name]) != msgspec.json.encode(getattr(current, name)):
            raise ValidationError(f"{name} cannot be changed; create a new task", name)
    base: dict[str, msgspec.Raw] = {}
    defaults, by_rule = spec_defaults(limits, spec_type), rule_defaulted(spec_type)
    for f in fields:
        v = getattr(current, f.name)
        if v is not None and (f.name in by_rule or f.name not in defaults or v != defaults[f.name]):
            base[f.encode_name] = msgspec.Raw(v if f.encode_name == "payload" else msgspec.json.encode(v))
    # retry.max_retries is the top-level max_retries: a patch of one of them sets both
    if "retry" in base:
        if "retry" in patch:
            base.pop("max_retries", None)
        else:
            kept = msgspec.json.decode(bytes(base["retry"]))
            kept.pop("max_retries", None)
            base["retry"] = msgspec.Raw(msgspec.json.encode(kept))
    elif "retry" in patch:
        base.pop("max_retries", None)
    if any(k in patch and bytes(patch[k]) != b"null" for k in SCHEDULE_FIELDS):
        for k in SCHEDULE_FIELDS:
            base.pop(k, None)
    for k, raw in patch.items():
        if bytes(raw).strip() == b"null":
            base.pop(k, None)
        else:
            base[k] = raw
    carried = frozenset(k for k in base if k not in patch)
    spec = decode_create(
        msgspec.json.encode(base), policy, limits, now_ms, spec_type=type(current), carried=carried
    )
    for name in _FIXED_KEYS:
        if getattr(spec, name) != getattr(current, name):
            raise ValidationError(f"{name} cannot be changed; create a new task", name)
    return spec


def _apply_rules(
    out: dict[str, Any], given: dict[str, Any], policy: CallbackPolicy, limits: Limits, now_ms: int,
    carried: frozenset[str] = frozenset(),
) -> None:
    """The rules between fields (docs/architecture.md#task-rules), on the resolved values ``out``
    (by attribute name); ``given`` holds what the request said (by JSON name, None when absent)."""
    ttype = out["type"]
    max_delay = limits.max_delay_ms
    iv, at, cron_expr = given["interval_ms"], given["run_at"], given["cron_expr"]
    a, b = SCHEDULES[ttype]
    other = next(k for k in SCHEDULE_FIELDS if k not in (a, b))
    if given[other] is not None:
        owner = next(t for t, fields in SCHEDULES.items() if other in fields)
        raise ValidationError(f"{other} is only for {owner} tasks", other)
    if given[a] is not None and given[b] is not None:
        raise ValidationError(f"give {a} or {b}, not both", b)
    if given[a] is None and given[b] is None:
        raise ValidationError(f"{ttype} tasks need {a} or {b}", a)
    if ttype is TaskType.DELAYED:
        if at is not None and at > now_ms + max_delay and "run_at" not in carried:
            raise ValidationError(f"run_at must be in 0..{now_ms + max_delay}, got {at}", "run_at")
    elif iv is not None and iv < limits.min_period_ms:
        raise ValidationError(f"interval_ms must be in {limits.min_period_ms}..{max_delay}, got {iv}", "interval_ms")

    # the catch-up fields have defaults a client may send for any task (generated clients do): only
    # another value is refused on a delayed task
    bounds = [k for k, allowed in PERIODIC_ONLY.items() if given[k] is not None and given[k] != allowed]
    if ttype is TaskType.DELAYED and bounds:
        raise ValidationError(f"{bounds[0]} is only for periodic tasks", bounds[0])
    start_at, end_at = given["start_at"], given["end_at"]
    if end_at is not None and end_at <= max(0 if "end_at" in carried else now_ms, start_at or 0):
        raise ValidationError("end_at must be after now and after start_at", "end_at")

    timezone = out["timezone"]
    if given["timezone"] is not None or cron_expr is not None:
        try:
            cron.validate_timezone(timezone)
        except ValueError as e:
            raise ValidationError(str(e) or f"unknown timezone {timezone!r}", "timezone") from None
    if cron_expr is not None:
        try:
            cron.validate_cron(cron_expr, timezone)
        except ValueError as e:
            fld = getattr(e, "field", "cron_expr") or "cron_expr"
            err = ValidationError(str(e) or "invalid cron expression", fld)
            err.reason = getattr(e, "reason", None)
            raise err from None

    check_url(out["callback_url"], "callback_url", policy, limits)
    if given["ack_url"] is not None:
        check_url(given["ack_url"], "ack_url", policy, limits)
        if ttype is TaskType.PERIODIC:
            out["ack_url"] = None  # docs/architecture.md#task-rules: periodic tasks ignore ack_url
        elif out["reliability"] is not ACK_RELIABILITY:
            raise ValidationError(f"ack_url needs reliability {ACK_RELIABILITY}", "ack_url")

    _resolve_retry(out, given, limits)
    if given.get("notify_url") is not None:
        check_url(given["notify_url"], "notify_url", policy, limits)
    elif limits.default_notify_url and "notify_url" in out:
        out["notify_url"] = limits.default_notify_url

    tp = given.get("traceparent")
    if tp is not None and not tracing.is_valid(tp):
        raise ValidationError("traceparent has an all-zero trace id or parent id (W3C Trace Context)", "traceparent")

    raw = given["payload"]
    body = b"null" if raw is None else msgspec.json.format(bytes(raw), indent=-1)
    _check_utf8(body)
    if len(body) > limits.max_payload_bytes:
        raise PayloadTooLargeError(
            f"payload is {len(body)} bytes encoded, more than {limits.max_payload_bytes}", "payload"
        )
    out["payload_json"] = body

    if ttype is TaskType.PERIODIC:
        if given["max_fails"] is None:
            if iv is not None:
                out["max_fails"] = auto_max_fails(iv)
            else:
                first = cron.next_cron_fire(cron_expr, timezone, now_ms)
                second = cron.next_cron_fire(cron_expr, timezone, first)
                out["max_fails"] = auto_max_fails(second - first)
    elif given["max_fails"] is None:
        out["max_fails"] = 1


def _resolve_retry(out: dict[str, Any], given: dict[str, Any], limits: Limits) -> None:
    """``retry`` from the request's fields over the node default; ``max_retries`` (top level) is an
    alias of ``retry.max_retries``: both given and different is an error. Stored as None when the
    policy is the seed's (docs/architecture.md#retry-policy)."""
    r, top = given.get("retry"), given["max_retries"]
    vals = {} if r is None else {k: v for k in r.__struct_fields__ if (v := getattr(r, k)) is not None}
    if top is not None and vals.get("max_retries", top) != top:
        raise ValidationError(
            f"max_retries ({top}) and retry.max_retries ({vals['max_retries']}) disagree; give one", "max_retries"
        )
    mr = vals.pop("max_retries", top if top is not None else limits.default_max_retries)
    for code in vals.get("non_retryable_statuses", ()):
        if not 300 <= code <= 599:
            raise ValidationError(
                f"retry.non_retryable_statuses must hold statuses in 300..599, got {code}",
                "retry.non_retryable_statuses",
            )
    policy = msgspec.structs.replace(limits.default_retry, max_retries=mr, **vals)
    if "non_retryable_statuses" in vals:
        policy = msgspec.structs.replace(policy, non_retryable_statuses=tuple(sorted(set(vals["non_retryable_statuses"]))))
    out["max_retries"] = mr
    out["retry"] = None if policy == RetryPolicy(max_retries=mr) else policy


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_POLICY",
    "TERMINAL_STATUSES",
    "CatchUp",
    "Overlap",
    "CallbackPolicy",
    "FailureKind",
    "RetryPolicy",
    "Execution",
    "ExecutionResult",
    "FireKind",
    "IllegalTransitionError",
    "Limits",
    "MolensError",
    "NotFoundError",
    "Outcome",
    "PayloadTooLargeError",
    "PreconditionFailed",
    "QuotaExceeded",
    "Reliability",
    "Status",
    "Task",
    "TaskIds",
    "TaskSpec",
    "TaskType",
    "ValidationError",
    "address_denial",
    "auto_max_fails",
    "MAX_EPOCH_MS",
    "check_epoch_ms",
    "check_url",
    "decode_create",
    "decode_update",
    "resolve_create",
    "resolve_creates",
    "encode_payload",
    "is_task_id",
    "task_ids_from_bytes",
    "task_ids_from_digits",
    "new_task_id",
    "task_id_ms",
    "task_id_random",
    "tasks_json",
    "validate_create",
]
