"""The task's JSON object, derived from the schema, is the API's documented shape.

``_api_object`` is written out by hand on purpose: it is the REST contract (docs/api.md), so a
change to the schema that renames, drops or retypes a field of the API fails here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from molens import model, schema
from molens.model import ExecutionResult, Status, Task

NOW = 1_790_000_000_000


def _task(req: dict[str, Any], **kw: Any) -> Task:
    spec = model.validate_create(req, now_ms=NOW)
    fields: dict[str, Any] = {"status": Status.PENDING, "created_ms": NOW, "updated_ms": NOW + 1}
    fields |= {"due_ms": NOW + 5, "sched_ms": NOW + 5} | kw
    return Task(id=model.new_task_id(NOW, 12345), spec=spec, **fields)


TASKS = [
    _task({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/b", "payload": {"i": 1}}),
    _task(
        {
            "type": "delayed",
            "run_at": NOW + 10,
            "callback_url": "https://example.com/a?q=\"x\"&y=é",
            "ack_url": "https://example.com/ack",
            "ack_delay_ms": 2000,
            "payload": ["é\"\\\n\u2028\x01", 1.5, -0.0, 10**30, None, True, {"k": {"z": []}}],
            "scene": "s.c-e_n",
            "timeout_ms": 999,
            "max_retries": 0,
            "idempotency_key": 'key "payload":null \\ ü',
            "reliability": "at_least_once",
        },
        status=Status.AWAITING_ACK,
        seq=7,
        attempt=2,
        ack_attempt=1,
        fail_count=3,
        inflight="x-7",
        last_result=ExecutionResult.SUCCESS,
        last_status_code=200,
        last_response='ok "\u00ff"\t\x00',
        last_fire_ms=NOW - 1,
        due_ms=None,
    ),
    _task(
        {
            "type": "periodic",
            "cron_expr": "*/5 * * * *",
            "timezone": "Europe/Berlin",
            "callback_url": "http://[::1]:8080/p",
            "payload": None,
            "reliability": "at_most_once",
        }
    ),
    _task({"type": "periodic", "interval_ms": 60_000, "callback_url": "http://h/", "payload": "a string"}),
]


def _api_object(t: Task) -> dict[str, Any]:
    s = t.spec
    return {
        "id": t.id,
        "type": s.type.value,
        "status": t.status.value,
        "interval_ms": s.interval_ms,
        "run_at": s.run_at,
        "cron_expr": s.cron_expr,
        "timezone": s.timezone,
        "callback_url": s.callback_url,
        "ack_url": s.ack_url,
        "ack_delay_ms": s.ack_delay_ms,
        "payload": json.loads(s.payload_json),
        "scene": s.scene,
        "timeout_ms": s.timeout_ms,
        "max_retries": s.max_retries,
        "max_fails": s.max_fails,
        "reliability": s.reliability.value,
        "idempotency_key": s.idempotency_key,
        "jitter_ms": s.jitter_ms,
        "start_at": s.start_at,
        "end_at": s.end_at,
        "max_runs": s.max_runs,
        "catchup": s.catchup.value,
        "catchup_window_ms": s.catchup_window_ms,
        "retry": {
            "max_retries": s.max_retries, "backoff": "exponential", "initial_ms": 1000, "factor": 2,
            "max_ms": 3_600_000, "jitter": "none", "non_retryable_statuses": [], "max_throttle_ms": 3_600_000,
        },
        "notify_url": s.notify_url,
        "overlap": s.overlap.value,
        "flow_key": s.flow_key,
        "traceparent": s.traceparent,
        "namespace": s.namespace,
        "created_at": t.created_ms,
        "updated_at": t.updated_ms,
        "next_run_at": t.due_ms,
        "seq": t.seq,
        "attempt": t.attempt,
        "ack_attempt": t.ack_attempt,
        "fail_count": t.fail_count,
        "last_outcome": None if t.last_result is None else t.last_result.value,
        "last_status_code": t.last_status_code,
        "last_execution_result": t.last_response,
        "last_fire_at": t.last_fire_ms,
        "version": t.version,
    }


@pytest.mark.parametrize("tasks", [[], [None], TASKS, [None, *TASKS, None], TASKS[1:2] * 3])
def test_tasks_json_is_the_api_shape_with_the_stored_payload_bytes(tasks: list[Task | None]) -> None:
    out = model.tasks_json(tasks)
    assert json.loads(out) == [None if t is None else _api_object(t) for t in tasks]
    for t in tasks:
        if t is not None:
            assert t.spec.payload_json in out  # spliced in as stored, never re-encoded
            assert model.Task.from_json(t.to_json()).to_json() == t.to_json()
            assert json.loads(schema.task_json(t)) == _api_object(t)


def test_payload_keeps_its_bytes_big_integers_and_escapes() -> None:
    spec = model.decode_create(
        b'{"type":"delayed","interval_ms":1,"callback_url":"http://h/","payload": {"n": 123456789012345678901234567890,'
        b' "e": "\\u00e9 x", "f": 1.50}}'
    )
    # whitespace between tokens goes; numbers and escapes stay as written
    assert spec.payload_json == b'{"n":123456789012345678901234567890,"e":"\\u00e9 x","f":1.50}'
