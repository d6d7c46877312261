"""The Executions list says when a From/To is not a time (instead of dropping it), and keeps its page
in the URL; the Latency page keeps its window in the URL; Executions and Dead letters refresh by
themselves when asked (the switch in the URL, as on Tasks)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from molens.model import Execution, ExecutionResult, FireKind
from tests.browser.conftest import Served, fail_for_good, serve_ui
from tests.browser.test_i18n import _Writes

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """120 executions (three pages of 50), newest first by id."""
    with serve_ui(tmp_path_factory.mktemp("execs")) as s:
        st, task = s.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/x"})
        assert st == 201
        now = int(time.time() * 1000)
        rows = [
            Execution(task_id=task["id"], fire_id=f"{task['id']}-{i}", seq=i, attempt=1, kind=FireKind.CALLBACK,
                      result=ExecutionResult.SUCCESS, status_code=200, latency_ms=10 + i, worker="n1",
                      url="http://127.0.0.1:9/x", scene="default", fired_ms=now - 60_000 * (120 - i),
                      finished_ms=now - 60_000 * (120 - i) + 10, response_head="ok")
            for i in range(1, 121)
        ]
        s.ctx.history.apply([(10_000_000, _Writes(rows))])
        yield s


def _first(page: Page) -> str:
    row = page.locator("tr[data-exec-id]").first
    expect(row).to_be_visible()
    return str(row.get_attribute("data-exec-id"))


def test_a_from_that_is_not_a_time_is_said_not_dropped(history: Served, page: Page) -> None:
    page.goto(history.url + "/ui/executions")
    expect(page.locator("tr[data-exec-id]")).to_have_count(50)
    page.get_by_test_id("filter-since").fill("yesterday")
    page.get_by_test_id("exec-filters").locator("button[type=submit]").click()
    expect(page.get_by_test_id("err-since")).to_have_text("Not a time: write it as 2026-12-01 09:30.")
    assert "since" not in page.url
    page.get_by_test_id("filter-since").fill("2020-01-01 00:00")
    page.get_by_test_id("exec-filters").locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r"since=1577836800000"))
    expect(page.get_by_test_id("err-since")).to_have_count(0)


def test_the_page_is_in_the_url(history: Served, page: Page) -> None:
    page.goto(history.url + "/ui/executions")
    first = _first(page)
    page.get_by_test_id("next-page").click()
    page.wait_for_url(re.compile(r"[?&]p=2"))
    expect(page.get_by_test_id("page-no")).to_have_text("Page 2")
    expect(page.locator("tr[data-exec-id]").first).not_to_have_attribute("data-exec-id", first)  # page 2's rows
    second = _first(page)
    page.get_by_test_id("next-page").click()
    page.wait_for_url(re.compile(r"[?&]p=3"))
    expect(page.get_by_test_id("page-no")).to_have_text("Page 3")
    expect(page.locator("tr[data-exec-id]").first).not_to_have_attribute("data-exec-id", second)  # page 3's rows
    third = _first(page)
    page.reload()  # the page survives a reload
    expect(page.get_by_test_id("page-no")).to_have_text("Page 3")
    expect(page.locator("tr[data-exec-id]").first).to_have_attribute("data-exec-id", third)
    expect(page.locator("tr[data-exec-id]")).to_have_count(20)
    page.get_by_test_id("prev-page").click()
    expect(page.get_by_test_id("page-no")).to_have_text("Page 2")
    expect(page.locator("tr[data-exec-id]").first).to_have_attribute("data-exec-id", second)
    page.go_back()
    expect(page.get_by_test_id("page-no")).to_have_text("Page 3")
    page.get_by_test_id("prev-page").click()
    page.get_by_test_id("prev-page").click()
    expect(page.get_by_test_id("page-no")).to_have_text("Page 1")
    expect(page.locator("tr[data-exec-id]").first).to_have_attribute("data-exec-id", first)


def test_the_latency_window_is_in_the_url(history: Served, page: Page) -> None:
    page.goto(history.url + "/ui/latency")
    expect(page.get_by_test_id("win-1h")).to_have_class(re.compile("btn-primary"))
    page.get_by_test_id("win-24h").click()
    page.wait_for_url(re.compile(r"window=24h"))
    page.reload()
    expect(page.get_by_test_id("win-24h")).to_have_class(re.compile("btn-primary"))
    expect(page.get_by_test_id("win-1h")).not_to_have_class(re.compile("btn-primary"))


def test_executions_and_dead_letters_refresh_by_themselves_when_asked(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "n") as s:
        def dead_task() -> str:
            st, task = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "max_retries": 0,
                                                "callback_url": "http://127.0.0.1:9/auto"})
            assert st == 201, task
            fail_for_good(s, task["id"], 500)
            return str(task["id"])

        dead_task()
        for path, row in [("/ui/executions", "tr[data-exec-id]"), ("/ui/dead-letters", "tr[data-dl-id]")]:
            page.goto(s.url + path)
            expect(page.locator(row).first).to_be_visible()
            before = page.locator(row).count()
            page.get_by_test_id("refresh-every").select_option("5000")
            page.wait_for_url(re.compile(r"[?&]auto=5"))
            dead_task()  # a new failure, written after the page loaded
            expect(page.locator(row)).to_have_count(before + 1, timeout=15_000)
            page.reload()  # the switch is in the URL
            expect(page.get_by_test_id("refresh-every")).to_have_value("5000")
