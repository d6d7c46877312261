"""The whole-scheduler simulation (tests/sim/scheduler_sim.py) over 200 seeds in CI."""

from __future__ import annotations

import pytest

from tests.sim.scheduler_sim import Violation, run_seed

SEEDS = 200
REGRESSION_SEEDS = [0, 5, 27, 41, 130, 136, 666]
"""Seeds that once failed (each a checker bug, kept so the fixed checks stay exercised)."""


@pytest.mark.sim
def test_scheduler_promises_hold_for_200_seeds() -> None:
    failures: list[str] = []
    delivered = 0
    for seed in sorted(set(range(SEEDS)) | set(REGRESSION_SEEDS)):
        try:
            delivered += len(run_seed(seed).deliveries)
        except Violation as e:
            failures.append(str(e)[:300])
    assert not failures, "\n".join(failures)
    assert delivered > SEEDS * 50  # the runs really fire
