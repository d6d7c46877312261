"""ClockProbe: the actor that checks this node's clock against the other members' (docs/architecture.md#clock-skew).

Owns a :class:`~molens.raft.clock.ClockWatch` and publishes its verdict in a :class:`ClockGate`.
Every ``PROBE_INTERVAL_MS`` (its alarm, ``Wake``, on the monotonic clock) it sends each peer a ``T`` frame with its clock
reading over worker RPC; the peer answers at once with a ``t`` frame carrying that reading and its
own (``Scheduler.on_rpc``), which comes back here as :class:`ProbeReply`. After each round it
judges the clock on the Raft thread (``RaftPeerHandle.judge_clock``, with the current voters) and acts:
a node whose clock is off from a majority by more than ``raft.max_clock_skew_ms`` does not
campaign (``RaftCore.no_campaign``) and, if it leads, steps down; the log says why, once per
change. The leader's Dispatcher reads the gate before it plans (no fire from a clock not known to
agree with a majority) and gives fires only to workers whose clocks agree with its own. A verdict
holds only for the clock it judged: the gate keeps the wall and monotonic readings of its last
verdict, and once the wall clock has moved apart from the monotonic one by more than
``raft.max_clock_skew_ms`` (the clock jumped, or was stepped) it says no at once -- not up to a
round later, by when a leader 10 s ahead has planned 10 s of fires -- and the next round drops
every sample taken before the jump. Runs on its own pykka thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import pykka

from molens.actors.alarm import Alarm, mono_ms, wall_ms
from molens.actors.messages import Wake
from molens.raft.clock import ClockState, ClockVerdict, ClockWatch

log = logging.getLogger(__name__)

PROBE_INTERVAL_MS = 500
"""Each peer's clock is read this often."""


@dataclass(frozen=True, slots=True)
class ProbeReply:
    """Worker RPC -> ClockProbe: a peer's answer to a ``T`` probe."""

    peer: str
    sent_ms: int
    peer_ms: int
    received_ms: int


def probe_frame(sent_ms: int) -> bytes:
    return b"T" + bytes(msgpack.packb(sent_ms))


def reply_frame(probe_body: bytes, now_ms: int) -> bytes:
    """The ``t`` answer to a ``T`` probe body: [the prober's reading, this node's]."""
    return b"t" + bytes(msgpack.packb([int(msgpack.unpackb(probe_body)), now_ms]))


def decode_reply(body: bytes) -> tuple[int, int]:
    """A ``t`` answer's body: [the prober's reading, the peer's]; ValueError for anything else."""
    v = msgpack.unpackb(body)
    if type(v) is not list or len(v) != 2 or any(type(x) is not int for x in v):
        raise ValueError("a clock probe reply is two integers")
    return v[0], v[1]


def readings() -> tuple[int, int]:
    """This node's wall clock and monotonic clock now, in ms."""
    return wall_ms(), mono_ms()


def _stepped_ms(was: tuple[int, int] | None, at: tuple[int, int]) -> int:
    """How far the wall clock moved apart from the monotonic clock between readings ``was`` and ``at``."""
    return 0 if was is None else (at[0] - was[0]) - (at[1] - was[1])


class ClockGate:
    """The latest verdict on this node's clock, read from any thread. ``None`` before the first
    one: nothing is planned from an unchecked clock. ``ClockGate.always_ok()`` for tests that run
    leader actors without a probe. Readings are ``(wall ms, monotonic ms)`` pairs (:func:`readings`):

    >>> g = ClockGate("n1", max_skew_ms=500)
    >>> g.publish(ClockVerdict(ClockState.OK, ["n1", "n2"], {"n2": 3}, 3, ""), at=(10_000, 1_000))
    >>> g.leading_ok(at=(12_000, 3_000))   # both clocks moved 2 s
    True
    >>> g.leading_ok(at=(22_000, 3_100))   # the wall clock jumped 10 s ahead
    False
    """

    def __init__(self, node_id: str, max_skew_ms: int, verdict: ClockVerdict | None = None) -> None:
        self.node_id = node_id
        self.max_skew_ms = max_skew_ms
        self._judged: tuple[ClockVerdict | None, tuple[int, int] | None] = (verdict, None)
        """The verdict and the readings when :meth:`publish` set it (None: no jump check), replaced
        as one reference: a reader on another thread never pairs one verdict with another's readings."""
        self.steps = 0
        """How many steps of the wall clock the probe has seen."""

    @property
    def verdict(self) -> ClockVerdict | None:
        return self._judged[0]

    @classmethod
    def always_ok(cls) -> ClockGate:
        return cls("", 0, ClockVerdict(ClockState.OK, [], {}, 0, ""))

    def publish(self, verdict: ClockVerdict, at: tuple[int, int]) -> None:
        """The verdict on the clock as it read ``at``."""
        self._judged = (verdict, at)

    def stepped_ms(self, at: tuple[int, int]) -> int:
        """How far the wall clock moved apart from the monotonic clock since the verdict."""
        return _stepped_ms(self._judged[1], at)

    def jumped(self, at: tuple[int, int]) -> bool:
        """The wall clock stepped by more than the bound since the verdict (which then says nothing)."""
        return abs(self.stepped_ms(at)) > self.max_skew_ms

    def leading_ok(self, at: tuple[int, int] | None = None) -> bool:
        """This node's clock agrees with a majority and has not jumped since: it may plan fires.
        ``at``: the readings (now unless given)."""
        v, was = self._judged
        return v is not None and v.ok and abs(_stepped_ms(was, readings() if at is None else at)) <= self.max_skew_ms

    def suspect(self, at: tuple[int, int] | None = None) -> bool:
        """This node's wall clock stepped and has not been judged good since: its fire worker must
        not time fires on it (``at``: the readings, now unless given)."""
        v, was = self._judged
        jumped = abs(_stepped_ms(was, readings() if at is None else at)) > self.max_skew_ms
        return jumped or (self.steps > 0 and (v is None or not v.ok))

    def worker_ok(self, worker: str) -> bool:
        """``worker``'s clock is known to agree with this node's (this node's own always does)."""
        v = self.verdict
        if v is None:
            return False
        if worker == self.node_id or not self.node_id:
            return True
        off = v.offsets_ms.get(worker)
        return off is not None and abs(off) <= self.max_skew_ms

    def problem(self) -> str:
        """Why this node must not lead ("" when its clock is fine or not known to be off)."""
        v = self.verdict
        return v.reason if v is not None and v.state is ClockState.SKEWED else ""


class ClockProbe(pykka.ThreadingActor):
    """See the module docstring."""

    def __init__(
        self,
        gate: ClockGate,
        peers: Callable[[], list[str]],
        send: Callable[[str, bytes], bool],
        judge: Callable[[Callable[[list[str]], ClockVerdict]], tuple[list[str], ClockVerdict]],
        fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        super().__init__()
        self.gate = gate
        self._fatal = fatal
        """Stops the node when this actor fails: without its rounds the last verdict would stand for
        good, and a clock that drifted after it would never be judged."""
        self.watch = ClockWatch(gate.node_id, gate.max_skew_ms)
        self._peers = peers
        self._send = send
        self._judge = judge
        """Runs the given verdict function with the current voters where it can act on the verdict
        (the Raft thread); returns the voters and the verdict."""
        self._voters: list[str] = []
        self._alarm: Alarm | None = None
        self._said = ClockState.UNKNOWN
        self._since_ms = 0
        """Replies to probes sent before this (the clock's last jump) are ignored."""

    def on_start(self) -> None:
        self._alarm = Alarm(self.actor_ref, "clockprobe", clock=mono_ms)  # rounds go on whatever the wall clock does
        self._alarm.set(mono_ms())

    def on_stop(self) -> None:
        if self._alarm is not None:
            self._alarm.close()

    def on_failure(self, exception_type: object, exception_value: object, traceback: object) -> None:
        if self._alarm is not None:
            self._alarm.close()
        log.error("clock probe actor failed: %r", exception_value)
        if self._fatal is not None:
            self._fatal(exception_value if isinstance(exception_value, BaseException) else RuntimeError("clock probe failed"))

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ProbeReply):
            at = readings()
            if self.gate.jumped(at) or not self._since_ms <= message.sent_ms <= at[0]:
                return None  # a probe of the clock before a jump, or samples of it: the round drops them
            self.watch.sample(message.peer, message.sent_ms, message.peer_ms, message.received_ms, at[0])
            if not self.gate.leading_ok(at) and self._voters:  # an OK clock is usable at once; acting waits for the round
                v = self.watch.verdict(self._voters, at[0])
                if v.ok:
                    self.gate.publish(v, at)
        elif isinstance(message, Wake):
            self._round()
        else:
            return super().on_receive(message)
        return None

    def _round(self) -> None:
        at = readings()
        now = at[0]
        if self.gate.jumped(at):
            step = self.gate.stepped_ms(at)
            log.warning("clock: stepped %+d ms against the monotonic clock; estimates of the peers start again", step)
            self.watch = ClockWatch(self.gate.node_id, self.gate.max_skew_ms)
            self._since_ms = now
            self.gate.steps += 1
            self.gate.publish(ClockVerdict(ClockState.UNKNOWN, [], {}, 0, f"clock stepped {step:+d} ms"), at)
        verdict: ClockVerdict | None = None
        try:
            self._voters, verdict = self._judge(lambda voters: self.watch.verdict(voters, wall_ms()))
        except (pykka.ActorDeadError, pykka.Timeout):
            log.debug("clock: raft peer busy or gone; verdict kept")
        if verdict is not None:
            self.gate.publish(verdict, at)
            if verdict.state is not self._said:
                if verdict.state is ClockState.SKEWED:
                    log.error("clock: %s; not campaigning or leading until it agrees", verdict.reason)
                elif verdict.state is ClockState.OK:
                    log.info("clock: agrees with the majority (median offset %+d ms)", verdict.skew_ms)
                else:
                    log.info("clock: %s (offsets %s)", verdict.reason, verdict.offsets_ms)
                self._said = verdict.state
        frame = probe_frame(now)
        for p in self._peers():
            self._send(p, frame)
        if self._alarm is not None:
            self._alarm.set(at[1] + PROBE_INTERVAL_MS)


def act_on_clock(core: Any, verdict: ClockVerdict) -> None:
    """On the Raft thread: a node whose clock is off does not campaign, and steps down if it leads.
    Only a clock seen to agree again lifts that: estimates that merely went stale (a peer down)
    leave it as it was."""
    if verdict.state is ClockState.SKEWED:
        core.no_campaign = verdict.reason
        core.step_down(verdict.reason)
    elif verdict.state is ClockState.OK:
        core.no_campaign = ""


__all__ = ["PROBE_INTERVAL_MS", "ClockGate", "ClockProbe", "ProbeReply", "act_on_clock", "decode_reply",
           "probe_frame", "readings", "reply_frame"]
