"""Redrive / delete all matching dead letters when a later round fails or leadership moves midway:
the console loops over requests of at most 10,000 each and always says what was done so far, and
an answer ``interrupted`` (docs/api.md: part of the request applied, ``more`` true) is asked again,
its interruption said too if asking again fails. One click sends at most 50 requests: stopped there
while the node still says ``more``, the console says more remain and offers to continue. The node's
answers are replaced here (page.route): 10,000 dead letters and a leadership move are not what a
browser test can make."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Console, Served, fail_for_good

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/dl-bulk"
MAX_ROUNDS = 50  # the requests one click sends (DeadLettersView.vue)
UNAVAILABLE = {"error": {"code": "unavailable", "message": "the node cannot take writes right now"}}


@pytest.fixture
def dead(served: Served) -> str:
    """A dead letter of a task of its own (the bulk buttons need a row); its task id."""
    st, task = served.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB,
                                            "max_retries": 0})
    assert st == 201, task
    fail_for_good(served, str(task["id"]))
    return str(task["id"])


def _answers(page: Page, method: str, path: str, answers: list[tuple[int, dict[str, Any]]]) -> list[str]:
    """Answer the console's `method` requests to `path` with `answers` in turn; the URLs asked."""
    asked: list[str] = []

    def handle(route: Route) -> None:
        if route.request.method != method:
            route.fallback()
            return
        status, body = answers[len(asked)]
        asked.append(route.request.url)
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body),
                      headers={"X-Molens-Role": "leader"})

    page.route(f"**/api/v1{path}*", handle)
    return asked


def _round(n: int, action: str, **kw: Any) -> dict[str, Any]:
    return {"matched": n, action: n, "error_count": 0, "errors": [], "more": True, **kw}


def _bulk(page: Page, served: Served, task_id: str, button: str) -> None:
    page.goto(f"{served.url}/ui/dead-letters?task_id={task_id}")
    expect(page.locator("tr[data-dl-id]")).to_have_count(1)
    page.get_by_test_id(button).click()
    page.get_by_test_id("confirm-ok").click()


def test_a_failing_later_round_still_says_what_the_rounds_before_redrove(
    served: Served, dead: str, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 503")
    asked = _answers(page, "POST", "/dead-letters/redrive",
                     [(200, _round(10_000, "redriven")), (200, _round(10_000, "redriven")), (503, UNAVAILABLE)])
    _bulk(page, served, dead, "redrive-all")
    toasts = page.get_by_test_id("toast")
    expect(toasts.filter(has_text="20000 of 20000 matching dead letters redriven.")).to_be_visible()
    expect(toasts.filter(has_text="The node cannot take this right now")).to_be_visible()
    assert len(asked) == 3
    expect(page.get_by_test_id("redrive-all")).to_have_text("Redrive all matching")  # done: the buttons are back


def test_an_interrupted_round_is_asked_again_and_both_are_said_when_that_fails(
    served: Served, dead: str, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 503")
    moved = {"code": "not_leader", "message": "leadership moved to n2"}
    asked = _answers(page, "DELETE", "/dead-letters",
                     [(200, _round(4_000, "deleted", interrupted=moved)), (503, UNAVAILABLE)])
    _bulk(page, served, dead, "delete-all")
    toasts = page.get_by_test_id("toast")
    expect(toasts.filter(has_text="4000 of 4000 matching dead letters deleted.")).to_be_visible()
    expect(toasts.filter(has_text="Interrupted (not_leader)")).to_be_visible()
    expect(toasts.filter(has_text="The node cannot take this right now")).to_be_visible()
    assert len(asked) == 2 and all("task_id=" in u for u in asked)


def test_an_interrupted_round_that_did_nothing_is_still_asked_again(
    served: Served, dead: str, page: Page
) -> None:
    moved = {"code": "not_leader", "message": "leadership moved to n2"}
    first = {"matched": 600, "redriven": 0, "error_count": 500, "more": True, "interrupted": moved,
             "errors": [{"id": "x", "error": "illegal_transition", "message": "paused"}]}
    last = {"matched": 500, "redriven": 100, "error_count": 400, "more": False,
            "errors": [{"id": "x", "error": "illegal_transition", "message": "paused"}]}
    asked = _answers(page, "POST", "/dead-letters/redrive", [(200, first), (200, last)])
    _bulk(page, served, dead, "redrive-all")
    toasts = page.get_by_test_id("toast")
    expect(toasts.filter(has_text="100 of 500 matching dead letters redriven.")).to_be_visible()
    expect(toasts.filter(has_text="400 failed")).to_be_visible()
    expect(toasts.filter(has_text="Interrupted")).to_have_count(0)  # the round after it finished the work
    assert len(asked) == 2


def test_the_interruption_is_said_in_chinese(served: Served, dead: str, page: Page, console: Console) -> None:
    console.allow.append(r"status of 503")
    moved = {"code": "not_leader", "message": "leadership moved to n2"}
    _answers(page, "POST", "/dead-letters/redrive", [(200, _round(7, "redriven", interrupted=moved)), (503, UNAVAILABLE)])
    page.add_init_script("localStorage.setItem('molens.lang', 'zh')")
    _bulk(page, served, dead, "redrive-all")
    toasts = page.get_by_test_id("toast")
    expect(toasts.filter(has_text="匹配的 7 个死信中已重新投递 7 个。")).to_be_visible()
    expect(toasts.filter(has_text="已中断")).to_contain_text("not_leader")


def test_a_redrive_stopped_at_its_request_limit_says_more_remain_and_continues(
    served: Served, dead: str, page: Page
) -> None:
    last = {"matched": 3, "redriven": 3, "error_count": 0, "errors": [], "more": False}
    asked = _answers(page, "POST", "/dead-letters/redrive",
                     [(200, _round(10_000, "redriven"))] * MAX_ROUNDS + [(200, last)])
    _bulk(page, served, dead, "redrive-all")
    toasts = page.get_by_test_id("toast")
    expect(toasts.filter(has_text="500,000 dead letters redriven in 50 requests")).to_contain_text(
        "More still match the filter and were not redriven")
    rest = page.get_by_test_id("bulk-rest")
    expect(rest).to_contain_text("stopped at its request limit after redriving 500,000")
    assert len(asked) == MAX_ROUNDS  # the bound holds: nothing more is sent until asked
    expect(page.get_by_test_id("redrive-all")).to_have_text("Redrive all matching")
    page.get_by_test_id("bulk-continue").click()  # the same filter, already confirmed: no dialog
    expect(toasts.filter(has_text="3 of 3 matching dead letters redriven.")).to_be_visible()
    expect(rest).to_have_count(0)
    assert len(asked) == MAX_ROUNDS + 1


def test_a_delete_stopped_at_the_limit_says_so_in_chinese_and_the_offer_goes_with_the_filter(
    served: Served, dead: str, page: Page
) -> None:
    moved = {"code": "not_leader", "message": "leadership moved to n2"}
    asked = _answers(page, "DELETE", "/dead-letters",
                     [(200, _round(7, "deleted"))] * (MAX_ROUNDS - 1) + [(200, _round(7, "deleted", interrupted=moved))])
    page.add_init_script("localStorage.setItem('molens.lang', 'zh')")
    _bulk(page, served, dead, "delete-all")
    toasts = page.get_by_test_id("toast")
    done = toasts.filter(has_text="已用 50 次请求")
    expect(done).to_contain_text("删除 350 个死信。仍有更多死信匹配筛选条件")
    expect(done).to_contain_text("继续删除")
    expect(toasts.filter(has_text="已中断")).to_contain_text("not_leader")  # the last round's interruption is said too
    rest = page.get_by_test_id("bulk-rest")
    expect(rest).to_contain_text("删除 350 个后达到请求上限而停止")
    expect(page.get_by_test_id("bulk-continue")).to_have_text("继续删除")
    assert len(asked) == MAX_ROUNDS and all("task_id=" in u for u in asked)
    page.get_by_test_id("filter-task").fill("")
    page.get_by_test_id("filter-apply").click()  # another filter: the offer was about the one before
    page.wait_for_url(f"{served.url}/ui/dead-letters")
    expect(rest).to_have_count(0)
