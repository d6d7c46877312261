"""The ``molens`` command (docs/cli.md) as an operator runs it: a subprocess against a real 3-node
cluster, every command in table and JSON modes with its exit code, bulk operations by filter with
their count, dry run and confirmation (on a real pseudo-terminal), a create whose answer is lost
(retried safely with the key it printed), and kill -9 of the leader while a ``watch`` runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Cluster, NodeProc, wait_for
from .raw_server import RawServer
from .recording_receiver import RecordingReceiver
from .rest import wait_serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ID_LEN = 26


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("ops-cli"), 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        wait_serving(c.leader(timeout=30), 30)
        yield c
    finally:
        c.kill_all()


@pytest.fixture(scope="module")
def rec() -> Iterator[RecordingReceiver]:
    r = RecordingReceiver()
    yield r
    r.close()


def urls(c: Cluster, first: NodeProc | None = None) -> str:
    nodes = sorted(c.nodes.values(), key=lambda n: n is not first)
    return ",".join(n.http_url for n in nodes)


def molens(c: Cluster | str, *args: str, stdin: Any = subprocess.DEVNULL, timeout: float = 60,
           first: NodeProc | None = None) -> subprocess.CompletedProcess[str]:
    """``molens ARGS`` with ``MOLENS_URL`` naming every node (``first`` first), no terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
    env["MOLENS_URL"] = c if isinstance(c, str) else urls(c, first)
    return subprocess.run([sys.executable, "-m", "molens.ops_cli", *args], stdin=stdin, capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=ROOT)


def ok(c: Cluster | str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    r = molens(c, *args, **kw)
    assert r.returncode == 0, f"molens {' '.join(args)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def js(c: Cluster | str, *args: str, **kw: Any) -> Any:
    return json.loads(ok(c, *args, "--json", **kw).stdout)


def fails(c: Cluster | str, code: int, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    r = molens(c, *args, **kw)
    assert r.returncode == code, f"molens {' '.join(args)}: want {code}, got {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def rows(table: str) -> list[list[str]]:
    """A printed table's data rows, split on runs of two spaces and more."""
    import re

    lines = [ln for ln in table.splitlines() if ln.strip()]
    return [re.split(r"\s{2,}", ln.strip()) for ln in lines[1:]]


def test_task_commands_in_table_and_json_modes(cluster: Cluster, rec: RecordingReceiver) -> None:
    cb = rec.url("/ok/cli-tasks")
    r = ok(cluster, "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback", cb, "--scene",
           "cli-tasks", "--payload", '{"order": 42}')
    [row] = rows(r.stdout)
    tid = row[0]
    assert len(tid) == ID_LEN and row[1:3] == ["delayed", "pending"] and "after 1h" in row
    key = r.stderr.split("idempotency key: ")[1].split()[0]
    assert len(key) == 32  # made up by the client, printed for a retry

    again = js(cluster, "tasks", "create", "--idempotency-key", key, "--type", "delayed", "--interval", "1h",
               "--callback", cb, "--scene", "cli-tasks")
    assert again["id"] == tid and again["payload"] == {"order": 42}  # the same key finds the first task
    # on the grid now-9.5h, ..., now-0.5h, now+0.5h: its next regular occurrence is half an hour away
    periodic = js(cluster, "tasks", "create", "--type", "periodic", "--interval", "1h", "--callback",
                  rec.url("/ok/cli-backfill"), "--scene", "cli-tasks", "--catchup", "none",
                  "--start-at", str(int(time.time() * 1000) - 9 * 3_600_000 - 1_800_000))
    assert periodic["type"] == "periodic" and periodic["interval_ms"] == 3_600_000

    listed = js(cluster, "tasks", "list", "--scene", "cli-tasks")
    assert [t["id"] for t in listed] == [tid, periodic["id"]]
    lines = ok(cluster, "tasks", "list", "--scene", "cli-tasks", "--jsonl", "--order", "newest").stdout.splitlines()
    assert [json.loads(ln)["id"] for ln in lines] == [periodic["id"], tid]
    assert [rw[0] for rw in rows(ok(cluster, "tasks", "list", "--scene", "cli-tasks", "--status", "pending").stdout)] \
        == [tid, periodic["id"]]
    r = ok(cluster, "tasks", "list", "--scene", "cli-tasks", "--limit", "1")
    assert len(rows(r.stdout)) == 1 and "more match" in r.stderr

    got = ok(cluster, "tasks", "get", tid).stdout
    assert f"id                     {tid}" in got and "payload" in got and '{"order":42}' in got
    assert js(cluster, "tasks", "get", tid, "--linearizable")["scene"] == "cli-tasks"

    patched = js(cluster, "tasks", "patch", tid, "--interval", "2h", "--set", 'retry={"max_retries": 5}',
                 "--unset", "payload", "--if-version", "1")
    assert (patched["interval_ms"], patched["retry"]["max_retries"], patched["payload"], patched["version"]) == (
        7_200_000, 5, None, 2)
    r = fails(cluster, 1, "tasks", "patch", tid, "--interval", "3h", "--if-version", "1", "--json")
    assert json.loads(r.stderr)["error"]["code"] == "precondition_failed"
    assert "interval_ms" in ok(cluster, "tasks", "patch", tid, "--scene", "cli-tasks2").stdout

    [row] = rows(ok(cluster, "tasks", "pause", tid).stdout)
    assert row[:3] == [tid, "delayed", "paused"]
    r = fails(cluster, 1, "tasks", "pause", tid)  # already paused: the API's code is printed
    assert "409 illegal_transition" in r.stderr
    assert js(cluster, "tasks", "resume", tid)["status"] == "pending"
    assert js(cluster, "tasks", "pause", periodic["id"])["status"] == "paused"
    assert js(cluster, "tasks", "resume", periodic["id"], "--from", "schedule")["status"] == "pending"
    back = js(cluster, "tasks", "backfill", periodic["id"], "--start", "now-5h", "--end", "now-2h")
    assert back["occurrences"] == 3 and back["task"]["id"] == periodic["id"]
    wait_for(lambda: len(js(cluster, "executions", "--task", periodic["id"], "--result", "success")) >= 3, 30,
             "the backfill's three occurrences recorded (one backfill at a time)")
    r = ok(cluster, "tasks", "backfill", periodic["id"], "--start", "now-9h", "--end", "now-8h")
    assert "occurrences  1" in r.stdout and periodic["id"] in r.stdout

    [row] = rows(ok(cluster, "tasks", "trigger", tid).stdout)  # --json: the bulk test's trigger
    assert row[0] == tid
    wait_for(lambda: rec.by_tag("cli-tasks"), 30, "the triggered occurrence at the receiver")
    [row] = rows(ok(cluster, "tasks", "delete", tid).stdout)
    assert row[0] == tid
    assert js(cluster, "tasks", "delete", periodic["id"])["id"] == periodic["id"]

    r = fails(cluster, 1, "tasks", "get", tid)
    assert f"404 not_found: task {tid} not found (field task_id)" in r.stderr
    err = json.loads(fails(cluster, 1, "tasks", "get", tid, "--json").stderr)["error"]
    assert (err["code"], err["status"], err["field"]) == ("not_found", 404, "task_id")
    r = fails(cluster, 1, "tasks", "create", "--type", "delayed", "--callback", cb)  # the API names the field
    assert "400 invalid_argument" in r.stderr

    # usage: exit 2, nothing sent
    fails(cluster, 2, "tasks", "create", "--run-at", "yesterday")
    fails(cluster, 2, "tasks", "pause")
    fails(cluster, 2, "tasks", "pause", tid, "--scene", "x")
    fails(cluster, 2, "tasks", "patch", tid)
    fails(cluster, 2, "tasks", "list", "--status", "sleeping")
    fails(cluster, 2, "tasks", "frobnicate")
    fails("not-a-url", 2, "tasks", "list")


def _pty_answer(cluster: Cluster, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``molens ARGS`` with a pseudo-terminal as stdin on which ``answer`` has been typed."""
    master, slave = os.openpty()
    try:
        os.write(master, answer.encode() + b"\n")
        return molens(cluster, *args, stdin=slave)
    finally:
        os.close(slave)
        os.close(master)


def test_bulk_actions_by_filter_count_confirm_and_dry_run(cluster: Cluster, rec: RecordingReceiver) -> None:
    cb = rec.url("/ok/cli-bulk")
    made = [js(cluster, "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback", cb,
               "--scene", "cli-bulk")["id"] for _ in range(3)]
    other = js(cluster, "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback", cb,
               "--scene", "cli-bulk-other")["id"]

    def statuses() -> dict[str, str]:
        return {t["id"]: t["status"] for t in js(cluster, "tasks", "list", "--scene", "cli-bulk")}

    r = ok(cluster, "tasks", "pause", "--scene", "cli-bulk", "--status", "pending", "--dry-run")
    assert [rw[0] for rw in rows(r.stdout)] == made and "3 tasks" in r.stderr and "dry run" in r.stderr
    assert [t["id"] for t in js(cluster, "tasks", "pause", "--scene", "cli-bulk", "--dry-run")] == made
    r = fails(cluster, 2, "tasks", "pause", "--scene", "cli-bulk", "--status", "pending")  # no terminal, no --yes
    assert "about to pause 3 tasks" in r.stderr and "--yes" in r.stderr
    r = _pty_answer(cluster, "n", "tasks", "pause", "--scene", "cli-bulk", "--status", "pending")
    assert r.returncode == 1 and "Pause 3 tasks" in r.stderr and "declined" in r.stderr
    assert set(statuses().values()) == {"pending"}

    r = _pty_answer(cluster, "y", "tasks", "pause", "--scene", "cli-bulk", "--status", "pending")
    assert r.returncode == 0, r.stderr
    assert sorted(rw[0] for rw in rows(r.stdout)) == sorted(made) and "3 of 3 tasks" in r.stderr
    assert set(statuses().values()) == {"paused"}
    assert js(cluster, "tasks", "get", other)["status"] == "pending"  # another scene: untouched

    out = js(cluster, "tasks", "resume", "--scene", "cli-bulk", "--yes")  # default filter: paused, inactive
    assert (out["matched"], out["resumed"], out["error_count"], sorted(out["ids"])) == (3, 3, 0, sorted(made))
    out = js(cluster, "tasks", "resume", "--scene", "cli-bulk", "--yes")
    assert (out["matched"], out["resumed"]) == (0, 0)

    # explicit ids: no confirmation; a failing one makes the exit 1 and is listed
    r = fails(cluster, 1, "tasks", "pause", made[0], made[1], "01M8MABE0SEAD6S92SY1NA2EWB", "--json")
    out = json.loads(r.stdout)
    assert (out["paused"], out["error_count"], out["errors"][0]["code"]) == (2, 1, "not_found")
    assert [rw[0] for rw in rows(ok(cluster, "tasks", "resume", made[0], made[1], "--dry-run").stdout)] == made[:2]
    ok(cluster, "tasks", "resume", made[0], made[1])
    assert js(cluster, "tasks", "trigger", "--scene", "cli-bulk", "--yes")["triggered"] == 3
    wait_for(lambda: len(rec.by_tag("cli-bulk")) >= 3, 30, "the three triggered callbacks")

    r = ok(cluster, "tasks", "delete", "--scene", "cli-bulk", "--yes")
    assert "3 of 3 tasks" in r.stderr and sorted(rw[0] for rw in rows(r.stdout)) == sorted(made)
    assert js(cluster, "tasks", "list", "--scene", "cli-bulk") == []
    ok(cluster, "tasks", "delete", other)


def test_executions_watch_and_dead_letters(cluster: Cluster, rec: RecordingReceiver) -> None:
    t = js(cluster, "tasks", "create", "--type", "periodic", "--interval", "1s", "--callback",
           rec.url("/ok/cli-watch"))
    lines = ok(cluster, "watch", t["id"], "--count", "2", "--jsonl", "--interval", "0.2").stdout.splitlines()
    seen = [json.loads(ln) for ln in lines]
    assert len(seen) == 2 and all(e["task_id"] == t["id"] and e["result"] == "success" for e in seen)
    assert seen[0]["seq"] < seen[1]["seq"]  # oldest first, each once
    r = ok(cluster, "watch", t["id"], "--count", "1", "--last", "2", "--interval", "0.2")
    got = rows(r.stdout)
    assert len(got) == 3 and all(rw[1] == t["id"] for rw in got) and int(got[0][2]) < int(got[2][2])
    r = ok(cluster, "watch", t["id"], "--count", "1", "--last", "500", "--interval", "0.2", "--timeout", "20")
    got = rows(r.stdout)  # fewer than 500 exist: every one, then one new
    assert len(got) >= 4 and [int(rw[2]) for rw in got] == sorted(int(rw[2]) for rw in got)
    arr = js(cluster, "watch", t["id"], "--count", "1", "--interval", "0.2")
    assert len(arr) == 1 and arr[0]["seq"] > seen[1]["seq"]
    r = fails(cluster, 1, "watch", t["id"], "--count", "1000", "--timeout", "0.5", "--interval", "0.2")
    assert r.stdout.startswith("FINISHED")
    fails(cluster, 1, "watch", "01M8MABE0SEAD6S92SY1NA2EWB", "--count", "1")

    ex = js(cluster, "executions", "--task", t["id"], "--result", "success", "--since", "now-1h", "--limit", "2")
    assert len(ex) == 2 and ex[0]["finished_at"] >= ex[1]["finished_at"]
    assert t["id"] in ok(cluster, "executions", "--limit", "5").stdout
    ok(cluster, "tasks", "delete", t["id"])

    dead_tasks = [js(cluster, "tasks", "create", "--type", "delayed", "--interval", "100", "--callback",
                     rec.url(f"/status/404/cli-dl{i}"), "--scene", "cli-dl")["id"] for i in range(3)]
    flow = f"127.0.0.1:{rec.port}"

    def dead() -> list[dict[str, Any]] | None:
        got = js(cluster, "dead-letters", "list", "--flow", flow, "--kind", "non_retryable")
        return got if len(got) == 3 else None

    letters = wait_for(dead, 30, "a dead letter per task (404 is not retried)")
    assert {d["task_id"] for d in letters} == set(dead_tasks)
    table = rows(ok(cluster, "dead-letters", "list", "--task", dead_tasks[0]).stdout)
    assert [rw[:2] for rw in table] == [[f"{dead_tasks[0]}-1.1", "non_retryable"]]
    one = letters[0]
    assert js(cluster, "dead-letters", "get", one["id"]) == one
    assert f"kind           {one['kind']}" in ok(cluster, "dead-letters", "get", one["id"]).stdout

    assert js(cluster, "dead-letters", "redrive", one["id"])["id"] == one["id"]  # fails again: a new dead letter
    wait_for(lambda: js(cluster, "dead-letters", "list", "--task", one["task_id"]), 30, "the redriven one dead again")
    r = ok(cluster, "dead-letters", "redrive", "--flow", flow, "--dry-run")
    assert len(rows(r.stdout)) == 3 and "would be redriven" in r.stderr
    fails(cluster, 2, "dead-letters", "redrive", "--flow", flow)  # no terminal, no --yes
    out = js(cluster, "dead-letters", "redrive", "--flow", flow, "--yes")
    assert (out["matched"], out["redriven"], out["error_count"]) == (3, 3, 0)
    wait_for(lambda: dead(), 30, "the three dead again")
    r = ok(cluster, "dead-letters", "redrive", "--task", dead_tasks[1], "--yes")
    assert "redriven     1" in r.stdout
    wait_for(lambda: dead(), 30, "the three dead again")

    now = js(cluster, "dead-letters", "list", "--flow", flow)
    r = fails(cluster, 1, "dead-letters", "delete", now[0]["id"], "nope-1.1")  # one of two is unknown
    assert "1 of 2 dead letters deleted, 1 failed" in r.stderr
    assert js(cluster, "dead-letters", "delete", now[1]["id"]) == {"deleted": 1}
    fails(cluster, 2, "dead-letters", "delete")  # neither ids, nor a filter, nor --all
    out = js(cluster, "dead-letters", "delete", "--flow", flow, "--yes")
    assert (out["matched"], out["deleted"]) == (1, 1)
    assert "nothing matches: 0 dead letters (all)" in ok(cluster, "dead-letters", "delete", "--all", "--yes").stderr
    assert js(cluster, "dead-letters", "delete", "--all", "--yes")["deleted"] == 0
    for tid in dead_tasks:
        ok(cluster, "tasks", "delete", tid)


def test_watch_stops_on_ctrl_c_and_when_its_task_is_deleted(cluster: Cluster, rec: RecordingReceiver,
                                                          tmp_path: Path) -> None:
    t = js(cluster, "tasks", "create", "--type", "periodic", "--interval", "1s", "--callback",
           rec.url("/ok/cli-watch-stop"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
    env["MOLENS_URL"] = urls(cluster)
    out, err = tmp_path / "out", tmp_path / "err"
    for mode, stop in (("--jsonl", "ctrl-c"), ("--json", "ctrl-c"), ("--jsonl", "delete")):
        with out.open("w") as o, err.open("w") as e:
            w = subprocess.Popen([sys.executable, "-m", "molens.ops_cli", "watch", t["id"], mode, "--interval", "0.2"],
                                 stdout=o, stderr=e, env=env, cwd=ROOT)
        try:
            wait_for(lambda: "watching" in err.read_text(), 30, "the watch to start")
            if mode == "--jsonl":
                wait_for(lambda: out.read_text().count("\n") >= 1, 30, "an execution printed")
            else:  # prints at the end: wait for two fires after the start, so one at least was seen
                first = js(cluster, "executions", "--task", t["id"], "--limit", "1")[0]["seq"]
                wait_for(lambda f=first: js(cluster, "executions", "--task", t["id"], "--limit", "1")[0]["seq"] >= f + 2,
                         30, "two more fires")
            if stop == "ctrl-c":
                w.send_signal(signal.SIGINT)
                assert w.wait(30) == 130 and "interrupted" in err.read_text()
                printed = [json.loads(ln) for ln in out.read_text().splitlines()] if mode == "--jsonl" \
                    else json.loads(out.read_text())
                assert printed and all(x["task_id"] == t["id"] for x in printed)
            else:
                ok(cluster, "tasks", "delete", t["id"])
                assert w.wait(30) == 1 and json.loads(err.read_text().splitlines()[-1])["error"]["code"] == "not_found"
        finally:
            if w.poll() is None:
                w.kill()
                w.wait()


def test_the_token_comes_from_the_environment_or_a_file(make_cluster: Any, tmp_path: Path) -> None:
    c: Cluster = make_cluster(1, extra={"http": {"auth_token": "cli-s3cret"}}, state_machine="tasks")
    url = c.leader().http_url
    r = fails(url, 1, "tasks", "list")
    assert "401 unauthorized" in r.stderr
    env_token = {**os.environ, "MOLENS_URL": url, "MOLENS_TOKEN": "cli-s3cret"}
    r = subprocess.run([sys.executable, "-m", "molens.ops_cli", "tasks", "list", "--json"], capture_output=True,
                       text=True, env=env_token, cwd=ROOT)
    assert r.returncode == 0 and json.loads(r.stdout) == []
    token = tmp_path / "token"
    token.write_text("cli-s3cret\n")
    assert js(url, "cluster", "leader", "--token-file", str(token))["leader_id"] == "n1"
    token.write_text("wrong")
    assert json.loads(fails(url, 1, "tasks", "list", "--json", "--token-file", str(token)).stderr)["error"][
        "code"] == "unauthorized"
    token.write_text("")
    fails(url, 2, "tasks", "list", "--token-file", str(token))
    fails(url, 2, "tasks", "list", "--token-file", str(tmp_path / "missing"))


def _as(url: str, token: str, *args: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    """``molens ARGS`` with ``MOLENS_TOKEN`` (and ``MOLENS_NAMESPACE``) from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
    env.update({"MOLENS_URL": url, "MOLENS_TOKEN": token, **({"MOLENS_NAMESPACE": namespace} if namespace else {})})
    return subprocess.run([sys.executable, "-m", "molens.ops_cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)


def test_namespace_and_key_commands_and_the_namespace_option(make_cluster: Any) -> None:
    admin = "cli-admin-s3cret"
    c: Cluster = make_cluster(1, extra={"http": {"auth_token": admin}}, state_machine="tasks")
    url = c.leader().http_url
    made = json.loads(_as(url, admin, "namespaces", "create", "payments", "--creates-per-s", "100", "--json").stdout)
    assert made["name"] == "payments" and made["quotas"]["creates_per_s"] == 100
    listed = _as(url, admin, "namespaces", "list")
    assert [r[0] for r in rows(listed.stdout)] == ["default", "payments"]
    assert json.loads(_as(url, admin, "namespaces", "get", "payments", "--json").stdout)["name"] == "payments"

    created = _as(url, admin, "keys", "create", "billing-ci", "--role", "writer", "--namespaces", "payments", "--json")
    assert created.returncode == 0, created.stderr
    key = json.loads(created.stdout)
    assert key["secret"] and key["namespaces"] == ["payments"] and "shown only this once" in created.stderr
    shown = _as(url, admin, "keys", "list")
    assert key["id"] in shown.stdout and key["secret"] not in shown.stdout
    assert "secret" not in json.loads(_as(url, admin, "keys", "get", key["id"], "--json").stdout)

    t = json.loads(_as(url, key["secret"], "tasks", "create", "--type", "delayed", "--interval", "1h",
                       "--callback", "http://127.0.0.1:9/hook", "--json", namespace="payments").stdout)
    assert t["namespace"] == "payments"
    mine = json.loads(_as(url, key["secret"], "tasks", "list", "--json", "--namespace", "payments").stdout)
    assert [x["id"] for x in mine] == [t["id"]]
    assert json.loads(_as(url, admin, "--namespace", "default", "tasks", "list", "--json").stdout) == []
    refused = _as(url, key["secret"], "tasks", "list", "--namespace", "default")
    assert refused.returncode == 1 and "403 forbidden" in refused.stderr
    refused = _as(url, key["secret"], "keys", "list")
    assert refused.returncode == 1 and "403 forbidden" in refused.stderr
    assert _as(url, admin, "namespaces", "delete", "payments").returncode == 1  # it still holds a task

    assert _as(url, admin, "keys", "delete", key["id"]).returncode == 0
    gone = _as(url, key["secret"], "tasks", "list")
    assert gone.returncode == 1 and "401 unauthorized" in gone.stderr
    bad = _as(url, admin, "keys", "create", "x", "--role", "writer", "--namespaces", "Not Valid")
    assert bad.returncode == 2


def test_flow_and_cluster_commands(cluster: Cluster) -> None:
    key = "cli.example.com:443"
    put = js(cluster, "flows", "put", key, "--rate-per-s", "20", "--concurrency", "3")
    assert (put["key"], put["rate_per_s"], put["concurrency"], put["paused"]) == (key, 20.0, 3, False)
    assert "rate_per_s            20.0" in ok(cluster, "flows", "put", key, "--rate-per-s", "20", "--burst", "5").stdout
    assert [rw[:3] for rw in rows(ok(cluster, "flows", "list").stdout) if rw[0] == key] == [[key, "20.0", "5"]]
    assert key in [f["key"] for f in js(cluster, "flows", "list")]
    assert js(cluster, "flows", "get", key)["burst"] == 5
    assert "paused                yes" in ok(cluster, "flows", "pause", key).stdout
    assert js(cluster, "flows", "resume", key)["paused"] is False
    assert js(cluster, "flows", "pause", key)["paused"] is True
    assert "paused                no" in ok(cluster, "flows", "resume", key).stdout
    assert "concurrency" in ok(cluster, "flows", "get", key).stdout
    js(cluster, "flows", "delete", key)
    r = fails(cluster, 1, "flows", "get", key)
    assert "404 not_found" in r.stderr
    fails(cluster, 1, "flows", "delete", key)

    lead = cluster.leader()
    st = js(cluster, "cluster", "status")
    assert st["leader_id"] == lead.node_id and {n["id"] for n in st["nodes"]} == set(cluster.nodes)
    table = ok(cluster, "cluster", "status").stdout
    assert f"leader_id       {lead.node_id}" in table and all(nid in table for nid in cluster.nodes)
    assert js(cluster, "cluster", "leader")["leader_id"] == lead.node_id
    dead = f"http://127.0.0.1:{_closed_port()}"
    given = [arg for n in cluster.nodes.values() for arg in ("--url", n.http_url)]
    assert js(dead, "cluster", "leader", *given)["leader_id"] == lead.node_id  # --url wins over MOLENS_URL
    assert json.loads(ok(cluster, "cluster", "leader", "--jsonl").stdout)["leader_id"] == lead.node_id
    assert f"leader_id   {lead.node_id}" in ok(cluster, "cluster", "leader").stdout


def test_a_create_whose_answer_is_lost_exits_3_and_its_key_makes_the_retry_safe(cluster: Cluster) -> None:
    def swallow(conn: socket.socket, request: bytes) -> bool:
        return False  # read the request, close without an answer: it may have been applied

    raw = RawServer(swallow)
    try:
        r = molens(raw.url(""), "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback",
                   "http://127.0.0.1:9/cb", "--request-timeout", "1")
    finally:
        raw.stop()
    assert r.returncode == 3, r.stderr
    assert raw.requests and b"POST /api/v1/tasks " in raw.requests[0]
    key = r.stderr.split("idempotency key: ")[1].split()[0]
    assert f"--idempotency-key {key}" in r.stderr and "outcome_unknown" in r.stderr
    first = js(cluster, "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback",
               "http://127.0.0.1:9/cb", "--idempotency-key", key)
    again = js(cluster, "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback",
               "http://127.0.0.1:9/cb", "--idempotency-key", key)
    assert first["id"] == again["id"] and first["idempotency_key"] == key
    ok(cluster, "tasks", "delete", first["id"])

    r = fails(f"http://127.0.0.1:{_closed_port()}", 3, "cluster", "leader", "--json", "--request-timeout", "1")
    assert json.loads(r.stderr)["error"]["code"] == "connection_failed"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_cli_follows_a_new_leader_after_the_leader_is_killed(cluster: Cluster, rec: RecordingReceiver,
                                                                 tmp_path: Path) -> None:
    t = js(cluster, "tasks", "create", "--type", "periodic", "--interval", "1s", "--callback",
           rec.url("/ok/cli-failover"))
    lead = cluster.leader()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
    env["MOLENS_URL"] = urls(cluster, first=lead)  # the node about to die is asked first
    out = (tmp_path / "watch.jsonl").open("w")
    watcher = subprocess.Popen([sys.executable, "-m", "molens.ops_cli", "watch", t["id"], "--count", "6",
                                "--jsonl", "--interval", "0.2", "--timeout", "50"],
                               stdout=out, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        wait_for(lambda: len((tmp_path / "watch.jsonl").read_text().splitlines()) >= 1, 30,
                 "the watch's first execution")
        lead.kill()  # kill -9
        killed_ms = int(time.time() * 1000)
        old = lead.node_id
        new = wait_for(lambda: (lambda d: d if d.get("leader_id") not in (None, old) else None)(
            json.loads(molens(cluster, "cluster", "leader", "--json", first=lead).stdout or "{}")),
            30, "the CLI to name a new leader")
        assert new["leader_id"] != old
        made = js(cluster, "tasks", "create", "--type", "delayed", "--interval", "1h", "--callback",
                  rec.url("/ok/cli-after"), first=lead)
        assert js(cluster, "tasks", "pause", made["id"], first=lead)["status"] == "paused"
        assert made["id"] in ok(cluster, "tasks", "list", "--status", "paused", first=lead).stdout
        ok(cluster, "tasks", "delete", made["id"], first=lead)
        assert watcher.wait(60) == 0, watcher.stderr.read() if watcher.stderr else ""
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        out.close()
    got = [json.loads(ln) for ln in (tmp_path / "watch.jsonl").read_text().splitlines()]
    assert len(got) == 6 and len({(e["seq"], e["attempt"], e["kind"]) for e in got}) == 6  # none twice
    assert any(e["finished_at"] > killed_ms for e in got)  # it went on after the leader died
    lead.start()
    lead.wait_ready()
    cluster.leader(timeout=30)
