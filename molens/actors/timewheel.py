"""TimeWheel: the leader actor that owns the time wheel of task ids keyed by their next due time.

Owns a :class:`LeaderWheel` (a :class:`~molens.schedule.wheel.TimeWheel` of task ids).
Receives: ``Rebuild`` (first, after ``Join``: stream the store's ``due`` index in), ``Applied``
(entries applied on this node, from the Raft thread), ``Requeue`` (from the Dispatcher), ``Wake``
(its alarm), ``ReadWheel`` / ``GetGauges`` (ask). Sends: ``DueBatch`` to the Dispatcher (tasks due
within ``scheduler.dispatch_lead_ms``), ``Committed`` to the Monitor and the Dispatcher (the fire
effects of applied ``Dispatched`` entries, split by term). Runs on its own pykka thread, which
sleeps until the wheel's next deadline minus the lead (its alarm): never a busy tick, and it
advances at most once per ``scheduler.tick_ms``, so timers due within one tick go to the Dispatcher
as one ``DueBatch`` (the workers still hold each fire until its own due time).

``Applied`` messages that arrive while the rebuild streams wait in the mailbox and are applied
afterwards, in log order, so the last word on every key wins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from molens.actors.alarm import wall_ms
from molens.actors.messages import Applied, Committed, DueBatch, ReadWheel, Rebuild, Requeue, Wake
from molens.actors.term import LeaderActor, TermContext
from molens.fsm.machine import Effect, FireRequest, WheelAdd, WheelRemove
from molens.schedule.wheel import BucketStat
from molens.schedule.wheel import TimeWheel as Wheel

log = logging.getLogger(__name__)

STOP_CHECK_EVERY = 4096
"""The rebuild looks at the term-over flag this often (items): a deposed leader stops rebuilding."""


class LeaderWheel:
    """Task ids keyed by their next due time (callback, retry or ACK probe)."""

    def __init__(self, tick_ms: int, now_ms: int) -> None:
        self.wheel: Wheel[str] = Wheel(tick_ms=tick_ms, start_ms=now_ms)
        self.rebuild_ms = 0.0

    def rebuild(self, due: Iterator[tuple[int, str]]) -> int:
        """Add every ``(due_ms, task_id)``; returns how many (streaming, no list of everything)."""
        t0 = time.monotonic()
        add = self.wheel.add
        n = 0
        for due_ms, tid in due:
            add(tid, due_ms)
            n += 1
        self.rebuild_ms = (time.monotonic() - t0) * 1000
        return n

    def apply(self, effects: Iterable[Effect]) -> None:
        """Wheel adds/removes of applied entries (other effects are ignored here)."""
        w = self.wheel
        for e in effects:
            if isinstance(e, WheelAdd):
                w.add(e.key, e.due_ms)
            elif isinstance(e, WheelRemove):
                w.remove(e.key)

    def __len__(self) -> int:
        return len(self.wheel)

    def add(self, task_id: str, due_ms: int) -> None:
        self.wheel.add(task_id, due_ms)

    def advance(self, now_ms: int) -> list[str]:
        return self.wheel.advance(now_ms)

    def next_deadline(self) -> int | None:
        return self.wheel.next_deadline()

    def distribution(self, level: int) -> list[BucketStat]:
        return self.wheel.distribution(level)


def _until(it: Iterator[Any], stop: Any) -> Iterator[Any]:
    for n, x in enumerate(it):
        if n % STOP_CHECK_EVERY == 0 and stop():
            return
        yield x


class TimeWheel(LeaderActor):
    """The leader's time wheel actor (see the module docstring)."""

    name = "timewheel"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.wheel: LeaderWheel | None = None
        self.lead_ms = ctx.cfg.dispatch_lead_ms
        self.tick_ms = ctx.cfg.tick_ms
        self.next_advance_ms = 0

    def handle(self, message: Any) -> Any:
        if isinstance(message, Applied):
            self._applied(message)
        elif isinstance(message, Wake):
            pass
        elif isinstance(message, Requeue):
            if self.wheel is not None:
                for tid in message.task_ids:
                    self.wheel.add(tid, message.due_ms)
        elif isinstance(message, Rebuild):
            self._rebuild()
        elif isinstance(message, ReadWheel):
            return None if self.wheel is None else message.fn(self.wheel.wheel)
        else:
            return super().on_receive(message)
        self._advance()
        return None

    def gauges(self) -> dict[str, Any]:
        w = self.wheel
        return {} if w is None else {"wheel_size": len(w), "overflow": w.wheel.overflow_count}

    def _rebuild(self) -> None:
        ctx = self.ctx
        wheel = LeaderWheel(ctx.cfg.tick_ms, wall_ms())
        n = wheel.rebuild(_until(ctx.store.scan_due(), lambda: self.ended))
        self.wheel = wheel
        self.stats.gauge(rebuild_tasks=n, rebuild_ms=round(wheel.rebuild_ms, 1), term=ctx.term)
        log.info("wheel rebuilt term=%d tasks=%d in %.0f ms", ctx.term, n, wheel.rebuild_ms)

    def _applied(self, msg: Applied) -> None:
        wheel = self.wheel
        assert wheel is not None, "Applied before Rebuild"
        own: list[FireRequest] = []
        other: list[FireRequest] = []
        term = self.ctx.term
        for er in msg.entries:
            wheel.apply(er.effects)
            for e in er.effects:
                if isinstance(e, FireRequest):
                    (own if er.term == term else other).append(e)
        if (own or other) and self.refs is not None:
            c = Committed(own, other)
            self.tell(self.refs.monitor, c)  # the Monitor first: it watches before any result arrives
            if own:
                self.tell(self.refs.dispatcher, c)

    def _advance(self) -> None:
        wheel = self.wheel
        if wheel is None or self.ended or self.refs is None:
            return
        now = wall_ms()
        if now >= self.next_advance_ms:
            due = wheel.advance(now + self.lead_ms)
            self.next_advance_ms = now + self.tick_ms
            if due:
                self.tell(self.refs.dispatcher, DueBatch(due))
        nd = wheel.next_deadline()
        # at most one advance (one DueBatch) per tick: timers due within a tick travel together
        self.set_alarm(None if nd is None else max(nd - self.lead_ms, self.next_advance_ms))


__all__ = ["LeaderWheel", "TimeWheel"]
