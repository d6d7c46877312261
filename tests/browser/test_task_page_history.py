"""A task's page: its history refreshed after "Load more" leaves no silent gap, and the link to its
dead letters opens them in the task's namespace whatever the namespace switcher chose."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Served, fail_for_good, wait_until

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/history"
SCENES = (f"s{i}" for i in itertools.count())


def make_task(served: Served, **kw: Any) -> str:
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 3_600_000, "callback_url": CB, **kw})
    assert st == 201, task
    return str(task["id"])


def add_rows(served: Served, task_id: str, n: int) -> None:
    """`n` rows of the task's history: each change of its definition records an `updated` event."""
    for _ in range(n):
        st, out = served.api("PATCH", f"/tasks/{task_id}", {"scene": next(SCENES)})
        assert st == 200, out


def history_ids(served: Served, task_id: str) -> list[int]:
    """Every row of the task's history the node keeps, newest first."""
    out: list[int] = []
    cursor = None
    while True:
        q = f"?limit=200&cursor={cursor}" if cursor else "?limit=200"
        st, page = served.api("GET", f"/tasks/{task_id}/executions{q}")
        assert st == 200, page
        out += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            return out


def shown_ids(page: Page) -> list[int]:
    return [int(x) for x in page.locator("[data-testid=exec-table] tr[data-exec-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.execId)")]


def refresh_until(page: Page, done: Callable[[], bool], what: str) -> None:
    """Press `r` until `done()`: a refresh asked while the page's last load is still out is not queued."""
    wait_until(lambda: done() or page.keyboard.press("r"), 10, what, interval=0.5)


def test_a_refresh_after_load_more_fetches_every_new_row_and_marks_a_gap_it_cannot_fill(served: Served, page: Page) -> None:
    task_id = make_task(served, scene="history")
    add_rows(served, task_id, 30)
    page.goto(f"{served.url}/ui/tasks/{task_id}")
    page.get_by_test_id("refresh-every").select_option("0")  # refreshed when the test says: `r`
    rows = page.locator("[data-testid=exec-table] tr[data-exec-id]")
    expect(rows).to_have_count(20)
    page.get_by_role("button", name="Load more").click()
    expect(rows).to_have_count(30)

    add_rows(served, task_id, 30)  # more than the newest page between two refreshes (retries, an overlap: allow task)
    refresh_until(page, lambda: rows.count() >= 60, "the 30 new rows")
    expect(rows).to_have_count(60)
    before = shown_ids(page)
    assert before == history_ids(served, task_id)
    expect(page.get_by_test_id("history-gap")).to_have_count(0)

    # more than a refresh fetches (20 + 3 x 50): the rows it could not reach are marked, not hidden
    add_rows(served, task_id, 190)
    gap = page.get_by_test_id("history-gap")
    refresh_until(page, lambda: rows.count() > 60, "the newest rows")
    expect(gap).to_have_count(1)
    expect(rows).to_have_count(60 + 170)
    newest = history_ids(served, task_id)
    assert shown_ids(page) == newest[:170] + before
    expect(gap).to_contain_text("not shown")
    # the marker sits under the last row fetched, above the rows that were there
    marked = gap.evaluate("g => Number(g.previousElementSibling.dataset.execId)")
    assert marked == newest[169]
    gap.get_by_test_id("history-reload").click()
    expect(rows).to_have_count(20)
    expect(gap).to_have_count(0)
    assert shown_ids(page) == history_ids(served, task_id)[:20]


def test_the_dead_letters_link_opens_them_in_the_tasks_namespace(served: Served, page: Page) -> None:
    assert served.api("POST", "/namespaces", {"name": "pay"})[0] == 201
    st, task = served.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB,
                                             "max_retries": 0, "namespace": "pay"})
    assert st == 201, task
    fail_for_good(served, task["id"])
    page.goto(f"{served.url}/ui/tasks/{task['id']}?ns=default")  # the switcher on another namespace
    expect(page.get_by_test_id("ns-switch")).to_have_value("default")
    expect(page.get_by_test_id("task-dead-letters").locator("tr[data-dl-id]")).to_have_count(1)
    page.get_by_test_id("task-dead-link").click()
    expect(page).to_have_url(re.compile(r"/ui/dead-letters\?"))
    expect(page).to_have_url(re.compile(r"[?&]ns=pay\b"))
    expect(page.locator("tr[data-dl-id]")).to_have_count(1)
    expect(page.get_by_test_id("ns-switch")).to_have_value("pay")
