"""Flow routes of the REST app (docs/api.md#flows, docs/architecture.md#flow-control). Installed by
:func:`molens.web.app.build_api`.

- ``PUT /api/v1/flows/{key}`` ``{"rate_per_s", "burst", "concurrency", "paused", "adaptive"}``: the
  flow's limits, replaced whole (a field left out is unlimited / false), through Raft (``PutFlow``);
  a bad field is a ``400`` naming it and nothing is written.
- ``GET /api/v1/flows``: every flow with settings and every flow the leader saw fire in the last
  minute, with the leader's live figures (``rate``, ``in_flight``, ``queued``, ``throttled_until``,
  ``effective_rate_per_s``). A follower passes the request to the leader (as the wheel view does);
  with no leader it answers from its replica, live figures ``null``.
- ``GET``/``DELETE /api/v1/flows/{key}``, ``POST /api/v1/flows/{key}/pause|resume`` (only the
  ``paused`` flag changes, in the state machine: a concurrent edit of the limits is never undone).

A flow of a namespace (``<namespace>~<flow_key>``) is that namespace's: a key of some namespaces
lists, reads and (a writer) changes those of its namespaces; a shared flow needs a key of every
namespace (:mod:`molens.web.access`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import bottle
import msgspec

from molens.delivery import NAMESPACE_FLOWS_VERSION
from molens.fsm.commands import DeleteFlow, FlowSettings, PutFlow
from molens.model import IllegalTransitionError, MolensError, NotFoundError, ValidationError
from molens.schedule.flows import FlowState
from molens.schema import DEFAULT_NAMESPACE, FLOW_ID_PATTERN, whole_numbers
from molens.web import access
from molens.web.body import Body
from molens.web.errors import InternalError
from molens.web.observability import from_leader

if TYPE_CHECKING:
    from molens.web.app import Api

PREFIX = "/api/v1"
MAX_RATE_PER_S = 1_000_000
MAX_BURST = 1_000_000
MAX_CONCURRENCY = 1_000_000
_KEY = re.compile(FLOW_ID_PATTERN)


class FlowLimitsBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The body of ``PUT /flows/{key}``."""

    rate_per_s: Annotated[
        float, msgspec.Meta(gt=0, le=MAX_RATE_PER_S, description="Fires per second (token bucket); null: no limit")
    ] | None = None
    burst: Annotated[
        int,
        msgspec.Meta(ge=1, le=MAX_BURST, description="Fires at once after an idle spell (default 1: evenly spaced)"),
    ] | None = None
    concurrency: Annotated[
        int,
        msgspec.Meta(ge=1, le=MAX_CONCURRENCY, description="Fires in flight at once, across all workers; null: no limit"),
    ] | None = None
    paused: Annotated[bool, msgspec.Meta(description="Hold every fire of the flow until resumed")] = False
    adaptive: Annotated[
        bool, msgspec.Meta(description="Back the rate off on 429/503/timeouts and ramp it back (AIMD); needs rate_per_s")
    ] = False


class FlowView(msgspec.Struct, kw_only=True):
    """One flow as ``GET /flows`` shows it."""

    key: str
    configured: Annotated[bool, msgspec.Meta(description="The flow has settings (PUT); else it is unlimited")]
    rate_per_s: float | None
    burst: int | None
    concurrency: int | None
    paused: bool
    adaptive: bool
    updated_at: Annotated[int | None, msgspec.Meta(description="epoch ms of the last change of the settings")]
    live: Annotated[bool, msgspec.Meta(description="The figures below come from the leader")]
    rate: Annotated[int | None, msgspec.Meta(description="Fires the leader let go in the last second")]
    in_flight: Annotated[int | None, msgspec.Meta(description="Fires planned and not yet answered")]
    queued: Annotated[int | None, msgspec.Meta(description="Due fires held back by the limits or the pause")]
    throttled_until: Annotated[
        int | None, msgspec.Meta(description="epoch ms a receiver's Retry-After holds the flow until (0: not held)")
    ]
    effective_rate_per_s: Annotated[
        float | None, msgspec.Meta(description="The rate enforced now (an adaptive flow's backed-off rate)")
    ]


class FlowList(msgspec.Struct):
    items: list[FlowView]


NEED_RATE: dict[str, tuple[Any, str]] = {
    "burst": (None, ""),
    "adaptive": (False, " (the rate it backs off from and ramps back to)"),
}
"""The limits that need ``rate_per_s``: each with its value when not set, and why it needs it."""


def flow_schemas() -> dict[str, Any]:
    """JSON Schema of ``FlowLimitsBody``, ``FlowView`` and ``FlowList`` (OpenAPI components), the
    body's :data:`NEED_RATE` rule stated: ``rate_per_s`` given, or none of those set (in an
    ``allOf``, which client generators pass over rather than make a union of two models)."""
    comps: dict[str, Any] = msgspec.json.schema_components(
        (FlowLimitsBody, FlowView, FlowList), ref_template="#/components/schemas/{name}"
    )[1]
    comps["FlowLimitsBody"]["allOf"] = [{"anyOf": [
        {"required": ["rate_per_s"], "properties": {"rate_per_s": {"type": "number"}}},
        {"properties": {name: {"enum": [unset]} for name, (unset, _) in NEED_RATE.items()}},
    ]}]
    return comps


_BODY = msgspec.json.Decoder(FlowLimitsBody)
_FIELDS = tuple(f.encode_name for f in msgspec.structs.fields(FlowLimitsBody))


MAX_NAMESPACE_FLOWS = 1_000
"""The most flows with settings one namespace's own flows (``<namespace>~<flow_key>``) may have: a
writer of a namespace sets them, and every setting is replicated and held by the leader's flow
control, so one namespace cannot fill either."""


def check_key(key: str) -> str:
    if not _KEY.fullmatch(key):
        raise ValidationError(f"a flow key must match {FLOW_ID_PATTERN}, got {key[:64]!a}", "key")
    return key


_TYPE_WORDS = {"float": "a number", "int": "an integer", "bool": "true or false", "str": "a string",
               "null": "null", "object": "an object", "array": "an array"}
_EXPECTED = re.compile(r"Expected `([^`]+)`(?:, got `([^`]+)`)?(.*?) - at `\$\.([A-Za-z_]+)`")


def _words(types: str) -> str:
    return " or ".join(_TYPE_WORDS.get(t.strip(), t.strip()) for t in types.split("|"))


def _body_error(msg: str) -> ValidationError:
    """msgspec's message in the API's words: ``rate_per_s must be a number > 0.0``, ``burst must be
    an integer or null, got a string``, ``unknown field `x```."""
    m = _EXPECTED.search(msg)
    if m is not None:
        want, got, bound, field = m.groups()
        text = f"{field} must be {_words(want)}{bound.rstrip()}" + (f", got {_words(got)}" if got else "")
        return ValidationError(text, field)
    m = re.search(r"unknown field `([^`]{1,64})`", msg)
    if m is not None:
        return ValidationError(f"unknown field {m.group(1)!r}; a flow has {', '.join(_FIELDS)}", m.group(1))
    if msg.startswith("Expected `object`"):
        return ValidationError("the body must be a JSON object of flow limits", "body")
    return ValidationError(msg, "body")


def decode_limits(body: bytes) -> FlowSettings:
    """A ``PUT /flows/{key}`` body as settings; ``ValidationError`` naming the first bad field."""
    try:
        b = _BODY.decode(body)
    except msgspec.ValidationError as e:
        if "got `float`" in str(e) and (ints := whole_numbers(body, frozenset())):
            return decode_limits(ints)
        raise _body_error(str(e)) from None
    except msgspec.DecodeError as e:
        raise ValidationError(f"request body is not valid JSON: {e}", "body") from None
    for name, (unset, why) in NEED_RATE.items():
        if getattr(b, name) != unset and b.rate_per_s is None:
            raise ValidationError(f"{name} needs rate_per_s{why}", name)
    return FlowSettings(
        rate_per_s=b.rate_per_s, burst=b.burst, concurrency=b.concurrency, paused=b.paused, adaptive=b.adaptive,
    )


def view(key: str, fs: FlowSettings | None, live: FlowState | None, leading: bool) -> FlowView:
    s = fs or FlowSettings()
    return FlowView(
        key=key, configured=fs is not None, rate_per_s=s.rate_per_s, burst=s.burst, concurrency=s.concurrency,
        paused=s.paused, adaptive=s.adaptive, updated_at=s.updated_ms if fs is not None else None, live=leading,
        rate=(live.rate if live else 0) if leading else None,
        in_flight=(live.in_flight if live else 0) if leading else None,
        queued=(live.queued if live else 0) if leading else None,
        throttled_until=(live.throttled_until_ms if live else 0) if leading else None,
        effective_rate_per_s=(live.effective_rate_per_s if live else s.rate_per_s) if leading else None,
    )


def _settings(res: Any) -> FlowSettings:
    if isinstance(res, MolensError):
        raise res
    if not isinstance(res, FlowSettings):
        raise InternalError(f"the state machine failed: {type(res).__name__}")
    return res


def install_flows(api: Api) -> None:
    """Register the routes of this module on ``api``."""
    ctx = api.ctx

    def one(key: str, fs: FlowSettings | None) -> FlowView:
        states = ctx.flow_states()
        live = next((s for s in states or () if s.key == key), None)
        return view(key, fs, live, states is not None)

    def room_for(key: str) -> None:
        """A namespace's own flow that has no settings yet: refused (409) when the namespace has
        :data:`MAX_NAMESPACE_FLOWS` with settings already (read from this node's replica), and
        ``default~`` (400: no task's flow is named so, the default namespace's keys are bare; one
        set before this check can still be read, changed and deleted). The count is this node's
        replica's, not the log's: requests racing each other may pass it by a few."""
        ns = access.flow_namespace(key)
        if ns is None or ctx.get_flow(key) is not None:
            return
        if ns == DEFAULT_NAMESPACE:
            raise ValidationError(f"the default namespace's flows have bare keys (its tasks' flow_key): "
                                  f"{key[len(ns) + 1:]!a}, not {key!a}", "key")
        prefix = ns + "~"
        held = sum(1 for k, _ in ctx.scan_flows() if k.startswith(prefix))
        if held >= MAX_NAMESPACE_FLOWS:
            raise IllegalTransitionError(f"namespace {ns} has {held} flows with settings, the most it may have; "
                                         "delete one first", "key", code="conflict")

    @api.route("GET", f"{PREFIX}/flows")
    def list_flows() -> tuple[int, Any] | bottle.HTTPResponse:
        states = ctx.flow_states()
        li = ctx.leader_info()
        if states is None and li.leader_url and not li.is_leader:
            return from_leader(li.leader_url)
        configured = dict(ctx.scan_flows())
        live = {s.key: s for s in states or ()}
        keys = sorted(set(configured) | set(live))
        mine = access.principal().namespaces
        if mine is not None:  # a key of some namespaces: their own flows
            keys = [k for k in keys if access.flow_namespace(k) in mine]
        items = [view(k, configured.get(k), live.get(k), states is not None) for k in keys]
        return 200, msgspec.json.encode(FlowList(items))

    @api.route("GET", f"{PREFIX}/flows/<key>")
    def get_flow(key: str) -> tuple[int, Any] | bottle.HTTPResponse:
        check_key(key)
        missing = NotFoundError(f"flow {key} has no settings and no fires now", "key")
        access.see_flow(key, missing)
        li = ctx.leader_info()
        if ctx.flow_states() is None and li.leader_url and not li.is_leader:
            return from_leader(li.leader_url)
        fs = ctx.get_flow(key)
        v = one(key, fs)
        if fs is None and not v.in_flight and not v.queued and not v.throttled_until:
            raise missing
        return 200, msgspec.json.encode(v)

    @api.route("PUT", f"{PREFIX}/flows/<key>", write=True)
    def put_flow(key: str) -> tuple[int, Any]:
        check_key(key)
        access.change_flow(key)
        fs = decode_limits(api.read_body())
        room_for(key)
        res = _settings(api.propose_one(PutFlow(ctx.now_ms(), key, fs, False, ctx.replicas_read(NAMESPACE_FLOWS_VERSION)))[0])
        return 200, msgspec.json.encode(one(key, res))

    @api.route("DELETE", f"{PREFIX}/flows/<key>", write=True)
    def delete_flow(key: str) -> tuple[int, Any]:
        check_key(key)
        access.change_flow(key)
        res = api.propose_one(DeleteFlow(ctx.now_ms(), key))[0]
        if isinstance(res, MolensError):
            raise res
        return 200, msgspec.json.encode(one(key, None))

    def set_paused(key: str, paused: bool) -> tuple[int, Any]:
        check_key(key)
        access.change_flow(key)
        room_for(key)
        res = _settings(api.propose_one(PutFlow(ctx.now_ms(), key, FlowSettings(paused=paused), True,
                                                ctx.replicas_read(NAMESPACE_FLOWS_VERSION)))[0])
        return 200, msgspec.json.encode(one(key, res))

    @api.route("POST", f"{PREFIX}/flows/<key>/pause", write=True, body=Body.NONE)
    def pause_flow(key: str) -> tuple[int, Any]:
        return set_paused(key, True)

    @api.route("POST", f"{PREFIX}/flows/<key>/resume", write=True, body=Body.NONE)
    def resume_flow(key: str) -> tuple[int, Any]:
        check_key(key)
        access.change_flow(key)
        if ctx.get_flow(key) is None:  # nothing paused it: no settings to write (pause makes some) ...
            ctx.read_barrier(ctx.settings.propose_timeout_s)  # ... unless this replica is behind
            if ctx.get_flow(key) is None:
                return 200, msgspec.json.encode(one(key, None))
        return set_paused(key, False)


__all__ = ["MAX_NAMESPACE_FLOWS", "NEED_RATE", "FlowLimitsBody", "FlowList", "FlowView", "check_key", "decode_limits", "flow_schemas", "install_flows"]
