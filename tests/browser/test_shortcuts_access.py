"""A page's keyboard shortcut is listed and handled only for a key that may see the page (the
menu's rule, docs/api.md#keys-and-roles): a reader has no `n`, only an admin of every namespace has
`g w` and `g c`, every key has `g f` (its namespaces' own flows, docs/api.md#flows), and none of them
lands on the "Not for this key" page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, serve_ui
from tests.browser.test_signin import TOKEN, Keys, seed, sign_in

pytestmark = pytest.mark.browser

PAGES = {"n": "New task", "g w": "Go to workers", "g c": "Go to the cluster", "g d": "Go to the dashboard",
         "g f": "Go to flows"}


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    with serve_ui(tmp_path_factory.mktemp("shortcuts"), token=TOKEN) as s:
        yield seed(s)


@pytest.fixture(autouse=True)
def _asked_for_a_key(console: Console) -> None:
    console.allow.append(r"status of 401")


def _press(page: Page, keys: str) -> None:
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for k in keys.split():
        page.keyboard.press(k)


def _help(page: Page) -> str:
    _press(page, "?")
    help_ = page.get_by_test_id("shortcuts-help")
    expect(help_).to_contain_text("Go to tasks")
    text = help_.inner_text()
    page.keyboard.press("Escape")
    expect(help_).to_have_count(0)
    return text


@pytest.mark.parametrize(("name", "usable"), [("rea-reader", {"g f"}), ("wes-writer", {"n", "g f"}), ("ada-admin", set(PAGES))])
def test_only_the_pages_the_key_may_see_have_a_shortcut(keys: Keys, page: Page, name: str, usable: set[str]) -> None:
    sign_in(page, keys, name)
    expect(page.get_by_test_id("tasks-table")).to_be_visible()
    text = _help(page)
    for k, what in PAGES.items():
        assert (what in text) == (k in usable), (name, what)
    for k in PAGES:
        if k in usable:
            continue
        _press(page, k)
        page.wait_for_timeout(200)
        expect(page).to_have_url(keys.served.url + "/ui/tasks")
        expect(page.get_by_test_id("refused")).to_have_count(0)
    if "n" in usable:
        _press(page, "n")
        expect(page.get_by_test_id("task-form")).to_be_visible()
    if "g c" in usable:
        _press(page, "g c")
        page.wait_for_url(keys.served.url + "/ui/cluster")
        expect(page.get_by_test_id("refused")).to_have_count(0)
