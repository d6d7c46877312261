"""Property: whatever JSON a client sends to the write endpoints, the answer is a documented status
with a schema-valid body -- never a 500 -- and a rejected request changes nothing."""

from __future__ import annotations

import io
import json
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import bottle
import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from molens.web.app import make_app
from molens.web.local_context import LocalContext
from molens.web.openapi import document

_DOC = document()
FIELDS = [
    "type",
    "interval_ms",
    "run_at",
    "cron_expr",
    "timezone",
    "callback_url",
    "ack_url",
    "ack_delay_ms",
    "payload",
    "scene",
    "timeout_ms",
    "max_retries",
    "max_fails",
    "reliability",
    "idempotency_key",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(
        [
            "delayed",
            "periodic",
            "at_most_once",
            "at_least_once",
            "http://127.0.0.1:9/x",
            "https://example.com/a?b=c",
            "http://[::1]:80/",
            "http://169.254.169.254/",
            "* * * * *",
            "*/5 * * * * *",
            "UTC",
            "Europe/Amsterdam",
            "Not/AZone",
        ]
    ),
)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=6)
BASES = [
    {"type": "delayed", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/x"},
    {"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/x"},
    {"type": "periodic", "cron_expr": "0 * * * *", "timezone": "Asia/Tokyo", "callback_url": "https://a.example/cb"},
    {"type": "delayed", "run_at": 1_900_000_000_000, "callback_url": "http://127.0.0.1:9/x", "ack_url": "http://127.0.0.1:9/a"},
]
random_tasks = st.dictionaries(st.sampled_from([*FIELDS, "extra"]), values, max_size=8)
near_valid = st.builds(
    lambda base, over: {**base, **over},
    st.sampled_from(BASES),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=2),
)
tasks = st.one_of(random_tasks, near_valid, st.sampled_from(BASES))


def _validate(body: Any, name: str) -> None:
    jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": _DOC["components"]}).validate(body)


@pytest.fixture(scope="module")
def wsgi() -> Iterator[tuple[bottle.Bottle, LocalContext]]:
    with tempfile.TemporaryDirectory() as d:
        ctx = LocalContext(d)
        try:
            yield make_app(ctx), ctx
        finally:
            ctx.close()


def _post(app: bottle.Bottle, path: str, body: bytes) -> tuple[int, Any]:
    env = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }
    status: list[str] = []
    out = b"".join(app(env, lambda s, h, e=None: status.append(s)))
    return int(status[0].split()[0]), json.loads(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=st.one_of(tasks, values))
def test_create_never_fails_with_a_server_error(wsgi: tuple[bottle.Bottle, LocalContext], task: Any) -> None:
    app, ctx = wsgi
    before = len(ctx.store)
    status, body = _post(app, "/api/v1/tasks", json.dumps(task).encode())
    event(f"status {status}")
    assert status in (200, 201, 400, 413), body
    if status >= 400:
        _validate(body, "Error")
        assert len(ctx.store) == before
    else:
        _validate(body, "Task")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(tasks, max_size=4))
def test_batch_create_is_all_or_nothing(wsgi: tuple[bottle.Bottle, LocalContext], batch: list[Any]) -> None:
    app, ctx = wsgi
    before = len(ctx.store)
    status, body = _post(app, "/api/v1/tasks/batch", json.dumps({"tasks": batch}).encode())
    event(f"status {status}")
    assert status in (200, 201, 400), body
    if status == 400:
        _validate(body, "BatchCreateError")
        assert len(ctx.store) == before
    else:
        _validate(body, "BatchCreateResponse")
        assert body["errors"] == [] and len(body["items"]) == len(batch)
