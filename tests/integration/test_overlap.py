"""Overlap on a real node (docs/architecture.md#overlap): a 1 s periodic task whose receiver holds
its first callback 3.3 s, so the instants 2, 3 and 4 s come due while it runs. ``skip`` drops them
and fires at 5 s; ``buffer_one`` fires 2 s as soon as the slow one answered (before 5 s), then 5 s.
Never two callbacks of one task at once. ``allow`` on three nodes: a receiver that holds every callback
2.7 s sees occurrences overlap, each with its own fire id and X-Molens-Scheduled-At, and each
answered through kill -9 of the leader."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from molens.client import MolensClient

from .conftest import Cluster, wait_for
from .recording_receiver import Received, RecordingReceiver

pytestmark = pytest.mark.slow

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


def _explain(c: Cluster, client: MolensClient, t: dict[str, Any], receiver: RecordingReceiver, tag: str) -> str:
    """What a timed-out wait saw: the callbacks received, the task and its executions as the API shows
    them, each node's role and log tail."""
    base = t["created_at"]
    got = [(r.at_ms - base, r.headers.get("X-Fire-ID"), r.headers.get("X-Molens-Attempt"))
           for r in receiver.by_tag(tag)]
    out = [f"received (ms after creation, fire id, attempt): {got}"]
    try:
        task = client.get(t["id"])
        out.append(f"task: { {k: task.get(k) for k in ('status', 'seq', 'next_run_at', 'last_outcome')} }")
        rows = itertools.islice(client.executions(t["id"]), 30)
        out.append(f"executions (newest 30): {[(e['fire_id'], e['kind'], e['result']) for e in rows]}")
    except Exception as exc:  # the explanation goes on with what it can see
        out.append(f"(the API did not answer: {exc!r})")
    for nid, node in c.nodes.items():
        st = node.status() or {}
        out.append(f"--- {nid}: role {st.get('role')}, term {st.get('term')}, leader {st.get('leader_id')}\n"
                   f"{node.tail(60)}")
    return "\n".join(out)


@pytest.mark.timeout(180)
def test_allow_runs_occurrences_at_once_on_three_nodes_each_with_its_own_fire_id_and_instant(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    """``allow`` on a 3-node cluster: every callback is held 2.7 s, so occurrence k+1 (and k+2) goes
    out at its own instant while k still runs; each has its own fire id and X-Molens-Scheduled-At,
    and each is answered and on record once."""
    # the default Raft timers: nothing here waits for an election after the first, and 20 ms ticks
    # (a check-quorum window of 160 ms) let a loaded host move the leadership over and over
    c = Cluster(tmp_path, 3, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        client = MolensClient([f"http://127.0.0.1:{n.settings['http']['port']}"])
        wait_for(lambda: client.stats(), 60, "the node to serve")
        t = client.create(type="periodic", interval_ms=PERIOD, overlap="allow", timeout_ms=10_000,
                          callback_url=receiver.url(f"/slow/{SLOW_MS}/overlap-allow"))
        assert t["overlap"] == "allow"
        wait_for(lambda: len(receiver.by_tag("overlap-allow")) >= 5, 40, "five callbacks",
                 explain=lambda: _explain(c, client, t, receiver, "overlap-allow"))
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


@pytest.mark.timeout(240)
def test_allow_occurrences_in_flight_when_the_leader_is_killed_are_each_delivered(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    """at_least_once per occurrence through failover: kill -9 of the leader while several allow
    occurrences are held by the receiver; every occurrence started before (and after) is answered
    2xx on record, each fire id with one X-Molens-Scheduled-At on the task's grid, rising with seq."""
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        client = MolensClient([f"http://127.0.0.1:{m.settings['http']['port']}" for m in c.nodes.values()],
                              retry_deadline_s=60, max_attempts=1_000)
        wait_for(lambda: client.stats(), 60, "the node to serve")
        tag = "overlap-allow-failover"
        t = client.create(type="periodic", interval_ms=PERIOD, overlap="allow", timeout_ms=10_000,
                          callback_url=receiver.url(f"/slow/{SLOW_MS}/{tag}"))

        def seqs() -> set[int]:
            return {int(r.headers["X-Fire-ID"].rsplit("-", 1)[1]) for r in receiver.by_tag(tag)}

        wait_for(lambda: len(seqs()) >= 3, 40, "three occurrences sent")
        n.kill()
        c.leader(timeout=30, exclude=(n.node_id,))
        upto = max(seqs()) + 3
        wait_for(lambda: max(seqs()) >= upto + 2, 60, "occurrences after the failover")

        def answered() -> bool:
            ok = {e["seq"] for e in client.executions(t["id"], result="success")}
            return set(range(1, upto + 1)) <= ok

        wait_for(answered, 60, f"occurrences 1..{upto} each answered 2xx on record")
        by_fire: dict[int, set[int]] = {}
        for r in receiver.by_tag(tag):
            seq = int(r.headers["X-Fire-ID"].rsplit("-", 1)[1])
            by_fire.setdefault(seq, set()).add(int(r.headers["X-Molens-Scheduled-At"]))
        assert all(len(v) == 1 for v in by_fire.values()), by_fire  # every attempt of one occurrence: its instant
        instants = [next(iter(by_fire[s])) for s in sorted(by_fire)]
        assert all((i - t["created_at"]) % PERIOD == 0 for i in instants), instants
        assert instants == sorted(set(instants)), instants  # one occurrence per instant, in order
    finally:
        c.kill_all()
