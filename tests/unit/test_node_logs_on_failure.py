"""The suite's failure report for tests that ran nodes (tests/conftest.py, ``pytest_runtest_makereport``):
the tail of each node log written while the test ran, and of no other."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.integration.conftest import NodeProc, node_logs_since

_SETTINGS = {"admin": {"bind_addr": "127.0.0.1:1"}}


def test_the_report_shows_the_tails_of_the_logs_written_since_the_test_began(tmp_path: Path) -> None:
    old, new = NodeProc("old1", tmp_path, _SETTINGS), NodeProc("new1", tmp_path, _SETTINGS)
    old.log_path.write_text("before the test\n")
    os.utime(old.log_path, (time.time() - 60, time.time() - 60))
    new.log_path.write_text("".join(f"line {i}\n" for i in range(100)))
    silent = NodeProc("silent1", tmp_path, _SETTINGS)  # never started: no log at all
    text = node_logs_since(time.time() - 5, lines=3)
    assert f"--- new1 ({new.log_path})\nline 97\nline 98\nline 99" in text
    assert "old1" not in text and "before the test" not in text and silent.node_id not in text
