"""Hypothesis drives each backend with random claim/touch/done/fail/reset/gc/time steps and compares every
answer, and every stored record, with a small reference model written straight from docs/checkpoint.md."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mooncat_checkpoint import (
    Busy,
    Checkpoint,
    CheckpointClient,
    CheckpointStatus,
    Claimed,
    ClaimResult,
    Done,
    Failed,
    FingerprintMismatchError,
    LeaseLostError,
)

from .conftest import FakeClock, store_url

NS = "sm"
KEYS = st.sampled_from(["a", "../c", "😀"])
# Few, aligned durations: so leases end exactly "now" often and the boundaries get exercised.
LEASES = st.sampled_from([1, 5, 10, 30])
STEPS_MS = st.sampled_from([0, 1, 4, 5, 10, 30])
OWNERS = st.sampled_from([None, "run-1", "run-2"])
FINGERPRINTS = st.sampled_from([None, None, None, "f1", "f2"])
#: -1: the key's current token (if it has one); n >= 0: the n-th token ever handed out (often stale).
TOKENS = st.one_of(st.just(-1), st.just(-1), st.integers(0, 20))
RESULTS = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=4), st.lists(st.booleans(), max_size=2))


@dataclass
class Model:
    status: CheckpointStatus
    owner_run_id: str | None
    lease_until: int | None
    lease_ms: int | None
    token: str | None
    attempts: int
    fence: int
    fingerprint: str | None
    created_at: int
    updated_at: int
    result: Any = None
    result_ref: str | None = None
    error: str | None = None

    def public(self, key: str) -> Checkpoint:
        return Checkpoint(
            NS, key, self.status, self.owner_run_id, self.lease_until, self.attempts, self.fence,
            self.created_at, self.updated_at, self.result, self.result_ref, self.error, self.fingerprint,
        )

    def expired(self, now: int) -> bool:
        return self.status is CheckpointStatus.CLAIMED and (self.lease_until is None or now >= self.lease_until)


class CheckpointMachine(RuleBasedStateMachine):
    backend = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="cp-sm-")
        self.clock = FakeClock()
        self.loop = asyncio.new_event_loop()
        self.cp = CheckpointClient(store_url(self.backend, Path(self.tmp)), clock=self.clock)
        self.model: dict[str, Model] = {}
        self.floor = 0  # highest fence of any deleted record
        self.high = 0  # highest fence ever handed out: file and SQLite start new records above it
        self.tokens: list[str] = []
        self.last_fence: dict[str, int] = {}

    def teardown(self) -> None:
        self.loop.run_until_complete(self.cp.aclose())
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def pick_token(self, key: str, choice: int) -> str:
        m = self.model.get(key)
        if choice < 0:
            return m.token if m is not None and m.token is not None else "f" * 32
        return self.tokens[choice % len(self.tokens)] if self.tokens else "e" * 32

    def base(self) -> int:
        """What a new record's fence is one above: file and SQLite keep a high mark that the original
        library's deletes cannot lower; memory only the fences of deleted records."""
        return self.high if self.backend in ("file", "sqlite") else self.floor  # file: at least this

    def delete(self, key: str) -> None:
        self.floor = max(self.floor, self.model.pop(key).fence)

    # -- rules -----------------------------------------------------------------------------

    @rule(ms=STEPS_MS, key=KEYS, lease=LEASES, owner=OWNERS, fp=FINGERPRINTS)
    def claim(self, ms: int, key: str, lease: int, owner: str | None, fp: str | None) -> None:
        now = self.clock.advance(ms)
        m = self.model.get(key)
        if m is not None and fp is not None and m.fingerprint is not None and fp != m.fingerprint:
            with pytest.raises(FingerprintMismatchError):
                self.run(self.cp.claim(NS, key, owner, lease, fingerprint=fp))
            return
        got: ClaimResult = self.run(self.cp.claim(NS, key, owner, lease, fingerprint=fp))
        if m is not None and m.status is CheckpointStatus.DONE:
            assert isinstance(got, Done) and got.checkpoint == m.public(key)
        elif m is not None and m.status is CheckpointStatus.FAILED:
            assert isinstance(got, Failed) and got.checkpoint == m.public(key)
        elif m is not None and not m.expired(now):
            assert isinstance(got, Busy) and got.checkpoint == m.public(key)
        else:
            assert isinstance(got, Claimed), got
            if m is None:
                # file: a new record takes the next fence of a block reserved above the high mark
                fence = got.fence if self.backend == "file" and got.fence > self.high else self.base() + 1
                m = Model(status=CheckpointStatus.CLAIMED, owner_run_id=owner, lease_until=now + lease, lease_ms=lease, token=got.lease_token, attempts=1, fence=fence, fingerprint=fp,
                          created_at=now, updated_at=now)
            else:
                m = replace(m, owner_run_id=owner, lease_until=now + lease, lease_ms=lease, token=got.lease_token,
                            attempts=m.attempts + 1, fence=m.fence + 1, fingerprint=fp or m.fingerprint,
                            updated_at=now)
            self.model[key] = m
            assert got.fence == m.fence and got.checkpoint == m.public(key)
            assert got.lease_token not in self.tokens
            assert got.fence > self.last_fence.get(key, 0)
            self.last_fence[key] = got.fence
            self.high = max(self.high, got.fence)
            self.tokens.append(got.lease_token)

    @rule(ms=STEPS_MS, key=KEYS, choice=TOKENS, extend=st.one_of(st.none(), STEPS_MS))
    def touch(self, ms: int, key: str, choice: int, extend: int | None) -> None:
        self.clock.advance(ms)
        token = self.pick_token(key, choice)
        m = self.model.get(key)
        if m is None or m.status is not CheckpointStatus.CLAIMED or m.token != token:
            assert self.run(self.cp.touch(NS, key, token, extend)) is None  # the contract's null
        else:
            now = self.clock.now
            m.lease_until = now + (m.lease_ms if extend is None else extend)  # type: ignore[operator]
            m.updated_at = now
            assert self.run(self.cp.touch(NS, key, token, extend)) == m.public(key)

    @rule(ms=STEPS_MS, key=KEYS, choice=TOKENS, result=RESULTS, ref=st.sampled_from([None, "s3://x"]))
    def done(self, ms: int, key: str, choice: int, result: Any, ref: str | None) -> None:
        self.clock.advance(ms)
        token = self.pick_token(key, choice)
        m = self.model.get(key)
        if m is None or m.status is not CheckpointStatus.CLAIMED or m.token != token:
            with pytest.raises(LeaseLostError):
                self.run(self.cp.done(NS, key, token, result, ref))
            return
        m.status, m.lease_until, m.lease_ms, m.token = CheckpointStatus.DONE, None, None, None
        m.result, m.result_ref, m.error, m.updated_at = result, ref, None, self.clock.now
        assert self.run(self.cp.done(NS, key, token, result, ref)) == m.public(key)

    @rule(ms=STEPS_MS, key=KEYS, choice=TOKENS, error=st.sampled_from(["boom", "", "ünï"]))
    def fail(self, ms: int, key: str, choice: int, error: str) -> None:
        self.clock.advance(ms)
        token = self.pick_token(key, choice)
        m = self.model.get(key)
        if m is None or m.status is not CheckpointStatus.CLAIMED or m.token != token:
            with pytest.raises(LeaseLostError):
                self.run(self.cp.fail(NS, key, error, token))
            return
        m.status, m.lease_until, m.lease_ms, m.token = CheckpointStatus.FAILED, None, None, None
        m.result, m.result_ref, m.error, m.updated_at = None, None, error, self.clock.now
        assert self.run(self.cp.fail(NS, key, error, token)) == m.public(key)

    @rule(ms=STEPS_MS, key=KEYS, if_expired=st.booleans())
    def reset(self, ms: int, key: str, if_expired: bool) -> None:
        self.clock.advance(ms)
        m = self.model.get(key)
        expect = m is not None and (not if_expired or m.expired(self.clock.now))
        assert self.run(self.cp.reset(NS, key, if_expired=if_expired)) is expect
        if expect:
            self.delete(key)

    @rule(ms=STEPS_MS, key=KEYS, lease=LEASES, owner=OWNERS, fp=FINGERPRINTS)
    def claim_again(self, ms: int, key: str, lease: int, owner: str | None, fp: str | None) -> None:
        """Claims are the interesting step: a second rule makes them twice as likely."""
        self.claim(ms, key, lease, owner, fp)

    @rule(ms=STEPS_MS, older=st.one_of(st.none(), STEPS_MS), prune=st.one_of(st.none(), STEPS_MS))
    def gc(self, ms: int, older: int | None, prune: int | None) -> None:
        now = self.clock.advance(ms)
        doomed = [
            k for k, m in self.model.items()
            if (m.status is CheckpointStatus.CLAIMED and now - m.lease_until >= (older or 0))  # type: ignore[operator]
            or (m.status is not CheckpointStatus.CLAIMED and prune is not None and now - m.updated_at >= prune)
        ]
        assert self.run(self.cp.gc(older, prune_finished_older_than_ms=prune)) == len(doomed)
        for k in doomed:
            self.delete(k)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        listed = self.run(self.cp.list(NS))
        assert listed == [self.model[k].public(k) for k in sorted(self.model)]
        expired = self.run(self.cp.list(NS, expired=True))
        assert [r.key for r in expired] == sorted(k for k, m in self.model.items() if m.expired(self.clock.now))


SETTINGS = settings(
    max_examples=25, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class MemoryMachine(CheckpointMachine):
    backend = "memory"


class FileMachine(CheckpointMachine):
    backend = "file"


class SqliteMachine(CheckpointMachine):
    backend = "sqlite"


TestMemoryBackendAgainstModel = MemoryMachine.TestCase
TestMemoryBackendAgainstModel.settings = settings(SETTINGS, max_examples=100)
TestFileBackendAgainstModel = FileMachine.TestCase
TestFileBackendAgainstModel.settings = SETTINGS
TestSqliteBackendAgainstModel = SqliteMachine.TestCase
TestSqliteBackendAgainstModel.settings = SETTINGS
