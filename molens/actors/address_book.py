"""Where each member of the cluster listens: the address book (``data_dir/peers.json``) and the
codec that carries addresses through the log -- a conf-change entry's context holds the added node's
addresses, a snapshot's context those of its members -- so every replica learns how to reach every
member."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import msgpack

from molens.actors.peer_errors import storage_failure
from molens.config import PeerConfig
from molens.raft.log import Membership

log = logging.getLogger(__name__)


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
            tmp.write_text(json.dumps({pid: peer_fields(p) for pid, p in self.peers.items()}, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:
            if storage_failure(exc) is None:
                raise
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("address book not saved (%s): kept in memory", exc)

    def as_wire(self) -> dict[str, dict[str, str]]:
        return {pid: peer_fields(p) for pid, p in self.peers.items()}


def peer_fields(p: PeerConfig) -> dict[str, str]:
    """A peer's fields as the book stores and sends them: an optional address left out when unset,
    so a node of an older version, which knows fewer fields, reads what a newer one writes."""
    return {k: v for k, v in asdict(p).items() if v or k in _ALWAYS}


_ALWAYS = frozenset(("id", "raft_addr", "rpc_addr", "http_addr", "admin_addr"))
"""The fields every version writes (and reads)."""


def peer_context(p: PeerConfig) -> bytes:
    """Conf-change context: the addresses of the node being added."""
    return bytes(msgpack.packb(peer_fields(p), use_bin_type=True))


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
