"""The task schema is declared once: a field added to ``TaskSpec`` in one place reaches validation,
the JSON object, ``openapi.json`` and the stored encoding (docs/architecture.md#schema)."""

from __future__ import annotations

import json
from typing import Annotated

import msgspec
import pytest

from molens import model, schema
from molens.errors import ValidationError
from molens.fsm import store
from molens.model import DEFAULT_LIMITS, Limits, Status, Task, TaskSpec
from molens.schedule.cron import ZONES
from molens.schema import rule

NOW = 1_790_000_000_000
URL = "http://127.0.0.1:9/cb"


class SpecPlus(TaskSpec, frozen=True, array_like=True, kw_only=True):
    """The schema with one more field, written the way a developer would add it."""

    priority: Annotated[int, rule("Higher fires first", ge=0, le=9)] = 0


class TaskPlus(Task, frozen=True, array_like=True, kw_only=True):
    spec: SpecPlus


def _body(**kw: object) -> bytes:
    return json.dumps({"type": "delayed", "interval_ms": 1000, "callback_url": URL, **kw}).encode()


def _task(spec: TaskSpec, cls: type[Task] = Task) -> Task:
    return cls(id=model.new_task_id(NOW, 1), spec=spec, status=Status.PENDING, created_ms=NOW, updated_ms=NOW,
               due_ms=NOW + 1000, sched_ms=NOW + 1000)


def test_a_new_field_is_validated_with_its_bounds_and_named_in_the_error() -> None:
    spec = model.decode_create(_body(priority=7), now_ms=NOW, spec_type=SpecPlus)
    assert isinstance(spec, SpecPlus) and spec.priority == 7
    assert model.decode_create(_body(), now_ms=NOW, spec_type=SpecPlus).priority == 0  # the default
    for bad, message in ((10, "priority must be in 0..9"), (-1, "priority must be in 0..9"),
                         ("high", "priority must be an integer, got string"), (True, "priority must be an integer")):
        with pytest.raises(ValidationError) as ei:
            model.decode_create(_body(priority=bad), now_ms=NOW, spec_type=SpecPlus)
        assert ei.value.field == "priority" and ei.value.message.startswith(message), ei.value.message
    with pytest.raises(ValidationError) as ei:  # the schema without the field still refuses it
        model.decode_create(_body(priority=7), now_ms=NOW)
    assert ei.value.field == "priority" and "unknown field" in ei.value.message


def test_a_new_field_shows_in_the_json_object() -> None:
    spec = model.decode_create(_body(priority=3), now_ms=NOW, spec_type=SpecPlus)
    obj = json.loads(schema.task_json(_task(spec, TaskPlus)))
    assert obj["priority"] == 3
    assert "priority" not in json.loads(schema.task_json(_task(model.decode_create(_body(), now_ms=NOW))))


def test_a_new_field_shows_in_the_openapi_components() -> None:
    comps = schema.openapi_components(DEFAULT_LIMITS, SpecPlus, TaskPlus)
    prop = comps["TaskCreate"]["properties"]["priority"]
    assert prop["description"] == "Higher fires first" and prop["default"] == 0
    assert {"type": "integer", "minimum": 0, "maximum": 9} in prop["anyOf"]
    assert "priority" in comps["Task"]["properties"] and "priority" in comps["Task"]["required"]
    assert "priority" not in schema.openapi_components(DEFAULT_LIMITS)["TaskCreate"]["properties"]


def test_records_without_the_new_field_decode_with_its_default_and_older_builds_skip_it() -> None:
    old = _task(model.decode_create(_body(), now_ms=NOW))
    new = msgspec.msgpack.decode(store.task_to_bytes(old), type=TaskPlus)
    assert new.spec.priority == 0 and new.id == old.id and new.spec.callback_url == URL
    plus = _task(model.decode_create(_body(priority=4), now_ms=NOW, spec_type=SpecPlus), TaskPlus)
    assert store.task_from_bytes(msgspec.msgpack.encode(plus)) == old


def test_request_bounds_follow_the_node_limits() -> None:
    tight = Limits(max_retries=5, max_timeout_ms=10_000)
    with pytest.raises(ValidationError) as ei:
        model.decode_create(_body(max_retries=6), limits=tight, now_ms=NOW)
    assert (ei.value.field, ei.value.message) == ("max_retries", "max_retries must be in 0..5")
    props = schema.openapi_components(tight)["TaskCreate"]["properties"]
    assert {"type": "integer", "minimum": 1, "maximum": 10_000} in props["timeout_ms"]["anyOf"]
    assert props["timeout_ms"]["default"] == tight.default_timeout_ms


def test_the_served_openapi_uses_the_schema_components() -> None:
    from molens.web import openapi

    doc = openapi.document()["components"]["schemas"]
    comps = schema.openapi_components(DEFAULT_LIMITS, zones=sorted(ZONES))
    assert doc["TaskCreate"] == comps["TaskCreate"] and doc["Task"] == comps["Task"]


def test_internal_fields_stay_out_of_the_json() -> None:
    t = _task(model.decode_create(_body(), now_ms=NOW))
    obj = json.loads(schema.task_json(t))
    assert "sched_ms" not in obj and "inflight" not in obj and "sched_at" not in obj
    assert obj["next_run_at"] == t.due_ms and obj["created_at"] == NOW


def test_a_record_shows_its_declared_fields_in_the_json_and_the_openapi_document() -> None:
    """An execution and a dead letter: the answer's members are the documented properties, in order."""
    from molens.web.openapi import document

    comps = document()["components"]["schemas"]
    ex = schema.Execution(task_id="t", fire_id="t-1", seq=1, attempt=1, kind=schema.FireKind.CALLBACK,
                          result=schema.ExecutionResult.SUCCESS, status_code=200, latency_ms=3, worker="n1",
                          url=URL, scene="default", fired_ms=NOW, finished_ms=NOW + 3, response_head="ok", id=9)
    dl = schema.DeadLetter(id="t-1.4", task_id="t", fire_id="t-1", seq=1, kind=schema.FailureKind.UNKNOWN,
                           attempts=4, status_code=None, response_head=None, at_ms=NOW, flow="127.0.0.1:9",
                           scene="default", url=URL, reliability=schema.Reliability.AT_MOST_ONCE, sched_ms=NOW - 1,
                           result=schema.ExecutionResult.UNKNOWN)
    for rec, name in ((ex, "Execution"), (dl, "DeadLetter")):
        out = rec.to_json()
        assert list(out) == list(comps[name]["properties"]) == comps[name]["required"]
        assert json.loads(json.dumps(out)) == out
    assert ex.to_json()["fired_at"] == NOW and ex.to_json()["execution_result"] == "ok"
    assert dl.to_json()["at"] == NOW and dl.to_json()["scheduled_at"] == NOW - 1
    assert dl.to_json()["kind"] == "unknown" and dl.to_json()["reliability"] == "at_most_once"
    assert comps["Execution"]["properties"]["id"] == {"type": "integer"}
    assert comps["DeadLetter"]["properties"]["status_code"] == {"type": ["integer", "null"]}
