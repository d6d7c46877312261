"""The console's layout with realistic, long values: at 1280x800 no list page scrolls sideways (not
the page, not a table inside it), a wide screen is used, and long scene names stay on one line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import Browsing, Served, _open_context, fail_for_good, serve_ui

pytestmark = pytest.mark.browser

LONG_SCENE = "billing.reconciliation-of-outstanding-invoices_for-enterprise.customers"[:64]
LONG_URL = "https://hooks.payments.internal.example.com:8443/v2/callbacks/reconciliation/outstanding?tenant=enterprise"


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    """Tasks of every kind with long URLs and scenes, failures, dead letters and flow limits."""
    with serve_ui(tmp_path_factory.mktemp("wide")) as s:
        bodies = [
            {"type": "periodic", "cron_expr": "15 10 * * mon-fri", "timezone": "America/Argentina/Buenos_Aires"},
            {"type": "periodic", "cron_expr": "*/5 * * * *", "timezone": "America/New_York"},
            {"type": "periodic", "interval_ms": 90_000},
            {"type": "delayed", "interval_ms": 3_600_000, "max_retries": 0},
            {"type": "delayed", "interval_ms": 7_200_000, "max_retries": 0},
        ]
        ids = []
        for i, b in enumerate(bodies):
            st, task = s.api("POST", "/tasks", {"callback_url": f"{LONG_URL}&n={i}", "scene": LONG_SCENE, **b})
            assert st == 201, task
            ids.append(task["id"])
        fail_for_good(s, ids[3], 503, "Service Unavailable: the upstream payment gateway did not answer in time")
        fail_for_good(s, ids[4], 500, "Internal Server Error " * 10)
        s.api("PUT", f"/flows/{LONG_SCENE}", {"rate_per_s": 5, "concurrency": 2, "adaptive": True})
        yield s, ids[3]


LIST_PAGES = ["/ui/tasks", "/ui/executions", "/ui/dead-letters", "/ui/latency", "/ui/flows", "/ui/workers", "/ui/cluster",
              "/ui/audit", "/ui/admin"]

SIDEWAYS = """() => {
  const out = []
  const root = document.scrollingElement
  if (root.scrollWidth > root.clientWidth + 1) out.push(`page ${root.scrollWidth} > ${root.clientWidth}`)
  for (const el of document.querySelectorAll('.table-wrap')) {
    if (el.scrollWidth > el.clientWidth + 1) out.push(`table ${el.scrollWidth} > ${el.clientWidth}`)
  }
  return out
}"""


def _loaded(page: Page) -> None:
    expect(page.locator("table tbody tr").first).to_be_visible()
    expect(page.locator(".dim")).to_have_count(0)


@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_no_list_page_scrolls_sideways_on_a_desktop(
    wide: tuple[Served, str], browser: Browser, request: pytest.FixtureRequest, width: int
) -> None:
    s, failed_id = wide
    for b in _open_context(browser, request, {"width": width, "height": 800}):
        page = b.new_page()
        wider = {}
        for path in [*LIST_PAGES, f"/ui/tasks/{failed_id}"]:
            page.goto(s.url + path)
            _loaded(page)
            if bad := page.evaluate(SIDEWAYS):
                wider[path] = bad
        assert not wider, f"pages that scroll sideways at {width} px: {wider}"
        page.goto(s.url + "/ui/tasks")
        _loaded(page)
        # every column is on screen, the last one included
        last = page.locator('[data-testid="tasks-table"] thead th').last.bounding_box()
        assert last is not None and last["x"] + last["width"] <= width
        if width == 1920:  # a wide screen is used, not left as empty margins
            table = page.get_by_test_id("tasks-table").bounding_box()
            assert table is not None and table["width"] >= 1800


def test_a_long_scene_name_stays_on_one_line(wide: tuple[Served, str], desk: Browsing) -> None:
    s, _ = wide
    page = desk.new_page()
    page.goto(s.url + "/ui/tasks")
    _loaded(page)
    cell = page.locator('[data-testid="tasks-table"] tbody tr[data-task-id] td[data-label="Scene"]').first
    expect(cell).to_have_attribute("title", LONG_SCENE)
    row = page.locator('[data-testid="tasks-table"] tbody tr[data-task-id]').first.bounding_box()
    assert row is not None and row["height"] < 60, f"a row {row['height'] if row else None} px tall"
