"""Raft messages as frozen dataclasses, and their compact msgpack codec.

Every message carries ``frm``, ``to`` and ``term``. On the wire a message is one msgpack array
``[tag, frm, to, term, field...]`` (tuples, never dicts with long keys); entries are
``[index, term, kind, data]`` and snapshot metadata ``[index, term, voters, learners, context]``;
a snapshot chunk ends with the CRC-32 of its data. A message's fields travel in the order its class
declares them, so the codec is one table read from the classes, not code per message type.
:func:`encode` / :func:`decode` are exact inverses for every message type, and :func:`decode`
checks every field's type: a peer's message that does not match is a :class:`CodecError`, counted
and dropped before the core sees it.

Membership changes travel inside log entries of kind ``CONF_CHANGE``; their payload is a
:class:`ConfChange` encoded with :func:`encode_conf_change`. It carries the *resulting*
membership, so a node never needs earlier state to interpret it.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Callable, Sequence
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
        if type(node_id) is not str or type(context) is not bytes:
            raise CodecError("a conf change's node id is a string and its context bytes")
        return ConfChange(ConfChangeOp(op), node_id, Membership(_node_ids(voters), _node_ids(learners)), context)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CodecError(f"bad conf change: {e}") from e


def _enc_entries(entries: tuple[Entry, ...]) -> list[list[Any]]:
    return [[e.index, e.term, int(e.kind), e.data] for e in entries]


def _dec_entries(raw: Any) -> tuple[Entry, ...]:
    kinds = ENTRY_KINDS
    out = []
    for i, t, k, d in raw:
        if type(i) is not int or type(t) is not int or type(d) is not bytes:
            raise CodecError("an entry is [index, term, kind, data] of int, int, int, bytes")
        if i < 1 or t < 0:
            raise CodecError(f"an entry's index is positive and its term not negative, got {i}, {t}")
        out.append(make_entry(i, t, kinds[k], d))
    return tuple(out)


def _check_append(m: AppendEntries) -> None:
    """What a leader's append always is: entries that follow ``prev_index`` one by one, their terms
    never going down from ``prev_term`` nor past the message's. Anything else is refused here, so the
    core never meets an append it cannot place (a gap, an overlap out of order)."""
    prev_index, prev_term = m.prev_index, m.prev_term
    if prev_term > m.term:
        raise CodecError(f"AppendEntries: prev_term {prev_term} is past the message's term {m.term}")
    for e in m.entries:
        if e.index != prev_index + 1 or not prev_term <= e.term <= m.term:
            raise CodecError(
                f"AppendEntries: entry {e.index} (term {e.term}) does not follow {prev_index} (term {prev_term})"
                f" in term {m.term}"
            )
        prev_index, prev_term = e.index, e.term


def _enc_meta(meta: SnapshotMeta) -> list[Any]:
    return [meta.index, meta.term, list(meta.membership.voters), list(meta.membership.learners), meta.context]


def _dec_meta(raw: Any) -> SnapshotMeta:
    index, term, voters, learners = raw[:4]
    context = raw[4] if len(raw) > 4 else b""  # a peer of an older version sends four fields
    if type(index) is not int or type(term) is not int or index < 0 or term < 0:
        raise CodecError("snapshot index and term must be integers, not negative")
    if not isinstance(context, bytes):
        raise CodecError("snapshot context must be bytes")
    return SnapshotMeta(index, term, Membership(_node_ids(voters), _node_ids(learners)), context)


def _node_ids(raw: Any) -> tuple[str, ...]:
    if type(raw) is not list or any(type(n) is not str for n in raw):
        raise CodecError("a membership is two lists of node ids (strings)")
    return tuple(raw)


@dataclass(frozen=True, slots=True)
class _WireForm:
    """How one message type travels: ``[tag, field...]``, its fields in the order the class declares
    them. ``checks`` holds, per field, the types a decoded value may have, or the function that
    decodes it (entries, snapshot metadata); ``encoders`` the fields encoded by a function."""

    tag: MsgTag
    cls: type
    names: tuple[str, ...]
    get: Callable[[Any], tuple[Any, ...]]
    checks: tuple[tuple[type, ...] | Callable[[Any], Any], ...]
    encoders: tuple[tuple[int, Callable[[Any], Any]], ...]
    required: int
    """Fields without a default: a peer of an older version may send fewer than all, never fewer than these."""


_FIELD_WIRE: dict[str, tuple[tuple[type, ...] | Callable[[Any], Any], Callable[[Any], Any] | None]] = {
    "int": ((int,), None),
    "str": ((str,), None),
    "bool": ((bool,), None),
    "bytes": ((bytes,), None),
    "int | None": ((int, type(None)), None),
    "tuple[Entry, ...]": (_dec_entries, _enc_entries),
    "SnapshotMeta": (_dec_meta, _enc_meta),
}
"""A field's declared type -> (its decoded check or decoder, its encoder if it needs one)."""


def _wire_form(tag: MsgTag, cls: type) -> _WireForm:
    fs = dataclasses.fields(cls)
    wire = [_FIELD_WIRE[str(f.type)] for f in fs]  # KeyError at import: a field type without a wire form
    return _WireForm(
        tag=tag,
        cls=cls,
        names=tuple(f.name for f in fs),
        get=operator.attrgetter(*(f.name for f in fs)),
        checks=tuple(check for check, _ in wire),
        encoders=tuple((i, enc) for i, (_, enc) in enumerate(wire) if enc is not None),
        required=sum(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fs),
    )


_FORMS: dict[int, _WireForm] = {
    int(tag): _wire_form(tag, cls)
    for tag, cls in (
        (MsgTag.VOTE, RequestVote),
        (MsgTag.VOTE_RESP, VoteResponse),
        (MsgTag.APP, AppendEntries),
        (MsgTag.APP_RESP, AppendResponse),
        (MsgTag.HEARTBEAT, Heartbeat),
        (MsgTag.HEARTBEAT_RESP, HeartbeatResponse),
        (MsgTag.SNAP, InstallSnapshot),
        (MsgTag.SNAP_RESP, SnapshotResponse),
        (MsgTag.TIMEOUT_NOW, TimeoutNow),
        (MsgTag.READ_INDEX, ReadIndexRequest),
        (MsgTag.READ_INDEX_RESP, ReadIndexResponse),
    )
}
_FORM_OF: dict[type, _WireForm] = {form.cls: form for form in _FORMS.values()}
MESSAGE_TYPES: tuple[type, ...] = tuple(_FORM_OF)


def encode(m: Message) -> bytes:
    """One message to its compact msgpack form: ``[tag, frm, to, term, field...]`` in the order its
    class declares its fields; a trailing field that is None and has a default is left off (a peer
    of an older version sends and expects none)."""
    form = _FORM_OF.get(type(m))
    if form is None:
        raise CodecError(f"not a raft message: {type(m).__name__}")
    vals = list(form.get(m))
    for i, enc in form.encoders:
        vals[i] = enc(vals[i])
    while len(vals) > form.required and vals[-1] is None:
        vals.pop()
    return bytes(msgpack.packb([int(form.tag), *vals], use_bin_type=True))



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
    """Inverse of :func:`encode`; raises :class:`CodecError` on anything else, a field of the wrong
    type included (a peer's message is checked before the core sees it). Fields after the ones this
    version knows are ignored (a peer of a newer version)."""
    try:
        raw = msgpack.unpackb(data, raw=False)
        if type(raw) is not list or not raw or type(raw[0]) is not int:
            raise CodecError("a raft message is an array that starts with its integer tag")
        form = _FORMS.get(raw[0])
        if form is None:
            raise CodecError(f"unknown message tag {raw[0]}")
        vals = raw[1 : 1 + len(form.names)]
        if len(vals) < form.required:
            raise CodecError(f"{form.cls.__name__} has {form.required} fields, got {len(vals)}")
        for i, check in enumerate(form.checks):
            if i == len(vals):
                break
            if isinstance(check, tuple):
                if type(vals[i]) not in check:
                    raise CodecError(
                        f"{form.cls.__name__}.{form.names[i]} must be {' or '.join(t.__name__ for t in check)},"
                        f" got {type(vals[i]).__name__}"
                    )
                if type(vals[i]) is int and vals[i] < 0:  # terms, indexes, offsets, a crc: none is negative
                    raise CodecError(f"{form.cls.__name__}.{form.names[i]} must not be negative, got {vals[i]}")
            else:
                vals[i] = check(vals[i])
        msg: Message = form.cls(*vals)
        if isinstance(msg, AppendEntries):
            _check_append(msg)
        return msg
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException) as e:
        raise CodecError(f"bad raft message: {e}") from e
