"""schemathesis against a real node's openapi.json: every operation, positive and negative cases,
the coverage phase and stateful sequences along the document's links. Checked: no server error,
no response that violates the document, no undocumented status code or content type.

Bounded (``--max-examples``, ``--max-time``: 80 s in the suite, ``MOLENS_FUZZ_SECONDS`` for more) and seeded: a failure prints the seed and
schemathesis's ``st replay`` ids. Callbacks: the node only admits 127.0.0.0/8 (its callback host
policy), so whatever URLs the fuzzer invents, nothing leaves this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import urllib3

from .conftest import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("MOLENS_FUZZ_SEED", "20261201"))
MAX_TIME_S = int(os.environ.get("MOLENS_FUZZ_SECONDS", "80"))
"""The suite's share of the 20-minute CI budget; ``MOLENS_FUZZ_SECONDS=900`` for a deeper run."""
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.mark.timeout(MAX_TIME_S + 240)
def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_document(tmp_path: Path) -> None:
    st = Path(sys.executable).with_name("schemathesis")
    if not st.exists():
        st = Path(shutil.which("schemathesis") or "schemathesis")
    extra = {"scheduler": {"callback_policy": {"allow_cidrs": ["127.0.0.0/8"]}}, "raft": {"tick_ms": 20}}
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
        # found by this fuzzing: a one-node cluster has nobody to hand leadership to (a 409, not a 503)
        r = http.request("POST", base + "/api/v1/cluster/transfer-leader")
        assert r.status == 409 and b'"field":"to"' in r.data, r.data
        cmd = [
            str(st), "run", f"{base}/api/v1/openapi.json", "--url", base,
            "--checks", CHECKS, "--phases", "examples,coverage,fuzzing,stateful",
            "--max-examples", "20", "--max-time", str(MAX_TIME_S), "--seed", str(SEED),
            "--workers", "1", "--no-color",  # 2 workers hit a CPython 3.11 compile() race in hypothesis (SystemError)
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=MAX_TIME_S + 120, cwd=tmp_path)
        summary = out.stdout[out.stdout.rfind("SUMMARY"):] if "SUMMARY" in out.stdout else out.stdout[-4000:]
        print(summary)
        assert out.returncode == 0, f"schemathesis seed={SEED}\n{out.stdout[-12000:]}\n{out.stderr[-2000:]}"
        assert node.running, node.tail()
        assert "Traceback" not in node.log_path.read_text(errors="replace"), node.tail(200)
    finally:
        c.kill_all()
