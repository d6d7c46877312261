"""``StoredRecord``: a checkpoint as a backend keeps it, lease token and encoded result included.

Backends store and load these; only ``rules`` decides how they change. ``result_json`` is the compact
JSON text of the result (checked against the size limit once, stored as is, decoded on read), so every
backend returns the same JSON-normalised value. Field order is the SQLite column order.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from mooncat_checkpoint.model import Checkpoint, CheckpointStatus

__all__ = ["StoredRecord"]


class StoredRecord(NamedTuple):
    """Internal and hot (created on every operation), hence a NamedTuple rather than a dataclass."""

    namespace: str
    key: str
    status: CheckpointStatus
    owner_run_id: str | None
    lease_until: int | None
    lease_ms: int | None
    lease_token: str | None
    attempts: int
    fence: int
    fingerprint: str | None
    created_at: int
    updated_at: int
    result_json: str | None = None
    result_ref: str | None = None
    error: str | None = None

    def expired(self, now_ms: int) -> bool:
        """The claim can be taken over: its lease ran out (``now >= lease_until``), or it names no
        lease at all (written by hand or by another writer), which the original library claims too.
        Every backend decides by this rule (Redis and PostgreSQL in their scripts, the same test)."""
        return self.status is CheckpointStatus.CLAIMED and (self.lease_until is None or now_ms >= self.lease_until)

    def public(self) -> Checkpoint:
        """The record without its lease token, result decoded."""
        return Checkpoint(
            self.namespace,
            self.key,
            self.status,
            self.owner_run_id,
            self.lease_until,
            self.attempts,
            self.fence,
            self.created_at,
            self.updated_at,
            None if self.result_json is None else json.loads(self.result_json),
            self.result_ref,
            self.error,
            self.fingerprint,
        )
