"""The wall clock every part of a node reads, in epoch ms (docs/architecture.md#clock-skew).

One function, so a test can shift a whole node's clock: ``node.clock_offset_ms`` (0 in production)
is added to every reading, and the admin ``fault`` command (``node.fault_injection``) can change it
while the node runs (a clock jump). Pure code never calls it; it receives ``now_ms``.
"""

from __future__ import annotations

import time

MAX_EPOCH_MS = 253_402_300_799_999
"""The last millisecond of the year 9999: the latest time the API takes or shows (the schema, the
model, the client and the web layer all read it from here)."""

_offset_ms = 0


def wall_ms() -> int:
    return time.time_ns() // 1_000_000 + _offset_ms


def set_offset_ms(ms: int) -> None:
    """Shift this process's clock by ``ms`` (``node.clock_offset_ms``, for tests)."""
    global _offset_ms
    _offset_ms = int(ms)


def offset_ms() -> int:
    return _offset_ms


__all__ = ["MAX_EPOCH_MS", "offset_ms", "set_offset_ms", "wall_ms"]
