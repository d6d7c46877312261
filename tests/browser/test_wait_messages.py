"""What the console says about a 429, 503 or 507 (docs/api.md, errors): which namespace quota refused
(the body's `quota`) and when to try again (`Retry-After`); and a read the node cannot answer
without a leader is not told that "nothing was changed"."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Console, Served, serve_ui

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/waits"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A leader with namespace `tight` (one unfinished task at most) already holding its one task."""
    with serve_ui(tmp_path_factory.mktemp("waits")) as s:
        assert s.api("POST", "/namespaces", {"name": "tight", "quotas": {"max_pending_tasks": 1}})[0] == 201
        assert s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB,
                                        "namespace": "tight"})[0] == 201
        yield s


def error_body(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}})


def test_a_quota_refusal_names_the_quota_and_when_to_try_again(node: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 429")
    page.goto(f"{node.url}/ui/tasks/new")
    page.get_by_test_id("f-namespace").select_option("tight")
    page.get_by_test_id("submit").click()
    err = page.get_by_test_id("form-error")
    expect(err).to_contain_text("A quota of the namespace refused this: nothing was created.")
    expect(err).to_contain_text("Quota: Pending tasks at most (max_pending_tasks).")
    expect(err).to_contain_text("Try again in 1s.")  # the node's Retry-After: 1
    expect(err).not_to_contain_text("see the details")


def test_a_write_refused_for_want_of_a_leader_says_when_to_try_again(node: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 503")
    st, task = node.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB})
    assert st == 201, task
    page.goto(f"{node.url}/ui/tasks/{task['id']}")
    node.ctx.inject_fault("no_leader")  # the next proposal: 503 no_leader, Retry-After: 1
    page.get_by_test_id("act-pause").click()
    page.get_by_test_id("confirm-ok").click()
    toast = page.get_by_test_id("toast").filter(has_text="Pause failed")
    expect(toast).to_contain_text("No leader right now (election in progress): nothing was changed. Try again in 1s.")


def test_a_full_disk_says_when_to_try_again(node: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 507")

    def full(route: Route) -> None:
        if route.request.method != "POST":
            route.fallback()
            return
        route.fulfill(status=507, headers={"Retry-After": "30", "Content-Type": "application/json"},
                      body=error_body("insufficient_storage", "the leader's disk is full; nothing was applied"))

    page.route("**/api/v1/tasks", full)
    page.goto(f"{node.url}/ui/tasks/new")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("form-error")).to_have_text("The node\u2019s disk is full: nothing was changed. Try again in 30s.")


def test_a_read_without_a_leader_says_only_the_leader_can_answer(node: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 503")
    page.route("**/api/v1/timewheel/distribution", lambda route: route.fulfill(
        status=503, headers={"Retry-After": "1", "Content-Type": "application/json"},
        body=error_body("no_leader", "the time wheel lives on the leader and no leader is known (or it is rebuilding)")))
    page.goto(f"{node.url}/ui/timewheel")
    alert = page.get_by_role("alert").filter(has_text="No leader")
    expect(alert).to_have_text("No leader right now (election in progress): only the leader can answer this. Try again in 1s.")
    expect(alert).not_to_contain_text("nothing was changed")
