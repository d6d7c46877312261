"""The README's first command, ``scripts/run``, as a user runs it: set-up (quick when done), then one
node on ``conf/node.yaml`` in the foreground that says where its API and console are, takes a task over
REST and fires its callback, serves the console, and stops gracefully on Ctrl-C (SIGINT).

Ports and the data directory come from ``MOLENS_*`` overrides (as the script's header says), so the
run touches nothing of the checkout's own ``./data`` and no fixed port.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from .callback_server import CallbackServer
from .conftest import ROOT, free_ports, wait_for

pytestmark = pytest.mark.integration

_http = urllib3.PoolManager(retries=False, timeout=10)


@pytest.fixture
def receiver() -> Iterator[CallbackServer]:
    srv = CallbackServer()
    yield srv
    srv.stop()


def _request(method: str, url: str, body: object = None) -> tuple[int, bytes]:
    try:
        r = _http.request(method, url, body=None if body is None else json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"}, redirect=False)
    except urllib3.exceptions.HTTPError:
        return 0, b""
    return r.status, r.data


def test_scripts_run_starts_a_node_that_fires_a_task_and_stops_on_ctrl_c(
    tmp_path: Path, receiver: CallbackServer
) -> None:
    raft, rpc, http, admin = free_ports(4)
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
    env.update({
        "MOLENS_NODE__DATA_DIR": str(data),
        "MOLENS_HTTP__PORT": str(http),
        "MOLENS_RAFT__BIND_ADDR": f"127.0.0.1:{raft}",
        "MOLENS_RPC__BIND_ADDR": f"127.0.0.1:{rpc}",
        "MOLENS_ADMIN__BIND_ADDR": f"127.0.0.1:{admin}",
    })
    out_path = tmp_path / "run.out"
    with out_path.open("wb") as out:
        proc = subprocess.Popen([str(ROOT / "scripts" / "run")], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{http}"

    def said() -> str:
        return out_path.read_text(errors="replace")

    try:
        wait_for(lambda: proc.poll() is not None or "run: web UI" in said(), 120, "scripts/run to say where the node is",
                 explain=said)
        assert proc.poll() is None, said()
        text = said()
        assert f"run: REST API  {base}/api/v1" in text, text
        assert f"run: web UI    {base}/ui/" in text, text
        assert re.search(rf"run: node n1, data {re.escape(str(data.resolve()))}\n", text), text

        def leader() -> bool:
            status, body = _request("GET", f"{base}/api/v1/cluster/status")
            return status == 200 and json.loads(body).get("leader_id") == "n1"

        wait_for(leader, 60, "the node to lead its one-node cluster", explain=said)
        wait_for(lambda: _request("GET", f"{base}/readyz")[0] == 200, 30, "the API to be ready", explain=said)
        status, body = _request("POST", f"{base}/api/v1/tasks", {
            "type": "delayed", "interval_ms": 100, "callback_url": receiver.url("/ok"), "payload": {"from": "run"},
        })
        assert status == 201, body
        wait_for(lambda: receiver.recorded("/ok"), 30, "the task's callback", explain=said)
        (fired,) = receiver.recorded("/ok")
        assert json.loads(fired.body) == {"from": "run"}, fired.body  # the task's payload is the body
        status, page = _request("GET", f"{base}/ui/")
        assert status == 200 and b"<html" in page.lower(), page[:200]
        assert (data / "raft").is_dir() and (data / "fsm").is_dir()

        os.kill(proc.pid, signal.SIGINT)  # Ctrl-C: scripts/run exec'd the node, so its pid is the node's
        rc = proc.wait(60)
        assert rc == 0, f"rc={rc}\n{said()}"
        assert "Traceback" not in said(), said()
        assert not (data / "node.pid").exists(), "a graceful stop removes its pid file"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
