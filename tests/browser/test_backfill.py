"""Backfill from the task page (docs/api.md#backfill): the dialog offers the last full hour, checks
the range before sending, reports how many occurrences it fires, shows the node's refusal (one
backfill at a time) and speaks Chinese; only periodic tasks that can run offer it."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/backfill"
HOUR = 3_600_000


def _task(served: Served, **kw: object) -> str:
    body = {"type": "periodic", "cron_expr": "*/5 * * * *", "callback_url": CB, **kw}
    st, task = served.api("POST", "/tasks", body)
    assert st == 201, task
    return str(task["id"])


def test_backfill_of_the_last_hour_fires_12_occurrences_of_a_5_minute_cron(
    served: Served, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 409")
    tid = _task(served)
    page.goto(f"{served.url}/ui/tasks/{tid}")
    page.get_by_test_id("act-backfill").click()
    dialog = page.get_by_test_id("backfill-dialog")
    expect(dialog).to_be_visible()
    expect(page.get_by_test_id("bf-start")).not_to_have_value("")
    page.get_by_test_id("bf-ok").click()
    expect(page.get_by_test_id("toast")).to_contain_text("12 occurrences backfilled")
    expect(dialog).to_have_count(0)
    st, execs = served.api("GET", f"/tasks/{tid}/executions")
    assert st == 200
    rows = [e for e in execs["items"] if e["result"] == "backfill"]
    end = int(time.time() * 1000) // HOUR * HOUR
    assert len(rows) == 1 and f"[{end - HOUR}, {end})" in rows[0]["execution_result"], rows  # (unless the hour turned)
    page.get_by_test_id("act-backfill").click()  # a second one while the first runs (nothing fires here)
    page.get_by_test_id("bf-ok").click()
    expect(page.get_by_test_id("bf-error")).to_contain_text("Not possible in the task\u2019s current state.")
    expect(dialog).to_be_visible()


def test_a_range_of_more_than_10000_occurrences_is_refused_in_words(
    served: Served, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 400")
    tid = _task(served, cron_expr=None, interval_ms=1000)  # a week of seconds
    page.goto(f"{served.url}/ui/tasks/{tid}")
    page.get_by_test_id("act-backfill").click()
    page.get_by_test_id("bf-start").fill(time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() - 7 * 86_400)))
    page.get_by_test_id("bf-ok").click()
    expect(page.get_by_test_id("bf-error")).to_contain_text("10,000")
    expect(page.get_by_test_id("backfill-dialog")).to_be_visible()


def test_the_dialog_checks_the_range_before_sending(served: Served, page: Page) -> None:
    tid = _task(served)
    page.goto(f"{served.url}/ui/tasks/{tid}")
    page.get_by_test_id("act-backfill").click()
    page.get_by_test_id("bf-start").fill("2026-01-02 10:00")
    page.get_by_test_id("bf-end").fill("2026-01-02 09:00")
    page.get_by_test_id("bf-ok").click()
    expect(page.get_by_test_id("bf-error")).to_have_text("The end must be after the start.")
    page.get_by_test_id("bf-end").fill("2999-01-01 00:00")
    expect(page.get_by_test_id("bf-error")).to_have_text("The end must not be in the future.")
    page.get_by_test_id("bf-end").fill("2026-02-30 00:00")
    expect(page.get_by_test_id("bf-error")).to_have_text("Not a valid date and time.")
    st, execs = served.api("GET", f"/tasks/{tid}/executions")
    assert st == 200 and execs["items"] == []  # nothing was sent


def test_only_periodic_tasks_that_can_run_offer_backfill(served: Served, page: Page) -> None:
    st, delayed = served.api("POST", "/tasks", {"type": "delayed", "interval_ms": 600_000, "callback_url": CB})
    assert st == 201
    page.goto(f"{served.url}/ui/tasks/{delayed['id']}")
    expect(page.get_by_test_id("act-delete")).to_be_visible()
    expect(page.get_by_test_id("act-backfill")).to_have_count(0)
    tid = _task(served)
    assert served.api("POST", f"/tasks/{tid}/pause")[0] == 200
    page.goto(f"{served.url}/ui/tasks/{tid}")
    expect(page.get_by_test_id("act-backfill")).to_be_visible()  # a paused task backfills when resumed


def test_the_backfill_dialog_speaks_chinese(served: Served, page: Page) -> None:
    tid = _task(served)
    page.goto(f"{served.url}/ui/tasks/{tid}")
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    page.get_by_test_id("act-backfill").click()
    expect(page.get_by_test_id("backfill-dialog")).to_contain_text("回填过去的运行")
    page.get_by_test_id("bf-ok").click()
    expect(page.get_by_test_id("toast")).to_contain_text("已回填 12 次运行")
