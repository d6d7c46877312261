"""``CheckpointClient``: the async API (docs/checkpoint.md).

Each call runs the shared ``Engine`` in a worker thread (``offload``) when the backend can block (file,
redis, postgresql), so the event loop never waits on a disk, a socket or a lock; ``memory://`` does no
I/O and runs inline. SQLite single-record calls first try inline on a second connection that never
waits (``SqliteBackend.nowait``: an uncontended WAL commit costs less than the hop to a thread and
back) and go to a worker thread only when they would have to wait for a lock. A client may be used
by many tasks at once and from several event loops in turn; it holds no loop-bound state.
"""

from __future__ import annotations

import asyncio
import builtins
from types import TracebackType

from mooncat_checkpoint.engine import DEFAULT_LEASE_MS, Clock, Engine
from mooncat_checkpoint.errors import WaitTimeoutError, WouldBlock
from mooncat_checkpoint.model import Checkpoint, CheckpointStatus, ClaimResult, GcResult, JSONValue
from mooncat_checkpoint.naming import check_key, check_namespace
from mooncat_checkpoint.offload import offload
from mooncat_checkpoint.step import Step
from mooncat_checkpoint.urls import shown_url

__all__ = ["CheckpointClient"]

_WAIT_FIRST_POLL_S = 0.005


class CheckpointClient:
    """Claim / touch / done / fail step records on ``url`` (> ``$MOONCAT_CHECKPOINT_URL`` > default).

    ``clock`` returns the current time in epoch milliseconds; the default is the wall clock, which
    every process sharing a store must agree on. Tests pass a fake clock to drive leases.
    Construction opens the backend and raises ``BackendUnavailableError`` with a one-line reason.
    """

    def __init__(self, url: str | None = None, *, clock: Clock | None = None) -> None:
        self._attach(Engine(url, clock))

    def _attach(self, engine: Engine) -> None:
        self._engine = engine
        self._blocking = engine.backend.blocking
        nowait = getattr(engine.backend, "nowait", None)
        face = None if nowait is None else nowait()
        self._inline: Engine | None = None if face is None else engine.twin(face)

    @classmethod
    def _over(cls, engine: Engine) -> CheckpointClient:
        """An async client sharing ``engine`` (and so its store) with a sync client."""
        self = cls.__new__(cls)
        self._attach(engine)
        return self

    @property
    def url(self) -> str:
        """The effective URL, exactly as given (argument, environment or default)."""
        return self._engine.url

    @property
    def backend(self) -> str:
        """The URL scheme: ``"file"``, ``"sqlite"``, ``"memory"``, ``"redis"``, ``"postgresql"`` (or ``"postgres"``)."""
        return self._engine.scheme

    @property
    def durability(self) -> str:
        return self._engine.backend.durability

    def __repr__(self) -> str:
        return f"CheckpointClient(url={shown_url(self.url)!r})"

    async def claim(
        self,
        namespace: str,
        key: str,
        owner_run_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        *,
        fingerprint: str | None = None,
    ) -> ClaimResult:
        """Try to own the step: ``Claimed`` (with ``lease_token`` and ``fence``), or ``Done``, ``Busy``,
        ``Failed``. ``fingerprint`` guards against reusing a key for other inputs
        (``FingerprintMismatchError``)."""
        if self._inline is not None:
            try:
                return self._inline.claim(namespace, key, owner_run_id, lease_ms, fingerprint)
            except WouldBlock:
                pass
        if self._blocking:
            return await offload(self._engine.claim, namespace, key, owner_run_id, lease_ms, fingerprint)
        return self._engine.claim(namespace, key, owner_run_id, lease_ms, fingerprint)

    async def touch(
        self, namespace: str, key: str, lease_token: str, extend_ms: int | None = None
    ) -> Checkpoint | None:
        """Renew the lease to now + ``extend_ms`` (default: the claim's lease_ms; 0 releases it now).
        None, and nothing changes, when the record is not claimed with ``lease_token`` (no record,
        done, failed, or claimed again), as the contract's ``Checkpoint | null`` says."""
        if self._inline is not None:
            try:
                return self._inline.touch(namespace, key, lease_token, extend_ms)
            except WouldBlock:
                pass
        if self._blocking:
            return await offload(self._engine.touch, namespace, key, lease_token, extend_ms)
        return self._engine.touch(namespace, key, lease_token, extend_ms)

    async def done(
        self,
        namespace: str,
        key: str,
        lease_token: str,
        result: JSONValue = None,
        result_ref: str | None = None,
    ) -> Checkpoint:
        """Mark the step done with a JSON ``result`` (<= 64 KiB) and/or a ``result_ref``."""
        if self._inline is not None:
            try:
                return self._inline.done(namespace, key, lease_token, result, result_ref)
            except WouldBlock:
                pass
        if self._blocking:
            return await offload(self._engine.done, namespace, key, lease_token, result, result_ref)
        return self._engine.done(namespace, key, lease_token, result, result_ref)

    async def fail(self, namespace: str, key: str, error: str | BaseException, lease_token: str) -> Checkpoint:
        """Mark the step failed: terminal until ``reset``."""
        if self._inline is not None:
            try:
                return self._inline.fail(namespace, key, error, lease_token)
            except WouldBlock:
                pass
        if self._blocking:
            return await offload(self._engine.fail, namespace, key, error, lease_token)
        return self._engine.fail(namespace, key, error, lease_token)

    async def get(self, namespace: str, key: str) -> Checkpoint | None:
        if self._inline is not None:
            try:
                return self._inline.get(namespace, key)
            except WouldBlock:
                pass
        if self._blocking:
            return await offload(self._engine.get, namespace, key)
        return self._engine.get(namespace, key)

    async def reset(self, namespace: str, key: str, *, if_expired: bool = False) -> bool:
        """Delete the record so the step can run again (the fence keeps counting up). With
        ``if_expired`` only a claim whose lease ran out is deleted. True if a record was deleted."""
        if self._inline is not None:
            try:
                return self._inline.reset(namespace, key, if_expired)
            except WouldBlock:
                pass
        if self._blocking:
            return await offload(self._engine.reset, namespace, key, if_expired)
        return self._engine.reset(namespace, key, if_expired)

    async def list(
        self, namespace: str, status: CheckpointStatus | str | None = None, *, expired: bool = False
    ) -> builtins.list[Checkpoint]:
        """The namespace's records sorted by key, optionally of one status and/or expired claims only."""
        if self._blocking:
            return await offload(self._engine.list, namespace, status, expired)
        return self._engine.list(namespace, status, expired)

    async def gc(
        self, older_than_ms: int | None = None, *, prune_finished_older_than_ms: int | None = None
    ) -> GcResult:
        """Delete, in every namespace, claims whose lease ended at least ``older_than_ms`` ago (None:
        every expired claim), as the original library's ``gc({ olderThan })`` does. Done and failed
        records stay, unless ``prune_finished_older_than_ms`` is given: then those not updated for
        that long go too (their steps would run again). Returns how many records went (an ``int``);
        a record that does not read is left in place and listed in its ``unreadable``."""
        if self._blocking:
            return await offload(self._engine.gc, older_than_ms, prune_finished_older_than_ms)
        return self._engine.gc(older_than_ms, prune_finished_older_than_ms)

    async def wait_done(
        self, namespace: str, key: str, timeout_s: float | None, *, poll_s: float = 0.25
    ) -> Checkpoint:
        """Poll until the step is done or failed and return that record; ``WaitTimeoutError`` (a
        ``TimeoutError``) after ``timeout_s`` seconds (None: no limit). Polls back off up to ``poll_s``."""
        check_namespace(namespace)
        check_key(key)
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        delay = _WAIT_FIRST_POLL_S
        while True:
            cp = await self.get(namespace, key)
            if cp is not None and cp.status is not CheckpointStatus.CLAIMED:
                return cp
            pause = delay
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    state = "no record" if cp is None else f"still claimed by {cp.owner_run_id!r}"
                    raise WaitTimeoutError(f"{namespace}/{key!r} not done after {timeout_s} s ({state})")
                pause = min(pause, remaining)
            await asyncio.sleep(pause)
            delay = min(delay * 2, poll_s)

    def step(
        self,
        namespace: str,
        key: str,
        *,
        lease_ms: int = DEFAULT_LEASE_MS,
        owner_run_id: str | None = None,
        fingerprint: str | None = None,
    ) -> Step:
        """``async with cp.step(ns, key) as step``: claim, renew every lease_ms/3, done on exit, fail
        on exception, ``LeaseLostError`` (body cancelled) if the lease is lost. See ``step.Step``."""
        return Step(self, namespace, key, lease_ms=lease_ms, owner_run_id=owner_run_id, fingerprint=fingerprint)

    async def aclose(self) -> None:
        """Close the backend (the SQLite connection). Further calls raise ``BackendUnavailableError``."""
        if self._inline is not None:
            self._inline.closed = True
        if self._blocking:
            await offload(self._engine.close)
        else:
            self._engine.close()

    async def __aenter__(self) -> CheckpointClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
