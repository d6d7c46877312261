"""No page shows a raw translation key (``status.pending``, ``result.skipped``: a ``t()`` lookup that
found nothing) as text, in English or Chinese: the rendered DOM of every page is scanned, text and
the attributes a user reads (title, placeholder, aria-label).

A key is ``<namespace>.<name>`` where the namespace is a top-level group of ``locales/en.js``; host
names and file names (``api.example.com``) also look like ``[a-z]+.[a-z_]+`` and are not keys."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import DESKTOP, PHONE, Served, _open_context, fail_for_good, serve_ui
from tests.browser.test_history_events import finish_late

pytestmark = pytest.mark.browser

EN = Path(__file__).resolve().parents[2] / "frontend" / "src" / "locales" / "en.js"
NAMESPACES = re.findall(r"^  (\w+): \{", EN.read_text(encoding="utf-8"), re.MULTILINE)
RAW_KEY = re.compile(r"\b(?:" + "|".join(NAMESPACES) + r")\.[a-zA-Z_][\w.-]*")

READ = """() => {
  const out = []
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT)
  while (walk.nextNode()) {
    const n = walk.currentNode
    const el = n.parentElement
    if (!el || el.closest('script, style, datalist')) continue
    const s = n.textContent.trim()
    if (s) out.push(s)
  }
  for (const el of document.querySelectorAll('[title], [placeholder], [aria-label]')) {
    for (const a of ['title', 'placeholder', 'aria-label']) if (el.getAttribute(a)) out.push(el.getAttribute(a))
  }
  for (const o of document.querySelectorAll('option')) out.push(o.textContent.trim())
  return out
}"""


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Served, dict[str, str]]]:
    """Tasks of every kind and state, dead letters, history events (skipped, updated, backfill),
    flows; and a second node that asks for a token (the sign-in page)."""
    d = tmp_path_factory.mktemp("keys")
    with serve_ui(d / "n1") as s, serve_ui(d / "tok", token="t", node_id="n2") as tok:
        cb = "http://127.0.0.1:9/keys"
        ids = {}
        for name, body in {
            "cron": {"type": "periodic", "cron_expr": "15 10 * * mon-fri", "timezone": "America/New_York"},
            "interval": {"type": "periodic", "interval_ms": 60_000, "max_fails": 3},
            "delayed": {"type": "delayed", "interval_ms": 7_200_000, "ack_url": "http://127.0.0.1:9/ack"},
            "paused": {"type": "delayed", "interval_ms": 3_600_000},
            "dead": {"type": "delayed", "interval_ms": 3_600_000, "max_retries": 0},
            "dead_amo": {"type": "delayed", "interval_ms": 3_600_000, "reliability": "at_most_once"},
            "dead_404": {"type": "delayed", "interval_ms": 3_600_000},
        }.items():
            st, task = s.api("POST", "/tasks", {"callback_url": cb, "scene": "keys", **body})
            assert st == 201, task
            ids[name] = task["id"]
        s.api("POST", f"/tasks/{ids['paused']}/pause")
        fail_for_good(s, ids["dead"], 500)
        fail_for_good(s, ids["dead_amo"], 503)
        fail_for_good(s, ids["dead_404"], 404)
        finish_late(s, ids["interval"], 5 * 60_000)  # a skipped event
        st, _ = s.api("PATCH", f"/tasks/{ids['interval']}", {"scene": "keys2"})  # an updated event
        assert st == 200
        now = int(time.time() * 1000)
        st, body = s.api("POST", f"/tasks/{ids['cron']}/backfill", {"start": now - 7 * 86_400_000, "end": now})
        assert st in (200, 202), body
        s.api("PUT", "/flows/keys", {"rate_per_s": 5, "concurrency": 2, "adaptive": True})
        s.api("PUT", "/flows/held", {"paused": True})
        yield s, tok, ids


def _pages(ids: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("/ui/", '[data-testid="tasks-total"]'),
        ("/ui/tasks", "tr[data-task-id]"),
        ("/ui/tasks?status=paused", "tr[data-task-id]"),
        ("/ui/tasks/new", '[data-testid="preview-list"]'),
        (f"/ui/tasks/new?clone={ids['delayed']}", '[data-testid="clone-of"]'),
        (f"/ui/tasks/{ids['cron']}/edit", '[data-testid="preview-list"]'),
        *[(f"/ui/tasks/{i}", '[data-testid="task-fields"]') for i in ids.values()],
        ("/ui/executions", "tr[data-exec-id]"),
        ("/ui/dead-letters", "tr[data-dl-id]"),
        ("/ui/latency", '[data-testid="latency-table"]'),
        ("/ui/timewheel", "h1"),
        ("/ui/flows", "tr[data-flow]"),
        ("/ui/workers", "tr[data-node]"),
        ("/ui/cluster", "tr[data-node]"),
        ("/ui/audit", "tr[data-audit-id]"),
        ("/ui/admin", "tr[data-ns]"),
        ("/ui/no/such/page", "h1"),
    ]


def _raw_keys(page: Page) -> list[str]:
    return sorted({m for s in page.evaluate(READ) for m in RAW_KEY.findall(s)})


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_no_page_shows_a_raw_translation_key(
    every_kind: tuple[Served, Served, dict[str, str]], browser: Browser, request: pytest.FixtureRequest,
    lang: str, viewport: dict[str, int],
) -> None:
    s, tok, ids = every_kind
    assert {"status", "result", "form"} <= set(NAMESPACES)
    for b in _open_context(browser, request, viewport):
        b.context.add_init_script(f"localStorage.setItem('molens.lang', '{lang}')")
        page = b.new_page()
        found = {}
        for path, ready in _pages(ids):
            page.goto(s.url + path)
            expect(page.locator(ready).first).to_be_visible()
            expect(page.locator(".dim")).to_have_count(0)
            if keys := _raw_keys(page):
                found[path] = keys
        # the form with every error shown, and the sign-in page
        page.goto(s.url + "/ui/tasks/new")
        page.get_by_test_id("f-url").fill("")
        page.get_by_test_id("f-delay").fill("-1")
        page.get_by_test_id("submit").click()
        expect(page.get_by_test_id("error-count")).to_be_visible()
        if keys := _raw_keys(page):
            found["/ui/tasks/new (errors)"] = keys
        page.evaluate("document.activeElement.blur()")  # shortcuts do nothing while typing in a field
        page.keyboard.press("?")  # the keyboard shortcuts' help
        expect(page.get_by_test_id("shortcuts-help")).to_be_visible()
        if keys := _raw_keys(page):
            found["/ui/tasks/new (shortcuts help)"] = keys
        page.keyboard.press("Escape")
        b.console.allow.append(r"status of 401")
        page.goto(tok.url + "/ui/")
        expect(page.get_by_test_id("login-form")).to_be_visible()
        if keys := _raw_keys(page):
            found["login"] = keys
        assert not found, f"raw translation keys on {lang} pages: {found}"
