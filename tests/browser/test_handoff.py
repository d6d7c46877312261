"""A hand-off (``#molens-handoff=...``: the key and the form drafts a node's console hands the tab over
with when it moves to another node) can come from any link: it is applied only once the user accepts
it in a dialog that names the node it says it comes from, the key as this node knows it (its
``/whoami``) and where the forms would send. Refused, nothing of it is kept: the key signed in here
stays, the task form opens on its defaults."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, Served, serve_ui

pytestmark = pytest.mark.browser

TOKEN = "handoff-bootstrap-token"
EVIL_URL = "http://attacker.invalid/steal"


def _handoff(**fields: Any) -> str:
    raw = json.dumps(fields).encode()
    return "#molens-handoff=" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _crafted(secret: str) -> str:
    """What an attacker's link carries: their own key, and a task form pointing at their URL."""
    draft = json.dumps({"version": None, "fields": {"callback_url": EVIL_URL, "scene": "planted"}})
    return _handoff(tok=secret, rem=False, **{"from": "n7"}, src="http://attacker.invalid", to="n1", why="follower",
                    drafts={"/tasks/new": draft})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    """A node asking for a key, and an attacker's writer key of a namespace of their own."""
    with serve_ui(tmp_path_factory.mktemp("handoff"), token=TOKEN) as s:
        st, _ = s.api("POST", "/namespaces", {"name": "evil"}, token=TOKEN)
        assert st == 201
        st, key = s.api("POST", "/keys", {"name": "mallory", "role": "writer", "namespaces": ["evil"]}, token=TOKEN)
        assert st == 201, key
        yield s, str(key["secret"])


@pytest.fixture(autouse=True)
def _asked_for_a_key(console: Console) -> None:
    console.allow.append(r"status of 401")


def _stored_token(page: Page) -> str:
    return str(page.evaluate("sessionStorage.getItem('molens.token') || localStorage.getItem('molens.token') || ''"))


def _sign_in(page: Page, s: Served) -> None:
    page.goto(s.url + "/ui/tasks")
    page.get_by_test_id("f-token").fill(TOKEN)
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("tasks-table")).to_be_visible()


def test_a_crafted_hand_off_waits_for_the_user_and_refused_changes_nothing(node: tuple[Served, str], page: Page) -> None:
    s, secret = node
    _sign_in(page, s)
    page.goto(s.url + "/ui/tasks/new" + _crafted(secret))
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("n7 (http://attacker.invalid)")
    expect(page.get_by_test_id("handoff-key")).to_contain_text("replaces the key this console is signed in with")
    expect(page.get_by_test_id("handoff-drafts")).to_contain_text("1 unsaved form")
    # what it would plant, as this node knows it: whose key, and where the forms would send
    expect(page.get_by_test_id("handoff-key-who")).to_have_text("This node knows it as mallory (writer; namespaces evil).")
    expect(page.get_by_test_id("handoff-urls")).to_have_text(f"They send to {EVIL_URL}.")
    expect(page).to_have_url(s.url + "/ui/tasks/new")  # the fragment leaves the address bar at once
    assert _stored_token(page) == TOKEN  # nothing applied before the answer
    expect(page.get_by_test_id("task-form")).to_have_count(0)  # no page loads before the answer
    page.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    expect(page.get_by_test_id("task-form")).to_be_visible()
    expect(page.get_by_test_id("f-url")).not_to_have_value(EVIL_URL)
    expect(page.get_by_test_id("f-scene")).to_have_value("")
    expect(page.get_by_test_id("draft-restored")).to_have_count(0)
    expect(page.get_by_test_id("moved")).to_have_count(0)  # its story is not told either
    expect(page.get_by_test_id("who")).not_to_contain_text("mallory")
    assert _stored_token(page) == TOKEN
    assert page.evaluate("Object.keys(sessionStorage).filter((k) => k.startsWith('molens.draft:'))") == []


def test_a_hand_off_to_a_console_without_a_key_is_applied_once_accepted(node: tuple[Served, str], page: Page) -> None:
    s, secret = node
    page.goto(s.url + "/ui/tasks/new" + _crafted(secret))
    expect(page.get_by_test_id("handoff-key")).to_contain_text("It signs this console in with the key that console used.")
    expect(page.get_by_test_id("login-form")).to_have_count(0)  # the question comes first
    assert _stored_token(page) == ""
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("who")).to_contain_text("mallory")
    expect(page.get_by_test_id("draft-restored")).to_be_visible()
    expect(page.get_by_test_id("f-url")).to_have_value(EVIL_URL)
    expect(page.get_by_test_id("moved")).to_contain_text("n7 is a follower")
    assert _stored_token(page) == secret


def test_a_hand_off_with_nothing_to_apply_asks_nothing(node: tuple[Served, str], page: Page) -> None:
    s, _ = node
    _sign_in(page, s)
    page.goto(s.url + "/ui/executions" + _handoff(tok=TOKEN, rem=False, drafts={}, to="n1", why="down",
                                                  **{"from": "n2"}))
    expect(page.get_by_test_id("moved")).to_contain_text("n2 stopped answering")
    expect(page.get_by_test_id("confirm-dialog")).to_have_count(0)
    expect(page.get_by_test_id("exec-filters")).to_be_visible()
    assert _stored_token(page) == TOKEN


def test_a_hand_off_of_a_key_this_node_refuses_says_so(node: tuple[Served, str], page: Page) -> None:
    s, _ = node
    _sign_in(page, s)
    page.goto(s.url + "/ui/executions" + _crafted("not-a-key-of-this-cluster"))  # another page: a new load
    expect(page.get_by_test_id("handoff-key-who")).to_have_text("This node does not accept that key.")
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("exec-filters")).to_be_visible()
    assert _stored_token(page) == TOKEN
