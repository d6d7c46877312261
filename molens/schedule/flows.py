"""Flow control: which due fires may go now, per flow (docs/architecture.md#flow-control). Pure.

Every task's fires belong to a *flow* (its ``flow_key``, else its callback URL's ``host:port``). A
flow may have limits: a rate (a token bucket of ``burst`` tokens refilled at ``rate_per_s``), a
concurrency (fires planned and not yet answered, across all tasks and workers), a pause, and a
``Retry-After`` a receiver asked for. The leader's Dispatcher asks :meth:`FlowControl.gate` for
each due fire it is about to plan; a fire that may not go is *held* in its flow's queue, in order,
and :meth:`FlowControl.release` hands held fires back (already admitted) as soon as their flow lets
them go. A held fire never blocks another flow's fires: each flow has its own queue.

The token bucket is kept as GCRA (the "virtual scheduling" form): ``tat`` is the theoretical
arrival time of the next fire; a fire meant to go at ``at`` conforms when ``at >= tat - tau``
(``tau = (burst - 1) * interval``), gets a *slot* (``at``; for a held fire, when the bucket first
allowed it, at most one interval back: :meth:`FlowControl._slot`), and ``tat = max(tat, slot) +
interval``. Because it is
judged at the time a fire is *meant to go* (its due time, or now if that has passed), fires planned
ahead of their due time (dispatch ahead) count where they fire, and in any window of ``w`` ms at most
``burst + rate * w / 1000`` fires of a flow go, whatever order they were planned in.

A worked example, ``rate_per_s=2, burst=1`` (one fire every 500 ms)::

    >>> fc = FlowControl()
    >>> fc.configure("api:443", FlowLimits(rate_per_s=2, burst=1), now_ms=0)
    >>> [fc.gate(t, f"{t}-1", 1, "api:443", at_ms=0, now_ms=0) for t in ("a", "b", "c")]
    [True, False, False]
    >>> fc.next_wake(0), fc.release(499), fc.release(500), fc.release(1_000)
    (500, [], ['b'], ['c'])

*Namespace flows* (:class:`NamespacedFlows`): a namespace's ``fires_per_s`` quota is a flow of
its own that every fire of the namespace's tasks passes first, whatever its host flow: held in the
namespace's queue until its bucket lets it go, then judged by its host flow as any fire. A namespace
flow has a rate only (``burst`` 1: fires evenly spaced), so one namespace's backlog never holds
another namespace's fires, nor a host flow's fires of other namespaces.

*Adaptive* flows (``adaptive: true``, with a rate) back off on congestion and ramp back (AIMD): a
429, a 503 or a timeout multiplies the flow's rate by ``ADAPTIVE_DECREASE`` (at most once per
``ADAPTIVE_HOLD_MS``, down to ``ADAPTIVE_MIN_FRACTION`` of the limit), and each second without one
adds ``ADAPTIVE_INCREASE_FRACTION`` of the limit, up to the limit.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

ADAPTIVE_DECREASE = 0.5
"""An adaptive flow's rate is multiplied by this on a 429, 503 or timeout."""
ADAPTIVE_HOLD_MS = 1_000
"""At most one decrease per this long (a burst of 429s answering one burst of fires is one signal)."""
ADAPTIVE_INCREASE_FRACTION = 0.05
"""Each second without congestion adds this fraction of the configured rate (half to full in 10 s)."""
ADAPTIVE_MIN_FRACTION = 0.01
"""An adaptive flow's rate never drops below this fraction of its limit (nor below 0.1/s)."""
RATE_WINDOW_MS = 1_000
"""The live rate of a flow is the fires it let go in the last this many ms."""
IDLE_FORGET_MS = 60_000
"""A flow without settings, nothing in flight or held, and no fire for this long is forgotten."""


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """A flow's limits; ``None`` is unlimited."""

    rate_per_s: float | None = None
    burst: int | None = None
    """Fires allowed at once after an idle spell; default 1 (fires evenly spaced at the rate)."""
    concurrency: int | None = None
    paused: bool = False
    adaptive: bool = False


@dataclass(frozen=True, slots=True)
class FlowState:
    """What an operator sees of one flow (``GET /flows``)."""

    key: str
    rate: int
    """Fires let go in the last ``RATE_WINDOW_MS``."""
    in_flight: int
    queued: int
    throttled_until_ms: int
    effective_rate_per_s: float | None
    """The rate enforced now (an adaptive flow's backed-off rate; else its limit)."""


@dataclass(slots=True)
class _Flow:
    limits: FlowLimits | None = None
    rate: float | None = None
    tat: float = 0.0
    in_flight: int = 0
    queue: collections.deque[tuple[str, str, int, int]] = field(default_factory=collections.deque)
    """Held fires in order: ``(task id, fire id, attempt, meant to go at)``."""
    throttled_until: int = 0
    sent: collections.deque[int] = field(default_factory=collections.deque)
    last_active: int = 0
    adjusted_ms: int = 0
    decreased_ms: int = -ADAPTIVE_HOLD_MS


class FlowControl:
    """Held fires per flow, and what each flow lets go (see the module docstring)."""

    def __init__(self, credit_ms: int = 0) -> None:
        self.credit_ms = credit_ms
        """How far back a held fire's slot may be from the moment it is let go, at least one interval
        (the Dispatcher's tick: it wakes for flows at most once a tick, and loses nothing by it)."""
        self._flows: dict[str, _Flow] = {}
        self._fires: dict[str, tuple[str, int]] = {}
        """Fire id -> (flow, attempt) of every fire admitted and not yet ended."""
        self._held: dict[str, str] = {}
        """Task id -> flow of every held fire."""
        self._released: dict[str, tuple[str, int]] = {}
        """Task id -> (fire id, attempt) of held fires handed back, admitted, not planned yet."""
        self._waiting: dict[str, None] = {}
        """Flows with held fires, in the order they began to hold one (a dict, not a set: the order
        :meth:`release` lets flows go in is the same in every process, whatever its string hash seed)."""
        self._adopted: dict[str, int] = {}
        """Fire id -> deadline of the fires adopted from an earlier term (:meth:`adopt`)."""
        self._slots: dict[str, float] = {}
        """Fire id -> its slot: the time its flow's bucket let it go (docs/architecture.md#flow-control)."""
        self.throttled = 0
        """Results that asked to wait (``Retry-After``) so far."""
        self._holds: dict[str, int] = {}
        """Flow -> the end of the ``Retry-After`` hold last announced by :meth:`holds`."""
        self._new_holds: set[str] = set()

    # ---- settings --------------------------------------------------------------------------------
    def configure(self, key: str, limits: FlowLimits | None, now_ms: int) -> None:
        """Set (``None``: drop) the limits of flow ``key``."""
        f = self._flows.get(key)
        if f is None:
            if limits is None:
                return
            f = self._flows[key] = _Flow(last_active=now_ms)
        old = f.limits
        f.limits = limits
        if limits is None or limits.rate_per_s is None:
            f.rate = None
        elif not limits.adaptive or old is None or old.rate_per_s is None or f.rate is None:
            f.rate = float(limits.rate_per_s)
            f.adjusted_ms = now_ms
        else:  # still adaptive: keep the backed-off rate, within the new limit
            f.rate = min(f.rate, float(limits.rate_per_s))

    def limits(self, key: str) -> FlowLimits | None:
        f = self._flows.get(key)
        return None if f is None else f.limits

    # ---- the gate --------------------------------------------------------------------------------
    def gate(self, task_id: str, fire_id: str, attempt: int, flow: str, at_ms: int, now_ms: int,
             namespace: str | None = None) -> bool:
        """May this fire (meant to go at ``at_ms``) be planned now? True admits it (it counts as in
        flight until :meth:`ended` or :meth:`cancel`); False holds it in its flow's queue (a fire
        already held stays where it is). ``namespace`` (its task's) counts in :class:`NamespacedFlows`
        only."""
        rel = self._released.pop(task_id, None)
        if rel is not None:
            if rel == (fire_id, attempt):
                return True
            self.cancel(*rel)  # the task changed while it was held: judge it afresh
        if task_id in self._held:
            return False
        f = self._flows.get(flow)
        if f is None:
            f = self._flows[flow] = _Flow()
        f.last_active = now_ms
        if f.queue or not self._may_go(f, at_ms, now_ms):
            f.queue.append((task_id, fire_id, attempt, at_ms))
            self._held[task_id] = flow
            self._waiting[flow] = None
            return False
        self._take(f, flow, fire_id, attempt, float(at_ms), now_ms)
        return True

    def release(self, now_ms: int) -> list[str]:
        """Held task ids their flows let go now, each flow's in order; they are admitted (the next
        :meth:`gate` of each says True)."""
        out: list[str] = []
        if self._adopted:
            self._expire_adopted(now_ms)
        for key in list(self._waiting):
            f = self._flows[key]
            q = f.queue
            while q:
                tid, fid, att, due = q[0]
                at = max(due, now_ms)
                if not self._may_go(f, at, now_ms):
                    break
                q.popleft()
                del self._held[tid]
                self._take(f, key, fid, att, self._slot(f, due, now_ms), now_ms)
                self._released[tid] = (fid, att)
                out.append(tid)
            if not q:
                self._waiting.pop(key, None)
        return out

    def can_release(self, now_ms: int) -> bool:
        """Whether :meth:`release` would hand a held fire back now."""
        for key in self._waiting:
            f = self._flows[key]
            if f.queue and self._may_go(f, max(f.queue[0][3], now_ms), now_ms):
                return True
        return False

    def adopt(self, fire_id: str, attempt: int, flow: str, deadline_ms: int, now_ms: int) -> None:
        """A fire already in flight when this leader began (sent by an earlier one): it counts
        against its flow's concurrency until it ends, or at the latest until its deadline (its end
        may have been reported before this leader adopted it)."""
        if fire_id in self._fires:
            return
        self._adopted[fire_id] = deadline_ms
        f = self._flows.get(flow)
        if f is None:
            f = self._flows[flow] = _Flow(last_active=now_ms)
        f.in_flight += 1
        self._fires[fire_id] = (flow, attempt)

    def fire_flow(self, fire_id: str) -> tuple[str, int] | None:
        """``(flow, attempt)`` of an admitted fire that has not ended."""
        return self._fires.get(fire_id)

    def knows(self, task_id: str) -> bool:
        """Whether a fire of task ``task_id`` is held, or handed back and not planned yet."""
        return task_id in self._held or task_id in self._released

    def fire_slot(self, fire_id: str) -> float | None:
        """The slot of an admitted fire that has not ended: it goes at or after it (a fire let go
        at once: its due time or the time it was judged, whichever is later)."""
        return self._slots.get(fire_id)

    def drop(self, task_id: str) -> None:
        """A released task id that was not planned after all (no longer due): free what it took."""
        rel = self._released.pop(task_id, None)
        if rel is not None:
            self.cancel(*rel)

    def _may_go(self, f: _Flow, at_ms: int, now_ms: int) -> bool:
        lim = f.limits
        if f.throttled_until > at_ms:
            return False
        if lim is None:
            return True
        if lim.paused or (lim.concurrency is not None and f.in_flight >= lim.concurrency):
            return False
        rate = self._rate(f, now_ms)
        if rate is None:
            return True
        interval = 1000.0 / rate
        return at_ms >= f.tat - (self._burst(lim, rate) - 1) * interval

    @staticmethod
    def _burst(lim: FlowLimits, rate: float) -> int:
        return lim.burst if lim.burst is not None else 1

    def _slot(self, f: _Flow, due_ms: int, now_ms: int) -> float:
        """The slot of a held fire let go at ``now_ms``: when its flow's bucket first allowed it (or
        its due time, or the end of a Retry-After, if later), but at most one interval (or
        ``credit_ms``) back. A leader a little late to let a backlog go keeps the flow at its rate
        instead of losing that time on every fire; after a longer stall at most that much more than
        the bucket goes at once, never a catch-up burst."""
        lim, rate = f.limits, f.rate
        if lim is None or rate is None:
            return float(max(due_ms, now_ms))
        interval = 1000.0 / rate
        return max(float(due_ms), float(f.throttled_until), f.tat - (self._burst(lim, rate) - 1) * interval,
                   now_ms - max(interval, float(self.credit_ms)))

    def _take(self, f: _Flow, key: str, fire_id: str, attempt: int, slot: float, now_ms: int) -> None:
        if f.rate is not None:
            f.tat = max(f.tat, slot) + 1000.0 / f.rate
        f.in_flight += 1
        self._fires[fire_id] = (key, attempt)
        self._slots[fire_id] = slot
        sent = f.sent
        sent.append(now_ms)
        while sent and sent[0] <= now_ms - RATE_WINDOW_MS:
            sent.popleft()

    def _rate(self, f: _Flow, now_ms: int) -> float | None:
        """The flow's rate now (an adaptive flow ramps back up with time)."""
        lim = f.limits
        if f.rate is None or lim is None or lim.rate_per_s is None:
            return f.rate
        if lim.adaptive and f.rate < lim.rate_per_s and now_ms - f.adjusted_ms >= 1_000:
            steps = (now_ms - f.adjusted_ms) // 1_000
            f.rate = min(float(lim.rate_per_s), f.rate + steps * ADAPTIVE_INCREASE_FRACTION * lim.rate_per_s)
            f.adjusted_ms += steps * 1_000
        return f.rate

    # ---- fires ending ----------------------------------------------------------------------------
    def ended(
        self, fire_id: str, attempt: int | None, now_ms: int, *, congested: bool = False, retry_after_ms: int = 0
    ) -> None:
        """An admitted fire has its result (or was given up): its flow has one more free slot; a
        ``Retry-After`` throttles the flow until then; congestion backs an adaptive flow off."""
        freed = self._free_slot(fire_id, attempt)
        if freed is None:
            return
        key, f = freed
        f.last_active = now_ms
        if retry_after_ms > now_ms:
            self.throttled += 1
            self.throttle(key, retry_after_ms)
        lim = f.limits
        if congested and lim is not None and lim.adaptive and f.rate is not None and lim.rate_per_s is not None:
            if now_ms - f.decreased_ms >= ADAPTIVE_HOLD_MS:
                floor = max(0.1, ADAPTIVE_MIN_FRACTION * lim.rate_per_s)
                f.rate = max(floor, f.rate * ADAPTIVE_DECREASE)
                f.decreased_ms = f.adjusted_ms = now_ms

    def cancel(self, fire_id: str, attempt: int | None) -> None:
        """An admitted fire that will not go (its proposal was refused): its slot is free again."""
        self._free_slot(fire_id, attempt)

    def _free_slot(self, fire_id: str, attempt: int | None) -> tuple[str, _Flow] | None:
        """Forget the admitted fire ``fire_id`` (that ``attempt`` of it, when given) and give its flow
        the slot back: the flow's key and state, None when no such fire was admitted or its flow is gone."""
        got = self._fires.get(fire_id)
        if got is None or (attempt is not None and got[1] != attempt):
            return None
        del self._fires[fire_id]
        self._slots.pop(fire_id, None)
        self._adopted.pop(fire_id, None)
        f = self._flows.get(got[0])
        if f is None:
            return None
        f.in_flight = max(0, f.in_flight - 1)
        return got[0], f

    def throttle(self, key: str, until_ms: int) -> None:
        """Flow ``key`` sends nothing before ``until_ms`` (a receiver's ``Retry-After``)."""
        f = self._flows.get(key)
        if f is None:
            f = self._flows[key] = _Flow()
        f.throttled_until = max(f.throttled_until, until_ms)
        self._new_holds.add(key)

    def holds(self, now_ms: int) -> tuple[list[tuple[str, int]], list[str]]:
        """The ``Retry-After`` holds that began since the last call (flow, until) and those that
        ended (flow): each hold is announced once when it begins, however often a receiver extends
        it, and once when it ends (the flow was paused by its receiver, then resumed).

        >>> fc = FlowControl()
        >>> fc.throttle("a:80", 5_000); fc.throttle("a:80", 6_000)
        >>> fc.holds(1_000), fc.holds(2_000), fc.next_hold_end(), fc.holds(6_000)
        (([('a:80', 6000)], []), ([], []), 6000, ([], ['a:80']))
        """
        began: list[tuple[str, int]] = []
        for key in sorted(self._new_holds):
            f = self._flows.get(key)
            if f is not None and f.throttled_until > now_ms and key not in self._holds:
                began.append((key, f.throttled_until))
            if f is not None and f.throttled_until > now_ms:
                self._holds[key] = f.throttled_until
        self._new_holds.clear()
        ended = []
        for key in sorted(self._holds):
            f = self._flows.get(key)
            if f is None or f.throttled_until <= now_ms:
                del self._holds[key]
                ended.append(key)
        return began, ended

    def next_hold_end(self) -> int | None:
        """When the first announced hold ends (the Dispatcher wakes then to announce it)."""
        return min(self._holds.values()) if self._holds else None

    # ---- time and views --------------------------------------------------------------------------
    def next_wake(self, now_ms: int) -> int | None:
        """When a held fire could next be let go by time alone (``None``: only a settings change or
        a fire ending can; a flow at its concurrency waits for :meth:`ended`)."""
        best: int | None = None
        for key in self._waiting:
            f = self._flows[key]
            lim = f.limits
            if lim is not None and (lim.paused or (lim.concurrency is not None and f.in_flight >= lim.concurrency)):
                continue
            at = max(now_ms, f.throttled_until)
            rate = self._rate(f, now_ms)
            if lim is not None and rate is not None:
                at = max(at, math.ceil(f.tat - (self._burst(lim, rate) - 1) * 1000.0 / rate))
            if lim is not None and lim.adaptive and rate is not None and lim.rate_per_s and rate < lim.rate_per_s:
                at = min(at, f.adjusted_ms + 1_000)  # the rate ramps up then
            at = max(at, now_ms + 1)
            best = at if best is None or at < best else best
        if self._waiting and self._adopted:
            at = max(min(self._adopted.values()), now_ms + 1)
            best = at if best is None or at < best else best
        return best

    def next_tick_wake(self, now_ms: int) -> int | None:
        """:meth:`next_wake` on the next tick boundary (a multiple of ``credit_ms``, the leader's
        tick): the Dispatcher wakes at most once a tick for all flows."""
        at = self.next_wake(now_ms)
        if at is None or self.credit_ms <= 0:
            return at
        return -(-at // self.credit_ms) * self.credit_ms

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def in_flight(self) -> int:
        return len(self._fires)

    def _expire_adopted(self, now_ms: int) -> None:
        """Adopted fires past their deadline stop counting (the Monitor has given them up)."""
        for fid in [fid for fid, dl in self._adopted.items() if dl <= now_ms]:
            got = self._fires.get(fid)
            if got is not None:
                self.cancel(fid, got[1])
            self._adopted.pop(fid, None)

    def sweep(self, now_ms: int) -> None:
        """Forget flows without settings that have been idle for ``IDLE_FORGET_MS``."""
        self._expire_adopted(now_ms)
        idle = [
            k for k, f in self._flows.items()
            if f.limits is None and not f.in_flight and not f.queue and f.throttled_until <= now_ms
            and now_ms - f.last_active >= IDLE_FORGET_MS
        ]
        for k in idle:
            del self._flows[k]

    def state(self, now_ms: int) -> list[FlowState]:
        """Every flow this leader knows (with settings, or active in the last minute), by key."""
        out = []
        for key in sorted(self._flows):
            f = self._flows[key]
            while f.sent and f.sent[0] <= now_ms - RATE_WINDOW_MS:
                f.sent.popleft()
            out.append(FlowState(
                key=key, rate=len(f.sent), in_flight=f.in_flight, queued=len(f.queue),
                throttled_until_ms=f.throttled_until if f.throttled_until > now_ms else 0,
                effective_rate_per_s=self._rate(f, now_ms),
            ))
        return out


class NamespacedFlows(FlowControl):
    """Host flows (this class's own) behind namespace flows (:attr:`namespaces`): see the module
    docstring.

    >>> fc = NamespacedFlows()
    >>> fc.configure_namespace("pay", 2.0, now_ms=0)
    >>> [fc.gate(t, f"{t}-1", 1, "api:443", 0, 0, namespace="pay") for t in ("a", "b")]
    [True, False]
    >>> fc.gate("c", "c-1", 1, "api:443", 0, 0, namespace="ops")  # another namespace goes on
    True
    >>> fc.release(499), fc.release(500)
    ([], ['b'])
    """

    def __init__(self, credit_ms: int = 0) -> None:
        super().__init__(credit_ms)
        self.namespaces = FlowControl(credit_ms)
        """One flow per namespace with ``fires_per_s``, keyed by the namespace's name."""

    def configure_namespace(self, name: str, fires_per_s: float | None, now_ms: int) -> None:
        """Set (``None``: drop) namespace ``name``'s ``fires_per_s``."""
        self.namespaces.configure(name, None if fires_per_s is None else FlowLimits(rate_per_s=fires_per_s), now_ms)

    def gate(self, task_id: str, fire_id: str, attempt: int, flow: str, at_ms: int, now_ms: int,
             namespace: str | None = None) -> bool:
        """:meth:`FlowControl.gate` by the fire's namespace flow (``namespace``: its tasks'
        namespace), then by its host flow; a fire its namespace admitted and its host flow held is
        not charged to the namespace again when the host flow hands it back."""
        ns = self.namespaces
        if namespace is not None and (ns.limits(namespace) is not None or ns.fire_flow(fire_id) is not None
                                      or ns.knows(task_id)):
            if ns.fire_flow(fire_id) != (namespace, attempt) and not ns.gate(
                    task_id, fire_id, attempt, namespace, at_ms, now_ms):
                return False
        return super().gate(task_id, fire_id, attempt, flow, at_ms, now_ms, namespace)

    def release(self, now_ms: int) -> list[str]:
        return super().release(now_ms) + self.namespaces.release(now_ms)

    def can_release(self, now_ms: int) -> bool:
        return super().can_release(now_ms) or self.namespaces.can_release(now_ms)

    def ended(
        self, fire_id: str, attempt: int | None, now_ms: int, *, congested: bool = False, retry_after_ms: int = 0
    ) -> None:
        super().ended(fire_id, attempt, now_ms, congested=congested, retry_after_ms=retry_after_ms)
        self.namespaces.ended(fire_id, attempt, now_ms)

    def cancel(self, fire_id: str, attempt: int | None) -> None:
        super().cancel(fire_id, attempt)
        self.namespaces.cancel(fire_id, attempt)

    def drop(self, task_id: str) -> None:
        super().drop(task_id)
        self.namespaces.drop(task_id)

    def next_wake(self, now_ms: int) -> int | None:
        times = [t for t in (super().next_wake(now_ms), self.namespaces.next_wake(now_ms)) if t is not None]
        return min(times) if times else None

    def sweep(self, now_ms: int) -> None:
        super().sweep(now_ms)
        self.namespaces.sweep(now_ms)

    @property
    def held(self) -> int:
        return super().held + self.namespaces.held


__all__ = [
    "ADAPTIVE_DECREASE", "ADAPTIVE_HOLD_MS", "ADAPTIVE_INCREASE_FRACTION", "ADAPTIVE_MIN_FRACTION", "FlowControl",
    "FlowLimits", "FlowState", "NamespacedFlows",
]
