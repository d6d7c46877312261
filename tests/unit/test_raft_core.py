"""RaftCore's public API, driven directly (the simulator covers behaviour under faults)."""

from __future__ import annotations

import random

import pytest

from molens.raft.core import (
    ConfChangeError,
    NotLeaderError,
    RaftConfig,
    RaftCore,
    RaftError,
    ReadState,
    Ready,
    Role,
)
from molens.raft.log import Entry, HardState, Membership, MemoryLog, Snapshot, SnapshotMeta
from molens.raft.messages import (
    AppendEntries,
    AppendResponse,
    ConfChangeOp,
    InstallSnapshot,
    Message,
    SnapshotResponse,
)


class Net:
    """A lossless, synchronous network: persist every Ready, deliver every message, repeat."""

    def __init__(self, ids: list[str], config: RaftConfig | None = None) -> None:
        mem = Membership(tuple(ids))
        self.logs = {i: MemoryLog(mem) for i in ids}
        self.cfg = config or RaftConfig()
        self.cores = {i: RaftCore(i, mem, self.logs[i], self.cfg, random.Random(n)) for n, i in enumerate(ids)}
        self.applied: dict[str, list[Entry]] = {i: [] for i in ids}
        self.reads: dict[str, list[ReadState]] = {i: [] for i in ids}

    def handle(self, nid: str, rd: Ready) -> list[Message]:
        st = self.logs[nid]
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        st.append(list(rd.entries))
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        self.applied[nid].extend(rd.committed_entries)
        self.reads[nid].extend(rd.read_states)
        self.cores[nid].advance(rd)
        return [*rd.messages, *rd.messages_after_persist]

    def pump(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            out: list[Message] = []
            busy = False
            for nid, c in self.cores.items():
                if c.has_ready():
                    busy = True
                    out.extend(self.handle(nid, c.ready()))
            if not busy:
                return
            for m in out:
                if m.to in self.cores:
                    self.cores[m.to].step(m)

    def elect(self, nid: str) -> RaftCore:
        self.cores[nid].campaign()
        self.pump()
        assert self.cores[nid].role is Role.LEADER
        return self.cores[nid]


def test_single_node_commits_after_its_own_persistence() -> None:
    net = Net(["a"])
    a = net.elect("a")
    idx = a.propose(b"x")
    assert a.commit < idx
    net.pump()
    assert a.commit == idx and net.applied["a"][-1].data == b"x"
    first, last = a.propose_batch([b"1", b"2", b"3"])
    assert (first, last) == (idx + 1, idx + 3)
    assert a.propose_batch([]) == (idx + 4, idx + 3)
    net.pump()
    assert [e.data for e in net.applied["a"][-3:]] == [b"1", b"2", b"3"]
    a.read_index(b"ctx")
    net.pump()
    assert net.reads["a"] == [ReadState(a.commit, b"ctx")]


def test_follower_rejects_proposals_naming_the_leader() -> None:
    net = Net(["a", "b", "c"])
    net.elect("a")
    with pytest.raises(NotLeaderError) as ei:
        net.cores["b"].propose(b"x")
    assert ei.value.leader_id == "a"
    with pytest.raises(NotLeaderError):
        net.cores["b"].transfer_leader("c")
    with pytest.raises(NotLeaderError):
        net.cores["b"].propose_conf_change(ConfChangeOp.REMOVE, "c")
    # a follower forwards reads to the leader
    net.cores["b"].read_index(b"r1")
    net.pump()
    assert [r.ctx for r in net.reads["b"]] == [b"r1"]
    with pytest.raises(ValueError):
        net.cores["b"].read_index(b"")


def test_ready_and_advance_are_strictly_paired() -> None:
    net = Net(["a", "b", "c"])
    a = net.cores["a"]
    a.campaign()
    rd = a.ready()
    assert not a.has_ready()
    with pytest.raises(RaftError):
        a.ready()
    assert rd.hard_state == HardState(0, None, 0) or rd.soft_state is not None
    a.advance(rd)
    with pytest.raises(RaftError):
        a.advance(rd)


def test_candidate_vote_requests_wait_for_its_durable_vote() -> None:
    net = Net(["a", "b", "c"], RaftConfig(pre_vote=False))
    a = net.cores["a"]
    a.campaign()
    rd = a.ready()
    assert rd.hard_state is not None and rd.hard_state.vote == "a"
    assert not rd.messages and len(rd.messages_after_persist) == 2
    a.advance(rd)


def test_conf_change_validation() -> None:
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    net.pump()
    with pytest.raises(ConfChangeError, match="already a member"):
        a.propose_conf_change(ConfChangeOp.ADD_LEARNER, "b")
    with pytest.raises(ConfChangeError, match="not a learner"):
        a.propose_conf_change(ConfChangeOp.PROMOTE, "b")
    with pytest.raises(ConfChangeError, match="not a member"):
        a.propose_conf_change(ConfChangeOp.REMOVE, "z")
    with pytest.raises(RaftError, match="non-voter"):
        a.transfer_leader("z")
    a.transfer_leader("a")  # no-op
    assert a.transferee is None
    a.propose_conf_change(ConfChangeOp.ADD_LEARNER, "d")
    net.pump()
    assert a.membership == Membership(("a", "b", "c"), ("d",))
    a.propose_conf_change(ConfChangeOp.REMOVE, "d")
    net.pump()
    a.propose_conf_change(ConfChangeOp.REMOVE, "c")
    net.pump()
    a.propose_conf_change(ConfChangeOp.REMOVE, "b")
    net.pump()
    assert a.membership.voters == ("a",)
    with pytest.raises(ConfChangeError, match="last voter"):
        a.propose_conf_change(ConfChangeOp.REMOVE, "a")
    assert a.membership_at(1) == Membership(("a", "b", "c"))
    assert a.log_term(a.last_index + 5) is None


def test_constructor_validation_and_recovery() -> None:
    with pytest.raises(ValueError):
        RaftCore("a", ["a"], MemoryLog(), RaftConfig(election_tick=2, heartbeat_tick=2))
    st = MemoryLog()
    st.append([Entry(1, 1), Entry(2, 1, data=b"x")])
    st.set_hard_state(HardState(1, "a", 2))
    with pytest.raises(ValueError, match="applied"):
        RaftCore("a", Membership(("a",)), st, applied=3)
    c = RaftCore("a", Membership(("a",)), st, applied=1)
    assert (c.term, c.vote, c.commit, c.applied, c.membership.voters) == (1, "a", 2, 1, ("a",))
    rd = c.ready()
    assert [e.index for e in rd.committed_entries] == [2]  # replayed after the FSM's applied index


def test_follower_snapshot_chunks_out_of_order_and_fast_forward() -> None:
    st = MemoryLog(Membership(("l", "f")))
    f = RaftCore("f", None, st, RaftConfig())
    meta = SnapshotMeta(5, 2, Membership(("l", "f")))
    f.step(InstallSnapshot(
        frm="l", to="f", term=2, meta=meta, offset=3, data=b"def", done=False,
    ))  # chunk without its start
    rd = f.ready()
    resp = [m for m in rd.messages_after_persist if isinstance(m, SnapshotResponse)]
    assert resp and resp[0].offset == 0
    f.advance(rd)
    f.step(InstallSnapshot(frm="l", to="f", term=2, meta=meta, offset=0, data=b"abc", done=False))
    f.step(InstallSnapshot(frm="l", to="f", term=2, meta=meta, offset=3, data=b"def", done=True))
    rd = f.ready()
    assert rd.snapshot == Snapshot(meta, b"abcdef")
    assert f.log_term(5) == 2 and f.log_term(4) is None
    assert f.first_index == 6
    st.apply_snapshot(rd.snapshot)
    st.set_hard_state(rd.hard_state or HardState())
    f.advance(rd)
    # the leader's log also holds entries 6..7; a snapshot at 6 matching our log only fast-forwards
    f.step(AppendEntries(
        frm="l", to="f", term=2, prev_index=5, prev_term=2, entries=(Entry(6, 2), Entry(7, 2)), commit=5,
    ))
    rd = f.ready()
    st.append(list(rd.entries))
    f.advance(rd)
    f.step(InstallSnapshot(
        frm="l", to="f", term=2, meta=SnapshotMeta(6, 2, meta.membership), offset=0, data=b"x", done=True,
    ))
    rd = f.ready()
    assert rd.snapshot is None and f.commit == 6 and f.last_index == 7
    assert any(isinstance(m, AppendResponse) and m.index == 7 for m in rd.messages_after_persist)


def test_acks_for_entries_replaced_before_they_were_persisted_are_not_sent() -> None:
    """Two appends stepped before one Ready: the term-2 ack for 1..5 must not go out after a
    term-3 leader replaced 2..5, or that old leader could commit entries never stored here."""
    from molens.raft.log import EntryKind

    mem = Membership(("a", "b", "c"))
    c = RaftCore("c", mem, MemoryLog(mem), RaftConfig(), random.Random(1))
    # entry 1 is the founding membership (term 1)
    old = tuple(Entry(i, 2, EntryKind.NORMAL, b"old") for i in range(2, 7))
    c.step(AppendEntries(frm="a", to="c", term=2, prev_index=1, prev_term=1, entries=old, commit=0))
    c.step(AppendEntries(
        frm="b", to="c", term=3, prev_index=2, prev_term=2, entries=(Entry(3, 3, EntryKind.NORMAL, b"new"),),
        commit=0,
    ))
    rd = c.ready()
    assert [(e.index, e.term) for e in rd.entries] == [(1, 1), (2, 2), (3, 3)]
    acks = [m for m in rd.messages_after_persist if isinstance(m, AppendResponse) and not m.reject]
    assert [(m.to, m.term, m.index) for m in acks] == [("b", 3, 3)]


def test_a_vote_request_of_an_older_term_is_refused_with_our_term_and_the_candidate_catches_up() -> None:
    from molens.raft.messages import RequestVote, VoteResponse

    mem = Membership(("a", "b", "c"))
    ahead = RaftCore("a", mem, MemoryLog(mem), RaftConfig(pre_vote=False), random.Random(1))
    ahead.step(RequestVote(
        frm="c", to="a", term=9, last_index=0, last_term=0,
    ))  # a third node raised a's term to 9 (vote refused: log)
    ahead.advance(ahead.ready())
    behind = RaftCore("b", mem, MemoryLog(mem), RaftConfig(pre_vote=False), random.Random(2))
    for _ in range(100):
        if behind.role is Role.CANDIDATE:
            break
        behind.tick()
    assert behind.role is Role.CANDIDATE and behind.term < 9
    rd = behind.ready()
    behind.advance(rd)
    request = next(m for m in (*rd.messages, *rd.messages_after_persist) if isinstance(m, RequestVote) and m.to == "a")
    ahead.step(request)
    rd = ahead.ready()
    replies = [m for m in (*rd.messages, *rd.messages_after_persist) if isinstance(m, VoteResponse)]
    assert [(m.to, m.term, m.granted) for m in replies] == [("b", 9, False)]
    behind.step(replies[0])
    assert behind.term == 9 and behind.role is Role.FOLLOWER


def test_a_vote_granted_in_a_term_left_before_it_was_persisted_is_not_sent() -> None:
    from molens.raft.messages import RequestVote, VoteResponse

    mem = Membership(("a", "b", "c", "d", "e"))
    c = RaftCore("c", mem, MemoryLog(mem), RaftConfig(pre_vote=False), random.Random(1))
    c.step(RequestVote(
        frm="b", to="c", term=6, last_index=1, last_term=1,
    ))  # granted, waiting for the HardState(6, b) to persist
    c.step(RequestVote(
        frm="d", to="c", term=7, last_index=0, last_term=0,
    ))  # a newer term arrives first (d's log is behind: refused)
    rd = c.ready()
    assert rd.hard_state is not None and (rd.hard_state.term, rd.hard_state.vote) == (7, None)
    votes = [m for m in rd.messages_after_persist if isinstance(m, VoteResponse)]
    assert [(m.to, m.term, m.granted) for m in votes] == [("d", 7, False)]
