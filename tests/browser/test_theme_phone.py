"""Dark mode keeps the red border of an invalid field; on a phone the top bar's selects show their
whole choice and the single-node dashboard's values read as words, not a letter per line."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PHONE, Served, _open_context

pytestmark = pytest.mark.browser

FITS = """el => {
  const span = document.createElement('span')
  const cs = getComputedStyle(el)
  span.style.font = cs.font
  span.style.whiteSpace = 'pre'
  span.textContent = el.options[el.selectedIndex].text
  document.body.appendChild(span)
  const need = span.getBoundingClientRect().width
  span.remove()
  // the text box: the select's width less its padding and the drop-down arrow (about 20 px)
  const room = el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight) - 20
  return need <= room
}"""


def test_an_invalid_field_keeps_its_red_border_in_dark_mode(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("theme").select_option("dark")
    page.get_by_test_id("f-url").fill("")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("err-callback_url")).to_be_visible()
    danger = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--danger').trim()")
    red = page.evaluate(
        "c => { const d = document.createElement('div'); d.style.color = c; document.body.appendChild(d);"
        " const v = getComputedStyle(d).color; d.remove(); return v }", danger)
    border = page.get_by_test_id("f-url").evaluate("el => getComputedStyle(el).borderTopColor")
    assert border == red, f"invalid URL field border {border}, expected {red}"
    ok = page.get_by_test_id("f-scene").evaluate("el => getComputedStyle(el).borderTopColor")
    assert ok != red  # a valid field is not red


def test_on_a_phone_the_selects_and_the_single_node_dashboard_read_whole(
    served: Served, browser: Browser, request: pytest.FixtureRequest
) -> None:
    for b in _open_context(browser, request, PHONE):
        page = b.new_page()
        page.goto(served.url + "/ui/")
        expect(page.get_by_test_id("mode")).to_have_text("Single process (no Raft)")
        for sel in ("theme", "zone", "lang"):
            assert page.get_by_test_id(sel).evaluate(FITS), f"the {sel} select cuts its choice"
        box = page.get_by_test_id("mode").bounding_box()
        line = page.get_by_test_id("mode").evaluate("el => parseFloat(getComputedStyle(el).lineHeight) || 20")
        assert box is not None and box["height"] <= 2 * line + 1, f"'Single process (no Raft)' is {box} tall"
        page.get_by_test_id("lang").select_option("zh")
        for sel in ("theme", "zone", "lang"):
            assert page.get_by_test_id(sel).evaluate(FITS), f"the {sel} select cuts its choice (zh)"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
