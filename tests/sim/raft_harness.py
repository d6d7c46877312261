"""Deterministic simulator for clusters of pure :class:`RaftCore` s in virtual time.

Single-threaded: one heap of events (node ticks, message deliveries, persistence completions,
applies, restarts, chaos actions) ordered by virtual time and a sequence number, all randomness
from one seeded ``random.Random``. A :class:`Faults` draw ("swarm" style: every seed its own fault
rates) drives drops, duplicates, delays/reordering, partitions (symmetric, one-way, flapping),
crashes that lose everything not yet persisted (and power losses: each node keeps its log in the
product's ``LmdbLog`` with its snapshot files synced through a :class:`~tests.sim.disk.SimDisk`, which
drops, at a power loss, what was written but not synced; also right after a snapshot and compaction),
slow persistence and slow apply, client writes and
ReadIndex reads, membership changes, leadership transfers and snapshots, and snapshot chunks
damaged on the wire or in the gathered "file" (a node gathers a snapshot it receives in
``SimNode.sink``, its stand-in for the file, which a restart drops). Leader-targeted faults
cut a leader off (with a minority) while the client keeps writing to it, at random, the moment it
wins an election and the moment it advances its commit index (in-flight messages are lost, as in
a real partition); a leader may also crash, or die mid-send with its appends on only some links.
A share of seeds (``CHURN_SEEDS``) runs in that "leader churn" mode: several leaders with
diverging logs, which is what figure 8 of the Raft paper needs.

Invariants are checked after every event (:meth:`Cluster.check`), and at the points where a
violation would be born (persisting, sending, applying); a violation raises :class:`Violation`:

- election safety: at most one leader per term, ever;
- leader append-only: a leader's log never shrinks or changes under it within its term;
- log matching: every stored (index, term) has one payload and one predecessor term, cluster-wide;
- leader completeness: a new leader of term T holds every entry committed in a term < T;
- state machine safety: every commit and every applied entry equals the one global history;
  installed snapshots hold exactly the state of the committed prefix (and its membership);
- term and commit monotonic: durable term/commit never decrease, a vote never changes within a
  term, across any crash, power loss and restart (a node whose log cannot be opened again fails);
  the in-memory term/commit never fall below the durable ones;
- durability: a vote grant, append ack or any response is sent only once what it promises is
  persisted; a leader replicates only once its term is durable;
- snapshot chunks reach the node in order, without gaps, and the CRC of the whole is right;
- ``applied <= commit <= last`` on every node;
- at the end: bounded liveness after healing, and linearizability of the client history.

Client writes are proposals on a node (ok when that node applies the entry at the returned index,
fail when another entry lands there, unknown when the node crashes first); reads use ReadIndex.
"""

from __future__ import annotations

import heapq
import random
import shutil
import tempfile
import weakref
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgpack

from molens.raft.core import (
    ConfChangeError,
    NotLeaderError,
    ProposalDroppedError,
    RaftConfig,
    RaftCore,
    RaftError,
    RaftRole,
    Ready,
    SnapshotChunk,
    UnsafeRule,
)
from molens.raft.errors import StorageError
from molens.raft.log import Entry, EntryKind, HardState, Membership, Snapshot
from molens.raft.messages import (
    AppendEntries,
    AppendResponse,
    ConfChangeOp,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    SnapshotResponse,
    TimeoutNow,
    VoteResponse,
    decode,
    decode_conf_change,
    encode,
)
from molens.raft.storage import LmdbLog
from tests.sim.disk import SIM_ROOT, SimDisk
from tests.sim.linearizability import Kind, Op, Status, check_history

TICK = 10
"""Virtual time units per node tick."""

CHURN_SEEDS = 0.35
"""Share of swarm seeds drawn in "leader churn" mode (see :meth:`Faults.draw`)."""

EV_TICK, EV_MSG, EV_PERSIST, EV_APPLY, EV_RESTART, EV_CHAOS = range(6)


def default_config(unsafe: UnsafeRule | None = None) -> RaftConfig:
    """Small batches, windows and chunks so that a short run exercises every path."""
    return RaftConfig(
        election_tick=10,
        heartbeat_tick=2,
        max_msg_bytes=256,
        max_inflight=4,
        snapshot_chunk_bytes=64,
        unsafe=unsafe,
    )


class Violation(AssertionError):
    """A safety or liveness property failed."""


@dataclass(frozen=True, slots=True)
class Faults:
    """One seed's fault and workload rates (probabilities are per message or per tick)."""

    drop: float = 0.0
    dup: float = 0.0
    delay: tuple[int, int] = (1, 3)
    codec: float = 0.0
    persist_delay: tuple[int, int] = (0, 0)
    crash_at_persist: float = 0.0
    crash_on_commit: float = 0.0
    """A leader crashes right after advancing its commit index (before telling anyone)."""
    apply_delay: int = 0
    partition: float = 0.0
    heal: float = 0.0
    one_way: float = 0.0
    flap: float = 0.0
    crash: float = 0.0
    restart_after: tuple[int, int] = (5, 40)
    client: float = 0.0
    read_ratio: float = 0.4
    conf: float = 0.0
    transfer: float = 0.0
    snapshot: float = 0.0
    snap_keep: int = 2
    leader_isolate: float = 0.0
    """Per tick: cut the newest leader off with a minority (maybe alone) for ``isolate_ticks`` while
    the client keeps proposing to it, so that logs diverge across terms (figure 7/8 shapes)."""
    isolate_ticks: tuple[int, int] = (3, 30)
    isolate_new_leader: float = 0.0
    isolate_on_commit: float = 0.0
    """A leader is cut off right after advancing its commit index: what it has in flight is lost."""
    """Per election won: the same isolation, the moment the leader wins (before its no-op leaves)."""
    leader_crash: float = 0.0
    """Per tick: crash the newest leader; it restarts after ``quick_restart`` ticks."""
    crash_mid_send: float = 0.0
    """Per leader ready carrying new entries: its appends reach a random subset, then it crashes."""
    quick_restart: tuple[int, int] = (1, 15)
    power_loss: float = 0.0
    """Per crash: the node's machine loses power (its disk drops what was written but not synced)."""
    cut_after_snapshot: float = 0.0
    """Per snapshot taken: the node loses power right after it compacted its log."""
    corrupt: float = 0.0
    """Per snapshot chunk delivered: one byte of its data flips on the way (its CRC no longer
    matches); per snapshot gathered: one byte flips in the node's "file" before it is checked."""

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        """Swarm testing: each seed turns some faults off and picks rates for the others."""

        def some(hi: float, p_on: float = 0.6) -> float:
            return rng.uniform(0, hi) if rng.random() < p_on else 0.0

        dmax = rng.choice((2, 5, 10, 30))
        # "leader churn" seeds: leaders are cut off the moment they win and the moment they commit,
        # so logs diverge across several terms and an old-term entry gets re-replicated under a new
        # leader that then vanishes (the shapes of figures 7 and 8)
        churn = rng.random() < CHURN_SEEDS
        pmax = rng.choice((0, 0, 3, 12))
        return cls(
            drop=some(0.2),
            dup=some(0.1),
            delay=(1, dmax),
            codec=0.05,
            persist_delay=(0, pmax),
            crash_at_persist=some(0.01, 0.3),
            crash_on_commit=some(0.3, 0.3),
            apply_delay=rng.choice((0, 0, 5, 20)),
            partition=some(0.05),
            heal=rng.uniform(0.05, 0.3),
            one_way=rng.random() * 0.5,
            flap=rng.random() * 0.3,
            crash=some(0.02),
            client=rng.uniform(0.2, 0.8),
            read_ratio=rng.uniform(0.2, 0.6),
            conf=some(0.03, 0.4),
            transfer=some(0.02, 0.4),
            snapshot=some(0.05, 0.5),
            snap_keep=rng.choice((0, 2, 10)),
            leader_isolate=rng.uniform(0.01, 0.05) if churn else some(0.03, 0.3),
            isolate_ticks=(rng.randint(1, 5), rng.choice((10, 20, 40))),
            isolate_new_leader=rng.uniform(0.3, 0.9) if churn else 0.0,
            isolate_on_commit=rng.uniform(0.5, 0.95) if churn else 0.0,
            leader_crash=some(0.03, 0.4),
            crash_mid_send=some(0.1, 0.4),
            quick_restart=(1, rng.choice((5, 15, 40))),
        )


@dataclass(slots=True)
class SimNode:
    id: str
    storage: LmdbLog
    """The product's Raft log (lmdb and snapshot files) in the node's directory, closed while down."""
    bootstrap: Membership = field(default_factory=Membership)
    log_open: bool = True
    core: RaftCore | None = None
    alive: bool = False
    stopped: bool = False
    """Permanently shut down (removed from the cluster)."""
    epoch: int = 0
    pending: Ready | None = None
    apply_q: deque[Entry | Snapshot] = field(default_factory=deque)
    apply_scheduled: bool = False
    kv: dict[str, int] = field(default_factory=dict)
    applied: int = 0
    fsm_membership: Membership = field(default_factory=Membership)
    writes: dict[int, Op] = field(default_factory=dict)
    reads: dict[bytes, Op] = field(default_factory=dict)
    read_waits: list[tuple[int, Op]] = field(default_factory=list)
    seen_commit: int = 0
    leader_mark: tuple[int, int, int] | None = None
    """(term, last index, term of last index) while leader: append-only check."""
    sink: bytearray = field(default_factory=bytearray)
    """The snapshot being received, as the node's file would hold it (dropped at start)."""


def encode_state(kv: dict[str, int]) -> bytes:
    return bytes(msgpack.packb(sorted(kv.items()), use_bin_type=True))


def decode_state(data: object) -> dict[str, int]:
    raw = bytes(data)  # type: ignore[call-overload]  # bytes, or the log's StreamedSnapshot
    return {k: v for k, v in msgpack.unpackb(raw, raw=False)} if raw else {}


class Cluster:
    """N simulated nodes, a network, a client, and the invariant checker."""

    def __init__(
        self,
        n: int = 3,
        seed: int = 0,
        faults: Faults | None = None,
        config: RaftConfig | None = None,
        trace: Callable[[str], None] | None = None,
        start: bool = True,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        self.cfg = config or default_config()
        self.trace = trace
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.initial = Membership(tuple(self.ids))
        self.root = Path(tempfile.mkdtemp(prefix=f"raftsim-{seed}-", dir=SIM_ROOT))
        weakref.finalize(self, shutil.rmtree, self.root, True)
        self.disk = SimDisk()
        """Every node's snapshot files are synced through it; a power loss drops what was not."""
        self.power_losses = 0
        self.nodes: dict[str, SimNode] = {nid: self._new_node(nid, self.initial) for nid in self.ids}
        self.next_node = n + 1
        self.max_nodes = n + 2
        self.q: list[tuple[int, int, int, object]] = []
        self.seq = 0
        self.now = 0
        self.blocked: set[tuple[str, str]] = set()
        self.flapping: tuple[str, str] | None = None
        self.heal_at: int | None = None
        """Virtual time at which a leader isolation ends (None: no timed isolation running)."""
        self.msg_filter: Callable[[Message], Message | None] | None = None
        """Scenario hook at delivery: return the message (possibly rewritten) or None to drop it."""
        self.chaos_on = False
        self.ops: list[Op] = []
        self.op_seq = 0
        self.event_no = 0
        self.check_durable_sends = True
        """Off only to show that the deeper invariants catch a durability bug on their own."""
        self.to_stop: list[str] = []
        self.keys = ("a", "b", "c")
        self.max_ops_per_key = 24
        self.max_open_per_key = 3
        self.snapshots_verified = 0
        # invariant state
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, Entry] = {}
        self.max_committed = 0
        self.commit_marks: list[tuple[int, int]] = []
        self.chain: dict[tuple[int, int], tuple[int, bytes, int | None]] = {}
        self.durable: dict[str, HardState] = {}
        if start:
            self.start()

    # --- setup -------------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        if self.trace is not None:
            self.trace(f"[t={self.now} #{self.event_no}] {text}")

    def start(self) -> None:
        for nid in list(self.nodes):
            self._boot(self.nodes[nid])
            self._push(self.rng.randrange(TICK), EV_TICK, nid)

    def preload(self, nid: str, terms: list[int], term: int, vote: str | None = None) -> None:
        """Before ``start()``: give ``nid`` a stored log with entry terms ``terms`` (index 1..)."""
        st = self.nodes[nid].storage
        st.append([Entry(i, t, EntryKind.NORMAL, f"pre {i} {t}".encode()) for i, t in enumerate(terms, 1)])
        st.set_hard_state(HardState(term, vote, 0))
        for i, t in enumerate(terms, 1):
            prev = terms[i - 2] if i > 1 else 0
            self.chain.setdefault((i, t), (int(EntryKind.NORMAL), f"pre {i} {t}".encode(), prev))

    def _push(self, delay: int, kind: int, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.q, (self.now + delay, self.seq, kind, payload))

    def _new_node(self, nid: str, bootstrap: Membership) -> SimNode:
        self.disk.track(self.root / nid / "snapshots")
        return SimNode(id=nid, storage=self._open_log(nid, bootstrap), bootstrap=bootstrap)

    def _open_log(self, nid: str, bootstrap: Membership) -> LmdbLog:
        return LmdbLog(self.root / nid, bootstrap, map_size=1 << 20, keep_snapshots=2, disk=self.disk)

    def _boot(self, node: SimNode) -> None:
        if not node.log_open:
            try:
                node.storage = self._open_log(node.id, node.bootstrap)
            except StorageError as e:
                raise Violation(f"{node.id} cannot start again: {e}") from e
            node.log_open = True
            hs, old = node.storage.hard_state(), self.durable.get(node.id, HardState())
            if hs.term < old.term or hs.commit < old.commit or (
                hs.term == old.term and old.vote is not None and hs.vote != old.vote
            ):
                raise Violation(f"{node.id} durable state went back across a restart: {old} -> {hs}")
        st = node.storage
        snap = st.snapshot()
        node.kv = decode_state(snap.data)
        node.applied = snap.meta.index
        node.fsm_membership = snap.meta.membership if snap.meta.index else self.initial
        node.core = RaftCore(
            node.id,
            self.initial if node.id in self.ids else None,
            st,
            self.cfg,
            random.Random(self.rng.getrandbits(64)),
            applied=node.applied,
        )
        node.alive = True
        node.pending = None
        node.apply_q.clear()
        node.apply_scheduled = False
        node.seen_commit = node.core.commit
        node.leader_mark = None
        node.sink = bytearray()  # a leftover partial snapshot is removed at start
        hs = st.initial_state()[0]
        self.durable[node.id] = hs
        self.log(f"{node.id} boot term={hs.term} commit={hs.commit} last={st.last_index()}")
        self._drain(node)

    # --- running ----------------------------------------------------------------------------------
    def step_event(self) -> bool:
        if not self.q:
            return False
        t, _, kind, payload = heapq.heappop(self.q)
        self.now = t
        self.event_no += 1
        if kind == EV_TICK:
            nid = str(payload)
            node = self.nodes[nid]
            if node.alive and node.core is not None:
                node.core.tick()
                self._drain(node)
            if not node.stopped:
                self._push(TICK, EV_TICK, nid)
        elif kind == EV_MSG:
            self._deliver(payload)  # type: ignore[arg-type]
        elif kind == EV_PERSIST:
            nid, epoch = payload  # type: ignore[misc]
            node = self.nodes[nid]
            if node.alive and node.epoch == epoch and node.pending is not None:
                self._persist(node)
                if node.alive:
                    self._drain(node)
        elif kind == EV_APPLY:
            nid, epoch = payload  # type: ignore[misc]
            node = self.nodes[nid]
            if node.alive and node.epoch == epoch:
                node.apply_scheduled = False
                self._apply_some(node, 1 + self.rng.randrange(3))
        elif kind == EV_RESTART:
            node = self.nodes[str(payload)]
            if not node.alive and not node.stopped:
                self._boot(node)
        elif kind == EV_CHAOS:
            if self.chaos_on:
                self._chaos()
                self._push(TICK, EV_CHAOS, None)
        while self.to_stop:
            nid = self.to_stop.pop()
            if nid in self.nodes and not self.nodes[nid].stopped:
                self.log(f"{nid} removed: shut down")
                self.stop(nid)
        self.check()
        return True

    def run_for(self, ticks: int) -> None:
        end = self.now + ticks * TICK
        while self.q and self.q[0][0] <= end:
            self.step_event()
        self.now = max(self.now, end)

    def run_until(self, pred: Callable[[], bool], max_ticks: int) -> bool:
        end = self.now + max_ticks * TICK
        while not pred():
            if not self.q or self.q[0][0] > end:
                return False
            self.step_event()
        return True

    # --- network ------------------------------------------------------------------------------------
    def _send(self, node: SimNode, m: Message) -> None:
        self._check_send(node, m)
        f = self.faults
        if f.drop and self.rng.random() < f.drop:
            return
        self._push(self.rng.randint(*f.delay), EV_MSG, m)
        if f.dup and self.rng.random() < f.dup:
            self._push(self.rng.randint(*f.delay), EV_MSG, m)

    def _deliver(self, m: Message) -> None:
        if (m.frm, m.to) in self.blocked:
            return
        node = self.nodes.get(m.to)
        if node is None or not node.alive or node.core is None:
            return
        if self.msg_filter is not None:
            m2 = self.msg_filter(m)
            if m2 is None:
                return
            m = m2
        if self.faults.codec and self.rng.random() < self.faults.codec:
            m2 = decode(encode(m))
            if m2 != m:
                raise Violation(f"codec round trip changed {m!r}")
            m = m2
        if isinstance(m, InstallSnapshot) and m.data and self.faults.corrupt and self.rng.random() < self.faults.corrupt:
            i = self.rng.randrange(len(m.data))
            m = replace(m, data=m.data[:i] + bytes([m.data[i] ^ 0x5A]) + m.data[i + 1 :])
            self.log(f"snapshot chunk to {m.to} at {m.offset} damaged on the way")
        if self.trace is not None:
            self.log(f"deliver {_short(m)}")
        node.core.step(m)
        if node.core.conflicting_appends:
            raise Violation(f"{node.id} was sent an append that contradicts its committed log: {_short(m)}")
        self._drain(node)

    # --- the node shell -------------------------------------------------------------------------
    def _drain(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        while node.alive and node.pending is None and core.has_ready():
            rd = core.ready()
            if rd.soft_state is not None:
                self.log(f"{node.id} {rd.soft_state.role} leader={rd.soft_state.leader} term={core.term}")
            if (
                rd.soft_state is not None
                and rd.soft_state.role is RaftRole.LEADER
                and self.faults.isolate_new_leader
                and self.chaos_on
                and self.rng.random() < self.faults.isolate_new_leader
            ):
                self._isolate_leader(node, writes=False)
            if self._crashes_mid_send(node, rd):
                return
            for m in rd.messages:
                self._send(node, m)
            for rs in rd.read_states:
                op = node.reads.pop(rs.ctx, None)
                if op is not None:
                    node.read_waits.append((rs.index, op))
            if rd.must_persist or rd.messages_after_persist or rd.committed_entries or rd.snapshot_chunks:
                node.pending = rd
                lo, hi = self.faults.persist_delay
                delay = self.rng.randint(lo, hi)
                if delay == 0:
                    self._persist(node)
                else:
                    self._push(delay, EV_PERSIST, (node.id, node.epoch))
            else:
                core.advance(rd)
            self._serve_reads(node)

    def _crashes_mid_send(self, node: SimNode, rd: Ready) -> bool:
        """Fault: a leader dies while its new entries are on the wire to only some followers."""
        f = self.faults
        if not (
            f.crash_mid_send
            and rd.entries
            and any(isinstance(m, AppendEntries) and m.entries for m in rd.messages)
            and self.rng.random() < f.crash_mid_send
        ):
            return False
        sent = [m for m in rd.messages if self.rng.random() < 0.5]
        for m in sent:
            self._send(node, m)
        synced = self.rng.random() < 0.5
        self.log(f"{node.id} crashes mid-send (sent to {sorted({m.to for m in sent})}, own fsync done: {synced})")
        if synced:
            node.pending = rd
            self._persist(node, crash=True)
        else:
            self.crash(node.id)
        self._push(self.rng.randint(*f.quick_restart) * TICK, EV_RESTART, node.id)
        return True

    def _persist(self, node: SimNode, crash: bool = False) -> None:
        """Make ``node.pending`` durable, then send what waited for it and queue the applies
        (``crash``: the node dies right after the write, before any of that)."""
        rd = node.pending
        core = node.core
        assert rd is not None and core is not None
        st = node.storage
        last = self._gather(node, rd.snapshot_chunks)
        if rd.snapshot is not None:
            self._check_snapshot(node, rd.snapshot)
        hs = rd.hard_state
        if hs is not None:
            old = self.durable[node.id]
            if hs.term < old.term or hs.commit < old.commit:
                raise Violation(f"{node.id} durable term/commit went back: {old} -> {hs}")
            if hs.term == old.term and old.vote is not None and hs.vote != old.vote:
                raise Violation(f"{node.id} changed its vote in term {hs.term}: {old.vote} -> {hs.vote}")
        st.save(hard_state=hs, entries=rd.entries, snapshot=rd.snapshot)  # one transaction, as the RaftPeer's
        if rd.entries:
            self._check_chain(node, rd.entries)
        if hs is not None:
            if hs.commit > st.last_index():
                raise Violation(f"{node.id} durable commit {hs.commit} beyond durable log {st.last_index()}")
            self.durable[node.id] = hs
        f = self.faults
        if crash or (f.crash_at_persist and rd.must_persist and self.rng.random() < f.crash_at_persist):
            self.log(f"{node.id} crashes right after persisting")
            self.crash(node.id)
            return
        for m in rd.messages_after_persist:
            self._send(node, m)
        if rd.snapshot is not None:
            node.apply_q.append(rd.snapshot)
        node.apply_q.extend(rd.committed_entries)
        core.advance(rd)
        node.pending = None
        if last is not None:
            data = bytes(node.sink)
            ok = zlib.crc32(data) == last.crc
            self.log(f"{node.id} gathered snapshot {last.meta.index} ({len(data)}B): {'ok' if ok else 'damaged'}")
            core.snapshot_received(last.meta, data if ok else None)
        if f.apply_delay:
            if node.apply_q and not node.apply_scheduled:
                node.apply_scheduled = True
                self._push(self.rng.randint(1, f.apply_delay), EV_APPLY, (node.id, node.epoch))
        else:
            self._apply_some(node, len(node.apply_q))

    def _gather(self, node: SimNode, chunks: tuple[SnapshotChunk, ...]) -> SnapshotChunk | None:
        """Write snapshot chunks to the node's sink as its shell writes its file; the last chunk of
        a snapshot, if one came (maybe damaging the sink first: the node's check must catch it)."""
        last = None
        for ch in chunks:
            if ch.offset == 0:
                node.sink = bytearray()
            if len(node.sink) != ch.offset:
                raise Violation(f"{node.id} got snapshot chunk at {ch.offset} after {len(node.sink)} bytes")
            node.sink += ch.data
            if zlib.crc32(node.sink) != ch.crc:
                raise Violation(f"{node.id} snapshot chunk at {ch.offset}: the CRC so far does not match")
            if ch.done:
                last = ch
        f = self.faults
        if last is not None and node.sink and f.corrupt and self.rng.random() < f.corrupt:
            i = self.rng.randrange(len(node.sink))
            node.sink[i] ^= 0x5A
            self.log(f"{node.id} snapshot file damaged at byte {i}")
        return last

    def _apply_some(self, node: SimNode, k: int) -> None:
        q = node.apply_q
        while q and k > 0:
            k -= 1
            item = q.popleft()
            if isinstance(item, Snapshot):
                node.kv = decode_state(item.data)
                node.applied = item.meta.index
                node.fsm_membership = item.meta.membership
                self.log(f"{node.id} restored snapshot {item.meta.index}")
                for idx in [i for i in node.writes if i <= item.meta.index]:
                    node.writes.pop(idx).status = Status.UNKNOWN  # outcome hidden inside the snapshot
                continue
            self._apply_entry(node, item)
        self._serve_reads(node)
        if q and not node.apply_scheduled:
            node.apply_scheduled = True
            self._push(self.rng.randint(1, max(1, self.faults.apply_delay)), EV_APPLY, (node.id, node.epoch))

    def _apply_entry(self, node: SimNode, e: Entry) -> None:
        if e.index != node.applied + 1:
            raise Violation(f"{node.id} applies {e.index} after {node.applied}")
        g = self.committed.get(e.index)
        if g is None:
            self.committed[e.index] = e
        elif g.term != e.term or g.data != e.data or g.kind != e.kind:
            raise Violation(f"state machine safety: {node.id} applies {e} but {g} was committed")
        node.applied = e.index
        if e.kind is EntryKind.CONF_CHANGE:
            cc = decode_conf_change(e.data)
            node.fsm_membership = cc.membership
            if cc.op is ConfChangeOp.REMOVE and self.chaos_on and self.rng.random() < 0.5:
                self.to_stop.append(cc.node_id)
        elif e.data:
            parts = e.data.split(b" ")
            if parts[0] == b"w":
                op_id, key, value = int(parts[1]), parts[2].decode(), int(parts[3])
                node.kv[key] = value
                op = node.writes.pop(e.index, None)
                if op is not None:
                    self._respond(op, Status.OK if op.op_id == op_id else Status.FAIL)
            elif parts[0] == b"p":
                pass
        op = node.writes.pop(e.index, None)
        if op is not None:
            self._respond(op, Status.FAIL)

    def _serve_reads(self, node: SimNode) -> None:
        if not node.read_waits:
            return
        keep: list[tuple[int, Op]] = []
        for idx, op in node.read_waits:
            if idx <= node.applied:
                op.value = node.kv.get(op.key)
                self._respond(op, Status.OK)
            else:
                keep.append((idx, op))
        node.read_waits = keep

    def _respond(self, op: Op, status: Status) -> None:
        self.op_seq += 1
        op.resp = self.op_seq
        op.status = status
        self.log(f"client op {op.op_id} {op.kind}({op.key}, {op.value}) -> {status}")

    # --- faults ---------------------------------------------------------------------------------------
    def crash(self, nid: str, power_loss: bool | None = None) -> None:
        """The node's process dies (what it had not persisted is lost); with ``power_loss`` (drawn
        at the seed's rate when None) its machine loses power too: the disk drops what was written
        but not synced (:class:`~tests.sim.disk.SimDisk`)."""
        node = self.nodes[nid]
        if not node.alive:
            return
        if power_loss is None:
            power_loss = bool(self.faults.power_loss) and self.rng.random() < self.faults.power_loss
        self.log(f"{nid} {'power loss' if power_loss else 'crash'} (pending ready lost: {node.pending is not None})")
        node.storage.close()
        node.log_open = False
        if power_loss:
            self.power_losses += 1
            self.disk.power_loss(self.root / nid, self.rng)
        node.alive = False
        node.core = None
        node.pending = None
        node.apply_q.clear()
        node.epoch += 1
        node.leader_mark = None
        for op in node.writes.values():
            op.status = Status.UNKNOWN
        node.writes.clear()
        for op in node.reads.values():
            op.status = Status.FAIL
        node.reads.clear()
        for _, op in node.read_waits:
            op.status = Status.FAIL
        node.read_waits.clear()

    def restart(self, nid: str) -> None:
        node = self.nodes[nid]
        if not node.alive and not node.stopped:
            self._boot(node)

    def stop(self, nid: str) -> None:
        """Shut a node down for good (it was removed from the cluster)."""
        self.crash(nid)
        self.nodes[nid].stopped = True


    def isolate(self, nid: str) -> None:
        for other in self.nodes:
            if other != nid:
                self.blocked.add((nid, other))
                self.blocked.add((other, nid))

    def partition(self, *groups: list[str]) -> None:
        self.blocked.clear()
        where = {nid: i for i, g in enumerate(groups) for nid in g}
        for a in self.nodes:
            for b in self.nodes:
                if a != b and where.get(a, -1) != where.get(b, -2):
                    self.blocked.add((a, b))

    def heal(self) -> None:
        self.blocked.clear()
        self.flapping = None
        self.heal_at = None

    def add_node(self) -> str:
        nid = f"n{self.next_node}"
        self.next_node += 1
        node = self._new_node(nid, Membership())
        self.nodes[nid] = node
        self._boot(node)
        self._push(self.rng.randrange(TICK), EV_TICK, nid)
        return nid

    # --- client ----------------------------------------------------------------------------------------
    def leader(self) -> SimNode | None:
        best: SimNode | None = None
        for node in self.nodes.values():
            c = node.core
            if node.alive and c is not None and c.role is RaftRole.LEADER and (best is None or c.term > best.core.term):  # type: ignore[union-attr]
                best = node
        return best

    def write(self, nid: str, key: str, value: int | None = None) -> Op | None:
        node = self.nodes[nid]
        if not node.alive or node.core is None:
            return None
        self.op_seq += 1
        op_id = self.op_seq
        value = op_id if value is None else value
        op = Op(op_id=op_id, key=key, kind=Kind.WRITE, value=value, invoke=self.op_seq, node=nid)
        try:
            idx = node.core.propose(f"w {op_id} {key} {value}".encode())
        except (NotLeaderError, ProposalDroppedError):
            return None
        self.ops.append(op)
        node.writes[idx] = op
        self.log(f"client write {op_id} {key}={value} at {nid} index={idx}")
        self._drain(node)
        return op

    def write_batch(self, nid: str, keys: list[str]) -> list[Op]:
        """Several writes in one ``propose_batch`` (one broadcast), one op each."""
        node = self.nodes[nid]
        if not node.alive or node.core is None:
            return []
        ops = []
        for key in keys:
            self.op_seq += 1
            ops.append(Op(
                op_id=self.op_seq, key=key, kind=Kind.WRITE, value=self.op_seq, invoke=self.op_seq, node=nid,
            ))
        try:
            first, last = node.core.propose_batch(f"w {o.op_id} {o.key} {o.value}".encode() for o in ops)
        except (NotLeaderError, ProposalDroppedError):
            return []
        for idx, op in zip(range(first, last + 1), ops, strict=True):
            node.writes[idx] = op
        self.ops.extend(ops)
        self.log(f"client batch {[o.op_id for o in ops]} at {nid} index={first}..{last}")
        self._drain(node)
        return ops

    def read(self, nid: str, key: str) -> Op | None:
        node = self.nodes[nid]
        if not node.alive or node.core is None:
            return None
        self.op_seq += 1
        op = Op(op_id=self.op_seq, key=key, kind=Kind.READ, value=None, invoke=self.op_seq, node=nid)
        ctx = f"r{op.op_id}".encode()
        try:
            node.core.read_index(ctx)
        except NotLeaderError:
            return None
        self.ops.append(op)
        node.reads[ctx] = op
        self.log(f"client read {op.op_id} {key} at {nid}")
        self._drain(node)
        return op

    def snapshot(self, nid: str, keep: int = 0) -> bool:
        node = self.nodes[nid]
        st = node.storage
        if not node.alive or node.applied <= st.snapshot_meta().index or node.applied > st.last_index():
            return False
        data = encode_state(node.kv)
        if node.core is not None and node.core.membership_at(node.applied) != node.fsm_membership:
            raise Violation(
                f"{nid} membership at {node.applied}: core {node.core.membership_at(node.applied)} "
                f"vs applied {node.fsm_membership}"
            )
        st.create_snapshot(node.applied, node.fsm_membership, data)
        st.compact(max(st.first_index() - 1, node.applied - keep))
        self.log(f"{nid} snapshot at {node.applied}, log from {st.first_index()}")
        f = self.faults
        if self.chaos_on and f.cut_after_snapshot and self.rng.random() < f.cut_after_snapshot:
            self.crash(nid, power_loss=True)
            self._push(self.rng.randint(*f.quick_restart) * TICK, EV_RESTART, nid)
        return True

    # --- chaos ------------------------------------------------------------------------------------------
    def _chaos(self) -> None:
        f = self.faults
        rng = self.rng
        alive = [n for n in self.nodes.values() if n.alive]
        if f.client and rng.random() < f.client and alive:
            key = rng.choice(self.keys)
            # bounded history and bounded concurrency per key keep the linearizability check exact
            # and cheap: an unknown write stays concurrent with everything after it
            mine = [o for o in self.ops if o.key == key]
            open_ops = sum(1 for o in mine if o.status is Status.PENDING or o.status is Status.UNKNOWN)
            if len(mine) < self.max_ops_per_key and open_ops < self.max_open_per_key:
                ld = self.leader()
                node = ld if ld is not None and rng.random() < 0.7 else rng.choice(alive)
                if rng.random() < f.read_ratio:
                    self.read(node.id, key)
                elif rng.random() < 0.2 and open_ops + 2 <= self.max_open_per_key:
                    self.write_batch(node.id, [key, key])
                else:
                    self.write(node.id, key)
        if self.heal_at is not None and self.now >= self.heal_at:
            self.heal_at = None
            self.log("leader isolation ends")
            self.heal()
        if f.leader_isolate and rng.random() < f.leader_isolate:
            self._isolate_leader()
        elif f.partition and rng.random() < f.partition:
            self._new_partition()
        elif self.blocked and rng.random() < f.heal * 0.2:
            self.log("network heals")
            self.heal()
        if self.flapping is not None:
            a, b = self.flapping
            if (a, b) in self.blocked:
                self.blocked.discard((a, b))
                self.blocked.discard((b, a))
            else:
                self.blocked.add((a, b))
                self.blocked.add((b, a))
        if f.crash and rng.random() < f.crash and alive:
            victim = rng.choice(alive)
            self.crash(victim.id)
            self._push(rng.randint(*f.restart_after) * TICK, EV_RESTART, victim.id)
        if f.leader_crash and rng.random() < f.leader_crash:
            ld = self.leader()
            if ld is not None:
                self.log(f"{ld.id} (leader) crashes")
                self.crash(ld.id)
                self._push(rng.randint(*f.quick_restart) * TICK, EV_RESTART, ld.id)
        if f.conf and rng.random() < f.conf:
            self._conf_chaos()
        if f.transfer and rng.random() < f.transfer:
            ld = self.leader()
            if ld is not None and ld.core is not None:
                voters = [v for v in ld.core.membership.voters if v != ld.id]
                for learner in ld.core.membership.learners:
                    try:
                        ld.core.transfer_leader(learner)
                    except RaftError:
                        pass
                    else:
                        raise Violation(f"leadership transferred to learner {learner}")
                if voters:
                    to = rng.choice(voters)
                    self.log(f"transfer leadership {ld.id} -> {to}")
                    ld.core.transfer_leader(to)
                    self._drain(ld)
        if f.snapshot and rng.random() < f.snapshot and alive:
            self.snapshot(rng.choice(alive).id, f.snap_keep)

    def _isolate_leader(self, ld: SimNode | None = None, writes: bool = True) -> None:
        """Cut a leader (default: the newest) off with a minority for a while; the client keeps
        writing to it."""
        ld = ld or self.leader()
        if ld is None:
            return
        rng = self.rng
        ids = [n for n in self.nodes if not self.nodes[n].stopped]
        others = [n for n in ids if n != ld.id]
        rng.shuffle(others)
        k = rng.randint(0, max(0, (len(ids) - 1) // 2 - 1))
        group = [ld.id, *others[:k]]
        self.heal()
        self.partition(group, others[k:])
        self.heal_at = self.now + rng.randint(*self.faults.isolate_ticks) * TICK
        self.log(f"leader isolated {sorted(group)} | {sorted(others[k:])} until t={self.heal_at}")
        for _ in range(rng.randint(0, 3) if writes else 0):
            key = rng.choice(self.keys)
            mine = [o for o in self.ops if o.key == key]
            open_ops = sum(1 for o in mine if o.status is Status.PENDING or o.status is Status.UNKNOWN)
            if len(mine) < self.max_ops_per_key and open_ops < self.max_open_per_key and ld.alive:
                self.write(ld.id, key)

    def _new_partition(self) -> None:
        rng = self.rng
        ids = [n for n in self.nodes if not self.nodes[n].stopped]
        kind = rng.random()
        self.heal()
        if kind < self.faults.one_way:
            a, b = rng.sample(ids, 2)
            self.blocked.add((a, b))
            self.log(f"one-way partition {a} -/-> {b}")
        elif kind < self.faults.one_way + self.faults.flap:
            a, b = rng.sample(ids, 2)
            self.flapping = (a, b)
            self.log(f"flapping link {a} <-> {b}")
        else:
            rng.shuffle(ids)
            k = rng.randint(1, len(ids) // 2)
            self.partition(ids[:k], ids[k:])
            self.log(f"partition {sorted(ids[:k])} | {sorted(ids[k:])}")

    def _conf_chaos(self) -> None:
        ld = self.leader()
        if ld is None or ld.core is None:
            return
        core = ld.core
        mem = core.membership
        rng = self.rng
        if rng.random() < 0.2:
            # bad requests get a clear error and change nothing
            last = core.last_index
            bad = rng.choice([
                (ConfChangeOp.ADD_LEARNER, rng.choice(mem.voters)),
                (ConfChangeOp.PROMOTE, rng.choice(mem.voters)),
                (ConfChangeOp.REMOVE, "nobody"),
            ])
            try:
                core.propose_conf_change(*bad)
            except (ConfChangeError, NotLeaderError, ProposalDroppedError):
                pass
            else:
                raise Violation(f"invalid conf change {bad} accepted")
            if core.last_index != last:
                raise Violation(f"refused conf change {bad} changed the log")
            return
        try:
            if mem.learners:
                nid = mem.learners[0]
                pr = core.progress(nid)
                if pr is not None and pr.match + 5 >= core.last_index:
                    self.log(f"promote {nid}")
                    core.propose_conf_change(ConfChangeOp.PROMOTE, nid)
            elif len(self.nodes) < self.max_nodes and rng.random() < 0.5:
                probe = core.membership  # validate before creating the node
                if len(probe.voters) + len(probe.learners) < self.max_nodes:
                    core.propose_conf_change(ConfChangeOp.ADD_LEARNER, f"n{self.next_node}")
                    nid = self.add_node()
                    self.log(f"add learner {nid}")
            elif len(mem.voters) > 2:
                victim = rng.choice(mem.voters)
                self.log(f"remove {victim}")
                core.propose_conf_change(ConfChangeOp.REMOVE, victim)
        except (ConfChangeError, NotLeaderError, ProposalDroppedError) as e:
            self.log(f"conf change refused: {e}")
        self._drain(ld)

    # --- invariants ---------------------------------------------------------------------------------
    def _check_send(self, node: SimNode, m: Message) -> None:
        if not self.check_durable_sends:
            return
        hs = self.durable[node.id]
        if (
            isinstance(m, AppendResponse | VoteResponse | HeartbeatResponse | SnapshotResponse)
            and m.term > hs.term
            and not (isinstance(m, VoteResponse) and m.pre)
        ):
            raise Violation(f"durability: {node.id} answers in term {m.term} but persisted {hs}")
        if isinstance(m, AppendResponse) and not m.reject:
            st = node.storage
            if m.index > st.last_index():
                raise Violation(f"durability: {node.id} acks {m.index} but persisted only {st.last_index()}")
        elif isinstance(m, VoteResponse) and m.granted and not m.pre and (hs.term, hs.vote) != (m.term, m.to):
            raise Violation(f"durability: {node.id} grants {m.to} in term {m.term} but persisted {hs}")
        elif isinstance(m, AppendEntries | Heartbeat | InstallSnapshot | TimeoutNow) and hs.term != m.term:
            raise Violation(f"durability: leader {node.id} sends term {m.term} with durable term {hs.term}")

    def _check_chain(self, node: SimNode, ents: tuple[Entry, ...]) -> None:
        st = node.storage
        prev: int | None
        try:
            prev = st.term(ents[0].index - 1)
        except RaftError:
            prev = None
        except Exception:
            prev = None
        for e in ents:
            if e.index <= st.snapshot_meta().index:
                prev = e.term
                continue
            rec = self.chain.get((e.index, e.term))
            if rec is None:
                self.chain[(e.index, e.term)] = (int(e.kind), e.data, prev)
            else:
                kind, data, p = rec
                if kind != int(e.kind) or data != e.data or (p is not None and prev is not None and p != prev):
                    raise Violation(f"log matching: {node.id} stores {e} (prev term {prev}) vs {rec}")
            prev = e.term

    def _check_snapshot(self, node: SimNode, snap: Snapshot) -> None:
        g = self.committed.get(snap.meta.index)
        if snap.meta.index > self.max_committed:
            raise Violation(f"{node.id} installs snapshot {snap.meta.index} beyond commit {self.max_committed}")
        if g is not None and g.term != snap.meta.term:
            raise Violation(f"{node.id} snapshot {snap.meta} disagrees with committed {g}")
        # the snapshot's content must be the state machine after exactly the committed prefix
        kv: dict[str, int] = {}
        mem = self.initial
        for i in range(1, snap.meta.index + 1):
            e = self.committed.get(i)
            if e is None:
                return  # a prefix nobody observed entry by entry: cannot recompute
            if e.kind is EntryKind.CONF_CHANGE:
                mem = decode_conf_change(e.data).membership
            elif e.data.startswith(b"w "):
                _, _, key, value = e.data.split(b" ")
                kv[key.decode()] = int(value)
        if decode_state(snap.data) != kv or snap.meta.membership != mem:
            raise Violation(f"{node.id} installs snapshot {snap.meta.index} whose content is not the committed state")
        self.snapshots_verified += 1

    def check(self) -> None:
        """The per-step invariants (see the module docstring)."""
        for node in self.nodes.values():
            c = node.core
            if not node.alive or c is None:
                continue
            commit, last = c.commit, c.last_index
            if not node.applied <= c.applied <= commit <= last:
                raise Violation(
                    f"{node.id} applied {node.applied}/{c.applied} <= commit {commit} <= last {last} broken"
                )
            hs = self.durable[node.id]
            if c.term < hs.term or commit < hs.commit:
                raise Violation(f"{node.id} term/commit {c.term}/{commit} below durable {hs}")
            if c.role is RaftRole.LEADER:
                who = self.leaders.get(c.term)
                if who is None:
                    self.leaders[c.term] = node.id
                    self._check_leader_completeness(node)
                elif who != node.id:
                    raise Violation(f"election safety: {who} and {node.id} both lead term {c.term}")
                mark = node.leader_mark
                lt = c.log_term(last)
                if mark is not None and mark[0] == c.term:
                    if last < mark[1] or (mark[1] >= c.first_index and c.log_term(mark[1]) != mark[2]):
                        raise Violation(f"leader append-only: {node.id} log changed under {mark}")
                node.leader_mark = (c.term, last, lt if lt is not None else 0)
            else:
                node.leader_mark = None
            if commit > node.seen_commit:
                self._observe_commit(node, c, node.seen_commit, commit)
                node.seen_commit = commit
                f = self.faults
                if f.crash_on_commit and c.role is RaftRole.LEADER and self.rng.random() < f.crash_on_commit:
                    self.log(f"{node.id} crashes right after committing {commit}")
                    self.crash(node.id)
                    self._push(self.rng.randint(*f.restart_after) * TICK, EV_RESTART, node.id)
                elif (
                    f.isolate_on_commit
                    and self.chaos_on
                    and c.role is RaftRole.LEADER
                    and self.rng.random() < f.isolate_on_commit
                ):
                    self.log(f"{node.id} is cut off right after committing {commit}")
                    self._isolate_leader(node, writes=False)

    def _observe_commit(self, node: SimNode, c: RaftCore, lo: int, hi: int) -> None:
        start = max(lo + 1, c.first_index)
        if start <= hi:
            for e in c.log_entries(start, hi + 1):
                g = self.committed.get(e.index)
                if g is None:
                    self.committed[e.index] = e
                elif g.term != e.term or g.data != e.data:
                    raise Violation(f"state machine safety: {node.id} commits {e} but {g} was committed")
        if hi > self.max_committed:
            self.max_committed = hi
            self.commit_marks.append((hi, c.term))

    def _check_leader_completeness(self, node: SimNode) -> None:
        c = node.core
        assert c is not None
        for idx, cterm in reversed(self.commit_marks):
            if cterm < c.term:
                g = self.committed.get(idx)
                if idx < c.first_index - 1 or g is None:
                    return
                if c.log_term(idx) != g.term:
                    raise Violation(f"leader completeness: {node.id} leads term {c.term} without committed {g}")
                return

    # --- whole runs ------------------------------------------------------------------------------
    def committed_membership(self) -> Membership:
        mem = self.initial
        for i in sorted(self.committed):
            e = self.committed[i]
            if e.kind is EntryKind.CONF_CHANGE:
                mem = decode_conf_change(e.data).membership
        return mem

    def members_caught_up(self, index: int) -> bool:
        mem = self.committed_membership()
        for nid in (*mem.voters, *mem.learners):
            node = self.nodes.get(nid)
            if node is not None and node.stopped:
                continue
            if node is None or not node.alive or node.applied < index:
                return False
        return True

    def run_swarm(self, faulty_ticks: int, heal_ticks: int) -> None:
        """Faulty phase (safety) then healed phase (bounded liveness); raises Violation."""
        self.chaos_on = True
        self._push(TICK, EV_CHAOS, None)
        self.run_for(faulty_ticks)
        self.chaos_on = False
        self.faults = replace(
            self.faults, drop=0.0, dup=0.0, partition=0.0, crash=0.0, crash_at_persist=0.0, crash_on_commit=0.0,
            leader_isolate=0.0, isolate_new_leader=0.0, isolate_on_commit=0.0, leader_crash=0.0, crash_mid_send=0.0,
            corrupt=0.0,
        )
        self.heal()
        self.log("=== healed phase ===")
        mem = self.committed_membership()
        wanted = set(mem.voters) | set(mem.learners)
        for node in self.nodes.values():
            if node.core is not None:
                wanted |= set(node.core.membership.voters) | set(node.core.membership.learners)
        for nid, node in self.nodes.items():
            if nid not in wanted and not node.stopped:
                self.stop(nid)
            elif not node.alive and not node.stopped:
                self._boot(node)
        probe: dict[str, tuple[int, int]] = {}

        def live() -> bool:
            ld = self.leader()
            if ld is None or ld.core is None:
                return False
            term, idx = probe.get(ld.id, (-1, 0))
            if term != ld.core.term:
                try:
                    idx = ld.core.propose(b"p")
                except (NotLeaderError, ProposalDroppedError):
                    return False
                probe.clear()
                probe[ld.id] = (ld.core.term, idx)
                self._drain(ld)
                return False
            g = self.committed.get(idx)
            return g is not None and g.data == b"p" and self.members_caught_up(idx)

        if not self.run_until(live, heal_ticks):
            ld = self.leader()
            raise Violation(
                f"liveness: no leader committing and applied everywhere {heal_ticks} ticks after healing "
                f"(leader={ld.id if ld else None}, probe={probe})"
            )
        # every proposal still pending on a live member resolves once the probe is applied there
        mem = self.committed_membership()
        for nid in (*mem.voters, *mem.learners):
            node = self.nodes.get(nid)
            if node is not None and node.alive and node.writes and min(node.writes) <= self.max_committed:
                raise Violation(f"liveness: {nid} still has unresolved proposals {sorted(node.writes)[:5]}")
        for node in self.nodes.values():
            for op in node.writes.values():
                op.status = Status.UNKNOWN
            for op in node.reads.values():
                op.status = Status.FAIL
            for _, op in node.read_waits:
                op.status = Status.FAIL
        for op in self.ops:
            if op.status is Status.PENDING:
                op.status = Status.UNKNOWN if op.kind is Kind.WRITE else Status.FAIL
        ok, why = check_history(self.ops)
        if not ok:
            raise Violation(f"linearizability: {why}")


def _short(m: Message) -> str:
    name = type(m).__name__
    fields = {k: getattr(m, k) for k in m.__slots__ if k not in ("frm", "to", "term")}  # type: ignore[union-attr]
    if "entries" in fields:
        ents = fields["entries"]
        fields["entries"] = f"[{ents[0].index}..{ents[-1].index}]" if ents else "[]"
    if "data" in fields:
        fields["data"] = f"<{len(fields['data'])}B>"
    body = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{m.frm}->{m.to} {name} t={m.term} {body}"


def run_seed(seed: int, nodes: int = 3, trace: Callable[[str], None] | None = None,
             config: RaftConfig | None = None, faulty_ticks: int = 300, heal_ticks: int = 300,
             check_durable_sends: bool = True) -> Cluster:
    """One swarm run; raises Violation (with the seed in the message) on failure."""
    frng = random.Random(seed * 7919 + nodes)
    faults = Faults.draw(frng)
    base = config or default_config()
    config = replace(
        base,
        pre_vote=frng.random() < 0.8,
        check_quorum=frng.random() < 0.8,
        # churn seeds mostly split appends entry by entry: an old-term entry can then reach a
        # majority a message ahead of the new leader's no-op
        max_msg_bytes=frng.choice((40, 40, 256) if faults.isolate_new_leader else (40, 256, 4096)),
        max_inflight=frng.choice((1, 4, 64)),
        snapshot_chunk_bytes=frng.choice((16, 64, 1 << 20)),
    )
    faults = replace(faults, corrupt=frng.choice((0.0, 0.0, 0.05, 0.3)))  # drawn last: earlier draws keep their values
    faults = replace(faults, power_loss=frng.choice((0.0, 0.5, 1.0)), cut_after_snapshot=frng.choice((0.0, 0.2, 0.5)))
    cl = Cluster(nodes, seed=seed, faults=faults, config=config, trace=trace)
    cl.check_durable_sends = check_durable_sends
    if trace is not None:
        trace(f"seed={seed} nodes={nodes} faults={faults} config={config}")
    try:
        cl.run_swarm(faulty_ticks, heal_ticks)
    except Exception as e:  # a violation, or the product raising where it must not (a crash)
        what = str(e) if isinstance(e, Violation) else f"{type(e).__name__}: {e}"
        raise Violation(
            f"seed {seed} ({nodes} nodes) failed at event {cl.event_no}: {what}\n"
            f"  replay: scripts/sim --nodes {nodes} --seed {seed} --trace"
        ) from e
    return cl
