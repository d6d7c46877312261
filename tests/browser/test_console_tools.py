"""The console's operator tools: absolute or relative times (one remembered switch, the other form in
a tooltip), keyboard shortcuts with a ``?`` help (en and zh; never while typing), saved views of a
list's filters, an auto-refresh picker on every page that polls, the Workers page, and one duration
field (number + unit) for every duration of the task form."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, Request, Route, expect

from tests.browser.conftest import Browsing, Served, fail_for_good, serve_ui

pytestmark = pytest.mark.browser

CB = "http://127.0.0.1:9/tools"
ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
RELATIVE = re.compile(r"\b(ago|now|in \d+|second|minute|hour|day)")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str, str]]:
    """A pending task, a paused one, and one whose only attempt failed (an execution and a dead letter)."""
    with serve_ui(tmp_path_factory.mktemp("tools")) as s:
        st, _ = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB, "scene": "later"})
        assert st == 201
        st, paused = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CB, "scene": "quiet"})
        assert st == 201, paused
        s.api("POST", f"/tasks/{paused['id']}/pause")
        st, dead = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "max_retries": 0,
                                            "callback_url": CB, "scene": "loud"})
        assert st == 201, dead
        fail_for_good(s, dead["id"], 500)
        yield s, str(paused["id"]), str(dead["id"])


def test_one_switch_shows_every_time_absolute_or_relative_and_the_tooltip_the_other(
    seeded: tuple[Served, str, str], page: Page
) -> None:
    s, paused, _ = seeded
    page.goto(s.url + "/ui/dead-letters")
    cell = page.get_by_test_id("dl-at").first
    expect(cell).to_have_text(ABSOLUTE)  # absolute by default, in the browser's zone, named
    expect(cell).to_have_attribute("title", RELATIVE)
    page.get_by_test_id("time-mode").select_option("relative")
    expect(cell).to_have_text(RELATIVE)
    expect(cell).to_have_attribute("title", ABSOLUTE)
    for path, testid in [("/ui/executions", "fired-at"), ("/ui/tasks", "next-run")]:
        page.goto(s.url + path)  # the switch is remembered and applies on every page
        expect(page.get_by_test_id("time-mode")).to_have_value("relative")
        cell = page.get_by_test_id(testid).filter(has_not_text="—").first
        expect(cell).to_have_text(RELATIVE)
        expect(cell).to_have_attribute("title", re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    page.goto(s.url + f"/ui/tasks/{paused}")
    created = page.locator('[data-field="created_at"]')
    expect(created).to_have_text(RELATIVE)
    expect(created).to_have_attribute("title", ABSOLUTE)
    page.get_by_test_id("time-mode").select_option("absolute")
    expect(created).to_have_text(ABSOLUTE)
    expect(created).to_have_attribute("title", RELATIVE)
    page.reload()
    expect(page.get_by_test_id("time-mode")).to_have_value("absolute")


def test_shortcuts_go_to_pages_and_never_fire_while_typing(seeded: tuple[Served, str, str], page: Page) -> None:
    s, _, _ = seeded
    page.goto(s.url + "/ui/")
    expect(page.get_by_test_id("status-counts")).to_be_visible()
    for keys, path in [("g t", "/ui/tasks"), ("g e", "/ui/executions"), ("g l", "/ui/dead-letters"), ("g f", "/ui/flows"),
                       ("g w", "/ui/workers"), ("g c", "/ui/cluster"), ("g d", "/ui/"), ("n", "/ui/tasks/new")]:
        for k in keys.split():
            page.keyboard.press(k)
        page.wait_for_url(re.compile(re.escape(path) + r"$"))
    scene = page.get_by_test_id("f-scene")
    scene.fill("")
    page.keyboard.type("g t?")  # typed into the field, not taken as shortcuts
    expect(scene).to_have_value("g t?")
    expect(page.get_by_test_id("shortcuts-help")).to_have_count(0)
    assert page.url.endswith("/ui/tasks/new")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("?")
    help_ = page.get_by_test_id("shortcuts-help")
    expect(help_).to_be_visible()
    expect(help_).to_contain_text("Go to dead letters")
    expect(help_.locator("kbd", has_text="?")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(help_).to_have_count(0)
    page.goto(s.url + "/ui/tasks")
    expect(page.locator("tr[data-task-id]").first).to_be_visible()
    page.keyboard.press("/")
    expect(page.get_by_test_id("filter-scene")).to_be_focused()
    page.evaluate("document.activeElement.blur()")
    with page.expect_request(lambda r: "/api/v1/tasks" in r.url and r.method == "GET"):
        page.keyboard.press("r")
    for path, asked in (("/ui/audit", "/api/v1/audit"), ("/ui/admin", "/api/v1/keys")):  # pages that do not poll
        page.goto(s.url + path)
        page.wait_for_load_state("networkidle")
        page.evaluate("document.activeElement.blur()")
        with page.expect_request(lambda r, asked=asked: asked in r.url and r.method == "GET", timeout=5_000):
            page.keyboard.press("r")


def test_escape_closes_a_dialog_even_when_focus_left_it(seeded: tuple[Served, str, str], page: Page) -> None:
    s, paused, _ = seeded
    page.goto(s.url + "/ui/tasks?status=paused")
    page.locator(f'tr[data-task-id="{paused}"] [data-testid=row-check]').check()
    page.get_by_test_id("bulk-delete").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_be_visible()
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    assert served_task_exists(s, paused)


def served_task_exists(s: Served, task_id: str) -> bool:
    st, _ = s.api("GET", f"/tasks/{task_id}")
    return st == 200


def test_the_shortcuts_help_is_in_chinese(seeded: tuple[Served, str, str], desk: Browsing) -> None:
    s, _, _ = seeded
    desk.context.add_init_script("localStorage.setItem('molens.lang', 'zh')")
    page = desk.new_page()
    page.goto(s.url + "/ui/tasks")
    expect(page.locator("tr[data-task-id]").first).to_be_visible()
    page.keyboard.press("?")
    help_ = page.get_by_test_id("shortcuts-help")
    expect(help_).to_contain_text("键盘快捷键")
    expect(help_).to_contain_text("前往死信")
    expect(help_).to_contain_text("快捷键不起作用")


def test_a_lists_filters_are_saved_under_a_name_applied_and_deleted(seeded: tuple[Served, str, str], page: Page) -> None:
    s, paused, dead = seeded
    page.goto(s.url + "/ui/tasks?status=paused&scene=quiet")
    expect(page.locator(f'tr[data-task-id="{paused}"]')).to_be_visible()
    page.get_by_test_id("view-save").click()
    page.get_by_test_id("view-name").fill("Paused quiet ones")
    page.get_by_test_id("view-save-ok").click()
    page.goto(s.url + "/ui/tasks")
    expect(page.locator(f'tr[data-task-id="{dead}"]')).to_be_visible()
    pick = page.get_by_test_id("view-pick")
    expect(pick.locator("option", has_text="Paused quiet ones")).to_have_count(1)
    pick.select_option("Paused quiet ones")
    page.wait_for_url(re.compile(r"status=paused"))
    assert "scene=quiet" in page.url
    expect(page.locator("tr[data-task-id]")).to_have_count(1)
    expect(page.locator(f'tr[data-task-id="{paused}"]')).to_be_visible()
    page.goto(s.url + "/ui/executions")  # views belong to their page
    expect(page.get_by_test_id("view-pick").locator("option", has_text="Paused quiet ones")).to_have_count(0)
    page.goto(s.url + "/ui/tasks")
    page.get_by_test_id("view-pick").select_option("Paused quiet ones")
    page.get_by_test_id("view-delete").click()
    page.reload()
    expect(page.get_by_test_id("view-pick").locator("option", has_text="Paused quiet ones")).to_have_count(0)


POLLING = ["/ui/", "/ui/tasks", "/ui/executions", "/ui/dead-letters", "/ui/latency", "/ui/timewheel", "/ui/flows",
           "/ui/workers", "/ui/cluster"]


def test_every_polling_page_offers_auto_refresh_and_remembers_the_choice(
    seeded: tuple[Served, str, str], page: Page
) -> None:
    s, paused, _ = seeded
    for path in [*POLLING, f"/ui/tasks/{paused}"]:
        page.goto(s.url + path)
        picker = page.get_by_test_id("refresh-every")
        expect(picker).to_be_visible()
        assert picker.locator("option").all_text_contents() == ["Off", "Every 2 s", "Every 5 s", "Every 15 s", "Every 60 s"], path
    page.goto(s.url + "/ui/workers")
    page.get_by_test_id("refresh-every").select_option("60000")
    page.goto(s.url + "/ui/cluster")
    page.get_by_test_id("refresh-every").select_option("0")
    page.goto(s.url + "/ui/workers")
    expect(page.get_by_test_id("refresh-every")).to_have_value("60000")  # remembered per page
    page.get_by_test_id("refresh-every").select_option("5000")
    with page.expect_request(lambda r: r.url.endswith("/api/v1/cluster/stats")):  # the next poll
        pass
    page.goto(s.url + "/ui/cluster")
    expect(page.get_by_test_id("refresh-every")).to_have_value("0")
    page.goto(s.url + "/ui/executions")
    page.get_by_test_id("refresh-every").select_option("15000")
    page.wait_for_url(re.compile(r"[?&]auto=15\b"))  # a list keeps it in the URL too
    page.goto(s.url + "/ui/executions")
    expect(page.get_by_test_id("refresh-every")).to_have_value("15000")


THREE = {"time_ms": 1795978278948, "nodes": [
    {"node_id": "n1", "role": "leader", "fires_total": 1000, "fires_failed": 12, "callback_latency_p50_ms": 3.1,
     "callback_latency_p99_ms": 250.0, "lateness_p99_ms": 1.5, "scheduler": {"worker": {"in_flight": 7, "queued": 2}}},
    {"node_id": "n2", "role": "follower", "fires_total": 500, "fires_failed": 0, "callback_latency_p50_ms": 2.0,
     "callback_latency_p99_ms": 9.0, "lateness_p99_ms": 2.0, "scheduler": {"worker": {"in_flight": 1, "queued": 0}}},
    {"node_id": "n3", "http_url": "http://127.0.0.1:9", "error": "unreachable: MaxRetryError"},
]}


def test_the_workers_page_shows_each_nodes_fires_failures_in_flight_and_latency(
    seeded: tuple[Served, str, str], page: Page
) -> None:
    s, _, _ = seeded

    def three(route: Route, request: Request) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(THREE))

    page.route("**/api/v1/cluster/stats", three)
    page.goto(s.url + "/ui/")
    page.get_by_test_id("nav-workers").click()
    n1 = page.locator('tr[data-node="n1"]')
    shown = {"w-fires": "1,000", "w-failed": "12 (1.2%)", "w-inflight": "7", "w-queued": "2", "w-p50": "3.1 ms",
             "w-p99": "250 ms", "w-late": "1.5 ms"}
    for testid, text in shown.items():
        expect(n1.get_by_test_id(testid)).to_have_text(text)
    expect(page.locator('tr[data-node="n2"]').get_by_test_id("w-failed")).to_have_text("0 (0.0%)")
    expect(page.locator('tr[data-node="n3"]').get_by_test_id("worker-down")).to_be_visible()
    total = page.get_by_test_id("workers-total")
    expect(total).to_contain_text("1,500")
    expect(total).to_contain_text("12")


def test_the_workers_page_reads_the_real_nodes_answer(seeded: tuple[Served, str, str], page: Page) -> None:
    s, _, _ = seeded
    page.goto(s.url + "/ui/workers")
    expect(page.locator('tr[data-node="n1"]')).to_be_visible()


def test_every_duration_of_the_form_is_one_number_and_unit_field(seeded: tuple[Served, str, str], page: Page) -> None:
    s, _, _ = seeded
    page.goto(s.url + "/ui/tasks/new")
    page.get_by_test_id("f-delay").fill("90")
    page.get_by_test_id("f-delay-unit").select_option("min")
    page.get_by_test_id("f-url").fill(CB)
    page.locator("details.advanced summary").click()
    page.get_by_test_id("f-timeout").fill("1.5")
    page.get_by_test_id("f-timeout-unit").select_option("s")
    page.get_by_test_id("f-ack").fill(CB + "/ack")
    page.get_by_test_id("f-ackdelay").fill("2")
    page.get_by_test_id("f-ackdelay-unit").select_option("min")
    for tid in ["f-delay", "f-timeout", "f-ackdelay", "f-retry-initial", "f-retry-max", "f-retry-throttle"]:
        field = page.get_by_test_id(tid)
        expect(field.locator("xpath=following-sibling::select[1]")).to_have_attribute("data-testid", f"{tid}-unit")
        assert field.locator("xpath=following-sibling::select[1]/option").all_text_contents() == ["ms", "s", "min", "h", "days"]
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    tid = page.url.rsplit("/", 1)[-1]
    st, task = s.api("GET", f"/tasks/{tid}")
    assert st == 200
    assert (task["interval_ms"], task["timeout_ms"], task["ack_delay_ms"]) == (5_400_000, 1_500, 120_000)
    page.goto(s.url + f"/ui/tasks/{tid}/edit")
    filled = {"f-delay": ("90", "min"), "f-timeout": ("1500", "ms"), "f-ackdelay": ("2", "min")}
    for testid, (value, unit) in filled.items():  # each in the largest unit it is a whole number of
        expect(page.get_by_test_id(testid)).to_have_value(value)
        expect(page.get_by_test_id(f"{testid}-unit")).to_have_value(unit)
