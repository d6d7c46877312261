"""Real Molens node processes on 127.0.0.1 for integration tests.

* :func:`free_ports` picks ports free at run time.
* :class:`NodeProc` is one ``python -m molens.cli CONFIG`` process (foreground mode, so ``kill()`` is a
  real SIGKILL of the node itself) with its YAML config and data_dir under a temp directory.
* :class:`Cluster` builds ``conf/cluster``-style configs for N nodes, starts/stops/kills them, and
  polls (never sleeps blindly) for a leader or any condition with a deadline.
* Fixtures: ``make_cluster`` (function scope: any number of clusters, all stopped at teardown, even
  on failure), ``cluster3`` (one 3-node cluster shared by a module: cheap to reuse), ``receiver`` and
  ``callback_server`` (in-process HTTP receivers) and ``lab`` (network namespaces, ``netns.py``).

Other tests reuse this: pass ``extra`` settings (dict merged into each node's YAML) to configure
the scheduler, HTTP, etc. Clusters run the key-value FSM (``node.state_machine: kv``) the Raft tests
drive unless made with ``state_machine="tasks"`` (the scheduler, its HTTP API and UI).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import yaml

from molens.admin import AdminClient, AdminError

from .callback_server import CallbackServer
from .recording_receiver import RecordingReceiver

if TYPE_CHECKING:
    from .netns import NetnsLab

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]


_PORTS_GIVEN: set[int] = set()
_PORTS_LOCK = threading.Lock()
_PORT_RANGE = (20_000, 32_000)  # below Linux's ephemeral range (32768-60999): outgoing connections never take them


def _port_range() -> tuple[int, int]:
    """This process's share of :data:`_PORT_RANGE`: under pytest-xdist (``-n N``) each worker draws from
    its own slice, so two workers never hand out the same port between its check and its bind."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return _PORT_RANGE
    lo, hi = _PORT_RANGE
    size = (hi - lo) // count
    start = lo + int(worker[2:]) % count * size
    return start, start + size - 1


def free_ports(n: int) -> list[int]:
    """``n`` TCP ports free on 127.0.0.1 now and never handed out before in this test session.

    Asking the kernel for port 0 gave ephemeral ports, which outgoing connections (and a second
    call before the first caller bound them: a cluster draws 4 ports per node, then starts the
    nodes) could take again: "n1: admin.bind_addr ...: port in use" in CI."""
    rng = random.Random()
    out: list[int] = []
    with _PORTS_LOCK:
        while len(out) < n:
            port = rng.randint(*_port_range())
            if port in _PORTS_GIVEN:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _PORTS_GIVEN.add(port)
            out.append(port)
    return out


def wait_for(
    fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.02,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll ``fn`` until it returns something truthy; fail the test naming ``what`` at the deadline,
    with what ``explain`` says then (the state behind it: a node's log tail, the objects waited on)."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except (AdminError, OSError) as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            context = ""
            if explain is not None:
                try:
                    context = "\n" + explain()
                except Exception as exc:  # the explanation must not hide the timeout
                    context = f"\n(explain failed: {exc!r})"
            pytest.fail(
                f"timed out after {timeout:g} s waiting for {what}"
                + (f" (last error: {last_exc})" if last_exc else "") + context
            )
        time.sleep(interval)


def _die_with_parent() -> None:
    """In the child: SIGKILL it when the test process dies, so a killed pytest leaks no node."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


NODES_MADE: list[NodeProc] = []
"""Every node this test process configured, in order: a failed test's report shows the log tails of
those that wrote since it began (tests/conftest.py, ``pytest_runtest_makereport``)."""


def node_logs_since(t0: float, lines: int = 40, most: int = 9) -> str:
    """The last ``lines`` lines of each node log written since ``t0`` (epoch s), at most ``most``
    nodes (the latest made)."""
    out: list[str] = []
    for node in NODES_MADE[::-1]:
        try:
            written = node.log_path.stat().st_mtime
        except OSError:
            continue
        if written >= t0:
            out.append(f"--- {node.node_id} ({node.log_path})\n{node.tail(lines)}")
            if len(out) >= most:
                break
    return "\n".join(out[::-1])


class NodeProc:
    """One node process and its files. Not started until :meth:`start`."""

    def __init__(self, node_id: str, root: Path, settings: dict[str, Any]) -> None:
        NODES_MADE.append(self)
        self.node_id = node_id
        self.dir = root / node_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.dir / "data"
        self.settings = _merge({"node": {"id": node_id, "data_dir": str(self.data_dir)}}, settings)
        self.config_path = self.dir / "node.yaml"
        self.config_path.write_text(yaml.safe_dump(self.settings, sort_keys=False))
        self.admin_addr: str = self.settings["admin"]["bind_addr"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "stdout.log"
        self.argv: list[str] = [sys.executable, "-m", "molens.cli"]
        """The command the node runs, the config path appended (another release's code, say)."""
        self._local = threading.local()  # one admin client per thread: ZMQ sockets are not thread-safe

    def configure(self, settings: dict[str, Any]) -> None:
        """Merge ``settings`` into the node's config file (read at its next start)."""
        self.settings = _merge(self.settings, settings)
        self.config_path.write_text(yaml.safe_dump(self.settings, sort_keys=False))

    # --- process control -------------------------------------------------------------------------
    def start(self) -> NodeProc:
        assert not self.running, f"{self.node_id} already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.argv, str(self.config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                env=env,
                preexec_fn=_die_with_parent,
            )
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """kill -9."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._drop_admin()

    def stop(self, timeout: float = 45.0) -> int:
        """Graceful stop through the admin socket; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            with contextlib.suppress(AdminError):
                self.admin().call("stop", timeout_s=5)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"{self.node_id} did not stop within {timeout} s") from None
        self._drop_admin()
        return self.proc.returncode

    def wait_ready(self, timeout: float = 30.0) -> dict[str, Any]:
        """Until the admin socket answers ``status`` (the node is up; a leader may not exist yet)."""

        def up() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(f"{self.node_id} exited with {self.proc.returncode}:\n{self.tail()}")
            return self.status()

        return wait_for(up, timeout, f"{self.node_id} to answer on its admin socket")

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # --- admin -----------------------------------------------------------------------------------
    def admin(self) -> AdminClient:
        """This thread's admin client for the node."""
        client: AdminClient | None = getattr(self._local, "client", None)
        if client is None:
            client = AdminClient(self.admin_addr, timeout_s=5.0)
            self._local.client = client
        return client

    def _drop_admin(self) -> None:
        client: AdminClient | None = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None

    def status(self) -> dict[str, Any] | None:
        """The node's status, or None when it does not answer within a second."""
        if not self.running:
            return None
        try:
            return self.admin().call("status", timeout_s=1.0)
        except AdminError:
            self._drop_admin()
            return None

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        return self.admin().call(cmd, **args)

    @property
    def http_url(self) -> str:
        """The node's REST base URL."""
        return f"http://{self.settings['http']['host']}:{self.settings['http']['port']}"


class Cluster:
    """N nodes configured as ``conf/cluster/n*.yaml``, on free ports, under ``root``."""

    def __init__(
        self, root: Path, n: int = 3, extra: dict[str, Any] | None = None, state_machine: str = "kv"
    ) -> None:
        self.root = root
        self.extra = _merge({"node": {"state_machine": state_machine}}, extra or {})
        self.nodes: dict[str, NodeProc] = {}
        ids = [f"n{i}" for i in range(1, n + 1)]
        self._addrs = {nid: self._new_addrs() for nid in ids}
        peers = [{"id": nid, **self._addrs[nid]} for nid in ids]
        for nid in ids:
            self.nodes[nid] = NodeProc(nid, root, self._settings(nid, {"cluster": {"peers": peers}}))

    @staticmethod
    def _new_addrs() -> dict[str, str]:
        raft, rpc, http, admin = free_ports(4)
        return {
            "raft_addr": f"127.0.0.1:{raft}",
            "rpc_addr": f"127.0.0.1:{rpc}",
            "http_addr": f"127.0.0.1:{http}",
            "admin_addr": f"127.0.0.1:{admin}",
        }

    def _settings(self, nid: str, cluster: dict[str, Any]) -> dict[str, Any]:
        a = self._addrs[nid]
        base = {
            **cluster,
            "raft": {"bind_addr": a["raft_addr"]},
            "rpc": {"bind_addr": a["rpc_addr"]},
            "http": {"host": "127.0.0.1", "port": int(a["http_addr"].rsplit(":", 1)[1])},
            "admin": {"bind_addr": a["admin_addr"]},
        }
        return _merge(base, self.extra)

    def add_joiner(self, nid: str, extra: dict[str, Any] | None = None) -> NodeProc:
        """A new node configured with ``join_addrs`` = the admin addresses of the current nodes."""
        self._addrs[nid] = self._new_addrs()
        join = [n.admin_addr for n in list(self.nodes.values())]
        node = NodeProc(
            nid, self.root, _merge(self._settings(nid, {"cluster": {"join_addrs": join}}), extra or {})
        )
        self.nodes[nid] = node
        return node

    def one_cpu_each(self) -> list[int]:
        """Node ``i``'s CPU when each runs on one: the ``i``-th this process may use, round-robin."""
        allowed = sorted(os.sched_getaffinity(0))
        return [allowed[i % len(allowed)] for i in range(len(self.nodes))]

    def pin_each_to_one_cpu(self) -> list[int]:
        """Give each node its CPU of :meth:`one_cpu_each` as ``node.cpus`` (docs/deploy.md#cpu-pinning);
        returns each node's CPU in order."""
        chosen = self.one_cpu_each()
        for node, cpu in zip(self.nodes.values(), chosen, strict=True):
            node.configure({"node": {"cpus": str(cpu)}})
        return chosen

    # --- whole-cluster control -------------------------------------------------------------------
    def start(self) -> Cluster:
        for node in list(self.nodes.values()):
            if not node.running:
                node.start()
        for node in list(self.nodes.values()):
            node.wait_ready()
        return self

    def kill_all(self) -> None:
        for node in list(self.nodes.values()):
            node.kill()

    def stop_all(self) -> None:
        for node in list(self.nodes.values()):
            if node.running:
                node.stop()

    def running(self) -> list[NodeProc]:
        return [n for n in list(self.nodes.values()) if n.running]

    def statuses(self) -> dict[str, dict[str, Any]]:
        out = {}
        for node in self.running():
            st = node.status()
            if st is not None:
                out[node.node_id] = st
        return out

    def leader(self, timeout: float = 15.0, exclude: tuple[str, ...] = ()) -> NodeProc:
        """The node that is leader and recognised as such by every running member that answers
        (a node that is joining or was removed has no say)."""

        def find() -> NodeProc | None:
            sts = {nid: st for nid, st in self.statuses().items() if st["role"] not in ("joining", "removed")}
            leaders = [nid for nid, st in sts.items() if st["role"] == "leader" and nid not in exclude]
            if len(leaders) != 1:
                return None
            lid = leaders[0]
            term = sts[lid]["term"]
            if all(st["leader_id"] == lid and st["term"] == term for st in sts.values()):
                return self.nodes[lid]
            return None

        return wait_for(find, timeout, "one leader recognised by all running nodes")

    def followers(self) -> list[NodeProc]:
        lead = self.leader()
        return [n for n in self.running() if n is not lead]

    def wait_converged(self, timeout: float = 30.0) -> dict[str, dict[str, Any]]:
        """Until every running node has applied the leader's commit index; returns their stats."""

        def converged() -> dict[str, dict[str, Any]] | None:
            sts = self.statuses()
            if len(sts) != len(self.running()):
                return None
            commits = {st["commit_index"] for st in sts.values()}
            applied = {st["applied_index"] for st in sts.values()}
            if len(commits) == 1 and applied == commits:
                return {nid: self.nodes[nid].call("stats") for nid in sts}
            return None

        return wait_for(converged, timeout, "all running nodes to apply the same commit index")


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(n=3, extra=None)`` -> a started Cluster; every node is killed at teardown."""
    made: list[Cluster] = []

    def make(
        n: int = 3, extra: dict[str, Any] | None = None, start: bool = True, state_machine: str = "kv"
    ) -> Cluster:
        c = Cluster(tmp_path / f"cluster{len(made)}", n, extra, state_machine)
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        c.kill_all()


@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    """A started in-process :class:`RecordingReceiver`, closed at teardown."""
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.fixture
def callback_server() -> Iterator[CallbackServer]:
    """A started in-process :class:`CallbackServer` (behaviour picked by path), stopped at teardown."""
    srv = CallbackServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    """A lab of network namespaces (``netns.py``), destroyed at teardown; a skip saying why where
    namespaces cannot be made."""
    from .netns import netns_or_skip

    made = netns_or_skip()
    try:
        yield made
    finally:
        made.destroy()


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One started 3-node cluster shared by a test module. Tests leave it with 3 nodes running."""
    c = Cluster(tmp_path_factory.mktemp("cluster3"), 3)
    try:
        c.start()
        yield c
    finally:
        c.kill_all()


@pytest.fixture(scope="module")
def server_urls() -> Iterator[dict[str, str]]:
    """Real Redis and PostgreSQL servers for the checkpoint tests (tests/checkpoint_servers.py), one
    pair per module, stopped at its end."""
    from tests.checkpoint_servers import ServerMissing, postgres_server, redis_server

    with contextlib.ExitStack() as stack:
        try:
            yield {"redis": stack.enter_context(redis_server()), "postgresql": stack.enter_context(postgres_server())}
        except ServerMissing as e:
            pytest.fail(str(e))
