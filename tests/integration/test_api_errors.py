"""Bad input gets a clear JSON error naming the field and changes nothing (docs/architecture.md#principles, docs/api.md).

A table of malformed requests, each checked for status, ``error.code``/``error.field`` and an
unchanged task count; then follower (307) / no-leader (503) behaviour, body limits and auth.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from molens.web.api_context import ApiSettings
from tests.integration.api_server import Served, check_schema, delayed, serve

pytestmark = pytest.mark.integration

needs_cron = pytest.mark.skipif(
    importlib.util.find_spec("molens.schedule.cron") is None,
    reason="molens.schedule.cron (cron/timezone validation) not written yet",
)

MAX_BODY = 256 * 1024
T = "/api/v1/tasks"
JSON = {"Content-Type": "application/json"}
UNKNOWN_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def P(**kw: Any) -> dict[str, Any]:
    return {"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/p", **kw}


def no(key: str, body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


# (id, method, path, json body | raw bytes | None, extra headers, status, field)
CASES: list[Any] = [
    ("missing type", "POST", T, no("type", delayed()), None, 400, "type"),
    ("type not a known value", "POST", T, delayed(type="cron"), None, 400, "type"),
    ("type wrong json type", "POST", T, delayed(type=1), None, 400, "type"),
    ("missing callback_url", "POST", T, no("callback_url", delayed()), None, 400, "callback_url"),
    ("callback_url not a string", "POST", T, delayed(callback_url=42), None, 400, "callback_url"),
    ("callback_url ftp", "POST", T, delayed(callback_url="ftp://127.0.0.1/x"), None, 400, "callback_url"),
    ("callback_url javascript", "POST", T, delayed(callback_url="javascript:alert(1)"), None, 400, "callback_url"),
    ("callback_url metadata ip denied", "POST", T, delayed(callback_url="http://169.254.169.254/latest"), None, 400, "callback_url"),
    ("callback_url metadata ip as integer", "POST", T, delayed(callback_url="http://2852039166/"), None, 400, "callback_url"),
    ("callback_url metadata name denied", "POST", T, delayed(callback_url="http://metadata.google.internal/"), None, 400, "callback_url"),
    ("callback_url without host", "POST", T, delayed(callback_url="http:///x"), None, 400, "callback_url"),
    ("callback_url with spaces", "POST", T, delayed(callback_url="http://127.0.0.1/a b"), None, 400, "callback_url"),
    ("callback_url too long", "POST", T, delayed(callback_url="http://127.0.0.1/" + "a" * 3000), None, 400, "callback_url"),
    ("interval_ms as string", "POST", T, delayed(interval_ms="10"), None, 400, "interval_ms"),
    ("interval_ms negative", "POST", T, delayed(interval_ms=-1), None, 400, "interval_ms"),
    ("interval_ms boolean", "POST", T, delayed(interval_ms=True), None, 400, "interval_ms"),
    ("interval_ms float", "POST", T, delayed(interval_ms=1.5), None, 400, "interval_ms"),
    ("delayed without time", "POST", T, no("interval_ms", delayed()), None, 400, "interval_ms"),
    ("delayed with interval and run_at", "POST", T, delayed(run_at=1), None, 400, "run_at"),
    ("run_at as string", "POST", T, no("interval_ms", delayed(run_at="tomorrow")), None, 400, "run_at"),
    ("run_at far beyond max delay", "POST", T, no("interval_ms", delayed(run_at=2**62)), None, 400, "run_at"),
    ("periodic interval below minimum", "POST", T, P(interval_ms=10), None, 400, "interval_ms"),
    ("periodic with run_at", "POST", T, P(run_at=1), None, 400, "run_at"),
    ("periodic with interval and cron", "POST", T, P(cron_expr="* * * * *"), None, 400, "cron_expr"),
    ("delayed with cron", "POST", T, delayed(cron_expr="* * * * *"), None, 400, "cron_expr"),
    pytest.param("bad cron", "POST", T, no("interval_ms", P(cron_expr="not a cron")), None, 400, "cron_expr", marks=needs_cron),
    pytest.param("cron with 7 fields", "POST", T, no("interval_ms", P(cron_expr="* * * * * * *")), None, 400, "cron_expr", marks=needs_cron),
    pytest.param("cron minute out of range", "POST", T, no("interval_ms", P(cron_expr="61 * * * *")), None, 400, "cron_expr", marks=needs_cron),
    pytest.param("unknown timezone", "POST", T, no("interval_ms", P(cron_expr="0 * * * *", timezone="Mars/Olympus")), None, 400, "timezone", marks=needs_cron),
    ("timezone not a string", "POST", T, P(timezone=5), None, 400, "timezone"),
    ("oversized payload", "POST", T, delayed(payload="x" * 70_000), None, 413, "payload"),
    ("scene with bad characters", "POST", T, delayed(scene="bad scene!"), None, 400, "scene"),
    ("scene too long", "POST", T, delayed(scene="s" * 65), None, 400, "scene"),
    ("timeout_ms zero", "POST", T, delayed(timeout_ms=0), None, 400, "timeout_ms"),
    ("timeout_ms too large", "POST", T, delayed(timeout_ms=300_001), None, 400, "timeout_ms"),
    ("max_retries too large", "POST", T, delayed(max_retries=21), None, 400, "max_retries"),
    ("max_retries negative", "POST", T, delayed(max_retries=-1), None, 400, "max_retries"),
    ("max_fails zero", "POST", T, P(max_fails=0), None, 400, "max_fails"),
    ("reliability unknown", "POST", T, delayed(reliability="exactly_once"), None, 400, "reliability"),
    ("ack_url with at_most_once", "POST", T, delayed(ack_url="http://127.0.0.1:9/ack", reliability="at_most_once"), None, 400, "ack_url"),
    ("ack_url not http", "POST", T, delayed(ack_url="file:///etc/passwd"), None, 400, "ack_url"),
    ("ack_delay_ms negative", "POST", T, delayed(ack_delay_ms=-5), None, 400, "ack_delay_ms"),
    ("idempotency_key empty", "POST", T, delayed(idempotency_key=""), None, 400, "idempotency_key"),
    ("idempotency_key too long", "POST", T, delayed(idempotency_key="k" * 129), None, 400, "idempotency_key"),
    ("idempotency_key not a string", "POST", T, delayed(idempotency_key=7), None, 400, "idempotency_key"),
    ("unknown field", "POST", T, delayed(colour="red"), None, 400, "colour"),
    ("body is an array", "POST", T, [delayed()], None, 400, "body"),
    ("body is a string", "POST", T, "task", None, 400, "body"),
    ("bad json", "POST", T, b'{"type": "delayed",', JSON, 400, "body"),
    ("NaN in json", "POST", T, b'{"type": "delayed", "payload": NaN}', JSON, 400, "body"),
    ("invalid utf-8", "POST", T, b'{"type": "\xff\xfe"}', JSON, 400, "body"),
    ("payload not utf-8", "POST", T, b'{"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/", "payload": "\xff\xfe"}', JSON, 400, "payload"),
    ("payload key not utf-8", "POST", T, b'{"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/", "payload": {"k\xc3": 1}}', JSON, 400, "payload"),
    ("batch payload not utf-8", "POST", f"{T}/batch", b'{"tasks": [{"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/", "payload": "\xff"}]}', JSON, 400, "tasks[0].payload"),
    ("patch payload not utf-8", "PATCH", f"{T}/{{pending}}", b'{"payload": "\xff"}', {"Content-Type": "application/merge-patch+json"}, 400, "payload"),
    ("empty body", "POST", T, b"", JSON, 400, "body"),
    ("deeply nested json", "POST", T, b"[" * 100_000 + b"]" * 100_000, JSON, 400, "body"),
    ("form content type", "POST", T, b"type=delayed", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "Content-Type"),
    ("text content type", "POST", T, json.dumps(delayed()).encode(), {"Content-Type": "text/plain"}, 415, "Content-Type"),
    # what a web page's fetch(..., {mode: "no-cors", body: new Blob([json])}) sends: no preflight asked
    ("no content type", "POST", T, json.dumps(delayed()).encode(), {}, 415, "Content-Type"),
    ("no content type, key", "POST", "/api/v1/keys", b'{"name": "k", "role": "admin", "namespaces": ["*"]}', {}, 415, "Content-Type"),
    ("charset other than utf-8", "POST", T, json.dumps(delayed()).encode(), {"Content-Type": "application/json; charset=latin-1"}, 415, "Content-Type"),
    ("idempotency key in body and header differ", "POST", T, json.dumps(delayed(idempotency_key="a-1")).encode(), {"Content-Type": "application/json", "Idempotency-Key": "a-2"}, 400, "Idempotency-Key"),
    ("body over the limit", "POST", T, b" " * (MAX_BODY + 1), JSON, 413, "body"),
    # batch
    ("batch over 1000 tasks", "POST", f"{T}/batch", {"tasks": [delayed()] * 1001}, None, 400, "tasks"),
    ("batch tasks not an array", "POST", f"{T}/batch", {"tasks": {"a": 1}}, None, 400, "tasks"),
    ("batch missing tasks", "POST", f"{T}/batch", {}, None, 400, "tasks"),
    ("batch unknown key", "POST", f"{T}/batch", {"tasks": [], "dry_run": True}, None, 400, "dry_run"),
    ("batch body is an array", "POST", f"{T}/batch", [delayed()], None, 400, "body"),
    ("batch with one bad item", "POST", f"{T}/batch", {"tasks": [delayed(), delayed(callback_url="ftp://x/")]}, None, 400, "tasks[1].callback_url"),
    ("batch item not an object", "POST", f"{T}/batch", {"tasks": [delayed(), 5]}, None, 400, "tasks[1]"),
    # ids and transitions
    ("get unknown task", "GET", f"{T}/{UNKNOWN_ID}", None, None, 404, "task_id"),
    ("get malformed id", "GET", f"{T}/not-an-id", None, None, 404, "task_id"),
    ("delete unknown task", "DELETE", f"{T}/{UNKNOWN_ID}", None, None, 404, "task_id"),
    ("pause unknown task", "POST", f"{T}/{UNKNOWN_ID}/pause", None, None, 404, "task_id"),
    ("resume unknown task", "POST", f"{T}/{UNKNOWN_ID}/resume", None, None, 404, "task_id"),
    ("trigger malformed id", "POST", f"{T}/x/trigger", None, None, 404, "task_id"),
    ("executions of unknown task", "GET", f"{T}/{UNKNOWN_ID}/executions", None, None, 404, "task_id"),
    ("resume a pending task", "POST", f"{T}/{{pending}}/resume", None, None, 409, "status"),
    ("pause a paused task", "POST", f"{T}/{{paused}}/pause", None, None, 409, "status"),
    ("trigger a paused task", "POST", f"{T}/{{paused}}/trigger", None, None, 409, "status"),
    ("backfill unknown task", "POST", f"{T}/{UNKNOWN_ID}/backfill", {"start": 0, "end": 1}, None, 404, "task_id"),
    ("backfill without a body", "POST", f"{T}/{{pending}}/backfill", None, None, 400, "body"),
    ("backfill unknown key", "POST", f"{T}/{{pending}}/backfill", {"start": 0, "end": 1, "x": 1}, None, 400, "body"),
    ("backfill start not a number", "POST", f"{T}/{{pending}}/backfill", {"start": "0", "end": 1}, None, 400, "start"),
    ("backfill end before start", "POST", f"{T}/{{pending}}/backfill", {"start": 5, "end": 5}, None, 400, "end"),
    ("backfill end in the future", "POST", f"{T}/{{pending}}/backfill", {"start": 0, "end": 253_402_300_799_999}, None, 400, "end"),
    ("backfill a delayed task", "POST", f"{T}/{{pending}}/backfill", {"start": 0, "end": 1}, None, 409, "type"),
    # list and query parameters
    ("dead letters task_id too long", "GET", "/api/v1/dead-letters?task_id=" + "a" * 301, None, None, 400, "task_id"),
    ("dead letters flow too long", "GET", "/api/v1/dead-letters?flow=" + "a" * 301, None, None, 400, "flow"),
    ("dead letters flow empty", "GET", "/api/v1/dead-letters?flow=", None, None, 400, "flow"),
    ("delete dead letters all not true", "DELETE", "/api/v1/dead-letters?kind=ack_failed&all=yes", None, None, 400,
     "all"),
    ("delete dead letters all false", "DELETE", "/api/v1/dead-letters?all=false", None, None, 400, "all"),
    ("list with garbage cursor", "GET", f"{T}?cursor=zzz", None, None, 400, "cursor"),
    ("list with an executions cursor", "GET", f"{T}?cursor=ZToxMA", None, None, 400, "cursor"),
    ("list limit zero", "GET", f"{T}?limit=0", None, None, 400, "limit"),
    ("list limit not a number", "GET", f"{T}?limit=ten", None, None, 400, "limit"),
    ("list limit too large", "GET", f"{T}?limit=5000", None, None, 400, "limit"),
    ("list unknown status", "GET", f"{T}?status=pending,sleeping", None, None, 400, "status"),
    ("list unknown type", "GET", f"{T}?type=cron", None, None, 400, "type"),
    ("list bad scene", "GET", f"{T}?scene=a%20b", None, None, 400, "scene"),
    ("executions unknown result", "GET", "/api/v1/executions?result=meh", None, None, 400, "result"),
    ("executions negative since", "GET", "/api/v1/executions?since=-1", None, None, 400, "since"),
    ("executions bad cursor", "GET", "/api/v1/executions?cursor=dDox", None, None, 400, "cursor"),
    ("executions bad task_id", "GET", "/api/v1/executions?task_id=nope", None, None, 400, "task_id"),
    ("url stats tiny bucket", "GET", "/api/v1/stats/urls?bucket_ms=10", None, None, 400, "bucket_ms"),
]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    with serve(tmp_path_factory.mktemp("errors"), ApiSettings(max_body_bytes=MAX_BODY)) as s:
        ids = {}
        for name in ("pending", "paused"):
            st, _, t = s.call("POST", T, delayed())
            assert st == 201
            ids[name] = t["id"]
        assert s.call("POST", f"{T}/{ids['paused']}/pause")[0] == 200
        yield s, ids


def _ids(case: Any) -> str:
    return str(case[0] if isinstance(case, tuple) else case.values[0])


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("name", "method", "path", "body", "headers", "status", "field"), CASES, ids=[_ids(c) for c in CASES])
def test_malformed_request_gets_json_error_naming_the_field_and_changes_nothing(
    api: tuple[Served, dict[str, str]],
    name: str,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str] | None,
    status: int,
    field: str,
) -> None:
    s, ids = api
    path = path.format(**ids)
    before = s.task_count()
    applied_before = s.ctx.store.applied_index()
    if isinstance(body, bytes):
        st, h, got = s.call(method, path, raw=body, headers=headers)
    else:
        st, h, got = s.call(method, path, body, headers=headers)
    assert st == status, got
    assert h["Content-Type"].startswith("application/json")
    check_schema(got, "Error")
    assert got["error"]["field"] == field, got
    assert got["error"]["message"]
    assert s.task_count() == before
    if method != "GET" and status != 409:
        assert s.ctx.store.applied_index() == applied_before  # rejected before any proposal


def test_bad_batch_lists_every_bad_item_and_creates_nothing(api: tuple[Served, dict[str, str]]) -> None:
    s, _ = api
    before = s.task_count()
    tasks = [delayed(), delayed(timeout_ms=0), delayed(), delayed(scene="!"), delayed(payload="y" * 70_000)]
    st, _, body = s.call("POST", f"{T}/batch", {"tasks": tasks})
    assert st == 400
    check_schema(body, "BatchCreateError")
    assert body["items"] == [None] * 5
    assert [(e["index"], e["error"]["field"], e["error"]["code"]) for e in body["errors"]] == [
        (1, "timeout_ms", "invalid_argument"),
        (3, "scene", "invalid_argument"),
        (4, "payload", "payload_too_large"),
    ]
    assert s.task_count() == before


def test_a_utf8_charset_and_one_idempotency_key_given_twice_are_accepted(api: tuple[Served, dict[str, str]]) -> None:
    s, _ = api
    raw = json.dumps(delayed(idempotency_key="both-1")).encode()
    for ctype in ("application/json; charset=UTF-8", 'application/json;charset="utf-8"'):
        st, _, body = s.call("POST", T, raw=raw, headers={"Content-Type": ctype, "Idempotency-Key": "both-1"})
        assert st in (200, 201) and body["idempotency_key"] == "both-1", body


def test_unknown_route_and_method_are_json_errors(api: tuple[Served, dict[str, str]]) -> None:
    s, _ = api
    st, _, body = s.call("GET", "/api/v1/nothing-here")
    assert st == 404 and body["error"]["code"] == "not_found"
    st, h, body = s.call("PUT", T)
    assert st == 405 and body["error"]["code"] == "method_not_allowed"
    assert "POST" in h["Allow"]


def test_no_leader_and_unknown_outcome_answer_503_with_retry_after(api: tuple[Served, dict[str, str]]) -> None:
    s, _ = api
    before = s.task_count()
    s.ctx.inject_fault("no_leader")
    st, h, body = s.call("POST", T, delayed())
    assert (st, body["error"]["code"], h["Retry-After"]) == (503, "no_leader", "1")
    assert s.task_count() == before
    s.ctx.inject_fault("unknown_after_apply")
    st, h, body = s.call("POST", T, delayed())
    assert (st, body["error"]["code"], h["Retry-After"]) == (503, "outcome_unknown", "1")
    assert s.task_count() == before + 1  # it did apply: that is what "unknown" means


# ------------------------------------------------------------------ follower / no leader


def test_follower_redirects_writes_to_the_leader_and_serves_reads(tmp_path: Path) -> None:
    with serve(tmp_path / "leader") as leader, serve(tmp_path / "f", role="follower", leader_url=leader.url) as f:
        for method, path, sent in (
            ("POST", T + "?x=1", delayed()),
            ("POST", f"{T}/batch", {"tasks": [delayed()]}),
            ("DELETE", f"{T}/{UNKNOWN_ID}", None),
            ("POST", f"{T}/{UNKNOWN_ID}/pause", None),
            ("POST", f"{T}/{UNKNOWN_ID}/resume", {"resume_from": "now"}),
            ("POST", f"{T}/{UNKNOWN_ID}/trigger", None),
            ("POST", f"{T}/{UNKNOWN_ID}/backfill", {"start": 0, "end": 1}),
        ):
            st, h, body = f.call(method, path, sent)
            assert st == 307, (method, path, body)
            assert h["Location"] == leader.url + path
            assert h["X-Molens-Leader"] == leader.url
            assert h["X-Molens-Role"] == "follower"
            assert body["error"]["code"] == "not_leader" and body["error"]["leader"] == leader.url
        assert f.task_count() == 0
        st, h, body = f.call("GET", T)
        assert (st, h["X-Molens-Role"], body["items"]) == (200, "follower", [])
        st, _, body = f.call("GET", "/readyz")
        assert st == 200 and body["role"] == "follower"


def test_without_a_leader_writes_answer_503_and_readyz_is_not_ready(tmp_path: Path) -> None:
    with serve(tmp_path, role="candidate") as c:
        st, h, body = c.call("POST", T, delayed())
        assert (st, body["error"]["code"], h["Retry-After"]) == (503, "no_leader", "1")
        assert h["X-Molens-Role"] == "candidate"
        st, h, body = c.call("GET", "/readyz")
        assert st == 503 and "Retry-After" in h
        st, _, body = c.call("GET", "/api/v1/stats")
        assert st == 200 and body["role"] == "candidate"
        assert c.task_count() == 0


# ------------------------------------------------------------------ auth


def test_bearer_token_is_required_except_on_open_routes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = "s3cret-token-value"
    caplog.set_level(logging.DEBUG)
    with serve(tmp_path, ApiSettings(auth_token=token)) as s:
        for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": token}, {"Authorization": "Basic x"}):
            st, h, body = s.call("POST", T, delayed(payload="secret-payload"), headers=headers)
            assert st == 401 and body["error"]["code"] == "unauthorized"
            assert h["WWW-Authenticate"].startswith("Bearer")
            assert s.call("GET", T, headers=headers)[0] == 401
        assert s.task_count() == 0
        good = {"Authorization": f"Bearer {token}"}
        st, _, t = s.call("POST", T, delayed(payload="secret-payload"), headers=good)
        assert st == 201
        assert s.call("GET", f"{T}/{t['id']}", headers=good)[0] == 200
        for path in ("/healthz", "/readyz", "/api/v1/openapi.json"):
            assert s.call("GET", path)[0] == 200, path
        assert s.call("POST", "/api/v1/test/callback", {"x": 1})[0] == 200
    assert token not in caplog.text
    assert "secret-payload" not in caplog.text


def test_leadership_lost_between_the_check_and_the_proposal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from molens.web.errors import LeaderElsewhere

    with serve(tmp_path) as s:
        monkeypatch.setattr(s.ctx, "propose", lambda *a: (_ for _ in ()).throw(LeaderElsewhere("http://127.0.0.1:18082", "n2")))
        st, h, body = s.call("POST", T + "?a=b", delayed())
        assert (st, h["Location"], h["X-Molens-Leader-Id"]) == (307, "http://127.0.0.1:18082/api/v1/tasks?a=b", "n2")
        monkeypatch.setattr(s.ctx, "propose", lambda *a: (_ for _ in ()).throw(LeaderElsewhere(None)))
        st, h, body = s.call("POST", T, delayed())
        assert (st, body["error"]["code"], h["Retry-After"]) == (503, "no_leader", "1")
        assert s.task_count() == 0


def test_an_entry_the_state_machine_fails_answers_500_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from molens.fsm import machine

    def broken(*a: object, **kw: object) -> None:
        raise RuntimeError("bug")

    with serve(tmp_path) as s:
        monkeypatch.setattr(machine, "apply", broken)
        for path, body in ((T, delayed()), (f"{T}/batch", {"tasks": [delayed(), delayed()]})):
            st, _, got = s.call("POST", path, body)
            assert st == 500, got
            check_schema(got, "Error")
            assert got["error"]["code"] == "internal"
        assert s.task_count() == 0
