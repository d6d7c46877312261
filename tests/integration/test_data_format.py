"""A node reads the data directory of an earlier version (data format 1), and refuses a newer one.

The fixture (tests/fixtures/format1/, see its README) was written by a real node of the previous
version: its task store holds format-1 records and its Raft log format-1 commands. The node of
this version migrates the store when it opens it (one transaction) and decodes the old log entries;
a store marked with a format it does not know is refused with a message naming that format.
"""

from __future__ import annotations

import json
import shutil
import struct
import tarfile
from pathlib import Path
from typing import Any

import lmdb
import pytest
import urllib3

from .conftest import Cluster, NodeProc, wait_for

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "format1"
_http = urllib3.PoolManager(retries=False, timeout=10)


def _call(node: NodeProc, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    port = node.settings["http"]["port"]
    data = None if body is None else json.dumps(body).encode()
    r = _http.request(method, f"http://127.0.0.1:{port}{path}", body=data,
                      headers={"Content-Type": "application/json"})
    return r.status, json.loads(r.data) if r.data else None


_SPEC_KEYS = {
    "id", "type", "interval_ms", "run_at", "cron_expr", "timezone", "callback_url", "ack_url", "ack_delay_ms",
    "payload", "scene", "timeout_ms", "max_retries", "max_fails", "reliability", "idempotency_key", "created_at",
}


def _expected(name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads((FIXTURE / name).read_text())["items"]
    return items


_KEEP_FINISHED_MINUTES = 100 * 365 * 24 * 60
"""The fixture's finished task (made 2026-12-01) outlives the default day of ``task_retention_minutes``
here: the Cleaner expiring it is not what these tests are about, and with the default they started
failing a day after the fixture was made."""


def _node_on_fixture(tmp_path: Path, *, drop_fsm: bool = False) -> tuple[Cluster, NodeProc]:
    c = Cluster(tmp_path, 1, {"scheduler": {"task_retention_minutes": _KEEP_FINISHED_MINUTES}}, state_machine="tasks")
    node = c.nodes["n1"]
    with tarfile.open(FIXTURE / "datadir.tar.gz") as tar:
        tar.extractall(node.dir, filter="data")
    if drop_fsm:  # rebuilt from the Raft log alone: every entry is a format-1 command
        shutil.rmtree(node.data_dir / "fsm")
        (node.data_dir / "history.sqlite").unlink()
    return c, node


_RENAMED = {"last_execution_result": "last_outcome", "last_response": "last_execution_result",
            "response_head": "execution_result"}
"""The fixture's field names (a10f301's API) -> this version's (the seed's names, docs/api.md)."""


def _ready(node: NodeProc) -> None:
    def up() -> bool | None:
        try:
            return _call(node, "GET", "/readyz")[0] == 200 or None
        except urllib3.exceptions.HTTPError:
            assert node.running, node.tail()
            return None

    wait_for(up, 30, "the node to be ready")


def _check_state_and_use(node: NodeProc) -> None:
    status, page = _call(node, "GET", "/api/v1/tasks?limit=100")
    assert status == 200
    expected = _expected("tasks.json")
    # what the old node answered, field for field (the periodic tasks' state only where it cannot
    # have moved on since the fixture was made: their occurrences come due as the clock runs);
    # fields added since have their defaults
    assert [t["id"] for t in page["items"]] == [t["id"] for t in expected]
    for got, old in zip(page["items"], expected, strict=True):
        old = {_RENAMED.get(k, k): v for k, v in old.items()}  # the API's names of this version
        keys = [k for k in old if old["type"] == "delayed" or k in _SPEC_KEYS]
        assert {k: got[k] for k in keys} == {k: old[k] for k in keys}, (got, old)
    added = {"jitter_ms": 0, "start_at": None, "end_at": None, "max_runs": None, "catchup": "one",
             "catchup_window_ms": 3_600_000, "version": 1}
    assert all({k: t[k] for k in added} == added for t in page["items"])
    old_execs = _expected("executions.json")
    status, execs = _call(node, "GET", f"/api/v1/tasks/{old_execs[0]['task_id']}/executions?limit=100")
    assert status == 200  # that task is done: its history cannot grow (the periodic ones' can)
    got = [{k: v for k, v in e.items() if k != "id"} for e in execs["items"]]
    assert got == [{_RENAMED.get(k, k): v for k, v in e.items() if k != "id"} for e in old_execs]
    by_key = {t["idempotency_key"]: t for t in page["items"]}
    assert by_key["k-1"]["payload"] == {"order": 1, "big": 123456789012345678901234567890, "s": "é"}
    # the idempotency index came along: the same key answers the old task
    status, again = _call(node, "POST", "/api/v1/tasks", {
        "type": "delayed", "interval_ms": 5, "callback_url": by_key["k-1"]["callback_url"], "idempotency_key": "k-1"})
    assert status == 200 and again["id"] == by_key["k-1"]["id"]
    # the status and scene indexes of format 3 were built from the old records (periodic tasks
    # move between pending and firing as they run: those statuses are asked together)
    for sts in ({"paused"}, {"done"}, {"failed"}, {"inactive"}, {"pending", "firing", "awaiting_ack"}):
        status, by_status = _call(node, "GET", f"/api/v1/tasks?status={','.join(sorted(sts))}&limit=100")
        assert status == 200
        assert [t["id"] for t in by_status["items"]] == [t["id"] for t in page["items"] if t["status"] in sts]
    scene = page["items"][0]["scene"]
    status, by_scene = _call(node, "GET", f"/api/v1/tasks?scene={scene}&order=-created&limit=100")
    assert [t["id"] for t in by_scene["items"]] == [t["id"] for t in page["items"][::-1] if t["scene"] == scene]
    # old tasks keep working: resume the paused one
    paused = next(t for t in page["items"] if t["status"] == "paused")
    status, resumed = _call(node, "POST", f"/api/v1/tasks/{paused['id']}/resume")
    assert status == 200 and resumed["status"] == "pending" and resumed["next_run_at"] is not None
    # and new tasks fire
    cb = by_key["k-1"]["callback_url"].replace("127.0.0.1:28081", f"127.0.0.1:{node.settings['http']['port']}")
    status, new = _call(node, "POST", "/api/v1/tasks", {"type": "delayed", "interval_ms": 0, "callback_url": cb})
    assert status == 201
    wait_for(lambda: _call(node, "GET", f"/api/v1/tasks/{new['id']}")[1]["status"] == "done" or None, 20,
             "the new task to fire")


def test_node_migrates_a_task_store_of_format_1_and_keeps_working(tmp_path: Path) -> None:
    c, node = _node_on_fixture(tmp_path)
    try:
        node.start()
        _ready(node)
        _check_state_and_use(node)
        log = node.log_path.read_text()
        assert "task store migrated from data format 1 to 3" in log and "tasks=5" in log
    finally:
        c.kill_all()


def test_node_replays_a_raft_log_of_format_1(tmp_path: Path) -> None:
    c, node = _node_on_fixture(tmp_path, drop_fsm=True)
    try:
        node.start()
        _ready(node)
        _check_state_and_use(node)
    finally:
        c.kill_all()


def test_node_refuses_a_task_store_of_an_unknown_format(tmp_path: Path) -> None:
    c, node = _node_on_fixture(tmp_path)
    env = lmdb.open(str(node.data_dir / "fsm"), max_dbs=6)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", struct.pack(">Q", 9), db=meta)
    env.close()
    try:
        node.start()
        assert node.proc is not None
        rc = node.proc.wait(timeout=30)
        out = node.tail(80)
        assert rc == 1 and "Traceback" not in out, out  # one line for the operator, as every start error
        last = out.strip().splitlines()[-1]
        assert last.startswith("error: n1: ") and "task store of data format 9" in last and "reads formats 1 to 3" in last, out
    finally:
        c.kill_all()


@pytest.fixture(autouse=True)
def _fixture_present() -> None:
    assert (FIXTURE / "datadir.tar.gz").is_file()
