"""A failing seed must replay exactly: same seed, same trace, whatever the hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim.cli import main
from tests.sim.raft_harness import run_seed

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.sim


def test_same_seed_gives_the_same_trace() -> None:
    a: list[str] = []
    b: list[str] = []
    run_seed(5, 5, trace=a.append)
    run_seed(5, 5, trace=b.append)
    assert a == b and len(a) > 1000


def test_replay_does_not_depend_on_the_hash_seed() -> None:
    outs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        p = subprocess.run(
            [sys.executable, "-m", "tests.sim.cli", "--seed", "3", "--nodes", "5", "--trace"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
        )
        outs.append([ln for ln in p.stdout.splitlines() if not ln.startswith("ran ")])
    assert outs[0] == outs[1]
    assert outs[0][-1] == "sim: seeds=1 failures=0"


def test_cli_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "4", "--start", "100"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "sim: seeds=4 failures=0"
    assert main(["--seeds", "1", "--unsafe", "vote_before_persist", "--nodes", "3"]) == 1
    out = capsys.readouterr().out
    assert "replay: scripts/sim --nodes 3 --seed 0 --trace" in out
    assert out.splitlines()[-1] == "sim: seeds=1 failures=1"


def test_seed_3227_stale_ack_for_replaced_unpersisted_entries() -> None:
    """Found by the leader-churn faults: a follower acked entries of an older-term leader, a newer
    leader replaced them before they were persisted, and the old ack still went out after the save
    (``durability: n4 acks 28 but persisted only 23``). Fixed in ``RaftCore._append``."""
    run_seed(3227, 3)  # raises Violation on the unfixed core


@pytest.mark.parametrize("seed", [5017, 6944])
def test_candidate_behind_in_terms_learns_the_term_from_a_refusal(seed: int) -> None:
    """Found by the leader-churn faults with pre-vote off: a node with a stale configuration kept
    raising the others' term without ever messaging the one up-to-date candidate, whose requests
    of an older term were ignored -- no leader after healing. A refused vote now carries the
    refuser's term. Fixed in ``RaftCore.step``."""
    run_seed(seed, 3)


@pytest.mark.parametrize("seed", [3869, 4826, 7035])
def test_vote_granted_in_a_term_left_before_persisting_is_not_sent(seed: int) -> None:
    """Found by the leader-churn faults at 5 nodes: a grant waiting for persistence went out after
    a newer term arrived, so the persisted HardState no longer recorded it. Such grants are dropped
    when the term moves on (``RaftCore._reset``)."""
    run_seed(seed, 5)


def test_seed_7301131_a_snapshot_being_sent_outlives_the_pruning_of_its_file() -> None:
    """Found by a sweep of unseen seeds: the leader recorded newer snapshots while it sent a follower
    an older one, pruning its file, and the next chunk reopened the file by name
    (``FileNotFoundError`` on the Raft thread). Fixed in ``LmdbLog`` (a replaced snapshot's stream
    stays open until no transfer needs it)."""
    run_seed(7301131, 5)  # raises Violation on the unfixed log


def test_a_product_exception_fails_its_seed_with_a_replay_line_and_the_sweep_goes_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seed in which the product raises (not a promise checked, a crash) is a failing seed like
    any other: printed with its replay line, and the next seed still runs."""
    from molens.raft.core import RaftCore

    calls = {"n": 0}
    real_tick = RaftCore.tick

    def tick(self: RaftCore) -> None:
        calls["n"] += 1
        if calls["n"] % 500 == 0:
            raise OSError("a planted fault")
        real_tick(self)

    monkeypatch.setattr(RaftCore, "tick", tick)
    assert main(["--seeds", "2", "--start", "100"]) == 1
    out = capsys.readouterr().out
    assert out.count("OSError: a planted fault") == 2
    assert "replay: scripts/sim --nodes 3 --seed 100 --trace" in out
    assert "replay: scripts/sim --nodes 5 --seed 101 --trace" in out
    assert out.splitlines()[-1] == "sim: seeds=2 failures=2"
