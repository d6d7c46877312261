"""The audit trail through the REST API (LocalContext on real waitress): every kind of change a
caller makes is on record once with its actor; filters, cursor and the JSON-lines export."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import FireKind, Outcome
from molens.web.api_context import ApiSettings
from tests.integration.api_server import Served, check_schema, delayed, serve

pytestmark = pytest.mark.integration

TOKEN = "audit-bootstrap-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
ALICE, BOB, CAROL = "alice", "bob", "carol"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Served]:
    """A served node with the bootstrap token and three writer keys of every namespace, made through
    the API: ``api.keys[name]`` is ``(id, secret)``."""
    with serve(tmp_path, ApiSettings(node_id="n1", auth_token=TOKEN)) as s:
        s.keys = {}
        for name in (ALICE, BOB, CAROL):
            st, _, k = s.call("POST", "/api/v1/keys", {"name": name, "role": "writer", "namespaces": ["*"]},
                              headers=ADMIN)
            assert st == 201, k
            s.keys[name] = (k["id"], k["secret"])
        yield s


def bearer(api: Served, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api.keys[who][1]}"}


def as_(api: Served, who: str, method: str, path: str, body: Any = None) -> Any:
    st, _, out = api.call(method, path, body, headers=bearer(api, who))
    assert 200 <= st < 300, (method, path, st, out)
    return out


def audit(api: Served, query: str = "", headers: dict[str, str] = ADMIN) -> list[dict[str, Any]]:
    """The whole trail (following the cursor), newest first."""
    out: list[dict[str, Any]] = []
    cursor = ""
    while True:
        st, _, page = api.call("GET", f"/api/v1/audit?limit=7{query}{cursor}", headers=headers)
        assert st == 200, page
        check_schema(page, "AuditPage")
        out.extend(page["items"])
        if page["next_cursor"] is None:
            return out
        cursor = f"&cursor={page['next_cursor']}"


def _dead_letter(api: Served, tid: str) -> str:
    """Fail the task's one attempt for good through the real machine; the dead letter's id."""
    now = int(time.time() * 1000)
    t = api.ctx.get_task(tid)
    assert t is not None
    api.ctx.propose([Dispatched(now, (DispatchItem(
        fire_id=t.fire_id, task_id=tid, attempt=t.attempt + 1, worker="n1", deadline_ms=now + 10_000),))], 5)
    api.ctx.propose([Results(now + 1, (ResultItem(
        fire_id=t.fire_id, kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE, response_head="",
        latency_ms=1, worker="n1"),))], 5)
    st, _, page = api.call("GET", f"/api/v1/dead-letters?task_id={tid}", headers=ADMIN)
    assert st == 200 and len(page["items"]) == 1
    return str(page["items"][0]["id"])


def test_every_change_is_on_record_once_with_its_actor(api: Served) -> None:
    t1 = as_(api, ALICE, "POST", "/api/v1/tasks", delayed(payload={"secret": "s3"}))["id"]
    batch = as_(api, BOB, "POST", "/api/v1/tasks/batch", {"tasks": [delayed(), delayed()]})
    b1, b2 = (i["id"] for i in batch["items"])
    as_(api, CAROL, "PATCH", f"/api/v1/tasks/{t1}", {"timeout_ms": 7000})
    as_(api, ALICE, "POST", f"/api/v1/tasks/{t1}/pause")
    as_(api, ALICE, "POST", f"/api/v1/tasks/{t1}/resume")
    as_(api, BOB, "POST", f"/api/v1/tasks/{b1}/trigger")
    per = as_(api, CAROL, "POST", "/api/v1/tasks", {
        "type": "periodic", "cron_expr": "0 * * * *", "callback_url": "http://127.0.0.1:9/p"})["id"]
    now = int(time.time() * 1000)
    as_(api, CAROL, "POST", f"/api/v1/tasks/{per}/backfill", {"start": now - 3 * 3_600_000, "end": now})
    as_(api, ALICE, "DELETE", f"/api/v1/tasks/{b2}")
    dead = as_(api, BOB, "POST", "/api/v1/tasks", delayed(max_retries=0, interval_ms=1))["id"]
    d1 = _dead_letter(api, dead)
    as_(api, BOB, "POST", f"/api/v1/dead-letters/{d1}/redrive")
    d2 = _dead_letter(api, dead)
    as_(api, CAROL, "DELETE", f"/api/v1/dead-letters/{d2}")
    as_(api, ALICE, "PUT", "/api/v1/flows/api.example", {"rate_per_s": 5})
    as_(api, ALICE, "POST", "/api/v1/flows/api.example/pause")
    as_(api, ALICE, "POST", "/api/v1/flows/api.example/resume")
    as_(api, BOB, "DELETE", "/api/v1/flows/api.example")
    # refused changes are not on record
    assert api.call("POST", f"/api/v1/tasks/{per}/trigger", headers=bearer(api, BOB))[0] == 409
    assert api.call("DELETE", "/api/v1/tasks/01M8MABE0SEAD6S92SY1NA2EWB", headers=bearer(api, BOB))[0] == 404

    got = [(a["actor"]["name"], a["action"], a["target"]) for a in reversed(audit(api))]
    assert got == [
        *(("bootstrap", "key.create", api.keys[n][0]) for n in (ALICE, BOB, CAROL)),
        ("alice", "task.create", t1), ("bob", "task.create", b1), ("bob", "task.create", b2),
        ("carol", "task.patch", t1), ("alice", "task.pause", t1), ("alice", "task.resume", t1),
        ("bob", "task.trigger", b1), ("carol", "task.create", per), ("carol", "task.backfill", per),
        ("alice", "task.delete", b2), ("bob", "task.create", dead), ("bob", "dead_letter.redrive", d1),
        ("carol", "dead_letter.delete", d2), ("alice", "flow.put", "api.example"),
        ("alice", "flow.pause", "api.example"), ("alice", "flow.resume", "api.example"),
        ("bob", "flow.delete", "api.example"),
    ]
    first = audit(api, "&action=task.patch")[0]
    assert list(first["changes"]) == ["timeout_ms"] and first["changes"]["timeout_ms"]["new"] == 7000
    assert first["actor"] == {"key_id": api.keys[CAROL][0], "name": "carol"} and first["remote_addr"] == "127.0.0.1"
    assert first["namespace"] == "default"
    assert "s3" not in json.dumps(audit(api, "&actor=alice"))
    assert {a["actor"]["name"] for a in audit(api, f"&actor={api.keys[BOB][0]}")} == {"bob"}
    made = audit(api, "&action=key.create")[0]
    assert made["namespace"] == "*" and made["changes"] == {
        "name": {"old": None, "new": "carol"}, "namespaces": {"old": None, "new": ["*"]},
        "role": {"old": None, "new": "writer"}}
    assert audit(api, "&namespace=payments") == []


def test_jsonl_export_streams_the_same_entries(api: Served) -> None:
    for _ in range(5):
        as_(api, ALICE, "POST", "/api/v1/tasks", delayed())
    r = api.http.request("GET", api.url + "/api/v1/audit?format=jsonl&action=task.create", headers=ADMIN)
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.data.decode().splitlines()]
    assert lines == audit(api, "&action=task.create") and len(lines) == 5


def test_without_a_named_actor_the_token_holder_is_bootstrap(tmp_path: Path) -> None:
    with serve(tmp_path, ApiSettings(node_id="n1", auth_token="t0ken")) as s:
        st, _, _ = s.call("POST", "/api/v1/tasks", delayed(), headers={"Authorization": "Bearer t0ken"})
        assert st == 201
        st, _, page = s.call("GET", "/api/v1/audit", headers={"Authorization": "Bearer t0ken"})
        assert st == 200 and page["items"][0]["actor"] == {"key_id": "bootstrap", "name": "bootstrap"}
    with serve(tmp_path / "open") as s:
        s.call("POST", "/api/v1/tasks", delayed())
        assert audit(s, headers={})[0]["actor"] == {"key_id": "anonymous", "name": "anonymous"}


def test_bad_audit_queries_are_400(api: Served) -> None:
    for q in ("action=nope", "namespace=Bad!", "cursor=zz", "format=xml", "format=jsonl&limit=3"):
        st, _, body = api.call("GET", f"/api/v1/audit?{q}", headers=ADMIN)
        assert st == 400, (q, body)


def test_a_key_of_some_namespaces_reads_only_their_entries(api: Served) -> None:
    assert api.call("POST", "/api/v1/namespaces", {"name": "payments"}, headers=ADMIN)[0] == 201
    st, _, k = api.call("POST", "/api/v1/keys", {"name": "pay-ro", "role": "reader", "namespaces": ["payments"]},
                        headers=ADMIN)
    assert st == 201, k
    mine = as_(api, ALICE, "POST", "/api/v1/tasks", delayed(namespace="payments"))["id"]
    as_(api, ALICE, "POST", "/api/v1/tasks", delayed())
    as_(api, ALICE, "PUT", "/api/v1/flows/api.example", {"rate_per_s": 5})
    reader = {"Authorization": f"Bearer {k['secret']}"}
    seen = audit(api, headers=reader)
    assert [(a["action"], a["target"], a["namespace"]) for a in seen] == [("task.create", mine, "payments")]
    r = api.http.request("GET", api.url + "/api/v1/audit?format=jsonl", headers=reader)
    assert [json.loads(x)["target"] for x in r.data.decode().splitlines()] == [mine]
    assert api.call("GET", "/api/v1/audit?namespace=default", headers=reader)[0] == 403
    # the whole-cluster entries (namespace "*": keys, namespaces, flows) only for a key of every namespace
    assert {a["namespace"] for a in audit(api)} == {"*", "default", "payments"}
