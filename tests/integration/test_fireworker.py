"""FirePool / FireWorkerPool against a real HTTP server: bound, refusal, batching, expiry, clean stop."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pykka
import pytest
import urllib3

from molens.actors.fireworker import FireWorkerPool, ForwardFrame, decode_results_frame, results_frame
from molens.actors.messages import FireBatch, FireResults, GetGauges, LeaderIs, LeaderRefs
from molens.actors.stats import ReportingDeliverer, Stats, StatsClient
from molens.delivery import Deliverer, DeliveryOutcome, FireKind, FireRequest, FireResult
from molens.delivery.pool import FirePool, make_pool_manager
from tests.integration.callback_server import CallbackServer

pytestmark = pytest.mark.integration


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.005)


class Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[FireResult]] = []

    def __call__(self, results: list[FireResult]) -> None:
        with self.lock:
            self.batches.append(list(results))

    def results(self) -> list[FireResult]:
        with self.lock:
            return [r for b in self.batches for r in b]


@pytest.fixture(params=["loop", "threads"])
def engine(request: pytest.FixtureRequest) -> str:
    """Each FirePool test runs on both engines (molens.delivery.pool)."""
    return str(request.param)


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pm = urllib3.PoolManager(num_pools=8, maxsize=16)
    try:
        yield pm
    finally:
        pm.clear()


def _fires(url: str, n: int, timeout_ms: int = 5000, deadline_ms: int = 0, prefix: str = "t") -> list[FireRequest]:
    return [FireRequest(
        fire_id=f"{prefix}-{i}", task_id=prefix, attempt=0, kind=FireKind.CALLBACK, url=url, body=b"{}",
        scene="default", timeout_ms=timeout_ms, deadline_ms=deadline_ms,
    )
            for i in range(n)]


def _no_pool_threads(name: str) -> bool:
    return not any(t.name.startswith(name) and t.is_alive() for t in threading.enumerate())


def test_every_fire_is_delivered_once_and_results_come_back_in_bounded_batches(engine: str,
    callback_server: CallbackServer, http: urllib3.PoolManager
) -> None:
    sink = Sink()
    pool = FirePool(Deliverer(http, "n1"), 4, sink, queue_limit=40, flush_count=5, engine=engine, name="fw-batch")
    pool.start()
    try:
        receipt = pool.submit(_fires(callback_server.url("/ok"), 40))
        assert (receipt.accepted, receipt.refused) == (40, ())
        wait_until(lambda: len(sink.results()) == 40)
    finally:
        pool.stop()
    assert sorted(r.fire_id for r in sink.results()) == sorted(f"t-{i}" for i in range(40))
    assert all(r.outcome is DeliveryOutcome.SUCCESS and r.worker == "n1" for r in sink.results())
    assert all(1 <= len(b) <= 5 for b in sink.batches)
    assert len(callback_server.recorded("/ok")) == 40
    assert pool.stats().delivered == 40
    assert _no_pool_threads("fw-batch")


def test_concurrency_bound_is_respected_and_free_capacity_reflects_outstanding_fires(engine: str,
    callback_server: CallbackServer, http: urllib3.PoolManager
) -> None:
    sink = Sink()
    pool = FirePool(Deliverer(http, "n1"), 4, sink, queue_limit=20, engine=engine, name="fw-bound")
    pool.start()
    try:
        assert pool.free_capacity() == 24
        assert pool.submit(_fires(callback_server.url("/gate"), 12)).accepted == 12
        wait_until(lambda: callback_server.in_gate == 4)
        assert pool.free_capacity() == 12
        st = pool.stats()
        assert (st.in_flight, st.queued) == (4, 8)
        callback_server.gate.set()
        wait_until(lambda: len(sink.results()) == 12)
        assert pool.free_capacity() == 24
    finally:
        pool.stop()
    assert callback_server.max_in_gate == 4


def test_a_full_pool_refuses_the_excess_in_order(engine: str, callback_server: CallbackServer, http: urllib3.PoolManager) -> None:
    sink = Sink()
    pool = FirePool(Deliverer(http, "n1"), 2, sink, queue_limit=2, engine=engine, name="fw-full")
    pool.start()
    try:
        fires = _fires(callback_server.url("/gate"), 6)
        receipt = pool.submit(fires)
        assert receipt.accepted == 4
        assert receipt.refused == tuple(fires[4:])
        assert pool.free_capacity() == 0
        assert pool.submit(_fires(callback_server.url("/ok"), 1, prefix="u")).refused != ()
        callback_server.gate.set()
        wait_until(lambda: len(sink.results()) == 4)
    finally:
        pool.stop()
    assert sorted(r.fire_id for r in sink.results()) == [f"t-{i}" for i in range(4)]
    assert pool.stats().refused == 3


def test_a_fire_past_its_deadline_is_not_sent_and_answered_as_not_sent(engine: str, callback_server: CallbackServer,
                                                                      http: urllib3.PoolManager) -> None:
    """docs/architecture.md#not-sent: the leader may plan it again without using up an attempt."""
    sink = Sink()
    now = time.time_ns() // 1_000_000
    pool = FirePool(Deliverer(http, "n1"), 1, sink, engine=engine, name="fw-expired")
    pool.start()
    try:
        pool.submit(_fires(callback_server.url("/ok"), 1, deadline_ms=now - 1, prefix="late")
                    + _fires(callback_server.url("/ok"), 1, deadline_ms=now + 60_000, prefix="fine"))
        wait_until(lambda: len(sink.results()) == 2)
        wait_until(lambda: pool.stats().expired == 1)
    finally:
        pool.stop()
    got = {r.fire_id: r for r in sink.results()}
    assert got["late-0"].not_sent and got["late-0"].worker == "n1" and got["late-0"].status_code is None
    assert not got["fine-0"].not_sent and got["fine-0"].status_code == 200
    assert pool.stats().delivered == 1
    assert [r.headers["X-Fire-ID"] for r in callback_server.recorded()] == ["fine-0"]


def test_a_fire_gets_no_more_time_than_its_deadline_leaves(engine: str, callback_server: CallbackServer, http: urllib3.PoolManager) -> None:
    sink = Sink()
    pool = FirePool(Deliverer(http, "n1"), 1, sink, engine=engine, name="fw-capped")
    pool.start()
    try:
        # a 60 s HTTP timeout but a deadline 300 ms away: /hang must end as a timeout well before 60 s
        pool.submit(_fires(callback_server.url("/hang"), 1, timeout_ms=60_000,
                           deadline_ms=time.time_ns() // 1_000_000 + 300))
        wait_until(lambda: len(sink.results()) == 1)
    finally:
        pool.stop()
    assert sink.results()[0].outcome is DeliveryOutcome.TIMEOUT


def test_stop_lets_in_flight_fires_finish_returns_unstarted_ones_and_leaves_no_threads(engine: str,
    callback_server: CallbackServer, http: urllib3.PoolManager
) -> None:
    sink = Sink()
    pool = FirePool(Deliverer(http, "n1"), 2, sink, engine=engine, name="fw-stop")
    pool.start()
    fires = _fires(callback_server.url("/hang"), 5, timeout_ms=300)
    pool.submit(fires)
    wait_until(lambda: pool.stats().in_flight == 2)
    dropped = pool.stop()
    assert dropped == fires[2:]
    assert sorted(r.fire_id for r in sink.results()) == ["t-0", "t-1"]
    assert all(r.outcome is DeliveryOutcome.TIMEOUT for r in sink.results())
    assert pool.free_capacity() == 0
    assert pool.submit(fires).accepted == 0
    assert _no_pool_threads("fw-stop")


def test_a_failing_results_callback_does_not_stop_deliveries(engine: str, callback_server: CallbackServer, http: urllib3.PoolManager) -> None:
    seen: list[str] = []

    def flaky(results: list[FireResult]) -> None:
        seen.extend(r.fire_id for r in results)
        if len(seen) == 1:
            raise RuntimeError("consumer bug")

    pool = FirePool(Deliverer(http, "n1"), 1, flaky, flush_count=1, engine=engine, name="fw-flaky")
    pool.start()
    try:
        pool.submit(_fires(callback_server.url("/ok"), 3))
        wait_until(lambda: len(seen) == 3)
    finally:
        pool.stop()


class _Collector(pykka.ThreadingActor):
    """Stands in for a leader's Monitor: keeps what it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "got":
            return list(self.got)
        self.got.append(message)
        return None


def test_fire_worker_pool_actor_routes_results_to_a_remote_leader_then_to_the_local_monitor(
    callback_server: CallbackServer,
) -> None:
    frames: list[tuple[str, bytes]] = []
    stats_ref = Stats.start()
    http = make_pool_manager(3)
    deliverer = ReportingDeliverer(http, "n7", "k")
    ref = FireWorkerPool.start("n7", deliverer, 3, lambda to, f: frames.append((to, f)) is None, StatsClient(stats_ref))
    monitor = _Collector.start()
    try:
        ref.tell(LeaderIs("n9", None))  # another node leads: results go there as one R frame
        ref.tell(FireBatch([dataclasses.replace(f, attempt=2) for f in _fires(callback_server.url("/ok"), 3)]))
        wait_until(lambda: sum(len(decode_results_frame(f[1:])[2]) for _to, f in frames if f[:1] == b"R") == 3)
        got = [decode_results_frame(f[1:]) for to, f in frames if f[:1] == b"R" and to == "n9"]
        assert {fid: a for _free, att, _r in got for fid, a in att.items()} == {"t-0": 2, "t-1": 2, "t-2": 2}
        assert all(r.worker == "n7" and r.outcome is DeliveryOutcome.SUCCESS for _f, _a, rs in got for r in rs)
        # this node leads: results go to its Monitor as FireResults, each for the attempt carried out
        refs = LeaderRefs(term=3, wheel=monitor, dispatcher=monitor, monitor=monitor, cleaner=monitor, notifier=monitor)
        ref.tell(LeaderIs("n7", refs))
        ref.tell(FireBatch([dataclasses.replace(f, attempt=4) for f in _fires(callback_server.url("/ok"), 2, prefix="f")]))
        wait_until(lambda: sum(len(m.items) for m in monitor.ask("got") if isinstance(m, FireResults)) == 2)
        items = [it for m in monitor.ask("got") if isinstance(m, FireResults) for it in m.items]
        assert sorted((it.fire_id, it.attempt, it.status_code) for it in items) == [("f-0", 4, 200), ("f-1", 4, 200)]
        pool = ref.proxy().pool.get(timeout=5)
        assert pool.stats().delivered == 5 and pool.free_capacity() == 15
        assert ref.ask(GetGauges(), timeout=5)["fireworker_messages"] >= 4  # LeaderIs x2, FireBatch x2, results
        # results frames that reached this node while it did not lead, decoded here now that it leads:
        # a malformed one is dropped and the actor goes on; a member's well-formed one reaches the Monitor
        ok = FireResult(fire_id="m-1", kind=FireKind.CALLBACK, status_code=200, outcome=DeliveryOutcome.SUCCESS,
                        response_head=b"", latency_ms=1.0, worker="n8")
        for bad in (b"R\xc1", b"R" + msgpack.packb([1, {"m-1": "2"}, b""]), b"R" + msgpack.packb([1, [], b""])):
            ref.tell(ForwardFrame(bad, "n8"))
        ref.tell(ForwardFrame(results_frame(1, {"m-1": 2}, [ok]), "n8"))
        wait_until(lambda: any(it.fire_id == "m-1" for m in monitor.ask("got") if isinstance(m, FireResults)
                               for it in m.items))
        assert ref.is_alive()
    finally:
        ref.stop(timeout=10)
        monitor.stop()
        stats_ref.stop()
        http.clear()
    assert all("X-Molens-Signature" in r.headers for r in callback_server.recorded())
    assert _no_pool_threads("fireworker")


def test_fires_refused_by_a_full_queue_go_to_a_remote_leader_as_not_sent_in_a_frame_of_their_own(
    callback_server: CallbackServer,
) -> None:
    """docs/architecture.md#not-sent: a leader of the release before reads the results of fires that
    were sent (10-field items) and refuses only the frame holding the 11-field not-sent ones."""
    frames: list[tuple[str, bytes]] = []
    stats_ref = Stats.start()
    http = make_pool_manager(2)
    ref = FireWorkerPool.start("n7", ReportingDeliverer(http, "n7", "k"), 1, lambda to, f: frames.append((to, f)) is None,
                               StatsClient(stats_ref), queue_limit=1)
    try:
        ref.tell(LeaderIs("n9", None))
        ref.tell(FireBatch([dataclasses.replace(f, attempt=3) for f in _fires(callback_server.url("/ok"), 4)]))
        wait_until(lambda: sum(len(decode_results_frame(f[1:])[2]) for _to, f in frames if f[:1] == b"R") == 4)
    finally:
        ref.stop(timeout=10)
        stats_ref.stop()
        http.clear()
    got = [decode_results_frame(f[1:]) for to, f in frames if f[:1] == b"R" and to == "n9"]
    by_frame = [sorted((r.fire_id, r.not_sent, att[r.fire_id]) for r in rs) for _free, att, rs in got]
    assert [("t-2", True, 3), ("t-3", True, 3)] in by_frame  # refused at once, together, on their own
    assert sorted(x for b in by_frame for x in b if not x[1]) == [("t-0", False, 3), ("t-1", False, 3)]
    assert all(all(x[1] for x in b) or not any(x[1] for x in b) for b in by_frame)
    assert sorted(r.headers["X-Fire-ID"] for r in callback_server.recorded()) == ["t-0", "t-1"]


def test_fires_not_started_when_the_worker_stops_go_to_the_leader_as_not_sent(callback_server: CallbackServer) -> None:
    """A worker that stops answers the fires it had not started (held for their time, or queued) as
    not sent, so the leader plans them again at once: settled at their deadline instead, an
    at_most_once one would read ``unknown`` though it never left (docs/architecture.md#not-sent)."""
    frames: list[tuple[str, bytes]] = []
    stats_ref = Stats.start()
    http = make_pool_manager(2)
    ref = FireWorkerPool.start("n7", ReportingDeliverer(http, "n7", "k"), 1, lambda to, f: frames.append((to, f)) is None,
                               StatsClient(stats_ref))
    far = time.time_ns() // 1_000_000 + 3_600_000
    held = [dataclasses.replace(f, attempt=2, not_before_ms=far) for f in _fires(callback_server.url("/ok"), 3, prefix="h")]
    try:
        ref.tell(LeaderIs("n9", None))
        ref.tell(FireBatch(held))
        wait_until(lambda: ref.proxy().pool.get(timeout=5).stats().held == 3)
    finally:
        ref.stop(timeout=10)
        stats_ref.stop()
        http.clear()
    got = [decode_results_frame(f[1:]) for to, f in frames if f[:1] == b"R" and to == "n9"]
    items = sorted((r.fire_id, r.not_sent, r.worker, att[r.fire_id]) for _free, att, rs in got for r in rs)
    assert items == [("h-0", True, "n7", 2), ("h-1", True, "n7", 2), ("h-2", True, "n7", 2)]
    assert callback_server.recorded() == []


def test_the_leaders_own_fires_and_their_results_skip_the_worker_actors_mailbox(callback_server: CallbackServer) -> None:
    """On the leader the Dispatcher hands fires to the local pool itself and the pool's flusher tells
    the Monitor their results: the worker actor's mailbox sees neither (only who leads, and the
    asks), and each result still carries the attempt carried out."""
    class Recording(FireWorkerPool):
        kinds: list[str] = []

        def on_receive(self, message: Any) -> Any:
            if message == "kinds":
                return sorted(set(self.kinds))
            self.kinds.append(type(message).__name__)
            return super().on_receive(message)

    stats_ref = Stats.start()
    http = make_pool_manager(3)
    ref = Recording.start("n7", ReportingDeliverer(http, "n7", "k"), 3, lambda _to, _f: True, StatsClient(stats_ref))
    monitor = _Collector.start()
    try:
        refs = LeaderRefs(term=3, wheel=monitor, dispatcher=monitor, monitor=monitor, cleaner=monitor, notifier=monitor)
        ref.tell(LeaderIs("n7", refs))
        local = ref.proxy().local_fires.get(timeout=5)
        for k in range(3):  # three batches, three result flushes at least
            fires = [dataclasses.replace(f, attempt=k + 1) for f in _fires(callback_server.url("/ok"), 2, prefix=f"b{k}")]
            assert local.carry_out(fires)
            wait_until(lambda k=k: sum(len(m.items) for m in monitor.ask("got") if isinstance(m, FireResults)) == 2 * (k + 1))
        items = [it for m in monitor.ask("got") if isinstance(m, FireResults) for it in m.items]
        assert sorted((it.fire_id, it.attempt) for it in items) == [
            (f"b{k}-{i}", k + 1) for k in range(3) for i in range(2)]
        assert set(ref.ask("kinds", timeout=5)) <= {"LeaderIs", "Wake"}  # Wake: its heartbeat alarm
    finally:
        ref.stop(timeout=10)
        monitor.stop()
        stats_ref.stop()
        http.clear()
    assert not local.carry_out(_fires(callback_server.url("/ok"), 1, prefix="late"))  # stopped: the leader answers them itself


def test_fires_are_given_back_unsent_while_the_clock_is_suspect(callback_server: CallbackServer) -> None:
    """Held fires were timed on the wall clock before a step: a clock stepped back 15 s held one
    15 s. Once the clock stepped, and until it is judged good again, the worker answers the fires it
    holds, and those it is given to hold, as not sent, so the leader sends them elsewhere; fires
    already due go out."""
    suspect = [False]
    stats_ref = Stats.start()
    http = make_pool_manager(2)
    ref = FireWorkerPool.start("n7", ReportingDeliverer(http, "n7", "k"), 2, lambda to, f: True, StatsClient(stats_ref),
                               clock_suspect=lambda: suspect[0])
    monitor = _Collector.start()
    try:
        ref.tell(LeaderIs("n7", LeaderRefs(term=3, wheel=monitor, dispatcher=monitor, monitor=monitor,
                                           cleaner=monitor, notifier=monitor)))
        later = time.time_ns() // 1_000_000 + 3_600_000
        ref.tell(FireBatch([dataclasses.replace(f, attempt=1, not_before_ms=later) for f in _fires(callback_server.url("/ok"), 2)]))
        pool = ref.proxy().pool.get(timeout=5)
        wait_until(lambda: pool.stats().held == 2)
        suspect[0] = True  # the clock probe saw the wall clock step
        wait_until(lambda: sum(len(m.items) for m in monitor.ask("got") if isinstance(m, FireResults)) == 2)
        ref.tell(FireBatch([dataclasses.replace(f, attempt=1, not_before_ms=later) for f in _fires(callback_server.url("/ok"), 1, prefix="ahead")]
                           + [dataclasses.replace(f, attempt=1) for f in _fires(callback_server.url("/ok"), 1, prefix="now")]))
        wait_until(lambda: sum(len(m.items) for m in monitor.ask("got") if isinstance(m, FireResults)) == 4)
        items = [it for m in monitor.ask("got") if isinstance(m, FireResults) for it in m.items]
        assert sorted((it.fire_id, it.attempt, it.status_code, it.not_sent) for it in items) == [
            ("ahead-0", 1, None, True), ("now-0", 1, 200, False), ("t-0", 1, None, True), ("t-1", 1, None, True)]
        assert pool.stats().held == 0 and [r.headers["X-Fire-ID"] for r in callback_server.recorded()] == ["now-0"]
    finally:
        ref.stop(timeout=10)
        monitor.stop()
        stats_ref.stop()
        http.clear()


class _Deliveries(Deliverer):
    """A Deliverer that notes the pool's wall clock when each fire starts."""

    def __init__(self, http: urllib3.PoolManager, clock: Callable[[], int]) -> None:
        super().__init__(http, "n1")
        self.clock = clock
        self.started: dict[str, int] = {}

    def deliver(self, req: FireRequest, timeout_ms: int | None = None) -> FireResult:  # threads engine
        self.started[req.fire_id] = self.clock()
        return super().deliver(req, timeout_ms)

    def request_bytes(self, req: FireRequest, host: str, port: int, target: str) -> bytes:  # loop engine
        self.started[req.fire_id] = self.clock()
        return super().request_bytes(req, host, port, target)


def test_a_fire_planned_ahead_is_held_until_its_not_before_time_and_never_sent_early(engine: str,
    callback_server: CallbackServer, http: urllib3.PoolManager
) -> None:
    now = [1_767_225_600_000]
    clock = lambda: now[0]  # noqa: E731 -- the pool's wall clock, moved by the test
    sink = Sink()
    dl = _Deliveries(http, clock)
    pool = FirePool(dl, 2, sink, wall_ms=clock, mono_ms=clock, engine=engine, name="fw-hold")
    pool.start()
    try:
        due = now[0] + 50
        held = FireRequest(
            fire_id="ahead-0", task_id="ahead", attempt=1, kind=FireKind.CALLBACK, url=callback_server.url("/ok"),
            body=b"{}", scene="default", timeout_ms=5000, deadline_ms=0, not_before_ms=due,
        )
        pool.submit([held, *_fires(callback_server.url("/ok"), 1, prefix="now")])
        assert pool.stats().held == 1 and pool.free_capacity() <= pool.capacity - 1  # held fires take room
        wait_until(lambda: [r.fire_id for r in sink.results()] == ["now-0"])
        assert pool.stats().held == 1 and "ahead-0" not in dl.started  # the clock has not reached it
        now[0] = due - 1
        assert "ahead-0" not in dl.started
        now[0] = due  # the wall reading is truncated to the ms: at ``due`` the wall clock may still be just before it
        time.sleep(0.05)  # a release now would have been seen by then; the check below is the assertion
        assert "ahead-0" not in dl.started
        now[0] = due + 1
        wait_until(lambda: len(sink.results()) == 2)
    finally:
        pool.stop()
    assert dl.started["ahead-0"] == due + 1 and pool.stats().held == 0
    assert [r.headers["X-Fire-ID"] for r in callback_server.recorded()] == ["now-0", "ahead-0"]


def test_a_held_fire_keeps_its_time_when_the_wall_clock_steps_while_it_waits(engine: str,
    callback_server: CallbackServer, http: urllib3.PoolManager
) -> None:
    """The wait is read on the wall clock when the fire arrives, then kept on the monotonic clock: a
    wall clock stepping back 10 s while a fire is held does not hold it 10 s longer, and one stepping
    ahead does not let it go early."""
    wall = [1_767_225_600_000]
    mono = [5_000]
    sink = Sink()
    dl = _Deliveries(http, lambda: mono[0])
    pool = FirePool(dl, 2, sink, wall_ms=lambda: wall[0], mono_ms=lambda: mono[0], engine=engine, name="fw-step")
    pool.start()
    try:
        fires = [FireRequest(
            fire_id=f"step-{i}", task_id="step", attempt=1, kind=FireKind.CALLBACK, url=callback_server.url("/ok"),
            body=b"{}", scene="default", timeout_ms=5000, deadline_ms=0, not_before_ms=wall[0] + 100 * (i + 1),
        ) for i in range(2)]
        pool.submit(fires)
        assert pool.stats().held == 2
        wall[0] -= 10_000  # the wall clock steps back: the fires' times are unchanged
        mono[0] += 101  # its time, and the ms the truncated readings may hide
        wait_until(lambda: [r.fire_id for r in sink.results()] == ["step-0"])
        wall[0] += 60_000  # and ahead: the second still waits for its own time
        assert "step-1" not in dl.started
        mono[0] += 100
        wait_until(lambda: len(sink.results()) == 2)
    finally:
        pool.stop()
    assert dl.started == {"step-0": 5_101, "step-1": 5_201}


def test_stop_returns_held_fires_unsent(engine: str, callback_server: CallbackServer, http: urllib3.PoolManager) -> None:
    sink = Sink()
    pool = FirePool(Deliverer(http, "n1"), 1, sink, engine=engine, name="fw-hold-stop")
    pool.start()
    far = time.time_ns() // 1_000_000 + 3_600_000
    fires = [FireRequest(
        fire_id=f"h-{i}", task_id="h", attempt=1, kind=FireKind.CALLBACK, url=callback_server.url("/ok"), body=b"{}",
        scene="default", timeout_ms=5000, deadline_ms=0, not_before_ms=far + i,
    )
             for i in range(3)]
    assert pool.submit(fires).accepted == 3 and pool.stats().held == 3
    assert pool.stop() == fires
    assert sink.results() == [] and callback_server.recorded() == []
    assert _no_pool_threads("fw-hold-stop")
