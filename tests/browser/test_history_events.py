"""History events (rows that are not HTTP attempts: skipped occurrences, updates, backfills) read as
words and times in the Executions list and a task's history, in English and Chinese, and the Result
filter offers them."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import FireKind, Outcome
from tests.browser.conftest import Served, serve_ui

pytestmark = pytest.mark.browser

EPOCH_MS = re.compile(r"\b\d{11,14}\b")


def finish_late(served: Served, task_id: str, late_ms: int) -> None:
    """The task's due occurrence answered 200 `late_ms` after it came due (through the node's
    Dispatched + Results commands): the instants that came due meanwhile are skipped (catchup one)."""
    task = served.ctx.get_task(task_id)
    assert task is not None and task.due_ms is not None
    now = task.due_ms
    item = DispatchItem(fire_id=task.fire_id, task_id=task_id, attempt=1, worker="n1", deadline_ms=now + late_ms + 10_000)
    served.ctx.propose([Dispatched(now, (item,))], 5)
    res = ResultItem(fire_id=task.fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
                     response_head="ok", latency_ms=late_ms, worker="n1", attempt=1)
    served.ctx.propose([Results(now + late_ms, (res,))], 5)


@pytest.fixture(scope="module")
def skipped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    with serve_ui(tmp_path_factory.mktemp("events")) as s:
        st, task = s.api("POST", "/tasks", {"type": "periodic", "interval_ms": 60_000,
                                            "callback_url": "http://127.0.0.1:9/ev", "scene": "ev"})
        assert st == 201, task
        finish_late(s, task["id"], 5 * 60_000)
        st, rows = s.api("GET", f"/executions?task_id={task['id']}")
        assert st == 200 and any(r["result"] == "skipped" for r in rows["items"]), rows
        yield s, task["id"]


def _event_row(page: Page) -> None:
    row = page.locator("tr[data-exec-id]").filter(has=page.locator(".b-skipped"))
    expect(row).to_have_count(1)
    text = row.get_by_test_id("event-text")
    expect(text).to_contain_text(re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \u2013 \d{4}-\d{2}-\d{2} "))
    assert not EPOCH_MS.search(text.inner_text()), text.inner_text()
    assert "result.skipped" not in page.locator("main").inner_text()


def test_a_skipped_occurrence_reads_as_words_and_times(skipped: tuple[Served, str], page: Page) -> None:
    s, task_id = skipped
    page.goto(s.url + "/ui/executions")
    _event_row(page)
    expect(page.locator(".b-skipped")).to_have_text("Skipped")
    page.goto(f"{s.url}/ui/tasks/{task_id}")
    _event_row(page)
    page.get_by_test_id("lang").select_option("zh")
    expect(page.locator(".b-skipped")).to_have_text("已跳过")
    assert "result.skipped" not in page.locator("main").inner_text()


def test_the_result_filter_offers_history_events(skipped: tuple[Served, str], page: Page) -> None:
    s, _ = skipped
    page.goto(s.url + "/ui/executions")
    expect(page.locator("tr[data-exec-id]")).to_have_count(2)  # the late 200 and the skipped event
    page.get_by_test_id("filter-result").select_option("skipped")
    page.get_by_test_id("exec-filters").locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r"result=skipped"))
    expect(page.locator("tr[data-exec-id]")).to_have_count(1)
    expect(page.locator("tr[data-exec-id] .b-skipped")).to_have_count(1)
    for value in ("updated", "backfill"):
        expect(page.get_by_test_id("filter-result").locator(f"option[value={value}]")).to_have_count(1)


def test_server_texts_answer_in_the_requests_language(skipped: tuple[Served, str]) -> None:
    s, task_id = skipped
    zh = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}
    r = s.http.request("GET", f"{s.url}/api/v1/executions?task_id={task_id}&result=skipped", headers=zh)
    assert r.status == 200 and r.headers["Content-Language"] == "zh"
    row = r.json()["items"][0]
    assert row["result"] == "skipped" and row["execution_result"].startswith("\u8df3\u8fc7")  # 跳过
    r = s.http.request("GET", f"{s.url}/api/v1/executions?task_id={task_id}&result=skipped")
    assert "Content-Language" not in r.headers and r.json()["items"][0]["execution_result"].startswith("skipped")
    # an error: the code and field stay, the message is translated
    r = s.http.request("POST", f"{s.url}/api/v1/tasks", json={"type": "delayed", "interval_ms": 1000}, headers=zh)
    err = r.json()["error"]
    assert r.status == 400 and (err["code"], err["field"]) == ("invalid_argument", "callback_url")
    assert err["message"] == "\u7f3a\u5c11 callback_url"  # 缺少
    # a cron expression that never fires: the code, field and reason stay, so a client can tell it apart
    for path in ("/api/v1/schedule/preview?cron_expr=0+0+30+2+*", "/api/v1/tasks"):
        if path.endswith("tasks"):
            r = s.http.request("POST", s.url + path, headers=zh, json={
                "type": "periodic", "cron_expr": "0 0 30 2 *", "callback_url": "http://127.0.0.1:9/ev"})
        else:
            r = s.http.request("GET", s.url + path, headers=zh)
        err = r.json()["error"]
        assert r.status == 400 and (err["code"], err["field"], err["reason"]) == ("invalid_argument", "cron_expr", "never_fires")
        assert "\u6c38\u4e0d\u89e6\u53d1" in err["message"] and "never" not in err["message"]  # 永不触发
    r = s.http.request("GET", s.url + "/api/v1/schedule/preview?cron_expr=61+*+*+*+*", headers=zh)
    assert r.status == 400 and "reason" not in r.json()["error"]  # malformed: no reason


def test_a_zh_page_shows_the_servers_texts_in_chinese(skipped: tuple[Served, str], page: Page) -> None:
    s, task_id = skipped
    page.goto(f"{s.url}/ui/tasks/{task_id}")
    page.evaluate("localStorage.setItem('molens.lang', 'zh')")
    page.reload()
    text = page.locator("tr[data-exec-id]").filter(has=page.locator(".b-skipped")).get_by_test_id("event-text")
    expect(text).to_contain_text("\u8df3\u8fc7")
    assert not EPOCH_MS.search(text.inner_text()), text.inner_text()
    assert not re.search(r"skipped|catchup_window|occurrence", text.inner_text().replace("catchup one", ""))
