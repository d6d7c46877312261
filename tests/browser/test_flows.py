"""The console's Flows page (docs/api.md#flows): set a flow's limits, see them, pause and resume,
edit, delete; bad input shown by field and never sent; the leader's live figures as the API gives
them; and the task form's flow_key."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser


def _flow(served: Served, key: str) -> dict[str, object] | None:
    st, body = served.api("GET", f"/flows/{key}")
    return body if st == 200 else None


def test_a_flow_is_set_shown_paused_resumed_edited_and_deleted(served: Served, page: Page) -> None:
    page.goto(f"{served.url}/ui/flows")
    page.get_by_test_id("fl-key").fill("pay.example.com:443")
    page.get_by_test_id("fl-rate").fill("20")
    page.get_by_test_id("fl-concurrency").fill("3")
    page.get_by_test_id("fl-save").click()
    row = page.locator('tr[data-flow="pay.example.com:443"]')
    expect(row.get_by_test_id("flow-limits")).to_contain_text("20/s (burst 1) · 3 at once")
    expect(row.get_by_test_id("flow-state")).to_have_text("Active")
    got = _flow(served, "pay.example.com:443")
    assert got is not None and (got["rate_per_s"], got["burst"], got["concurrency"]) == (20, None, 3)

    row.get_by_test_id("flow-toggle").click()
    expect(row.get_by_test_id("flow-state")).to_have_text("Paused")
    assert (_flow(served, "pay.example.com:443") or {})["paused"] is True
    row.get_by_test_id("flow-toggle").click()
    expect(row.get_by_test_id("flow-state")).to_have_text("Active")
    assert (_flow(served, "pay.example.com:443") or {})["paused"] is False

    row.get_by_test_id("flow-edit").click()
    expect(page.get_by_test_id("fl-key")).to_be_disabled()
    expect(page.get_by_test_id("fl-rate")).to_have_value("20")
    page.get_by_test_id("fl-concurrency").fill("5")
    page.get_by_test_id("fl-adaptive").check()
    page.get_by_test_id("fl-save").click()
    expect(row.get_by_test_id("flow-limits")).to_contain_text("5 at once")
    got = _flow(served, "pay.example.com:443")
    assert got is not None and (got["rate_per_s"], got["concurrency"], got["adaptive"]) == (20, 5, True)

    row.get_by_test_id("flow-delete").click()
    page.get_by_test_id("confirm-ok").click()
    expect(row).to_have_count(0)
    assert _flow(served, "pay.example.com:443") is None


def test_bad_limits_are_shown_by_field_and_a_server_refusal_changes_nothing(
    served: Served, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 400")
    page.goto(f"{served.url}/ui/flows")
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.method) if "/api/v1/flows/" in r.url else None)
    page.get_by_test_id("fl-key").fill("bad key!")
    page.get_by_test_id("fl-rate").fill("fast")
    page.get_by_test_id("fl-concurrency").fill("0")
    page.get_by_test_id("fl-save").click()
    expect(page.get_by_test_id("err-key")).to_be_visible()
    expect(page.get_by_test_id("err-rate_per_s")).to_have_text("Enter a number.")
    expect(page.get_by_test_id("err-concurrency")).to_be_visible()
    assert "PUT" not in sent
    page.get_by_test_id("fl-key").fill("nobody")
    page.get_by_test_id("fl-rate").fill("")
    page.get_by_test_id("fl-concurrency").fill("")
    page.get_by_test_id("fl-burst").fill("4")  # a burst without a rate: the server says which field
    page.get_by_test_id("fl-save").click()
    expect(page.get_by_test_id("err-burst")).to_be_visible()
    assert _flow(served, "nobody") is None


def test_the_leaders_live_figures_are_shown_per_flow(served: Served, page: Page) -> None:
    live = {"items": [{
        "key": "api.example.com:443", "configured": True, "rate_per_s": 20.0, "burst": None, "concurrency": 3,
        "paused": False, "adaptive": True, "updated_at": 1, "live": True, "rate": 12, "in_flight": 3, "queued": 40,
        "throttled_until": 4_000_000_000_000, "effective_rate_per_s": 10.0,
    }, {
        "key": "10.0.0.7:8080", "configured": False, "rate_per_s": None, "burst": None, "concurrency": None,
        "paused": False, "adaptive": False, "updated_at": None, "live": True, "rate": 250, "in_flight": 17,
        "queued": 0, "throttled_until": 0, "effective_rate_per_s": None,
    }]}

    def answer(route: Route) -> None:  # what a leader under load answers
        route.fulfill(status=200, content_type="application/json", body=json.dumps(live))

    page.route("**/api/v1/flows", answer)
    page.goto(f"{served.url}/ui/flows")
    row = page.locator('tr[data-flow="api.example.com:443"]')
    expect(row.get_by_test_id("flow-rate")).to_have_text("12/s")
    expect(row.get_by_test_id("flow-inflight")).to_have_text("3")
    expect(row.get_by_test_id("flow-queued")).to_have_text("40")
    expect(row.get_by_test_id("flow-state")).to_have_text("Retry-After")
    expect(row.get_by_test_id("flow-limits")).to_contain_text("adaptive 10/s")
    other = page.locator('tr[data-flow="10.0.0.7:8080"]')
    expect(other.get_by_test_id("flow-limits")).to_contain_text("unlimited")
    expect(other.get_by_test_id("flow-rate")).to_have_text("250/s")
    expect(other.get_by_test_id("flow-delete")).to_have_count(0)  # nothing to delete


def test_the_task_form_sets_and_edits_flow_key_and_shows_the_default(served: Served, page: Page) -> None:
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("f-url").fill("https://Hooks.Example.com/x")
    expect(page.get_by_test_id("f-flow_key")).to_have_attribute("placeholder", "hooks.example.com:443")
    page.get_by_test_id("f-flow_key").fill("no spaces please")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-flow_key")).to_be_visible()
    page.get_by_test_id("f-url").fill("http://127.0.0.1:9/flow")
    page.get_by_test_id("f-flow_key").fill("payments")
    page.get_by_test_id("submit").click()
    page.wait_for_url("**/ui/tasks/0*")
    tid = page.url.rsplit("/", 1)[-1]
    st, task = served.api("GET", f"/tasks/{tid}")
    assert st == 200 and task["flow_key"] == "payments"
    page.goto(f"{served.url}/ui/tasks/{tid}/edit")
    expect(page.get_by_test_id("f-flow_key")).to_have_value("payments")
    page.get_by_test_id("f-flow_key").fill("")
    page.get_by_test_id("submit").click()
    page.wait_for_url(f"**/ui/tasks/{tid}")
    assert served.api("GET", f"/tasks/{tid}")[1]["flow_key"] is None


def test_a_namespaces_own_flow_is_set_by_its_key_with_the_namespace(served: Served, page: Page) -> None:
    """Outside the default namespace a task's flow_key names that namespace's own flow, whose key is
    ``<namespace>~<flow_key>`` (docs/api.md#flows): the page takes that key and the node keeps it
    (the namespace exists: a flow of one that does not is not set)."""
    assert served.api("POST", "/namespaces", {"name": "team-a"})[0] in (201, 409)
    page.goto(f"{served.url}/ui/flows")
    page.get_by_test_id("fl-key").fill("Team~batch")  # no namespace name has capitals
    page.get_by_test_id("fl-rate").fill("5")
    page.get_by_test_id("fl-save").click()
    expect(page.get_by_test_id("err-key")).to_contain_text("namespace~flow key")
    page.get_by_test_id("fl-key").fill("team-a~batch")
    page.get_by_test_id("fl-save").click()
    row = page.locator('tr[data-flow="team-a~batch"]')
    expect(row.get_by_test_id("flow-limits")).to_contain_text("5/s")
    got = _flow(served, "team-a~batch")
    assert got is not None and got["rate_per_s"] == 5
