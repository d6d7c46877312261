"""Alarm: tells an actor :class:`~molens.actors.messages.Wake` at a wall-clock deadline.

A pykka ``ThreadingActor`` blocks on its inbox with no timeout, so an actor that must act at a
time (the wheel's next slot, the Monitor's next fire deadline, the Cleaner's next scan) keeps one
Alarm: after each message it calls :meth:`Alarm.set` with its next deadline (or None). One small
thread per alarm sleeps on a condition until then and tells ``Wake()`` once; it never ticks.
Setting a new deadline replaces the old one, so the actor's own view is the only source of truth.
Deadlines are on the node's wall clock unless the alarm is given another (the ClockProbe's and the
fire worker's heartbeat run on :func:`mono_ms`: after the wall clock jumped back 15 s, a wall-clock
alarm would sleep 15 s before the probe could notice the jump, or the leader hear from the worker).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pykka

from molens.actors.messages import Wake
from molens.wallclock import wall_ms

log = logging.getLogger(__name__)

_WAKE = Wake()


def mono_ms() -> int:
    """The monotonic clock in ms, for alarms that must not follow the wall clock's steps."""
    return time.monotonic_ns() // 1_000_000


class Alarm:
    """One pending deadline (epoch ms, or ms on ``clock``) for one actor; see the module docstring."""

    def __init__(self, ref: pykka.ActorRef[Any], name: str, clock: Callable[[], int] = wall_ms) -> None:
        self._ref = ref
        self._clock = clock
        self._cv = threading.Condition()
        self._at: int | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"alarm-{name}", daemon=True)
        self._thread.start()

    def set(self, at_ms: int | None) -> None:
        """Wake the actor at ``at_ms`` (now if past); None: no wake-up wanted."""
        with self._cv:
            if at_ms == self._at:
                return
            earlier = at_ms is not None and (self._at is None or at_ms < self._at)
            self._at = at_ms
            if earlier:
                self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _run(self) -> None:
        with self._cv:
            while not self._closed:
                at = self._at
                if at is None:
                    self._cv.wait()
                    continue
                left = at - self._clock()
                if left > 0:
                    self._cv.wait(left / 1000)
                    continue
                self._at = None
                try:
                    self._ref.tell(_WAKE)
                except pykka.ActorDeadError:
                    return


__all__ = ["Alarm", "mono_ms", "wall_ms"]
