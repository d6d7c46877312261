"""The malformed-request table of ``test_api_errors`` against a real ``molens-node`` process:
bad input gets the right status and a JSON error naming the field, and changes nothing.

``test_api_errors`` runs the same table over the single-node ``LocalContext`` stand-in, where it can
also look inside the store; here the node is a real process with Raft, so "changes nothing" is
read over REST: the task list and the node's applied Raft index are unchanged by a refused write.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from tests.integration.api_server import check_schema, delayed
from tests.integration.conftest import Cluster, NodeProc, wait_for
from tests.integration.test_api_errors import CASES, MAX_BODY, T, _ids

_http = urllib3.PoolManager(retries=False, timeout=10)


def _call(n: NodeProc, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    h = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    url = f"http://127.0.0.1:{n.settings['http']['port']}{path}"
    r = _http.request(method, url, body=data, headers=h, redirect=False)
    try:
        parsed = json.loads(r.data) if r.data else None
    except ValueError:
        parsed = r.data
    return r.status, r.headers, parsed


def _task_ids(n: NodeProc) -> list[str]:
    st, _, page = _call(n, "GET", f"{T}?limit=1000")
    assert st == 200, page
    return [t["id"] for t in page["items"]]


def _applied(n: NodeProc) -> int:
    st, _, body = _call(n, "GET", "/api/v1/cluster/status")
    assert st == 200, body
    return int(body["applied_index"])


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, dict[str, str]]]:
    c = Cluster(tmp_path_factory.mktemp("errors-node"), 1, extra={"http": {"max_body_bytes": MAX_BODY}},
                state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_for(lambda: _call(n, "GET", "/readyz")[0] == 200, 30, "the HTTP API to be ready")
        ids = {}
        for name in ("pending", "paused"):
            # due in an hour: nothing fires during the test, so the applied index only moves on writes
            st, _, t = _call(n, "POST", T, delayed(interval_ms=3_600_000))
            assert st == 201, t
            ids[name] = t["id"]
        assert _call(n, "POST", f"{T}/{ids['paused']}/pause")[0] == 200
        yield n, ids
    finally:
        c.kill_all()


@pytest.mark.parametrize(("name", "method", "path", "body", "headers", "status", "field"), CASES,
                         ids=[_ids(c) for c in CASES])
def test_malformed_request_to_a_real_node_gets_json_error_naming_the_field_and_changes_nothing(
    node: tuple[NodeProc, dict[str, str]],
    name: str,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str] | None,
    status: int,
    field: str,
) -> None:
    n, ids = node
    path = path.format(**ids)
    tasks_before = _task_ids(n)
    applied_before = _applied(n)
    if isinstance(body, bytes):
        st, h, got = _call(n, method, path, raw=body, headers=headers)
    else:
        st, h, got = _call(n, method, path, body, headers=headers)
    assert st == status, got
    assert h["Content-Type"].startswith("application/json")
    check_schema(got, "Error")
    assert got["error"]["field"] == field, got
    assert got["error"]["message"]
    assert _task_ids(n) == tasks_before
    if method != "GET" and status != 409:
        assert _applied(n) == applied_before  # refused before any proposal
