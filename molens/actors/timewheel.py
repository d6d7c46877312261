"""The leader's time wheel shell: a :class:`~molens.schedule.wheel.TimeWheel` fed by FSM effects.

Owned by one thread, the leader session's loop (see :mod:`molens.scheduler`), which sleeps until
:meth:`LeaderWheel.next_deadline` -- never a busy tick. A new leader rebuilds it by streaming the
store's ``due`` index (:meth:`LeaderWheel.rebuild`); effects applied meanwhile are queued by the
session and applied afterwards in log order, so the last word on every key wins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator

from molens.fsm.machine import Effect, WheelAdd, WheelRemove
from molens.schedule.wheel import BucketStat, TimeWheel

log = logging.getLogger(__name__)


class LeaderWheel:
    """Task ids keyed by their next due time (callback, retry or ACK probe)."""

    def __init__(self, tick_ms: int, now_ms: int) -> None:
        self.wheel: TimeWheel[str] = TimeWheel(tick_ms=tick_ms, start_ms=now_ms)
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
        log.info("wheel rebuilt tasks=%d in %.0f ms", n, self.rebuild_ms)
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


__all__ = ["LeaderWheel"]
