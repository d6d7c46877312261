"""Wires one Molens node: start order, admin commands, joining a cluster, graceful stop order.

Start: lock ``data_dir`` (one process per data directory) -> open the state machine -> worker RPC
endpoint (``rpc.bind_addr``; messages go to the handler set with ``set_rpc_handler``) -> RaftPeer
(binds the Raft port, recovers log + FSM, replays only entries after the FSM's applied index) ->
admin socket -> join the cluster when ``cluster.join_addrs`` is set and this node has no data.

Stop (graceful, bounded by ``node.stop_timeout_s``): refuse new proposals -> a leader hands
leadership to its most up-to-date voter and waits until it has stepped down -> RPC endpoint
closed -> RaftPeer stops
(transport, log closed) -> state machine closed -> admin socket closed -> lock released. Local data
is kept. The HTTP API and the scheduler actors stop before leadership is handed over.

The state machine is pluggable: ``Node(cfg, fsm_factory=...)``; by default ``node.state_machine``
picks it: ``tasks`` (the scheduler: ``molens.fsm.store.TaskStore`` + ``History``) or ``kv`` (the
replicated key-value FSM the Raft tests and benchmarks drive). With the task FSM the node also
runs the scheduler (``molens.scheduler``: a FireWorker pool on every node, the leader-only actors
while it leads, worker RPC) and the HTTP API + UI (``molens.web``), started after RaftPeer; a
graceful stop first stops the HTTP API and the leader's scheduler, then hands leadership over,
then lets the worker pool finish its in-flight fires and hand their results to the new leader.

Admin command ``propose`` (``{"cmd": "propose", "data": "<base64>"}`` or ``"datas": [...]``) is for
tests and benchmarks: it proposes raw entries to the local RaftPeer and answers when they apply
(``{"ok": true, "results": [...]}``; at once for an empty ``datas``) or with ``{"ok": false, "error":
"not_leader" | "leadership_lost" | "refused", "outcome": "not_applied" | "unknown", "leader_id": ...}``.
A node running the scheduler's state machine refuses it: a raw entry there would skip the API's
authorization and the audit trail (the admin socket has no authentication of its own).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import gc
import logging
import os
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import pykka

from molens import __version__, cpus, disk, wallclock
from molens.actors.peer_errors import LeadershipLost, ProposalRefused, RaftPeerError
from molens.actors.peer_handle import RaftPeerHandle, lmdb_log, zmq_transport
from molens.admin import AdminClient, AdminError, AdminServer
from molens.config import PEER_ADDRESSES, Config, ConfigError, PeerConfig, peer_problem, zmq_endpoint
from molens.errors import MolensError
from molens.kv import KVError, KVStateMachine
from molens.raft import core as rc
from molens.raft.fsm import StateMachine
from molens.raft.transport import CurveKeys, TransportError
from molens.worker_rpc import RpcEndpoint

log = logging.getLogger(__name__)

FsmFactory = Callable[[Path], StateMachine]
RpcHandler = Callable[[str, bytes], None]

SWITCH_INTERVAL_S = 0.0005
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals that stop the node gracefully (:meth:`Node.run`)."""

GC_THRESHOLDS = (50_000, 20, 10)
"""``gc.set_threshold`` for the node process (CPython's default: 700, 10, 10). Every proposal in
flight holds a few tracked objects (entry, waiter, callback) for longer than several young
collections, so with the default a loaded leader spent about a third of its CPU in the collector
(docs/benchmarks.md, the Raft section)."""
MEMBERSHIP_RETRY_S = 10.0
"""How long an admin add/remove-node is asked again while the leader refuses it only for now."""
MEMBERSHIP_COMMIT_S = 10.0
"""How long a membership change's reply waits for its entry to commit before it says the outcome
is unknown (a quorum of the new membership may be down: the change is then neither done nor undone)."""
RESULTS_FLUSH_MS = 1_000
"""How long a stopping node's last fire results (of the attempts that finished during the stop, and
the fires it answers as not sent) get to leave for the leader when the worker RPC endpoint closes;
other queued messages are dropped (a peer that is down would hold the stop for nothing)."""


class NodeError(MolensError):
    """The node cannot start (one line for the operator)."""


def cpu_place(cfg: Config) -> int:
    """This node's place for ``node.cpus: auto`` (:func:`molens.cpus.choose`): its position among
    the ids of ``cluster.peers``, so the nodes of a cluster sharing a host take different CPUs; a
    node not listed there (one that joins) by a checksum of its id; 0 for a lone node."""
    ids = sorted(p.id for p in cfg.cluster.peers)
    if cfg.node.id in ids:
        return ids.index(cfg.node.id)
    return zlib.crc32(cfg.node.id.encode()) if ids or cfg.cluster.join_addrs else 0


def _default_fsm(data_dir: Path) -> StateMachine:
    return KVStateMachine(data_dir, log_backed=True)


def _task_fsm(cfg: Config) -> FsmFactory:
    def make(data_dir: Path) -> StateMachine:
        from molens.fsm.history import History
        from molens.fsm.machine import MachineConfig
        from molens.fsm.store import TaskStore

        history = History(
            data_dir / "history.sqlite", max_records_per_task=cfg.scheduler.history_max_records_per_task
        )
        # log-backed: the Raft log holds what it applies (docs/architecture.md#fsm-durability)
        return TaskStore(
            data_dir, history=history, config=MachineConfig(ack_ttl=cfg.scheduler.ack_ttl), log_backed=True
        )

    return make


def jsonable(value: Any) -> Any:
    """An FSM result as JSON: bytes -> {"b64": ...}, KVError -> {"error": ...}."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, KVError):
        return {"error": value.reason, "index": value.index}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def live_actors() -> dict[str, int]:
    """Class name -> how many live pykka actors of that class this process runs."""
    out: dict[str, int] = {}
    for ref in pykka.ActorRegistry.get_all():
        name = ref.actor_class.__name__
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def error_reply(exc: BaseException) -> dict[str, Any]:
    """Map a proposal/operation failure to an admin reply that says whether anything happened."""
    if isinstance(exc, rc.NotLeaderError):
        return {"ok": False, "error": "not_leader", "outcome": "not_applied", "leader_id": exc.leader_id}
    if isinstance(exc, LeadershipLost):
        return {"ok": False, "error": "leadership_lost", "outcome": "unknown", "detail": str(exc)}
    if isinstance(exc, ProposalRefused | rc.ProposalDroppedError):
        return {"ok": False, "error": "refused", "outcome": "not_applied", "detail": str(exc)}
    if isinstance(exc, rc.RaftError):
        return {"ok": False, "error": str(exc)}
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


class Node:
    """One node process. ``run()`` for the CLI; ``start()``/``stop()`` for embedding and tests."""

    def __init__(self, cfg: Config, fsm_factory: FsmFactory | None = None) -> None:
        self.cfg = cfg
        self.data_dir = cfg.data_dir
        self._fsm_factory = fsm_factory or (
            _task_fsm(cfg) if cfg.node.state_machine == "tasks" else _default_fsm
        )
        self.scheduler: Any = None
        self.api: Any = None
        self.api_ctx: Any = None
        self.fsm: StateMachine | None = None
        self.peer: RaftPeerHandle | None = None
        self.admin: AdminServer | None = None
        self.rpc: RpcEndpoint | None = None
        self._rpc_handler: RpcHandler | None = None
        self._lock_fd: int | None = None
        self._stop_requested = threading.Event()
        self._stopping = False
        self._stopped = threading.Event()
        self._join_thread: threading.Thread | None = None
        self.started_at = 0.0
        self._http_batch = False

    # --- start ----------------------------------------------------------------------------------
    def _place_on_cpus(self) -> None:
        """Apply ``node.cpus`` (docs/deploy.md#cpu-pinning)."""
        spec = self.cfg.node.cpus
        if spec in ("", cpus.ALL):
            return
        if spec != cpus.AUTO:
            try:
                cpus.pin(cpus.parse(spec))
            except ValueError as exc:
                raise NodeError(f"node.cpus {spec}: {exc}") from None
            log.info("node runs on CPUs %s (node.cpus)", cpus.text(cpus.allowed()))
            return
        given = cpus.allowed()
        if len(given) < 2:
            return
        chosen = cpus.choose(cpu_place(self.cfg), given)
        try:
            cpus.pin(chosen)
        except ValueError as exc:  # a system that lists CPUs but will not pin: run free
            log.warning("node.cpus auto: could not pin to CPU %s (%s); running on %s", cpus.text(chosen), exc,
                        cpus.text(given))
            return
        log.info("node runs on CPU %s of the %s it was given (node.cpus: auto; all leaves it on every one)",
                 cpus.text(chosen), cpus.text(given))

    def start(self) -> None:
        cfg = self.cfg
        # The Raft actor releases the GIL on every lmdb/ZeroMQ call and must win it back from busy
        # threads (admin, HTTP) each time; with the default 5 ms switch interval a heavy cycle then
        # stalls for hundreds of ms and followers start elections (the GIL "convoy effect").
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        gc.set_threshold(*GC_THRESHOLDS)
        self._place_on_cpus()  # before the node's threads start: they inherit it (molens/cpus.py)
        now = cpus.policy()
        self._http_batch = cfg.node.os_scheduling == "http-batch" and now != "unknown"
        if cpus.process_policy(cfg.node.os_scheduling) != now:  # likewise inherited
            if now == "unknown" and cfg.node.os_scheduling != "batch":
                log.info("this system does not say its threads' policy: node.os_scheduling left alone")
            else:
                try:
                    cpus.set_policy(cpus.process_policy(cfg.node.os_scheduling))
                except ValueError as exc:
                    raise NodeError(f"node.os_scheduling {cfg.node.os_scheduling}: {exc}") from None
        log.info("node threads scheduled as %s (node.os_scheduling)", cfg.node.os_scheduling)
        if cfg.node.clock_offset_ms:
            log.warning("node clock shifted by %+d ms (node.clock_offset_ms: tests only)", cfg.node.clock_offset_ms)
            wallclock.set_offset_ms(cfg.node.clock_offset_ms)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError("node.data_dir", f"cannot create {self.data_dir}: {exc.strerror or exc}") from None
        self._lock_data_dir()
        try:
            self.fsm = self._fsm_factory(self.data_dir)
            try:
                curve = cfg.raft.curve
                rpc = RpcEndpoint(
                    cfg.node.id,
                    zmq_endpoint(cfg.rpc.bind_addr),
                    self._on_rpc,
                    {p.id: zmq_endpoint(p.rpc_addr) for p in cfg.initial_peers() if p.id != cfg.node.id},
                    # one setting for both node ports (docs/architecture.md#node-ports)
                    curve=CurveKeys.load(curve.secret_key_file, curve.public_keys_dir) if curve.enabled else None,
                )
                rpc.start()
                self.rpc = rpc
            except TransportError as exc:
                raise NodeError(f"rpc.bind_addr {cfg.rpc.bind_addr}: {_port_hint(exc)}") from exc
            try:
                transport = zmq_transport(cfg.node.id, cfg.raft)  # key files read before the log opens
                self.peer = RaftPeerHandle.start(
                    cfg.node.id,
                    cfg.raft,
                    self.data_dir,
                    self.fsm,
                    cfg.initial_peers(),
                    cfg.bootstrap_voters(),
                    log=lmdb_log(cfg.raft, self.data_dir, cfg.bootstrap_voters()),
                    transport=transport,
                    on_peer_change=self._on_peer_change,
                )
            except TransportError as exc:
                raise NodeError(f"raft.bind_addr {cfg.raft.bind_addr}: {_port_hint(exc)}") from exc
            self._start_scheduling()
            try:
                self.admin = AdminServer(cfg.admin.bind_addr, self._handle).start()
            except AdminError as exc:
                raise NodeError(f"admin.bind_addr {cfg.admin.bind_addr}: {_port_hint(exc)}") from exc
        except BaseException:
            self._close_all()
            raise
        self.started_at = time.time()
        st = self.peer.status()
        log.info(
            "node started id=%s pid=%d role=%s term=%d last=%d applied=%d admin=%s raft=%s",
            cfg.node.id,
            os.getpid(),
            st["role"],
            st["term"],
            st["last_index"],
            st["applied_index"],
            cfg.admin.bind_addr,
            cfg.raft.bind_addr,
        )
        if cfg.cluster.join_addrs and st["role"] == "joining":
            self._join_thread = threading.Thread(target=self._join, name="join", daemon=True)
            self._join_thread.start()

    def _lock_data_dir(self) -> None:
        """Hold ``node.lock`` (flock) while the node runs, and write ``node.pid``; ``molens-node`` probes
        the lock to tell a live node from a stale pid file."""
        path = self.data_dir / "node.lock"
        pid_path = self.data_dir / "node.pid"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError("node.data_dir", f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                pid = pid_path.read_text().strip() or "?"
            except OSError:
                pid = "?"
            raise NodeError(f"already running: data_dir {self.data_dir} is locked by pid {pid}") from None
        try:
            pid_path.write_text(f"{os.getpid()}\n")
        except OSError as exc:
            os.close(fd)
            raise ConfigError("node.data_dir", f"cannot write {pid_path}: {exc.strerror or exc}") from None
        self._lock_fd = fd

    # --- run (foreground) -----------------------------------------------------------------------
    def run(self, caught: Sequence[int] = ()) -> int:
        """Start, wait for SIGTERM/SIGINT or an admin ``stop``, stop gracefully. Exit code.

        The signal handlers go in before the start: a SIGTERM while starting (a container's PID 1
        ignores one it has no handler for) is a stop request, honoured once the start is done.
        ``caught``: stop signals the caller's own handlers caught before (the CLI's, while this
        module loaded), read after these are in place; any is a stop request too.
        Raises :class:`NodeError` (:class:`ConfigError` for a data_dir it cannot write) when the
        node cannot start."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, lambda *_: self.request_stop())
        if caught:
            self.request_stop()
        self.start()
        assert self.peer is not None
        while not self._stop_requested.wait(0.2):
            if self.peer.stopped.is_set():
                break
        failure = self.peer.failure
        self.stop()
        if failure is not None:
            log.error("node stopped after a failure: %s", failure)
            return 1
        return 0

    def request_stop(self) -> None:
        self._stop_requested.set()

    # --- stop -------------------------------------------------------------------------------------
    def stop(self) -> None:
        if self._stopping:
            self._stopped.wait(self.cfg.node.stop_timeout_s + 5)
            return
        self._stopping = True
        t0 = time.monotonic()
        deadline = t0 + self.cfg.node.stop_timeout_s
        self._stop_requested.set()
        self._stop_front()
        if self.peer is not None and not self.peer.stopped.is_set():
            try:
                self._hand_over_leadership(deadline)
            except Exception:
                log.exception("leadership hand-over failed; stopping anyway")
        self._close_all()
        log.info("node stopped id=%s in %.0f ms", self.cfg.node.id, (time.monotonic() - t0) * 1000)
        self._stopped.set()

    def _hand_over_leadership(self, deadline: float) -> None:
        assert self.peer is not None
        peer = self.peer
        election_s = 2 * self.cfg.raft.election_ticks * self.cfg.raft.tick_ms / 1000
        for _attempt in range(3):
            if time.monotonic() >= deadline:
                break
            try:
                moved = peer.transfer_leader(None, timeout=5)
            except rc.NotLeaderError:
                return
            except ProposalRefused as exc:  # single voter: nobody to hand over to
                log.info("no leadership hand-over: %s", exc)
                return
            t = time.monotonic()
            fut = peer.wait_until_not_leader()
            try:
                fut.result(timeout=max(0.1, min(election_s, deadline - t)))
            except FutureTimeout:
                log.warning("leadership transfer to %s timed out; retrying", moved["to"])
                continue
            log.info("leadership handed to %s in %.0f ms", moved["to"], (time.monotonic() - t) * 1000)
            return

    def _transfer_leader(self, to: str | None, wait: bool) -> dict[str, Any]:
        """Start a leadership transfer; with ``wait`` (the default) reply once this node has stepped
        down, or ``ok: false`` when the transfer aborted (the target did not catch up within an
        election timeout), so the caller never mistakes "asked" for "done"."""
        assert self.peer is not None
        peer = self.peer
        if to == self.cfg.node.id:  # Raft takes it as done at once: the wait below would report a timeout
            return {"ok": False, "error": f"{to} is this node: it leads already; name another voter, or none"}
        moved = peer.transfer_leader(to)
        if not wait:
            return {"ok": True, **moved}
        t = time.monotonic()
        election_s = 2 * self.cfg.raft.election_ticks * self.cfg.raft.tick_ms / 1000
        fut = peer.wait_until_not_leader()
        try:
            fut.result(timeout=election_s)
        except FutureTimeout:
            return {
                "ok": False,
                "error": f"leadership transfer to {moved['to']} did not complete within "
                f"{election_s * 1000:.0f} ms (is it caught up and reachable?)",
            }
        return {"ok": True, **moved, "ms": round((time.monotonic() - t) * 1000, 1)}

    # --- worker RPC -------------------------------------------------------------------------------
    def set_rpc_handler(self, handler: RpcHandler | None) -> None:
        """Where worker-RPC messages go (``handler(from_id, payload)`` on the RPC I/O thread; keep it
        quick). Until a handler is set (the scheduler's), RPC messages are dropped."""
        self._rpc_handler = handler

    def _on_rpc(self, frm: str, payload: bytes) -> None:
        handler = self._rpc_handler
        if handler is None:
            log.debug("rpc message from %s dropped: no handler", frm)
            return
        handler(frm, payload)

    def _on_peer_change(self, p: PeerConfig) -> None:
        rpc = self.rpc
        if rpc is not None and p.id != self.cfg.node.id and p.rpc_addr:
            if rpc.curve is not None and p.id not in rpc.listed_ids():  # a node added: its key is new
                rpc.reload_curve_keys()
            rpc.add_peer(p.id, zmq_endpoint(p.rpc_addr))

    def _reload_keys(self) -> dict[str, Any]:
        """Admin ``reload_keys``: both node ports re-read ``raft.curve.public_keys_dir``."""
        if not self.cfg.raft.curve.enabled:
            return {"ok": False, "error": "raft.curve.enabled is false: there are no keys to reload"}
        assert self.peer is not None
        raft = self.peer.reload_keys()
        rpc = self.rpc.reload_curve_keys() if self.rpc is not None else []
        return {"ok": True, "raft": raft, "rpc": rpc}

    def _start_scheduling(self) -> None:
        """Scheduler + HTTP API on a task-FSM node (after RaftPeer: they subscribe to it)."""
        from molens.fsm.store import TaskStore

        if not isinstance(self.fsm, TaskStore):
            return
        from molens.node_context import NodeContext
        from molens.scheduler import Scheduler
        from molens.web.api_context import settings_from_config
        from molens.web.app import make_app
        from molens.web.server import ApiServer, ServerOptions

        assert self.peer is not None and self.rpc is not None and self.fsm.history is not None
        self.scheduler = Scheduler(self.cfg, self.fsm, self.peer, self.rpc, on_fatal=lambda _e: self.request_stop())
        self.scheduler.start()
        self.set_rpc_handler(self.scheduler.on_rpc)
        self.api_ctx = NodeContext(
            self.cfg,
            self.peer,
            self.fsm,
            self.fsm.history,
            self.scheduler.to_json,
            scheduler=self.scheduler,
            transfer_leader=lambda to: self._transfer_leader(to, wait=True),
            settings=dataclasses.replace(settings_from_config(self.cfg), spans=self.scheduler.spans),
        ).start()
        app = make_app(self.api_ctx)  # the console included (molens.web.ui)
        with contextlib.ExitStack() as scope:
            if self._http_batch:  # the API's threads inherit batch from this one (molens/cpus.py)
                try:
                    scope.enter_context(cpus.threads_started_under("batch"))
                except ValueError as exc:
                    raise NodeError(f"node.os_scheduling {self.cfg.node.os_scheduling}: {exc}") from None
            try:
                self.api = ApiServer(app, ServerOptions(self.cfg.http, threads=32)).start()
            except OSError as exc:
                raise NodeError(f"http {self.cfg.http.host}:{self.cfg.http.port}: {_port_hint(exc)}") from exc
        log.info("http api url=%s ui=%s/ui/", self.api.url, self.api.url)

    def _stop_front(self) -> None:
        """Graceful stop, first steps: HTTP API stops accepting, the leader's scheduler stops."""
        if self.api_ctx is not None:
            self.api_ctx.stopping = True
        if self.api is not None:
            self.api.stop()
            self.api = None
        if self.scheduler is not None:
            self.scheduler.stop_leader()

    def _close_all(self) -> None:
        self._stop_front()
        if self.scheduler is not None:  # in-flight fires finish; results go out before RPC closes
            self.scheduler.stop(timeout=10)
            self.scheduler = None
        self.set_rpc_handler(None)
        if self.rpc is not None:  # stop accepting worker traffic first; the last results leave
            leader = self.peer.standing.leader if self.peer is not None else None
            self.rpc.close(flush_to=(leader,) if leader and leader != self.cfg.node.id else (),
                           flush_ms=RESULTS_FLUSH_MS)
            self.rpc = None
        if self.peer is not None:
            self.peer.stop(timeout=10)
        if self.fsm is not None:
            self.fsm.close()
            self.fsm = None
        if self.admin is not None:
            self.admin.close()
            self.admin = None
        if self._lock_fd is not None:
            (self.data_dir / "node.pid").unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- joining a cluster ----------------------------------------------------------------------
    def _join(self) -> None:
        """Ask ``cluster.join_addrs`` (any member; the leader accepts) to add this node as learner."""
        me = self.cfg.self_peer()
        req = {
            "cmd": "add_node",
            "id": me.id,
            "raft_addr": me.raft_addr,
            "rpc_addr": me.rpc_addr,
            "http_addr": me.http_addr,
            "admin_addr": me.admin_addr or self.cfg.admin.bind_addr,
            **({"peer_http_addr": me.peer_http_addr} if me.peer_http_addr else {}),  # an older leader takes no other
        }
        addrs = list(self.cfg.cluster.join_addrs)
        attempt = 0
        while not self._stop_requested.is_set():
            addr = addrs[attempt % len(addrs)]
            attempt += 1
            try:
                with AdminClient(addr, timeout_s=3) as client:
                    reply = client.request(req)
            except AdminError as exc:
                log.info("join via %s: %s", addr, exc)
                reply = {"ok": False}
            if reply.get("ok"):
                peers = [PeerConfig(**d) for d in reply.get("peers", {}).values()]
                assert self.peer is not None
                self.peer.learn_peers(peers)
                log.info(
                    "joined via %s as learner (index %s); peers=%s",
                    addr,
                    reply.get("index"),
                    sorted(reply.get("peers", {})),
                )
                return
            leader_admin = reply.get("leader_admin_addr")
            if leader_admin and leader_admin not in addrs:
                addrs.insert(0, leader_admin)
                attempt = 0
            elif leader_admin:
                attempt = addrs.index(leader_admin)
            self._stop_requested.wait(0.2 if leader_admin else 0.5)

    # --- admin ----------------------------------------------------------------------------------
    def _handle(self, req: dict[str, Any]) -> dict[str, Any] | Future[dict[str, Any]]:
        cmd = req["cmd"]
        peer = self.peer
        if peer is None or peer.stopped.is_set():
            return {"ok": False, "error": "node is stopping"}
        try:
            if cmd == "status":
                st = peer.status()
                st.update(pid=os.getpid(), version=__version__, stopping=self._stopping)
                return {"ok": True, **st}
            if cmd == "stats":
                return {"ok": True, **jsonable(peer.stats()), "rpc": self._rpc_stats()}
            if cmd == "reload_keys":
                return self._reload_keys()
            if cmd == "actors":  # the live pykka actors of this process, by class (docs/architecture.md#actors)
                return {"ok": True, "actors": live_actors()}
            if cmd == "stop":
                threading.Thread(target=self.request_stop, name="admin-stop", daemon=True).start()
                return {"ok": True, "stopping": True}
            if cmd == "transfer_leader":
                return self._transfer_leader(req.get("to"), bool(req.get("wait", True)))
            if cmd == "snapshot":  # answered when recorded; the admin socket serves others meanwhile
                return _reply_when_done(peer.snapshot_now(), "snapshot")
            if cmd == "digest":
                # on a thread of its own, in one read transaction: never on the Raft actor, where
                # hashing a large store would silence heartbeats
                digest_state = getattr(self.fsm, "digest_state", None)
                if digest_state is None:
                    return {"ok": False, "error": "this state machine has no digest"}
                fut: Future[dict[str, Any]] = Future()

                def run() -> None:
                    try:
                        applied, digest = digest_state()
                        fut.set_result({"applied_index": applied, "digest": digest})
                    except Exception as exc:
                        fut.set_exception(exc)

                threading.Thread(target=run, name="admin-digest", daemon=True).start()
                return _reply_when_done(fut, "digest")
            if cmd == "add_node":
                nid = str(req.get("id", ""))
                return self._membership_change(lambda: self._add_node(req), "cluster.add_node", nid,
                                               {"member": {"old": None, "new": True}})
            if cmd == "remove_node":
                nid = str(req.get("id", ""))
                if nid == self.cfg.node.id and peer.status()["role"] == "leader":
                    return self._remove_self_as_leader()  # the new leader removes it, and records it
                return self._membership_change(lambda: {"ok": True, **peer.remove_node(nid)}, "cluster.remove_node",
                                               nid, {"member": {"old": True, "new": None}})
            if cmd == "propose":
                return self._propose(req)
            if cmd == "fault":
                return self._fault(req)
        except (RaftPeerError, rc.RaftError) as exc:
            reply = error_reply(exc)
            if reply.get("error") == "not_leader":
                reply.update(self._leader_addrs(reply.get("leader_id")))
            return reply
        except pykka.Timeout:
            return {"ok": False, "error": f"{cmd}: raft peer did not answer in time"}
        return {"ok": False, "error": f"unknown cmd {cmd!r}"}

    def _fault(self, req: dict[str, Any]) -> dict[str, Any]:
        """Shift the wall clock (``clock_offset_ms``) and slow every sync (``sync_delay_ms``) of this
        process, each only when given; refused unless ``node.fault_injection`` (tests only)."""
        if not self.cfg.node.fault_injection:
            return {"ok": False, "error": "fault injection is off (node.fault_injection)"}
        try:
            clock = None if req.get("clock_offset_ms") is None else int(req["clock_offset_ms"])
            delay = None if req.get("sync_delay_ms") is None else int(req["sync_delay_ms"])
        except (TypeError, ValueError) as exc:
            return {"ok": False, "error": f"fault: {exc}"}
        if clock is not None:
            log.warning("fault injected: clock_offset_ms=%+d", clock)
            wallclock.set_offset_ms(clock)
        if delay is not None:
            log.warning("fault injected: sync_delay_ms=%d", delay)
            disk.set_sync_delay_ms(delay)
        return {"ok": True, "clock_offset_ms": wallclock.offset_ms(), "sync_delay_ms": disk.sync_delay_ms()}

    def _membership_change(self, change: Callable[[], dict[str, Any]], action: str, node_id: str,
                           changes: dict[str, dict[str, object]]) -> Future[dict[str, Any]]:
        """Makes a membership change on a thread of its own (the admin socket serves others meanwhile), asked
        again while the leader refuses it only for now (``ConfChangePending``: just elected, or another change
        still committing), for up to ``MEMBERSHIP_RETRY_S``; audited once taken."""
        out: Future[dict[str, Any]] = Future()

        def run() -> None:
            deadline = time.monotonic() + MEMBERSHIP_RETRY_S
            reply: dict[str, Any] = {}
            while True:
                try:
                    reply = change()
                except rc.ConfChangePending as exc:
                    if time.monotonic() < deadline:
                        time.sleep(0.02)
                        continue
                    reply = error_reply(exc)
                except (RaftPeerError, rc.RaftError) as exc:
                    reply = error_reply(exc)
                    if reply.get("error") == "not_leader":
                        reply.update(self._leader_addrs(reply.get("leader_id")))
                except pykka.Timeout:
                    reply = {"ok": False, "error": f"{action}: raft peer did not answer in time"}
                except Exception as exc:
                    reply = error_reply(exc)
                break
            if reply.get("ok") and isinstance(reply.get("index"), int):
                reply = self._committed(reply, action)
            if reply.get("ok"):
                self._audit_membership(action, node_id, changes)
            out.set_result(reply)

        def guarded() -> None:  # whatever happens, the admin socket's reply slot is answered
            try:
                run()
            except Exception as exc:
                log.exception("membership change %s %s failed", action, node_id)
                if not out.done():
                    out.set_result(error_reply(exc))

        threading.Thread(target=guarded, name="admin-membership", daemon=True).start()
        return out

    def _committed(self, reply: dict[str, Any], action: str) -> dict[str, Any]:
        """``reply`` once its membership entry has committed (within ``MEMBERSHIP_COMMIT_S``, while
        this node leads); else an ``ok: false`` reply whose ``outcome`` is ``unknown``."""
        peer = self.peer
        if peer is None:
            return reply
        index = int(reply["index"])
        deadline = time.monotonic() + MEMBERSHIP_COMMIT_S
        while True:
            try:
                st = peer.status()
            except Exception:
                break
            if int(st.get("commit_index") or 0) >= index:
                return reply
            if st.get("role") != "leader" or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        return {"ok": False, "outcome": "unknown", "index": index,
                "error": f"{action}: the change is in the log at index {index} but did not commit within "
                         f"{MEMBERSHIP_COMMIT_S:g} s (is a quorum of the new membership up? status tells once it does)"}

    def _audit_membership(self, action: str, node_id: str, changes: dict[str, dict[str, object]]) -> None:
        """Put a membership change made on the admin socket on the audit trail (a task node's; the
        change is no state machine command, so the note follows it: docs/architecture.md#audit-trail).
        A note that cannot be written (leadership lost meanwhile) is logged; the change stands."""
        if self.api_ctx is None:
            return
        from molens.fsm.commands import AuditNote, AuditStamp

        note = AuditNote(self.api_ctx.now_ms(), AuditStamp("admin", "admin socket", ""), action, node_id, changes)
        try:
            self.api_ctx.propose([note], self.api_ctx.settings.propose_timeout_s)
        except MolensError as exc:
            log.warning("membership change not on the audit trail action=%s node=%s: %s", action, node_id, exc)

    def _rpc_stats(self) -> dict[str, Any]:
        """The worker RPC endpoint's counters and the frames the scheduler refused, by tag."""
        out: dict[str, Any] = {"transport": self.rpc.stats() if self.rpc is not None else {}}
        if self.scheduler is not None:
            out["refused"] = dict(self.scheduler.rpc_refused)
        return out

    def _remove_self_as_leader(self) -> Future[dict[str, Any]]:
        """A leader removing itself hands leadership over first, then asks the new leader to
        remove it: the cluster keeps a leader throughout instead of waiting for an election."""
        out: Future[dict[str, Any]] = Future()

        def run() -> None:
            assert self.peer is not None
            me = self.cfg.node.id
            try:
                self._hand_over_leadership(time.monotonic() + self.cfg.node.stop_timeout_s)
                leader = self.peer.status()["leader_id"]
                deadline = time.monotonic() + self.cfg.node.stop_timeout_s
                while (leader is None or leader == me) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    leader = self.peer.status()["leader_id"]
                if leader == me:  # no live voter took over: remove ourselves (we step down on commit)
                    out.set_result({"ok": True, **self.peer.remove_node(me)})
                    return
                addr = self._leader_addrs(leader).get("leader_admin_addr")
                if not addr:
                    out.set_result({"ok": False, "error": f"no admin address for the new leader {leader}"})
                    return
                with AdminClient(addr, timeout_s=10) as client:
                    reply = client.request({"cmd": "remove_node", "id": me})
                out.set_result({**reply, "via": leader})
            except Exception as exc:
                out.set_result(error_reply(exc))

        threading.Thread(target=run, name="remove-self", daemon=True).start()
        return out

    def _leader_addrs(self, leader_id: str | None) -> dict[str, Any]:
        if not leader_id or self.peer is None:
            return {}
        book = self.peer.known_peers()
        lp = book.get(leader_id)
        return {"leader_admin_addr": lp.admin_addr} if lp is not None and lp.admin_addr else {}

    def _add_node(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.peer is not None
        fields = {
            k: v if isinstance(v := req.get(k), str) else "" if v is None else repr(v)
            for k in ("id", *PEER_ADDRESSES)
        }
        problem = peer_problem(fields)
        if problem is not None:
            return {"ok": False, "error": "bad_request", "outcome": "not_applied", "detail": f"add_node {problem}"}
        p = PeerConfig(**fields)
        return {"ok": True, **self.peer.add_node(p)}

    def _propose(self, req: dict[str, Any]) -> dict[str, Any] | Future[dict[str, Any]]:
        """Raw entries for tests and benchmarks (module docstring); refused on a task node."""
        from molens.fsm.store import TaskStore

        assert self.peer is not None
        if isinstance(self.fsm, TaskStore):
            return {"ok": False, "error": "propose is refused on a node running the scheduler (node.state_machine: "
                    "tasks): raw entries would bypass the API's authorization and audit trail; it is for key-value "
                    "test and benchmark nodes", "outcome": "not_applied"}
        if self._stopping:
            return {"ok": False, "error": "refused", "outcome": "not_applied", "detail": "node is stopping"}
        try:
            if "datas" in req:
                if not isinstance(req["datas"], list):
                    raise TypeError("'datas' must be a list")
                datas = [base64.b64decode(d, validate=True) for d in req["datas"]]
            else:
                datas = [base64.b64decode(req["data"], validate=True)]
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": f"propose: need base64 'data' or 'datas' ({exc})"}
        if not datas:  # nothing to wait for: no entry would ever complete a reply future
            return {"ok": True, "results": []}
        out: Future[dict[str, Any]] = Future()

        def done(results: list[Any], error: BaseException | None) -> None:
            if error is not None:
                out.set_result(error_reply(error))
            else:
                out.set_result({"ok": True, "results": [jsonable(r) for r in results]})

        self.peer.propose_batch(datas, done)
        return out


def _reply_when_done(inner: Future[dict[str, Any]], what: str) -> Future[dict[str, Any]]:
    """An admin reply future: ``{"ok": true, **result}``, or ``ok: false`` naming the failure."""
    out: Future[dict[str, Any]] = Future()

    def done(f: Future[dict[str, Any]]) -> None:
        try:
            out.set_result({"ok": True, **f.result()})
        except Exception as exc:
            out.set_result({"ok": False, "error": f"{what} failed: {type(exc).__name__}: {exc}"})

    inner.add_done_callback(done)
    return out


def _port_hint(exc: BaseException) -> str:
    """"port in use" in plain words; any other reason (e.g. unreadable CURVE keys) as it is."""
    msg = str(exc)
    if "in use" in msg.lower():
        return "port in use (another process is listening there)"
    return msg
