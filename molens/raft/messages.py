"""Raft messages as frozen dataclasses, and their compact msgpack codec.

Every message carries ``frm``, ``to`` and ``term``. On the wire a message is one msgpack array
``[tag, frm, to, term, field...]`` (tuples, never dicts with long keys); entries are
``[index, term, kind, data]`` and snapshot metadata ``[index, term, voters, learners, context]``;
a snapshot chunk ends with the CRC-32 of its data.
:func:`encode` / :func:`decode` are exact inverses for every message type.

Membership changes travel inside log entries of kind ``CONF_CHANGE``; their payload is a
:class:`ConfChange` encoded with :func:`encode_conf_change`. It carries the *resulting*
membership, so a node never needs earlier state to interpret it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import msgpack

from molens.raft.errors import CodecError
from molens.raft.log import ENTRY_KINDS, Entry, Membership, SnapshotMeta, make_entry


class MsgTag(enum.IntEnum):
    """Wire tag of each message type."""

    VOTE = 1
    VOTE_RESP = 2
    APP = 3
    APP_RESP = 4
    HEARTBEAT = 5
    HEARTBEAT_RESP = 6
    SNAP = 7
    SNAP_RESP = 8
    TIMEOUT_NOW = 9
    READ_INDEX = 10
    READ_INDEX_RESP = 11


@dataclass(frozen=True, slots=True)
class RequestVote:
    """(Pre-)vote request. A pre-vote (``pre``) asks for ``term`` without the sender adopting it.

    ``transfer`` marks an election started by TimeoutNow: voters then ignore their leader lease.
    """

    frm: str
    to: str
    term: int
    last_index: int
    last_term: int
    pre: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    frm: str
    to: str
    term: int
    granted: bool
    pre: bool = False


@dataclass(frozen=True, slots=True)
class AppendEntries:
    frm: str
    to: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Success: ``index`` is the follower's last index known to match the leader.

    Reject: ``index`` is the rejected ``prev_index``; ``hint_index``/``hint_term`` locate the
    follower's last entry whose term is at most the leader's ``prev_term`` (fast back-tracking).
    """

    frm: str
    to: str
    term: int
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Leader liveness plus commit; ``ctx`` non-empty when it also confirms a ReadIndex request."""

    frm: str
    to: str
    term: int
    commit: int
    ctx: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    frm: str
    to: str
    term: int
    ctx: bytes = b""


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """One chunk ``data`` of the snapshot ``meta`` starting at byte ``offset``; ``done`` on the last.
    ``crc`` is the CRC-32 of ``data``: a follower drops a chunk that does not match it and asks for
    it again (None from a peer of an older version, which sends none: not checked)."""

    frm: str
    to: str
    term: int
    meta: SnapshotMeta
    offset: int
    data: bytes
    done: bool
    crc: int | None = None


@dataclass(frozen=True, slots=True)
class SnapshotResponse:
    """Chunk flow control: ``offset`` is the next byte the follower expects of snapshot ``index``."""

    frm: str
    to: str
    term: int
    index: int
    offset: int


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the recipient campaigns at once, skipping pre-vote."""

    frm: str
    to: str
    term: int


@dataclass(frozen=True, slots=True)
class ReadIndexRequest:
    """A follower forwards a linearizable-read request to its leader."""

    frm: str
    to: str
    term: int
    ctx: bytes


@dataclass(frozen=True, slots=True)
class ReadIndexResponse:
    frm: str
    to: str
    term: int
    ctx: bytes
    index: int


Message: TypeAlias = (
    RequestVote
    | VoteResponse
    | AppendEntries
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | InstallSnapshot
    | SnapshotResponse
    | TimeoutNow
    | ReadIndexRequest
    | ReadIndexResponse
)

MESSAGE_TYPES: tuple[type, ...] = (
    RequestVote,
    VoteResponse,
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    SnapshotResponse,
    TimeoutNow,
    ReadIndexRequest,
    ReadIndexResponse,
)


class ConfChangeOp(enum.IntEnum):
    BOOTSTRAP = 0
    """The initial configuration, written as entry 1 by every founding member (``node_id`` empty)."""
    ADD_LEARNER = 1
    """Add a new, non-voting member that receives the log."""
    PROMOTE = 2
    """Turn a learner into a voter."""
    REMOVE = 3
    """Remove a voter (the leader too) or a learner."""


@dataclass(frozen=True, slots=True)
class ConfChange:
    """Payload of a ``CONF_CHANGE`` entry: the operation and the membership it results in."""

    op: ConfChangeOp
    node_id: str
    membership: Membership
    context: bytes = b""


def encode_conf_change(cc: ConfChange) -> bytes:
    return bytes(
        msgpack.packb(
            [int(cc.op), cc.node_id, list(cc.membership.voters), list(cc.membership.learners), cc.context],
            use_bin_type=True,
        )
    )


def decode_conf_change(data: bytes) -> ConfChange:
    try:
        op, node_id, voters, learners, context = msgpack.unpackb(data, raw=False)
        return ConfChange(ConfChangeOp(op), node_id, Membership(tuple(voters), tuple(learners)), context)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CodecError(f"bad conf change: {e}") from e


def _enc_entries(entries: tuple[Entry, ...]) -> list[list[Any]]:
    return [[e.index, e.term, int(e.kind), e.data] for e in entries]


def _dec_entries(raw: list[list[Any]]) -> tuple[Entry, ...]:
    kinds = ENTRY_KINDS
    return tuple([make_entry(i, t, kinds[k], d) for i, t, k, d in raw])


def _enc_meta(meta: SnapshotMeta) -> list[Any]:
    return [meta.index, meta.term, list(meta.membership.voters), list(meta.membership.learners), meta.context]


def _dec_meta(raw: list[Any]) -> SnapshotMeta:
    index, term, voters, learners = raw[:4]
    context = raw[4] if len(raw) > 4 else b""  # a peer of an older version sends four fields
    if not isinstance(context, bytes):
        raise CodecError("snapshot context must be bytes")
    return SnapshotMeta(index, term, Membership(tuple(voters), tuple(learners)), context)


def encode(m: Message) -> bytes:
    """One message to its compact msgpack form."""
    head: list[Any]
    if isinstance(m, RequestVote):
        head = [MsgTag.VOTE, m.last_index, m.last_term, m.pre, m.transfer]
    elif isinstance(m, VoteResponse):
        head = [MsgTag.VOTE_RESP, m.granted, m.pre]
    elif isinstance(m, AppendEntries):
        head = [MsgTag.APP, m.prev_index, m.prev_term, _enc_entries(m.entries), m.commit]
    elif isinstance(m, AppendResponse):
        head = [MsgTag.APP_RESP, m.index, m.reject, m.hint_index, m.hint_term]
    elif isinstance(m, Heartbeat):
        head = [MsgTag.HEARTBEAT, m.commit, m.ctx]
    elif isinstance(m, HeartbeatResponse):
        head = [MsgTag.HEARTBEAT_RESP, m.ctx]
    elif isinstance(m, InstallSnapshot):
        head = [MsgTag.SNAP, _enc_meta(m.meta), m.offset, m.data, m.done]
        if m.crc is not None:
            head.append(m.crc)
    elif isinstance(m, SnapshotResponse):
        head = [MsgTag.SNAP_RESP, m.index, m.offset]
    elif isinstance(m, TimeoutNow):
        head = [MsgTag.TIMEOUT_NOW]
    elif isinstance(m, ReadIndexRequest):
        head = [MsgTag.READ_INDEX, m.ctx]
    elif isinstance(m, ReadIndexResponse):
        head = [MsgTag.READ_INDEX_RESP, m.ctx, m.index]
    else:  # pragma: no cover - the union is closed
        raise CodecError(f"not a raft message: {type(m).__name__}")
    tag, *rest = head
    return bytes(msgpack.packb([int(tag), m.frm, m.to, m.term, *rest], use_bin_type=True))


def encode_all(msgs: Sequence[Message]) -> list[bytes]:
    """:func:`encode` of each message, byte for byte, packing the entries of AppendEntries that
    carry the same range only once: a leader usually sends the same new entries to every follower in
    one Ready. A range is named by its first index and its last entry's index and term: two entries
    with the same index and term are the same and so are all before them (Raft's Log Matching
    Property, §5.3)."""
    out: list[bytes] = []
    packed: dict[tuple[int, int, int], bytes] = {}
    for m in msgs:
        if not isinstance(m, AppendEntries) or not m.entries:
            out.append(encode(m))
            continue
        key = (m.entries[0].index, m.entries[-1].index, m.entries[-1].term)
        ents = packed.get(key)
        if ents is None:
            ents = packed[key] = msgpack.packb(_enc_entries(m.entries), use_bin_type=True)
        # [tag, frm, to, term, prev_index, prev_term] is a 6-element fixarray; the message is 8
        head = msgpack.packb([int(MsgTag.APP), m.frm, m.to, m.term, m.prev_index, m.prev_term], use_bin_type=True)
        out.append(b"\x98" + head[1:] + ents + msgpack.packb(m.commit))
    return out


def decode(data: bytes) -> Message:
    """Inverse of :func:`encode`; raises :class:`CodecError` on anything else."""
    try:
        raw = msgpack.unpackb(data, raw=False)
        tag, frm, to, term, *f = raw
        tag = MsgTag(tag)
        if tag is MsgTag.VOTE:
            return RequestVote(
                frm=frm, to=to, term=term, last_index=f[0], last_term=f[1], pre=f[2], transfer=f[3],
            )
        if tag is MsgTag.VOTE_RESP:
            return VoteResponse(frm=frm, to=to, term=term, granted=f[0], pre=f[1])
        if tag is MsgTag.APP:
            return AppendEntries(
                frm=frm, to=to, term=term, prev_index=f[0], prev_term=f[1], entries=_dec_entries(f[2]),
                commit=f[3],
            )
        if tag is MsgTag.APP_RESP:
            return AppendResponse(
                frm=frm, to=to, term=term, index=f[0], reject=f[1], hint_index=f[2], hint_term=f[3],
            )
        if tag is MsgTag.HEARTBEAT:
            return Heartbeat(frm=frm, to=to, term=term, commit=f[0], ctx=f[1])
        if tag is MsgTag.HEARTBEAT_RESP:
            return HeartbeatResponse(frm, to, term, f[0])
        if tag is MsgTag.SNAP:
            crc = f[4] if len(f) > 4 else None  # a peer of an older version sends no checksum
            if crc is not None and not isinstance(crc, int):
                raise CodecError("snapshot chunk crc must be an integer")
            return InstallSnapshot(
                frm=frm, to=to, term=term, meta=_dec_meta(f[0]), offset=f[1], data=f[2], done=f[3], crc=crc,
            )
        if tag is MsgTag.SNAP_RESP:
            return SnapshotResponse(frm=frm, to=to, term=term, index=f[0], offset=f[1])
        if tag is MsgTag.TIMEOUT_NOW:
            return TimeoutNow(frm, to, term)
        if tag is MsgTag.READ_INDEX:
            return ReadIndexRequest(frm, to, term, f[0])
        return ReadIndexResponse(frm=frm, to=to, term=term, ctx=f[0], index=f[1])
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as e:
        raise CodecError(f"bad raft message: {e}") from e
