"""The task list at scale: 10,000 tasks, newest first by default, sortable, with totals, pages and
filters in the URL, jump to a task id, auto-refresh, and a card layout on phones."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, Response, expect

import molens.web.app as web_app
from tests.browser.conftest import PHONE, Browsing, Served, serve_ui
from tests.browser.test_i18n import COLLECT, english_words

pytestmark = pytest.mark.browser

N = 10_000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, list[dict[str, object]]]]:
    with pytest.MonkeyPatch.context() as mp, serve_ui(tmp_path_factory.mktemp("big")) as s:
        # a search pauses at 5,000 tasks examined only, never on time (MAX_SCAN_MS), so the counts
        # shown are exact; a pause is a pause to the console whichever bound made it
        mp.setattr(web_app, "MAX_SCAN_MS", 600_000)
        made: list[dict[str, object]] = []
        for b in range(N // 1000):
            # delays that do not follow creation order, so "next run" sorts differently
            bodies = [
                {
                    "type": "delayed",
                    "interval_ms": 3_600_000 + ((b * 1000 + i) * 7919) % 5_000_000,
                    "callback_url": f"http://127.0.0.1:9/big/{b}/{i}",
                    "scene": "st" if b * 1000 + i < 30 else "big",
                }
                for i in range(1000)
            ]
            st, res = s.api("POST", "/tasks/batch", {"tasks": bodies})
            assert st == 201
            made += res["items"]
        yield s, made


def _ids(page: Page) -> list[str]:
    return page.locator("tr[data-task-id]").evaluate_all("els => els.map(e => e.dataset.taskId)")


def test_sorting_and_paging_through_10000_tasks(big: tuple[Served, list[dict[str, object]]], page: Page) -> None:
    s, made = big
    newest = sorted((str(t["id"]) for t in made), reverse=True)
    page.goto(s.url + "/ui/tasks")
    expect(page.get_by_test_id("total")).to_have_text("Total: 10,000")
    expect(page.get_by_test_id("page-no")).to_have_text("Page 1 of 200")
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", newest[0])
    assert _ids(page) == newest[:50]
    page.get_by_test_id("next-page").click()
    page.wait_for_url(re.compile(r"[?&]p=2"))
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", newest[50])
    page.get_by_test_id("next-page").click()
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", newest[100])
    page.reload()  # the page is in the URL
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", newest[100])
    expect(page.get_by_test_id("page-no")).to_have_text("Page 3 of 200")
    page.get_by_test_id("prev-page").click()
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", newest[50])

    by_due = [str(t["id"]) for t in sorted(made, key=lambda t: (t["next_run_at"], t["id"]))]
    page.get_by_test_id("sort").select_option("next_run")
    page.wait_for_url(re.compile(r"order=next_run"))
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", by_due[0])
    assert _ids(page) == by_due[:50]
    page.get_by_test_id("next-page").click()
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", by_due[50])
    assert _ids(page) == by_due[50:100]

    page.get_by_test_id("sort").select_option("created")
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", newest[-1])


def test_status_order_and_status_totals(big: tuple[Served, list[dict[str, object]]], page: Page) -> None:
    s, made = big
    st_tasks = [str(t["id"]) for t in made if t["scene"] == "st"]
    for tid in st_tasks[:10]:
        s.api("POST", f"/tasks/{tid}/pause")
    page.goto(s.url + "/ui/tasks?scene=st&order=status")
    expect(page.locator("tr[data-task-id]")).to_have_count(30)
    statuses = page.locator("tr[data-task-id] td:nth-child(3)").all_inner_texts()
    assert statuses == ["Pending"] * 20 + ["Paused"] * 10
    # a status-only filter has an exact total, from the status counts
    page.goto(s.url + "/ui/tasks?status=paused")
    expect(page.get_by_test_id("total")).to_have_text("Total: 10")
    expect(page.locator("tr[data-task-id]")).to_have_count(10)
    for tid in st_tasks[:10]:
        s.api("POST", f"/tasks/{tid}/resume")


def _list_answers(page: Page) -> list[Response]:
    """Every answer to the console's task list requests on ``page``, in order."""
    out: list[Response] = []
    page.on("response", lambda r: out.append(r) if "/api/v1/tasks?" in r.url and r.request.method == "GET" else None)
    return out


def test_the_search_box_asks_the_nodes_index_once_and_finds_a_task_among_10000(
    big: tuple[Served, list[dict[str, object]]], page: Page
) -> None:
    s, made = big
    want = next(str(t["id"]) for t in made if str(t["callback_url"]).endswith("/big/7/123"))
    answers = _list_answers(page)
    page.goto(s.url + "/ui/tasks")
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    answers.clear()
    page.get_by_test_id("filter-q").fill("BIG/7/123")
    page.get_by_test_id("filter-q").press("Enter")
    page.wait_for_url(re.compile(r"[?&]q=BIG"))
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    assert _ids(page) == [want]
    assert [r.status for r in answers] == [200] and "?q=BIG%2F7%2F123&" in answers[0].url
    answers.clear()
    page.goto(s.url + "/ui/tasks?q=matches-nothing")
    expect(page.get_by_test_id("tasks-empty")).to_have_text("No tasks match.")  # the whole index, one request
    expect(page.get_by_test_id("search-progress")).to_be_hidden()
    assert len(answers) == 1 and answers[0].json()["scanned"] == 0


def test_a_search_no_index_serves_pauses_every_5000_tasks_and_goes_on_when_asked(
    big: tuple[Served, list[dict[str, object]]], page: Page
) -> None:
    s, _ = big
    _, stats = s.api("GET", "/stats")
    n_all = sum(stats["tasks"].values())
    answers = _list_answers(page)
    page.goto(s.url + "/ui/tasks?url=matches-nothing")
    note = page.get_by_test_id("search-progress")
    expect(note).to_contain_text(f"Searched 5,000 of {n_all:,} tasks so far, 0 found for this page;")
    expect(page.get_by_test_id("tasks-empty")).to_have_text("No match in the tasks searched so far.")
    expect(note.locator("progress")).to_have_attribute("value", "5000")
    expect(note.locator("progress")).to_have_attribute("max", str(n_all))
    expect(page.get_by_test_id("next-page")).to_be_disabled()  # a page is filled by searching further
    assert len(answers) == 1  # one bounded request, not a walk through the whole store
    searched = 5_000
    while searched < n_all:
        expect(note).to_contain_text(f"Searched {searched:,} of {n_all:,} tasks so far")
        page.get_by_test_id("search-further").click()
        searched = min(n_all, searched + 5_000)
        expect(page.get_by_test_id("tasks-empty")).to_have_text(
            "No tasks match." if searched == n_all else "No match in the tasks searched so far."
        )
    expect(note).to_be_hidden()  # the whole store was searched: the answer is final
    scanned = [r.json()["scanned"] for r in answers]
    assert len(scanned) == -(-n_all // 5_000) and max(scanned) == 5_000 and sum(scanned) == n_all


def test_a_search_the_node_cut_short_on_time_pauses_the_same_way(
    big: tuple[Served, list[dict[str, object]]], page: Page, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, _ = big
    monkeypatch.setattr(web_app, "MAX_SCAN_MS", 0)  # a loaded node: every skipping scan is out of time at once
    _, stats = s.api("GET", "/stats")
    n_all = sum(stats["tasks"].values())
    answers = _list_answers(page)
    page.goto(s.url + "/ui/tasks?url=matches-nothing")
    note = page.get_by_test_id("search-progress")
    expect(note).to_contain_text(f"Searched 51 of {n_all:,} tasks so far, 0 found for this page;")  # limit + 1
    page.get_by_test_id("search-further").click()
    expect(note).to_contain_text(f"Searched 102 of {n_all:,} tasks so far")
    assert [r.json()["scanned"] for r in answers] == [51, 51]  # one request a click
    # a refresh searches as far again, rather than dropping what the user asked for
    page.get_by_test_id("refresh").click()
    deadline = time.monotonic() + 10
    while len(answers) < 4:  # poll, letting Playwright deliver the page's events meanwhile
        assert time.monotonic() < deadline, f"the refresh made {len(answers) - 2} list requests"
        page.wait_for_timeout(50)
    expect(note).to_contain_text(f"Searched 102 of {n_all:,} tasks so far")
    expect(page.get_by_test_id("refresh")).to_be_enabled()
    assert [r.json()["scanned"] for r in answers] == [51] * 4


def test_a_search_within_a_scene_does_not_claim_a_total_it_does_not_know(
    big: tuple[Served, list[dict[str, object]]], page: Page
) -> None:
    s, _ = big
    page.goto(s.url + "/ui/tasks?scene=big&url=matches-nothing")  # the scene's index: no count per scene
    note = page.get_by_test_id("search-progress")
    expect(note).to_contain_text("Searched 5,000 tasks so far, 0 found for this page;")
    expect(note.locator("progress")).to_have_count(0)
    page.goto(s.url + "/ui/tasks?status=pending&url=matches-nothing")  # the status index: its count is known
    expect(note).to_contain_text(f"Searched 5,000 of {_status_count(s, 'pending'):,} tasks so far")


def _status_count(s: Served, status: str) -> int:
    _, stats = s.api("GET", "/stats")
    return int(stats["tasks"][status])


def test_searching_further_adds_the_matches_found_further_on_to_the_page(
    big: tuple[Served, list[dict[str, object]]], page: Page
) -> None:
    s, made = big
    # the oldest thousand hold every match, so the newest 5,000 tasks searched first hold none
    want = sorted((str(t["id"]) for t in made if "/big/0/7" in str(t["callback_url"])), reverse=True)
    assert len(want) == 111
    page.goto(s.url + "/ui/tasks?url=big/0/7")
    expect(page.get_by_test_id("search-progress")).to_contain_text("0 found for this page")
    page.get_by_test_id("search-further").click()
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    assert _ids(page) == want[:50]
    expect(page.get_by_test_id("search-progress")).to_be_hidden()  # the page is full
    page.get_by_test_id("next-page").click()
    expect(page.locator("tr[data-task-id]").first).to_have_attribute("data-task-id", want[50])
    assert _ids(page) == want[50:100]


def test_the_paused_search_in_zh(big: tuple[Served, list[dict[str, object]]], page: Page) -> None:
    s, _ = big
    page.goto(s.url + "/ui/tasks")
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.goto(s.url + "/ui/tasks?type=periodic")  # every task here is delayed: no index serves a type
    expect(page.get_by_test_id("search-further")).to_have_text("继续搜索")
    expect(page.get_by_test_id("search-progress")).to_contain_text("已搜索 5,000 / ")
    bad = english_words(page.evaluate(COLLECT))
    assert not bad, "English on the zh task list:\n" + "\n".join(bad)


def test_jump_to_a_task_id(big: tuple[Served, list[dict[str, object]]], page: Page) -> None:
    s, made = big
    target = str(made[4321]["id"])
    page.goto(s.url + "/ui/tasks")
    page.get_by_test_id("jump-id").fill("not-an-id")
    page.get_by_test_id("jump-id").press("Enter")
    expect(page.get_by_test_id("jump-error")).to_be_visible()
    page.get_by_test_id("jump-id").fill(target.lower())
    page.get_by_test_id("jump-id").press("Enter")
    page.wait_for_url(re.compile(rf"/ui/tasks/{target}$"))
    expect(page.get_by_test_id("task-fields")).to_be_visible()


def test_auto_refresh_shows_new_tasks_without_a_click(big: tuple[Served, list[dict[str, object]]], page: Page) -> None:
    s, _ = big
    page.goto(s.url + "/ui/tasks?scene=auto")
    expect(page.get_by_test_id("tasks-empty")).to_be_visible()
    page.get_by_test_id("refresh-every").select_option("5000")
    page.wait_for_url(re.compile(r"auto=5"))
    _, task = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 600_000, "callback_url": "http://127.0.0.1:9/a", "scene": "auto"})
    expect(page.locator(f'tr[data-task-id="{task["id"]}"]')).to_be_visible(timeout=15_000)  # refreshed every 5 s


def test_the_list_is_cards_on_a_phone_with_the_next_run_on_screen(
    big: tuple[Served, list[dict[str, object]]], browser: object, desk: Browsing
) -> None:
    s, _ = big
    page = desk.new_page()
    page.set_viewport_size(PHONE)
    page.goto(s.url + "/ui/tasks")
    row = page.locator("tr[data-task-id]").first
    expect(row).to_be_visible()
    expect(page.locator("[data-testid=tasks-table] thead")).to_be_hidden()
    cell = row.locator("td[data-label='Next run']")
    expect(cell).to_be_visible()
    box = cell.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    expect(page.get_by_test_id("role")).to_be_visible()  # the role pill stays on a phone


def test_a_phone_can_select_every_row_for_a_bulk_action(
    big: tuple[Served, list[dict[str, object]]], desk: Browsing
) -> None:
    s, _ = big
    page = desk.new_page()
    page.set_viewport_size(PHONE)
    page.goto(s.url + "/ui/tasks?scene=big")
    expect(page.locator("tr[data-task-id]")).to_have_count(50)
    page.get_by_test_id("select-all-sm").check()  # the table's header is hidden on a phone
    expect(page.get_by_test_id("bulk-bar")).to_contain_text("50 selected")
