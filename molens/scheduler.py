"""The scheduler of one node: its actors, wired (``docs/architecture.md#actors``).

Every node runs a :class:`~molens.actors.stats.Stats`, a
:class:`~molens.actors.fireworker.FireWorkerPool` and a :class:`~molens.actors.clockprobe.ClockProbe`
actor; the :class:`~molens.actors.supervisor.LeaderSupervisor` runs the leader-only actors (TimeWheel,
Dispatcher, Monitor, Cleaner, Notifier) for each term this node leads. :class:`Scheduler` is the seam the
node and the HTTP API use: start/stop, the worker RPC handler, and queries answered by the actors.

Worker RPC frames (``Node.set_rpc_handler``): ``b"B" + msgpack(term) + fire_batch`` (leader -> worker),
``b"R" + msgpack([free, attempts, fire_results])`` and ``b"H" + msgpack([free, [fire batch version,
held fire ids...]])`` (worker -> leader; a batch to a worker that advertised no version leaves the
``traceparent`` out, :meth:`Scheduler.batch_version`); ``b"T" + msgpack(ms)`` clock probes between
any two nodes, answered at once with ``b"t" + msgpack([ms, ms])`` (:mod:`molens.actors.clockprobe`). A frame the sender may not send
(:func:`molens.worker_rpc.refusal`: a batch not from the leader of its term, results or heartbeats
from a non-member) is dropped, counted (``rpc_refused``) and logged at most once per
``REFUSED_LOG_S``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import pykka

from molens.actors.clockprobe import (
    ClockGate,
    ClockProbe,
    ProbeReply,
    decode_reply,
    reply_frame,
)
from molens.actors.fireworker import (
    FireWorkerPool,
    ForwardFrame,
    LocalFires,
    decode_heartbeat,
    decode_results_frame,
    own_results,
    result_items,
)
from molens.actors.messages import (
    FireBatch,
    FireResults,
    GetFlows,
    GetGauges,
    LeaderRefs,
    ReadWheel,
    SetObserver,
    WorkerReport,
)
from molens.actors.notifier import NoticeSender
from molens.actors.peer_handle import RaftPeerHandle
from molens.actors.stats import ReportingDeliverer, Stats, StatsClient, StatsObserver
from molens.actors.supervisor import LeaderSupervisor
from molens.config import Config, callback_policy
from molens.delivery import FIRE_BATCH_V1, FireRequest, decode_fire_batch, encode_fire_batch
from molens.delivery.pool import FirePool, FirePoolStats, make_pool_manager
from molens.fsm.store import TaskStore
from molens.raft.clock import ClockVerdict
from molens.raft.transport import RefusalLog
from molens.schedule.flows import FlowState
from molens.tracing import open_spans
from molens.wallclock import wall_ms
from molens.worker_rpc import RpcEndpoint, batch_frame, refusal, split_batch

log = logging.getLogger(__name__)

DRAIN_S = 5.0
"""How long a stopping leader waits for the results of the fires it sent."""
POOL_FLUSH_MS = 10.0
"""The fire pool hands results over at most this long after the first of a batch (the Monitor
batches them for ``RESULTS_FLUSH_MS`` before proposing anyway)."""
ASK_TIMEOUT_S = 1.0
"""Queries (stats, gauges, the wheel view) give up on a busy actor after this long."""


class Scheduler:
    """Stats + FireWorkerPool + leader actors of one node (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        store: TaskStore,
        peer: RaftPeerHandle,
        rpc: RpcEndpoint,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.node_id = cfg.node.id
        self.store = store
        self.peer = peer
        self.rpc = rpc
        self._on_fatal = on_fatal
        self._stats_ref: pykka.ActorRef[Stats] | None = None
        self._pool_ref: pykka.ActorRef[FireWorkerPool] | None = None
        self._firepool: FirePool | None = None
        """The pool engine inside the FireWorkerPool actor (thread-safe: read for capacity and stats)."""
        self._local_fires: LocalFires | None = None
        """How this node's Dispatcher hands its own fires to the pool, on its own thread (no mailbox)."""
        self.supervisor: LeaderSupervisor | None = None
        self.stats: StatsClient | None = None
        self.clock = ClockGate(self.node_id, cfg.raft.max_clock_skew_ms)
        self._probe_ref: pykka.ActorRef[ClockProbe] | None = None
        self._http = make_pool_manager(cfg.worker.concurrency, callback_policy(cfg))  # as validated
        self.rpc_refused: dict[str, int] = {"B": 0, "R": 0, "H": 0, "results_wrong_worker": 0}
        """Frames dropped by :func:`molens.worker_rpc.refusal`, by tag (process lifetime)."""
        self._refused_log = RefusalLog(f"rpc {self.node_id}: frame refused", log)
        self.batch_versions: dict[str, int] = {}
        """Worker id -> the fire batch version its latest heartbeat advertised (written on the RPC
        thread, read on the Dispatcher's and, by :meth:`replicas_read`, the Monitor's: one dict
        item each, atomic)."""
        self.spans = open_spans(cfg.tracing.otlp_endpoint, self.node_id)
        """The node's span export (the API's creates use it too); :data:`~molens.tracing.NO_SPANS` without
        ``tracing.otlp_endpoint``."""

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        cfg, w = self.cfg, self.cfg.worker
        self._stats_ref = Stats.start(fatal=self.fatal)
        self.stats = StatsClient(self._stats_ref)
        me = self.node_id
        self._probe_ref = ClockProbe.start(
            self.clock, lambda: [p for p in self.rpc.peers() if p != me], self.rpc.send, self._judge_clock,
            fatal=self.fatal,
        )
        deliverer = ReportingDeliverer(
            self._http, self.node_id, w.signing_secret, w.signing_secret_next, signing_scope=w.signing_scope,
            max_retry_after_ms=w.max_retry_after_ms,
        )
        deliverer.spans = self.spans
        self._pool_ref = FireWorkerPool.start(
            self.node_id, deliverer, w.concurrency, self.rpc.send, self.stats, flush_interval_ms=POOL_FLUSH_MS,
            fatal=self.fatal, stop_timeout_s=DRAIN_S * 2, engine=w.engine,
            loop_tick_ms=w.loop_tick_ms, clock_suspect=self.clock.suspect, leader_now=lambda: self.peer.standing.leader,
        )
        proxy = self._pool_ref.proxy()
        pool: FirePool = proxy.pool.get(timeout=5)
        self._firepool = pool
        self._local_fires = proxy.local_fires.get(timeout=5)
        self.supervisor = LeaderSupervisor(
            node_id=self.node_id, cfg=cfg.scheduler, store=self.store, propose_batch=self.peer.propose_batch,
            stats=self.stats, pool=self._pool_ref, send_fires=self.send_fires, local_free=pool.free_capacity,
            fatal=self.fatal, clock=self.clock, notifications=cfg.notifications,
            send_notices=NoticeSender(
                make_pool_manager(4, callback_policy(cfg)), cfg.notifications.timeout_ms,
                (w.signing_secret, w.signing_secret_next), signing_scope=w.signing_scope,
            ),
            spans=self.spans,
            audit=cfg.audit,
            replicas_read=self.replicas_read,
        )
        self.store.on_applied = self.supervisor.on_applied
        last = self.peer.subscribe(self.supervisor.on_leader_change)
        self.supervisor.on_leader_change(last)
        return self

    def stop_leader(self, timeout: float = DRAIN_S) -> None:
        """No more leader terms on this node; the current one drains (bounded by ``timeout``) and
        ends (graceful stop, before leadership is handed over)."""
        if self.supervisor is not None:
            self.supervisor.stop(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker side: in-flight fires finish and their results are handed over."""
        self.stop_leader(timeout)
        self.store.on_applied = None
        for ref in (self._probe_ref, self._pool_ref, self._stats_ref):
            if ref is not None:
                try:
                    ref.stop(block=True, timeout=timeout + 2.0)  # the pool waits up to ``timeout`` for its fires
                except (pykka.ActorDeadError, pykka.Timeout):
                    log.warning("scheduler actor did not stop in time: %s", ref)
        self._http.clear()
        self.spans.shutdown()

    def _judge_clock(self, verdict_of: Callable[[list[str]], ClockVerdict]) -> tuple[list[str], ClockVerdict]:
        """The clock verdict for the current voters, acted on at once on the Raft thread."""
        return self.peer.judge_clock(verdict_of, timeout=ASK_TIMEOUT_S)

    def fatal(self, exc: BaseException) -> None:
        log.error("scheduler actor failed: %r; stopping the node", exc)
        if self._on_fatal is not None:
            self._on_fatal(exc)

    # ---- queries --------------------------------------------------------------------------------
    @property
    def leading(self) -> bool:
        return self._leader_refs() is not None

    def _leader_refs(self) -> LeaderRefs | None:
        """The refs of this term's leader actors; None off the leader."""
        return self.supervisor.current if self.supervisor is not None else None

    def set_observer(self, observer: StatsObserver) -> None:
        if self.stats is not None:
            self.stats.tell(SetObserver(observer))

    def pool_stats(self) -> FirePoolStats:
        assert self._firepool is not None
        return self._firepool.stats()

    def leader_gauges(self) -> dict[str, Any]:
        """Gauges of the leader actors (wheel size, fires in flight, backlog...); {} off the leader
        or for an actor too busy to answer within ``ASK_TIMEOUT_S`` (a wheel still rebuilding)."""
        refs = self._leader_refs()
        if refs is None:
            return {}
        futs = []
        for ref in (refs.wheel, refs.dispatcher, refs.monitor):
            try:
                futs.append(ref.ask(GetGauges(), block=False))
            except pykka.ActorDeadError:
                pass
        out: dict[str, Any] = {}
        for f in futs:
            try:
                out.update(f.get(timeout=ASK_TIMEOUT_S))
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
        return out

    def flow_states(self) -> list[FlowState] | None:
        """The Dispatcher's live view of its flows; None off the leader or when it is too busy."""
        refs = self._leader_refs()
        if refs is None:
            return None
        try:
            return cast(list[FlowState], refs.dispatcher.ask(GetFlows(), timeout=ASK_TIMEOUT_S))
        except (pykka.ActorDeadError, pykka.Timeout):
            return None

    def read_wheel(self, fn: Callable[[Any], Any], timeout: float) -> Any:
        """``fn(wheel)`` on the TimeWheel actor; None off the leader; ``pykka.Timeout`` if busy."""
        refs = self._leader_refs()
        if refs is None:
            return None
        try:
            return refs.wheel.ask(ReadWheel(fn), timeout=timeout)
        except pykka.ActorDeadError:
            return None

    def to_json(self) -> dict[str, Any]:
        assert self.stats is not None
        ps = self.pool_stats()
        out: dict[str, Any] = {
            **self.stats.to_json(ASK_TIMEOUT_S),
            "leading": self.leading,
            "worker": {
                "concurrency": ps.concurrency,
                "queued": ps.queued,
                "in_flight": ps.in_flight,
                "delivered": ps.delivered,
                "refused": ps.refused,
                "expired": ps.expired,
                "free_capacity": self._firepool.free_capacity() if self._firepool is not None else 0,
            },
        }
        g = self.leader_gauges()
        for k in ("wheel_size", "fires_in_flight", "live_workers"):
            if k in g:
                out[k] = g[k]
        if "wheel_horizon_ms" in g:  # the near-term window (docs/architecture.md#near-term-window)
            out["wheel"] = {k.removeprefix("wheel_"): g[k] for k in (
                "wheel_size", "wheel_size_max", "wheel_horizon_ms", "wheel_loaded_until_ms", "wheel_loaded", "wheel_slices")}
        # messages each actor has handled (this process's lifetime; leader actors: this term)
        pool_g = self._ask_pool_gauges()
        out["mailbox_messages"] = {
            "stats": out.pop("stats_messages", None), "fireworker": pool_g.get("fireworker_messages"),
            **{k.removesuffix("_messages"): v for k, v in g.items() if k.endswith("_messages")},
        }
        return out

    def _ask_pool_gauges(self) -> dict[str, Any]:
        if self._pool_ref is None:
            return {}
        try:
            return cast(dict[str, Any], self._pool_ref.ask(GetGauges(), timeout=ASK_TIMEOUT_S))
        except (pykka.ActorDeadError, pykka.Timeout):
            return {}

    # ---- worker RPC and sends ---------------------------------------------------------------------
    def on_rpc(self, frm: str, payload: bytes) -> None:
        """Worker RPC handler (RPC I/O thread): one message to one actor per frame."""
        tag, body = payload[:1], payload[1:]
        try:
            frame_term = None
            why = ""
            if tag == b"B":
                try:
                    frame_term, body = split_batch(body)
                except ValueError as exc:  # e.g. the format without a term: a hostile or outdated sender
                    why = str(exc)
            if not why:
                st = self.peer.standing
                why = refusal(tag, frm, frame_term=frame_term, term=st.term, leader=st.leader, members=st.members,
                              removed=st.removed)
            if why:
                if (counted := tag.decode("latin-1")) in self.rpc_refused:  # B, R, H (a removed node refuses any)
                    self.rpc_refused[counted] += 1
                self._refused_log.refused(f"from {frm}: {why}")
                return
            if tag == b"B":
                self._tell_pool(FireBatch(decode_fire_batch(body)))
            elif tag == b"R":
                refs = self._leader_refs()
                if refs is None:  # not (or no longer) leading: pass them on to the leader
                    self._tell_pool(ForwardFrame(payload, frm))
                    return
                free, attempts, results = decode_results_frame(body)
                own, dropped = own_results(frm, result_items(attempts, results))
                self.rpc_refused["results_wrong_worker"] += dropped
                refs.monitor.tell(FireResults(own, frm, free))
            elif tag == b"T":
                self.rpc.send(frm, reply_frame(body, wall_ms()))
            elif tag == b"t":
                if self._probe_ref is not None:
                    sent, peer_ms = decode_reply(body)
                    self._probe_ref.tell(ProbeReply(frm, sent, peer_ms, wall_ms()))
            elif tag == b"H":
                refs = self._leader_refs()
                beat = decode_heartbeat(body)
                if beat.batch_version is not None:  # what the batches sent to it may carry
                    self.batch_versions[frm] = beat.batch_version
                if refs is not None:  # capacity for the Dispatcher, liveness for the Monitor (docs/architecture.md#lost-workers)
                    report = WorkerReport(((frm, beat.free),), beat.held)
                    refs.dispatcher.tell(report)
                    refs.monitor.tell(report)
            else:
                self._refused_log.refused(f"from {frm}: unknown frame tag {tag!r}")
        except pykka.ActorDeadError:
            pass  # the term (or the node) ended meanwhile; the next leader's Monitor covers it
        except Exception as exc:  # a peer's frame this node cannot read: one line per 10 s, not one per frame
            self._refused_log.refused(f"from {frm}: bad frame ({len(payload)} bytes): {type(exc).__name__}: {exc}")

    def _tell_pool(self, msg: Any) -> None:
        if self._pool_ref is not None:
            self._pool_ref.tell(msg)

    def batch_version(self, worker: str) -> int:
        """The fire batch items ``worker`` reads: what it advertised, or those of the release before
        versions until it does (``docs/deploy.md#rolling-upgrade``)."""
        return self.batch_versions.get(worker, FIRE_BATCH_V1)

    def replicas_read(self, version: int) -> bool:
        """Whether every other member's node has advertised fire batch ``version`` or later, so every
        replica applies the entry fields that version added (``molens.delivery``: ``NOT_SENT_VERSION``,
        ``RESUME_TRIGGER_VERSION``...). Until then the leader proposes them as the release before
        applied them, so replicas of both releases apply the same log alike
        (docs/deploy.md#rolling-upgrade)."""
        versions = self.batch_versions
        return all(versions.get(m, FIRE_BATCH_V1) >= version
                   for m in self.peer.standing.members if m != self.node_id)

    def send_fires(self, by_worker: dict[str, list[FireRequest]], term: int) -> dict[str, list[FireRequest]]:
        """Send fires committed in ``term`` (this node leads it) to their workers, one frame each, this
        node's own into its pool's queue (the Dispatcher's thread); returns the groups that could not
        be queued."""
        failed: dict[str, list[FireRequest]] = {}
        for wid, fires in by_worker.items():
            if wid == self.node_id:
                if self._local_fires is None or not self._local_fires.carry_out(fires):
                    failed[wid] = fires
            elif not self.rpc.send(wid, batch_frame(term, encode_fire_batch(fires, self.batch_version(wid)))):
                failed[wid] = fires
        return failed


__all__ = ["Scheduler"]
