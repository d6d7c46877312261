"""Who may do what: authentication and authorization of every API request, decided here and only here
(docs/architecture.md#authorization).

:data:`RULES` names, for every route registered through :meth:`molens.web.app.Api.route`, the
:class:`Rule` it needs; a route missing from it cannot be registered (``KeyError`` at start), so a
new route cannot be forgotten. :meth:`Access.admit` runs before the handler (and so before any
command reaches Raft): it authenticates the bearer key, checks the role against the rule, and for a
list reads ``?namespace=``. What it decided stays in the request's WSGI environ, where the loaders of
named objects and the list filters ask :func:`visible` / :func:`readable` / :func:`require`.

The rules:

- ``admin`` does everything; ``writer`` creates and changes tasks, dead letters and the own flows
  of its namespaces and reads them; ``reader`` reads them. A write by a reader is ``403``.
- A named object (task, dead letter, namespace) outside the key's namespaces is ``404`` with the
  very body a missing one gets; a namespace-level request (a create naming the namespace, a list's
  ``?namespace=``) outside them is ``403 forbidden``. Lists leave out other namespaces' objects.
- Node-wide views (``/stats``, ``/stats/urls``, ``/metrics``, the time wheel) need a key of all
  namespaces (``["*"]``). A flow of a namespace (``<namespace>~<flow_key>``, the flow its tasks'
  ``flow_key`` names) is that namespace's object: a key of it reads it (``GET /api/v1/flows`` lists
  the key's namespaces' flows) and a writer of it changes it; any other flow (a receiver's
  ``host:port``, a default-namespace ``flow_key``) is shared by every namespace, so node-wide. Cluster, membership, leadership, namespaces' settings and keys: an
  admin key of every namespace.
- ``GET /api/v1/whoami`` needs a valid key of any role (on an open node, none): it answers who the
  key is, so the console can sign in and offer only what the role may do. So does
  ``GET /api/v1/cluster/leader``: who leads and its address, as a follower's ``307`` tells any key
  that writes to it, so every key's console can move to the leader.
- Open routes (health, readiness, the OpenAPI document, the test endpoints) need no key.

Keys: ``http.auth_token`` is the bootstrap admin key (id ``bootstrap``, all namespaces, never
stored); keys made with ``POST /api/v1/keys`` are replicated records (:mod:`molens.fsm.tenancy`),
looked up by the id their secret carries (:mod:`molens.web.keys`); a key this replica has not seen
is looked up again after a read barrier, so a key works on every node as soon as its ``POST``
is answered. A node with no ``auth_token`` is
open: a request without a key acts as an anonymous admin (a key sent is still checked, and acts as
itself). A GET of an export may carry a one-time ``?ticket=`` instead of a key (a download link
cannot carry a header): it acts as the key that asked ``POST /api/v1/exports`` for it, on that node,
for that path and query, once, within a minute (:mod:`molens.web.export`); a bad ticket counts as a
bad key. The actor of each request is left in ``environ["molens.actor"]`` as ``(key id, name)``.
Last-used times are kept per node in memory (a Raft entry per request would cost a consensus round
per read): ``GET /api/v1/keys`` shows this node's.
"""

from __future__ import annotations

import enum
import hmac
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import bottle

from molens.errors import MolensError, NotFoundError, ValidationError
from molens.fsm import tenancy
from molens.fsm.tenancy import ALL_NAMESPACES, KeyRole
from molens.schema import NAMESPACE_PATTERN, python_pattern
from molens.web import export, keys
from molens.web.cursors import cursor_key
from molens.web.errors import Forbidden, TooManyRequests, Unauthorized

log = logging.getLogger(__name__)

ACTOR_KEY = "molens.actor"
KEY_BARRIER_S = 2.0
"""How long a node waits to learn of a key it has not seen before refusing it (a read barrier)."""
"""WSGI environ key: ``(key id, key name)`` of the request's authenticated actor."""
if TYPE_CHECKING:
    from molens.web.api_context import ApiContext

_PRINCIPAL_KEY = "molens.principal"
_SCOPE_KEY = "molens.namespaces"
_NAMESPACE_RE = re.compile(python_pattern(NAMESPACE_PATTERN))
_NODE_WIDE = "node-wide: only a key of every namespace (\"*\") may do this"


MIN_TOKEN_CHARS = 16
"""A bootstrap token shorter than this is warned about at start (it is still taken)."""


class Need(enum.Enum):
    """What a route needs of the key."""

    OPEN = "open"
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


class Where(enum.Enum):
    """Where a route's namespace is found."""

    NONE = "none"
    """No namespace: the role decides alone (admin routes, open routes)."""
    QUERY = "query"
    """A list: ``?namespace=`` (omitted: every namespace the key may read)."""
    BODY = "body"
    """A create: the body names it; the handler calls :func:`require`."""
    OBJECT = "object"
    """A named object's: its loader answers 404 unless :func:`visible`."""
    NODE = "node"
    """Node-wide: only a key of all namespaces."""
    FLOW = "flow"
    """A flow: one of a namespace (``<namespace>~<flow_key>``) is that namespace's object, any other
    is node-wide; the handler calls :func:`see_flow` / :func:`change_flow`, and a list shows a key
    of some namespaces only their flows (:func:`flow_namespace`)."""


@dataclass(frozen=True, slots=True)
class Rule:
    need: Need
    where: Where = Where.NONE


OPEN = Rule(Need.OPEN)
ADMIN = Rule(Need.ADMIN, Where.NODE)
"""Admin routes act on the whole cluster (keys, namespaces, membership): an admin key of every
namespace only, so a key limited to some namespaces can never make itself a wider one."""
_P = "/api/v1"

RULES: dict[tuple[str, str], Rule] = {
    ("POST", f"{_P}/tasks"): Rule(Need.WRITE, Where.BODY),
    ("POST", f"{_P}/tasks/batch"): Rule(Need.WRITE, Where.BODY),
    ("GET", f"{_P}/tasks"): Rule(Need.READ, Where.QUERY),
    ("GET", f"{_P}/tasks/{{task_id}}"): Rule(Need.READ, Where.OBJECT),
    ("PATCH", f"{_P}/tasks/{{task_id}}"): Rule(Need.WRITE, Where.OBJECT),
    ("DELETE", f"{_P}/tasks/{{task_id}}"): Rule(Need.WRITE, Where.OBJECT),
    ("POST", f"{_P}/tasks/{{task_id}}/pause"): Rule(Need.WRITE, Where.OBJECT),
    ("POST", f"{_P}/tasks/{{task_id}}/resume"): Rule(Need.WRITE, Where.OBJECT),
    ("POST", f"{_P}/tasks/{{task_id}}/trigger"): Rule(Need.WRITE, Where.OBJECT),
    ("POST", f"{_P}/tasks/{{task_id}}/backfill"): Rule(Need.WRITE, Where.OBJECT),
    ("GET", f"{_P}/tasks/{{task_id}}/executions"): Rule(Need.READ, Where.OBJECT),
    ("GET", f"{_P}/executions"): Rule(Need.READ, Where.QUERY),
    ("GET", f"{_P}/dead-letters"): Rule(Need.READ, Where.QUERY),
    ("GET", f"{_P}/dead-letters/{{dead_id}}"): Rule(Need.READ, Where.OBJECT),
    ("POST", f"{_P}/dead-letters/{{dead_id}}/redrive"): Rule(Need.WRITE, Where.OBJECT),
    ("DELETE", f"{_P}/dead-letters/{{dead_id}}"): Rule(Need.WRITE, Where.OBJECT),
    ("POST", f"{_P}/dead-letters/redrive"): Rule(Need.WRITE, Where.BODY),
    ("DELETE", f"{_P}/dead-letters"): Rule(Need.WRITE, Where.QUERY),
    ("GET", f"{_P}/audit"): Rule(Need.READ, Where.QUERY),
    ("POST", f"{_P}/exports"): Rule(Need.READ),
    ("GET", f"{_P}/flows"): Rule(Need.READ, Where.FLOW),
    ("GET", f"{_P}/flows/{{key}}"): Rule(Need.READ, Where.FLOW),
    ("PUT", f"{_P}/flows/{{key}}"): Rule(Need.WRITE, Where.FLOW),
    ("DELETE", f"{_P}/flows/{{key}}"): Rule(Need.WRITE, Where.FLOW),
    ("POST", f"{_P}/flows/{{key}}/pause"): Rule(Need.WRITE, Where.FLOW),
    ("POST", f"{_P}/flows/{{key}}/resume"): Rule(Need.WRITE, Where.FLOW),
    ("GET", f"{_P}/stats"): Rule(Need.READ, Where.NODE),
    ("GET", f"{_P}/stats/urls"): Rule(Need.READ, Where.NODE),
    ("GET", f"{_P}/stats/series"): Rule(Need.READ, Where.NODE),
    ("GET", "/metrics"): Rule(Need.READ, Where.NODE),
    ("GET", f"{_P}/timewheel/distribution"): Rule(Need.READ, Where.NODE),
    ("GET", f"{_P}/timewheel/distribution.png"): Rule(Need.READ, Where.NODE),
    ("GET", f"{_P}/schedule/preview"): Rule(Need.READ),
    ("GET", f"{_P}/whoami"): Rule(Need.READ),
    ("GET", f"{_P}/cluster/status"): ADMIN,
    ("GET", f"{_P}/cluster/leader"): Rule(Need.READ, Where.NONE),
    ("GET", f"{_P}/cluster/stats"): ADMIN,
    ("POST", f"{_P}/cluster/transfer-leader"): ADMIN,
    ("GET", f"{_P}/namespaces"): Rule(Need.READ, Where.QUERY),
    ("POST", f"{_P}/namespaces"): ADMIN,
    ("GET", f"{_P}/namespaces/{{name}}"): Rule(Need.READ, Where.OBJECT),
    ("PATCH", f"{_P}/namespaces/{{name}}"): ADMIN,
    ("DELETE", f"{_P}/namespaces/{{name}}"): ADMIN,
    ("GET", f"{_P}/keys"): ADMIN,
    ("POST", f"{_P}/keys"): ADMIN,
    ("GET", f"{_P}/keys/{{key_id}}"): ADMIN,
    ("DELETE", f"{_P}/keys/{{key_id}}"): ADMIN,
    ("POST", f"{_P}/test/callback"): OPEN,
    ("POST", f"{_P}/test/ack"): OPEN,
    ("GET", f"{_P}/openapi.json"): OPEN,
    ("GET", "/healthz"): OPEN,
    ("GET", "/readyz"): OPEN,
}
"""Every route's rule, by (method, OpenAPI path): the one table of who may call what."""


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated key of a request."""

    key_id: str
    name: str
    role: KeyRole
    namespaces: frozenset[str] | None
    """The namespaces it may act in; None for all."""
    cursor_key: bytes = b""
    """What its list cursors are sealed under (:mod:`molens.web.cursors`): a key of some namespaces
    must not read another namespace's ids in them; empty (not sealed) for a key of every namespace."""

    def may(self, ns: str) -> bool:
        return self.namespaces is None or ns in self.namespaces


ANONYMOUS = Principal("anonymous", "anonymous", KeyRole.ADMIN, None)
BOOTSTRAP = Principal("bootstrap", "bootstrap", KeyRole.ADMIN, None)
_RANK = {KeyRole.READER: 0, KeyRole.WRITER: 1, KeyRole.ADMIN: 2}
_NEED_RANK = {Need.READ: 0, Need.WRITE: 1, Need.ADMIN: 2}


def principal_of(key: tenancy.ApiKey) -> Principal:
    ns = None if ALL_NAMESPACES in key.namespaces else frozenset(key.namespaces)
    return Principal(key.id, key.name, key.role, ns, b"" if ns is None else cursor_key(key.salt))


class Access:
    """Authenticates requests and applies :data:`RULES` (see the module docstring)."""

    def __init__(self, ctx: ApiContext, token: str) -> None:
        self.ctx = ctx
        self._token = token.encode() if token else b""
        self.brake = keys.FailureBrake()
        self._last_used: dict[str, int] = {}
        self._known: dict[str, tuple[bytes, tenancy.ApiKey, Principal, bytes]] = {}
        """key id -> (its record as read, the record, its principal, the secret last verified against
        it): a record read again unchanged is not decoded again (it is still read on every request:
        a revoked key is gone at once), and a secret equal to the one verified is not hashed again
        (compared in constant time, as the bootstrap token is: the keyed hash was half of what a key
        cost a busy leader)."""
        self._lock = threading.Lock()
        self.tickets: export.Tickets[Principal] = export.Tickets(owner=lambda p: p.key_id)
        """One-time export links (:mod:`molens.web.export`): a ticket authenticates as the key that minted it."""
        if not token:
            log.warning("http.auth_token is not set: the API is open, a request without a key acts as an admin")
        elif len(token) < MIN_TOKEN_CHARS:
            log.warning("http.auth_token is %d characters: the bootstrap token is an admin key that can be guessed "
                        "from any address; use %d or more random characters", len(token), MIN_TOKEN_CHARS)

    @property
    def open(self) -> bool:
        """Whether the node has no ``http.auth_token`` (a request without a key acts as an admin)."""
        return not self._token

    def last_used_ms(self, key_id: str) -> int | None:
        """When this node last admitted a request with key ``key_id`` (None: not since it started)."""
        return self._last_used.get(key_id)

    def admit(self, rule: Rule) -> None:
        """Authenticate the request and check ``rule``; raises 401/403/429, or records the
        principal, the actor and, for a list, the namespaces it may see."""
        env = bottle.request.environ
        if rule.need is Need.OPEN:
            return
        p = self._authenticate(env)
        env[_PRINCIPAL_KEY] = p
        env[ACTOR_KEY] = (p.key_id, p.name)
        if _RANK[p.role] < _NEED_RANK[rule.need]:
            raise Forbidden(f"a {p.role.value} key may not do this")
        if rule.where is Where.NODE and p.namespaces is not None:
            raise Forbidden(_NODE_WIDE)
        if rule.where is Where.QUERY:
            raw = bottle.request.query.get("namespace")
            if raw is not None:
                if not _NAMESPACE_RE.match(raw):
                    raise ValidationError(f"namespace must match {NAMESPACE_PATTERN.strip('^$')}", "namespace")
                if not p.may(raw):
                    raise Forbidden(f"this key may not act in namespace {raw}")
                env[_SCOPE_KEY] = frozenset({raw})
            else:
                env[_SCOPE_KEY] = p.namespaces

    def _authenticate(self, env: dict[str, object]) -> Principal:
        h = str(env.get("HTTP_AUTHORIZATION", ""))
        scheme, _, secret = h.partition(" ")
        secret = secret.strip()
        addr = str(env.get("REMOTE_ADDR", ""))
        if scheme.lower() != "bearer" or not secret:
            ticket = bottle.request.query.get("ticket") if env.get("REQUEST_METHOD") == "GET" else None
            if ticket:
                return self._by_ticket(env, str(ticket), addr)
            if not self._token:
                return ANONYMOUS
            raise Unauthorized()
        now = time.monotonic()
        raw = secret.encode("latin-1")  # the header's bytes as sent, never decoded as UTF-8
        kid = keys.key_id_of(secret)
        rec = self.ctx.get_meta(tenancy.KEY_PREFIX + kid) if kid is not None else None
        known = self._known.get(kid) if kid is not None and rec is not None else None
        if kid is not None and known is not None and known[0] == rec and known[3] and hmac.compare_digest(raw, known[3]):
            # exactly a secret this node verified, of a key that still stands: not held back with the
            # guesses from its address (behind one proxy or NAT), which never match one. The
            # bootstrap token is always braked: comparing it first would answer guesses unbraked
            with self._lock:
                self._last_used[kid] = int(time.time() * 1000)
            return known[2]
        self._braked(addr, now)
        if self._token and hmac.compare_digest(raw, self._token):
            return BOOTSTRAP
        if kid is not None and rec is None and kid not in self._known:
            rec = self._after_barrier(kid, addr, now)
        if kid is None or rec is None:
            if kid is not None and kid in self._known:  # revoked
                with self._lock:
                    self._known.pop(kid, None)
            self.brake.failed(addr, now)
            raise Unauthorized()
        known = self._known.get(kid)
        if known is None or known[0] != rec:
            k = tenancy.decode_key(rec)
            known = (rec, k, principal_of(k), b"")
        if not (known[3] and hmac.compare_digest(raw, known[3])):
            if not keys.verify(known[1], secret):
                self.brake.failed(addr, now)
                raise Unauthorized()
            known = (*known[:3], raw)
            with self._lock:
                self._known[kid] = known
        with self._lock:
            self._last_used[kid] = int(time.time() * 1000)
        return known[2]

    def _after_barrier(self, kid: str, addr: str, now: float) -> bytes | None:
        """The record of a key this replica has never seen, read again after a read barrier: a key
        made a moment ago is committed on the leader before this replica may have applied it, and a
        client that uses its new key at once must not be refused by whichever node it reaches. Bad
        keys pay the barrier too, which the brake bounds per address; one that cannot be confirmed
        (no leader, no quorum) counts as a bad key and is answered ``503``, which clients retry."""
        try:
            self.ctx.read_barrier(min(KEY_BARRIER_S, self.ctx.settings.propose_timeout_s))
        except MolensError:
            self.brake.failed(addr, now)
            raise
        return self.ctx.get_meta(tenancy.KEY_PREFIX + kid)

    def _braked(self, addr: str, now: float) -> None:
        wait = self.brake.wait_s(addr, now)
        if wait:
            raise TooManyRequests("too many bad keys from this address; wait", wait)

    def _by_ticket(self, env: dict[str, object], ticket: str, addr: str) -> Principal:
        """The key a one-time export ticket stands in for, if it was minted for this very request and
        the key still exists (a key revoked since is refused like a bad key)."""
        now = time.monotonic()
        self._braked(addr, now)
        p = self.tickets.take(ticket, bottle.request.path, str(env.get("QUERY_STRING", "")))
        if p is not None and p.key_id not in (ANONYMOUS.key_id, BOOTSTRAP.key_id):
            if self.ctx.get_meta(tenancy.KEY_PREFIX + p.key_id) is None:
                p = None
        if p is None:
            self.brake.failed(addr, now)
            raise Unauthorized()
        return p


def principal() -> Principal:
    """The request's principal (anonymous admin on an open route or node)."""
    p = bottle.request.environ.get(_PRINCIPAL_KEY)
    return p if isinstance(p, Principal) else ANONYMOUS


def visible(ns: str) -> bool:
    """Whether the request's key may see objects of namespace ``ns``."""
    return principal().may(ns)


def readable() -> frozenset[str] | None:
    """The namespaces a list shows (``?namespace=`` or the key's); None for every namespace."""
    env = bottle.request.environ
    if _SCOPE_KEY in env:
        scope = env[_SCOPE_KEY]
        return scope if isinstance(scope, frozenset) else None
    return principal().namespaces


def require(ns: str) -> None:
    """A namespace-level request (a create) in ``ns``: 403 unless the key may act there."""
    if not visible(ns):
        raise Forbidden(f"this key may not act in namespace {ns}")


def flow_namespace(key: str) -> str | None:
    """The namespace whose own flow ``key`` is (``<namespace>~<flow_key>``: ``molens.schema.flow_id``);
    None for a flow every namespace shares (a receiver's ``host:port``, a default-namespace ``flow_key``)."""
    ns, sep, _ = key.partition("~")
    return ns if sep else None


def see_flow(key: str, missing: NotFoundError) -> None:
    """A read of flow ``key``: a namespace's flow is that namespace's object (``missing``, the very
    answer of an absent one, for a key of others); a shared flow needs a key of every namespace (403)."""
    ns = flow_namespace(key)
    if ns is None:
        _node_wide()
    else:
        hide(ns, missing)


def change_flow(key: str) -> None:
    """A change of flow ``key``: a namespace's flow needs a key of that namespace (403 otherwise, as a
    create in another namespace); a shared flow a key of every namespace."""
    ns = flow_namespace(key)
    if ns is None:
        _node_wide()
    else:
        require(ns)


def _node_wide() -> None:
    if principal().namespaces is not None:
        raise Forbidden(_NODE_WIDE)


def hide(ns: str, missing: NotFoundError) -> None:
    """A named object of namespace ``ns``: raise ``missing`` (the very error of an absent one)
    unless the key may see it."""
    if not visible(ns):
        raise missing


__all__ = ["ACTOR_KEY", "ANONYMOUS", "RULES", "Access", "Need", "Principal", "Rule", "Where", "change_flow",
           "flow_namespace", "hide", "principal", "readable", "require", "see_flow", "visible"]
