"""Flow control without threads: the pure FlowControl, the DispatchPlan holding fires per flow, the
replicated flow settings (PutFlow/DeleteFlow through the machine and the lmdb store), the default
flow of a URL and the worker's reading of Retry-After."""

from __future__ import annotations

import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from molens.actors.dispatcher import DispatchPlan
from molens.actors.monitor import congested
from molens.delivery import retry_after_ms
from molens.fsm.commands import DeleteFlow, FlowSettings, PutFlow, ResultItem, decode, encode
from molens.fsm.memstate import MemoryState
from molens.fsm.store import TaskStore
from molens.model import NotFoundError, Outcome, Status, Task, validate_create
from molens.schedule.flows import ADAPTIVE_DECREASE, ADAPTIVE_INCREASE_FRACTION, FlowControl, FlowLimits
from molens.schema import FLOW_ID_PATTERN, FireKind, TaskSpec, flow_id, flow_of, url_flow

NOW = 1_767_225_600_000


def _go(fc: FlowControl, tid: str, flow: str, at: int, now: int | None = None) -> bool:
    return fc.gate(tid, f"{tid}-1", 1, flow, at, at if now is None else now)


# ---- the rate --------------------------------------------------------------------------------------


def test_the_dispatchers_flow_wake_falls_on_the_next_tick_boundary() -> None:
    fc = FlowControl(credit_ms=30)
    fc.configure("f", FlowLimits(rate_per_s=10, burst=1), 0)
    assert [_go(fc, f"t{i}", "f", 0) for i in range(2)] == [True, False]
    assert fc.next_wake(0) == 100 and fc.next_tick_wake(0) == 120
    assert FlowControl().next_tick_wake(0) is None  # nothing held: no wake


def test_a_rate_limited_flow_lets_burst_go_at_once_then_one_per_interval_in_order() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(rate_per_s=10, burst=3), 0)
    assert [_go(fc, f"t{i}", "f", 0) for i in range(6)] == [True, True, True, False, False, False]
    assert fc.held == 3
    assert fc.next_wake(0) == 100
    assert fc.release(99) == []
    assert fc.release(100) == ["t3"]
    assert fc.release(250) == ["t4"]
    assert fc.release(300) == ["t5"]
    assert fc.held == 0
    # released fires are admitted already: the plan's gate says yes at once
    assert fc.gate("t3", "t3-1", 1, "f", 300, 300)


@settings(max_examples=200, deadline=None)
@given(
    rate=st.sampled_from([1.0, 2.5, 10.0, 20.0, 333.0]),
    burst=st.integers(1, 20),
    arrivals=st.lists(st.tuples(st.integers(0, 3_000), st.integers(0, 1_000)), min_size=1, max_size=120),
    late=st.lists(st.integers(0, 400), min_size=1, max_size=10),
)
def test_in_any_window_a_flow_has_at_most_burst_plus_rate_times_window_slots_and_no_fire_goes_before_its_slot(
    rate: float, burst: int, arrivals: list[tuple[int, int]], late: list[int]
) -> None:
    """Fires planned at ``now`` meant to go at ``now + ahead`` (dispatch ahead), in any order, held
    ones let go by a leader that wakes up to ``late`` ms after the flow allows the next one."""
    fc = FlowControl()
    fc.configure("f", FlowLimits(rate_per_s=rate, burst=burst), 0)
    slots: list[float] = []

    def took(i: int, due: int, now: int) -> None:
        slot = fc.fire_slot(f"x{i}")
        assert slot is not None and slot <= max(now, due)  # it goes at max(now, due): never before its slot
        slots.append(slot)

    def release(now: int) -> None:
        for tid in fc.release(now):
            i, due = (int(x) for x in tid[1:].split(":"))
            took(i, due, now)

    pending = sorted(arrivals)
    for i, (now, ahead) in enumerate(pending):
        release(now)
        at = now + ahead
        if fc.gate(f"t{i}:{at}", f"x{i}", 1, "f", at, now):
            took(i, at, now)
    now = pending[-1][0]
    k = 0
    while fc.held:
        wake = fc.next_wake(now)
        assert wake is not None and wake > now
        now = wake + late[k % len(late)]
        k += 1
        release(now)
    slots.sort()
    for i in range(len(slots)):
        for j in range(i + burst, len(slots)):
            assert j - i + 1 <= burst + rate * (slots[j] - slots[i]) / 1000 + 1e-6


def test_a_backlog_let_go_by_a_late_leader_keeps_its_rate_and_a_stall_adds_at_most_one_fire() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(rate_per_s=50), 0)  # one every 20 ms
    assert [_go(fc, f"t{i}", "f", 0) for i in range(200)].count(True) == 1
    now, went = 0, 1
    while now < 1_000:  # wakes 15 ms late every time: still 50 per second
        now = (fc.next_wake(now) or now) + 15
        went += len(fc.release(now))
    assert 49 <= went - (now - 1_000) // 20 <= 51
    stalled = fc.release(now + 5_000)  # a leader stalled for 5 s
    assert len(stalled) == 2


# ---- concurrency, pause, throttle, isolation -------------------------------------------------------


def test_a_flow_at_its_concurrency_holds_fires_until_one_ends() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(concurrency=2), 0)
    assert [_go(fc, t, "f", 0) for t in "abc"] == [True, True, False]
    assert fc.next_wake(0) is None  # only a fire ending lets c go
    assert fc.release(10) == []
    fc.ended("a-1", 1, 20)
    assert fc.release(20) == ["c"]
    assert fc.state(20)[0].in_flight == 2


def test_a_late_result_of_an_earlier_attempt_does_not_free_a_slot() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(concurrency=1), 0)
    assert fc.gate("a", "a-1", 2, "f", 0, 0)
    fc.ended("a-1", 1, 5)  # attempt 1 was given up and answered late
    assert fc.state(5)[0].in_flight == 1
    fc.ended("a-1", 2, 6)
    assert fc.state(6)[0].in_flight == 0


def test_a_paused_flow_holds_everything_in_order_and_resume_lets_it_all_go() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(paused=True), 0)
    assert not any(_go(fc, f"t{i}", "f", i) for i in range(5))
    assert fc.release(600_000) == []  # ten minutes later: still held, nothing lost
    assert fc.next_wake(600_000) is None
    fc.configure("f", FlowLimits(paused=False), 600_001)
    assert fc.release(600_001) == [f"t{i}" for i in range(5)]


def test_a_held_fire_handed_out_again_is_not_queued_twice() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(paused=True), 0)
    assert not _go(fc, "a", "f", 0)
    assert not _go(fc, "a", "f", 1)
    assert fc.held == 1
    fc.configure("f", None, 2)
    assert fc.release(2) == ["a"]


def test_a_throttled_or_paused_flow_never_holds_another_flows_fires() -> None:
    fc = FlowControl()
    fc.configure("slow", FlowLimits(paused=True), 0)
    fc.configure("limited", FlowLimits(rate_per_s=1, burst=1), 0)
    assert not _go(fc, "s1", "slow", 0)
    assert _go(fc, "l1", "limited", 0)
    assert not _go(fc, "l2", "limited", 0)
    assert all(_go(fc, f"o{i}", "other:80", 0) for i in range(100))


def test_a_retry_after_throttles_the_flow_until_then_even_without_settings() -> None:
    fc = FlowControl()
    assert _go(fc, "a", "api:443", 0)
    fc.ended("a-1", 1, 10, congested=True, retry_after_ms=2_010)
    assert fc.throttled == 1
    assert not _go(fc, "b", "api:443", 20)
    assert _go(fc, "c", "other:443", 20)
    assert fc.next_wake(20) == 2_010
    assert fc.release(2_009) == []
    assert fc.release(2_010) == ["b"]
    assert fc.state(2_010)[0].throttled_until_ms == 0


def test_an_adaptive_flow_halves_its_rate_on_congestion_once_a_second_and_ramps_back() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(rate_per_s=100, burst=10, adaptive=True), 0)
    for i in range(3):
        assert fc.gate(f"t{i}", f"t{i}-1", 1, "f", 0, 0)
    fc.ended("t0-1", 1, 10, congested=True)
    fc.ended("t1-1", 1, 20, congested=True)  # within the hold: one signal
    rate = fc.state(20)[0].effective_rate_per_s
    assert rate == 100 * ADAPTIVE_DECREASE
    assert fc.state(1_010)[0].effective_rate_per_s == rate + 100 * ADAPTIVE_INCREASE_FRACTION
    assert fc.state(60_000)[0].effective_rate_per_s == 100
    fc.ended("t2-1", 1, 60_000, congested=False)
    assert fc.state(60_001)[0].effective_rate_per_s == 100


def test_a_non_adaptive_flow_keeps_its_rate_on_congestion() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(rate_per_s=10), 0)
    assert _go(fc, "a", "f", 0)
    fc.ended("a-1", 1, 5, congested=True)
    assert fc.state(5)[0].effective_rate_per_s == 10


def test_a_cancelled_fire_frees_its_slot_and_idle_flows_without_settings_are_forgotten() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(concurrency=1), 0)
    assert _go(fc, "a", "f", 0)
    assert _go(fc, "b", "host:80", 0)
    fc.cancel("a-1", 1)
    fc.ended("b-1", 1, 1)
    assert _go(fc, "c", "f", 1)
    fc.sweep(100_000)
    assert [s.key for s in fc.state(100_000)] == ["f"]


# ---- the plan holds fires per flow -----------------------------------------------------------------


def _task(tid: str, url: str = "http://127.0.0.1:9/x", flow_key: str | None = None) -> Task:
    body = {"type": "delayed", "interval_ms": 1000, "callback_url": url}
    if flow_key is not None:
        body["flow_key"] = flow_key
    spec = validate_create(body, now_ms=NOW)
    return Task(id=tid, spec=spec, status=Status.PENDING, created_ms=NOW, updated_ms=NOW, due_ms=NOW, sched_ms=NOW)


def test_the_plan_holds_a_paused_flows_fires_and_plans_the_others() -> None:
    tasks = {f"p{i}": _task(f"p{i}", flow_key="paused") for i in range(3)}
    tasks.update({f"o{i}": _task(f"o{i}", url="http://Other.example:8080/x") for i in range(3)})
    fc = FlowControl()
    fc.configure("paused", FlowLimits(paused=True), NOW)
    plan = DispatchPlan("n1", tasks.get, lambda: 100, 1_000, lambda: 1.0)
    ids = ["p0", "o0", "p1", "o1", "p2", "o2"]
    items, later = plan.plan(ids, NOW, limit=100, flows=fc)
    assert [i.task_id for i in items] == ["o0", "o1", "o2"]
    assert later == [] and plan.held == 3
    assert [s.in_flight for s in fc.state(NOW) if s.key == "other.example:8080"] == [3]
    fc.configure("paused", FlowLimits(), NOW + 1)
    back = fc.release(NOW + 1)
    assert back == ["p0", "p1", "p2"]
    items, _ = plan.plan(back, NOW + 1, limit=100, flows=fc)
    assert [i.task_id for i in items] == back


def test_a_released_fire_no_longer_due_gives_its_slot_back() -> None:
    tasks = {"a": _task("a", flow_key="one")}
    fc = FlowControl()
    fc.configure("one", FlowLimits(concurrency=1, paused=True), NOW)
    plan = DispatchPlan("n1", tasks.get, lambda: 100, 1_000, lambda: 1.0)
    assert plan.plan(["a"], NOW, limit=10, flows=fc) == ([], [])
    fc.configure("one", FlowLimits(concurrency=1), NOW)
    assert fc.release(NOW) == ["a"]
    tasks["a"] = msgspec.structs.replace(tasks["a"], due_ms=NOW + 60_000)  # PATCHed later meanwhile
    assert plan.plan(["a"], NOW, limit=10, flows=fc) == ([], [])
    assert fc.state(NOW)[0].in_flight == 0


# ---- the flow of a task ----------------------------------------------------------------------------


def test_the_default_flow_is_the_callback_hosts_lower_case_name_and_port() -> None:
    assert url_flow("https://API.Example.com/hook") == "api.example.com:443"
    assert url_flow("http://api.example.com/hook") == "api.example.com:80"
    assert url_flow("http://10.0.0.1:8080/x?y") == "10.0.0.1:8080"
    assert url_flow("http://[::1]:9000/") == "[::1]:9000"
    spec = _task("a", flow_key="payments").spec
    assert flow_of(spec) == "payments"
    assert flow_of(msgspec.structs.replace(spec, flow_key=None)) == "127.0.0.1:9"


def test_a_flow_key_outside_the_default_namespace_is_that_namespaces_own_flow() -> None:
    """The receiver's host:port is every namespace's; a flow_key names the default namespace's flow
    as it is, and another namespace's as ``<namespace>~<flow_key>``: no namespace can name a flow of
    another (the flow a dead letter records, ``flow_of``, is the name the task gave)."""
    spec = _task("a", flow_key="payments").spec
    assert flow_id(spec) == "payments"
    team = msgspec.structs.replace(spec, namespace="team-a")
    assert flow_id(team) == "team-a~payments" and flow_of(team) == "payments"
    assert flow_id(msgspec.structs.replace(team, flow_key="127.0.0.1:9")) == "team-a~127.0.0.1:9"
    assert flow_id(msgspec.structs.replace(team, flow_key=None)) == "127.0.0.1:9" == flow_id(
        msgspec.structs.replace(spec, flow_key=None))
    ids = re.compile(FLOW_ID_PATTERN)
    assert all(ids.fullmatch(k) for k in ("team-a~payments", "payments", "[::1]:9000", "a~[::1]:9000"))
    assert not any(ids.fullmatch(k) for k in ("Team~x", "a~b~c", "~x", "a~", "x" * 129, "a b"))


def test_the_task_spec_ends_with_flow_key_then_traceparent_then_namespace() -> None:
    # fields are only ever appended (stored records are arrays): flow_key keeps its position
    assert [f.name for f in msgspec.structs.fields(TaskSpec)[-3:]] == ["flow_key", "traceparent", "namespace"]


# ---- replicated settings ---------------------------------------------------------------------------


def test_put_flow_and_delete_flow_round_trip_and_apply_alike_in_memory_and_in_lmdb(tmp_path: object) -> None:
    put = PutFlow(NOW, "api:443", FlowSettings(rate_per_s=20, burst=20, concurrency=3))
    pause = PutFlow(NOW + 1, "api:443", FlowSettings(paused=True), only_paused=True)
    delete = DeleteFlow(NOW + 2, "api:443")
    for cmd in (put, pause, delete):
        assert decode(encode(cmd)) == cmd
    mem = MemoryState()
    out = mem.apply(put)
    assert out.results == [FlowSettings(rate_per_s=20, burst=20, concurrency=3, updated_ms=NOW)]
    mem.apply(pause)
    assert mem.get_flow("api:443") == FlowSettings(rate_per_s=20, burst=20, concurrency=3, paused=True, updated_ms=NOW + 1)
    with TaskStore(str(tmp_path), durable=False) as store:
        store.apply_batch([(1, encode(put)), (2, encode(pause))])
        assert store.get_flow("api:443") == mem.get_flow("api:443")
        assert store.scan_flows() == [("api:443", mem.get_flow("api:443"))]
        res = store.apply_batch([(3, encode(delete)), (4, encode(delete))])
        assert res[0].results == [None]
        assert isinstance(res[1].results[0], NotFoundError)
        assert store.get_flow("api:443") is None
        snap = str(tmp_path) + "/snap"
        store.apply_batch([(5, encode(put))])
        store.snapshot(snap)
        digest = store.digest()
    with TaskStore(str(tmp_path) + "/other", durable=False) as other:
        other.restore(snap)
        assert other.get_flow("api:443") == FlowSettings(rate_per_s=20, burst=20, concurrency=3, updated_ms=NOW)
        assert other.digest() == digest


# ---- Retry-After -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2", NOW + 2_000),
        (" 120 ", NOW + 120_000),
        ("99999999", NOW + 3_600_000),  # capped
        ("Thu, 01 Jan 2026 00:00:10 GMT", NOW + 10_000),
        ("Thu, 01 Jan 2026 00:00:00 GMT", NOW),  # a date that has passed: no wait
        ("Wed, 31 Dec 2025 00:00:00 GMT", NOW),
        ("", 0),
        (None, 0),
        ("-1", 0),
        ("in a while", 0),
        ("١٢", 0),  # non-ASCII digits
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date_and_capped(value: str | None, expected: int) -> None:
    assert retry_after_ms(value, NOW, 3_600_000) == expected


def test_429_503_and_timeouts_are_congestion_other_answers_are_not() -> None:
    def item(code: int | None, outcome: Outcome = Outcome.RESPONSE) -> ResultItem:
        return ResultItem(fire_id="f", kind=FireKind.CALLBACK, status_code=code, outcome=outcome,
                          response_head=None, latency_ms=1, worker="n1")

    assert congested(item(429)) and congested(item(503)) and congested(item(None, Outcome.TIMEOUT))
    assert not any(congested(item(c)) for c in (200, 404, 500, 502))
    assert not congested(item(None, Outcome.NETWORK_ERROR))


def test_results_carry_retry_after_right_after_the_attempt() -> None:
    names = [f.name for f in msgspec.structs.fields(ResultItem)]
    assert names.index("retry_after_ms") == names.index("attempt") + 1


def test_with_a_tick_of_credit_a_leader_waking_once_a_tick_keeps_a_fast_flow_at_its_rate() -> None:
    fc = FlowControl(credit_ms=10)
    fc.configure("f", FlowLimits(rate_per_s=400), 0)  # one every 2.5 ms: faster than the 10 ms tick
    assert [_go(fc, f"t{i}", "f", 0) for i in range(1_000)].count(True) == 1
    went = 1 + sum(len(fc.release(now)) for now in range(10, 1_001, 10))
    assert 400 <= went <= 402
    assert len(fc.release(10_000)) == 5  # after a stall: one tick's worth (4) more than the bucket (1)


def test_fires_an_earlier_leader_left_in_flight_count_until_they_end_or_their_deadline() -> None:
    fc = FlowControl()
    fc.configure("f", FlowLimits(concurrency=2), 0)
    fc.adopt("old-1", 1, "f", deadline_ms=5_000, now_ms=0)
    fc.adopt("old-2", 3, "f", deadline_ms=9_000, now_ms=0)
    assert not _go(fc, "a", "f", 0)
    fc.ended("old-1", 1, 10)
    assert fc.release(10) == ["a"]
    assert not _go(fc, "b", "f", 20)
    assert fc.next_wake(20) == 9_000
    assert fc.release(8_999) == []
    assert fc.release(9_000) == ["b"]  # its end was reported before it was adopted: its deadline frees the slot


def test_a_namespace_flow_holds_its_tasks_fires_at_its_rate_and_no_other_namespaces() -> None:
    from molens.schedule.flows import NamespacedFlows

    fc = NamespacedFlows()
    fc.configure_namespace("pay", 5.0, now_ms=0)  # one fire every 200 ms
    admitted = [t for t in (f"p{i}" for i in range(10)) if fc.gate(t, f"{t}-1", 1, f"h{t}:80", 0, 0, namespace="pay")]
    assert admitted == ["p0"]  # every fire of the namespace is held, whatever its host flow
    assert all(fc.gate(f"o{i}", f"o{i}-1", 1, "h:80", 0, 0, namespace="ops") for i in range(10))
    let_go = [(ms, t) for ms in range(0, 1_001, 100) for t in fc.release(ms)]
    assert let_go == [(200, "p1"), (400, "p2"), (600, "p3"), (800, "p4"), (1_000, "p5")]
    fc.configure_namespace("pay", None, now_ms=1_000)  # the quota is lifted: the rest go at once
    assert fc.release(1_000) == ["p6", "p7", "p8", "p9"]


def test_a_fire_its_namespace_let_go_and_its_host_flow_held_is_charged_to_the_namespace_once() -> None:
    from molens.schedule.flows import NamespacedFlows

    fc = NamespacedFlows()
    fc.configure_namespace("pay", 1.0, now_ms=0)
    fc.configure("api:443", FlowLimits(concurrency=1), now_ms=0)
    assert fc.gate("x", "x-1", 1, "api:443", 0, 0, namespace="ops")  # takes the host flow's one slot
    assert not fc.gate("a", "a-1", 1, "api:443", 0, 0, namespace="pay")  # namespace: yes; host flow: held
    fc.ended("x-1", 1, 100)
    assert fc.release(100) == ["a"]
    assert fc.gate("a", "a-1", 1, "api:443", 0, 100, namespace="pay")  # not judged by the namespace again
    assert fc.namespaces.in_flight == 1 and fc.in_flight == 1
    fc.ended("a-1", 1, 200)
    assert fc.namespaces.in_flight == 0 and fc.in_flight == 0
    assert not fc.gate("b", "b-1", 1, "h:80", 300, 300, namespace="pay")  # the namespace's next slot is at 1 s
    assert fc.release(999) == [] and fc.release(1_000) == ["b"]
