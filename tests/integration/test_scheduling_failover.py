"""3-node failover under load at full size: 20,000 at_least_once + 2,000
at_most_once delayed tasks due over 60 s, the leader kill -9'd twice (the second time the new one).
Every at_least_once task is delivered at least once; no at_most_once fire id is delivered twice.
Duplicates and lateness are printed (``-s``); ``scripts/bench/failover.py --full`` runs the same
scenario (``failover_load.run``) as a benchmark. About 70 s here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import failover_load
from .conftest import Cluster
from .recording_receiver import RecordingReceiver


@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kill_the_leader_twice_under_load_loses_no_at_least_once_fire_and_repeats_no_at_most_once_fire(
    make_cluster: object, receiver: RecordingReceiver
) -> None:
    c: Cluster = make_cluster(3, extra=failover_load.SETTINGS, state_machine="tasks")  # type: ignore[operator]
    c.leader(timeout=30)
    report = failover_load.run(c, receiver, n_alo=20_000, n_amo=2_000, spread_s=60)
    print("failover load:", report.summary())
    assert report.alo_missing == [], f"at_least_once tasks never delivered: {report.alo_missing[:10]}"
    assert report.amo_twice == [], f"at_most_once fire ids delivered twice: {report.amo_twice[:10]}"
    assert report.statuses["done"] >= 20_000
