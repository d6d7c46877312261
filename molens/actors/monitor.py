"""Monitor: the leader actor that owns every fire in flight until its result is committed.

Owns a :class:`FireWatch` (deadline heap of fires with no result) and the results buffer.
Receives: ``Rebuild`` (first: watch the fires in ``fires`` when the term began, ``machine.reconcile_on_leadership``),
``Committed`` (Raft thread: fire effects of applied ``Dispatched`` entries of any term, told
before the Dispatcher can send them),
``FireResults`` (workers' results, local or over RPC; the Dispatcher's unsendable fires; those of
fires not sent are counted, ``not_sent``, and the machine plans them again: docs/architecture.md#not-sent),
``ResultsProposed`` (outcome of its ``Results`` proposals, from the Raft thread), ``Drain``,
``Wake`` (its alarm), ``GetGauges`` (ask). Sends: ``Results`` proposals (at most
``MAX_PROPOSAL_ITEMS`` items, at most ``RESULTS_FLUSH_MS`` after the first buffered result) and
``InFlight`` to the Dispatcher (with the fires that ended since the last one, each with its
congestion signal and ``Retry-After``: the Dispatcher's flow control frees their slots). Runs on its own pykka thread.

A watched fire with no result by its ``deadline_ms`` is a failed attempt (worker lost): the record
is re-read from the local replica and, if that same attempt is still in flight,
:func:`~molens.fsm.machine.lost_result` goes into the next batch. The machine then re-fires an
at_least_once fire (same fire id, next attempt) and records an at_most_once one as ``unknown``.
A ``Dispatched`` entry of a previous leader that commits in this term is never sent, and is given
up the same way.

*Lost workers* (``docs/architecture.md#lost-workers``): a :class:`WorkerWatch` keeps when each remote
worker was last heard from (``WorkerReport`` heartbeats, results frames; from the start of the term
for one not heard from yet). One silent for ``scheduler.worker_lost_ms`` is lost: its open fires are
settled at once, exactly as at a deadline, and the Dispatcher is told (``InFlight.lost``) to give it
no more fires until it reports again. A heartbeat also lists the fires the worker holds: an open
fire it does not list, watched at least ``HELD_GRACE_MS`` before the heartbeat arrived and with no
result received before it (results and heartbeats share one ordered link), is gone from that worker
(a restart quicker than ``worker_lost_ms``, fires dropped by a stop, results lost on the way to a
leader that died) and is settled the same way. ``deadline_ms`` stays the backstop.

Deadlines and silences are judged on the wall clock, and results are stamped with it, so while the
clock gate (``ctx.clock``, docs/architecture.md#clock-skew) does not vouch for this node's clock the
pump judges and proposes nothing, and looks again every ``CLOCK_RECHECK_MS``: a leader whose clock
jumped 18 s ahead once gave up every fire in flight at once as past its deadline, and scheduled the
retries 18 s late.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from molens.actors.alarm import wall_ms
from molens.actors.dispatcher import MAX_PROPOSAL_ITEMS
from molens.actors.messages import (
    Committed,
    FireEnd,
    FireResults,
    InFlight,
    Rebuild,
    ResultsProposed,
    WorkerReport,
)
from molens.actors.peer_errors import ProposalRefused
from molens.actors.term import PumpedActor, TermContext
from molens.delivery import NOT_SENT_VERSION, RESUME_TRIGGER_VERSION
from molens.fsm.commands import ResultItem, Results
from molens.fsm.machine import FireRecord, lost_result
from molens.model import FireKind, Outcome

log = logging.getLogger(__name__)

RESULTS_FLUSH_MS = 10
"""A results batch is proposed at most this long after its first item (fewer, fuller Results
entries: the next occurrence of a periodic task is computed from its schedule, not from this)."""
INFLIGHT_EVERY_MS = 10
"""The Dispatcher hears the count of fires in flight at most this often (``InFlight``)."""
HELD_GRACE_MS = 1_000
"""A fire watched less than this long before a heartbeat arrived may still be on its way to the
worker: a heartbeat that does not list it says nothing yet."""
DRAIN_POLL_MS = 20
"""While draining, the Monitor looks at its drain deadline this often."""
CLOCK_RECHECK_MS = 100
"""While the clock gate says no, the pump looks again this often."""


CONGESTION_STATUSES = frozenset((429, 503))


def congested(it: ResultItem) -> bool:
    """Whether a result says its receiver is overloaded (429, 503, a timeout): an adaptive flow
    backs off (docs/architecture.md#flow-control)."""
    return it.status_code in CONGESTION_STATUSES or it.outcome is Outcome.TIMEOUT


class WorkerWatch:
    """When each remote worker was last heard from, and which are lost (pure: time is given).

    >>> w = WorkerWatch("n1", lost_ms=2_000, start_ms=0)
    >>> w.heard("n2", 500)
    >>> w.lost(["n1", "n2", "n3"], 2_100)  # n3 never reported this term; n1 is this node
    ['n3']
    >>> w.lost(["n2"], 2_500), w.next_check(["n2"])
    (['n2'], None)
    >>> WorkerWatch("n1", lost_ms=2_000, start_ms=1_000, heard={"n2": 200}).lost(["n2"], 2_300)  # the old leader
    ['n2']
    """

    def __init__(self, node_id: str, lost_ms: int, start_ms: int, heard: Mapping[str, int] | None = None) -> None:
        self.node_id = node_id
        self.lost_ms = lost_ms
        self._start = start_ms
        self._heard: dict[str, int] = {w: t for w, t in (heard or {}).items() if w != node_id}
        """Seeded with each peer's last Raft contact before the term (``heard``): a deposed leader
        silent since before the election is lost ``lost_ms`` after it was last heard, not after the
        new term began."""
        self._lost: set[str] = set()

    def heard(self, worker: str, now_ms: int) -> None:
        """``worker`` sent something: it is alive (again)."""
        if worker and worker != self.node_id:
            self._heard[worker] = now_ms
            self._lost.discard(worker)

    def _silent_until(self, worker: str) -> int:
        return self._heard.get(worker, self._start) + self.lost_ms

    def lost(self, workers: Iterable[str], now_ms: int) -> list[str]:
        """Those of ``workers`` silent for ``lost_ms`` by ``now_ms`` (this node never is)."""
        out = []
        for w in workers:
            if w == self.node_id:
                continue
            if w in self._lost or self._silent_until(w) <= now_ms:
                self._lost.add(w)
                out.append(w)
        return out

    def next_check(self, workers: Iterable[str]) -> int | None:
        """When the first of ``workers`` not lost yet would be."""
        ts = [self._silent_until(w) for w in workers if w != self.node_id and w not in self._lost]
        return min(ts) if ts else None

    def take_lost(self) -> tuple[str, ...]:
        """Every worker lost now (for the Dispatcher)."""
        return tuple(sorted(self._lost))


SETTLED_MAX = 65_536
"""Attempts settled lost whose worker the watch remembers (the oldest forgotten first)."""


class FireWatch:
    """Deadline heap of in-flight fires, and the open ones by worker (pure apart from the store
    read it is given)."""

    def __init__(self, get_fire: Callable[[str], FireRecord | None]) -> None:
        self._get_fire = get_fire
        self._heap: list[tuple[int, str, int, FireKind]] = []
        self._open: dict[str, int] = {}
        """fire id -> attempt still waiting for a result (as far as this leader knows)."""
        self._on: dict[str, dict[str, int]] = {}
        """worker -> {fire id: attempt} of the open fires planned for it."""
        self._where: dict[str, str] = {}
        """fire id -> the worker of its open attempt."""
        self._since: dict[str, int] = {}
        """fire id -> when this leader began to watch its open attempt (ms)."""
        self._settled: OrderedDict[tuple[str, int], str] = OrderedDict()
        """(fire id, attempt) -> its worker, of the attempts this leader settled lost (at most
        :data:`SETTLED_MAX`): a late result of one is that worker's to send, no other member's."""
        self.lost = 0
        self.lost_on_worker = 0

    def watch(self, fires: Iterable[FireRecord], now_ms: int = 0) -> None:
        """Watch ``fires`` from ``now_ms`` on (0: sent before this term, never by this leader)."""
        for f in fires:
            self._forget(f.fire_id)
            self._open[f.fire_id] = f.attempt
            self._where[f.fire_id] = f.worker
            self._since[f.fire_id] = now_ms
            self._on.setdefault(f.worker, {})[f.fire_id] = f.attempt
            heapq.heappush(self._heap, (f.deadline_ms, f.fire_id, f.attempt, f.kind))

    def _forget(self, fire_id: str) -> None:
        self._open.pop(fire_id, None)
        self._since.pop(fire_id, None)
        w = self._where.pop(fire_id, None)
        if w is not None:
            on = self._on.get(w)
            if on is not None:
                on.pop(fire_id, None)
                if not on:
                    del self._on[w]

    def answered(self, fire_id: str, attempt: int | None = None) -> None:
        """A result for ``fire_id`` (``attempt``, when the worker said) is on its way to the log: it
        no longer counts as in flight. A late result of an earlier attempt leaves the open one be."""
        if attempt is None or self._open.get(fire_id) == attempt:
            self._forget(fire_id)

    def from_their_workers(self, items: list[ResultItem]) -> tuple[list[ResultItem], list[ResultItem]]:
        """``items`` split into those this watch may take and those from a worker other than the one
        the fire's open attempt was planned for, or, for a fire not open, the one its attempt was
        planned for when this leader settled it lost (a worker speaks only for itself, checked
        before; this is a member speaking for a fire that is not its own: taken, a late result of
        another worker's attempt went on record as if it had been sent). Any other fire not watched
        is the state machine's to judge."""
        wrong = [it for it in items if self._planned_for(it) != it.worker]
        return ([it for it in items if self._planned_for(it) == it.worker] if wrong else items), wrong

    def _planned_for(self, it: ResultItem) -> str:
        """The worker ``it`` may come from (its own when the watch knows of none)."""
        w = self._where.get(it.fire_id)
        if w is None and it.attempt is not None:
            w = self._settled.get((it.fire_id, it.attempt))
        return it.worker if w is None else w

    def _remember_settled(self, fire_id: str, attempt: int, worker: str) -> None:
        """Remember that this leader settled ``attempt`` of ``fire_id`` lost on ``worker``."""
        settled = self._settled
        settled[(fire_id, attempt)] = worker
        if len(settled) > SETTLED_MAX:
            settled.popitem(last=False)

    @property
    def in_flight(self) -> int:
        return len(self._open)

    def workers(self) -> list[str]:
        """Workers with open fires."""
        return list(self._on)

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int) -> list[ResultItem]:
        """Lost results for every watched fire past its deadline whose attempt is still in flight."""
        out: list[ResultItem] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, fid, attempt, kind = heapq.heappop(heap)
            cur = self._get_fire(fid)
            if cur is None or cur.attempt != attempt or cur.kind is not kind:
                if self._open.get(fid) == attempt:
                    self._forget(fid)
                continue
            self._forget(fid)
            log.warning("monitor: fire=%s attempt=%d kind=%s worker=%s lost", fid, attempt, kind, cur.worker)
            self._remember_settled(fid, attempt, cur.worker)
            out.append(lost_result(cur))
        self.lost += len(out)
        return out

    def on_lost_workers(self, workers: Iterable[str]) -> list[ResultItem]:
        """Lost results, now, for the open fires of ``workers`` whose attempt is still in flight
        (their heap entries stay: at the deadline the store shows the attempt answered)."""
        out: list[ResultItem] = []
        for w in workers:
            on = self._on.pop(w, None)
            if not on:
                continue
            for fid, attempt in on.items():
                self._open.pop(fid, None)
                self._where.pop(fid, None)
                self._since.pop(fid, None)
                cur = self._get_fire(fid)
                if cur is None or cur.attempt != attempt or cur.worker != w:
                    continue
                self._remember_settled(fid, attempt, w)
                out.append(lost_result(cur))
            log.warning("monitor: worker=%s lost; settling %d fires in flight on it", w, len(out))
        self.lost_on_worker += len(out)
        return out

    def not_held(self, worker: str, held: frozenset[str], watched_by_ms: int) -> list[ResultItem]:
        """Lost results for the open fires of ``worker`` watched by ``watched_by_ms`` that its
        heartbeat (``held``) does not list."""
        on = self._on.get(worker)
        if not on:
            return []
        gone = [(fid, att) for fid, att in on.items() if fid not in held and self._since.get(fid, 0) <= watched_by_ms]
        out: list[ResultItem] = []
        for fid, attempt in gone:
            self._forget(fid)
            cur = self._get_fire(fid)
            if cur is None or cur.attempt != attempt or cur.worker != worker:
                continue
            self._remember_settled(fid, attempt, worker)
            out.append(lost_result(cur))
        if out:
            log.warning("monitor: worker=%s no longer holds %d fires in flight on it; settling them", worker, len(out))
        self.lost_on_worker += len(out)
        return out


@dataclass(frozen=True, slots=True)
class Sweep:
    """What the Monitor's pump finds at a time: results for fires past their deadline (``lost``), for
    the fires of workers counted lost just now (``on_lost_workers``), and when to look again."""

    lost: list[ResultItem]
    on_lost_workers: list[ResultItem]
    next_at: int | None


def sweep(watch: FireWatch, workers: WorkerWatch, now_ms: int) -> Sweep:
    """The pure part of the Monitor's pump (the actor and the scheduler simulation both run it): give
    up the fires past their deadline, then those of workers silent for ``worker_lost_ms``; the next
    time is the earlier of the next deadline and the next worker check."""
    lost = watch.due(now_ms)
    gone = workers.lost(watch.workers(), now_ms)
    on_lost = watch.on_lost_workers(gone) if gone else []
    nxt = [d for d in (watch.next_deadline(), workers.next_check(watch.workers())) if d is not None]
    return Sweep(lost, on_lost, min(nxt) if nxt else None)


class Monitor(PumpedActor):
    """The leader's monitor actor (see the module docstring)."""

    name = "monitor"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.watch = FireWatch(ctx.store.get_fire)
        now = wall_ms()
        self.workers = WorkerWatch(ctx.node_id, ctx.cfg.worker_lost_ms, now,
                                   heard={w: now - ago for w, ago in ctx.heard_ago_ms})
        self.lost_told: tuple[str, ...] = ()
        """The lost workers the Dispatcher was last told of."""
        self.results: list[ResultItem] = []
        self.results_first = 0
        """Wall ms of the oldest buffered result."""
        self.pending = 0
        """Results proposals without an outcome."""
        self.sent: dict[str, int] = {}
        """Fire id -> attempt of the fires this term sent that have no result yet."""
        self.own_seen = 0
        self.reported: tuple[int, int] = (-1, -1)
        self.report_at = 0
        self.fire_ends: list[FireEnd] = []
        """Fires whose result or loss was taken since the last ``InFlight``."""
        self.reports: dict[str, int] = {}
        """Worker -> free capacity reported with results since the last ``InFlight``."""

    def take(self, message: Any) -> bool:
        if isinstance(message, FireResults):
            self._report(message)
            self._results_in(message.items)
        elif isinstance(message, WorkerReport):
            now = wall_ms()
            for wid, _free in message.free:
                self.workers.heard(wid, now)
                if message.held is not None:
                    gone = self.watch.not_held(wid, message.held, now - HELD_GRACE_MS)
                    if gone:
                        self._settle(gone)
        elif isinstance(message, Committed):
            self.watch.watch((e.fire for e in message.own), wall_ms())
            self.watch.watch(e.fire for e in message.other)  # never sent by this leader
            for e in message.own:
                self.sent[e.fire.fire_id] = e.fire.attempt
            self.own_seen += len(message.own)
        elif isinstance(message, ResultsProposed):
            self.pending -= 1
            if message.error is not None:
                self.stats.add(proposals_failed=1)
                if isinstance(message.error, ProposalRefused):
                    self._add(message.items, ended=False)
            else:
                self.stats.add(results_proposed=len(message.items))
                if self.ctx.spans.enabled:
                    self._trace_results(message)
        elif isinstance(message, Rebuild):
            fires = list(self.ctx.store.scan_fires())
            self.watch.watch(fires)
            self.stats.gauge(rebuild_fires=len(fires))
        else:
            return False
        return True

    def gauges(self) -> dict[str, Any]:
        return {"fires_in_flight": self.watch.in_flight, "results_unproposed": len(self.results),
                "lost_workers": list(self.workers.take_lost())}

    def _settle(self, lost: list[ResultItem]) -> None:
        """Fires of a lost worker, or gone from a live one, go into the next results batch."""
        if lost:
            self.stats.add(lost=len(lost), lost_on_worker=len(lost))
            for r in lost:
                self.sent.pop(r.fire_id, None)
            self._add(lost)

    def _report(self, m: FireResults) -> None:
        self.workers.heard(m.worker, wall_ms())
        if m.free is not None:
            self.reports[m.worker] = m.free

    def _results_in(self, items: list[ResultItem]) -> None:
        w, sent = self.watch, self.sent
        items, wrong = w.from_their_workers(items)
        if wrong:  # a member reporting a fire planned for another: it must not end that fire's watch or free its flow
            self.stats.add(results_wrong_worker=len(wrong))
            log.warning("monitor: %d results for fires planned for other workers dropped (first: fire=%s from %s)",
                        len(wrong), wrong[0].fire_id, wrong[0].worker)
        for it in items:
            w.answered(it.fire_id, it.attempt)
            if it.attempt is None or sent.get(it.fire_id) == it.attempt:
                sent.pop(it.fire_id, None)
        self.stats.add(results_received=len(items), not_sent=sum(1 for it in items if it.not_sent))
        self._add(items)

    def _add(self, items: list[ResultItem], ended: bool = True) -> None:
        if not self.results:
            self.results_first = wall_ms()
        self.results.extend(items)
        if ended:
            self.fire_ends.extend(
                FireEnd(it.fire_id, it.attempt, congested(it), it.retry_after_ms) for it in items
            )

    def _pump(self) -> None:
        if self.ended:
            return
        now = wall_ms()
        if not self.ctx.clock.leading_ok():  # no deadline judged, no result stamped, from a doubtful clock
            if self.drain is not None and not self.drain_answered:
                self._drain_check()
            self.set_alarm(now + CLOCK_RECHECK_MS)
            return
        sw = sweep(self.watch, self.workers, now)
        if sw.lost:
            self.stats.add(lost=len(sw.lost))
            for r in sw.lost:
                self.sent.pop(r.fire_id, None)
            self._add(sw.lost)
        self._settle(sw.on_lost_workers)
        flush_at = self.results_first + (0 if self.drain is not None else RESULTS_FLUSH_MS)
        while self.results and (len(self.results) >= MAX_PROPOSAL_ITEMS or now >= flush_at):
            self._flush(now)
        deadlines = [d for d in (sw.next_at, self.results_first + RESULTS_FLUSH_MS if self.results else None)
                     if d is not None]
        rep = (self.watch.in_flight, self.own_seen)
        lost_workers = self.workers.take_lost()
        if (rep != self.reported or self.reports or lost_workers != self.lost_told or self.fire_ends) and self.refs is not None:
            if now >= self.report_at:  # at most one InFlight per INFLIGHT_EVERY_MS
                self.reported = rep
                self.lost_told = lost_workers
                self.report_at = now + INFLIGHT_EVERY_MS
                self.tell(self.refs.dispatcher, InFlight(
                    *rep, reports=tuple(self.reports.items()), lost=lost_workers, ended=tuple(self.fire_ends)))
                self.reports = {}
                self.fire_ends = []
            else:
                deadlines.append(self.report_at)
        if self.drain is not None and not self.drain_answered:
            self._drain_check()
            if not self.drain_answered:
                deadlines.append(now + DRAIN_POLL_MS)
        self.set_alarm(min(deadlines) if deadlines else None)

    def _drain_check(self) -> None:
        d = self.drain
        if d is None or self.drain_answered:
            return
        if (not self.sent and not self.results and self.pending == 0) or time.monotonic() >= d.until:
            self.drain_answered = True
            log.info("leader scheduler drained term=%d unanswered=%d", self.ctx.term, len(self.sent))
            d.done.set(len(self.sent))

    def _flush(self, now: int) -> None:
        items, self.results = self.results[:MAX_PROPOSAL_ITEMS], self.results[MAX_PROPOSAL_ITEMS:]
        if self.results:
            self.results_first = now
        if any(it.not_sent for it in items) and not self.ctx.replicas_read(NOT_SENT_VERSION):
            # a replica of the release before would count them as attempts where this one does not
            items = [msgspec.structs.replace(it, not_sent=False) if it.not_sent else it for it in items]
        self.pending += 1
        self.ctx.propose(Results(now, tuple(items), self.ctx.replicas_read(RESUME_TRIGGER_VERSION)),
                         self.outcome_to_self(lambda _res, err: ResultsProposed(items, err, now)))

    def _trace_results(self, m: ResultsProposed) -> None:
        """``molens.result`` spans for the committed results of traced tasks (``tracing.otlp_endpoint``)."""
        end_ns = time.time_ns()
        for it in m.items:
            t = self.ctx.store.get_task(it.fire_id.rpartition("-")[0])
            tp = t.spec.traceparent if t is not None else None
            if tp is None or it.attempt is None:
                continue
            attrs: dict[str, Any] = {"molens.fire_id": it.fire_id, "molens.attempt": it.attempt,
                                     "molens.outcome": it.outcome.value, "molens.leader": self.ctx.node_id}
            if it.status_code is not None:
                attrs["http.response.status_code"] = it.status_code
            self.ctx.spans.result(tp, it.fire_id, it.kind.value, it.attempt, m.proposed_ms * 1_000_000, end_ns, attrs)


__all__ = [
    "CONGESTION_STATUSES", "HELD_GRACE_MS", "congested", "RESULTS_FLUSH_MS", "FireWatch", "Monitor", "Sweep", "WorkerWatch",
    "sweep",
]
