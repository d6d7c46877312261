"""``offload``: blocking calls leave the event loop and come back with their result or exception."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from mooncat_checkpoint import offload as offload_module
from mooncat_checkpoint.offload import MAX_WORKERS, offload


async def test_the_call_runs_off_the_loop_thread_and_returns_its_result() -> None:
    loop_thread = threading.get_ident()
    assert await offload(threading.get_ident) != loop_thread
    assert await offload(divmod, 17, 5) == (3, 2)


async def test_exceptions_come_back_as_they_were_raised() -> None:
    def boom() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await offload(boom)


async def test_the_loop_keeps_running_while_a_call_blocks() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    await offload(time.sleep, 0.2)
    task.cancel()
    assert ticks >= 5


async def test_many_concurrent_calls_finish_on_a_bounded_pool() -> None:
    gate = threading.Barrier(2)  # two calls must overlap: the pool runs more than one at a time
    results = await asyncio.gather(offload(gate.wait, 10), offload(gate.wait, 10), *(offload(abs, -i) for i in range(200)))
    assert results[2:] == list(range(200))
    workers = [t for t in threading.enumerate() if t.name.startswith("mooncat-checkpoint-io-")]
    assert 2 <= len(workers) <= MAX_WORKERS


async def test_calls_submitted_together_beside_one_idle_worker_each_get_a_worker() -> None:
    """One worker waits idle; two calls that must overlap are submitted back to back: each gets a
    worker (the second used to count on the same idle one and wait behind the first)."""
    pool = offload_module._Pool()
    loop = asyncio.get_running_loop()
    warm = loop.create_future()
    pool.submit(loop, warm, len, ("ab",))
    assert await warm == 2
    deadline = time.monotonic() + 10
    while pool.idle != 1:  # the worker is back, waiting
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)
    gate = threading.Barrier(2)
    futs = [loop.create_future() for _ in range(2)]
    for f in futs:
        pool.submit(loop, f, gate.wait, (5,))
    assert sorted(await asyncio.gather(*futs)) == [0, 1]
    assert pool.threads == 2


async def test_a_cancelled_wait_does_not_disturb_later_calls() -> None:
    slow = asyncio.ensure_future(offload(time.sleep, 0.1))
    await asyncio.sleep(0)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    await asyncio.sleep(0.15)  # the cancelled call finishes in its thread and is dropped quietly
    assert await offload(len, "abc") == 3


def test_results_for_a_closed_loop_are_dropped() -> None:
    started = threading.Event()
    release = threading.Event()

    def wait() -> int:
        started.set()
        release.wait(10)
        return 1

    async def start_and_leave() -> None:
        offload(wait)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)

    asyncio.run(start_and_leave())  # the loop closes while the call still runs
    release.set()
    assert asyncio.run(_len_offloaded("abcd")) == 4  # the pool is still healthy


async def _len_offloaded(text: str) -> int:
    return await offload(len, text)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_pool() -> None:
    asyncio.run(_len_offloaded("x"))  # the parent has a pool with threads
    pid = os.fork()
    if pid == 0:  # child: threads are not inherited, so a working pool must be a new one
        ok = False
        try:
            ok = asyncio.run(_len_offloaded("abc")) == 3 and offload_module._pool.pid == os.getpid()
        finally:
            os._exit(0 if ok else 1)  # never return into pytest
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
