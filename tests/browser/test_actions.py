"""Task actions in the console: errors as toasts a refresh cannot clear, only the actions a task's
state allows, clone, bulk actions over selected rows, and no polling of a task that is gone."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, Request, Route, expect

from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import FireKind, Outcome
from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/act"


def _task(served: Served, **kw: object) -> dict[str, object]:
    body = {"type": "periodic", "interval_ms": 600_000, "callback_url": CB, **kw}
    st, task = served.api("POST", "/tasks", body)
    assert st == 201, task
    return task


def _fire_404(served: Served, tid: str) -> None:
    """One callback answered 404 through the real machine: a periodic task goes inactive."""
    task = served.ctx.get_task(tid)
    assert task is not None and task.due_ms is not None
    now = task.due_ms  # the command's stamp: the task is due then
    item = DispatchItem(fire_id=task.fire_id, task_id=tid, attempt=task.attempt + 1, worker="n1", deadline_ms=now + 10_000)
    served.ctx.propose([Dispatched(now, (item,))], 5)
    res = ResultItem(
        fire_id=task.fire_id, kind=FireKind.CALLBACK, status_code=404, outcome=Outcome.RESPONSE, response_head="gone",
        latency_ms=5, worker="n1",
    )
    served.ctx.propose([Results(now + 5, (res,))], 5)


def test_an_action_error_is_a_toast_that_survives_the_pages_refreshes(
    served: Served, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 409")
    tid = str(_task(served)["id"])

    def conflict(route: Route) -> None:  # someone else paused it a moment ago
        body = {"error": {"code": "illegal_transition", "message": "cannot pause a task that is paused", "field": "status"}}
        route.fulfill(status=409, content_type="application/json", body=json.dumps(body))

    page.route(f"**/api/v1/tasks/{tid}/pause", conflict)
    page.goto(f"{served.url}/ui/tasks/{tid}")
    page.get_by_test_id("act-pause").click()
    page.get_by_test_id("confirm-ok").click()
    toast = page.get_by_test_id("toast")
    expect(toast).to_contain_text("Pause failed: Not possible in the task\u2019s current state.")
    for _ in range(2):  # two of the page's own refreshes later it is still there
        with page.expect_request(lambda r: r.method == "GET" and r.url.endswith(f"/api/v1/tasks/{tid}"), timeout=10_000):
            pass
        expect(toast).to_be_visible()
    page.get_by_test_id("toast-close").click()
    expect(toast).to_have_count(0)


def test_only_the_actions_the_state_allows_are_offered(served: Served, page: Page) -> None:
    paused = str(_task(served)["id"])
    served.api("POST", f"/tasks/{paused}/pause")
    page.goto(f"{served.url}/ui/tasks/{paused}")
    expect(page.get_by_test_id("task-status")).to_have_text("Paused")
    expect(page.get_by_test_id("act-resume")).to_be_visible()
    expect(page.get_by_test_id("act-trigger")).to_have_count(0)  # the API answers 409 to it
    expect(page.get_by_test_id("act-pause")).to_have_count(0)

    inactive = str(_task(served)["id"])
    _fire_404(served, inactive)
    assert served.api("GET", f"/tasks/{inactive}")[1]["status"] == "inactive"
    page.goto(f"{served.url}/ui/tasks/{inactive}")
    expect(page.get_by_test_id("task-status")).to_have_text("Inactive")
    page.get_by_test_id("act-resume").click()  # the API resumes an inactive periodic task
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("task-status")).to_have_text("Pending")
    expect(page.get_by_test_id("act-trigger")).to_be_visible()
    assert served.api("GET", f"/tasks/{inactive}")[1]["status"] == "pending"


def test_a_task_that_is_gone_is_not_asked_for_again(served: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 404")
    gone = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    asked: list[str] = []

    def on_request(r: Request) -> None:
        if f"/api/v1/tasks/{gone}" in r.url:
            asked.append(r.url)

    page.on("request", on_request)
    page.clock.install()
    page.goto(f"{served.url}/ui/tasks/{gone}")
    expect(page.get_by_test_id("not-found")).to_be_visible()
    seen = len(asked)
    page.clock.run_for(30_000)  # ten of the page's 3 s polling periods, in the page's virtual time
    expect(page.get_by_test_id("not-found")).to_be_visible()
    assert len(asked) == seen == 1


def test_clone_fills_the_form_from_a_task_and_creates_a_new_one(served: Served, page: Page) -> None:
    src = _task(served, interval_ms=7_200_000, scene="cloned", payload={"k": [1, 2]}, max_retries=7)
    page.goto(f"{served.url}/ui/tasks/{src['id']}")
    page.get_by_test_id("act-clone").click()
    page.wait_for_url(re.compile(r"/ui/tasks/new\?clone="))
    expect(page.get_by_test_id("clone-of")).to_contain_text(str(src["id"]))
    expect(page.get_by_test_id("f-interval")).to_have_value("2")
    expect(page.get_by_test_id("f-interval-unit")).to_have_value("h")
    expect(page.get_by_test_id("f-scene")).to_have_value("cloned")
    expect(page.get_by_test_id("f-url")).to_have_value(CB)
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    new_id = page.url.rsplit("/", 1)[-1]
    assert new_id != src["id"]
    _, got = served.api("GET", f"/tasks/{new_id}")
    same = ("type", "interval_ms", "scene", "payload", "max_retries", "callback_url", "reliability", "timeout_ms")
    assert {k: got[k] for k in same} == {k: src[k] for k in same}


def test_a_clone_keeps_the_bounds_and_jitter_the_form_has_no_inputs_for(served: Served, page: Page) -> None:
    import time

    end = int(time.time() * 1000) + 86_400_000
    src = _task(served, type="periodic", interval_ms=3_600_000, end_at=end, max_runs=5, jitter_ms=250)
    page.goto(f"{served.url}/ui/tasks/new?clone={src['id']}")
    expect(page.get_by_test_id("clone-of")).to_contain_text("end_at, max_runs, jitter_ms")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    _, got = served.api("GET", f"/tasks/{page.url.rsplit('/', 1)[-1]}")
    assert (got["end_at"], got["max_runs"], got["jitter_ms"], got["start_at"]) == (end, 5, 250, None)


def test_bulk_pause_of_50_selected_tasks(tmp_path_factory: pytest.TempPathFactory, page: Page) -> None:
    from tests.browser.conftest import serve_ui

    with serve_ui(tmp_path_factory.mktemp("bulk")) as s:
        bodies = [{"type": "periodic", "interval_ms": 600_000, "callback_url": f"{CB}/{i}"} for i in range(60)]
        st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
        assert st == 201
        newest = sorted((x["id"] for x in res["items"]), reverse=True)
        page.goto(s.url + "/ui/tasks")
        expect(page.locator("tr[data-task-id]")).to_have_count(50)
        page.get_by_test_id("select-all").check()
        expect(page.get_by_test_id("bulk-bar")).to_contain_text("50 selected")
        page.get_by_test_id("bulk-pause").click()
        page.get_by_test_id("confirm-ok").click()
        # 50 pauses, four at a time, each a commit of its own: seconds on a loaded machine
        expect(page.get_by_test_id("toast")).to_contain_text("Pause: 50 done, 0 skipped", timeout=30_000)
        statuses = {tid: s.api("GET", f"/tasks/{tid}")[1]["status"] for tid in newest}
        assert {tid for tid, v in statuses.items() if v == "paused"} == set(newest[:50])
        expect(page.locator("tr[data-task-id] .b-paused")).to_have_count(50)
        # resume is offered for what pause left; trigger skips what its state refuses
        page.get_by_test_id("select-all").check()
        page.get_by_test_id("bulk-trigger").click()
        page.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("toast").filter(has_text="Trigger now")).to_contain_text("0 done, 50 skipped")
