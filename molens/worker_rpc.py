"""Worker RPC between the leader and every node's fire pool, on ``rpc.bind_addr``.

The same ZeroMQ ROUTER/DEALER machinery as Raft's transport (:class:`molens.raft.transport.Endpoint`)
on sockets of its own, so a large fire batch never delays a heartbeat; with ``raft.curve.enabled``
the same CURVE keys and ZAP authentication, and the sender of every frame bound to its key. The
frames it carries are the scheduler's (:mod:`molens.scheduler`): ``B`` fire batches, ``R`` results,
``H`` heartbeats, ``T``/``t`` clock probes.

Who may send what (:func:`refusal`, ``docs/architecture.md#node-ports``): a fire batch carries the
term of the leader that sent it (``b"B" + msgpack(term) + fire_batch``) and is taken only from the
node this worker knows as the leader of exactly that term; results and heartbeats only from members
of the newest configuration; probes from any node the transport let through. A node that was
removed takes none of them.
"""

from __future__ import annotations

import struct
from collections.abc import Collection

import msgpack

from molens.raft.transport import Endpoint

_UINT = {0xCC: (1, ">B"), 0xCD: (2, ">H"), 0xCE: (4, ">I"), 0xCF: (8, ">Q")}


class RpcEndpoint(Endpoint):
    """Worker RPC (FireBatch / FireResults) on ``rpc.bind_addr``: same machinery, its own sockets."""

    kind = "rpc"


def batch_frame(term: int, fire_batch: bytes) -> bytes:
    """``b"B" + msgpack(term) + fire_batch``: one join, the batch is not re-encoded."""
    return b"".join((b"B", msgpack.packb(term), fire_batch))


def split_batch(body: bytes) -> tuple[int, bytes]:
    """A ``B`` frame's body (after the tag) -> (term, fire batch). ``ValueError`` if it has no term."""
    if not body:
        raise ValueError("empty fire batch frame")
    head = body[0]
    if head < 0x80:
        return head, body[1:]
    if head not in _UINT:
        raise ValueError(f"fire batch frame without a term (first byte {head:#x})")
    n, fmt = _UINT[head]
    if len(body) < 1 + n:
        raise ValueError("fire batch frame: truncated term")
    (term,) = struct.unpack(fmt, body[1 : 1 + n])
    return int(term), body[1 + n :]


def refusal(
    tag: bytes,
    sender: str,
    *,
    frame_term: int | None,
    term: int,
    leader: str | None,
    members: Collection[str],
    removed: bool,
) -> str:
    """Why a frame with ``tag`` from ``sender`` must be dropped ("" to accept), given what this node
    knows (``term``, ``leader``, ``members``, ``removed``); ``frame_term`` is a batch's term."""
    if tag in (b"T", b"t"):
        return ""
    if removed:
        return "this node was removed from the cluster"
    if tag == b"B":
        if frame_term is None or frame_term < term:
            return f"fire batch of term {frame_term}, older than the term {term} this node knows"
        if frame_term > term:
            return f"fire batch of term {frame_term}, which this node has not reached (it knows {term})"
        if sender != leader:
            return f"fire batch from {sender}, not the leader of term {term} ({leader or 'unknown'})"
        return ""
    if tag in (b"R", b"H"):
        return "" if sender in members else f"{tag.decode()} frame from {sender}, not a member"
    return ""


__all__ = ["RpcEndpoint", "batch_frame", "refusal", "split_batch"]
