"""The Tasks and Executions lists act on the filter applied (the one in the URL, that the table
shows), never on a form changed without Apply: a refresh, the next page, "select all N matching"
with a bulk action and an export all keep to what is listed. A text search the node's capped index
answered ``partial`` says its results may be incomplete."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from molens.model import Execution, ExecutionResult, FireKind
from tests.browser.conftest import Served, serve_ui
from tests.browser.test_i18n import _Writes

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/applied"


def _ids(page: Page) -> list[str]:
    return page.locator("tr[data-task-id]").evaluate_all("els => els.map(e => e.dataset.taskId)")


def _tasks(s: Served, pending: int, paused: int) -> tuple[list[str], list[str]]:
    """`pending` periodic tasks and `paused` paused ones: ([pending ids], [paused ids])."""
    bodies = [{"type": "periodic", "interval_ms": 600_000, "callback_url": f"{CB}/{i}"} for i in range(pending + paused)]
    st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
    assert st == 201, res
    ids = [str(x["id"]) for x in res["items"]]
    for tid in ids[pending:]:
        assert s.api("POST", f"/tasks/{tid}/pause")[0] == 200
    return ids[:pending], ids[pending:]


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, list[str], list[str]]]:
    """60 pending tasks (two pages) and 5 paused ones; nothing here changes them."""
    with serve_ui(tmp_path_factory.mktemp("applied")) as s:
        pending, paused = _tasks(s, 60, 5)
        yield s, pending, paused


def test_refresh_and_the_next_page_keep_the_applied_filter_not_the_forms(
    listed: tuple[Served, list[str], list[str]], page: Page
) -> None:
    s, pending, paused = listed
    page.goto(s.url + "/ui/tasks?status=pending")
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    expect(page.get_by_test_id("total")).to_have_text("Total: 60")
    first = _ids(page)
    assert set(first) <= set(pending)

    # the Status dropdown changed, Apply not pressed: the list, its total and a refresh stay on pending
    page.get_by_test_id("filter-status").select_option("paused")
    expect(page.get_by_test_id("total")).to_have_text("Total: 60")
    with page.expect_response(lambda r: "/api/v1/tasks?" in r.url and r.request.method == "GET") as got:
        page.get_by_test_id("refresh").click()
    assert "status=pending" in got.value.url and "paused" not in got.value.url
    expect(page.get_by_test_id("refresh")).to_be_enabled()
    assert _ids(page) == first

    # the next page is the applied filter's, with its own cursor
    page.get_by_test_id("filter-status").select_option("paused")
    page.get_by_test_id("next-page").click()
    page.wait_for_url(re.compile(r"[?&]p=2"))
    assert "status=pending" in page.url and "paused" not in page.url
    expect(page.locator("tr[data-task-id]")).to_have_count(10)
    assert set(_ids(page)) == set(pending) - set(first)
    expect(page.get_by_test_id("filter-status")).to_have_value("pending")  # the form shows what is applied
    page.get_by_test_id("prev-page").click()
    page.wait_for_url(re.compile(r"/ui/tasks\?status=pending$"))
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    assert set(paused).isdisjoint(_ids(page))


def test_select_all_matching_then_delete_acts_on_the_listed_filter_not_the_forms(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    with serve_ui(tmp_path_factory.mktemp("every")) as s:
        pending, paused = _tasks(s, 55, 3)
        page.goto(s.url + "/ui/tasks?status=pending")
        expect(page.locator("tr[data-task-id]")).to_have_count(50)
        page.get_by_test_id("select-all").check()
        page.get_by_test_id("select-every").click()
        expect(page.get_by_test_id("bulk-selected")).to_have_text("All 55 matching tasks selected")
        # a changed dropdown neither changes the selection nor what the delete acts on
        page.get_by_test_id("filter-status").select_option("paused")
        expect(page.get_by_test_id("bulk-selected")).to_have_text("All 55 matching tasks selected")
        page.get_by_test_id("bulk-delete").click()
        expect(page.get_by_test_id("confirm-dialog")).to_contain_text("55")
        page.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("toast").filter(has_text="Delete:")).to_contain_text("55 done", timeout=60_000)
        for tid in paused:  # never listed: untouched
            st, task = s.api("GET", f"/tasks/{tid}")
            assert (st, task["status"]) == (200, "paused")
        assert all(s.api("GET", f"/tasks/{tid}")[0] == 404 for tid in pending)


def test_applying_another_filter_drops_the_every_matching_selection(
    listed: tuple[Served, list[str], list[str]], page: Page
) -> None:
    s, _, paused = listed
    page.goto(s.url + "/ui/tasks?status=pending")
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    page.get_by_test_id("select-all").check()
    page.get_by_test_id("select-every").click()
    expect(page.get_by_test_id("bulk-selected")).to_have_text("All 60 matching tasks selected")
    page.get_by_test_id("filter-status").select_option("paused")
    page.get_by_test_id("filter-apply").click()
    page.wait_for_url(re.compile(r"status=paused"))
    expect(page.locator("tr[data-task-id]")).to_have_count(len(paused))
    expect(page.get_by_test_id("bulk-bar")).to_have_count(0)


def test_a_search_the_capped_index_answered_says_it_may_be_incomplete(
    listed: tuple[Served, list[str], list[str]], page: Page
) -> None:
    s, _, _ = listed
    capped = {"on": True}

    def partial(route: Route) -> None:  # the node's answer, marked as a capped index marks it
        res = route.fetch()
        body = res.json()
        if capped["on"]:
            body["partial"] = True
        route.fulfill(response=res, body=json.dumps(body))

    page.route(re.compile(r"/api/v1/tasks\?.*\bq="), partial)
    page.goto(s.url + "/ui/tasks?q=matches-nothing")
    expect(page.get_by_test_id("tasks-empty")).to_be_visible()
    expect(page.get_by_test_id("search-incomplete")).to_have_text(
        re.compile(r"^Results may be incomplete: this node.s search index is full and leaves some tasks out\.$"))
    capped["on"] = False
    page.goto(s.url + "/ui/tasks?q=applied")
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    expect(page.get_by_test_id("search-incomplete")).to_have_count(0)
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    capped["on"] = True
    page.goto(s.url + "/ui/tasks?q=matches-nothing")
    expect(page.get_by_test_id("search-incomplete")).to_contain_text("结果可能不完整")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    """55 successful executions and 5 failed ones, of one task."""
    with serve_ui(tmp_path_factory.mktemp("execs")) as s:
        st, task = s.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": CB})
        assert st == 201
        now = int(time.time() * 1000)
        rows = [
            Execution(task_id=task["id"], fire_id=f"{task['id']}-{i}", seq=i, attempt=1, kind=FireKind.CALLBACK,
                      result=ExecutionResult.FAILED if i % 12 == 0 else ExecutionResult.SUCCESS,
                      status_code=500 if i % 12 == 0 else 200, latency_ms=10, worker="n1", url=CB, scene="default",
                      fired_ms=now - 60_000 * (61 - i), finished_ms=now - 60_000 * (61 - i) + 10, response_head="")
            for i in range(1, 61)
        ]
        s.ctx.history.apply([(10_000_000, _Writes(rows))])
        yield s, str(task["id"])


def test_executions_refresh_and_export_keep_the_applied_filter_not_the_forms(
    history: tuple[Served, str], page: Page
) -> None:
    s, _ = history
    page.goto(s.url + "/ui/executions?result=failed")
    expect(page.locator("tr[data-exec-id]")).to_have_count(5)
    page.get_by_test_id("filter-result").select_option("success")
    page.get_by_test_id("filter-task").fill("NOT-A-TASK")
    with page.expect_response(lambda r: "/api/v1/executions?" in r.url and r.request.method == "GET") as got:
        page.get_by_test_id("refresh").click()
    assert "result=failed" in got.value.url and "NOT-A-TASK" not in got.value.url
    expect(page.get_by_test_id("refresh")).to_be_enabled()
    expect(page.locator("tr[data-exec-id]")).to_have_count(5)
    # the export is the list's, not the form's
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_test_id("export").select_option("jsonl")
    rows = [json.loads(line) for line in Path(dl.value.path()).read_text().splitlines() if line.strip()]
    assert len(rows) == 5 and {r["result"] for r in rows} == {"failed"}
