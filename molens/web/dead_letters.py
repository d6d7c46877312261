"""The dead-letter routes (docs/api.md#dead-letters, docs/architecture.md#dead-letters).

``GET /api/v1/dead-letters`` lists them newest first (filters ``task_id``, ``flow``, ``kind``,
``since``, ``until``; cursor), ``GET .../{id}`` one, ``POST .../{id}/redrive`` delivers its
occurrence again (same ``X-Fire-ID``, attempts continuing), ``POST .../redrive`` does that for every
dead letter matching a filter (at most :data:`MAX_BULK` per request; ``next_cursor`` says where to
go on), ``DELETE .../{id}`` and ``DELETE /api/v1/dead-letters?<filter>`` remove them. Reads come
from this node's replica; writes go through Raft like every other.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from molens.delivery import QUOTA_VERSION
from molens.errors import MolensError, NotFoundError, ValidationError
from molens.fsm.commands import DeleteDeadLetters, RedriveDeadLetters
from molens.fsm.store import DEAD_CURSOR, DEAD_ID
from molens.schema import NAMESPACE_PATTERN, DeadLetter, FailureKind, Reliability, python_pattern
from molens.wallclock import MAX_EPOCH_MS
from molens.web import access, export
from molens.web.body import Body, whole_int
from molens.web.errors import InsufficientStorage, LeaderElsewhere, NoLeader, Unavailable

if TYPE_CHECKING:
    from molens.web.app import Api

MAX_BULK = 10_000
"""Dead letters one bulk redrive or delete request acts on."""
CHUNK = 500
"""Ids per Raft entry of a bulk request."""
_NAMESPACE = re.compile(python_pattern(NAMESPACE_PATTERN))
_FILTER_KEYS = frozenset({"task_id", "flow", "kind", "since", "until", "limit", "namespace"})


class DeadLetterReader(Protocol):
    """The read side of the task store the routes use."""

    def get_dead(self, dead_id: str) -> DeadLetter | None: ...

    def list_dead(
        self, *, task_id: str | None = None, flow: str | None = None, kind: str | None = None,
        since_ms: int | None = None, until_ms: int | None = None, cursor: str | None = None, limit: int = 100,
        scan_budget: int = 20_000, namespaces: frozenset[str] | None = None,
    ) -> tuple[list[DeadLetter], str | None]: ...


def _kind(v: Any) -> str | None:
    if v is None:
        return None
    try:
        return FailureKind(v).value
    except ValueError:
        allowed = ", ".join(k.value for k in FailureKind)
        raise ValidationError(f"kind must be one of {allowed}", "kind") from None


def _check_id(dead_id: str) -> str:
    if not DEAD_ID.fullmatch(dead_id):
        raise NotFoundError(f"dead letter {dead_id[:80]} not found", "id")
    return dead_id


def _redrive_json(dl: DeadLetter) -> dict[str, Any]:
    out = dl.to_json()
    if dl.reliability is Reliability.AT_MOST_ONCE:
        out["warning"] = ("at_most_once: this delivers an occurrence that may already have reached the receiver "
                          "(an operator's explicit decision)")
    return out


def install_dead_letters(api: Api) -> None:
    """Register the routes of this module on ``api``."""
    from molens.web.app import PREFIX, _item, _quote  # app installs this module

    ctx = api.ctx

    def reader() -> DeadLetterReader:
        r: DeadLetterReader = ctx.dead_letters
        return r

    def query_filter() -> dict[str, Any]:
        tid = api.q_str("task_id")
        flow = api.q_str("flow")
        for k, v in (("task_id", tid), ("flow", flow)):
            if v is not None and len(v) > 300:
                raise ValidationError(f"{k} must be at most 300 characters", k)
        since, until = api.q_ms("since", None), api.q_ms("until", None)  # until before since: matches nothing
        return {"task_id": tid, "flow": flow, "kind": _kind(api.q_str("kind")), "since_ms": since, "until_ms": until}

    def body_filter(body: Any) -> tuple[dict[str, Any], int]:
        if not isinstance(body, dict):
            raise ValidationError("the body must be a JSON object: a filter of dead letters", "body")
        extra = set(body) - _FILTER_KEYS
        if extra:
            name = sorted(extra)[0]
            raise ValidationError(f"unknown field {_quote(name)}; a filter has {', '.join(sorted(_FILTER_KEYS))}",
                                  name[:64])
        for k in ("task_id", "flow"):
            if body.get(k) is not None and (not isinstance(body[k], str) or not 0 < len(body[k]) <= 300):
                raise ValidationError(f"{k} must be a string of 1..300 characters", k)
        ms = {}
        for k in ("since", "until"):
            v = body.get(k)
            if v is not None and ((v := whole_int(v)) is None or not 0 <= v <= MAX_EPOCH_MS):
                raise ValidationError(f"{k} must be epoch ms", k)
            ms[k] = v
        limit = whole_int(body.get("limit", MAX_BULK))
        if limit is None or not 1 <= limit <= MAX_BULK:
            raise ValidationError(f"limit must be in 1..{MAX_BULK}", "limit")
        return {"task_id": body.get("task_id"), "flow": body.get("flow"), "kind": _kind(body.get("kind")),
                "since_ms": ms["since"], "until_ms": ms["until"]}, limit

    @api.route("GET", f"{PREFIX}/dead-letters")
    def list_dead_letters() -> Any:
        fmt = export.export_format(api)
        f = query_filter()
        namespaces = access.readable()
        if fmt is not None:
            def page(at: str | None) -> tuple[list[dict[str, Any]], str | None]:
                items, nxt = reader().list_dead(**f, cursor=at, limit=export.PAGE, scan_budget=export.PAGE,
                                                namespaces=namespaces)
                return [d.to_json() for d in items], nxt

            return export.stream("dead-letters", fmt, export.columns("DeadLetter"), export.paged(page))
        items, nxt = reader().list_dead(**f, cursor=api.q_cursor("d", DEAD_CURSOR), limit=api.q_limit(),
                                        namespaces=namespaces)
        return 200, {"items": [d.to_json() for d in items], "next_cursor": api.next_cursor("d", nxt)}

    def dead_or_404(dead_id: str, write: bool = False) -> DeadLetter:
        """The dead letter, if it exists and the request's key may see its namespace; else the same 404.
        A write's 404 is decided again after a read barrier (a deposed leader, or a new one that has not
        applied its predecessor's last writes, would refuse from an older state); one the key may not see
        pays it too, so that its 404 is a missing one's, no sooner."""
        missing = NotFoundError(f"dead letter {dead_id[:80]} not found", "id")
        dl = reader().get_dead(_check_id(dead_id))
        if write and (dl is None or not access.visible(dl.namespace)):
            ctx.read_barrier(ctx.settings.propose_timeout_s)
            dl = reader().get_dead(dead_id)
        if dl is None:
            raise missing
        access.hide(dl.namespace, missing)
        return dl

    @api.route("GET", f"{PREFIX}/dead-letters/<dead_id>")
    def get_dead_letter(dead_id: str) -> tuple[int, Any]:
        return 200, dead_or_404(dead_id).to_json()

    @api.route("POST", f"{PREFIX}/dead-letters/<dead_id>/redrive", write=True, body=Body.NONE)
    def redrive_one(dead_id: str) -> tuple[int, Any]:
        dead_or_404(dead_id, write=True)
        res = _item(api.propose_one(RedriveDeadLetters(ctx.now_ms(), (dead_id,), ctx.replicas_read(QUOTA_VERSION)))[0])
        assert isinstance(res, DeadLetter)
        return 200, _redrive_json(res)

    @api.route("DELETE", f"{PREFIX}/dead-letters/<dead_id>", write=True)
    def delete_one(dead_id: str) -> tuple[int, Any]:
        dead_or_404(dead_id, write=True)
        if api.propose_one(DeleteDeadLetters(ctx.now_ms(), (dead_id,)))[0] is not True:
            raise NotFoundError(f"dead letter {dead_id} not found", "id")
        return 200, {"deleted": 1}

    def matching(f: dict[str, Any], limit: int, namespace: str | None) -> tuple[list[DeadLetter], str | None]:
        """Up to ``limit`` dead letters matching ``f`` (the leader's replica: it has applied every
        write it acknowledged) of the namespaces the request may change (``namespace`` alone when
        given), and the cursor of the rest."""
        out: list[DeadLetter] = []
        cursor = None
        scope = access.readable()
        if namespace is not None:
            scope = frozenset({namespace}) if scope is None or namespace in scope else frozenset()
        while len(out) < limit:
            page, cursor = reader().list_dead(**f, cursor=cursor, limit=min(1_000, limit - len(out)), namespaces=scope)
            out.extend(page)
            if cursor is None:
                break
        return out, cursor

    def bulk(cmd: type[RedriveDeadLetters] | type[DeleteDeadLetters], f: dict[str, Any], limit: int,
             namespace: str | None = None) -> dict[str, Any]:
        found, rest = matching(f, limit, namespace)
        ids = [d.id for d in found]
        done, errors = 0, []
        at_most_once = 0
        interrupted: MolensError | None = None
        for i in range(0, len(ids), CHUNK):
            chunk = tuple(ids[i:i + CHUNK])
            try:
                results = api.propose_one(RedriveDeadLetters(ctx.now_ms(), chunk, ctx.replicas_read(QUOTA_VERSION))
                                          if cmd is RedriveDeadLetters else cmd(ctx.now_ms(), chunk))
            except (LeaderElsewhere, NoLeader, Unavailable, InsufficientStorage) as exc:
                if i == 0:
                    raise  # nothing applied: the request may go again, to the leader
                interrupted = exc  # the chunks before applied, this one and the rest did not: say so
                break
            for did, res in zip(chunk, results, strict=True):
                if isinstance(res, BaseException):
                    errors.append({"id": did, "error": getattr(res, "code", "internal"), "message": str(res)[:300]})
                elif res is False:
                    errors.append({"id": did, "error": "not_found", "message": "gone meanwhile"})
                else:
                    done += 1
                    if isinstance(res, DeadLetter) and res.reliability is Reliability.AT_MOST_ONCE:
                        at_most_once += 1
        out: dict[str, Any] = {"matched": len(ids), "errors": errors[:100], "error_count": len(errors),
                               "more": rest is not None or interrupted is not None}
        if interrupted is not None:
            out["interrupted"] = {"code": interrupted.code, "message": str(interrupted)[:300]}
        if cmd is RedriveDeadLetters:
            out["redriven"] = done
            if at_most_once:
                out["at_most_once"] = at_most_once
                out["warning"] = (f"{at_most_once} at_most_once occurrences redriven: they may already have "
                                  "reached their receivers (an operator's explicit decision)")
        else:
            out["deleted"] = done
        return out

    @api.route("POST", f"{PREFIX}/dead-letters/redrive", write=True)
    def redrive_matching() -> tuple[int, Any]:
        body = api.read_json()
        f, limit = body_filter(body)
        ns = body.get("namespace")  # the filter's namespace (a namespace-level request: 403 outside the key's)
        if ns is not None:
            if not isinstance(ns, str) or not _NAMESPACE.match(ns):
                raise ValidationError(f"namespace must match {NAMESPACE_PATTERN.strip('^$')}", "namespace")
            access.require(ns)
        return 200, bulk(RedriveDeadLetters, f, limit, ns)

    @api.route("DELETE", f"{PREFIX}/dead-letters", write=True)
    def delete_matching() -> tuple[int, Any]:
        f = query_filter()
        every = api.q_raw("all")
        if every is not None and every != "true":
            raise ValidationError(f"all must be true (or left out), got {every[:40]!r}", "all")
        if all(v is None for v in f.values()) and every is None and api.q_raw("namespace") is None:
            raise ValidationError("give a filter (task_id, flow, kind, since, until, namespace) or all=true", "all")
        limit = api.q_int("limit", MAX_BULK, 1, MAX_BULK)
        assert limit is not None
        return 200, bulk(DeleteDeadLetters, f, limit)


__all__ = ["MAX_BULK", "DeadLetterReader", "install_dead_letters"]
