"""Namespaces and API keys as replicated records (docs/architecture.md#authorization).

Both live in the state machine's meta records, so every replica enforces the same set and a
snapshot carries them: ``ns:<name>`` holds a :class:`Namespace`, ``key:<id>`` an :class:`ApiKey`,
``nsn:<name>`` the number of tasks a namespace other than ``default`` holds and ``nsl:<name>`` those
not finished (kept by the machine for every task it writes, so a delete of a namespace that still
holds tasks is refused, and ``max_pending_tasks`` enforced, in the log's order, not by a racy scan).
``default`` always exists, is never stored and has no quotas.

An :class:`ApiKey` holds no secret: only a keyed hash of it (HMAC-SHA256 under a random salt of its
own). The leader draws the secret and the salt before proposing, so the secret never reaches the
Raft log, a snapshot or a follower (:mod:`molens.web.keys`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import msgspec

from molens.errors import IllegalTransitionError
from molens.schema import DEFAULT_NAMESPACE

NS_PREFIX = "ns:"
KEY_PREFIX = "key:"
COUNT_PREFIX = "nsn:"
LIVE_PREFIX = "nsl:"
NAMESPACE_FLOW_PREFIX = "namespace/"
"""The flow key of a namespace's ``fires_per_s`` in the leader's ``FlowSet`` effects (no host flow
key holds a ``/``)."""
ALL_NAMESPACES = "*"
"""A key's ``namespaces`` entry that stands for every namespace, present and future."""


class KeyRole(enum.StrEnum):
    """What a key may do in its namespaces (docs/api.md#keys-and-roles)."""

    ADMIN = "admin"
    """Everything: tasks, flows, dead letters, namespaces, keys, membership, leadership."""
    WRITER = "writer"
    """Create and change tasks, flows and dead letters; read them."""
    READER = "reader"
    """Read tasks, executions, flows and dead letters."""


class Quotas(msgspec.Struct, frozen=True, kw_only=True):
    """A namespace's limits (``None``: unlimited); over one, a create is refused whole (429)."""

    max_pending_tasks: int | None = None
    """Tasks not finished (pending, firing, awaiting_ack, paused); the state machine enforces it."""
    creates_per_s: float | None = None
    """Tasks created per second (a token bucket of one second's worth, on the leader)."""
    max_payload_bytes: int | None = None
    """The largest encoded payload (the state machine enforces it)."""
    fires_per_s: float | None = None
    """Fires per second of all the namespace's tasks (a namespace-wide flow on the leader)."""


class Namespace(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    name: str
    quotas: Quotas = Quotas()
    created_ms: int = 0
    updated_ms: int = 0

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "quotas": msgspec.to_builtins(self.quotas),
                "created_at": self.created_ms, "updated_at": self.updated_ms}


DEFAULT = Namespace(name=DEFAULT_NAMESPACE)


class ApiKey(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """One API key: who it is, what it may do, and the keyed hash of its secret."""

    id: str
    name: str
    role: KeyRole
    namespaces: tuple[str, ...]
    """Namespaces it may act in; ``("*",)`` for all."""
    salt: bytes
    digest: bytes
    """HMAC-SHA256 of the secret under ``salt``."""
    created_ms: int

    def to_json(self) -> dict[str, object]:
        """What the API shows of a key after its creation (never the secret, its hash or salt)."""
        return {"id": self.id, "name": self.name, "role": self.role.value, "namespaces": list(self.namespaces),
                "created_at": self.created_ms}


_NS = msgspec.msgpack.Decoder(Namespace)
_KEY = msgspec.msgpack.Decoder(ApiKey)
_ENC = msgspec.msgpack.Encoder()


def encode(record: Namespace | ApiKey) -> bytes:
    return _ENC.encode(record)


def decode_namespace(raw: bytes) -> Namespace:
    return _NS.decode(raw)


def decode_key(raw: bytes) -> ApiKey:
    return _KEY.decode(raw)


def named_by_keys(name: str, keys: Iterable[ApiKey]) -> IllegalTransitionError | None:
    """Why namespace ``name`` may not be deleted: API keys name it (a namespace made again under the
    same name would be theirs again); None when none does."""
    naming = sorted(k.id for k in keys if name in k.namespaces)
    if not naming:
        return None
    shown = ", ".join(naming[:10]) + (f" and {len(naming) - 10} more" if len(naming) > 10 else "")
    return IllegalTransitionError(f"namespace {name} is named by API keys {shown}; delete them first", "name",
                                  code="conflict")


def encode_count(n: int) -> bytes:
    return str(n).encode()


def decode_count(raw: bytes | None) -> int:
    return 0 if raw is None else int(raw)


__all__ = [
    "ALL_NAMESPACES",
    "COUNT_PREFIX",
    "DEFAULT",
    "KEY_PREFIX",
    "LIVE_PREFIX",
    "NAMESPACE_FLOW_PREFIX",
    "NS_PREFIX",
    "ApiKey",
    "Namespace",
    "Quotas",
    "KeyRole",
    "decode_count",
    "decode_key",
    "decode_namespace",
    "named_by_keys",
    "encode",
    "encode_count",
]
