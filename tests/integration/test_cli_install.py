"""`pip install` of the client-only wheel brings the ``molens`` command and nothing else: the wheel
is built from this checkout, installed into an empty virtualenv with no package index at all (so
any dependency would fail the install), and the installed command drives a real node
(docs/cli.md#install)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _installed(py: Path) -> set[str]:
    r = subprocess.run([str(py), "-m", "pip", "list", "--disable-pip-version-check", "--format=json"],
                       capture_output=True, text=True, check=True)
    return {d["name"].lower() for d in json.loads(r.stdout)}


@pytest.mark.timeout(300)
def test_the_client_wheel_installs_the_molens_command_with_no_dependency(tmp_path: Path, make_cluster: Any) -> None:
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps", "-w", str(dist),
         str(ROOT)], capture_output=True, text=True, cwd=tmp_path)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = dist.glob("molens-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    before = _installed(py)
    pip = subprocess.run(  # no index: a dependency of the wheel could not be found, and the install would fail
        [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-index", str(wheel)],
        capture_output=True, text=True, cwd=tmp_path)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    assert _installed(py) - before == {"molens"}

    cmd = venv / "bin" / "molens"
    help_ = subprocess.run([str(cmd), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert help_.returncode == 0 and "dead-letters" in help_.stdout and "exit codes" in help_.stdout
    comp = subprocess.run([str(cmd), "completion", "bash"], capture_output=True, text=True, cwd=tmp_path)
    assert comp.returncode == 0 and "complete -F _molens molens" in comp.stdout

    c: Cluster = make_cluster(1, state_machine="tasks")
    node = c.leader()
    env = {"PATH": "/usr/bin:/bin", "MOLENS_URL": node.http_url}
    r = subprocess.run([str(cmd), "cluster", "leader", "--json"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["leader_id"] == node.node_id
    r = subprocess.run([str(cmd), "tasks", "get", "01M8MABE0SEAD6S92SY1NA2EWB"], capture_output=True, text=True,
                       cwd=tmp_path, env=env)
    assert r.returncode == 1 and "404 not_found" in r.stderr
