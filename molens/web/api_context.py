"""What the REST app needs from the node: :class:`ApiContext` (the node implements it over RaftPeer).

The app (:func:`molens.web.app.make_app`) validates requests, builds FSM commands and renders
results; everything stateful is behind this protocol so the same app runs on a Raft node and on
:class:`molens.web.local_context.LocalContext` (a single-process stand-in used by tests, benchmarks
and ``python -m molens.web``).

Contract for implementers:

- :meth:`ApiContext.propose` blocks until every command has applied on this node and returns,
  per command, the FSM's per-item results (``machine.Created`` / ``Task`` / ``None`` /
  ``MolensError``) in order. It raises :class:`~molens.web.errors.LeaderElsewhere` (nothing applied,
  with the leader's HTTP base URL when known), :class:`~molens.web.errors.NoLeader` (nothing
  applied, no leader known), :class:`~molens.web.errors.OutcomeUnknown` (appended, then leadership
  lost), or :class:`~molens.web.errors.Unavailable` (refused / timed out / stopping). Commands of
  one call should be proposed together (one Raft batch) but each is its own log entry.
- Reads (:meth:`get_task`, :meth:`scan_tasks`, :meth:`task_counts`, :attr:`history`) come from the
  local replica and may lag the leader; the app marks every answer with ``X-Molens-Role``.
- :meth:`leader_info` is cheap (called on every write reaching a follower, and by ``/readyz``).
- Status/stats methods return JSON-ready dicts; the keys listed in the OpenAPI document
  (``ClusterStatus``, ``Stats``) are required, more keys are welcome.
- Every method is called from waitress worker threads concurrently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from molens.config import Config, authority, callback_policy
from molens.fsm.commands import Command, FlowSettings
from molens.fsm.history import History
from molens.fsm.search import TaskIndex
from molens.model import DEFAULT_LIMITS, DEFAULT_POLICY, CallbackPolicy, Limits, Task
from molens.schedule.flows import FlowState
from molens.schedule.wheel import levels_for
from molens.tracing import NO_SPANS, Spans
from molens.web.audit import AuditReader
from molens.web.body import DEFAULT_MAX_DEPTH
from molens.web.dead_letters import DeadLetterReader
from molens.web.fire_series import Span
from molens.web.heatmap import WheelDistribution
from molens.web.metrics import NodeMetrics


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """Static settings of the API on one node (from the node config)."""

    node_id: str = "n1"
    limits: Limits = DEFAULT_LIMITS
    policy: CallbackPolicy = DEFAULT_POLICY
    auth_token: str = ""
    """Bearer token required on /api/v1 (except test endpoints and openapi.json); "" = open."""
    max_body_bytes: int = 8 << 20
    max_json_depth: int = DEFAULT_MAX_DEPTH
    """Deepest nesting of arrays and objects in a JSON request body (:mod:`molens.web.body`)."""
    max_batch: int = 1_000
    wheel_levels: int = field(default_factory=levels_for)
    """Levels of the leader's time wheel (from ``scheduler.tick_ms``): the heatmap's ``level`` is below it."""
    propose_timeout_s: float = 10.0
    retry_after_s: int = 1
    """``Retry-After`` sent with 503 answers."""
    test_endpoint_delay_ms: int = 100
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    spans: Spans = field(default=NO_SPANS, hash=False, compare=False)
    """Where the spans of traced creates go (the node's, shared with its scheduler: ``molens.tracing``)."""


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads, as this node knows it. ``leader_url`` is the leader's HTTP base URL."""

    leader_id: str | None
    leader_url: str | None
    term: int
    role: str
    """This node's role: ``leader`` | ``follower`` | ``candidate`` | ``learner`` | ``joining`` | ..."""

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"

    def to_json(self) -> dict[str, Any]:
        """Its fields under their names, in order (``LeaderInfo`` in the OpenAPI document)."""
        return dataclasses.asdict(self)


def settings_from_config(cfg: Config) -> ApiSettings:
    """The API settings of a node: limits and callback host policy from ``scheduler``, token and
    body bound from ``http``. The built-in deny lists (cloud metadata) always apply; the config's
    deny lists add to them."""
    sc = cfg.scheduler
    policy = callback_policy(cfg)
    limits = dataclasses.replace(
        DEFAULT_LIMITS, max_payload_bytes=sc.max_payload_bytes, default_max_retries=sc.default_max_retries,
        default_retry=sc.retry.policy(sc.default_max_retries), default_notify_url=cfg.notifications.url,
    )
    return ApiSettings(
        node_id=cfg.node.id,
        limits=limits,
        policy=policy,
        auth_token=cfg.http.auth_token,
        max_body_bytes=cfg.http.max_body_bytes,
        max_json_depth=cfg.http.max_json_depth,
        wheel_levels=levels_for(cfg.scheduler.tick_ms),
    )


def http_url(http_addr: str) -> str | None:
    """``127.0.0.1:18082`` (a peer's ``http_addr``) -> ``http://127.0.0.1:18082``; None if empty."""
    return f"http://{authority(http_addr)}" if http_addr else None


def cluster_status_from_raft(status: dict[str, Any]) -> dict[str, Any]:
    """The ``ClusterStatus`` answer from ``RaftPeer.status()`` (its ``peers`` become ``nodes`` with
    an HTTP URL and a role each; ``leader_url`` is added). Unknown keys are kept."""
    leader = status.get("leader_id")
    nodes = []
    leader_url = None
    for p in status.get("peers", []):
        url = http_url(p.get("http_addr", ""))
        if p.get("id") == leader:
            role = "leader"
            leader_url = url
        else:
            role = "learner" if p.get("suffrage") == "learner" else "follower"
        nodes.append(
            {
                "id": p.get("id"),
                "role": role,
                "suffrage": p.get("suffrage", "voter"),
                "http_url": url,
                "match_index": p.get("match"),
                **{k: v for k, v in p.items() if k not in ("id", "suffrage", "match")},
            }
        )
    nodes.sort(key=lambda n: (n["role"] != "leader", str(n["id"])))
    out = {k: v for k, v in status.items() if k != "peers"}
    out.update(nodes=nodes, leader_url=leader_url)
    return out


class ApiContext(Protocol):
    """Everything the REST app needs from a node (see the module docstring for the contract)."""

    @property
    def settings(self) -> ApiSettings: ...

    @property
    def history(self) -> History: ...

    def leader_info(self) -> LeaderInfo: ...

    def propose(self, commands: Sequence[Command], timeout_s: float) -> list[list[Any]]: ...

    def get_task(self, task_id: str) -> Task | None: ...

    @property
    def dead_letters(self) -> DeadLetterReader:
        """The local replica's dead letters."""
        ...

    @property
    def audit(self) -> AuditReader:
        """The local replica's audit trail."""
        ...

    def scan_tasks(self, after: str = "") -> Iterator[Task]:
        """Tasks in id (= creation) order strictly after task id ``after``, streaming."""
        ...

    def scan_tasks_before(self, before: str = "") -> Iterator[Task]:
        """Tasks newest first, strictly before task id ``before`` ("" = from the newest), streaming."""
        ...

    def scan_tasks_where(
        self, statuses: Sequence[str], scene: str | None, after: str = "", reverse: bool = False,
        namespaces: Iterable[str] | None = None,
    ) -> Iterator[Task]:
        """Tasks of any of ``statuses`` (or, with none, of ``scene``) in id order (newest first with
        ``reverse``) strictly after (before) ``after``, from the store's secondary indexes; of
        ``namespaces`` only unless None (then a filter is optional), from the namespace index."""
        ...

    def task_search(self) -> TaskIndex:
        """The text-search index over this node's tasks (``GET /api/v1/tasks?q=``)."""
        ...

    def scan_due(
        self, after: tuple[int, str] | None = None, namespaces: Iterable[str] | None = None,
    ) -> Iterator[tuple[int, str]]:
        """``(due_ms, task_id)`` of every scheduled task (of ``namespaces`` only unless None),
        soonest first, strictly after ``after``."""
        ...

    def task_counts(self) -> dict[str, int]:
        """Tasks per status, every status present."""
        ...

    def cluster_status(self) -> dict[str, Any]: ...

    def cluster_stats(self) -> dict[str, Any]:
        """``{"nodes": [...]}``: every member's ``/api/v1/stats?local=1`` answer (this node's without
        a request), leader first; an unreachable member is ``{"node_id", "error"}``."""
        ...

    def stats(self) -> dict[str, Any]:
        """This node's ``Stats`` (OpenAPI): ``node_id``, ``role``, ``term``, ``leader_id``, the task
        counts (``tasks``, ``tasks_total``), ``time_ms`` and the rest of what it measures."""
        ...

    def fire_series(self, span: Span, local: bool = False) -> dict[str, Any]:
        """Fires, failures, retries and lateness per bucket over ``span``
        (:mod:`molens.web.fire_series`): the cluster's (every member's ``/api/v1/stats/series?local=1``
        summed, with ``nodes`` counted and ``missing`` ones), or with ``local`` this node's alone."""
        ...

    def node_stats(self, node_id: str) -> dict[str, Any]:
        """Another member's local stats (its ``/api/v1/stats?local=1``). Raises
        :class:`~molens.model.NotFoundError` (field ``node_id``) for a node not in the cluster and
        :class:`~molens.web.errors.Unavailable` when it does not answer."""
        ...

    def transfer_leader(self, to: str | None) -> dict[str, Any]:
        """Hand leadership to voter ``to`` (None: the best caught-up one) and wait until this node
        stepped down; ``{"to": id, ...}``. Raises :class:`~molens.web.errors.LeaderElsewhere` /
        :class:`~molens.web.errors.NoLeader` off the leader and
        :class:`~molens.web.errors.Unavailable` when no transfer happened."""
        ...

    def scan_flows(self) -> list[tuple[str, FlowSettings]]:
        """Every flow with settings in this node's replica, by key."""
        ...

    def get_flow(self, key: str) -> FlowSettings | None:
        """Flow ``key``'s settings in this node's replica."""
        ...

    def get_meta(self, key: str) -> bytes | None:
        """A replicated meta record of this node's replica (namespaces and API keys:
        :mod:`molens.fsm.tenancy`)."""
        ...

    def scan_meta(self, prefix: str) -> list[tuple[str, bytes]]:
        """Every meta record of this node's replica whose key starts with ``prefix``, by key."""
        ...

    def flow_states(self) -> list[FlowState] | None:
        """The leader's live view of its flows (docs/architecture.md#flow-control); None on a node
        that does not lead (or whose Dispatcher is too busy to answer)."""
        return None

    def replicas_read(self, version: int) -> bool:
        """Whether every replica applies the entry fields of fire batch version ``version``
        (``molens.delivery``: ``KEYS_FIRST_VERSION``, ``LAST_FIRE_VERSION``, ``RESUME_VERSION``,
        ``RESUME_TRIGGER_VERSION``): the API proposes them as the release before applied them until
        then (docs/deploy.md#rolling-upgrade)."""
        ...

    def get_idem(self, key: str) -> str | None:
        """The id of the task this replica holds under idempotency key ``key`` (as the state machine
        stores it: ``molens.fsm.machine.idem_key``); None when none."""
        ...

    def wheel_distribution(self) -> WheelDistribution | None:
        """The leader's time wheel now; None on a node without one (a follower, no scheduler)."""
        ...

    def metrics(self) -> NodeMetrics:
        """The node's Prometheus registry (built once, on first use)."""
        ...

    def request_seen(self) -> None:
        """Counts one HTTP request (for ``qps`` in the stats)."""
        ...

    def clock_problem(self) -> str:
        """Why this node's clock keeps it from leading ("" when it does not:
        docs/architecture.md#clock-skew)."""
        return ""

    def read_barrier(self, timeout_s: float) -> None:
        """Return once a read of this node's replica is linearizable (Raft ReadIndex: the leader
        confirms it still leads, this replica applies up to its commit index); ``NoLeader`` or
        ``Unavailable`` when that cannot be confirmed within ``timeout_s``."""
        ...

    def storage_problem(self) -> str:
        """Why this node cannot write its disk now ("" when it can: docs/architecture.md#full-disk)."""
        return ""

    def now_ms(self) -> int: ...

    def new_task_id(self) -> str: ...

    def new_task_ids(self, n: int) -> list[str]:
        """``n`` fresh task ids of this millisecond (a batch create's)."""
        ...


__all__ = ["ApiContext", "ApiSettings", "LeaderInfo", "cluster_status_from_raft", "http_url", "settings_from_config"]
