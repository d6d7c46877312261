"""ZeroMQ peer links: one ROUTER to receive, one DEALER per peer to send, one I/O thread owning them.

The transport moves opaque payloads (the core's codec makes the bytes); each frame on the wire is
``msgpack([from_id, payload])``. Every node binds a ROUTER and keeps a DEALER (routing id = its own
node id) connected to every peer's ROUTER, so traffic in each direction rides the sender's DEALER.
:class:`RaftTransport` runs on ``raft.bind_addr``; :class:`RpcEndpoint` is the same machinery on
``rpc.bind_addr`` for worker RPC, so a large fire batch never queues behind, or in front of, a
heartbeat.

Threading contract (what the RaftPeer relies on):

* :meth:`Endpoint.send`, :meth:`Endpoint.add_peer`, :meth:`Endpoint.remove_peer` and
  :meth:`Endpoint.close` are thread-safe and never block on the network. While the I/O thread
  waits for work and nothing is queued for it, ``send`` hands the frame to the peer's DEALER itself,
  on the caller's thread (a non-blocking ZeroMQ send, under the lock that serializes every use of
  the DEALERs): that saves a pipe wake-up and a thread hand-off per message. Otherwise, and the
  other calls always, it appends to a bounded queue and wakes the I/O thread through a pipe, so
  frames leave in the order they were sent. ``send`` returns ``False`` (and counts
  ``dropped_queue``) when that queue is full, or when the endpoint is closed; a frame the DEALER has
  no room for is dropped and counted (``dropped_full``, below) either way.
* ``on_message(from_id, payload)`` runs ON THE I/O THREAD: it must be quick and must not block --
  hand the message on (``actor_ref.tell(...)``) and return. While it runs, nothing is received and
  sends queue (a direct send begun as the I/O thread woke may still go out). An exception in it is
  logged and the loop goes on.
* Bounded, lossy, like the network Raft assumes: each DEALER has ``SNDHWM`` messages of buffer and
  ``IMMEDIATE`` set (no queueing towards a peer whose connection is down), sends are non-blocking, and
  a message that does not fit is dropped and counted (``dropped_full``); Raft retries. Reconnects
  are ZMQ's (``RECONNECT_IVL`` .. ``RECONNECT_IVL_MAX``); ZMTP heartbeats detect dead connections;
  the ROUTER has ``ROUTER_HANDOVER`` so a restarted peer reusing its id takes over at once.
* Optional CURVE (:class:`CurveKeys`): each node has a zcert keypair; ``public_keys_dir`` holds
  ``<node_id>.key`` for every node. It is both the list of server keys to connect to and the allow
  list of clients (a :class:`NodeAuthenticator`, ZAP, on this endpoint's own context): a peer whose
  key is not there never completes the handshake, and nothing it sends is delivered. Refused
  handshakes are counted (``handshake_refused``) and logged, at most one line per
  ``REFUSED_LOG_S`` per endpoint. :meth:`Endpoint.reload_curve_keys` re-reads the directory at run
  time (allow list, key -> node map, and DEALERs to peers whose key appeared or changed); the I/O
  thread also calls it when the directory's key files change (checked every ``KEYS_WATCH_S``: each
  ``*.key`` file's name, size and modification time, so a file added, removed, renamed or
  rewritten is noticed -- also one copied in while a check ran, which read it empty or half
  written: the write that completes it changes its size or time, and it is read again).
* Senders are bound to keys (``docs/architecture.md#node-ports``): the ZAP handler names a
  connection's user id after the key file it matched (``n2.key`` -> ``n2``), and a frame is
  delivered only when that user id, the connection's routing id and the ``from_id`` inside the
  frame are one node id still listed; anything else is dropped and counted (``forged_sender``).
  Without CURVE only the routing id and ``from_id`` are compared (nothing binds them to a host).
"""

from __future__ import annotations

import collections
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from molens.raft.errors import TransportError

log = logging.getLogger(__name__)

KEYS_WATCH_S = 2.0
"""With CURVE, how often the I/O thread looks at the key files in ``public_keys_dir``; a key file
added, removed or changed there is re-read (as :meth:`Endpoint.reload_curve_keys`) within about this long."""

REFUSED_LOG_S = 10.0
"""At most one log line per this many seconds per endpoint and kind of refusal (a rogue peer
retrying must not flood the log); the line says how many were refused since the last one."""

OnMessage = Callable[[str, bytes], None]


def bin_header(n: int) -> bytes:
    """The msgpack ``bin`` header of an ``n``-byte payload, so a frame is one join (one copy of the
    payload) rather than ``packb`` copying it into a fresh buffer and the concatenation again."""
    if n < 0x100:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 0x10000:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """Bounds and timers of one endpoint (all named, all with defaults)."""

    sndhwm: int = 1000
    """Messages buffered per peer DEALER before new ones are dropped."""
    rcvhwm: int = 10000
    max_pending: int = 10000
    """Messages waiting for the I/O thread (all peers) before ``send`` drops."""
    reconnect_ivl_ms: int = 100
    reconnect_ivl_max_ms: int = 1000
    heartbeat_ivl_ms: int = 1000
    heartbeat_timeout_ms: int = 3000
    handshake_ivl_ms: int = 5000
    """A connection whose (CURVE) handshake has not completed by then is dropped, and the DEALER
    dials again (ZMQ's default is 30 s). Set while chasing a CI failure whose real cause was a
    refusal that came before the DEALER's monitor (see :meth:`Endpoint._make_dealer`); kept, so a
    handshake stalled for any other reason heals in seconds."""
    max_message_bytes: int = 64 * 1024 * 1024
    """Larger inbound messages make ZMQ drop the connection."""
    recv_batch: int = 512
    """Inbound messages handled per loop turn before the send queue is serviced again."""


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """This node's CURVE keypair and the directory of every node's public key (``<id>.key``)."""

    public_key: bytes
    secret_key: bytes = field(repr=False)  # never in a repr, so never in a log line
    public_keys_dir: Path

    @classmethod
    def load(cls, secret_key_file: str | os.PathLike[str], public_keys_dir: str | os.PathLike[str]) -> CurveKeys:
        """Load a zcert secret certificate (``zmq.auth.create_certificates`` format) and the key dir."""
        try:
            public, secret = zmq.auth.load_certificate(secret_key_file)
        except (OSError, ValueError) as exc:
            raise TransportError(f"{secret_key_file}: cannot load CURVE certificate: {exc}") from exc
        if secret is None:
            raise TransportError(f"{secret_key_file}: no secret key in certificate")
        d = Path(public_keys_dir)
        if not d.is_dir():
            raise TransportError(f"{d}: public keys directory does not exist")
        return cls(public, secret, d)

    def node_ids_by_key(self) -> dict[bytes, str]:
        """z85 public key -> node id (the ``<id>.key`` file it is in), read from the directory now.
        A key listed under two names maps to neither (it could claim both)."""
        out: dict[bytes, str] = {}
        twice: set[bytes] = set()
        for path in sorted(self.public_keys_dir.glob("*.key")):
            try:
                public, _ = zmq.auth.load_certificate(path)
            except (OSError, ValueError) as exc:
                log.warning("curve: unreadable public key %s: %s", path, exc)
                continue
            if public in out:
                twice.add(public)
            out[public] = path.stem
        for public in twice:
            log.warning("curve: one public key listed under several node ids (%s...): refused", public[:8].decode())
            del out[public]
        return out

    def server_key_for(self, peer_id: str) -> bytes:
        path = self.public_keys_dir / f"{peer_id}.key"
        try:
            public, _ = zmq.auth.load_certificate(path)
        except (OSError, ValueError) as exc:
            raise TransportError(f"{path}: no public key for peer {peer_id}: {exc}") from exc
        return public


class RefusalLog:
    """Counts refusals of one kind and logs at most one line per ``REFUSED_LOG_S`` (any thread)."""

    def __init__(self, what: str, logger: logging.Logger = log) -> None:
        self.what = what
        self._log = logger
        self._lock = threading.Lock()
        self._unlogged = 0
        self._next_log = 0.0

    def refused(self, detail: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._unlogged += 1
            if now < self._next_log:
                return
            n, self._unlogged = self._unlogged, 0
            self._next_log = now + REFUSED_LOG_S
        self._log.warning("%s: %s (%d refused since the last such line)", self.what, detail, n)


class NodeAuthenticator(ThreadAuthenticator):
    """ZAP for one endpoint: CURVE keys from ``public_keys_dir``; a connection's user id is the node
    id its key is listed under, so every frame it delivers carries that id (``User-Id``)."""

    def __init__(self, context: zmq.Context[Any], curve: CurveKeys, refusals: RefusalLog) -> None:
        super().__init__(context, log=logging.getLogger(f"{__name__}.auth"))
        self._curve = curve
        self._refusals = refusals
        self.ids_by_key: dict[bytes, str] = {}

    def reload(self) -> None:
        """Re-read the allow list and the key -> node id map (both from the directory)."""
        self.ids_by_key = self._curve.node_ids_by_key()
        self.configure_curve(domain="*", location=str(self._curve.public_keys_dir))

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.ids_by_key.get(z85.encode(client_public_key), "")

    async def _authenticate_curve(self, domain: str, client_key: bytes) -> tuple[bool, bytes]:
        allowed, reason = await super()._authenticate_curve(domain, client_key)
        if allowed and z85.encode(client_key) not in self.ids_by_key:
            allowed, reason = False, b"Key not bound to a node id"
        if not allowed:
            self._refusals.refused(
                f"CURVE key refused: {reason.decode(errors='replace')} "
                f"(key {z85.encode(client_key)[:8].decode()}...)"
            )
        return allowed, reason


_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)

_CMD_SEND = 0
_CMD_ADD = 1
_CMD_REMOVE = 2
_CMD_RELOAD = 3


class Endpoint:
    """A ROUTER bound on ``bind_addr`` plus a DEALER per peer, all owned by one I/O thread.

    ``bind_addr`` may use port ``*`` (``tcp://127.0.0.1:*``); :attr:`bound_addr` is the real one.
    Sockets are created and bound in :meth:`start` (bind errors raise there), then handed to the
    I/O thread, which alone touches them afterwards -- but for the DEALERs' sends: ``_sock_lock``
    is held by the I/O thread whenever it uses, opens or closes a DEALER, and by :meth:`send`'s
    direct path (ZeroMQ sockets may change threads across such a lock's memory barrier).
    """

    kind = "endpoint"

    def __init__(
        self,
        node_id: str,
        bind_addr: str,
        on_message: OnMessage,
        peers: Mapping[str, str] | None = None,
        *,
        config: TransportConfig | None = None,
        curve: CurveKeys | None = None,
    ) -> None:
        self.node_id = node_id
        self.bind_addr = bind_addr
        self.bound_addr = ""
        self.config = config or TransportConfig()
        self.curve = curve
        self._on_message = on_message
        self._peers: dict[str, str] = dict(peers or {})
        self._pending: collections.deque[tuple[int, str, Any]] = collections.deque()
        self._flush: tuple[frozenset[str], int] = (frozenset(), 0)
        """Set by :meth:`close`: the peers whose queued messages get time to leave, and how long (ms)."""
        self._signaled = False
        self._stop = False
        self._started = False
        self._closed = False
        self._lock = threading.Lock()
        self._sock_lock = threading.Lock()
        self._io_waiting = False
        """The I/O thread is in its poll (not receiving, nor running ``on_message``)."""
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._auth: NodeAuthenticator | None = None
        self._router: zmq.Socket[bytes] | None = None
        self._router_monitor: zmq.Socket[bytes] | None = None
        self._listed: frozenset[str] = frozenset()
        """Node ids whose key is in ``public_keys_dir`` (CURVE): the only senders delivered."""
        self._refused_log = RefusalLog(f"{self.kind} {node_id}: handshake refused")
        self._forged_log = RefusalLog(f"{self.kind} {node_id}: frame dropped")
        self._dealer_key: dict[str, bytes | None] = {}
        self._keys_state: tuple[tuple[str, int, int], ...] | None = None
        self._keys_check_at = 0.0
        self._dealers: dict[str, zmq.Socket[bytes]] = {}
        self._dealer_addr: dict[str, str] = {}
        # CURVE only: a DEALER whose handshake was refused is never retried by libzmq, so a monitor
        # socket per DEALER reports the failure and the I/O thread re-creates it after a back-off
        self._monitors: dict[str, zmq.Socket[bytes]] = {}
        self._monitor_peer: dict[zmq.Socket[bytes], str] = {}
        self._redial: dict[str, float] = {}
        self._poller = zmq.Poller()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        # every key exists up front: stats() copies the dict while the I/O thread updates it
        self._counters: dict[str, int] = dict.fromkeys(
            ("sent", "received", "dropped_queue", "dropped_full", "dropped_unknown_peer", "dropped_closed",
             "malformed", "callback_errors", "handshake_failed", "handshake_refused", "forged_sender"), 0)
        self._prefix_from = msgpack.packb(node_id)

    # --- public API (any thread) --------------------------------------------------------------
    def start(self) -> Endpoint:
        if self._started:
            raise TransportError("already started")
        self._started = True
        self._ctx = zmq.Context(io_threads=1)
        try:
            if self.curve is not None:
                self._auth = NodeAuthenticator(self._ctx, self.curve, self._refused_log)
                self._auth.start()
                self._keys_state = self._dir_state()
                self._auth.reload()
                self._listed = frozenset(self._auth.ids_by_key.values())
                self._keys_check_at = time.monotonic() + KEYS_WATCH_S
            self._router = self._make_router()
            if self.curve is not None:
                self._router_monitor = self._router.get_monitor_socket(_HANDSHAKE_FAILED)
            for pid, addr in self._peers.items():
                self._open_dealer(pid, addr)
        except (zmq.ZMQError, TransportError) as exc:
            self._teardown()
            raise TransportError(f"{self.kind} {self.node_id}: cannot start on {self.bind_addr}: {exc}") from exc
        self._thread = threading.Thread(target=self._run, name=f"{self.kind}-io-{self.node_id}", daemon=True)
        self._thread.start()
        log.info("%s started node=%s bound=%s peers=%s", self.kind, self.node_id, self.bound_addr,
                 sorted(self._peers))
        return self

    def send(self, to: str, payload: bytes) -> bool:
        """Send ``payload`` to peer ``to`` (directly, or queued behind what the I/O thread has
        still to do); ``False`` if dropped at once."""
        if self._pending or not self._io_waiting or self._stop:
            return self._enqueue(_CMD_SEND, to, payload)
        with self._sock_lock:
            # under the lock the I/O thread is not between taking a frame from the queue and
            # sending it: an empty queue means nothing sent earlier is still on its way
            if self._pending or self._stop:
                return self._enqueue(_CMD_SEND, to, payload)
            self._send_frame(to, payload)
        return True

    def _send_frame(self, to: str, payload: bytes) -> None:
        """(``_sock_lock`` held) One frame to ``to``'s DEALER, never blocking."""
        counters = self._counters
        s = self._dealers.get(to)
        if s is None:
            counters["dropped_unknown_peer"] += 1
            return
        frame = b"".join((b"\x92", self._prefix_from, bin_header(len(payload)), payload))
        try:
            s.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            counters["dropped_full"] += 1
            return
        counters["sent"] += 1

    def add_peer(self, peer_id: str, addr: str) -> None:
        """Connect a DEALER to ``addr`` for ``peer_id``; a no-op if it already has that address, else replaced."""
        with self._lock:
            self._peers[peer_id] = addr
        self._enqueue(_CMD_ADD, peer_id, addr, force=True)

    def remove_peer(self, peer_id: str) -> None:
        with self._lock:
            self._peers.pop(peer_id, None)
        self._enqueue(_CMD_REMOVE, peer_id, None, force=True)

    def reload_curve_keys(self) -> list[str]:
        """Re-read ``public_keys_dir`` (after a node's key was added or removed): the allow list, the
        key -> node id map, and DEALERs to peers whose key appeared or changed. Returns the node ids
        listed now ([] without CURVE). Connections already made stay up; frames from a node whose
        key was removed are dropped from now on."""
        if self._auth is None or self.curve is None:
            return []
        self._keys_state = self._dir_state()  # before reading: a change while reading is seen again
        self._auth.reload()
        self._listed = frozenset(self._auth.ids_by_key.values())
        self._enqueue(_CMD_RELOAD, "", None, force=True)
        log.info("%s curve keys reloaded node=%s listed=%s", self.kind, self.node_id, sorted(self._listed))
        return sorted(self._listed)

    def _dir_state(self) -> tuple[tuple[str, int, int], ...] | None:
        """Name, size and modification time of each key file (None: the directory is unreadable).
        Not the directory's own time alone: creating a file changes it, writing the file does not,
        so a key read empty while ``cp`` was still writing it would never be read again."""
        assert self.curve is not None
        out = []
        try:
            with os.scandir(self.curve.public_keys_dir) as it:
                for e in it:
                    if e.name.endswith(".key"):
                        try:
                            st = e.stat()
                        except OSError:  # gone since the listing: the next check sees it gone
                            continue
                        out.append((e.name, st.st_size, st.st_mtime_ns))
        except OSError:
            return None
        out.sort()
        return tuple(out)

    def _watch_keys(self) -> None:
        """(I/O thread) Re-read the keys when a key file in ``public_keys_dir`` changed since the last read."""
        self._keys_check_at = time.monotonic() + KEYS_WATCH_S
        if self._dir_state() != self._keys_state:
            log.info("%s public_keys_dir changed node=%s: reloading", self.kind, self.node_id)
            self.reload_curve_keys()

    def listed_ids(self) -> frozenset[str]:
        """Node ids with a key in ``public_keys_dir`` at the last (re)load (empty without CURVE)."""
        return self._listed

    def peers(self) -> dict[str, str]:
        with self._lock:
            return dict(self._peers)

    def stats(self) -> dict[str, int]:
        """Counters: sent, received, dropped_queue, dropped_full, dropped_unknown_peer, malformed, ..."""
        out = dict(self._counters)
        out["pending"] = len(self._pending)
        return out

    def close(self, timeout: float = 5.0, flush_to: Collection[str] = (), flush_ms: int = 0) -> None:
        """Stop the I/O thread and close every socket. Messages still queued are dropped (LINGER=0),
        but for those to the peers in ``flush_to``, which get up to ``flush_ms`` to leave (a worker's
        last results to its leader: dropped, the leader settles their fires as lost)."""
        if self._thread is not None and threading.current_thread() is self._thread:
            raise TransportError("close() called from on_message: hand it to another thread")
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._flush = (frozenset(flush_to), flush_ms) if flush_ms > 0 else (frozenset(), 0)
            self._stop = True
        if self._thread is not None:
            self._wake()
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("%s io thread did not stop node=%s", self.kind, self.node_id)
                return
        self._teardown()
        os.close(self._wake_r)
        os.close(self._wake_w)
        log.info("%s closed node=%s", self.kind, self.node_id)

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------------
    def _enqueue(self, cmd: int, peer: str, arg: Any, force: bool = False) -> bool:
        if self._stop:
            self._counters["dropped_closed"] += 1
            return False
        if not force and len(self._pending) >= self.config.max_pending:
            with self._lock:
                self._counters["dropped_queue"] += 1
            return False
        self._pending.append((cmd, peer, arg))
        # append THEN test the flag; the I/O thread clears it THEN drains: no lost wake-up
        if not self._signaled:
            self._signaled = True
            self._wake()
        return True

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the I/O thread is already due to wake

    def _common_opts(self, s: zmq.Socket[bytes]) -> None:
        c = self.config
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.HEARTBEAT_IVL, c.heartbeat_ivl_ms)
        s.setsockopt(zmq.HEARTBEAT_TIMEOUT, c.heartbeat_timeout_ms)
        s.setsockopt(zmq.HEARTBEAT_TTL, c.heartbeat_timeout_ms)
        s.setsockopt(zmq.HANDSHAKE_IVL, c.handshake_ivl_ms)

    def _make_router(self) -> zmq.Socket[bytes]:
        assert self._ctx is not None
        s = self._ctx.socket(zmq.ROUTER)
        try:
            self._common_opts(s)
            s.setsockopt(zmq.RCVHWM, self.config.rcvhwm)
            s.setsockopt(zmq.MAXMSGSIZE, self.config.max_message_bytes)
            s.setsockopt(zmq.ROUTER_HANDOVER, 1)
            if self.curve is not None:
                s.setsockopt(zmq.CURVE_SERVER, 1)
                s.setsockopt(zmq.CURVE_SECRETKEY, self.curve.secret_key)
                s.setsockopt(zmq.CURVE_PUBLICKEY, self.curve.public_key)
            s.bind(self.bind_addr)
            self.bound_addr = s.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            s.close(0)
            raise
        return s

    def _make_dealer(self, peer_id: str, addr: str) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes] | None]:
        """A DEALER dialling ``addr`` and, with CURVE, its handshake-failure monitor -- attached
        BEFORE the connect: libzmq drops a socket's events until a monitor is attached and does not
        dial again after a refused handshake, so a refusal that came before the monitor (this
        thread descheduled between the two calls on a loaded machine) left the peer undialled for
        good."""
        assert self._ctx is not None
        server_key = self.curve.server_key_for(peer_id) if self.curve is not None else None
        c = self.config
        s = self._ctx.socket(zmq.DEALER)
        mon: zmq.Socket[bytes] | None = None
        try:
            self._common_opts(s)
            s.setsockopt(zmq.ROUTING_ID, self.node_id.encode())
            s.setsockopt(zmq.SNDHWM, c.sndhwm)
            s.setsockopt(zmq.IMMEDIATE, 1)
            s.setsockopt(zmq.RECONNECT_IVL, c.reconnect_ivl_ms)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, c.reconnect_ivl_max_ms)
            if self.curve is not None and server_key is not None:
                s.setsockopt(zmq.CURVE_SERVERKEY, server_key)
                s.setsockopt(zmq.CURVE_PUBLICKEY, self.curve.public_key)
                s.setsockopt(zmq.CURVE_SECRETKEY, self.curve.secret_key)
            if self.curve is not None:
                mon = s.get_monitor_socket(_HANDSHAKE_FAILED)
            s.connect(addr)
        except BaseException:
            if mon is not None:
                s.disable_monitor()
                mon.close(0)
            s.close(0)
            raise
        return s, mon

    def _run(self) -> None:
        router = self._router
        assert router is not None
        poller = self._poller
        poller.register(router, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        if self._router_monitor is not None:
            poller.register(self._router_monitor, zmq.POLLIN)
        try:
            while not self._stop:
                timeout = 1000
                if self._redial:
                    timeout = max(0, min(timeout, int((min(self._redial.values()) - time.monotonic()) * 1000)))
                self._io_waiting = True
                events = dict(poller.poll(timeout))
                self._io_waiting = False
                if self._wake_r in events:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    self._signaled = False
                if self._stop:
                    break
                if router in events:
                    self._receive(router)
                if self._router_monitor is not None and self._router_monitor in events:
                    self._check_router_monitor(self._router_monitor)
                with self._sock_lock:
                    if self._monitors:
                        self._check_monitors(events)
                    if self._auth is not None and time.monotonic() >= self._keys_check_at:
                        self._watch_keys()
                    self._drain()
        except Exception:
            log.exception("%s io thread failed node=%s", self.kind, self.node_id)
            self._stop = True
        finally:
            with self._sock_lock:
                self._flush_last()
                self._close_sockets()

    def _receive(self, router: zmq.Socket[bytes]) -> None:
        bound = self.curve is not None
        counters = self._counters
        for _ in range(self.config.recv_batch):
            user: Any = None
            body: Any
            if bound:
                # the body as a zmq.Frame (one object per message, not per part): it carries the
                # connection's ZAP user id
                try:
                    routing = router.recv(zmq.NOBLOCK)
                except zmq.Again:
                    return
                frame = router.recv(copy=False)
                if frame.more:
                    while router.recv(copy=False).more:
                        pass
                    counters["malformed"] += 1
                    continue
                try:
                    user = frame.get("User-Id")
                except zmq.ZMQError:  # no ZAP user id on this connection (keys reloaded meanwhile): no sender
                    counters["forged_sender"] += 1
                    continue
                body = frame.buffer
            else:
                try:
                    frames = router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    return
                if len(frames) != 2:
                    counters["malformed"] += 1
                    continue
                routing, body = frames
            try:
                from_id, payload = msgpack.unpackb(body, raw=False)
                if not isinstance(from_id, str) or not isinstance(payload, bytes):
                    raise ValueError("bad frame types")
            except (ValueError, TypeError, msgpack.UnpackException):
                counters["malformed"] += 1
                continue
            if routing != from_id.encode() or from_id == self.node_id \
                    or (bound and (user != from_id or user not in self._listed)):  # no node sends to itself
                counters["forged_sender"] += 1
                self._forged_log.refused(
                    f"sender {from_id!r} does not match its connection (routing id "
                    f"{routing.decode(errors='replace')!r}, key of {user!r})"
                )
                continue
            counters["received"] += 1
            try:
                self._on_message(from_id, payload)
            except Exception:
                counters["callback_errors"] += 1
                log.exception("%s on_message failed node=%s from=%s", self.kind, self.node_id, from_id)

    def _drain(self) -> None:
        """(I/O thread, ``_sock_lock`` held) Carry out the queued commands in order."""
        pending = self._pending
        while pending and not self._stop:
            cmd, peer, arg = pending.popleft()
            if cmd == _CMD_SEND:
                self._send_frame(peer, arg)
            elif cmd == _CMD_ADD:
                if self._dealer_addr.get(peer) == arg and peer not in self._redial:
                    continue  # same peer, same address: keep the live connection and its queue
                self._close_dealer(peer)
                try:
                    self._open_dealer(peer, arg)
                    log.info("%s peer added node=%s peer=%s addr=%s", self.kind, self.node_id, peer, arg)
                except (zmq.ZMQError, TransportError):
                    log.exception("%s cannot add peer node=%s peer=%s addr=%s", self.kind, self.node_id,
                                  peer, arg)
            elif cmd == _CMD_REMOVE:
                if self._close_dealer(peer):
                    log.info("%s peer removed node=%s peer=%s", self.kind, self.node_id, peer)
            elif cmd == _CMD_RELOAD:
                self._redial_changed_keys()

    def _redial_changed_keys(self) -> None:
        """(I/O thread) Dial peers that had no listed key, and re-dial those whose key changed."""
        assert self.curve is not None
        for peer, addr in self.peers().items():
            try:
                key: bytes | None = self.curve.server_key_for(peer)
            except TransportError:
                key = None
            if peer in self._dealers and self._dealer_key.get(peer) == key:
                continue
            self._close_dealer(peer)
            if key is None:
                log.warning("%s no public key for peer node=%s peer=%s: not dialled", self.kind, self.node_id, peer)
                continue
            try:
                self._open_dealer(peer, addr)
                log.info("%s peer dialled after key reload node=%s peer=%s", self.kind, self.node_id, peer)
            except (zmq.ZMQError, TransportError):
                log.exception("%s cannot dial peer node=%s peer=%s addr=%s", self.kind, self.node_id, peer, addr)

    def _open_dealer(self, peer_id: str, addr: str) -> None:
        s, mon = self._make_dealer(peer_id, addr)
        self._dealers[peer_id] = s
        self._dealer_addr[peer_id] = addr
        self._dealer_key[peer_id] = self.curve.server_key_for(peer_id) if self.curve is not None else None
        self._redial.pop(peer_id, None)
        if mon is not None:
            self._monitors[peer_id] = mon
            self._monitor_peer[mon] = peer_id
            self._poller.register(mon, zmq.POLLIN)

    def _close_dealer(self, peer_id: str) -> bool:
        self._redial.pop(peer_id, None)
        mon = self._monitors.pop(peer_id, None)
        s = self._dealers.pop(peer_id, None)
        self._dealer_addr.pop(peer_id, None)
        self._dealer_key.pop(peer_id, None)
        if mon is not None:
            self._poller.unregister(mon)
            del self._monitor_peer[mon]
            if s is not None:
                s.disable_monitor()
            mon.close(0)
        if s is not None:
            s.close()  # LINGER as set: 0 (at open), or the flush time (_flush_last)
        return s is not None

    def _check_monitors(self, events: dict[Any, int]) -> None:
        for mon, peer in list(self._monitor_peer.items()):
            if mon not in events:
                continue
            while True:
                try:
                    ev = recv_monitor_message(mon, zmq.NOBLOCK)
                except zmq.Again:
                    break
                if ev["event"] & _HANDSHAKE_FAILED and peer not in self._redial:
                    self._counters["handshake_failed"] += 1
                    log.warning("%s handshake refused node=%s peer=%s event=%s; retrying later",
                                self.kind, self.node_id, peer, ev["event"])
                    self._redial[peer] = time.monotonic() + self.config.reconnect_ivl_max_ms / 1000
        now = time.monotonic()
        for peer, due in list(self._redial.items()):
            if due <= now:
                addr = self.peers().get(peer)
                self._close_dealer(peer)
                if addr is not None:
                    self._open_dealer(peer, addr)

    def _check_router_monitor(self, mon: zmq.Socket[bytes]) -> None:
        """(I/O thread) A peer that dialled this endpoint failed the handshake: no key, an unlisted
        key, or plaintext against CURVE."""
        while True:
            try:
                ev = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            if ev["event"] & _HANDSHAKE_FAILED:
                self._counters["handshake_refused"] += 1
                why = "plaintext or bad protocol" if ev["event"] & zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL else "authentication"
                self._refused_log.refused(f"an incoming connection failed the CURVE handshake ({why})")

    def _flush_last(self) -> None:
        """(I/O thread, ``_sock_lock`` held, stopping) What is queued for the peers to flush goes to
        their DEALERs, which then linger up to the flush time (``_teardown``'s ``ctx.term`` waits)."""
        peers, ms = self._flush
        if not ms:
            return
        for cmd, peer, arg in self._pending:
            if cmd == _CMD_SEND and peer in peers:
                self._send_frame(peer, arg)
        self._pending.clear()
        for peer in peers:
            s = self._dealers.get(peer)
            if s is not None:
                s.setsockopt(zmq.LINGER, ms)

    def _close_sockets(self) -> None:
        for peer in list(self._dealers):
            self._close_dealer(peer)
        if self._router_monitor is not None and self._router is not None:
            self._router.disable_monitor()
            self._router_monitor.close(0)
            self._router_monitor = None
        if self._router is not None:
            self._router.close(0)
            self._router = None

    def _teardown(self) -> None:
        self._close_sockets()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None


class RaftTransport(Endpoint):
    """Raft peer traffic on ``raft.bind_addr``."""

    kind = "raft-transport"


__all__ = [
    "CurveKeys",
    "NodeAuthenticator",
    "RefusalLog",
    "Endpoint",
    "OnMessage",
    "RaftTransport",
    "TransportConfig",
    "TransportError",
]
