"""``SyncCheckpointClient``: the same API without an event loop, for scripts and thread pools.

It calls the shared ``Engine`` directly (blocking), is safe to use from several threads, and offers
``step()`` as a plain context manager whose lease renewal runs in a thread.
"""

from __future__ import annotations

import builtins
import time
from types import TracebackType

from mooncat_checkpoint.engine import DEFAULT_LEASE_MS, Clock, Engine
from mooncat_checkpoint.errors import WaitTimeoutError
from mooncat_checkpoint.model import Checkpoint, CheckpointStatus, ClaimResult, GcResult, JSONValue
from mooncat_checkpoint.naming import check_key, check_namespace
from mooncat_checkpoint.step import SyncStep
from mooncat_checkpoint.urls import shown_url

__all__ = ["SyncCheckpointClient"]

_WAIT_FIRST_POLL_S = 0.005


class SyncCheckpointClient:
    """Blocking twin of ``CheckpointClient``: same arguments, same results, same errors."""

    def __init__(self, url: str | None = None, *, clock: Clock | None = None) -> None:
        self._engine = Engine(url, clock)

    @classmethod
    def _over(cls, engine: Engine) -> SyncCheckpointClient:
        self = cls.__new__(cls)
        self._engine = engine
        return self

    @property
    def url(self) -> str:
        return self._engine.url

    @property
    def backend(self) -> str:
        return self._engine.scheme

    @property
    def durability(self) -> str:
        return self._engine.backend.durability

    def __repr__(self) -> str:
        return f"SyncCheckpointClient(url={shown_url(self.url)!r})"

    def claim(
        self,
        namespace: str,
        key: str,
        owner_run_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        *,
        fingerprint: str | None = None,
    ) -> ClaimResult:
        return self._engine.claim(namespace, key, owner_run_id, lease_ms, fingerprint)

    def touch(self, namespace: str, key: str, lease_token: str, extend_ms: int | None = None) -> Checkpoint | None:
        return self._engine.touch(namespace, key, lease_token, extend_ms)

    def done(
        self,
        namespace: str,
        key: str,
        lease_token: str,
        result: JSONValue = None,
        result_ref: str | None = None,
    ) -> Checkpoint:
        return self._engine.done(namespace, key, lease_token, result, result_ref)

    def fail(self, namespace: str, key: str, error: str | BaseException, lease_token: str) -> Checkpoint:
        return self._engine.fail(namespace, key, error, lease_token)

    def get(self, namespace: str, key: str) -> Checkpoint | None:
        return self._engine.get(namespace, key)

    def reset(self, namespace: str, key: str, *, if_expired: bool = False) -> bool:
        return self._engine.reset(namespace, key, if_expired)

    def list(
        self, namespace: str, status: CheckpointStatus | str | None = None, *, expired: bool = False
    ) -> builtins.list[Checkpoint]:
        return self._engine.list(namespace, status, expired)

    def gc(self, older_than_ms: int | None = None, *, prune_finished_older_than_ms: int | None = None) -> GcResult:
        """As ``CheckpointClient.gc``: expired claims (with a grace of ``older_than_ms``); done/failed
        records only with ``prune_finished_older_than_ms``; records that do not read are left and
        listed in the result's ``unreadable``."""
        return self._engine.gc(older_than_ms, prune_finished_older_than_ms)

    def wait_done(self, namespace: str, key: str, timeout_s: float | None, *, poll_s: float = 0.25) -> Checkpoint:
        check_namespace(namespace)
        check_key(key)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = _WAIT_FIRST_POLL_S
        while True:
            cp = self.get(namespace, key)
            if cp is not None and cp.status is not CheckpointStatus.CLAIMED:
                return cp
            pause = delay
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    state = "no record" if cp is None else f"still claimed by {cp.owner_run_id!r}"
                    raise WaitTimeoutError(f"{namespace}/{key!r} not done after {timeout_s} s ({state})")
                pause = min(pause, remaining)
            time.sleep(pause)
            delay = min(delay * 2, poll_s)

    def step(
        self,
        namespace: str,
        key: str,
        *,
        lease_ms: int = DEFAULT_LEASE_MS,
        owner_run_id: str | None = None,
        fingerprint: str | None = None,
    ) -> SyncStep:
        return SyncStep(self, namespace, key, lease_ms=lease_ms, owner_run_id=owner_run_id, fingerprint=fingerprint)

    def close(self) -> None:
        self._engine.close()

    def __enter__(self) -> SyncCheckpointClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
