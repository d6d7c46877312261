"""Time and language: no English UI string on a Chinese page (every page, with data, errors and
dialogs), one date-time format per language with a local / UTC / task-zone switch, and dark mode
that follows the system until the user picks one."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from molens.model import Execution, ExecutionResult, FireKind
from tests.browser.conftest import DESKTOP, PHONE, Console, Served, fail_for_good, serve_ui

pytestmark = pytest.mark.browser

# Words that are the same in every language here: product and protocol names, units, zone names.
ALLOWED = {
    "Molens", "English", "HTTP", "JSON", "CSV", "URL", "UTC", "GMT", "ACK", "API", "IANA", "Cron", "cron", "Raft", "QPS",
    "ID", "p50", "p90", "p99", "https", "http", "KiB", "MiB", "GiB", "TiB", "POST",
}
# Data shown as it is stored (not UI text): ids, URLs, zone names, cron expressions, JSON.
DATA = [
    r"https?://\S+",
    r"\b[0-9A-HJKMNP-TV-Z]{26}(-\d+)?\b",
    r"\b(?:Asia|Europe|America)/[A-Za-z_]+\b",
    r"\bGMT[+-]\d+\b",
    r"\bn\d\b",
    r"\b(?:example\.com/hook)\b",
    r"\bRetry-After\b",  # an HTTP header's name, like POST: protocol, not UI text
    r"\b[a-z]+(?:_[a-z]+)+\b",  # an API field name in a server text (cron_expr): protocol, not UI text
    "(?<=\u7248\uff1a).*",  # the fields an update changed, as the API names them (\u4fee\u6539\u4e3a\u7b2c 2 \u7248\uff1ascene)
]

# Every visible text node, option label, placeholder, title and aria-label outside data cells
# (.mono/code/pre hold ids, URLs, payloads and response heads as they are).
COLLECT = """() => {
  const out = []
  const skip = (el) => !el || el.closest('.mono, code, pre, script, style, [data-raw]')
  const shown = (el) => el.closest('option') || el.getClientRects().length > 0
  const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT)
  for (let n = w.nextNode(); n; n = w.nextNode()) {
    const el = n.parentElement
    const s = n.textContent.trim()
    if (s && !skip(el) && shown(el)) out.push(s)
  }
  for (const el of document.body.querySelectorAll('[placeholder], [title], [aria-label]')) {
    if (skip(el)) continue
    for (const a of ['placeholder', 'title', 'aria-label']) { const v = el.getAttribute(a); if (v) out.push(v) }
  }
  return out
}"""


def english_words(texts: list[str]) -> list[str]:
    """The English words among ``texts`` (what a zh page must not show)."""
    bad = []
    for s in texts:
        for pat in DATA:
            s = re.sub(pat, " ", s)
        for w in re.findall(r"[A-Za-z][A-Za-z\u2019']{2,}", s):
            if w not in ALLOWED:
                bad.append(f"{w!r} in {s[:80]!r}")
    return bad


@dataclass(frozen=True)
class _Writes:
    executions: list[Execution]
    history_deletes: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    with serve_ui(tmp_path_factory.mktemp("zh")) as s:
        ids = {}
        for name, body in {
            "cron": {"type": "periodic", "cron_expr": "0 30 9 * * mon-fri", "timezone": "Asia/Shanghai"},
            "interval": {"type": "periodic", "interval_ms": 90_000, "max_fails": 3},
            "delayed": {"type": "delayed", "interval_ms": 7_200_000, "ack_url": "http://127.0.0.1:9/ack"},
            "paused": {"type": "delayed", "interval_ms": 3_600_000},
            "dead": {"type": "delayed", "interval_ms": 3_600_000, "max_retries": 0},
            "dead_amo": {"type": "delayed", "interval_ms": 3_600_000, "reliability": "at_most_once"},
        }.items():
            st, task = s.api("POST", "/tasks", {"callback_url": "http://127.0.0.1:9/zh", "scene": "q1", **body})
            assert st == 201, task
            ids[name] = task["id"]
        s.api("POST", f"/tasks/{ids['paused']}/pause")
        fail_for_good(s, ids["dead"], 500)
        fail_for_good(s, ids["dead_amo"], 503)
        # history events, texts the server writes: an update and a backfill
        st, body = s.api("PATCH", f"/tasks/{ids['interval']}", {"interval_ms": 120_000, "scene": "q2"})
        assert st == 200, body
        st, body = s.api("POST", f"/tasks/{ids['interval']}/backfill",
                         {"start": int(time.time() * 1000) - 7 * 86_400_000, "end": int(time.time() * 1000) - 60_000})
        assert st == 200, body
        s.api("PUT", "/flows/q1", {"rate_per_s": 5, "concurrency": 2, "adaptive": True})
        s.api("PUT", "/flows/held", {"paused": True})
        # the admin page's and the audit trail's texts: a namespace with quotas, a key of it
        assert s.api("POST", "/namespaces", {"name": "zh-ns", "quotas": {"creates_per_s": 5}})[0] == 201
        assert s.api("POST", "/keys", {"name": "zh-key", "role": "writer", "namespaces": ["zh-ns"]})[0] == 201
        now = int(time.time() * 1000)
        rows = [
            Execution(
                task_id=ids["delayed"], fire_id=f"{ids['delayed']}-1", seq=1, attempt=i + 1,
                kind=FireKind.ACK if i == 2 else FireKind.CALLBACK,
                result=[ExecutionResult.SUCCESS, ExecutionResult.TIMEOUT, ExecutionResult.ACK_SUCCESS][i],
                status_code=200 if i != 1 else None, latency_ms=30 + i, worker="n1", url="http://127.0.0.1:9/zh",
                scene="q1", fired_ms=now - 120_000 * (3 - i), finished_ms=now - 120_000 * (3 - i) + 30,
                response_head='{"ok": true}',
            )
            for i in range(3)
        ]
        s.ctx.history.apply([(10_000_000, _Writes(rows))])
        yield s, ids


def _zh(page: Page) -> None:
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    expect(page.get_by_test_id("nav-tasks")).to_have_text("任务")


def _assert_zh(page: Page, where: str) -> None:
    bad = english_words(page.evaluate(COLLECT))
    assert not bad, f"English on the zh page {where}:\n" + "\n".join(bad)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_no_english_ui_string_on_a_zh_page(
    seeded: tuple[Served, dict[str, str]], browser: Browser, viewport: dict[str, int]
) -> None:
    s, ids = seeded
    ctx = browser.new_context(viewport=viewport, locale="zh-CN", timezone_id="UTC")  # type: ignore[arg-type]
    try:
        page = ctx.new_page()
        page.goto(s.url + "/ui/")
        _zh(page)
        expect(page.get_by_test_id("tasks-total")).to_have_text("6")
        _assert_zh(page, "/ui/ (dashboard)")
        checks = [
            ("/ui/tasks", "tr[data-task-id]"),
            ("/ui/tasks?order=next_run&scene=q1", "tr[data-task-id]"),
            (f"/ui/tasks/{ids['cron']}", "[data-testid=task-fields]"),
            (f"/ui/tasks/{ids['interval']}", "[data-testid=event-text]"),  # the server's history texts
            (f"/ui/tasks/{ids['delayed']}", "tr[data-exec-id]"),
            (f"/ui/tasks/{ids['paused']}", "[data-testid=act-resume]"),
            ("/ui/executions", "tr[data-exec-id]"),
            ("/ui/latency", "[data-testid=latency-table] tbody tr"),
            ("/ui/timewheel", "h1"),
            ("/ui/cluster", "tr[data-node]"),
            ("/ui/dead-letters", "tr[data-dl-id]"),
            (f"/ui/tasks/{ids['dead']}", "[data-testid=task-dead-letters] tr[data-dl-id]"),
            (f"/ui/tasks/{ids['dead_amo']}", "[data-field=retry]"),
            ("/ui/flows", "tr[data-flow]"),
            ("/ui/audit", "tr[data-audit-id]"),
            ("/ui/admin", "tr[data-key-id]"),
            ("/ui/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", "[data-testid=not-found]"),
            ("/ui/no/such/page", "h1"),
        ]
        for path, ready in checks:
            page.goto(s.url + path)
            expect(page.locator(ready).first).to_be_visible()
            _assert_zh(page, path)
        # the form: every kind, every error, the advanced options, a warning
        page.goto(s.url + "/ui/tasks/new")
        page.locator("details.advanced summary").click()
        for kind in ("delayed", "interval", "cron"):
            page.get_by_test_id(f"kind-{kind}").click()
            _assert_zh(page, f"/ui/tasks/new ({kind})")
        # the server's reason for a cron expression that never fires, shown under the field
        page.get_by_test_id("kind-cron").click()
        page.get_by_test_id("f-cron").fill("0 0 30 2 *")
        expect(page.get_by_test_id("detail-cron_expr")).to_be_visible()
        _assert_zh(page, "/ui/tasks/new (the server's cron reason)")
        page.get_by_test_id("kind-delayed").click()
        page.get_by_test_id("f-delay").fill("-1")
        page.get_by_test_id("f-url").fill("not a url")
        page.get_by_test_id("f-retries").fill("99")
        page.get_by_test_id("submit").click()
        expect(page.get_by_test_id("err-max_retries")).to_be_visible()
        _assert_zh(page, "/ui/tasks/new (errors)")
        page.get_by_test_id("mode-at").check()
        page.get_by_test_id("f-runat").fill("2020-01-01 10:00")
        expect(page.get_by_test_id("warn-run_at")).to_be_visible()
        _assert_zh(page, "/ui/tasks/new (warning)")
        # the retry policy: every field, its errors, and at most once
        page.get_by_test_id("f-retry-factor").fill("11")
        page.get_by_test_id("f-retry-statuses").fill("200")
        page.get_by_test_id("f-retry-throttle").fill("x")
        page.get_by_test_id("submit").click()
        expect(page.get_by_test_id("err-retry.factor")).to_be_visible()
        _assert_zh(page, "/ui/tasks/new (retry errors)")
        page.get_by_test_id("f-retries").fill("5")
        page.get_by_test_id("f-retry-factor").fill("3")
        page.get_by_test_id("f-retry-statuses").fill("409")
        page.get_by_test_id("f-retry-throttle").fill("")
        page.get_by_test_id("f-backoff").select_option("fixed")
        page.get_by_test_id("f-retry-jitter").select_option("full")
        expect(page.get_by_test_id("retry-words")).to_be_visible()
        _assert_zh(page, "/ui/tasks/new (retry policy in words)")
        page.locator("#f-rel").select_option("at_most_once")
        expect(page.get_by_test_id("retry-amo")).to_be_visible()
        _assert_zh(page, "/ui/tasks/new (at most once)")
        # the dead letters' dialogs and toasts
        page.goto(s.url + "/ui/dead-letters?kind=retries_exhausted")
        expect(page.locator("tr[data-dl-id]").first).to_be_visible()
        page.get_by_test_id("redrive-all").click()
        expect(page.get_by_test_id("confirm-filter")).to_be_visible()
        _assert_zh(page, "/ui/dead-letters (redrive all dialog)")
        page.get_by_test_id("confirm-dialog").get_by_role("button").first.click()
        page.get_by_test_id("delete-all").click()
        _assert_zh(page, "/ui/dead-letters (delete all dialog)")
        page.get_by_test_id("confirm-dialog").get_by_role("button").first.click()
        # the node's answer for an at_most_once redrive, without using the dead letter up (both viewports see it)
        page.route("**/api/v1/dead-letters/*/redrive", lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps({"warning": "at_most_once: may be twice"})))
        amo = page.locator("tr[data-dl-id]", has_text="至多一次")
        amo.get_by_test_id("dl-redrive").click()
        _assert_zh(page, "/ui/dead-letters (at most once redrive dialog)")
        page.get_by_test_id("confirm-ok").click()
        expect(page.locator(".toast-warn")).to_be_visible()
        _assert_zh(page, "/ui/dead-letters (at most once warning)")
        # dialogs, toasts and the bulk bar
        page.goto(s.url + "/ui/tasks")
        page.locator("[data-testid=row-check]").first.check()
        page.get_by_test_id("bulk-delete").click()
        expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
        _assert_zh(page, "/ui/tasks (bulk delete dialog)")
        page.get_by_test_id("confirm-dialog").get_by_role("button").first.click()
        page.get_by_test_id("bulk-trigger").click()
        page.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("toast").first).to_be_visible()
        _assert_zh(page, "/ui/tasks (toast)")
    finally:
        ctx.close()


def test_the_login_page_in_zh(tmp_path: Path, page: Page, console: Console) -> None:
    console.allow.append(r"status of 401")
    with serve_ui(tmp_path / "tok", token="zh-token") as s:
        page.goto(s.url + "/ui/")
        _zh(page)
        page.get_by_test_id("f-token").fill("wrong")
        page.get_by_test_id("login-submit").click()
        expect(page.get_by_test_id("login-error")).to_be_visible()
        _assert_zh(page, "login")


def test_one_date_time_format_and_the_zone_switch(seeded: tuple[Served, dict[str, str]], page: Page) -> None:
    s, ids = seeded
    page.goto(f"{s.url}/ui/tasks/{ids['cron']}")
    created = page.locator('[data-field="created_at"]')
    iso = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} "
    expect(created).to_have_text(re.compile(iso + "UTC$"))  # the browser's zone here is UTC
    page.get_by_test_id("zone").select_option("task")
    expect(created).to_have_text(re.compile(iso + r"GMT\+8$"))  # the task's own zone, Asia/Shanghai
    nxt = page.locator('[data-field="next_run_at"]').inner_text()
    assert re.match(r"^\d{4}-\d{2}-\d{2} 09:30:00 GMT\+8", nxt), nxt  # 09:30 Shanghai, as its cron says
    page.reload()  # the choice is remembered
    expect(created).to_have_text(re.compile(iso + r"GMT\+8$"))
    page.get_by_test_id("zone").select_option("utc")
    expect(page.locator('[data-field="next_run_at"]')).to_have_text(re.compile(r"^\d{4}-\d{2}-\d{2} 01:30:00 UTC"))
    page.get_by_test_id("lang").select_option("zh")  # the same format in Chinese
    expect(created).to_have_text(re.compile(iso + "UTC$"))
    expect(page.locator('[data-field="timeout"]')).to_have_text("5秒")


def test_dark_mode_follows_the_system_until_the_user_picks(seeded: tuple[Served, dict[str, str]], browser: Browser) -> None:
    s, _ = seeded
    ctx = browser.new_context(viewport=DESKTOP, color_scheme="dark", timezone_id="UTC")  # type: ignore[arg-type]
    try:
        page = ctx.new_page()
        page.goto(s.url + "/ui/tasks")
        html = page.locator("html")
        expect(html).to_have_attribute("data-theme", "dark")
        bg = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        assert bg == "rgb(18, 22, 31)", bg
        page.get_by_test_id("theme").select_option("light")
        expect(html).to_have_attribute("data-theme", "light")
        assert page.evaluate("getComputedStyle(document.documentElement).backgroundColor") == "rgb(245, 247, 250)"
        page.reload()
        expect(html).to_have_attribute("data-theme", "light")  # remembered over the system's dark
        page.get_by_test_id("theme").select_option("system")
        expect(html).to_have_attribute("data-theme", "dark")
        page.emulate_media(color_scheme="light")  # the system switches: the console follows
        expect(html).to_have_attribute("data-theme", "light")
    finally:
        ctx.close()
