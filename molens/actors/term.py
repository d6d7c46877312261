"""What every leader-only actor of one term shares: :class:`TermContext` and :class:`LeaderActor`.

The :class:`~molens.actors.supervisor.LeaderSupervisor` starts one TimeWheel, Dispatcher, Monitor,
Cleaner and Notifier per term led, all with the same context. Leadership loss sets ``ended`` at once (from
the Raft thread) and then stops the actors: a message still queued behind it sees ``ended`` and
proposes or sends nothing (``docs/architecture.md#invariants``). An actor that raises stops the node
loudly through ``fatal`` (pykka's ``on_failure``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pykka

from molens.actors.alarm import Alarm, wall_ms
from molens.actors.clockprobe import ClockGate
from molens.actors.messages import Drain, GetGauges, Join, LeaderRefs, Wake
from molens.actors.stats import StatsBuffer, StatsClient
from molens.config import AuditConfig, NotificationsConfig, SchedulerConfig
from molens.fsm.commands import Command
from molens.fsm.store import TaskStore
from molens.schedule.horizon import Reach
from molens.tracing import NO_SPANS, Spans

log = logging.getLogger(__name__)

ProposeCallback = Callable[[list[Any], BaseException | None], None]


def every_replica_reads(version: int) -> bool:
    """A term's ``replicas_read`` where no member of an earlier release can be (a single node, a
    test): every replica applies the entries of every version."""
    return True


@dataclass(frozen=True, slots=True)
class TermContext:
    """The world of one term's leader actors (read-only after start)."""

    node_id: str
    term: int
    cfg: SchedulerConfig
    store: TaskStore
    propose_batch: Callable[[list[bytes], ProposeCallback], None]
    stats: StatsClient
    send_fires: Callable[[dict[str, list[Any]]], dict[str, list[Any]]]
    """Sends fires grouped by worker (one frame each); returns the groups it could not send."""
    local_free: Callable[[], int]
    fatal: Callable[[BaseException], None]
    ended: threading.Event
    clock: ClockGate = field(default_factory=ClockGate.always_ok)
    """Whether this node's clock (and each worker's) agrees with the majority (docs/architecture.md#clock-skew)."""
    heard_ago_ms: tuple[tuple[str, int], ...] = ()
    """How long before the term began each peer was last heard over Raft (seeds the Monitor's
    ``WorkerWatch``)."""
    notifications: NotificationsConfig = field(default_factory=NotificationsConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    """Audit retention (the Cleaner trims the trail)."""
    send_notices: Callable[[Any], str | None] = field(default=lambda batch: "no notification sender on this node")
    """POSTs a notification batch; None when its target answered 2xx (``molens.actors.notifier``)."""
    spans: Spans = NO_SPANS
    """Where the ``molens.result`` spans of traced tasks go (``molens.tracing``)."""
    reach: Reach = field(default_factory=Reach)
    """How far the term's wheel has read the due index: the Raft thread leaves new tasks due beyond it
    out of the wheel's effects (``molens.schedule.horizon``)."""
    replicas_read: Callable[[int], bool] = every_replica_reads
    """Whether every replica applies the entry fields of fire batch version ``v``
    (``molens.scheduler.Scheduler.replicas_read``): the Dispatcher and the Monitor propose them as the
    release before applied them until then (``catchup_waits``, ``keeps_last_fire``, ``not_sent``,
    ``ack_from``)."""

    def propose(self, cmd: Command, on_done: ProposeCallback) -> None:
        self.propose_batch([self.store.encode_proposal(cmd)], on_done)


class LeaderActor(pykka.ThreadingActor):
    """Base of the leader-only actors: context, refs of the others, an alarm, loud failure."""

    name = "leader"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.refs: LeaderRefs | None = None
        self.alarm: Alarm | None = None
        self.stats = StatsBuffer(ctx.stats)
        self.handled = 0
        """Messages this actor has handled (``GetGauges``: ``<name>_messages``)."""

    def on_start(self) -> None:
        self.alarm = Alarm(self.actor_ref, f"{self.name}-t{self.ctx.term}")

    def on_stop(self) -> None:
        if self.alarm is not None:
            self.alarm.close()
        self.stats.flush(wall_ms())

    def on_failure(
        self, exception_type: type[BaseException] | None, exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.alarm is not None:
            self.alarm.close()
        log.error("%s actor failed term=%d: %r", self.name, self.ctx.term, exception_value)
        self.ctx.fatal(exception_value or RuntimeError(f"{self.name} actor failed"))

    @property
    def ended(self) -> bool:
        return self.ctx.ended.is_set()

    def on_receive(self, message: Any) -> Any:
        self.handled += 1
        if isinstance(message, Join):
            self.refs = message.refs
            return None
        if isinstance(message, GetGauges):
            return {**self.gauges(), f"{self.name}_messages": self.handled}
        out = self.handle(message)
        self.stats.flush_due(wall_ms())
        return out

    def set_alarm(self, at_ms: int | None) -> None:
        """Wake at ``at_ms`` (None: no wake-up of its own), or earlier to flush stats."""
        nf = self.stats.next_flush()
        if nf is not None and (at_ms is None or nf < at_ms):
            at_ms = nf
        assert self.alarm is not None
        self.alarm.set(at_ms)

    def gauges(self) -> dict[str, Any]:
        return {}

    def handle(self, message: Any) -> Any:
        raise NotImplementedError

    def unexpected(self, message: Any) -> None:
        """A message none of this actor's handlers takes: logged and dropped, as pykka does (its
        ``on_receive``: this class's own would hand it to :meth:`handle` again, without end)."""
        pykka.ThreadingActor.on_receive(self, message)

    def outcome_to_self(self, make: Callable[[list[Any], BaseException | None], Any]) -> ProposeCallback:
        """A proposal callback (it runs on the Raft thread) that tells this actor ``make(results,
        error)``; once the actor has stopped (term over) the outcome no longer matters to anyone."""
        ref = self.actor_ref

        def done(res: list[Any], err: BaseException | None) -> None:
            try:
                ref.tell(make(res, err))
            except pykka.ActorDeadError:
                pass

        return done

    def tell(self, ref: pykka.ActorRef[Any], message: Any) -> None:
        """Tell another actor of this term; a stopped one (term over) is no error."""
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            pass


class PumpedActor(LeaderActor):
    """A leader actor whose every event ends in one :meth:`_pump`, the step that plans, proposes or
    sends what the event made due (a ``Wake`` is that step alone), and that the supervisor drains
    when the node stops while it leads (``Drain``, kept for ``_pump`` to answer)."""

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.drain: Drain | None = None
        self.drain_answered = False

    def handle(self, message: Any) -> Any:
        if isinstance(message, Drain):
            self.drain = message
        elif not isinstance(message, Wake) and not self.take(message):
            return self.unexpected(message)
        self._pump()
        return None

    def take(self, message: Any) -> bool:
        """Take the event ``message`` into the actor's state; False when it is none of its events."""
        return False

    def _pump(self) -> None:
        raise NotImplementedError


__all__ = ["LeaderActor", "ProposeCallback", "PumpedActor", "TermContext", "every_replica_reads"]
