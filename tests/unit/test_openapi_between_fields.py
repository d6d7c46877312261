"""The OpenAPI document states the rules between a request's fields exactly as the server checks
them: a task (or flow limits) the document calls valid is accepted and one it calls invalid is
refused, over every combination of the fields those rules read. Values are chosen so that what
JSON Schema cannot state (the clock, the callback host policy, cron expressions, ``max_retries``
equal to ``retry.max_retries``) passes."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from molens.errors import ValidationError
from molens.model import CallbackPolicy, Limits, TaskType, decode_update, validate_create
from molens.web.flows import decode_limits
from molens.web.openapi import document

NOW = 1_700_000_000_000
URL = "http://127.0.0.1:18081/api/v1/test/callback"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ABSENT = object()

_CHOICES: dict[str, list[Any]] = {
    "interval_ms": [500, 5_000],
    "run_at": [NOW + 60_000],
    "cron_expr": ["*/5 * * * *"],
    "start_at": [NOW + 1_000],
    "end_at": [NOW + 10**9],
    "max_runs": [5],
    "catchup": ["one", "all"],
    "catchup_window_ms": [3_600_000, 60_000],
    "overlap": ["skip", "allow"],
    "ack_url": [URL],
    "reliability": ["at_least_once", "at_most_once"],
    "max_retries": [2],  # retry.max_retries must equal it: a comparison the document leaves to the server
    "retry": [{}, {"max_retries": 2}, {"max_retries": None}],
    "traceparent": [TRACE, "00-" + "0" * 32 + TRACE[35:], TRACE[:36] + "0" * 16 + TRACE[52:]],
}


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": document()["components"]})


TASK_CREATE, TASK_UPDATE, FLOW_LIMITS = (_validator(n) for n in ("TaskCreate", "TaskUpdate", "FlowLimitsBody"))


@st.composite
def _fields(draw: st.DrawFn) -> dict[str, Any]:
    """Some of the fields the rules read, each absent, null or one of its values."""
    out: dict[str, Any] = {}
    for name, values in _CHOICES.items():
        v = draw(st.sampled_from([ABSENT, None, *values]))
        if v is not ABSENT:
            out[name] = v
    return out


def _server_accepts(req: dict[str, Any]) -> bool:
    try:
        validate_create(req, CallbackPolicy(), Limits(), NOW)
    except ValidationError:
        return False
    return True


@settings(max_examples=1_000, deadline=None)
@given(ttype=st.sampled_from(list(TaskType)), fields=_fields())
def test_task_create_document_and_server_agree_on_the_rules_between_fields(
    ttype: TaskType, fields: dict[str, Any]
) -> None:
    req = {"type": ttype.value, "callback_url": URL, **fields}
    errors = [e.message for e in TASK_CREATE.iter_errors(req)]
    assert (not errors) == _server_accepts(req), (req, errors)


_STORED = {
    TaskType.DELAYED: validate_create({"type": "delayed", "interval_ms": 60_000, "callback_url": URL}, now_ms=NOW),
    TaskType.PERIODIC: validate_create({"type": "periodic", "interval_ms": 60_000, "callback_url": URL}, now_ms=NOW),
}


@settings(max_examples=1_000, deadline=None)
@given(ttype=st.sampled_from([None, *TaskType]), fields=_fields())
def test_a_patch_the_document_calls_invalid_is_refused_whatever_the_stored_task(
    ttype: TaskType | None, fields: dict[str, Any]
) -> None:
    """A patch is judged against the stored definition, so the document cannot say every patch the
    server refuses; what it does refuse, the server refuses for any stored task."""
    patch = fields if ttype is None else {"type": ttype.value, **fields}
    if TASK_UPDATE.is_valid(patch):
        return
    for current in _STORED.values():
        with pytest.raises(ValidationError):
            decode_update(msgspec.json.encode(patch), current, CallbackPolicy(), Limits(), NOW)


def test_the_document_states_each_task_rule() -> None:
    """One example per rule, so a rule dropped from the document shows by name."""
    base = {"callback_url": URL}
    refused = [
        {"type": "delayed"},
        {"type": "delayed", "interval_ms": 1_000, "run_at": NOW + 1},
        {"type": "delayed", "interval_ms": 1_000, "cron_expr": "* * * * *"},
        {"type": "delayed", "interval_ms": 1_000, "max_runs": 3},
        {"type": "delayed", "interval_ms": 1_000, "overlap": "allow"},
        {"type": "delayed", "interval_ms": 1_000, "ack_url": URL, "reliability": "at_most_once"},
        {"type": "periodic"},
        {"type": "periodic", "interval_ms": 999},
        {"type": "periodic", "interval_ms": 1_000, "cron_expr": "* * * * *"},
        {"type": "periodic", "cron_expr": "* * * * *", "run_at": NOW + 1},
        {"type": "periodic", "interval_ms": 1_000, "traceparent": "00-" + "0" * 32 + TRACE[35:]},
    ]
    for req in refused:
        assert not TASK_CREATE.is_valid({**base, **req}), req
        assert not _server_accepts({**base, **req}), req
    accepted = [
        {"type": "delayed", "interval_ms": 1_000, "overlap": "skip", "catchup": None},
        {"type": "periodic", "interval_ms": 1_000, "ack_url": URL, "reliability": "at_most_once"},
        {"type": "periodic", "cron_expr": "* * * * *", "max_retries": 4, "retry": {"max_retries": 4}},
    ]
    for req in accepted:
        assert TASK_CREATE.is_valid({**base, **req}), req
        assert _server_accepts({**base, **req}), req


@settings(max_examples=500, deadline=None)
@given(
    rate=st.sampled_from([ABSENT, None, 5, 2.5]),
    burst=st.sampled_from([ABSENT, None, 2]),
    adaptive=st.sampled_from([ABSENT, False, True]),
    concurrency=st.sampled_from([ABSENT, None, 3]),
)
def test_flow_limits_document_and_server_agree_on_what_needs_a_rate(rate: Any, burst: Any, adaptive: Any,
                                                                      concurrency: Any) -> None:
    body = {k: v for k, v in (("rate_per_s", rate), ("burst", burst), ("adaptive", adaptive),
                              ("concurrency", concurrency)) if v is not ABSENT}
    try:
        decode_limits(msgspec.json.encode(body))
        accepted = True
    except ValidationError:
        accepted = False
    assert FLOW_LIMITS.is_valid(body) == accepted, body
