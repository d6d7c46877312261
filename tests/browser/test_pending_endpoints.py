"""The console against nodes with and without ``/api/v1/schedule/preview`` and
``/api/v1/timewheel/distribution`` (an older node may lack them).

The console learns which endpoints exist from the served OpenAPI document. Without them it must
hide what depends on them (the document is served with the two paths removed); with them it must
draw them right (answered in the browser with ``page.route`` in the shapes the console reads).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import Console, Served

pytestmark = pytest.mark.browser


def _serve_extra(
    page: Page, paths: dict[str, dict[str, Any]], handlers: dict[str, Callable[[Route], None]]
) -> None:
    def openapi(route: Route) -> None:
        resp = route.fetch()
        doc = resp.json()
        doc["paths"].update(paths)
        route.fulfill(response=resp, body=json.dumps(doc))

    page.route("**/api/v1/openapi.json", openapi)
    for pattern, fn in handlers.items():
        page.route(pattern, fn)


def _hide_paths(page: Page, hidden: tuple[str, ...]) -> None:
    """Serve the node's OpenAPI document without ``hidden`` paths (an older node, as the console sees it)."""

    def openapi(route: Route) -> None:
        resp = route.fetch()
        doc = resp.json()
        for p in hidden:
            doc["paths"].pop(p, None)
        route.fulfill(response=resp, body=json.dumps(doc))

    page.route("**/api/v1/openapi.json", openapi)


def test_without_the_endpoints_the_console_hides_preview_and_says_so_for_the_wheel(
    served: Served, page: Page
) -> None:
    _hide_paths(page, ("/api/v1/schedule/preview", "/api/v1/timewheel/distribution"))
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("kind-cron").click()
    expect(page.get_by_test_id("f-cron")).to_be_visible()
    expect(page.get_by_test_id("preview")).to_have_count(0)
    # a delayed task's single fire time needs no server
    page.get_by_test_id("kind-delayed").click()
    expect(page.get_by_test_id("preview-list").locator("li")).to_have_count(1)
    page.goto(served.url + "/ui/timewheel")
    expect(page.get_by_test_id("tw-unsupported")).to_be_visible()


def _last_asked(page: Page, asked: list[dict[str, str]], keys: tuple[str, ...], want: tuple[str, ...],
                timeout_s: float = 10.0) -> tuple[str | None, ...]:
    """The fields ``keys`` of the last preview request, once they are ``want`` or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = tuple(asked[-1].get(k) for k in keys) if asked else ()
        if got == want or time.monotonic() >= deadline:
            return got
        page.wait_for_timeout(50)


def test_create_form_shows_the_next_five_fire_times_in_the_chosen_zone(
    served: Served, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 400")
    asked: list[dict[str, str]] = []
    base = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    def preview(route: Route) -> None:
        from urllib.parse import parse_qsl, urlsplit

        q = dict(parse_qsl(urlsplit(route.request.url).query))
        asked.append(q)
        if q.get("cron_expr") == "bad":
            body = {
                "error": {"code": "invalid_argument", "message": "cron_expr: bad field", "field": "cron_expr"}
            }
            route.fulfill(status=400, content_type="application/json", body=json.dumps(body))
            return
        step = int(q["interval_ms"]) if "interval_ms" in q else 3_600_000
        items = [base + i * step for i in range(5)]
        route.fulfill(status=200, content_type="application/json", body=json.dumps({"items": items}))

    _serve_extra(
        page,
        {"/api/v1/schedule/preview": {"get": {"responses": {"200": {"description": "next fire times"}}}}},
        {"**/api/v1/schedule/preview?*": preview},
    )
    page.goto(served.url + "/ui/tasks/new")
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("0 * * * *")
    page.get_by_test_id("f-tz").fill("Asia/Shanghai")
    items = page.get_by_test_id("preview-list").locator("li")
    expect(items).to_have_count(5)
    # 00:00Z is 08:00 in Shanghai
    expect(items.first).to_have_text("2026-01-01 08:00:00 Thu GMT+8")  # one format, weekday and zone
    expect(items.nth(4)).to_have_text("2026-01-01 12:00:00 Thu GMT+8")
    expect(page.get_by_test_id("preview")).to_contain_text("Asia/Shanghai")
    # the list above may still show an earlier preview's times (this stand-in answers every cron alike):
    # wait, with a deadline, for the preview of what the form now holds
    want = ("periodic", "0 * * * *", "Asia/Shanghai", "5")
    assert _last_asked(page, asked, ("type", "cron_expr", "timezone", "count"), want) == want
    page.get_by_test_id("kind-interval").click()
    page.get_by_test_id("f-interval").fill("90")
    # an interval previews in the browser's zone (UTC in these tests)
    expect(items.nth(1)).to_have_text("2026-01-01 01:30:00 Thu UTC")
    expect(page.get_by_test_id("preview")).to_contain_text("(UTC)")
    assert asked[-1]["interval_ms"] == str(90 * 60_000)
    # the server's complaint about a schedule is shown once, at its field, translated by code/field
    page.get_by_test_id("kind-cron").click()
    page.get_by_test_id("f-cron").fill("bad")
    err = page.get_by_test_id("err-cron_expr")
    expect(err).to_have_text("Not a valid cron expression (5 fields, or 6 with seconds first).")
    expect(err).to_have_attribute("title", "cron_expr: bad field")
    expect(page.get_by_test_id("preview-error")).to_have_count(0)


def test_time_wheel_heatmap_per_level_with_hover_details(served: Served, page: Page) -> None:
    now = 1_767_225_600_000
    levels = []
    for lv, span in enumerate((10, 5_120, 2_621_440)):
        counts = [0] * 512
        counts[3] = 5 + lv
        counts[100] = 1_000 * (lv + 1)
        levels.append(
            {
                "level": lv,
                "buckets": [
                    {"start_ms": now + i * span, "span_ms": span, "count": c} for i, c in enumerate(counts)
                ],
            }
        )
    day = 86_400_000
    body = {"levels": levels, "overflow": 7, "tick_ms": 10, "wheel_size": 512,
            "window": {"horizon_ms": 600_000, "until_ms": now + 600_000},
            "far_future": {"from_ms": now + 600_000, "day_ms": day, "total": 1_234_567,
                           "days": [{"start_ms": now, "count": 3}, {"start_ms": now + 5 * day, "count": 40_000}]}}

    def dist(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    _serve_extra(
        page,
        {"/api/v1/timewheel/distribution": {"get": {"responses": {"200": {"description": "occupancy"}}}}},
        {"**/api/v1/timewheel/distribution": dist},
    )
    page.goto(served.url + "/ui/timewheel")
    for lv in range(3):
        expect(page.get_by_test_id(f"tw-level-{lv}").locator(".cell")).to_have_count(512)
    expect(page.get_by_test_id("tw-level-1")).to_contain_text("2,006 timers")
    cell = page.get_by_test_id("tw-level-2").locator(".cell").nth(100)
    cell.hover()
    hover = page.get_by_test_id("tw-hover")
    expect(hover).to_contain_text("Level 2 · #100")
    expect(hover).to_contain_text("3,000 timers")
    expect(hover).to_contain_text("Beyond the top level: 7")
    # the far future, separately: one cell per day from the window's end
    expect(page.get_by_test_id("tw-window")).to_contain_text("10")
    farc = page.get_by_test_id("tw-far")
    expect(farc).to_contain_text("1,234,567 tasks")
    expect(farc.locator(".cell")).to_have_count(384)
    farc.locator(".cell").nth(5).hover()
    expect(hover).to_contain_text("40,000 timers")
    # busy and empty buckets are drawn differently
    empty = page.get_by_test_id("tw-level-2").locator(".cell").nth(0)
    assert cell.evaluate("e => getComputedStyle(e).backgroundColor") != empty.evaluate(
        "e => getComputedStyle(e).backgroundColor"
    )
