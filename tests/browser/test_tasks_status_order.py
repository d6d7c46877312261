"""The Tasks list's status order walks the statuses in turn, newest first within each, and its page
cursor names the status it stopped in: a status that empties or fills between two pages (the list
refreshes its per-status counts on every load and skips the empty statuses) neither makes the Next
page pass a group by nor show one again, and a cursor in the URL that names no status (garbled, or
of the format before) starts the walk again instead of failing."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from molens.fsm.commands import PauseTasks, ResumeTasks
from tests.browser.conftest import Served, serve_ui, wait_until

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/status-order"
PAGE = 50  # rows per page (TasksView.vue)


def _create(s: Served, n: int, tag: str) -> list[str]:
    """`n` periodic tasks (pending); their ids, newest first (the order within a status group)."""
    bodies = [
        {"type": "periodic", "interval_ms": 600_000, "callback_url": f"{CB}/{tag}/{i}"} for i in range(n)
    ]
    st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
    assert st == 201, res
    return sorted((str(x["id"]) for x in res["items"]), reverse=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _counted(s: Served, status: str, n: int) -> None:
    """Wait until the node's status counts (what the list refreshes before each page) say `n` `status` tasks."""
    wait_until(
        lambda: s.api("GET", "/stats?local=1")[1]["tasks"].get(status, 0) == n,
        10,
        f"the node to count {n} {status} tasks",
    )


def _rows(page: Page, n: int) -> list[tuple[str, str]]:
    """Page `n` of the list once it has loaded: (id, status shown) per row."""
    expect(page.get_by_test_id("page-no")).to_have_text(re.compile(rf"^Page {n}\b"))
    expect(page.locator(".table-wrap")).not_to_have_class(re.compile(r"\bdim\b"))  # dim while loading
    ids = page.locator("tr[data-task-id]").evaluate_all("els => els.map(e => e.dataset.taskId)")
    shown = page.locator("tr[data-task-id] td:nth-child(3)").all_inner_texts()
    return list(zip(ids, shown, strict=True))


def _walk(page: Page, before_next: Callable[[int], None], most: int) -> list[tuple[str, str]]:
    """Every page of the list shown from page 1 on, following Next until it is disabled (at most
    `most` pages); `before_next(n)` runs before leaving page n. Each Next's load asks the node's
    status counts again first."""
    seen = _rows(page, 1)
    for n in range(1, most):
        if not page.get_by_test_id("next-page").is_enabled():  # final: the page has loaded
            break
        before_next(n)
        with page.expect_response(lambda r: "/api/v1/stats" in r.url):
            page.get_by_test_id("next-page").click()
        seen += _rows(page, n + 1)
    return seen


def _each_once(seen: list[str], want: list[str]) -> None:
    twice = sorted(t for t, k in Counter(seen).items() if k > 1)
    never = sorted(set(want) - set(seen))
    assert (len(twice), len(never)) == (0, 0), (
        f"the walk showed {len(seen)} rows for {len(want)} tasks: {len(twice)} shown twice, {len(never)} never shown"
    )
    assert seen == want


def test_status_order_next_page_goes_on_in_its_status_when_an_earlier_status_empties(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    with serve_ui(tmp_path_factory.mktemp("status-empties")) as s:
        paused = _create(s, 60, "a")
        s.ctx.propose([PauseTasks(_now_ms(), tuple(paused))], 10)
        pending = _create(s, 5, "b")  # newer than every paused task
        page.goto(s.url + "/ui/tasks?order=status")

        def empty_pending(n: int) -> None:
            # the five pending tasks page 1 showed are paused: no task is pending any more, and as
            # the newest paused tasks they come before where the walk stopped among the paused
            assert n == 1
            s.ctx.propose([PauseTasks(_now_ms(), tuple(pending))], 10)
            _counted(s, "pending", 0)

        seen = _walk(page, empty_pending, 4)
        assert [st for _, st in seen[:PAGE]] == ["Pending"] * 5 + ["Paused"] * (PAGE - 5)
        assert all(st == "Paused" for _, st in seen[PAGE:])
        _each_once([i for i, _ in seen], pending + paused)


def test_status_order_next_page_goes_on_in_its_status_when_an_earlier_status_fills(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    with serve_ui(tmp_path_factory.mktemp("status-fills")) as s:
        paused = _create(s, 2 * PAGE + 10, "a")
        s.ctx.propose([PauseTasks(_now_ms(), tuple(paused))], 10)
        _counted(s, "pending", 0)
        page.goto(s.url + "/ui/tasks?order=status")

        def fill_pending(n: int) -> None:
            # five tasks page 1 showed are resumed: the pending status, skipped so far, has tasks
            # again (before the paused in the walk, which has passed it)
            if n == 1:
                s.ctx.propose([ResumeTasks(_now_ms(), tuple(paused[:5]))], 10)
                _counted(s, "pending", 5)

        seen = _walk(page, fill_pending, 6)
        assert all(st == "Paused" for _, st in seen)
        _each_once([i for i, _ in seen], paused)


def test_status_order_cursor_naming_no_status_starts_over_and_a_skipped_status_goes_on_at_the_next(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    with serve_ui(tmp_path_factory.mktemp("status-cursor")) as s:
        paused = _create(s, 60, "a")
        s.ctx.propose([PauseTasks(_now_ms(), tuple(paused))], 10)
        pending = _create(s, 5, "b")
        walk = pending + paused
        for cur in ("garbage", "1.", "3.xyz", ".", "nostatus.abc"):
            page.goto(s.url + f"/ui/tasks?order=status&cursor={cur}&p=2")
            assert [i for i, _ in _rows(page, 2)] == walk[:PAGE], f"cursor {cur!r}"
            expect(page.get_by_role("alert")).to_have_count(0)
        # awaiting_ack has no task (skipped): the walk goes on at the next status it walks, paused
        page.goto(s.url + "/ui/tasks?order=status&cursor=awaiting_ack.&p=2")
        assert [i for i, _ in _rows(page, 2)] == paused[:PAGE]
