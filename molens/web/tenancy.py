"""Namespace and API key routes of the REST app (docs/api.md#namespaces, docs/api.md#keys-and-roles).
Installed by :func:`molens.web.app.build_api`; who may call them is :mod:`molens.web.access`'s.

- ``POST /api/v1/namespaces`` ``{"name", "quotas"}``, ``GET /api/v1/namespaces`` (those the key may
  read, ``default`` first), ``GET``/``PATCH``/``DELETE /api/v1/namespaces/{name}``; a delete of a
  namespace that still holds tasks is ``409`` (decided by the state machine, in the log's order), and
  so is one that API keys still name (decided by the leader: a namespace made again under the name
  would be theirs again).
- ``POST /api/v1/keys`` ``{"name", "role", "namespaces"}`` answers the key with its ``secret``, the
  only time it is shown; ``GET /api/v1/keys``, ``GET``/``DELETE /api/v1/keys/{id}`` show the rest
  (and ``last_used_at``: when this node last admitted it). A delete applies on every replica as it
  applies the entry, so the key is refused everywhere once the followers caught up.
- ``GET /api/v1/whoami``: the request's key (id, name, role, namespaces; never its secret), and
  ``open`` when the node has no ``http.auth_token`` and the request came without a key.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from molens.delivery import NAMESPACE_FLOWS_VERSION, TENANCY_VERSION
from molens.errors import IllegalTransitionError, MolensError, NotFoundError, ValidationError
from molens.fsm import tenancy
from molens.fsm.commands import DeleteApiKey, DeleteNamespace, PutApiKey, PutNamespace
from molens.fsm.tenancy import ALL_NAMESPACES, ApiKey, KeyRole, Namespace, Quotas
from molens.schema import DEFAULT_NAMESPACE, NAMESPACE_PATTERN, python_pattern, request_error, whole_numbers
from molens.web import access, keys

if TYPE_CHECKING:
    from molens.web.app import Api

PREFIX = "/api/v1"
_NAME = re.compile(python_pattern(NAMESPACE_PATTERN))
_KEY_ID = re.compile(r"[0-9a-f]{16}")
MAX_KEY_NAME = 128
MAX_KEY_NAMESPACES = 256

_Rate = Annotated[float, msgspec.Meta(gt=0, le=1_000_000)]
_Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000_000)]


class QuotasBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A namespace's quotas (each optional: null or left out is unlimited)."""

    max_pending_tasks: _Count | None = None
    creates_per_s: _Rate | None = None
    max_payload_bytes: _Count | None = None
    fires_per_s: _Rate | None = None


class NamespaceBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Annotated[str, msgspec.Meta(pattern=python_pattern(NAMESPACE_PATTERN))]
    quotas: QuotasBody | None = None


class NamespacePatch(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    quotas: QuotasBody


class KeyBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_NAME)]
    role: KeyRole
    namespaces: Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_KEY_NAMESPACES)]


def _decode(body: bytes, typ: type[Any]) -> Any:
    try:
        return msgspec.json.decode(body, type=typ)
    except msgspec.MsgspecError as exc:
        if isinstance(exc, msgspec.ValidationError) and "got `float`" in str(exc) \
                and (ints := whole_numbers(body, keep=frozenset())):  # 83.0 is an integer in JSON Schema
            return _decode(ints, typ)
        err = request_error(exc, None)
        raise ValidationError(err.message, err.field) from None


def _quotas(q: QuotasBody | None) -> Quotas:
    return Quotas() if q is None else Quotas(**msgspec.structs.asdict(q))


def _result(res: Any) -> Any:
    if isinstance(res, MolensError):
        raise res
    return res


def install_tenancy(api: Api) -> None:
    """Register the routes of this module on ``api``."""
    ctx = api.ctx

    def namespace(name: str) -> Namespace | None:
        if name == DEFAULT_NAMESPACE:
            return tenancy.DEFAULT
        raw = ctx.get_meta(tenancy.NS_PREFIX + name) if _NAME.match(name) else None
        return None if raw is None else tenancy.decode_namespace(raw)

    def namespace_or_404(name: str) -> Namespace:
        missing = NotFoundError(f"namespace {name[:64]} not found", "name")
        ns = namespace(name)
        if ns is None:
            raise missing
        access.hide(ns.name, missing)
        return ns

    def key_json(k: ApiKey) -> dict[str, Any]:
        return {**k.to_json(), "last_used_at": api.access.last_used_ms(k.id)}

    def key_or_404(key_id: str) -> ApiKey:
        raw = ctx.get_meta(tenancy.KEY_PREFIX + key_id) if _KEY_ID.fullmatch(key_id) else None
        if raw is None:
            raise NotFoundError(f"key {key_id[:64]} not found", "key_id")
        return tenancy.decode_key(raw)

    @api.route("GET", f"{PREFIX}/namespaces")
    def list_namespaces() -> tuple[int, Any]:
        stored = [tenancy.decode_namespace(v) for _, v in ctx.scan_meta(tenancy.NS_PREFIX)]
        shown = access.readable()
        items = [ns.to_json() for ns in [tenancy.DEFAULT, *stored] if shown is None or ns.name in shown]
        return 200, {"items": items, "next_cursor": None}

    @api.route("POST", f"{PREFIX}/namespaces", write=True)
    def create_namespace() -> tuple[int, Any]:
        b = _decode(api.read_body(), NamespaceBody)
        ns = Namespace(name=b.name, quotas=_quotas(b.quotas))
        res = _result(api.propose_one(PutNamespace(ctx.now_ms(), ns, True))[0])
        return 201, res.to_json()

    @api.route("GET", f"{PREFIX}/namespaces/<name>")
    def get_namespace(name: str) -> tuple[int, Any]:
        return 200, namespace_or_404(name).to_json()

    @api.route("PATCH", f"{PREFIX}/namespaces/<name>", write=True)
    def update_namespace(name: str) -> tuple[int, Any]:
        b = _decode(api.read_body(), NamespacePatch)
        cur = namespace_or_404(name)
        res = _result(api.propose_one(PutNamespace(ctx.now_ms(), Namespace(name=cur.name, quotas=_quotas(b.quotas)),
                                                   False))[0])
        return 200, res.to_json()

    @api.route("DELETE", f"{PREFIX}/namespaces/<name>", write=True)
    def delete_namespace(name: str) -> tuple[int, Any]:
        ns = namespace_or_404(name)
        named = tenancy.named_by_keys(ns.name, (tenancy.decode_key(v) for _, v in ctx.scan_meta(tenancy.KEY_PREFIX)))
        if named is not None:  # the answer at once; the state machine decides again in the log's order
            raise named
        _result(api.propose_one(DeleteNamespace(ctx.now_ms(), ns.name, ctx.replicas_read(TENANCY_VERSION),
                                                ctx.replicas_read(NAMESPACE_FLOWS_VERSION)))[0])
        return 200, {"deleted": ns.name}

    @api.route("GET", f"{PREFIX}/whoami")
    def whoami() -> tuple[int, Any]:
        p = access.principal()
        names = [ALL_NAMESPACES] if p.namespaces is None else sorted(p.namespaces)
        return 200, {"key_id": p.key_id, "name": p.name, "role": p.role.value, "namespaces": names,
                     "open": p is access.ANONYMOUS and api.access.open}

    @api.route("GET", f"{PREFIX}/keys")
    def list_keys() -> tuple[int, Any]:
        items = [key_json(tenancy.decode_key(v)) for _, v in ctx.scan_meta(tenancy.KEY_PREFIX)]
        items.sort(key=lambda k: (k["created_at"], k["id"]))
        return 200, {"items": items, "next_cursor": None}

    @api.route("POST", f"{PREFIX}/keys", write=True)
    def create_key() -> tuple[int, Any]:
        b = _decode(api.read_body(), KeyBody)
        names = sorted(set(b.namespaces))
        for n in names:
            if n != ALL_NAMESPACES and not _NAME.match(n):
                raise ValidationError(f'namespaces must hold namespace names or "*", got {n[:64]!a}', "namespaces")
        if ALL_NAMESPACES in names:
            names = [ALL_NAMESPACES]  # every namespace covers any named beside it
        for n in names:
            if n != ALL_NAMESPACES and namespace(n) is None:
                raise NotFoundError(f"namespace {n[:64]} not found", "namespaces")
        kid, secret = keys.new_secret()
        salt = keys.new_salt()
        now = ctx.now_ms()
        rec = ApiKey(id=kid, name=b.name, role=b.role, namespaces=tuple(names), salt=salt,
                     digest=keys.digest(salt, secret), created_ms=now)
        res = _result(api.propose_one(PutApiKey(now, rec, ctx.replicas_read(TENANCY_VERSION)))[0])
        return 201, {**key_json(res), "secret": secret}

    @api.route("GET", f"{PREFIX}/keys/<key_id>")
    def get_key(key_id: str) -> tuple[int, Any]:
        return 200, key_json(key_or_404(key_id))

    @api.route("DELETE", f"{PREFIX}/keys/<key_id>", write=True)
    def delete_key(key_id: str) -> tuple[int, Any]:
        if key_id == access.BOOTSTRAP.key_id:
            raise IllegalTransitionError("the bootstrap key is http.auth_token: change the config to rotate it",
                                         "key_id")
        k = key_or_404(key_id)
        _result(api.propose_one(DeleteApiKey(ctx.now_ms(), k.id))[0])
        return 200, {"deleted": k.id}


__all__ = ["KeyBody", "NamespaceBody", "NamespacePatch", "QuotasBody", "install_tenancy"]
