"""schemathesis against a real node with a bearer key (the bootstrap admin's, then a reader's): every check it has, every phase (the
document's examples, coverage, fuzzing with positive and negative cases, stateful sequences along
the document's links), 100 examples per operation (``MOLENS_FUZZ_EXAMPLES``), and no failure of
any kind allowed. The run is bounded by examples, not by a clock (about two minutes here).

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


@pytest.mark.timeout(MAX_TIME_S + 120)
@pytest.mark.parametrize("role", ["admin", "reader"])
def test_schemathesis_all_checks_all_phases_finds_nothing(tmp_path: Path, role: str) -> None:
    """As the bootstrap admin key, and as a reader key of every namespace (its writes answer 403)."""
    st = Path(sys.executable).with_name("schemathesis")
    if not st.exists():
        st = Path(shutil.which("schemathesis") or "schemathesis")
    version = subprocess.run([str(st), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    extra = {
        "scheduler": {"callback_policy": {"allow_cidrs": ["127.0.0.0/8"]}},
        "raft": {"tick_ms": 20},
        "http": {"auth_token": TOKEN},
    }
    c = Cluster(tmp_path, 1, extra=extra, state_machine="tasks")
    try:
        c.start()
        node = c.leader(timeout=30)
        base = f"http://127.0.0.1:{node.settings['http']['port']}"
        http = urllib3.PoolManager(retries=False)

        def ready() -> bool | None:
            try:
                return http.request("GET", base + "/readyz").status == 200 or None
            except urllib3.exceptions.HTTPError:
                return None

        wait_for(ready, 30, "the node's API")
        key = TOKEN
        if role != "admin":
            r = http.request("POST", base + "/api/v1/keys", json={"name": "fuzz", "role": role, "namespaces": ["*"]},
                             headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status == 201, r.data
            key = r.json()["secret"]
        cmd = [
            str(st), "--config-file", str(CONFIG), "run", f"{base}/api/v1/openapi.json", "--url", base,
            "-H", f"Authorization: Bearer {key}",
            "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful", "--mode", "all",
            "--max-examples", str(EXAMPLES), "--seed", str(SEED),
            "--workers", "1", "--no-color",  # 2 workers hit a CPython 3.11 compile() race in hypothesis (SystemError)
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=MAX_TIME_S, cwd=tmp_path)
        summary = out.stdout[out.stdout.rfind("SUMMARY"):] if "SUMMARY" in out.stdout else out.stdout[-4000:]
        cases = re.search(r"(\d+) generated", summary)
        phases = "; ".join(m.group(0).strip() for m in re.finditer(r"\w+ \(in [0-9.]+s\)", out.stdout))
        print(f"{version}; seed {SEED}; {cases.group(1) if cases else '?'} cases generated; {phases}\n{summary}")
        assert out.returncode == 0, f"schemathesis seed={SEED}\n{out.stdout[-15000:]}\n{out.stderr[-2000:]}"
        assert cases is not None, summary
        assert node.running, node.tail()
        assert "Traceback" not in node.log_path.read_text(errors="replace"), node.tail(200)
    finally:
        c.kill_all()
