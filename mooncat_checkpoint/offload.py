"""``offload(fn, *args)``: run a blocking call in a worker thread and await its result from the event loop.

Why not ``asyncio.to_thread`` / ``run_in_executor``: ThreadPoolExecutor hands each call through a
``concurrent.futures.Future`` (a Condition), an idle semaphore and ``wrap_future``. On the project's
2-core VM that cost about 40 us of CPU per call on top of the hand-off itself, while the SQLite
transaction it carries costs about 25 us: a claim + done pair took ~185 us of CPU through the default
executor and ~105 us through this module (profiled with pyinstrument, measured with
scripts/bench/checkpoint.py). Here a call is one ``SimpleQueue.put`` to wake a worker and one
``call_soon_threadsafe`` to wake the loop.

One pool per process, shared by every client: up to ``MAX_WORKERS`` daemon threads, started on
demand and kept (so a client needs no closing for its threads). A call whose awaiting task is
cancelled still runs to the end in its thread (as with ``to_thread``); its result is dropped. After a
``fork`` the child starts its own pool.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["offload", "MAX_WORKERS"]

T = TypeVar("T")

MAX_WORKERS = 8

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _resolve(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads = 0
        self.idle = 0

    def submit(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.jobs.put((loop, fut, fn, args))
        with self.lock:
            if self.idle:  # a waiting worker takes it: claimed, so the next call cannot count on it too
                self.idle -= 1
                return
            if self.threads >= MAX_WORKERS:  # every worker busy: it waits for the first that is done
                return
            self.threads += 1
            name = f"mooncat-checkpoint-io-{self.threads}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        """Take jobs for good. ``idle`` counts the workers waiting that no call has claimed yet: a
        worker adds itself once it is done with a job; ``submit`` claims one (a new worker starts for
        the job it was started for). Counting a worker idle until it has taken a job instead let two
        calls submitted at once both count on one worker: the second waited behind the first, though
        the pool had room for a thread of its own (a call that waits for the other never finished)."""
        jobs, lock = self.jobs, self.lock
        while True:
            loop, fut, fn, args = jobs.get()
            try:
                result, error = fn(*args), None
            except BaseException as e:  # handed to the awaiting task, which re-raises it
                result, error = None, e
            try:
                loop.call_soon_threadsafe(_resolve, fut, result, error)
            except RuntimeError:  # the loop closed while we worked: nobody is waiting any more
                pass
            del loop, fut, fn, args, result, error
            with lock:
                self.idle += 1


_pool = _Pool()


def offload(fn: Callable[..., T], /, *args: Any) -> asyncio.Future[T]:
    """Start ``fn(*args)`` in a worker thread; await the returned future for its result or exception."""
    global _pool
    if _pool.pid != os.getpid():
        _pool = _Pool()
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()
    _pool.submit(loop, fut, fn, args)
    return fut
