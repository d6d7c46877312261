"""Every console page loads at 1280x800 and 390x844 without console errors, and shows its content."""

from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS, Browsing, Served

pytestmark = pytest.mark.browser

PAGES = [
    ("/ui/", "Dashboard", '[data-testid="tasks-total"]'),
    ("/ui/tasks", "Tasks", '[data-testid="tasks-table"]'),
    ("/ui/tasks/new", "New task", '[data-testid="task-form"]'),
    ("/ui/executions", "Executions", '[data-testid="exec-table"]'),
    ("/ui/dead-letters", "Dead letters", '[data-testid="dl-table"]'),
    ("/ui/latency", "Latency", '[data-testid="latency-table"]'),
    ("/ui/timewheel", "Time wheel", "h1"),
    ("/ui/flows", "Flows", '[data-testid="flows-table"]'),
    ("/ui/cluster", "Cluster", '[data-testid="cluster-table"] tbody tr[data-node="n1"]'),
]


def _seed(served: Served) -> str:
    st, body = served.api(
        "POST",
        "/tasks",
        {
            "type": "periodic",
            "cron_expr": "*/5 * * * *",
            "callback_url": "http://127.0.0.1:9/seed",
            "scene": "seed",
        },
    )
    assert st in (200, 201), body
    return str(body["id"])


def _no_horizontal_scroll(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def test_every_page_renders_without_console_errors(served: Served, browsing: Browsing) -> None:
    task_id = _seed(served)
    page = browsing.new_page()
    viewport = page.viewport_size
    assert viewport is not None
    shots = os.environ.get("MOLENS_UI_SHOTS") == "1"
    for path, title, ready in [*PAGES, (f"/ui/tasks/{task_id}", "Task", '[data-testid="task-fields"]')]:
        page.goto(served.url + path)
        expect(page.locator("h1").first).to_contain_text(title)
        expect(page.locator(ready).first).to_be_visible()
        # the page fits the viewport: wide tables scroll inside their own box, never the page
        assert _no_horizontal_scroll(page), f"{path} scrolls sideways at {viewport}"
        if shots:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^a-z0-9]+", "_", path.strip("/")) or "ui"
            page.screenshot(path=str(ARTIFACTS / f"page-{name}-{viewport['width']}.png"), full_page=True)


def test_dashboard_counts_tasks_by_status(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/")
    before = int(page.get_by_test_id("tasks-total").inner_text().replace(",", ""))
    _seed(served)
    # the dashboard refreshes by itself (every 3 s) without reloading the page
    expect(page.get_by_test_id("tasks-total")).to_have_text(str(before + 1), timeout=10_000)
    expect(page.get_by_test_id("leader")).to_have_text("n1")


def test_unknown_console_route_loads_the_app(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/no/such/page")
    expect(page.locator("h1")).to_have_text("Page not found")
    page.get_by_role("link", name="Go to the dashboard").click()
    expect(page.get_by_test_id("tasks-total")).to_be_visible()
