"""FirePool: the engine that carries out HTTP attempts for the FireWorkerPool actor.

Why the HTTP attempts are not themselves actors: round-robin into per-actor mailboxes puts a fast
fire behind a slow one (head-of-line blocking) and costs a mailbox hop per fire; the pool's shared
bounded queue lets any free thread take the next fire, and a batch enters with one lock round-trip.
``FirePool`` is that engine (thread-safe): with ``engine="loop"`` (the default) one
:class:`~molens.delivery.loop.FireLoop` thread carries out every ``http://`` attempt on
non-blocking sockets and a few threads (``tls_threads``) carry out ``https://`` ones with the
blocking ``Deliverer.deliver``; with ``engine="threads"`` ``concurrency`` plain threads call
``Deliverer.deliver`` for every fire (the engine before the loop; 10-20x the CPU per attempt).
Fires planned ahead are held by the FireLoop thread itself with ``loop``, by one holder thread with
``threads``; either way one flusher thread hands results back in batches.

Rules:

- At most ``concurrency`` HTTP attempts in flight (loop and TLS threads together); at most ``queue_limit`` more waiting. ``submit``
  accepts fires in order while there is room and returns the rest as ``refused`` (the clear signal:
  the FireWorkerPool answers them as not sent, so the leader plans them again without using up an
  attempt: docs/architecture.md#not-sent).
- ``free_capacity()`` = room left = concurrency + queue_limit - (queued + in flight), for weighted
  dispatch.
- A fire with ``not_before_ms`` still ahead (planned ahead by the leader: dispatch ahead) is held in
  a heap by that time (by the FireLoop thread, or the holder thread with ``threads``) and queued
  once it comes: never sent early. The wait is
  read on the wall clock when the fire arrives and then kept on the monotonic clock, so a wall clock
  that steps while a fire is held neither holds it seconds too long (a step back) nor lets it go
  early (a step ahead); it is held 1 ms past what the two readings say (both are truncated to the
  ms), so it goes out at most a ms late and never early. Held fires count against the capacity like queued ones. ``release_held`` takes
  them all back unsent (the worker does while its clock is suspect: it stepped).
- A fire whose ``deadline_ms`` has passed when a thread picks it up is not sent (the leader has
  already counted it lost, or is about to; sending it now could deliver twice); it is counted in
  ``stats().expired`` and answered as not sent (``FireResult.not_sent``: a leader that has not given
  it up yet plans it again without using up an attempt).
  A fire is never given more than the time left before its deadline. ``deadline_ms`` is the leader's
  wall clock, so this assumes node clocks agree (NTP) to well within ``dispatch_timeout_ms``.
- Results go to ``on_results(list[FireResult])`` from the flusher thread, at most ``flush_count``
  per call, at most ``flush_interval_ms`` after the first unflushed result.
- ``stop()``: refuses new work, drops fires not yet started, held ones included (returned to the caller), waits for
  in-flight fires to finish or time out, flushes their results, and joins every thread.
"""


from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import urllib3

from molens.delivery import Deliverer, FireRequest, FireResult, GuardedPoolManager
from molens.delivery.loop import FireLoop
from molens.model import DEFAULT_POLICY, CallbackPolicy
from molens.wallclock import wall_ms

log = logging.getLogger(__name__)

ResultsCallback = Callable[[list[FireResult]], None]

ENGINES = ("loop", "threads")
TLS_THREADS = 4
"""Threads carrying out ``https://`` attempts next to the loop (``engine="loop"``)."""


def _is_tls(req: FireRequest) -> bool:
    return req.url[:8].lower() == "https://"


@dataclass(frozen=True, slots=True)
class SubmitReceipt:
    """What ``submit`` did with a batch: the first ``accepted`` fires are queued, ``refused`` are not."""

    accepted: int
    refused: tuple[FireRequest, ...]


@dataclass(frozen=True, slots=True)
class FirePoolStats:
    concurrency: int
    capacity: int
    queued: int
    in_flight: int
    delivered: int
    refused: int
    expired: int
    result_batches: int
    held: int = 0


def make_pool_manager(concurrency: int, policy: CallbackPolicy = DEFAULT_POLICY) -> urllib3.PoolManager:
    """A PoolManager sized for ``concurrency`` threads: that many keep-alive connections per host;
    it connects only to addresses the callback host ``policy`` admits (``molens.delivery``)."""
    return GuardedPoolManager(policy, num_pools=256, maxsize=concurrency, block=False, retries=False)


def _wall_ms() -> int:
    return wall_ms()


def _mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FirePool:
    """``concurrency`` delivery threads fed by one bounded queue; results flushed in batches."""

    def __init__(
        self,
        deliverer: Deliverer,
        concurrency: int,
        on_results: ResultsCallback,
        queue_limit: int | None = None,
        flush_count: int = 256,
        flush_interval_ms: float = 5.0,
        wall_ms: Callable[[], int] = _wall_ms,
        mono_ms: Callable[[], int] = _mono_ms,
        name: str = "fireworker",
        engine: str = "loop",
        tls_threads: int = TLS_THREADS,
        loop_tick_ms: float = 0.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.engine = engine
        self._tls_threads = max(1, min(concurrency, tls_threads))
        self._deliverer = deliverer
        self.concurrency = concurrency
        self.queue_limit = 4 * concurrency if queue_limit is None else queue_limit
        self.capacity = concurrency + self.queue_limit
        self._on_results = on_results
        self._flush_count = max(1, flush_count)
        self._flush_interval_s = flush_interval_ms / 1000.0
        self._wall_ms = wall_ms
        self._mono_ms = mono_ms
        self._name = name

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._queue: collections.deque[FireRequest] = collections.deque()
        """Fires ready to go: all of them (threads engine), the non-https ones (loop engine)."""
        self._tls_queue: collections.deque[FireRequest] = collections.deque()
        """loop engine: https fires ready to go, for the TLS threads."""
        self._loop: FireLoop | None = None
        if engine == "loop":
            self._loop = FireLoop(deliverer, concurrency, self._loop_take, self._loop_finish, wall_ms, name=name,
                                  tick_ms=loop_tick_ms)
        self._held: list[tuple[int, int, FireRequest]] = []
        """(monotonic ms it is due, seq, fire): ``not_before_ms`` as the wall clock said on arrival."""
        """(not_before_ms, seq, fire): fires planned ahead, waiting for their due time."""
        self._hold_cv = threading.Condition(self._lock)
        self._seq = itertools.count()
        self._in_flight = 0
        self._accepting = False
        self._draining = False
        self._delivered = self._refused = self._expired = self._batches = 0

        self._rlock = threading.Lock()
        self._rcond = threading.Condition(self._rlock)
        self._results: list[FireResult] = []
        self._first_result_at = 0.0
        self._flusher_done = False

        self._threads: list[threading.Thread] = []
        self._flusher: threading.Thread | None = None
        self._holder: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._threads:
                raise RuntimeError("FirePool already started")
            self._accepting = True
        if self._loop is None:
            self._threads = [
                threading.Thread(target=self._run_worker, name=f"{self._name}-{i}", daemon=True)
                for i in range(self.concurrency)
            ]
        else:
            self._threads = [
                threading.Thread(target=self._run_worker, args=(self._tls_queue,), name=f"{self._name}-tls-{i}", daemon=True)
                for i in range(self._tls_threads)
            ]
            self._loop.start()
        self._flusher = threading.Thread(target=self._run_flusher, name=f"{self._name}-flush", daemon=True)
        if self._loop is None:  # the loop holds fires planned ahead itself (_loop_take)
            self._holder = threading.Thread(target=self._run_holder, name=f"{self._name}-hold", daemon=True)
        for t in (*self._threads, self._flusher, *([self._holder] if self._holder else [])):
            t.start()
        log.info("fire pool started engine=%s concurrency=%d queue_limit=%d", self.engine, self.concurrency, self.queue_limit)

    def stop(self, timeout_s: float = 30.0) -> list[FireRequest]:
        """Stops cleanly; returns the fires that were queued but never started."""
        end = time.monotonic() + timeout_s
        with self._lock:
            self._accepting = False
            self._draining = True
            dropped = list(self._queue) + list(self._tls_queue) + [f for _, _, f in sorted(self._held)]
            self._queue.clear()
            self._tls_queue.clear()
            self._held.clear()
            self._work.notify_all()
            self._hold_cv.notify_all()
        if self._holder is not None:
            self._holder.join(max(0.1, end - time.monotonic()))
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        still = [t.name for t in self._threads if t.is_alive()]
        if self._loop is not None and not self._loop.stop(max(0.1, end - time.monotonic())):
            still.append(f"{self._name}-loop ({self._loop.active} attempts)")
        with self._rlock:
            self._flusher_done = True
            self._rcond.notify_all()
        if self._flusher is not None:
            self._flusher.join(max(0.1, end - time.monotonic()))
        if still:
            log.warning("fire pool stop timed out with %d fires in flight threads=%s", len(still), still)
        log.info("fire pool stopped dropped_unstarted=%d", len(dropped))
        return dropped

    # --- the surface the Dispatcher / RPC server use -----------------------------------------------
    def submit(self, batch: Sequence[FireRequest]) -> SubmitReceipt:
        """Queues as many fires as fit, in order; never blocks."""
        with self._lock:
            room = (
                self.capacity - len(self._queue) - len(self._tls_queue) - len(self._held) - self._in_flight
                if self._accepting else 0
            )
            n = max(0, min(room, len(batch)))
            if n:
                now = self._wall_ms()
                mono = self._mono_ms()
                ready: list[FireRequest] = []
                held = self._held
                head = held[0][0] if held else None
                for f in batch[:n]:
                    if f.not_before_ms > now:
                        # + 1: each reading is truncated to the ms, so ``now`` may be up to 1 ms behind
                        # the wall clock while ``mono`` is not: without it a fire went out up to 1 ms early
                        heapq.heappush(held, (mono + f.not_before_ms - now + 1, next(self._seq), f))
                    else:
                        ready.append(f)
                if ready:
                    self._ready(ready)
                if held and (head is None or held[0][0] < head):
                    if self._loop is not None:
                        self._loop.wake()
                    else:
                        self._hold_cv.notify()
            refused = tuple(batch[n:])
            self._refused += len(refused)
        if refused:
            log.warning("fire pool full: refused=%d of batch=%d", len(refused), len(batch))
        return SubmitReceipt(n, refused)

    def release_held(self) -> list[FireRequest]:
        """Take back every fire held for its time, unsent (they were timed on a wall clock that has
        since stepped)."""
        with self._lock:
            out = [f for _, _, f in sorted(self._held)]
            self._held.clear()
        return out

    def free_capacity(self) -> int:
        with self._lock:
            if not self._accepting:
                return 0
            return self.capacity - len(self._queue) - len(self._tls_queue) - len(self._held) - self._in_flight

    def stats(self) -> FirePoolStats:
        with self._lock:
            return FirePoolStats(
                concurrency=self.concurrency, capacity=self.capacity, queued=len(self._queue) + len(self._tls_queue), in_flight=self._in_flight,
                delivered=self._delivered, refused=self._refused, expired=self._expired, result_batches=self._batches, held=len(self._held),
            )

    # --- threads -----------------------------------------------------------------------------------
    def _run_holder(self) -> None:
        """Moves held fires to the queue once their time has come."""
        held = self._held
        with self._lock:
            while not self._draining:
                now = self._mono_ms()
                ready = []
                while held and held[0][0] <= now:
                    ready.append(heapq.heappop(held)[2])
                if ready:
                    self._ready(ready)
                # a wait may end a little early: the loop checks the clock again before moving any
                self._hold_cv.wait((held[0][0] - now) / 1000.0 if held else None)

    def _ready(self, fires: list[FireRequest], on_loop: bool = False) -> None:
        """Queue fires that may go now and wake their consumers (under ``self._lock``)."""
        if self._loop is None:
            self._queue.extend(fires)
            self._work.notify(len(fires))
            return
        tls = 0
        for f in fires:
            if _is_tls(f):
                self._tls_queue.append(f)
                tls += 1
            else:
                self._queue.append(f)
        if tls:
            self._work.notify(tls)
        if tls < len(fires) and not on_loop:
            self._loop.wake()

    def _loop_take(self, limit: int) -> tuple[list[FireRequest], int | None]:
        """FireLoop thread: the next fires to start, within the concurrency left, and the ms until
        the next fire held for its time (None: none held). Held fires whose time has come are
        queued first: the loop is the holder in this engine (no thread waking per fire)."""
        with self._lock:
            held = self._held
            wait_ms = None
            if held:
                now = self._mono_ms()
                if held[0][0] <= now:
                    due = []
                    while held and held[0][0] <= now:
                        due.append(heapq.heappop(held)[2])
                    self._ready(due, on_loop=True)
                if held:
                    wait_ms = held[0][0] - now
            n = min(limit, len(self._queue), self.concurrency - self._in_flight)
            if n <= 0:
                return [], wait_ms
            q = self._queue
            out = [q.popleft() for _ in range(n)]
            self._in_flight += n
            return out, wait_ms

    def _loop_finish(self, req: FireRequest, result: FireResult | None) -> None:
        """FireLoop thread: one attempt ended (None: not sent, past its deadline)."""
        self._ended(result or self._expired_result(req), on_loop=True)

    def _expired_result(self, req: FireRequest) -> FireResult:
        return FireResult.unsent(req.fire_id, req.kind, self._deliverer.node_id, "deadline passed while queued")

    def _ended(self, result: FireResult | None, on_loop: bool = False) -> None:
        """One attempt ended (``not_sent``: past its deadline; None: the deliverer raised, the
        outcome unknown): count it, let the other consumer (loop or TLS threads) use the room
        within ``concurrency``, hand the result on."""
        with self._lock:
            self._in_flight -= 1
            if result is None or result.not_sent:
                self._expired += 1
            else:
                self._delivered += 1
            if self._loop is not None:
                if self._tls_queue:
                    self._work.notify()
                if self._queue and not on_loop:  # the loop takes more before it waits again anyway
                    self._loop.wake()
        if result is not None:
            self._add_result(result)

    def _run_worker(self, queue: collections.deque[FireRequest] | None = None) -> None:
        """A thread carrying out fires of ``queue`` (all of them in the threads engine, the https
        ones in the loop engine, where it also waits for room within ``concurrency``)."""
        q = self._queue if queue is None else queue
        limited = self._loop is not None
        while True:
            with self._lock:
                while (not q or (limited and self._in_flight >= self.concurrency)) and not self._draining:
                    self._work.wait()
                if not q:
                    return
                req = q.popleft()
                self._in_flight += 1
            result: FireResult | None = None
            try:
                timeout_ms = req.timeout_ms
                if req.deadline_ms:
                    left = req.deadline_ms - self._wall_ms()
                    timeout_ms = min(timeout_ms, left)
                if timeout_ms <= 0:
                    log.warning("fire=%s not sent: deadline passed while queued", req.fire_id)
                    result = self._expired_result(req)
                else:
                    result = self._deliverer.deliver(req, timeout_ms)
            finally:
                self._ended(result)

    def _add_result(self, result: FireResult) -> None:
        with self._rlock:
            self._results.append(result)
            n = len(self._results)
            if n == 1:
                self._first_result_at = time.monotonic()
                self._rcond.notify()
            elif n >= self._flush_count:
                self._rcond.notify()

    def _run_flusher(self) -> None:
        while True:
            with self._rlock:
                while not self._results and not self._flusher_done:
                    self._rcond.wait()
                if not self._results:
                    return
                flush_at = self._first_result_at + self._flush_interval_s
                while len(self._results) < self._flush_count and not self._flusher_done:
                    left = flush_at - time.monotonic()
                    if left <= 0:
                        break
                    self._rcond.wait(left)
                batch = self._results[: self._flush_count]
                del self._results[: self._flush_count]
                if self._results:
                    self._first_result_at = time.monotonic()
            with self._lock:
                self._batches += 1
            try:
                self._on_results(batch)
            except Exception:  # the results consumer's bug must not stop deliveries; say so loudly
                log.exception("fire results callback failed; %d results not handed over", len(batch))


__all__ = ["ENGINES", "FirePool", "FirePoolStats", "ResultsCallback", "SubmitReceipt", "make_pool_manager"]
