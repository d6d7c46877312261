"""The retry policy in the task form (docs/api.md, ``retry``): the fields create a task whose JSON
shows the policy, in the user's units; a bad value is flagged next to its field with the bounds of
openapi.json's ``RetryPolicyCreate`` before anything is sent; an edit replaces the policy only when
its fields changed; the task page shows the policy in force in words."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, Request, Route, expect

from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/retry"
DEFAULT = {"max_retries": 3, "backoff": "exponential", "initial_ms": 1_000, "factor": 2, "max_ms": 3_600_000,
           "jitter": "none", "non_retryable_statuses": [], "max_throttle_ms": 3_600_000}


def _open_form(served: Served, page: Page, path: str = "/ui/tasks/new") -> None:
    page.goto(served.url + path)
    page.locator("details.advanced summary").click()
    expect(page.get_by_test_id("retry-policy")).to_be_visible()


def test_the_retry_fields_create_a_task_whose_json_shows_the_policy(served: Served, page: Page) -> None:
    _open_form(served, page)
    page.get_by_test_id("f-delay").fill("1")
    page.get_by_test_id("f-delay-unit").select_option("h")
    page.get_by_test_id("f-url").fill(CB)
    page.get_by_test_id("f-retries").fill("5")
    page.get_by_test_id("f-backoff").select_option("fixed")
    expect(page.get_by_test_id("f-retry-factor")).to_have_count(0)  # a fixed backoff has no factor
    page.get_by_test_id("f-retry-initial").fill("30")
    page.get_by_test_id("f-retry-initial-unit").select_option("s")
    page.get_by_test_id("f-retry-max").fill("10")
    page.get_by_test_id("f-retry-max-unit").select_option("min")
    page.get_by_test_id("f-retry-jitter").select_option("full")
    page.get_by_test_id("f-retry-statuses").fill("422, 409 422")
    page.get_by_test_id("f-retry-throttle").fill("2")
    page.get_by_test_id("f-retry-throttle-unit").select_option("h")
    words = page.get_by_test_id("retry-words")
    expect(words).to_contain_text("Up to 5 retries, after 30s, 30s, 30s, 30s, \u2026")
    expect(words).to_contain_text("Fixed backoff: 30s before every retry.")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    tid = page.url.rsplit("/", 1)[-1]
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200
    assert task["retry"] == {"max_retries": 5, "backoff": "fixed", "initial_ms": 30_000, "factor": 2, "max_ms": 600_000,
                             "jitter": "full", "non_retryable_statuses": [409, 422], "max_throttle_ms": 7_200_000}
    assert task["max_retries"] == 5
    shown = page.locator('[data-field="retry"]')
    expect(shown).to_contain_text("Up to 5 retries")
    expect(shown).to_contain_text("Full jitter")
    expect(shown).to_contain_text("Statuses 409, 422 and 404 fail at once.")
    expect(shown).to_contain_text("without using up retries for up to 2h")


def test_blank_retry_fields_leave_the_node_default_and_the_page_says_it(served: Served, page: Page) -> None:
    _open_form(served, page)
    page.get_by_test_id("f-url").fill(CB)
    expect(page.get_by_test_id("f-retry-initial")).to_have_attribute("placeholder", "1")  # 1 s, RetryPolicy's default
    expect(page.get_by_test_id("retry-words")).to_contain_text("Up to 3 retries, after 1s, 2s, 4s.")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    st, task = served.api("GET", f"/tasks/{page.url.rsplit('/', 1)[-1]}")
    assert st == 200 and task["retry"] == DEFAULT
    expect(page.locator('[data-field="retry"]')).to_contain_text(
        "Exponential backoff: 1s first, times 2 each time, at most 1h.")


def test_a_bad_retry_value_is_flagged_next_to_its_field_and_nothing_is_sent(served: Served, page: Page) -> None:
    posts: list[Request] = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" and r.url.endswith("/api/v1/tasks") else None)
    page.goto(served.url + "/ui/tasks/new")
    page.locator("details.advanced summary").click()
    page.get_by_test_id("f-url").fill(CB)
    page.get_by_test_id("f-retry-factor").fill("11")
    page.get_by_test_id("f-retry-initial").fill("90000")
    page.get_by_test_id("f-retry-initial-unit").select_option("s")
    page.get_by_test_id("f-retry-max").fill("1.5")
    page.get_by_test_id("f-retry-max-unit").select_option("ms")
    page.get_by_test_id("f-retry-statuses").fill("500, 200")
    page.get_by_test_id("f-retry-throttle").fill("8")
    page.get_by_test_id("f-retry-throttle-unit").select_option("d")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-retry.factor")).to_have_text("Must be between 1 and 10.")
    expect(page.get_by_test_id("err-retry.initial_ms")).to_have_text("Must be between 0 s and 86,400 s.")
    expect(page.get_by_test_id("err-retry.max_ms")).to_have_text("Must be a whole number of milliseconds.")
    expect(page.get_by_test_id("err-retry.non_retryable_statuses")).to_have_text(
        "Enter HTTP statuses from 300 to 599, separated by commas.")
    expect(page.get_by_test_id("err-retry.max_throttle_ms")).to_have_text("Must be between 0 days and 7 days.")
    expect(page.get_by_test_id("error-count")).to_have_text("5 fields need attention.")
    expect(page.get_by_test_id("retry-words")).to_have_count(0)  # no words for a policy that cannot be
    expect(page).to_have_url(served.url + "/ui/tasks/new")
    assert posts == []
    page.get_by_test_id("f-retry-factor").fill("3")  # after a submit every change re-checks the form
    expect(page.get_by_test_id("err-retry.factor")).to_have_count(0)  # fixed: the message goes at once


def test_a_refused_retry_field_from_the_server_is_shown_next_to_it(served: Served, page: Page, console: Console) -> None:
    console.allow.append(r"status of 400")

    def refuse(route: Route) -> None:  # a node with tighter rules than this page read
        body = '{"error": {"code": "invalid_argument", "message": "retry.factor must be in 1..4", "field": "retry.factor"}}'
        route.fulfill(status=400, content_type="application/json", body=body)

    page.route("**/api/v1/tasks", refuse)
    _open_form(served, page)
    page.get_by_test_id("f-url").fill(CB)
    page.get_by_test_id("f-retry-factor").fill("8")
    page.get_by_test_id("submit").click()
    err = page.get_by_test_id("err-retry.factor")
    expect(err).to_have_text("This factor is out of range.")
    expect(err).to_have_attribute("title", "retry.factor must be in 1..4")


def test_an_edit_replaces_the_policy_only_when_its_fields_changed(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "periodic", "interval_ms": 600_000, "callback_url": CB,
                                             "retry": {"backoff": "fixed", "initial_ms": 5_000}})
    assert st == 201, task
    tid = task["id"]
    _open_form(served, page, f"/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("f-backoff")).to_have_value("fixed")
    expect(page.get_by_test_id("f-retry-initial")).to_have_value("5")
    expect(page.get_by_test_id("f-retry-initial-unit")).to_have_value("s")
    page.get_by_test_id("f-scene").fill("renamed")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}")
    st, after = served.api("GET", f"/tasks/{tid}")
    assert (after["scene"], after["retry"]) == ("renamed", task["retry"])

    _open_form(served, page, f"/ui/tasks/{tid}/edit")
    page.get_by_test_id("f-retry-initial").fill("10")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}")
    st, after = served.api("GET", f"/tasks/{tid}")
    assert after["retry"] == {**task["retry"], "initial_ms": 10_000}

    _open_form(served, page, f"/ui/tasks/{tid}/edit")  # every retry field emptied: the node default again
    page.get_by_test_id("f-backoff").select_option("")
    page.get_by_test_id("f-retry-jitter").select_option("")
    for f in ("f-retry-initial", "f-retry-factor", "f-retry-max", "f-retry-statuses", "f-retry-throttle"):
        page.get_by_test_id(f).fill("")
    page.get_by_test_id("submit").click()
    expect(page).to_have_url(f"{served.url}/ui/tasks/{tid}")
    st, after = served.api("GET", f"/tasks/{tid}")
    assert after["retry"] == DEFAULT


def test_an_at_most_once_task_has_no_retry_fields(served: Served, page: Page) -> None:
    _open_form(served, page)
    page.locator("#f-rel").select_option("at_most_once")
    expect(page.get_by_test_id("retry-amo")).to_contain_text("one attempt, never retried")
    expect(page.get_by_test_id("f-retry-initial")).to_have_count(0)
    expect(page.get_by_test_id("f-retries")).to_have_count(0)


def test_the_notify_url_field_creates_a_task_with_it_and_a_bad_one_is_flagged(served: Served, page: Page) -> None:
    _open_form(served, page)
    page.get_by_test_id("f-delay").fill("1")
    page.get_by_test_id("f-delay-unit").select_option("h")
    page.get_by_test_id("f-url").fill(CB)
    page.get_by_test_id("f-notify").fill("ftp://127.0.0.1:9/notes")
    posts: list[Request] = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" and r.url.endswith("/tasks") else None)
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-notify_url")).to_be_visible()
    assert posts == []  # refused in the browser, nothing sent
    page.get_by_test_id("f-notify").fill("http://127.0.0.1:9/notes")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    tid = page.url.rsplit("/", 1)[-1]
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200 and task["notify_url"] == "http://127.0.0.1:9/notes"
    expect(page.locator('[data-field="notify_url"]')).to_contain_text("http://127.0.0.1:9/notes")
