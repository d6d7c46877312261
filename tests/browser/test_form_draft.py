"""A half-filled task form survives what reloads the tab: a reload on the same node, and the move to
another node's console when leadership moves (a different origin: the draft travels with the tab).
Nothing is created until Save; leaving the form inside the console abandons the draft."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Browsing, serve_ui

pytestmark = pytest.mark.browser

PAYLOAD = '{"order": 42, "note": "half-filled"}'


def _fill(page: Page, callback: str) -> None:
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("15 10 * * mon-fri")
    page.get_by_test_id("f-tz").fill("America/New_York")
    page.get_by_test_id("f-url").fill(callback)
    page.get_by_test_id("f-scene").fill("billing")
    page.get_by_test_id("f-payload").fill(PAYLOAD)


def _assert_filled(page: Page, callback: str) -> None:
    expect(page.get_by_test_id("draft-restored")).to_be_visible()
    expect(page.get_by_test_id("f-cron")).to_have_value("15 10 * * mon-fri")
    expect(page.get_by_test_id("f-tz")).to_have_value("America/New_York")
    expect(page.get_by_test_id("f-url")).to_have_value(callback)
    expect(page.get_by_test_id("f-scene")).to_have_value("billing")
    expect(page.get_by_test_id("f-payload")).to_have_value(PAYLOAD)


def test_a_half_filled_form_follows_the_tab_to_the_new_leader(tmp_path: Path, desk: Browsing) -> None:
    with serve_ui(tmp_path / "a", node_id="n1") as a, serve_ui(tmp_path / "b", node_id="n2") as b:
        page = desk.new_page()
        page.goto(a.url + "/ui/tasks/new?from=draft")
        expect(page.get_by_test_id("task-form")).to_be_visible()
        _fill(page, "http://127.0.0.1:9/hook")
        # leadership moves to n2: n1's console hands the tab over to n2's (another origin)
        a.ctx.role, a.ctx.leader_url, a.ctx.leader_id = "follower", b.url, "n2"
        page.wait_for_url(b.url + "/ui/tasks/new?from=draft")
        # the hand-off is applied once the user accepts it, the dialog naming the node it comes from
        expect(page.get_by_test_id("confirm-dialog")).to_contain_text(f"n1 ({a.url})")
        expect(page.get_by_test_id("handoff-drafts")).to_be_visible()
        expect(page.get_by_test_id("handoff-key")).to_have_count(0)  # an open node: no key to hand over
        page.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("moved")).to_contain_text("n1 is a follower")
        _assert_filled(page, "http://127.0.0.1:9/hook")
        assert len(a.ctx.store) == 0 and len(b.ctx.store) == 0  # nothing created until Save
        page.get_by_test_id("submit").click()
        page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
        status, task = b.api("GET", "/tasks/" + page.url.rsplit("/", 1)[-1])
        assert status == 200, task
        assert (task["scene"], task["cron_expr"], task["timezone"]) == ("billing", "15 10 * * mon-fri", "America/New_York")
        assert task["callback_url"] == "http://127.0.0.1:9/hook" and task["payload"] == {"order": 42, "note": "half-filled"}
        # saved: the draft is gone, a new form opens on the defaults
        page.goto(b.url + "/ui/tasks/new?from=draft")
        expect(page.get_by_test_id("task-form")).to_be_visible()
        expect(page.get_by_test_id("f-scene")).to_have_value("")
        expect(page.get_by_test_id("draft-restored")).to_have_count(0)


def test_a_reload_keeps_the_draft_and_leaving_the_form_drops_it(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "a") as a:
        page.goto(a.url + "/ui/tasks/new")
        expect(page.get_by_test_id("task-form")).to_be_visible()
        default_url = page.get_by_test_id("f-url").input_value()
        _fill(page, "http://127.0.0.1:9/reload")
        page.reload()
        _assert_filled(page, "http://127.0.0.1:9/reload")
        assert len(a.ctx.store) == 0
        page.get_by_role("link", name="Cancel").click()
        page.wait_for_url(a.url + "/ui/tasks")
        page.get_by_test_id("new-task").click()
        expect(page.get_by_test_id("task-form")).to_be_visible()
        expect(page.get_by_test_id("f-url")).to_have_value(default_url)
        expect(page.get_by_test_id("draft-restored")).to_have_count(0)


def test_what_is_typed_before_the_nodes_rules_arrive_is_part_of_the_draft(tmp_path: Path, page: Page) -> None:
    # the form can be typed into at once; the node's OpenAPI document (the fields' rules) comes later
    with serve_ui(tmp_path / "a") as a:
        held: list[Route] = []

        def hold(route: Route) -> None:
            held.append(route)

        page.route("**/api/v1/openapi.json", hold)
        page.goto(a.url + "/ui/tasks/new")
        expect(page.get_by_test_id("task-form")).to_be_visible()
        _fill(page, "http://127.0.0.1:9/early")
        assert held, "the form asked for the node's rules"
        for route in held:
            route.continue_()
        page.unroute("**/api/v1/openapi.json", hold)
        page.reload()
        _assert_filled(page, "http://127.0.0.1:9/early")
        expect(page.get_by_test_id("kind-cron").locator("input")).to_be_checked()
        assert len(a.ctx.store) == 0


def test_an_edit_draft_is_restored_only_on_the_version_it_was_made_on(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "a") as a:
        st, task = a.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000,
                                            "callback_url": "http://127.0.0.1:9/e", "scene": "before"})
        assert st == 201, task
        page.goto(f"{a.url}/ui/tasks/{task['id']}/edit")
        expect(page.get_by_test_id("f-scene")).to_have_value("before")
        page.get_by_test_id("f-scene").fill("mine")
        page.reload()
        expect(page.get_by_test_id("f-scene")).to_have_value("mine")
        expect(page.get_by_test_id("draft-restored")).to_be_visible()
        st, _ = a.api("PATCH", f"/tasks/{task['id']}", {"scene": "theirs"})  # changed meanwhile
        assert st == 200
        page.reload()
        expect(page.get_by_test_id("f-scene")).to_have_value("theirs")
        expect(page.get_by_test_id("draft-restored")).to_have_count(0)
