"""The recommended callback receiver: signature check, exactly-once processing, a truthful ACK probe.

``make_receiver_app(handler, checkpoint_url, secrets)`` returns a WSGI app that answers both Molens
requests of a fire on any path, telling them apart by ``X-Molens-Kind``. ``secrets`` is a list of
signing secrets or one secret as a ``str``/``bytes``; none (``None``, ``[]``) accepts unsigned requests.
Each fire id (``X-Fire-ID``) is a ``mooncat_checkpoint`` step in namespace ``molens-fires``:

callback (``X-Molens-Kind: callback``)
    bad/missing signature -> 401 (handler not called); otherwise ``claim``:

    - ``claimed`` -> ``handler(fire)`` runs; its return value (JSON) is stored with ``done`` and
      answered with 200. Molens keeps the first 512 bytes of that answer on the execution record.
    - ``done`` -> 200 with the stored result; the handler is *not* called again (a retry after a lost
      response, a re-fire after a failover, an at-least-once duplicate).
    - ``busy`` (another delivery of the same fire holds the lease) -> 503 + ``Retry-After: 1``: Molens
      takes it as a throttle (the wait does not use up ``max_retries`` for up to the task's
      ``retry.max_throttle_ms``) and the later answer reflects the outcome of the run in progress.
    - handler raised ``PermanentFireError`` -> ``fail`` (terminal) and 422 + ``X-Molens-No-Retry:
      true``, so Molens ends the occurrence (``non_retryable``); later deliveries of that fire get the
      same without calling the handler (``mooncat-checkpoint reset molens-fires FIRE_ID`` makes it
      runnable again).
    - handler raised anything else -> the lease is released (``touch`` to 1 ms, fenced) and 500, so
      the retry Molens makes runs the handler again: a fire counts as processed only once it succeeds.

ACK probe (``X-Molens-Kind: ack``, same headers and body)
    bad signature -> 401; the fire's checkpoint is ``done`` -> 200, anything else (running, failed,
    never seen) -> 409. So a 2xx ACK means the work is durably recorded as done, never earlier.

notification (``X-Molens-Kind: notification``: a task's ``notify_url`` or the node's ``notifications.url``)
    bad signature -> 401; otherwise 200 and ignored: the handler is not called. Point notification
    targets at an endpoint of their own to act on them. Any other kind -> 400.

Exactly once holds while the handler finishes within ``lease_ms`` (default 60 s): past it another
delivery may claim the fire; ``fire.fence`` grows with every claim, so a store written by the
handler can refuse a write carrying a smaller fence. Use a ``file://`` or ``sqlite://`` checkpoint
URL shared by every receiver process; ``memory://`` is for tests.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from molens.errors import MolensError
from molens.signing import DEFAULT_TOLERANCE_MS, verify_signature

if TYPE_CHECKING:
    from mooncat_checkpoint import SyncCheckpointClient

__all__ = ["verify_signature", "Fire", "PermanentFireError", "ReceiverApp", "make_receiver_app"]

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "molens-fires"
_RETRY_AFTER_S = "1"
_BUSY = 503
"""A busy or superseded fire: a status Molens reads ``Retry-After`` on (a throttle, not a spent retry)."""
_NO_RETRY = ("X-Molens-No-Retry", "true")
"""Ends the occurrence at once (``molens.delivery.NO_RETRY_HEADER``; any other value is ignored)."""

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class PermanentFireError(MolensError):
    """Raise from a handler when retrying cannot help: the fire is recorded as failed for good, with
    ``message`` (the class name when empty) as the reason."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Fire:
    """One callback as the handler sees it."""

    fire_id: str
    task_id: str
    scene: str
    attempt: int
    body: bytes
    fence: int
    headers: dict[str, str] = field(repr=False)

    def json(self) -> Any:
        """The task's ``payload`` (the body is its JSON encoding)."""
        return json.loads(self.body) if self.body else None


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 405: "Method Not Allowed",
            409: "Conflict", 413: "Payload Too Large", 422: "Unprocessable Entity",
            500: "Internal Server Error", 503: "Service Unavailable"}


class ReceiverApp:
    """The WSGI callable; ``close()`` closes the checkpoint client it opened."""

    def __init__(
        self,
        handler: Callable[[Fire], Any],
        checkpoints: SyncCheckpointClient,
        secrets: str | bytes | Sequence[str | bytes] | None,
        namespace: str = DEFAULT_NAMESPACE,
        tolerance_ms: int = DEFAULT_TOLERANCE_MS,
        lease_ms: int = 60_000,
        max_body_bytes: int = 1 << 20,
        owns_client: bool = False,
    ) -> None:
        self.handler = handler
        self.checkpoints = checkpoints
        if isinstance(secrets, str | bytes | bytearray):
            secrets = (secrets,)  # one secret, not one per character (or per byte: all-zero keys)
        self.secrets = tuple(s for s in (secrets or ()) if s)
        self.namespace = namespace
        self.tolerance_ms = tolerance_ms
        self.lease_ms = lease_ms
        self.max_body_bytes = max_body_bytes
        self._owns_client = owns_client
        if not self.secrets:
            log.warning("receiver accepts unsigned callbacks: no signing secrets given")

    def close(self) -> None:
        if self._owns_client:
            self.checkpoints.close()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        status, body, extra = self._handle(environ)
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra]
        start_response(f"{status} {_REASONS.get(status, 'Unknown')}", headers)
        return [body]

    def _handle(self, environ: dict[str, Any]) -> tuple[int, bytes, list[tuple[str, str]]]:
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(405, {"error": "POST only"}, [("Allow", "POST")])
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _answer(400, {"error": "bad Content-Length"})
        if length > self.max_body_bytes:
            return _answer(413, {"error": f"body over {self.max_body_bytes} bytes"})
        body = environ["wsgi.input"].read(length) if length > 0 else b""
        headers = _headers(environ)
        fire_id = headers.get("x-fire-id", "")
        if not fire_id:
            return _answer(400, {"error": "missing X-Fire-ID"})
        if self.secrets and not verify_signature(headers, body, self.secrets, self.tolerance_ms):
            log.warning("fire=%s rejected: bad signature", fire_id)
            return _answer(401, {"error": "bad signature", "fire_id": fire_id})
        kind = headers.get("x-molens-kind", "callback")
        if kind == "callback":
            return self._callback(fire_id, headers, body)
        if kind == "ack":
            return self._ack(fire_id)
        if kind == "notification":
            log.info("notification batch=%s ignored: the receiver runs its handler for callbacks only", fire_id)
            return _answer(200, {"batch_id": fire_id, "ignored": "notification"}, [("X-Receiver-Outcome", "ignored")])
        return _answer(400, {"error": f"unknown X-Molens-Kind {kind[:40]!r}", "fire_id": fire_id})

    def _ack(self, fire_id: str) -> tuple[int, bytes, list[tuple[str, str]]]:
        cp = self.checkpoints.get(self.namespace, fire_id)
        state = "none" if cp is None else cp.status.value
        if state == "done":
            return _answer(200, {"fire_id": fire_id, "state": state})
        return _answer(409, {"fire_id": fire_id, "state": state})

    def _callback(self, fire_id: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, list[tuple[str, str]]]:
        from mooncat_checkpoint import (
            CheckpointResultSerializationError,
            CheckpointResultTooLargeError,
            LeaseLostError,
        )

        c = self.checkpoints.claim(self.namespace, fire_id, lease_ms=self.lease_ms)
        if c.kind == "done":
            return _answer(200, c.checkpoint.result, [("X-Receiver-Outcome", "duplicate")])
        if c.kind == "failed":
            return _answer(422, {"fire_id": fire_id, "state": "failed", "error": c.checkpoint.error},
                           [_NO_RETRY, ("X-Receiver-Outcome", "failed-earlier")])
        if c.kind == "busy":
            return _answer(_BUSY, {"fire_id": fire_id, "state": "claimed"},
                           [("Retry-After", _RETRY_AFTER_S), ("X-Receiver-Outcome", "busy")])
        token = c.lease_token
        fire = Fire(fire_id=fire_id, task_id=headers.get("x-task-id", ""), scene=headers.get("x-scene", ""),
                    attempt=_int(headers.get("x-molens-attempt")), body=body, fence=c.fence, headers=headers)
        started = time.monotonic()
        try:
            result = self.handler(fire)
        except PermanentFireError as e:
            reason = str(e) or type(e).__name__
            log.warning("fire=%s failed permanently: %s", fire_id, reason)
            self._settle(lambda: self.checkpoints.fail(self.namespace, fire_id, reason, lease_token=token),
                         LeaseLostError, fire_id)
            return _answer(422, {"fire_id": fire_id, "state": "failed", "error": reason},
                           [_NO_RETRY, ("X-Receiver-Outcome", "failed")])
        except Exception as e:
            log.exception("fire=%s handler raised; releasing it for a retry", fire_id)
            self._settle(lambda: self.checkpoints.touch(self.namespace, fire_id, lease_token=token, extend_ms=1),
                         LeaseLostError, fire_id)
            return _answer(500, {"fire_id": fire_id, "error": f"{type(e).__name__}: {e}"[:200]},
                           [("X-Receiver-Outcome", "error")])
        try:
            self.checkpoints.done(self.namespace, fire_id, lease_token=token, result=result)
        except (CheckpointResultTooLargeError, CheckpointResultSerializationError) as e:
            log.error("fire=%s handler result cannot be stored: %s", fire_id, e)
            self._settle(lambda: self.checkpoints.touch(self.namespace, fire_id, lease_token=token, extend_ms=1),
                         LeaseLostError, fire_id)
            return _answer(500, {"fire_id": fire_id, "error": f"result not storable: {e}"[:200]},
                           [("X-Receiver-Outcome", "error")])
        except LeaseLostError:
            log.error("fire=%s handler outlived its %d ms lease (%.0f ms); another delivery owns it now",
                      fire_id, self.lease_ms, (time.monotonic() - started) * 1000)
            return _answer(_BUSY, {"fire_id": fire_id, "error": "lease lost"},
                           [("Retry-After", _RETRY_AFTER_S), ("X-Receiver-Outcome", "lease-lost")])
        return _answer(200, result, [("X-Receiver-Outcome", "processed")])

    @staticmethod
    def _settle(op: Callable[[], object], lease_lost: type[Exception], fire_id: str) -> None:
        try:
            op()
        except lease_lost:
            log.error("fire=%s lease lost before the outcome was recorded", fire_id)


def _answer(status: int, obj: Any, extra: list[tuple[str, str]] | None = None) -> tuple[int, bytes, list[tuple[str, str]]]:
    return status, json.dumps(obj, separators=(",", ":")).encode(), extra or []


def _headers(environ: dict[str, Any]) -> dict[str, str]:
    out = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    if "CONTENT_TYPE" in environ:
        out["content-type"] = environ["CONTENT_TYPE"]
    return out


def _int(v: str | None) -> int:
    try:
        return int(v or 0)
    except ValueError:
        return 0


def make_receiver_app(
    handler: Callable[[Fire], Any],
    checkpoint_url: str | None,
    secrets: str | bytes | Sequence[str | bytes] | None,
    namespace: str = DEFAULT_NAMESPACE,
    tolerance_ms: int = DEFAULT_TOLERANCE_MS,
    lease_ms: int = 60_000,
    max_body_bytes: int = 1 << 20,
    client: SyncCheckpointClient | None = None,
) -> ReceiverApp:
    """A WSGI callback + ACK endpoint backed by mooncat_checkpoint at ``checkpoint_url``
    (``None``: ``$MOONCAT_CHECKPOINT_URL`` or ``file://./.mooncat/checkpoints``), or an open ``client``.
    ``secrets``: the signing secrets (a list, or one ``str``/``bytes``); none accepts unsigned requests."""
    owns = client is None
    if client is None:
        try:
            from mooncat_checkpoint import SyncCheckpointClient
        except ImportError as e:  # pragma: no cover - only before mooncat_checkpoint's client exists
            raise ImportError(f"molens.receiver needs mooncat_checkpoint.SyncCheckpointClient: {e}") from e
        client = SyncCheckpointClient(url=checkpoint_url)
    return ReceiverApp(handler, client, secrets, namespace, tolerance_ms, lease_ms, max_body_bytes, owns)
