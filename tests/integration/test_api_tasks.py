"""Happy paths of every REST endpoint on real waitress over a real store (LocalContext).

Every response body is validated against its schema in the served OpenAPI document.
"""

from __future__ import annotations

import concurrent.futures
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from molens.fsm.commands import DeleteApiKey, Dispatched, DispatchItem, ResultItem, Results
from molens.model import FireKind, Outcome
from molens.web.api_context import ApiSettings
from tests.integration.api_server import Served, check_schema, delayed, serve

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("api")) as s:
        yield s


def create(api: Served, **kw: object) -> dict[str, object]:
    st, h, body = api.call("POST", "/api/v1/tasks", delayed(**kw))
    assert st == 201, body
    assert h["X-Molens-Role"] == "leader"
    check_schema(body, "Task")
    return body  # type: ignore[no-any-return]


def test_create_delayed_task_answers_201_with_the_task(api: Served) -> None:
    before = int(time.time() * 1000)
    t = create(api, payload={"order": 42, "items": ["a", "b"]}, scene="billing.v2")
    assert t["status"] == "pending"
    assert t["payload"] == {"order": 42, "items": ["a", "b"]}
    assert t["scene"] == "billing.v2"
    assert isinstance(t["next_run_at"], int) and t["next_run_at"] >= before + 60_000
    st, _, got = api.call("GET", f"/api/v1/tasks/{t['id']}")
    assert st == 200 and got == t


def test_create_periodic_interval_task(api: Served) -> None:
    st, _, t = api.call(
        "POST",
        "/api/v1/tasks",
        {"type": "periodic", "interval_ms": 5_000, "callback_url": "http://127.0.0.1:9/p", "reliability": "at_most_once"},
    )
    assert st == 201, t
    check_schema(t, "Task")
    assert t["type"] == "periodic" and t["max_fails"] == 100 and t["reliability"] == "at_most_once"


def test_same_idempotency_key_answers_200_with_the_first_task(api: Served) -> None:
    first = create(api, idempotency_key="order-7")
    st, _, again = api.call("POST", "/api/v1/tasks", delayed(idempotency_key="order-7", interval_ms=1))
    assert st == 200
    assert again["id"] == first["id"] and again["interval_ms"] == 60_000


def test_idempotency_key_header_is_honoured(api: Served) -> None:
    st, _, a = api.call("POST", "/api/v1/tasks", delayed(), headers={"Idempotency-Key": "hdr-1"})
    assert st == 201 and a["idempotency_key"] == "hdr-1"
    st, _, b = api.call("POST", "/api/v1/tasks", delayed(), headers={"Idempotency-Key": "hdr-1"})
    assert st == 200 and b["id"] == a["id"]


def test_batch_create_creates_all_in_one_entry(api: Served) -> None:
    n0 = api.task_count()
    entries0 = api.ctx.store.applied_index()
    tasks = [delayed(scene="batch", payload=i) for i in range(250)]
    st, _, body = api.call("POST", "/api/v1/tasks/batch", {"tasks": tasks})
    assert st == 201
    check_schema(body, "BatchCreateResponse")
    assert body["errors"] == [] and len(body["items"]) == 250
    assert [t["payload"] for t in body["items"]] == list(range(250))
    assert len({t["id"] for t in body["items"]}) == 250
    assert api.task_count() == n0 + 250
    assert api.ctx.store.applied_index() == entries0 + 1


def test_batch_with_only_known_idempotency_keys_answers_200(api: Served) -> None:
    tasks = [delayed(idempotency_key=f"b-{i}") for i in range(3)]
    st, _, first = api.call("POST", "/api/v1/tasks/batch", {"tasks": tasks})
    assert st == 201
    st, _, again = api.call("POST", "/api/v1/tasks/batch", {"tasks": tasks})
    assert st == 200
    assert [t["id"] for t in again["items"]] == [t["id"] for t in first["items"]]


def test_batch_with_prefer_return_minimal_answers_ids_alone(api: Served) -> None:
    tasks = [delayed(idempotency_key=f"min-{i}", payload=i) for i in range(4)]
    st, h, body = api.call("POST", "/api/v1/tasks/batch", {"tasks": tasks}, headers={"Prefer": "return=minimal"})
    assert st == 201 and h.get("Preference-Applied") == "return=minimal"
    check_schema(body, "BatchCreateResponse")
    assert body["errors"] == [] and all(set(t) == {"id"} for t in body["items"])
    ids = [t["id"] for t in body["items"]]
    assert [api.call("GET", f"/api/v1/tasks/{i}")[2]["payload"] for i in ids] == [0, 1, 2, 3]
    # RFC 7240's grammar: tokens case-insensitive, values may be quoted, other preferences ignored
    for prefer in ('respond-async, RETURN="minimal"; x=1', "handling=lenient,return=minimal"):
        st, h, again = api.call("POST", "/api/v1/tasks/batch", {"tasks": tasks}, headers={"Prefer": prefer})
        assert st == 200 and again["items"] == body["items"] and h.get("Preference-Applied") == "return=minimal"
    for prefer in ("return=representation", "return", "minimal", "=,;", "x" * 2000):
        st, h, full = api.call("POST", "/api/v1/tasks/batch", {"tasks": tasks}, headers={"Prefer": prefer})
        assert st == 200 and "Preference-Applied" not in h
        assert [t["payload"] for t in full["items"]] == [0, 1, 2, 3]


def test_empty_batch_is_fine(api: Served) -> None:
    st, _, body = api.call("POST", "/api/v1/tasks/batch", {"tasks": []})
    assert (st, body) == (200, {"items": [], "errors": []})


def test_list_pages_through_every_task_with_cursors(api: Served) -> None:
    ids = [create(api, scene="paging")["id"] for _ in range(7)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        q = "/api/v1/tasks?scene=paging&limit=3" + (f"&cursor={cursor}" if cursor else "")
        st, _, page = api.call("GET", q)
        assert st == 200
        check_schema(page, "TaskList")
        seen += [t["id"] for t in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # id order (= creation order to the millisecond), no duplicates, nothing missed
    assert seen == sorted(ids)
    assert pages >= 3


def _walk(api: Served, query: str, limit: int = 3) -> list[dict[str, object]]:
    seen: list[dict[str, object]] = []
    cursor = None
    for _ in range(100):
        st, _, page = api.call("GET", f"/api/v1/tasks?{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
        assert st == 200, page
        check_schema(page, "TaskList")
        seen += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the cursor never ended")


def test_list_newest_first_and_by_next_run_page_through_every_task_once(api: Served) -> None:
    delays = [300_000, 120_000, 900_000, 60_000, 600_000, 180_000, 240_000]
    made = [create(api, scene="order", interval_ms=d) for d in delays]
    paused = made[2]
    api.call("POST", f"/api/v1/tasks/{paused['id']}/pause")
    ids = [t["id"] for t in made]
    newest = [t["id"] for t in _walk(api, "scene=order&order=-created")]
    assert newest == sorted(ids, reverse=True)
    by_due = _walk(api, "scene=order&order=next_run")
    # soonest first; the paused task has no next run, so it is not in this order
    assert [t["id"] for t in by_due] == [t["id"] for t in sorted(made, key=lambda t: t["next_run_at"]) if t is not paused]
    st, _, body = api.call("GET", "/api/v1/tasks?order=sideways")
    assert (st, body["error"]["field"]) == (400, "order")
    # a cursor belongs to its order
    st, _, page = api.call("GET", "/api/v1/tasks?scene=order&order=-created&limit=1")
    st, _, body = api.call("GET", f"/api/v1/tasks?order=next_run&cursor={page['next_cursor']}")
    assert (st, body["error"]["field"]) == (400, "cursor")


def test_list_filters_by_status_type_scene_and_url(api: Served) -> None:
    a = create(api, scene="flt", callback_url="http://127.0.0.1:9/Hooks/Alpha")
    b = create(api, scene="flt", callback_url="http://127.0.0.1:9/hooks/beta")
    api.call("POST", f"/api/v1/tasks/{b['id']}/pause")

    def ids(q: str) -> list[str]:
        st, _, page = api.call("GET", "/api/v1/tasks?limit=1000&" + q)
        assert st == 200, page
        return [t["id"] for t in page["items"]]

    both = sorted([a["id"], b["id"]])
    assert ids("scene=flt") == both
    assert ids("scene=flt&status=paused") == [b["id"]]
    assert ids("scene=flt&status=pending,paused") == both
    assert ids("scene=flt&url=hooks/alpha") == [a["id"]]
    assert ids("scene=flt&type=periodic") == []
    assert ids("scene=flt&type=delayed&status=done") == []


def test_pause_resume_trigger_delete(api: Served) -> None:
    t = create(api)
    tid = t["id"]
    st, _, p = api.call("POST", f"/api/v1/tasks/{tid}/pause")
    assert st == 200 and p["status"] == "paused" and p["next_run_at"] is None
    check_schema(p, "Task")
    st, _, r = api.call("POST", f"/api/v1/tasks/{tid}/resume")
    assert st == 200 and r["status"] == "pending" and r["next_run_at"] == t["next_run_at"]
    now = int(time.time() * 1000)
    st, _, g = api.call("POST", f"/api/v1/tasks/{tid}/trigger")
    assert st == 200 and g["status"] == "pending" and now - 1000 <= g["next_run_at"] < t["next_run_at"]
    n = api.task_count()
    st, _, d = api.call("DELETE", f"/api/v1/tasks/{tid}")
    assert st == 200 and d["id"] == tid
    assert api.task_count() == n - 1
    st, _, err = api.call("GET", f"/api/v1/tasks/{tid}")
    assert st == 404 and err["error"]["field"] == "task_id"


def _fire(api: Served, tid: str, code: int, latency_ms: int, head: str = "ok") -> None:
    """Drive one callback attempt through the real machine: Dispatched, then its Results."""
    now = int(time.time() * 1000)
    task = api.ctx.get_task(tid)
    assert task is not None
    fid = task.fire_id
    api.ctx.propose([Dispatched(now, (DispatchItem(
        fire_id=fid, task_id=tid, attempt=task.attempt + 1, worker="n1", deadline_ms=now + 10_000,
    ),))], 5)
    res = ResultItem(
        fire_id=fid, kind=FireKind.CALLBACK, status_code=code, outcome=Outcome.RESPONSE, response_head=head,
        latency_ms=latency_ms, worker="n1",
    )
    api.ctx.propose([Results(now + latency_ms, (res,))], 5)


def test_executions_per_task_and_global_with_filters_and_cursors(api: Served) -> None:
    t1 = create(api, interval_ms=0, max_retries=5, callback_url="http://127.0.0.1:9/exec?x=1")
    t2 = create(api, interval_ms=0)
    _fire(api, t1["id"], 500, 30, "boom")
    _fire(api, t2["id"], 200, 10)
    st, _, task = api.call("GET", f"/api/v1/tasks/{t1['id']}")
    assert task["status"] == "firing" and task["last_outcome"] == "failed" and task["last_execution_result"] == "boom"
    st, _, page = api.call("GET", f"/api/v1/tasks/{t1['id']}/executions")
    assert st == 200
    check_schema(page, "ExecutionList")
    assert [(e["result"], e["status_code"], e["execution_result"]) for e in page["items"]] == [("failed", 500, "boom")]
    st, _, page = api.call("GET", "/api/v1/executions?result=success&limit=1000")
    assert t2["id"] in {e["task_id"] for e in page["items"]}
    assert all(e["result"] == "success" for e in page["items"])
    st, _, page = api.call("GET", f"/api/v1/executions?task_id={t2['id']}")
    assert [e["task_id"] for e in page["items"]] == [t2["id"]]
    # cursor paging over the global list, newest first
    st, _, p1 = api.call("GET", "/api/v1/executions?limit=1")
    assert p1["next_cursor"] is not None
    st, _, p2 = api.call("GET", f"/api/v1/executions?limit=1&cursor={p1['next_cursor']}")
    assert p2["items"][0]["id"] < p1["items"][0]["id"]
    future = int(time.time() * 1000) + 3_600_000
    st, _, none = api.call("GET", f"/api/v1/executions?since={future}")
    assert (st, none["items"]) == (200, [])


def test_url_stats_report_percentiles_and_trend(api: Served) -> None:
    tasks = [create(api, interval_ms=0, callback_url="http://127.0.0.1:9/lat?task=" + str(i)) for i in range(10)]
    for i, t in enumerate(tasks):
        _fire(api, t["id"], 200, 10 * (i + 1))
    # _fire stamps each result up to 100 ms after now, so it may fall in the next minute's bucket:
    # the window reaches a minute past it
    until = int(time.time() * 1000) + 60_000
    st, _, body = api.call("GET", f"/api/v1/stats/urls?url=http://127.0.0.1:9/lat&until={until}")
    assert st == 200, body
    check_schema(body, "UrlStatsList")
    [row] = body["items"]
    assert row["url"] == "http://127.0.0.1:9/lat" and row["count"] == 10
    assert 45 <= row["p50_ms"] <= 55 and 90 <= row["p90_ms"] <= 100 and 95 <= row["p99_ms"] <= 105
    assert sum(p["count"] for p in row["trend"]) == 10


def test_cluster_and_stats_endpoints(api: Served) -> None:
    for path, schema in (
        ("/api/v1/cluster/status", "ClusterStatus"),
        ("/api/v1/cluster/leader", "LeaderInfo"),
        ("/api/v1/cluster/stats", "ClusterStats"),
        ("/api/v1/stats", "Stats"),
    ):
        st, h, body = api.call("GET", path)
        assert st == 200, (path, body)
        assert h["X-Molens-Role"] == "leader"
        check_schema(body, schema)
    st, _, stats = api.call("GET", "/api/v1/stats")
    assert stats["tasks_total"] == api.task_count() == sum(stats["tasks"].values())
    st, _, leader = api.call("GET", "/api/v1/cluster/leader")
    assert leader["role"] == "leader" and leader["leader_id"] == "n1"


def test_health_ready_and_openapi(api: Served) -> None:
    st, _, body = api.call("GET", "/healthz")
    assert st == 200 and body["ok"] is True
    check_schema(body, "Health")
    st, _, body = api.call("GET", "/readyz")
    assert st == 200
    check_schema(body, "Ready")
    st, h, doc = api.call("GET", "/api/v1/openapi.json")
    assert st == 200 and doc["openapi"].startswith("3.1") and h["Content-Type"].startswith("application/json")


def test_test_endpoints_answer_after_100ms_without_blocking_others(api: Served) -> None:
    t0 = time.monotonic()
    st, _, body = api.call("POST", "/api/v1/test/callback", {"hello": "world"})
    assert (st, body) == (200, {"ok": True})
    assert time.monotonic() - t0 >= 0.1  # the documented minimum delay, not a speed bound


def test_test_endpoints_do_not_block_other_requests(tmp_path: Path) -> None:
    # a long delay makes "answered while the test calls still sleep" independent of machine speed
    with (
        serve(tmp_path, ApiSettings(test_endpoint_delay_ms=2_000), threads=8) as slow_api,
        concurrent.futures.ThreadPoolExecutor(6) as pool,
    ):
        slow = [pool.submit(slow_api.call, "POST", "/api/v1/test/ack", {"i": i}) for i in range(5)]
        fast = pool.submit(slow_api.call, "GET", "/healthz")
        assert fast.result()[0] == 200
        assert not any(f.done() for f in slow)
        assert [f.result()[:3:2] for f in slow] == [(200, {"ok": True})] * 5


def test_create_cron_task_with_seconds_field_and_timezone(api: Served) -> None:
    now = int(time.time() * 1000)
    st, _, t = api.call(
        "POST",
        "/api/v1/tasks",
        {"type": "periodic", "cron_expr": "*/5 * * * * *", "timezone": "Asia/Shanghai", "callback_url": "http://127.0.0.1:9/c"},
    )
    assert st == 201, t
    check_schema(t, "Task")
    assert t["cron_expr"] == "*/5 * * * * *" and t["timezone"] == "Asia/Shanghai"
    assert now < t["next_run_at"] <= now + 6_000 and t["next_run_at"] % 5_000 == 0


def _pages(api: Served, query: str) -> tuple[list[str], int]:
    found: list[str] = []
    pages = 0
    cursor = None
    while True:
        st, _, page = api.call("GET", f"/api/v1/tasks?{query}" + (f"&cursor={cursor}" if cursor else ""))
        assert st == 200
        pages += 1
        found += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return found, pages


def test_a_sparse_filter_pages_through_bounded_scans(api: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    import molens.web.app as web_app

    monkeypatch.setattr(web_app, "MAX_SCAN", 10)
    monkeypatch.setattr(web_app, "MAX_SCAN_MS", 60_000)  # only the count bound here (the time bound: below)
    st, _, _ = api.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(
        callback_url="http://127.0.0.1:9/sparse-a",
    ) for _ in range(25)]})
    assert st == 201
    want = create(api, callback_url="http://127.0.0.1:9/sparse-b")["id"]
    found, pages = _pages(api, "url=sparse-b")  # no index serves a url filter: the scan is bounded
    assert found == [want]
    assert pages >= 3  # every request examined at most 10 tasks
    # each answer says how many tasks it examined: at most the bound, and all of them once in all
    st, _, stats = api.call("GET", "/api/v1/stats")
    assert st == 200
    scanned: list[int] = []
    cursor = None
    while True:
        st, _, page = api.call("GET", "/api/v1/tasks?url=sparse-b" + (f"&cursor={cursor}" if cursor else ""))
        assert st == 200
        check_schema(page, "TaskList")
        scanned.append(page["scanned"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert max(scanned) == 10 and sum(scanned) == sum(stats["tasks"].values())
    st, _, page = api.call("GET", "/api/v1/tasks?limit=3")
    assert st == 200 and len(page["items"]) == 3 and page["scanned"] == 3  # unfiltered: a page costs a page


def test_a_skipping_scan_stops_on_time_once_it_examined_more_than_the_page(
    api: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    import molens.web.app as web_app

    monkeypatch.setattr(web_app, "MAX_SCAN_MS", 0)  # every request is out of time at once
    st, _, _ = api.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(
        callback_url="http://127.0.0.1:9/timed-a",
    ) for _ in range(12)]})
    assert st == 201
    want = create(api, callback_url="http://127.0.0.1:9/timed-b")["id"]
    st, _, stats = api.call("GET", "/api/v1/stats")
    assert st == 200
    scanned: list[int] = []
    found: list[str] = []
    cursor = None
    while True:
        st, _, page = api.call("GET", "/api/v1/tasks?url=timed-b&limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert st == 200
        scanned.append(page["scanned"])
        found += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [want]
    # each paused answer examined limit + 1 tasks (the page is never cut short by time), and none twice
    assert set(scanned[:-1]) == {3} and 1 <= scanned[-1] <= 3 and sum(scanned) == sum(stats["tasks"].values())
    st, _, page = api.call("GET", "/api/v1/tasks?limit=20")  # a page whose tasks all match is never cut short
    assert st == 200 and len(page["items"]) == 20 and page["scanned"] == 20


def test_status_and_scene_filters_read_their_index_so_a_page_costs_a_page(
    api: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    import molens.web.app as web_app

    monkeypatch.setattr(web_app, "MAX_SCAN", 10)
    monkeypatch.setattr(web_app, "MAX_SCAN_MS", 60_000)  # only the count bound here (the time bound: below)
    st, _, _ = api.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(scene="dense-a") for _ in range(25)]})
    assert st == 201
    want = [create(api, scene="index-b")["id"] for _ in range(3)]
    st, _, _ = api.call("POST", f"/api/v1/tasks/{want[1]}/pause")
    assert st == 200
    assert _pages(api, "scene=index-b") == (want, 1)  # one request, although 25 others come first
    assert _pages(api, "scene=index-b&order=-created") == (want[::-1], 1)
    found, pages = _pages(api, "status=paused&scene=index-b")
    assert found == [want[1]] and pages == 1
    found, pages = _pages(api, "scene=index-b&limit=1")
    assert found == want and pages == 3  # a page of one, and the cursor goes on from it


def test_ack_url_cannot_be_removed_while_the_task_waits_for_its_ack(api: Served) -> None:
    """Its callback answered 2xx, the task waits for its ACK (paused there or not): without an
    ack_url no probe could go, and a resume would send the callback again. 409, nothing changed."""
    t = create(api, interval_ms=0, ack_url="http://127.0.0.1:9/ack", ack_delay_ms=3_600_000)
    now = int(time.time() * 1000)
    fid = f"{t['id']}-1"
    api.ctx.propose([Dispatched(now, (DispatchItem(
        fire_id=fid, task_id=t["id"], attempt=1, worker="n1", deadline_ms=now + 5000),))], 5)
    api.ctx.propose([Results(now, (ResultItem(
        fire_id=fid, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE, response_head="ok",
        latency_ms=3, worker="n1"),))], 5)
    path = f"/api/v1/tasks/{t['id']}"
    assert api.call("GET", path)[2]["status"] == "awaiting_ack"
    for step in ("awaiting", "paused"):
        st, _, out = api.call("PATCH", path, {"ack_url": None})
        assert (st, out["error"]["code"], out["error"]["field"]) == (409, "illegal_transition", "ack_url"), (step, out)
        st, _, out = api.call("PATCH", path, {"reliability": "at_most_once", "ack_url": None})
        assert st == 409, (step, out)
        if step == "awaiting":
            assert api.call("POST", f"{path}/pause")[0] == 200
    got = api.call("GET", path)[2]
    assert got["ack_url"] == "http://127.0.0.1:9/ack" and got["version"] == t["version"]
    assert api.call("PATCH", path, {"ack_url": "http://127.0.0.1:9/ack2"})[0] == 200  # changing it is fine


def test_api_answers_are_not_kept_by_caches(api: Served) -> None:
    """A key's secret is in its creation's answer, an export's ticket in its link's: no answer of the
    API may be stored by a proxy or the browser's cache."""
    st, h, key = api.call("POST", "/api/v1/keys", {"name": "cache-check", "role": "reader", "namespaces": ["*"]})
    assert st == 201 and key["secret"] and h["Cache-Control"] == "no-store"
    st, h, ticket = api.call("POST", "/api/v1/exports", {"url": "/api/v1/tasks?format=csv"})
    assert st == 201 and "ticket=" in ticket["url"] and h["Cache-Control"] == "no-store"
    for path in ("/api/v1/tasks", "/api/v1/cluster/leader", "/healthz"):
        assert api.call("GET", path)[1]["Cache-Control"] == "no-store", path


def test_a_key_already_accepted_is_not_held_back_with_the_guesses_from_its_address(tmp_path: Path) -> None:
    """After 10 bad keys from 127.0.0.1 every request from there got 429 before its key was looked
    at, the valid ones too (behind a proxy: everyone's). A key the node accepted before goes on;
    the bootstrap token and a key not seen yet are still held back (checking them first would
    answer guesses at full speed)."""
    token = "brake-token"
    admin = {"Authorization": f"Bearer {token}"}
    with serve(tmp_path / "brake", ApiSettings(auth_token=token)) as s:
        st, _, used = s.call("POST", "/api/v1/keys", {"name": "used", "role": "reader", "namespaces": ["*"]},
                             headers=admin)
        st2, _, fresh = s.call("POST", "/api/v1/keys", {"name": "fresh", "role": "reader", "namespaces": ["*"]},
                               headers=admin)
        assert (st, st2) == (201, 201)
        used_h = {"Authorization": f"Bearer {used['secret']}"}
        assert s.call("GET", "/api/v1/tasks", headers=used_h)[0] == 200  # accepted once
        for _ in range(12):
            s.call("GET", "/api/v1/tasks", headers={"Authorization": "Bearer nope"})
        assert s.call("GET", "/api/v1/tasks", headers={"Authorization": "Bearer nope"})[0] == 429
        assert s.call("GET", "/api/v1/tasks", headers=used_h)[0] == 200
        assert s.call("GET", "/api/v1/tasks", headers=admin)[0] == 429
        assert s.call("GET", "/api/v1/tasks", headers={"Authorization": f"Bearer {fresh['secret']}"})[0] == 429
        assert s.call("DELETE", f"/api/v1/keys/{used['id']}", headers=admin)[0] == 429  # braked as well
        s.ctx.propose([DeleteApiKey(int(time.time() * 1000), used["id"])], 5)  # revoked: no longer let through
        assert s.call("GET", "/api/v1/tasks", headers=used_h)[0] == 429


def test_a_short_bootstrap_token_is_warned_about_and_a_long_one_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="molens.web.access"):
        with serve(tmp_path / "short", ApiSettings(auth_token="hunter2")):
            pass
        assert "http.auth_token is 7 characters" in caplog.text
        caplog.clear()
        with serve(tmp_path / "long", ApiSettings(auth_token="x" * 32)):
            pass
        assert "http.auth_token" not in caplog.text


def test_a_search_of_some_namespaces_neither_walks_nor_counts_another_namespaces_tasks(
    api: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``?q=GUESS&limit=1`` for a key of one namespace: whether a cursor comes back must not depend on
    what another namespace's payloads hold. When the search counted every task holding the text
    toward its bound (``MAX_SCAN``, then the time bound), a page without one item of the key's own
    came back with a cursor exactly when another namespace's tasks held the guess, a letter at a time."""
    import molens.web.app as web_app

    monkeypatch.setattr(web_app, "MAX_SCAN", 3)
    monkeypatch.setattr(web_app, "MAX_SCAN_MS", 60_000)
    for ns in ("search-mine", "search-other"):
        st, _, out = api.call("POST", "/api/v1/namespaces", {"name": ns})
        assert st == 201, out
    st, _, out = api.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(
        namespace="search-other", payload={"token": "bearer s3cret"}) for _ in range(5)]})
    assert st == 201, out
    mine = create(api, namespace="search-mine", payload={"note": "nothing to find"})["id"]
    for guess in ("bearer s3", "bearer x"):  # held by the other namespace's tasks, and by nobody's
        st, _, page = api.call("GET", f"/api/v1/tasks?q={guess.replace(' ', '%20')}&limit=1&namespace=search-mine")
        assert st == 200 and page["items"] == [] and page["scanned"] == 0, page
        assert page["next_cursor"] is None, f"{guess!r}: the cursor tells of another namespace's payloads"
    st, _, page = api.call("GET", "/api/v1/tasks?q=nothing%20to&namespace=search-mine")
    assert st == 200 and [t["id"] for t in page["items"]] == [mine]
    st, _, page = api.call("GET", "/api/v1/tasks?q=bearer%20s3&limit=10")  # a key of every namespace finds them
    assert st == 200 and len(page["items"]) == 3 and page["next_cursor"] is not None  # 3: MAX_SCAN


@pytest.mark.parametrize("query", ["", "&order=-created", "&order=next_run", "&status=pending,paused",
                                   "&scene=list.mine", "&status=pending&scene=list.mine", "&type=delayed"])
def test_a_list_of_some_namespaces_reads_only_their_tasks(
    api: Served, monkeypatch: pytest.MonkeyPatch, query: str,
) -> None:
    """A list for some namespaces walked every task and skipped the others' toward its scan bound:
    with other namespaces' tasks between its own, a page came back short, with a cursor, and how
    short told how many the others held (on a busy cluster a small namespace paged through thousands
    of empty pages). Read from the store's namespace index, every page is full and ``scanned`` counts
    the key's own tasks only, in every order and filter."""
    import molens.web.app as web_app

    monkeypatch.setattr(web_app, "MAX_SCAN", 3)
    monkeypatch.setattr(web_app, "MAX_SCAN_MS", 60_000)
    n = zlib.crc32(query.encode())  # a namespace of its own: the served node is the module's
    mine_ns, other_ns = f"list-mine-{n}", f"list-other-{n}"
    for ns in (mine_ns, other_ns):
        st, _, out = api.call("POST", "/api/v1/namespaces", {"name": ns})
        assert st == 201, out
    mine = []
    for i in range(4):
        st, _, out = api.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(
            namespace=other_ns, scene="list.mine", interval_ms=60_000 + i) for _ in range(5)]})
        assert st == 201, out
        mine.append(create(api, namespace=mine_ns, scene="list.mine", interval_ms=60_000 + i)["id"])
    expected = list(reversed(mine)) if "-created" in query else mine
    got: list[str] = []
    cursor = None
    for _ in range(len(mine)):
        url = f"/api/v1/tasks?namespace={mine_ns}&limit=2{query}" + (f"&cursor={cursor}" if cursor else "")
        st, _, page = api.call("GET", url)
        assert st == 200, page
        want = min(2, len(mine) - len(got))
        assert [t["id"] for t in page["items"]] == expected[len(got):len(got) + want], (query, got, page)
        assert page["scanned"] == want, page
        got += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if len(got) == len(mine):
            break
        assert cursor is not None, page
    assert got == expected


def test_a_patch_cannot_grow_a_payload_past_its_namespaces_max_payload_bytes(api: Served) -> None:
    """The quota holds a create's payload; a PATCH of the payload is held to it the same way (it could
    grow every task of the namespace to the node's own limit)."""
    st, _, out = api.call("POST", "/api/v1/namespaces", {"name": "small", "quotas": {"max_payload_bytes": 64}})
    assert st == 201, out
    t = create(api, namespace="small", payload={"n": 1})
    st, _, out = api.call("PATCH", f"/api/v1/tasks/{t['id']}", {"payload": {"blob": "x" * 200}})
    assert st == 429 and out["error"]["code"] == "quota_exceeded" and out["error"]["quota"] == "max_payload_bytes", out
    st, _, now = api.call("GET", f"/api/v1/tasks/{t['id']}")
    assert now["payload"] == {"n": 1} and now["version"] == t["version"]  # nothing changed
    st, _, out = api.call("PATCH", f"/api/v1/tasks/{t['id']}", {"payload": {"n": 2}, "timeout_ms": 2_000})
    assert st == 200 and out["payload"] == {"n": 2}, out
    st, _, out = api.call("PATCH", f"/api/v1/tasks/{t['id']}", {"timeout_ms": 3_000})  # the payload left alone
    assert st == 200, out
