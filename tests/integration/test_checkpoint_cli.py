"""The ``mooncat-checkpoint`` CLI, run as a real subprocess against stores the test fills."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mooncat_checkpoint import Claimed, SyncCheckpointClient

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("mooncat-checkpoint")


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, module: bool = False) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "MOONCAT_CHECKPOINT_URL"}
    base["PYTHONPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "mooncat_checkpoint.cli"] if module or not SCRIPT.exists() else [str(SCRIPT)]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60,
        encoding="utf-8",
    )


def lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, fragment: str) -> None:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("mooncat-checkpoint"), proc.stderr
    assert fragment in proc.stderr, proc.stderr


def test_url_reports_the_effective_url_and_its_source(tmp_path: Path) -> None:
    assert lines(run_cli("url", cwd=tmp_path)) == [
        {"url": "file://./.mooncat/checkpoints", "source": "default", "backend": "file"}
    ]
    env = {"MOONCAT_CHECKPOINT_URL": "sqlite://./env.db"}
    assert lines(run_cli("url", cwd=tmp_path, env=env))[0] == {
        "url": "sqlite://./env.db", "source": "environment", "backend": "sqlite"
    }
    for args in (["--url", "memory://", "url"], ["url", "--url", "memory://"]):
        assert lines(run_cli(*args, cwd=tmp_path, env=env))[0]["source"] == "argument"
    assert_one_line_error(run_cli("--url", "ftp://x", "url", cwd=tmp_path), 2, "unknown checkpoint URL scheme")


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_list_get_reset_and_gc_on_a_real_store(backend: str, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store" if backend == "file" else f"sqlite://{tmp_path}/store.db"
    cp = SyncCheckpointClient(url)
    done = cp.claim("vision", "img-001", "run-1")
    assert isinstance(done, Claimed)
    cp.done("vision", "img-001", done.lease_token, {"count": 42}, "artifacts/1.png")
    failed = cp.claim("vision", "ünï 😀/../x", "run-2")
    assert isinstance(failed, Claimed)
    cp.fail("vision", "ünï 😀/../x", "boom", failed.lease_token)
    live = cp.claim("vision", "live", "run-3", 60_000)
    stale = cp.claim("vision", "stale", "run-4", 1)
    assert isinstance(live, Claimed) and isinstance(stale, Claimed)
    while time.time() * 1000 < stale.checkpoint.lease_until + 1:  # type: ignore[operator]
        time.sleep(0.001)

    out = run_cli("--url", url, "list", "vision", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert [r["key"] for r in lines(out)] == sorted(["img-001", "ünï 😀/../x", "live", "stale"])
    assert lines(out) == [r.to_dict() for r in cp.list("vision")]
    for token in (done.lease_token, live.lease_token, stale.lease_token):
        assert token not in out.stdout
    assert [r["key"] for r in lines(run_cli("list", "vision", "--status", "done", "--url", url, cwd=tmp_path))] == [
        "img-001"
    ]
    assert [r["key"] for r in lines(run_cli("--url", url, "list", "vision", "--expired", cwd=tmp_path))] == ["stale"]
    assert lines(run_cli("--url", url, "list", "empty_ns", cwd=tmp_path)) == []

    got = run_cli("--url", url, "get", "vision", "ünï 😀/../x", cwd=tmp_path)
    assert got.returncode == 0 and lines(got)[0]["error"] == "boom" and lines(got)[0]["key"] == "ünï 😀/../x"
    assert_one_line_error(run_cli("--url", url, "get", "vision", "nope", cwd=tmp_path), 1, "no record vision/'nope'")

    assert_one_line_error(
        run_cli("--url", url, "reset", "vision", "live", "--if-expired", cwd=tmp_path), 1, "not an expired claim"
    )
    ok = run_cli("--url", url, "reset", "vision", "stale", "--if-expired", cwd=tmp_path)
    assert ok.returncode == 0 and lines(ok) == [{"namespace": "vision", "key": "stale", "reset": True}]
    assert lines(run_cli("--url", url, "reset", "vision", "ünï 😀/../x", cwd=tmp_path))[0]["reset"] is True
    assert_one_line_error(run_cli("--url", url, "reset", "vision", "stale", cwd=tmp_path), 1, "no record")
    assert cp.get("vision", "ünï 😀/../x") is None

    nothing = {"removed": 0, "unreadable": 0, "unreadable_records": []}
    assert lines(run_cli("--url", url, "gc", cwd=tmp_path)) == [nothing]
    assert lines(run_cli("--url", url, "gc", "--older-than", "0", cwd=tmp_path)) == [nothing]  # claims only
    pruned = run_cli("--url", url, "gc", "--prune-finished-older-than", "0", cwd=tmp_path)
    assert lines(pruned) == [{**nothing, "removed": 1}]  # the done record
    assert [r.key for r in cp.list("vision")] == ["live"]
    cp.close()


def test_gc_collects_around_a_record_that_does_not_read_and_names_it(tmp_path: Path) -> None:
    """gc removes what it can, leaves the file that does not read, and reports it: counted and
    listed on stdout, named in one line on stderr; exit 0 (everything else was collected)."""
    url = f"file://{tmp_path}/store"
    cp = SyncCheckpointClient(url)
    stale = cp.claim("ns", "stale", lease_ms=1)
    assert isinstance(stale, Claimed) and isinstance(cp.claim("ns", "broken"), Claimed)
    cp.close()
    broken = tmp_path / "store" / "ns" / "broken.json"
    broken.write_text("{ not json")
    while time.time() * 1000 < stale.checkpoint.lease_until + 1:  # type: ignore[operator]
        time.sleep(0.001)
    out = run_cli("--url", url, "gc", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (report,) = lines(out)
    assert report["removed"] == 1 and report["unreadable"] == 1
    (bad,) = report["unreadable_records"]
    assert bad["namespace"] == "ns" and bad["key"] == "broken" and "broken.json" in bad["error"]
    assert out.stderr.count("\n") == 1 and "gc left 1 record(s) that do not read: ns/'broken'" in out.stderr
    assert broken.read_text() == "{ not json"


def test_errors_are_one_line_with_exit_2(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/s.db"
    assert_one_line_error(run_cli("--url", url, "list", "../x", cwd=tmp_path), 2, "invalid namespace '../x'")
    assert_one_line_error(run_cli("--url", url, "get", "a/b", "k", cwd=tmp_path), 2, "invalid namespace")
    assert_one_line_error(run_cli("--url", url, "list", cwd=tmp_path), 2, "required: NS")
    assert_one_line_error(run_cli("--url", url, "frobnicate", cwd=tmp_path), 2, "invalid choice")
    assert_one_line_error(run_cli("--url", url, "list", "ns", "--status", "odd", cwd=tmp_path), 2, "invalid choice")
    assert_one_line_error(run_cli("--url", url, "gc", "--older-than", "soon", cwd=tmp_path), 2, "milliseconds")
    (tmp_path / "file").write_text("x")
    assert_one_line_error(run_cli("--url", f"file://{tmp_path}/file/d", "list", "ns", cwd=tmp_path), 2, "not usable")
    assert_one_line_error(run_cli(cwd=tmp_path), 2, "required: COMMAND")


def test_reading_a_store_that_does_not_exist_says_so_and_creates_nothing(tmp_path: Path) -> None:
    """A mistyped path is not made into a new, empty store by get, list, reset or gc (exit 1, as
    for anything else not there); a path through a file stays an unusable store (exit 2)."""
    for url, path in ((f"sqlite://{tmp_path}/typo/dir/x.db", tmp_path / "typo"), (f"file://{tmp_path}/typo2", tmp_path / "typo2")):
        for args in (("get", "ns", "k"), ("list", "ns"), ("reset", "ns", "k"), ("gc",)):
            assert_one_line_error(run_cli("--url", url, *args, cwd=tmp_path), 1, "no store at")
        assert not path.exists()
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(run_cli("--url", f"file://{tmp_path}/afile", "list", "ns", cwd=tmp_path), 2,
                          "a file is in the way")
    url = f"sqlite://{tmp_path}/s.db"
    assert run_cli("--url", url, "gc", cwd=tmp_path).returncode == 1  # not made by gc either
    from mooncat_checkpoint import SyncCheckpointClient

    SyncCheckpointClient(url).claim("ns", "made")
    long_key = "k" * 120_000
    out = run_cli("--url", url, "get", "ns", long_key, cwd=tmp_path)
    assert_one_line_error(out, 1, "... (120000 characters)")
    assert len(out.stderr) < 300  # the key is cut, not echoed whole


def test_help_is_available_everywhere(tmp_path: Path) -> None:
    for args in ([], ["url"], ["list"], ["get"], ["reset"], ["gc"]):
        out = run_cli(*args, "--help", cwd=tmp_path)
        assert out.returncode == 0 and out.stdout.startswith("usage: mooncat-checkpoint"), (args, out.stderr)
    assert "--if-expired" in run_cli("reset", "--help", cwd=tmp_path).stdout
    assert "--older-than" in run_cli("gc", "--help", cwd=tmp_path).stdout
    assert "--prune-finished-older-than" in run_cli("gc", "--help", cwd=tmp_path).stdout


def test_python_dash_m_runs_the_same_cli(tmp_path: Path) -> None:
    out = run_cli("--url", "memory://", "list", "ns", cwd=tmp_path, module=True)
    assert out.returncode == 0 and out.stdout == ""
    out = subprocess.run(
        [sys.executable, "-m", "mooncat_checkpoint", "url"], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MOONCAT_CHECKPOINT_URL": "memory://"}, timeout=60,
    )
    assert out.returncode == 0 and json.loads(out.stdout)["url"] == "memory://"
