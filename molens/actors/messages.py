"""The messages the scheduler's actors send each other: frozen, slotted, each carrying a batch.

One message per batch, never one per task: at 3,000 fires/s the mailboxes see hundreds of messages
per second (``docs/architecture.md#actors``). ``tell`` carries events; of these messages ``ask`` is
used only for the queries at the bottom (stats, gauges, flows, the console's wheel view); the
RaftPeer's requests (:mod:`molens.actors.peer_messages`) are asked too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from molens.delivery import FireRequest
from molens.fsm.commands import DispatchItem, FlowSettings, ResultItem
from molens.fsm.machine import SendFire, WheelAdd, WheelRemove

# --- events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wake:
    """From an actor's :class:`~molens.actors.alarm.Alarm`: a deadline it asked for has come."""


@dataclass(frozen=True, slots=True)
class Join:
    """Supervisor -> each leader actor, first message of a term: the refs of the others."""

    refs: LeaderRefs


@dataclass(frozen=True, slots=True)
class Rebuild:
    """To TimeWheel and Monitor after ``Join``: stream the store's ``due`` index into the wheel;
    watch every fire in ``fires`` (no result when this term began)."""


@dataclass(frozen=True, slots=True)
class WheelEffects:
    """Raft thread (the supervisor's ``on_applied``) -> TimeWheel: the timer adds and removes of
    entries applied to the local replica, in log order."""

    effects: list[WheelAdd | WheelRemove]


@dataclass(frozen=True, slots=True)
class Committed:
    """Raft thread (the supervisor's ``on_applied``) -> Monitor: the fire effects of applied
    ``Dispatched`` entries, told before the Dispatcher hears its proposal's outcome.

    ``own`` are those of entries committed in this leader's term (the Dispatcher sends them, from
    the outcome of its own proposal);
    ``other`` those of an earlier term's entries (never sent by this leader; the Monitor gives
    them up at their deadline)."""

    own: list[SendFire]
    other: list[SendFire]


@dataclass(frozen=True, slots=True)
class DueBatch:
    """TimeWheel -> Dispatcher: task ids due within the dispatch lead."""

    task_ids: list[str]


@dataclass(frozen=True, slots=True)
class Requeue:
    """Dispatcher -> TimeWheel: put these task ids back, due at ``due_ms``."""

    task_ids: list[str]
    due_ms: int


@dataclass(frozen=True, slots=True)
class DispatchedBatch:
    """RaftPeer -> Dispatcher: the outcome of one ``Dispatched`` proposal (applied: its
    ``EntryResult``, whose fire effects the Dispatcher then sends)."""

    items: list[DispatchItem]
    results: list[Any]
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class FireResults:
    """Workers -> Monitor: results of fires (attempts as carried out), and the sending worker's free
    capacity when it is another node (``free``: the Monitor passes it on to the Dispatcher)."""

    items: list[ResultItem]
    worker: str = ""
    free: int | None = None


@dataclass(frozen=True, slots=True)
class FlowNoticesProposed:
    """RaftPeer -> Dispatcher: the outcome of one ``FlowNotices`` proposal (its items; a refused one
    is proposed again)."""

    items: tuple[tuple[str, int], ...]
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class ResultsProposed:
    """RaftPeer -> Monitor: the outcome of one ``Results`` proposal."""

    items: list[ResultItem]
    error: BaseException | None
    proposed_ms: int = 0
    """Wall ms the proposal was made (the start of a traced attempt's ``molens.result`` span)."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """Monitor -> Dispatcher: fires it watches with no result yet, how many own-term fires it has
    ever been told of (so the Dispatcher can count the ones on their way to it), and the free
    capacity workers reported with their results since the last ``InFlight``, and the workers it
    counts as lost (``docs/architecture.md#lost-workers``): no new fires for them."""

    open: int
    own_seen: int
    reports: tuple[tuple[str, int], ...] = ()
    lost: tuple[str, ...] = ()
    ended: tuple[FireEnd, ...] = ()
    """Fires whose result (or loss) the Monitor took since the last ``InFlight``: their flows have a
    free slot again (docs/architecture.md#flow-control)."""


@dataclass(frozen=True, slots=True)
class FireEnd:
    """One fire's attempt ended: whether the receiver signalled congestion (429, 503, a timeout),
    and the epoch ms it asked to wait until (``Retry-After``; 0: it did not)."""

    fire_id: str
    attempt: int | None
    congested: bool = False
    retry_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class FlowsChanged:
    """Raft thread (the supervisor's ``on_applied``) -> Dispatcher: flow settings changed by applied
    entries, in log order (``None``: deleted)."""

    changes: tuple[tuple[str, FlowSettings | None], ...]


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """Worker side -> Dispatcher and Monitor: workers' free capacity as they reported it (a heartbeat:
    the worker is alive), and the fire ids a worker holds without having reported their result
    (``None``: it did not say). One worker per report when ``held`` is given."""

    free: tuple[tuple[str, int], ...]
    held: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class ExpireDone:
    """RaftPeer -> Cleaner: the outcome of one ``Expire`` proposal."""

    results: list[Any]
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class NoticesAcked:
    """RaftPeer -> Notifier: the outcome of one ``AckNotices`` proposal (its keys)."""

    keys: tuple[tuple[int, str], ...]
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class Drain:
    """Supervisor -> Dispatcher, then Monitor: the node is stopping while it leads. The Dispatcher
    plans nothing new and sets ``done`` once its proposals have outcomes; the Monitor sets it once
    the fires sent this term have committed results, or at ``until`` (monotonic seconds)."""

    until: float
    done: pykka.Future[int]


@dataclass(frozen=True, slots=True)
class FireBatch:
    """Worker RPC -> FireWorkerPool: a remote leader's fires to carry out on this node (the local
    Dispatcher hands its own to the pool directly: ``FireWorkerPool.local_fires``)."""

    fires: list[FireRequest]


@dataclass(frozen=True, slots=True)
class PoolResults:
    """FirePool's flusher -> FireWorkerPool: results of carried-out fires, to route to the leader."""

    results: list[Any]


@dataclass(frozen=True, slots=True)
class LeaderIs:
    """Supervisor -> FireWorkerPool: who leads now; ``local`` is set when this node does."""

    leader_id: str | None
    local: LeaderRefs | None


@dataclass(frozen=True, slots=True)
class Count:
    """To Stats: counter increments."""

    values: tuple[tuple[str, float], ...]


@dataclass(frozen=True, slots=True)
class Gauge:
    """To Stats: gauge values."""

    values: tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class StatsBatch:
    """To Stats from one actor, at most every ``STATS_FLUSH_MS``: its counts and samples since the last."""

    counts: tuple[tuple[str, float], ...]
    samples: tuple[tuple[str, list[float]], ...]


@dataclass(frozen=True, slots=True)
class Delivered:
    """FireWorkerPool -> Stats: attempts this node carried out, ``(request, result, started_ms)``."""

    attempts: list[tuple[FireRequest, Any, float]]


# --- queries (ask) -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadWheel:
    """Ask TimeWheel: ``fn(wheel)`` on its thread (the console's distribution view)."""

    fn: Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class GetFlows:
    """Ask the Dispatcher for every flow's live state (``list[FlowState]``)."""


@dataclass(frozen=True, slots=True)
class GetGauges:
    """Ask any actor for its gauges as a dict."""


@dataclass(frozen=True, slots=True)
class GetStats:
    """Ask Stats for counters, gauges and timing percentiles."""


@dataclass(frozen=True, slots=True)
class SetObserver:
    """To Stats: who else hears about samples and deliveries (the node's metrics)."""

    observer: Any


# --- refs of one term's leader actors ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderRefs:
    """The leader-only actors of one term (what workers' results and reports go to)."""

    term: int
    wheel: pykka.ActorRef[Any]
    dispatcher: pykka.ActorRef[Any]
    monitor: pykka.ActorRef[Any]
    cleaner: pykka.ActorRef[Any]
    notifier: pykka.ActorRef[Any]

    def all(self) -> tuple[pykka.ActorRef[Any], ...]:
        return (self.wheel, self.dispatcher, self.monitor, self.cleaner, self.notifier)


__all__ = [
    "Committed", "Count", "Delivered", "DispatchedBatch", "Drain", "DueBatch", "ExpireDone", "FireBatch",
    "FireEnd", "FireResults", "FlowNoticesProposed", "FlowsChanged", "Gauge", "GetFlows", "GetGauges", "GetStats",
    "InFlight", "Join",
    "LeaderIs", "LeaderRefs", "NoticesAcked", "PoolResults", "ReadWheel",
    "Rebuild", "Requeue", "ResultsProposed", "SetObserver", "StatsBatch", "Wake", "WheelEffects", "WorkerReport",
]
