"""Each deliberate product bug of tests/sim/mutants.py is caught by its simulation within a few seeds
(``scripts/sim --scheduler --mutants`` and ``scripts/sim --mutants`` hunt them over 2,000), and the
product's code is itself again afterwards."""

from __future__ import annotations

import logging

import pytest

from molens.actors.monitor import FireWatch
from tests.sim.mutants import MUTANTS, RAFT_MUTANTS, Mutant, hunt

SEEDS = {
    "lost-fire-never-redispatched": 5, "amo-resent-after-loss": 3, "stale-result-applied": 56, "expiry-skips-one": 3,
    "held-grace-ignored": 10, "catchup-one-too-many": 3, "deadline-without-timeout": 3, "pause-ignored": 4,
    "resume-keeps-missed": 4, "resume-mid-occurrence-keeps-missed": 7, "resume-probes-ack-at-once": 3,
    "resume-drops-silently": 4, "trigger-allow-planned": 38, "trigger-due-after-interval": 4,
    "trigger-keeps-schedule": 4, "delete-keeps-task": 3, "delete-keeps-idempotency-key": 3,
    "delete-keeps-fire-record": 4, "delete-keeps-history": 3, "update-delayed-keeps-time": 3,
    "update-of-nothing-bumps-version": 7, "update-restarts-attempts": 12, "window-edge-skipped": 11,
    "reach-lags-read": 4, "lost-worker-fires-kept": 9, "worker-death-unnoticed": 6, "not-sent-counted": 5,
    "boot-trusts-store": 4, "boot-marker-not-durable": 6, "snapshot-dir-not-synced": 5,
    "snapshot-bytes-not-synced": 5,
}
"""Seeds tried per mutant: up to the first that caught it (seeds from 0), and two more, so that a change
that moves the simulation's random draws does not end a budget one seed short."""


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
