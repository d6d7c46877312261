"""Task pages in a real browser: create each kind through the form, validation, actions, filters, paging."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser

HTTP_400 = r"status of 400"


def _create_through_form(page: Page, served: Served, kind: str, fill: dict[str, str], scene: str) -> str:
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id(f"kind-{kind}").click()
    for testid, value in fill.items():
        page.get_by_test_id(testid).fill(value)
    page.get_by_test_id("f-scene").fill(scene)
    page.get_by_test_id("f-payload").fill('{"order": 42, "note": "<b>not bold</b>"}')
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    task_id = page.url.rsplit("/", 1)[-1]
    expect(page.get_by_test_id("task-fields")).to_be_visible()
    return task_id


def test_create_delayed_task_through_the_form(served: Served, page: Page) -> None:
    tid = _create_through_form(page, served, "delayed", {"f-delay": "90"}, "ui-delayed")
    status, task = served.api("GET", f"/tasks/{tid}")
    assert status == 200
    assert (task["type"], task["interval_ms"], task["scene"]) == ("delayed", 90_000, "ui-delayed")
    assert task["payload"] == {"order": 42, "note": "<b>not bold</b>"}
    expect(page.get_by_test_id("task-status")).to_have_text("Pending")
    # the payload is shown as text, not markup
    expect(page.get_by_test_id("payload")).to_contain_text("<b>not bold</b>")
    # and it is in the list
    page.get_by_role("link", name="Back").click()
    expect(page.locator(f'tr[data-task-id="{tid}"]')).to_contain_text("Delayed")


def test_create_interval_task_through_the_form(served: Served, page: Page) -> None:
    tid = _create_through_form(page, served, "interval", {"f-interval": "2"}, "ui-interval")
    _, task = served.api("GET", f"/tasks/{tid}")
    assert (task["type"], task["interval_ms"], task["cron_expr"]) == ("periodic", 120_000, None)
    expect(page.locator('[data-field="schedule"]')).to_have_text("every 2m")


def test_create_cron_task_through_the_form(served: Served, page: Page) -> None:
    tid = _create_through_form(
        page, served, "cron", {"f-cron": "30 9 * * 1-5", "f-tz": "Asia/Shanghai"}, "ui-cron"
    )
    _, task = served.api("GET", f"/tasks/{tid}")
    assert (task["type"], task["cron_expr"], task["timezone"]) == (
        "periodic",
        "30 9 * * 1-5",
        "Asia/Shanghai",
    )
    expect(page.locator('[data-field="schedule"]')).to_have_text("30 9 * * 1-5 (Asia/Shanghai)")


def test_bad_cron_shows_the_api_error_inline_and_creates_nothing(
    served: Served, page: Page, console: Console
) -> None:
    console.allow.append(HTTP_400)  # the browser logs the API's 400 answer itself
    before = len(served.ctx.store)
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("61 * * * *")
    page.get_by_test_id("submit").click()
    err = page.get_by_test_id("err-cron_expr")
    expect(err).to_be_visible()
    expect(err).not_to_be_empty()
    assert page.url.endswith("/ui/tasks/new")
    assert len(served.ctx.store) == before


def test_bad_payload_is_caught_before_sending(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("f-payload").fill("{not json")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-payload")).to_contain_text("not valid JSON")


def test_callback_url_error_is_shown_under_its_field(served: Served, page: Page, console: Console) -> None:
    console.allow.append(HTTP_400)
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("f-url").fill("ftp://example.com/x")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-callback_url")).to_be_visible()


def test_pause_resume_trigger_and_delete_with_confirmation(served: Served, page: Page) -> None:
    _, task = served.api(
        "POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/pr"}
    )
    tid = task["id"]
    page.goto(f"{served.url}/ui/tasks/{tid}")
    status = page.get_by_test_id("task-status")
    expect(status).to_have_text("Pending")

    # cancelling the confirmation changes nothing
    page.get_by_test_id("act-pause").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text(tid)
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert served.api("GET", f"/tasks/{tid}")[1]["status"] == "pending"

    page.get_by_test_id("act-pause").click()
    page.get_by_test_id("confirm-ok").click()
    expect(status).to_have_text("Paused")
    assert served.api("GET", f"/tasks/{tid}")[1]["status"] == "paused"
    expect(page.get_by_test_id("act-pause")).to_be_hidden()

    page.get_by_test_id("act-resume").click()
    page.get_by_test_id("confirm-ok").click()
    expect(status).to_have_text("Pending")
    assert served.api("GET", f"/tasks/{tid}")[1]["status"] == "pending"

    page.get_by_test_id("act-trigger").click()
    # true of both kinds: a delayed task's trigger is its only occurrence, not an extra one
    expect(page.get_by_test_id("confirm-dialog")).to_contain_text(
        "A delayed task fires its one occurrence now, not again at its time; "
        "a periodic task fires once more now and keeps its schedule.")
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("toast").filter(has_text="Triggered: the task fires now.")).to_be_visible()

    page.get_by_test_id("act-delete").click()
    expect(page.get_by_test_id("confirm-dialog")).to_contain_text("cannot be undone")
    page.get_by_test_id("confirm-ok").click()
    page.wait_for_url(re.compile(r"/ui/tasks$"))
    assert served.api("GET", f"/tasks/{tid}")[0] == 404
    expect(page.locator(f'tr[data-task-id="{tid}"]')).to_have_count(0)


def test_filters_narrow_the_list_and_live_in_the_url(served: Served, page: Page) -> None:
    mk = {"callback_url": "http://127.0.0.1:9/"}
    bodies = [
        {
            "type": "delayed",
            "interval_ms": 600_000,
            "scene": "flt-a",
            **mk,
            "callback_url": "http://127.0.0.1:9/alpha",
        },
        {
            "type": "delayed",
            "interval_ms": 600_000,
            "scene": "flt-b",
            "callback_url": "http://127.0.0.1:9/beta",
        },
        {
            "type": "periodic",
            "interval_ms": 600_000,
            "scene": "flt-a",
            "callback_url": "http://127.0.0.1:9/beta",
        },
    ]
    st, res = served.api("POST", "/tasks/batch", {"tasks": bodies})
    assert st == 201, res
    a_delayed, b_delayed, a_periodic = (t["id"] for t in res["items"])
    served.api("POST", f"/tasks/{a_periodic}/pause")

    def rows() -> set[str]:
        return set(page.locator("tr[data-task-id]").evaluate_all("els => els.map(e => e.dataset.taskId)"))

    page.goto(served.url + "/ui/tasks")
    page.get_by_test_id("filter-scene").fill("flt-a")
    page.get_by_test_id("filter-apply").click()
    page.wait_for_url(re.compile(r"scene=flt-a"))
    expect(page.locator("tr[data-task-id]")).to_have_count(2)
    assert rows() == {a_delayed, a_periodic}

    page.get_by_test_id("filter-type").select_option("delayed")
    page.get_by_test_id("filter-apply").click()
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    assert rows() == {a_delayed}

    page.goto(served.url + "/ui/tasks?status=paused&scene=flt-a")
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    assert rows() == {a_periodic}
    expect(page.get_by_test_id("filter-status")).to_have_value("paused")

    page.goto(served.url + "/ui/tasks")
    page.get_by_test_id("filter-url").fill("beta")
    page.get_by_test_id("filter-apply").click()
    expect(page.locator("tr[data-task-id]")).to_have_count(2)
    assert rows() == {b_delayed, a_periodic}

    # a task created elsewhere appears on Refresh, filters kept
    _, extra = served.api(
        "POST",
        "/tasks",
        {"type": "delayed", "interval_ms": 600_000, "callback_url": "http://127.0.0.1:9/beta2"},
    )
    page.get_by_test_id("refresh").click()
    expect(page.locator("tr[data-task-id]")).to_have_count(3)
    assert extra["id"] in rows()

    page.get_by_test_id("filter-url").fill("no-such-url-anywhere")
    page.get_by_test_id("filter-apply").click()
    expect(page.get_by_test_id("tasks-empty")).to_be_visible()


def test_cursor_paging_walks_every_task_once(tmp_path_factory: pytest.TempPathFactory, page: Page) -> None:
    from tests.browser.conftest import serve_ui

    with serve_ui(tmp_path_factory.mktemp("paging")) as s:
        bodies = [
            {"type": "delayed", "interval_ms": 600_000, "callback_url": f"http://127.0.0.1:9/p{i}"}
            for i in range(120)
        ]
        st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
        assert st == 201
        want = sorted((t["id"] for t in res["items"]), reverse=True)  # newest first by default
        page.goto(s.url + "/ui/tasks")
        seen: list[str] = []
        for expected in (50, 50, 20):
            expect(page.locator("tr[data-task-id]")).to_have_count(expected)
            seen += page.locator("tr[data-task-id]").evaluate_all("els => els.map(e => e.dataset.taskId)")
            if len(seen) < 120:
                page.get_by_test_id("next-page").click()
                expect(page.locator("tr[data-task-id]").first).to_have_attribute(
                    "data-task-id", want[len(seen)]
                )
        assert seen == want
        expect(page.get_by_test_id("next-page")).to_be_disabled()
        page.get_by_test_id("prev-page").click()
        expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", want[50])
