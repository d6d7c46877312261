"""``SyncCheckpointClient`` mirrors the async API, call for call."""

from __future__ import annotations

import inspect
import threading

from mooncat_checkpoint import (
    Busy,
    CheckpointClient,
    CheckpointStatus,
    Claimed,
    Done,
    SyncCheckpointClient,
)

from .conftest import FakeClock

NS = "sync"


def test_every_async_method_has_a_sync_twin_with_the_same_parameters() -> None:
    for name, method in inspect.getmembers(CheckpointClient, inspect.isfunction):
        if name.startswith("_") or name == "aclose":
            continue
        twin = getattr(SyncCheckpointClient, name)
        assert list(inspect.signature(twin).parameters) == list(inspect.signature(method).parameters), name
    assert callable(SyncCheckpointClient.close)


def test_the_sync_client_runs_the_whole_cycle(sync_cp: SyncCheckpointClient, clock: FakeClock) -> None:
    c = sync_cp.claim(NS, "k", "run-1", 1_000, fingerprint="fp")
    assert isinstance(c, Claimed) and c.fence == 1
    assert isinstance(sync_cp.claim(NS, "k"), Busy)
    assert sync_cp.touch(NS, "k", c.lease_token, 5_000).lease_until == clock.now + 5_000  # type: ignore[union-attr]
    assert sync_cp.done(NS, "k", c.lease_token, [1]).status is CheckpointStatus.DONE
    assert isinstance(sync_cp.claim(NS, "k"), Done)
    assert [r.key for r in sync_cp.list(NS, "done")] == ["k"]
    assert sync_cp.wait_done(NS, "k", 0).result == [1]
    f = sync_cp.claim(NS, "f", lease_ms=10)
    assert isinstance(f, Claimed)
    assert sync_cp.fail(NS, "f", "x", f.lease_token).error == "x"
    e = sync_cp.claim(NS, "e", lease_ms=10)
    clock.advance(10)
    assert sync_cp.gc() == 1 and sync_cp.get(NS, "e") is None and isinstance(e, Claimed)
    assert sync_cp.reset(NS, "k") and sync_cp.get(NS, "k") is None


def test_threads_racing_on_one_sync_client_get_one_winner(sync_cp: SyncCheckpointClient) -> None:
    results: list[object] = []
    barrier = threading.Barrier(8)

    def race() -> None:
        barrier.wait()
        results.append(sync_cp.claim(NS, "contested"))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(isinstance(r, Claimed) for r in results) == 1
