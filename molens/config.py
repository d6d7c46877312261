"""Node configuration: YAML -> frozen dataclasses, with defaults, validation and env overrides.

Every option lives here and is documented in ``conf/node.yaml``. Loading refuses unknown keys and
bad values with the key path and the reason (``config error: raft.tick_ms: must be an integer in 1..10000``),
so a typo stops the node at start instead of being silently ignored.

Environment overrides: ``MOLENS_<SECTION>__<KEY>=value`` (nested keys joined by ``__``; the keys case
insensitive, the ``MOLENS_`` prefix upper case), e.g. ``MOLENS_HTTP__PORT=18090`` or ``MOLENS_RAFT__CURVE__ENABLED=true``. A string
option takes the value as written; any other is parsed as a YAML scalar/flow value (so ``[a, b]`` is
a list) and validated like the file.

Addresses are ``host:port``; ZeroMQ endpoints are derived with :func:`zmq_endpoint`.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import ipaddress
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from molens import cpus
from molens.errors import MolensError
from molens.fsm.machine import DEFAULT_CONFIG as MACHINE_DEFAULTS
from molens.model import DEFAULT_LIMITS, DEFAULT_POLICY, CallbackPolicy, check_url
from molens.schema import Backoff, RetryJitter, RetryPolicy
from molens.signing import SCOPES

ENV_PREFIX = "MOLENS_"

Check = Callable[[Any], str | None]


class ConfigError(MolensError, ValueError):
    """A config file or override is invalid; ``str()`` is the one-line message for the operator."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"config error: {path}: {reason}" if path else f"config error: {reason}")


# --- checks used in field metadata -------------------------------------------------------------


def _int_min(lo: int) -> Check:
    def check(v: Any) -> str | None:
        return None if v >= lo else f"must be an integer >= {lo}"

    return check


def _int_range(lo: int, hi: int) -> Check:
    def check(v: Any) -> str | None:
        return None if lo <= v <= hi else f"must be an integer in {lo}..{hi}"

    return check


def _nonempty(v: Any) -> str | None:
    return None if v else "must not be empty"


_NODE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _node_id(v: Any) -> str | None:
    return None if _NODE_ID.fullmatch(v) else "must match [A-Za-z0-9_.-]{1,64}"


def parse_addr(addr: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` allowed); raises ValueError with a reason."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host:
        raise ValueError("must be host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("port must be an integer in 1..65535")
    return host, int(port)


def _addr(v: Any) -> str | None:
    try:
        parse_addr(v)
    except ValueError as exc:
        return f"{exc} (got {v!r})"
    return None


def peer_problem(fields: dict[str, str]) -> str | None:
    """The first thing wrong with a peer's fields as a request gives them (``id``, ``raft_addr``,
    and the optional ``rpc_addr``, ``http_addr``, ``admin_addr``, ``peer_http_addr``), as ``"key: reason"``; None when
    they are fine. The format rules of ``cluster.peers`` entries, for ``molens-node add-node`` (where only
    ``raft_addr`` of the addresses is required)."""
    for key in ("id", *PEER_ADDRESSES):
        v = fields.get(key, "")
        if not v and key in ("id", "raft_addr"):
            return f"{key}: is required"
        err = (_node_id(v) if key == "id" else _addr(v)) if v else None
        if err:
            return f"{key}: {err}"
    return None


def _addr_list(v: Any) -> str | None:
    for a in v:
        err = _addr(a)
        if err:
            return err
    return None


def _cidrs(v: Any) -> str | None:
    for c in v:
        try:
            ipaddress.ip_network(c, strict=False)
        except ValueError:
            return f"not a CIDR: {c!r}"
    return None


def authority(addr: str) -> str:
    """``host:port`` as a URL writes it: an IPv6 host in brackets (``::1:18091`` -> ``[::1]:18091``)."""
    host, port = parse_addr(addr)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def zmq_endpoint(addr: str) -> str:
    """``127.0.0.1:18091`` -> ``tcp://127.0.0.1:18091``."""
    return f"tcp://{authority(addr)}"


def _opt(
    default: Any,
    check: Check | None = None,
    *,
    factory: Callable[[], Any] | None = None,
    required: bool = False,
) -> Any:
    meta: dict[str, Any] = {"check": check} if check else {}
    if required:
        meta["required"] = True
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# --- sections ---------------------------------------------------------------------------------


class LogLevel(enum.StrEnum):
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


def _cpu_list(v: Any) -> str | None:
    return cpus.check_spec(v)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    id: str = _opt("n1", _node_id)
    data_dir: str = _opt("./data", _nonempty)
    cpus: str = _opt(cpus.AUTO, _cpu_list)
    """CPUs the node's process runs on: ``auto`` (one of those it is given, :func:`molens.cpus.choose`),
    ``all`` (or empty: every CPU it is given) or a list as ``taskset -c`` writes them (``0``, ``2-3``)
    (docs/deploy.md#cpu-pinning)."""
    os_scheduling: str = _opt("http-batch",
                              lambda v: None if v in cpus.POLICIES else f"must be one of {', '.join(cpus.POLICIES)}")
    """The kernel's scheduling policy for the node's threads: ``http-batch``, ``batch`` or ``normal``
    (molens/cpus.py, docs/deploy.md#os-scheduling)."""
    stop_timeout_s: float = _opt(30.0, lambda v: None if v > 0 else "must be > 0")
    state_machine: str = _opt("tasks", lambda v: None if v in ("tasks", "kv") else "must be tasks or kv")
    clock_offset_ms: int = _opt(0, _int_range(-86_400_000, 86_400_000))
    """Tests only: shift this node's wall clock (``molens.wallclock``) by this much."""
    fault_injection: bool = False
    """Tests only: the admin socket's ``fault`` command may shift the clock and slow the disk at run time."""


@dataclass(frozen=True, slots=True)
class PeerConfig:
    id: str = _opt("", _node_id, required=True)
    raft_addr: str = _opt("", _addr, required=True)
    rpc_addr: str = _opt("", _addr, required=True)
    http_addr: str = _opt("", _addr, required=True)
    admin_addr: str = _opt("", lambda v: None if v == "" else _addr(v))
    peer_http_addr: str = _opt("", lambda v: None if v == "" else _addr(v))
    """Where the other members reach this node's HTTP API (cluster stats), when that is not
    ``http_addr``, the address clients use (a follower's ``307`` names it): in a compose network, the
    container's name where ``http_addr`` is the port published on the host."""


PEER_ADDRESSES = ("raft_addr", "rpc_addr", "http_addr", "admin_addr", "peer_http_addr")
"""A peer's addresses, in the order a request or a config entry gives them."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    peers: tuple[PeerConfig, ...] = _opt((), factory=tuple)
    join_addrs: tuple[str, ...] = _opt((), _addr_list, factory=tuple)


@dataclass(frozen=True, slots=True)
class CurveConfig:
    enabled: bool = False
    secret_key_file: str = ""
    public_keys_dir: str = ""


@dataclass(frozen=True, slots=True)
class RaftSettings:
    bind_addr: str = _opt("127.0.0.1:18091", _addr)
    tick_ms: int = _opt(50, _int_range(1, 10_000))
    election_ticks: int = _opt(8, _int_min(2))
    heartbeat_ticks: int = _opt(1, _int_min(1))
    max_inflight: int = _opt(256, _int_min(1))
    max_batch_bytes: int = _opt(256 * 1024, _int_min(1024))
    max_proposal_batch: int = _opt(1024, _int_min(1))
    max_pending_proposals: int = _opt(100_000, _int_min(1))
    apply_batch_entries: int = _opt(4096, _int_min(1))
    max_apply_bytes: int = _opt(256 * 1024, _int_min(1024))
    send_queue_max: int = _opt(10_000, _int_min(1))
    snapshot_every_entries: int = _opt(100_000, _int_min(1))
    keep_log_tail: int = _opt(10_000, _int_min(0))
    keep_snapshots: int = _opt(2, _int_min(1))
    max_clock_skew_ms: int = _opt(500, _int_min(1))
    curve: CurveConfig = field(default_factory=CurveConfig)


@dataclass(frozen=True, slots=True)
class RpcConfig:
    bind_addr: str = _opt("127.0.0.1:18101", _addr)


@dataclass(frozen=True, slots=True)
class HttpConfig:
    host: str = _opt("127.0.0.1", _nonempty)
    port: int = _opt(18081, _int_range(1, 65535))
    auth_token: str = field(default="", repr=False)  # a secret: never in a repr, so never in a log line
    auth_token_file: str = ""
    max_body_bytes: int = _opt(8 << 20, _int_min(1024))
    max_json_depth: int = _opt(64, _int_range(8, 512))
    head_timeout_ms: int = _opt(10_000, _int_range(100, 600_000))
    body_idle_timeout_ms: int = _opt(10_000, _int_range(100, 600_000))
    send_idle_timeout_ms: int = _opt(30_000, _int_range(1_000, 3_600_000))
    keepalive_timeout_ms: int = _opt(60_000, _int_range(1_000, 3_600_000))
    max_connections: int = _opt(1_000, _int_range(1, 100_000))
    max_connections_per_client: int = _opt(200, _int_range(1, 100_000))
    max_header_count: int = _opt(100, _int_range(8, 10_000))
    max_head_bytes: int = _opt(65_536, _int_range(1_024, 1 << 20))
    max_request_line_bytes: int = _opt(32_768, _int_range(256, 1 << 20))

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class AdminConfig:
    bind_addr: str = _opt("127.0.0.1:18111", _addr)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    concurrency: int = _opt(32, _int_range(1, 10_000))
    engine: str = _opt("loop", lambda v: None if v in ("loop", "threads") else "must be loop or threads")
    loop_tick_ms: int = _opt(2, _int_range(0, 50))
    signing_secret: str = field(default="", repr=False)  # secrets: never in a repr
    signing_secret_next: str = field(default="", repr=False)
    signing_scope: str = _opt("both", lambda v: None if v in SCOPES else "must be cluster, both or namespace")
    max_retry_after_ms: int = _opt(3_600_000, _int_range(0, 86_400_000))


@dataclass(frozen=True, slots=True)
class CallbackPolicyConfig:
    allow_hosts: tuple[str, ...] = _opt((), factory=tuple)
    deny_hosts: tuple[str, ...] = _opt((), factory=tuple)
    allow_cidrs: tuple[str, ...] = _opt((), _cidrs, factory=tuple)
    deny_cidrs: tuple[str, ...] = _opt((), _cidrs, factory=tuple)


def _statuses(v: Any) -> str | None:
    bad = [c for c in v if not 300 <= c <= 599]
    return f"statuses must be in 300..599, got {bad[0]}" if bad else None


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """The node's default retry policy (``max_retries`` is ``scheduler.default_max_retries``)."""

    backoff: Backoff = Backoff.EXPONENTIAL
    initial_ms: int = _opt(1_000, _int_range(0, 86_400_000))
    factor: int = _opt(2, _int_range(1, 10))
    max_ms: int = _opt(3_600_000, _int_range(0, 86_400_000))
    jitter: RetryJitter = RetryJitter.NONE
    non_retryable_statuses: tuple[int, ...] = _opt((), _statuses, factory=tuple)
    max_throttle_ms: int = _opt(3_600_000, _int_range(0, 604_800_000))

    def policy(self, max_retries: int) -> RetryPolicy:
        return RetryPolicy(
            max_retries=max_retries, backoff=self.backoff, initial_ms=self.initial_ms, factor=self.factor,
            max_ms=self.max_ms, jitter=self.jitter, non_retryable_statuses=tuple(sorted(set(self.non_retryable_statuses))),
            max_throttle_ms=self.max_throttle_ms,
        )


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    tick_ms: int = _opt(10, _int_range(1, 1000))
    dispatch_timeout_ms: int = _opt(10_000, _int_min(100))
    worker_lost_ms: int = _opt(2_000, _int_min(600))
    dispatch_lead_ms: int = _opt(100, _int_range(0, MACHINE_DEFAULTS.max_dispatch_lead_ms))
    wheel_horizon_ms: int = _opt(600_000, _int_min(1_000))
    default_max_retries: int = _opt(3, _int_range(0, 20))
    ack_ttl: int = _opt(3, _int_range(0, 20))
    max_payload_bytes: int = _opt(65536, _int_min(0))
    task_retention_minutes: int = _opt(1440, _int_min(1))
    expire_rate_limit_qps: int = _opt(100, _int_min(1))
    history_max_records_per_task: int = _opt(200, _int_min(1))
    max_inflight_fires: int = _opt(10_000, _int_min(1))
    dead_letter_retention_minutes: int = _opt(10_080, _int_min(1))
    callback_policy: CallbackPolicyConfig = field(default_factory=CallbackPolicyConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)


@dataclass(frozen=True, slots=True)
class NotificationsConfig:
    """Failure notifications (docs/architecture.md#notifications)."""

    url: str = ""
    """The notification target of a task that gives no ``notify_url`` ("" = none); checked by the
    callback host policy like a callback URL."""
    batch_max: int = _opt(100, _int_range(1, 1000))
    timeout_ms: int = _opt(5_000, _int_range(100, 60_000))
    retention_minutes: int = _opt(1_440, _int_min(1))
    """A notification its target has not acknowledged for this long is dropped (logged, counted)."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """Retention of the audit trail (docs/architecture.md#audit-trail), enforced by the leader's Cleaner."""

    max_entries: int = _opt(1_000_000, _int_min(1))
    """At most this many entries are kept (the oldest go first)."""
    max_age_minutes: int = _opt(129_600, _int_min(1))
    """Entries older than this are deleted (default 90 days)."""
    trim_batch: int = _opt(10_000, _int_range(1, 1_000_000))
    """About this many entries deleted per trim (whole log entries: a trim may pass it); at most one
    trim a second."""


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """Span export (docs/observability.md#traces); the ``traceparent`` headers go out without it."""

    otlp_endpoint: str = _opt("", lambda v: None if v == "" or (isinstance(v, str) and v.startswith(
        ("http://", "https://"))) else "must be an http(s) URL, e.g. http://127.0.0.1:4318/v1/traces")
    """OTLP/HTTP traces URL (e.g. ``http://127.0.0.1:4318/v1/traces``) the spans of traced tasks are
    exported to ("" = none); needs the ``otel`` extra."""


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: LogLevel = LogLevel.INFO


@dataclass(frozen=True, slots=True)
class Config:
    node: NodeConfig = field(default_factory=NodeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    raft: RaftSettings = field(default_factory=RaftSettings)
    rpc: RpcConfig = field(default_factory=RpcConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    notifications: NotificationsConfig = field(default_factory=NotificationsConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    source: str = field(default="", compare=False)
    """The file this was loaded from ("" when built in code); not a config key."""

    # --- derived views ---------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return Path(self.node.data_dir)

    def self_peer(self) -> PeerConfig:
        """This node's addresses as others should dial them."""
        for p in self.cluster.peers:
            if p.id == self.node.id:
                return p
        return PeerConfig(
            id=self.node.id,
            raft_addr=self.raft.bind_addr,
            rpc_addr=self.rpc.bind_addr,
            http_addr=self.http.addr,
            admin_addr=self.admin.bind_addr,
        )

    def initial_peers(self) -> tuple[PeerConfig, ...]:
        """Peers known from the file: the listed ones, or only this node for a single-node setup."""
        if self.cluster.peers:
            if any(p.id == self.node.id for p in self.cluster.peers):
                return self.cluster.peers
            return (*self.cluster.peers, self.self_peer())
        return (self.self_peer(),)

    def bootstrap_voters(self) -> tuple[str, ...]:
        """Voters of a brand-new cluster; empty for a node that joins an existing one."""
        if self.cluster.join_addrs:
            return ()
        return tuple(p.id for p in self.initial_peers())


# --- loading ----------------------------------------------------------------------------------

_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS_CACHE.get(cls)
    if h is None:
        h = typing.get_type_hints(cls)
        _HINTS_CACHE[cls] = h
    return h


def _convert(tp: Any, value: Any, path: str) -> Any:
    """Convert a YAML value to ``tp`` or raise ConfigError naming ``path``."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(path, "must be a mapping")
        return _build(tp, value, path)
    if origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if value is None:
            return ()
        if isinstance(value, str) and item_tp is str:
            value = [s for s in (x.strip() for x in value.split(",")) if s]
        if not isinstance(value, list | tuple):
            raise ConfigError(path, "must be a list")
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        raise TypeError(f"unsupported config type at {path}: {tp}")  # pragma: no cover
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(str(value).upper() if issubclass(tp, LogLevel) else value)
        except ValueError:
            return _fail(path, "must be one of " + ", ".join(str(m.value) for m in tp))
    if tp is bool:
        if isinstance(value, bool):
            return value
        return _fail(path, "must be true or false")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return _fail(path, "must be an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return _fail(path, "must be a number")
        return float(value)
    if tp is str:
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return _fail(path, "must be a string")
        return str(value)
    raise TypeError(f"unsupported config type at {path}: {tp}")  # pragma: no cover


def _fail(path: str, reason: str) -> Any:
    raise ConfigError(path, reason)


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    for key in data:
        if key not in fields:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(where, "unknown key (allowed: " + ", ".join(fields) + ")")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        path = f"{prefix}.{name}" if prefix else name
        if name in data:
            value = _convert(hints[name], data[name], path)
        elif f.metadata.get("required"):
            raise ConfigError(path, "is required")
        elif dataclasses.is_dataclass(hints[name]):
            value = _convert(hints[name], {}, path)
        else:
            continue
        check = f.metadata.get("check")
        if check is not None:
            err = check(value)
            if err:
                # a bad int gets the type-aware message (e.g. "must be an integer >= 100")
                raise ConfigError(path, err)
        kwargs[name] = value
    return cls(**kwargs)


def _env_overrides(env: Mapping[str, str]) -> list[tuple[list[str], Any, str]]:
    """The ``MOLENS_*`` overrides as (key path, value, variable). A string option takes the value as
    written, but for whitespace around it (a token ``0123`` or ``s3cret #2`` stays that: YAML would
    read 83 and ``s3cret``); any
    other is parsed as YAML (``18090``, ``true``, ``[a, b]``) and validated as the file's values are."""
    out = []
    for key, raw in env.items():
        if not key.startswith(ENV_PREFIX) or "__" not in key[len(ENV_PREFIX) :]:
            continue
        parts = [p.lower() for p in key[len(ENV_PREFIX) :].split("__")]
        if _option_type(parts) is str:
            value: Any = raw.strip()
        else:
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                value = raw
        out.append((parts, value, key))
    return sorted(out, key=lambda t: t[2])


def _option_type(parts: list[str]) -> Any:
    """The declared type of the option at key path ``parts`` (None: no such option)."""
    tp: Any = Config
    for part in parts:
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            return None
        hints = _hints(tp)
        if part not in hints or part == "source":
            return None
        tp = hints[part]
    return tp


def _apply_override(data: dict[str, Any], parts: list[str], value: Any, env_key: str) -> None:
    node: dict[str, Any] = data
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = {}
            node[part] = nxt
        if not isinstance(nxt, dict):
            raise ConfigError(
                ".".join(parts[: i + 1]), f"cannot override inside a non-mapping (from {env_key})"
            )
        node = nxt
    node[parts[-1]] = value


def _otel_installed() -> bool:
    """The ``otel`` extra is there (looked up, not imported)."""
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ImportError:  # a parent package missing
        return False


def _cross_checks(cfg: Config) -> None:
    ids = [p.id for p in cfg.cluster.peers]
    for i, pid in enumerate(ids):
        if pid in ids[:i]:
            raise ConfigError(f"cluster.peers[{i}].id", f"duplicate peer id {pid!r}")
    if cfg.cluster.peers and not cfg.cluster.join_addrs and cfg.node.id not in ids:
        raise ConfigError(
            "node.id", f"{cfg.node.id!r} is not in cluster.peers (and cluster.join_addrs is empty)"
        )
    if cfg.raft.heartbeat_ticks >= cfg.raft.election_ticks:
        raise ConfigError("raft.heartbeat_ticks", "must be smaller than raft.election_ticks")
    if cfg.worker.signing_secret_next and not cfg.worker.signing_secret:
        # a rotation goes from a secret to the next one: alone, the next one would sign every request
        # while the node's signing-key command (and the docs) say it signs none
        raise ConfigError("worker.signing_secret_next", "is set without worker.signing_secret (a rotation "
                                                        "needs the secret it rotates from)")
    if cfg.raft.curve.enabled:
        for name in ("secret_key_file", "public_keys_dir"):
            if not getattr(cfg.raft.curve, name):
                raise ConfigError(f"raft.curve.{name}", "is required when raft.curve.enabled is true")
    own = {
        "raft.bind_addr": cfg.raft.bind_addr,
        "rpc.bind_addr": cfg.rpc.bind_addr,
        "admin.bind_addr": cfg.admin.bind_addr,
        "http": cfg.http.addr,
    }
    seen: dict[str, str] = {}
    for name, addr in own.items():
        if addr in seen:
            raise ConfigError(name, f"same address as {seen[addr]} ({addr})")
        seen[addr] = name
    if cfg.tracing.otlp_endpoint and not _otel_installed():
        raise ConfigError("tracing.otlp_endpoint", "needs OpenTelemetry's SDK and OTLP/HTTP exporter: "
                                                   "pip install 'molens[server,otel]'")
    if cfg.notifications.url:
        try:
            check_url(cfg.notifications.url, "notifications.url", callback_policy(cfg), DEFAULT_LIMITS)
        except MolensError as exc:
            raise ConfigError("notifications.url", str(exc)) from None


def load_dict(
    data: Mapping[str, Any] | None, env: Mapping[str, str] | None = None, source: str = ""
) -> Config:
    """Build a validated Config from parsed YAML plus ``MOLENS_*`` overrides from ``env``."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError("", "the file must hold a mapping of sections")
    merged: dict[str, Any] = _deep_copy(data)
    for parts, value, key in _env_overrides(env if env is not None else {}):
        _apply_override(merged, parts, value, key)
    cfg: Config = _build(Config, merged, "")
    cfg = dataclasses.replace(cfg, source=source)
    _cross_checks(cfg)
    return _with_token_file(cfg)


def _with_token_file(cfg: Config) -> Config:
    """``http.auth_token`` read from ``http.auth_token_file`` (a Docker/compose secret), whitespace
    around it stripped; the file must hold a token and the two keys exclude each other."""
    path = cfg.http.auth_token_file
    if not path:
        return cfg
    if cfg.http.auth_token:
        raise ConfigError("http.auth_token_file", "set either http.auth_token or http.auth_token_file, not both")
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("http.auth_token_file", f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise ConfigError("http.auth_token_file", f"{path} is empty")
    return dataclasses.replace(cfg, http=dataclasses.replace(cfg.http, auth_token=token))


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def load(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Load ``path``; ``env`` defaults to ``os.environ``. Relative ``node.data_dir`` stays relative
    to the current directory (as an operator typing the command expects)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read {p}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{p}: invalid YAML: {_yaml_problem(exc)}") from exc
    return load_dict(data, os.environ if env is None else env, source=str(p))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A parser's error on one line: where, what was expected and what was found (errors are one
    line on stderr, as every other config error)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = "; ".join(x for x in (exc.context, exc.problem) if x)
        return where + (what or type(exc).__name__)
    return " ".join(str(exc).split())


def callback_policy(cfg: Config) -> CallbackPolicy:
    """The node's callback host policy (``scheduler.callback_policy``), as the API validates with
    and the workers enforce at fire time. The built-in deny lists (cloud metadata) always apply;
    the config's deny lists add to them."""
    cp = cfg.scheduler.callback_policy
    return CallbackPolicy(
        allow_hosts=cp.allow_hosts,
        allow_cidrs=cp.allow_cidrs,
        deny_hosts=(*DEFAULT_POLICY.deny_hosts, *cp.deny_hosts),
        deny_cidrs=(*DEFAULT_POLICY.deny_cidrs, *cp.deny_cidrs),
    )
