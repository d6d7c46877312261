"""An in-memory twin of the Raft transport: peers in one process, a message handed straight to the
receiver's ``on_message`` (which only queues it for its actor), or dropped when nobody listens. Built per node by :meth:`MemoryNet.transport`, the factory a RaftPeer takes."""

from __future__ import annotations

import threading
from collections.abc import Callable

OnMessage = Callable[[str, bytes], None]


class MemoryNet:
    """The wire between in-memory transports: who is listening."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listening: dict[str, OnMessage] = {}

    def transport(self, node_id: str) -> Callable[[OnMessage, dict[str, str]], MemoryTransport]:
        def build(on_message: OnMessage, peers: dict[str, str]) -> MemoryTransport:
            return MemoryTransport(self, node_id, on_message, peers)

        return build

    def deliver(self, frm: str, to: str, payload: bytes) -> bool:
        with self.lock:
            on_message = self.listening.get(to)
            if on_message is None:
                return False
        on_message(frm, payload)
        return True


class MemoryTransport:
    """What a RaftPeer needs of a transport, over a :class:`MemoryNet`."""

    curve = None

    def __init__(self, net: MemoryNet, node_id: str, on_message: OnMessage, peers: dict[str, str]) -> None:
        self.net = net
        self.node_id = node_id
        self.on_message = on_message
        self._peers = dict(peers)
        self.counters = dict.fromkeys(("sent", "dropped_unknown_peer", "handshake_refused", "forged_sender"), 0)

    def start(self) -> MemoryTransport:
        with self.net.lock:
            if self.node_id in self.net.listening:
                raise RuntimeError(f"{self.node_id} is already listening")
            self.net.listening[self.node_id] = self.on_message
        return self

    def send(self, to: str, payload: bytes) -> bool:
        if to not in self._peers:
            self.counters["dropped_unknown_peer"] += 1
            return False
        self.counters["sent"] += 1
        return self.net.deliver(self.node_id, to, payload)

    def add_peer(self, peer_id: str, addr: str) -> None:
        self._peers[peer_id] = addr

    def remove_peer(self, peer_id: str) -> None:
        self._peers.pop(peer_id, None)

    def peers(self) -> dict[str, str]:
        return dict(self._peers)

    def listed_ids(self) -> frozenset[str]:
        return frozenset()

    def reload_curve_keys(self) -> list[str]:
        return []

    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    def close(self, timeout: float = 5.0) -> None:
        with self.net.lock:
            self.net.listening.pop(self.node_id, None)

    def __repr__(self) -> str:
        return f"MemoryTransport({self.node_id!r}, peers={sorted(self._peers)!r})"
