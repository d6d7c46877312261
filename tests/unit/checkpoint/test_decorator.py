"""``@checkpointed`` on sync and async functions."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any

import pytest

from mooncat_checkpoint import (
    CheckpointClient,
    CheckpointStatus,
    Claimed,
    InvalidKeyError,
    InvalidNamespaceError,
    StepFailedError,
    SyncCheckpointClient,
    WaitTimeoutError,
    checkpointed,
    default_key,
)

from .conftest import FakeClock

NS = "deco"


async def test_an_async_function_runs_once_per_distinct_call(cp: CheckpointClient) -> None:
    calls: list[tuple[int, int]] = []

    @checkpointed(NS, client=cp)
    async def add(a: int, b: int = 10) -> dict[str, int]:
        calls.append((a, b))
        await asyncio.sleep(0)
        return {"sum": a + b}

    assert await add(1, 2) == {"sum": 3}
    assert await add(1, 2) == {"sum": 3}
    assert await add(1, b=2) == {"sum": 3}  # same bound arguments, same key
    assert await add(a=1, b=2) == {"sum": 3}
    assert await add(1) == {"sum": 11}
    assert await add(1, 10) == {"sum": 11}  # defaults are part of the arguments
    assert calls == [(1, 2), (1, 10)]
    assert add.__name__ == "add"
    assert len(await cp.list(NS, "done")) == 2


def test_a_sync_function_runs_once_per_distinct_call(sync_cp: SyncCheckpointClient) -> None:
    calls: list[str] = []

    @checkpointed(NS, client=sync_cp)
    def shout(word: str) -> str:
        calls.append(word)
        return word.upper()

    assert [shout("hi"), shout("hi"), shout("yo"), shout("hi")] == ["HI", "HI", "YO", "HI"]
    assert calls == ["hi", "yo"]


def test_the_default_key_is_a_stable_hash_of_arguments_and_code_version() -> None:
    def f(a: int, b: str = "x", *rest: int, **kw: Any) -> None: ...

    k = default_key(f, (1,), {})
    assert k == default_key(f, (), {"a": 1, "b": "x"})
    assert k != default_key(f, (1,), {}, code_version="v2")
    assert k != default_key(f, (2,), {})
    assert default_key(f, (1, "x", 5), {"z": [1, {"b": 2, "a": 1}]}) == default_key(
        f, (1, "x", 5), {"z": [1, {"a": 1, "b": 2}]}
    )
    # Pinned: the key must not change between releases, or every stored step would run again.
    canonical = '{"arguments":{"a":1,"b":"x","kw":{},"rest":[]},"code_version":""}'
    assert k == hashlib.sha256(canonical.encode()).hexdigest()
    assert k == "9e320d77008f93836d28392dc3fdae2f2893090660910860f2e9eb971ba2df79"


async def test_bumping_code_version_runs_again(cp: CheckpointClient) -> None:
    runs = []

    def make(version: str) -> Any:
        @checkpointed(NS, client=cp, code_version=version)
        async def step(x: int) -> int:
            runs.append(version)
            return x * 2

        return step

    assert await make("v1")(3) == 6
    assert await make("v1")(3) == 6
    assert await make("v2")(3) == 6
    assert runs == ["v1", "v2"]


async def test_a_key_function_names_the_record(cp: CheckpointClient) -> None:
    class Image:
        def __init__(self, digest: str) -> None:
            self.digest = digest

    @checkpointed(NS, client=cp, key=lambda img: f"img-{img.digest}")
    async def label(img: Image) -> str:
        return f"label of {img.digest}"

    assert await label(Image("abc")) == "label of abc"
    rec = await cp.get(NS, "img-abc")
    assert rec is not None and rec.result == "label of abc"


async def test_arguments_that_are_not_json_need_a_key_function(cp: CheckpointClient) -> None:
    @checkpointed(NS, client=cp)
    async def f(x: object) -> None: ...

    with pytest.raises(InvalidKeyError, match="pass key="):
        await f(object())
    with pytest.raises(InvalidNamespaceError):
        checkpointed("bad/ns")


async def test_a_failure_is_recorded_and_sticks_until_reset(cp: CheckpointClient) -> None:
    attempts = []

    @checkpointed(NS, client=cp, key=lambda: "flaky")
    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("upstream down")
        return "ok"

    with pytest.raises(ConnectionError):
        await flaky()
    with pytest.raises(StepFailedError) as info:
        await flaky()
    assert info.value.checkpoint.error == "ConnectionError: upstream down"
    assert len(attempts) == 1  # failed is terminal: no automatic retry
    assert await cp.reset(NS, "flaky")
    assert await flaky() == "ok"
    assert len(attempts) == 2


async def test_a_busy_call_waits_for_the_owner_and_returns_its_result(cp: CheckpointClient) -> None:
    owner = await cp.claim(NS, "shared", "other-run")
    assert isinstance(owner, Claimed)
    ran = []

    @checkpointed(NS, client=cp, key=lambda: "shared")
    async def compute() -> str:
        ran.append(1)
        return "mine"

    async def finish_soon() -> None:
        await asyncio.sleep(0.05)
        await cp.done(NS, "shared", owner.lease_token, "theirs")

    finisher = asyncio.create_task(finish_soon())
    assert await compute() == "theirs"
    await finisher
    assert ran == []


async def test_a_busy_call_takes_over_when_the_owner_lease_expires(cp: CheckpointClient, clock: FakeClock) -> None:
    assert isinstance(await cp.claim(NS, "stuck", "crashed-run", 1_000), Claimed)

    @checkpointed(NS, client=cp, key=lambda: "stuck")
    async def compute() -> str:
        return "recovered"

    async def time_passes() -> None:
        await asyncio.sleep(0.05)
        clock.advance(1_000)

    mover = asyncio.create_task(time_passes())
    assert await compute() == "recovered"
    await mover
    rec = await cp.get(NS, "stuck")
    assert rec is not None and rec.status is CheckpointStatus.DONE and rec.fence == 2


async def test_a_busy_call_gives_up_after_wait_timeout(cp: CheckpointClient) -> None:
    assert isinstance(await cp.claim(NS, "held", "other"), Claimed)

    @checkpointed(NS, client=cp, key=lambda: "held", wait_timeout_s=0.05)
    async def compute() -> str:
        return "never"

    with pytest.raises(WaitTimeoutError):
        await compute()


def test_a_sync_busy_call_waits_for_the_owner(sync_cp: SyncCheckpointClient) -> None:
    owner = sync_cp.claim(NS, "s", "other")
    assert isinstance(owner, Claimed)

    @checkpointed(NS, client=sync_cp, key=lambda: "s", wait_timeout_s=30)
    def compute() -> int:
        return 1

    timer = threading.Timer(0.05, lambda: sync_cp.done(NS, "s", owner.lease_token, 2))
    timer.start()
    try:
        assert compute() == 2
    finally:
        timer.join()


def test_a_sync_function_can_use_an_async_client_and_the_reverse(cp: CheckpointClient) -> None:
    @checkpointed(NS, client=cp)
    def sync_f(x: int) -> int:
        return x + 1

    assert sync_f(1) == 2
    sync = SyncCheckpointClient._over(cp._engine)

    @checkpointed("deco_async", client=sync)  # one namespace per function: the key has no function name
    async def async_f(x: int) -> int:
        return x + 100

    assert asyncio.run(async_f(1)) == 101
    assert sync.get("deco_async", default_key(async_f, (1,), {})).result == 101  # type: ignore[union-attr]


def test_without_a_client_the_url_or_environment_picks_the_store(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOONCAT_CHECKPOINT_URL", f"sqlite://{tmp_path}/env.db")

    @checkpointed(NS)
    def from_env(x: int) -> int:
        return x

    @checkpointed(NS, url=f"file://{tmp_path}/files")
    def from_url(x: int) -> int:
        return x

    assert from_env(5) == 5 and from_url(6) == 6
    assert (tmp_path / "env.db").exists()
    assert len(list((tmp_path / "files" / NS).glob("*.json"))) == 1
