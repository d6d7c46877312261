"""Monitor: the leader actor that owns every fire in flight until its result is committed.

Owns a :class:`FireWatch` (deadline heap of fires with no result) and the results buffer.
Receives: ``Rebuild`` (first: watch the fires in ``fires`` when the term began, ``machine.reconcile_on_leadership``),
``Committed`` (TimeWheel: fire effects of applied ``Dispatched`` entries of any term),
``FireResults`` (workers' results, local or over RPC; the Dispatcher's unsendable fires),
``ResultsProposed`` (outcome of its ``Results`` proposals, from the Raft thread), ``Drain``,
``Wake`` (its alarm), ``GetGauges`` (ask). Sends: ``Results`` proposals (at most
``MAX_PROPOSAL_ITEMS`` items, at most ``RESULTS_FLUSH_MS`` after the first buffered result) and
``InFlight`` to the Dispatcher. Runs on its own pykka thread.

A watched fire with no result by its ``deadline_ms`` is a failed attempt (worker lost): the record
is re-read from the local replica and, if that same attempt is still in flight,
:func:`~molens.fsm.machine.lost_result` goes into the next batch. The machine then re-fires an
at_least_once fire (same fire id, next attempt) and records an at_most_once one as ``unknown``.
A ``Dispatched`` entry of a previous leader that commits in this term is never sent, and is given
up the same way.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from molens.actors.alarm import wall_ms
from molens.actors.dispatcher import MAX_PROPOSAL_ITEMS
from molens.actors.messages import (
    Committed,
    Drain,
    FireResults,
    InFlight,
    Rebuild,
    ResultsProposed,
    Wake,
)
from molens.actors.raft_peer import ProposalRefused
from molens.actors.term import LeaderActor, TermContext
from molens.fsm.commands import ResultItem, Results
from molens.fsm.machine import Fire, lost_result
from molens.model import FireKind

log = logging.getLogger(__name__)

RESULTS_FLUSH_MS = 10
"""A results batch is proposed at most this long after its first item (fewer, fuller Results
entries: the next occurrence of a periodic task is computed from its schedule, not from this)."""
INFLIGHT_EVERY_MS = 10
"""The Dispatcher hears the count of fires in flight at most this often (``InFlight``)."""
DRAIN_POLL_MS = 20
"""While draining, the Monitor looks at its drain deadline this often."""


class FireWatch:
    """Deadline heap of in-flight fires (pure apart from the store read it is given)."""

    def __init__(self, get_fire: Callable[[str], Fire | None]) -> None:
        self._get_fire = get_fire
        self._heap: list[tuple[int, str, int, FireKind]] = []
        self._open: dict[str, int] = {}
        """fire id -> attempt still waiting for a result (as far as this leader knows)."""
        self.lost = 0

    def watch(self, fires: Iterable[Fire]) -> None:
        for f in fires:
            self._open[f.fire_id] = f.attempt
            heapq.heappush(self._heap, (f.deadline_ms, f.fire_id, f.attempt, f.kind))

    def answered(self, fire_id: str) -> None:
        """A result for ``fire_id`` is on its way to the log: it no longer counts as in flight."""
        self._open.pop(fire_id, None)

    @property
    def in_flight(self) -> int:
        return len(self._open)

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
                    del self._open[fid]
                continue
            self._open.pop(fid, None)
            log.warning("monitor: fire=%s attempt=%d kind=%s worker=%s lost", fid, attempt, kind, cur.worker)
            out.append(lost_result(cur))
        self.lost += len(out)
        return out


class Monitor(LeaderActor):
    """The leader's monitor actor (see the module docstring)."""

    name = "monitor"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.watch = FireWatch(ctx.store.get_fire)
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
        self.reports: dict[str, int] = {}
        """Worker -> free capacity reported with results since the last ``InFlight``."""
        self.drain: Drain | None = None
        self.drain_answered = False

    def handle(self, message: Any) -> Any:
        if isinstance(message, FireResults):
            self._report(message)
            self._results_in(message.items)
        elif isinstance(message, Committed):
            self.watch.watch(e.fire for e in message.own)
            self.watch.watch(e.fire for e in message.other)
            for e in message.own:
                self.sent[e.fire.fire_id] = e.fire.attempt
            self.own_seen += len(message.own)
        elif isinstance(message, ResultsProposed):
            self.pending -= 1
            if message.error is not None:
                self.stats.add(proposals_failed=1)
                if isinstance(message.error, ProposalRefused):
                    self._add(message.items)
            else:
                self.stats.add(results_proposed=len(message.items))
        elif isinstance(message, Wake):
            pass
        elif isinstance(message, Rebuild):
            fires = list(self.ctx.store.scan_fires())
            self.watch.watch(fires)
            self.stats.gauge(rebuild_fires=len(fires))
        elif isinstance(message, Drain):
            self.drain = message
        else:
            return super().on_receive(message)
        self._pump()
        return None

    def gauges(self) -> dict[str, Any]:
        return {"fires_in_flight": self.watch.in_flight, "results_unproposed": len(self.results)}

    def _report(self, m: FireResults) -> None:
        if m.free is not None:
            self.reports[m.worker] = m.free

    def _results_in(self, items: list[ResultItem]) -> None:
        w, sent = self.watch, self.sent
        for it in items:
            w.answered(it.fire_id)
            sent.pop(it.fire_id, None)
        self.stats.add(results_received=len(items))
        self._add(items)

    def _add(self, items: list[ResultItem]) -> None:
        if not self.results:
            self.results_first = wall_ms()
        self.results.extend(items)

    def _pump(self) -> None:
        if self.ended:
            return
        now = wall_ms()
        lost = self.watch.due(now)
        if lost:
            self.stats.add(lost=len(lost))
            for r in lost:
                self.sent.pop(r.fire_id, None)
            self._add(lost)
        flush_at = self.results_first + (0 if self.drain is not None else RESULTS_FLUSH_MS)
        while self.results and (len(self.results) >= MAX_PROPOSAL_ITEMS or now >= flush_at):
            self._flush(now)
        deadlines = [d for d in (self.watch.next_deadline(), self.results_first + RESULTS_FLUSH_MS if self.results else None)
                     if d is not None]
        rep = (self.watch.in_flight, self.own_seen)
        if (rep != self.reported or self.reports) and self.refs is not None:
            if now >= self.report_at:  # at most one InFlight per INFLIGHT_EVERY_MS
                self.reported = rep
                self.report_at = now + INFLIGHT_EVERY_MS
                self.tell(self.refs.dispatcher, InFlight(*rep, reports=tuple(self.reports.items())))
                self.reports = {}
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
        self.pending += 1
        self.ctx.propose(Results(now, tuple(items)), self.outcome_to_self(lambda _res, err: ResultsProposed(items, err)))


__all__ = ["RESULTS_FLUSH_MS", "FireWatch", "Monitor"]
