"""The Dead letters page and the task page's dead letters against a real ``molens-node`` and a real
receiver (docs/api.md#dead-letters): callbacks answered 500 with ``max_retries`` 0 or 404 leave dead
letters; the page lists them newest first, filters by kind and task in the URL, redrives one (the
receiver gets the same ``X-Fire-ID`` again, attempts continuing), redrives and deletes every one
matching a filter after a confirmation that shows it, deletes one, and shows the at_most_once
warning of a redrive."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_until
from tests.integration.conftest import Cluster, NodeProc
from tests.integration.recording_receiver import RecordingReceiver

pytestmark = pytest.mark.browser

_http = urllib3.PoolManager(retries=False, timeout=10)


def _call(n: NodeProc, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    r = _http.request(method, n.http_url + "/api/v1" + path, body=data, headers={"Content-Type": "application/json"},
                      redirect=False)
    return r.status, (json.loads(r.data) if r.data else None)


def _ready(n: NodeProc) -> bool:
    try:
        return _http.request("GET", n.http_url + "/readyz").status == 200
    except urllib3.exceptions.HTTPError:
        return False


@pytest.fixture(scope="module")
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    try:
        yield rec
    finally:
        rec.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    c = Cluster(tmp_path_factory.mktemp("dl-node"), 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_until(lambda: _ready(n), 30, "the node's HTTP API")
        yield n
    finally:
        c.kill_all()


def _failing(n: NodeProc, rec: RecordingReceiver, path: str, **kw: Any) -> dict[str, Any]:
    """A delayed task due in 100 ms whose callback fails for good at once (no retries)."""
    body = {"type": "delayed", "interval_ms": 100, "callback_url": rec.url(path), "max_retries": 0, **kw}
    st, task = _call(n, "POST", "/tasks", body)
    assert st == 201, task
    return task  # type: ignore[no-any-return]


def _dead(n: NodeProc, **q: str) -> list[dict[str, Any]]:
    qs = "&".join(f"{k}={v}" for k, v in q.items())
    st, page = _call(n, "GET", f"/dead-letters?limit=1000&{qs}")
    assert st == 200, page
    return page["items"]  # type: ignore[no-any-return]


def _dead_of(n: NodeProc, tid: str) -> dict[str, Any]:
    return wait_until(lambda: (_dead(n, task_id=tid) or [None])[0], 30, f"the dead letter of {tid}")


def _row(page: Page, dead_id: str) -> Any:
    return page.locator(f'tr[data-dl-id="{dead_id}"]')


def test_the_page_lists_filters_by_kind_and_redrives_one_with_the_same_fire_id(
    node: NodeProc, receiver: RecordingReceiver, page: Page
) -> None:
    a = _failing(node, receiver, "/status/500/p1-a")
    da = _dead_of(node, a["id"])  # before b is made: two fires due together may end in either order
    b = _failing(node, receiver, "/status/404/p1-b")
    db = _dead_of(node, b["id"])
    assert (da["kind"], db["kind"]) == ("retries_exhausted", "non_retryable")
    page.goto(node.http_url + "/ui/")
    page.get_by_test_id("nav-deadLetters").click()
    expect(page).to_have_url(node.http_url + "/ui/dead-letters")
    row = _row(page, da["id"])
    expect(row).to_contain_text("Retries exhausted")
    expect(row.get_by_test_id("dl-fire")).to_have_text(da["fire_id"])
    expect(row.get_by_test_id("dl-attempts")).to_have_text("1")
    expect(row.get_by_test_id("dl-status")).to_have_text("500")
    expect(row).to_contain_text('{"status": 500}')  # the response head
    expect(row).to_contain_text(re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC"))  # the console's time format
    expect(_row(page, db["id"])).to_contain_text("Not retryable")
    ids = page.locator("tr[data-dl-id]").evaluate_all("rs => rs.map((r) => r.dataset.dlId)")
    assert ids.index(db["id"]) < ids.index(da["id"])  # newest first

    # filter by kind: kept in the URL, only that kind listed
    page.get_by_test_id("filter-kind").select_option("non_retryable")
    page.get_by_test_id("filter-apply").click()
    expect(page).to_have_url(re.compile(r"/ui/dead-letters\?kind=non_retryable$"))
    expect(_row(page, db["id"])).to_be_visible()
    expect(_row(page, da["id"])).to_have_count(0)
    kinds = page.locator("tr[data-dl-id]").evaluate_all("rs => rs.map((r) => r.dataset.kind)")
    assert kinds and set(kinds) == {"non_retryable"}
    page.reload()  # the filter lives in the URL
    expect(page.get_by_test_id("filter-kind")).to_have_value("non_retryable")
    expect(_row(page, da["id"])).to_have_count(0)

    # fix the receiver's answer, then redrive one from its row: the same fire id, attempts continuing
    st, _ = _call(node, "PATCH", f"/tasks/{a['id']}", {"callback_url": receiver.url("/ok/p1-a-fixed")})
    assert st == 200
    page.get_by_test_id("filter-kind").select_option("retries_exhausted")
    page.get_by_test_id("filter-apply").click()
    _row(page, da["id"]).get_by_test_id("dl-redrive").click()
    expect(page.get_by_test_id("toast")).to_contain_text(f"Redriven: {da['fire_id']} is delivered again")
    expect(_row(page, da["id"])).to_have_count(0)
    got = wait_until(lambda: receiver.by_tag("p1-a-fixed"), 30, "the redriven callback")[0]
    assert (got.headers["X-Fire-ID"], got.headers["X-Molens-Attempt"]) == (da["fire_id"], "2")
    assert [r.headers["X-Fire-ID"] for r in receiver.by_tag("p1-a")] == [da["fire_id"]]
    wait_until(lambda: _call(node, "GET", f"/tasks/{a['id']}")[1]["status"] == "done", 30, "the redriven task done")
    assert _call(node, "GET", f"/dead-letters/{da['id']}")[0] == 404


def test_redrive_all_matching_confirms_the_filter_and_redelivers_each(
    node: NodeProc, receiver: RecordingReceiver, page: Page
) -> None:
    older = _failing(node, receiver, "/status/500/p2-older")
    d_older = _dead_of(node, str(older["id"]))
    tasks = [_failing(node, receiver, f"/status/500/p2-{i}") for i in range(3)]
    dead = [_dead_of(node, str(x["id"])) for x in tasks]
    for x in tasks:  # fixed: the redrives succeed
        assert _call(node, "PATCH", f"/tasks/{x['id']}", {"callback_url": receiver.url(f"/ok/p2-fixed-{x['id']}")})[0] == 200

    # the confirmation shows the filter; cancelling changes nothing
    page.goto(f"{node.http_url}/ui/dead-letters?task_id={tasks[0]['id']}")
    expect(page.get_by_test_id("filter-task")).to_have_value(str(tasks[0]["id"]))
    expect(page.locator("tr[data-dl-id]")).to_have_count(1)
    page.get_by_test_id("redrive-all").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("Redrive every dead letter matching this filter")
    expect(dialog.get_by_test_id("confirm-filter")).to_contain_text(str(tasks[0]["id"]))
    dialog.get_by_role("button").first.click()
    expect(dialog).to_have_count(0)
    assert len(_dead(node, task_id=str(tasks[0]["id"]))) == 1

    # the three by their time range (the older one is before it): all redriven, same fire ids
    since = min(d["at"] for d in dead)
    assert d_older["at"] < since
    page.goto(f"{node.http_url}/ui/dead-letters?since={since}")
    expect(page.locator("tr[data-dl-id]")).to_have_count(3)
    page.get_by_test_id("redrive-all").click()
    expect(page.get_by_test_id("confirm-filter")).to_contain_text("From")
    expect(page.get_by_test_id("confirm-filter").locator("dd").first).to_have_text("All namespaces")  # the scope, named
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("toast")).to_contain_text("3 of 3 matching dead letters redriven.")
    expect(page.get_by_test_id("dl-empty")).to_be_visible()
    for x, d in zip(tasks, dead, strict=True):
        r = wait_until(lambda x=x: receiver.by_tag(f"p2-fixed-{x['id']}"), 30, "a redriven callback")[0]
        assert r.headers["X-Fire-ID"] == d["fire_id"]
    assert [d["id"] for d in _dead(node, task_id=str(older["id"]))] == [d_older["id"]]  # outside the filter


def test_delete_one_and_delete_all_matching(node: NodeProc, receiver: RecordingReceiver, page: Page) -> None:
    a = _failing(node, receiver, "/status/500/p3-a")
    b = _failing(node, receiver, "/status/404/p3-b")
    c = _failing(node, receiver, "/status/404/p3-c")
    da, db, dc = (_dead_of(node, str(x["id"])) for x in (a, b, c))
    page.goto(node.http_url + "/ui/dead-letters")
    _row(page, da["id"]).get_by_test_id("dl-delete").click()
    expect(page.get_by_test_id("confirm-dialog")).to_contain_text(da["fire_id"])
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("toast")).to_contain_text(f"Dead letter of {da['fire_id']} deleted.")
    expect(_row(page, da["id"])).to_have_count(0)
    assert _call(node, "GET", f"/dead-letters/{da['id']}")[0] == 404

    # every non_retryable one: the confirmation names the kind; other kinds stay
    others = {d["id"] for d in _dead(node) if d["kind"] != "non_retryable"}
    page.get_by_test_id("filter-kind").select_option("non_retryable")
    page.get_by_test_id("filter-apply").click()
    expect(_row(page, db["id"])).to_be_visible()
    expect(_row(page, dc["id"])).to_be_visible()
    page.get_by_test_id("delete-all").click()
    expect(page.get_by_test_id("confirm-filter")).to_contain_text("Not retryable")
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("toast").filter(has_text="matching dead letters deleted")).to_be_visible()
    expect(page.get_by_test_id("dl-empty")).to_be_visible()
    assert _dead(node, kind="non_retryable") == []
    assert {d["id"] for d in _dead(node)} == others


def test_without_a_filter_the_confirmation_names_the_namespace_chosen_not_the_cluster(
    node: NodeProc, receiver: RecordingReceiver, page: Page
) -> None:
    d = _dead_of(node, str(_failing(node, receiver, "/status/500/p5-ns")["id"]))
    page.add_init_script("localStorage.setItem('molens.namespace', 'default')")
    page.goto(node.http_url + "/ui/dead-letters")
    expect(_row(page, d["id"])).to_be_visible()
    for button, words in (("delete-all", "delete every dead letter of namespace default?"),
                          ("redrive-all", "redrive every dead letter of namespace default?")):
        page.get_by_test_id(button).click()
        dialog = page.get_by_test_id("confirm-dialog")
        expect(dialog).to_contain_text(words)
        expect(dialog).not_to_contain_text("of the cluster")
        dialog.get_by_role("button").first.click()  # cancel: nothing changes
        expect(dialog).to_have_count(0)
    assert _call(node, "GET", f"/dead-letters/{d['id']}")[0] == 200


def test_an_at_most_once_redrive_is_confirmed_and_its_warning_shown(
    node: NodeProc, receiver: RecordingReceiver, page: Page
) -> None:
    x = _failing(node, receiver, "/status/500/p4", reliability="at_most_once")
    d = _dead_of(node, str(x["id"]))
    page.goto(f"{node.http_url}/ui/dead-letters?task_id={x['id']}")
    row = _row(page, d["id"])
    expect(row).to_contain_text("At most once")
    row.get_by_test_id("dl-redrive").click()
    expect(page.get_by_test_id("confirm-dialog")).to_contain_text("may already have reached the receiver")
    page.get_by_test_id("confirm-ok").click()
    warn = page.locator(".toast-warn")
    expect(warn).to_contain_text(f"At most once: {d['fire_id']} may already have reached its receiver")
    wait_until(lambda: len(receiver.by_tag("p4")) == 2, 30, "the at_most_once occurrence sent again")
    assert {r.headers["X-Fire-ID"] for r in receiver.by_tag("p4")} == {d["fire_id"]}


def test_the_task_page_shows_its_dead_letters_and_links_to_the_filtered_page(
    node: NodeProc, receiver: RecordingReceiver, page: Page
) -> None:
    x = _failing(node, receiver, "/status/500/p5")
    d = _dead_of(node, str(x["id"]))
    page.goto(f"{node.http_url}/ui/tasks/{x['id']}")
    card = page.get_by_test_id("task-dead-letters")
    expect(card.locator(f'tr[data-dl-id="{d["id"]}"]')).to_contain_text("Retries exhausted")
    expect(page.locator('[data-field="retry"]')).to_contain_text("No retries")
    card.get_by_test_id("task-dead-link").click()
    expect(page).to_have_url(f"{node.http_url}/ui/dead-letters?task_id={x['id']}&ns=default")  # in the task's namespace
    expect(page.locator("tr[data-dl-id]")).to_have_count(1)
