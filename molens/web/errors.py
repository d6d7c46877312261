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

from molens.errors import MolensError


class LeaderElsewhere(MolensError, code="not_leader", http_status=307):
    """Not the leader; ``leader_url`` is the leader's HTTP base URL (``http://host:port``) if known."""

    extra_members = (("leader", "leader_url"),)

    def __init__(self, leader_url: str | None, leader_id: str | None = None) -> None:
        super().__init__(f"this node is not the leader (leader: {leader_id or leader_url or 'unknown'})")
        self.leader_url = leader_url
        self.leader_id = leader_id


class NoLeader(MolensError, code="no_leader", http_status=503,
               message="no leader is known (election in progress); retry shortly"):
    """No leader is known right now; nothing was applied."""


class OutcomeUnknown(MolensError, code="outcome_unknown", http_status=503,
                     message="leadership changed before the write applied; outcome unknown"):
    """The write was appended but leadership changed before it applied: it may or may not exist."""


class Unavailable(MolensError, code="unavailable", http_status=503):
    """The node cannot serve the request now (stopping, overloaded, proposal timed out)."""


class InsufficientStorage(MolensError, code="insufficient_storage", http_status=507):
    """This node cannot write its disk now (docs/architecture.md#full-disk): nothing was applied;
    ``507`` + ``Retry-After``. The node retries by itself and takes writes again once space returns."""


class Unauthorized(MolensError, code="unauthorized", http_status=401, message="missing or wrong bearer token"):
    """No bearer key, or one no key of this cluster has."""


class Forbidden(MolensError, code="forbidden", http_status=403, message="this key may not do that"):
    """The key may not do this (its role, or a namespace-level request outside its namespaces)."""


class TooManyRequests(MolensError, code="too_many_requests", http_status=429):
    """Slowed down (``Retry-After`` says for how long): too many bad keys from this address."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BodyTooLarge(MolensError, code="body_too_large", http_status=413):
    """The request body is over ``http.max_body_bytes``."""


class UnsupportedMediaType(MolensError, code="unsupported_media_type", http_status=415):
    """A body that must be JSON was sent with another ``Content-Type`` or charset."""


class MethodNotAllowed(MolensError, code="method_not_allowed", http_status=405):
    """The path is a route, not with this method."""


class RouteNotFound(MolensError, code="not_found", http_status=404):
    """No route has this path."""


class InternalError(MolensError, code="internal", http_status=500):
    """What the API answers for an exception it did not raise on purpose (the node logs it)."""


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
