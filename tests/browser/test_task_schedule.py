"""A periodic task's page shows its schedule in words (the preview's description, in the console's
language) and its next five fire times; a delayed task's page shows neither."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Served

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/sched"


def test_a_cron_task_page_shows_the_schedule_in_words_and_the_next_five_fires(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {
        "type": "periodic", "cron_expr": "30 9 * * mon-fri", "timezone": "Europe/Amsterdam", "callback_url": CB,
    })
    assert st == 201
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.get_by_test_id("schedule-description")).to_have_text("At 09:30, Monday through Friday")
    expect(page.locator('[data-testid="schedule-next"] li')).to_have_count(5)
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    expect(page.get_by_test_id("schedule-description")).to_contain_text("09:30")
    expect(page.get_by_test_id("schedule-description")).to_contain_text("周一")


def test_an_interval_task_lists_its_next_fires_on_its_grid(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": CB})
    assert st == 201
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.locator('[data-testid="schedule-next"] li')).to_have_count(5)
    expect(page.get_by_test_id("schedule-description")).not_to_be_empty()


def test_a_delayed_task_page_has_no_schedule_card(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "delayed", "interval_ms": 60_000, "callback_url": CB})
    assert st == 201
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.get_by_test_id("task-status")).to_be_visible()
    expect(page.get_by_test_id("task-schedule")).to_have_count(0)
