"""Exports of the lists as CSV and JSON lines, on a real node (docs/api.md#exports, molens/web/export.py).

10,000 tasks stream out as 10,000 rows in many HTTP chunks (not one body built first), the export
holds exactly what walking the list's pages gives, keys see only their namespaces, and a one-time
ticket stands in for the key on exactly one GET of exactly the export it was made for.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from .conftest import NodeProc, wait_for
from .rest import one_task_node

TOKEN = "export-bootstrap-token-for-tests"
P = "/api/v1"
BIG = 10_000
_http = urllib3.PoolManager(retries=False, timeout=60, maxsize=4)


def call(n: NodeProc, method: str, path: str, body: Any = None, key: str | None = TOKEN) -> urllib3.BaseHTTPResponse:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    return _http.request(method, n.http_url + path, body=data, headers=headers, redirect=False)


def ok(n: NodeProc, method: str, path: str, body: Any = None, key: str = TOKEN) -> Any:
    r = call(n, method, path, body, key)
    assert r.status in (200, 201), (method, path, r.status, r.data[:300])
    return json.loads(r.data)


def pages(n: NodeProc, path: str, key: str = TOKEN) -> list[dict[str, Any]]:
    """Every item of a list, walked page by page through its cursor."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        sep = "&" if "?" in path else "?"
        got = ok(n, "GET", path + sep + "limit=1000" + (f"&cursor={cursor}" if cursor else ""), key=key)
        out += got["items"]
        cursor = got["next_cursor"]
        if not cursor:
            return out


def csv_rows(raw: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(raw.decode())))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    extra = {"http": {"auth_token": TOKEN}, "logging": {"level": "DEBUG"}}
    with one_task_node(tmp_path_factory.mktemp("exports"), extra) as n:
        for ns in ("big", "small"):
            ok(n, "POST", f"{P}/namespaces", {"name": ns})
        task = {"type": "delayed", "interval_ms": 86_400_000, "callback_url": "http://127.0.0.1:9/cb",
                "namespace": "big", "payload": {"order": 0}}
        for b in range(BIG // 1000):
            ok(n, "POST", f"{P}/tasks/batch", {"tasks": [{**task, "payload": {"order": b * 1000 + i}}
                                                         for i in range(1000)]})
        # three that fail at once, for executions and dead letters; one whose key a spreadsheet would run
        for i in range(3):
            ok(n, "POST", f"{P}/tasks", {"type": "delayed", "interval_ms": 0, "max_retries": 0,
                                          "callback_url": "http://127.0.0.1:9/dead", "namespace": "small",
                                          "idempotency_key": f"=HYPERLINK(\"x\",\"{i}\")"})
        wait_for(lambda: len(ok(n, "GET", f"{P}/dead-letters?namespace=small")["items"]) == 3 or None, 30,
                 "three dead letters")
        yield n


def test_ten_thousand_tasks_stream_out_as_rows_in_many_chunks(node: NodeProc) -> None:
    r = _http.request("GET", node.http_url + f"{P}/tasks?namespace=big&format=csv",
                      headers={"Authorization": f"Bearer {TOKEN}"}, preload_content=False)
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/csv")
    assert "Content-Length" not in r.headers and r.headers.get("Transfer-Encoding") == "chunked"
    assert r.headers["Content-Disposition"].startswith('attachment; filename="molens-tasks-')
    chunks = list(r.read_chunked())
    rows = csv_rows(b"".join(chunks))
    assert len(rows) == BIG
    assert len(chunks) > 10, "one page after another, not one body"
    listed = pages(node, f"{P}/tasks?namespace=big")
    assert [row["id"] for row in rows] == [t["id"] for t in listed]
    assert sorted(json.loads(row["payload"])["order"] for row in rows) == list(range(BIG))
    first = rows[0]
    assert first["namespace"] == "big" and first["status"] == "pending"
    assert first["created_at"].endswith("Z") and first["created_at"][:2] == "20"  # ISO 8601 UTC


def test_jsonl_holds_what_the_pages_hold_with_the_same_filters(node: NodeProc) -> None:
    for query in ("namespace=big&q=%22order%22%3A77", "status=failed", "namespace=small&order=-created", ""):
        sep = "&" if query else ""
        raw = call(node, "GET", f"{P}/tasks?{query}{sep}format=jsonl").data
        got = [json.loads(line) for line in raw.decode().splitlines()]
        want = pages(node, f"{P}/tasks?{query}")
        assert [t["id"] for t in got] == [t["id"] for t in want], query
        assert got == want, query


def test_executions_dead_letters_a_tasks_history_and_the_audit_export(node: NodeProc) -> None:
    for path, name in ((f"{P}/executions?namespace=small", "executions"),
                       (f"{P}/dead-letters?namespace=small", "dead-letters"),
                       (f"{P}/audit?namespace=small", "audit")):
        want = pages(node, path)
        assert want, path
        r = call(node, "GET", path + "&format=csv")
        assert r.status == 200 and f'molens-{name}-' in r.headers["Content-Disposition"]
        rows = csv_rows(r.data)
        assert [row["id"] for row in rows] == [str(x["id"]) for x in want], path
        got = [json.loads(line) for line in call(node, "GET", path + "&format=jsonl").data.splitlines()]
        assert got == want, path
    dead = pages(node, f"{P}/dead-letters?namespace=small")[0]
    r = call(node, "GET", f"{P}/tasks/{dead['task_id']}/executions?format=csv")
    rows = csv_rows(r.data)
    assert rows and {row["task_id"] for row in rows} == {dead["task_id"]}
    assert "history" in r.headers["Content-Disposition"]


def test_a_cell_a_spreadsheet_would_run_is_written_as_text(node: NodeProc) -> None:
    rows = csv_rows(call(node, "GET", f"{P}/tasks?namespace=small&format=csv").data)
    keys = sorted(row["idempotency_key"] for row in rows)
    assert keys == [f"'=HYPERLINK(\"x\",\"{i}\")" for i in range(3)]
    jl = [json.loads(x) for x in call(node, "GET", f"{P}/tasks?namespace=small&format=jsonl").data.splitlines()]
    assert sorted(t["idempotency_key"] for t in jl)[0] == '=HYPERLINK("x","0")'  # JSON keeps the value as it is


def test_a_key_exports_only_its_namespaces(node: NodeProc) -> None:
    reader = ok(node, "POST", f"{P}/keys", {"name": "small-reader", "role": "reader", "namespaces": ["small"]})["secret"]
    for path in (f"{P}/tasks", f"{P}/executions", f"{P}/dead-letters", f"{P}/audit"):
        raw = call(node, "GET", f"{path}?format=jsonl", key=reader).data
        items = [json.loads(x) for x in raw.splitlines()]
        assert items, path
        spaces = {x.get("namespace") for x in items if "namespace" in x}
        assert spaces <= {"small"}, (path, spaces)
        assert call(node, "GET", f"{path}?format=jsonl&namespace=big", key=reader).status == 403
    assert len(call(node, "GET", f"{P}/tasks?format=csv", key=reader).data.splitlines()) == 1 + 3


def test_bad_export_parameters_are_refused_before_any_row(node: NodeProc) -> None:
    for query, field in (("format=xml", "format"), ("format=csv&limit=5", "format"),
                         ("format=jsonl&cursor=abc", "format"), ("format=csv&status=nope", "status")):
        r = call(node, "GET", f"{P}/tasks?{query}")
        assert r.status == 400, query
        assert json.loads(r.data)["error"]["field"] == field, query


def test_a_ticket_stands_in_for_the_key_once_for_that_export_only(node: NodeProc) -> None:
    made = ok(node, "POST", f"{P}/keys", {"name": "ticket-reader", "role": "reader", "namespaces": ["small"]})
    key = made["secret"]
    link = ok(node, "POST", f"{P}/exports", {"url": f"{P}/tasks?format=csv&namespace=small"}, key=key)
    assert link["url"].startswith(f"{P}/tasks?format=csv&namespace=small&ticket=") and link["expires_in_s"] == 60
    first = call(node, "GET", link["url"], key=None)
    assert first.status == 200 and len(csv_rows(first.data)) == 3
    assert call(node, "GET", link["url"], key=None).status == 401  # used up
    # bound to the export it was made for: another query, path or method is refused (and uses it up)
    for other in (f"{P}/tasks?namespace=big&format=csv", f"{P}/dead-letters?namespace=small&format=csv"):
        t = ok(node, "POST", f"{P}/exports", {"url": f"{P}/tasks?format=csv&namespace=small"}, key=key)["url"]
        ticket = t.rsplit("ticket=", 1)[1]
        assert call(node, "GET", f"{other}&ticket={ticket}", key=None).status == 401, other
        assert call(node, "GET", t, key=None).status == 401
    # a key revoked after it asked: its ticket is refused
    t = ok(node, "POST", f"{P}/exports", {"url": f"{P}/tasks?format=jsonl&namespace=small"}, key=key)["url"]
    ok(node, "DELETE", f"{P}/keys/{made['id']}")
    assert call(node, "GET", t, key=None).status == 401
    # only an export gets a ticket
    for url in (f"{P}/tasks?namespace=small", f"{P}/keys?format=csv", "http://elsewhere/api/v1/tasks?format=csv",
                f"{P}/tasks?format=csv&ticket=x", f"{P}/tasks?format=csv&format=jsonl",
                f"{P}/tasks?namespace=small&format=csv", f"{P}/tasks?format=csv&Scene=x", f"{P}/tasks?format=csv\n"):
        r = call(node, "POST", f"{P}/exports", {"url": url})
        assert r.status == 400 and json.loads(r.data)["error"]["field"] == "url", url
    assert call(node, "POST", f"{P}/exports", {"url": f"{P}/tasks?format=csv", "more": 1}).status == 400
    # a ticket parameter beside a key is not read, but one this API cannot have issued is refused
    r = call(node, "GET", f"{P}/tasks?ticket={'x' * 65}")
    assert r.status == 400 and json.loads(r.data)["error"]["field"] == "ticket"
    assert call(node, "GET", f"{P}/tasks?ticket=abc").status == 200
    log = node.log_path.read_text(errors="replace")
    assert "ticket=" not in log
