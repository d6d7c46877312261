"""schemathesis against real nodes, with the bootstrap admin's key and with a reader key side by side:
every check it has, every phase (the document's examples, coverage, fuzzing with positive and negative
cases, stateful sequences along the document's links), 100 examples per operation
(``MOLENS_FUZZ_EXAMPLES``), and no failure of any kind allowed. The runs are bounded by examples, not
by a clock (three and a half minutes here, the two at once).

What the server refuses beyond what JSON Schema can state is listed, operation by operation, in
``schemathesis.toml`` beside this file (each with its rule): only there may a request the document
calls valid be answered 400 (or 412 for a stale If-Match). Everything else must agree both ways.
The run prints schemathesis's version and how many cases it generated. Seeded (``MOLENS_FUZZ_SEED``);
a failure prints the seed and schemathesis's ``st replay`` ids. Callbacks: the node admits only
127.0.0.0/8 (its callback host policy), so whatever URLs the fuzzer invents, nothing leaves this machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import urllib3

from .conftest import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("MOLENS_FUZZ_SEED", "20261204"))
EXAMPLES = int(os.environ.get("MOLENS_FUZZ_EXAMPLES", "100"))
MAX_TIME_S = 900
"""A backstop only, never passed to schemathesis: under ``--max-time`` its fuzzing and stateful phases
draw cases until the time is spent, whatever ``--max-examples`` says."""
TOKEN = "fuzz-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")


class _Run:
    """One schemathesis process against a node of its own, as the bootstrap admin or a reader key of every
    namespace (its writes answer 403)."""

    def __init__(self, root: Path, role: str, st: Path) -> None:
        self.role = role
        self.root = root
        self.st = st
        self.cluster = Cluster(root, 1, extra={
            "scheduler": {"callback_policy": {"allow_cidrs": ["127.0.0.0/8"]}},
            "raft": {"tick_ms": 20},
            "http": {"auth_token": TOKEN},
        }, state_machine="tasks")
        self.proc: subprocess.Popen[str] | None = None
        self.stdout = ""
        self.stderr = ""

    def start(self) -> None:
        self.cluster.start()
        self.node = self.cluster.leader(timeout=30)
        base = f"http://127.0.0.1:{self.node.settings['http']['port']}"
        http = urllib3.PoolManager(retries=False)

        def ready() -> bool | None:
            try:
                return http.request("GET", base + "/readyz").status == 200 or None
            except urllib3.exceptions.HTTPError:
                return None

        wait_for(ready, 30, "the node's API")
        key = TOKEN
        if self.role != "admin":
            r = http.request("POST", base + "/api/v1/keys", json={"name": "fuzz", "role": self.role,
                                                                   "namespaces": ["*"]},
                             headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status == 201, r.data
            key = r.json()["secret"]
        cmd = [
            str(self.st), "--config-file", str(CONFIG), "run", f"{base}/api/v1/openapi.json", "--url", base,
            "-H", f"Authorization: Bearer {key}",
            "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful", "--mode", "all",
            "--max-examples", str(EXAMPLES), "--seed", str(SEED),
            "--workers", "1", "--no-color",  # 2 workers hit a CPython 3.11 compile() race in hypothesis (SystemError)
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.root)

    def wait(self, deadline: float) -> None:
        assert self.proc is not None
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, self.stderr = self.proc.communicate()
            self.stderr += f"\nschemathesis did not finish within {MAX_TIME_S} s"

    def check(self, version: str) -> None:
        """The run's findings; prints what it generated."""
        assert self.proc is not None
        out = self.stdout
        summary = out[out.rfind("SUMMARY"):] if "SUMMARY" in out else out[-4000:]
        cases = re.search(r"(\d+) generated", summary)
        phases = "; ".join(m.group(0).strip() for m in re.finditer(r"\w+ \(in [0-9.]+s\)", out))
        print(f"as {self.role}: {version}; seed {SEED}; {cases.group(1) if cases else '?'} cases generated; "
              f"{phases}\n{summary}")
        assert self.proc.returncode == 0, f"as {self.role}: schemathesis seed={SEED}\n{out[-15000:]}\n{self.stderr[-2000:]}"
        assert cases is not None, summary
        assert self.node.running, self.node.tail()
        assert "Traceback" not in self.node.log_path.read_text(errors="replace"), self.node.tail(200)


@pytest.mark.timeout(MAX_TIME_S + 120)
def test_schemathesis_all_checks_all_phases_finds_nothing_as_admin_and_as_reader(tmp_path: Path) -> None:
    """Both runs at once, each against a node of its own: a run is a fuzzer and a node taking turns, about
    one core between them, so two side by side take the time of one on two cores."""
    st = Path(sys.executable).with_name("schemathesis")
    if not st.exists():
        st = Path(shutil.which("schemathesis") or "schemathesis")
    version = subprocess.run([str(st), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    runs = [_Run(tmp_path / role, role, st) for role in ("admin", "reader")]
    try:
        for run in runs:
            run.start()
        deadline = time.monotonic() + MAX_TIME_S
        for run in runs:
            run.wait(deadline)
        for run in runs:
            run.check(version)
    finally:
        for run in runs:
            if run.proc is not None and run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
            run.cluster.kill_all()
