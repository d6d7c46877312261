"""RaftCore's public API, driven directly (the simulator covers behaviour under faults)."""

from __future__ import annotations

import random
import zlib

import pytest

from molens.raft.core import (
    ConfChangeError,
    NotLeaderError,
    ProgressState,
    RaftConfig,
    RaftCore,
    RaftError,
    RaftRole,
    ReadState,
    Ready,
    SnapshotChunk,
)
from molens.raft.log import Entry, EntryKind, HardState, Membership, MemoryLog, Snapshot, SnapshotMeta
from molens.raft.messages import (
    AppendEntries,
    AppendResponse,
    ConfChangeOp,
    InstallSnapshot,
    Message,
    SnapshotResponse,
)


class Net:
    """A lossless, synchronous network: persist every Ready, deliver every message, repeat. A node
    gathers a snapshot it receives in ``sinks`` (the stand-in for its file)."""

    def __init__(self, ids: list[str], config: RaftConfig | None = None) -> None:
        mem = Membership(tuple(ids))
        self.logs = {i: MemoryLog(mem) for i in ids}
        self.cfg = config or RaftConfig()
        self.cores = {i: RaftCore(i, mem, self.logs[i], self.cfg, random.Random(n)) for n, i in enumerate(ids)}
        self.applied: dict[str, list[Entry]] = {i: [] for i in ids}
        self.reads: dict[str, list[ReadState]] = {i: [] for i in ids}
        self.sinks: dict[str, bytearray] = {i: bytearray() for i in ids}
        self.received: list[tuple[str, SnapshotChunk]] = []

    def handle(self, nid: str, rd: Ready) -> list[Message]:
        st = self.logs[nid]
        last = gather(self.sinks[nid], rd.snapshot_chunks)
        self.received.extend((nid, ch) for ch in rd.snapshot_chunks)
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        st.append(list(rd.entries))
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        self.applied[nid].extend(rd.committed_entries)
        self.reads[nid].extend(rd.read_states)
        self.cores[nid].advance(rd)
        if last is not None:
            data = bytes(self.sinks[nid])
            self.cores[nid].snapshot_received(last.meta, data if zlib.crc32(data) == last.crc else None)
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

    def restart(self, nid: str) -> RaftCore:
        """The node stops (what it had not persisted is lost) and starts again, or a new node with
        empty storage starts: a snapshot it was gathering is dropped, as a node drops its leftover
        file at start."""
        self.sinks[nid] = bytearray()
        self.applied.setdefault(nid, [])
        self.reads.setdefault(nid, [])
        c = RaftCore(nid, None, self.logs.setdefault(nid, MemoryLog()), self.cfg, random.Random(7))
        self.cores[nid] = c
        return c

    def elect(self, nid: str) -> RaftCore:
        self.cores[nid].campaign()
        self.pump()
        assert self.cores[nid].role is RaftRole.LEADER
        return self.cores[nid]


def gather(sink: bytearray, chunks: tuple[SnapshotChunk, ...]) -> SnapshotChunk | None:
    """Write chunks as a node's shell does (offset 0 starts afresh); the last one, if any."""
    last = None
    for ch in chunks:
        if ch.offset == 0:
            sink.clear()
        assert len(sink) == ch.offset, "chunks must come in order, without gaps"
        sink += ch.data
        if ch.done:
            last = ch
    return last


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


def chunk(meta: SnapshotMeta, offset: int, data: bytes, done: bool, *, frm: str = "l", term: int = 2,
          crc: int | None = None) -> InstallSnapshot:
    return InstallSnapshot(
        frm=frm, to="f", term=term, meta=meta, offset=offset, data=data, done=done,
        crc=zlib.crc32(data) if crc is None else crc,
    )


def snap_replies(rd: Ready) -> list[int]:
    return [m.offset for m in rd.messages_after_persist if isinstance(m, SnapshotResponse)]


def test_follower_hands_snapshot_chunks_to_the_node_and_installs_once_it_checked_them() -> None:
    st = MemoryLog(Membership(("l", "f")))
    f = RaftCore("f", None, st, RaftConfig())
    meta = SnapshotMeta(5, 2, Membership(("l", "f")))
    f.step(chunk(meta, 0, b"abc", False))
    rd = f.ready()
    assert rd.snapshot_chunks == (SnapshotChunk(meta, 0, b"abc", False, zlib.crc32(b"abc")),)
    assert snap_replies(rd) == [3] and rd.snapshot is None
    f.advance(rd)
    f.step(chunk(meta, 3, b"def", True))
    rd = f.ready()
    assert rd.snapshot_chunks == (SnapshotChunk(meta, 3, b"def", True, zlib.crc32(b"abcdef")),)
    assert snap_replies(rd) == [] and rd.snapshot is None  # nothing promised before the node checked it
    f.advance(rd)
    assert f.snapshot_received(meta, b"abcdef") is True
    rd = f.ready()
    assert rd.snapshot == Snapshot(meta, b"abcdef") and not rd.snapshot_chunks
    assert snap_replies(rd) == [6]
    assert any(isinstance(m, AppendResponse) and m.index == 5 for m in rd.messages_after_persist)
    assert f.log_term(5) == 2 and f.log_term(4) is None and f.first_index == 6
    st.apply_snapshot(rd.snapshot)
    st.set_hard_state(rd.hard_state or HardState())
    f.advance(rd)
    assert f.snapshot_received(meta, b"abcdef") is False  # answered once


def test_follower_asks_again_for_a_chunk_out_of_place_or_sent_twice() -> None:
    st = MemoryLog(Membership(("l", "f")))
    f = RaftCore("f", None, st, RaftConfig())
    meta = SnapshotMeta(5, 2, Membership(("l", "f")))
    f.step(chunk(meta, 3, b"def", False))  # without its start (this node restarted mid-transfer)
    rd = f.ready()
    assert snap_replies(rd) == [0] and not rd.snapshot_chunks
    f.advance(rd)
    f.step(chunk(meta, 0, b"abc", False))
    f.step(chunk(meta, 0, b"abc", False))  # duplicate of the first chunk: not a new start
    f.step(chunk(meta, 6, b"ghi", False))  # a gap
    f.step(chunk(meta, 3, b"def", False))
    f.step(chunk(meta, 3, b"def", False))  # resent before our answer reached the leader
    rd = f.ready()
    assert [(c.offset, c.data) for c in rd.snapshot_chunks] == [(0, b"abc"), (3, b"def")]
    assert snap_replies(rd) == [3, 3, 3, 6, 6]
    f.advance(rd)
    f.step(chunk(meta, 6, b"ghi", True))
    f.step(chunk(meta, 6, b"ghi", True))  # the leader resends the last chunk until answered
    rd = f.ready()
    assert [(c.offset, c.done) for c in rd.snapshot_chunks] == [(6, True)]
    assert snap_replies(rd) == [9]
    f.advance(rd)
    assert f.snapshot_received(meta, b"abcdefghi") is True
    assert f.ready().snapshot == Snapshot(meta, b"abcdefghi")


def test_follower_drops_a_damaged_chunk_and_asks_for_it_again() -> None:
    f = RaftCore("f", None, MemoryLog(Membership(("l", "f"))), RaftConfig())
    meta = SnapshotMeta(5, 2, Membership(("l", "f")))
    f.step(chunk(meta, 0, b"abc", False))
    f.step(chunk(meta, 3, b"dXf", False, crc=zlib.crc32(b"def")))  # damaged on the way
    rd = f.ready()
    assert [c.data for c in rd.snapshot_chunks] == [b"abc"]
    assert snap_replies(rd) == [3, 3]
    f.advance(rd)
    f.step(chunk(meta, 3, b"def", True))
    rd = f.ready()
    assert [c.data for c in rd.snapshot_chunks] == [b"def"] and rd.snapshot_chunks[0].crc == zlib.crc32(b"abcdef")
    f.advance(rd)
    # a chunk of an older peer carries no checksum: taken as it is
    g = RaftCore("f", None, MemoryLog(Membership(("l", "f"))), RaftConfig())
    g.step(InstallSnapshot(frm="l", to="f", term=2, meta=meta, offset=0, data=b"abc", done=False))
    assert [c.data for c in g.ready().snapshot_chunks] == [b"abc"]


def test_a_snapshot_that_fails_the_nodes_check_is_sent_again_from_the_start() -> None:
    f = RaftCore("f", None, MemoryLog(Membership(("l", "f"))), RaftConfig())
    meta = SnapshotMeta(5, 2, Membership(("l", "f")))
    f.step(chunk(meta, 0, b"abc", False))
    f.step(chunk(meta, 3, b"def", True))
    f.advance(f.ready())
    assert f.snapshot_received(meta, None) is False  # the file did not match the CRC of the whole
    rd = f.ready()
    assert rd.snapshot is None and snap_replies(rd) == [0]
    f.advance(rd)
    f.step(chunk(meta, 3, b"def", True))  # the leader's resend of the last chunk: start again
    rd = f.ready()
    assert snap_replies(rd) == [0] and not rd.snapshot_chunks
    f.advance(rd)
    f.step(chunk(meta, 0, b"abc", False))
    f.step(chunk(meta, 3, b"def", True))
    rd = f.ready()
    assert [c.offset for c in rd.snapshot_chunks] == [0, 3]
    f.advance(rd)
    assert f.snapshot_received(meta, b"abcdef") is True


def test_a_new_leader_mid_transfer_starts_its_snapshot_from_zero() -> None:
    f = RaftCore("f", None, MemoryLog(Membership(("l", "m", "f"))), RaftConfig())
    meta = SnapshotMeta(5, 2, Membership(("l", "m", "f")))
    f.step(chunk(meta, 0, b"abc", False))
    f.advance(f.ready())
    # m wins term 3 and sends its own snapshot (other bytes, maybe another index)
    meta2 = SnapshotMeta(6, 3, meta.membership)
    f.step(chunk(meta2, 3, b"def", False, frm="m", term=3))  # not the old transfer's continuation
    rd = f.ready()
    assert snap_replies(rd) == [0] and not rd.snapshot_chunks
    f.advance(rd)
    f.step(chunk(meta, 3, b"def", True))  # the deposed leader's next chunk: refused by term
    rd = f.ready()
    assert not rd.snapshot_chunks and not snap_replies(rd)
    f.advance(rd)
    f.step(chunk(meta2, 0, b"uvw", False, frm="m", term=3))
    f.step(chunk(meta2, 3, b"xyz", True, frm="m", term=3))
    rd = f.ready()
    assert [(c.meta, c.offset) for c in rd.snapshot_chunks] == [(meta2, 0), (meta2, 3)]
    f.advance(rd)
    assert f.snapshot_received(meta, b"abcdef") is False  # the old one is over
    assert f.snapshot_received(meta2, b"uvwxyz") is True
    rd = f.ready()
    assert rd.snapshot == Snapshot(meta2, b"uvwxyz")
    assert all(m.to == "m" and m.term == 3 for m in rd.messages_after_persist)


def test_follower_fast_forwards_over_a_snapshot_its_log_already_holds() -> None:
    mem = Membership(("l", "f"))
    st = MemoryLog(mem)
    st.append([Entry(1, 1)])
    f = RaftCore("f", None, st, RaftConfig())
    f.step(AppendEntries(
        frm="l", to="f", term=2, prev_index=1, prev_term=1, entries=(Entry(2, 2), Entry(3, 2)), commit=1,
    ))
    rd = f.ready()
    st.append(list(rd.entries))
    f.advance(rd)
    meta = SnapshotMeta(2, 2, mem)
    f.step(chunk(meta, 0, b"x", True))
    f.advance(f.ready())
    assert f.snapshot_received(meta, b"x") is False  # the node may drop it: nothing to install
    rd = f.ready()
    assert rd.snapshot is None and f.commit == 2 and f.last_index == 3
    assert any(isinstance(m, AppendResponse) and m.index == 3 for m in rd.messages_after_persist)


def test_leader_restarts_a_transfer_when_the_follower_holds_none_of_it() -> None:
    """A follower that restarted mid-transfer (its partial file is gone) or whose file failed the
    check answers 0: the leader sends again from the start instead of waiting forever."""
    net = Net(["a", "b"], RaftConfig(snapshot_chunk_bytes=4))
    a = net.elect("a")
    for i in range(6):
        a.propose(b"x%d" % i)
    net.pump()
    data = b"0123456789abcdefghij"
    net.logs["a"].create_snapshot(a.applied, a.membership, data)
    net.logs["a"].compact(a.applied)
    net.restart("c")  # a new node: it needs the snapshot
    a.propose_conf_change(ConfChangeOp.ADD_LEARNER, "c")

    def one_round() -> None:
        out: list[Message] = []
        for nid, c in net.cores.items():
            if c.has_ready():
                out.extend(net.handle(nid, c.ready()))
        for m in out:
            net.cores[m.to].step(m)

    for _ in range(50):
        one_round()
        if len(net.sinks["c"]) >= 8:
            break
    pr = a.progress("c")
    assert pr is not None and pr.state is ProgressState.SNAPSHOT and pr.snap_offset >= 8
    c = net.restart("c")  # the half-gathered file is gone
    for _ in range(3):
        a.tick()
        net.pump()
    assert net.logs["c"].snapshot().data == data
    assert c.commit == a.commit and a.progress("c").state is ProgressState.REPLICATE  # type: ignore[union-attr]
    offsets = [ch.offset for nid, ch in net.received if nid == "c"]
    assert offsets.count(0) == 2 and offsets[-1] == 16


def test_acks_for_entries_replaced_before_they_were_persisted_are_not_sent() -> None:
    """Two appends stepped before one Ready: the term-2 ack for 1..5 must not go out after a
    term-3 leader replaced 2..5, or that old leader could commit entries never stored here."""

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
        if behind.role is RaftRole.CANDIDATE:
            break
        behind.tick()
    assert behind.role is RaftRole.CANDIDATE and behind.term < 9
    rd = behind.ready()
    behind.advance(rd)
    request = next(m for m in (*rd.messages, *rd.messages_after_persist) if isinstance(m, RequestVote) and m.to == "a")
    ahead.step(request)
    rd = ahead.ready()
    replies = [m for m in (*rd.messages, *rd.messages_after_persist) if isinstance(m, VoteResponse)]
    assert [(m.to, m.term, m.granted) for m in replies] == [("b", 9, False)]
    behind.step(replies[0])
    assert behind.term == 9 and behind.role is RaftRole.FOLLOWER


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


def test_a_voter_heard_in_the_last_check_quorum_window_is_still_a_transferee_right_after_the_next_begins() -> None:
    """Each check-quorum window starts with every follower's ``recent_active`` cleared; until their
    next answers, a leadership transfer without a target found no live voter (409 to
    ``POST /cluster/transfer-leader``, no hand-over at shutdown). The window before counts too."""
    from types import SimpleNamespace

    from molens.actors.raft_peer import RaftPeer

    net = Net(["a", "b", "c"])
    leader = net.elect("a")
    net.pump()
    peer = SimpleNamespace(core=leader, node_id="a")
    assert RaftPeer.best_transferee(peer) in ("b", "c")  # type: ignore[arg-type]
    for _ in range(net.cfg.election_tick):  # a window ends: flags cleared, no answer yet
        leader.tick()
    assert not any(leader.progress(v).recent_active for v in ("b", "c"))  # type: ignore[union-attr]
    assert RaftPeer.best_transferee(peer) in ("b", "c")  # type: ignore[arg-type]


def test_an_append_that_would_rewrite_a_committed_entry_is_dropped_and_counted_not_raised() -> None:
    """The codec refuses such an append from the wire; one that reaches the core anyway (no leader
    of a correct cluster sends it) is dropped and counted, and the node keeps its log and serves on:
    before, the core raised, which stopped the Raft actor."""
    net = Net(["a", "b", "c"])
    a = net.elect("a")
    a.propose(b"one")
    net.pump()
    b = net.cores["b"]
    committed, last = b.commit, b.last_index
    assert committed == last >= 2
    # past prev_index a well-formed append cannot reach the committed log: this one overlaps it
    rewrite = AppendEntries(frm="a", to="b", term=a.term, prev_index=committed, prev_term=a.term,
                            entries=(Entry(committed, a.term + 1, EntryKind.NORMAL, b"other"),), commit=committed)
    b.step(rewrite)
    assert b.conflicting_appends == 1
    assert (b.commit, b.last_index) == (committed, last)
    a.propose(b"two")
    net.pump()
    assert b.commit == committed + 1 and net.applied["b"][-1].data == b"two"
