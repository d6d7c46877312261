"""Real nodes for the other languages' SDK tests (``test_sdk_go.py``, ``test_sdk_java.py``).

Pytest starts the nodes (so their cleanup lives in finalizers, as everywhere else), then runs the
SDK's own test runner with the nodes' addresses in environment variables:

* ``MOLENS_NODE_URL``: a single-node cluster (``molens-node`` with the scheduler's state machine);
* ``MOLENS_CLUSTER_URLS``: a 3-node cluster, comma-separated, and ``MOLENS_CLUSTER_PIDS``
  (``n1=pid,...``) so the runner's failover test can ``kill -9`` the leader it finds;
* ``MOLENS_SIGNING_VECTOR``: a callback signature made now by :mod:`molens.signing`;
* ``MOLENS_KEYED_NODE_URL``: a single-node cluster whose ``http.auth_token`` (the bootstrap admin
  key) is ``MOLENS_ADMIN_TOKEN``, for namespaces and API keys.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import urllib3

from molens.signing import signature_header
from tests.integration.conftest import Cluster, wait_for


def http_url(c: Cluster, nid: str) -> str:
    return f"http://127.0.0.1:{c.nodes[nid].settings['http']['port']}"


def _ready(url: str) -> bool:
    try:
        r = urllib3.request("GET", f"{url}/readyz", timeout=2, retries=False)
    except urllib3.exceptions.HTTPError:
        return False
    return r.status == 200


@contextmanager
def sdk_nodes(root: Path) -> Iterator[dict[str, str]]:
    """Starts both clusters; yields the environment for the SDK runner; kills every node after."""
    single = Cluster(root / "single", 1, state_machine="tasks")
    three = Cluster(root / "three", 3, state_machine="tasks")
    admin_token = secrets.token_hex(16)
    keyed = Cluster(root / "keyed", 1, extra={"http": {"auth_token": admin_token}}, state_machine="tasks")
    try:
        single.start()
        three.start()
        keyed.start()
        single.leader(timeout=30)
        three.leader(timeout=30)
        keyed.leader(timeout=30)
        urls = [http_url(three, nid) for nid in three.nodes]
        for url in [http_url(single, "n1"), http_url(keyed, "n1"), *urls]:
            wait_for(lambda u=url: _ready(u), 30, f"{url}/readyz")
        body = json.dumps({"n": secrets.token_hex(8)}).encode()
        sec = [secrets.token_hex(16), secrets.token_hex(16)]
        t_ms = int(time.time() * 1000)
        vector = {"secrets": sec, "fire_id": "01M8MABE0SEAD6S92SY1NA2EWB-3", "body": body.decode(), "t_ms": t_ms,
                  "header": signature_header(sec, "01M8MABE0SEAD6S92SY1NA2EWB-3", body, t_ms)}
        yield {
            "MOLENS_NODE_URL": http_url(single, "n1"),
            "MOLENS_CLUSTER_URLS": ",".join(urls),
            "MOLENS_CLUSTER_PIDS": ",".join(f"{nid}={n.pid}" for nid, n in three.nodes.items()),
            "MOLENS_SIGNING_VECTOR": json.dumps(vector),
            "MOLENS_KEYED_NODE_URL": http_url(keyed, "n1"),
            "MOLENS_ADMIN_TOKEN": admin_token,
        }
    finally:
        single.kill_all()
        three.kill_all()
        keyed.kill_all()


def run_runner(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    """Runs an SDK test runner; fails the test with its output unless it exits 0."""
    proc = subprocess.run(cmd, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False)
    print(proc.stdout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-20000:]}")
    return proc.stdout
