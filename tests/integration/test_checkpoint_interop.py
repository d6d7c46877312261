"""Cross-implementation: the TypeScript ``mooncat-checkpoint`` 0.5.1 and ours share one file store.

The original (installed by scripts/test into ``$MOONCAT_CHECKPOINT_NODE_DIR``) runs under node with
``interop/original.mjs``. Every key kind is tried: a safe name, the longest safe name (128), a longer
one, unicode, ``..``, one that looks like the original's hashed names, one with a ``sha256-`` prefix.
* The original writes done / live-claimed / expired records; ours reads and lists them, sees done
  as done (with its result) and a live lease as busy, takes over an expired claim, and refuses the
  original's stale token; the original then refuses ours too.
* The reverse: ours writes, the original reads done as done and a live lease as busy, and takes
  over only expired claims.
* Fences never go backwards for a key when the original's ``reset`` or ``gc`` deletes its record
  in between (file; the SQLite store with the original's DELETE statements, copied verbatim).
* ``mooncat-checkpoint gc --older-than 0`` removes exactly what the original's CLI removes on a copy
  of the same store: the expired claims, never a done or failed record or a live claim; both leave a
  file that does not read and a claim that names no lease.
* Both claim a claimed record that names no lease (``leaseUntil`` absent or null).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mooncat_checkpoint import Busy, CheckpointStatus, Claimed, Done, LeaseLostError, SyncCheckpointClient
from mooncat_checkpoint.naming import storage_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("interop") / "original.mjs"
VERSION = "0.5.1"
KEYS = [
    "img-001.png",
    "k" * 128,
    "L" * 300,
    "ünïcödé/键 with spaces",
    "..",
    "sha256-" + "0" * 32,
    "sha256-prefixed",
]


@pytest.fixture(scope="module")
def original() -> Path:
    """The original package's directory; scripts/test installs it (pinned) into its cache folder."""
    base = Path(os.environ.get("MOONCAT_CHECKPOINT_NODE_DIR", ROOT / ".cache" / f"npm-mooncat-checkpoint-{VERSION}"))
    pkg = base / "node_modules" / "mooncat-checkpoint"
    if not (pkg / "package.json").is_file():
        pytest.fail(f"mooncat-checkpoint@{VERSION} (npm) is not installed in {base}: run scripts/test, which installs it")
    assert json.loads((pkg / "package.json").read_text())["version"] == VERSION
    if shutil.which("node") is None:
        pytest.fail("node is not installed: the cross-implementation test needs Node.js")
    return pkg


def run_original(pkg: Path, url: str, command: str, *extra: str) -> dict[str, Any]:
    out = subprocess.run(
        ["node", str(SCRIPT), str(pkg), url, command, json.dumps(KEYS), *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def _wait_expired(cp: SyncCheckpointClient, ns: str) -> None:
    deadline = time.monotonic() + 10
    while any(not r.expired(time.time_ns() // 1_000_000) for r in cp.list(ns)):
        assert time.monotonic() < deadline
        time.sleep(0.002)


def test_ours_reads_claims_lists_and_takes_over_what_the_original_wrote(original: Path, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    wrote = run_original(original, url, "write")
    cp = SyncCheckpointClient(url)
    for ns, status in (("done", "done"), ("claimed", "claimed"), ("expired", "claimed")):
        listed = cp.list(ns)
        assert [r.key for r in listed] == sorted(KEYS), ns
        assert all(r.status is CheckpointStatus(status) and r.owner_run_id == "node" for r in listed)
    _wait_expired(cp, "expired")
    fences: dict[str, int] = {}
    for key in KEYS:
        done = cp.claim("done", key, "py")
        assert isinstance(done, Done) and done.checkpoint.key == key
        assert done.checkpoint.result == {"by": "node", "key": key}
        busy = cp.claim("claimed", key, "py")
        assert isinstance(busy, Busy) and busy.checkpoint.owner_run_id == "node", key
        with pytest.raises(LeaseLostError):
            cp.done("claimed", key, "f" * 32)  # not the original's token: refused
        took = cp.claim("expired", key, "py")
        assert isinstance(took, Claimed), key
        assert took.checkpoint.attempts == 2
        fences[key] = took.fence
        with pytest.raises(LeaseLostError):
            cp.done("expired", key, wrote["tokens"]["expired"][key])  # the overtaken original's token
        cp.done("expired", key, took.lease_token, {"by": "py"})
    assert len(set(fences.values())) == len(KEYS)  # no fence handed out twice
    assert {r.key: r.result for r in cp.list("expired", "done")} == {key: {"by": "py"} for key in KEYS}
    # The original sees our results as done; its own live claims stay busy for it too.
    seen = run_original(original, url, "read")
    for key in KEYS:
        assert seen["claim"]["expired"][key] == {"kind": "done", "result": {"by": "py"}, "owner": "py"}
        assert seen["claim"]["done"][key]["kind"] == "done"
        assert seen["claim"]["claimed"][key]["kind"] == "busy"
    # The original's token for a claim ours took over is refused by the original as well.
    stale_tokens = {}
    for key in KEYS:
        c = cp.claim("stale", key, "py", 600_000)
        assert isinstance(c, Claimed)
        stale_tokens[key] = "0" * 32
    assert run_original(original, url, "stale", json.dumps(stale_tokens)) == {"refused": len(KEYS), "accepted": 0}
    cp.close()


def test_the_original_reads_ours_done_as_done_and_a_live_lease_as_busy(original: Path, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    cp = SyncCheckpointClient(url)
    for key in KEYS:
        c = cp.claim("done", key, "py")
        assert isinstance(c, Claimed)
        cp.done("done", key, c.lease_token, {"by": "py", "key": key})
        assert isinstance(cp.claim("claimed", key, "py", 600_000), Claimed)
        assert isinstance(cp.claim("expired", key, "py", 1), Claimed)
    _wait_expired(cp, "expired")
    seen = run_original(original, url, "read")
    for ns in ("done", "claimed", "expired"):
        assert seen["list"][ns] == sorted(KEYS), ns
    for key in KEYS:
        assert seen["get"]["done"][key] == {"key": key, "status": "done", "result": {"by": "py", "key": key},
                                            "leaseUntil": None}
        assert seen["claim"]["done"][key] == {"kind": "done", "result": {"by": "py", "key": key}, "owner": "py"}
        live = seen["get"]["claimed"][key]
        assert live["status"] == "claimed" and live["leaseUntil"] > time.time() * 1000 + 500_000
        assert seen["claim"]["claimed"][key]["kind"] == "busy" and seen["claim"]["claimed"][key]["owner"] == "py"
        assert seen["claim"]["expired"][key]["kind"] == "claimed"  # an expired lease is taken over
    # After the original took over and finished the expired ones, ours sees them done by the original
    # and keeps fences monotonic for any later claim.
    for key in KEYS:
        rec = cp.get("expired", key)
        assert rec is not None and rec.status is CheckpointStatus.DONE and rec.result == {"by": "node", "key": key}
        assert cp.get("claimed", key) is not None
        assert isinstance(cp.claim("claimed", key), Busy)
    cp.close()


def _claim_fences(cp: SyncCheckpointClient, lease_ms: int) -> dict[str, int]:
    fences = {}
    for key in KEYS:
        c = cp.claim("fence", key, "py", lease_ms)
        assert isinstance(c, Claimed), key
        fences[key] = c.fence
    return fences


def test_fences_never_go_back_after_the_originals_reset_and_gc_file(original: Path, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    cp = SyncCheckpointClient(url)
    first = _claim_fences(cp, 600_000)
    assert run_original(original, url, "reset") == {"reset": len(KEYS)}
    assert cp.list("fence") == []
    second = _claim_fences(cp, 1)  # after the original's reset
    assert all(second[k] > first[k] for k in KEYS), (first, second)
    _wait_expired(cp, "fence")
    assert run_original(original, url, "gc") == {"removed": len(KEYS)}
    assert cp.list("fence") == []
    third = _claim_fences(cp, 600_000)  # after the original's gc
    assert all(third[k] > second[k] for k in KEYS), (second, third)
    cp.close()


def test_fences_never_go_back_after_the_originals_reset_and_gc_sqlite(tmp_path: Path) -> None:
    """The original's SQLite backend needs a native module not built here: its statements, verbatim."""
    path = tmp_path / "store.db"
    cp = SyncCheckpointClient(f"sqlite://{path}")
    first = _claim_fences(cp, 600_000)
    with sqlite3.connect(path) as db:  # the original's reset(ns, key), for every key
        for key in KEYS:
            db.execute("DELETE FROM checkpoints WHERE namespace=? AND storage_key=?", ("fence", storage_name(key)))
    assert cp.list("fence") == []
    second = _claim_fences(cp, 1)
    assert all(second[k] > first[k] for k in KEYS), (first, second)
    last = max(r.lease_until or 0 for r in cp.list("fence"))
    while time.time_ns() // 1_000_000 <= last:  # the original's gc takes leases that ended before now
        time.sleep(0.001)
    with sqlite3.connect(path) as db:  # the original's gc({ olderThan: 0 })
        db.execute("DELETE FROM checkpoints WHERE status='claimed' AND lease_until < ?", (time.time_ns() // 1_000_000,))
    assert cp.list("fence") == []
    third = _claim_fences(cp, 600_000)
    assert all(third[k] > second[k] for k in KEYS), (second, third)
    cp.close()


def _store_for_gc(url: str) -> None:
    """done, failed, live-claimed and expired-claimed records in two namespaces."""
    cp = SyncCheckpointClient(url)
    for ns in ("a", "b"):
        for key in KEYS:
            d = cp.claim(ns, "done-" + key, "py")
            assert isinstance(d, Claimed)
            cp.done(ns, "done-" + key, d.lease_token, {"k": key})
            f = cp.claim(ns, "failed-" + key, "py")
            assert isinstance(f, Claimed)
            cp.fail(ns, "failed-" + key, "boom", f.lease_token)
            assert isinstance(cp.claim(ns, "live-" + key, "py", 600_000), Claimed)
            assert isinstance(cp.claim(ns, "expired-" + key, "py", 1), Claimed)
    for ns in ("a", "b"):
        deadline = time.monotonic() + 10
        while len(cp.list(ns, expired=True)) < len(KEYS):
            assert time.monotonic() < deadline
            time.sleep(0.002)
    cp.close()


def test_gc_older_than_0_removes_what_the_originals_cli_removes(original: Path, tmp_path: Path) -> None:
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    _store_for_gc(f"file://{ours_dir}")
    # a file that does not read, and a claim that names no lease: both libraries' gc leave them
    (ours_dir / "a" / "broken.json").write_text("{ not json")
    (ours_dir / "b" / "no-lease.json").write_text(json.dumps(_claim_without_lease("b", "no-lease", "absent")))
    shutil.copytree(ours_dir, theirs_dir, symlinks=True)
    theirs = subprocess.run(
        ["node", str(original / "dist" / "cli.js"), "gc", "--older-than", "0", "--url", f"file://{theirs_dir}"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert theirs.returncode == 0, theirs.stderr
    ours = subprocess.run(
        [sys.executable, "-m", "mooncat_checkpoint", "gc", "--older-than", "0", "--url", f"file://{ours_dir}"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )
    assert ours.returncode == 0, ours.stderr
    report = json.loads(ours.stdout)
    assert report["removed"] == 2 * len(KEYS) and report["unreadable"] == 1
    assert [(u["namespace"], u["key"]) for u in report["unreadable_records"]] == [("a", "broken")]
    assert f"清理了 {2 * len(KEYS)} 条" in theirs.stdout, theirs.stdout  # the original's count, the same
    left = {d: sorted(str(p.relative_to(d)) for p in d.rglob("*.json")) for d in (ours_dir, theirs_dir)}
    assert left[ours_dir] == left[theirs_dir]
    cp = SyncCheckpointClient(f"file://{ours_dir}")
    (ours_dir / "a" / "broken.json").unlink()
    assert sorted(r.key for r in cp.list("a")) == sorted(p + k for p in ("done-", "failed-", "live-") for k in KEYS)
    assert sorted(r.key for r in cp.list("b")) == sorted(
        ["no-lease", *(p + k for p in ("done-", "failed-", "live-") for k in KEYS)]
    )
    cp.close()


def _claim_without_lease(ns: str, key: str, lease: str) -> dict[str, Any]:
    """A claimed record in the original's format that names no lease: ``leaseUntil`` absent or null."""
    doc: dict[str, Any] = {
        "namespace": ns, "key": key, "status": "claimed", "ownerRunId": "by-hand", "leaseToken": "f" * 32,
        "leaseUntil": None, "result": None, "resultRef": None, "attempts": 1, "createdAt": 1_000, "updatedAt": 1_000,
    }
    if lease == "absent":
        del doc["leaseUntil"]
    return doc


def test_both_libraries_claim_a_record_that_names_no_lease(original: Path, tmp_path: Path) -> None:
    """The original's claim is busy only while ``leaseUntil && leaseUntil > now``, so it takes over a
    claimed record without a lease (absent or null); ours takes it over the same way."""
    keys = {"absent": "lease-absent", "null": "lease-null"}
    for side in ("ours", "theirs"):
        ns_dir = tmp_path / side / "ns"
        ns_dir.mkdir(parents=True)
        for lease, key in keys.items():
            (ns_dir / f"{key}.json").write_text(json.dumps(_claim_without_lease("ns", key, lease)))
    code = (
        "const { CheckpointClient } = await import(process.argv[1]);"
        "const cp = new CheckpointClient({ url: process.argv[2] });"
        "const out = {};"
        "for (const k of JSON.parse(process.argv[3])) {"
        "  const c = await cp.claim('ns', k, { ownerRunId: 'node' });"
        "  out[k] = { kind: c.kind, attempts: c.checkpoint.attempts, token: c.leaseToken };"
        "}"
        "await cp.close(); console.log(JSON.stringify(out));"
    )
    theirs = subprocess.run(
        ["node", "--input-type=module", "-e", code, (original / "dist" / "index.js").as_uri(),
         f"file://{tmp_path / 'theirs'}", json.dumps(sorted(keys.values()))],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert theirs.returncode == 0, theirs.stderr
    for got in json.loads(theirs.stdout).values():
        assert got["kind"] == "claimed" and got["attempts"] == 2 and got["token"] != "f" * 32
    cp = SyncCheckpointClient(f"file://{tmp_path / 'ours'}")
    for key in keys.values():
        c = cp.claim("ns", key, "py")
        assert isinstance(c, Claimed), c
        assert c.checkpoint.attempts == 2 and c.lease_token != "f" * 32
    cp.close()
