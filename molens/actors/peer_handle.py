"""RaftPeerHandle: the thread-safe face of a running :class:`~molens.actors.raft_peer.RaftPeer`,
and what a node hands a RaftPeer it starts: its lmdb log (:func:`lmdb_log`) and ZeroMQ transport
(:func:`zmq_transport`).

Proposals go through the shared :class:`~molens.actors.peer_state.ProposalQueue` (one wake-up
message per burst); every other operation is one typed request of :mod:`molens.actors.peer_messages`,
asked of the actor. Nothing here reaches into the actor's core, log, address book or transport.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

import pykka

from molens.actors import peer_messages as msg
from molens.actors.peer_errors import ProposalRefused
from molens.actors.peer_state import (
    BatchCallback,
    BatchOutcome,
    BatchSlot,
    Lifecycle,
    OneCallback,
    Standing,
    TransportFactory,
    Waiter,
    fail_waiter,
)
from molens.actors.raft_peer import RaftPeer
from molens.config import PeerConfig, RaftSettings, zmq_endpoint
from molens.raft.clock import ClockVerdict
from molens.raft.log import Membership, PeerLog
from molens.raft.storage import LmdbLog
from molens.raft.transport import CurveKeys, RaftTransport, TransportConfig

log = logging.getLogger(__name__)



def lmdb_log(cfg: RaftSettings, data_dir: Path, bootstrap_voters: tuple[str, ...], durable: bool = True) -> PeerLog:
    """A node's Raft log: lmdb in ``data_dir`` (every save fsync'd unless ``durable`` is False)."""
    return LmdbLog(data_dir, Membership(bootstrap_voters), durable=durable, keep_snapshots=cfg.keep_snapshots)


def zmq_transport(node_id: str, cfg: RaftSettings) -> TransportFactory:
    """A node's Raft transport: ZeroMQ on ``cfg.bind_addr``, CURVE when enabled. The key files are
    read now, before any log is opened (a bad path fails here and leaks nothing)."""
    curve = CurveKeys.load(cfg.curve.secret_key_file, cfg.curve.public_keys_dir) if cfg.curve.enabled else None

    def build(on_message: Callable[[str, bytes], None], peers: dict[str, str]) -> RaftTransport:
        return RaftTransport(
            node_id,
            zmq_endpoint(cfg.bind_addr),
            on_message,
            peers,
            config=TransportConfig(max_pending=cfg.send_queue_max),
            curve=curve,
        )

    return build


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

    # --- proposals ------------------------------------------------------------------------------
    def propose(self, data: bytes) -> Future[Any]:
        """Propose one entry; the future resolves with the FSM's result (see :mod:`molens.actors.raft_peer`)."""
        return self.propose_many([data])[0]

    def propose_many(self, datas: list[bytes]) -> list[Future[Any]]:
        """Propose entries (appended together when the actor is free); one future each."""
        futs: list[Future[Any]] = [Future() for _ in datas]
        self._enqueue(datas, list(futs))
        return futs

    def propose_batch(self, datas: list[bytes], on_done: BatchCallback) -> None:
        """Like :meth:`propose_many` without a future per entry (cheaper for high-rate callers):
        ``on_done(results, error)`` runs once, on the actor thread, when every entry has an
        outcome; ``error`` is None when all applied, else the most telling failure
        (:class:`~molens.actors.peer_errors.LeadershipLost` -- outcome unknown -- wins over a refusal)."""
        if len(datas) == 1:
            self._enqueue(datas, [OneCallback(on_done)])
            return
        batch = BatchOutcome(len(datas), on_done)
        self._enqueue(datas, [BatchSlot(batch, i) for i in range(len(datas))])

    def _enqueue(self, datas: list[bytes], waiters: list[Waiter]) -> None:
        if self.lifecycle.proposals.put(datas, waiters):
            try:
                self.ref.tell(msg.ProposalsReady())
            except pykka.ActorDeadError:
                for f in self.lifecycle.proposals.close():
                    fail_waiter(f, ProposalRefused("raft peer stopped"))

    # --- requests ---------------------------------------------------------------------------------
    def ask(self, request: msg.Request, timeout: float | None = 10.0) -> Any:
        """Ask the actor ``request`` and return its reply (re-raising the exception it raised)."""
        return self.ref.ask(request, timeout=timeout)

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        return dict(self.ask(msg.PeerStatus(), timeout))

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        return dict(self.ask(msg.RaftPeerStats(), timeout))

    def known_peers(self, timeout: float = 10.0) -> dict[str, PeerConfig]:
        """The address book: node id -> addresses."""
        return dict(self.ask(msg.KnownPeers(), timeout))

    def transfer_leader(self, to: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        return dict(self.ask(msg.TransferLeadership(to), timeout))

    def add_node(self, peer: PeerConfig, timeout: float = 10.0) -> dict[str, Any]:
        return dict(self.ask(msg.AddNode(peer), timeout))

    def remove_node(self, node_id: str, timeout: float = 10.0) -> dict[str, Any]:
        return dict(self.ask(msg.RemoveNode(node_id), timeout))

    def learn_peers(self, peers: list[PeerConfig], timeout: float = 10.0) -> None:
        self.ask(msg.LearnPeers(tuple(peers)), timeout)

    def reload_keys(self, timeout: float = 10.0) -> Any:
        """Re-read the Raft port's CURVE public keys; the transport's report."""
        return self.ask(msg.ReloadKeys(), timeout)

    def snapshot_now(self, timeout: float = 10.0) -> Future[Any]:
        """A future of ``{"index": ...}`` once the snapshot taken now (or the one running) is written."""
        return cast("Future[Any]", self.ask(msg.SnapshotNow(), timeout))

    def read_index(self, timeout_s: float = 5.0) -> int:
        """Wait until a linearizable read of the local replica is possible; returns the read index.
        ``NotLeaderError(None)`` when no leader is known; ``TimeoutError`` when no quorum confirms."""
        fut = cast("Future[Any]", self.ask(msg.ReadIndex(timeout_s)))
        return int(fut.result(timeout=timeout_s))

    def subscribe(self, fn: msg.Subscriber) -> msg.LeaderChange:
        """Call ``fn`` (on the actor thread; keep it quick) on every role/leader change."""
        return cast(msg.LeaderChange, self.ask(msg.Subscribe(fn)))

    def wait_until_not_leader(self) -> Future[Any]:
        """A future set once this node is not the leader after a Raft cycle."""
        return cast("Future[Any]", self.ask(msg.WaitUntil(msg.Condition.NOT_LEADER)))

    def judge_clock(
        self, verdict_of: Callable[[list[str]], ClockVerdict], timeout: float = 10.0
    ) -> tuple[list[str], ClockVerdict]:
        """The clock verdict for the current voters, acted on at once on the Raft thread."""
        return cast("tuple[list[str], ClockVerdict]", self.ask(msg.JudgeClock(verdict_of), timeout))

    # --- lifecycle --------------------------------------------------------------------------------
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
