"""The interface every backend implements, and the helpers they share.

A backend stores ``StoredRecord`` values and runs decisions atomically: ``transact`` loads the current
record of one key under a lock that excludes every other writer of that key (other threads *and*
other processes), calls ``decide(current, floor)`` and applies the returned write or delete before it
lets go. ``floor`` is the namespace's fence floor, read only when there is no record; deleting a record
raises the floor to the record's fence first, so fences never repeat (see ``rules``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Protocol, TypeVar

from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["Backend", "Decide"]

T = TypeVar("T")

Decide = Callable[[StoredRecord | None, int], Decision[T]]


class Backend(Protocol):
    #: True when calls may block on disk or on another process's lock: the async client then runs
    #: them in a worker thread. The memory backend is False and runs on the event loop.
    blocking: bool
    #: The durability setting, as the README states it ("fsync file + directory", ...).
    durability: str

    def transact(self, namespace: str, key: str, decide: Callable[[StoredRecord | None, int], Decision[T]]) -> T:
        """Atomically: load, decide, write or delete, return ``Decision.value``."""
        ...

    def get(self, namespace: str, key: str) -> StoredRecord | None: ...

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        """Every record of the namespace, sorted by key (code point order)."""
        ...

    def namespaces(self) -> builtins.list[str]: ...

    def raise_floor(self, namespace: str, fence: int) -> None:
        """Make the namespace fence floor at least ``fence`` (gc does it once before deleting many)."""
        ...

    def clean_debris(self) -> None:
        """Remove leftovers of crashed writers (temp files); part of ``gc``."""
        ...

    def close(self) -> None: ...
