"""The dashboard's charts of fires, failures, retries and lateness: the hour and the day from the
node's series (``GET /api/v1/stats/series``), an hour/day switch that is remembered, in English and
Chinese, light and dark, on a desktop and a phone without sideways scrolling."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PHONE, Served, _open_context, serve_ui

pytestmark = pytest.mark.browser

# (minutes ago, failed, retry): three attempts in the last hour, four more earlier in the day
ATTEMPTS = [(1, False, False), (1, False, False), (2, True, True), *[(120, False, False)] * 4]

CONTRAST = """el => {
  const rgb = (c) => c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number)
  const lum = ([r, g, b]) => 0.2126 * r + 0.7152 * g + 0.0722 * b
  let bg = null
  for (let e = el; e && !bg; e = e.parentElement) {
    const c = getComputedStyle(e).backgroundColor
    if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') bg = c
  }
  return Math.abs(lum(rgb(getComputedStyle(el).color)) - lum(rgb(bg)))
}"""


@pytest.fixture(scope="module")
def charted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_ui(tmp_path_factory.mktemp("charts")) as s:
        series = s.ctx.metrics().fires.series
        now = int(time.time() * 1000)
        for minutes, failed, retry in ATTEMPTS:
            series.attempt(now - minutes * 60_000, failed=failed, retry=retry)
        series.lateness(now - 60_000, [4.0, 12.0])
        yield s


def test_the_charts_show_the_hour_and_the_day_and_the_switch_is_remembered(charted: Served, page: Page) -> None:
    page.goto(charted.url + "/ui/")
    card = page.get_by_test_id("activity")
    expect(card.get_by_role("heading", name="The last hour")).to_be_visible()
    expect(page.get_by_test_id("series-totals")).to_contain_text("3 attempts, 1 failed, 1 retries")
    for chart in ("chart-counts", "chart-lateness"):
        expect(page.get_by_test_id(chart).locator("canvas")).to_have_count(1)
    for label in ("Attempts", "Failed", "Retries"):
        expect(page.get_by_test_id("chart-counts").locator(".u-legend")).to_contain_text(label)
    expect(page.get_by_test_id("chart-lateness").locator(".u-legend")).to_contain_text("Max")
    expect(page.get_by_test_id("range-hour")).to_have_attribute("aria-pressed", "true")

    with page.expect_request(lambda r: "/api/v1/stats/series?range=day" in r.url):
        page.get_by_test_id("range-day").click()
    expect(card.get_by_role("heading", name="The last day")).to_be_visible()
    expect(page.get_by_test_id("series-totals")).to_contain_text("7 attempts, 1 failed, 1 retries")
    expect(page.get_by_test_id("range-day")).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_test_id("range-hour")).to_have_attribute("aria-pressed", "false")
    expect(page.get_by_test_id("chart-counts").locator("h4")).to_have_text("HTTP attempts per 5m")
    page.reload()
    expect(card.get_by_role("heading", name="The last day")).to_be_visible()
    expect(page.get_by_test_id("series-totals")).to_contain_text("7 attempts")


def test_the_charts_in_chinese_and_in_dark_mode(charted: Served, page: Page) -> None:
    page.goto(charted.url + "/ui/")
    page.evaluate("localStorage.removeItem('molens.dashboard.range')")
    page.get_by_test_id("lang").select_option("zh")
    card = page.get_by_test_id("activity")
    expect(card.get_by_role("heading", name="最近一小时")).to_be_visible()
    expect(page.get_by_test_id("series-totals")).to_contain_text("3 次尝试\uff0c1 次失败\uff0c1 次重试")
    expect(page.get_by_test_id("chart-counts").locator(".u-legend")).to_contain_text("失败")
    page.get_by_test_id("range-day").click()
    expect(card.get_by_role("heading", name="最近一天")).to_be_visible()
    for theme in ("light", "dark"):
        page.get_by_test_id("theme").select_option(theme)
        expect(page.locator("html")).to_have_attribute("data-theme", theme)
        expect(page.get_by_test_id("chart-counts").locator("canvas")).to_have_count(1)
        for el in (card.get_by_role("heading").first, page.get_by_test_id("series-totals"),
                   page.get_by_test_id("chart-counts").locator(".u-legend th").nth(1)):
            assert el.evaluate(CONTRAST) > 90, f"{theme}: text too close to its background"


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, PHONE], ids=["desktop", "phone"])
def test_the_charts_fit_the_screen(
    charted: Served, browser: Browser, request: pytest.FixtureRequest, viewport: dict[str, int]
) -> None:
    for b in _open_context(browser, request, viewport):
        page = b.new_page()
        page.goto(charted.url + "/ui/")
        expect(page.get_by_test_id("chart-lateness").locator("canvas")).to_have_count(1)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        box = page.get_by_test_id("chart-counts").bounding_box()
        assert box is not None and box["width"] <= viewport["width"]
