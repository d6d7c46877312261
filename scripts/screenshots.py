#!/usr/bin/env python3
"""Every console page in en and zh, light and dark, desktop (1440x900) and phone (390x844).

Starts the REST app + console over a seeded :class:`~molens.web.local_context.LocalContext` (tasks
of every kind and state, execution history, namespaces, a key and the audit trail of their changes,
a token-protected second node for the sign-in page and a reader signed in there)
and a real 3-node cluster with one follower killed (the Cluster and Workers pages with a Down member),
drives Debian's chromium with Playwright, and writes ``OUT/<lang>-<theme>-<viewport>-<page>.png``
plus ``OUT/index.html`` showing them side by side. Run through ``scripts/screenshots``.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import urllib3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import Page, sync_playwright  # noqa: E402

import molens.web.app as web_app  # noqa: E402
from molens.model import Execution, ExecutionResult, FireKind  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, Served, fail_for_good, serve_ui, wait_until  # noqa: E402

VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
LANGS = ("en", "zh")
THEMES = ("light", "dark")


@dataclass(frozen=True)
class _Writes:
    executions: list[Execution]
    history_deletes: list[str] = field(default_factory=list)


def seed(s: Served) -> dict[str, str]:
    cb = s.url + "/api/v1/test/callback"
    bodies = {
        "cron": {"type": "periodic", "cron_expr": "0 30 9 * * mon-fri", "timezone": "Europe/Amsterdam", "scene": "reports"},
        "interval": {"type": "periodic", "interval_ms": 60_000, "scene": "heartbeat"},
        "delayed": {"type": "delayed", "interval_ms": 7_200_000, "ack_url": cb, "payload": {"order_id": 42}, "scene": "orders"},
        "paused": {"type": "delayed", "interval_ms": 3_600_000, "scene": "orders"},
        "dead": {"type": "delayed", "interval_ms": 1_800_000, "scene": "orders", "max_retries": 0,
                 "retry": {"non_retryable_statuses": [409, 422]}},
        "dead_amo": {"type": "delayed", "interval_ms": 2_400_000, "scene": "orders", "reliability": "at_most_once"},
        "dead_404": {"type": "delayed", "interval_ms": 3_000_000, "scene": "orders"},
    }
    ids = {}
    for name, body in bodies.items():
        st, task = s.api("POST", "/tasks", {"callback_url": cb, **body})
        assert st == 201, task
        ids[name] = task["id"]
    extra = [{"type": "delayed", "interval_ms": 60_000 * (i + 5), "callback_url": f"{cb}?n={i}", "scene": "bulk"} for i in range(60)]
    st, _ = s.api("POST", "/tasks/batch", {"tasks": extra})
    assert st == 201
    s.api("POST", f"/tasks/{ids['paused']}/pause")
    # flows: one limited and adaptive, one paused, one with a rate only
    for key, limits in {"orders": {"rate_per_s": 5, "burst": 2, "concurrency": 4, "adaptive": True},
                        "reports": {"paused": True}, "heartbeat": {"rate_per_s": 20}}.items():
        st, flow = s.api("PUT", f"/flows/{key}", limits)
        assert st == 200, flow
    fail_for_good(s, ids["dead"], 500, '{"error": "upstream down"}')
    fail_for_good(s, ids["dead_amo"], 503, "Service Unavailable")
    fail_for_good(s, ids["dead_404"], 404, "no such order")
    now = int(time.time() * 1000)
    results = [ExecutionResult.SUCCESS] * 8 + [ExecutionResult.TIMEOUT, ExecutionResult.FAILED, ExecutionResult.ACK_SUCCESS]
    rows = [
        Execution(
            task_id=ids["delayed"], fire_id=f"{ids['delayed']}-{i + 1}", seq=i + 1, attempt=1,
            kind=FireKind.ACK if r is ExecutionResult.ACK_SUCCESS else FireKind.CALLBACK, result=r,
            status_code=None if r is ExecutionResult.TIMEOUT else (500 if r is ExecutionResult.FAILED else 200),
            latency_ms=40 + 17 * i, worker="n1", url=cb, scene="orders",
            fired_ms=now - 300_000 * (len(results) - i), finished_ms=now - 300_000 * (len(results) - i) + 40 + 17 * i,
            response_head='{"ok": true}',
        )
        for i, r in enumerate(results)
    ]
    s.ctx.history.apply([(10_000_000, _Writes(rows))])
    # the admin and audit pages: a namespace with quotas, a key, a change of each
    for name, body in {"payments": {"name": "payments", "quotas": {"max_pending_tasks": 10_000, "creates_per_s": 50}},
                       "reports": {"name": "reports"}}.items():
        st, out = s.api("POST", "/namespaces", body)
        assert st == 201, (name, out)
    st, out = s.api("POST", "/keys", {"name": "billing-ci", "role": "writer", "namespaces": ["payments"]})
    assert st == 201, out
    st, out = s.api("PATCH", "/namespaces/reports", {"quotas": {"fires_per_s": 5}})
    assert st == 200, out
    return ids


def pages(ids: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, path, selector to wait for)."""
    return [
        ("dashboard", "/ui/", "[data-testid=tasks-total]"),
        ("tasks", "/ui/tasks", "tr[data-task-id]"),
        ("tasks-next-run", "/ui/tasks?order=next_run", "tr[data-task-id]"),
        ("task-new", "/ui/tasks/new", "[data-testid=task-form]"),
        ("task-edit", f"/ui/tasks/{ids['cron']}/edit", "[data-testid=preview-list]"),
        ("task-clone", f"/ui/tasks/new?clone={ids['delayed']}", "[data-testid=clone-of]"),
        ("task-cron", f"/ui/tasks/{ids['cron']}", "[data-testid=task-fields]"),
        ("task-delayed", f"/ui/tasks/{ids['delayed']}", "tr[data-exec-id]"),
        ("task-paused", f"/ui/tasks/{ids['paused']}", "[data-testid=act-resume]"),
        ("executions", "/ui/executions", "tr[data-exec-id]"),
        ("dead-letters", "/ui/dead-letters", "tr[data-dl-id]"),
        ("task-dead", f"/ui/tasks/{ids['dead']}", "[data-testid=task-dead-letters] tr[data-dl-id]"),
        ("latency", "/ui/latency", "[data-testid=latency-table] tbody tr"),
        ("timewheel", "/ui/timewheel", "h1"),
        ("flows", "/ui/flows", "tr[data-flow]"),
        ("workers", "/ui/workers", "tr[data-node]"),
        ("cluster", "/ui/cluster", "tr[data-node]"),
        ("audit", "/ui/audit", "tr[data-audit-id]"),
        ("admin", "/ui/admin", "tr[data-ns]"),
        ("not-found", "/ui/no/such/page", "h1"),
    ]


@contextlib.contextmanager
def real_cluster(root: Path) -> Iterator[str]:
    """A real 3-node cluster with one follower killed (the Cluster page shows it Down); the leader's URL."""
    from tests.integration.conftest import Cluster

    c = Cluster(root, 3, state_machine="tasks")
    try:
        c.start()
        leader = c.leader(timeout=30)
        url = f"http://127.0.0.1:{leader.settings['http']['port']}"
        http = urllib3.PoolManager(retries=False, timeout=2)
        wait_until(lambda: _ready(http, url), 30, "the leader's HTTP API")
        c.followers()[-1].kill()
        yield url
    finally:
        c.kill_all()


def _ready(http: urllib3.PoolManager, url: str) -> bool:
    try:
        return http.request("GET", url + "/readyz").status == 200
    except urllib3.exceptions.HTTPError:
        return False


@contextlib.contextmanager
def _scan_time(ms: int) -> Iterator[None]:
    """The in-process app's list scans stop after ``ms`` (molens.web.app.MAX_SCAN_MS) meanwhile."""
    old = web_app.MAX_SCAN_MS
    web_app.MAX_SCAN_MS = ms
    try:
        yield
    finally:
        web_app.MAX_SCAN_MS = old


def shoot(page: Page, out: Path, stem: str) -> str:
    name = f"{stem}.png"
    page.wait_for_timeout(300)  # let charts settle after their first draw (a picture, not a test)
    page.screenshot(path=str(out / name), full_page=True)
    return name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "screenshots")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    shots: list[tuple[str, str]] = []
    with (
        tempfile.TemporaryDirectory() as d,
        serve_ui(Path(d) / "n1") as s,
        serve_ui(Path(d) / "tok", token="t") as tok,
        real_cluster(Path(d) / "cluster") as cluster_url,
    ):
        ids = seed(s)
        st, made = tok.api("POST", "/keys", {"name": "ops-reader", "role": "reader", "namespaces": ["default"]}, token="t")
        assert st == 201, made
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            for lang in LANGS:
                for theme in THEMES:
                    for vname, vp in VIEWPORTS.items():
                        ctx = browser.new_context(viewport=vp, color_scheme=theme, timezone_id="Asia/Shanghai")  # type: ignore[arg-type]
                        ctx.add_init_script(f"localStorage.setItem('molens.lang', '{lang}')")
                        page = ctx.new_page()
                        stem = f"{lang}-{theme}-{vname}"
                        for name, path, ready in pages(ids):
                            page.goto(s.url + path)
                            page.locator(ready).first.wait_for()
                            shots.append((f"{stem}-{name}", shoot(page, out, f"{stem}-{name}")))
                        # the form with every error at once, and a bulk selection
                        page.goto(s.url + "/ui/tasks/new")
                        page.get_by_test_id("f-delay").fill("-5")
                        page.get_by_test_id("f-url").fill("not a url")
                        page.get_by_test_id("submit").click()
                        page.get_by_test_id("err-delay").wait_for()
                        shots.append((f"{stem}-task-new-errors", shoot(page, out, f"{stem}-task-new-errors")))
                        # the retry policy with one bad value, and a dead-letter bulk confirmation
                        page.goto(s.url + "/ui/tasks/new")
                        page.locator("details.advanced summary").click()
                        page.get_by_test_id("f-backoff").select_option("exponential")
                        page.get_by_test_id("f-retry-statuses").fill("409, 422")
                        page.get_by_test_id("f-retry-factor").fill("12")
                        page.get_by_test_id("submit").click()
                        page.get_by_test_id("err-retry.factor").wait_for()
                        shots.append((f"{stem}-task-new-retry", shoot(page, out, f"{stem}-task-new-retry")))
                        page.goto(s.url + "/ui/dead-letters?kind=retries_exhausted")
                        page.locator("tr[data-dl-id]").first.wait_for()
                        page.get_by_test_id("redrive-all").click()
                        page.get_by_test_id("confirm-filter").wait_for()
                        shots.append((f"{stem}-dead-letters-confirm", shoot(page, out, f"{stem}-dead-letters-confirm")))
                        page.goto(s.url + "/ui/tasks")
                        page.get_by_test_id("select-all" if vname == "desktop" else "select-all-sm").check()
                        shots.append((f"{stem}-tasks-selected", shoot(page, out, f"{stem}-tasks-selected")))
                        # a search no index serves, paused with "Search further": the 64 tasks here
                        # are too few to reach 5,000, so the app runs as a loaded node would, out
                        # of time at once (MAX_SCAN_MS 0: each request examines limit + 1 tasks)
                        with _scan_time(0):
                            page.goto(s.url + "/ui/tasks?url=no-such-hook")
                            page.get_by_test_id("search-further").wait_for()
                            shots.append((f"{stem}-tasks-search-paused", shoot(page, out, f"{stem}-tasks-search-paused")))
                        page.goto(cluster_url + "/ui/cluster")
                        page.locator("[data-testid=node-down]").wait_for()
                        shots.append((f"{stem}-cluster-3-nodes", shoot(page, out, f"{stem}-cluster-3-nodes")))
                        page.goto(cluster_url + "/ui/workers")
                        page.locator("[data-testid=worker-down]").wait_for()
                        shots.append((f"{stem}-workers-3-nodes", shoot(page, out, f"{stem}-workers-3-nodes")))
                        page.goto(tok.url + "/ui/")
                        page.get_by_test_id("login-form").wait_for()
                        shots.append((f"{stem}-login", shoot(page, out, f"{stem}-login")))
                        # signed in with a reader key: its name and role in the header, no action offered
                        page.get_by_test_id("f-token").fill(made["secret"])
                        page.get_by_test_id("login-submit").click()
                        page.get_by_test_id("who").wait_for()
                        shots.append((f"{stem}-signed-in-reader", shoot(page, out, f"{stem}-signed-in-reader")))
                        ctx.close()
            browser.close()
    cells = "\n".join(
        f'<figure><a href="{html.escape(f)}"><img src="{html.escape(f)}" loading="lazy"></a><figcaption>{html.escape(n)}</figcaption></figure>'
        for n, f in shots
    )
    (out / "index.html").write_text(
        "<!doctype html><meta charset=utf-8><title>Molens console screenshots</title>"
        "<style>body{font-family:sans-serif;display:flex;flex-wrap:wrap;gap:12px}"
        "figure{margin:0;width:300px}img{width:300px;border:1px solid #ccc}</style>\n" + cells,
        encoding="utf-8",
    )
    print(f"screenshots: {len(shots)} pictures in {out} (open index.html)")
    print(f"screenshots: shots={len(shots)} out={out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
