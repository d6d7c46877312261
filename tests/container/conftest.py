"""Fixtures for the container tests: a real Docker engine (installed and started here when missing,
see :mod:`tests.container.engine`), the image built from ``scripts/dist``'s wheel, and the compose
cluster of ``compose.yaml`` (containers molens-n1..n3 on 127.0.0.1:18081-18083).

The cluster is the seed's own (fixed names, ports and volumes), so the test refuses to run while one
is up (``scripts/cluster down --docker`` first) and resets the volumes molens-n1-data..n3-data.
Whatever the test started (containers, the network, dockerd) is stopped at teardown, even on failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import engine

ROOT = engine.ROOT
IMAGE = "molens:test"
NODES = ("molens-n1", "molens-n2", "molens-n3")
PORTS = {"molens-n1": 18081, "molens-n2": 18082, "molens-n3": 18083}
NETWORK = "molens"
SECRETS = ROOT / ".secrets" / "compose"


def run(cmd: list[str], timeout: float = 120, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure (``check``) fail the test with its output."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)  # type: ignore[call-overload]
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p  # type: ignore[no-any-return]


@dataclass
class Phases:
    """Seconds per phase, printed as the test goes and at the end."""

    t0: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    seconds: dict[str, float] = field(default_factory=dict)
    before_s: float = 0.0
    """Seconds spent before ``t0`` (the engine's set-up), counted in the total."""

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = now - self.last
        self.last = now
        print(f"container phase {name}: {self.seconds[name]:.1f} s", flush=True)

    def summary(self) -> str:
        parts = " ".join(f"{k}={v:.1f}" for k, v in self.seconds.items())
        return f"container phases (s): {parts} total={time.monotonic() - self.t0 + self.before_s:.1f}"


@dataclass
class Engine:
    compose: list[str]
    base_image: str
    daemon: engine.Daemon
    setup_s: float
    """Seconds to make the engine ready (install, start dockerd, pull or debootstrap the base)."""


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Engine]:
    """The Docker engine, made ready: a failure here is the test's failure (with the reason), not a skip."""
    t0 = time.monotonic()
    try:
        compose = engine.ensure_tools()
        daemon = engine.Daemon.ensure()
    except engine.EngineUnavailable as exc:
        pytest.fail(f"no Docker engine for the container tests: {exc}")
    try:
        try:
            base = engine.ensure_base_image(engine.BASE_IMAGE, engine.LOCAL_BASE_IMAGE, engine.DEBIAN_RELEASE)
        except engine.EngineUnavailable as exc:
            pytest.fail(f"no base image for the Molens image: {exc}")
        print(f"container engine: {' '.join(compose)}, dockerd {'started here' if daemon.started_here else 'running'}, "
              f"base {base}", flush=True)
        yield Engine(compose, base, daemon, time.monotonic() - t0)
    finally:
        daemon.stop()


class ComposeCluster:
    """``compose.yaml`` under project name ``molens``, run with the image under test."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.env = {**os.environ, "MOLENS_IMAGE": IMAGE}
        self.token = ""

    def compose(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return run([*self.eng.compose, "-p", "molens", *args], timeout=timeout, env=self.env)

    def up(self) -> None:
        self.compose("up", "-d", "--no-build")

    def healthy(self) -> bool:
        """Every node's container reports its HEALTHCHECK (GET /readyz) healthy."""
        return all(
            run(["docker", "inspect", "-f", "{{.State.Health.Status}}", n], check=False).stdout.strip() == "healthy"
            for n in NODES
        )

    def running(self) -> list[str]:
        out = run(["docker", "ps", "--filter", "name=^molens-", "--format", "{{.Names}}"]).stdout.split()
        return sorted(n for n in out if n in NODES)

    def exec_node(self, name: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return run(["docker", "exec", name, "molens-node", "/etc/molens/node.yaml", *args], timeout=timeout, check=False)

    def status(self, name: str) -> dict[str, object] | None:
        p = self.exec_node(name, "status", "--json", timeout=15)
        if p.returncode != 0:
            return None
        try:
            out: dict[str, object] = json.loads(p.stdout)
        except ValueError:
            return None
        return out

    def digest(self, name: str) -> tuple[int, str] | None:
        p = self.exec_node(name, "digest", timeout=60)
        if p.returncode != 0:
            return None
        parts = p.stdout.split()  # "n1: applied 123 digest abc..."
        return int(parts[2]), parts[4]

    def logs(self, name: str) -> str:
        p = run(["docker", "logs", name], check=False)
        return p.stdout + p.stderr

    def down_all(self) -> None:
        """Remove the containers, the network and the volumes (compose's own ``down`` needs the
        secrets files, which a fresh clone lacks until the image made them: plain docker here)."""
        run(["docker", "rm", "-f", "-v", "molens-receiver", *NODES], check=False)
        run(["docker", "network", "rm", NETWORK], check=False)
        run(["docker", "volume", "rm", *(f"{n}-data" for n in NODES)], check=False)


@pytest.fixture
def compose_cluster(docker_engine: Engine, request: pytest.FixtureRequest) -> Iterator[ComposeCluster]:
    c = ComposeCluster(docker_engine)
    failed_before = request.session.testsfailed
    up = c.running()
    if up:
        pytest.fail(f"{', '.join(up)} already running (a cluster from scripts/cluster up --docker?): "
                    "stop it with scripts/cluster down --docker; this test uses the same names, ports and volumes")
    c.down_all()  # leftovers of an interrupted run: stopped containers, the network, the volumes
    try:
        yield c
    finally:
        for name in NODES if request.session.testsfailed > failed_before else ():
            tail = "\n".join(c.logs(name).splitlines()[-30:])  # a failed run's diagnosis
            if tail:
                print(f"--- {name} (last lines)\n{tail}")
        c.down_all()


def image_size_mb(tag: str) -> float:
    return int(run(["docker", "image", "inspect", "-f", "{{.Size}}", tag]).stdout.strip()) / 1e6


def build_image(base: str) -> None:
    """scripts/dist, then the image; the build stage is tagged too (``molens:build-stage``), so the
    images that earlier builds left untagged can be pruned without losing the layer cache."""
    run([str(ROOT / "scripts" / "dist")], timeout=600)
    args = ["--build-arg", f"BASE={base}", "--build-arg", f"EXTRA_CA_CERTS={engine.extra_ca_certs()}"]
    run(["docker", "build", "-q", *args, "--target", "build", "-t", "molens:build-stage", "."], timeout=900)
    run(["docker", "build", "-q", *args, "-t", IMAGE, "."], timeout=900)
    run(["docker", "image", "prune", "-f", "--filter", "label=org.opencontainers.image.title=molens"])


def ensure_secrets() -> str:
    """The compose secrets (made in the image when missing); returns the API token."""
    if not (SECRETS / "api_token").is_file():
        SECRETS.mkdir(parents=True, exist_ok=True)
        run(["docker", "run", "--rm", "--user", "0", "-v", f"{ROOT / 'scripts'}:/s:ro", "-v", f"{SECRETS}:/out",
             "--entrypoint", "/opt/molens/bin/python", IMAGE, "/s/compose_secrets.py", "/out", "--owner", "10001:10001"])
    return (SECRETS / "api_token").read_text().strip()


def start_receiver(out: Path, port: int = 8080) -> str:
    """The recording receiver (tests/integration/recording_receiver.py, asyncio) as container
    ``molens-receiver`` on the cluster's network; each request becomes a JSON line in ``out``
    (appended: a restarted receiver keeps the earlier lines). Returns its base URL for callbacks."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch()
    run(["docker", "rm", "-f", "-v", "molens-receiver"], check=False)
    run(["docker", "run", "-d", "--name", "molens-receiver", "--network", NETWORK, "--user", "0",
         "-v", f"{ROOT / 'tests'}:/app/tests:ro", "-v", f"{out.parent}:/rec", "-w", "/app",
         "--entrypoint", "/opt/molens/bin/python", IMAGE,
         "-m", "tests.integration.recording_receiver", str(port), f"/rec/{out.name}", "0.0.0.0"])
    deadline = time.monotonic() + 30
    while "listening" not in run(["docker", "logs", "molens-receiver"], check=False).stdout:
        if time.monotonic() > deadline:
            pytest.fail("the receiver container did not start listening within 30 s")
        time.sleep(0.1)
    return f"http://molens-receiver:{port}"
