"""`pip install molens` is the client: a fresh virtualenv with it alone (the client has no dependencies:
its HTTP transport is the standard library's) imports molens.client and molens.receiver, lacks
every server dependency and urllib3, and drives a real node
(docs/architecture.md#layers)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = (
    "croniter", "lmdb", "pykka", "zmq", "bottle", "waitress", "msgpack", "yaml", "prometheus_client", "PIL", "urllib3",
)

SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys
    from molens.client import MolensClient
    import molens.receiver  # noqa: F401

    present = [m for m in sys.argv[2].split(",") if importlib.util.find_spec(m) is not None]
    with MolensClient([sys.argv[1]]) as c:
        t = c.create({"type": "delayed", "interval_ms": 60000, "callback_url": sys.argv[1] + "/api/v1/test/callback"})
        again = c.get(t["id"])
        c.pause(t["id"])
        paused = c.get(t["id"])["status"]
        c.delete(t["id"])
    print(json.dumps({"present": present, "id": t["id"], "same": again["id"] == t["id"], "paused": paused,
                      "client_file": sys.modules["molens.client"].__file__}))
    """
)


@pytest.mark.timeout(300)
def test_a_client_only_install_drives_a_real_node(tmp_path: Path, make_cluster: Any) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(ROOT)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    c: Cluster = make_cluster(1, state_machine="tasks")
    node = c.leader()
    url = f"http://{node.settings['cluster']['peers'][0]['http_addr']}"
    run = subprocess.run([str(py), "-c", SCRIPT, url, ",".join(SERVER_ONLY)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    import json

    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["present"] == []  # none of the server's dependencies (nor urllib3) came with the client
    assert out["same"] and out["paused"] == "paused"
    assert str(venv) in out["client_file"]  # the installed copy, not the checkout
