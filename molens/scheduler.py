"""The scheduler of one node: its worker side (every node) and the leader-only actor set.

DESIGN §3 in this node. Two parts:

- **Worker side** (every node, leader included): a :class:`~molens.actors.fireworker.FirePool`
  carrying out ``FireBatch`` frames from the leader; its results go back in batches to the node
  it knows as leader (this node's session directly, others over the worker RPC socket), with the
  pool's free capacity. A heartbeat with the free capacity goes to the leader every
  ``REPORT_INTERVAL_S`` so the leader knows which workers are live.
- **Leader session** (:class:`LeaderSession`, one per term led): started on leadership gain, stopped
  at once on loss. It rebuilds the :class:`~molens.actors.timewheel.LeaderWheel` by streaming the
  store's ``due`` index and hands every fire in ``fires`` to the
  :class:`~molens.actors.monitor.Monitor` (``machine.reconcile_on_leadership``), then loops: wait
  until the earliest of (wheel deadline, monitor deadline, results flush, cleaner) or an event;
  apply wheel effects of applied entries; plan tasks due within ``scheduler.dispatch_lead_ms``
  (:class:`~molens.actors.dispatcher.Dispatcher`; *dispatch ahead*, so the Raft commit is off the
  fire's critical path) and propose ``Dispatched`` batches; send the ``FireRequest`` effects of
  entries committed **in its own term** to their workers, which hold each fire until its due time
  (``not_before_ms``); batch worker
  results and lost fires into ``Results`` proposals; let the
  :class:`~molens.actors.cleaner.Cleaner` propose ``Expire``.

Why one loop thread instead of one pykka actor per box of DESIGN §3: the wheel, the dispatcher's
worker estimates and the monitor's deadline heap are touched on every fire; one owner thread needs
no locks and one wake-up serves all of them (a timed wait, never a busy tick). Each box is still
its own small class in ``molens/actors/``. Everything crossing a boundary is batched: effects
arrive per applied batch, proposals carry up to ``MAX_PROPOSAL_ITEMS`` items, fires go one frame
per worker per loop, results one frame per pool flush.

Worker RPC frames (``Node.set_rpc_handler``): ``b"B" + fire_batch`` (leader -> worker),
``b"R" + msgpack([free, attempts, fire_results])`` and ``b"H" + msgpack(free)`` (worker -> leader).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from molens.actors import raft_peer as rp
from molens.actors.cleaner import Cleaner
from molens.actors.dispatcher import REPORT_INTERVAL_S, Dispatcher
from molens.actors.fireworker import FirePool, make_pool_manager
from molens.actors.monitor import Monitor
from molens.actors.stats import ReportingDeliverer, SchedulerStats
from molens.actors.timewheel import LeaderWheel
from molens.config import Config, callback_policy
from molens.delivery import (
    DeliveryOutcome,
    FireResult,
    decode_fire_batch,
    decode_fire_results,
    encode_fire_batch,
    encode_fire_results,
    to_result_item,
)
from molens.delivery import FireRequest as WireFire
from molens.fsm.commands import Command, Dispatched, DispatchItem, ResultItem, Results
from molens.fsm.machine import FireRequest
from molens.fsm.store import EntryResult, TaskStore
from molens.raft.transport import RpcEndpoint

log = logging.getLogger(__name__)

MAX_PROPOSAL_ITEMS = 1_000
"""Most items in one Dispatched / Results proposal."""
MAX_DISPATCH_PROPOSALS = 8
"""Dispatched proposals in flight at once (more due tasks wait in the backlog)."""
RESULTS_FLUSH_MS = 10
"""A results batch is proposed at most this long after its first item (fewer, fuller Results
entries: the next occurrence of a periodic task is computed from its schedule, not from this)."""
RETRY_REFUSED_MS = 100
"""A task whose Dispatched proposal was refused (not appended) is due again this much later."""
DRAIN_S = 5.0
"""How long a stopping leader waits for the results of the fires it sent."""
MAX_TRACKED_ATTEMPTS = 200_000
"""Bound of the worker's fire id -> attempt map (results then go without an attempt: still valid)."""
UNSENT_RESULTS_TTL_S = 30.0
"""Results with no known leader to go to are kept this long, then dropped (the Monitor covers them)."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# -------------------------------------------------------------------------------------------------
# the leader session


class LeaderSession:
    """The leader-only actor set for one term (see the module docstring)."""

    def __init__(self, svc: Scheduler, term: int) -> None:
        self.svc = svc
        self.term = term
        cfg = svc.cfg.scheduler
        self._cv = threading.Condition()
        self._inbox: collections.deque[tuple[Any, ...]] = collections.deque()
        self._stopping = False
        self._draining = False
        self._drain_until = 0.0
        self._results_pending = 0
        self._sent: dict[str, int] = {}
        """fire id -> attempt of the fires this session sent and has no result for yet."""
        store = svc.store
        self.dispatcher = Dispatcher(svc.node_id, store.get_task, svc.pool.free_capacity, cfg.dispatch_timeout_ms)
        self.monitor = Monitor(store.get_fire)
        self.cleaner = Cleaner(store.scan_expirable, cfg.task_retention_minutes, cfg.expire_rate_limit_qps)
        self.wheel: LeaderWheel | None = None
        self.max_inflight = cfg.max_inflight_fires
        self.lead_ms = cfg.dispatch_lead_ms
        self._backlog: list[str] = []
        self._backlog_at = 0
        self._dispatch_proposals = 0
        self._dispatch_items = 0
        self._results: list[ResultItem] = []
        self._results_first = 0.0
        self._thread = threading.Thread(target=self._main, name=f"leader-t{term}", daemon=True)

    # ---- outside world (any thread) -------------------------------------------------------------
    def start(self) -> LeaderSession:
        self._thread.start()
        return self

    def post(self, *event: Any) -> None:
        with self._cv:
            if self._stopping:
                return
            self._inbox.append(event)
            if len(self._inbox) == 1:
                self._cv.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Stop at once (no more proposals or sends); join when ``timeout`` is given."""
        with self._cv:
            self._stopping = True
            self._inbox.clear()
            self._cv.notify()
        if timeout is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def drain(self, timeout: float) -> None:
        """Graceful end (the node is stopping while it leads): plan nothing new, wait up to
        ``timeout`` for the results of the fires this session sent and get them committed, then
        stop. A fire still out after that is left to the next leader's Monitor."""
        self.post("drain", timeout)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout + 1.0)
        self.stop()

    @property
    def stopping(self) -> bool:
        return self._stopping

    # ---- the loop --------------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._run()
        except Exception as exc:
            log.exception("leader scheduler failed term=%d", self.term)
            self.svc.fatal(exc)

    def _run(self) -> None:
        svc, st = self.svc, self.svc.stats
        now = wall_ms()
        wheel = LeaderWheel(svc.cfg.scheduler.tick_ms, now)
        n = wheel.rebuild(_until(svc.store.scan_due(), lambda: self._stopping))
        fires = 0
        for f in svc.store.scan_fires():
            self.monitor.watch((f,))
            fires += 1
        self.wheel = wheel
        st.add(terms_led=1)
        st.gauge(rebuild_tasks=n, rebuild_ms=round(wheel.rebuild_ms, 1), rebuild_fires=fires, term=self.term)
        log.info(
            "leader scheduler started term=%d wheel=%d fires_in_flight=%d rebuild_ms=%.0f",
            self.term, n, fires, wheel.rebuild_ms,
        )
        while True:
            events = self._wait(wheel)
            if events is None:
                break
            for ev in events:
                self._handle(ev)
            if self._stopping:
                break
            now = wall_ms()
            lost = self.monitor.due(now)
            if lost:
                st.add(lost=len(lost))
                self._add_results(lost)
                for r in lost:
                    self._sent.pop(r.fire_id, None)
            if self._draining:
                if self._results:
                    self._flush_results(now)
                if (not self._sent and not self._results and self._results_pending == 0
                        and self._dispatch_proposals == 0) or time.monotonic() >= self._drain_until:
                    log.info("leader scheduler drained term=%d unanswered=%d", self.term, len(self._sent))
                    break
                continue
            self._dispatch(now)
            if self._results and (
                len(self._results) >= MAX_PROPOSAL_ITEMS or time.monotonic() - self._results_first >= RESULTS_FLUSH_MS / 1000
            ):
                self._flush_results(now)
            cmd = self.cleaner.run(now)
            if cmd is not None:
                self._propose(cmd, lambda res, err: self.post("expired", res, err))
        log.info("leader scheduler stopped term=%d", self.term)

    def _wait(self, wheel: LeaderWheel) -> list[tuple[Any, ...]] | None:
        now = wall_ms()
        wd = wheel.next_deadline()
        deadlines = [
            d for d in (None if wd is None else wd - self.lead_ms, self.monitor.next_deadline(), self.cleaner.next_deadline())
            if d is not None
        ]
        if self._backlog and self._can_dispatch():
            deadlines.append(max(now, self._backlog_at))
        timeout = (min(deadlines) - now) / 1000 if deadlines else 1.0
        if self._draining:
            timeout = min(timeout, 0.02)
        if self._results:
            timeout = min(timeout, self._results_first + RESULTS_FLUSH_MS / 1000 - time.monotonic())
        with self._cv:
            if not self._inbox and not self._stopping and timeout > 0:
                self._cv.wait(min(timeout, 1.0))
            if self._stopping:
                return None
            events = list(self._inbox)
            self._inbox.clear()
        return events

    def _handle(self, ev: tuple[Any, ...]) -> None:
        kind = ev[0]
        wheel = self.wheel
        assert wheel is not None
        if kind == "applied":
            self._on_applied(ev[1])
        elif kind == "results":
            items: list[ResultItem] = ev[1]
            for it in items:
                self.monitor.answered(it.fire_id)
                self._sent.pop(it.fire_id, None)
            self.svc.stats.add(results_received=len(items))
            self._add_results(items)
        elif kind == "report":
            self.dispatcher.report(ev[1], ev[2])
        elif kind == "dispatched":
            items2: list[DispatchItem] = ev[1]
            res, err = ev[2], ev[3]
            self._dispatch_proposals -= 1
            self._dispatch_items -= len(items2)
            if err is not None:
                self.dispatcher.settle(items2)
                self.svc.stats.add(proposals_failed=1)
                if isinstance(err, rp.ProposalRefused):
                    again = wall_ms() + RETRY_REFUSED_MS
                    for d in items2:
                        wheel.add(d.task_id, again)
                return
            out = res[0].results if res and isinstance(res[0], EntryResult) else []
            refused = [it for it, r in zip(items2, out) if r is not None]
            self.dispatcher.settle(refused)
            self.svc.stats.add(dispatched_accepted=len(items2) - len(refused))
        elif kind == "results_done":
            items3: list[ResultItem] = ev[1]
            err = ev[3]
            self._results_pending -= 1
            if err is not None:
                self.svc.stats.add(proposals_failed=1)
                if isinstance(err, rp.ProposalRefused):
                    self._add_results(items3)
            else:
                self.svc.stats.add(results_proposed=len(items3))
        elif kind == "expired":
            res, err = ev[1], ev[2]
            n = 0
            if err is None and res and isinstance(res[0], EntryResult):
                n = sum(1 for r in res[0].results if r is True)
            self.cleaner.done(n)
            self.svc.stats.add(expired=n)
        elif kind == "drain":
            self._draining = True
            self._drain_until = time.monotonic() + float(ev[1])
        elif kind == "retry":
            for tid in ev[1]:
                wheel.add(tid, ev[2])
        elif kind == "call":  # a read of the loop's state for another thread (the API's wheel view)
            fn, fut = ev[1], ev[2]
            try:
                fut.set_result(fn(self))
            except Exception as exc:
                fut.set_exception(exc)

    def _on_applied(self, entries: list[EntryResult]) -> None:
        wheel = self.wheel
        assert wheel is not None
        sends: list[FireRequest] = []
        for er in entries:
            wheel.apply(er.effects)
            fires = [e for e in er.effects if isinstance(e, FireRequest)]
            if fires:
                self.monitor.watch(e.fire for e in fires)
                if er.term == self.term:
                    sends.extend(fires)
        if sends:
            for e in sends:
                self._sent[e.fire.fire_id] = e.fire.attempt
            now = wall_ms()
            self.svc.stats.sample("plan_to_send", [now - e.fire.dispatched_ms for e in sends])
            self.svc.send_fires(Dispatcher.group(sends), self.dispatcher)

    def _can_dispatch(self) -> bool:
        return (
            self._dispatch_proposals < MAX_DISPATCH_PROPOSALS
            and self.monitor.in_flight + self._dispatch_items < self.max_inflight
        )

    def _dispatch(self, now: int) -> None:
        wheel = self.wheel
        assert wheel is not None
        due = wheel.advance(now + self.lead_ms)
        if self._backlog:
            due = self._backlog + due
            self._backlog = []
        if not due:
            return
        pos = 0
        while pos < len(due):
            if not self._can_dispatch():
                break
            room = min(MAX_PROPOSAL_ITEMS, self.max_inflight - self.monitor.in_flight - self._dispatch_items)
            chunk = due[pos : pos + MAX_PROPOSAL_ITEMS]
            items, later = self.dispatcher.plan(chunk, now, room, self.lead_ms)
            used = len(chunk) - len(later)
            pos += used
            if items:
                self.svc.stats.sample("dispatch_lag", self.dispatcher.lags)
                self._dispatch_proposals += 1
                self._dispatch_items += len(items)
                self.svc.stats.add(dispatched_proposed=len(items))
                self._propose(Dispatched(now, tuple(items)), functools.partial(self._posted, "dispatched", items))
            if later:
                break
        if pos < len(due):
            self._backlog = due[pos:]
            # no worker capacity or no room: look again soon (events also wake the loop)
            self._backlog_at = now + svc_tick(self.svc)

    def _add_results(self, items: Sequence[ResultItem]) -> None:
        if not self._results:
            self._results_first = time.monotonic()
        self._results.extend(items)

    def _flush_results(self, now: int) -> None:
        items, self._results = self._results[:MAX_PROPOSAL_ITEMS], self._results[MAX_PROPOSAL_ITEMS:]
        if self._results:
            self._results_first = time.monotonic()
        self._results_pending += 1
        self._propose(Results(now, tuple(items)), functools.partial(self._posted, "results_done", items))

    def _posted(self, kind: str, items: list[Any], res: list[Any], err: BaseException | None) -> None:
        self.post(kind, items, res, err)

    def _propose(self, cmd: Command, on_done: Callable[[list[Any], BaseException | None], None]) -> None:
        self.svc.peer.propose_batch([self.svc.store.encode_proposal(cmd)], on_done)


def svc_tick(svc: Scheduler) -> int:
    return max(10, svc.cfg.scheduler.tick_ms)


def _until(it: Any, stop: Callable[[], bool]) -> Any:
    """``it`` until ``stop()`` (checked every 4096 items): a deposed leader stops rebuilding."""
    for n, x in enumerate(it):
        if n & 4095 == 0 and stop():
            return
        yield x


# -------------------------------------------------------------------------------------------------
# the node's scheduler service


class Scheduler:
    """Worker pool + leader sessions of one node (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        store: TaskStore,
        peer: rp.RaftPeerHandle,
        rpc: RpcEndpoint,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.node_id = cfg.node.id
        self.store = store
        self.peer = peer
        self.rpc = rpc
        self._on_fatal = on_fatal
        self.stats = SchedulerStats()
        w = cfg.worker
        self._http = make_pool_manager(w.concurrency, callback_policy(cfg))  # as validated
        deliverer = ReportingDeliverer(self.stats, self._http, self.node_id, w.signing_secret, w.signing_secret_next)
        self.pool = FirePool(deliverer, w.concurrency, self._on_pool_results, flush_interval_ms=2.0)
        self._lock = threading.Lock()
        self._session: LeaderSession | None = None
        self._leader_id: str | None = None
        self._leading_allowed = True
        self._attempts: dict[str, int] = {}
        self._alock = threading.Lock()
        self._unsent: collections.deque[tuple[float, bytes]] = collections.deque()
        self._stop = threading.Event()
        self._reporter = threading.Thread(target=self._report_loop, name="worker-report", daemon=True)

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Scheduler:
        self.pool.start()
        self.store.on_applied = self._on_applied
        last = self.peer.subscribe(self._on_leader_change)
        self._on_leader_change(last)
        self._reporter.start()
        return self

    def stop_leader(self, timeout: float = DRAIN_S) -> None:
        """No more leader sessions on this node; the current one drains (bounded by ``timeout``:
        the results of fires it sent get committed, so the next leader re-fires none of them) and
        stops (graceful stop, before leadership is handed over)."""
        with self._lock:
            self._leading_allowed = False
            s = self._session
        if s is not None:
            s.drain(timeout)
            with self._lock:
                if self._session is s:
                    self._session = None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker side: in-flight fires finish and their results are handed over."""
        self.stop_leader(timeout)
        self.pool.stop(timeout)
        self._stop.set()
        if self._reporter.is_alive():
            self._reporter.join(timeout)
        self._flush_unsent()
        self.store.on_applied = None
        self._http.clear()

    def fatal(self, exc: BaseException) -> None:
        if self._on_fatal is not None:
            self._on_fatal(exc)

    @property
    def session(self) -> LeaderSession | None:
        return self._session

    def to_json(self) -> dict[str, Any]:
        s = self._session
        ps = self.pool.stats()
        out: dict[str, Any] = {
            **self.stats.to_json(),
            "leading": s is not None,
            "worker": {
                "concurrency": ps.concurrency,
                "queued": ps.queued,
                "in_flight": ps.in_flight,
                "delivered": ps.delivered,
                "refused": ps.refused,
                "expired": ps.expired,
                "free_capacity": self.pool.free_capacity(),
            },
        }
        if s is not None and s.wheel is not None:
            out.update(wheel_size=len(s.wheel), fires_in_flight=s.monitor.in_flight, live_workers=sorted(s.dispatcher.live_workers()))
        return out

    # ---- raft-thread callbacks (quick) ----------------------------------------------------------
    def _on_applied(self, entries: list[EntryResult]) -> None:
        s = self._session
        if s is not None:
            s.post("applied", entries)

    def _on_leader_change(self, ch: rp.LeaderChange) -> None:
        old: LeaderSession | None = None
        with self._lock:
            self._leader_id = ch.leader_id
            cur = self._session
            if ch.is_leader and self._leading_allowed:
                if cur is None or cur.term != ch.term:
                    old = cur
                    self._session = LeaderSession(self, ch.term).start()
            elif cur is not None:
                old, self._session = cur, None
        if old is not None:
            old.stop()  # at once; its thread notices and exits without sending anything more

    # ---- worker side --------------------------------------------------------------------------
    def on_rpc(self, frm: str, payload: bytes) -> None:
        """Worker RPC handler (RPC I/O thread)."""
        tag, body = payload[:1], payload[1:]
        try:
            if tag == b"B":
                self.submit(decode_fire_batch(body))
            elif tag == b"R":
                if self._session is None:  # not (or no longer) leading: pass them on to the leader
                    leader = self._leader_id
                    if leader is None or leader == self.node_id or not self.rpc.send(leader, payload):
                        self._unsent.append((time.monotonic(), payload))
                    return
                free, attempts, frame = msgpack.unpackb(body, raw=False)
                self._results_in(frm, int(free), attempts, decode_fire_results(frame))
            elif tag == b"H":
                s = self._session
                if s is not None:
                    s.post("report", frm, int(msgpack.unpackb(body)))
            else:
                log.warning("rpc from=%s: unknown frame tag %r", frm, tag)
        except Exception:
            log.exception("rpc from=%s: bad frame (%d bytes)", frm, len(payload))

    def submit(self, fires: list[WireFire]) -> None:
        """Queue fires on the local pool; fires it cannot take are answered as not sent."""
        with self._alock:
            if len(self._attempts) > MAX_TRACKED_ATTEMPTS:  # fires the pool dropped unsent leave entries
                log.warning("forgetting %d tracked fire attempts", len(self._attempts))
                self._attempts.clear()
            for f in fires:
                self._attempts[f.fire_id] = f.attempt
        receipt = self.pool.submit(fires)
        if receipt.refused:
            self.stats.add(worker_refused=len(receipt.refused))
            self._on_pool_results(
                [
                    FireResult(f.fire_id, f.kind, None, DeliveryOutcome.NETWORK_ERROR, b"", 0.0, self.node_id, "worker queue full")
                    for f in receipt.refused
                ]
            )

    def send_fires(self, by_worker: dict[str, list[WireFire]], dispatcher: Dispatcher) -> None:
        """Send committed fires to their workers, one frame each (leader session thread)."""
        for wid, fires in by_worker.items():
            if wid == self.node_id:
                self.submit(fires)
                dispatcher.sent_local(len(fires))
                self.stats.add(fires_sent_local=len(fires), fires_sent=len(fires))
            elif self.rpc.send(wid, b"B" + encode_fire_batch(fires)):
                self.stats.add(fires_sent=len(fires))
            else:  # not queued: answer at once instead of waiting for the deadline
                log.warning("fires not sent to worker=%s (rpc refused) n=%d", wid, len(fires))
                self._results_in(
                    self.node_id,
                    None,
                    {f.fire_id: f.attempt for f in fires},
                    [
                        FireResult(f.fire_id, f.kind, None, DeliveryOutcome.NETWORK_ERROR, b"", 0.0, wid, "rpc send failed")
                        for f in fires
                    ],
                )

    def _on_pool_results(self, results: list[FireResult]) -> None:
        with self._alock:
            attempts = {r.fire_id: self._attempts.pop(r.fire_id, 0) for r in results}
        leader = self._leader_id
        if leader == self.node_id and self._session is not None:
            self._results_in(self.node_id, None, attempts, results)
            return
        # no leader known, or this node is handing leadership over (its session has stopped):
        # keep the results for whoever leads next rather than leave them to the Monitor
        frame = b"R" + msgpack.packb([self.pool.free_capacity(), attempts, encode_fire_results(results)])
        if leader is None or leader == self.node_id or not self.rpc.send(leader, frame):
            self._unsent.append((time.monotonic(), frame))
        else:
            self.stats.add(results_forwarded=len(results))

    def _results_in(self, frm: str, free: int | None, attempts: dict[str, int], results: list[FireResult]) -> None:
        s = self._session
        if s is None:
            self.stats.add(results_dropped=len(results))
            return
        items = []
        for r in results:
            it = to_result_item(r)
            a = attempts.get(r.fire_id)
            if a:  # the attempt the worker carried out: a late result never lands on a newer attempt
                it = ResultItem(it.fire_id, it.kind, it.status_code, it.outcome, it.response_head, it.latency_ms, it.worker, a)
            items.append(it)
        s.post("results", items)
        if free is not None:
            s.post("report", frm, free)

    def _report_loop(self) -> None:
        while not self._stop.wait(REPORT_INTERVAL_S):
            try:
                self._flush_unsent()
                leader = self._leader_id
                if leader is not None and leader != self.node_id:
                    self.rpc.send(leader, b"H" + msgpack.packb(self.pool.free_capacity()))
            except Exception:
                log.exception("worker report failed")

    def _flush_unsent(self) -> None:
        leader = self._leader_id
        now = time.monotonic()
        while self._unsent:
            at, frame = self._unsent[0]
            if now - at > UNSENT_RESULTS_TTL_S:
                self._unsent.popleft()
                self.stats.add(results_dropped=1)
                continue
            if leader is None or leader == self.node_id:
                if leader == self.node_id and self._session is not None:
                    self._unsent.popleft()
                    _free, attempts, fr = msgpack.unpackb(frame[1:], raw=False)
                    self._results_in(self.node_id, None, attempts, decode_fire_results(fr))
                    continue
                return
            if not self.rpc.send(leader, frame):
                return
            self._unsent.popleft()


__all__ = ["LeaderSession", "MAX_PROPOSAL_ITEMS", "Scheduler", "wall_ms"]
