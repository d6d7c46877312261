"""Export from the console: the Export menu of the task list, executions, dead letters and a task's
history downloads every row matching the applied filters as CSV or JSON lines, through the browser's
own download of the API's streamed answer (the rows never pass through the page), with a one-time
link when the node wants a key (docs/api.md#exports)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Request, expect

from tests.browser.conftest import Served, fail_for_good, serve_ui

pytestmark = pytest.mark.browser

TOKEN = "export-console-token"
N = 10_000


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, list[str]]]:
    """A node that wants a key, with 10,000 tasks of scene ``bulk`` and 3 of scene ``few``, one of
    them failed for good (an execution and a dead letter)."""
    with serve_ui(tmp_path_factory.mktemp("export"), token=TOKEN) as s:
        for b in range(N // 1000):
            bodies = [{"type": "delayed", "interval_ms": 3_600_000, "callback_url": f"http://127.0.0.1:9/{b}/{i}",
                       "scene": "bulk"} for i in range(1000)]
            st, _ = s.api("POST", "/tasks/batch", {"tasks": bodies}, token=TOKEN)
            assert st == 201
        few = []
        for i in range(3):
            st, t = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 1000 * (i + 1), "max_retries": 0,
                                             "callback_url": "http://127.0.0.1:9/few", "scene": "few"}, token=TOKEN)
            assert st == 201
            few.append(t["id"])
        fail_for_good(s, few[0])
        yield s, few


def signed_in(page: Page, s: Served, path: str) -> None:
    page.add_init_script(f"sessionStorage.setItem('molens.token', {json.dumps(TOKEN)})")
    page.goto(s.url + path)


def export(page: Page, fmt: str, tmp: Path) -> tuple[str, bytes]:
    """Choose ``fmt`` in the Export menu; the suggested file name and the downloaded bytes."""
    with page.expect_download(timeout=60_000) as dl:
        page.get_by_test_id("export").select_option(fmt)
    d = dl.value
    target = tmp / d.suggested_filename
    d.save_as(target)
    return d.suggested_filename, target.read_bytes()


def watch_fetches(page: Page) -> list[str]:
    """The URLs of the page's own fetch/XHR requests (a download is the browser's, not one of these)."""
    seen: list[str] = []

    def on_request(r: Request) -> None:
        if r.resource_type in ("fetch", "xhr"):
            seen.append(r.url)

    page.on("request", on_request)
    return seen


def test_the_task_list_exports_all_10000_filtered_rows_by_download(
    keyed: tuple[Served, list[str]], page: Page, tmp_path: Path
) -> None:
    s, _ = keyed
    fetches = watch_fetches(page)
    signed_in(page, s, "/ui/tasks?scene=bulk")
    expect(page.locator("tr[data-task-id]").first).to_be_visible()
    name, raw = export(page, "csv", tmp_path)
    assert name.startswith("molens-tasks-") and name.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(raw.decode())))
    assert len(rows) == N and {r["scene"] for r in rows} == {"bulk"}
    assert len({r["id"] for r in rows}) == N
    # the page asked for a one-time link and never fetched the rows itself
    assert any(u.endswith("/api/v1/exports") for u in fetches)
    assert not any("format=" in u for u in fetches), fetches
    # the link was used up by the download
    link = s.api("POST", "/exports", {"url": "/api/v1/tasks?format=csv&scene=bulk"}, token=TOKEN)[1]["url"]
    assert s.http.request("GET", s.url + link).status == 200
    assert s.http.request("GET", s.url + link).status == 401


def test_executions_dead_letters_and_a_tasks_history_export_as_json_lines(
    keyed: tuple[Served, list[str]], page: Page, tmp_path: Path
) -> None:
    s, few = keyed
    for path, prefix, want_task in ((f"/ui/executions?task_id={few[0]}", "molens-executions-", few[0]),
                                    ("/ui/dead-letters", "molens-dead-letters-", few[0]),
                                    (f"/ui/tasks/{few[0]}", f"molens-task-{few[0]}-history-", few[0])):
        signed_in(page, s, path)
        expect(page.get_by_test_id("export")).to_be_enabled()
        name, raw = export(page, "jsonl", tmp_path)
        assert name.startswith(prefix) and name.endswith(".jsonl"), name
        items = [json.loads(line) for line in raw.splitlines()]
        assert items and {x["task_id"] for x in items} == {want_task}, path


def test_an_open_node_downloads_without_asking_for_a_link(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "open") as s:
        for i in range(3):
            s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000,
                                     "callback_url": "http://127.0.0.1:9/x", "scene": f"s{i}"})
        fetches = watch_fetches(page)
        page.goto(s.url + "/ui/tasks?scene=s1")
        expect(page.locator("tr[data-task-id]")).to_have_count(1)
        _, raw = export(page, "csv", tmp_path)
        rows = list(csv.DictReader(io.StringIO(raw.decode())))
        assert [r["scene"] for r in rows] == ["s1"]
        assert not any(u.endswith("/api/v1/exports") for u in fetches)


def test_the_chosen_namespace_narrows_the_export_and_the_audit_page_exports(tmp_path: Path, page: Page) -> None:
    with serve_ui(tmp_path / "ns", token=TOKEN) as s:
        for ns in ("pay", "ops"):
            assert s.api("POST", "/namespaces", {"name": ns}, token=TOKEN)[0] == 201
            for _ in range(2):
                st, _ = s.api("POST", "/tasks", {"type": "delayed", "interval_ms": 3_600_000, "namespace": ns,
                                                 "callback_url": "http://127.0.0.1:9/ns"}, token=TOKEN)
                assert st == 201
        page.add_init_script("localStorage.setItem('molens.namespace', 'pay')")
        signed_in(page, s, "/ui/tasks")
        expect(page.locator("tr[data-task-id]")).to_have_count(2)
        _, raw = export(page, "csv", tmp_path)
        assert [r["namespace"] for r in csv.DictReader(io.StringIO(raw.decode()))] == ["pay", "pay"]
        page.goto(s.url + "/ui/audit")
        expect(page.get_by_test_id("export")).to_be_enabled()
        name, raw = export(page, "jsonl", tmp_path)
        entries = [json.loads(line) for line in raw.splitlines()]
        assert name.startswith("molens-audit-")
        assert entries and {e["namespace"] for e in entries} == {"pay"}
        assert {e["action"] for e in entries} == {"task.create"}
