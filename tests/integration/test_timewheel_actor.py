"""The TimeWheel actor on its own thread, with a stand-in Dispatcher: timers due within one tick
reach the Dispatcher as one DueBatch (a message per tick, not per timer), every timer exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pykka
import pytest

from molens.actors.alarm import wall_ms
from molens.actors.messages import DueBatch, GetGauges, Join, LeaderRefs, Rebuild, WheelEffects
from molens.actors.stats import Stats, StatsClient
from molens.actors.term import TermContext
from molens.actors.timewheel import TimeWheel
from molens.config import SchedulerConfig
from molens.fsm.commands import CreateItem, CreateTasks, encode
from molens.fsm.machine import WheelAdd, WheelRemove
from molens.fsm.store import TaskStore
from molens.model import new_task_id, validate_create

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
    def read_due(self, start: Any, until_ms: int, limit: int) -> list[tuple[int, str]]:
        return []


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
        wheel.tell(Join(LeaderRefs(term=1, wheel=wheel, dispatcher=sink, monitor=sink, cleaner=sink, notifier=sink)))
        wheel.tell(Rebuild())
        start = wall_ms() + 50
        n = 200  # one timer per millisecond for 200 ms: 20 ticks of 10 ms
        effects: list[WheelAdd | WheelRemove] = [WheelAdd(key=f"t{i}", due_ms=start + i) for i in range(n)]
        wheel.tell(WheelEffects(effects))
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


def test_the_wheel_holds_only_the_horizon_and_the_loader_brings_the_rest_in_time(tmp_path: Path) -> None:
    """A real lmdb store: 1,500 tasks due from 0.3 s to 3.3 s with a 1 s horizon. The wheel never
    holds the whole store, every task reaches the Dispatcher exactly once, and
    creates applied while the actor runs (some at the window's edge) join the right side."""
    cfg = SchedulerConfig(tick_ms=10, dispatch_lead_ms=0, wheel_horizon_ms=1_000)
    store = TaskStore(tmp_path, durable=False)
    now = wall_ms()
    spec = validate_create({"type": "delayed", "interval_ms": 0, "callback_url": "http://127.0.0.1:9/x"}, now_ms=now)
    due = {new_task_id(now, i): now + 300 + i * 2 for i in range(1_500)}  # 3 s of timers
    # interval 0: each create, stamped with its task's due time, is due at once
    store.apply_batch([(i + 1, encode(CreateTasks(d, (CreateItem(tid, spec),)))) for i, (tid, d) in enumerate(due.items())])
    assert len(list(store.scan_due())) == 1_500
    stats_ref = Stats.start()
    sink = Collector.start()
    ctx = TermContext(
        node_id="n1", term=1, cfg=cfg, store=store, propose_batch=lambda _d, _cb: None,
        stats=StatsClient(stats_ref), send_fires=lambda g: {}, local_free=lambda: 0, fatal=lambda _e: None,
        ended=threading.Event(),
    )
    wheel = TimeWheel.start(ctx)
    sizes: list[int] = []
    try:
        wheel.tell(Join(LeaderRefs(term=1, wheel=wheel, dispatcher=sink, monitor=sink, cleaner=sink, notifier=sink)))
        wheel.tell(Rebuild())
        late: dict[str, int] = {}
        end = time.monotonic() + 20
        got: set[str] = set()
        n_late = 0
        while time.monotonic() < end:
            g = wheel.ask(GetGauges(), timeout=5)
            sizes.append(g["wheel_size"])
            if n_late < 3:  # creates racing the loader: one inside, one at and one beyond its edge
                edge = g["wheel_loaded_until_ms"]
                for off in (-1, 0, 1):
                    tid = f"late{n_late}{off}"
                    late[tid] = edge + off
                    wheel.tell(WheelEffects([WheelAdd(tid, edge + off)]))
                n_late += 1
            got = {tid for m in sink.ask("got") if isinstance(m, DueBatch) for tid in m.task_ids}
            if len(got) >= len(due) + 3:
                break
            time.sleep(0.05)
        batches = [m for m in sink.ask("got") if isinstance(m, DueBatch)]
        ids = [tid for m in batches for tid in m.task_ids]
        assert sorted(tid for tid in ids if tid in due) == sorted(due)  # each exactly once
        # the ones inside the window when told are in it; the others are in the index only (this
        # test's store does not have them: a real store would, and a slice would read them)
        inside = {tid for tid, d in late.items() if tid.endswith("-1")}
        assert inside <= set(ids)
        assert max(sizes) < 1_500 * 0.6, max(sizes)  # ~1 s + a top-up of the 3 s, not the whole store
        g = wheel.ask(GetGauges(), timeout=5)
        assert g["wheel_size_max"] < 1_500 * 0.6 and g["wheel_slices"] > 1
    finally:
        wheel.stop()
        sink.stop()
        stats_ref.stop()
        store.close()
