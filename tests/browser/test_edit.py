"""Editing a task in the console (PATCH with If-Match): the form is filled from the task, only the
kinds its type allows are offered, saving changes the task in place (version + 1, history row), an
emptied field goes back to its default, and a task changed meanwhile is not overwritten."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/edit"


def _task(served: Served, **kw: object) -> dict[str, object]:
    body = {"type": "periodic", "interval_ms": 60_000, "callback_url": CB, "scene": "before", **kw}
    st, task = served.api("POST", "/tasks", body)
    assert st == 201, task
    return task


def test_edit_changes_the_task_in_place_and_shows_the_new_version(served: Served, page: Page) -> None:
    tid = str(_task(served, timeout_ms=7_000)["id"])
    page.goto(f"{served.url}/ui/tasks/{tid}")
    page.get_by_test_id("act-edit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("edit-of")).to_contain_text("version 1")
    expect(page.get_by_test_id("kind-delayed")).to_have_count(0)  # a task's type cannot change
    expect(page.get_by_test_id("f-interval")).to_have_value("1")
    page.get_by_test_id("f-interval").fill("2")
    page.get_by_test_id("f-scene").fill("after")
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-idem")).to_be_disabled()
    page.get_by_test_id("f-timeout").fill("")  # emptied: back to the default
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}")
    expect(page.locator('[data-field="version"]')).to_have_text("2")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200
    assert (task["version"], task["interval_ms"], task["scene"], task["timeout_ms"]) == (2, 120_000, "after", 5_000)
    st, page_ = served.api("GET", f"/tasks/{tid}/executions")
    assert [(e["kind"], e["result"]) for e in page_["items"]] == [("event", "updated")]


def test_switching_an_interval_task_to_cron_replaces_its_schedule(served: Served, page: Page) -> None:
    tid = str(_task(served)["id"])
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("edit-of")).to_be_visible()
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("0 9 * * mon-fri")
    page.get_by_test_id("f-tz").fill("Europe/Amsterdam")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200
    assert (task["interval_ms"], task["cron_expr"], task["timezone"], task["version"]) == (
        None, "0 9 * * mon-fri", "Europe/Amsterdam", 2)


def test_a_task_changed_meanwhile_is_not_overwritten(served: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 412")
    tid = str(_task(served)["id"])
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("edit-of")).to_contain_text("version 1")
    st, _ = served.api("PATCH", f"/tasks/{tid}", {"scene": "someone-else"})
    assert st == 200
    page.get_by_test_id("f-scene").fill("mine")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("form-error")).to_contain_text("changed meanwhile")
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}/edit")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert (task["scene"], task["version"]) == ("someone-else", 2)


def test_the_edit_form_speaks_chinese(served: Served, page: Page) -> None:
    tid = str(_task(served)["id"])
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    expect(page.get_by_test_id("edit-of")).to_contain_text("正在编辑版本 1")
    expect(page.get_by_test_id("submit")).to_have_text("保存修改")


def test_the_catch_up_policy_is_set_in_the_form_and_changed_in_an_edit(served: Served, page: Page) -> None:
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("kind-interval").click()
    page.get_by_test_id("f-interval").fill("5")
    page.get_by_test_id("f-url").fill(CB)
    page.locator("details.advanced summary").click()
    page.get_by_test_id("f-catchup").select_option("all")
    page.get_by_test_id("f-catchup-window").fill("60000")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    tid = page.url.rsplit("/", 1)[1]
    expect(page.locator('[data-field="catchup"]')).to_contain_text("Fire each, oldest first")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert (task["catchup"], task["catchup_window_ms"]) == ("all", 60_000)
    page.get_by_test_id("act-edit").click()
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-catchup")).to_have_value("all")
    page.get_by_test_id("f-catchup").select_option("none")
    page.get_by_test_id("submit").click()
    expect(page.locator('[data-field="catchup"]')).to_contain_text("Skip them")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200
    assert (task["catchup"], task["catchup_window_ms"], task["version"]) == ("none", 3_600_000, 2)


def test_the_edit_form_shows_once_the_task_is_read_never_its_defaults_first(served: Served, page: Page) -> None:
    """Until the task's GET answers, the page says it is loading; the form then appears already
    holding the task's values. A form drawn with the defaults and refilled when the answer came
    jumped under the pointer (its notice above the fields, a kind's other fields) and showed values
    that were not the task's."""
    tid = str(_task(served, interval_ms=5 * 60_000)["id"])
    held: list[Route] = []
    def hold(route: Route) -> None:  # answered below, when the test says so
        held.append(route)

    page.route(f"**/api/v1/tasks/{tid}", hold)
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("form-loading")).to_be_visible()
    for _ in range(200):  # the handler runs while Playwright is called: wait in its calls
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the console never asked for the task"
    expect(page.get_by_test_id("task-form")).to_have_count(0)
    held[0].continue_()
    page.get_by_test_id("task-form").wait_for()
    assert page.get_by_test_id("f-interval").input_value() == "5"
    assert page.get_by_test_id("f-interval-unit").input_value() == "min"
    expect(page.get_by_test_id("edit-of")).to_contain_text("version 1")
    expect(page.get_by_test_id("form-loading")).to_have_count(0)


def test_editing_a_task_that_is_gone_says_so_and_offers_no_form(served: Served, page: Page, console: Console) -> None:
    """A blank form there would create a new task from the edit page."""
    console.allow.append(r"status of 404")
    gone = "01J0000000000000000000GONE"
    page.goto(f"{served.url}/ui/tasks/{gone}/edit")
    expect(page.get_by_test_id("form-error")).to_contain_text("Not found")
    expect(page.get_by_test_id("task-form")).to_have_count(0)
    expect(page.locator("h1")).to_contain_text(gone)
    page.get_by_role("link", name="Back").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{gone}")


def test_the_new_task_shortcut_on_an_edit_page_opens_a_new_form_that_creates(served: Served, page: Page) -> None:
    """The new-task and edit routes share one component: moving from an edit to /tasks/new (the `n`
    shortcut) must open the new form, not keep the edit's task under a "New task" title and PATCH it."""
    tid = str(_task(served, scene="kept")["id"])
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("edit-of")).to_contain_text("version 1")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("n")
    page.wait_for_url(f"{served.url}/ui/tasks/new")
    expect(page.locator("h1")).to_have_text("New task")
    expect(page.get_by_test_id("edit-of")).to_have_count(0)
    expect(page.get_by_test_id("kind-delayed")).to_be_visible()  # a new task may be of any type
    expect(page.get_by_test_id("submit")).to_have_text("Create task")
    page.get_by_test_id("kind-interval").click()
    page.get_by_test_id("f-interval").fill("3")
    page.get_by_test_id("f-url").fill(CB)
    page.get_by_test_id("f-scene").fill("fresh")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    new_id = page.url.rsplit("/", 1)[1]
    assert new_id != tid
    st, task = served.api("GET", f"/tasks/{tid}")
    assert (st, task["scene"], task["version"]) == (200, "kept", 1)  # the edited task is untouched
    st, task = served.api("GET", f"/tasks/{new_id}")
    assert (st, task["scene"], task["interval_ms"]) == (200, "fresh", 180_000)


def test_a_clone_form_left_for_a_new_one_and_back_shows_each_its_own(served: Served, page: Page) -> None:
    """/tasks/new?clone=X and /tasks/new are one route: moving between them inside the console (the
    `n` shortcut, the browser's Back) fills the form for each afresh."""
    a = str(_task(served, scene="task-a")["id"])
    b = str(_task(served, scene="task-b", interval_ms=120_000)["id"])
    page.goto(f"{served.url}/ui/tasks/new?clone={b}")
    expect(page.get_by_test_id("clone-of")).to_contain_text(b)
    expect(page.get_by_test_id("f-scene")).to_have_value("task-b")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("n")
    page.wait_for_url(f"{served.url}/ui/tasks/new")
    expect(page.locator("h1")).to_have_text("New task")
    expect(page.get_by_test_id("clone-of")).to_have_count(0)
    expect(page.get_by_test_id("f-scene")).to_have_value("")
    page.go_back()
    page.wait_for_url(f"{served.url}/ui/tasks/new?clone={b}")
    expect(page.get_by_test_id("clone-of")).to_contain_text(b)
    expect(page.get_by_test_id("f-scene")).to_have_value("task-b")
    # and from an edit back to it: the edit's own task again
    page.goto(f"{served.url}/ui/tasks/{a}/edit")
    expect(page.get_by_test_id("f-scene")).to_have_value("task-a")
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("n")
    page.wait_for_url(f"{served.url}/ui/tasks/new")
    expect(page.get_by_test_id("edit-of")).to_have_count(0)
    page.go_back()
    page.wait_for_url(f"{served.url}/ui/tasks/{a}/edit")
    expect(page.get_by_test_id("edit-of")).to_contain_text("version 1")
    expect(page.get_by_test_id("f-scene")).to_have_value("task-a")


def test_an_edit_that_leaves_the_payload_alone_keeps_its_bytes(served: Served, page: Page) -> None:
    """The node keeps a payload as the bytes it was sent (numbers of any size, escapes as written);
    the form shows JSON.parse's reading of them, which a number past 2^53 does not survive, so an edit
    of another field must not send that reading back."""
    raw = (b'{"type": "periodic", "interval_ms": 60000, "callback_url": "' + CB.encode()
           + b'", "payload": {"id": 12345678901234567891, "s": "caf\\u00e9"}}')
    r = served.http.request("POST", f"{served.url}/api/v1/tasks", body=raw,
                            headers={"Content-Type": "application/json"})
    assert r.status == 201, r.data
    tid = r.json()["id"]
    kept = b'"payload":{"id":12345678901234567891,"s":"caf\\u00e9"}'
    assert kept in r.data
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("edit-of")).to_contain_text("version 1")
    page.locator("details.advanced summary").click()
    page.get_by_test_id("f-timeout").fill("9")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}")
    expect(page.locator('[data-field="version"]')).to_have_text("2")
    r = served.http.request("GET", f"{served.url}/api/v1/tasks/{tid}")
    assert r.status == 200 and r.json()["timeout_ms"] == 9_000
    assert kept in r.data, r.data

    # a payload whose text is changed is sent as typed
    page.get_by_test_id("act-edit").click()
    page.get_by_test_id("f-payload").fill('{"id": 7}')
    page.get_by_test_id("submit").click()
    expect(page.locator('[data-field="version"]')).to_have_text("3")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert (st, task["payload"], task["timeout_ms"]) == (200, {"id": 7}, 9_000)
