"""Snapshot work of a RaftPeer, on the actor thread and on threads of its own
(docs/architecture.md#snapshots): taking one in the background, recording it and compacting the log;
gathering, checking and installing one sent by the leader.

:class:`SnapshotWork` is the base of :class:`~molens.actors.raft_peer.RaftPeer`, which owns every
attribute declared here; its methods run on the actor thread unless they say otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

import pykka

from molens.actors.address_book import AddressBook, book_context, peers_from_book_context
from molens.actors.peer_errors import storage_failure
from molens.actors.peer_messages import SnapshotChecked, SnapshotDone, SnapshotMetaAt
from molens.actors.peer_state import PeerCounters, PeerTransport, Stall, fail_waiter
from molens.config import PeerConfig, RaftSettings, zmq_endpoint
from molens.raft import core as rc
from molens.raft.fsm import StateMachine
from molens.raft.log import Membership, PeerLog, SnapshotMeta
from molens.raft.storage import SnapshotFile, SnapshotReceiver

log = logging.getLogger("molens.actors.raft_peer")

SNAPSHOT_RETRY_S = 10.0
"""After a failed snapshot (disk full, say), automatic attempts pause this long."""


class SnapshotWork(pykka.ThreadingActor):
    """Snapshot taking and installing; see the module docstring."""

    node_id: str
    cfg: RaftSettings
    data_dir: Path
    fsm: StateMachine
    log: PeerLog
    core: rc.RaftCore
    book: AddressBook
    transport: PeerTransport
    receiver: SnapshotReceiver
    counters: PeerCounters
    _stall: Stall | None
    _received: tuple[SnapshotMeta, SnapshotFile, Path] | None
    _snap_job: threading.Thread | None
    _snap_waiters: list[Future[Any]]
    _snap_retry_at: float
    _last_snapshot_index: int

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
                self.actor_ref.tell(SnapshotChecked(meta, path, sf, error))

        threading.Thread(target=run, name=f"snapshot-check-{self.node_id}", daemon=True).start()

    def _snapshot_checked(self, done: SnapshotChecked) -> None:
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

    def _install_snapshot(self) -> None:
        meta = self.log.snapshot_meta()
        for p in peers_from_book_context(meta.context):
            if p.id != self.node_id:
                self.book.update(p)
        self.log.release_snapshot_data()
        rcv = self._received
        if rcv is not None and rcv[0] == meta:  # restored from the file the chunks were gathered in, checked
            self.fsm.restore(rcv[2])
            rcv[2].unlink(missing_ok=True)
            self._received = None
        else:
            self._restore_from_log("install.tmp")
        self._last_snapshot_index = meta.index
        self.counters.snapshots_installed += 1
        for p in self._book_from_membership(meta.membership):
            self.transport.add_peer(p.id, zmq_endpoint(p.raft_addr))
        log.info("snapshot installed node=%s index=%d term=%d", self.node_id, meta.index, meta.term)

    def _restore_from_log(self, name: str) -> None:
        """The FSM restored from the log's snapshot, exported for it to ``snapshots/<name>`` (removed after)."""
        path = self.data_dir / "snapshots" / name
        self.log.export_snapshot(path)
        self.fsm.restore(path)
        path.unlink(missing_ok=True)

    def _book_from_membership(self, m: Membership) -> list[PeerConfig]:
        return [
            self.book.peers[i] for i in (*m.voters, *m.learners) if i in self.book.peers and i != self.node_id
        ]

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
                    "SnapshotMeta | None", self.actor_ref.ask(SnapshotMetaAt(index), timeout=60)
                )
                if meta is not None:  # None: a newer snapshot (a leader's) was installed meanwhile
                    sf = self.log.snapshots.write_file(meta, path)
            finally:  # also after a failed copy (a full disk): no partial file left
                path.unlink(missing_ok=True)
        except BaseException as exc:  # reported to the actor, which retries later
            error = exc
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(SnapshotDone(
                meta=meta, sf=sf, error=error, seconds=time.monotonic() - t0,
            ))

    def _snapshot_meta(self, index: int) -> SnapshotMeta | None:
        """The meta of a snapshot at ``index``; its context carries the members' addresses (see
        :func:`book_context`). None when the log already holds a snapshot at or past ``index``."""
        if index <= self.log.snapshot_meta().index:
            return None
        membership = self.core.membership_at(index)
        return SnapshotMeta(index, self.log.term(index), membership, book_context(self.book, membership))

    def _snapshot_done(self, done: SnapshotDone) -> None:
        self._snap_job = None
        waiters, self._snap_waiters = self._snap_waiters, []
        if done.error is not None or (done.meta is not None and done.sf is None):
            self.counters.snapshot_failures += 1
            self._snap_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            log.warning("snapshot failed node=%s (next try in %.0f s): %s", self.node_id, SNAPSHOT_RETRY_S, done.error)
            for fut in waiters:
                fail_waiter(fut, done.error or RuntimeError("snapshot failed"))
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
                    fail_waiter(fut, exc)
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

    def snapshot_now(self) -> Future[Any]:
        """Take a snapshot now (or join the one running); the future gets ``{"index": ...}``."""
        fut: Future[Any] = Future()
        self._maybe_snapshot(force=True)
        if self._snap_job is None:  # nothing applied since the last one
            fut.set_result({"index": self._last_snapshot_index})
        else:
            self._snap_waiters.append(fut)
        return fut
