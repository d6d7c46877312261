"""The leader actors' common base (molens/actors/term.py): a message none of them knows."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from molens.actors.cleaner import Cleaner
from molens.actors.dispatcher import Dispatcher
from molens.actors.messages import GetGauges
from molens.actors.monitor import Monitor
from molens.actors.stats import Stats, StatsClient
from molens.actors.term import TermContext
from molens.actors.timewheel import TimeWheel
from molens.config import SchedulerConfig
from molens.fsm.store import TaskStore


@pytest.mark.parametrize("actor", [Monitor, Dispatcher, TimeWheel, Cleaner], ids=lambda a: a.__name__)
def test_a_leader_actor_drops_a_message_it_does_not_know_and_keeps_working(actor: Any, tmp_path: Path) -> None:
    failed: list[BaseException] = []
    stats = Stats.start()
    ctx = TermContext(
        node_id="n1", term=1, cfg=SchedulerConfig(), store=TaskStore(tmp_path, durable=False),
        propose_batch=lambda cmds, done: None, stats=StatsClient(stats), send_fires=lambda groups: {},
        local_free=lambda: 0, fatal=failed.append, ended=threading.Event(),
    )
    ref = actor.start(ctx)
    try:
        assert ref.ask(object(), timeout=10) is None  # it recursed until RecursionError
        ref.tell(object())  # told, a failure would stop the actor and end the term (fatal)
        assert f"{actor.name}_messages" in ref.ask(GetGauges(), timeout=10)
        assert failed == []
    finally:
        ref.stop()
        stats.stop()
