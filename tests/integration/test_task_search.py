"""``GET /api/v1/tasks?q=``: text search over id, callback URL, scene and payload, with the list's
filters and cursor, kept in step with creates, patches and deletes (a real node's HTTP API)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.api_server import Served, check_schema, delayed, serve

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("search")) as s:
        yield s


def _create(api: Served, **kw: object) -> str:
    st, _, body = api.call("POST", "/api/v1/tasks", delayed(**kw))
    assert st == 201, body
    return str(body["id"])


def _search(api: Served, query: str, limit: int = 2) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        st, _, page = api.call("GET", f"/api/v1/tasks?{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
        assert st == 200, page
        check_schema(page, "TaskList")
        assert "partial" not in page
        seen += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the cursor never ended")


def test_q_finds_payload_url_scene_and_id_substrings_case_insensitively_across_pages(api: Served) -> None:
    a = _create(api, scene="srch-one", payload={"order": "Zebra-4711"})
    b = _create(api, scene="srch-two", payload={"note": "zebra-4711 again"})
    c = _create(api, scene="srch-two", callback_url="http://127.0.0.1:9/hooks/ZEBRA-4711")
    d = _create(api, scene="srch-zebra-4711")
    _create(api, scene="srch-two", payload={"order": "lion"})
    assert _search(api, "q=zebra-4711") == [a, b, c, d]
    assert _search(api, "q=ZEBRA-4711&order=-created") == [d, c, b, a]
    assert _search(api, "q=zebra-4711&scene=srch-two") == [b, c]
    assert _search(api, f"q={a[-10:]}") == [a]
    st, _, page = api.call("GET", "/api/v1/tasks?q=zebra-4711&status=paused")
    assert st == 200 and page["items"] == []


def test_q_follows_patches_and_deletes(api: Served) -> None:
    a = _create(api, payload={"k": "okapi-1"})
    assert _search(api, "q=okapi-") == [a]
    st, _, body = api.call("PATCH", f"/api/v1/tasks/{a}", {"payload": {"k": "okapi-2"}})
    assert st == 200, body
    assert _search(api, "q=okapi-1") == []
    assert _search(api, "q=okapi-2") == [a]
    st, _, _ = api.call("DELETE", f"/api/v1/tasks/{a}")
    assert st == 200
    assert _search(api, "q=okapi-") == []


def test_q_with_next_run_order_is_refused(api: Served) -> None:
    st, _, err = api.call("GET", "/api/v1/tasks?q=x&order=next_run")
    assert st == 400 and err["error"]["field"] == "order"
