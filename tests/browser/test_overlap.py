"""The overlap policy in the console (docs/api.md#post-apiv1tasks): set in the create form, shown on
the task page, changed in an edit, offered for periodic tasks only (skip, buffer_one, allow), in English
and Chinese."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Served

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/overlap"
ZH_ALLOW = "按时并行运行（最多同时 8 次）"  # noqa: RUF001 (Chinese text uses full-width parentheses)


def test_overlap_is_set_in_the_form_shown_on_the_task_and_changed_in_an_edit(served: Served, page: Page) -> None:
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("kind-interval").click()
    page.get_by_test_id("f-interval").fill("5")
    page.get_by_test_id("f-url").fill(CB)
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-overlap")).to_have_value("skip")
    page.get_by_test_id("f-overlap").select_option("buffer_one")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    tid = page.url.rsplit("/", 1)[1]
    expect(page.locator('[data-field="overlap"]')).to_have_text("Run the first of them right after")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200 and task["overlap"] == "buffer_one"
    page.get_by_test_id("act-edit").click()
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-overlap")).to_have_value("buffer_one")
    page.get_by_test_id("f-overlap").select_option("skip")
    page.get_by_test_id("submit").click()
    expect(page.locator('[data-field="overlap"]')).to_have_text("Skip the instants that come due")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert (task["overlap"], task["version"]) == ("skip", 2)


def test_a_delayed_task_has_no_overlap_field(served: Served, page: Page) -> None:
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("kind-delayed").click()
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-timeout")).to_be_visible()
    expect(page.get_by_test_id("f-overlap")).to_have_count(0)


def test_the_overlap_field_speaks_chinese(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": CB,
                                             "overlap": "buffer_one"})
    assert st == 201
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    expect(page.locator('[data-field="overlap"]')).to_have_text("结束后立即运行其中第一个")
    page.get_by_test_id("act-edit").click()
    page.locator("details.advanced summary").click()
    expect(page.locator('label[for="f-overlap"]')).to_have_text("上一次仍在运行时")


def test_allow_is_offered_and_shown_in_english_and_chinese(served: Served, page: Page) -> None:
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("kind-interval").click()
    page.get_by_test_id("f-interval").fill("5")
    page.get_by_test_id("f-url").fill(CB)
    page.locator("details.advanced summary").click()
    page.get_by_test_id("f-overlap").select_option("allow")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    tid = page.url.rsplit("/", 1)[1]
    expect(page.locator('[data-field="overlap"]')).to_have_text("Run them at their time, alongside (at most 8 at once)")
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200 and task["overlap"] == "allow"
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    expect(page.locator('[data-field="overlap"]')).to_have_text(ZH_ALLOW)
    page.get_by_test_id("act-edit").click()
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-overlap")).to_have_value("allow")
    expect(page.locator('#f-overlap option[value="allow"]')).to_have_text(ZH_ALLOW)
