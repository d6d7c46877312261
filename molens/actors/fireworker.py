"""FireWorkerPool: the actor that carries out FireBatches on every node, leader included.

:class:`FireWorkerPool` (a pykka actor, one per node) owns a :class:`FirePool`, the map of fire
id -> attempt of the fires it took, and the results it could not hand over yet. Receives:
``FireBatch`` (a leader's over worker RPC), ``PoolResults`` (the pool's flusher, while no local
leader is known), ``LeaderIs`` (who leads; the local leader actors when this node does),
``ForwardFrame`` (a results frame that reached this node while it does not lead), ``Wake`` (its
alarm, every ``REPORT_INTERVAL_S``: heartbeat with the free capacity and the fires held to a remote
leader, or a ``WorkerReport`` of the fires held to the local Monitor; retry of unsent results), ``GetGauges`` (ask). Sends: ``FireResults`` to the local Monitor, or ``R`` frames
to the remote leader over worker RPC; ``Delivered`` to Stats.

When this node leads, its fires and their results skip this actor's mailbox: the Dispatcher hands
the fires to :attr:`FireWorkerPool.local_fires` (into the pool's queue, on the Dispatcher's
thread) and the pool's flusher tells the local Monitor their results itself. The fire id ->
attempt map is shared under a lock, and a result leaves it and reaches the Monitor under that
lock, as a heartbeat's list of fires held does: the Monitor never hears a heartbeat that leaves
out a fire before that fire's result (``docs/architecture.md#lost-workers``).

The HTTP attempts themselves run on a :class:`~molens.delivery.pool.FirePool` (see there why
they are not actors of their own).
"""


from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import pykka

from molens.actors.alarm import Alarm, mono_ms, wall_ms
from molens.actors.dispatcher import with_attempt
from molens.actors.messages import (
    FireBatch,
    FireResults,
    GetGauges,
    LeaderIs,
    LeaderRefs,
    PoolResults,
    Wake,
    WorkerReport,
)
from molens.actors.stats import STATS_FLUSH_MS, ReportingDeliverer, StatsClient
from molens.delivery import (
    FIRE_BATCH_V1,
    FIRE_BATCH_VERSION,
    Deliverer,
    DeliveryCodecError,
    FireRequest,
    FireResult,
    decode_fire_results,
    encode_fire_results,
    split_unsent,
    to_result_item,
)
from molens.delivery.pool import FirePool
from molens.fsm.commands import ResultItem

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ForwardFrame:
    """Worker RPC -> FireWorkerPool: a results frame for a leader this node is not (pass it on)."""

    frame: bytes
    frm: str = ""
    """The member that sent it: if this node leads by now, only that member's own results count."""


@dataclass(frozen=True, slots=True)
class LocalFires:
    """How this node's Dispatcher hands fires to this node's pool, on its own thread:
    ``carry_out(fires)`` is False when the pool no longer takes any (it is stopping)."""

    carry_out: Callable[[list[FireRequest]], bool]


MAX_TRACKED_ATTEMPTS = 200_000
"""Bound of the fire id -> attempt map (results then go without an attempt: still valid)."""
UNSENT_RESULTS_TTL_S = 30.0
"""Results with no known leader to go to are kept this long, then dropped (the Monitor covers them)."""
LEADER_WAIT_S = 1.0
"""How long a stopping worker with results to hand over waits for a leader to be known (an election
after its hand-over) before it gives up on them."""
REPORT_INTERVAL_MS = 500
"""WorkerHeartbeat to a remote leader with this worker's free capacity and the fires it holds."""
MAX_HELD_IN_HEARTBEAT = 5_000
"""A heartbeat lists the fire ids held (taken, result not yet sent) up to this many; past it, none
(the leader then cannot tell a dropped fire from a held one: docs/architecture.md#lost-workers)."""


def results_frame(free: int, attempts: dict[str, int], results: list[FireResult]) -> bytes:
    """``R`` + msgpack([free, attempts, fire results]): results going to the leader."""
    packed: bytes = msgpack.packb([free, attempts, encode_fire_results(results)])
    return b"R" + packed


def heartbeat_frame(free: int, held: list[str] | None, batch_version: int = FIRE_BATCH_VERSION) -> bytes:
    """``H`` + msgpack([free capacity, [fire batch version, fire ids held...] or None]) (worker -> leader).

    The version this worker reads (``docs/deploy.md#rolling-upgrade``) travels at the head of the
    held list, an int among fire ids (strings): a leader of the previous release reads exactly two
    fields and takes the list as the fires held, where an id that is no open fire is ignored; a
    third field would make it drop every heartbeat. With ``held`` None (more than
    ``MAX_HELD_IN_HEARTBEAT``) the heartbeat says nothing of the version either."""
    return b"H" + bytes(msgpack.packb([free, None if held is None else [batch_version, *held]]))


@dataclass(frozen=True, slots=True)
class WorkerHeartbeat:
    """A decoded heartbeat: free capacity, fire ids held (None = not listed), and the fire batch
    version the worker reads (None = this heartbeat does not say; :data:`FIRE_BATCH_V1` for a worker
    of the release before versions, whose held list has ids only)."""

    free: int
    held: frozenset[str] | None
    batch_version: int | None


def decode_heartbeat(body: bytes) -> WorkerHeartbeat:
    """A heartbeat body; a bare int (a worker of an older version) holds ``None``. Anything else
    raises :class:`DeliveryCodecError`: a free capacity that is not a count, a held list that is not
    a list."""
    v = _unpack_rpc(body, "heartbeat")
    if type(v) is int:
        return WorkerHeartbeat(_count(v, "heartbeat"), None, None)
    if type(v) is not list or len(v) != 2:
        raise DeliveryCodecError("heartbeat: not [free, held]")
    free, held = v
    if held is None:
        return WorkerHeartbeat(_count(free, "heartbeat"), None, None)
    if type(held) is not list:
        raise DeliveryCodecError("heartbeat: held is not a list")
    versions = [x for x in held if type(x) is int]
    return WorkerHeartbeat(_count(free, "heartbeat"), frozenset(x for x in held if type(x) is str),
                     max(versions) if versions else FIRE_BATCH_V1)


def decode_results_frame(body: bytes) -> tuple[int, dict[str, int], list[FireResult]]:
    """An ``R`` frame's body: [free capacity, fire id -> attempt, fire results]; a frame of any other
    shape raises :class:`DeliveryCodecError`."""
    v = _unpack_rpc(body, "results")
    if type(v) is not list or len(v) != 3 or type(v[1]) is not dict or type(v[2]) is not bytes:
        raise DeliveryCodecError("results: not [free, attempts, frame]")
    free, attempts, frame = v
    if any(type(k) is not str or type(a) is not int for k, a in attempts.items()):
        raise DeliveryCodecError("results: attempts is not a map of fire id to attempt number")
    return _count(free, "results"), attempts, decode_fire_results(frame)


def _unpack_rpc(body: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(body, raw=False)
    except Exception as e:  # msgpack raises several types for bytes that are not msgpack
        raise DeliveryCodecError(f"{what}: not msgpack: {e}") from e


def _count(v: Any, what: str) -> int:
    if type(v) is not int or v < 0:
        raise DeliveryCodecError(f"{what}: the free capacity is not a count")
    return v


def result_items(attempts: dict[str, int], results: list[FireResult]) -> list[ResultItem]:
    """``Results`` items for worker results, each for the attempt the worker carried out."""
    return [with_attempt(to_result_item(r), attempts.get(r.fire_id, 0)) for r in results]


def own_results(frm: str, items: list[ResultItem]) -> tuple[list[ResultItem], int]:
    """The items of a results frame from member ``frm`` that speak for ``frm`` itself, and how
    many claimed another worker (dropped: a member answers only for fires dispatched to it, and a
    frame passed on by another member cannot be told from a forged one)."""
    own = [it for it in items if it.worker == frm]
    if len(own) < len(items):
        log.warning("results frame from %s: %d results name another worker; ignored", frm, len(items) - len(own))
    return own, len(items) - len(own)


class FireWorkerPool(pykka.ThreadingActor):
    """The node's fire worker actor (see the module docstring)."""

    def __init__(
        self,
        node_id: str,
        deliverer: Deliverer,
        concurrency: int,
        send: Callable[[str, bytes], bool],
        stats: StatsClient,
        queue_limit: int | None = None,
        flush_interval_ms: float = 2.0,
        fatal: Callable[[BaseException], None] | None = None,
        stop_timeout_s: float = 10.0,
        engine: str = "loop",
        loop_tick_ms: float = 0.0,
        clock_suspect: Callable[[], bool] = lambda: False,
        leader_now: Callable[[], str | None] = lambda: None,
    ) -> None:
        super().__init__()
        self._leader_now = leader_now
        """The leader as Raft knows it now (any thread). A stopping actor reads it: the ``LeaderIs`` of
        a leader elected after this node handed leadership over waits behind the stop in the mailbox,
        never handled, and the last results would go nowhere."""
        self._clock_suspect = clock_suspect
        """This node's wall clock stepped and is not judged good since (``ClockGate.suspect``)."""
        self._stop_timeout_s = stop_timeout_s
        self.handled = 0
        self.node_id = node_id
        self._deliverer = deliverer
        self._send = send
        self._stats = stats
        self._fatal = fatal
        self.pool = FirePool(
            deliverer, concurrency, self._pool_results, queue_limit, flush_interval_ms=flush_interval_ms, engine=engine,
            loop_tick_ms=loop_tick_ms,
        )
        self._attempts: dict[str, int] = {}
        self._att_lock = threading.Lock()
        """Guards ``_attempts``, and keeps a result's leaving it and its telling the Monitor together."""
        self.local_fires = LocalFires(self.carry_out)
        self._unsent: collections.deque[tuple[float, bytes, str]] = collections.deque()
        self._leader_id: str | None = None
        self._local: LeaderRefs | None = None
        self._alarm: Alarm | None = None
        self._stopping = False
        self._delivered_at = 0

    # ---- lifecycle -------------------------------------------------------------------------------
    def on_start(self) -> None:
        self.pool.start()
        self._alarm = Alarm(self.actor_ref, "fireworker", clock=mono_ms)  # heartbeats go on whatever the wall clock does
        self._alarm.set(mono_ms() + REPORT_INTERVAL_MS)

    def on_stop(self) -> None:
        """In-flight fires finish; their results are routed from the flusher thread directly (this
        thread waits in ``pool.stop``, so nothing else touches the actor's state meanwhile). Fires not
        started (queued, or held for their time) are answered as not sent, so the leader plans them
        again at once (docs/architecture.md#not-sent) instead of settling them at their deadline: an
        at_most_once fire held ahead by a worker that stopped went ``unknown`` though it never left."""
        self._stopping = True
        if self._alarm is not None:
            self._alarm.close()
        self._learn_leader(0.0)
        unstarted = self.pool.stop(self._stop_timeout_s)
        if unstarted:
            log.info("stopping: %d fires not started answered as not sent", len(unstarted))
            self._route([FireResult.unsent(f.fire_id, f.kind, self.node_id, "worker stopped") for f in unstarted])
        if self._unsent:
            self._learn_leader(LEADER_WAIT_S)
        self._goodbye()
        self._flush_unsent()

    def _goodbye(self) -> None:
        """(stopping) A last heartbeat to a remote leader, ahead of the last results: no room left
        (free 0: it sends this worker nothing more), the fires whose results follow listed as held
        (not judged lost meanwhile), and this release's version. A leader elected after this node
        handed leadership over has never heard from it: without the version it would take the
        results as of the release before, each fire answered not sent as an attempt used up."""
        leader = self._leader_id
        if leader is None or leader == self.node_id or self._local is not None:
            return
        with self._att_lock:
            held = list(self._attempts)
        for _at, frame, _frm in self._unsent:
            with contextlib.suppress(DeliveryCodecError):
                held.extend(r.fire_id for r in decode_results_frame(frame[1:])[2])
        self._send(leader, heartbeat_frame(0, held if len(held) <= MAX_HELD_IN_HEARTBEAT else None))

    def _learn_leader(self, wait_s: float) -> None:
        """(stopping) The leader Raft knows now, waited for up to ``wait_s`` while there is none (an
        election after the hand-over)."""
        end = time.monotonic() + wait_s
        while (leader := self._leader_now()) is None and time.monotonic() < end:
            time.sleep(0.02)
        if leader is not None and leader != self._leader_id:
            self._leader_id = leader
            if leader != self.node_id:
                self._local = None

    def on_failure(self, exception_type: object, exception_value: object, traceback: object) -> None:
        self._stopping = True
        if self._alarm is not None:
            self._alarm.close()
        self.pool.stop()
        log.error("fire worker actor failed: %r", exception_value)
        if self._fatal is not None:
            self._fatal(exception_value if isinstance(exception_value, BaseException) else RuntimeError("fire worker failed"))

    def carry_out(self, fires: list[FireRequest]) -> bool:
        """Fires from this node's Dispatcher, taken on its thread (not through the mailbox)."""
        if self._stopping:
            return False
        self._submit(fires)
        return True

    def _pool_results(self, results: list[FireResult]) -> None:
        """Results to hand over, from any thread (the pool's flusher, mostly): straight to the local
        Monitor when this node leads, else through the mailbox to be sent on."""
        local = self._local
        if self._stopping:
            self._route(results)
        elif local is not None:
            self._to_monitor(local, results)
        else:
            try:
                self.actor_ref.tell(PoolResults(results))
            except pykka.ActorDeadError:
                self._route(results)

    # ---- messages --------------------------------------------------------------------------------
    def on_receive(self, message: Any) -> Any:
        self.handled += 1
        if isinstance(message, FireBatch):
            self._submit(message.fires)
        elif isinstance(message, PoolResults):
            self._route(message.results)
        elif isinstance(message, LeaderIs):
            changed = message.leader_id != self._leader_id
            self._leader_id, self._local = message.leader_id, message.local
            if changed:  # a new leader hears from this worker at once (docs/architecture.md#lost-workers)
                self._heartbeat()
            else:
                self._flush_unsent()
        elif isinstance(message, ForwardFrame):
            self._forward(message.frame, message.frm)
        elif isinstance(message, Wake):
            self._heartbeat()
        elif isinstance(message, GetGauges):  # the pool's own figures are read from FirePool.stats()
            return {"fireworker_messages": self.handled}
        else:
            return super().on_receive(message)
        return None

    def _submit(self, fires: list[FireRequest]) -> None:
        with self._att_lock:
            att = self._attempts
            if len(att) > MAX_TRACKED_ATTEMPTS:  # fires the pool dropped unsent leave entries
                log.warning("forgetting %d tracked fire attempts", len(att))
                att.clear()
            for f in fires:
                att[f.fire_id] = f.attempt
        if self._clock_suspect():  # a fire it would hold for its time, it would time on a stepped clock
            now = wall_ms()
            self._give_back([f for f in fires if f.not_before_ms > now])
            fires = [f for f in fires if f.not_before_ms <= now]
        receipt = self.pool.submit(fires)
        if receipt.refused:
            self._stats.add(worker_refused=len(receipt.refused))
            self._pool_results([FireResult.unsent(f.fire_id, f.kind, self.node_id, "worker queue full")
                                for f in receipt.refused])

    def _give_back(self, fires: list[FireRequest]) -> None:
        """Fires this worker must not hold for their time on its wall clock, which stepped (a clock
        stepped back 15 s held one 15 s): answered as not sent, at once, so the leader sends them
        again elsewhere. Fires already due go out as before."""
        if not fires:
            return
        log.warning("clock stepped: %d fires held for their time given back unsent", len(fires))
        self._pool_results([FireResult.unsent(f.fire_id, f.kind, self.node_id, "clock stepped while held") for f in fires])

    def _report_delivered(self) -> None:
        if isinstance(self._deliverer, ReportingDeliverer):
            now = wall_ms()
            if self._stopping or now >= self._delivered_at:  # one Delivered per STATS_FLUSH_MS
                self._stats.delivered(self._deliverer.take())
                self._delivered_at = now + STATS_FLUSH_MS

    def _take_attempts(self, results: list[FireResult]) -> dict[str, int]:
        att = self._attempts
        return {r.fire_id: att.pop(r.fire_id, 0) for r in results}

    def _to_monitor(self, local: LeaderRefs, results: list[FireResult]) -> None:
        """Results to the local Monitor (any thread)."""
        self._report_delivered()
        with self._att_lock:  # after any heartbeat that still listed these fires, before any that does not
            _tell(local.monitor, FireResults(result_items(self._take_attempts(results), results)))

    def _route(self, results: list[FireResult]) -> None:
        local = self._local
        if local is not None:
            self._to_monitor(local, results)
            return
        self._report_delivered()
        with self._att_lock:
            attempts = self._take_attempts(results)
        # no leader known, or another node leads: keep the results for whoever leads next rather
        # than leave them to the Monitor
        for part in split_unsent(results):
            if part:
                self._forward(results_frame(self.pool.free_capacity(), {r.fire_id: attempts[r.fire_id] for r in part},
                                            part), self.node_id)

    def _forward(self, frame: bytes, frm: str) -> None:
        local = self._local
        if local is not None:
            try:
                _free, attempts, results = decode_results_frame(frame[1:])
            except DeliveryCodecError as exc:  # passed on undecoded while this node did not lead
                self._stats.add(results_malformed=1)
                log.warning("results frame from %s dropped: %s", frm, exc)
                return
            own, dropped = own_results(frm, result_items(attempts, results))
            self._stats.add(results_wrong_worker=dropped)
            _tell(local.monitor, FireResults(own))
            return
        leader = self._leader_id
        if leader is None or leader == self.node_id or not self._send(leader, frame):
            self._unsent.append((time.monotonic(), frame, frm))
        else:
            self._stats.add(results_forwarded=1)

    def _heartbeat(self) -> None:
        if self._clock_suspect():
            self._give_back(self.pool.release_held())
        if isinstance(self._deliverer, ReportingDeliverer):
            self._stats.delivered(self._deliverer.take())
        self._flush_unsent()
        leader = self._leader_id
        local = self._local
        with self._att_lock:
            att = self._attempts
            held = list(att) if len(att) <= MAX_HELD_IN_HEARTBEAT else None
            if local is not None:  # this node leads: its Monitor learns which fires it still holds
                _tell(local.monitor, WorkerReport(((self.node_id, self.pool.free_capacity()),),
                                                  frozenset(held) if held is not None else None))
        if local is None and leader is not None and leader != self.node_id:
            self._send(leader, heartbeat_frame(self.pool.free_capacity(), held))
        if self._alarm is not None:
            self._alarm.set(mono_ms() + REPORT_INTERVAL_MS)

    def _flush_unsent(self) -> None:
        now = time.monotonic()
        unsent = self._unsent
        while unsent:
            at, frame, frm = unsent[0]
            if now - at > UNSENT_RESULTS_TTL_S:
                unsent.popleft()
                self._stats.add(results_dropped=1)
                continue
            if self._local is not None:
                unsent.popleft()
                self._forward(frame, frm)
                continue
            leader = self._leader_id
            if leader is None or leader == self.node_id or not self._send(leader, frame):
                return
            unsent.popleft()


def _tell(ref: pykka.ActorRef[Any], msg: Any) -> None:
    try:
        ref.tell(msg)
    except pykka.ActorDeadError:  # that term's actors stopped: its Monitor no longer needs them
        pass


__all__ = [
    "FireWorkerPool", "ForwardFrame", "LocalFires", "WorkerHeartbeat", "decode_heartbeat", "decode_results_frame", "heartbeat_frame", "own_results",
    "result_items",
    "results_frame",
]
