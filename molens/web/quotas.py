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
"""

from __future__ import annotations

import math
import threading


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


__all__ = ["CreateRate"]
