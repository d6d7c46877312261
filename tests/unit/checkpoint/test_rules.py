"""The pure state machine (``mooncat_checkpoint.rules``), without a backend: what every backend applies."""

from __future__ import annotations

from typing import Any

from mooncat_checkpoint import Busy, CheckpointStatus, Claimed, ClaimResult, GcResult, UnreadableRecord, rules
from mooncat_checkpoint.record import StoredRecord

NOW = 1_700_000_000_000
OLD_TOKEN = "f" * 32


def _claim_without_lease(**changes: Any) -> StoredRecord:
    """A claimed record that names no lease: written by hand, or by another writer."""
    rec = StoredRecord(
        namespace="ns", key="k", status=CheckpointStatus.CLAIMED, owner_run_id="by-hand", lease_until=None,
        lease_ms=None, lease_token=OLD_TOKEN, attempts=1, fence=4, fingerprint=None, created_at=NOW - 5_000,
        updated_at=NOW - 5_000,
    )
    return rec._replace(**changes)


def _claim(current: StoredRecord | None, token: str = "a" * 32) -> rules.Decision[ClaimResult]:
    return rules.claim(
        current, 0, namespace="ns", key="k", now_ms=NOW, owner_run_id="run-2", lease_ms=10_000, fingerprint=None,
        token=token,
    )


def test_a_claim_that_names_no_lease_is_taken_over_like_an_expired_one() -> None:
    """The original library's claim is busy only while ``leaseUntil && leaseUntil > now``: a claim
    without a lease is claimable, never busy forever. The takeover is that of an expired lease: new
    token, fence + 1, attempts + 1, created_at kept, a lease from now."""
    d = _claim(_claim_without_lease())
    assert isinstance(d.value, Claimed), d.value
    assert d.value.lease_token == "a" * 32 and d.value.fence == 5
    rec = d.write
    assert rec is not None and rec.lease_token == "a" * 32 and rec.lease_token != OLD_TOKEN
    assert (rec.status, rec.fence, rec.attempts, rec.created_at) == (CheckpointStatus.CLAIMED, 5, 2, NOW - 5_000)
    assert (rec.owner_run_id, rec.lease_until, rec.lease_ms, rec.updated_at) == ("run-2", NOW + 10_000, 10_000, NOW)
    # the control: a live lease is still busy
    live = _claim(_claim_without_lease(lease_until=NOW + 1))
    assert isinstance(live.value, Busy) and live.write is None


def test_a_claim_that_names_no_lease_counts_as_expired_for_list_and_reset_if_expired() -> None:
    rec = _claim_without_lease()
    assert rec.expired(NOW) and rec.public().expired(NOW)
    assert rules.matches(rec, status=None, expired=True, now_ms=NOW)
    d = rules.reset(rec, now_ms=NOW, if_expired=True)
    assert d.value is True and d.delete
    # gc counts its grace from the end of a lease; with none it leaves the claim, as the original's gc does
    assert not rules.collectable(rec, NOW, None, None) and not rules.collectable(rec, NOW, 0, 0)


def test_gc_result_is_the_count_and_carries_the_records_it_could_not_read() -> None:
    bad = UnreadableRecord("ns", "broken", "unreadable checkpoint file /s/ns/broken.json: JSONDecodeError")
    r = GcResult(2, [bad])
    assert r == 2 and r.removed == 2 and isinstance(r, int) and r.unreadable == (bad,)
    assert r.to_dict() == {
        "removed": 2, "unreadable": 1,
        "unreadable_records": [{"namespace": "ns", "key": "broken", "error": bad.error}],
    }
    assert GcResult(0).unreadable == () and GcResult(0).to_dict()["unreadable_records"] == []
