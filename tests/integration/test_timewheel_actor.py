"""The TimeWheel actor on its own thread, with a stand-in Dispatcher: timers due within one tick
reach the Dispatcher as one DueBatch (a message per tick, not per timer), every timer exactly once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
import pytest

from molens.actors.alarm import wall_ms
from molens.actors.messages import Applied, DueBatch, Join, LeaderRefs, Rebuild
from molens.actors.stats import Stats, StatsClient
from molens.actors.term import TermContext
from molens.actors.timewheel import TimeWheel
from molens.config import SchedulerConfig
from molens.fsm.machine import WheelAdd
from molens.fsm.store import EntryResult

pytestmark = pytest.mark.integration


class Collector(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "got":
            return list(self.got)
        self.got.append(message)
        return None


class NoStore:
    def scan_due(self) -> Any:
        return iter(())


def test_timers_due_within_a_tick_travel_as_one_due_batch() -> None:
    cfg = SchedulerConfig(tick_ms=10, dispatch_lead_ms=0)
    stats_ref = Stats.start()
    sink = Collector.start()
    ctx = TermContext(
        node_id="n1", term=1, cfg=cfg, store=NoStore(), propose_batch=lambda _d, _cb: None,  # type: ignore[arg-type]
        stats=StatsClient(stats_ref), send_fires=lambda g: {}, local_free=lambda: 0, fatal=lambda _e: None,
        ended=threading.Event(),
    )
    wheel = TimeWheel.start(ctx)
    try:
        wheel.tell(Join(LeaderRefs(term=1, wheel=wheel, dispatcher=sink, monitor=sink, cleaner=sink)))
        wheel.tell(Rebuild())
        start = wall_ms() + 50
        n = 200  # one timer per millisecond for 200 ms: 20 ticks of 10 ms
        effects = [WheelAdd(key=f"t{i}", due_ms=start + i) for i in range(n)]
        wheel.tell(Applied([EntryResult(index=1, term=1, results=[], effects=effects)]))  # type: ignore[list-item]
        end = time.monotonic() + 10
        while time.monotonic() < end:
            got = [m for m in sink.ask("got") if isinstance(m, DueBatch)]
            if sum(len(m.task_ids) for m in got) >= n:
                break
            time.sleep(0.02)
        ids = [tid for m in got for tid in m.task_ids]
        assert sorted(ids) == sorted(f"t{i}" for i in range(n))  # each exactly once
        # one message per tick (20 ticks, and a few more if the machine is slow to wake); one per
        # timer would be 200
        assert len(got) <= n // 10 + 5, len(got)
    finally:
        wheel.stop()
        sink.stop()
        stats_ref.stop()
