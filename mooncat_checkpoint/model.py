"""Public values: the ``Checkpoint`` record and the four claim results.

Times are integer milliseconds since the Unix epoch, as returned by the client's clock. A ``Checkpoint``
never carries the lease token: only the ``Claimed`` result of the claim that created it does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "JSONValue",
    "CheckpointStatus",
    "Checkpoint",
    "Done",
    "Claimed",
    "Busy",
    "Failed",
    "ClaimResult",
    "UnreadableRecord",
    "GcResult",
]

JSONValue: TypeAlias = Any
"""A value that survives ``json.dumps``/``json.loads``: None, bool, int, float, str, lists, str-keyed dicts."""


class CheckpointStatus(enum.StrEnum):
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One step's record as stored. ``lease_until`` is None once the step is done or failed."""

    namespace: str
    key: str
    status: CheckpointStatus
    owner_run_id: str | None
    lease_until: int | None
    attempts: int
    fence: int
    created_at: int
    updated_at: int
    result: JSONValue = None
    result_ref: str | None = None
    error: str | None = None
    fingerprint: str | None = None

    def expired(self, now_ms: int) -> bool:
        """True for a claimed record whose lease ran out at ``now_ms``, or that names no lease (written
        by hand or by another writer): it can be claimed again, as the original library claims it."""
        return self.status is CheckpointStatus.CLAIMED and (self.lease_until is None or now_ms >= self.lease_until)

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready dict (the CLI prints exactly this)."""
        return {
            "namespace": self.namespace,
            "key": self.key,
            "status": self.status.value,
            "owner_run_id": self.owner_run_id,
            "lease_until": self.lease_until,
            "attempts": self.attempts,
            "fence": self.fence,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "result": self.result,
            "result_ref": self.result_ref,
            "error": self.error,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True, slots=True)
class Done:
    """The step already finished: reuse ``checkpoint.result``."""

    checkpoint: Checkpoint
    kind: Literal["done"] = field(default="done", init=False)


@dataclass(frozen=True, slots=True)
class Claimed:
    """You own the step until ``checkpoint.lease_until``; pass ``lease_token`` to touch/done/fail.

    ``fence`` grows by at least one on every successful claim of the key, across expiry, reset and gc,
    so a downstream store can refuse a write carrying a smaller fence than one it has already seen.
    """

    checkpoint: Checkpoint
    lease_token: str = field(repr=False)
    fence: int
    kind: Literal["claimed"] = field(default="claimed", init=False)


@dataclass(frozen=True, slots=True)
class Busy:
    """Another run holds a live lease on the step."""

    checkpoint: Checkpoint
    kind: Literal["busy"] = field(default="busy", init=False)


@dataclass(frozen=True, slots=True)
class Failed:
    """The step failed earlier; ``failed`` is terminal until ``reset``."""

    checkpoint: Checkpoint
    kind: Literal["failed"] = field(default="failed", init=False)


ClaimResult: TypeAlias = Done | Claimed | Busy | Failed


@dataclass(frozen=True, slots=True)
class UnreadableRecord:
    """A stored record that does not read back (a hand-edited file that no longer parses, a status
    this library does not know): ``gc`` leaves it where it is and reports it. ``key`` is None when
    the store no longer says which key it is (a file under a hashed name); ``error`` names the file,
    row or Redis key and what is wrong with it."""

    namespace: str
    key: str | None
    error: str

    def to_dict(self) -> dict[str, JSONValue]:
        return {"namespace": self.namespace, "key": self.key, "error": self.error}


class GcResult(int):
    """What ``gc`` returns: the number of records it removed (an ``int``, as the contract's ``gc``
    returns a number), carrying in ``unreadable`` the records it could not read and left alone.

    >>> r = GcResult(2, [UnreadableRecord("ns", "broken", "unreadable checkpoint file ...")])
    >>> r == 2, r.removed, [u.key for u in r.unreadable]
    (True, 2, ['broken'])
    """

    unreadable: tuple[UnreadableRecord, ...]

    def __new__(cls, removed: int, unreadable: Iterable[UnreadableRecord] = ()) -> GcResult:
        self = super().__new__(cls, removed)
        self.unreadable = tuple(unreadable)
        return self

    @property
    def removed(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"GcResult(removed={int(self)}, unreadable={self.unreadable!r})"

    def to_dict(self) -> dict[str, JSONValue]:
        """What the CLI prints: ``removed``, the ``unreadable`` count and the ``unreadable_records``."""
        return {
            "removed": int(self),
            "unreadable": len(self.unreadable),
            "unreadable_records": [u.to_dict() for u in self.unreadable],
        }
