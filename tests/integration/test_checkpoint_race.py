"""Cross-process claims on one store: 8 real processes race on the same 200 keys (file, SQLite, and
real Redis and PostgreSQL servers started for the module).

Two races in each run:
* ``fresh``: nobody has the keys; every process claims all 200 in its own order. Exactly one
  process may win each key (fence 1 on the servers; on file and SQLite above the namespace's high
  mark), and the record must end done by that winner.
* ``stale``: the test claimed the keys first with a 1 ms lease and kept the tokens. Each process
  claims every key (winning some: the expired claim's fence + 1) and right after, whether it won or not, tries ``done``
  with the expired owner's token. Each of those 1,600 stale writes must raise ``LeaseLostError``,
  and every record must end done by its new owner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mooncat_checkpoint import CheckpointStatus, Claimed, LeaseLostError, SyncCheckpointClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROCS = 8
KEYS = [f"key-{i:03d}" for i in range(200)]

WORKER = r"""
import json, random, sys
from mooncat_checkpoint import Claimed, LeaseLostError, SyncCheckpointClient

url, me, stale_file = sys.argv[1], sys.argv[2], sys.argv[3]
stale = json.load(open(stale_file))
keys = sorted(stale)
cp = SyncCheckpointClient(url)
print("ready", flush=True)
sys.stdin.readline()  # the start gun: every process is up before anyone claims

report = {"fresh": {}, "stale": {}, "stale_accepted": 0, "stale_refused": 0}
order = keys[:]
random.Random(me).shuffle(order)
for key in order:
    c = cp.claim("fresh", key, me, 60_000)
    if isinstance(c, Claimed):
        report["fresh"][key] = c.fence
        cp.done("fresh", key, c.lease_token, {"by": me})
random.Random(me + "stale").shuffle(order)
for key in order:
    c = cp.claim("stale", key, me, 60_000)
    try:
        cp.done("stale", key, stale[key], {"by": "the expired owner"})
        report["stale_accepted"] += 1
    except LeaseLostError:
        report["stale_refused"] += 1
    if isinstance(c, Claimed):
        report["stale"][key] = c.fence
        cp.done("stale", key, c.lease_token, {"by": me})
print(json.dumps(report), flush=True)
"""


def _wait_until_expired(cp: SyncCheckpointClient) -> None:
    deadline = time.monotonic() + 10
    while len(cp.list("stale", expired=True)) < len(KEYS):  # on the store's clock
        assert time.monotonic() < deadline
        time.sleep(0.001)


@pytest.mark.parametrize("backend", ["file", "sqlite", "redis", "postgresql"])
def test_eight_processes_one_winner_per_key_and_no_stale_overwrite(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend in ("redis", "postgresql"):
        url = request.getfixturevalue("server_urls")[backend]
    else:
        url = f"file://{tmp_path}/store" if backend == "file" else f"sqlite://{tmp_path}/store.db"
    cp = SyncCheckpointClient(url)
    stale_tokens, stale_fences = {}, {}
    for key in KEYS:
        c = cp.claim("stale", key, "expired-owner", 1)
        assert isinstance(c, Claimed)
        stale_tokens[key], stale_fences[key] = c.lease_token, c.fence
    stale_file = tmp_path / "stale.json"
    stale_file.write_text(json.dumps(stale_tokens))
    _wait_until_expired(cp)

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, f"worker-{n}", str(stale_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            cwd=tmp_path,
        )
        for n in range(PROCS)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read()  # type: ignore[union-attr]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    for race in ("fresh", "stale"):
        winners: dict[str, str] = {}
        fences: dict[str, int] = {}
        for n, report in enumerate(reports):
            for key, won_fence in report[race].items():
                assert key not in winners, f"{race}: {key} won by {winners[key]} and worker-{n}"
                if race == "stale":
                    assert won_fence == stale_fences[key] + 1
                elif backend in ("redis", "postgresql"):  # a counter per key
                    assert won_fence == 1
                else:  # file, SQLite: above the namespace's high mark (file: from a block of each process)
                    assert won_fence >= 1
                winners[key], fences[key] = f"worker-{n}", won_fence
        assert sorted(winners) == KEYS, race  # exactly one winner per key
        for rec in cp.list(race):
            assert rec.status is CheckpointStatus.DONE and rec.fence == fences[rec.key]
            assert rec.result == {"by": winners[rec.key]} and rec.owner_run_id == winners[rec.key]
    assert sum(r["stale_accepted"] for r in reports) == 0
    assert sum(r["stale_refused"] for r in reports) == PROCS * len(KEYS)
    with pytest.raises(LeaseLostError):
        cp.done("stale", KEYS[0], stale_tokens[KEYS[0]], "too late")
    # Neither backend left a claim behind or lost a record.
    assert len(cp.list("fresh", "done")) == len(cp.list("stale", "done")) == len(KEYS)
    cp.close()
