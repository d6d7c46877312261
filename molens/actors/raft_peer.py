"""RaftPeer: the pykka actor that drives the pure Raft core with lmdb storage, ZeroMQ and an FSM.

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
    log.save(snapshot, entries, hard_state)              # one durable lmdb transaction
    send rd.messages_after_persist
    fsm.restore(rd.snapshot); fsm.apply_batch(rd.committed_entries) in batches -> resolve futures
    publish rd.soft_state -> leadership subscribers (and fail proposals whose outcome became unknown)
    core.advance(rd)

Admin operations and queries run as ``_Call(fn)`` messages (:meth:`RaftPeerHandle.call`) answered
through pykka's own future: ``fn``'s return value, or its exception raised to the asker. Not pykka
proxies: a proxy call is handled before ``on_receive``, so it would skip the group-commit rule above
(pending proposals appended before the operation, a Ready cycle right after it, so what it changed,
a transfer or a membership entry, goes out at once instead of at the next tick).

Proposal outcomes (``propose`` returns a ``concurrent.futures.Future``):

* result: the FSM's result for the entry, once applied on this node;
* :class:`molens.raft.core.NotLeaderError` (carries ``leader_id``) or :class:`ProposalRefused`: nothing was appended,
  retrying is safe;
* :class:`LeadershipLost`: appended, but this node stopped being leader before the entry was
  applied -- the outcome is UNKNOWN (it may still commit under the next leader).

Full disk (docs/architecture.md#full-disk): a write of the Raft log, the task store or the history
that fails for want of space (:func:`storage_failure`) does not stop the actor. The Ready stays
outstanding and is carried out again, from the step that failed, with backoff (0.1 s doubling to
5 s): nothing is acknowledged before it is on disk (a follower's acks of that Ready are dropped, so
it simply does not ack and is caught up later), every lmdb/SQLite transaction either commits whole
or not at all, and new proposals are refused with :class:`StorageFull` until a retry succeeds.
:class:`StorageHealth` tells the API, ``/readyz`` and ``/metrics``.

Membership: a conf-change entry carries the new node's addresses in its ``context`` (msgpack map),
so every replica learns how to reach it; the peer keeps an address book in ``data_dir/peers.json``.
The leader promotes learners to voters once they have caught up with its commit index. With CURVE,
a node added re-reads ``public_keys_dir`` first (its key is usually new). A removed node is told
so (``docs/architecture.md#node-ports``): a member that gets a vote request from a node that is in
neither its newest nor its committed configuration answers with :data:`REMOVED_NOTICE`; the removed
node then stops ticking (no more campaigns) and reports role ``removed``. Such a vote request is
not stepped into the core (a removed node must not disrupt the cluster with its terms).

What other threads read without asking the actor (the worker RPC handler, per frame) is published
in :attr:`Lifecycle.standing` after every cycle: term, leader, members, removed.

Size: the Ready cycle, proposals, background snapshots and membership all touch the core and the
log on the actor's thread; split into actors of their own they would need shared state.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import itertools
import json
import logging
import os
import random
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias, cast

import lmdb
import msgpack
import pykka

from molens.config import PeerConfig, RaftConfig, zmq_endpoint
from molens.errors import MolensError
from molens.raft import core as rc
from molens.raft.errors import CodecError
from molens.raft.fsm import StateMachine
from molens.raft.log import Entry, EntryKind, HardState, Membership, SnapshotMeta
from molens.raft.messages import ConfChangeOp, RequestVote, decode, decode_conf_change, encode_all
from molens.raft.storage import LmdbLog, SnapshotFile, SnapshotReceiver
from molens.raft.transport import CurveKeys, RaftTransport, TransportConfig

log = logging.getLogger(__name__)

SNAPSHOT_RETRY_S = 10.0
"""After a failed snapshot (disk full, say), automatic attempts pause this long."""

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


# --- errors a proposer sees ------------------------------------------------------------------------


class RaftPeerError(MolensError):
    """Base of the errors a proposal future can fail with."""


class ProposalRefused(RaftPeerError):
    """Not appended (leadership transfer in progress, overloaded, stopping, or superseded)."""


class NoTransferTarget(ProposalRefused):
    """A leadership transfer with no other live voter to hand over to."""


class MembershipRefused(ProposalRefused):
    """A membership change that would break the address book: adding the leader itself, or a
    member at another Raft address (remove it first to move it)."""


class StorageFull(ProposalRefused):
    """Not appended: this node cannot write its Raft log, task store or history now (disk or lmdb
    map full); it retries by itself and takes writes again once a write succeeds."""


class LeadershipLost(RaftPeerError):
    """Appended, then leadership was lost before it applied here: the outcome is unknown."""


def storage_failure(exc: BaseException, data_dir: Path | None = None) -> str | None:
    """Why ``exc`` is a write that failed for want of space (a reason for the log and ``/readyz``),
    or None when it is something else (a bug, a corrupt file: the actor stops as before).

    lmdb reports a data-page write that hit ENOSPC as a plain ``Input/output error`` of
    ``mdb_txn_commit`` (the transaction is aborted whole); the reason then names the free space."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        reason = _space_reason(cur)
        if reason is not None:
            if data_dir is not None:
                with contextlib.suppress(OSError):
                    reason += f" ({shutil.disk_usage(data_dir).free} bytes free in {data_dir})"
            return reason
        cur = cur.__cause__ or cur.__context__
    return None


def _space_reason(exc: BaseException) -> str | None:
    if isinstance(exc, lmdb.MapFullError):
        return f"lmdb map full: {exc}"
    if isinstance(exc, lmdb.DiskError):
        return f"lmdb disk error: {exc}"
    if isinstance(exc, lmdb.Error) and not isinstance(exc, lmdb.PanicError):
        text = str(exc)
        if "Input/output error" in text or "No space left" in text or "Disk quota" in text:
            return f"lmdb write failed, disk full? {text}"
        return None
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{exc.strerror}: {exc.filename or ''}".rstrip(": ")
    if isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return f"history database: {exc}"
    if isinstance(exc, MolensError) and "map is full" in str(exc):
        return str(exc)
    return None


# --- published values --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Published to subscribers whenever this node's role or the known leader changes."""

    node_id: str
    role: str
    leader_id: str | None
    term: int
    heard_ago_ms: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    """When this node becomes leader: how long ago it last heard a Raft message from each peer (a
    deposed leader's worker may be gone: docs/architecture.md#lost-workers)."""

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"


Subscriber = Callable[[LeaderChange], None]


# --- actor messages ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tick:
    sent: float
    """time.monotonic() when the ticker queued it (tick delay = how far behind the actor runs)."""


@dataclass(frozen=True, slots=True)
class _Inbound:
    frm: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class _Removed:
    """From the transport: ``frm`` says this node is no longer a member."""

    frm: str


@dataclass(frozen=True, slots=True)
class _ProposalsReady:
    """Wake-up: the ProposalQueue has work (at most one of these is queued at a time)."""


@dataclass(frozen=True, slots=True)
class _SnapshotChecked:
    """From a snapshot check thread: a snapshot received from the leader, sealed in ``path``, was
    checked and compressed into ``sf`` (None: it failed the check, or ``error``)."""

    meta: SnapshotMeta
    path: Path
    sf: SnapshotFile | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class _SnapshotDone:
    """From the snapshot thread: the file is written (or the attempt failed)."""

    meta: SnapshotMeta | None
    sf: SnapshotFile | None
    error: BaseException | None
    seconds: float


Waiter: TypeAlias = "Future[Any] | _Slot | _One"
"""Where a proposal's outcome goes: a Future, one slot of a batch callback, or a one-entry callback."""


class ProposalQueue:
    """Proposals waiting for the actor, kept OUT of its mailbox: a burst of thousands of proposals
    then costs one wake-up message, and ticks and peer messages never queue behind it (a leader
    whose heartbeats wait behind a backlog would lose its followers).

    Producers append to one pair of lists; the actor swaps the whole pair out at once and slices
    its batches from that copy (``_held`` from ``_off`` on), so the lock is held for a swap, never
    for a loop over proposals (a producer blocked on it would wait for the GIL round trip too)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._datas: list[bytes] = []
        self._futs: list[Waiter] = []
        self._held: tuple[list[bytes], list[Waiter]] = ([], [])
        self._off = 0
        self._wake_pending = False
        self.closed = False

    def put(self, datas: list[bytes], futs: list[Waiter]) -> bool:
        """Queue; returns True when the caller must send the actor a wake-up."""
        with self._lock:
            queued = len(self._datas) + len(self._held[0]) - self._off
            if self.closed:
                err: Exception = ProposalRefused("raft peer stopped")
            elif queued + len(datas) > self.limit:
                err = ProposalRefused(f"overloaded: {queued} proposals queued")
            else:
                self._datas.extend(datas)
                self._futs.extend(futs)
                if self._wake_pending:
                    return False
                self._wake_pending = True
                return True
        for f in futs:
            _fail(f, err)
        return False

    def take(self, n: int, max_bytes: int) -> tuple[list[bytes], list[Waiter], bool]:
        """Up to ``n`` proposals / ``max_bytes`` (at least one), and whether more remain (the
        wake-up then stays pending)."""
        datas: list[bytes] = []
        futs: list[Waiter] = []
        size = 0
        with self._lock:
            while len(datas) < n and (size < max_bytes or not datas):
                held_d, held_f = self._held
                off = self._off
                if off >= len(held_d):
                    if not self._datas:
                        break
                    held_d, held_f = self._held = (self._datas, self._futs)
                    self._datas, self._futs = [], []
                    off = 0
                part = held_d[off : off + n - len(datas)]
                # keep adding while the total so far is below max_bytes (and at least one in all)
                sizes = list(itertools.accumulate(map(len, part), initial=size))
                k = bisect.bisect_left(sizes, max_bytes)
                k = min(max(k, 0 if datas else 1), len(part))
                datas += part[:k]
                futs += held_f[off : off + k]
                size = sizes[k]
                self._off = off + k
                if self._off >= len(held_d):
                    self._held, self._off = ([], []), 0
            more = self._off > 0 or bool(self._datas)
            self._wake_pending = more
        return datas, futs, more

    def close(self) -> list[Waiter]:
        with self._lock:
            self.closed = True
            futs = self._held[1][self._off :] + self._futs
            self._held, self._off = ([], []), 0
            self._datas, self._futs = [], []
            return futs


@dataclass(frozen=True, slots=True)
class _Call:
    """Run ``fn(peer)`` on the actor thread (admin requests); the reply is its return value."""

    fn: Callable[[RaftPeer], Any]


@dataclass(frozen=True, slots=True)
class Standing:
    """This node's view of the cluster after its last Raft cycle (read from any thread)."""

    term: int = 0
    leader: str | None = None
    members: frozenset[str] = frozenset()
    """Voters and learners of the newest configuration."""
    removed: bool = False


@dataclass(slots=True)
class StorageHealth:
    """Whether this node's writes reach its disk, read by the API, ``/readyz`` and ``/metrics``
    (written by the actor only; each field is one atomic assignment)."""

    problem: str = ""
    """Why writes fail now ("" while they succeed)."""
    since: float = 0.0
    """time.monotonic() when they started failing."""
    stalls: int = 0
    """How many times writes started failing (process lifetime)."""
    retries: int = 0
    """Failed retries in all."""


@dataclass(slots=True)
class Lifecycle:
    """Shared with the handle: set when the actor has stopped, and why if it failed; the standing."""

    stopped: threading.Event = field(default_factory=threading.Event)
    failure: BaseException | None = None
    proposals: ProposalQueue = field(default_factory=ProposalQueue)
    standing: Standing = Standing()
    storage: StorageHealth = field(default_factory=StorageHealth)


@dataclass(slots=True)
class _Stall:
    """A Ready whose write failed for want of space, waiting to be carried out again."""

    rd: rc.Ready
    step: int
    """The step of :meth:`RaftPeer._carry_out` that failed (it resumes there)."""
    retry_at: float
    delay: float
    logged_at: float


@dataclass(slots=True)
class _Counters:
    proposals: int = 0
    appends: int = 0
    cycles: int = 0
    saves: int = 0
    commits_unsaved: int = 0
    """Readies that changed only the commit index: not saved on their own (see ``_persist``)."""
    applied_entries: int = 0
    snapshots_taken: int = 0
    snapshot_failures: int = 0
    snapshots_installed: int = 0
    snapshot_chunks_received: int = 0
    snapshots_received_damaged: int = 0
    """Snapshots gathered from a leader whose file did not match the CRC of the chunks (sent again)."""
    fsm_restored_at_start: int = 0
    messages_out: int = 0
    messages_in: int = 0
    bad_messages: int = 0
    leadership_lost_proposals: int = 0
    forged_messages: int = 0
    removed_notices_sent: int = 0
    leader_changes: int = 0
    max_cycle_ms: float = 0.0
    max_tick_delay_ms: float = 0.0
    started_applied_index: int = 0
    extra: dict[str, int] = field(default_factory=dict)


def role_name(core: rc.RaftCore, removed: bool = False) -> str:
    """``leader`` | ``follower`` | ``candidate`` | ``learner`` | ``joining`` | ``removed`` (the
    admin ``status`` reply); ``removed`` also when a member said so (:data:`REMOVED_NOTICE`)."""
    if removed:
        return "removed"
    if core.role is rc.Role.LEADER:
        return "leader"
    if core.id in core.membership.learners:
        return "learner"
    if core.role in (rc.Role.CANDIDATE, rc.Role.PRE_CANDIDATE):
        return "candidate"
    if core.id not in core.membership.voters:
        return "removed" if core.last_index > 0 else "joining"
    return "follower"


def _core_config(cfg: RaftConfig) -> rc.RaftConfig:
    return rc.RaftConfig(
        election_tick=cfg.election_ticks,
        heartbeat_tick=cfg.heartbeat_ticks,
        max_inflight=cfg.max_inflight,
        max_msg_bytes=cfg.max_batch_bytes,
        max_apply_bytes=cfg.max_apply_bytes,
    )


class AddressBook:
    """Node id -> PeerConfig, persisted in ``data_dir/peers.json`` (config peers + learned ones)."""

    def __init__(
        self,
        path: Path,
        initial: tuple[PeerConfig, ...],
        on_change: Callable[[PeerConfig], None] | None = None,
    ) -> None:
        self.path = path
        self.on_change = on_change
        """Called (on the actor thread) with every added or changed peer, e.g. to dial its RPC port."""
        self.peers: dict[str, PeerConfig] = {p.id: p for p in initial}
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            stored = {}
        for pid, d in stored.items():
            if pid not in self.peers:
                self.peers[pid] = PeerConfig(**d)

    def update(self, peer: PeerConfig) -> bool:
        if self.peers.get(peer.id) == peer:
            return False
        self.peers[peer.id] = peer
        self.save()
        if self.on_change is not None:
            self.on_change(peer)
        return True

    def save(self) -> None:
        """Write the file; on a full disk keep the book in memory (the log still holds every
        member's address) and write it again with the next change."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({pid: asdict(p) for pid, p in self.peers.items()}, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:
            if storage_failure(exc) is None:
                raise
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("address book not saved (%s): kept in memory", exc)

    def as_wire(self) -> dict[str, dict[str, str]]:
        return {pid: asdict(p) for pid, p in self.peers.items()}


def peer_context(p: PeerConfig) -> bytes:
    """Conf-change context: the addresses of the node being added."""
    return bytes(msgpack.packb(asdict(p), use_bin_type=True))


def peer_from_context(ctx: bytes) -> PeerConfig | None:
    try:
        d = msgpack.unpackb(ctx, raw=False)
        return PeerConfig(**{k: str(v) for k, v in d.items()})
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


def book_context(book: AddressBook, membership: Membership) -> bytes:
    """A snapshot's context: the addresses of its members this node knows. A node that installs the
    snapshot learns them; otherwise a member added in a conf-change entry that was compacted away
    would stay unreachable from it (it could lead without ever replicating to that member)."""
    known = [book.peers[i] for i in (*membership.voters, *membership.learners) if i in book.peers]
    return bytes(msgpack.packb([peer_context(p) for p in known], use_bin_type=True))


def peers_from_book_context(ctx: bytes) -> list[PeerConfig]:
    """Inverse of :func:`book_context`; nothing for an empty or unreadable context."""
    if not ctx:
        return []
    try:
        raw = msgpack.unpackb(ctx, raw=False)
    except (ValueError, msgpack.UnpackException):
        return []
    if not isinstance(raw, list):
        return []
    return [p for p in (peer_from_context(c) for c in raw if isinstance(c, bytes)) if p is not None]


_GATHER, _PERSIST, _INSTALL, _APPLY = 0, 1, 2, 3
_STEP_NAMES = ("gather_snapshot", "persist", "install_snapshot", "apply")


class RaftPeer(pykka.ThreadingActor):
    """Drives :class:`~molens.raft.core.RaftCore`; see the module docstring. Use :class:`RaftPeerHandle`."""

    use_daemon_thread = True

    def __init__(
        self,
        node_id: str,
        cfg: RaftConfig,
        data_dir: Path,
        fsm: StateMachine,
        peers: tuple[PeerConfig, ...],
        bootstrap_voters: tuple[str, ...],
        *,
        durable: bool = True,
        lifecycle: Lifecycle | None = None,
        on_peer_change: Callable[[PeerConfig], None] | None = None,
    ) -> None:
        super().__init__()
        # key files are checked before anything is opened (a bad path must not leak the log)
        curve = (
            CurveKeys.load(cfg.curve.secret_key_file, cfg.curve.public_keys_dir)
            if cfg.curve.enabled
            else None
        )
        self.node_id = node_id
        self.cfg = cfg
        self.data_dir = data_dir
        self.fsm = fsm
        self.counters = _Counters()
        self._heard: dict[str, float] = {}
        """Monotonic time of the last Raft message from each peer (``last_contact_ms`` in status)."""
        self.book = AddressBook(data_dir / "peers.json", peers, on_peer_change)
        self.log = LmdbLog(
            data_dir, Membership(bootstrap_voters), durable=durable, keep_snapshots=cfg.keep_snapshots
        )
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
        self.transport = RaftTransport(
            node_id,
            zmq_endpoint(cfg.bind_addr),
            self._on_transport_message,
            {p.id: zmq_endpoint(p.raft_addr) for p in self.book.peers.values() if p.id != node_id},
            config=TransportConfig(max_pending=cfg.send_queue_max),
            curve=curve,
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
        self._stall: _Stall | None = None
        self._unsaved_commit: HardState | None = None
        """The newest hard state not saved because only its commit index changed."""
        self._reads: dict[bytes, tuple[float, Future[Any]]] = {}
        """ReadIndex requests by ctx, with when they give up (monotonic), until the core answers."""
        self._reads_due: list[tuple[int, Future[Any]]] = []
        """Answered reads waiting for the FSM to apply their index."""
        self._read_seq = itertools.count(1)
        self._last: LeaderChange = LeaderChange(node_id, role_name(self.core), None, self.core.term)
        self._waiters: list[tuple[Callable[[RaftPeer], bool], Future[Any]]] = []
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
            path = self.data_dir / "snapshots" / "restore.tmp"
            self.log.export_snapshot(path)
            self.fsm.restore(path)
            path.unlink(missing_ok=True)
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
            _fail(fut, err)
        for _, fut in self._pending.values():
            _fail(fut, LeadershipLost("raft peer stopped before the entry applied: outcome unknown"))
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
                    ref.tell(_Tick(time.monotonic()))
                except pykka.ActorDeadError:
                    return

    def _on_transport_message(self, frm: str, payload: bytes) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(_Removed(frm) if payload == REMOVED_NOTICE else _Inbound(frm, payload))

    # --- the actor loop ---------------------------------------------------------------------------
    def on_receive(self, message: Any) -> Any:
        reply: Any = None
        failed: Exception | None = None
        if isinstance(message, _Inbound):
            self.counters.messages_in += 1
            self._since_cycle_bytes += len(message.payload)
            try:
                m = decode(message.payload)
            except CodecError as exc:
                self.counters.bad_messages += 1
                log.warning("bad raft message dropped: %s", exc)
            else:
                if m.frm != message.frm:  # the transport bound message.frm to the sender's key
                    self.counters.forged_messages += 1
                    log.warning("raft message dropped: claims to be from %s, sent by %s", m.frm, message.frm)
                else:
                    self._heard[m.frm] = time.monotonic()
                    if isinstance(m, RequestVote) and not self._is_member(m.frm):
                        self._tell_removed(m.frm)  # and not stepped: a removed node must not bump terms
                    else:
                        self.core.step(m)
        elif isinstance(message, _Removed):
            self._on_removed(message.frm)
        elif isinstance(message, _ProposalsReady):
            datas, futs, more = self.lifecycle.proposals.take(
                self.cfg.max_proposal_batch, self.cfg.max_batch_bytes
            )
            self._batch_datas.extend(datas)
            self._batch_futs.extend(futs)
            self._since_cycle += len(datas)
            self._since_cycle_bytes += sum(map(len, datas))
            if more:  # let queued ticks and peer messages in before the next slice
                self.actor_ref.tell(_ProposalsReady())
        elif isinstance(message, _Tick):
            self._tick_queued.clear()
            delay = (time.monotonic() - message.sent) * 1000
            if delay > self.counters.max_tick_delay_ms:
                self.counters.max_tick_delay_ms = delay
            if not self.removed:  # a removed node neither campaigns nor leads
                self.core.tick()
                self._leader_housekeeping()
            if self.log.snapshot_held:
                self._maybe_release_snapshot_data()
        elif isinstance(message, _SnapshotDone):
            self._snapshot_done(message)
        elif isinstance(message, _SnapshotChecked):
            self._snapshot_checked(message)
        elif isinstance(message, _Call):
            self._flush_proposals()
            try:
                reply = message.fn(self)
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
                _fail(f, err)
            return
        if len(self._pending) + len(datas) > self.cfg.max_pending_proposals:
            err = ProposalRefused(f"overloaded: {len(self._pending)} proposals pending")
            for f in futs:
                _fail(f, err)
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
            _fail(f, err)

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
        if frm not in self.core.membership.voters or self.core.role is rc.Role.LEADER:
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

    # --- a snapshot arriving from the leader (docs/architecture.md#snapshots) ---------------------
    def _gather(self, chunks: tuple[rc.SnapshotChunk, ...]) -> None:
        """Write the chunks of a snapshot arriving from the leader to its file (again, at their
        offsets, if this step is retried); after the last one, seal the file and check it on a
        thread of its own: compressing a store of millions of tasks takes seconds per GB, which on
        this thread would leave the leader's heartbeats (each with the chunk resent) piling up."""
        for ch in chunks:
            self.receiver.write(ch.offset, ch.data)
            if ch.done:
                self._start_check(ch.meta, ch.crc, self.receiver.seal())
        self.counters.snapshot_chunks_received += len(chunks)

    def _start_check(self, meta: SnapshotMeta, crc: int, path: Path) -> None:
        def run() -> None:
            sf: SnapshotFile | None = None
            error: BaseException | None = None
            try:
                sf = self.receiver.check(meta, crc, path)
            except BaseException as exc:  # told to the actor, which decides
                error = exc
            with contextlib.suppress(pykka.ActorDeadError):
                self.actor_ref.tell(_SnapshotChecked(meta, path, sf, error))

        threading.Thread(target=run, name=f"snapshot-check-{self.node_id}", daemon=True).start()

    def _snapshot_checked(self, done: _SnapshotChecked) -> None:
        meta, sf = done.meta, done.sf
        if done.error is not None:
            reason = storage_failure(done.error, self.data_dir)
            if reason is None:
                raise done.error
            log.warning(
                "snapshot received node=%s index=%d not written (%s): asking the leader for it again",
                self.node_id, meta.index, reason,
            )
        elif sf is None:
            self.counters.snapshots_received_damaged += 1
        if sf is None:
            done.path.unlink(missing_ok=True)
            self.core.snapshot_received(meta, None)  # the leader sends it again from the start
            return
        log.info("snapshot received node=%s index=%d term=%d bytes=%d", self.node_id, meta.index, meta.term, sf.size)
        if self.core.snapshot_received(meta, self.log.snapshots.streamed(sf)):
            if self._received is not None:
                self._drop_received()
            self._received = (meta, sf, done.path)
        else:  # not needed after all (superseded, or the log holds that prefix)
            self._drop_files(sf, done.path)

    def _drop_received(self) -> None:
        if self._received is not None:
            _, sf, path = self._received
            self._received = None
            self._drop_files(sf, path)

    def _drop_files(self, sf: SnapshotFile, path: Path) -> None:
        path.unlink(missing_ok=True)
        current = self.log.snapshot_file()
        if current is None or current.path != sf.path:
            sf.path.unlink(missing_ok=True)

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
                _fail(f, TimeoutError("the read was not confirmed by a quorum in time"))
        return fut

    def _stalled(self, rd: rc.Ready, step: int, reason: str) -> None:
        now = time.monotonic()
        health = self.lifecycle.storage
        stall = self._stall
        if stall is None:
            health.stalls += 1
            health.since = now
            health.problem = reason
            self._stall = _Stall(rd, step, now + STORAGE_RETRY_MIN_S, STORAGE_RETRY_MIN_S, now)
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
        self._last = now
        self.counters.leader_changes += 1
        log.info(
            "raft role node=%s role=%s leader=%s term=%d", self.node_id, now.role, now.leader_id, now.term
        )
        if was_leader and not now.is_leader and self._pending:
            err = LeadershipLost(f"leadership lost at term {now.term}: outcome unknown")
            self.counters.leadership_lost_proposals += len(self._pending)
            for _, fut in self._pending.values():
                _fail(fut, err)
            self._pending.clear()
        for sub in list(self._subscribers):
            try:
                sub(now)
            except Exception:
                log.exception("leadership subscriber failed")

    def _install_snapshot(self) -> None:
        meta = self.log.snapshot_meta()
        for p in peers_from_book_context(meta.context):
            if p.id != self.node_id:
                self.book.update(p)
        self.log.release_snapshot_data()
        rcv = self._received
        if rcv is not None and rcv[0] == meta:
            src = rcv[2]  # the file the chunks were gathered in, checked
        else:
            src = self.data_dir / "snapshots" / "install.tmp"
            self.log.export_snapshot(src)
        self.fsm.restore(src)
        src.unlink(missing_ok=True)
        if rcv is not None and rcv[2] == src:
            self._received = None
        self._last_snapshot_index = meta.index
        self.counters.snapshots_installed += 1
        for p in self._book_from_membership(meta.membership):
            self.transport.add_peer(p.id, zmq_endpoint(p.raft_addr))
        log.info("snapshot installed node=%s index=%d term=%d", self.node_id, meta.index, meta.term)

    def _book_from_membership(self, m: Membership) -> list[PeerConfig]:
        return [
            self.book.peers[i] for i in (*m.voters, *m.learners) if i in self.book.peers and i != self.node_id
        ]

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
                            _fail(fut, ProposalRefused(f"entry {e.index} superseded by term {e.term}"))

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

    def _maybe_release_snapshot_data(self) -> None:
        """Drop the log's in-memory copy of the snapshot once no follower is being sent it
        (docs/architecture.md#snapshots): it is as large as the state machine."""
        core = self.core
        m = core.membership
        for nid in (*m.voters, *m.learners):
            pr = core.progress(nid)
            if pr is not None and pr.snap is not None:
                return
        self.log.release_snapshot_data()

    def _leader_housekeeping(self) -> None:
        """Promote caught-up learners (one membership change at a time; retried next tick)."""
        core = self.core
        if core.role is not rc.Role.LEADER or not core.membership.learners:
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

    def _maybe_snapshot(self, force: bool = False) -> None:
        """Start a snapshot on a background thread when enough entries applied since the last one
        (or ``force``). Copying, compressing and writing a large state machine takes seconds (4.6 s
        for 1M tasks); on the actor thread that silenced heartbeats and cost the leadership."""
        if self._snap_job is not None or self._stall is not None or (not force and time.monotonic() < self._snap_retry_at):
            return
        applied = self.fsm.applied_index()
        if applied <= self._last_snapshot_index:
            return
        if not force and applied - self._last_snapshot_index < self.cfg.snapshot_every_entries:
            return
        self._snap_job = threading.Thread(
            target=self._snapshot_job, name=f"snapshot-{self.node_id}", daemon=True,
        )
        self._snap_job.start()

    def _snapshot_job(self) -> None:
        """Snapshot thread: a consistent copy of the FSM (one read transaction, entries keep
        applying), its meta from the actor, the compressed file (streamed: the copy is never read
        into memory whole); then the actor records it."""
        t0 = time.monotonic()
        meta: SnapshotMeta | None = None
        sf: SnapshotFile | None = None
        error: BaseException | None = None
        path = self.data_dir / "snapshots" / "fsm.tmp"
        try:
            try:
                index = self.fsm.snapshot(path)
                meta = cast(
                    "SnapshotMeta | None", self.actor_ref.ask(_Call(lambda p: p._snapshot_meta(index)), timeout=60)
                )
                if meta is not None:  # None: a newer snapshot (a leader's) was installed meanwhile
                    sf = self.log.snapshots.write_file(meta, path)
            finally:  # also after a failed copy (a full disk): no partial file left
                path.unlink(missing_ok=True)
        except BaseException as exc:  # reported to the actor, which retries later
            error = exc
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(_SnapshotDone(
                meta=meta, sf=sf, error=error, seconds=time.monotonic() - t0,
            ))

    def _snapshot_meta(self, index: int) -> SnapshotMeta | None:
        """The meta of a snapshot at ``index``; its context carries the members' addresses (see
        :func:`book_context`). None when the log already holds a snapshot at or past ``index``."""
        if index <= self.log.snapshot_meta().index:
            return None
        membership = self.core.membership_at(index)
        return SnapshotMeta(index, self.log.term(index), membership, book_context(self.book, membership))

    def _snapshot_done(self, done: _SnapshotDone) -> None:
        self._snap_job = None
        waiters, self._snap_waiters = self._snap_waiters, []
        if done.error is not None or (done.meta is not None and done.sf is None):
            self.counters.snapshot_failures += 1
            self._snap_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            log.warning("snapshot failed node=%s (next try in %.0f s): %s", self.node_id, SNAPSHOT_RETRY_S, done.error)
            for fut in waiters:
                _fail(fut, done.error or RuntimeError("snapshot failed"))
            return
        meta, sf = done.meta, done.sf
        if meta is None or sf is None or meta.index <= self.log.snapshot_meta().index:
            # a newer snapshot (a leader's) was installed while this one was being made
            log.info("snapshot superseded node=%s: the log holds a newer one", self.node_id)
            if sf is not None and sf.path != getattr(self.log.snapshot_file(), "path", None):
                sf.path.unlink(missing_ok=True)
        else:
            try:
                self.log.record_snapshot(meta, sf)
            except Exception as exc:
                reason = storage_failure(exc, self.data_dir)
                if reason is None:
                    raise
                self.counters.snapshot_failures += 1
                self._snap_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
                log.warning("snapshot not recorded node=%s (next try in %.0f s): %s", self.node_id, SNAPSHOT_RETRY_S, reason)
                sf.path.unlink(missing_ok=True)
                for fut in waiters:
                    _fail(fut, exc)
                return
            self._last_snapshot_index = meta.index
            self.counters.snapshots_taken += 1
            upto = meta.index - self.cfg.keep_log_tail
            if upto >= self.log.first_index():
                try:
                    self.log.compact(upto)
                except Exception as exc:  # the log keeps its entries; the next snapshot compacts
                    reason = storage_failure(exc, self.data_dir)
                    if reason is None:
                        raise
                    log.warning("log compaction skipped node=%s: %s", self.node_id, reason)
            log.info(
                "snapshot taken node=%s index=%d bytes=%d first_index=%d in %.0f ms (background)",
                self.node_id,
                meta.index,
                sf.size,
                self.log.first_index(),
                done.seconds * 1000,
            )
        index = self.log.snapshot_meta().index
        for fut in waiters:
            if not fut.done():
                fut.set_result({"index": index})

    def _check_waiters(self) -> None:
        keep = []
        for pred, fut in self._waiters:
            if fut.done():
                continue
            if pred(self):
                fut.set_result(True)
            else:
                keep.append((pred, fut))
        self._waiters = keep

    # --- operations run on the actor thread through _Call -------------------------------------
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
        out["log_syncs"] = self.log.syncs
        out["log_cache_hits"] = self.log.cache_hits
        out["snapshot_held"] = self.log.snapshot_held
        out["transport"] = self.transport.stats()
        fsm_stats = getattr(self.fsm, "stats", None)
        if callable(fsm_stats):
            out["fsm"] = fsm_stats()
        out["snapshot_running"] = self._snap_job is not None
        return out

    def add_node(self, peer: PeerConfig) -> dict[str, Any]:
        core = self.core
        if core.role is not rc.Role.LEADER:
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
        if core.role is not rc.Role.LEADER:
            raise rc.NotLeaderError(core.leader)
        index = core.propose_conf_change(ConfChangeOp.REMOVE, node_id)
        return {"index": index}

    def transfer_leader(self, to: str | None) -> dict[str, Any]:
        core = self.core
        if core.role is not rc.Role.LEADER:
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
            # only a voter we heard from recently: a transfer to a dead node just wastes the timeout
            if v == self.node_id or pr is None or not pr.recent_active:
                continue
            if best is None or pr.match > best[0]:
                best = (pr.match, v)
        return best[1] if best else None

    def snapshot_now(self) -> Future[Any]:
        """Take a snapshot now (or join the one running); the future gets ``{"index": ...}``."""
        fut: Future[Any] = Future()
        self._maybe_snapshot(force=True)
        if self._snap_job is None:  # nothing applied since the last one
            fut.set_result({"index": self._last_snapshot_index})
        else:
            self._snap_waiters.append(fut)
        return fut

    def learn_peers(self, peers: list[PeerConfig]) -> None:
        for p in peers:
            if p.id != self.node_id:
                self._dial(p)
                self.book.update(p)

    def subscribe(self, fn: Subscriber) -> LeaderChange:
        self._subscribers.append(fn)
        return self._last

    def wait_until(self, pred: Callable[[RaftPeer], bool], fut: Future[Any]) -> None:
        if pred(self):
            fut.set_result(True)
        else:
            self._waiters.append((pred, fut))


BatchCallback = Callable[[list[Any], BaseException | None], None]


class _Batch:
    """Outcome of a batch of proposals, reported once through a callback."""

    __slots__ = ("error", "left", "lock", "on_done", "results")

    def __init__(self, n: int, on_done: BatchCallback) -> None:
        self.results: list[Any] = [None] * n
        self.error: BaseException | None = None
        self.left = n
        self.on_done = on_done
        self.lock = threading.Lock()

    def settle(self, i: int, value: Any, exc: BaseException | None) -> None:
        with self.lock:
            if exc is not None:
                if self.error is None or isinstance(exc, LeadershipLost):
                    self.error = exc
            else:
                self.results[i] = value
            self.left -= 1
            finished = self.left == 0
        if finished:
            try:
                self.on_done(self.results, self.error)
            except Exception:
                log.exception("proposal batch callback failed")


class _Slot:
    """One entry of a :class:`_Batch`; quacks like the Future methods the peer uses."""

    __slots__ = ("_done", "batch", "i")

    def __init__(self, batch: _Batch, i: int) -> None:
        self.batch = batch
        self.i = i
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        if not self._done:
            self._done = True
            self.batch.settle(self.i, value, None)

    def set_exception(self, exc: BaseException) -> None:
        if not self._done:
            self._done = True
            self.batch.settle(self.i, None, exc)


class _One:
    """The outcome of a one-entry :meth:`RaftPeerHandle.propose_batch`: the callback itself, with
    no per-batch state or lock (a single outcome needs no counting)."""

    __slots__ = ("_done", "on_done")

    def __init__(self, on_done: BatchCallback) -> None:
        self.on_done = on_done
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        if not self._done:
            self._done = True
            self._call([value], None)

    def set_exception(self, exc: BaseException) -> None:
        if not self._done:
            self._done = True
            self._call([None], exc)

    def _call(self, results: list[Any], exc: BaseException | None) -> None:
        try:
            self.on_done(results, exc)
        except Exception:
            log.exception("proposal batch callback failed")


def _fail(fut: Waiter, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class RaftPeerHandle:
    """Thread-safe face of a running RaftPeer: propose, status, admin operations, subscriptions."""

    def __init__(self, ref: pykka.ActorRef[RaftPeer], node_id: str, lifecycle: Lifecycle) -> None:
        self.ref = ref
        self.node_id = node_id
        self.lifecycle = lifecycle

    @classmethod
    def start(cls, node_id: str, *args: Any, **kwargs: Any) -> RaftPeerHandle:
        """Construct and start a RaftPeer (same arguments); binding errors raise here."""
        lifecycle = Lifecycle()
        ref = RaftPeer.start(node_id, *args, lifecycle=lifecycle, **kwargs)
        return cls(ref, node_id, lifecycle)

    def propose(self, data: bytes) -> Future[Any]:
        """Propose one entry; the future resolves with the FSM's result (see module docstring)."""
        return self.propose_many([data])[0]

    def propose_many(self, datas: list[bytes]) -> list[Future[Any]]:
        """Propose entries (appended together when the actor is free); one future each."""
        futs: list[Future[Any]] = [Future() for _ in datas]
        self._enqueue(datas, futs)
        return futs

    def propose_batch(self, datas: list[bytes], on_done: BatchCallback) -> None:
        """Like :meth:`propose_many` without a future per entry (cheaper for high-rate callers):
        ``on_done(results, error)`` runs once, on the actor thread, when every entry has an
        outcome; ``error`` is None when all applied, else the most telling failure
        (:class:`LeadershipLost` -- outcome unknown -- wins over a refusal)."""
        if len(datas) == 1:
            self._enqueue(datas, [_One(on_done)])
            return
        batch = _Batch(len(datas), on_done)
        self._enqueue(datas, [_Slot(batch, i) for i in range(len(datas))])

    def _enqueue(self, datas: list[bytes], waiters: list[Any]) -> None:
        if self.lifecycle.proposals.put(datas, waiters):
            try:
                self.ref.tell(_ProposalsReady())
            except pykka.ActorDeadError:
                for f in self.lifecycle.proposals.close():
                    _fail(f, ProposalRefused("raft peer stopped"))

    def call(self, fn: Callable[[RaftPeer], Any], timeout: float | None = 10.0) -> Any:
        """Run ``fn(peer)`` on the actor thread and return its result (re-raising its exception)."""
        return self.ref.ask(_Call(fn), timeout=timeout)

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        return dict(self.call(RaftPeer.status, timeout))

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        return dict(self.call(RaftPeer.stats, timeout))

    def read_index(self, timeout_s: float = 5.0) -> int:
        """Wait until a linearizable read of the local replica is possible (see
        :meth:`RaftPeer.read_index`); returns the read index."""
        fut = self.call(lambda p: p.read_index(timeout_s))
        return int(fut.result(timeout=timeout_s))

    def subscribe(self, fn: Subscriber) -> LeaderChange:
        """Call ``fn`` (on the actor thread; keep it quick) on every role/leader change."""
        return self.call(lambda p: p.subscribe(fn))  # type: ignore[no-any-return]

    def wait_until(self, pred: Callable[[RaftPeer], bool]) -> Future[Any]:
        """A future set once ``pred(peer)`` holds after a Raft cycle."""
        fut: Future[Any] = Future()
        self.call(lambda p: p.wait_until(pred, fut))
        return fut

    @property
    def standing(self) -> Standing:
        """Term, leader, members and removal as of the peer's last Raft cycle (no actor round trip)."""
        return self.lifecycle.standing

    @property
    def stopped(self) -> threading.Event:
        return self.lifecycle.stopped

    @property
    def failure(self) -> BaseException | None:
        return self.lifecycle.failure

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the actor (transport and log closed); gives up waiting after ``timeout``."""
        try:
            self.ref.stop(block=True, timeout=timeout)
        except pykka.ActorDeadError:
            pass
        except pykka.Timeout:
            log.warning("raft peer %s did not stop within %.0f s", self.node_id, timeout)
        self.lifecycle.stopped.wait(timeout)
