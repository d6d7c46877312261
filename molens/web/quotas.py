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
refusal per round trip. A client that waits is never held.

Example: a connection refused at t=0 with ``Retry-After: 1`` sends again at t=0.01: that refusal is
held 0.99 s and answered at t=1.0 with ``Retry-After: 1`` again; sent again at t=2.0 after waiting,
it is answered at once.
"""

from __future__ import annotations

import math
import threading

from molens.web.lru import BoundedLru

MAX_HOLD_S = 1.0
"""The longest a refused create is held (:class:`Impatience`)."""
MAX_HELD = 16
"""The most refused creates a node holds at once (half its 32 API threads; one more is answered at once)."""
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
        return max(1, math.ceil(short / rate)) if short else 0

    def take(self, ns: str, n: int, rate: float, now: float) -> int:
        """Take ``n`` tokens of namespace ``ns`` (quota ``rate`` per second): 0 when the creates
        may go, else the seconds to wait (nothing taken)."""
        with self._lock:
            tokens, short = self._short(ns, n, rate, now)
            if short:
                self._buckets[ns] = (tokens, now)
                return max(1, math.ceil(short / rate))
            self._buckets[ns] = (tokens - n, now)
            return 0


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


__all__ = ["MAX_HELD", "MAX_HOLD_S", "CreateRate", "Impatience"]
