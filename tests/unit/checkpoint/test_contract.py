"""The backend contract (docs/checkpoint.md): every test runs on memory://, file:// and sqlite://."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from mooncat_checkpoint import (
    BackendUnavailableError,
    Busy,
    Checkpoint,
    CheckpointClient,
    CheckpointError,
    CheckpointResultSerializationError,
    CheckpointResultTooLargeError,
    CheckpointStatus,
    Claimed,
    ClaimResult,
    CorruptRecordError,
    Done,
    Failed,
    FingerprintMismatchError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidNamespaceError,
    LeaseLostError,
    WaitTimeoutError,
)
from mooncat_checkpoint.codec import MAX_DURATION_MS
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

from .conftest import START_MS, FakeClock

NS = "contract"
LEASE = 10_000


async def claimed(cp: CheckpointClient, key: str, owner: str | None = None, lease_ms: int = LEASE) -> Claimed:
    c = await cp.claim(NS, key, owner, lease_ms)
    assert isinstance(c, Claimed), c
    return c


# -- transitions ---------------------------------------------------------------------------------


async def test_first_claim_returns_claimed_with_a_32_hex_token_and_fence_1(cp: CheckpointClient) -> None:
    c = await cp.claim(NS, "k", "run-1", 5_000)
    assert isinstance(c, Claimed) and c.kind == "claimed"
    assert re.fullmatch(r"[0-9a-f]{32}", c.lease_token)
    assert c.fence == 1 and c.checkpoint.fence == 1
    rec = c.checkpoint
    assert (rec.namespace, rec.key, rec.status, rec.owner_run_id) == (NS, "k", CheckpointStatus.CLAIMED, "run-1")
    assert (rec.lease_until, rec.attempts, rec.created_at, rec.updated_at) == (START_MS + 5_000, 1, START_MS, START_MS)
    assert (rec.result, rec.result_ref, rec.error) == (None, None, None)
    assert await cp.get(NS, "k") == rec


async def test_claim_while_the_lease_is_live_is_busy(cp: CheckpointClient, clock: FakeClock) -> None:
    first = await claimed(cp, "k", "run-1")
    clock.advance(LEASE - 1)
    c = await cp.claim(NS, "k", "run-2")
    assert isinstance(c, Busy) and c.kind == "busy"
    assert c.checkpoint.owner_run_id == "run-1" and c.checkpoint.fence == first.fence
    assert not hasattr(c, "lease_token")


async def test_done_is_returned_to_later_claims_with_its_result(cp: CheckpointClient, clock: FakeClock) -> None:
    c = await claimed(cp, "k", "run-1")
    clock.advance(5)
    rec = await cp.done(NS, "k", c.lease_token, {"count": 42, "items": [1, "two", None]}, "artifacts/k.png")
    assert rec.status is CheckpointStatus.DONE and rec.lease_until is None
    assert (rec.result, rec.result_ref, rec.updated_at) == ({"count": 42, "items": [1, "two", None]}, "artifacts/k.png", START_MS + 5)
    clock.advance(10 * LEASE)
    again = await cp.claim(NS, "k", "run-2")
    assert isinstance(again, Done) and again.kind == "done"
    assert again.checkpoint == rec


async def test_failed_is_terminal_until_reset(cp: CheckpointClient, clock: FakeClock) -> None:
    c = await claimed(cp, "k")
    rec = await cp.fail(NS, "k", ValueError("boom"), c.lease_token)
    assert rec.status is CheckpointStatus.FAILED and rec.error == "ValueError: boom" and rec.lease_until is None
    for _ in range(3):
        clock.advance(10 * LEASE)
        again = await cp.claim(NS, "k")
        assert isinstance(again, Failed) and again.kind == "failed" and again.checkpoint == rec
    assert await cp.gc() == 0  # gc without older_than keeps terminal records
    assert await cp.reset(NS, "k") is True
    assert await cp.get(NS, "k") is None
    assert isinstance(await cp.claim(NS, "k"), Claimed)


async def test_fail_accepts_a_plain_message(cp: CheckpointClient) -> None:
    c = await claimed(cp, "k")
    assert (await cp.fail(NS, "k", "quota exceeded", c.lease_token)).error == "quota exceeded"


async def test_expired_lease_can_be_claimed_again_with_a_new_token(cp: CheckpointClient, clock: FakeClock) -> None:
    a = await claimed(cp, "k", "run-a")
    clock.advance(LEASE - 1)
    assert isinstance(await cp.claim(NS, "k", "run-b"), Busy)
    clock.advance(1)  # now == lease_until: expired
    b = await claimed(cp, "k", "run-b", 3_000)
    assert b.lease_token != a.lease_token
    assert b.fence == a.fence + 1
    assert b.checkpoint.attempts == 2
    assert b.checkpoint.owner_run_id == "run-b"
    assert b.checkpoint.created_at == START_MS and b.checkpoint.lease_until == clock.now + 3_000


async def test_stale_token_after_reclaim_raises_lease_lost_and_changes_nothing(
    cp: CheckpointClient, clock: FakeClock
) -> None:
    a = await claimed(cp, "k", "run-a")
    clock.advance(LEASE)
    b = await claimed(cp, "k", "run-b")
    before = await cp.get(NS, "k")
    with pytest.raises(LeaseLostError):
        await cp.done(NS, "k", a.lease_token, {"from": "a"})
    with pytest.raises(LeaseLostError, match="expired and the key was claimed again"):
        await cp.fail(NS, "k", "a gave up", a.lease_token)
    assert await cp.touch(NS, "k", a.lease_token) is None  # the contract: Checkpoint | null, no error
    assert await cp.get(NS, "k") == before
    done = await cp.done(NS, "k", b.lease_token, {"from": "b"})
    assert done.result == {"from": "b"} and done.owner_run_id == "run-b" and done.fence == b.fence


async def test_an_unchallenged_late_owner_can_still_finish(cp: CheckpointClient, clock: FakeClock) -> None:
    a = await claimed(cp, "k")
    clock.advance(3 * LEASE)  # expired, but nobody claimed it since
    assert (await cp.done(NS, "k", a.lease_token, 1)).status is CheckpointStatus.DONE


@pytest.mark.parametrize("op", ["done", "fail"])
async def test_wrong_token_raises_lease_lost_saying_it_was_never_valid(cp: CheckpointClient, op: str) -> None:
    await claimed(cp, "k", "run-a")
    before = await cp.get(NS, "k")
    with pytest.raises(LeaseLostError, match=r"never valid for this record, whose only claim \(fence \d+, owner 'run-a'\)"):
        if op == "done":
            await cp.done(NS, "k", "0" * 32)
        else:
            await cp.fail(NS, "k", "x", "0" * 32)
    assert await cp.get(NS, "k") == before


async def test_touch_with_a_wrong_token_returns_none_and_changes_nothing(cp: CheckpointClient) -> None:
    await claimed(cp, "k")
    before = await cp.get(NS, "k")
    assert await cp.touch(NS, "k", "0" * 32) is None
    assert await cp.touch(NS, "k", "0" * 32, extend_ms=0) is None
    assert await cp.get(NS, "k") == before


async def test_no_terminal_record_without_a_claim(cp: CheckpointClient) -> None:
    with pytest.raises(LeaseLostError, match="there is no record"):
        await cp.done(NS, "never", "0" * 32, 1)
    with pytest.raises(LeaseLostError):
        await cp.fail(NS, "never", "x", "0" * 32)
    assert await cp.get(NS, "never") is None
    assert await cp.touch(NS, "never", "0" * 32) is None  # nothing to renew


async def test_terminal_records_reject_their_old_token(cp: CheckpointClient) -> None:
    c = await claimed(cp, "k")
    await cp.done(NS, "k", c.lease_token, 1)
    for call in (cp.done(NS, "k", c.lease_token, 2), cp.fail(NS, "k", "x", c.lease_token)):
        with pytest.raises(LeaseLostError, match="already done"):
            await call
    assert await cp.touch(NS, "k", c.lease_token) is None
    f = await claimed(cp, "f")
    await cp.fail(NS, "f", "x", f.lease_token)
    with pytest.raises(LeaseLostError, match="already failed"):
        await cp.done(NS, "f", f.lease_token, 2)
    assert await cp.touch(NS, "f", f.lease_token) is None
    assert (await cp.get(NS, "k")).result == 1  # type: ignore[union-attr]


async def test_touch_extends_and_zero_releases(cp: CheckpointClient, clock: FakeClock) -> None:
    c = await claimed(cp, "k", "run-a")
    clock.advance(LEASE - 100)
    rec = await cp.touch(NS, "k", c.lease_token)
    assert rec is not None and rec.lease_until == clock.now + LEASE and rec.updated_at == clock.now
    clock.advance(LEASE - 1)
    assert isinstance(await cp.claim(NS, "k", "run-b"), Busy)
    rec = await cp.touch(NS, "k", c.lease_token, extend_ms=50)
    assert rec is not None and rec.lease_until == clock.now + 50
    rec = await cp.touch(NS, "k", c.lease_token, extend_ms=0)
    assert rec is not None and rec.expired(clock.now)
    b = await claimed(cp, "k", "run-b")
    assert b.fence == c.fence + 1


async def test_fence_is_monotonic_across_reclaim_reset_and_gc(cp: CheckpointClient, clock: FakeClock) -> None:
    fences = [(await claimed(cp, "k")).fence]
    clock.advance(LEASE)
    c = await claimed(cp, "k")  # re-claim after expiry
    fences.append(c.fence)
    await cp.done(NS, "k", c.lease_token, "v1")
    assert await cp.reset(NS, "k")
    c = await claimed(cp, "k")  # after reset
    fences.append(c.fence)
    await cp.fail(NS, "k", "x", c.lease_token)
    assert await cp.reset(NS, "k")
    fences.append((await claimed(cp, "k")).fence)
    clock.advance(LEASE)
    assert await cp.gc() == 1  # the expired claim goes
    fences.append((await claimed(cp, "k")).fence)  # after gc
    c = await claimed(cp, "other")
    await cp.done(NS, "other", c.lease_token)
    clock.advance(LEASE)
    assert await cp.gc(prune_finished_older_than_ms=0) == 2
    fences.append((await claimed(cp, "k")).fence)
    assert fences == sorted(set(fences)), fences
    assert fences[:2] == [1, 2]  # +1 on every re-claim of a live record


async def test_attempts_count_claims_of_the_record(cp: CheckpointClient, clock: FakeClock) -> None:
    for n in range(1, 4):
        c = await claimed(cp, "k")
        assert c.checkpoint.attempts == n
        clock.advance(LEASE)
    await cp.reset(NS, "k")
    assert (await claimed(cp, "k")).checkpoint.attempts == 1


async def test_reset(cp: CheckpointClient, clock: FakeClock) -> None:
    assert await cp.reset(NS, "missing") is False
    assert await cp.reset(NS, "missing", if_expired=True) is False
    c = await claimed(cp, "k")
    assert await cp.reset(NS, "k", if_expired=True) is False  # live claim
    clock.advance(LEASE)
    assert await cp.reset(NS, "k", if_expired=True) is True
    c = await claimed(cp, "k")
    await cp.done(NS, "k", c.lease_token)
    assert await cp.reset(NS, "k", if_expired=True) is False  # done is not an expired claim
    assert await cp.reset(NS, "k") is True
    assert await cp.reset(NS, "k") is False
    with pytest.raises(LeaseLostError):
        await cp.done(NS, "k", c.lease_token)


# -- results -------------------------------------------------------------------------------------


def _string_with_json_size(size: int) -> str:
    """A str whose compact JSON encoding is exactly ``size`` UTF-8 bytes, mostly 2-byte characters."""
    body = size - 2  # the quotes
    s = "é" * (body // 2) + "a" * (body % 2)
    assert len(json.dumps(s, ensure_ascii=False).encode("utf-8")) == size
    return s


async def test_result_of_exactly_64_kib_utf8_is_stored(cp: CheckpointClient) -> None:
    value = _string_with_json_size(65_536)
    c = await claimed(cp, "k")
    assert (await cp.done(NS, "k", c.lease_token, value)).result == value
    assert (await cp.get(NS, "k")).result == value  # type: ignore[union-attr]


async def test_result_of_64_kib_plus_one_byte_is_refused_and_changes_nothing(cp: CheckpointClient) -> None:
    value = _string_with_json_size(65_537)
    assert len(value) < 65_536  # measured in bytes, not characters
    c = await claimed(cp, "k")
    before = await cp.get(NS, "k")
    with pytest.raises(CheckpointResultTooLargeError):
        await cp.done(NS, "k", c.lease_token, value)
    with pytest.raises(CheckpointResultTooLargeError):
        await cp.done(NS, "k", c.lease_token, {"blob": "x" * 70_000})
    assert await cp.get(NS, "k") == before
    assert (await cp.done(NS, "k", c.lease_token, None, "s3://bucket/big.bin")).result_ref == "s3://bucket/big.bin"


def _cycle() -> list[object]:
    a: list[object] = []
    a.append(a)
    return a


@pytest.mark.parametrize(
    "bad", [object(), {"s": {1, 2}}, b"bytes", float("nan"), float("inf"), _cycle()],
    ids=lambda v: "object()" if type(v) is object else repr(v),  # the same ids in every process (pytest-xdist)
)
async def test_non_serializable_result_is_refused_and_changes_nothing(cp: CheckpointClient, bad: object) -> None:
    c = await claimed(cp, "k")
    before = await cp.get(NS, "k")
    with pytest.raises(CheckpointResultSerializationError):
        await cp.done(NS, "k", c.lease_token, bad)
    assert await cp.get(NS, "k") == before
    await cp.done(NS, "k", c.lease_token, "fine")  # the token is still good


async def test_results_come_back_as_json(cp: CheckpointClient) -> None:
    c = await claimed(cp, "k")
    rec = await cp.done(NS, "k", c.lease_token, {"t": (1, 2), "f": 1.5, "u": "ünï😀", "n": None, "b": True})
    assert rec.result == {"t": [1, 2], "f": 1.5, "u": "ünï😀", "n": None, "b": True}
    assert (await cp.get(NS, "k")) == rec


# -- names ---------------------------------------------------------------------------------------

BAD_NAMESPACES = ["../x", "", "a/b", "ünï", "a b", "..", ".", "x" * 129, "a\x00b", "tab\t"]


@pytest.mark.parametrize("ns", BAD_NAMESPACES, ids=repr)
async def test_invalid_namespaces_are_refused_everywhere(cp: CheckpointClient, ns: str) -> None:
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: cp.claim(ns, "k"),
        lambda: cp.get(ns, "k"),
        lambda: cp.touch(ns, "k", "0" * 32),
        lambda: cp.done(ns, "k", "0" * 32),
        lambda: cp.fail(ns, "k", "x", "0" * 32),
        lambda: cp.reset(ns, "k"),
        lambda: cp.list(ns),
        lambda: cp.wait_done(ns, "k", 0),
    ]
    for call in calls:
        with pytest.raises(InvalidNamespaceError):
            await call()
    assert issubclass(InvalidNamespaceError, ValueError)


async def test_a_namespace_must_be_a_str(cp: CheckpointClient) -> None:
    with pytest.raises(InvalidNamespaceError):
        await cp.claim(42, "k")  # type: ignore[arg-type]


UNSAFE_KEYS = [
    "../../etc/passwd",
    "x" * 10_000,
    "",
    "😀",
    "a/b",
    "..",
    ".hidden",
    "/abs",
    "back\\slash",
    "new\nline",
    "nul\x00byte",
    "sha256-" + "0" * 64,
    "ünïcödé key with spaces",
    "-rf",
]


async def test_unsafe_keys_round_trip_and_never_escape_the_store(
    cp: CheckpointClient, backend: str, tmp_path: Path
) -> None:
    for i, key in enumerate(UNSAFE_KEYS):
        c = await claimed(cp, key)
        assert c.checkpoint.key == key
        await cp.done(NS, key, c.lease_token, {"i": i})
    for i, key in enumerate(UNSAFE_KEYS):
        rec = await cp.get(NS, key)
        assert rec is not None and rec.key == key and rec.result == {"i": i}
        assert isinstance(await cp.claim(NS, key), Done)
    listed = await cp.list(NS)
    assert [r.key for r in listed] == sorted(UNSAFE_KEYS)
    if backend == "file":
        store = tmp_path / "store"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # nothing beside the store
        assert not (tmp_path.parent / "etc").exists()
        names = sorted(p.name for p in (store / NS).iterdir() if p.name.endswith(".json"))
        assert len(names) == len(UNSAFE_KEYS)
        for name in names:  # the original library's names: safe keys as they are, the rest hashed
            assert re.fullmatch(r"(sha256-[0-9a-f]{32}|-rf|\.hidden|sha256-0{64})\.json", name), name
        for dirpath, _dirs, files in os.walk(store):
            for f in files:
                assert Path(dirpath, f).resolve().is_relative_to(store.resolve())
    for key in UNSAFE_KEYS:
        assert await cp.reset(NS, key)


def four_byte_key(chars: int, seed: int) -> str:
    """``chars`` random characters of 4 UTF-8 bytes each (U+10000 to U+10FFFF): text no compression shrinks."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x10000, 0x110000)) for _ in range(chars))


# Over what a PostgreSQL btree row holds (about 2,700 bytes, after compression): just over, and the
# docs' 10,000 characters, each of 4 bytes.
LONG_KEYS = [four_byte_key(700, 1), four_byte_key(10_000, 2)]


async def test_a_key_longer_than_an_index_row_works_like_any_other(
    cp: CheckpointClient, make_client: Callable[[], CheckpointClient], clock: FakeClock
) -> None:
    assert [len(k.encode()) for k in LONG_KEYS] == [2_800, 40_000]
    for key in LONG_KEYS:
        first = await claimed(cp, key, lease_ms=LEASE)
        assert first.checkpoint.key == key and await cp.get(NS, key) == first.checkpoint
        assert isinstance(await make_client().claim(NS, key), Busy)
        touched = await cp.touch(NS, key, first.lease_token)
        assert touched is not None and touched.key == key
        clock.advance(LEASE)
        second = await claimed(make_client(), key)  # the expired lease, taken over from another client
        assert second.fence == first.fence + 1 and second.checkpoint.attempts == 2
        with pytest.raises(LeaseLostError):
            await cp.done(NS, key, first.lease_token)
        done = await cp.done(NS, key, second.lease_token, {"bytes": len(key.encode())})
        assert done.key == key and isinstance(await cp.claim(NS, key), Done)
        assert await cp.reset(NS, key) and await cp.get(NS, key) is None
        third = await claimed(cp, key)
        assert third.fence > second.fence
    assert [r.key for r in await cp.list(NS)] == sorted(LONG_KEYS)
    clock.advance(LEASE)
    assert await cp.gc() == len(LONG_KEYS) and await cp.list(NS) == []
    assert await cp.list(NS) == []


@pytest.mark.parametrize("key", [None, 7, b"bytes", "lone\ud800surrogate"], ids=repr)
async def test_keys_must_be_utf8_strings(cp: CheckpointClient, key: object) -> None:
    with pytest.raises(InvalidKeyError):
        await cp.claim(NS, key)  # type: ignore[arg-type]


async def test_safe_and_hashed_keys_do_not_collide(cp: CheckpointClient) -> None:
    import hashlib

    tricky = "../x"
    lookalike = "sha256-" + hashlib.sha256(tricky.encode()).hexdigest()
    a = await claimed(cp, tricky)
    b = await claimed(cp, lookalike)
    await cp.done(NS, tricky, a.lease_token, "tricky")
    await cp.done(NS, lookalike, b.lease_token, "lookalike")
    assert (await cp.get(NS, tricky)).result == "tricky"  # type: ignore[union-attr]
    assert (await cp.get(NS, lookalike)).result == "lookalike"  # type: ignore[union-attr]


# -- fingerprint ---------------------------------------------------------------------------------


async def test_fingerprint_mismatch_is_refused_on_every_path(cp: CheckpointClient, clock: FakeClock) -> None:
    c = await cp.claim(NS, "k", lease_ms=LEASE, fingerprint="inputs-v1")
    assert isinstance(c, Claimed) and c.checkpoint.fingerprint == "inputs-v1"
    with pytest.raises(FingerprintMismatchError):  # busy path
        await cp.claim(NS, "k", fingerprint="inputs-v2")
    assert isinstance(await cp.claim(NS, "k", fingerprint="inputs-v1"), Busy)
    clock.advance(LEASE)
    with pytest.raises(FingerprintMismatchError):  # expired: would re-claim
        await cp.claim(NS, "k", fingerprint="inputs-v2")
    c = await cp.claim(NS, "k", fingerprint="inputs-v1")
    assert isinstance(c, Claimed) and c.fence == 2
    await cp.done(NS, "k", c.lease_token, "r")
    with pytest.raises(FingerprintMismatchError):  # done path
        await cp.claim(NS, "k", fingerprint="inputs-v2")
    assert isinstance(await cp.claim(NS, "k"), Done)  # no fingerprint: not checked
    await cp.reset(NS, "k")
    c = await cp.claim(NS, "k", fingerprint="inputs-v2")  # a reset forgets the old one
    assert isinstance(c, Claimed)
    await cp.fail(NS, "k", "x", c.lease_token)
    with pytest.raises(FingerprintMismatchError):  # failed path
        await cp.claim(NS, "k", fingerprint="inputs-v1")
    assert (await cp.get(NS, "k")).fingerprint == "inputs-v2"  # type: ignore[union-attr]


async def test_a_later_claim_may_add_a_fingerprint(cp: CheckpointClient, clock: FakeClock) -> None:
    await claimed(cp, "k")
    clock.advance(LEASE)
    c = await cp.claim(NS, "k", lease_ms=LEASE, fingerprint="fp")
    assert isinstance(c, Claimed) and c.checkpoint.fingerprint == "fp"
    clock.advance(LEASE)
    c = await cp.claim(NS, "k")
    assert isinstance(c, Claimed) and c.checkpoint.fingerprint == "fp"  # kept


# -- list / gc / wait_done -----------------------------------------------------------------------


async def test_list_filters_and_sorts_by_key(cp: CheckpointClient, clock: FakeClock) -> None:
    assert await cp.list(NS) == []
    assert await cp.list("never_used") == []
    d = await claimed(cp, "d")
    await cp.done(NS, "d", d.lease_token, "D")
    f = await claimed(cp, "c")
    await cp.fail(NS, "c", "x", f.lease_token)
    await claimed(cp, "b", lease_ms=100)
    await claimed(cp, "a", lease_ms=LEASE)
    other = await cp.claim("elsewhere", "z")
    assert isinstance(other, Claimed)
    clock.advance(100)
    assert [r.key for r in await cp.list(NS)] == ["a", "b", "c", "d"]
    assert [r.key for r in await cp.list(NS, "claimed")] == ["a", "b"]
    assert [r.key for r in await cp.list(NS, CheckpointStatus.DONE)] == ["d"]
    assert [r.key for r in await cp.list(NS, status="failed")] == ["c"]
    assert [r.key for r in await cp.list(NS, expired=True)] == ["b"]
    assert [r.key for r in await cp.list(NS, "done", expired=True)] == []
    with pytest.raises(InvalidArgumentError):
        await cp.list(NS, "running")


async def test_gc_removes_expired_claims_and_optionally_idle_terminal_records(
    cp: CheckpointClient, clock: FakeClock
) -> None:
    await claimed(cp, "expired", lease_ms=100)
    await claimed(cp, "live", lease_ms=LEASE)
    d = await claimed(cp, "done")
    await cp.done(NS, "done", d.lease_token)
    f = await claimed(cp, "failed")
    await cp.fail(NS, "failed", "x", f.lease_token)
    x = await cp.claim("other_ns", "expired", lease_ms=100)
    assert isinstance(x, Claimed)
    assert await cp.gc() == 0
    clock.advance(100)
    assert await cp.gc() == 2
    assert [r.key for r in await cp.list(NS)] == ["done", "failed", "live"]
    assert await cp.list("other_ns") == []
    assert await cp.gc(older_than_ms=0) == 0  # done and failed are never gc's without the prune option
    assert await cp.gc(prune_finished_older_than_ms=101) == 0  # idle for exactly 100 ms
    clock.advance(1)
    assert await cp.gc(prune_finished_older_than_ms=101) == 2
    assert [r.key for r in await cp.list(NS)] == ["live"]
    with pytest.raises(InvalidArgumentError):
        await cp.gc(older_than_ms=-1)
    with pytest.raises(InvalidArgumentError, match="prune_finished_older_than_ms"):
        await cp.gc(prune_finished_older_than_ms=-1)


async def test_gc_older_than_is_a_grace_period_on_expired_claims_only(cp: CheckpointClient, clock: FakeClock) -> None:
    await claimed(cp, "expired", lease_ms=100)
    d = await claimed(cp, "done")
    await cp.done(NS, "done", d.lease_token)
    clock.advance(100 + 5_000)  # the claim expired 5 s ago; the done record is 5.1 s old
    assert await cp.gc(older_than_ms=5_001) == 0
    assert await cp.gc(older_than_ms=0) == 1  # the original's gc --older-than 0: the expired claim
    assert [r.key for r in await cp.list(NS)] == ["done"]


# -- records this library did not write: a claim without a lease, records that do not read ------------

HAND_TOKEN = "f" * 32


def _write_claim_without_lease(cp: CheckpointClient, backend: str, url: str, key: str = "hand") -> None:
    """A claimed record with fence 4 that names no lease, as a hand or another writer leaves it in each
    store (the field absent where the store allows, else NULL)."""
    created = START_MS - 5_000
    if backend == "memory":
        rec = StoredRecord(NS, key, CheckpointStatus.CLAIMED, "by-hand", None, None, HAND_TOKEN, 1, 4, None, created,
                           created)
        cp._engine._local().transact(NS, key, lambda _cur, _base: Decision(None, write=rec))
    elif backend == "file":
        ns_dir = Path(url.removeprefix("file://")) / NS
        ns_dir.mkdir(parents=True, exist_ok=True)
        (ns_dir / f"{key}.json").write_text(json.dumps({  # no "leaseUntil" at all
            "namespace": NS, "key": key, "status": "claimed", "ownerRunId": "by-hand", "leaseToken": HAND_TOKEN,
            "result": None, "resultRef": None, "attempts": 1, "createdAt": created, "updatedAt": created, "fence": 4,
        }))
    elif backend == "sqlite":
        db = sqlite3.connect(url.removeprefix("sqlite://"))
        with db:
            db.execute(
                "INSERT INTO checkpoints (namespace, storage_key, key, status, owner_run_id, lease_token, lease_until, "
                "attempts, created_at, updated_at, fence) VALUES (?, ?, ?, 'claimed', 'by-hand', ?, NULL, 1, ?, ?, 4)",
                (NS, key, key, HAND_TOKEN, created, created),
            )
        db.close()
    elif backend == "redis":
        import redis

        with redis.Redis.from_url(url) as r:  # no lease_until field, and no fence counter
            r.hset(f"mooncat:{{{NS}}}:r:{key}", mapping={
                "namespace": NS, "key": key, "status": "claimed", "owner_run_id": "by-hand",
                "lease_token": HAND_TOKEN, "attempts": 1, "fence": 4, "created_at": created, "updated_at": created,
            })
            r.sadd(f"mooncat:{{{NS}}}:i", key)
            r.sadd("mooncat:namespaces", NS)
    else:
        import psycopg

        from mooncat_checkpoint.backends.postgres import TABLE

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {TABLE} (namespace, key, status, owner_run_id, lease_until, lease_token, attempts, "
                "fence, created_at, updated_at) VALUES (%s, %s, 'claimed', 'by-hand', NULL, %s, 1, 4, %s, %s)",
                (NS, key.encode(), HAND_TOKEN, created, created),
            )


async def test_a_claim_that_names_no_lease_is_taken_over_like_an_expired_one(
    cp: CheckpointClient, backend: str, url: str, clock: FakeClock
) -> None:
    """The original library's claim is busy only while ``leaseUntil && leaseUntil > now``, so a claim
    without a lease (by hand, or by another writer) is claimable rather than busy forever: new token,
    fence + 1, attempts + 1, and the old token refused from then on. gc leaves it: it has no lease end
    to count the grace from (the original's gc skips it too)."""
    _write_claim_without_lease(cp, backend, url)
    rec = await cp.get(NS, "hand")
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED and rec.lease_until is None and rec.fence == 4
    assert rec.expired(clock.now)
    assert [r.key for r in await cp.list(NS, expired=True)] == ["hand"]
    assert await cp.gc() == 0 and await cp.get(NS, "hand") == rec
    c = await cp.claim(NS, "hand", "run-2", LEASE)
    assert isinstance(c, Claimed), c
    assert c.lease_token != HAND_TOKEN and c.fence == 5 and c.checkpoint.fence == 5
    got = c.checkpoint
    assert (got.attempts, got.owner_run_id, got.created_at) == (2, "run-2", START_MS - 5_000)
    assert got.lease_until == clock.now + LEASE
    assert isinstance(await cp.claim(NS, "hand", "run-3"), Busy)
    with pytest.raises(LeaseLostError):
        await cp.done(NS, "hand", HAND_TOKEN)
    assert (await cp.done(NS, "hand", c.lease_token, "ok")).status is CheckpointStatus.DONE


async def test_reset_if_expired_removes_a_claim_that_names_no_lease(
    cp: CheckpointClient, backend: str, url: str
) -> None:
    _write_claim_without_lease(cp, backend, url)
    assert await cp.reset(NS, "hand", if_expired=True) is True
    assert await cp.get(NS, "hand") is None
    assert (await claimed(cp, "hand")).fence > 4  # above the fence of the record it replaced


def _break_records(backend: str, url: str) -> None:
    """Make "broken" unreadable (bad JSON; a status nobody knows; a lease that is no number) and
    "other-writer" a record of a status this library does not know."""
    if backend == "file":
        ns_dir = Path(url.removeprefix("file://")) / NS
        (ns_dir / "broken.json").write_text("{ not json")
        other = ns_dir / "other-writer.json"
        other.write_text(other.read_text().replace('"claimed"', '"running"'))
    elif backend == "sqlite":
        db = sqlite3.connect(url.removeprefix("sqlite://"))
        with db:
            db.execute("UPDATE checkpoints SET status = 'weird' WHERE key = 'broken'")
            db.execute("UPDATE checkpoints SET status = 'running' WHERE key = 'other-writer'")
        db.close()
    else:
        import redis

        with redis.Redis.from_url(url) as r:
            r.hset(f"mooncat:{{{NS}}}:r:broken", "lease_until", "soon")
            r.hset(f"mooncat:{{{NS}}}:r:other-writer", "status", "running")


@pytest.mark.parametrize("backend", ["file", "sqlite", "redis"])  # memory and PostgreSQL rows always read
async def test_gc_collects_around_records_that_do_not_read_and_reports_them(
    cp: CheckpointClient, backend: str, url: str, clock: FakeClock
) -> None:
    """A record that does not read costs gc that record only: every other record is collected, its
    namespace's included, and gc's result names it; it stays in place (reset removes it)."""
    for ns in ("aaa", NS, "zzz"):
        assert isinstance(await cp.claim(ns, "expired", lease_ms=10), Claimed)
    for key in ("broken", "live", "other-writer"):
        await claimed(cp, key)
    _break_records(backend, url)
    clock.advance(20)
    result = await cp.gc(prune_finished_older_than_ms=0)
    assert result == 3 and result.removed == 3
    assert sorted((u.namespace, u.key) for u in result.unreadable) == [(NS, "broken"), (NS, "other-writer")]
    assert all("broken" in u.error or "other-writer" in u.error for u in result.unreadable)
    for ns in ("aaa", NS, "zzz"):
        assert await cp.get(ns, "expired") is None
    with pytest.raises(CorruptRecordError):
        await cp.get(NS, "broken")  # left where it was
    with pytest.raises(CorruptRecordError):
        await cp.get(NS, "other-writer")
    assert await cp.reset(NS, "broken") is True and await cp.reset(NS, "other-writer") is True
    again = await cp.gc()
    assert again == 0 and again.unreadable == ()
    assert [r.key for r in await cp.list(NS)] == ["live"]


async def test_wait_done_returns_the_finished_record(cp: CheckpointClient) -> None:
    c = await claimed(cp, "k")

    async def finish() -> None:
        await asyncio.sleep(0.05)
        await cp.done(NS, "k", c.lease_token, "ready")

    task = asyncio.create_task(finish())
    rec = await cp.wait_done(NS, "k", timeout_s=10)
    await task
    assert rec.status is CheckpointStatus.DONE and rec.result == "ready"
    f = await claimed(cp, "f")
    await cp.fail(NS, "f", "bad", f.lease_token)
    assert (await cp.wait_done(NS, "f", None)).status is CheckpointStatus.FAILED


async def test_wait_done_times_out(cp: CheckpointClient) -> None:
    await claimed(cp, "k")
    with pytest.raises(WaitTimeoutError) as info:
        await cp.wait_done(NS, "k", timeout_s=0.05)
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(TimeoutError):
        await cp.wait_done(NS, "missing", timeout_s=0)


# -- values and errors ---------------------------------------------------------------------------


async def test_records_are_frozen_and_never_carry_the_token(cp: CheckpointClient) -> None:
    c = await claimed(cp, "k")
    rec = await cp.get(NS, "k")
    assert rec is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.status = CheckpointStatus.DONE  # type: ignore[misc]
    field_names = {f.name for f in dataclasses.fields(Checkpoint)}
    assert {"namespace", "key", "status", "owner_run_id", "lease_until", "attempts", "fence", "created_at",
            "updated_at", "result", "result_ref", "error"} <= field_names
    assert not any("token" in name for name in field_names)
    listed = await cp.list(NS)
    for shown in (repr(rec), json.dumps(rec.to_dict()), repr(listed), repr(c)):
        assert c.lease_token not in shown


def describe(c: ClaimResult) -> str:
    match c:
        case Done(checkpoint=rec):
            by_class = f"done:{rec.result}"
        case Claimed(fence=fence):
            by_class = f"claimed:{fence}"
        case Busy():
            by_class = "busy"
        case Failed(checkpoint=rec):
            by_class = f"failed:{rec.error}"
    match c.kind:
        case "done" | "claimed" | "busy" | "failed":
            assert by_class.startswith(c.kind)
    return by_class


async def test_claim_results_match_on_class_and_on_kind(cp: CheckpointClient, backend: str) -> None:
    a = await claimed(cp, "a")
    # file and SQLite start a new key above the namespace's high mark; the servers keep a counter per key
    first = a.fence + 1 if backend in ("file", "sqlite") else 1
    assert describe(await cp.claim(NS, "b")) == f"claimed:{first}"
    assert describe(await cp.claim(NS, "a")) == "busy"
    await cp.done(NS, "a", a.lease_token, 7)
    assert describe(await cp.claim(NS, "a")) == "done:7"


def test_every_error_is_a_checkpoint_error() -> None:
    import mooncat_checkpoint as m

    for name in m.__all__:
        obj = getattr(m, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, CheckpointError), name


async def test_arguments_are_checked(cp: CheckpointClient) -> None:
    for bad in (0, -1, 1.5, True, "100", MAX_DURATION_MS + 1, 2**63):  # past 100 years: SQLite raised OverflowError
        with pytest.raises(InvalidArgumentError):
            await cp.claim(NS, "k", lease_ms=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await cp.gc(older_than_ms=2**64)
    with pytest.raises(InvalidArgumentError):
        await cp.claim(NS, "k", owner_run_id=123)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await cp.claim(NS, "k", fingerprint="f" * 5000)
    c = await claimed(cp, "k")
    for bad_ext in (-1, 2**64):
        with pytest.raises(InvalidArgumentError):
            await cp.touch(NS, "k", c.lease_token, extend_ms=bad_ext)
    longest = await cp.claim(NS, "longest", lease_ms=MAX_DURATION_MS)
    assert isinstance(longest, Claimed)
    assert longest.checkpoint.lease_until == longest.checkpoint.created_at + MAX_DURATION_MS
    with pytest.raises(InvalidArgumentError):
        await cp.done(NS, "k", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await cp.fail(NS, "k", 42, c.lease_token)  # type: ignore[arg-type]


async def test_long_error_texts_are_cut_to_64_kib(cp: CheckpointClient) -> None:
    c = await claimed(cp, "k")
    rec = await cp.fail(NS, "k", "é" * 40_000, c.lease_token)
    assert rec.error is not None and len(rec.error.encode()) == 65_536


async def test_a_closed_client_refuses_calls(make_client: Callable[[], CheckpointClient], backend: str) -> None:
    cp = CheckpointClient("memory://") if backend == "memory" else make_client()
    await cp.aclose()
    with pytest.raises(BackendUnavailableError):
        await cp.get(NS, "k")


async def test_memory_stores_are_private_to_their_client() -> None:
    a, b = CheckpointClient("memory://"), CheckpointClient("memory://")
    await a.claim(NS, "k")
    assert await b.get(NS, "k") is None


async def test_two_clients_on_one_store_see_each_other(
    make_client: Callable[[], CheckpointClient], backend: str
) -> None:
    a, b = make_client(), make_client()
    c = await a.claim(NS, "k", "run-a")
    assert isinstance(c, Claimed)
    busy = await b.claim(NS, "k", "run-b")
    assert isinstance(busy, Busy) and busy.checkpoint.owner_run_id == "run-a"
    await a.done(NS, "k", c.lease_token, "x")
    assert (await b.get(NS, "k")).result == "x"  # type: ignore[union-attr]


async def test_concurrent_claims_in_one_process_have_one_winner(cp: CheckpointClient) -> None:
    results = await asyncio.gather(*(cp.claim(NS, "k", f"run-{i}") for i in range(16)))
    assert sum(isinstance(r, Claimed) for r in results) == 1
    assert sum(isinstance(r, Busy) for r in results) == 15
