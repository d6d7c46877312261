"""Browser tests: the built console in Debian's headless Chromium, driven by Playwright.

* Chromium is ``/usr/bin/chromium`` (installed by ``scripts/test``), launched headless with the flags
  that keep it off the network, a fresh temporary profile per launch (Playwright's default), and
  never Playwright's own browser download.
* :func:`serve_ui` starts the real REST app (Bottle on waitress over a
  :class:`~molens.web.local_context.LocalContext`: real lmdb + SQLite, nothing fires) with the console
  mounted by :func:`molens.web.ui.install_ui`, on a free port; always stopped.
* The ``page`` fixture fails a test that logged a console error or an uncaught page error (tests
  that provoke an HTTP error answer list the status they expect in ``console.allow``), and on a failed
  test saves a screenshot of every open page under ``tests/browser/artifacts/``.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import urllib3
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright, sync_playwright

from molens.config import HttpConfig
from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import FireKind, Outcome
from molens.web.api_context import ApiSettings
from molens.web.app import make_app
from molens.web.local_context import LocalContext
from molens.web.server import ApiServer, ServerOptions
from molens.web.ui import STATIC_DIR

T = TypeVar("T")

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
TIMEOUT_MS = 10_000


def wait_until(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``fn`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Served:
    ctx: LocalContext
    server: ApiServer
    http: urllib3.PoolManager = field(default_factory=lambda: urllib3.PoolManager(timeout=10))

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, method: str, path: str, body: Any = None, token: str = "") -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        r = self.http.request(
            method, f"{self.url}/api/v1{path}", json=body, headers=headers, redirect=False, retries=False
        )
        return r.status, (r.json() if r.data else None)


def fail_for_good(served: Served, task_id: str, status: int = 500, head: str = "upstream down") -> None:
    """One attempt of the task's due occurrence answered ``status`` through the real machine (the
    node's Dispatched + Results commands); with no retry left the occurrence is a dead letter."""
    task = served.ctx.get_task(task_id)
    assert task is not None and task.due_ms is not None
    now = task.due_ms  # the commands' stamp: the task is due then
    item = DispatchItem(fire_id=task.fire_id, task_id=task_id, attempt=task.attempt + 1, worker="n1",
                        deadline_ms=now + 10_000)
    served.ctx.propose([Dispatched(now, (item,))], 5)
    res = ResultItem(fire_id=task.fire_id, kind=FireKind.CALLBACK, status_code=status, outcome=Outcome.RESPONSE,
                     response_head=head, latency_ms=5, worker="n1", attempt=task.attempt + 1)
    served.ctx.propose([Results(now + 5, (res,))], 5)


@contextlib.contextmanager
def serve_ui(
    data_dir: Path,
    *,
    role: str = "leader",
    leader_url: str | None = None,
    leader_id: str | None = None,
    token: str = "",
    node_id: str = "n1",
    static_dir: Path | None = None,
) -> Iterator[Served]:
    """The REST app + console over a fresh LocalContext on a free port (see the module docstring)."""
    ctx = LocalContext(data_dir, ApiSettings(node_id=node_id, auth_token=token))
    ctx.role = role
    ctx.leader_url = leader_url
    ctx.leader_id = leader_id
    server = None
    try:
        app = make_app(ctx, static_dir)
        server = ApiServer(app, ServerOptions(HttpConfig(port=0), threads=8)).start()
        yield Served(ctx, server)
    finally:
        if server is not None:
            server.stop()
        ctx.close()


@pytest.fixture(scope="session")
def playwright_() -> Iterator[Playwright]:
    if not (STATIC_DIR / "index.html").is_file():
        pytest.fail("the console is not built (molens/web/static/index.html missing): run scripts/setup")
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/test (installs Debian's chromium)")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def browser(playwright_: Playwright) -> Iterator[Browser]:
    b = playwright_.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One leader node with the console, shared by a test module."""
    with serve_ui(tmp_path_factory.mktemp("node")) as s:
        yield s


@dataclass
class Console:
    """Console errors and uncaught page errors seen by one browser context."""

    errors: list[str] = field(default_factory=list)
    allow: list[str] = field(default_factory=list)
    """Regexes of expected error lines (e.g. the browser's own 'Failed to load resource: ... 400')."""

    def on_console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            loc = msg.location.get("url", "") if msg.location else ""
            self.errors.append(f"console.error: {msg.text} ({loc})")

    def on_page_error(self, exc: Any) -> None:
        self.errors.append(f"pageerror: {exc}")

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(re.search(a, e) for a in self.allow)]


_FAILED = pytest.StashKey[bool]()


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    if call.when == "call":
        item.stash[_FAILED] = call.excinfo is not None


@dataclass
class Browsing:
    """A browser context at one viewport with console checking; ``new_page`` opens more tabs."""

    context: BrowserContext
    console: Console

    def new_page(self) -> Page:
        p = self.context.new_page()
        p.on("console", self.console.on_console)
        p.on("pageerror", self.console.on_page_error)
        return p


def _open_context(
    browser: Browser, request: pytest.FixtureRequest, viewport: dict[str, int], timezone_id: str = "UTC"
) -> Iterator[Browsing]:
    context = browser.new_context(viewport=viewport, locale="en-GB", timezone_id=timezone_id)  # type: ignore[arg-type]
    context.set_default_timeout(TIMEOUT_MS)
    console = Console()
    b = Browsing(context, console)
    try:
        yield b
        failed = request.node.stash.get(_FAILED, False)
        if failed:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid.split("::", 1)[-1])
            for i, p in enumerate(context.pages):
                with contextlib.suppress(Exception):
                    p.screenshot(path=str(ARTIFACTS / f"{name}-{i}.png"), full_page=True)
        if not failed:
            bad = console.unexpected()
            assert not bad, "console errors:\n" + "\n".join(bad)
    finally:
        context.close()


@pytest.fixture(params=[DESKTOP, PHONE], ids=["desktop", "phone"])
def browsing(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Browsing]:
    """A context at 1280x800 and again at 390x844."""
    yield from _open_context(browser, request, request.param)


@pytest.fixture
def desk(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Browsing]:
    """A desktop (1280x800) context."""
    yield from _open_context(browser, request, DESKTOP)


@pytest.fixture
def page(desk: Browsing) -> Page:
    return desk.new_page()


@pytest.fixture
def console(desk: Browsing) -> Console:
    return desk.console
