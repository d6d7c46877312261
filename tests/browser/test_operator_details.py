"""Smaller things an operator reads: Timeout and ACK delay take a unit like the retry waits, a
duration of many seconds is not given to the millisecond, the dashboard's success rate names its
window, filtered lists say how many match and the dead letters their total."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Served, fail_for_good, serve_ui

pytestmark = pytest.mark.browser


def test_timeout_and_ack_delay_take_a_unit(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("f-url").fill("http://127.0.0.1:9/units")
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("f-timeout-unit")).to_have_value("s")
    page.get_by_test_id("f-timeout").fill("7.5")
    page.get_by_test_id("f-ack").fill("http://127.0.0.1:9/ack")
    page.get_by_test_id("f-ackdelay").fill("2")
    page.get_by_test_id("f-ackdelay-unit").select_option("min")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    task_id = page.url.rsplit("/", 1)[-1]
    _, task = served.api("GET", f"/tasks/{task_id}")
    assert (task["timeout_ms"], task["ack_delay_ms"]) == (7_500, 120_000)
    # the edit form shows each in the largest unit it is a whole number of
    page.goto(f"{served.url}/ui/tasks/{task_id}/edit")
    expect(page.get_by_test_id("f-timeout")).to_have_value("7500")
    expect(page.get_by_test_id("f-timeout-unit")).to_have_value("ms")
    expect(page.get_by_test_id("f-ackdelay")).to_have_value("2")
    expect(page.get_by_test_id("f-ackdelay-unit")).to_have_value("min")


def test_a_duration_of_many_seconds_is_not_given_to_the_millisecond(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "timeout_ms": 22_746,
                                             "callback_url": "http://127.0.0.1:9/d"})
    assert st == 201, task
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    expect(page.locator('[data-field="timeout"]')).to_have_text("22s")


def test_the_success_rate_names_its_window(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/")
    expect(page.get_by_test_id("success-rate-label")).to_have_text("Success rate (last 10s)")
    page.get_by_test_id("lang").select_option("zh")
    expect(page.get_by_test_id("success-rate-label")).to_have_text("成功率\uff08最近 10秒\uff09")


def test_filtered_lists_say_how_many_match_and_dead_letters_their_total(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "n") as s:
        ids = []
        for i in range(5):
            st, task = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000 + i, "max_retries": 0,
                                                "callback_url": f"http://127.0.0.1:9/{'a' if i < 3 else 'b'}/{i}"})
            assert st == 201, task
            ids.append(task["id"])
        for task_id in ids[:4]:
            fail_for_good(s, task_id, 500 if task_id != ids[0] else 404)
        page.goto(s.url + "/ui/tasks?url=127.0.0.1:9/a/")
        expect(page.locator("tr[data-task-id]")).to_have_count(3)
        expect(page.get_by_test_id("matching")).to_have_text("3 matching")
        page.goto(s.url + "/ui/dead-letters")
        expect(page.locator("tr[data-dl-id]")).to_have_count(4)
        expect(page.get_by_test_id("dl-total")).to_have_text("Total: 4")
        page.get_by_test_id("filter-kind").select_option("retries_exhausted")
        page.get_by_test_id("filter-apply").click()
        expect(page.locator("tr[data-dl-id]")).to_have_count(3)
        expect(page.get_by_test_id("dl-total")).to_have_text("3 matching")


def test_select_all_can_reach_every_matching_task_beyond_the_page(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "n") as s:
        bodies = [{"type": "delayed", "interval_ms": 3_600_000 + i, "callback_url": f"http://127.0.0.1:9/all/{i}"}
                  for i in range(120)]
        st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
        assert st == 201, res
        st, _ = s.api("POST", f"/tasks/{res['items'][0]['id']}/pause")  # one not pending: not matched
        assert st == 200
        page.goto(s.url + "/ui/tasks?status=pending")
        expect(page.get_by_test_id("total")).to_have_text("Total: 119")
        page.get_by_test_id("select-all").check()
        expect(page.get_by_test_id("bulk-selected")).to_have_text("50 selected")
        page.get_by_test_id("select-every").click()
        expect(page.get_by_test_id("bulk-selected")).to_have_text("All 119 matching tasks selected")
        page.get_by_test_id("bulk-pause").click()
        expect(page.get_by_test_id("confirm-dialog")).to_contain_text("119")
        page.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("tasks-empty")).to_be_visible(timeout=30_000)
        _, listed = s.api("GET", "/tasks?status=paused&limit=1000")
        assert len(listed["items"]) == 120
