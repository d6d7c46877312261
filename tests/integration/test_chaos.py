"""60 s of ``scripts/chaos`` (tests/integration/chaos.py) on a real 3-node cluster: kill -9 of the
leader and of followers, SIGSTOP of the leader, graceful restarts, under delayed at_least_once,
at_most_once and ACK tasks and 2 s periodic tasks. The delivery promises hold, nothing is left
stuck, the replicas end identical, and a 2 s periodic task never waits more than 6 s for its next
occurrence (docs/architecture.md#lost-workers: a lost worker's fires are settled in seconds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import chaos


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_60_s_chaos_run_keeps_every_delivery_promise_and_periodic_tasks_moving(tmp_path: Path) -> None:
    report = chaos.run(60, seed=15, root=tmp_path)
    print(report.line(), "faults:", ",".join(report.faults), "gap at:", report.periodic_max_gap_at)
    assert len(report.faults) >= 5
    assert len(report.created) > 1_000
    assert report.lost == [], f"at_least_once tasks never delivered: {report.lost[:10]}"
    assert report.amo_twice == [], f"at_most_once tasks delivered twice: {report.amo_twice[:10]}"
    assert report.stuck == [], f"tasks stuck in pending/firing/awaiting_ack: {report.stuck[:10]}"
    assert report.digests_equal
    assert report.periodic_max_gap_ms <= 6_000, f"a 2 s periodic task waited {report.periodic_max_gap_ms} ms"
