"""``molens-node`` and the node's admin socket against real processes (docs/deploy.md#the-molens-node-command,
docs/deploy.md#admin-socket): a stale ``node.pid`` signals nobody, a data_dir that cannot be made is one line
of config error, a SIGTERM while the node starts stops it gracefully, the admin ``propose`` answers an empty
batch at once and is refused on a node running the scheduler.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
import zmq

from molens import cli
from molens.admin import MAX_DEFERRED, AdminClient
from molens.config import load_dict
from molens.kv import encode_put

from .conftest import Cluster, free_ports, wait_for

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, data_dir: Path) -> dict[str, Any]:
    raft, rpc, http, admin = free_ports(4)
    return {
        "node": {"id": "n1", "data_dir": str(data_dir), "state_machine": "kv"},
        "raft": {"bind_addr": f"127.0.0.1:{raft}"},
        "rpc": {"bind_addr": f"127.0.0.1:{rpc}"},
        "http": {"port": http},
        "admin": {"bind_addr": f"127.0.0.1:{admin}"},
    }


def _config(tmp_path: Path, data_dir: Path) -> Path:
    conf = tmp_path / "node.yaml"
    conf.write_text(yaml.safe_dump(_settings(tmp_path, data_dir)))
    return conf


def _cli(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
    return subprocess.run([sys.executable, "-m", "molens.cli", str(conf), *args], capture_output=True, text=True,
                          timeout=90, env=env, cwd=conf.parent)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is no node: what a stale pid file's pid may have become."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def test_a_stale_pid_file_is_not_signalled_and_does_not_stop_a_start(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """After a kill -9 the pid file stays, and its pid may belong to another process by now: no node
    holds ``node.lock``, so the pid file is stale, said so and removed; nobody is signalled."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "node.lock").touch()  # what the killed node left, unlocked
    pid_file = data / "node.pid"
    conf = _config(tmp_path, data)
    pid_file.write_text(f"{sleeper.pid}\n")
    r = _cli(conf, "stop")
    assert sleeper.poll() is None, f"stop signalled pid {sleeper.pid}, which is no node: {r.stdout}{r.stderr}"
    assert r.returncode == 0 and r.stdout == "n1: not running\n", r.stdout + r.stderr
    assert r.stderr == f"n1: stale pid file {pid_file} (pid {sleeper.pid}; no node holds {data / 'node.lock'}): removed\n"
    assert not pid_file.exists()
    pid_file.write_text(f"{sleeper.pid}\n")
    r = _cli(conf, "status")
    assert r.returncode == 1 and r.stdout == "" and r.stderr.endswith("n1: not running\n"), r.stdout + r.stderr
    pid_file.write_text(f"{sleeper.pid}\n")
    try:
        r = _cli(conf, "start")
        assert r.returncode == 0 and "n1: started" in r.stdout, r.stdout + r.stderr
        assert "stale pid file" in r.stderr
        node_pid = int(pid_file.read_text())
        assert node_pid != sleeper.pid
    finally:
        r = _cli(conf, "stop")
    assert r.returncode == 0 and r.stdout == f"n1: stopped (pid {node_pid})\n", r.stdout + r.stderr
    assert sleeper.poll() is None


@pytest.mark.parametrize("error", [ProcessLookupError, PermissionError])
def test_stop_says_why_when_the_sigterm_cannot_be_sent(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, error: type[OSError]
) -> None:
    """A node that holds its data_dir but does not answer on the admin socket gets a SIGTERM: one that
    ended meanwhile has stopped; one this user may not signal is an error of one line, not a traceback."""
    data = tmp_path / "data"
    data.mkdir()
    cfg = load_dict(_settings(tmp_path, data), env={})
    (data / "node.pid").write_text(f"{sleeper.pid}\n")
    lock = os.open(data / "node.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the node it stands for does
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:
        if sig != signal.SIGTERM:
            return real_kill(pid, sig)
        if error is ProcessLookupError:  # it ends just before the signal
            sleeper.kill()
            sleeper.wait(10)
        raise error(1, os.strerror(1))

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(cli, "_admin", lambda c, timeout_s=5.0: AdminClient(c.admin.bind_addr, timeout_s=0.2))
    try:
        if error is ProcessLookupError:
            assert cli.cmd_stop(cfg) == 0
        else:
            with pytest.raises(cli.CliError, match=f"pid {sleeper.pid} may not be signalled by this user"):
                cli.cmd_stop(cfg)
            assert sleeper.poll() is None
    finally:
        os.close(lock)


def test_a_data_dir_that_cannot_be_made_is_one_line_of_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"  # under a regular file: not even root can make it
    conf = _config(tmp_path, data)
    error = f"config error: node.data_dir: cannot create {data}: Not a directory"
    r = _cli(conf, "start")
    assert r.returncode == 2 and r.stderr == error + "\n", r.stderr
    r = _cli(conf)  # in the foreground the node's log (stderr) comes first; the error is its last line
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.endswith("\n" + error + "\n"), r.stderr
    data = tmp_path / "data"
    (data / "node.lock").mkdir(parents=True)  # a data_dir where the lock file cannot be opened
    conf = _config(tmp_path, data)
    r = _cli(conf)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.splitlines()[-1] == f"config error: node.data_dir: cannot write {data / 'node.lock'}: Is a directory"


def test_peer_http_addr_is_for_add_node_only(tmp_path: Path) -> None:
    conf = _config(tmp_path, tmp_path / "data")
    r = _cli(conf, "status", "--peer-http-addr", "127.0.0.1:1")
    assert r.returncode == 2 and r.stderr.strip().endswith("error: status: --*-addr is for add-node only"), r.stderr


def test_sigterm_while_the_node_starts_stops_it_gracefully(make_cluster: Any) -> None:
    """A container's PID 1 ignores a SIGTERM it has no handler for: the handlers go in before the start,
    and a SIGTERM then is a graceful stop once the start is done (exit 0, not a kill)."""
    c: Cluster = make_cluster(n=1, start=False, state_machine="tasks")
    node = c.nodes["n1"]
    node.start()
    pid_file = node.data_dir / "node.pid"
    # node.pid is written inside Node.start, as it locks the data_dir; the scheduler and HTTP API come after
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() == str(node.pid), 60,
             "the node to lock its data_dir", interval=0.001)
    assert node.proc is not None
    node.proc.send_signal(signal.SIGTERM)
    try:
        code = node.proc.wait(60)  # only catches a hang: a graceful stop of an idle node takes well under it
    except subprocess.TimeoutExpired:
        pytest.fail(f"SIGTERM during start did not stop the node:\n{node.tail()}")
    assert code == 0, node.tail()
    assert "node stopped id=n1" in node.tail()


def test_an_empty_propose_is_answered_at_once_and_holds_no_slot(make_cluster: Any) -> None:
    """An empty ``datas`` has no entry whose commit would answer it: it is answered at once, so
    ``MAX_DEFERRED`` of them do not stop the admin socket reading."""
    c: Cluster = make_cluster(n=1)
    node = c.leader()
    assert node.admin().request({"cmd": "propose", "datas": []}, timeout_s=10) == {"ok": True, "results": []}
    reply = node.admin().request({"cmd": "propose", "datas": "YQ=="}, timeout_s=10)
    assert reply["ok"] is False and "'datas' must be a list" in reply["error"], reply
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as d:
        d.setsockopt(zmq.LINGER, 0)
        d.connect(f"tcp://{node.admin_addr}")
        n = MAX_DEFERRED + 10
        for i in range(n):
            d.send_multipart([b"", json.dumps({"cmd": "propose", "id": i, "datas": []}).encode()])
        got = set()
        while len(got) < n:
            assert d.poll(10_000), f"{n - len(got)} empty proposals not answered"
            _, body = d.recv_multipart()
            reply = json.loads(body)
            assert reply["ok"] is True and reply["results"] == [], reply
            got.add(reply["id"])
    put = base64.b64encode(encode_put(b"k", b"v")).decode()
    assert node.admin().request({"cmd": "propose", "datas": [put]}, timeout_s=10) == {"ok": True, "results": [True]}


def test_propose_is_refused_on_a_node_running_the_scheduler(make_cluster: Any) -> None:
    """On a task node a raw entry would bypass the API's authorization and the audit trail; the admin
    socket has no authentication of its own."""
    c: Cluster = make_cluster(n=1, state_machine="tasks")
    node = c.leader()
    before = node.call("status")["last_index"]
    put = base64.b64encode(encode_put(b"k", b"v")).decode()
    for req in ({"data": put}, {"datas": [put]}, {"datas": []}):
        reply = node.admin().request({"cmd": "propose", **req}, timeout_s=10)
        assert reply["ok"] is False and reply["outcome"] == "not_applied", reply
        assert reply["error"].startswith("propose is refused on a node running the scheduler"), reply
    assert node.call("status")["last_index"] == before
