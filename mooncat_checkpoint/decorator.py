"""``@checkpointed``: run a function at most once per key; later calls return the stored result.

::

    @checkpointed("thumbnails", code_version="v2")
    async def thumbnail(path: str, size: int = 256) -> dict[str, int]: ...

The key defaults to ``sha256(canonical JSON of the bound arguments, defaults applied, + code_version)``
so ``f(1, b=2)`` and ``f(1, 2)`` share a record, and bumping ``code_version`` starts afresh. Pass
``key=callable`` (same arguments as the function, returns a str) when arguments are not JSON. The
function's name is not part of the key (renaming or moving it keeps its records), so give each
decorated function its own namespace.

* done -> the stored result is returned without calling the function (JSON round-tripped: a tuple comes
  back as a list). The call that runs the function returns the function's own value.
* failed -> ``StepFailedError`` until the record is reset.
* busy -> poll until the other run finishes (then as above) or its lease expires (then claim and run);
  ``wait_timeout_s`` bounds the wait (``WaitTimeoutError``).
* an exception marks the step failed and propagates. Async functions run inside ``step()`` (renewed,
  cancelled with ``LeaseLostError`` if the lease is lost); sync ones inside ``SyncStep``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast

from mooncat_checkpoint.client import CheckpointClient
from mooncat_checkpoint.engine import DEFAULT_LEASE_MS, Engine
from mooncat_checkpoint.errors import InvalidKeyError, StepFailedError, WaitTimeoutError
from mooncat_checkpoint.model import Checkpoint
from mooncat_checkpoint.naming import check_key, check_namespace
from mooncat_checkpoint.step import _StepState
from mooncat_checkpoint.sync_client import SyncCheckpointClient

__all__ = ["checkpointed", "default_key"]

P = ParamSpec("P")
R = TypeVar("R")

_BUSY_FIRST_POLL_S = 0.01
_BUSY_MAX_POLL_S = 1.0


def default_key(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: Mapping[str, object], code_version: str = ""
) -> str:
    """The key ``@checkpointed`` derives for ``fn(*args, **kwargs)``: 64 hex characters."""
    return _derive_key(inspect.signature(fn), fn.__qualname__, args, kwargs, code_version)


def _derive_key(
    sig: inspect.Signature, name: str, args: tuple[object, ...], kwargs: Mapping[str, object], code_version: str
) -> str:
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    try:
        text = json.dumps(
            {"arguments": bound.arguments, "code_version": code_version},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError) as e:
        raise InvalidKeyError(
            f"cannot derive a checkpoint key for {name}: its arguments are not JSON ({e}); pass key="
        ) from None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _Clients:
    """The store a decorated function uses: the given client, or one opened on first call."""

    def __init__(self, client: CheckpointClient | SyncCheckpointClient | None, url: str | None) -> None:
        self._engine: Engine | None = None if client is None else client._engine
        self._url = url
        self._lock = threading.Lock()

    def engine(self) -> Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = Engine(self._url)
        return self._engine


def _outcome(step: _StepState) -> Checkpoint:
    """For a skipped step: the done record to return, or raise for failed; busy is handled by callers."""
    prev = step.previous
    assert prev is not None
    if step.kind == "failed":
        raise StepFailedError(prev)
    return prev


def checkpointed(
    namespace: str,
    *,
    key: Callable[..., str] | None = None,
    code_version: str = "",
    client: CheckpointClient | SyncCheckpointClient | None = None,
    url: str | None = None,
    lease_ms: int = DEFAULT_LEASE_MS,
    owner_run_id: str | None = None,
    wait_timeout_s: float | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a sync or async function so each distinct call runs once; see the module docstring.

    ``client`` (either flavour) or ``url`` picks the store; by default one is opened on first call
    from ``$MOONCAT_CHECKPOINT_URL`` or the default URL.
    """
    check_namespace(namespace)
    clients = _Clients(client, url)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        sig = inspect.signature(fn)
        name = getattr(fn, "__qualname__", repr(fn))

        def key_of(args: tuple[object, ...], kwargs: dict[str, object]) -> str:
            if key is not None:
                return check_key(key(*args, **kwargs))
            return _derive_key(sig, name, args, kwargs, code_version)

        if inspect.iscoroutinefunction(fn):
            afn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                cp = CheckpointClient._over(clients.engine())
                k = key_of(args, kwargs)
                deadline = None if wait_timeout_s is None else time.monotonic() + wait_timeout_s
                delay = _BUSY_FIRST_POLL_S
                while True:
                    async with cp.step(namespace, k, lease_ms=lease_ms, owner_run_id=owner_run_id) as step:
                        if not step.skipped:
                            value = await afn(*args, **kwargs)
                            step.result = value
                    if not step.skipped:
                        return value
                    if step.kind != "busy":
                        return _outcome(step).result
                    await asyncio.sleep(_busy_pause(step, delay, deadline, namespace, k))
                    delay = min(delay * 2, _BUSY_MAX_POLL_S)

            return cast(Callable[P, R], run_async)

        @functools.wraps(fn)
        def run_sync(*args: P.args, **kwargs: P.kwargs) -> R:
            cp = SyncCheckpointClient._over(clients.engine())
            k = key_of(args, kwargs)
            deadline = None if wait_timeout_s is None else time.monotonic() + wait_timeout_s
            delay = _BUSY_FIRST_POLL_S
            while True:
                with cp.step(namespace, k, lease_ms=lease_ms, owner_run_id=owner_run_id) as step:
                    if not step.skipped:
                        value = fn(*args, **kwargs)
                        step.result = value
                if not step.skipped:
                    return value
                if step.kind != "busy":
                    return cast(R, _outcome(step).result)
                time.sleep(_busy_pause(step, delay, deadline, namespace, k))
                delay = min(delay * 2, _BUSY_MAX_POLL_S)

        return run_sync

    return decorate


def _busy_pause(step: _StepState, delay: float, deadline: float | None, namespace: str, key: str) -> float:
    if deadline is None:
        return delay
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        prev = step.previous
        owner = None if prev is None else prev.owner_run_id
        raise WaitTimeoutError(f"{namespace}/{key!r} still busy (owner {owner!r}) after the wait timeout")
    return min(delay, remaining)
