"""A namespace's ``creates_per_s`` quota, enforced by the leader (docs/api.md#namespaces). Pure.

Each namespace with the quota has a token bucket of one second's worth of creates (``burst`` =
``rate``), refilled at ``rate`` per second. A create of ``n`` tasks (a batch is one) takes ``n``
tokens, all or none: it goes when the bucket holds ``min(n, rate)`` tokens (so a batch larger than
a second's worth still goes once the bucket is full, and leaves it in debt), else it is refused with
the seconds after which it would go. Every method takes ``now`` (monotonic seconds).

:meth:`CreateRate.wait` asks the same question without taking: the leader refuses a create in an
empty bucket with it before it parses and validates the create, so a storm of refused creates costs
little beside the creates of other namespaces.

Example: ``rate`` 50: 50 single creates at t=0 go, the 51st is refused with ``Retry-After: 1``; at
t=0.1 five more go.

:class:`Impatience` remembers, per connection and namespace, until when a refused create was told
to wait. A connection that sends a create into the empty bucket again before then ignores its
``Retry-After``: its refusal is held until the time it was told (at most :data:`MAX_HOLD_S`), so a
client that does not wait is paced by the Retry-After it ignores instead of costing the node a
refusal per round trip. A client that waits is never held, and a create is never held while it
holds a slot of :class:`CreateSlots` (only the check before decoding holds).

Example: a connection refused at t=0 with ``Retry-After: 1`` sends again at t=0.01: that refusal is
held 0.99 s and answered at t=1.0 with ``Retry-After: 1`` again; sent again at t=2.0 after waiting,
it is answered at once.

:class:`CreateSlots` bounds how many creates of a namespace with the quota a node works on at once
(``ceil(rate / SLOT_RATE)``, at least one), from before a create is decoded until it is answered.
The bucket says how many creates go per second; the slots spread them out: the creates a full
bucket admits at once (a second's worth, from a client that sent many in parallel) take their turns
instead of all holding the leader's interpreter lock together while other namespaces' creates
wait for it. A create that finds its namespace's slots busy waits for one, at most
``MAX_SLOT_WAIT_S`` and only while fewer than ``MAX_SLOT_WAITERS`` creates wait on the node (a
waiting create holds an API thread); else it goes on without one. Slots never refuse a create:
the bucket alone decides which go.

Example: ``rate`` 50: two slots; ten creates sent at once go two at a time, the other eight waiting.
"""

from __future__ import annotations

import math
import threading

from molens.web.lru import BoundedLru

MAX_HOLD_S = 1.0
"""The longest a refused create is held (:class:`Impatience`)."""
MAX_HELD = 16
"""The most refused creates a node holds at once (half its 32 API threads; one more is answered at once)."""
SLOT_RATE = 25.0
"""Creates per second one slot of :class:`CreateSlots` is sized for: a create that takes 40 ms
(a loaded node) still lets a namespace reach its rate."""
MAX_SLOT_WAIT_S = 1.0
"""The longest a create waits for a slot of its namespace before it goes on without one."""
MAX_SLOT_WAITERS = 8
"""The most creates that wait for a slot on a node at once (a quarter of its 32 API threads, which
:data:`MAX_HELD` and these leave free for other requests); one more goes on without waiting."""
MAX_CONNECTIONS = 4096
"""The most (connection, namespace) pairs :class:`Impatience` remembers (the least recently refused forgotten first)."""


class CreateRate:
    """Per-namespace token buckets of creates (see the module docstring)."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        """namespace -> (tokens, when counted)."""
        self._lock = threading.Lock()

    def _short(self, ns: str, n: int, rate: float, now: float) -> tuple[float, float]:
        """(tokens in ``ns``'s bucket at ``now``, tokens a create of ``n`` lacks: 0 when it may go)."""
        tokens, at = self._buckets.get(ns, (rate, now))
        tokens = min(rate, tokens + (now - at) * rate)
        return tokens, max(0.0, min(float(n), rate) - tokens)

    def wait(self, ns: str, n: int, rate: float, now: float) -> int:
        """The seconds a create of ``n`` tasks of ``ns`` must wait (0: it may go now); takes nothing."""
        with self._lock:
            short = self._short(ns, n, rate, now)[1]
        return _retry_after_s(short, rate) if short else 0

    def take(self, ns: str, n: int, rate: float, now: float) -> int:
        """Take ``n`` tokens of namespace ``ns`` (quota ``rate`` per second): 0 when the creates
        may go, else the seconds to wait (nothing taken)."""
        with self._lock:
            tokens, short = self._short(ns, n, rate, now)
            if short:
                self._buckets[ns] = (tokens, now)
                return _retry_after_s(short, rate)
            self._buckets[ns] = (tokens - n, now)
            return 0

    def charge(self, ns: str, n: int, rate: float, now: float) -> None:
        """Take ``n`` tokens of namespace ``ns`` whatever its bucket holds: it may go below zero, and
        the creates after wait until it has refilled (at most a day's worth of debt). For creates
        that were spared their token because their idempotency key named a task, and made one
        after all (the task was deleted while they were on their way)."""
        with self._lock:
            tokens = self._short(ns, n, rate, now)[0]
            self._buckets[ns] = (max(tokens - n, -rate * MAX_RETRY_AFTER_S), now)


MAX_RETRY_AFTER_S = 86_400
"""The longest ``Retry-After`` a refused create is given: a quota of a create a year still says a
day (and a rate of 1e-300 a number, not 301 digits)."""


def _retry_after_s(short: float, rate: float) -> int:
    """Whole seconds until ``short`` tokens come back at ``rate`` a second: 1 to MAX_RETRY_AFTER_S."""
    return max(1, math.ceil(min(short / rate, MAX_RETRY_AFTER_S)))


class Impatience:
    """Until when each connection was told to wait, per namespace (see the module docstring)."""

    def __init__(self, max_hold_s: float = MAX_HOLD_S, max_connections: int = MAX_CONNECTIONS) -> None:
        self.max_hold_s = max_hold_s
        self.max_connections = max_connections
        self._told: BoundedLru[tuple[str, str], float] = BoundedLru(max_connections)
        """(connection, namespace) -> when the Retry-After it was last given passes."""
        self._lock = threading.Lock()

    def hold_s(self, conn: str, ns: str, now: float) -> float:
        """How long to hold a create of ``conn`` refused by ``ns``'s bucket at ``now`` (0: answer at once)."""
        with self._lock:
            until = self._told.get((conn, ns))
        return 0.0 if until is None or until <= now else min(self.max_hold_s, until - now)

    def told(self, conn: str, ns: str, until: float) -> None:
        """``conn`` was answered 429 for ``ns`` with a Retry-After that passes at ``until``."""
        with self._lock:
            self._told.put((conn, ns), until)


class CreateSlots:
    """Creates of each namespace with a ``creates_per_s`` quota in progress on this node (see the
    module docstring).

    >>> slots = CreateSlots()
    >>> slots.size(50), slots.size(1_000)
    (2, 40)
    >>> slots.acquire("pay", 50, 0.0), slots.acquire("pay", 50, 0.0), slots.acquire("pay", 50, 0.0)
    (True, True, False)
    >>> slots.release("pay"); slots.acquire("pay", 50, 0.0)
    True
    """

    def __init__(self, max_waiters: int = MAX_SLOT_WAITERS) -> None:
        self.max_waiters = max_waiters
        self._busy: dict[str, int] = {}
        """namespace -> its creates holding a slot."""
        self._waiting = 0
        self._cond = threading.Condition()

    @staticmethod
    def size(rate: float) -> int:
        """The slots of a namespace with ``creates_per_s`` ``rate``."""
        return max(1, math.ceil(rate / SLOT_RATE))

    def acquire(self, ns: str, rate: float, timeout_s: float) -> bool:
        """Take a slot of ``ns``, waiting at most ``timeout_s`` for one; False: none came free in
        time (or too many creates wait already), nothing taken."""
        n = self.size(rate)
        with self._cond:
            busy = self._busy
            if busy.get(ns, 0) >= n:
                if self._waiting >= self.max_waiters or timeout_s <= 0:
                    return False
                self._waiting += 1
                try:
                    if not self._cond.wait_for(lambda: busy.get(ns, 0) < n, timeout_s):
                        return False
                finally:
                    self._waiting -= 1
            busy[ns] = busy.get(ns, 0) + 1
            return True

    def release(self, ns: str) -> None:
        """Give back a slot of ``ns`` taken by :meth:`acquire`."""
        with self._cond:
            left = self._busy[ns] - 1
            if left:
                self._busy[ns] = left
            else:
                del self._busy[ns]
            self._cond.notify_all()

    def busy(self) -> dict[str, int]:
        """namespace -> slots taken now (for tests and gauges)."""
        with self._cond:
            return dict(self._busy)


__all__ = ["MAX_HELD", "MAX_HOLD_S", "MAX_SLOT_WAIT_S", "CreateRate", "CreateSlots", "Impatience"]
