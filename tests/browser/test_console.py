"""Console-wide behaviour: language, follower redirect, election wait, token login, executions, latency."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from molens.model import Execution, ExecutionResult, FireKind
from tests.browser.conftest import Browsing, Console, Served, serve_ui
from tests.browser.tls_proxy import https_front

pytestmark = pytest.mark.browser


def test_language_switch_is_applied_everywhere_and_remembered(served: Served, page: Page) -> None:
    page.goto(served.url + "/ui/tasks")
    expect(page.get_by_test_id("nav-tasks")).to_have_text("Tasks")
    page.get_by_test_id("lang").select_option("zh")
    expect(page.get_by_test_id("nav-tasks")).to_have_text("任务")
    expect(page.locator("h1")).to_have_text("任务")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    page.reload()
    expect(page.get_by_test_id("nav-dashboard")).to_have_text("概览")
    page.goto(served.url + "/ui/tasks/new")
    expect(page.locator("h1")).to_have_text("新建任务")
    page.get_by_test_id("lang").select_option("en")
    expect(page.locator("h1")).to_have_text("New task")


def test_a_followers_console_moves_to_the_leaders(served: Served, tmp_path: Path, desk: Browsing) -> None:
    with serve_ui(
        tmp_path / "f", role="follower", leader_url=served.url, leader_id="n1", node_id="n2"
    ) as follower:
        page = desk.new_page()
        page.goto(follower.url + "/ui/tasks?scene=abc")
        page.wait_for_url(served.url + "/ui/tasks?scene=abc")
        expect(page.get_by_test_id("filter-scene")).to_have_value("abc")
        expect(page.get_by_test_id("role")).to_contain_text("Leader")


def test_without_a_leader_the_console_says_it_waits_for_an_election(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "c", role="candidate", node_id="n3") as cand:
        page.goto(cand.url + "/ui/")
        expect(page.get_by_test_id("no-leader")).to_contain_text("waiting for an election")
        assert page.url.startswith(cand.url)
        # once a leader is known the banner goes (the console polls /cluster/leader)
        cand.ctx.role = "leader"
        expect(page.get_by_test_id("no-leader")).to_be_hidden(timeout=15_000)


def test_a_write_without_a_leader_is_refused_with_the_election_banner(
    tmp_path: Path, page: Page, console: Console
) -> None:
    console.allow.append(r"status of 503")
    with serve_ui(tmp_path / "c", role="leader", node_id="n3") as node:
        page.goto(node.url + "/ui/tasks/new")
        expect(page.get_by_test_id("task-form")).to_be_visible()
        node.ctx.role = "candidate"  # leadership lost while the form is open
        page.get_by_test_id("submit").click()
        expect(page.get_by_test_id("form-error")).to_be_visible()
        expect(page.get_by_test_id("no-leader")).to_be_visible()
        assert len(node.ctx.store) == 0


def test_token_login_when_the_api_answers_401(tmp_path: Path, page: Page, console: Console) -> None:
    console.allow.append(r"status of 401")
    with serve_ui(tmp_path / "a", token="s3cret-token") as s:
        page.goto(s.url + "/ui/tasks")
        form = page.get_by_test_id("login-form")
        expect(form).to_be_visible()
        page.get_by_test_id("f-token").fill("wrong")
        page.get_by_test_id("login-submit").click()
        expect(page.get_by_test_id("login-error")).to_have_text("The token was refused.")
        page.get_by_test_id("f-token").fill("s3cret-token")
        page.get_by_test_id("login-submit").click()
        expect(page.get_by_test_id("tasks-table")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('molens.token')") == "s3cret-token"
        assert page.evaluate("localStorage.getItem('molens.token')") is None
        page.reload()  # kept for the tab's session
        expect(page.get_by_test_id("tasks-table")).to_be_visible()


@dataclass(frozen=True)
class _Writes:
    executions: list[Execution]
    history_deletes: list[str] = field(default_factory=list)


HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def _history(served: Served, task_id: str) -> list[Execution]:
    now = int(time.time() * 1000)
    rows = []
    for i in range(6):
        ok = i % 3 != 2
        rows.append(
            Execution(
                task_id=task_id,
                fire_id=f"{task_id}-{i + 1}",
                seq=i + 1,
                attempt=1,
                kind=FireKind.CALLBACK,
                result=ExecutionResult.SUCCESS if ok else ExecutionResult.TIMEOUT,
                status_code=200 if ok else None,
                latency_ms=20 + 10 * i,
                worker="n1",
                url="http://127.0.0.1:9/hist",
                scene="hist",
                fired_ms=now - 60_000 * (6 - i),
                finished_ms=now - 60_000 * (6 - i) + 20,
                response_head=HOSTILE if i == 5 else '{"ok": true}',
            )
        )
    # after every index the store will ever use here: this module server takes no writes after it
    served.ctx.history.apply([(10_000_000, _Writes(rows))])
    return rows


@pytest.fixture(scope="module")
def with_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    with serve_ui(tmp_path_factory.mktemp("hist")) as s:
        _, task = s.api(
            "POST",
            "/tasks",
            {"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/hist"},
        )
        _history(s, task["id"])
        yield s, task["id"]


def test_executions_are_listed_filtered_and_response_heads_stay_text(
    with_history: tuple[Served, str], page: Page
) -> None:
    s, tid = with_history
    page.goto(s.url + "/ui/executions")
    rows = page.locator("tr[data-exec-id]")
    expect(rows).to_have_count(6)
    # the newest row holds the hostile response head: shown escaped, never run
    page.locator("tr[data-exec-id]").first.get_by_role("button").click()
    expect(page.get_by_test_id("response-head")).to_have_text(HOSTILE)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("[data-testid=response-head] img").count() == 0

    page.get_by_test_id("filter-result").select_option("timeout")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(re.compile(r"result=timeout"))
    expect(rows).to_have_count(2)
    page.goto(f"{s.url}/ui/executions?task_id={tid}&result=success")
    expect(rows).to_have_count(4)
    expect(page.get_by_test_id("filter-task")).to_have_value(tid)

    # the task's own history on its detail page
    page.goto(f"{s.url}/ui/tasks/{tid}")
    expect(page.locator("tr[data-exec-id]")).to_have_count(6)


def test_latency_table_sorts_and_draws_a_trend(with_history: tuple[Served, str], page: Page) -> None:
    s, _ = with_history
    page.goto(s.url + "/ui/latency")
    table = page.get_by_test_id("latency-table")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table).to_contain_text("http://127.0.0.1:9/hist")
    expect(page.locator(".chart canvas")).to_have_count(1)
    page.get_by_test_id("sort-p99_ms").click()
    expect(page.get_by_test_id("sort-p99_ms")).to_contain_text("▼")
    page.get_by_test_id("sort-p99_ms").click()
    expect(page.get_by_test_id("sort-p99_ms")).to_contain_text("▲")
    page.get_by_test_id("win-24h").click()
    expect(table.locator("tbody tr")).to_have_count(1)


def test_dashboard_and_cluster_at_phone_size(with_history: tuple[Served, str], browsing: Browsing) -> None:
    s, _ = with_history
    page = browsing.new_page()
    page.goto(s.url + "/ui/cluster")
    expect(page.locator('tr[data-node="n1"]')).to_contain_text("Leader")
    vp = page.viewport_size
    if vp is not None and vp["width"] < 800:
        # the menu is behind the toggle on a phone
        expect(page.get_by_test_id("nav-dashboard")).to_be_hidden()
        page.get_by_role("button", name="Menu").click()
    page.get_by_test_id("nav-dashboard").click()
    expect(page.get_by_test_id("tasks-total")).to_have_text("1")


def test_cluster_page_lists_every_node_leader_first(served: Served, page: Page) -> None:
    """A 3-node answer (given in the browser: the LocalContext is one node) drawn leader first."""
    status = {
        "node_id": "n1",
        "role": "follower",
        "term": 7,
        "leader_id": "n2",
        "leader_url": served.url,
        "commit_index": 1_000,
        "applied_index": 990,
        "nodes": [
            {
                "id": "n1",
                "role": "follower",
                "suffrage": "voter",
                "http_url": "http://h1",
                "match_index": 990,
            },
            {
                "id": "n2",
                "role": "leader",
                "suffrage": "voter",
                "http_url": "http://h2",
                "match_index": 1_000,
            },
            {
                "id": "n3",
                "role": "learner",
                "suffrage": "learner",
                "http_url": "http://h3",
                "match_index": 400,
            },
        ],
    }
    stats = {
        "nodes": [
            {
                "node_id": "n1",
                "role": "follower",
                "term": 7,
                "applied_index": 990,
                "qps": 12.5,
                "rss_bytes": 50 << 20,
            },
            {"node_id": "n2", "role": "leader", "term": 7, "applied_index": 1_000, "fires_total": 4_321},
            {"node_id": "n3", "error": "unreachable"},
        ]
    }

    def answer(body: object) -> Callable[[Route], None]:
        return lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route("**/api/v1/cluster/status", answer(status))
    page.route("**/api/v1/cluster/stats", answer(stats))
    page.goto(served.url + "/ui/cluster")
    rows = page.locator("tr[data-node]")
    expect(rows).to_have_count(3)
    assert rows.evaluate_all("els => els.map(e => e.dataset.node)") == ["n2", "n1", "n3"]
    n1 = page.locator('tr[data-node="n1"]')
    expect(n1).to_contain_text("Follower")
    expect(n1).to_contain_text("12.5")
    expect(n1).to_contain_text("50.0 MiB")
    expect(page.locator('tr[data-node="n2"]')).to_contain_text("4,321")
    # lag = leader commit - match index
    expect(page.locator('tr[data-node="n3"] td').nth(6)).to_have_text("600")
    expect(page.locator('tr[data-node="n3"]')).to_have_class(re.compile("unreachable"))


def test_a_removed_nodes_role_is_named_in_both_languages(tmp_path: Path, page: Page, console: Console) -> None:
    """A node removed from the cluster answers 503 with X-Molens-Role: removed; the pill names the role."""
    console.allow.append(r"status of 503")
    with serve_ui(tmp_path / "r", role="removed", node_id="n4") as node:
        page.goto(node.url + "/ui/tasks")
        expect(page.get_by_test_id("role")).to_have_text("Removed")
        page.get_by_test_id("lang").select_option("zh")
        expect(page.get_by_test_id("role")).to_have_text("已移除")


@pytest.mark.parametrize("leader_url", ["javascript:alert(document.domain)", "data:text/html,<b>x</b>", "ftp://127.0.0.1/"])
def test_a_follower_does_not_move_the_tab_and_its_key_to_a_leader_address_that_is_not_http(
    tmp_path: Path, page: Page, leader_url: str,
) -> None:
    """A leader_url that is no web address (a javascript: or data: URL's origin is "null") is not
    followed: the tab stays, says where the leader is, and its key goes nowhere."""
    with serve_ui(tmp_path / "f", role="follower", leader_url=leader_url, leader_id="n1", node_id="n2") as follower:
        page.goto(follower.url + "/ui/tasks?scene=abc")
        banner = page.get_by_test_id("leader-unreachable")
        expect(banner).to_contain_text("The leader is n1 at " + leader_url)
        for _ in range(2):  # two more heartbeats: still here
            with page.expect_request(lambda r: r.url.endswith("/api/v1/cluster/leader")):
                pass
        assert page.url == follower.url + "/ui/tasks?scene=abc"
        expect(banner).to_be_visible()


def test_a_console_on_https_does_not_move_its_key_to_a_leader_on_plain_http(
    served: Served, tmp_path: Path, browser: Browser,
) -> None:
    """Behind a TLS front, a follower's console is not moved to the leader's plain http address: the
    key in the hand-off would reach a page an on-path attacker can change. It says where the leader
    is instead; the leader's address on https is followed as before."""
    with serve_ui(tmp_path / "f", role="follower", leader_url=served.url, leader_id="n1", node_id="n2") as follower, \
            https_front(follower.url, tmp_path / "tls") as front:
        context = browser.new_context(ignore_https_errors=True, locale="en-GB", timezone_id="UTC")
        try:
            page = context.new_page()
            page.goto(front + "/ui/tasks?scene=abc")
            expect(page.get_by_test_id("leader-unreachable")).to_contain_text(f"The leader is n1 at {served.url}")
            for _ in range(2):  # two more heartbeats: still here
                with page.expect_request(lambda r: r.url.endswith("/api/v1/cluster/leader")):
                    pass
            assert page.url == front + "/ui/tasks?scene=abc"
            with https_front(served.url, tmp_path / "tls-leader") as leader_front:
                follower.ctx.leader_url = leader_front
                page.wait_for_url(leader_front + "/ui/tasks?scene=abc")
                expect(page.get_by_test_id("role")).to_contain_text("Leader")
        finally:
            context.close()
