"""The wheel is the product: ``scripts/dist`` builds the console, an sdist and a wheel from it, and
``pip install 'molens-*.whl[server]'`` in an empty virtualenv gives a ``molens-node`` that serves the
built console at ``/ui/`` and the API (docs/deploy.md#containers)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.conftest import free_ports, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read()


@pytest.mark.timeout(420)
def test_the_wheel_from_scripts_dist_installs_a_node_that_serves_the_console(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    dist = tmp_path / "dist"
    built = subprocess.run([str(ROOT / "scripts" / "dist"), str(dist)], capture_output=True, text=True, cwd=tmp_path)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheels = sorted(dist.glob("molens-*.whl"))
    assert len(wheels) == 1 and sorted(dist.glob("molens-*.tar.gz")), sorted(p.name for p in dist.iterdir())

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         f"{wheels[0]}[server]"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]

    http, raft, rpc, admin = free_ports(4)
    conf = tmp_path / "node.yaml"
    conf.write_text(yaml.safe_dump({
        "node": {"id": "n1", "data_dir": str(tmp_path / "data")},
        "raft": {"bind_addr": f"127.0.0.1:{raft}"},
        "rpc": {"bind_addr": f"127.0.0.1:{rpc}"},
        "admin": {"bind_addr": f"127.0.0.1:{admin}"},
        "http": {"port": http},
    }))
    log = (tmp_path / "node.log").open("wb")
    # cwd is not the checkout: the node runs the installed copy, not molens/ from the source tree
    procs.append(subprocess.Popen([str(venv / "bin" / "molens-node"), str(conf)], cwd=tmp_path, stdout=log,
                                  stderr=subprocess.STDOUT))
    base = f"http://127.0.0.1:{http}"

    def leader() -> bool:
        status = json.loads(_get(f"{base}/api/v1/cluster/status")[1])
        return bool(status.get("leader_id") == "n1")

    wait_for(leader, 60, "the installed node to lead its single-node cluster")
    status, index = _get(f"{base}/ui/")
    assert status == 200
    assert index == (ROOT / "molens" / "web" / "static" / "index.html").read_bytes()  # the built index
    assert b'<div id="app">' in index or b"<script" in index
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import molens.web.ui as u; print(u.STATIC_DIR)"],
        capture_output=True, text=True, cwd=tmp_path, check=True,
    ).stdout.strip()
    assert installed.startswith(str(venv)), installed  # served from the wheel's copy
