"""The exceptions Molens raises on purpose, one tree (the Raft package keeps its own, ``RaftError``).

Each carries the REST error body (``code``, ``message``, ``field``) and the HTTP status the API
answers with, so an error raised deep in validation reaches the client unchanged::

    MolensError (500 internal)
    ├── ValidationError (400 invalid_argument)
    │   ├── PayloadTooLargeError (413 payload_too_large)
    │   ├── BatchInvalid (400, molens.web.app: a batch with no valid item)
    │   └── ScheduleError (molens.schedule.cron: a bad cron expression, time zone or interval;
    │       also a ValueError)
    ├── NotFoundError (404 not_found)
    ├── IllegalTransitionError (409 illegal_transition)
    ├── PreconditionFailed (412 precondition_failed: If-Match names another version)
    ├── QuotaExceeded (429 quota_exceeded: a namespace's quota)
    ├── StoreError (molens.fsm.store), CommandCodecError (molens.fsm.commands), DeliveryCodecError
    ├── ConfigError (molens.config), NodeError (molens.node), AdminError, CliError, UsageError
    │   (molens.ops_cli)
    ├── molens.delivery: CallbackDenied (the callback host policy refused the address; the attempt
    │   ends refused); in molens.delivery.loop, NameResolutionError and what a malformed answer
    │   raises, and in molens.delivery the deadline passing mid-read: each ends an attempt as a
    │   network error or timeout, never an API answer
    ├── PermanentFireError (molens.receiver: a handler's "retrying cannot help"; 422 from the receiver)
    ├── RaftPeerError (molens.actors.peer_errors: a proposal's or a Raft operation's outcome)
    │   ├── ProposalRefused (not appended; retrying is safe)
    │   │   ├── NoTransferTarget, MembershipRefused
    │   │   └── StorageFull (this node cannot write its disk now)
    │   └── LeadershipLost (appended, outcome unknown)
    ├── molens.web.errors: LeaderElsewhere (307), NoLeader (503), OutcomeUnknown (503),
    │   Unavailable (503), InsufficientStorage (507), Unauthorized (401), Forbidden (403),
    │   TooManyRequests (429), BodyTooLarge (413), UnsupportedMediaType (415), MethodNotAllowed (405),
    │   RouteNotFound (404), InternalError (500)
    └── ClientError (molens.client: what the SDK raises)
        ├── ApiError (an error answer, with its code and field)
        │   ├── BadRequestError ── BatchRejectedError
        │   ├── UnauthorizedError, ForbiddenError, TaskNotFoundError (every 404)
        │   ├── ConflictError ── PreconditionFailed (412)
        │   ├── TooManyRequestsError ── QuotaExceededError
        │   └── UnavailableError ── InsufficientStorageError (507)
        ├── OutcomeUnknownError
        └── ConnectionFailedError

Outside the tree, on purpose: the Raft package's ``RaftError`` tree (``molens/raft/errors.py``; the
package imports nothing else from Molens) and ``molens.delivery.CallbackHostDenied``, which urllib3
must see as its own ``NewConnectionError``. ``tests/unit/test_error_tree.py`` checks that every other
exception class in ``molens/`` is a MolensError.

"Not the leader" is one exception, ``molens.raft.core.NotLeaderError`` (with the known leader id),
from the Raft core through RaftPeer to the admin socket; the REST API answers it with
``LeaderElsewhere`` (a 307 to the leader's URL) or ``NoLeader``.

This module imports nothing and is the lowest layer (``.importlinter``): every package, the client,
the receiver and ``molens.schedule`` among them, may import it without the server's dependencies.
"""

from __future__ import annotations

from typing import Any


class MolensError(Exception):
    """Base of every error Molens raises on purpose; carries the REST error body fields."""

    code: str = "internal"
    http_status: int = 500
    reason: str | None = None
    """Why, as a stable word a client may branch on (``never_fires``), where ``code`` is too coarse."""
    default_message: str | None = None
    """The message of one raised without a message (None: a message is required)."""
    extra_members: tuple[tuple[str, str], ...] = ()
    """``(member, attribute)``: what the error body shows after ``code``, ``message``, ``field`` and
    ``reason``, each the value of an attribute of the error."""

    def __init_subclass__(
        cls, *, code: str | None = None, http_status: int | None = None, message: str | None = None, **kw: Any
    ) -> None:
        """``class NotFoundError(MolensError, code="not_found", http_status=404)``: the REST error
        code and HTTP status a subclass answers with, and its ``default_message`` (each its base's
        where not given)."""
        super().__init_subclass__(**kw)
        if code is not None:
            cls.code = code
        if http_status is not None:
            cls.http_status = http_status
        if message is not None:
            cls.default_message = message

    def __init__(self, message: str | None = None, field: str | None = None, code: str | None = None) -> None:
        if message is None:
            if self.default_message is None:
                raise TypeError(f"{type(self).__name__} needs a message")
            message = self.default_message
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code

    def to_json(self) -> dict[str, Any]:
        """The ``{"error": {...}}`` body the REST API answers with (docs/api.md)."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            err["field"] = self.field
        if self.reason is not None:
            err["reason"] = self.reason
        for member, attr in self.extra_members:
            err[member] = getattr(self, attr)
        return {"error": err}

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, MolensError)
            and (self.code, self.message, self.field) == (other.code, other.message, other.field)
        )

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.code, self.message, self.field))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, field={self.field!r}, message={self.message!r})"


class ValidationError(MolensError, code="invalid_argument", http_status=400):
    """Bad user input (400): names the field and why."""


class PayloadTooLargeError(ValidationError, code="payload_too_large", http_status=413):
    """The encoded payload is over ``max_payload_bytes`` (413)."""


class NotFoundError(MolensError, code="not_found", http_status=404):
    """What the request names does not exist (404)."""


class IllegalTransitionError(MolensError, code="illegal_transition", http_status=409):
    """The operation is not allowed in the task's current status (409)."""


class QuotaExceeded(MolensError, code="quota_exceeded", http_status=429):
    """A namespace's quota refuses the request (429); ``field`` names the quota, the body says it as
    ``quota``, and ``Retry-After`` says when to try again."""

    extra_members = (("quota", "field"),)

    def __init__(self, message: str, quota: str, retry_after_s: int = 1, namespace: str = "") -> None:
        super().__init__(message, quota)
        self.retry_after_s = retry_after_s
        self.namespace = namespace
        """The namespace whose quota refused (counted in ``/metrics``; not in the body)."""


class PreconditionFailed(MolensError, code="precondition_failed", http_status=412):
    """The task's definition is no longer the version the request was based on (412)."""


__all__ = [
    "IllegalTransitionError",
    "MolensError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PreconditionFailed",
    "QuotaExceeded",
    "ValidationError",
]
