"""The checkpoint state machine, pure: current record (or None) + inputs -> ``Decision``.

::

    none --claim--> claimed --done--> done      (terminal)
                      |   \\--fail--> failed    (terminal until reset)
                      \\-- lease expired: claim again -> claimed (new token, fence + 1, attempts + 1)

* "expired" is ``StoredRecord.expired``: the lease ran out (``now >= lease_until``) or the claim names
  no lease at all (a record written by hand or by another writer): the original library claims such a
  record too (its busy test is ``leaseUntil && leaseUntil > now``), so it is never busy forever. Its
  re-claim is like any other: new token, fence + 1, attempts + 1.
* ``done``/``fail`` need the current token of a claimed record, else ``LeaseLostError``; ``touch``
  returns None then (the contract's ``Checkpoint | null``). The
  token stays current after the lease expires until somebody claims again, so a late but unchallenged
  owner can still finish; an owner that was overtaken cannot (that is the fencing guarantee).
* ``fence``: a fresh record starts at ``base + 1`` where ``base`` (kept per namespace by the backend)
  is at least every fence a record of the namespace ever had (file and SQLite: every fence handed out,
  so a record deleted by anyone, the original library's ``reset``/``gc`` included, is covered); so a
  key's fence never repeats or goes down, across expiry, ``reset`` and ``gc``.
* ``fingerprint``: stored by the claim that creates (or re-claims) the record; a claim bringing a
  different one raises ``FingerprintMismatchError`` whatever the record's state. A claim without a
  fingerprint is not checked.

Backends run a decision function under their lock (per key, or the database write lock) and apply
``Decision.write`` / ``Decision.delete``; nothing here knows about clocks, threads or disks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from mooncat_checkpoint.errors import FingerprintMismatchError, LeaseLostError
from mooncat_checkpoint.model import Busy, Checkpoint, CheckpointStatus, Claimed, ClaimResult, Done, Failed
from mooncat_checkpoint.record import StoredRecord

__all__ = ["Decision", "lease_lost", "fingerprint_mismatch", "claim", "touch", "complete", "fail", "reset", "collectable", "gc", "matches"]

T = TypeVar("T")

DEFAULT_EXTEND_MS = 60_000
"""What a ``touch`` without ``extend_ms`` adds to a claim whose record names no lease (one the
original library wrote: its own ``touch`` default, ``DEFAULT_EXTEND_MS``)."""

_CLAIMED = CheckpointStatus.CLAIMED
_DONE = CheckpointStatus.DONE
_FAILED = CheckpointStatus.FAILED


@dataclass(frozen=True, slots=True)
class Decision(Generic[T]):
    """What to return, and what the backend must do first: write a record, delete it, or nothing."""

    value: T
    write: StoredRecord | None = None
    delete: bool = False


def _where(namespace: str, key: str) -> str:
    shown = key if len(key) <= 80 else key[:77] + "..."
    return f"{namespace}/{shown!r}"


def lease_lost(current: StoredRecord | Checkpoint | None, namespace: str, key: str) -> LeaseLostError:
    """The error for a token that is not the current token of ``current``, saying which case it is (stores
    that check tokens themselves, Redis and PostgreSQL, raise it with the record they found; a step's
    renewal with what ``get`` returned)."""
    where = _where(namespace, key)
    if current is None:
        return LeaseLostError(f"{where}: lease lost: there is no record (never claimed, or reset or collected since)")
    if current.status is _DONE:
        return LeaseLostError(f"{where}: lease lost: the step is already done (its result stands)")
    if current.status is _FAILED:
        return LeaseLostError(f"{where}: lease lost: the step already failed (reset it to run it again)")
    holder = f"fence {current.fence}, owner {current.owner_run_id!r}"
    if current.attempts <= 1:
        return LeaseLostError(
            f"{where}: lease lost: the token was never valid for this record, whose only claim ({holder}) "
            "has another token"
        )
    return LeaseLostError(
        f"{where}: lease lost: the token is not that of the current claim (attempt {current.attempts}, {holder}): "
        "an earlier claim's lease expired and the key was claimed again, or the token was never valid"
    )


def fingerprint_mismatch(current: StoredRecord, namespace: str, key: str, fingerprint: str) -> FingerprintMismatchError:
    return FingerprintMismatchError(
        f"{_where(namespace, key)}: fingerprint {fingerprint!r} does not match the stored {current.fingerprint!r}"
    )


def _check_token(current: StoredRecord | None, namespace: str, key: str, token: str) -> StoredRecord:
    if current is None or current.status is not _CLAIMED or current.lease_token != token:
        raise lease_lost(current, namespace, key)
    return current


def claim(
    current: StoredRecord | None,
    base: int,
    *,
    namespace: str,
    key: str,
    now_ms: int,
    owner_run_id: str | None,
    lease_ms: int,
    fingerprint: str | None,
    token: str,
) -> Decision[ClaimResult]:
    """``base`` is the namespace's fence base; it is only read when there is no record."""
    if current is None:
        rec = StoredRecord(
            namespace, key, _CLAIMED, owner_run_id, now_ms + lease_ms, lease_ms, token, 1, base + 1,
            fingerprint, now_ms, now_ms,
        )
        return Decision(Claimed(rec.public(), token, rec.fence), write=rec)
    if fingerprint is not None and current.fingerprint is not None and fingerprint != current.fingerprint:
        raise fingerprint_mismatch(current, namespace, key, fingerprint)
    status = current.status
    if status is _DONE:
        return Decision(Done(current.public()))
    if status is _FAILED:
        return Decision(Failed(current.public()))
    if not current.expired(now_ms):
        return Decision(Busy(current.public()))
    rec = StoredRecord(
        namespace, key, _CLAIMED, owner_run_id, now_ms + lease_ms, lease_ms, token, current.attempts + 1,
        current.fence + 1, current.fingerprint if fingerprint is None else fingerprint, current.created_at, now_ms,
    )
    return Decision(Claimed(rec.public(), token, rec.fence), write=rec)


def touch(
    current: StoredRecord | None, *, namespace: str, key: str, now_ms: int, token: str, extend_ms: int | None
) -> Decision[Checkpoint | None]:
    """Renew the lease to ``now + extend_ms`` (default: the claim's lease, or ``DEFAULT_EXTEND_MS``
    when the record names none). As the contract says, None (nothing changes) when the record is not
    claimed with ``token``: no record, finished, or another claim's; ``done``/``fail`` raise
    ``LeaseLostError`` in those cases instead."""
    if current is None or current.status is not _CLAIMED or current.lease_token != token:
        return Decision(None)
    lease = extend_ms if extend_ms is not None else current.lease_ms
    if lease is None:
        lease = DEFAULT_EXTEND_MS
    rec = current._replace(lease_until=now_ms + lease, updated_at=now_ms)
    return Decision(rec.public(), write=rec)


def complete(
    current: StoredRecord | None,
    *,
    namespace: str,
    key: str,
    now_ms: int,
    token: str,
    result_json: str | None,
    result_ref: str | None,
) -> Decision[Checkpoint]:
    cur = _check_token(current, namespace, key, token)
    rec = StoredRecord(
        namespace, key, _DONE, cur.owner_run_id, None, None, None, cur.attempts, cur.fence, cur.fingerprint,
        cur.created_at, now_ms, result_json, result_ref, None,
    )
    return Decision(rec.public(), write=rec)


def fail(
    current: StoredRecord | None, *, namespace: str, key: str, now_ms: int, token: str, error: str
) -> Decision[Checkpoint]:
    cur = _check_token(current, namespace, key, token)
    rec = StoredRecord(
        namespace, key, _FAILED, cur.owner_run_id, None, None, None, cur.attempts, cur.fence, cur.fingerprint,
        cur.created_at, now_ms, None, None, error,
    )
    return Decision(rec.public(), write=rec)


def reset(current: StoredRecord | None, *, now_ms: int, if_expired: bool) -> Decision[bool]:
    """Delete the record (any state); with ``if_expired`` only a claim whose lease ran out."""
    if current is None or (if_expired and not current.expired(now_ms)):
        return Decision(False)
    return Decision(True, delete=True)


def collectable(record: StoredRecord, now_ms: int, older_than_ms: int | None, prune_finished_ms: int | None) -> bool:
    """gc removes claims whose lease ended at least ``older_than_ms`` ago (the original library's grace
    period; None or 0: every expired claim) and, only when ``prune_finished_ms`` is given, done/failed
    records not updated for at least that long. A claim that names no lease has no end to count the
    grace from: gc leaves it, as the original's gc does (a claim, or ``reset --if-expired``, takes it)."""
    if record.status is _CLAIMED:
        return record.lease_until is not None and now_ms - record.lease_until >= (older_than_ms or 0)
    return prune_finished_ms is not None and now_ms - record.updated_at >= prune_finished_ms


def gc(
    current: StoredRecord | None, *, now_ms: int, older_than_ms: int | None, prune_finished_ms: int | None
) -> Decision[bool]:
    if current is None or not collectable(current, now_ms, older_than_ms, prune_finished_ms):
        return Decision(False)
    return Decision(True, delete=True)


def matches(record: StoredRecord, *, status: CheckpointStatus | None, expired: bool, now_ms: int) -> bool:
    """The ``list`` filter: a status, and/or claims whose lease ran out."""
    if status is not None and record.status is not status:
        return False
    return not expired or record.expired(now_ms)
