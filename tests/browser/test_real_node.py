"""The console against real ``molens-node`` processes: tasks created in the form fire and show in the
detail page's history, and a follower's console moves to the leader's (3-node cluster).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.conftest import wait_until
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.browser


def _http_url(node: Any) -> str:
    h = node.settings["http"]
    return f"http://{h['host']}:{h['port']}"


def _up(url: str) -> bool:
    try:
        r = urllib3.request("GET", url + "/readyz", retries=False, timeout=2)
    except urllib3.exceptions.HTTPError:
        return False
    return r.status == 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("ui-cluster"), 3, state_machine="tasks")
    try:
        c.start()
        c.leader(timeout=30)
        for n in c.nodes.values():
            wait_until(functools.partial(_up, _http_url(n)), 30, f"{n.node_id} HTTP ready")
        yield c
    finally:
        c.kill_all()


def test_a_followers_console_moves_to_the_leader_of_a_3_node_cluster(cluster: Cluster, page: Page) -> None:
    leader = _http_url(cluster.leader())
    follower = _http_url(cluster.followers()[0])
    page.goto(follower + "/ui/cluster")
    page.wait_for_url(leader + "/ui/cluster", timeout=15_000)
    expect(page.locator("tr[data-node]")).to_have_count(3)
    expect(page.locator("tr[data-node]").first).to_contain_text("Leader")


def test_a_followers_console_moves_to_the_leader_with_a_key_of_one_namespace_too(cluster: Cluster, page: Page) -> None:
    """A writer of one namespace may ask who leads (a follower's 307 tells it as much): its console
    moves to the leader's as an admin's does, with its key, and its writes reach the leader."""
    leader = _http_url(cluster.leader())
    follower = _http_url(cluster.followers()[0])
    r = urllib3.request("POST", f"{leader}/api/v1/keys", json={"name": "ui-writer", "role": "writer",
                                                               "namespaces": ["default"]}, retries=False, timeout=10)
    assert r.status == 201, r.data
    secret = r.json()["secret"]
    page.add_init_script(f"sessionStorage.setItem('molens.token', {secret!r})")
    page.goto(follower + "/ui/tasks")
    page.wait_for_url(leader + "/ui/tasks", timeout=15_000)
    assert page.evaluate("sessionStorage.getItem('molens.token')") == secret


@pytest.mark.parametrize(
    ("kind", "fill"),
    [
        ("delayed", {"f-delay": "1"}),
        ("interval", {"f-interval": "1"}),
        ("cron", {"f-cron": "* * * * * *", "f-tz": "UTC"}),
    ],
)
def test_a_task_created_in_the_form_fires_and_shows_in_its_history(
    cluster: Cluster, page: Page, kind: str, fill: dict[str, str]
) -> None:
    leader = _http_url(cluster.leader())
    page.goto(leader + "/ui/tasks/new")
    page.get_by_test_id(f"kind-{kind}").click()
    for testid, value in fill.items():
        page.get_by_test_id(testid).fill(value)
    if kind == "interval":
        page.get_by_test_id("f-interval-unit").select_option("s")  # every second, not the default minutes
    # the default callback is the node's own test endpoint
    expect(page.get_by_test_id("f-url")).to_have_value(leader + "/api/v1/test/callback")
    page.get_by_test_id("submit").click()
    page.wait_for_url(re.compile(r"/ui/tasks/[0-9A-Z]{26}$"))
    row = page.locator("tr[data-exec-id]").first
    expect(row).to_be_visible(timeout=30_000)
    expect(row).to_contain_text("Success")
    expect(row).to_contain_text("200")
    if kind == "delayed":
        expect(page.get_by_test_id("task-status")).to_have_text("Done", timeout=10_000)
    _delete_shown_task(cluster, page)


def _origin(url: str) -> str:
    return "/".join(url.split("/")[:3])


def _delete_shown_task(cluster: Cluster, page: Page) -> None:
    """Delete the task the detail page shows: the console lands on the task list. When the leadership
    moves meanwhile, the console moves to the new leader's, same path (frontend/src/cluster.js), and
    the click may go with the page it left: a user clicks again there, and so does the test, once
    (unless the task is gone already: the delete took before the move)."""
    task_id = page.url.rstrip("/").rsplit("/", 1)[1]
    before = _origin(page.url)
    try:
        page.get_by_test_id("act-delete").click(timeout=10_000)
        page.get_by_test_id("confirm-ok").click(timeout=10_000)
        page.wait_for_url(re.compile(r"/ui/tasks$"), timeout=15_000)
        return
    except PlaywrightTimeoutError:
        if _origin(page.url) == before:
            raise  # no move: the console failed on its own
    leader = _http_url(cluster.leader())
    r = urllib3.request("GET", f"{leader}/api/v1/tasks/{task_id}", retries=False, timeout=5)
    if r.status == 404:
        return
    page.get_by_test_id("act-delete").click()
    page.get_by_test_id("confirm-ok").click()
    page.wait_for_url(re.compile(r"/ui/tasks$"))
