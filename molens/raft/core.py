"""A pure Raft state machine in the shape of etcd's raft: no threads, sockets, clocks or disk.

Driving it (what the runtime's actor does)::

    core = RaftCore(node_id, peers, log_view, RaftConfig(), random.Random())
    every tick interval:        core.tick()
    on a message from a peer:   core.step(decode(frame))
    on a client write:          index = core.propose(data)        # NotLeaderError(leader) elsewhere
    on a linearizable read:     core.read_index(ctx)              # answer comes as a ReadState
    then, whenever core.has_ready():
        rd = core.ready()
        1. publish rd.soft_state (role / leader changed) if not None
        2. send rd.messages now: they never depend on this Ready being durable (the leader's
           AppendEntries may go out while its own fsync runs)
        3. persist in ONE durable write: rd.snapshot (install it first), then append rd.entries
           (replacing any stored suffix from rd.entries[0].index), then rd.hard_state
           (term, vote and commit as one unit). Skip what is None/empty. Write each of
           rd.snapshot_chunks at its offset of the snapshot being received (see below).
        4. send rd.messages_after_persist (vote, append and snapshot responses: they promise
           that what they acknowledge is on disk)
        5. apply: restore the FSM from rd.snapshot if any, then apply rd.committed_entries in
           order (they are durable by now); serve every rd.read_states entry once the FSM's
           applied index >= its index
        6. core.advance(rd). If a chunk of rd was the last of its snapshot, check the whole and
           call core.snapshot_received(meta, data or None), then or later (the check may run on
           another thread; the core keeps stepping meanwhile)

Calls and what they raise: ``propose``/``propose_batch`` (many entries, one broadcast: use it to
batch client writes) raise ``NotLeaderError(leader)`` on a non-leader and ``ProposalDroppedError``
during a leadership transfer; ``propose_conf_change`` also raises ``ConfChangeError`` (its
``ConfChangePending`` when asked before an entry of the term committed or beside another change);
``read_index(ctx)`` needs a unique non-empty ``ctx``, is forwarded to the leader by a follower
and raises ``NotLeaderError(None)`` when no leader is known; ``transfer_leader(to)`` (graceful
shutdown) sends TimeoutNow once ``to`` is caught up and gives up after an election timeout;
``campaign(force=False)`` starts an election at once. A proposal's index is only a promise: the
write succeeded when the FSM applies *that* index with *that* entry; if another entry shows up
there (a new leader overwrote it) it failed; if leadership changes first, its outcome is unknown.
Read-only state for status pages: ``term``, ``vote``, ``role``, ``leader``, ``commit``,
``applied``, ``last_index``, ``membership``, ``progress(peer)``.

A follower's ``Ready.committed_entries`` may include entries that arrive in the same Ready's
``entries``: persist first (step 3), then apply (step 5). ``messages`` hold only what a durable
leader sends (AppendEntries, heartbeats, snapshot chunks, TimeoutNow, ReadIndex answers), pre-vote
requests and forwarded reads; everything that reveals a new term, vote or log position to others
waits in ``messages_after_persist``.

Only one Ready is outstanding: ``has_ready()`` is False and ``ready()`` raises until ``advance``.
``tick``/``step``/``propose`` may be called in between; their effects go into the next Ready.
Applying may lag (the node may queue committed entries and apply them later), but entries must be
applied in order and snapshots taken only at an applied index.

Snapshots: the application takes one at its applied index ``i`` (``membership_at(i)`` gives the
membership to record), stores it where ``LogView.snapshot()`` returns it, and may then compact
the stable log up to ``i`` (keep a tail for slow followers). A follower that needs compacted
entries gets the snapshot in chunks (``InstallSnapshot``, each with the CRC-32 of its data). The
core holds none of them: it accepts them in order (from offset 0, for one leader, term and
snapshot; a chunk out of place is answered with the offset it expects, a damaged one is dropped
and asked for again) and hands each to the node in ``Ready.snapshot_chunks`` to write where it
gathers the snapshot (a file; offset 0 starts it afresh). The last one (``done``) carries the
CRC-32 of the whole: the node checks what it gathered against it and calls
``snapshot_received(meta, data)`` with the snapshot's data as it now holds it (``None`` when the
check failed: the core forgets the transfer and the leader sends it again from 0). The core then
answers the leader and, unless its log already holds that prefix, hands the snapshot back in
``Ready.snapshot`` to install.

Membership changes are single-server (``propose_conf_change``): add a learner, promote it once it
caught up (see ``progress``), remove any member (the leader too: it steps down once the removal
commits). A node uses the newest configuration in its log, committed or not. A change is refused
until the leader committed an entry of its own term, and while another change is uncommitted.

Safety features: pre-vote and check-quorum (a partitioned node cannot disrupt a healthy leader,
a leader that hears from no quorum for an election timeout steps down), commit only by counting
current-term entries (paper §5.4.2, figure 8), a no-op at the start of each term, truncation only
on a real conflict, ReadIndex confirmed by a quorum heartbeat round (a stale leader never answers).

``RaftConfig.unsafe`` deliberately breaks one rule; it exists only so the simulator's own test
can prove it catches the bug. Never set it elsewhere.
"""

from __future__ import annotations

import enum
import logging
import random
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from molens.raft.errors import (
    CompactedError,
    ConfChangeError,
    ConfChangePending,
    EntryUnavailableError,
    LogError,
    NotLeaderError,
    ProposalDroppedError,
    RaftError,
)
from molens.raft.log import (
    Entry,
    EntryKind,
    HardState,
    LogView,
    Membership,
    Snapshot,
    SnapshotBytes,
    SnapshotMeta,
    make_entry,
)
from molens.raft.messages import (
    AppendEntries,
    AppendResponse,
    ConfChange,
    ConfChangeOp,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    ReadIndexRequest,
    ReadIndexResponse,
    RequestVote,
    SnapshotResponse,
    TimeoutNow,
    VoteResponse,
    decode_conf_change,
    encode_conf_change,
)

log = logging.getLogger(__name__)











class RaftRole(enum.StrEnum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class ProgressState(enum.StrEnum):
    PROBE = "probe"
    """One append in flight until the follower answers: we look for the matching index."""
    REPLICATE = "replicate"
    """Optimistic pipelining, at most ``max_inflight`` appends in flight."""
    SNAPSHOT = "snapshot"
    """Sending a snapshot; appends pause until the follower has it."""


class UnsafeRule(enum.StrEnum):
    """Deliberate bugs, only for the simulator's self-test."""

    COMMIT_PREVIOUS_TERM = "commit_previous_term"
    """Commit by counting replicas of any entry, not only current-term ones (figure 8)."""
    VOTE_BEFORE_PERSIST = "vote_before_persist"
    """Send vote grants before the vote is durable."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    election_tick: int = 10
    """Ticks without a leader before a follower campaigns (randomized in [n, 2n))."""
    heartbeat_tick: int = 1
    """Ticks between leader heartbeats."""
    pre_vote: bool = True
    check_quorum: bool = True
    max_inflight: int = 256
    """Appends in flight per follower in the replicate state."""
    max_msg_bytes: int = 1 << 20
    """Byte bound of one AppendEntries batch (at least one entry is always sent)."""
    max_apply_bytes: int = 64 << 20
    """Byte bound of ``Ready.committed_entries``."""
    snapshot_chunk_bytes: int = 1 << 20
    unsafe: UnsafeRule | None = None
    """Test-only: break one rule on purpose (see :class:`UnsafeRule`)."""


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state the node publishes: who leads, and this node's role."""

    leader: str | None
    role: RaftRole


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the FSM has applied ``index``."""

    index: int
    ctx: bytes


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """A piece of the snapshot ``meta`` that a follower accepted, for the node to write at ``offset``
    of the snapshot it is gathering (``offset == 0``: a new transfer, drop what was gathered).
    Chunks come in order without gaps. ``crc`` is the CRC-32 of the snapshot's data from 0 through
    this chunk; on the last one (``done``) the node checks the whole against it, then answers with
    :meth:`RaftCore.snapshot_received`."""

    meta: SnapshotMeta
    offset: int
    data: bytes
    done: bool
    crc: int


@dataclass(slots=True)
class _SnapshotIntake:
    """The follower's side of one transfer: whose it is, how much arrived, its running CRC-32."""

    key: tuple[str, int, int, int]
    """(leader, term, snapshot index, snapshot term)"""
    meta: SnapshotMeta
    next: int = 0
    crc: int = 0
    done: bool = False
    """The last chunk went to the node; waiting for ``snapshot_received``."""


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the node must do; see the module docstring for the order."""

    soft_state: SoftState | None
    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None
    messages: tuple[Message, ...]
    messages_after_persist: tuple[Message, ...]
    committed_entries: tuple[Entry, ...]
    read_states: tuple[ReadState, ...]
    snapshot_chunks: tuple[SnapshotChunk, ...] = ()

    @property
    def must_persist(self) -> bool:
        return self.hard_state is not None or bool(self.entries) or self.snapshot is not None


class Progress:
    """The leader's view of one follower."""

    __slots__ = (
        "inflight",
        "learner",
        "match",
        "next",
        "pending_snapshot",
        "probe_sent",
        "recent_active",
        "snap",
        "snap_offset",
        "state",
        "was_active",
    )

    def __init__(self, next_index: int, learner: bool) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.recent_active = False
        self.was_active = False
        """``recent_active`` of the check-quorum window before this one (the flag is cleared at each)."""
        self.inflight: deque[int] = deque()
        self.learner = learner
        self.pending_snapshot = 0
        self.snap: Snapshot | None = None
        self.snap_offset = 0

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.inflight.clear()
        self.pending_snapshot = 0
        self.snap = None

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflight.clear()

    def become_snapshot(self, snap: Snapshot) -> None:
        self.state = ProgressState.SNAPSHOT
        self.inflight.clear()
        self.pending_snapshot = snap.meta.index
        self.snap = snap
        self.snap_offset = 0

    def maybe_update(self, n: int) -> bool:
        updated = False
        if n > self.match:
            self.match = n
            updated = True
            self.probe_sent = False
        if n + 1 > self.next:
            self.next = n + 1
        infl = self.inflight
        while infl and infl[0] <= n:
            infl.popleft()
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """A rejection of ``rejected``; False when it is stale (etcd's MaybeDecrTo)."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self, max_inflight: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return len(self.inflight) >= max_inflight
        return True


class _RaftLog:
    """Stable log (read through ``LogView``) plus the unstable tail and snapshot not yet persisted."""

    __slots__ = ("applied", "committed", "ents", "offset", "snap", "storage")

    def __init__(self, storage: LogView) -> None:
        self.storage = storage
        self.ents: list[Entry] = []
        self.offset = storage.last_index() + 1
        self.snap: Snapshot | None = None
        self.committed = storage.first_index() - 1
        self.applied = self.committed

    def first_index(self) -> int:
        if self.snap is not None:
            return self.snap.meta.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        if self.ents:
            return self.offset + len(self.ents) - 1
        if self.snap is not None:
            return self.snap.meta.index
        return self.offset - 1

    def stable_last(self) -> int:
        return self.offset - 1 if self.snap is None else 0

    def term(self, i: int) -> int:
        off = self.offset
        if i >= off:
            k = i - off
            if k < len(self.ents):
                return self.ents[k].term
            raise EntryUnavailableError(i)
        if self.snap is not None:
            if i == self.snap.meta.index:
                return self.snap.meta.term
            raise CompactedError(i)
        return self.storage.term(i)

    def last_term(self) -> int:
        return self.term(self.last_index())

    def match_term(self, i: int, t: int) -> bool:
        try:
            return self.term(i) == t
        except LogError:
            return False

    def entries(self, lo: int, hi: int, max_bytes: int | None) -> list[Entry]:
        """Entries in ``[lo, hi)``; raises CompactedError when ``lo`` is below the first index."""
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise CompactedError(lo)
        off = self.offset
        out: list[Entry] = []
        if lo < off:
            top = min(hi, off)
            out = self.storage.entries(lo, top, max_bytes)
            if len(out) < top - lo or hi <= off:
                return out
        if hi > off:
            k0 = max(lo, off) - off
            u = self.ents[k0 : hi - off]
            if max_bytes is None:
                out.extend(u)
                return out
            total = 0
            for e in out:
                total += len(e.data) + 24
            n = 0
            for e in u:
                total += len(e.data) + 24
                if total > max_bytes and (n > 0 or out):
                    break
                n += 1
            if n == len(u):
                out.extend(u)
            else:
                out.extend(u[:n])
        return out

    def find_conflict(self, ents: Sequence[Entry]) -> int:
        """Index of the first entry that is new or conflicts in term; 0 if all are present."""
        last = self.last_index()
        for e in ents:
            if e.index > last:
                return e.index
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest ``i <= index`` whose term is at most ``term``, with that term (0 when unknown)."""
        if index > self.last_index():
            return index, 0
        while True:
            try:
                t = self.term(index)
            except LogError:
                return index, 0
            if t <= term:
                return index, t
            index -= 1

    def truncate_and_append(self, ents: Sequence[Entry]) -> None:
        after = ents[0].index
        n = len(self.ents)
        if after == self.offset + n:
            self.ents.extend(ents)
        elif after <= self.offset:
            # replaces (part of) the stable log: storage truncates when it appends these
            self.offset = after
            self.ents = list(ents)
        else:
            self.ents = self.ents[: after - self.offset]
            self.ents.extend(ents)

    def commit_to(self, c: int) -> bool:
        if c > self.committed:
            if c > self.last_index():
                raise RaftError(f"commit {c} beyond last index {self.last_index()}")
            self.committed = c
            return True
        return False

    def stable_to(self, i: int, t: int) -> None:
        if i < self.offset:
            return
        k = i - self.offset
        if k < len(self.ents) and self.ents[k].term == t:
            del self.ents[: k + 1]
            self.offset = i + 1

    def stable_snap_to(self, i: int) -> None:
        if self.snap is not None and self.snap.meta.index == i:
            self.snap = None

    def restore(self, snap: Snapshot) -> None:
        self.committed = snap.meta.index
        self.applied = snap.meta.index
        self.snap = snap
        self.ents = []
        self.offset = snap.meta.index + 1

    def has_next_committed(self) -> bool:
        return self.committed > max(self.applied, self.first_index() - 1)

    def next_committed(self, max_bytes: int) -> list[Entry]:
        lo = max(self.applied + 1, self.first_index())
        hi = self.committed + 1
        if lo >= hi:
            return []
        return self.entries(lo, hi, max_bytes)


@dataclass(slots=True)
class _ReadRequest:
    ctx: bytes
    index: int
    requester: str
    acks: set[str]


_RESPONSES = (AppendResponse, HeartbeatResponse, SnapshotResponse, VoteResponse)
_LEADER_MSGS = (AppendEntries, Heartbeat, InstallSnapshot, TimeoutNow, ReadIndexResponse)


class RaftCore:
    """One Raft peer as a deterministic state machine. See the module docstring for the driving loop.

    ``peers`` is the bootstrap membership (a ``Membership`` or the initial voter ids), used only when
    storage holds neither a snapshot nor a membership. A founding member starting on empty storage
    writes it to the log as entry 1 (see ``_bootstrap``); a node joining an existing cluster must
    start with empty storage and ``peers=None`` (the leader adds it with ``propose_conf_change``). ``applied`` is the FSM's applied index at
    start-up (default: the snapshot index); committed entries after it are handed out again.
    """

    def __init__(
        self,
        node_id: str,
        peers: Membership | Sequence[str] | None,
        log_view: LogView,
        config: RaftConfig | None = None,
        rng: random.Random | None = None,
        *,
        applied: int | None = None,
    ) -> None:
        self.id = node_id
        self.cfg = config or RaftConfig()
        if self.cfg.election_tick <= self.cfg.heartbeat_tick:
            raise ValueError("election_tick must exceed heartbeat_tick")
        self._rng = rng or random.Random()
        self._log = _RaftLog(log_view)
        hs, stored_membership = log_view.initial_state()
        snap_meta = log_view.snapshot_meta()
        if snap_meta.index > 0:
            base = snap_meta.membership
        elif stored_membership.voters or stored_membership.learners:
            base = stored_membership
        elif isinstance(peers, Membership):
            base = peers
        else:
            base = Membership(tuple(peers or ()))
        self._conf_hist: list[tuple[int, Membership]] = [(snap_meta.index, base)]
        self._replay_conf_changes()
        self.term = hs.term
        self.vote = hs.vote
        first = self._log.first_index()
        self._log.committed = min(max(hs.commit, first - 1), self._log.last_index())
        start_applied = first - 1 if applied is None else applied
        if not first - 1 <= start_applied <= self._log.committed:
            raise ValueError(f"applied {start_applied} outside [{first - 1}, {self._log.committed}]")
        self._log.applied = start_applied
        self._durable_term = hs.term
        self._prev_hs = HardState(self.term, self.vote, self._log.committed)
        self.role = RaftRole.FOLLOWER
        self.leader: str | None = None
        self._prev_ss = SoftState(None, RaftRole.FOLLOWER)
        self._msgs: list[Message] = []
        self._msgs_after: list[Message] = []
        self._read_states: list[ReadState] = []
        self._outstanding = False
        self._prs: dict[str, Progress] = {}
        self._votes: dict[str, bool] = {}
        self._transferee: str | None = None
        self.conflicting_appends = 0
        """Appends dropped because an entry of theirs contradicted this node's committed log: a sender
        that is not a correct member of the cluster (the simulator counts any as a violation)."""
        self.no_campaign = ""
        """Why this node must not campaign now (the shell sets it, e.g. its clock is off from the
        majority's: docs/architecture.md#clock-skew); "" when it may. Votes are not affected."""
        self._term_start = 0
        self._reads: dict[bytes, _ReadRequest] = {}
        self._reads_waiting: list[tuple[bytes, str]] = []
        self._intake: _SnapshotIntake | None = None
        self._snap_chunks: list[SnapshotChunk] = []
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self.cfg.election_tick
        self._become_follower(self.term, None)
        if log_view.last_index() == 0 and snap_meta.index == 0 and hs.term == 0 and base.voters:
            self._bootstrap(base)
        log.debug("raft start node=%s term=%d commit=%d applied=%d", node_id, self.term, self.commit, start_applied)

    def _bootstrap(self, mem: Membership) -> None:
        """A founding member with empty storage writes the initial configuration as entry 1, term 1,
        committed (as etcd's Bootstrap): identical on every founder, so it is in every log and a
        member that joins later learns the founding configuration from the log itself."""
        founding = Membership(tuple(sorted(mem.voters)), tuple(sorted(mem.learners)))
        cc = ConfChange(ConfChangeOp.BOOTSTRAP, "", founding)
        self._become_follower(1, None)
        self._append([Entry(1, 1, EntryKind.CONF_CHANGE, encode_conf_change(cc))])
        self._log.committed = 1

    # --- public read-only view ---------------------------------------------------------------
    @property
    def commit(self) -> int:
        return self._log.committed

    @property
    def applied(self) -> int:
        """Index of the last entry handed out for application."""
        return self._log.applied

    @property
    def last_index(self) -> int:
        return self._log.last_index()

    @property
    def first_index(self) -> int:
        return self._log.first_index()

    @property
    def membership(self) -> Membership:
        """The newest configuration in the log (the one in force, committed or not)."""
        return self._conf_hist[-1][1]

    def membership_at(self, index: int) -> Membership:
        """The configuration in force at ``index`` (for snapshot metadata)."""
        found = self._conf_hist[0][1]
        for i, m in self._conf_hist:
            if i <= index:
                found = m
        return found

    def log_term(self, index: int) -> int | None:
        """Term of ``index`` in this node's log (stable or not), None when absent."""
        try:
            return self._log.term(index)
        except LogError:
            return None

    def log_entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries ``[lo, hi)`` of this node's log, stable and unstable (for inspection)."""
        return self._log.entries(lo, hi, None)

    def progress(self, peer: str) -> Progress | None:
        """The leader's replication progress of ``peer`` (None when not leader / unknown peer)."""
        return self._prs.get(peer) if self.role is RaftRole.LEADER else None

    @property
    def transferee(self) -> str | None:
        return self._transferee

    def is_voter(self) -> bool:
        return self.id in self.membership.voters

    # --- state transitions ---------------------------------------------------------------------
    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
            if self._msgs_after:
                # a vote granted in an older term and still waiting for persistence would leave
                # after a HardState that no longer records it: drop it (its candidate is outdated;
                # simulator durability check, seeds 3869, 4826, 7035 at 5 nodes)
                self._msgs_after = [
                    m
                    for m in self._msgs_after
                    if not (isinstance(m, VoteResponse) and m.granted and not m.pre and m.term < term)
                ]
        self.leader = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = self.cfg.election_tick + self._rng.randrange(self.cfg.election_tick)
        self._votes = {}
        self._transferee = None
        self._prs = {}
        self._reads = {}
        self._reads_waiting = []

    def _become_follower(self, term: int, leader: str | None) -> None:
        self._reset(term)
        self.role = RaftRole.FOLLOWER
        self.leader = leader

    def _become_pre_candidate(self) -> None:
        # term and vote unchanged: a pre-vote does not disturb anyone
        self._votes = {}
        self._prs = {}
        self.leader = None
        self.role = RaftRole.PRE_CANDIDATE

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = RaftRole.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = RaftRole.LEADER
        self.leader = self.id
        last = self._log.last_index()
        self._sync_progress()
        me = self._prs.get(self.id)
        if me is not None:
            me.match = self._log.stable_last()
            me.next = last + 1
            me.recent_active = True
        self._term_start = last + 1
        self._append([Entry(last + 1, self.term, EntryKind.NORMAL, b"")])
        log.info("raft leader node=%s term=%d last=%d", self.id, self.term, last + 1)
        self._bcast_append()

    def _sync_progress(self) -> None:
        mem = self.membership
        old = self._prs
        prs: dict[str, Progress] = {}
        nxt = self._log.last_index() + 1
        for nid in (*mem.voters, *mem.learners):
            pr = old.get(nid)
            if pr is None:
                pr = Progress(nxt, nid in mem.learners)
            pr.learner = nid in mem.learners
            prs[nid] = pr
        self._prs = prs
        if self._transferee is not None and self._transferee not in mem.voters:
            self._transferee = None

    # --- messages out --------------------------------------------------------------------------
    def _send(self, m: Message) -> None:
        if isinstance(m, _RESPONSES):
            if self.cfg.unsafe is UnsafeRule.VOTE_BEFORE_PERSIST and isinstance(m, VoteResponse):
                self._msgs.append(m)
            else:
                self._msgs_after.append(m)
        elif isinstance(m, _LEADER_MSGS):
            # a leader may replicate while its own fsync runs, once its term is durable
            if self._durable_term == self.term:
                self._msgs.append(m)
            else:
                self._msgs_after.append(m)
        elif isinstance(m, RequestVote) and not m.pre:
            self._msgs_after.append(m)  # our own vote and term must be durable first
        else:
            self._msgs.append(m)

    # --- ticks -----------------------------------------------------------------------------------
    def tick(self) -> None:
        """Advance logical time by one tick."""
        if self.role is RaftRole.LEADER:
            self._tick_leader()
        else:
            self._election_elapsed += 1
            if self._election_elapsed >= self._randomized_timeout and self.is_voter():
                self._election_elapsed = 0
                if self.no_campaign:
                    log.debug("raft no campaign node=%s term=%d: %s", self.id, self.term, self.no_campaign)
                else:
                    self._campaign(pre=self.cfg.pre_vote, transfer=False)

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self.cfg.election_tick:
            self._election_elapsed = 0
            if self.cfg.check_quorum:
                if not self._quorum_active():
                    log.info("raft step down node=%s term=%d: no quorum heard", self.id, self.term)
                    self._become_follower(self.term, None)
                    return
                for nid, pr in self._prs.items():
                    pr.was_active = pr.recent_active
                    pr.recent_active = nid == self.id
            if self._transferee is not None:
                self._transferee = None
        if self._heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self._heartbeat_elapsed = 0
            ctx = next(reversed(self._reads)) if self._reads else b""
            self._bcast_heartbeat(ctx)

    def _quorum_active(self) -> bool:
        voters = self.membership.voters
        active = sum(1 for v in voters if (pr := self._prs.get(v)) is not None and pr.recent_active)
        return active >= len(voters) // 2 + 1

    # --- elections --------------------------------------------------------------------------------
    def campaign(self, force: bool = False) -> None:
        """Start an election now, as a timeout would; no-op for leaders and non-voters.

        ``force`` skips pre-vote and overrides the voters' leader lease, as TimeoutNow does.
        """
        if self.role is not RaftRole.LEADER and self.is_voter() and not self.no_campaign:
            self._campaign(pre=self.cfg.pre_vote and not force, transfer=force)

    def step_down(self, reason: str) -> None:
        """A leader gives up leadership in its term (the others elect a new one once their election
        timeout passes); a no-op otherwise."""
        if self.role is RaftRole.LEADER:
            log.warning("raft step down node=%s term=%d: %s", self.id, self.term, reason)
            self._become_follower(self.term, None)

    def _campaign(self, pre: bool, transfer: bool) -> None:
        if pre:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
        if self._poll(self.id, True, pre):
            return
        li = self._log.last_index()
        lt = self._log.last_term()
        for v in self.membership.voters:
            if v != self.id:
                self._send(RequestVote(
                    frm=self.id, to=v, term=vote_term, last_index=li, last_term=lt, pre=pre, transfer=transfer,
                ))

    def _poll(self, frm: str, granted: bool, pre: bool) -> bool:
        """Record a vote; True when the election was decided (won or lost)."""
        self._votes.setdefault(frm, granted)
        voters = self.membership.voters
        q = len(voters) // 2 + 1
        yes = sum(1 for v in voters if self._votes.get(v) is True)
        no = sum(1 for v in voters if self._votes.get(v) is False)
        if yes >= q:
            if pre:
                self._campaign(pre=False, transfer=False)
            else:
                self._become_leader()
            return True
        if no > len(voters) - q:
            self._become_follower(self.term, None)
            return True
        return False

    def _up_to_date(self, last_index: int, last_term: int) -> bool:
        lt = self._log.last_term()
        return last_term > lt or (last_term == lt and last_index >= self._log.last_index())

    # --- step ------------------------------------------------------------------------------------
    def step(self, m: Message) -> None:
        """Process one message from a peer. Messages for another node are ignored."""
        if m.to != self.id:
            return
        if m.term > self.term:
            if isinstance(m, RequestVote):
                in_lease = (
                    self.cfg.check_quorum
                    and self.leader is not None
                    and self._election_elapsed < self.cfg.election_tick
                )
                if in_lease and not m.transfer:
                    return  # a leader is alive: do not let a disruptive node raise our term
                if not m.pre:
                    self._become_follower(m.term, None)
            elif isinstance(m, VoteResponse) and m.pre and m.granted:
                pass  # adopted when the real election starts
            elif isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
                self._become_follower(m.term, m.frm)
            else:
                self._become_follower(m.term, None)
        elif m.term < self.term:
            if isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
                # tell the stale leader about the newer term so it steps down
                self._send(AppendResponse(frm=self.id, to=m.frm, term=self.term, index=0))
            elif isinstance(m, RequestVote):
                # a rejection carrying our term (the Raft paper's RequestVote reply): a candidate
                # behind in terms catches up instead of campaigning below them forever, e.g. while
                # a node with a stale configuration, which never messages it, keeps raising the
                # others' term (simulator, 3 nodes, seeds 5017 and 6944, pre-vote off)
                self._send(VoteResponse(frm=self.id, to=m.frm, term=self.term, granted=False, pre=m.pre))
            return

        if isinstance(m, RequestVote):
            self._handle_vote_request(m)
            return
        if self.role is RaftRole.LEADER:
            self._step_leader(m)
        else:
            self._step_follower(m)

    def _handle_vote_request(self, m: RequestVote) -> None:
        can_vote = (
            self.vote == m.frm
            or (self.vote is None and self.leader is None)
            or (m.pre and m.term > self.term)
        )
        if can_vote and self._up_to_date(m.last_index, m.last_term):
            self._send(VoteResponse(frm=self.id, to=m.frm, term=m.term, granted=True, pre=m.pre))
            if not m.pre:
                self._election_elapsed = 0
                self.vote = m.frm
        else:
            self._send(VoteResponse(frm=self.id, to=m.frm, term=self.term, granted=False, pre=m.pre))

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, AppendEntries):
            self._follow(m.frm)
            self._handle_append(m)
        elif isinstance(m, Heartbeat):
            self._follow(m.frm)
            self._log.commit_to(min(m.commit, self._log.last_index()))
            self._send(HeartbeatResponse(self.id, m.frm, self.term, m.ctx))
        elif isinstance(m, InstallSnapshot):
            self._follow(m.frm)
            self._handle_snapshot(m)
        elif isinstance(m, VoteResponse):
            if self.role is RaftRole.PRE_CANDIDATE and m.pre and m.term == self.term + 1:
                self._poll(m.frm, m.granted, True)
            elif self.role is RaftRole.CANDIDATE and not m.pre and m.term == self.term:
                self._poll(m.frm, m.granted, False)
        elif isinstance(m, TimeoutNow):
            if self.is_voter() and not self.no_campaign:
                log.info("raft timeout-now node=%s term=%d from=%s", self.id, self.term, m.frm)
                self._campaign(pre=False, transfer=True)
        elif isinstance(m, ReadIndexResponse):
            self._read_states.append(ReadState(m.index, m.ctx))

    def _follow(self, leader: str) -> None:
        if self.role is not RaftRole.FOLLOWER:
            self._become_follower(self.term, leader)
        self.leader = leader
        self._election_elapsed = 0

    def _handle_append(self, m: AppendEntries) -> None:
        lg = self._log
        if m.prev_index < lg.committed:
            self._send(AppendResponse(frm=self.id, to=m.frm, term=self.term, index=lg.committed))
            return
        if lg.match_term(m.prev_index, m.prev_term):
            ents = m.entries
            last_new = m.prev_index + len(ents)
            if ents:
                ci = lg.find_conflict(ents)
                if ci:
                    if ci <= lg.committed:  # no leader of a correct cluster sends it: never rewrite what is committed
                        self.conflicting_appends += 1
                        log.error("raft append dropped node=%s from=%s term=%d: entry %d conflicts with committed %d",
                                  self.id, m.frm, m.term, ci, lg.committed)
                        return
                    self._append(ents[ci - m.prev_index - 1 :])
            lg.commit_to(min(m.commit, last_new))
            self._send(AppendResponse(frm=self.id, to=m.frm, term=self.term, index=last_new))
        else:
            hint = min(m.prev_index, lg.last_index())
            hi, ht = lg.find_conflict_by_term(hint, m.prev_term)
            self._send(AppendResponse(
                frm=self.id, to=m.frm, term=self.term, index=m.prev_index, reject=True, hint_index=hi,
                hint_term=ht,
            ))

    def _handle_snapshot(self, m: InstallSnapshot) -> None:
        lg = self._log
        if m.meta.index <= lg.committed:
            # stale or duplicate: never roll back; tell the leader where we are
            self._send(AppendResponse(frm=self.id, to=m.frm, term=self.term, index=lg.committed))
            return
        key = (m.frm, m.term, m.meta.index, m.meta.term)
        it = self._intake
        if it is not None and it.key != key:
            it = None  # another leader, term or snapshot: that transfer is over
        if m.crc is not None and zlib.crc32(m.data) != m.crc:
            log.info(
                "raft snapshot chunk damaged node=%s from=%s index=%d offset=%d: dropped, asked again",
                self.id, m.frm, m.meta.index, m.offset,
            )
        elif it is None and m.offset == 0:
            it = self._intake = _SnapshotIntake(key, m.meta)
            self._accept_chunk(it, m)
            if m.done:
                return  # answered by snapshot_received
        elif it is not None and not it.done and m.offset == it.next:
            self._accept_chunk(it, m)
            if m.done:
                return
        # answer with the next offset wanted: 0 asks the leader to start again from the beginning
        self._send(SnapshotResponse(
            frm=self.id, to=m.frm, term=self.term, index=m.meta.index, offset=0 if it is None else it.next,
        ))

    def _accept_chunk(self, it: _SnapshotIntake, m: InstallSnapshot) -> None:
        it.crc = zlib.crc32(m.data, it.crc)
        it.next += len(m.data)
        it.done = m.done
        self._snap_chunks.append(SnapshotChunk(meta=m.meta, offset=m.offset, data=m.data, done=m.done, crc=it.crc))

    def snapshot_received(self, meta: SnapshotMeta, data: bytes | SnapshotBytes | None) -> bool:
        """The node gathered the snapshot ``meta`` whose last chunk it got in a Ready, and checked
        it: ``data`` is the snapshot as the node now holds it, or None when it failed the check
        (then the leader is asked to send it again from the start). Returns True when the snapshot
        is to be installed (it comes back in the next ``Ready.snapshot``); False when it is not
        needed (superseded, or this log already holds that prefix), and the node may drop it."""
        it = self._intake
        if it is None or not it.done or it.meta != meta:
            return False
        self._intake = None
        leader, term = it.key[0], it.key[1]
        current = term == self.term and self.role is RaftRole.FOLLOWER
        lg = self._log
        if data is None:
            log.info("raft snapshot failed its check node=%s index=%d: asking for it again", self.id, meta.index)
            if current:
                self._send(SnapshotResponse(frm=self.id, to=leader, term=self.term, index=meta.index, offset=0))
            return False
        if self.role is not RaftRole.FOLLOWER or meta.index <= lg.committed:
            return False  # overtaken while the node wrote it: the log has that prefix committed
        if current:
            self._send(SnapshotResponse(frm=self.id, to=leader, term=self.term, index=meta.index, offset=it.next))
        install = not lg.match_term(meta.index, meta.term)
        if install:
            log.info("raft install snapshot node=%s index=%d term=%d", self.id, meta.index, meta.term)
            lg.restore(Snapshot(meta, data))
            self._conf_hist = [(meta.index, meta.membership)]
        else:
            lg.commit_to(meta.index)  # we already have that prefix: just fast-forward
        if current:
            self._send(AppendResponse(frm=self.id, to=leader, term=self.term, index=lg.last_index()))
        return install

    # --- leader ---------------------------------------------------------------------------------
    def _step_leader(self, m: Message) -> None:
        if isinstance(m, AppendResponse):
            self._handle_append_response(m)
        elif isinstance(m, HeartbeatResponse):
            pr = self._prs.get(m.frm)
            if pr is None:
                return
            pr.recent_active = True
            pr.probe_sent = False
            if pr.state is ProgressState.REPLICATE and len(pr.inflight) >= self.cfg.max_inflight:
                pr.inflight.popleft()
            if pr.match < self._log.last_index():
                # empty if need be: a lost append is then found by the follower's rejection
                self._maybe_send_append(m.frm, pr, True)
            if m.ctx:
                self._read_ack(m.ctx, m.frm)
        elif isinstance(m, SnapshotResponse):
            pr = self._prs.get(m.frm)
            if pr is None:
                return
            pr.recent_active = True
            if pr.state is not ProgressState.SNAPSHOT or pr.snap is None or m.index != pr.pending_snapshot:
                return
            if m.offset >= pr.snap_offset:
                more = m.offset > pr.snap_offset
                pr.snap_offset = m.offset
                if more and m.offset < len(pr.snap.data):
                    self._send_snapshot_chunk(m.frm, pr)
            elif m.offset == 0:
                # the follower holds none of it (it restarted, or the whole failed its check):
                # from the start (cheap for a streamed snapshot, unlike a jump back to the middle)
                pr.snap_offset = 0
                self._send_snapshot_chunk(m.frm, pr)
        elif isinstance(m, ReadIndexRequest):
            self._leader_read(m.ctx, m.frm)

    def _handle_append_response(self, m: AppendResponse) -> None:
        pr = self._prs.get(m.frm)
        if pr is None:
            return
        pr.recent_active = True
        if m.reject:
            probe = m.hint_index
            if m.hint_term > 0:
                probe = self._log.find_conflict_by_term(m.hint_index, m.hint_term)[0]
            if pr.maybe_decr_to(m.index, probe):
                if pr.state is ProgressState.REPLICATE:
                    pr.become_probe()
                self._maybe_send_append(m.frm, pr, True)
            return
        paused = pr.is_paused(self.cfg.max_inflight)
        if not pr.maybe_update(m.index):
            return
        if pr.state is ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state is ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot:
            pr.become_probe()
            pr.become_replicate()
        if self._maybe_commit():
            if self.role is not RaftRole.LEADER:
                return
            self._bcast_append()
        elif paused:
            self._maybe_send_append(m.frm, pr, False)
        while self._maybe_send_append(m.frm, pr, False):
            pass
        if m.frm == self._transferee and pr.match == self._log.last_index():
            self._send(TimeoutNow(self.id, m.frm, self.term))

    def _maybe_commit(self) -> bool:
        voters = self.membership.voters
        if not voters:
            return False
        matches = sorted(self._prs[v].match for v in voters)
        mci = matches[len(voters) - (len(voters) // 2 + 1)]
        lg = self._log
        if mci <= lg.committed:
            return False
        # §5.4.2 / figure 8: only a current-term entry is committed by counting replicas
        if self.cfg.unsafe is not UnsafeRule.COMMIT_PREVIOUS_TERM and lg.term(mci) != self.term:
            return False
        lg.commit_to(mci)
        self._after_commit()
        return True

    def _after_commit(self) -> None:
        if self._reads_waiting and self._committed_in_term():
            waiting, self._reads_waiting = self._reads_waiting, []
            for ctx, requester in waiting:
                self._leader_read(ctx, requester)
        if not self.is_voter() and self._conf_hist[-1][0] <= self._log.committed:
            # removed (or demoted) leader: hand over to the most up-to-date voter, then step down
            best = max(
                (v for v in self.membership.voters if v in self._prs),
                key=lambda v: self._prs[v].match,
                default=None,
            )
            self._bcast_append()
            if best is not None:
                self._send(TimeoutNow(self.id, best, self.term))
            log.info("raft leader removed node=%s term=%d: stepping down", self.id, self.term)
            self._become_follower(self.term, None)

    def _committed_in_term(self) -> bool:
        return self._log.committed >= self._term_start

    def _bcast_append(self) -> None:
        for nid, pr in self._prs.items():
            if nid != self.id:
                self._maybe_send_append(nid, pr, True)

    def _bcast_heartbeat(self, ctx: bytes) -> None:
        committed = self._log.committed
        for nid, pr in self._prs.items():
            if nid == self.id:
                continue
            self._send(Heartbeat(
                frm=self.id, to=nid, term=self.term, commit=min(pr.match, committed), ctx=ctx,
            ))
            if pr.state is ProgressState.SNAPSHOT:
                self._send_snapshot_chunk(nid, pr)

    def _maybe_send_append(self, to: str, pr: Progress, send_if_empty: bool) -> bool:
        if pr.is_paused(self.cfg.max_inflight):
            return False
        lg = self._log
        prev = pr.next - 1
        try:
            prev_term = lg.term(prev)
            ents = lg.entries(pr.next, lg.last_index() + 1, self.cfg.max_msg_bytes)
        except CompactedError:
            return self._start_snapshot(to, pr)
        if not ents and not send_if_empty:
            return False
        if ents:
            if pr.state is ProgressState.REPLICATE:
                last = ents[-1].index
                pr.next = last + 1
                pr.inflight.append(last)
            else:
                pr.probe_sent = True
        else:
            if pr.state is ProgressState.PROBE:
                pr.probe_sent = True
        self._send(AppendEntries(
            frm=self.id, to=to, term=self.term, prev_index=prev, prev_term=prev_term, entries=tuple(ents),
            commit=lg.committed,
        ))
        return True

    def _start_snapshot(self, to: str, pr: Progress) -> bool:
        snap = self._log.storage.snapshot()
        if snap.meta.index == 0:
            raise RaftError("log compacted but storage holds no snapshot")
        log.info("raft send snapshot node=%s to=%s index=%d", self.id, to, snap.meta.index)
        pr.become_snapshot(snap)
        self._send_snapshot_chunk(to, pr)
        return True

    def _send_snapshot_chunk(self, to: str, pr: Progress) -> None:
        snap = pr.snap
        if snap is None:
            return
        size = self.cfg.snapshot_chunk_bytes
        total = len(snap.data)
        off = pr.snap_offset
        if off >= total:
            off = max(0, (total - 1) // size * size) if total else 0
        chunk = snap.data[off : off + size]
        self._send(InstallSnapshot(
            frm=self.id, to=to, term=self.term, meta=snap.meta, offset=off, data=chunk, done=off + len(chunk)
            >= total, crc=zlib.crc32(chunk),
        ))

    # --- ReadIndex --------------------------------------------------------------------------------
    def read_index(self, ctx: bytes) -> None:
        """Request a linearizable read; the answer is a ``ReadState(index, ctx)`` in a later Ready.

        ``ctx`` must be unique per request. A read whose answer never comes (the leader changed or
        lost its quorum) must be timed out by the caller.
        """
        if not ctx:
            raise ValueError("read_index needs a non-empty, unique ctx")
        if self.role is RaftRole.LEADER:
            self._leader_read(ctx, self.id)
        elif self.leader is not None:
            self._send(ReadIndexRequest(self.id, self.leader, self.term, ctx))
        else:
            raise NotLeaderError(None)

    def _leader_read(self, ctx: bytes, requester: str) -> None:
        if not self._committed_in_term():
            # our commit index may lag the true one until an entry of this term commits
            self._reads_waiting.append((ctx, requester))
            return
        voters = self.membership.voters
        if voters == (self.id,):
            self._read_respond(ReadState(self._log.committed, ctx), requester)
            return
        acks = {self.id} if self.id in voters else set()
        self._reads[ctx] = _ReadRequest(ctx, self._log.committed, requester, acks)
        self._bcast_heartbeat(ctx)

    def _read_ack(self, ctx: bytes, frm: str) -> None:
        req = self._reads.get(ctx)
        if req is None:
            return
        req.acks.add(frm)
        voters = self.membership.voters
        if sum(1 for v in voters if v in req.acks) < len(voters) // 2 + 1:
            return
        # this quorum round confirms every earlier request too
        while self._reads:
            first = next(iter(self._reads))
            r = self._reads.pop(first)
            self._read_respond(ReadState(r.index, r.ctx), r.requester)
            if first == ctx:
                break

    def _read_respond(self, rs: ReadState, requester: str) -> None:
        if requester == self.id:
            self._read_states.append(rs)
        else:
            self._send(ReadIndexResponse(
                frm=self.id, to=requester, term=self.term, ctx=rs.ctx, index=rs.index,
            ))

    # --- proposals --------------------------------------------------------------------------------
    def _check_can_propose(self) -> None:
        if self.role is not RaftRole.LEADER:
            raise NotLeaderError(self.leader)
        if self._transferee is not None:
            raise ProposalDroppedError(f"leadership transfer to {self._transferee} in progress")
        if self.id not in self._prs:
            raise ProposalDroppedError("this leader has been removed from the cluster")

    def propose(self, data: bytes) -> int:
        """Append ``data`` to the leader's log; returns its index. Raises NotLeaderError elsewhere."""
        self._check_can_propose()
        idx = self._log.last_index() + 1
        self._append([Entry(idx, self.term, EntryKind.NORMAL, data)])
        self._bcast_append()
        return idx

    def propose_batch(self, datas: Iterable[bytes]) -> tuple[int, int]:
        """Append several entries at once; returns (first, last) index (last < first when empty)."""
        self._check_can_propose()
        first = self._log.last_index() + 1
        term = self.term
        normal = EntryKind.NORMAL
        ents = [make_entry(i, term, normal, d) for i, d in enumerate(datas, first)]
        if ents:
            self._append(ents)
            self._bcast_append()
        return first, first + len(ents) - 1

    def propose_conf_change(self, op: ConfChangeOp, node_id: str, context: bytes = b"") -> int:
        """Propose one membership change; returns the entry's index. See the module docstring."""
        self._check_can_propose()
        if not self._committed_in_term():
            raise ConfChangePending("leader has not committed an entry of its term yet")
        if self._conf_hist[-1][0] > self._log.committed:
            raise ConfChangePending("another membership change is still uncommitted")
        mem = self.membership
        voters, learners = list(mem.voters), list(mem.learners)
        if op is ConfChangeOp.ADD_LEARNER:
            if node_id in voters or node_id in learners:
                raise ConfChangeError(f"{node_id} is already a member")
            learners.append(node_id)
        elif op is ConfChangeOp.PROMOTE:
            if node_id not in learners:
                raise ConfChangeError(f"{node_id} is not a learner")
            learners.remove(node_id)
            voters.append(node_id)
        elif op is ConfChangeOp.REMOVE:
            if node_id in voters:
                if len(voters) == 1:
                    raise ConfChangeError("cannot remove the last voter")
                voters.remove(node_id)
            elif node_id in learners:
                learners.remove(node_id)
            else:
                raise ConfChangeError(f"{node_id} is not a member")
        else:  # pragma: no cover - closed enum
            raise ConfChangeError(f"unknown op {op}")
        cc = ConfChange(op, node_id, Membership(tuple(voters), tuple(learners)), context)
        idx = self._log.last_index() + 1
        self._append([Entry(idx, self.term, EntryKind.CONF_CHANGE, encode_conf_change(cc))])
        self._bcast_append()
        return idx

    def transfer_leader(self, to: str) -> None:
        """Hand leadership to voter ``to`` (TimeoutNow once it is caught up). Aborts after an
        election timeout; proposals are refused meanwhile."""
        if self.role is not RaftRole.LEADER:
            raise NotLeaderError(self.leader)
        if to == self.id:
            return
        if to not in self.membership.voters:
            raise RaftError(f"cannot transfer leadership to non-voter {to}")
        self._transferee = to
        self._election_elapsed = 0
        pr = self._prs[to]
        if pr.match == self._log.last_index():
            self._send(TimeoutNow(self.id, to, self.term))
        else:
            self._maybe_send_append(to, pr, True)

    def _append(self, ents: Sequence[Entry]) -> None:
        """Append to the (unstable) log, truncating a conflicting suffix, tracking conf entries."""
        first = ents[0].index
        if first <= self._log.last_index() and self._msgs_after:
            # Acks still waiting for this Ready's persistence that cover replaced entries would
            # promise entries this node will never have stored: an older-term leader could count
            # one and commit without a real majority. They go; that leader probes again. (Found
            # by the simulator's leader-churn faults, seed 3227.)
            self._msgs_after = [
                m
                for m in self._msgs_after
                if not (isinstance(m, AppendResponse) and not m.reject and m.index >= first)
            ]
        self._log.truncate_and_append(ents)
        hist = self._conf_hist
        changed = False
        while len(hist) > 1 and hist[-1][0] >= first:
            hist.pop()
            changed = True
        for e in ents:
            if e.kind is EntryKind.CONF_CHANGE:
                hist.append((e.index, decode_conf_change(e.data).membership))
                changed = True
        if changed:
            self._membership_changed()
        if self.role is RaftRole.LEADER:
            me = self._prs.get(self.id)
            if me is not None:
                me.next = self._log.last_index() + 1

    def _membership_changed(self) -> None:
        if self.role is RaftRole.LEADER:
            self._sync_progress()
            me = self._prs.get(self.id)
            if me is not None:
                me.recent_active = True
                me.match = max(me.match, min(self._log.stable_last(), self._log.last_index()))
        elif self.role is not RaftRole.FOLLOWER and not self.is_voter():
            self._become_follower(self.term, self.leader)

    def _replay_conf_changes(self) -> None:
        st = self._log.storage
        lo, last = st.first_index(), st.last_index()
        while lo <= last:
            batch = st.entries(lo, last + 1, 4 << 20)
            for e in batch:
                if e.kind is EntryKind.CONF_CHANGE:
                    self._conf_hist.append((e.index, decode_conf_change(e.data).membership))
            lo += len(batch)

    # --- Ready / advance --------------------------------------------------------------------------
    def _soft_state(self) -> SoftState:
        return SoftState(self.leader, self.role)

    def has_ready(self) -> bool:
        """True when ``ready()`` has work (and no Ready is outstanding)."""
        if self._outstanding:
            return False
        lg = self._log
        return bool(
            self._msgs
            or self._msgs_after
            or lg.ents
            or lg.snap is not None
            or self._snap_chunks
            or self._read_states
            or lg.has_next_committed()
            or self._prev_hs.term != self.term
            or self._prev_hs.vote != self.vote
            or self._prev_hs.commit != lg.committed
            or self._prev_ss.leader != self.leader
            or self._prev_ss.role is not self.role
        )

    def ready(self) -> Ready:
        """Collect the pending work. Call ``advance(ready)`` after carrying it out."""
        if self._outstanding:
            raise RaftError("previous Ready not advanced yet")
        lg = self._log
        ss = self._soft_state()
        hs = HardState(self.term, self.vote, lg.committed)
        rd = Ready(
            soft_state=None if ss == self._prev_ss else ss,
            hard_state=None if hs == self._prev_hs else hs,
            entries=tuple(lg.ents),
            snapshot=lg.snap,
            messages=tuple(self._msgs),
            messages_after_persist=tuple(self._msgs_after),
            committed_entries=tuple(lg.next_committed(self.cfg.max_apply_bytes)),
            read_states=tuple(self._read_states),
            snapshot_chunks=tuple(self._snap_chunks),
        )
        self._msgs.clear()
        self._msgs_after.clear()
        self._read_states.clear()
        self._snap_chunks.clear()
        self._prev_ss = ss
        self._prev_hs = hs
        self._outstanding = True
        return rd

    def advance(self, rd: Ready) -> None:
        """Acknowledge that ``rd`` was persisted, sent and handed to the FSM."""
        if not self._outstanding:
            raise RaftError("advance() without an outstanding Ready")
        self._outstanding = False
        lg = self._log
        if rd.snapshot is not None:
            lg.stable_snap_to(rd.snapshot.meta.index)
        if rd.entries:
            last = rd.entries[-1]
            lg.stable_to(last.index, last.term)
        if rd.hard_state is not None:
            self._durable_term = rd.hard_state.term
        if rd.committed_entries:
            lg.applied = max(lg.applied, rd.committed_entries[-1].index)
        if self.role is RaftRole.LEADER:
            me = self._prs.get(self.id)
            if (
                me is not None
                and me.maybe_update(min(lg.stable_last(), lg.last_index()))
                and self._maybe_commit()
                and self.role is RaftRole.LEADER
            ):
                self._bcast_append()


__all__ = [
    "ConfChangeError",
    "ConfChangePending",
    "NotLeaderError",
    "Progress",
    "ProgressState",
    "ProposalDroppedError",
    "RaftConfig",
    "RaftCore",
    "RaftError",
    "ReadState",
    "Ready",
    "RaftRole",
    "SnapshotChunk",
    "SnapshotMeta",
    "SoftState",
    "UnsafeRule",
]
