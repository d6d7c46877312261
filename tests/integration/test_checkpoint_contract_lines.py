"""A test per contract line of the README (``claim``, ``touch``, ``done``, ``fail``, ``get``, ``reset``,
``list``, ``gc``) on every backend, through the async and the sync client, with the original
TypeScript library's result beside ours.

``interop/contract.mjs`` runs one scenario, a step per contract line, on the original (npm
``mooncat-checkpoint`` 0.5.1, installed by scripts/test) under node against a file store; ``scenario``
below runs the same steps against ours. Each line's outcome, normalized (a record as key, status,
owner, result, resultRef and attempts; an error as its class name), must be the original's. One line
has no counterpart: 0.5.1 dropped ``fail()`` (its README still lists it), so for ``fail`` the
original's entry records that and ours must give the failed record the contract describes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mooncat_checkpoint import (
    Checkpoint,
    CheckpointClient,
    Claimed,
    ClaimResult,
    LeaseLostError,
    SyncCheckpointClient,
)
from tests.integration.test_checkpoint_interop import original  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).with_name("interop") / "contract.mjs"
Z = "0" * 32
BACKENDS = ["memory", "file", "sqlite", "redis", "postgresql"]


def rec(r: Checkpoint | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"key": r.key, "status": r.status.value, "owner": r.owner_run_id, "result": r.result,
            "resultRef": r.result_ref, "attempts": r.attempts}


def claim(c: ClaimResult) -> dict[str, Any]:
    return {"kind": c.kind, "record": rec(c.checkpoint)}


class SyncAsAsync:
    """The sync client behind the async client's signatures, so one scenario drives both."""

    def __init__(self, cp: SyncCheckpointClient) -> None:
        self.cp = cp

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.cp, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


async def err(call: Any) -> str:
    try:
        await call
    except LeaseLostError as e:
        return type(e).__name__
    return "no error"


async def expire(cp: Any, ns: str, key: str) -> None:
    deadline = time.monotonic() + 10
    while not await cp.list(ns, expired=True):  # on the store's clock
        assert time.monotonic() < deadline, f"{ns}/{key}: a 1 ms lease did not run out"
        time.sleep(0.002)


async def scenario(cp: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    a = await cp.claim("c", "k1", "a", 600_000)
    assert isinstance(a, Claimed)
    out["claim: no record -> claimed"] = claim(a)
    out["claim: live lease -> busy"] = claim(await cp.claim("c", "k1", "b"))
    t = await cp.touch("c", "k1", a.lease_token, 900_000)
    out["touch: current token -> renewed record"] = {
        "record": rec(t), "extended": t.lease_until > a.checkpoint.lease_until,
    }
    out["touch: other token -> null"] = await cp.touch("c", "k1", Z)
    out["touch: no record -> null"] = await cp.touch("c", "nope", a.lease_token)
    out["done: other token -> LeaseLostError"] = await err(cp.done("c", "k1", Z))
    out["done: current token -> done"] = rec(await cp.done("c", "k1", a.lease_token, {"n": 1}, "r"))
    out["touch: finished record -> null"] = await cp.touch("c", "k1", a.lease_token)
    out["done: finished record -> LeaseLostError"] = await err(cp.done("c", "k1", a.lease_token))
    out["done: no record -> LeaseLostError"] = await err(cp.done("c", "nope", Z))
    out["claim: done -> done with its result"] = claim(await cp.claim("c", "k1", "b"))
    e = await cp.claim("c", "k2", "a", 1)
    await expire(cp, "c", "k2")
    out["claim: expired lease -> claimed again"] = claim(await cp.claim("c", "k2", "b", 600_000))
    out["done: overtaken token -> LeaseLostError"] = await err(cp.done("c", "k2", e.lease_token))
    f = await cp.claim("f", "k3", "a", 600_000)
    out["fail: current token -> failed"] = rec(await cp.fail("f", "k3", "boom", f.lease_token))
    out["get: record"] = rec(await cp.get("c", "k1"))
    out["get: no record -> null"] = await cp.get("c", "nope")
    out["list: sorted by key"] = [rec(r) for r in await cp.list("c")]
    out["list: by status"] = [r.key for r in await cp.list("c", "done")]
    await cp.claim("g", "k4", "a", 1)
    await expire(cp, "g", "k4")
    out["gc: grace longer than the expiry -> 0"] = await cp.gc(older_than_ms=3_600_000)
    out["gc: expired claims only -> 1"] = await cp.gc(older_than_ms=0)
    out["gc: done and live records stay"] = [await cp.get("g", "k4"), sorted(r.key for r in await cp.list("c"))]
    out["reset: record -> true"] = await cp.reset("c", "k1")
    out["reset: no record -> false"] = await cp.reset("c", "k1")
    out["get: after reset -> null"] = await cp.get("c", "k1")
    return out


@pytest.fixture(scope="module")
def the_original(original: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    url = f"file://{tmp_path_factory.mktemp('original')}/store"
    run = subprocess.run(["node", str(SCRIPT), str(original), url], capture_output=True, text=True, timeout=60,
                         check=False)
    assert run.returncode == 0, run.stderr
    doc: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return doc


def _url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend in ("redis", "postgresql"):
        from tests.unit.checkpoint.conftest import empty_server_store

        url: str = request.getfixturevalue("server_urls")[backend]
        empty_server_store(url)
        return url
    return {"memory": "memory://", "file": f"file://{tmp_path}/store", "sqlite": f"sqlite://{tmp_path}/store.db"}[
        backend
    ]


@pytest.mark.parametrize("client", ["async", "sync"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_contract_line_gives_the_originals_result(
    backend: str, client: str, the_original: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _url(backend, tmp_path, request)
    if client == "async":

        async def run_async() -> dict[str, Any]:
            async with CheckpointClient(url) as acp:
                return await scenario(acp)

        ours = asyncio.run(run_async())
    else:
        with SyncCheckpointClient(url) as scp:
            ours = asyncio.run(scenario(SyncAsAsync(scp)))
    assert list(ours) == list(the_original)
    assert the_original["fail: current token -> failed"] == "no fail() in this version"
    assert ours.pop("fail: current token -> failed") == {
        "key": "k3", "status": "failed", "owner": "a", "result": None, "resultRef": None, "attempts": 1,
    }
    for line, outcome in ours.items():
        assert outcome == the_original[line], line
