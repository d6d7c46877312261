"""Each deliberate product bug of tests/sim/mutants.py is caught by its simulation within a few seeds
(``scripts/sim --scheduler --mutants`` and ``scripts/sim --mutants`` hunt them over 2,000), and the
product's code is itself again afterwards."""

from __future__ import annotations

import logging

import pytest

from molens.actors.monitor import FireWatch
from tests.sim.mutants import MUTANTS, RAFT_MUTANTS, Mutant, hunt

SEEDS = {
    "lost-fire-never-redispatched": 1, "amo-resent-after-loss": 1, "stale-result-applied": 6,
    "expiry-skips-one": 1, "held-grace-ignored": 3, "catchup-one-too-many": 1, "deadline-without-timeout": 1,
    "pause-ignored": 2, "window-edge-skipped": 9, "reach-lags-read": 2, "lost-worker-fires-kept": 2, "worker-death-unnoticed": 2, "not-sent-counted": 3,
    "boot-trusts-store": 2, "boot-marker-not-durable": 4, "snapshot-dir-not-synced": 3, "snapshot-bytes-not-synced": 3,
}
"""Seeds tried per mutant: up to the first that caught it (seeds from 0)."""


def test_every_mutant_has_a_budget_and_there_are_at_least_eight() -> None:
    assert sorted(SEEDS) == sorted(m.name for m in MUTANTS + RAFT_MUTANTS) and len(MUTANTS) >= 8


@pytest.mark.sim
@pytest.mark.parametrize("mutant", MUTANTS + RAFT_MUTANTS, ids=lambda m: m.name)
def test_the_simulation_catches_the_mutant(mutant: Mutant, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="molens")
    assert hunt(mutant, range(SEEDS[mutant.name])) is not None, f"{mutant.name} ({mutant.what}) not caught"


def test_a_mutant_is_undone_after_its_block() -> None:
    before = FireWatch.due
    with MUTANTS[0].applied():
        assert FireWatch.due is not before
    assert FireWatch.due is before
