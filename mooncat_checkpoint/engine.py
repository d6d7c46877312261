"""The synchronous core both clients share: argument checks, clock, token, ``rules`` run by a backend.

Every method may block on disk or on another process's lock (except on ``memory://``); the async
``CheckpointClient`` runs them in worker threads, ``SyncCheckpointClient`` calls them directly. The
clock is called inside the backend's critical section, so "now" is taken while holding the key.
"""

from __future__ import annotations

import builtins
import secrets
import time
from collections.abc import Callable
from functools import partial
from typing import cast

from mooncat_checkpoint import codec, rules
from mooncat_checkpoint.backends.base import Backend, ServerBackend
from mooncat_checkpoint.errors import BackendUnavailableError, CorruptRecordError, InvalidArgumentError
from mooncat_checkpoint.model import (
    Checkpoint,
    CheckpointStatus,
    ClaimResult,
    GcResult,
    JSONValue,
    UnreadableRecord,
)
from mooncat_checkpoint.naming import check_key, check_namespace
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.urls import open_backend, resolve_url, shown_url

__all__ = ["Clock", "Engine", "wall_clock_ms", "DEFAULT_LEASE_MS"]

Clock = Callable[[], int]
DEFAULT_LEASE_MS = 60_000


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch: the default clock (leases must agree across processes)."""
    return time.time_ns() // 1_000_000


class Engine:
    def __init__(self, url: str | None = None, clock: Clock | None = None) -> None:
        self.url, self.url_source = resolve_url(url)
        self.backend: Backend | ServerBackend = open_backend(self.url)
        # Exactly one of the two is set. Stores shared by many hosts (``server_side``) run the rules
        # and keep time themselves; a clock given here overrides theirs (tests drive leases with one).
        self.server: ServerBackend | None = None
        self.local: Backend | None = None
        if getattr(self.backend, "server_side", False):
            self.server = cast(ServerBackend, self.backend)
        else:
            self.local = cast(Backend, self.backend)
        self._given_clock = clock
        self.clock: Clock = clock if clock is not None else wall_clock_ms
        self.closed = False

    @property
    def scheme(self) -> str:
        return self.url.partition("://")[0].lower()

    def twin(self, backend: Backend) -> Engine:
        """An engine on the same store, URL and clock that calls ``backend`` (another face of ours,
        e.g. ``SqliteBackend.nowait()``) instead; closing stays with this one."""
        t = Engine.__new__(Engine)
        t.__dict__.update(self.__dict__)
        t.backend = t.local = backend
        return t

    def _server_now(self) -> int | None:
        return None if self._given_clock is None else self._given_clock()

    def _local(self) -> Backend:
        assert self.local is not None
        return self.local

    def _check_open(self) -> None:
        if self.closed:
            raise BackendUnavailableError(f"checkpoint client for {shown_url(self.url)!r} is closed")

    def claim(
        self,
        namespace: str,
        key: str,
        owner_run_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        fingerprint: str | None = None,
    ) -> ClaimResult:
        self._check_open()
        ns = check_namespace(namespace)
        key = check_key(key)
        owner = codec.check_label("owner_run_id", owner_run_id)
        lease = codec.check_ms("lease_ms", lease_ms, minimum=1)
        fp = codec.check_label("fingerprint", fingerprint)
        token = secrets.token_hex(16)
        if self.server is not None:
            return self.server.claim(ns, key, self._server_now(), owner, lease, fp, token)
        clock = self.clock
        return self._local().transact(
            ns,
            key,
            lambda cur, floor: rules.claim(
                cur, floor, namespace=ns, key=key, now_ms=clock(), owner_run_id=owner, lease_ms=lease,
                fingerprint=fp, token=token,
            ),
        )

    def touch(self, namespace: str, key: str, lease_token: str, extend_ms: int | None = None) -> Checkpoint | None:
        self._check_open()
        ns = check_namespace(namespace)
        key = check_key(key)
        token = _check_token(lease_token)
        ext = None if extend_ms is None else codec.check_ms("extend_ms", extend_ms, minimum=0)
        if self.server is not None:
            return self.server.touch(ns, key, self._server_now(), token, ext)
        clock = self.clock
        return self._local().transact(
            ns, key, lambda cur, _: rules.touch(cur, namespace=ns, key=key, now_ms=clock(), token=token, extend_ms=ext)
        )

    def done(
        self,
        namespace: str,
        key: str,
        lease_token: str,
        result: JSONValue = None,
        result_ref: str | None = None,
    ) -> Checkpoint:
        self._check_open()
        ns = check_namespace(namespace)
        key = check_key(key)
        token = _check_token(lease_token)
        text = codec.encode_result(result)
        ref = codec.check_label("result_ref", result_ref)
        if self.server is not None:
            return self.server.done(ns, key, self._server_now(), token, text, ref)
        clock = self.clock
        return self._local().transact(
            ns,
            key,
            lambda cur, _: rules.complete(
                cur, namespace=ns, key=key, now_ms=clock(), token=token, result_json=text, result_ref=ref
            ),
        )

    def fail(self, namespace: str, key: str, error: str | BaseException, lease_token: str) -> Checkpoint:
        self._check_open()
        ns = check_namespace(namespace)
        key = check_key(key)
        token = _check_token(lease_token)
        text = codec.error_text(error)
        if self.server is not None:
            return self.server.fail(ns, key, self._server_now(), token, text)
        clock = self.clock
        return self._local().transact(
            ns, key, lambda cur, _: rules.fail(cur, namespace=ns, key=key, now_ms=clock(), token=token, error=text)
        )

    def get(self, namespace: str, key: str) -> Checkpoint | None:
        self._check_open()
        rec = self.backend.get(check_namespace(namespace), check_key(key))
        return None if rec is None else rec.public()

    def reset(self, namespace: str, key: str, if_expired: bool = False) -> bool:
        self._check_open()
        ns = check_namespace(namespace)
        key = check_key(key)
        if self.server is not None:
            return self.server.reset(ns, key, self._server_now(), bool(if_expired))
        clock = self.clock
        try:
            return self._local().transact(
                ns, key, lambda cur, _: rules.reset(cur, now_ms=clock(), if_expired=bool(if_expired))
            )
        except CorruptRecordError:
            if if_expired:  # whether it expired cannot be read: leave it
                raise
            return self._local().discard(ns, key)  # a reset deletes any record, one that no longer reads too

    def list(
        self, namespace: str, status: CheckpointStatus | str | None = None, expired: bool = False
    ) -> builtins.list[Checkpoint]:
        self._check_open()
        ns = check_namespace(namespace)
        want = _check_status(status)
        now = self.clock() if self.server is None or self._given_clock is not None else self.server.now_ms()
        return [
            r.public() for r in self.backend.list(ns) if rules.matches(r, status=want, expired=expired, now_ms=now)
        ]

    def gc(self, older_than_ms: int | None = None, prune_finished_older_than_ms: int | None = None) -> GcResult:
        """Delete claims whose lease ended at least ``older_than_ms`` ago (None: every expired claim) in
        every namespace; done/failed records only when ``prune_finished_older_than_ms`` is given, those
        not updated for that long. How many records went; a record that does not read is left where
        it is and reported in ``GcResult.unreadable``, and everything else is still collected."""
        self._check_open()
        older = None if older_than_ms is None else codec.check_ms("older_than_ms", older_than_ms, minimum=0)
        prune = (
            None if prune_finished_older_than_ms is None
            else codec.check_ms("prune_finished_older_than_ms", prune_finished_older_than_ms, minimum=0)
        )
        if self.server is not None:
            return self.server.gc(self._server_now(), older, prune)
        backend = self._local()
        backend.clean_debris()
        clock = self.clock
        removed = 0
        unreadable: builtins.list[UnreadableRecord] = []
        for ns in backend.namespaces():
            records, bad = backend.list_readable(ns)
            unreadable.extend(bad)
            now = clock()
            doomed = [r for r in records if rules.collectable(r, now, older, prune)]
            if not doomed:
                continue
            # One floor write for the batch, instead of one per deleted record.
            backend.raise_floor(ns, max(r.fence for r in doomed))
            decide = partial(_gc_decide, clock, older, prune)
            for r in doomed:
                try:
                    if backend.transact(ns, r.key, decide):
                        removed += 1
                except CorruptRecordError as e:  # it stopped reading since it was listed: leave it too
                    unreadable.append(UnreadableRecord(ns, r.key, str(e)))
        return GcResult(removed, unreadable)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.backend.close()


def _gc_decide(
    clock: Clock, older: int | None, prune: int | None, cur: StoredRecord | None, _base: int
) -> rules.Decision[bool]:
    return rules.gc(cur, now_ms=clock(), older_than_ms=older, prune_finished_ms=prune)


def _check_token(token: object) -> str:
    if not isinstance(token, str):
        raise InvalidArgumentError(f"lease_token must be the str from a claim, not {type(token).__name__}")
    return token


def _check_status(status: CheckpointStatus | str | None) -> CheckpointStatus | None:
    if status is None:
        return None
    try:
        return CheckpointStatus(status)
    except ValueError:
        raise InvalidArgumentError(f"status must be one of claimed, done, failed; got {status!r}") from None
