"""A periodic task's page shows its schedule in words (the preview's description, in the console's
language) and its next five fire times; a delayed task's page shows neither."""

from __future__ import annotations

import time
from datetime import UTC, datetime

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
    expect(page.get_by_test_id("schedule-description")).to_have_text(
        "At 09:30, Monday through Friday (Europe/Amsterdam time)")
    expect(page.locator('[data-testid="schedule-next"] li')).to_have_count(5)
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    expect(page.get_by_test_id("schedule-description")).to_contain_text("09:30")
    expect(page.get_by_test_id("schedule-description")).to_contain_text("周一")
    expect(page.get_by_test_id("schedule-description")).to_contain_text("Europe/Amsterdam")


def test_a_cron_description_names_its_zone_next_to_fires_in_the_viewers(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {
        "type": "periodic", "cron_expr": "15 10 * * mon-fri", "timezone": "America/New_York", "callback_url": CB,
    })
    assert st == 201
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.get_by_test_id("schedule-description")).to_have_text(
        "At 10:15, Monday through Friday (America/New_York time)")
    # the fire times below are in the viewer's zone (the browser's, UTC here), and say so
    expect(page.get_by_test_id("next-fires-label")).to_have_text("Next fire times (UTC)")
    expect(page.locator('[data-testid="schedule-next"] li').first).to_contain_text(":15:00")
    page.get_by_test_id("zone").select_option("task")
    expect(page.get_by_test_id("next-fires-label")).to_have_text("Next fire times (America/New_York)")
    expect(page.locator('[data-testid="schedule-next"] li').first).to_contain_text("10:15:00")
    # the form's preview says the same
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("15 10 * * mon-fri")
    page.get_by_test_id("f-tz").fill("America/New_York")
    expect(page.get_by_test_id("preview-description")).to_have_text(
        "At 10:15, Monday through Friday (America/New_York time)")


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


SEEN_PREVIEW = """() => {
  window.__previewSeen = []
  new MutationObserver(() => {
    const on = document.querySelector('.kind-switch .radio-pill.on')
    const kind = on ? on.dataset.testid : ''
    for (const li of document.querySelectorAll('[data-testid="preview-list"] li')) window.__previewSeen.push(`${kind}|${li.textContent}`)
  }).observe(document, { subtree: true, childList: true, characterData: true })
}"""


def test_the_edit_forms_preview_never_shows_a_time_off_the_tasks_schedule(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {
        "type": "periodic", "cron_expr": "37 15 10 * * *", "timezone": "UTC", "callback_url": CB,
    })
    assert st == 201
    page.add_init_script(f"({SEEN_PREVIEW})()")
    page.goto(f"{served.url}/ui/tasks/{task['id']}/edit")
    expect(page.get_by_test_id("preview-list").locator("li")).to_have_count(5)
    seen = page.evaluate("window.__previewSeen")
    assert seen and all(x.startswith("kind-cron|") and "10:15:37" in x for x in seen), seen
    # switching the kind shows no fire time of the old kind meanwhile
    page.evaluate("window.__previewSeen = []")
    page.get_by_test_id("kind-interval").click()
    page.get_by_test_id("f-interval").fill("7")
    page.get_by_test_id("f-interval-unit").select_option("min")
    expect(page.get_by_test_id("preview-list").locator("li")).to_have_count(5)
    seen = page.evaluate("window.__previewSeen")
    assert seen and not any(x.startswith("kind-interval|") and "10:15:37" in x for x in seen), seen


def test_a_paused_interval_tasks_next_fires_stay_on_its_grid(served: Served, page: Page) -> None:
    """A paused task has no next run: its page lists the fires of its grid (start_at + k * interval),
    not of a grid drawn from the moment the page asked."""
    import time

    start = int(time.time()) // 60 * 60_000 - 600_000 + 7_000  # on :07 of every minute
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "start_at": start,
                                             "callback_url": CB})
    assert st == 201
    assert served.api("POST", f"/tasks/{task['id']}/pause")[0] == 200
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    fires = page.locator('[data-testid="schedule-next"] li')
    expect(fires).to_have_count(5)
    for i in range(5):
        expect(fires.nth(i)).to_contain_text(":07")


def _utc(ms: int) -> str:
    """A time as the task page shows it in this browser (UTC)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fires(page: Page) -> list[str]:
    items = page.locator('[data-testid="schedule-next"] li')
    expect(items.first).to_be_visible()
    return [str(x).strip() for x in items.all_inner_texts()]


def test_the_next_fires_start_at_start_at_and_stop_before_end_at(served: Served, page: Page) -> None:
    """An interval task starting in two days fires first at start_at, on its grid, and never at or after end_at."""
    start = (int(time.time() * 1000) // 60_000 + 2 * 1440) * 60_000
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": CB,
                                             "start_at": start, "end_at": start + 3 * 60_000})
    assert st == 201, task
    assert task["next_run_at"] == start
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.locator('[data-testid="schedule-next"] li')).to_have_count(3)
    assert _fires(page) == [_utc(start + k * 60_000) for k in range(3)]


def test_a_cron_task_starting_later_previews_from_its_start(served: Served, page: Page) -> None:
    start = (int(time.time() * 1000) // 3_600_000 + 72) * 3_600_000 + 30 * 60_000  # half past, three days on
    st, task = served.api("POST", "/tasks", {"type": "periodic", "cron_expr": "0 * * * *", "timezone": "UTC",
                                             "callback_url": CB, "start_at": start})
    assert st == 201, task
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.locator('[data-testid="schedule-next"] li')).to_have_count(5)
    first = start + 30 * 60_000  # the first full hour after start_at
    assert task["next_run_at"] == first
    assert _fires(page) == [_utc(first + k * 3_600_000) for k in range(5)]


def test_the_next_fires_are_no_more_than_max_runs_leaves(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": CB,
                                             "max_runs": 2})
    assert st == 201, task
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.locator('[data-testid="schedule-next"] li')).to_have_count(2)
    assert _fires(page)[0] == _utc(task["next_run_at"])
