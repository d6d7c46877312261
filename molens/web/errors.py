"""Errors of the REST layer and of the contexts behind it, all rendering the API's error body (docs/api.md).

Every error the API answers is a :class:`molens.errors.MolensError` (``code``, ``message``,
``field``, ``http_status``), so a handler raises and one place renders ``{"error": {...}}``.

The *routing* errors are raised by an :class:`~molens.web.api_context.ApiContext` when it
cannot apply a write here:

- :class:`LeaderElsewhere` -- this node is not the leader and knows who is: the app answers ``307``
  with ``Location`` on the leader (nothing was applied).
- :class:`NoLeader` -- no leader is known (election in progress): ``503`` + ``Retry-After``
  (nothing was applied; retrying is always safe).
- :class:`InsufficientStorage` -- this node's disk is full: ``507`` + ``Retry-After`` (nothing was
  applied; it takes writes again by itself once space returns).
- :class:`OutcomeUnknown` -- the proposal was appended but leadership was lost before it applied:
  ``503`` with code ``outcome_unknown``; the write may or may not have happened. Creates with an
  idempotency key are safe to retry; the SDK retries those only.
"""

from __future__ import annotations

from typing import Any

from molens.errors import MolensError


class LeaderElsewhere(MolensError):
    """Not the leader; ``leader_url`` is the leader's HTTP base URL (``http://host:port``) if known."""

    code = "not_leader"
    http_status = 307

    def __init__(self, leader_url: str | None, leader_id: str | None = None) -> None:
        super().__init__(f"this node is not the leader (leader: {leader_id or leader_url or 'unknown'})")
        self.leader_url = leader_url
        self.leader_id = leader_id

    def to_json(self) -> dict[str, Any]:
        body = super().to_json()
        body["error"]["leader"] = self.leader_url
        return body


class NoLeader(MolensError):
    """No leader is known right now; nothing was applied."""

    code = "no_leader"
    http_status = 503

    def __init__(self, message: str = "no leader is known (election in progress); retry shortly") -> None:
        super().__init__(message)


class OutcomeUnknown(MolensError):
    """The write was appended but leadership changed before it applied: it may or may not exist."""

    code = "outcome_unknown"
    http_status = 503

    def __init__(self, message: str = "leadership changed before the write applied; outcome unknown") -> None:
        super().__init__(message)


class Unavailable(MolensError):
    """The node cannot serve the request now (stopping, overloaded, proposal timed out)."""

    code = "unavailable"
    http_status = 503


class InsufficientStorage(MolensError):
    """This node cannot write its disk now (docs/architecture.md#full-disk): nothing was applied;
    ``507`` + ``Retry-After``. The node retries by itself and takes writes again once space returns."""

    code = "insufficient_storage"
    http_status = 507


class Unauthorized(MolensError):
    code = "unauthorized"
    http_status = 401

    def __init__(self, message: str = "missing or wrong bearer token") -> None:
        super().__init__(message)


class Forbidden(MolensError):
    """The key may not do this (its role, or a namespace-level request outside its namespaces)."""

    code = "forbidden"
    http_status = 403

    def __init__(self, message: str = "this key may not do that") -> None:
        super().__init__(message)


class TooManyRequests(MolensError):
    """Slowed down (``Retry-After`` says for how long): too many bad keys from this address."""

    code = "too_many_requests"
    http_status = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BodyTooLarge(MolensError):
    code = "body_too_large"
    http_status = 413


class UnsupportedMediaType(MolensError):
    code = "unsupported_media_type"
    http_status = 415


class MethodNotAllowed(MolensError):
    code = "method_not_allowed"
    http_status = 405


class RouteNotFound(MolensError):
    code = "not_found"
    http_status = 404


class InternalError(MolensError):
    code = "internal"
    http_status = 500


__all__ = [
    "BodyTooLarge",
    "Forbidden",
    "InsufficientStorage",
    "InternalError",
    "MethodNotAllowed",
    "NoLeader",
    "LeaderElsewhere",
    "OutcomeUnknown",
    "RouteNotFound",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
]
