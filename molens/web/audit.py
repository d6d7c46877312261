"""The audit routes and the audit stamp of a request (docs/api.md#audit, docs/architecture.md#audit-trail).

``GET /api/v1/audit`` lists the trail newest first (filters ``namespace``, ``actor``, ``action``,
``since``, ``until``; cursor); ``?format=csv`` or ``?format=jsonl`` streams every matching entry
(:mod:`molens.web.export`). Reads come from this node's replica, followers too:
every replica holds the same trail. :func:`request_stamp` is who made the request in progress, for the
``Audited`` wrapper the API puts around what it proposes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

import bottle

from molens.errors import ValidationError
from molens.fsm.audit import ACTIONS, AuditEntry
from molens.fsm.commands import AuditStamp
from molens.fsm.store import AuditFilter
from molens.web import access, export

if TYPE_CHECKING:
    from molens.web.app import Api

_CURSOR_POS_RE = re.compile(r"(?:[0-9a-f]{2}){12}")


class AuditReader(Protocol):
    """The read side of the task store the routes use."""

    def list_audit(
        self, f: AuditFilter, *, cursor: str | None = None, limit: int = 100, scan_budget: int = 20_000,
    ) -> tuple[list[AuditEntry], str | None]: ...


def request_stamp(has_token: bool) -> AuditStamp:
    """Who makes the request in progress: the key authentication named, else ``bootstrap`` on a node
    with ``http.auth_token`` (whoever holds the token) or ``anonymous`` on an open node."""
    env = bottle.request.environ
    actor = env.get(access.ACTOR_KEY)
    if actor is None:
        actor = ("bootstrap", "bootstrap") if has_token else ("anonymous", "anonymous")
    key_id, name = actor
    # the peer's address, not X-Forwarded-For: a client can write any header it likes
    return AuditStamp(key_id=str(key_id), name=str(name), remote_addr=str(env.get("REMOTE_ADDR") or ""))


def install_audit(api: Api) -> None:
    from molens.web.app import PREFIX

    ctx = api.ctx

    def query_filter() -> AuditFilter:
        """The store's filter, with the namespaces the key may read when one name cannot say them
        (a key of several namespaces, no ``?namespace=``): entries of others are left out by the store,
        so a page fills with the key's own. ``?namespace=`` was checked, and refused outside the key's namespaces, by :mod:`molens.web.access`."""
        scope = access.readable()
        ns = api.q_str("namespace")
        if ns is None and scope is not None and len(scope) == 1:
            (ns,) = scope
        action = api.q_str("action")
        if action is not None and action not in ACTIONS:
            raise ValidationError(f"action must be one of {', '.join(ACTIONS)}", "action")
        actor = api.q_str("actor")
        if actor is not None and len(actor) > 200:
            raise ValidationError("actor is a key id or name of at most 200 characters", "actor")
        return AuditFilter(namespace=ns, actor=actor, action=action, since_ms=api.q_ms("since", None),
                           until_ms=api.q_ms("until", None), namespaces=scope if ns is None else None)

    @api.route("GET", f"{PREFIX}/audit")
    def list_audit() -> Any:
        f = query_filter()
        fmt = export.export_format(api)
        if fmt is not None:
            def page(at: str | None) -> tuple[list[dict[str, Any]], str | None]:
                items, nxt = ctx.audit.list_audit(f, cursor=at, limit=export.PAGE, scan_budget=export.PAGE)
                return [a.to_json() for a in items], nxt

            return export.stream("audit", fmt, export.columns("AuditEntry"), export.paged(page))
        items, nxt = ctx.audit.list_audit(f, cursor=api.q_cursor("a", _CURSOR_POS_RE), limit=api.q_limit())
        return 200, {"items": [a.to_json() for a in items], "next_cursor": api.next_cursor("a", nxt)}


__all__ = ["AuditReader", "install_audit", "request_stamp"]
