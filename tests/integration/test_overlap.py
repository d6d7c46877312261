"""Overlap on a real node (docs/architecture.md#overlap): a 1 s periodic task whose receiver holds
its first callback 3.3 s, so the instants 2, 3 and 4 s come due while it runs. ``skip`` drops them
and fires at 5 s; ``buffer_one`` fires 2 s as soon as the slow one answered (before 5 s), then 5 s.
Never two callbacks of one task at once."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from molens.client import MolensClient

from .conftest import Cluster, wait_for
from .recording_receiver import Received, RecordingReceiver

PERIOD = 1_000
HOLD_MS = 3_300


def _firsts(rs: list[Received]) -> list[Received]:
    return [r for r in rs if r.headers["X-Molens-Attempt"] == "1"]


@pytest.mark.timeout(120)
def test_skip_drops_the_instants_due_during_a_slow_callback_and_buffer_one_fires_the_first_after_it(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        client = MolensClient([f"http://127.0.0.1:{n.settings['http']['port']}"])
        wait_for(lambda: client.stats(), 60, "the node to serve")
        ids = {}
        for mode in ("skip", "buffer_one"):
            t = client.create(type="periodic", interval_ms=PERIOD, overlap=mode,
                              callback_url=receiver.url(f"/slowfirst/{HOLD_MS}/overlap-{mode}"))
            assert t["overlap"] == mode
            ids[mode] = t
        wait_for(lambda: all(len(receiver.by_tag(f"overlap-{m}")) >= 3 for m in ids), 30, "three callbacks each")
        for t in ids.values():
            client.pause(t["id"])
        got = {m: _firsts(receiver.by_tag(f"overlap-{m}")) for m in ids}
        for m, rs in got.items():
            base = ids[m]["created_at"]
            sched = [int(r.headers["X-Molens-Scheduled-At"]) - base for r in rs[:3]]
            fires = [r.headers["X-Fire-ID"].rsplit("-", 1)[1] for r in rs[:3]]
            assert fires == ["1", "2", "3"], (m, fires)
            if m == "skip":
                assert sched == [1_000, 5_000, 6_000], sched
            else:
                assert sched == [1_000, 2_000, 5_000], sched
                # the buffered one went out once the slow one answered, not at the next instant (5 s)
                assert rs[0].at_ms + HOLD_MS <= rs[1].at_ms < base + 5_000, (rs[0].at_ms - base, rs[1].at_ms - base)
            for a, b in itertools.pairwise(rs[:3]):
                assert b.at_ms >= a.at_ms + (HOLD_MS if a is rs[0] else 0) - 50, (m, a.at_ms, b.at_ms)
            skipped = [e["execution_result"] for e in client.executions(ids[m]["id"], result="skipped")]
            assert skipped, m
    finally:
        c.kill_all()
