"""``cp.step(...)``: claim, keep the lease alive, and record done or failed when the block ends.

::

    async with cp.step("etl", "2024-06-01", lease_ms=30_000) as step:
        if not step.skipped:              # "done", "failed" or "busy": someone else did or does it
            step.result = await work()    # stored with done on a normal exit

While the block runs, a background task renews the lease every ``lease_ms / 3``. If a renewal finds
the lease lost (``touch`` returns None: re-claimed after an expiry, reset, collected), the block is cancelled and
``LeaseLostError`` comes out of the ``async with`` instead of ``CancelledError``. An exception in the
block marks the step failed and is re-raised; cancellation or ``KeyboardInterrupt`` is not a failure
of the step: the lease is released at once (``touch(extend_ms=0)``) so another run can claim it.

``SyncStep`` (from ``SyncCheckpointClient.step``) does the same with a renewal thread, except that
it cannot interrupt a running block: a lost lease shows as ``step.lost`` and as ``LeaseLostError``
when the block ends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from mooncat_checkpoint import rules
from mooncat_checkpoint.errors import (
    CheckpointError,
    CheckpointResultSerializationError,
    CheckpointResultTooLargeError,
    LeaseLostError,
)
from mooncat_checkpoint.model import Checkpoint, Claimed, ClaimResult, Done, JSONValue

if TYPE_CHECKING:
    from mooncat_checkpoint.client import CheckpointClient
    from mooncat_checkpoint.sync_client import SyncCheckpointClient

__all__ = ["Step", "SyncStep"]

log = logging.getLogger(__name__)


class _StepState:
    """What the two step flavours share: the claim outcome and what the block sets."""

    def __init__(
        self, namespace: str, key: str, *, lease_ms: int, owner_run_id: str | None, fingerprint: str | None
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.lease_ms = lease_ms
        self.owner_run_id = owner_run_id
        self.fingerprint = fingerprint
        self.claim: ClaimResult | None = None
        #: Set it in the block; stored by ``done``. For a skipped "done" step, the stored result.
        self.result: JSONValue = None
        self.result_ref: str | None = None
        #: The record after the block (done or failed), or the one found when skipped.
        self.checkpoint: Checkpoint | None = None
        self._lost: LeaseLostError | None = None

    @property
    def kind(self) -> Literal["done", "claimed", "busy", "failed"]:
        if self.claim is None:
            raise RuntimeError("the step has not been entered")
        return self.claim.kind

    @property
    def skipped(self) -> bool:
        """True unless this block owns the step: it is done, failed, or busy with another run."""
        return self.kind != "claimed"

    @property
    def previous(self) -> Checkpoint | None:
        """The record that made the step skip (done, failed or someone else's claim), else None."""
        return None if self.claim is None or isinstance(self.claim, Claimed) else self.claim.checkpoint

    @property
    def lease_token(self) -> str | None:
        return self.claim.lease_token if isinstance(self.claim, Claimed) else None

    @property
    def fence(self) -> int | None:
        """This claim's fencing number: pass it to downstream writes so they can refuse stale writers."""
        return self.claim.fence if isinstance(self.claim, Claimed) else None

    @property
    def lost(self) -> bool:
        """True once a renewal found the lease lost."""
        return self._lost is not None

    def _entered(self, claim: ClaimResult) -> None:
        self.claim = claim
        if not isinstance(claim, Claimed):
            self.checkpoint = claim.checkpoint
            if isinstance(claim, Done):
                self.result = claim.checkpoint.result
                self.result_ref = claim.checkpoint.result_ref

    def _renewal_interval_s(self) -> float:
        return max(self.lease_ms / 3000.0, 0.001)

    def _where(self) -> str:
        return f"{self.namespace}/{self.key!r}"

    def _lost_because(self, found: Checkpoint | None) -> LeaseLostError:
        """The error for a renewal that found the lease gone, saying what holds the key now."""
        return rules.lease_lost(found, self.namespace, self.key)


class Step(_StepState):
    """The handle of ``async with cp.step(...)``; see the module docstring."""

    def __init__(
        self,
        client: CheckpointClient,
        namespace: str,
        key: str,
        *,
        lease_ms: int,
        owner_run_id: str | None,
        fingerprint: str | None,
    ) -> None:
        super().__init__(namespace, key, lease_ms=lease_ms, owner_run_id=owner_run_id, fingerprint=fingerprint)
        self._client = client
        self._task: asyncio.Task[object] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._closing = False
        self._cancel_sent = False

    async def __aenter__(self) -> Step:
        claim = await self._client.claim(
            self.namespace, self.key, self.owner_run_id, self.lease_ms, fingerprint=self.fingerprint
        )
        self._entered(claim)
        if isinstance(claim, Claimed):
            self._task = asyncio.current_task()
            self._renewer = asyncio.create_task(self._renew(claim), name=f"mooncat-checkpoint renew {self._where()}")
        return self

    async def _renew(self, claim: Claimed) -> None:
        interval = self._renewal_interval_s()
        while True:
            await asyncio.sleep(interval)
            try:
                if await self._client.touch(self.namespace, self.key, claim.lease_token, self.lease_ms) is not None:
                    continue
                lost = self._lost_because(await self._client.get(self.namespace, self.key))
            except CheckpointError as e:  # the store is unwell; the lease may still be ours: retry
                log.warning("lease renewal failed, retrying step=%s error=%s", self._where(), e)
                continue
            log.warning("lease lost step=%s fence=%d reason=%s", self._where(), claim.fence, lost)
            self._lost = lost
            if not self._closing and self._task is not None:
                self._cancel_sent = True
                self._task.cancel(msg=f"mooncat_checkpoint: lease lost on {self._where()}")
            return

    async def _stop_renewer(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is None or renewer.done():
            return
        task = asyncio.current_task()
        requests = task.cancelling() if task is not None else 0
        renewer.cancel()
        try:
            await renewer
        except asyncio.CancelledError:
            if task is not None and task.cancelling() > requests:
                raise  # our own task was cancelled while we waited: that one is not ours to swallow

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        claim = self.claim
        if not isinstance(claim, Claimed):
            return
        self._closing = True
        try:
            await self._stop_renewer()
            if self._lost is None:
                await self._finish(claim, exc)
                return
        except asyncio.CancelledError:
            if self._lost is None or not self._cancel_sent:
                raise
        # The lease is gone: turn our own cancellation into LeaseLostError.
        if self._cancel_sent and self._task is not None:
            self._task.uncancel()
        lost = self._lost
        assert lost is not None
        if exc is None or isinstance(exc, asyncio.CancelledError):
            raise lost from None
        raise lost from exc

    async def _finish(self, claim: Claimed, exc: BaseException | None) -> None:
        ns, key, token = self.namespace, self.key, claim.lease_token
        if exc is None:
            try:
                self.checkpoint = await self._client.done(ns, key, token, self.result, self.result_ref)
            except (CheckpointResultTooLargeError, CheckpointResultSerializationError) as e:
                self.checkpoint = await self._client.fail(ns, key, f"result rejected: {e}", token)
                raise
            return
        if isinstance(exc, Exception):
            try:
                self.checkpoint = await self._client.fail(ns, key, exc, token)
            except LeaseLostError as e:
                log.warning("could not mark step failed step=%s reason=%s", self._where(), e)
            return
        # Cancelled or interrupted: not the step's failure. Let the next run have it now.
        try:
            await asyncio.shield(self._client.touch(ns, key, token, 0))
        except (CheckpointError, asyncio.CancelledError) as e:
            log.warning("could not release lease step=%s reason=%r", self._where(), e)


class SyncStep(_StepState):
    """The handle of ``with sync_cp.step(...)``: a renewal thread; see the module docstring."""

    def __init__(
        self,
        client: SyncCheckpointClient,
        namespace: str,
        key: str,
        *,
        lease_ms: int,
        owner_run_id: str | None,
        fingerprint: str | None,
    ) -> None:
        super().__init__(namespace, key, lease_ms=lease_ms, owner_run_id=owner_run_id, fingerprint=fingerprint)
        self._client = client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SyncStep:
        claim = self._client.claim(
            self.namespace, self.key, self.owner_run_id, self.lease_ms, fingerprint=self.fingerprint
        )
        self._entered(claim)
        if isinstance(claim, Claimed):
            self._thread = threading.Thread(
                target=self._renew, args=(claim,), name=f"mooncat-checkpoint renew {self._where()}", daemon=True
            )
            self._thread.start()
        return self

    def _renew(self, claim: Claimed) -> None:
        interval = self._renewal_interval_s()
        while not self._stop.wait(interval):
            try:
                if self._client.touch(self.namespace, self.key, claim.lease_token, self.lease_ms) is not None:
                    continue
                self._lost = self._lost_because(self._client.get(self.namespace, self.key))
            except CheckpointError as e:
                log.warning("lease renewal failed, retrying step=%s error=%s", self._where(), e)
                continue
            log.warning("lease lost step=%s fence=%d reason=%s", self._where(), claim.fence, self._lost)
            return

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        claim = self.claim
        if not isinstance(claim, Claimed):
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._lost is not None:
            raise self._lost from exc
        ns, key, token = self.namespace, self.key, claim.lease_token
        if exc is None:
            try:
                self.checkpoint = self._client.done(ns, key, token, self.result, self.result_ref)
            except (CheckpointResultTooLargeError, CheckpointResultSerializationError) as e:
                self.checkpoint = self._client.fail(ns, key, f"result rejected: {e}", token)
                raise
            return
        if isinstance(exc, Exception):
            try:
                self.checkpoint = self._client.fail(ns, key, exc, token)
            except LeaseLostError as e:
                log.warning("could not mark step failed step=%s reason=%s", self._where(), e)
            return
        try:
            self._client.touch(ns, key, token, 0)
        except CheckpointError as e:
            log.warning("could not release lease step=%s reason=%s", self._where(), e)
