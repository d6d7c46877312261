"""LeaderSupervisor: starts the leader-only actors when this node gains leadership, ends them on loss.

Per term led it starts one :class:`~molens.actors.timewheel.TimeWheel`,
:class:`~molens.actors.dispatcher.Dispatcher`, :class:`~molens.actors.monitor.Monitor`,
:class:`~molens.actors.cleaner.Cleaner` and :class:`~molens.actors.notifier.Notifier` (pykka actors
sharing one :class:`~molens.actors.term.TermContext`), tells each ``Join`` with the others' refs, then
``Rebuild`` to the wheel (stream ``due``) and the Monitor (watch ``fires``). It is not itself an
actor: its two entry points run on the Raft thread and must be quick.

- :meth:`on_leader_change` (RaftPeer subscription): a new term led starts a new set; losing
  leadership sets the term's ``ended`` flag at once (nothing more is proposed or sent) and stops
  the set without waiting. The node's FireWorkerPool is told who leads (``LeaderIs``). A change
  older than one acted on (``LeaderChange.seq``: the subscription's answer, acted on by the starting
  thread after the Raft thread delivered a newer change) is ignored.
- :meth:`on_applied` (the store's hook, per applied batch with effects): each effect goes straight to
  the one actor that uses it (:func:`route_effects`): ``Committed`` (fire effects) to the Monitor,
  ``WheelEffects`` (timer adds and removes) to the wheel, ``FlowsChanged`` (flow settings) to the
  Dispatcher. The Dispatcher learns of its own committed fires from its proposal's outcome, which
  the Raft thread delivers after this hook: the Monitor watches a fire before it can be sent.
- :meth:`stop` (graceful stop while leading): the Dispatcher plans nothing new, the Monitor waits
  (bounded) until the fires sent this term have committed results, then the set stops.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from molens.actors.cleaner import Cleaner
from molens.actors.clockprobe import ClockGate
from molens.actors.dispatcher import Dispatcher
from molens.actors.messages import (
    Committed,
    Drain,
    FlowsChanged,
    Join,
    LeaderIs,
    LeaderRefs,
    Rebuild,
    WheelEffects,
)
from molens.actors.monitor import Monitor
from molens.actors.notifier import Notifier
from molens.actors.peer_messages import LeaderChange
from molens.actors.stats import StatsClient
from molens.actors.term import ProposeCallback, TermContext, every_replica_reads
from molens.actors.timewheel import TimeWheel
from molens.config import AuditConfig, NotificationsConfig, SchedulerConfig
from molens.fsm.machine import FlowSet, SendFire, WheelAdd, WheelRemove
from molens.fsm.store import EntryResult, TaskStore
from molens.schedule.horizon import Reach
from molens.tracing import NO_SPANS, Spans

log = logging.getLogger(__name__)

STOP_JOIN_S = 5.0
"""How long ending a term waits for its actors' threads when it waits at all (graceful stop)."""


def _stamped(send: Callable[[dict[str, list[Any]], int], dict[str, list[Any]]], term: int,
             groups: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The term's ``send_fires``: every batch it sends carries the term (docs/architecture.md#node-ports)."""
    return send(groups, term)


@dataclass(frozen=True, slots=True)
class Routed:
    """The effects of applied entries, split by the actor that uses them (each in log order)."""

    wheel: list[WheelAdd | WheelRemove]
    own: list[SendFire]
    """Fire effects of entries of ``term`` (sent by this leader's Dispatcher)."""
    other: list[SendFire]
    """Fire effects of an earlier term's entries (never sent by this leader)."""
    flows: tuple[tuple[str, Any], ...]


def route_effects(entries: list[EntryResult], term: int, reach: Reach | None = None) -> Routed:
    """Split the effects of ``entries`` for the leader actors of ``term``; the adds of new tasks due
    beyond the wheel's ``reach`` are left out (a load of the window reads them from the index).

    >>> from molens.fsm.machine import WheelAdd
    >>> r = route_effects([EntryResult(index=1, term=2, results=[], effects=[WheelAdd("t1", 5)])], term=2)
    >>> r.wheel, r.own, r.flows
    ([WheelAdd(key='t1', due_ms=5, new=False)], [], ())
    """
    if reach is None:
        reach = Reach()
        reach.ms = 2**63
    wheel: list[WheelAdd | WheelRemove] = []
    own: list[SendFire] = []
    other: list[SendFire] = []
    flows: list[tuple[str, Any]] = []
    for er in entries:
        fires = own if er.term == term else other
        for e in er.effects:
            if isinstance(e, WheelAdd):
                if reach.wants(e.due_ms, e.new):
                    wheel.append(e)
            elif isinstance(e, WheelRemove):
                wheel.append(e)
            elif isinstance(e, SendFire):
                fires.append(e)
            elif isinstance(e, FlowSet):
                flows.append((e.key, e.settings))
    return Routed(wheel, own, other, tuple(flows))


class _Term:
    def __init__(self, refs: LeaderRefs, ended: threading.Event, reach: Reach | None = None) -> None:
        self.refs = refs
        self.ended = ended
        self.reach = reach if reach is not None else Reach()


class LeaderSupervisor:
    """See the module docstring."""

    def __init__(
        self,
        node_id: str,
        cfg: SchedulerConfig,
        store: TaskStore,
        propose_batch: Callable[[list[bytes], ProposeCallback], None],
        stats: StatsClient,
        pool: pykka.ActorRef[Any],
        send_fires: Callable[[dict[str, list[Any]], int], dict[str, list[Any]]],
        local_free: Callable[[], int],
        fatal: Callable[[BaseException], None],
        clock: ClockGate | None = None,
        notifications: NotificationsConfig | None = None,
        send_notices: Callable[[Any], str | None] | None = None,
        spans: Spans = NO_SPANS,
        audit: AuditConfig | None = None,
        replicas_read: Callable[[int], bool] = every_replica_reads,
    ) -> None:
        self.node_id = node_id
        self._replicas_read = replicas_read
        self.audit = audit if audit is not None else AuditConfig()
        self.spans = spans
        self.notifications = notifications if notifications is not None else NotificationsConfig()
        self._send_notices = send_notices
        self.clock = clock if clock is not None else ClockGate.always_ok()
        self.cfg = cfg
        self.store = store
        self._propose_batch = propose_batch
        self.stats = stats
        self.pool = pool
        self._send_fires = send_fires
        self._local_free = local_free
        self._fatal = fatal
        self._lock = threading.Lock()
        self._term: _Term | None = None
        self._allowed = True
        self.leader_id: str | None = None
        self._seen = 0
        """The newest :attr:`LeaderChange.seq` acted on: the answer to the subscription, acted on
        from the starting thread, may arrive after a newer change the Raft thread delivered."""

    @property
    def current(self) -> LeaderRefs | None:
        """The refs of the term's leader actors while this node leads, else None."""
        t = self._term
        return None if t is None or t.ended.is_set() else t.refs

    # ---- Raft thread ------------------------------------------------------------------------------
    def on_leader_change(self, ch: LeaderChange) -> None:
        old: _Term | None = None
        with self._lock:
            if ch.seq < self._seen:  # stale: a newer change was acted on (it stopped a term just led)
                return
            self._seen = ch.seq
            self.leader_id = ch.leader_id
            cur = self._term
            if ch.is_leader and self._allowed:
                if cur is None or cur.refs.term != ch.term:
                    old, self._term = cur, self._start(ch.term, ch.heard_ago_ms)
            elif cur is not None:
                old, self._term = cur, None
            new = self._term
        if old is not None:
            self._end(old, wait=False)
        try:
            self.pool.tell(LeaderIs(ch.leader_id, None if new is None else new.refs))
        except pykka.ActorDeadError:
            pass

    def on_applied(self, entries: list[EntryResult]) -> None:
        t = self._term
        if t is None or t.ended.is_set():
            return
        refs = t.refs
        r = route_effects(entries, refs.term, t.reach)
        try:
            if r.own or r.other:  # before the Dispatcher's outcome: the Monitor watches before any result
                refs.monitor.tell(Committed(r.own, r.other))
            if r.wheel:
                refs.wheel.tell(WheelEffects(r.wheel))
            if r.flows:
                refs.dispatcher.tell(FlowsChanged(r.flows))
        except pykka.ActorDeadError:
            pass

    # ---- terms ------------------------------------------------------------------------------------
    def _start(self, term: int, heard_ago_ms: tuple[tuple[str, int], ...] = ()) -> _Term:
        ended = threading.Event()
        ctx = TermContext(
            node_id=self.node_id, term=term, cfg=self.cfg, store=self.store, propose_batch=self._propose_batch,
            stats=self.stats, send_fires=functools.partial(_stamped, self._send_fires, term), local_free=self._local_free, fatal=self._fatal, ended=ended,
            clock=self.clock, notifications=self.notifications, heard_ago_ms=heard_ago_ms, spans=self.spans,
            audit=self.audit, replicas_read=self._replicas_read, reach=Reach(),
            **({"send_notices": self._send_notices} if self._send_notices is not None else {}),
        )
        refs = LeaderRefs(
            term=term, wheel=TimeWheel.start(ctx), dispatcher=Dispatcher.start(ctx), monitor=Monitor.start(ctx),
            cleaner=Cleaner.start(ctx), notifier=Notifier.start(ctx),
        )
        join = Join(refs)
        for ref in refs.all():
            ref.tell(join)
        refs.wheel.tell(Rebuild())
        refs.monitor.tell(Rebuild())
        self.stats.add(terms_led=1)
        log.info("leader actors started term=%d", term)
        return _Term(refs, ended, ctx.reach)

    def _end(self, t: _Term, wait: bool) -> None:
        t.ended.set()
        for ref in t.refs.all():
            try:
                ref.stop(block=False)
            except pykka.ActorDeadError:
                pass
        if wait:
            end = time.monotonic() + STOP_JOIN_S
            for ref in t.refs.all():
                ref.actor_stopped.wait(max(0.0, end - time.monotonic()))
        log.info("leader actors stopped term=%d", t.refs.term)

    # ---- graceful stop ----------------------------------------------------------------------------
    def stop(self, timeout: float) -> None:
        """No more terms on this node; the current one drains (bounded by ``timeout``: the results
        of the fires it sent get committed, so the next leader re-fires none of them) and ends."""
        with self._lock:
            self._allowed = False
            t = self._term
        if t is None:
            return
        until = time.monotonic() + timeout
        for ref in (t.refs.dispatcher, t.refs.monitor):
            fut: pykka.ThreadingFuture[int] = pykka.ThreadingFuture()
            try:
                ref.tell(Drain(until, fut))
                fut.get(timeout=max(0.0, until - time.monotonic()) + 0.5)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
        with self._lock:
            if self._term is t:
                self._term = None
        self._end(t, wait=True)


__all__ = ["LeaderSupervisor", "Routed", "route_effects"]
