"""The node's :class:`~molens.web.api_context.ApiContext`: the REST app over RaftPeer + TaskStore.

- Writes: :meth:`NodeContext.propose` encodes the commands and proposes them together (one Raft
  append) and waits until they apply here, bounded by ``timeout_s``. Not the leader:
  :class:`~molens.web.errors.LeaderElsewhere` with the leader's HTTP URL (the app answers 307) or
  :class:`~molens.web.errors.NoLeader` (503 + Retry-After); appended then leadership lost, or no
  answer in time: :class:`~molens.web.errors.OutcomeUnknown` (the SDK retries with the same
  idempotency key); refused/stopping: :class:`~molens.web.errors.Unavailable`.
- Reads come from the local replica (the store and history of this node).
- Who leads is cached from RaftPeer's leadership notifications, so :meth:`leader_info` costs no
  actor round trip; a leader's HTTP URL comes from the config's peers or, for a node that joined
  later, from one ``status`` call, then cached.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

import pykka

from molens import cpus, model
from molens.actors.peer_errors import (
    LeadershipLost,
    NoTransferTarget,
    ProposalRefused,
    RaftPeerError,
    StorageFull,
)
from molens.actors.peer_handle import RaftPeerHandle
from molens.actors.peer_messages import LeaderChange
from molens.actors.stats import COUNTERS
from molens.config import Config
from molens.errors import MolensError
from molens.fsm.commands import Command
from molens.fsm.history import History
from molens.fsm.machine import NOT_FIRED
from molens.fsm.store import EntryResult, TaskStore
from molens.model import FailureKind, IllegalTransitionError, NotFoundError
from molens.raft import core as rc
from molens.schedule.flows import FlowState
from molens.wallclock import wall_ms
from molens.web.api_context import (
    ApiSettings,
    LeaderInfo,
    cluster_status_from_raft,
    http_url,
    settings_from_config,
)
from molens.web.errors import InsufficientStorage, LeaderElsewhere, NoLeader, OutcomeUnknown, Unavailable
from molens.web.fire_series import Span, merge
from molens.web.heatmap import WheelDistribution, distribution_of, far_future_of
from molens.web.metrics import MetricsSnapshot, NodeMetrics, pending_by_namespace
from molens.web.node_stats import (
    DiskUsage,
    PeerStats,
    RecentFires,
    RequestRate,
    attempts,
    order_nodes,
    rss_bytes,
    thread_cpu_s,
    thread_switches,
)
from molens.web.store_reads import StoreReads

if TYPE_CHECKING:
    from molens.scheduler import Scheduler

log = logging.getLogger(__name__)

WHEEL_READ_TIMEOUT_S = 2.0
"""How long a wheel read waits for the TimeWheel actor."""
MAX_FAR_DAYS = 36_600
"""Days of ``due_days`` the far-future total reads at most (a century; only days with entries are rows)."""
STATUS_TIMEOUT_S = 2.0
"""How long a stats page or scrape waits for RaftPeer's status."""


def from_proposal_error(exc: BaseException, leader_url: Callable[[str | None], str | None]) -> MolensError:
    """Map a RaftPeer proposal failure to the API error (for ApiContext implementations).

    ``leader_url(leader_id)`` gives the leader's HTTP base URL (``None`` when unknown). Anything that
    is not a known Raft failure becomes :class:`Unavailable` (the cause is logged by the caller).
    """
    if isinstance(exc, rc.NotLeaderError):
        url = leader_url(exc.leader_id) if exc.leader_id else None
        return LeaderElsewhere(url, exc.leader_id) if url else NoLeader()
    if isinstance(exc, StorageFull):
        return InsufficientStorage(f"this node cannot write its disk; nothing was applied: {exc}")
    if isinstance(exc, LeadershipLost):
        return OutcomeUnknown(f"leadership changed before the write applied; outcome unknown ({exc})")
    if isinstance(exc, ProposalRefused):
        return Unavailable(f"the write was refused and not applied: {exc}")
    if isinstance(exc, MolensError):
        return exc
    return Unavailable(f"the write could not be proposed: {type(exc).__name__}")



class _Outcome:
    """The outcome of one API proposal, handed from the Raft thread to the HTTP thread that waits
    for it: the Raft thread stores it and releases a lock the waiter blocks on.

    Not a ``concurrent.futures.Future``: setting a Future takes its condition's lock, wakes the
    waiter while still holding it (so the waiter wakes only to block on that lock once more) and
    runs its callbacks, all on the Raft thread, which is the node's busiest; a bare lock is one
    release there and one wake-up here."""

    __slots__ = ("_lock", "error", "results")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.results: list[Any] = []
        self.error: BaseException | None = None

    def __call__(self, results: list[Any], error: BaseException | None) -> None:
        """``RaftPeerHandle.propose_batch``'s callback: runs once, when every entry has an outcome."""
        self.results, self.error = results, error
        self._lock.release()

    def wait(self, timeout_s: float) -> bool:
        """True once the outcome is in, False when ``timeout_s`` passed first."""
        return self._lock.acquire(timeout=max(0.0, timeout_s))


class LeaderChanges:
    """The leader changes a node has seen (``molens_raft_leader_changes_total``): from one leader to
    another. The first leader a node learns of after it starts is none, nor is the same node
    elected again after a spell without a leader."""

    __slots__ = ("_known", "count")

    def __init__(self) -> None:
        self.count = 0
        self._known: str | None = None

    def seen(self, leader_id: str | None) -> None:
        if leader_id is not None and leader_id != self._known:
            self.count += self._known is not None
            self._known = leader_id


class NodeContext(StoreReads):
    """ApiContext of a Raft node (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        peer: RaftPeerHandle,
        store: TaskStore,
        history: History,
        extra_stats: Callable[[], dict[str, Any]] | None = None,
        settings: ApiSettings | None = None,
        scheduler: Scheduler | None = None,
        transfer_leader: Callable[[str | None], dict[str, Any]] | None = None,
    ) -> None:
        self.cfg = cfg
        self._transfer = transfer_leader
        self.peer = peer
        super().__init__(store, history, settings or settings_from_config(cfg))
        self._extra_stats = extra_stats
        self._urls: dict[str, str | None] = {p.id: http_url(p.http_addr) for p in cfg.initial_peers()}
        """Member id -> the HTTP base URL clients use (a follower's 307 names the leader's)."""
        self._peer_urls: dict[str, str | None] = {
            p.id: http_url(p.peer_http_addr or p.http_addr) for p in cfg.initial_peers()
        }
        """Member id -> the HTTP base URL this node reaches it at (``peer_http_addr``, else ``http_addr``)."""
        self._lock = threading.Lock()
        self._last = LeaderChange(cfg.node.id, "follower", None, 0)
        self.stopping = False
        self.proposals = 0
        self.scheduler = scheduler
        self._leader_changes = LeaderChanges()
        self._requests = RequestRate()
        self._disk = DiskUsage(cfg.data_dir)
        self._recent = RecentFires(cfg.data_dir / "history.sqlite")
        self._peers = PeerStats(self.settings.auth_token)
        self._metrics = NodeMetrics(self._metrics_snapshot, self._task_namespace)
        if scheduler is not None:
            scheduler.set_observer(self._metrics.fires)

    def start(self) -> NodeContext:
        self._on_change(self.peer.subscribe(self._on_change))
        return self

    def _on_change(self, ch: LeaderChange) -> None:
        with self._lock:
            if ch.term >= self._last.term and ch.seq >= self._last.seq:  # not a stale subscription answer
                self._leader_changes.seen(ch.leader_id)
                if ch.is_leader and (not self._last.is_leader or ch.term != self._last.term):
                    # ids above every task this replica holds: a new leader's clock may be behind the
                    # old one's (docs/api.md, GET /api/v1/tasks)
                    self._ids.floor(self.store.last_task_id())
                self._last = ch

    # ------------------------------------------------------------------ ApiContext

    def _leader_url(self, leader_id: str | None) -> str | None:
        if not leader_id:
            return None
        if leader_id not in self._urls:
            try:
                for p in self.peer.status().get("peers", []):
                    self._urls[p["id"]] = http_url(p.get("http_addr", ""))
            except Exception as exc:
                log.info("leader url lookup failed: %s", exc)
                return None
        return self._urls.get(leader_id)

    def leader_info(self) -> LeaderInfo:
        ch = self._last
        if ch.is_leader:
            return LeaderInfo(ch.node_id, self._leader_url(ch.node_id), ch.term, ch.role)
        return LeaderInfo(ch.leader_id, self._leader_url(ch.leader_id), ch.term, ch.role)

    def propose(self, commands: Sequence[Command], timeout_s: float) -> list[list[Any]]:
        if self.stopping:
            raise Unavailable("node is stopping")
        ch = self._last
        if not ch.is_leader:
            raise from_proposal_error(rc.NotLeaderError(ch.leader_id), self._leader_url)
        problem = self.clock_problem()
        if problem:  # its clock would be stamped into the commands (docs/architecture.md#clock-skew)
            raise Unavailable(f"this node does not take writes: {problem}")
        problem = self.storage_problem()
        if problem:  # docs/architecture.md#full-disk
            raise InsufficientStorage(f"this node cannot write its disk; nothing was applied: {problem}")
        outcome = _Outcome()
        self.peer.propose_batch([self.store.encode_proposal(c) for c in commands], outcome)
        self.proposals += 1
        if not outcome.wait(timeout_s):
            raise OutcomeUnknown(f"the write did not apply within {timeout_s:g} s; outcome unknown")
        if outcome.error is not None:  # every failure maps to an API error (a lost leadership race too)
            if not isinstance(outcome.error, (RaftPeerError, rc.RaftError)):
                log.warning("proposal failed: %r", outcome.error)
            raise from_proposal_error(outcome.error, self._leader_url) from outcome.error
        return [r.results if isinstance(r, EntryResult) else [r] for r in outcome.results]

    def read_barrier(self, timeout_s: float) -> None:
        try:
            self.peer.read_index(timeout_s)
        except rc.NotLeaderError:
            raise NoLeader("no leader is known: a linearizable read cannot be confirmed") from None
        except (FutureTimeout, TimeoutError):
            raise Unavailable(f"the read was not confirmed by a quorum within {timeout_s:g} s") from None

    def replicas_read(self, version: int) -> bool:
        sched = self.scheduler
        return True if sched is None else sched.replicas_read(version)

    def flow_states(self) -> list[FlowState] | None:
        sched = self.scheduler
        return None if sched is None else sched.flow_states()

    def cluster_status(self) -> dict[str, Any]:
        st = self.peer.status()
        for p in st.get("peers", []):
            self._urls.setdefault(p["id"], http_url(p.get("http_addr", "")))
        return cluster_status_from_raft(st)

    def transfer_leader(self, to: str | None) -> dict[str, Any]:
        """The admin ``transfer_leader`` command (waits until this node stepped down)."""
        if self._transfer is None:
            raise Unavailable("this node cannot hand over leadership")
        try:
            out = self._transfer(to)
        except NoTransferTarget as exc:  # nobody to hand over to: retrying will not help
            raise IllegalTransitionError(str(exc), "to") from exc
        except (rc.RaftError, RaftPeerError) as exc:
            raise from_proposal_error(exc, self._leader_url) from exc
        if not out.get("ok"):
            raise Unavailable(str(out.get("error") or "the leadership transfer did not complete"))
        return {k: v for k, v in out.items() if k != "ok"}

    def _raft_status(self) -> dict[str, Any]:
        """RaftPeer's status, or {} when the Raft actor does not answer in time (a stats page
        then shows what it can instead of failing)."""
        try:
            return self.peer.status(timeout=STATUS_TIMEOUT_S)
        except Exception as exc:  # pykka.Timeout, or the actor is stopping
            log.info("raft status unavailable for stats: %s", type(exc).__name__)
            return {}

    def _members(self) -> dict[str, str | None]:
        """Member id -> the HTTP base URL this node reaches it at, from Raft's membership (config URLs
        when Raft does not answer)."""
        st = self._raft_status()
        if not st:
            return dict(self._peer_urls)
        out: dict[str, str | None] = {}
        for p in st.get("peers", []):
            url = http_url(p.get("peer_http_addr") or p.get("http_addr", "")) or self._peer_urls.get(p["id"])
            self._peer_urls.setdefault(p["id"], url)
            out[p["id"]] = url
        return out

    def cluster_stats(self) -> dict[str, Any]:
        me = self.cfg.node.id
        members = self._members()
        others = {nid: url for nid, url in members.items() if nid != me}
        nodes = [self.stats(), *self._peers.fetch_all(others)]
        commit = max((n.get("commit_index") or 0 for n in nodes if "error" not in n), default=0)
        for n in nodes:
            if "error" not in n and isinstance(n.get("applied_index"), int):
                n["lag"] = max(0, commit - n["applied_index"])
        return {"nodes": order_nodes(nodes), "time_ms": self.now_ms()}

    def fire_series(self, span: Span, local: bool = False) -> dict[str, Any]:
        me, now = self.cfg.node.id, self.now_ms()
        mine = self._metrics.fires.series.to_json(span, now)
        if local:
            return {**mine, "node_id": me}
        others = {nid: url for nid, url in self._members().items() if nid != me}
        answers = self._peers.fetch_all(others, f"/api/v1/stats/series?range={span.value}&local=1")
        ok = [a for a in answers if "error" not in a]
        return {**merge(span, now, [mine, *ok]), "nodes": [me, *(str(a["node_id"]) for a in ok)],
                "missing": [{"node_id": a["node_id"], "error": a["error"]} for a in answers if "error" in a]}

    def node_stats(self, node_id: str) -> dict[str, Any]:
        if node_id == self.cfg.node.id:
            return self.stats()
        members = self._members()
        if node_id not in members:
            raise NotFoundError(f"node {node_id[:64]} is not in the cluster", "node_id")
        out = self._peers.fetch(node_id, members[node_id])
        if "error" in out:
            raise Unavailable(f"node {node_id} did not answer: {out['error']}", "node_id")
        return out

    def stats(self) -> dict[str, Any]:
        li = self.leader_info()
        now = self.now_ms()
        counts = self.store.counts()
        st = self._raft_status()
        out: dict[str, Any] = {
            "node_id": self.cfg.node.id,
            "role": li.role,
            "term": li.term,
            "leader_id": li.leader_id,
            "tasks": counts,
            "tasks_total": sum(counts.values()),
            "time_ms": now,
            "commit_index": st.get("commit_index"),
            "applied_index": self.store.applied_index(),
            "last_index": st.get("last_index"),
            "leader_changes": self._leader_changes.count,
            **self._recent.summary(now),
            "fires_total": attempts(self._metrics.fires.fires),
            "fires_failed": attempts(self._metrics.fires.fires, failed=True),
            "qps": self._requests.per_s(),
            "rss_bytes": rss_bytes(),
            "threads_cpu_s": thread_cpu_s(),
            "threads_switches": thread_switches(),
            "cpus": cpus.text(cpus.allowed()),
            "os_scheduling": self.cfg.node.os_scheduling,
            "disk": self._disk.get(),
            "api_proposals": self.proposals,
            "dead_letters": self.store.dead_count(),
            "notifications": {"outbox": self.store.outbox_count()},
            "not_fired": {**dict.fromkeys(NOT_FIRED, 0), **self.store.not_fired},
        }
        sched = self._extra_stats() if self._extra_stats is not None else None
        if sched is not None:
            out["scheduler"] = sched
            timings = sched.get("timings", {})
            late = timings.get("fire_lateness")  # due -> sent, on this node's worker
            out["lateness_p99_ms"] = late["p99_ms"] if late else None
            lat = timings.get("callback_latency")  # request -> answer, on this node's worker
            out["callback_latency_p50_ms"] = lat["p50_ms"] if lat else None
            out["callback_latency_p99_ms"] = lat["p99_ms"] if lat else None
            out["cleanup"] = {
                "retention_ms": self.cfg.scheduler.task_retention_minutes * 60_000,
                "rate_limit_qps": self.cfg.scheduler.expire_rate_limit_qps,
            }
            if "expired" in sched:  # Stats answered (its counters are absent, not zeros, when it did not)
                out["not_fired"]["held_by_flow"] = int(sched.get("flow_held", 0))
                out["notifications"].update(
                    sent=sched.get("notifications_sent", 0), dropped=sched.get("notifications_dropped", 0),
                    failures=sched.get("notification_failures", 0),
                )
                out["cleanup"].update(expired=sched["expired"], dead_letters_expired=sched.get("dead_letters_expired", 0))
        return out

    def wheel_distribution(self) -> WheelDistribution | None:
        sched = self.scheduler
        if sched is None:
            return None
        now = self.now_ms()
        g = sched.leader_gauges()
        until, horizon = g.get("wheel_loaded_until_ms"), g.get("wheel_horizon_ms")
        far = None
        if until is not None:  # the due index beyond the window (docs/architecture.md#near-term-window)
            far = far_future_of(self.store.due_by_day(until, MAX_FAR_DAYS), until, horizon)
        try:
            dist: WheelDistribution | None = sched.read_wheel(
                lambda wheel: distribution_of(wheel, now, far), WHEEL_READ_TIMEOUT_S)
        except pykka.Timeout:
            raise Unavailable("the leader's scheduler is busy; try again") from None
        return dist

    def metrics(self) -> NodeMetrics:
        return self._metrics

    def _metrics_snapshot(self) -> MetricsSnapshot:
        li = self.leader_info()
        st = self._raft_status()
        raft = {k: int(st[k]) for k in ("term", "commit_index", "applied_index", "last_index", "snapshot_index") if st.get(k) is not None}
        raft["leader_changes"] = self._leader_changes.count
        wheel: dict[str, int] = {}
        queues: dict[str, int] = {}
        counters: dict[str, float] = {}
        flows: list[FlowState] = []
        late_p99: float | None = None
        st_json: dict[str, Any] | None = None
        sched = self.scheduler
        if sched is not None:
            flows = sched.flow_states() or []
            ps = sched.pool_stats()
            queues.update(fire_pool_queued=ps.queued, fire_pool_in_flight=ps.in_flight)
            # counters only: rebuild_* and term are per-term gauges kept under the same names; none
            # when Stats does not answer (stopped, or busy): absent, not zeros that Prometheus would
            # read as a counter reset (and the next scrape as the whole count again)
            assert sched.stats is not None
            st_json = sched.stats.to_json()
            counters = {k: float(st_json[k]) for k in COUNTERS if k in st_json and not k.startswith("rebuild_")}
            late = st_json.get("timings", {}).get("fire_lateness")
            late_p99 = late["p99_ms"] if late else None
            g = sched.leader_gauges()
            if "wheel_size" in g:
                wheel["timers"] = g["wheel_size"]
                wheel["overflow"] = g["overflow"]
            for k in ("fires_in_flight", "dispatch_backlog", "results_unproposed"):
                if k in g:
                    queues[k] = g[k]
        return MetricsSnapshot(
            node_id=self.cfg.node.id,
            role=li.role,
            tasks=(counts := self.store.counts()),
            namespaces=pending_by_namespace(self.store.scan_meta, counts, model.TERMINAL_STATUSES),
            raft=raft,
            wheel=wheel,
            queues=queues,
            flows=flows,
            history_rows=self._recent.rows(),
            disk_bytes={k.removesuffix("_bytes"): v for k, v in self._disk.get().items()},
            scheduler=counters,
            clock=self._clock_metrics(),
            refused=self._refused(st, st_json),
            storage=self._storage_metrics(),
            not_fired={**dict.fromkeys(NOT_FIRED, 0), **self.store.not_fired},
            lateness_p99_s=late_p99 / 1000 if late_p99 is not None else None,
            dead_letters={"stored": self.store.dead_count(), "outbox": self.store.outbox_count(),
                          **{f"written:{k.value}": 0 for k in FailureKind},
                          **{f"written:{k}": v for k, v in self.store.dead_written.items()}},
        )

    def _refused(self, st: dict[str, Any], stats: dict[str, Any] | None) -> dict[str, dict[str, int]]:
        """Refusals on both node ports (docs/architecture.md#node-ports). ``results_wrong_worker``
        adds the results a follower passed on that the FireWorkerPool dropped when this node led by
        the time they arrived (counted by Stats, ``stats``); left out while Stats does not answer, so
        the counter is absent for that scrape instead of smaller."""
        out: dict[str, dict[str, int]] = {}
        if "refused" in st:
            out["raft"] = dict(st["refused"])
        sched = self.scheduler
        if sched is not None:
            t = sched.rpc.stats()
            rpc = out["rpc"] = {"handshake_refused": t["handshake_refused"], "forged_sender": t["forged_sender"],
                                **sched.rpc_refused}
            if stats:
                rpc["results_wrong_worker"] += int(stats.get("results_wrong_worker", 0))
            else:
                del rpc["results_wrong_worker"]
        return out

    def _storage_metrics(self) -> dict[str, int]:
        h = self.peer.lifecycle.storage
        return {"full": 1 if h.problem else 0, "stalls": h.stalls, "retries": h.retries}

    def _clock_metrics(self) -> dict[str, int]:
        sched = self.scheduler
        v = sched.clock.verdict if sched is not None else None
        if v is None:
            return {}
        return {"skew_ms": v.skew_ms, "skewed": 1 if v.state.value == "skewed" else 0}

    def request_seen(self) -> None:
        self._requests.hit()

    def clock_problem(self) -> str:
        sched = self.scheduler
        return sched.clock.problem() if sched is not None else ""

    def storage_problem(self) -> str:
        problem = self.peer.lifecycle.storage.problem
        return f"storage full: {problem}" if problem else ""

    def now_ms(self) -> int:
        return wall_ms()

__all__ = ["LeaderChanges", "NodeContext", "from_proposal_error"]
