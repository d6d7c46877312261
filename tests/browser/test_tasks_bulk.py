"""The Tasks list's bulk actions never stop silently with tasks left: "select every matching task"
takes at most 10,000, and when more match by the time the action runs (tasks created since the
selection) the console says so and continues from where it stopped, after a confirmation; the walk
over every match goes in id order whatever order the list shows, so an action that moves tasks in the
shown order (a pause in the status order) neither meets a task twice nor passes one by; a loop cut
short by a node that stops answering says how many selected tasks it never tried."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Page, Route, expect

from molens.fsm.commands import PauseTasks
from tests.browser.conftest import Console, Served, serve_ui

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/tasks-bulk"
MAX_EVERY = 10_000  # the tasks one "every matching" action takes (TasksView.vue)


def _create(s: Served, n: int, tag: str) -> list[str]:
    """`n` periodic tasks, created in batches of 1,000; their ids, oldest first."""
    ids: list[str] = []
    for start in range(0, n, 1000):
        bodies = [{"type": "periodic", "interval_ms": 600_000, "callback_url": f"{CB}/{tag}/{i}"}
                  for i in range(start, min(n, start + 1000))]
        st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
        assert st == 201, res
        ids += [str(x["id"]) for x in res["items"]]
    return ids


def test_every_matching_stops_at_10000_says_more_match_and_continues_from_there(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    with serve_ui(tmp_path_factory.mktemp("every10k")) as s:
        made = _create(s, MAX_EVERY, "a")
        oldest = sorted(made)[:5]
        for tid in oldest:
            assert s.api("POST", f"/tasks/{tid}/pause")[0] == 200
        page.goto(s.url + "/ui/tasks")
        expect(page.get_by_test_id("total")).to_have_text("Total: 10,000")
        page.get_by_test_id("select-all").check()
        page.get_by_test_id("select-every").click()
        expect(page.get_by_test_id("bulk-selected")).to_have_text("All 10,000 matching tasks selected")
        # five more are created after the selection: newest first, the walk takes them and leaves
        # the five oldest (the paused ones) past its bound
        _create(s, 5, "b")
        page.get_by_test_id("bulk-resume").click()
        page.get_by_test_id("confirm-ok").click()
        toasts = page.get_by_test_id("toast")
        expect(toasts.filter(has_text="Resume: 0 done, 10000 skipped")).to_be_visible(timeout=60_000)
        expect(toasts.filter(has_text="one run takes at most the first 10,000 matching tasks")).to_contain_text(
            "press “Continue” for the rest")
        rest = page.get_by_test_id("bulk-rest")
        expect(rest).to_contain_text("More tasks match this filter than the last “Resume” took (10,000)")
        assert all(s.api("GET", f"/tasks/{tid}")[1]["status"] == "paused" for tid in oldest)

        page.get_by_test_id("bulk-continue").click()
        expect(page.get_by_test_id("confirm-dialog")).to_contain_text(
            "Resume the tasks that still match this filter after those the last run took (at most 10,000")
        page.get_by_test_id("confirm-ok").click()
        expect(toasts.filter(has_text="Resume: 5 done, 0 skipped")).to_be_visible(timeout=30_000)
        expect(rest).to_have_count(0)
        assert all(s.api("GET", f"/tasks/{tid}")[1]["status"] == "pending" for tid in oldest)


def test_every_matching_in_status_order_meets_each_task_once_across_continue(
    tmp_path_factory: pytest.TempPathFactory, page: Page
) -> None:
    with serve_ui(tmp_path_factory.mktemp("every-status")) as s:
        # oldest five pending, then 9,995 paused (the state machine's own command, as the API's pause
        # proposes it, in one entry per thousand)
        _create(s, 5, "a")
        paused = _create(s, MAX_EVERY - 5, "b")
        for start in range(0, len(paused), 1000):
            s.ctx.propose([PauseTasks(int(time.time() * 1000), tuple(paused[start:start + 1000]))], 10)
        page.goto(s.url + "/ui/tasks?order=status")
        expect(page.get_by_test_id("total")).to_have_text("Total: 10,000")
        page.get_by_test_id("select-all").check()
        page.get_by_test_id("select-every").click()
        expect(page.get_by_test_id("bulk-selected")).to_have_text("All 10,000 matching tasks selected")
        _create(s, 5, "c")  # after the selection: one run cannot take every match
        page.get_by_test_id("bulk-pause").click()
        page.get_by_test_id("confirm-ok").click()
        rest = page.get_by_test_id("bulk-rest")
        expect(rest).to_contain_text("More tasks match this filter than the last “Pause” took (10,000)",
                                     timeout=60_000)
        # the status order lists a task it pauses again further on, among the paused (and drops a
        # status the pause emptied): Continue goes on after the tasks the first run took, each once
        page.get_by_test_id("bulk-continue").click()
        page.get_by_test_id("confirm-ok").click()
        results = page.get_by_test_id("toast").filter(has_text=re.compile(r"^Pause: \d+ done"))
        expect(results).to_have_count(2, timeout=60_000)
        runs = [tuple(int(n) for n in re.findall(r"(\d+) (?:done|skipped)", x)) for x in results.all_inner_texts()]
        met = [done + skipped for done, skipped in runs]
        assert sum(met) == MAX_EVERY + 5, f"the runs met {met} tasks of {MAX_EVERY + 5}: one was met twice or never"
        assert runs == [(5, MAX_EVERY - 5), (5, 0)]
        expect(rest).to_have_count(0)
        assert s.api("GET", "/stats?local=1")[1]["tasks"]["paused"] == MAX_EVERY + 5


def test_a_bulk_action_cut_short_by_a_node_that_stops_answering_says_how_many_it_never_tried(
    tmp_path_factory: pytest.TempPathFactory, page: Page, console: Console
) -> None:
    console.allow.append(r"ERR_FAILED")
    with serve_ui(tmp_path_factory.mktemp("unanswered")) as s:
        _create(s, 60, "c")
        tried: list[str] = []

        def gone(route: Route) -> None:  # the node does not answer the pauses (status 0 to the console)
            tried.append(route.request.url)
            route.abort()

        page.route("**/api/v1/tasks/*/pause", gone)
        page.goto(s.url + "/ui/tasks")
        expect(page.locator("tr[data-task-id]")).to_have_count(50)
        page.get_by_test_id("select-all").check()
        page.get_by_test_id("bulk-pause").click()
        page.get_by_test_id("confirm-ok").click()
        toasts = page.get_by_test_id("toast")
        expect(toasts.filter(has_text="Pause: 0 done, 0 skipped")).to_be_visible()
        # four at a time: each of the four loops stops at its first unanswered request
        expect(toasts.filter(has_text="46 selected tasks were not attempted")).to_contain_text(
            "select them and run it again")
        assert len(tried) == 4
