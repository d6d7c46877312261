"""model.tasks_json writes the same bytes as encoding Task.to_json() with the API's compact encoder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from molens import model
from molens.model import ExecutionResult, Status, Task

NOW = 1_790_000_000_000


def _dumps(obj: Any) -> bytes:  # as molens.web.app._dumps
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


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


@pytest.mark.parametrize("tasks", [[], [None], TASKS, [None, *TASKS, None], TASKS[1:2] * 3])
def test_tasks_json_is_the_compact_encoding_of_to_json(tasks: list[Task | None]) -> None:
    expected = _dumps([None if t is None else t.to_json() for t in tasks])
    assert model.tasks_json(tasks) == expected
    assert json.loads(model.tasks_json(tasks)) == json.loads(expected)
