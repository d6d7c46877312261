"""Overlap on a real node (docs/architecture.md#overlap): a 1 s periodic task whose receiver holds
its first callback 3.3 s, so the instants 2, 3 and 4 s come due while it runs. ``skip`` drops them
and fires at 5 s; ``buffer_one`` fires 2 s as soon as the slow one answered (before 5 s), then 5 s.
Never two callbacks of one task at once. ``allow`` on three nodes: a receiver that holds every callback
2.7 s sees occurrences overlap, each with its own fire id and X-Molens-Scheduled-At."""

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


SLOW_MS = 2_700


@pytest.mark.timeout(180)
def test_allow_runs_occurrences_at_once_on_three_nodes_each_with_its_own_fire_id_and_instant(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    """``allow`` on a 3-node cluster: every callback is held 2.7 s, so occurrence k+1 (and k+2) goes
    out at its own instant while k still runs; each has its own fire id and X-Molens-Scheduled-At,
    and each is answered and on record once."""
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        client = MolensClient([f"http://127.0.0.1:{n.settings['http']['port']}"])
        wait_for(lambda: client.stats(), 60, "the node to serve")
        t = client.create(type="periodic", interval_ms=PERIOD, overlap="allow", timeout_ms=10_000,
                          callback_url=receiver.url(f"/slow/{SLOW_MS}/overlap-allow"))
        assert t["overlap"] == "allow"
        wait_for(lambda: len(receiver.by_tag("overlap-allow")) >= 5, 40, "five callbacks")
        client.pause(t["id"])
        rs = _firsts(receiver.by_tag("overlap-allow"))[:5]
        base = t["created_at"]
        fires = [r.headers["X-Fire-ID"] for r in rs]
        assert fires == [f"{t['id']}-{k}" for k in range(1, 6)], fires
        sched = [int(r.headers["X-Molens-Scheduled-At"]) - base for r in rs]
        assert sched == [k * PERIOD for k in range(1, 6)], sched
        for a, b in itertools.pairwise(rs):  # the next went out at its instant, while this one was held
            assert b.at_ms < a.at_ms + SLOW_MS, (a.at_ms - base, b.at_ms - base)
        assert receiver.max_concurrent(f"/slow/{SLOW_MS}") >= 2
        wait_for(lambda: {e["fire_id"] for e in client.executions(t["id"], result="success")} >= set(fires), 30,
                 "every occurrence answered and on record")
        rows = [e for e in client.executions(t["id"]) if e["fire_id"] in fires and e["kind"] == "callback"]
        assert sorted(e["fire_id"] for e in rows) == sorted(fires), rows  # one row each: sent once
        assert all(e["result"] == "success" and e["seq"] == int(e["fire_id"].rsplit("-", 1)[1]) for e in rows), rows
    finally:
        c.kill_all()
