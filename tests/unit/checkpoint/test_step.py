"""``async with cp.step(...)`` and its sync twin: done/fail on exit, skip, background renewal, lease loss."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from mooncat_checkpoint import (
    CheckpointClient,
    CheckpointResultTooLargeError,
    CheckpointStatus,
    Claimed,
    FingerprintMismatchError,
    LeaseLostError,
    SyncCheckpointClient,
)

from .conftest import FakeClock

NS = "steps"


async def test_a_step_that_ends_normally_is_done_with_its_result(cp: CheckpointClient) -> None:
    async with cp.step(NS, "k", owner_run_id="run-1") as step:
        assert (step.kind, step.skipped, step.previous) == ("claimed", False, None)
        assert step.fence == 1 and step.lease_token is not None
        step.result = {"rows": 3}
        step.result_ref = "out/k.parquet"
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.DONE
    assert (rec.result, rec.result_ref, rec.owner_run_id) == ({"rows": 3}, "out/k.parquet", "run-1")
    assert step.checkpoint == rec


async def test_a_step_that_raises_is_failed_and_the_error_propagates(cp: CheckpointClient) -> None:
    with pytest.raises(ValueError, match="boom"):
        async with cp.step(NS, "k"):
            raise ValueError("boom")
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.FAILED and rec.error == "ValueError: boom"


async def test_done_and_failed_steps_are_skipped(cp: CheckpointClient) -> None:
    async with cp.step(NS, "k") as first:
        first.result = [1, 2]
    async with cp.step(NS, "k") as again:
        assert again.skipped and again.kind == "done"
        assert again.previous is not None and again.previous.result == [1, 2]
        assert again.result == [1, 2]  # the stored result, ready to use
    with pytest.raises(RuntimeError):
        async with cp.step(NS, "bad"):
            raise RuntimeError("x")
    async with cp.step(NS, "bad") as failed:
        assert failed.skipped and failed.kind == "failed" and failed.previous is not None
        assert failed.previous.error == "RuntimeError: x"
    assert (await cp.get(NS, "bad")).status is CheckpointStatus.FAILED  # type: ignore[union-attr]


async def test_a_busy_step_is_skipped_and_leaves_the_owner_alone(cp: CheckpointClient) -> None:
    owner = await cp.claim(NS, "k", "run-1")
    assert isinstance(owner, Claimed)
    async with cp.step(NS, "k", owner_run_id="run-2") as step:
        assert step.skipped and step.kind == "busy"
        assert step.previous is not None and step.previous.owner_run_id == "run-1"
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED and rec.owner_run_id == "run-1"


async def test_an_unstorable_result_fails_the_step(cp: CheckpointClient) -> None:
    with pytest.raises(CheckpointResultTooLargeError):
        async with cp.step(NS, "k") as step:
            step.result = "x" * 70_000
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.FAILED and "result rejected" in (rec.error or "")


async def test_a_step_checks_the_fingerprint(cp: CheckpointClient) -> None:
    async with cp.step(NS, "k", fingerprint="v1") as step:
        step.result = 1
    with pytest.raises(FingerprintMismatchError):
        async with cp.step(NS, "k", fingerprint="v2"):
            pytest.fail("the body must not run")


async def test_a_cancelled_step_releases_its_lease(cp: CheckpointClient, clock: FakeClock) -> None:
    entered = asyncio.Event()

    async def work() -> None:
        async with cp.step(NS, "k", owner_run_id="run-1", lease_ms=60_000):
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(work())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED and rec.expired(clock.now)  # not failed
    c = await cp.claim(NS, "k", "run-2")
    assert isinstance(c, Claimed) and c.fence == 2


async def test_a_step_overtaken_between_renewals_cannot_mark_done(cp: CheckpointClient, clock: FakeClock) -> None:
    with pytest.raises(LeaseLostError):
        async with cp.step(NS, "k", lease_ms=60_000, owner_run_id="slow") as step:
            clock.advance(60_000)  # the lease ran out before the first renewal (a long GC pause, say)
            thief = await cp.claim(NS, "k", "fast")
            assert isinstance(thief, Claimed)
            step.result = "late"
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED and rec.owner_run_id == "fast"


# -- with the real clock: renewal and loss --------------------------------------------------------


@pytest.fixture
def real_url(url: str) -> str:
    return url


async def test_the_lease_is_renewed_while_the_body_runs(real_url: str) -> None:
    cp = CheckpointClient(real_url)
    lease = 1200  # renewed every 400 ms: a loaded machine may stall us a while without losing it
    async with cp.step(NS, "k", lease_ms=lease, owner_run_id="run-1") as step:
        first_until = step.claim.checkpoint.lease_until  # type: ignore[union-attr]
        deadline = time.monotonic() + 1.1 * lease / 1000  # past the first lease
        while time.monotonic() < deadline:
            c = await cp.claim(NS, "k", "run-2")
            assert c.kind == "busy", c  # never lost on the way
            await asyncio.sleep(0.05)
        rec = await cp.get(NS, "k")
        assert rec is not None and rec.lease_until is not None and rec.lease_until > first_until  # type: ignore[operator]
        step.result = "ok"
    assert (await cp.get(NS, "k")).result == "ok"  # type: ignore[union-attr]
    await cp.aclose()


async def test_losing_the_lease_cancels_the_body_with_lease_lost(real_url: str) -> None:
    cp = CheckpointClient(real_url)
    finished = False
    started = time.monotonic()

    async def take_over() -> object:  # an operator resets it and another run takes over
        assert await cp.reset(NS, "k")
        return await cp.claim(NS, "k", "run-2", 60_000)

    takeover: asyncio.Future[object] | None = None
    with pytest.raises(LeaseLostError):
        async with cp.step(NS, "k", lease_ms=300, owner_run_id="run-1"):
            # shielded: the renewal that finds the lease gone may cancel the body before the claim is in
            takeover = asyncio.ensure_future(take_over())
            assert isinstance(await asyncio.shield(takeover), Claimed)
            await asyncio.sleep(30)  # interrupted by the next renewal, ~0.1 s away
            finished = True
    assert not finished and time.monotonic() - started < 10
    assert takeover is not None and isinstance(await takeover, Claimed)
    rec = await cp.get(NS, "k")
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED and rec.owner_run_id == "run-2"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # our own cancellation was taken back
    await cp.aclose()


def test_the_sync_step_renews_and_reports_loss(tmp_path: Path) -> None:
    cp = SyncCheckpointClient(f"sqlite://{tmp_path}/s.db")
    with cp.step(NS, "k", lease_ms=1200) as step:
        deadline = time.monotonic() + 1.3
        while time.monotonic() < deadline:
            assert cp.claim(NS, "k").kind == "busy"
            time.sleep(0.05)
        step.result = 1
    assert cp.get(NS, "k").status is CheckpointStatus.DONE  # type: ignore[union-attr]

    with pytest.raises(LeaseLostError), cp.step(NS, "lost", lease_ms=300) as lost:
        cp.reset(NS, "lost")
        assert cp.claim(NS, "lost", "thief").kind == "claimed"
        deadline = time.monotonic() + 10
        while not lost.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lost.lost
    assert cp.get(NS, "lost").owner_run_id == "thief"  # type: ignore[union-attr]
    cp.close()


def test_the_sync_step_marks_failures(sync_cp: SyncCheckpointClient) -> None:
    with pytest.raises(KeyError), sync_cp.step(NS, "k"):
        raise KeyError("missing")
    assert sync_cp.get(NS, "k").error == "KeyError: 'missing'"  # type: ignore[union-attr]
    with sync_cp.step(NS, "k") as again:
        assert again.skipped and again.kind == "failed"


def test_the_sync_step_renewal_thread_stops(sync_cp: SyncCheckpointClient) -> None:
    def renewers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("mooncat-checkpoint renew")]

    with sync_cp.step(NS, "k", lease_ms=60_000) as step:
        assert len(renewers()) == 1
        step.result = "x"
    assert renewers() == []
