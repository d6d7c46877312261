"""The interface every backend implements, and the helpers they share.

A backend stores ``StoredRecord`` values and runs decisions atomically: ``transact`` loads the current
record of one key under a lock that excludes every other writer of that key (other threads *and*
other processes), calls ``decide(current, floor)`` and applies the returned write or delete before it
lets go. ``floor`` is the namespace's fence floor, read only when there is no record; deleting a record
raises the floor to the record's fence first, so fences never repeat (see ``rules``).

A ``ServerBackend`` (Redis, PostgreSQL: stores shared by many hosts) runs the state machine of
``rules`` itself, one atomic round trip per change (a Lua script, one SQL statement), on the store's
clock: ``now_ms`` is None unless the client was given a clock (tests drive leases with one).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Protocol, TypeVar

from mooncat_checkpoint.model import (
    Busy,
    Checkpoint,
    Claimed,
    ClaimResult,
    Done,
    Failed,
    GcResult,
    UnreadableRecord,
)
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["Backend", "Decide", "ServerBackend", "kind_result"]

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
        """Every record of the namespace, sorted by key (code point order); ``CorruptRecordError`` if
        one does not read."""
        ...

    def list_readable(self, namespace: str) -> tuple[builtins.list[StoredRecord], builtins.list[UnreadableRecord]]:
        """As ``list``, but a record that does not read is put in the second list instead of raising
        (``gc`` collects the others and reports those)."""
        ...

    def namespaces(self) -> builtins.list[str]: ...

    def raise_floor(self, namespace: str, fence: int) -> None:
        """Make the namespace fence floor at least ``fence`` (gc does it once before deleting many)."""
        ...

    def clean_debris(self) -> None:
        """Remove leftovers of crashed writers (temp files); part of ``gc``."""
        ...

    def discard(self, namespace: str, key: str) -> bool:
        """Delete ``key``'s record whatever it holds (``reset`` of one that no longer reads), the
        namespace's fence floor raised to its high mark first: the record's own fence cannot be
        read, and the next claim must still get a fence never handed out. False: no record."""
        ...

    def close(self) -> None: ...


class ServerBackend(Protocol):
    blocking: bool
    durability: str

    def now_ms(self) -> int:
        """The store's clock, epoch milliseconds."""
        ...

    def claim(
        self, namespace: str, key: str, now_ms: int | None, owner_run_id: str | None, lease_ms: int,
        fingerprint: str | None, token: str,
    ) -> ClaimResult: ...

    def touch(
        self, namespace: str, key: str, now_ms: int | None, token: str, extend_ms: int | None
    ) -> Checkpoint | None: ...

    def done(
        self, namespace: str, key: str, now_ms: int | None, token: str, result_json: str | None,
        result_ref: str | None,
    ) -> Checkpoint: ...

    def fail(self, namespace: str, key: str, now_ms: int | None, token: str, error: str) -> Checkpoint: ...

    def reset(self, namespace: str, key: str, now_ms: int | None, if_expired: bool) -> bool: ...

    def gc(self, now_ms: int | None, older_than_ms: int | None, prune_finished_ms: int | None) -> GcResult:
        """Delete claims whose lease ended ``older_than_ms`` (None: 0) ago or more, and with
        ``prune_finished_ms`` done/failed records not updated for that long; how many went, and the
        records that do not read (left in place)."""
        ...

    def get(self, namespace: str, key: str) -> StoredRecord | None: ...

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        """Every record of the namespace, sorted by key (code point order)."""
        ...

    def close(self) -> None: ...


def kind_result(kind: str, rec: StoredRecord, token: str) -> ClaimResult:
    """The claim result a server-side script or statement reported as ``kind``."""
    if kind == "claimed":
        return Claimed(rec.public(), token, rec.fence)
    if kind == "done":
        return Done(rec.public())
    if kind == "failed":
        return Failed(rec.public())
    return Busy(rec.public())
