"""Named Raft scenarios, each tied to the paper section or known bug it covers.

Every scenario runs in the simulator, so all the per-step invariants are checked as well.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from molens.raft.core import ConfChangeError, ProposalDroppedError, RaftConfig, RaftRole, UnsafeRule
from molens.raft.messages import AppendEntries, ConfChangeOp, InstallSnapshot, Message, RequestVote
from tests.sim.linearizability import Status, check_history
from tests.sim.raft_harness import Cluster, Faults, SimNode, Violation, default_config

pytestmark = pytest.mark.sim


def leader_of(cl: Cluster) -> SimNode:
    assert cl.run_until(lambda: cl.leader() is not None, 200), "no leader elected"
    ld = cl.leader()
    assert ld is not None
    return ld


def core(cl: Cluster, nid: str):  # type: ignore[no-untyped-def]
    c = cl.nodes[nid].core
    assert c is not None
    return c


def settle(cl: Cluster, ticks: int = 30) -> None:
    cl.run_for(ticks)


def logs_equal(cl: Cluster, a: str, b: str) -> bool:
    ca, cb = core(cl, a), core(cl, b)
    if ca.last_index != cb.last_index:
        return False
    return all(ca.log_term(i) == cb.log_term(i) for i in range(1, ca.last_index + 1))


# --- §5.4.2, figure 8 ---------------------------------------------------------------------------
def figure8(config: RaftConfig) -> Cluster:
    """Figure 8 (c)->(d): S1 leads term 4 and gets its term-2 entry onto a majority; S5 holds a
    term-3 entry at the same index and can still win once S1 is gone."""
    cl = Cluster(5, seed=8, config=config, start=False)
    cl.preload("n1", [1, 2], 3)
    cl.preload("n2", [1, 2], 3)
    cl.preload("n3", [1], 3, "n5")
    cl.preload("n4", [1], 3, "n5")
    cl.preload("n5", [1, 3], 3, "n5")
    cl.start()
    cl.isolate("n5")

    def only_index_2(m: Message) -> Message | None:
        # S1 gets index 2 replicated, but its current-term no-op (index 3) never arrives
        if isinstance(m, AppendEntries) and m.frm == "n1":
            return replace(m, entries=tuple(e for e in m.entries if e.index <= 2))
        return m

    cl.msg_filter = only_index_2
    core(cl, "n1").campaign()
    cl._drain(cl.nodes["n1"])
    assert cl.run_until(lambda: core(cl, "n1").role is RaftRole.LEADER, 50)
    cl.run_for(15)
    # (d): S1 crashes, S5 comes back and is elected by S2, S3, S4
    cl.crash("n1")
    cl.msg_filter = None
    cl.heal()
    for _ in range(5):
        if core(cl, "n5").role is RaftRole.LEADER:
            break
        core(cl, "n5").campaign(force=True)
        cl._drain(cl.nodes["n5"])
        cl.run_for(4)
    cl.run_for(60)
    return cl


def test_figure8_previous_term_entry_is_not_committed_by_counting() -> None:
    """§5.4.2, figure 8: an entry from an earlier term on a majority is not thereby committed."""
    cfg = replace(default_config(), max_msg_bytes=1)
    cl = figure8(cfg)
    assert core(cl, "n5").role is RaftRole.LEADER
    # S5's term-3 entry won index 2 and nobody ever committed the term-2 one
    assert cl.committed[2].term == 3
    for nid in ("n2", "n3", "n4"):
        assert core(cl, nid).log_term(2) == 3


def test_figure8_with_the_rule_broken_is_caught() -> None:
    """Figure 8 with commit-by-counting for old terms: the simulator reports the lost commit."""
    cfg = replace(default_config(), max_msg_bytes=1, unsafe=UnsafeRule.COMMIT_PREVIOUS_TERM)
    with pytest.raises(Violation, match=r"state machine safety|leader completeness"):
        figure8(cfg)


# --- §5.3, figure 7 -----------------------------------------------------------------------------
FIG7 = {
    "n1": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6],  # the leader for term 8
    "n2": [1, 1, 1, 4, 4, 5, 5, 6, 6],  # (a)
    "n3": [1, 1, 1, 4],  # (b)
    "n4": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],  # (c)
    "n5": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],  # (d)
    "n6": [1, 1, 1, 4, 4, 4, 4],  # (e)
    "n7": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],  # (f)
}


def test_figure7_divergent_followers_converge_on_the_leader_log() -> None:
    """§5.3, figure 7 (a)-(f): missing, extra and conflicting suffixes are all repaired."""
    cl = Cluster(7, seed=7, start=False)
    for nid, terms in FIG7.items():
        cl.preload(nid, terms, 7)
    cl.start()
    core(cl, "n1").campaign()
    cl._drain(cl.nodes["n1"])
    assert cl.run_until(lambda: core(cl, "n1").role is RaftRole.LEADER, 50)
    assert core(cl, "n1").term == 8
    assert cl.run_until(lambda: all(logs_equal(cl, "n1", n) for n in FIG7), 100)
    ld = core(cl, "n1")
    assert [ld.log_term(i) for i in range(1, 12)] == [*FIG7["n1"], 8]
    # (d)'s uncommitted term-7 entries and (f)'s terms 2-3 are gone; committed prefix intact
    assert core(cl, "n5").log_term(11) == 8 and core(cl, "n7").log_term(4) == 4


# --- client semantics (§8) and ReadIndex (§6.4) -----------------------------------------------------
def test_isolated_old_leader_never_reports_success() -> None:
    """§5.4/§8: a deposed leader's proposals in a minority are never acknowledged as committed."""
    cl = Cluster(3, seed=11)
    old = leader_of(cl)
    cl.write(old.id, "a")
    settle(cl)
    cl.isolate(old.id)
    stale = [cl.write(old.id, "a") for _ in range(3)]
    assert all(op is not None for op in stale)
    assert cl.run_until(lambda: (ld := cl.leader()) is not None and ld.id != old.id, 200)
    new = cl.leader()
    assert new is not None
    fresh = cl.write(new.id, "a")
    settle(cl, 40)
    cl.heal()
    settle(cl, 60)
    assert fresh is not None and fresh.status is Status.OK
    for op in stale:
        assert op is not None and op.status is not Status.OK
    assert check_history(cl.ops)[0]


@pytest.mark.parametrize("check_quorum", [True, False])
def test_stale_leader_never_answers_read_index(check_quorum: bool) -> None:
    """§6.4 ReadIndex: a leader cut off from its quorum never serves a read (would be stale)."""
    cfg = replace(default_config(), check_quorum=check_quorum, pre_vote=check_quorum)
    cl = Cluster(3, seed=12, config=cfg)
    old = leader_of(cl)
    cl.write(old.id, "a", 1)
    settle(cl)
    cl.isolate(old.id)
    stale_read = cl.read(old.id, "a")  # still believes it leads
    assert stale_read is not None
    assert cl.run_until(lambda: (ld := cl.leader()) is not None and ld.id != old.id, 200)
    new = cl.leader()
    assert new is not None
    w = cl.write(new.id, "a", 2)
    settle(cl, 60)
    assert w is not None and w.status is Status.OK
    assert stale_read.status is not Status.OK
    fresh = cl.read(new.id, "a")
    settle(cl, 20)
    assert fresh is not None and fresh.status is Status.OK and fresh.value == 2
    assert check_history(cl.ops)[0]


# --- elections (§5.2, thesis §9.6 pre-vote, §6.2 check-quorum) ----------------------------------------
@pytest.mark.parametrize("pre_vote", [True, False])
def test_dueling_candidates_elect_exactly_one_leader(pre_vote: bool) -> None:
    """§5.2 split votes: simultaneous candidates, randomized timeouts, one leader per term."""
    cfg = replace(default_config(), pre_vote=pre_vote)
    for seed in range(5):
        cl = Cluster(5, seed=seed, config=cfg)
        for nid in cl.ids:
            core(cl, nid).campaign()
            cl._drain(cl.nodes[nid])
        ld = leader_of(cl)
        settle(cl, 20)
        assert sum(1 for n in cl.nodes.values() if n.core and n.core.role is RaftRole.LEADER and
                   n.core.term == ld.core.term) == 1  # type: ignore[union-attr]


def test_rejoining_partitioned_node_does_not_depose_a_healthy_leader() -> None:
    """Thesis §9.6 pre-vote (+ §6.2 lease): an isolated node keeps asking for a higher term but
    never adopts it, and once back its requests are refused while the leader is healthy."""
    cl = Cluster(3, seed=13)
    ld = leader_of(cl)
    term = core(cl, ld.id).term
    follower = next(n for n in cl.ids if n != ld.id)
    asked: list[int] = []
    send = cl._send

    def spy(node: SimNode, m: Message) -> None:
        if isinstance(m, RequestVote) and m.frm == follower:
            asked.append(m.term)
        send(node, m)

    cl._send = spy  # type: ignore[method-assign]
    cl.isolate(follower)
    settle(cl, 150)
    assert asked and max(asked) > term  # it kept asking for a higher term...
    assert core(cl, follower).term == term  # ...but pre-vote never made it adopt one
    cl.heal()
    asked.clear()
    core(cl, follower).campaign()  # rejoining, it asks again at once: refused, leader in lease
    cl._drain(cl.nodes[follower])
    settle(cl, 50)
    assert asked and max(asked) > term
    assert core(cl, ld.id).role is RaftRole.LEADER and core(cl, ld.id).term == term


def test_leader_that_loses_its_quorum_steps_down() -> None:
    """Thesis §6.2 check-quorum: no quorum heard for an election timeout -> step down."""
    cl = Cluster(3, seed=14)
    ld = leader_of(cl)
    cl.isolate(ld.id)
    assert cl.run_until(lambda: core(cl, ld.id).role is not RaftRole.LEADER, 2 * cl.cfg.election_tick + 2)


# --- crashes and restarts (§5.1 persistent state) -------------------------------------------------
def test_whole_cluster_simultaneous_restart_keeps_committed_entries() -> None:
    """§5.1 persistent state: every node crashes at once (unpersisted Readys lost) and recovers."""
    cl = Cluster(3, seed=15, faults=Faults(persist_delay=(0, 4), apply_delay=3))
    ld = leader_of(cl)
    ops = [cl.write(ld.id, "a") for _ in range(5)]
    settle(cl, 20)
    for nid in cl.ids:
        cl.crash(nid)
    for nid in cl.ids:
        cl.restart(nid)
    ld = leader_of(cl)
    after = cl.write(ld.id, "a")
    settle(cl, 40)
    assert all(op is not None and op.status is not Status.PENDING for op in ops)
    assert after is not None and after.status is Status.OK
    assert check_history(cl.ops)[0]


@pytest.mark.parametrize("point", ["before_persist", "after_persist_before_send", "before_apply"])
@pytest.mark.parametrize("who", ["leader", "follower"])
def test_crash_at_each_persistence_point(point: str, who: str) -> None:
    """§5.1 / etcd Ready contract: crash before persisting, between persisting and sending, and
    before applying; nothing acknowledged is lost."""
    faults = Faults(persist_delay=(2, 6), apply_delay=5)
    cl = Cluster(3, seed=16, faults=faults)
    ld = leader_of(cl)
    victim = ld if who == "leader" else cl.nodes[next(n for n in cl.ids if n != ld.id)]
    for _ in range(3):
        cl.write(ld.id, "a")

    def at_point() -> bool:
        if point == "before_persist":
            return victim.pending is not None and bool(victim.pending.entries)
        if point == "before_apply":
            return bool(victim.apply_q)
        return False

    if point == "after_persist_before_send":
        cl.faults = replace(faults, crash_at_persist=1.0)
        cl.run_until(lambda: not victim.alive, 50)
        cl.faults = faults
    else:
        assert cl.run_until(at_point, 50)
        cl.crash(victim.id)
    assert not victim.alive
    settle(cl, 10)
    cl.restart(victim.id)
    ld = leader_of(cl)
    w = cl.write(ld.id, "b")
    assert cl.run_until(lambda: w is not None and w.status is Status.OK, 100)
    settle(cl, 30)
    assert check_history(cl.ops)[0]


# --- replication (§5.3): reordering and duplication never truncate --------------------------------
def test_reordered_and_duplicated_appends_never_lose_entries() -> None:
    """§5.3 (and PySyncObj's bug): stale or duplicate appends never truncate; only conflicts do."""
    faults = Faults(dup=0.5, delay=(1, 40))
    cl = Cluster(3, seed=17, faults=faults)
    ld = leader_of(cl)
    for _ in range(30):
        cl.write(ld.id, "a")
        cl.run_for(1)
    settle(cl, 80)
    assert all(logs_equal(cl, ld.id, n) for n in cl.ids)
    assert check_history(cl.ops)[0]


# --- snapshots (§7) ------------------------------------------------------------------------------
def test_snapshot_install_interrupted_by_leader_change() -> None:
    """§7 InstallSnapshot in chunks: a half-sent snapshot is dropped and the new leader finishes."""
    cfg = replace(default_config(), snapshot_chunk_bytes=2)
    cl = Cluster(3, seed=18, config=cfg)
    ld = leader_of(cl)
    lagger = next(n for n in cl.ids if n != ld.id)
    other = next(n for n in cl.ids if n not in (ld.id, lagger))
    cl.isolate(lagger)
    for _ in range(20):
        cl.write(ld.id, "a")
    settle(cl, 20)
    assert cl.snapshot(ld.id) and cl.snapshot(other)
    chunks: list[InstallSnapshot] = []

    def first_chunk_only(m: Message) -> Message | None:
        if isinstance(m, InstallSnapshot) and m.to == lagger:
            chunks.append(m)
            return m if m.offset == 0 else None
        return m

    cl.msg_filter = first_chunk_only
    cl.heal()
    assert cl.run_until(lambda: len(chunks) > 1, 50)
    # the leader dies mid-transfer; the other node takes over and must finish the job
    cl.msg_filter = None
    cl.crash(ld.id)
    assert cl.run_until(lambda: (n := cl.leader()) is not None and n.id == other, 200)
    assert cl.run_until(lambda: cl.nodes[lagger].applied >= core(cl, other).commit, 200)
    assert cl.nodes[lagger].storage.snapshot().meta.index > 0
    assert cl.nodes[lagger].kv == cl.nodes[other].kv


def test_stale_snapshot_is_ignored() -> None:
    """§7: a snapshot older than the follower's commit is ignored, never rolling the log back."""
    cl = Cluster(3, seed=19)
    ld = leader_of(cl)
    for _ in range(5):
        cl.write(ld.id, "a")
    settle(cl, 20)
    assert cl.snapshot(ld.id)
    old = cl.nodes[ld.id].storage.snapshot()
    for _ in range(5):
        cl.write(ld.id, "a")
    settle(cl, 20)
    f = next(n for n in cl.ids if n != ld.id)
    fc = core(cl, f)
    commit_before = fc.commit
    fc.step(InstallSnapshot(frm=ld.id, to=f, term=fc.term, meta=old.meta, offset=0, data=old.data, done=True))
    rd = fc.ready()
    assert rd.snapshot is None
    assert fc.commit == commit_before and fc.last_index >= commit_before
    acks = [m for m in rd.messages_after_persist if type(m).__name__ == "AppendResponse"]
    assert acks and acks[0].index == commit_before  # type: ignore[union-attr]
    fc.advance(rd)


# --- membership (thesis §4.1, the 2015 single-server change bug) -------------------------------------
def test_conf_change_refused_before_leader_commits_in_its_term() -> None:
    """Ongaro, raft-dev 2015, single-server change bug: no change before the leader commits in
    its own term; thesis §4.1: one change at a time."""
    cl = Cluster(3, seed=20, faults=Faults(persist_delay=(5, 5)))
    ld = leader_of(cl)
    c = core(cl, ld.id)
    assert c.commit < c.last_index  # the term's no-op is not committed yet
    with pytest.raises(ConfChangeError, match="committed an entry of its term"):
        c.propose_conf_change(ConfChangeOp.ADD_LEARNER, "n4")
    assert cl.run_until(lambda: c.commit == c.last_index, 50)
    c.propose_conf_change(ConfChangeOp.ADD_LEARNER, "n4")
    with pytest.raises(ConfChangeError, match="still uncommitted"):
        c.propose_conf_change(ConfChangeOp.REMOVE, "n2")


def test_learner_joins_is_promoted_and_counts() -> None:
    """Thesis §4.2.1: a new server catches up as a non-voting learner, then is promoted."""
    cl = Cluster(3, seed=21)
    ld = leader_of(cl)
    settle(cl, 10)
    c = core(cl, ld.id)
    c.propose_conf_change(ConfChangeOp.ADD_LEARNER, "n4")
    cl.add_node()
    cl._drain(ld)
    assert cl.run_until(lambda: (p := c.progress("n4")) is not None and p.match >= c.commit, 100)
    settle(cl, 5)
    c.propose_conf_change(ConfChangeOp.PROMOTE, "n4")
    cl._drain(ld)
    assert cl.run_until(lambda: "n4" in core(cl, "n4").membership.voters, 100)
    settle(cl, 10)
    assert c.membership.voters == ("n1", "n2", "n3", "n4")
    w = cl.write(ld.id, "a")
    assert cl.run_until(lambda: w is not None and w.status is Status.OK, 50)


def test_removing_the_leader() -> None:
    """Thesis §4.2.2: the leader removed from the configuration steps down once that commits."""
    cl = Cluster(3, seed=22)
    ld = leader_of(cl)
    settle(cl, 10)
    core(cl, ld.id).propose_conf_change(ConfChangeOp.REMOVE, ld.id)
    cl._drain(ld)
    assert cl.run_until(lambda: (n := cl.leader()) is not None and n.id != ld.id, 100)
    new = cl.leader()
    assert new is not None and ld.id not in core(cl, new.id).membership.voters
    cl.stop(ld.id)
    w = cl.write(new.id, "a")
    assert cl.run_until(lambda: w is not None and w.status is Status.OK, 50)


def test_transfer_while_proposals_are_in_flight() -> None:
    """Thesis §3.10 leadership transfer (TimeoutNow) with proposals in flight; new ones refused."""
    cl = Cluster(3, seed=23, faults=Faults(delay=(2, 8), persist_delay=(0, 3)))
    ld = leader_of(cl)
    settle(cl, 10)
    before = [cl.write(ld.id, "a") for _ in range(5)]
    to = next(n for n in cl.ids if n != ld.id)
    core(cl, ld.id).transfer_leader(to)
    cl._drain(ld)
    with pytest.raises(ProposalDroppedError):
        core(cl, ld.id).propose(b"w 999 a 999")
    assert cl.run_until(lambda: (n := cl.leader()) is not None and n.id == to, 100)
    after = cl.write(to, "a")
    settle(cl, 40)
    assert after is not None and after.status is Status.OK
    assert all(op is not None and op.status is not Status.PENDING for op in before)
    assert check_history(cl.ops)[0]


# --- clock skew (docs/architecture.md#clock-skew) -----------------------------------------------------
def test_a_leader_told_its_clock_is_off_steps_down_and_never_campaigns_again() -> None:
    """The shell sets ``no_campaign`` and calls ``step_down``: another node leads, and neither an
    election timeout nor a leadership transfer makes the skewed node leader again."""
    cl = Cluster(3, seed=31)
    ld = leader_of(cl)
    settle(cl, 10)
    skewed = core(cl, ld.id)
    skewed.no_campaign = "clock off"
    skewed.step_down("clock off")
    assert skewed.role is not RaftRole.LEADER
    cl._drain(ld)
    assert cl.run_until(lambda: (n := cl.leader()) is not None and n.id != ld.id, 200)
    new = cl.leader()
    assert new is not None
    core(cl, new.id).transfer_leader(ld.id)
    cl._drain(new)
    for _ in range(20 * cl.cfg.election_tick):
        cl.run_for(1)
        assert core(cl, ld.id).role is not RaftRole.LEADER
    op = cl.write(cl.leader().id, "a")  # type: ignore[union-attr]
    settle(cl, 40)
    assert op is not None and op.status is Status.OK


def test_power_loss_right_after_a_snapshot_and_compaction_keeps_the_node_whole() -> None:
    """The snapshot file is synced and its directory fsync'd before the log records it and compacts
    past it: a power loss right after (the disk dropping whatever was not synced) leaves a node that
    starts again with the snapshot and its state."""
    cl = Cluster(3, seed=23)
    ld = leader_of(cl)
    for _ in range(6):
        cl.write(ld.id, "a")
    settle(cl, 20)
    f = next(n for n in cl.ids if n != ld.id)
    assert cl.snapshot(f)
    kv = dict(cl.nodes[f].kv)
    cl.crash(f, power_loss=True)
    cl.restart(f)
    assert cl.nodes[f].storage.snapshot_meta().index > 0 and cl.nodes[f].kv == kv
    assert cl.disk.losses == 1
