"""The lists apply only the answer of the latest request: an answer that comes back after the filter
changed (the previous filter's first page, or its "Load more") never overwrites or joins the new
list. Each test holds one request in the browser, applies another filter, then lets the held one
answer. The Tasks list's auto-refresh waits while its bulk confirmation asks."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page, Request, Route, expect

from tests.browser.conftest import Served, fail_for_good, serve_ui

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/sequence"
MANY = 55


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    """55 dead tasks of scene "many" (55 dead letters, failed executions, task.create audit entries),
    one of scene "one" (its id returned), and one namespace.create audit entry."""
    with serve_ui(tmp_path_factory.mktemp("sequence")) as s:
        ids = []
        for i in range(MANY + 1):
            st, task = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000 + 1_000 * i, "callback_url": CB,
                                                "max_retries": 0, "scene": "one" if i == MANY else "many"})
            assert st == 201, task
            fail_for_good(s, str(task["id"]))
            ids.append(str(task["id"]))
        assert s.api("POST", "/namespaces", {"name": "seq"})[0] == 201
        yield s, ids[-1]


class Held:
    """Requests to the API held back while `matches(url)`, answered by release()."""

    def __init__(self, page: Page, pattern: str, matches: Callable[[str], bool]) -> None:
        self.page = page
        self.routes: list[Route] = []
        self.matches = matches
        page.route(re.compile(pattern), self._route)

    def _route(self, route: Route) -> None:
        if self.matches(route.request.url):
            self.routes.append(route)
        else:
            route.continue_()

    def wait(self) -> None:
        for _ in range(200):
            if self.routes:
                return
            self.page.wait_for_timeout(25)
        raise AssertionError("the request to hold was never made")

    def release(self) -> None:
        """Let the held requests answer; return once the page had time to apply what they said."""
        assert self.routes
        held = {r.request.url for r in self.routes}

        def answered(r: Request) -> bool:
            return r.url in held

        for route in self.routes:
            with self.page.expect_request_finished(answered):
                route.continue_()
        self.routes.clear()
        self.page.wait_for_timeout(300)  # the answer's JSON read and the list drawn, if the page took it


def test_tasks_an_older_filters_answer_does_not_replace_the_newer_one(seeded: tuple[Served, str], page: Page) -> None:
    s, one = seeded
    page.goto(s.url + "/ui/tasks")
    rows = page.locator("tr[data-task-id]")
    expect(rows).to_have_count(50)
    held = Held(page, r"/api/v1/tasks\?", lambda u: "scene=many" in u)
    page.get_by_test_id("filter-scene").fill("many")
    page.get_by_test_id("filter-apply").click()
    held.wait()
    page.get_by_test_id("filter-scene").fill("one")
    page.get_by_test_id("filter-apply").click()
    expect(rows).to_have_count(1)
    held.release()
    expect(rows).to_have_count(1)
    assert rows.evaluate_all("els => els.map(e => e.dataset.taskId)") == [one]
    expect(page.get_by_test_id("refresh")).to_be_enabled()  # the stale answer did not end the newer load's state


def test_executions_an_older_filters_answer_does_not_replace_the_newer_one(seeded: tuple[Served, str], page: Page) -> None:
    s, one = seeded
    page.goto(s.url + "/ui/executions?result=failed")
    rows = page.locator("tr[data-exec-id]")
    expect(rows).to_have_count(50)
    held = Held(page, r"/api/v1/executions\?", lambda u: "result=timeout" in u)
    page.get_by_test_id("filter-result").select_option("timeout")
    page.get_by_test_id("exec-filters").get_by_role("button", name="Apply").click()
    held.wait()
    page.get_by_test_id("filter-result").select_option("failed")
    page.get_by_test_id("filter-task").fill(one)
    page.get_by_test_id("exec-filters").get_by_role("button", name="Apply").click()
    expect(rows).to_have_count(1)
    held.release()  # "timeout" matches nothing: taken, it would empty the list
    expect(rows).to_have_count(1)
    expect(page.get_by_test_id("next-page")).to_be_disabled()


def test_dead_letters_load_more_of_the_previous_filter_does_not_join_the_new_list(
    seeded: tuple[Served, str], page: Page
) -> None:
    s, one = seeded
    page.goto(s.url + "/ui/dead-letters")
    rows = page.locator("tr[data-dl-id]")
    expect(rows).to_have_count(50)
    held = Held(page, r"/api/v1/dead-letters\?", lambda u: "cursor=" in u)
    page.get_by_test_id("dl-more").click()
    held.wait()
    page.get_by_test_id("filter-task").fill(one)
    page.get_by_test_id("filter-apply").click()
    expect(rows).to_have_count(1)
    held.release()
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-dl-id^="{one}-"]')).to_have_count(1)
    expect(page.get_by_test_id("dl-more")).to_have_count(0)
    expect(page.get_by_test_id("dl-total")).to_have_text("1 matching")


def test_audit_load_more_of_the_previous_filter_does_not_join_the_new_list(seeded: tuple[Served, str], page: Page) -> None:
    s, _ = seeded
    page.goto(s.url + "/ui/audit")
    rows = page.locator("tr[data-audit-id]")
    expect(rows).to_have_count(50)
    held = Held(page, r"/api/v1/audit\?", lambda u: "cursor=" in u)
    page.get_by_test_id("audit-more").click()
    held.wait()
    page.get_by_test_id("audit-action").select_option("namespace.create")
    page.get_by_test_id("audit-filters").get_by_role("button", name="Apply").click()
    expect(rows).to_have_count(1)
    held.release()
    expect(rows).to_have_count(1)
    expect(page.get_by_test_id("audit-more")).to_have_count(0)


def test_the_tasks_auto_refresh_waits_while_the_bulk_confirmation_asks(seeded: tuple[Served, str], page: Page) -> None:
    s, _ = seeded
    page.goto(s.url + "/ui/tasks?scene=one&auto=2")
    rows = page.locator("tr[data-task-id]")
    expect(rows).to_have_count(1)
    page.get_by_test_id("select-all").check()
    page.get_by_test_id("bulk-pause").click()
    expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v1/tasks?" in r.url else None)
    page.wait_for_timeout(4_500)  # two refresh periods
    assert asked == [], "the list refreshed under the open dialog"
    page.get_by_role("button", name="Cancel").click()
    with page.expect_request(lambda r: "/api/v1/tasks?" in r.url, timeout=5_000):
        pass  # the refresh goes on once the dialog is gone
