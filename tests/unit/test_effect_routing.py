"""Applied entries' effects go from the Raft thread straight to the one leader actor that uses each:
timer changes to the wheel, fire effects to the Monitor, flow settings to the Dispatcher. Nothing is
relayed, and the Dispatcher (which learns of its own fires from its proposal's outcome) is not told
of them a second time."""

from __future__ import annotations

import threading
from typing import Any

from molens.actors.messages import Committed, FlowsChanged, LeaderRefs, WheelEffects
from molens.actors.peer_messages import LeaderChange
from molens.actors.supervisor import LeaderSupervisor, _Term, route_effects
from molens.config import SchedulerConfig
from molens.fsm.machine import FireRecord, FlowSet, SendFire, WheelAdd, WheelRemove
from molens.fsm.store import EntryResult
from molens.model import FireKind
from molens.schedule.horizon import HorizonWheel, Reach
from molens.schema import Reliability


class Inbox:
    """Stands in for an actor ref: keeps what it is told."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def tell(self, message: Any) -> None:
        self.got.append(message)


def _fire(fid: str, term: int) -> SendFire:
    f = FireRecord(fire_id=fid, task_id=fid, kind=FireKind.CALLBACK, attempt=1, worker="n1", deadline_ms=9, dispatched_ms=1)
    return SendFire(fire=f, url="http://127.0.0.1:9/x", body=b"", scene="", timeout_ms=1_000,
                       reliability=Reliability.AT_LEAST_ONCE)


def _entries() -> list[EntryResult]:
    return [
        EntryResult(index=7, term=3, results=[], effects=[_fire("old", 3), WheelRemove("t0")]),
        EntryResult(index=8, term=4, results=[None], effects=[WheelAdd("t1", 5), _fire("new", 4)]),
        EntryResult(index=9, term=4, results=[], effects=[FlowSet("f1", None), WheelRemove("t1")]),
    ]


def test_effects_are_split_by_the_actor_that_uses_them_in_log_order() -> None:
    r = route_effects(_entries(), term=4)
    assert r.wheel == [WheelRemove("t0"), WheelAdd("t1", 5), WheelRemove("t1")]
    assert [e.fire.fire_id for e in r.own] == ["new"]
    assert [e.fire.fire_id for e in r.other] == ["old"]
    assert r.flows == (("f1", None),)


def test_each_leader_actor_hears_only_the_effects_it_uses_and_the_dispatcher_no_fire_twice() -> None:
    wheel, dispatcher, monitor, cleaner, notifier = Inbox(), Inbox(), Inbox(), Inbox(), Inbox()
    sup = LeaderSupervisor(
        node_id="n1", cfg=SchedulerConfig(), store=None,  # type: ignore[arg-type]
        propose_batch=lambda _d, _cb: None, stats=None, pool=None,  # type: ignore[arg-type]
        send_fires=lambda _g, _t: {}, local_free=lambda: 0, fatal=lambda _e: None,
    )
    refs = LeaderRefs(term=4, wheel=wheel, dispatcher=dispatcher, monitor=monitor,  # type: ignore[arg-type]
                      cleaner=cleaner, notifier=notifier)  # type: ignore[arg-type]
    sup._term = _Term(refs, threading.Event())
    sup.on_applied(_entries())
    assert wheel.got == [WheelEffects([WheelRemove("t0"), WheelAdd("t1", 5), WheelRemove("t1")])]
    assert [type(m) for m in monitor.got] == [Committed]
    c = monitor.got[0]
    assert [e.fire.fire_id for e in c.own] == ["new"] and [e.fire.fire_id for e in c.other] == ["old"]
    assert dispatcher.got == [FlowsChanged((("f1", None),))]  # its fires come with its proposal's outcome
    assert cleaner.got == [] and notifier.got == []


def test_a_new_task_due_beyond_what_the_wheel_has_read_is_left_out_of_its_effects() -> None:
    reach = Reach()
    reach.ms = 100
    entries = [EntryResult(index=1, term=4, results=[], effects=[
        WheelAdd("new-beyond", 100, new=True), WheelAdd("new-within", 99, new=True),
        WheelAdd("moved-beyond", 5_000), WheelRemove("gone")])]
    r = route_effects(entries, term=4, reach=reach)
    # a key the wheel may hold is always told (its add takes it out); a new one only inside the reach
    assert r.wheel == [WheelAdd("new-within", 99, new=True), WheelAdd("moved-beyond", 5_000), WheelRemove("gone")]
    assert route_effects(entries, term=4).wheel[0] == WheelAdd("new-beyond", 100, new=True)  # no reach: all


def test_a_load_raises_the_reach_before_it_reads_and_start_never_passes_it() -> None:
    """A new key left out of the effects (due at or past the reach, read after its entry committed)
    must be read by a load: so the reach is raised to what a load reads up to before it reads."""
    index = [(500, "a"), (900, "b"), (1_500, "late")]
    seen: list[tuple[int, int]] = []

    def read(start: tuple[int, str], until: int, limit: int) -> list[tuple[int, str]]:
        seen.append((w.reach.ms, until))
        return sorted(e for e in index if e >= start and e[0] < until)[:limit]

    w = HorizonWheel(10, 0, 1_000, slice_limit=1)
    for now in (0, 0, 0, 600, 600):
        w.load(read, now)
        assert w.start <= (w.reach.ms, "")
    assert seen and all(reach >= until for reach, until in seen)
    assert not w.reach.wants(1_600, True) and w.reach.wants(1_599, True) and w.reach.wants(9_999, False)
    assert "late" in w.wheel


class Stoppable(Inbox):
    """An actor ref that also records its stop."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False

    def stop(self, block: bool = True) -> None:
        self.stopped = True


def test_a_stale_subscription_answer_does_not_stop_the_term_a_newer_change_started() -> None:
    """The scheduler subscribes while the node is a candidate and acts on the answer on its own
    thread; meanwhile the Raft thread delivers "leader" and the term's actors start. The stale
    "candidate" answer, acted on after, stopped them while the node still led: a leader that
    scheduled nothing (found by CI: no dead letter in 60 s). Changes carry their sequence now."""
    refs: list[LeaderRefs] = []

    def start(term: int, heard: Any = ()) -> _Term:
        r = LeaderRefs(term=term, wheel=Stoppable(), dispatcher=Stoppable(), monitor=Stoppable(),  # type: ignore[arg-type]
                       cleaner=Stoppable(), notifier=Stoppable())  # type: ignore[arg-type]
        refs.append(r)
        return _Term(r, threading.Event())

    sup = LeaderSupervisor(
        node_id="n1", cfg=SchedulerConfig(), store=None,  # type: ignore[arg-type]
        propose_batch=lambda _d, _cb: None, stats=None, pool=Inbox(),  # type: ignore[arg-type]
        send_fires=lambda _g, _t: {}, local_free=lambda: 0, fatal=lambda _e: None,
    )
    sup._start = start  # type: ignore[method-assign]
    answer = LeaderChange("n1", "candidate", None, 2, seq=2)  # what Subscribe answered
    sup.on_leader_change(LeaderChange("n1", "leader", "n1", 2, seq=3))  # delivered first, on the Raft thread
    sup.on_leader_change(answer)  # then the starting thread acts on the answer
    assert sup.current is refs[0] and not refs[0].wheel.stopped  # type: ignore[attr-defined]
    sup.on_leader_change(LeaderChange("n1", "follower", "n2", 3, seq=4))  # a real change still ends the term
    assert sup.current is None and refs[0].wheel.stopped  # type: ignore[attr-defined]
