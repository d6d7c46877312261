"""docs/observability.md's metrics table is the code's (scripts/metrics_table.py writes it from
``molens.web.metrics.catalogue``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_metrics_table_is_the_one_the_code_writes() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "metrics_table.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr

