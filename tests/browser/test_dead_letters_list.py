"""The Dead letters page over many dead letters and refused requests (the REST app over a
LocalContext; dead letters written by the machine's own Dispatched + Results commands): 50 rows,
then "Load more" by cursor, newest first without duplicates; a refused redrive is a toast and the
row stays; a time that is not one is flagged next to its filter field."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, Served, fail_for_good

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/dl-list"


def _dead_task(served: Served, **kw: object) -> str:
    body = {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB, "max_retries": 0, **kw}
    st, task = served.api("POST", "/tasks", body)
    assert st == 201, task
    fail_for_good(served, str(task["id"]))
    return str(task["id"])


def test_fifty_rows_then_more_by_cursor_newest_first(served: Served, page: Page) -> None:
    for i in range(60):  # each fails one second after the previous
        _dead_task(served, interval_ms=3_600_000 + 1_000 * i, scene="paging")
    st, listed = served.api("GET", "/dead-letters?limit=1000")
    assert st == 200
    want = [d["id"] for d in sorted(listed["items"], key=lambda d: d["at"], reverse=True)]
    assert len(want) >= 60
    page.goto(served.url + "/ui/dead-letters")
    rows = page.locator("tr[data-dl-id]")
    expect(rows).to_have_count(50)
    page.get_by_test_id("dl-more").click()
    expect(rows).to_have_count(len(want))
    expect(page.get_by_test_id("dl-more")).to_have_count(0)  # the end
    shown = rows.evaluate_all("rs => rs.map((r) => r.dataset.dlId)")
    assert shown == want


def test_a_refused_redrive_is_a_toast_and_the_row_stays(served: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 409")
    tid = _dead_task(served, type="periodic", interval_ms=7_200_000, max_fails=100)
    st, task = served.api("POST", f"/tasks/{tid}/pause")  # a paused task's dead letter cannot be redriven
    assert st == 200 and task["status"] == "paused", task
    page.goto(f"{served.url}/ui/dead-letters?task_id={tid}")
    row = page.locator("tr[data-dl-id]")
    expect(row).to_have_count(1)
    row.get_by_test_id("dl-redrive").click()
    expect(page.get_by_test_id("toast")).to_contain_text("Redrive of")
    expect(page.get_by_test_id("toast")).to_contain_text("failed: Not possible in the task\u2019s current state.")
    expect(row).to_have_count(1)
    st, listed = served.api("GET", f"/dead-letters?task_id={tid}")
    assert len(listed["items"]) == 1


def test_a_time_that_is_not_one_is_flagged_next_to_its_filter(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/dead-letters?kind=unknown")
    page.get_by_test_id("filter-since").fill("2026-13-01 10:00")
    page.get_by_test_id("filter-until").fill("2026-12-01 10:00")
    page.get_by_test_id("filter-apply").click()
    expect(page.get_by_test_id("err-since")).to_have_text("Not a valid date and time.")
    expect(page).to_have_url(served.url + "/ui/dead-letters?kind=unknown")  # nothing applied
    page.get_by_test_id("filter-since").fill("2026-12-02 10:00")
    page.get_by_test_id("filter-apply").click()
    expect(page.get_by_test_id("err-until")).to_have_text("The end is before the start.")
    expect(page).to_have_url(served.url + "/ui/dead-letters?kind=unknown")


def test_delete_all_without_a_filter_says_so_and_deletes_every_one(served: Served, page: Page) -> None:
    for _ in range(3):
        _dead_task(served, scene="wipe")
    st, before = served.api("GET", "/dead-letters?limit=1000")
    assert st == 200 and len(before["items"]) >= 3
    page.goto(served.url + "/ui/dead-letters")
    expect(page.locator("tr[data-dl-id]").first).to_be_visible()
    page.get_by_test_id("delete-all").click()
    expect(page.get_by_test_id("confirm-dialog")).to_contain_text("No filter: delete every dead letter of the cluster?")
    expect(page.get_by_test_id("confirm-filter")).to_have_count(0)
    page.get_by_test_id("confirm-ok").click()
    n = len(before["items"])
    expect(page.get_by_test_id("toast")).to_contain_text(f"{n} of {n} matching dead letters deleted.")
    expect(page.get_by_test_id("dl-empty")).to_be_visible()
    st, after = served.api("GET", "/dead-letters?limit=1000")
    assert after["items"] == []
