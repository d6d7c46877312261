"""120 s of ``scripts/chaos`` (tests/integration/chaos.py) with a random seed and every fault of the
nemesis (tests/integration/nemesis.py) on a real 3-node cluster whose nodes run in network namespaces:
kill -9, SIGSTOP, graceful restarts, partitions (minority, bridge, one-way), clock jumps and skew, a
full disk and a slow disk, under delayed at_least_once, at_most_once and ACK tasks and 2 s periodic
tasks. The delivery promises hold, nothing is left stuck, the replicas end identical, outside
partitions a 2 s periodic task never waits more than 6 s for its next occurrence
(docs/architecture.md#lost-workers: a lost worker's fires are settled in seconds), and the history
of task-record calls the soak's recording clients made through the faults (at least
``MIN_HISTORY_OPS`` calls) is linearizable, record by record.

The seed is printed first (also in every failure message): ``scripts/chaos --seconds 120 --seed S``
replays the run's choices. A fault the machine cannot make fails the test with the reason; only a
kernel without network namespaces skips it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from . import chaos
from .history_client import Linearizable
from .nemesis import Kind

SECONDS = 120
MIN_HISTORY_OPS = 100


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_120_s_nemesis_run_with_a_random_seed_keeps_every_delivery_promise_and_linearizable_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = random.SystemRandom().randrange(1, 1 << 31)
    replay = f"seed={seed} (replay: scripts/chaos --seconds {SECONDS} --seed {seed})"
    with capsys.disabled():
        print(f"\nchaos: {replay}", flush=True)
    why_not = chaos.netns_unavailable()
    if why_not is not None:
        if not Path("/proc/self/ns/net").exists():
            pytest.skip(f"this kernel has no network namespaces: {why_not}")
        pytest.fail(f"cannot run the nodes in network namespaces, so no partitions: {why_not}")
    report = chaos.run(SECONDS, seed=seed, root=tmp_path, kinds=tuple(Kind), net="netns")
    with capsys.disabled():
        print(report.line(), "faults:", ",".join(f.describe(report.t0_ms) for f in report.faults),
              "gap at:", report.periodic_max_gap_at, flush=True)
        if report.history is not None:
            print(f"chaos: {report.history.line()}", flush=True)
    missing = [k for k, n in report.counts().items() if n == 0]
    assert not missing, f"{replay}: no fault of kind {missing} in {len(report.faults)} faults"
    assert len(report.created) > 1_000, replay
    assert report.lost == [], f"{replay}: at_least_once tasks never delivered: {report.lost[:10]} {report.lost_detail}"
    assert report.amo_twice == [], f"{replay}: at_most_once tasks delivered twice: {report.amo_twice[:10]}"
    assert report.stuck == [], f"{replay}: tasks stuck in pending/firing/awaiting_ack: {report.stuck[:10]}"
    assert report.digests_equal, replay
    assert report.ns_index == [], f"{replay}: namespace index: {report.ns_index[:10]}"
    assert report.periodic_max_gap_outside_partitions_ms <= 6_000, (
        f"{replay}: a 2 s periodic task waited {report.periodic_max_gap_outside_partitions_ms} ms outside partitions "
        f"(at {report.periodic_max_gap_at}; {report.periodic_gap_detail})"
    )
    assert report.history is not None, f"{replay}: no history was checked"
    assert report.history.counts["size"] >= MIN_HISTORY_OPS, f"{replay}: {report.history.line()}"
    assert report.linearizable is Linearizable.YES, f"{replay}: {report.history.line()}\n{report.history.report}"
