"""A fire that never left its node uses up no attempt (docs/architecture.md#not-sent): the state
machine plans it again after 200 ms doubling to 5 s, never before its planned time, with no history
row; the result carries ``not_sent`` on the wire (an extra field an older node's frames lack) and in
the replicated ``Results`` item; the leader's Monitor counts it."""

from __future__ import annotations

import dataclasses
import threading
import time
from types import SimpleNamespace
from typing import Any

import msgpack
import msgspec
import pytest

from molens.actors.dispatcher import with_attempt
from molens.actors.messages import FireResults
from molens.actors.monitor import Monitor
from molens.actors.peer_state import Standing
from molens.actors.stats import COUNTERS, Stats, StatsClient
from molens.actors.term import TermContext
from molens.config import SchedulerConfig
from molens.delivery import (
    FIRE_BATCH_VERSION,
    NOT_SENT_VERSION,
    DeliveryCodecError,
    DeliveryOutcome,
    FireResult,
    decode_fire_results,
    encode_fire_results,
    split_unsent,
    to_result_item,
)
from molens.fsm.commands import (
    Dispatched,
    DispatchItem,
    PauseTasks,
    ResultItem,
    Results,
    ResumeTasks,
)
from molens.fsm.machine import SendFire, not_sent_wait_ms
from molens.fsm.store import fire_from_bytes, fire_to_bytes
from molens.model import ExecutionResult, FireKind, Outcome, Status
from molens.scheduler import Scheduler
from tests.unit.test_fsm_machine import H as MachineDriver


class H(MachineDriver):
    """test_fsm_machine's driver, and: plan the task's next fire (maybe ahead), answer it sent or not."""

    def plan(self, tid: str, ahead_ms: int = 0) -> SendFire:
        """Dispatch the task's next fire ``ahead_ms`` before its due time (moving the clock there)."""
        t = self.t(tid)
        action = t.next_action()
        assert action is not None, t
        fire_id, attempt, due = action
        self.now = max(self.now, due - ahead_ms)
        out = self.s.apply(Dispatched(self.now, (DispatchItem(
            fire_id=fire_id, task_id=tid, attempt=attempt, worker="w1", deadline_ms=self.now + 10_000),)))
        assert out.results == [None], out.results
        reqs = [e for e in out.effects if isinstance(e, SendFire)]
        assert len(reqs) == 1
        return reqs[0]

    def reply(self, fr: SendFire, code: int | None = 500, not_sent: bool = False, after_ms: int = 10,
               attempt: int | None = -1) -> Any:
        self.now += after_ms
        f = fr.fire
        return self.s.apply(Results(self.now, (ResultItem(
            fire_id=f.fire_id, kind=f.kind, status_code=None if not_sent else code,
            outcome=Outcome.NETWORK_ERROR if not_sent else Outcome.RESPONSE, response_head=None, latency_ms=0,
            worker="w1", attempt=f.attempt if attempt == -1 else attempt, not_sent=not_sent,
        ),))).results[0]


@pytest.fixture
def h() -> H:
    return H()


def test_a_not_sent_fire_uses_up_no_retry_and_leaves_no_history_row(h: H) -> None:
    t = h.create(max_retries=1)
    for _ in range(5):  # five times not sent: more than max_retries + 1 attempts planned
        h.reply(h.plan(t.id), not_sent=True)
    assert h.t(t.id).status is Status.FIRING and h.s.executions == []
    h.reply(h.plan(t.id), code=500)  # the first attempt really sent
    assert h.t(t.id).status is Status.FIRING  # one retry left
    h.reply(h.plan(t.id), code=500)
    t2 = h.t(t.id)
    assert t2.status is Status.FAILED and t2.attempt == 7 and t2.free_attempts == 5
    assert [(e.attempt, e.result) for e in h.s.executions] == [(6, ExecutionResult.FAILED), (7, ExecutionResult.FAILED)]
    assert [d.kind.value for d in h.s.dead.values()] == ["retries_exhausted"]


def test_not_sent_waits_200_ms_doubling_to_5_s_and_a_sent_attempt_starts_again(h: H) -> None:
    t = h.create(max_retries=3)
    waits = []
    for _ in range(7):
        h.reply(h.plan(t.id), not_sent=True, after_ms=10)
        due = h.t(t.id).due_ms
        assert due is not None
        waits.append(due - h.now)
    assert waits == [200, 400, 800, 1600, 3200, 5000, 5000]
    assert h.t(t.id).not_sent == 7
    h.reply(h.plan(t.id), code=500)  # sent: its retry follows the retry policy (1 s)
    assert h.t(t.id).not_sent == 0 and h.t(t.id).due_ms == h.now + 1_000
    h.reply(h.plan(t.id), not_sent=True)
    assert h.t(t.id).due_ms == h.now + 200
    assert not_sent_wait_ms(1) == 200 and not_sent_wait_ms(100) == 5_000


def test_a_fire_not_sent_before_its_time_is_planned_again_no_earlier_than_that_time(h: H) -> None:
    t = h.create(max_retries=0)
    due = h.t(t.id).due_ms
    assert due is not None
    fr = h.plan(t.id, ahead_ms=900)  # dispatch ahead: planned 900 ms early, not sent at once
    assert fr.fire.not_before_ms == due
    h.reply(fr, not_sent=True, after_ms=5)
    assert h.t(t.id).due_ms == due  # not now + 200 ms: before the task's time


def test_an_at_most_once_fire_not_sent_is_sent_again(h: H) -> None:
    t = h.create(reliability="at_most_once")
    h.reply(h.plan(t.id), not_sent=True)
    assert h.t(t.id).status is Status.FIRING and h.t(t.id).due_ms is not None
    h.reply(h.plan(t.id), code=200)
    assert h.t(t.id).status is Status.DONE
    assert [(e.attempt, e.result) for e in h.s.executions] == [(2, ExecutionResult.SUCCESS)]


def test_a_not_sent_result_without_its_attempt_is_an_ordinary_failed_attempt(h: H) -> None:
    """Only a result bound to the attempt it answers is known not to have been sent."""
    t = h.create(reliability="at_most_once")
    h.reply(h.plan(t.id), not_sent=True, attempt=None)
    assert h.t(t.id).status is Status.FAILED
    assert [e.result for e in h.s.executions] == [ExecutionResult.NETWORK_ERROR]


def test_a_stale_not_sent_result_changes_nothing(h: H) -> None:
    t = h.create(max_retries=3)
    first = h.plan(t.id)
    h.reply(first, code=500)
    h.plan(t.id)
    before = h.t(t.id)
    h.reply(first, not_sent=True)  # for attempt 1, long answered
    assert h.t(t.id) == before and len(h.s.executions) == 1


def test_a_not_sent_ack_probe_uses_up_no_probe(h: H) -> None:
    t = h.create(ack_url="http://127.0.0.1:9/ack", ack_delay_ms=100)
    h.reply(h.plan(t.id), code=200)
    assert h.t(t.id).status is Status.AWAITING_ACK
    for _ in range(4):  # more than ack_ttl (3)
        h.reply(h.plan(t.id), not_sent=True)
    assert h.t(t.id).status is Status.AWAITING_ACK
    for _ in range(2):
        h.reply(h.plan(t.id), code=500)
    assert h.t(t.id).status is Status.AWAITING_ACK
    h.reply(h.plan(t.id), code=500)
    assert h.t(t.id).status is Status.FAILED
    assert [e.result for e in h.s.executions if e.kind is FireKind.ACK] == [ExecutionResult.ACK_FAILED] * 3


def test_a_paused_task_keeps_its_not_sent_fire_for_resume(h: H) -> None:
    t = h.create(max_retries=0)
    fr = h.plan(t.id)
    h.s.apply(PauseTasks(h.now, (t.id,)))
    h.reply(fr, not_sent=True)
    assert h.t(t.id).status is Status.PAUSED and h.t(t.id).due_ms is None
    h.s.apply(ResumeTasks(h.now, (t.id,)))
    h.reply(h.plan(t.id), code=200)
    assert h.t(t.id).status is Status.DONE


def test_an_overlap_allow_occurrence_not_sent_is_planned_again_for_free(h: H) -> None:
    t = h.create(type="periodic", interval_ms=60_000, overlap="allow", max_retries=0)
    fr = h.plan(t.id)  # the first attempt detaches the occurrence into running
    assert len(h.t(t.id).running) == 1
    h.reply(fr, not_sent=True)
    r = h.t(t.id).running[0]
    assert not r.inflight and r.due_ms == h.now + 200 and r.free_attempts == 1 and r.not_sent == 1
    again = h.plan(t.id)
    assert again.fire.fire_id == fr.fire.fire_id and again.fire.attempt == 2
    h.reply(again, code=500)  # max_retries 0: the one attempt sent failed, the occurrence ends
    assert h.t(t.id).running == () and [e.attempt for e in h.s.executions] == [2]


# ---- wire


def _result(not_sent: bool) -> FireResult:
    if not_sent:
        return FireResult.unsent("f-1", FireKind.CALLBACK, "n2", "worker queue full")
    return FireResult(fire_id="f-1", kind=FireKind.CALLBACK, status_code=500, outcome=DeliveryOutcome.HTTP_ERROR,
                      response_head=b"x", latency_ms=3.0, worker="n2", retry_after_ms=7)


def test_the_not_sent_field_travels_only_when_true_and_both_shapes_decode() -> None:
    sent, unsent = _result(False), _result(True)
    frame = encode_fire_results([sent, unsent])
    items = msgpack.unpackb(frame, raw=False)[1]
    assert [len(it) for it in items] == [10, 11]  # the sent one as the release before sent it
    assert decode_fire_results(frame) == [sent, unsent]
    old = msgpack.packb(("fire_results", [[*items[0][:9]], items[0]]), use_bin_type=True)  # 9 and 10 fields
    assert [r.not_sent for r in decode_fire_results(old)] == [False, False]
    bad = msgpack.packb(("fire_results", [[*items[1][:10], 1]]), use_bin_type=True)
    with pytest.raises(DeliveryCodecError):
        decode_fire_results(bad)


def test_a_worker_sends_not_sent_results_in_a_frame_of_their_own() -> None:
    """A leader of the release before refuses a frame with an 11-field item; only that one then."""
    a, b = _result(False), _result(True)
    assert split_unsent([a, b, a]) == ([a, a], [b])
    assert split_unsent([a]) == ([a], [])


def test_the_replicated_result_item_carries_not_sent_and_an_older_entry_still_decodes() -> None:
    it = to_result_item(_result(True))
    assert it.not_sent and it.outcome is Outcome.NETWORK_ERROR
    raw = msgspec.msgpack.encode(Results(1, (it,)))
    assert msgspec.msgpack.decode(raw, type=Results).items[0].not_sent
    older = msgspec.msgpack.encode(list(msgspec.structs.astuple(it))[:-1])  # 10 fields: no not_sent
    assert msgspec.msgpack.decode(older, type=ResultItem) == msgspec.structs.replace(it, not_sent=False)


def test_a_fire_record_keeps_its_planned_time_and_an_older_record_reads_as_unknown() -> None:
    h = H()
    t = h.create()
    f = h.plan(t.id).fire
    assert fire_from_bytes(f.fire_id, fire_to_bytes(f)) == f
    older = msgpack.packb(msgpack.unpackb(fire_to_bytes(f))[:6])
    assert fire_from_bytes(f.fire_id, older).not_before_ms == 0


def test_the_leaders_monitor_counts_not_sent_results_as_a_scheduler_event() -> None:
    assert "not_sent" in COUNTERS
    stats_ref = Stats.start()
    stats = StatsClient(stats_ref)
    proposed: list[Any] = []
    ctx = TermContext(
        node_id="n1", term=1, cfg=SchedulerConfig(), store=SimpleNamespace(get_fire=lambda fid: None),  # type: ignore[arg-type]
        propose_batch=lambda cmds, done: proposed.append(cmds), stats=stats, send_fires=lambda groups: {},
        local_free=lambda: 0, fatal=lambda e: None, ended=threading.Event(),
    )
    monitor = Monitor.start(ctx)
    try:
        unsent = to_result_item(_result(True))
        monitor.tell(FireResults([unsent, to_result_item(_result(False)), unsent]))
        deadline = time.monotonic() + 10
        while stats.get("not_sent") != 2:
            assert time.monotonic() < deadline, stats.to_json()
            time.sleep(0.02)
        assert stats.get("results_received") == 3
    finally:
        monitor.stop()
        stats_ref.stop()


def monitor_proposals(results: list[ResultItem], **ctx_kw: Any) -> list[Any]:
    """What a leader's Monitor proposes for these results (``ctx_kw``: e.g. the term's ``replicas_read``)."""
    stats_ref = Stats.start()
    proposed: list[Any] = []
    ctx = TermContext(
        node_id="n1", term=1, cfg=SchedulerConfig(),
        store=SimpleNamespace(get_fire=lambda fid: None, get_task=lambda tid: None,  # type: ignore[arg-type]
                              encode_proposal=lambda cmd: cmd),
        propose_batch=lambda cmds, done: proposed.extend(cmds), stats=StatsClient(stats_ref),
        send_fires=lambda groups: {}, local_free=lambda: 0, fatal=lambda e: None, ended=threading.Event(),
        **ctx_kw,
    )
    monitor = Monitor.start(ctx)
    try:
        monitor.tell(FireResults(results))
        deadline = time.monotonic() + 10
        while not proposed:
            assert time.monotonic() < deadline, "no Results proposed"
            time.sleep(0.02)
    finally:
        monitor.stop()
        stats_ref.stop()
    return proposed


@pytest.mark.parametrize("readable", [True, False])
def test_not_sent_results_are_proposed_as_attempts_while_a_replica_of_the_release_before_remains(readable: bool) -> None:
    """A replica of the release before would apply a ``not_sent`` result as a failed attempt where this
    release plans the fire again for free, and the replicas would differ: until every member has
    advertised ``NOT_SENT_VERSION`` the Monitor proposes the flag cleared (an ordinary failed attempt)."""
    unsent = with_attempt(to_result_item(_result(True)), 2)
    sent = with_attempt(to_result_item(dataclasses.replace(_result(False), fire_id="f-2")), 1)
    proposed = monitor_proposals([unsent, sent], replicas_read=lambda v: readable or v < NOT_SENT_VERSION)
    items = {it.fire_id: it for cmd in proposed for it in cmd.items}
    assert items["f-1"].not_sent is readable
    assert items["f-1"] == msgspec.structs.replace(unsent, not_sent=readable)
    assert items["f-2"] == sent


def test_replicas_read_not_sent_once_every_other_member_advertised_the_version() -> None:
    def sched(versions: dict[str, int]) -> Any:
        return SimpleNamespace(node_id="n1", batch_versions=versions,
                               peer=SimpleNamespace(standing=Standing(members=frozenset({"n1", "n2", "n3"}))))

    assert Scheduler.replicas_read(sched({"n2": NOT_SENT_VERSION, "n3": NOT_SENT_VERSION}), NOT_SENT_VERSION)
    assert not Scheduler.replicas_read(sched({"n2": NOT_SENT_VERSION, "n3": NOT_SENT_VERSION - 1}), NOT_SENT_VERSION)
    assert not Scheduler.replicas_read(sched({"n2": NOT_SENT_VERSION}), NOT_SENT_VERSION)  # n3 not heard yet
    assert FIRE_BATCH_VERSION >= NOT_SENT_VERSION  # this release's nodes advertise it
