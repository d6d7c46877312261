"""A RaftPeer's state apart from its core and log. Shared with its handle and other threads, all
thread-safe: the queue of proposals (kept out of the actor's mailbox), the waiters their outcomes go
to, the standing published after each cycle, storage health and the lifecycle (stopped, failure).
The actor's own: its counters and a stalled Ready."""

from __future__ import annotations

import abc
import bisect
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from molens.actors.peer_errors import LeadershipLost, ProposalRefused
from molens.raft import core as rc
from molens.raft.transport import CurveKeys

log = logging.getLogger(__name__)

Waiter: TypeAlias = "Future[Any] | BatchSlot | OneCallback"
"""Where a proposal's outcome goes: a Future, one slot of a batch callback, or a one-entry callback."""


class ProposalQueue:
    """Proposals waiting for the actor, kept OUT of its mailbox: a burst of thousands of proposals
    then costs one wake-up message, and ticks and peer messages never queue behind it (a leader
    whose heartbeats wait behind a backlog would lose its followers).

    Producers append to one pair of lists; the actor swaps the whole pair out at once and slices
    its batches from that copy (``_held`` from ``_off`` on), so the lock is held for a swap, never
    for a loop over proposals (a producer blocked on it would wait for the GIL round trip too)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._datas: list[bytes] = []
        self._futs: list[Waiter] = []
        self._held: tuple[list[bytes], list[Waiter]] = ([], [])
        self._off = 0
        self._wake_pending = False
        self.closed = False

    def put(self, datas: list[bytes], futs: list[Waiter]) -> bool:
        """Queue; returns True when the caller must send the actor a wake-up."""
        with self._lock:
            queued = len(self._datas) + len(self._held[0]) - self._off
            if self.closed:
                err: Exception = ProposalRefused("raft peer stopped")
            elif queued + len(datas) > self.limit:
                err = ProposalRefused(f"overloaded: {queued} proposals queued")
            else:
                self._datas.extend(datas)
                self._futs.extend(futs)
                if self._wake_pending:
                    return False
                self._wake_pending = True
                return True
        for f in futs:
            fail_waiter(f, err)
        return False

    def take(self, n: int, max_bytes: int) -> tuple[list[bytes], list[Waiter], bool]:
        """Up to ``n`` proposals / ``max_bytes`` (at least one), and whether more remain (the
        wake-up then stays pending)."""
        datas: list[bytes] = []
        futs: list[Waiter] = []
        size = 0
        with self._lock:
            while len(datas) < n and (size < max_bytes or not datas):
                held_d, held_f = self._held
                off = self._off
                if off >= len(held_d):
                    if not self._datas:
                        break
                    held_d, held_f = self._held = (self._datas, self._futs)
                    self._datas, self._futs = [], []
                    off = 0
                part = held_d[off : off + n - len(datas)]
                # keep adding while the total so far is below max_bytes (and at least one in all)
                sizes = list(itertools.accumulate(map(len, part), initial=size))
                k = bisect.bisect_left(sizes, max_bytes)
                k = min(max(k, 0 if datas else 1), len(part))
                datas += part[:k]
                futs += held_f[off : off + k]
                size = sizes[k]
                self._off = off + k
                if self._off >= len(held_d):
                    self._held, self._off = ([], []), 0
            more = self._off > 0 or bool(self._datas)
            self._wake_pending = more
        return datas, futs, more

    def close(self) -> list[Waiter]:
        with self._lock:
            self.closed = True
            futs = self._held[1][self._off :] + self._futs
            self._held, self._off = ([], []), 0
            self._datas, self._futs = [], []
            return futs

BatchCallback = Callable[[list[Any], BaseException | None], None]


class BatchOutcome:
    """Outcome of a batch of proposals, reported once through a callback."""

    __slots__ = ("error", "left", "lock", "on_done", "results")

    def __init__(self, n: int, on_done: BatchCallback) -> None:
        self.results: list[Any] = [None] * n
        self.error: BaseException | None = None
        self.left = n
        self.on_done = on_done
        self.lock = threading.Lock()

    def settle(self, i: int, value: Any, exc: BaseException | None) -> None:
        with self.lock:
            if exc is not None:
                if self.error is None or isinstance(exc, LeadershipLost):
                    self.error = exc
            else:
                self.results[i] = value
            self.left -= 1
            finished = self.left == 0
        if finished:
            try:
                self.on_done(self.results, self.error)
            except Exception:
                log.exception("proposal batch callback failed")


class _SettledOnce(abc.ABC):
    """A waiter that quacks like the Future methods the peer uses: the first outcome, a result or
    an exception, goes to :meth:`_settle`; any later one is dropped."""

    __slots__ = ("_done",)

    def __init__(self) -> None:
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        if not self._done:
            self._done = True
            self._settle(value, None)

    def set_exception(self, exc: BaseException) -> None:
        if not self._done:
            self._done = True
            self._settle(None, exc)

    @abc.abstractmethod
    def _settle(self, value: Any, exc: BaseException | None) -> None:
        """The outcome: ``value`` when ``exc`` is None."""


class BatchSlot(_SettledOnce):
    """One entry of a :class:`BatchOutcome`."""

    __slots__ = ("batch", "i")

    def __init__(self, batch: BatchOutcome, i: int) -> None:
        super().__init__()
        self.batch = batch
        self.i = i

    def _settle(self, value: Any, exc: BaseException | None) -> None:
        self.batch.settle(self.i, value, exc)


class OneCallback(_SettledOnce):
    """The outcome of a one-entry :meth:`RaftPeerHandle.propose_batch`: the callback itself, with
    no per-batch state or lock (a single outcome needs no counting)."""

    __slots__ = ("on_done",)

    def __init__(self, on_done: BatchCallback) -> None:
        super().__init__()
        self.on_done = on_done

    def _settle(self, value: Any, exc: BaseException | None) -> None:
        try:
            self.on_done([value], exc)
        except Exception:
            log.exception("proposal batch callback failed")


def fail_waiter(fut: Waiter, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


@dataclass(frozen=True, slots=True)
class Standing:
    """This node's view of the cluster after its last Raft cycle (read from any thread)."""

    term: int = 0
    leader: str | None = None
    members: frozenset[str] = frozenset()
    """Voters and learners of the newest configuration."""
    removed: bool = False


@dataclass(slots=True)
class StorageHealth:
    """Whether this node's writes reach its disk, read by the API, ``/readyz`` and ``/metrics``
    (written by the actor only; each field is one atomic assignment)."""

    problem: str = ""
    """Why writes fail now ("" while they succeed)."""
    since: float = 0.0
    """time.monotonic() when they started failing."""
    stalls: int = 0
    """How many times writes started failing (process lifetime)."""
    retries: int = 0
    """Failed retries in all."""


@dataclass(slots=True)
class Lifecycle:
    """Shared with the handle: set when the actor has stopped, and why if it failed; the standing."""

    stopped: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None
    proposals: ProposalQueue = field(default_factory=ProposalQueue)
    standing: Standing = Standing()
    storage: StorageHealth = field(default_factory=StorageHealth)


@dataclass(slots=True)
class Stall:
    """A Ready whose write failed for want of space, waiting to be carried out again."""

    rd: rc.Ready
    step: int
    """The step of :meth:`RaftPeer._carry_out` that failed (it resumes there)."""
    retry_at: float
    delay: float
    logged_at: float


@dataclass(slots=True)
class PeerCounters:
    """The actor's counters (its ``stats`` reply)."""

    proposals: int = 0
    appends: int = 0
    cycles: int = 0
    saves: int = 0
    commits_unsaved: int = 0
    """Readies that changed only the commit index: not saved on their own (see ``_persist``)."""
    applied_entries: int = 0
    snapshots_taken: int = 0
    snapshot_failures: int = 0
    snapshots_installed: int = 0
    snapshot_chunks_received: int = 0
    snapshots_received_damaged: int = 0
    """Snapshots gathered from a leader whose file did not match the CRC of the chunks (sent again)."""
    fsm_restored_at_start: int = 0
    messages_out: int = 0
    messages_in: int = 0
    bad_messages: int = 0
    leadership_lost_proposals: int = 0
    forged_messages: int = 0
    removed_notices_sent: int = 0
    leader_changes: int = 0
    max_cycle_ms: float = 0.0
    max_tick_delay_ms: float = 0.0
    started_applied_index: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class PeerTransport(Protocol):
    """What a RaftPeer needs of its transport (:class:`molens.raft.transport.RaftTransport` in a
    node; an in-memory twin in tests). Inbound messages go to the ``on_message`` it was built with."""

    curve: CurveKeys | None
    """CURVE keys, None without CURVE (then :meth:`listed_ids` is empty)."""

    def start(self) -> Any: ...
    def listed_ids(self) -> frozenset[str]: ...
    def send(self, to: str, payload: bytes) -> bool: ...
    def add_peer(self, peer_id: str, addr: str) -> None: ...
    def remove_peer(self, peer_id: str) -> None: ...
    def peers(self) -> dict[str, str]: ...
    def reload_curve_keys(self) -> list[str]: ...
    def stats(self) -> dict[str, int]: ...
    def close(self, timeout: float = 5.0) -> None: ...


TransportFactory = Callable[[Callable[[str, bytes], None], dict[str, str]], PeerTransport]
"""Builds a RaftPeer's transport from where its inbound messages go, ``(from_id, payload)``, and the
Raft addresses of the peers it knows at start (node id -> ZeroMQ endpoint)."""
