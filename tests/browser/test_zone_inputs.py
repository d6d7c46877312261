"""Typed times follow the zone switch: a list's From/To keep the instants they stand for when the zone
changes (the text is written again, Apply sends the same range), and the backfill dialog and the
run-at field read times in the zone the task page shows them in ("task's zone": the task's own). The
browser here is in Asia/Shanghai (UTC+8, no DST), so a time read in the wrong zone is 8 h off."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from urllib.parse import parse_qs, urlparse
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import DESKTOP, Served, _open_context

pytestmark = pytest.mark.browser

BROWSER_TZ = "Asia/Shanghai"
CB = "http://127.0.0.1:9/zones"
HOUR = 3_600_000
SINCE = 1_795_996_800_000  # 2026-11-30 00:00 UTC
UNTIL = SINCE + 5 * HOUR


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A desktop page whose browser is in Asia/Shanghai (console errors fail the test, as everywhere)."""
    for b in _open_context(browser, request, DESKTOP, BROWSER_TZ):
        yield b.new_page()


def wall(ms: int, tz: str, seconds: bool = True) -> str:
    """`ms` as the console writes a time into a field, in zone `tz`."""
    return datetime.fromtimestamp(ms / 1000, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def query(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


# (page, From field, To field, its Apply button's test id or None for the form's submit button)
LISTS = [
    ("executions", "filter-since", "filter-until", None),
    ("dead-letters", "filter-since", "filter-until", "filter-apply"),
    ("audit", "audit-since", "audit-until", "audit-apply"),
]


@pytest.mark.parametrize(("path", "since_id", "until_id", "apply_id"), LISTS, ids=[x[0] for x in LISTS])
def test_a_lists_from_and_to_keep_their_instants_when_the_zone_switch_changes(
    served: Served, page: Page, path: str, since_id: str, until_id: str, apply_id: str | None
) -> None:
    page.goto(f"{served.url}/ui/{path}?since={SINCE}&until={UNTIL}")
    since, until = page.get_by_test_id(since_id), page.get_by_test_id(until_id)
    expect(since).to_have_value(wall(SINCE, BROWSER_TZ))
    page.get_by_test_id("zone").select_option("utc")
    expect(since).to_have_value(wall(SINCE, "UTC"))
    expect(until).to_have_value(wall(UNTIL, "UTC"))
    apply = page.get_by_test_id(apply_id) if apply_id else page.locator("form.filters").get_by_role("button", name="Apply")
    apply.click()
    expect(since).to_have_value(wall(SINCE, "UTC"))
    q = query(page)
    assert (q.get("since"), q.get("until")) == (str(SINCE), str(UNTIL)), page.url  # the same range, not 8 h off

    # text typed in UTC is read in UTC, and goes with the zone too ("task's zone" on a list: the browser's)
    since.fill(wall(SINCE + HOUR, "UTC", seconds=False))
    page.get_by_test_id("zone").select_option("task")
    expect(since).to_have_value(wall(SINCE + HOUR, BROWSER_TZ))
    expect(until).to_have_value(wall(UNTIL, BROWSER_TZ))
    apply.click()
    expect(page).to_have_url(re.compile(rf"[?&]since={SINCE + HOUR}\b"))
    assert query(page).get("until") == str(UNTIL)


def test_the_executions_time_filter_says_it_is_on_the_finish_time(served: Served, page: Page) -> None:
    # the API's since/until of /executions are on finished_at, the column shows fired_at
    page.goto(f"{served.url}/ui/executions")
    expect(page.get_by_test_id("label-since")).to_contain_text("Finished from")
    expect(page.get_by_test_id("label-until")).to_contain_text("Finished before")
    expect(page.locator("[data-testid=exec-table] th").first).to_have_text("Fired at")


def test_backfill_reads_its_times_in_the_tasks_zone_when_the_switch_says_so(served: Served, page: Page) -> None:
    st, task = served.api("POST", "/tasks", {"type": "periodic", "cron_expr": "0 * * * *", "timezone": "Asia/Tokyo",
                                             "callback_url": CB, "scene": "tokyo"})
    assert st == 201, task
    page.goto(f"{served.url}/ui/tasks/{task['id']}")
    page.get_by_test_id("zone").select_option("task")
    expect(page.locator('[data-field="created_at"]')).to_contain_text("GMT+9")  # the page shows Tokyo's times
    page.get_by_test_id("act-backfill").click()
    last_hour = int(time.time() * 1000) // HOUR * HOUR
    expect(page.get_by_test_id("bf-end")).to_have_value(wall(last_hour, "Asia/Tokyo"))
    expect(page.get_by_test_id("bf-zone")).to_contain_text("Asia/Tokyo")
    expect(page.get_by_test_id("bf-zone")).to_contain_text("the task\u2019s own zone")
    start, end = last_hour - 3 * HOUR, last_hour - 2 * HOUR
    page.get_by_test_id("bf-start").fill(wall(start, "Asia/Tokyo", seconds=False))
    page.get_by_test_id("bf-end").fill(wall(end, "Asia/Tokyo", seconds=False))
    with page.expect_request(lambda r: r.url.endswith("/backfill") and r.method == "POST") as req:
        page.get_by_test_id("bf-ok").click()
    assert req.value.post_data_json == {"start": start, "end": end}
    expect(page.get_by_test_id("toast").filter(has_text="1 occurrences backfilled")).to_be_visible()


def test_the_run_at_field_reads_its_time_in_the_tasks_zone_when_the_switch_says_so(served: Served, page: Page) -> None:
    at = 1_924_992_000_000  # 2031-01-01 00:00 UTC, 08:00 in Shanghai
    page.goto(f"{served.url}/ui/tasks/new")
    page.get_by_test_id("mode-at").check()
    runat = page.get_by_test_id("f-runat")
    runat.fill("2031-01-01 08:00")  # the browser's zone: Shanghai
    # a delayed task's zone is its timezone, UTC: the text follows the switch, the instant stays
    page.get_by_test_id("zone").select_option("task")
    expect(runat).to_have_value("2031-01-01 00:00:00")
    expect(page.get_by_test_id("runat-zone")).to_contain_text("UTC: the task\u2019s own zone")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    _, task = served.api("GET", f"/tasks/{page.url.rsplit('/', 1)[-1]}")
    assert task["run_at"] == at
    expect(page.locator('[data-field="schedule"]')).to_contain_text("2031-01-01 00:00:00 UTC")  # as typed

    page.goto(f"{served.url}/ui/tasks/new")  # typed in the task's zone from the start
    page.get_by_test_id("mode-at").check()
    page.get_by_test_id("f-runat").fill("2031-01-01 08:00")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    _, task = served.api("GET", f"/tasks/{page.url.rsplit('/', 1)[-1]}")
    assert task["run_at"] == at + 8 * HOUR
    expect(page.locator('[data-field="schedule"]')).to_contain_text("2031-01-01 08:00:00 UTC")
