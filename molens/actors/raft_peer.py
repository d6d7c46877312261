"""RaftPeer: the pykka actor that drives the pure Raft core with its log, its transport and an FSM.

Everything Raft happens on this actor's thread. Inputs arrive as actor messages: ticks (from a
ticker thread), peer messages (from the transport's I/O thread), proposals and admin requests.
The actor handles every queued message before it runs one Ready cycle, so proposals arriving
together become ONE append and ONE fsync (group commit), bounded by ``raft.max_proposal_batch``.

One cycle, in the order the core's module docstring prescribes::

    rd = core.ready()
    send rd.messages
    receiver.write(rd.snapshot_chunks)                   # a snapshot arriving: to its file (checked
                                                         # when whole, on a thread of its own, which
                                                         # then calls core.snapshot_received)
    log.save(snapshot, entries, hard_state)              # one durable step (lmdb: one transaction)
    send rd.messages_after_persist
    fsm.restore(rd.snapshot); fsm.apply_batch(rd.committed_entries) in batches -> resolve futures
    publish rd.soft_state -> leadership subscribers (and fail proposals whose outcome became unknown)
    core.advance(rd)

Requests (:mod:`molens.actors.peer_messages`: status, stats, transfer leadership, add or remove a
node, learn peers, reload keys, snapshot now, read index, subscribe, wait until, judge the clock) are
answered between cycles under the same rule: the proposals taken so far are appended first and a Ready
cycle runs right after, so what a request changed goes out at once.

The peer is handed its log (a :class:`~molens.raft.log.PeerLog`) and its transport (a
:class:`~molens.actors.peer_state.PeerTransport` factory): a node's are lmdb and ZeroMQ
(:func:`~molens.actors.peer_handle.lmdb_log`, :func:`~molens.actors.peer_handle.zmq_transport`),
tests hand in-memory twins (``tests/memory_log.py``, ``tests/memory_transport.py``). Beside this module: the thread-safe face
(:mod:`~molens.actors.peer_handle`), snapshot work (:mod:`~molens.actors.peer_snapshots`, this
class's base), what is shared with other threads (:mod:`~molens.actors.peer_state`), the address
book and its codec (:mod:`~molens.actors.address_book`), the errors (:mod:`~molens.actors.peer_errors`).

Proposal outcomes (``propose`` returns a ``concurrent.futures.Future``):

* result: the FSM's result for the entry, once applied on this node;
* :class:`molens.raft.core.NotLeaderError` (carries ``leader_id``) or ``ProposalRefused``: nothing was appended,
  retrying is safe;
* ``LeadershipLost``: appended, but this node stopped being leader before the entry was
  applied -- the outcome is UNKNOWN (it may still commit under the next leader).

Full disk (docs/architecture.md#full-disk): a write of the Raft log, the task store or the history
that fails for want of space (``storage_failure``) does not stop the actor. The Ready stays
outstanding and is carried out again, from the step that failed, with backoff (0.1 s doubling to
5 s): nothing is acknowledged before it is on disk (a follower's acks of that Ready are dropped, so
it simply does not ack and is caught up later), every lmdb/SQLite transaction either commits whole
or not at all, and new proposals are refused with ``StorageFull`` until a retry succeeds.
``StorageHealth`` tells the API, ``/readyz`` and ``/metrics``.

Membership: a conf-change entry carries the new node's addresses in its ``context`` (msgpack map),
so every replica learns how to reach it; the peer keeps an address book in ``data_dir/peers.json``.
The leader promotes learners to voters once they have caught up with its commit index. With CURVE,
a node added re-reads ``public_keys_dir`` first (its key is usually new). A removed node is told
so (``docs/architecture.md#node-ports``): a member that gets a vote request from a node that is in
neither its newest nor its committed configuration answers with :data:`REMOVED_NOTICE`; the removed
node then stops ticking (no more campaigns) and reports role ``removed``. Such a vote request is
not stepped into the core (a removed node must not disrupt the cluster with its terms).

What other threads read without asking the actor (the worker RPC handler, per frame) is published
in ``Lifecycle.standing`` after every cycle: term, leader, members, removed -- also while a Ready is
stalled on a full disk, as the role is: its worker heartbeats the leader the core follows, so it must
take that leader's fire batches too, not refuse them as a newer term's.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pykka

from molens.actors.address_book import (
    AddressBook,
    peer_context,
    peer_from_context,
)
from molens.actors.clockprobe import act_on_clock
from molens.actors.peer_errors import (
    LeadershipLost,
    MembershipRefused,
    NoTransferTarget,
    ProposalRefused,
    StorageFull,
    storage_failure,
)
from molens.actors.peer_messages import (
    AddNode,
    Condition,
    Inbound,
    JudgeClock,
    KnownPeers,
    LeaderChange,
    LearnPeers,
    PeerStatus,
    ProposalsReady,
    RaftPeerStats,
    ReadIndex,
    ReloadKeys,
    RemovedNotice,
    RemoveNode,
    Request,
    SnapshotChecked,
    SnapshotDone,
    SnapshotMetaAt,
    SnapshotNow,
    Subscribe,
    Subscriber,
    Tick,
    TransferLeadership,
    WaitUntil,
)
from molens.actors.peer_snapshots import SnapshotWork
from molens.actors.peer_state import (
    Lifecycle,
    PeerCounters,
    Stall,
    Standing,
    TransportFactory,
    Waiter,
    fail_waiter,
)
from molens.config import PeerConfig, RaftSettings, zmq_endpoint
from molens.raft import core as rc
from molens.raft.errors import CodecError
from molens.raft.fsm import StateMachine
from molens.raft.log import Entry, EntryKind, HardState, Membership, PeerLog, SnapshotMeta
from molens.raft.messages import ConfChangeOp, RequestVote, decode, decode_conf_change, encode_all
from molens.raft.storage import SnapshotFile, SnapshotReceiver
from molens.raft.transport import RefusalLog

log = logging.getLogger(__name__)

REMOVED_NOTICE = b"\x00removed"
"""Raft-port payload a member sends to a node that is no longer in its configuration (not a core
message: the core's codec never produces a leading NUL)."""

SLOW_CYCLE_MS = 200.0
"""A Ready cycle longer than this is logged: it delays heartbeats (elections start at 8+ ticks)."""

STORAGE_RETRY_MIN_S = 0.1
STORAGE_RETRY_MAX_S = 5.0
"""A Ready whose write failed for want of space is tried again after 0.1 s, doubling up to 5 s."""

STORAGE_LOG_EVERY_S = 30.0
"""While writes keep failing, the warning is repeated at most this often."""


def role_name(core: rc.RaftCore, removed: bool = False) -> str:
    """``leader`` | ``follower`` | ``candidate`` | ``learner`` | ``joining`` | ``removed`` (the
    admin ``status`` reply); ``removed`` also when a member said so (:data:`REMOVED_NOTICE`)."""
    if removed:
        return "removed"
    if core.role is rc.RaftRole.LEADER:
        return "leader"
    if core.id in core.membership.learners:
        return "learner"
    if core.role in (rc.RaftRole.CANDIDATE, rc.RaftRole.PRE_CANDIDATE):
        return "candidate"
    if core.id not in core.membership.voters:
        return "removed" if core.last_index > 0 else "joining"
    return "follower"


def _core_config(cfg: RaftSettings) -> rc.RaftConfig:
    return rc.RaftConfig(
        election_tick=cfg.election_ticks,
        heartbeat_tick=cfg.heartbeat_ticks,
        max_inflight=cfg.max_inflight,
        max_msg_bytes=cfg.max_batch_bytes,
        max_apply_bytes=cfg.max_apply_bytes,
    )


_GATHER, _PERSIST, _INSTALL, _APPLY = 0, 1, 2, 3
_STEP_NAMES = ("gather_snapshot", "persist", "install_snapshot", "apply")


class RaftPeer(SnapshotWork):
    """Drives :class:`~molens.raft.core.RaftCore`; see the module docstring. Use
    :class:`~molens.actors.peer_handle.RaftPeerHandle`."""

    use_daemon_thread = True

    def __init__(
        self,
        node_id: str,
        cfg: RaftSettings,
        data_dir: Path,
        fsm: StateMachine,
        peers: tuple[PeerConfig, ...],
        bootstrap_voters: tuple[str, ...],
        *,
        log: PeerLog,
        transport: TransportFactory,
        lifecycle: Lifecycle | None = None,
        on_peer_change: Callable[[PeerConfig], None] | None = None,
    ) -> None:
        """``log`` (opened on ``data_dir``) is the peer's from now on: it closes it when it stops, or
        when starting the transport fails."""
        super().__init__()
        self.node_id = node_id
        self.cfg = cfg
        self.data_dir = data_dir
        self.fsm = fsm
        self.counters = PeerCounters()
        self._dropped_log = RefusalLog(f"raft {self.node_id}: message dropped", logging.getLogger(__name__))
        """Messages a peer sent that this node cannot take: one line per 10 s, not one per message."""
        self._heard: dict[str, float] = {}
        """Monotonic time of the last Raft message from each peer (``last_contact_ms`` in status)."""
        self.book = AddressBook(data_dir / "peers.json", peers, on_peer_change)
        self.log = log
        self._restore_fsm_if_behind()
        self.receiver = SnapshotReceiver(self.log.snapshots)
        """Gathers a snapshot sent by the leader in a file (docs/architecture.md#snapshots)."""
        self._received: tuple[SnapshotMeta, SnapshotFile, Path] | None = None
        """A snapshot received, checked and accepted by the core, waiting to be installed: its
        meta, its compressed file (the log records it) and the sealed file the FSM restores from."""
        self.counters.started_applied_index = fsm.applied_index()
        self.core = rc.RaftCore(
            node_id,
            bootstrap_voters,
            self.log,
            _core_config(cfg),
            random.Random(),
            applied=self._start_applied(),
        )
        self.transport = transport(
            self._on_transport_message,
            {p.id: zmq_endpoint(p.raft_addr) for p in self.book.peers.values() if p.id != node_id},
        )
        self._subscribers: list[Subscriber] = []
        self._pending: dict[int, tuple[int, Waiter]] = {}
        self._batch_datas: list[bytes] = []
        self._batch_futs: list[Waiter] = []
        self._since_cycle = 0
        self._since_cycle_bytes = 0
        self._last_snapshot_index = self.log.snapshot_meta().index
        self._snap_job: threading.Thread | None = None
        self._snap_waiters: list[Future[Any]] = []
        self._snap_retry_at = 0.0  # monotonic; after a failed snapshot, automatic retries wait
        self.removed = False
        """A voter told this node it is no longer a member (see :meth:`_on_removed`)."""
        self._standing_of: Membership | None = None
        self._stall: Stall | None = None
        self._unsaved_commit: HardState | None = None
        """The newest hard state not saved because only its commit index changed."""
        self._reads: dict[bytes, tuple[float, Future[Any]]] = {}
        """ReadIndex requests by ctx, with when they give up (monotonic), until the core answers."""
        self._reads_due: list[tuple[int, Future[Any]]] = []
        """Answered reads waiting for the FSM to apply their index."""
        self._read_seq = itertools.count(1)
        self._last: LeaderChange = LeaderChange(node_id, role_name(self.core), None, self.core.term)
        self._waiters: list[tuple[Condition, Future[Any]]] = []
        self._ticker_stop = threading.Event()
        self._tick_queued = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name=f"raft-ticker-{node_id}", daemon=True)
        self.lifecycle = lifecycle or Lifecycle()
        self.lifecycle.proposals.limit = cfg.max_pending_proposals
        try:
            # bind now, in the caller's thread: a port in use is an error of start(), not of the actor
            self.transport.start()
        except Exception:
            self.log.close()
            raise

    def _start_applied(self) -> int:
        """Where the core resumes handing out committed entries: the FSM's applied index."""
        lo = self.log.first_index() - 1
        hi = max(lo, min(self.log.hard_state().commit, self.log.last_index()))
        return max(lo, min(self.fsm.applied_index(), hi))

    # --- start-up -----------------------------------------------------------------------------
    def _restore_fsm_if_behind(self) -> None:
        snap = self.log.snapshot_meta()
        if self.fsm.applied_index() < snap.index:
            self._restore_from_log("restore.tmp")
            self.counters.fsm_restored_at_start += 1
            log.info("fsm restored from log snapshot index=%d", snap.index)

    def on_start(self) -> None:
        self._publish_standing()
        self._ticker.start()
        log.info(
            "raft peer started node=%s term=%d last=%d commit=%d applied=%d voters=%s learners=%s",
            self.node_id,
            self.core.term,
            self.core.last_index,
            self.core.commit,
            self.fsm.applied_index(),
            list(self.core.membership.voters),
            list(self.core.membership.learners),
        )

    def on_stop(self) -> None:
        self._shutdown()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        log.error("raft peer failed node=%s: %s", self.node_id, exception_value)
        self.lifecycle.failure = exception_value
        self._shutdown()

    def _shutdown(self) -> None:
        if self._ticker_stop.is_set():  # on_failure and on_stop may both run
            return
        self._ticker_stop.set()
        err = ProposalRefused("raft peer stopped")
        for fut in [*self._batch_futs, *self.lifecycle.proposals.close()]:
            fail_waiter(fut, err)
        for _, fut in self._pending.values():
            fail_waiter(fut, LeadershipLost("raft peer stopped before the entry applied: outcome unknown"))
        self._pending.clear()
        self.transport.close()
        self.log.close()
        self.lifecycle.stopped.set()

    # --- threads feeding the actor ------------------------------------------------------------
    def _tick_loop(self) -> None:
        period = self.cfg.tick_ms / 1000
        nxt = time.monotonic() + period
        ref = self.actor_ref
        while not self._ticker_stop.wait(max(0.0, nxt - time.monotonic())):
            nxt += period
            if nxt < time.monotonic():  # fell behind (suspended): do not burst
                nxt = time.monotonic() + period
            if not self._tick_queued.is_set():
                self._tick_queued.set()
                try:
                    ref.tell(Tick(time.monotonic()))
                except pykka.ActorDeadError:
                    return

    def _on_transport_message(self, frm: str, payload: bytes) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(RemovedNotice(frm) if payload == REMOVED_NOTICE else Inbound(frm, payload))

    # --- the actor loop ---------------------------------------------------------------------------
    def on_receive(self, message: Any) -> Any:
        reply: Any = None
        failed: Exception | None = None
        if isinstance(message, Inbound):
            self.counters.messages_in += 1
            self._since_cycle_bytes += len(message.payload)
            try:
                m = decode(message.payload)
            except CodecError as exc:
                self.counters.bad_messages += 1
                self._dropped_log.refused(f"from {message.frm}: {exc}")
            else:
                if m.frm != message.frm:  # the transport bound message.frm to the sender's key
                    self.counters.forged_messages += 1
                    self._dropped_log.refused(f"claims to be from {m.frm}, sent by {message.frm}")
                else:
                    self._heard[m.frm] = time.monotonic()
                    if isinstance(m, RequestVote) and not self._is_member(m.frm):
                        self._tell_removed(m.frm)  # and not stepped: a removed node must not bump terms
                    else:
                        self.core.step(m)
        elif isinstance(message, RemovedNotice):
            self._on_removed(message.frm)
        elif isinstance(message, ProposalsReady):
            datas, futs, more = self.lifecycle.proposals.take(
                self.cfg.max_proposal_batch, self.cfg.max_batch_bytes
            )
            self._batch_datas.extend(datas)
            self._batch_futs.extend(futs)
            self._since_cycle += len(datas)
            self._since_cycle_bytes += sum(map(len, datas))
            if more:  # let queued ticks and peer messages in before the next slice
                self.actor_ref.tell(ProposalsReady())
        elif isinstance(message, Tick):
            self._tick_queued.clear()
            delay = (time.monotonic() - message.sent) * 1000
            if delay > self.counters.max_tick_delay_ms:
                self.counters.max_tick_delay_ms = delay
            if not self.removed:  # a removed node neither campaigns nor leads
                self.core.tick()
                self._leader_housekeeping()
            if self.log.snapshot_held:
                self._maybe_release_snapshot_data()
        elif isinstance(message, SnapshotDone):
            self._snapshot_done(message)
        elif isinstance(message, SnapshotChecked):
            self._snapshot_checked(message)
        elif isinstance(message, Request):
            self._flush_proposals()
            try:
                reply = self._answer(message)
            except Exception as exc:  # raised to the asker (pykka's future) once this cycle ran
                failed = exc
        self._since_cycle += 1
        # group commit: run the cycle once the mailbox is drained (or the batch bound is reached)
        if (
            self.actor_inbox.empty()
            or self._since_cycle >= self.cfg.max_proposal_batch
            or self._since_cycle_bytes >= self.cfg.max_batch_bytes
        ):
            self._flush_proposals()
            self._cycle()
            self._since_cycle = 0
            self._since_cycle_bytes = 0
        if failed is not None:
            raise failed
        return reply

    def _flush_proposals(self) -> None:
        if not self._batch_datas:
            return
        datas, futs = self._batch_datas, self._batch_futs
        self._batch_datas, self._batch_futs = [], []
        if self._stall is not None:
            err: Exception = StorageFull(f"storage full: {self.lifecycle.storage.problem}")
            for f in futs:
                fail_waiter(f, err)
            return
        if len(self._pending) + len(datas) > self.cfg.max_pending_proposals:
            err = ProposalRefused(f"overloaded: {len(self._pending)} proposals pending")
            for f in futs:
                fail_waiter(f, err)
            return
        try:
            first, _ = self.core.propose_batch(datas)
        except rc.NotLeaderError as exc:
            err = exc
        except rc.ProposalDroppedError as exc:
            err = ProposalRefused(str(exc))
        else:
            term = self.core.term
            for i, f in enumerate(futs, first):
                self._pending[i] = (term, f)
            self.counters.proposals += len(datas)
            self.counters.appends += 1
            return
        for f in futs:
            fail_waiter(f, err)

    def _cycle(self) -> None:
        t0 = time.monotonic()
        self._cycle_once()
        ms = (time.monotonic() - t0) * 1000
        if ms > self.counters.max_cycle_ms:
            self.counters.max_cycle_ms = ms
        if ms > SLOW_CYCLE_MS:
            log.warning("slow raft cycle node=%s ms=%.0f", self.node_id, ms)

    def _cycle_once(self) -> None:
        core = self.core
        stall = self._stall
        if stall is not None:
            if time.monotonic() < stall.retry_at or not self._carry_out(stall.rd, stall.step):
                self._publish_role()  # a stalled leader is replaced; its subscribers must hear it
                self._publish_standing()
                return
        while core.has_ready():
            rd = core.ready()
            self.counters.cycles += 1
            self._send(rd.messages)
            if not self._carry_out(rd, _GATHER):
                return
        self._maybe_snapshot()
        if self._waiters:
            self._check_waiters()
        self._publish_standing()

    def _publish_standing(self) -> None:
        core = self.core
        st = self.lifecycle.standing
        m = core.membership
        if (st.term, st.leader, st.removed) != (core.term, core.leader, self.removed) or m is not self._standing_of:
            self._standing_of = m
            self.lifecycle.standing = Standing(
                term=core.term, leader=core.leader, members=frozenset((*m.voters, *m.learners)), removed=self.removed,
            )

    # --- membership: who is a member, telling a removed node ------------------------------------
    def _is_member(self, node_id: str) -> bool:
        core = self.core
        if node_id in core.membership.voters or node_id in core.membership.learners:
            return True
        committed = core.membership_at(core.commit)
        return node_id in committed.voters or node_id in committed.learners

    def _tell_removed(self, node_id: str) -> None:
        """A vote request from a node in neither configuration: it was removed and does not know."""
        if self.node_id not in self.core.membership.voters:
            return  # only a voter's word counts (see _on_removed)
        p = self.book.peers.get(node_id)
        if p is None:
            return
        if node_id not in self.transport.peers():  # dropped when its removal applied: dial it to say so
            self.transport.add_peer(node_id, zmq_endpoint(p.raft_addr))
        self.counters.removed_notices_sent += 1
        log.info("vote request from %s, which is not a member: telling it it was removed", node_id)
        self.transport.send(node_id, REMOVED_NOTICE)

    def _on_removed(self, frm: str) -> None:
        if self.removed:
            return
        if frm not in self.core.membership.voters or self.core.role is rc.RaftRole.LEADER:
            log.warning("removal notice from %s ignored (not a voter here, or this node leads)", frm)
            return
        self.removed = True
        log.warning(
            "raft node=%s was removed from the cluster (told by %s): no more campaigns; it serves nothing",
            self.node_id, frm,
        )
        self._publish_role()

    def _dial(self, p: PeerConfig) -> None:
        """Connect to a (new) peer; with CURVE re-read the key directory first when its key is not known."""
        t = self.transport
        if t.curve is not None and p.id not in t.listed_ids():
            t.reload_curve_keys()
        t.add_peer(p.id, zmq_endpoint(p.raft_addr))

    def _carry_out(self, rd: rc.Ready, step: int) -> bool:
        """Persist, install, apply and advance ``rd`` from ``step`` on; False when a write failed
        for want of space (then ``rd`` stays outstanding in ``_stall``: docs/architecture.md#full-disk)."""
        retry = self._stall is not None
        try:
            if step == _GATHER:
                if rd.snapshot_chunks:
                    self._gather(rd.snapshot_chunks)
                step = _PERSIST
            if step == _PERSIST:
                if rd.must_persist:
                    self._persist(rd)
                if not retry:  # a retry drops them: they may be stale now; the peers ask again
                    self._send(rd.messages_after_persist)
                step = _INSTALL
            if step == _INSTALL:
                if rd.snapshot is not None:
                    self._install_snapshot()
                step = _APPLY
            if rd.committed_entries:
                applied = self.fsm.applied_index()
                todo = rd.committed_entries if not retry else tuple(e for e in rd.committed_entries if e.index > applied)
                if todo:
                    self._apply(todo)
        except Exception as exc:
            reason = storage_failure(exc, self.data_dir)
            if reason is None:
                raise
            self._stalled(rd, step, reason)
            return False
        if retry:
            self._unstalled()
        if rd.read_states or self._reads_due:
            self._serve_reads(rd.read_states)
        if rd.soft_state is not None or retry:
            # after applying: proposals committed in this very Ready get their result, not
            # "outcome unknown", and subscribers see a state machine as fresh as it gets
            self._publish_role()
        self.core.advance(rd)
        return True

    def _persist(self, rd: rc.Ready) -> None:
        """Save what ``rd`` must make durable in one transaction -- unless only the commit index
        changed: the commit index is volatile state in Raft (a restarted node learns it from the
        leader again; the state machine skips what it applied already), so, as etcd's ``MustSync``,
        that change rides along with the next save instead of costing a durable commit (two
        fdatasyncs) of its own."""
        hs = rd.hard_state
        if not rd.entries and rd.snapshot is None and hs is not None:
            stored = self.log.hard_state()
            if hs.term == stored.term and hs.vote == stored.vote:
                self._unsaved_commit = hs
                self.counters.commits_unsaved += 1
                return
        if hs is None:
            hs = self._unsaved_commit
        self.log.save(hard_state=hs, entries=rd.entries, snapshot=rd.snapshot)
        self._unsaved_commit = None
        self.counters.saves += 1

    def _serve_reads(self, answered: tuple[rc.ReadState, ...]) -> None:
        for rs in answered:
            req = self._reads.pop(rs.ctx, None)
            if req is not None:
                self._reads_due.append((rs.index, req[1]))
        applied = self.fsm.applied_index()
        keep = []
        for index, fut in self._reads_due:
            if index <= applied:
                if not fut.done():
                    fut.set_result(index)
            else:
                keep.append((index, fut))
        self._reads_due = keep

    def read_index(self, timeout_s: float) -> Future[Any]:
        """A linearizable read barrier (Raft's ReadIndex, confirmed by a quorum heartbeat round):
        the future gets the index once this node's FSM has applied everything committed when the
        read was asked for; reading the local replica after that is linearizable. Raises
        ``NotLeaderError(None)`` when no leader is known; a read the leader never confirms (it lost
        its quorum) is given up after ``timeout_s`` (the future then fails with ``TimeoutError``)."""
        fut: Future[Any] = Future()
        ctx = b"r%d" % next(self._read_seq)
        self.core.read_index(ctx)
        now = time.monotonic()
        self._reads[ctx] = (now + timeout_s, fut)
        for c, (give_up, f) in list(self._reads.items()):
            if give_up < now:
                del self._reads[c]
                fail_waiter(f, TimeoutError("the read was not confirmed by a quorum in time"))
        return fut

    def _stalled(self, rd: rc.Ready, step: int, reason: str) -> None:
        now = time.monotonic()
        health = self.lifecycle.storage
        stall = self._stall
        if stall is None:
            health.stalls += 1
            health.since = now
            health.problem = reason
            self._stall = Stall(rd, step, now + STORAGE_RETRY_MIN_S, STORAGE_RETRY_MIN_S, now)
            log.warning(
                "storage full node=%s step=%s: %s; writes refused, retrying every %.1f-%.0f s",
                self.node_id, _STEP_NAMES[step], reason, STORAGE_RETRY_MIN_S, STORAGE_RETRY_MAX_S,
            )
            return
        health.retries += 1
        health.problem = reason
        stall.step = step
        stall.delay = min(stall.delay * 2, STORAGE_RETRY_MAX_S)
        stall.retry_at = now + stall.delay
        if now - stall.logged_at >= STORAGE_LOG_EVERY_S:
            stall.logged_at = now
            log.warning(
                "storage still full node=%s step=%s for %.0f s (%d retries): %s",
                self.node_id, _STEP_NAMES[step], now - health.since, health.retries, reason,
            )

    def _unstalled(self) -> None:
        health = self.lifecycle.storage
        log.warning(
            "storage writable again node=%s after %.1f s; writes accepted",
            self.node_id, time.monotonic() - health.since,
        )
        self._stall = None
        health.problem = ""

    def _send(self, msgs: tuple[Any, ...]) -> None:
        for m, data in zip(msgs, encode_all(msgs)):
            self.transport.send(m.to, data)
        self.counters.messages_out += len(msgs)

    def _publish_role(self) -> None:
        now = LeaderChange(self.node_id, role_name(self.core, self.removed), self.core.leader, self.core.term)
        if now == self._last:
            return
        if now.is_leader:
            mono = time.monotonic()
            now = replace(now, heard_ago_ms=tuple(
                sorted((p, int((mono - t) * 1000)) for p, t in self._heard.items() if p != self.node_id)))
        was_leader = self._last.is_leader
        now = replace(now, seq=self._last.seq + 1)
        self._last = now
        self.counters.leader_changes += 1
        log.info(
            "raft role node=%s role=%s leader=%s term=%d", self.node_id, now.role, now.leader_id, now.term
        )
        if was_leader and not now.is_leader and self._pending:
            err = LeadershipLost(f"leadership lost at term {now.term}: outcome unknown")
            self.counters.leadership_lost_proposals += len(self._pending)
            for _, fut in self._pending.values():
                fail_waiter(fut, err)
            self._pending.clear()
        for sub in list(self._subscribers):
            try:
                sub(now)
            except Exception:
                log.exception("leadership subscriber failed")

    def _apply(self, entries: tuple[Entry, ...]) -> None:
        step = self.cfg.apply_batch_entries
        for lo in range(0, len(entries), step):
            chunk = entries[lo : lo + step]
            results = self.fsm.apply_batch(chunk)
            self.counters.applied_entries += len(chunk)
            pending = self._pending
            for e, res in zip(chunk, results):
                if e.kind is EntryKind.CONF_CHANGE:
                    self._on_conf_change_applied(e)
                if pending:
                    p = pending.pop(e.index, None)
                    if p is not None:
                        term, fut = p
                        if term == e.term:
                            if not fut.done():
                                fut.set_result(res)
                        else:
                            fail_waiter(fut, ProposalRefused(f"entry {e.index} superseded by term {e.term}"))

    def _on_conf_change_applied(self, e: Entry) -> None:
        cc = decode_conf_change(e.data)
        log.info(
            "membership change applied node=%s op=%s target=%s voters=%s learners=%s",
            self.node_id,
            cc.op.name,
            cc.node_id,
            list(cc.membership.voters),
            list(cc.membership.learners),
        )
        if cc.op is ConfChangeOp.ADD_LEARNER and cc.context:
            p = peer_from_context(cc.context)
            if p is not None and p.id != self.node_id:
                self._dial(p)
                self.book.update(p)
        elif cc.op is ConfChangeOp.REMOVE and cc.node_id != self.node_id:
            self.transport.remove_peer(cc.node_id)

    def _leader_housekeeping(self) -> None:
        """Promote caught-up learners (one membership change at a time; retried next tick)."""
        core = self.core
        if core.role is not rc.RaftRole.LEADER or not core.membership.learners:
            return
        for lid in core.membership.learners:
            pr = core.progress(lid)
            # caught up: within one proposal batch of the commit index (under load it never equals it)
            caught_up = pr is not None and pr.match + self.cfg.max_proposal_batch >= core.commit
            if pr is not None and caught_up and pr.state is rc.ProgressState.REPLICATE:
                try:
                    core.propose_conf_change(ConfChangeOp.PROMOTE, lid)
                except rc.RaftError as exc:
                    log.debug("promote %s deferred: %s", lid, exc)
                else:
                    log.info("promoting learner %s (match=%d commit=%d)", lid, pr.match, core.commit)
                return

    def _check_waiters(self) -> None:
        keep = []
        for condition, fut in self._waiters:
            if fut.done():
                continue
            if self._holds(condition):
                fut.set_result(True)
            else:
                keep.append((condition, fut))
        self._waiters = keep

    # --- requests, answered on the actor thread between cycles ----------------------------------
    def _answer(self, req: Request) -> Any:
        match req:
            case PeerStatus():
                return self.status()
            case RaftPeerStats():
                return self.stats()
            case KnownPeers():
                return dict(self.book.peers)
            case TransferLeadership(to=to):
                return self.transfer_leader(to)
            case AddNode(peer=peer):
                return self.add_node(peer)
            case RemoveNode(node_id=node_id):
                return self.remove_node(node_id)
            case LearnPeers(peers=peers):
                return self.learn_peers(peers)
            case ReloadKeys():
                return self.transport.reload_curve_keys()
            case SnapshotNow():
                return self.snapshot_now()
            case ReadIndex(timeout_s=timeout_s):
                return self.read_index(timeout_s)
            case Subscribe(fn=fn):
                self._subscribers.append(fn)
                return self._last
            case WaitUntil(condition=condition):
                return self.wait_until(condition)
            case JudgeClock(verdict_of=verdict_of):
                voters = sorted(self.core.membership.voters)
                verdict = verdict_of(voters)
                act_on_clock(self.core, verdict)
                return voters, verdict
            case SnapshotMetaAt(index=index):
                return self._snapshot_meta(index)
        raise TypeError(f"not a RaftPeer request: {req!r}")

    def status(self) -> dict[str, Any]:
        core = self.core
        m = core.membership
        peers = []
        for pid in (*m.voters, *m.learners):
            p = self.book.peers.get(pid)
            entry: dict[str, Any] = {"id": pid, "suffrage": "voter" if pid in m.voters else "learner"}
            if p is not None:
                entry.update(
                    raft_addr=p.raft_addr, rpc_addr=p.rpc_addr, http_addr=p.http_addr, admin_addr=p.admin_addr
                )
                if p.peer_http_addr:  # where the members reach its HTTP API, when not at http_addr
                    entry["peer_http_addr"] = p.peer_http_addr
            pr = core.progress(pid)
            if pr is not None:
                entry.update(match=pr.match, state=str(pr.state))
            heard = self._heard.get(pid)
            if heard is not None and pid != self.node_id:
                entry["last_contact_ms"] = int((time.monotonic() - heard) * 1000)  # how long ago
            peers.append(entry)
        return {
            "node_id": self.node_id,
            "role": role_name(core, self.removed),
            "removed": self.removed or role_name(core) == "removed",
            "term": core.term,
            "leader_id": core.leader,
            "last_index": core.last_index,
            "first_index": core.first_index,
            "commit_index": core.commit,
            "applied_index": self.fsm.applied_index(),
            "snapshot_index": self.log.snapshot_meta().index,
            "voters": list(m.voters),
            "learners": list(m.learners),
            "peers": peers,
            "refused": self.refused(),
        }

    def refused(self) -> dict[str, int]:
        """What the Raft port refused: handshakes, frames whose sender did not match its key."""
        t = self.transport.stats()
        return {
            "handshake_refused": t["handshake_refused"],
            "forged_sender": t["forged_sender"] + self.counters.forged_messages,
        }

    def stats(self) -> dict[str, Any]:
        c = self.counters
        out: dict[str, Any] = {k: v for k, v in asdict(c).items() if k != "extra"}
        out["pending_proposals"] = len(self._pending)
        out["saved_commit"] = self.log.hard_state().commit
        out["log_syncs"] = self.log.syncs
        out["log_cache_hits"] = self.log.cache_hits
        out["snapshot_held"] = self.log.snapshot_held
        out["conflicting_appends"] = self.core.conflicting_appends
        out["transport"] = self.transport.stats()
        fsm_stats = getattr(self.fsm, "stats", None)
        if callable(fsm_stats):
            out["fsm"] = fsm_stats()
        out["snapshot_running"] = self._snap_job is not None
        return out

    def add_node(self, peer: PeerConfig) -> dict[str, Any]:
        core = self.core
        if core.role is not rc.RaftRole.LEADER:
            raise rc.NotLeaderError(core.leader)
        if peer.id == self.node_id:
            raise MembershipRefused(f"{peer.id} is this node (the leader): its addresses come from its own config")
        m = core.membership
        if peer.id in m.voters or peer.id in m.learners:
            # a joiner asking again, or an operator filling in addresses left out: the same node at
            # the same Raft address; one at another address is refused, not silently re-pointed
            known = self.book.peers.get(peer.id)
            if known is not None and known.raft_addr != peer.raft_addr:
                raise MembershipRefused(
                    f"{peer.id} is already a member at raft_addr {known.raft_addr}; remove it first to move it"
                )
            if known is not None:
                peer = PeerConfig(
                    id=peer.id, raft_addr=peer.raft_addr, rpc_addr=peer.rpc_addr or known.rpc_addr,
                    http_addr=peer.http_addr or known.http_addr, admin_addr=peer.admin_addr or known.admin_addr,
                    peer_http_addr=peer.peer_http_addr or known.peer_http_addr,
                )
            self._dial(peer)
            updated = self.book.update(peer)
            return {"index": None, "already_member": True, "updated": updated, "peers": self.book.as_wire()}
        self._dial(peer)
        self.book.update(peer)
        index = core.propose_conf_change(ConfChangeOp.ADD_LEARNER, peer.id, peer_context(peer))
        return {"index": index, "already_member": False, "peers": self.book.as_wire()}

    def remove_node(self, node_id: str) -> dict[str, Any]:
        core = self.core
        if core.role is not rc.RaftRole.LEADER:
            raise rc.NotLeaderError(core.leader)
        index = core.propose_conf_change(ConfChangeOp.REMOVE, node_id)
        return {"index": index}

    def transfer_leader(self, to: str | None) -> dict[str, Any]:
        core = self.core
        if core.role is not rc.RaftRole.LEADER:
            raise rc.NotLeaderError(core.leader)
        target = to or self.best_transferee()
        if target is None:
            raise NoTransferTarget("no other live voter to transfer leadership to")
        core.transfer_leader(target)
        return {"to": target}

    def best_transferee(self) -> str | None:
        core = self.core
        best: tuple[int, str] | None = None
        for v in core.membership.voters:
            pr = core.progress(v)
            # only a voter we heard from recently: a transfer to a dead node just wastes the timeout.
            # In this check-quorum window or the one before: each window starts with every flag
            # cleared, and a voter is heard again only a heartbeat later
            if v == self.node_id or pr is None or not (pr.recent_active or pr.was_active):
                continue
            if best is None or pr.match > best[0]:
                best = (pr.match, v)
        return best[1] if best else None

    def learn_peers(self, peers: tuple[PeerConfig, ...]) -> None:
        for p in peers:
            if p.id != self.node_id:
                self._dial(p)
                self.book.update(p)

    def wait_until(self, condition: Condition) -> Future[Any]:
        fut: Future[Any] = Future()
        if self._holds(condition):
            fut.set_result(True)
        else:
            self._waiters.append((condition, fut))
        return fut

    def _holds(self, condition: Condition) -> bool:
        if condition is Condition.NOT_LEADER:
            return self.core.role is not rc.RaftRole.LEADER
        raise ValueError(condition)
