"""TimeWheel: the leader actor that owns the time wheel of task ids keyed by their next due time.

Owns a :class:`LeaderWheel`: a :class:`~molens.schedule.horizon.HorizonWheel`, which holds only the
timers due within ``scheduler.wheel_horizon_ms`` and is topped up from the store's ``due`` index in
slices (``docs/architecture.md#near-term-window``). Receives: ``Rebuild`` (first, after ``Join``: a
new window, loaded slice by slice), ``WheelEffects`` (the timer adds and removes of entries applied
on this node, from the Raft thread; nothing else: fire effects go to the Monitor and flow settings
to the Dispatcher straight from there), ``Requeue`` (from the Dispatcher), ``Wake`` (its alarm, or
itself between two slices), ``ReadWheel`` / ``GetGauges`` (ask). Sends: ``DueBatch`` to the
Dispatcher (tasks due within ``scheduler.dispatch_lead_ms``). Runs on its own pykka thread, which sleeps until
the wheel's next deadline minus the lead, or the next top-up of the window (its alarm): never a busy
tick, and it advances at most once per ``scheduler.tick_ms``, so timers due within one tick go to
the Dispatcher as one ``DueBatch`` (the workers still hold each fire until its own due time).

The loader stays off the fire path: a turn advances the wheel first and then reads at most one slice
(one lmdb cursor range, ``DEFAULT_SLICE_LIMIT`` entries); when more is wanted the actor tells itself
``Wake``, so ``WheelEffects`` and ``Requeue`` messages and the next advance interleave with the slices. A
new leader therefore fires the earliest timers after one slice, whatever the size of the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from molens.actors.alarm import wall_ms
from molens.actors.messages import (
    DueBatch,
    ReadWheel,
    Rebuild,
    Requeue,
    Wake,
    WheelEffects,
)
from molens.actors.term import LeaderActor, TermContext
from molens.fsm.machine import Effect, WheelAdd, WheelRemove
from molens.schedule.horizon import DEFAULT_SLICE_LIMIT, HorizonWheel, Reach, ReadSlice
from molens.schedule.wheel import BucketStat
from molens.schedule.wheel import HierarchicalWheel as Wheel

log = logging.getLogger(__name__)


class LeaderWheel:
    """Task ids keyed by their next due time (callback, retry or ACK probe), within the horizon."""

    def __init__(self, tick_ms: int, now_ms: int, horizon_ms: int, slice_limit: int = DEFAULT_SLICE_LIMIT,
                 reach: Reach | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.window = HorizonWheel(tick_ms, now_ms, horizon_ms, slice_limit, reach)
        self.wheel: Wheel[str] = self.window.wheel
        self.rebuild_ms: float | None = None
        """How long the first fill of the window took by ``monotonic`` (None while it runs)."""
        self._monotonic = monotonic
        self._t0 = monotonic()

    def load(self, read: ReadSlice, now_ms: int) -> bool:
        """One slice into the window; True while more is wanted now."""
        w = self.window
        w.load(read, now_ms)
        more = w.load_wanted(now_ms)
        if not more and self.rebuild_ms is None:
            self.rebuild_ms = (self._monotonic() - self._t0) * 1000
        return more

    def fill(self, read: ReadSlice, now_ms: int) -> int:
        """Load slices until the window covers the horizon (benchmarks, tests); returns how many timers."""
        n = self.window.loaded
        while self.window.load_wanted(now_ms):
            self.load(read, now_ms)
        return self.window.loaded - n

    def apply(self, effects: Iterable[Effect]) -> None:
        """Wheel adds/removes of applied entries (other effects are ignored here)."""
        w = self.window
        for e in effects:
            if isinstance(e, WheelAdd):
                w.add(e.key, e.due_ms)
            elif isinstance(e, WheelRemove):
                w.remove(e.key)

    def __len__(self) -> int:
        return len(self.wheel)

    def requeue(self, task_id: str, due_ms: int) -> None:
        self.window.requeue(task_id, due_ms)

    def advance(self, now_ms: int) -> list[str]:
        return self.wheel.advance(now_ms)

    def next_deadline(self) -> int | None:
        return self.wheel.next_deadline()

    def distribution(self, level: int) -> list[BucketStat]:
        return self.wheel.distribution(level)


class TimeWheel(LeaderActor):
    """The leader's time wheel actor (see the module docstring)."""

    name = "timewheel"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.wheel: LeaderWheel | None = None
        self.lead_ms = ctx.cfg.dispatch_lead_ms
        self.tick_ms = ctx.cfg.tick_ms
        self.next_advance_ms = 0
        self.loading = False

    def handle(self, message: Any) -> Any:
        if isinstance(message, WheelEffects):
            assert self.wheel is not None, "WheelEffects before Rebuild"
            self.wheel.apply(message.effects)
        elif isinstance(message, Wake):
            pass
        elif isinstance(message, Requeue):
            if self.wheel is not None:
                for tid in message.task_ids:
                    self.wheel.requeue(tid, message.due_ms)
        elif isinstance(message, Rebuild):
            self._rebuild()
        elif isinstance(message, ReadWheel):
            return None if self.wheel is None else message.fn(self.wheel.wheel)
        else:
            return self.unexpected(message)
        self._advance()
        return None

    def gauges(self) -> dict[str, Any]:
        w = self.wheel
        if w is None:
            return {}
        win = w.window
        return {
            "wheel_size": len(w), "wheel_size_max": win.max_size, "overflow": w.wheel.overflow_count,
            "wheel_horizon_ms": win.horizon_ms, "wheel_loaded_until_ms": win.loaded_until_ms,
            "wheel_slices": win.slices, "wheel_loaded": win.loaded,
        }

    def _rebuild(self) -> None:
        self.wheel = LeaderWheel(self.tick_ms, wall_ms(), self.ctx.cfg.wheel_horizon_ms, reach=self.ctx.reach)
        self.loading = True

    def _load(self, now: int) -> bool:
        """One slice if the window wants one; True while it wants more at once."""
        wheel = self.wheel
        assert wheel is not None
        if not wheel.window.load_wanted(now):
            return False
        more = wheel.load(self.ctx.store.read_due, now)
        if self.loading and not more:
            self.loading = False
            win = wheel.window
            self.stats.gauge(rebuild_tasks=win.loaded, rebuild_ms=round(wheel.rebuild_ms or 0.0, 1), term=self.ctx.term)
            log.info("wheel window loaded term=%d tasks=%d slices=%d until=%d in %.0f ms", self.ctx.term,
                     win.loaded, win.slices, win.loaded_until_ms, wheel.rebuild_ms or 0.0)
        return more

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
        more = self._load(now)  # after the advance: the loader never delays a due batch
        if more:
            self.tell(self.actor_ref, Wake())  # the next slice after what is queued now
        nd = wheel.next_deadline()
        # at most one advance (one DueBatch) per tick: timers due within a tick travel together
        at = None if nd is None else max(nd - self.lead_ms, self.next_advance_ms)
        if not more:
            top_up = wheel.window.next_load_ms()
            at = top_up if at is None or top_up < at else at
        self.set_alarm(at)


__all__ = ["LeaderWheel", "TimeWheel"]
