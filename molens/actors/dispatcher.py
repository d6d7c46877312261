"""Dispatcher: the leader actor that turns due task ids into planned fires and sends them.

Owns a :class:`DispatchPlan` (worker capacity estimates, smooth weighted round-robin) and the
backlog of due task ids not yet planned. Receives: ``DueBatch`` (TimeWheel), ``DispatchedBatch``
(outcome of its own ``Dispatched`` proposals, from the Raft thread: once applied, it carries the
entry's fire effects, which are the fires to send; the Dispatcher hears of each of its entries
once), ``WorkerReport`` (workers' free capacity), ``InFlight`` (Monitor, with the fires that ended),
``FlowsChanged`` (Raft thread: flow settings applied), ``FlowNoticesProposed`` (outcome of its own
``FlowNotices`` proposals, from the Raft thread), ``Drain``, ``Wake`` (its alarm), ``GetGauges``
and ``GetFlows`` (ask). Sends: ``Dispatched`` proposals (up to ``MAX_PROPOSAL_ITEMS`` items, at most
``MAX_DISPATCH_PROPOSALS`` in flight), ``FlowNotices`` proposals (one at a time, a refused one again:
:class:`HoldNotices`), fires to workers (one frame per worker per applied ``Dispatched`` entry; the
local pool's straight into its queue), ``Requeue`` to TimeWheel for refused proposals, and
``FireResults`` to the Monitor for fires it could not send. Runs on its own thread.

Nothing is sent before the ``Dispatched`` entry that planned it commits under this leader's term
(``docs/architecture.md#invariants``). *Dispatch ahead*: a task counts as due ``lead_ms``
(``scheduler.dispatch_lead_ms``) before its due time, so the commit happens while the fire waits;
the worker holds it until the due time (``not_before_ms``), and its deadline counts from the due
time: due + HTTP timeout + ``dispatch_timeout_ms``.

Workers are picked by smooth weighted round-robin (nginx's), weighted by each live worker's free
capacity: the local pool's as it is now, a remote node's as last reported (every results frame and
a heartbeat every ``REPORT_INTERVAL_S`` carry it) minus what was given to it since. Nothing is
planned while this node's clock is not known to agree with a majority's, and a worker whose clock
is not known to agree with this node's gets no fires (``TermContext.clock``,
``docs/architecture.md#clock-skew``). A worker not
heard from for ``FRESH_REPORTS`` report intervals (1.5 s) gets no new fires until it reports again; one
the Monitor counts as lost (no report for ``scheduler.worker_lost_ms``, ``InFlight.lost``,
``docs/architecture.md#lost-workers``) also has its fires settled. With no capacity anywhere, due ids wait in the
backlog and are looked at again a tick later or when a worker reports.

*Flow control* (``docs/architecture.md#flow-control``): it also owns a
:class:`~molens.schedule.flows.FlowControl`, set from the store's ``flows`` when the term begins and
from ``FlowsChanged`` after. Each due fire is judged by its flow (read from the task record the plan
reads anyway) at plan time; one held back waits in its flow's queue, not in the backlog, so other
flows' fires go on; it comes back to the front of the backlog when its flow lets it go (its alarm
wakes it for a rate or a ``Retry-After``; a fire ending or a settings change wakes it anyway). A
held fire stays due in the store's ``due`` index, so a new leader finds it there.

Fires in flight are bounded by ``scheduler.max_inflight_fires``: the Monitor's open fires, plus
accepted items it has not been told of yet, plus items in proposals without an outcome.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from molens.actors.alarm import wall_ms
from molens.actors.messages import (
    DispatchedBatch,
    DueBatch,
    FireResults,
    FlowNoticesProposed,
    FlowsChanged,
    GetFlows,
    InFlight,
    Requeue,
    WorkerReport,
)
from molens.actors.peer_errors import LeadershipLost, ProposalRefused
from molens.actors.term import PumpedActor, TermContext
from molens.delivery import CATCHUP_WAIT_VERSION, LAST_FIRE_VERSION, FireRequest, FireResult, to_result_item
from molens.fsm import tenancy
from molens.fsm.commands import Dispatched, DispatchItem, FlowNotices, FlowSettings, ResultItem
from molens.fsm.machine import SendFire
from molens.fsm.store import EntryResult
from molens.model import Status, Task
from molens.raft.errors import NotLeaderError
from molens.schedule.flows import FlowControl, FlowLimits, NamespacedFlows
from molens.schema import flow_id

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.5
FRESH_REPORTS = 3
"""A remote worker gets new fires only while its last report is at most this many report intervals
old (or ``worker_lost_ms``, if shorter): a worker that just died is not given fires for the whole
time it takes to count it lost (docs/architecture.md#lost-workers)."""
MAX_PROPOSAL_ITEMS = 1_000
"""Most items in one Dispatched / Results proposal."""
MAX_DISPATCH_PROPOSALS = 8
"""Dispatched proposals in flight at once (more due tasks wait in the backlog)."""
RETRY_REFUSED_MS = 100
"""A task whose Dispatched proposal was refused (not appended) is due again this much later."""
SWEEP_EVERY_MS = 1_000
"""Adopted fires past their deadline and idle flows without settings are let go this often."""
MAX_PENDING_NOTICES = 1_000
"""Most hold changes (a hold, or its end) waiting to be announced; past it the oldest is dropped (logged, counted)."""


def limits_of(fs: FlowSettings) -> FlowLimits:
    """The pure flow control's view of a flow's replicated settings."""
    return FlowLimits(
        rate_per_s=fs.rate_per_s, burst=fs.burst, concurrency=fs.concurrency, paused=fs.paused, adaptive=fs.adaptive,
    )


@dataclass(slots=True)
class _Worker:
    free: int
    seen: float
    given: int = 0
    current: int = 0


def to_wire(e: SendFire) -> FireRequest:
    """The worker's SendFire for a committed fire effect."""
    f = e.fire
    return FireRequest(
        fire_id=f.fire_id, task_id=f.task_id, attempt=f.attempt, kind=f.kind, url=e.url, body=e.body, scene=e.scene,
        timeout_ms=e.timeout_ms, deadline_ms=f.deadline_ms, not_before_ms=e.not_before_ms,
        scheduled_ms=e.scheduled_ms, traceparent=e.traceparent or "", namespace=e.namespace,
    )


class DispatchPlan:
    """Plans fires and picks workers (pure apart from the clock it is given; see the module docstring)."""

    def __init__(
        self,
        node_id: str,
        get_task: Callable[[str], Task | None],
        local_free: Callable[[], int],
        dispatch_timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
        liveness_ms: int = 2_000,
        worker_ok: Callable[[str], bool] = lambda _w: True,
    ) -> None:
        self.node_id = node_id
        self._get_task = get_task
        self._local_free = local_free
        self.dispatch_timeout_ms = dispatch_timeout_ms
        self._clock = clock
        self.liveness_s = min(liveness_ms / 1000, FRESH_REPORTS * REPORT_INTERVAL_S)
        """A remote worker silent for longer gets no new fires."""
        self._worker_ok = worker_ok
        """Whether a worker's clock agrees with this node's (docs/architecture.md#clock-skew)."""
        self._workers: dict[str, _Worker] = {}
        self.planned = 0
        self.skipped = 0
        self.ackless: set[str] = set()
        """Tasks awaiting their ACK without an ``ack_url``, already logged (:meth:`plan`)."""
        self.held = 0
        """Due fires their flow held back (docs/architecture.md#flow-control)."""
        self.lags: list[float] = []
        """due -> planned, ms, of the items of the last ``plan`` call."""

    def report(self, worker: str, free: int) -> None:
        """A worker's free capacity as it just reported it."""
        w = self._workers.get(worker)
        if w is None:
            self._workers[worker] = _Worker(free, self._clock())
        else:
            w.free, w.seen, w.given = free, self._clock(), 0

    def forget(self, worker: str) -> None:
        """``worker`` is lost (the Monitor settled its fires): not used until it reports again."""
        if worker != self.node_id:
            self._workers.pop(worker, None)

    def live_workers(self) -> dict[str, int]:
        """Worker id -> estimated free capacity, for every live worker (this node included)."""
        now = self._clock()
        out = {self.node_id: max(0, self._local_free() - self._given(self.node_id))}
        for wid, w in list(self._workers.items()):  # a copy: the API thread reads it too (stats)
            if wid != self.node_id and now - w.seen < self.liveness_s and self._worker_ok(wid):
                out[wid] = max(0, w.free - w.given)
        return out

    def _given(self, wid: str) -> int:
        w = self._workers.get(wid)
        return w.given if w is not None else 0

    def plan(
        self, task_ids: Iterable[str], now_ms: int, limit: int, lead_ms: int = 0, flows: FlowControl | None = None
    ) -> tuple[list[DispatchItem], list[str]]:
        """Items to propose for ``task_ids`` due by ``now_ms + lead_ms`` (at most ``limit``), and the
        ids left for later. With ``flows``, a fire its flow does not let go now is held there (it
        is neither an item nor left for later: ``flows.release`` hands it back)."""
        due_by = now_ms + lead_ms
        caps = self.live_workers()
        total = sum(caps.values())
        items: list[DispatchItem] = []
        later: list[str] = []
        lags: list[float] = []
        self.lags = lags
        get = self._get_task
        for tid in task_ids:
            if len(items) >= limit or total <= 0:
                later.append(tid)
                continue
            t = get(tid)
            actions = t.actions(due_by) if t is not None else []  # an allow task: maybe several occurrences
            if t is not None and t.status is Status.AWAITING_ACK and t.spec.ack_url is None:
                # its ack_url was removed in its ACK phase (a PATCH racing the callback's answer): no
                # probe can go, and the entry would fail whole for every task in it. It waits for
                # an ack_url again, or its deletion (the API refuses the removal otherwise)
                if tid not in self.ackless:  # said once per task (forgotten past 10,000)
                    if len(self.ackless) >= 10_000:
                        self.ackless.clear()
                    self.ackless.add(tid)
                    log.warning("task %s awaits its ACK but has no ack_url: not planned", tid)
                actions = []
            if t is None or not actions:
                self.skipped += 1
                if flows is not None:
                    flows.drop(tid)
                continue
            for n, (fire_id, attempt, due) in enumerate(actions):
                if n and (len(items) >= limit or total <= 0):
                    break  # the rest wait for the wheel: the entry that plans these re-arms it
                at = max(now_ms, due)
                if flows is not None and not flows.gate(tid, fire_id, attempt, flow_id(t.spec), at, now_ms,
                                                        namespace=t.spec.namespace):
                    self.held += 1
                    break
                wid = self._pick(caps, total)
                caps[wid] -= 1
                total -= 1
                deadline = at + t.spec.timeout_ms + self.dispatch_timeout_ms
                items.append(DispatchItem(
                    fire_id=fire_id, task_id=tid, attempt=attempt, worker=wid, deadline_ms=deadline,
                ))
                lags.append(now_ms - due)
        self.planned += len(items)
        return items, later

    def _pick(self, caps: dict[str, int], total: int) -> str:
        """Smooth weighted round-robin over ``caps`` (weights = free capacity)."""
        best: _Worker | None = None
        best_id = self.node_id
        for wid, cap in caps.items():
            if cap <= 0:
                continue
            w = self._workers.get(wid)
            if w is None:
                w = self._workers[wid] = _Worker(0, self._clock())
            w.current += cap
            if best is None or w.current > best.current:
                best, best_id = w, wid
        assert best is not None
        best.current -= total
        best.given += 1
        return best_id

    def give_back(self, items: Iterable[DispatchItem], flows: FlowControl | NamespacedFlows) -> None:
        """Planned items that will not be sent (their proposal failed, or the state machine refused
        them): their worker capacity and their flow slot go back."""
        for it in items:
            w = self._workers.get(it.worker)
            if w is not None and w.given > 0:
                w.given -= 1
            flows.cancel(it.fire_id, it.attempt)

    @staticmethod
    def refused(items: Iterable[DispatchItem], results: Iterable[Any]) -> list[DispatchItem]:
        """The items of an applied ``Dispatched`` entry its state machine refused (a result that is
        not None is that item's error)."""
        return [it for it, r in zip(items, results) if r is not None]

    def sent_local(self, n: int) -> None:
        """``n`` fires went to the local pool: its live free capacity now counts them."""
        w = self._workers.get(self.node_id)
        if w is not None:
            w.given = max(0, w.given - n)

    def capacity(self) -> int:
        """Free capacity of every live worker together."""
        return sum(self.live_workers().values())

    @staticmethod
    def group(effects: Iterable[SendFire]) -> dict[str, list[FireRequest]]:
        """Committed fire effects grouped by the worker they were planned for."""
        out: dict[str, list[FireRequest]] = {}
        for e in effects:
            out.setdefault(e.fire.worker, []).append(to_wire(e))
        return out



class HoldNotices:
    """Flow holds (and their ends) on their way into the log as ``FlowNotices``, one proposal at a
    time (docs/architecture.md#notifications). :meth:`FlowControl.holds` hands each change out
    once, so it is kept here until a proposal carrying it applies. A refused proposal's items wait
    ``RETRY_REFUSED_MS`` and go again, in the order they happened: a flow's hold and its end both
    go (a receiver that was paused and resumed is told both), and a newer change of the same kind
    stands over an older one. At most ``max_pending`` changes wait (the oldest is dropped first);
    the term's end drops them all (a hold lives in the leader's memory only).

    >>> hn = HoldNotices()
    >>> hn.add([("a:80", 5_000)], [])  # no flow dropped
    0
    >>> hn.take(1_000)
    (('a:80', 5000),)
    >>> hn.add([("b:80", 6_000)], []), hn.take(1_001)  # one proposal at a time: b:80 waits
    (0, ())
    >>> hn.add([], ["a:80"]), hn.refused(1_010), hn.take(1_050), hn.next_wake()
    (0, 0, (), 1110)
    >>> hn.take(1_110)  # the refused hold of a:80 goes again, before its end
    (('a:80', 5000), ('b:80', 6000), ('a:80', 0))
    >>> hn.applied(); hn.take(1_111)
    ()
    """

    def __init__(self, max_pending: int = MAX_PENDING_NOTICES) -> None:
        self.max_pending = max_pending
        self._pending: dict[tuple[str, bool], int] = {}
        """(flow, whether a hold began) -> hold end (0: the hold ended), oldest first, not yet proposed."""
        self._proposed: tuple[tuple[str, int], ...] | None = None
        """The items of the proposal without an outcome."""
        self._retry_at = 0

    def add(self, began: Iterable[tuple[str, int]], ended: Iterable[str]) -> int:
        """Holds that began ``(flow, until)`` and ended (flow); returns how many waiting changes were
        dropped to stay within ``max_pending``."""
        pending = self._pending
        for key, until in (*began, *((k, 0) for k in ended)):
            pending.pop((key, until > 0), None)  # newest last: the oldest is dropped first
            pending[(key, until > 0)] = until
        return self._trim()

    def take(self, now_ms: int) -> tuple[tuple[str, int], ...]:
        """The items to propose now (empty: none, or a proposal still has no outcome, or a refused
        one's retry is not due)."""
        if self._proposed is not None or not self._pending or now_ms < self._retry_at:
            return ()
        items = tuple((key, until) for (key, _), until in self._pending.items())
        self._pending.clear()
        self._proposed = items
        return items

    def applied(self) -> None:
        """The proposal applied: its items are announced."""
        self._proposed = None

    def refused(self, now_ms: int) -> int:
        """The proposal was refused (nothing appended): its items go again from ``now_ms +
        RETRY_REFUSED_MS``, before the changes seen since (a newer one of the same kind stands over
        its refused one); returns how many waiting changes were dropped to stay within ``max_pending``."""
        items, self._proposed = self._proposed or (), None
        later = self._pending
        self._pending = {(k, v > 0): v for k, v in items if (k, v > 0) not in later}
        self._pending.update(later)
        self._retry_at = now_ms + RETRY_REFUSED_MS
        return self._trim()

    def give_up(self) -> int:
        """The term is over: nothing is proposed again; returns how many changes go unannounced."""
        n = len(self._pending) + len(self._proposed or ())
        self._pending.clear()
        self._proposed = None
        return n

    def next_wake(self) -> int | None:
        """When a refused proposal's items may go again (None: no wait of their own)."""
        return self._retry_at if self._pending and self._proposed is None else None

    def _trim(self) -> int:
        pending = self._pending
        over = len(pending) - self.max_pending
        for key in list(pending)[:max(0, over)]:
            del pending[key]
        return max(0, over)


class Dispatcher(PumpedActor):
    """The leader's dispatcher actor (see the module docstring)."""

    name = "dispatcher"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.plan = DispatchPlan(
            ctx.node_id, ctx.store.get_task, ctx.local_free, ctx.cfg.dispatch_timeout_ms,
            liveness_ms=ctx.cfg.worker_lost_ms, worker_ok=ctx.clock.worker_ok,
        )
        self.backlog: collections.deque[str] = collections.deque()
        self.backlog_at = 0
        """No worker capacity: the backlog is looked at again from then (epoch ms)."""
        self.sweep_at = 0
        self.proposals = 0
        self.items_proposed = 0
        """Items in Dispatched proposals without an outcome."""
        self.accepted = 0
        """Items of this term's Dispatched entries that were applied (each one a fire)."""
        self.monitor_open = 0
        self.monitor_own_seen = 0
        self.max_inflight = ctx.cfg.max_inflight_fires
        self.lead_ms = ctx.cfg.dispatch_lead_ms
        self.tick_ms = max(10, ctx.cfg.tick_ms)
        self.flows = NamespacedFlows(credit_ms=self.tick_ms)
        self.notify_url = ctx.notifications.url
        """Where flow holds are announced ("" = not announced)."""
        self.notices = HoldNotices()
        now = wall_ms()
        for key, fs in ctx.store.scan_flows():
            self.flows.configure(key, limits_of(fs), now)
        for key, raw in ctx.store.scan_meta(tenancy.NS_PREFIX):
            rate = tenancy.decode_namespace(raw).quotas.fires_per_s
            self.flows.configure_namespace(key.removeprefix(tenancy.NS_PREFIX), rate, now)
        self.adopted = False
        """Whether the fires an earlier leader left in flight count against their flows yet."""

    # ---- messages --------------------------------------------------------------------------------
    def handle(self, message: Any) -> Any:
        if isinstance(message, GetFlows):
            return self.flows.state(wall_ms())
        return super().handle(message)

    def take(self, message: Any) -> bool:
        if isinstance(message, DueBatch):
            self.backlog.extend(message.task_ids)
        elif isinstance(message, DispatchedBatch):
            self._outcome(message)
        elif isinstance(message, FlowNoticesProposed):
            self._notices_outcome(message)
        elif isinstance(message, InFlight):
            self.monitor_open, self.monitor_own_seen = message.open, message.own_seen
            if message.ended:
                now = wall_ms()
                throttled = self.flows.throttled
                for e in message.ended:
                    self.flows.ended(e.fire_id, e.attempt, now, congested=e.congested, retry_after_ms=e.retry_after_ms)
                if self.flows.throttled != throttled:
                    self.stats.add(throttled=self.flows.throttled - throttled)
            for wid in message.lost:
                self.plan.forget(wid)
            for wid, free in message.reports:
                self.plan.report(wid, free)
            if message.reports:
                self.backlog_at = 0
        elif isinstance(message, WorkerReport):
            for wid, free in message.free:
                self.plan.report(wid, free)
            self.backlog_at = 0
        elif isinstance(message, FlowsChanged):
            now = wall_ms()
            for key, fs in message.changes:
                if key.startswith(tenancy.NAMESPACE_FLOW_PREFIX):  # a namespace's fires_per_s
                    rate = None if fs is None else fs.rate_per_s
                    self.flows.configure_namespace(key.removeprefix(tenancy.NAMESPACE_FLOW_PREFIX), rate, now)
                else:
                    self.flows.configure(key, None if fs is None else limits_of(fs), now)
        else:
            return False
        return True

    def gauges(self) -> dict[str, Any]:
        return {"dispatch_backlog": len(self.backlog), "live_workers": sorted(self.plan.live_workers()),
                "flow_held": self.flows.held}

    def _adopt(self) -> None:
        """Fires in flight when this term began count against their flows' concurrency until the
        Monitor reports them ended (on this thread, once: not on the Raft thread that started us)."""
        self.adopted = True
        now = wall_ms()
        get = self.ctx.store.get_task
        n = 0
        for f in self.ctx.store.scan_fires():
            t = get(f.task_id)
            if t is not None:
                self.flows.adopt(f.fire_id, f.attempt, flow_id(t.spec), f.deadline_ms, now)
                n += 1
        if n:
            log.info("flows: %d fires in flight from an earlier term count against their flows", n)

    def _pump(self) -> None:
        assert self.alarm is not None
        if not self.adopted:
            self._adopt()
        if self.drain is not None:
            if self.proposals == 0 and not self.drain_answered:
                self.drain_answered = True
                self.drain.done.set(0)
            self.set_alarm(None)
            return
        if self.ended:
            self.set_alarm(None)
            return
        now = wall_ms()
        flows = self.flows
        released = flows.release(now)
        if released:  # admitted by their flows: before anything newer
            self.backlog.extendleft(reversed(released))
        if self.backlog and now >= self.backlog_at:
            self._dispatch(now)
        at = self.backlog_at if self.backlog and self.backlog_at > now and self._can_dispatch() else None
        wake = flows.next_tick_wake(now)
        if wake is not None and (at is None or wake < at):
            at = wake
        if now >= self.sweep_at:
            flows.sweep(now)
            self.sweep_at = now + SWEEP_EVERY_MS
        if self.notify_url:
            self._announce_holds(now)
            for end in (flows.next_hold_end(), self.notices.next_wake()):
                if end is not None and (at is None or end < at):
                    at = end
        self.set_alarm(at)

    def _announce_holds(self, now: int) -> None:
        """Flows a receiver paused with ``Retry-After``, and resumed: ``FlowNotices`` for the node's
        ``notifications.url`` (docs/architecture.md#notifications), one proposal at a time; a refused
        one goes again (:class:`HoldNotices`). A hold that begins or ends while the leader changes
        may go unannounced: it lives in the leader's memory only."""
        began, ended = self.flows.holds(now)
        if began or ended:
            self._dropped_notices(self.notices.add(began, ended))
        items = self.notices.take(now)
        if items:
            self.ctx.propose(FlowNotices(now, self.notify_url, items),
                             self.outcome_to_self(lambda _res, err: FlowNoticesProposed(items, err)))

    def _notices_outcome(self, m: FlowNoticesProposed) -> None:
        if m.error is None:
            self.notices.applied()
        elif self.ended or isinstance(m.error, (NotLeaderError, LeadershipLost)):
            n = self.notices.give_up()
            log.info("flow notices: term over, %d not announced: %r", n, m.error)
        else:
            self.stats.add(proposals_failed=1)
            log.warning("flow notices refused flows=%d: %r; proposed again in %d ms",
                        len(m.items), m.error, RETRY_REFUSED_MS)
            self._dropped_notices(self.notices.refused(wall_ms()))

    def _dropped_notices(self, n: int) -> None:
        if n:
            self.stats.add(flow_notices_dropped=n)
            log.warning("flow notices: %d flows' changes dropped (more than %d waiting)", n, self.notices.max_pending)

    # ---- planning --------------------------------------------------------------------------------
    def in_flight(self) -> int:
        return self.monitor_open + max(0, self.accepted - self.monitor_own_seen) + self.items_proposed

    def _can_dispatch(self) -> bool:
        return self.proposals < MAX_DISPATCH_PROPOSALS and self.in_flight() < self.max_inflight

    def _dispatch(self, now: int) -> None:
        backlog, plan, ctx = self.backlog, self.plan, self.ctx
        if not ctx.clock.leading_ok():  # nothing planned from a clock not known to agree with a majority
            self.stats.add(clock_holds=1)
            self.backlog_at = now + self.tick_ms
            return
        while backlog and self._can_dispatch():
            if plan.capacity() <= 0:
                self.backlog_at = now + self.tick_ms
                return
            room = min(MAX_PROPOSAL_ITEMS, self.max_inflight - self.in_flight())
            chunk = [backlog.popleft() for _ in range(min(MAX_PROPOSAL_ITEMS, len(backlog)))]
            held = plan.held
            items, later = plan.plan(chunk, now, room, self.lead_ms, self.flows)
            if plan.held != held:
                self.stats.add(flow_held=plan.held - held)
            if later:
                backlog.extendleft(reversed(later))
            if items:
                self.stats.sample("dispatch_lag", plan.lags)
                self.stats.add(dispatched_proposed=len(items))
                self.proposals += 1
                self.items_proposed += len(items)
                ctx.propose(
                    Dispatched(now, tuple(items), catchup_waits=ctx.replicas_read(CATCHUP_WAIT_VERSION),
                               keeps_last_fire=ctx.replicas_read(LAST_FIRE_VERSION)),
                    self.outcome_to_self(functools.partial(DispatchedBatch, items)),
                )
            if later:
                self.backlog_at = now + self.tick_ms
                return

    def _outcome(self, m: DispatchedBatch) -> None:
        self.proposals -= 1
        self.items_proposed -= len(m.items)
        if m.error is not None:
            self.plan.give_back(m.items, self.flows)
            self.stats.add(proposals_failed=1)
            if isinstance(m.error, ProposalRefused) and self.refs is not None and not self.ended:
                self.tell(self.refs.wheel, Requeue([d.task_id for d in m.items], wall_ms() + RETRY_REFUSED_MS))
            return
        er = m.results[0] if m.results and isinstance(m.results[0], EntryResult) else None
        out = er.results if er is not None else []
        refused = DispatchPlan.refused(m.items, out)
        self.plan.give_back(refused, self.flows)
        self.accepted += len(m.items) - len(refused)
        self.stats.add(dispatched_accepted=len(m.items) - len(refused))
        if er is not None:  # applied in this term (else the outcome is an error): the Monitor already watches these
            self._send([e for e in er.effects if isinstance(e, SendFire)])

    # ---- sending ---------------------------------------------------------------------------------
    def _send(self, fires: list[SendFire]) -> None:
        if self.ended or not fires:
            return
        ctx = self.ctx
        now = wall_ms()
        self.stats.sample("plan_to_send", [now - e.fire.dispatched_ms for e in fires])
        groups = DispatchPlan.group(fires)
        local = len(groups.get(ctx.node_id, ()))
        failed = ctx.send_fires(groups)
        if local and ctx.node_id not in failed:
            self.plan.sent_local(local)
        sent = len(fires) - sum(len(v) for v in failed.values())
        self.stats.add(fires_sent=sent, fires_sent_local=local if ctx.node_id not in failed else 0)
        if failed and self.refs is not None:  # not queued: answer at once instead of waiting for the deadline
            items: list[ResultItem] = []
            for wid, wf in failed.items():
                log.warning("fires not sent to worker=%s n=%d", wid, len(wf))
                items.extend(with_attempt(to_result_item(FireResult.unsent(f.fire_id, f.kind, wid, "rpc send failed")),
                                          f.attempt) for f in wf)
            self.tell(self.refs.monitor, FireResults(items))


def with_attempt(it: ResultItem, attempt: int) -> ResultItem:
    """``it`` for the attempt a worker carried out (a late result never lands on a newer attempt)."""
    if not attempt:
        return it
    return msgspec.structs.replace(it, attempt=attempt)  # every other field as the worker reported it




__all__ = [
    "MAX_DISPATCH_PROPOSALS", "MAX_PENDING_NOTICES", "MAX_PROPOSAL_ITEMS", "REPORT_INTERVAL_S", "DispatchPlan",
    "Dispatcher", "HoldNotices", "limits_of", "to_wire", "with_attempt",
]
