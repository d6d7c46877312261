"""The msgpack codec round-trips every Raft message type and stays compact."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from molens.raft.log import Entry, EntryKind, Membership, SnapshotMeta
from molens.raft.messages import (
    MESSAGE_TYPES,
    AppendEntries,
    AppendResponse,
    CodecError,
    ConfChange,
    ConfChangeOp,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    MsgTag,
    ReadIndexRequest,
    ReadIndexResponse,
    RequestVote,
    SnapshotResponse,
    TimeoutNow,
    VoteResponse,
    decode,
    decode_conf_change,
    encode,
    encode_all,
    encode_conf_change,
)

SAMPLES: list[Message] = [
    RequestVote(frm="n1", to="n2", term=7, last_index=42, last_term=6, pre=True, transfer=False),
    RequestVote(frm="n1", to="n2", term=7, last_index=42, last_term=6, pre=False, transfer=True),
    VoteResponse(frm="n2", to="n1", term=7, granted=True, pre=True),
    VoteResponse(frm="n2", to="n1", term=8, granted=False),
    AppendEntries(
        frm="n1",
        to="n3",
        term=9,
        prev_index=10,
        prev_term=8,
        entries=(Entry(11, 9, EntryKind.NORMAL, b"x" * 10), Entry(12, 9, EntryKind.CONF_CHANGE, b"\x00\xff")),
        commit=11,
    ),
    AppendEntries(frm="n1", to="n3", term=9, prev_index=10, prev_term=8, entries=(), commit=10),
    AppendResponse(frm="n3", to="n1", term=9, index=12),
    AppendResponse(frm="n3", to="n1", term=9, index=10, reject=True, hint_index=7, hint_term=5),
    Heartbeat(frm="n1", to="n2", term=3, commit=5, ctx=b"ctx-1"),
    Heartbeat(frm="n1", to="n2", term=3, commit=5),
    HeartbeatResponse("n2", "n1", 3, b"ctx-1"),
    InstallSnapshot(
        frm="n1", to="n4", term=5, meta=SnapshotMeta(100, 4, Membership(("n1", "n2"), ("n4",))), offset=64,
        data=b"chunk", done=False,
    ),
    InstallSnapshot(
        frm="n1", to="n4", term=5, meta=SnapshotMeta(100, 4, Membership(("n1", "n2"), ("n4",))), offset=64,
        data=b"chunk", done=False, crc=0xFFFFFFFF,
    ),
    InstallSnapshot(
        frm="n1", to="n4", term=5, meta=SnapshotMeta(100, 4, Membership(("n1",))), offset=0, data=b"",
        done=True,
    ),
    InstallSnapshot(
        frm="n1", to="n4", term=5, meta=SnapshotMeta(100, 4, Membership(("n1", "n4")), b"\x92addresses"),
        offset=0, data=b"", done=True,
    ),
    SnapshotResponse(frm="n4", to="n1", term=5, index=100, offset=128),
    TimeoutNow("n1", "n2", 11),
    ReadIndexRequest("n2", "n1", 4, b"r1"),
    ReadIndexResponse(frm="n1", to="n2", term=4, ctx=b"r1", index=99),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg: Message) -> None:
    assert decode(encode(msg)) == msg


def test_samples_cover_every_message_type() -> None:
    assert {type(m) for m in SAMPLES} == set(MESSAGE_TYPES)


def test_encoding_is_compact_tuples_not_dicts() -> None:
    raw = encode(AppendResponse(frm="n3", to="n1", term=9, index=12))
    assert len(raw) < 20
    assert b"index" not in raw


def test_garbage_is_a_codec_error() -> None:
    for bad in (b"", b"\xc1", encode(TimeoutNow("a", "b", 1))[:-1], b"\x93\x63\x01\x02"):
        with pytest.raises(CodecError):
            decode(bad)


def _append(prev: tuple[int, int], *entries: tuple[int, int], term: int = 9) -> bytes:
    """An AppendEntries as a peer could write it, entries as (index, term), without the encoder."""
    ents = [[i, t, 0, b""] for i, t in entries]
    return msgpack.packb([int(MsgTag.APP), "n1", "n3", term, prev[0], prev[1], ents, 0], use_bin_type=True)


@pytest.mark.parametrize("raw", [
    _append((10, 8), (12, 9)),  # a gap after prev_index
    _append((10, 8), (10, 9)),  # the entry at prev_index itself (would rewrite it)
    _append((10, 8), (11, 9), (11, 9)),  # the same index twice
    _append((10, 8), (11, 9), (13, 9)),  # a gap between entries
    _append((10, 8), (11, 7)),  # a term before prev_term
    _append((10, 8), (11, 9), (12, 8)),  # terms going down
    _append((10, 8), (11, 10)),  # a term past the message's
    _append((10, 10)),  # prev_term past the message's
    _append((-1, 0)),  # a negative index
    _append((10, 8), (0, 9)),
    msgpack.packb([int(MsgTag.HEARTBEAT), "n1", "n2", 3, -5, b""], use_bin_type=True),  # a negative commit
    msgpack.packb([int(MsgTag.APP_RESP), "n3", "n1", -1, 4], use_bin_type=True),  # a negative term
    msgpack.packb([int(MsgTag.SNAP), "n1", "n4", 5, [-1, 4, ["n1"], []], 0, b"", True], use_bin_type=True),
], ids=["gap", "at-prev", "twice", "inner-gap", "before-prev-term", "terms-down", "term-past", "prev-term-past",
        "negative-index", "index-0", "negative-commit", "negative-term", "negative-snapshot-index"])
def test_a_message_no_correct_peer_writes_is_a_codec_error(raw: bytes) -> None:
    """Checked before the core sees it: an append it could not place (a gap, an entry at or before
    ``prev_index``) made the core raise, which stopped the Raft actor and the node."""
    with pytest.raises(CodecError):
        decode(raw)


def test_a_well_formed_append_written_by_hand_decodes() -> None:
    """The other side of the refusals above: the same writer, entries that follow one by one."""
    m = decode(_append((10, 8), (11, 8), (12, 9), (13, 9)))
    assert isinstance(m, AppendEntries) and [e.index for e in m.entries] == [11, 12, 13]
    assert isinstance(decode(_append((0, 0))), AppendEntries)


def test_conf_change_round_trips() -> None:
    cc = ConfChange(ConfChangeOp.PROMOTE, "n4", Membership(("n1", "n2", "n4"), ()), b"addr")
    assert decode_conf_change(encode_conf_change(cc)) == cc
    with pytest.raises(CodecError):
        decode_conf_change(b"\x01")


def test_snapshot_meta_of_an_older_peer_without_context_decodes() -> None:
    import msgpack

    m = InstallSnapshot(
        frm="n1", to="n4", term=5, meta=SnapshotMeta(100, 4, Membership(("n1",)), b"ctx"), offset=0, data=b"",
        done=True,
    )
    raw = msgpack.unpackb(encode(m), raw=False)
    # drop the context field from the meta, wherever the codec put it
    meta_pos = next(i for i, v in enumerate(raw) if isinstance(v, list) and v[:2] == [100, 4])
    raw[meta_pos] = raw[meta_pos][:4]
    old = decode(msgpack.packb(raw, use_bin_type=True))
    assert isinstance(old, InstallSnapshot) and old.meta == SnapshotMeta(100, 4, Membership(("n1",)))


def test_encode_all_is_encode_of_each_and_shares_the_entries_of_one_range() -> None:
    ents = (Entry(11, 9, EntryKind.NORMAL, b"x" * 10), Entry(12, 9, EntryKind.CONF_CHANGE, b"\x00\xff"))
    msgs = [
        AppendEntries(frm="n1", to=to, term=9, prev_index=10, prev_term=8, entries=ents, commit=c)
        for to, c in (("n2", 10), ("n3", 11))
    ] + [
        AppendEntries(frm="n1", to="n2", term=9, prev_index=11, prev_term=9, entries=ents[1:], commit=12),
        AppendEntries(frm="n1", to="n3", term=9, prev_index=12, prev_term=9, entries=(), commit=12),
        *SAMPLES,
    ]
    assert encode_all(msgs) == [encode(m) for m in msgs]
    assert [decode(b) for b in encode_all(msgs)] == msgs


def test_an_unknown_entry_kind_is_a_codec_error() -> None:
    bad = msgpack.packb([int(MsgTag.APP), "n1", "n2", 1, 0, 0, [[1, 1, 7, b""]], 0], use_bin_type=True)
    with pytest.raises(CodecError):
        decode(bad)


def test_snapshot_chunk_of_an_older_peer_without_crc_decodes() -> None:
    m = InstallSnapshot(
        frm="n1", to="n4", term=5, meta=SnapshotMeta(100, 4, Membership(("n1",))), offset=0, data=b"abc",
        done=True, crc=123,
    )
    raw = msgpack.unpackb(encode(m), raw=False)
    assert raw[-1] == 123
    old = decode(msgpack.packb(raw[:-1], use_bin_type=True))
    assert old == InstallSnapshot(
        frm="n1", to="n4", term=5, meta=m.meta, offset=0, data=b"abc", done=True, crc=None,
    )
    raw[-1] = "x"
    with pytest.raises(CodecError):
        decode(msgpack.packb(raw, use_bin_type=True))


def _wrong_values(v: object) -> list[object]:
    """Values of another type than ``v`` (a bool is not an integer here, nor an integer a bool)."""
    return [w for w in ("7", 7, True, b"7", None, [7], {"a": 7}, 1.5) if type(w) is not type(v)]


def _wire_cases() -> list[tuple[str, list[object]]]:
    """Each sample's wire array with one field (or one part of an entry or of the snapshot metadata)
    swapped for a value of another type."""
    cases = []
    for m in SAMPLES:
        raw = msgpack.unpackb(encode(m), raw=False)
        for pos in range(1, len(raw)):
            if isinstance(m, InstallSnapshot) and pos == len(raw) - 1 and m.crc is not None:
                wrong = [w for w in _wrong_values(raw[pos]) if w is not None]  # no crc is an older peer's
            else:
                wrong = _wrong_values(raw[pos])
            for w in wrong:
                bad = list(raw)
                bad[pos] = w
                cases.append((f"{type(m).__name__}[{pos}]={w!r}", bad))
            if isinstance(raw[pos], list) and raw[pos] and isinstance(raw[pos][0], list):  # entries
                for part in range(4):
                    for w in _wrong_values(raw[pos][0][part]):
                        bad = list(raw)
                        bad[pos] = [list(raw[pos][0]), *raw[pos][1:]]
                        bad[pos][0][part] = w
                        if part == 2 and type(w) is bool:
                            continue  # True and False are the kinds 1 and 0 to a dict lookup
                        cases.append((f"{type(m).__name__}[{pos}][0][{part}]={w!r}", bad))
            if isinstance(m, InstallSnapshot) and pos == 4:  # the snapshot metadata
                for part in range(5):
                    for w in _wrong_values(raw[pos][part]):
                        bad = list(raw)
                        bad[pos] = list(raw[pos])
                        bad[pos][part] = w
                        cases.append((f"InstallSnapshot.meta[{part}]={w!r}", bad))
                bad = list(raw)
                bad[pos] = [*raw[pos][:2], ["n1", 2], *raw[pos][3:]]
                cases.append(("InstallSnapshot.meta voter 2", bad))
    return cases


def test_a_field_of_the_wrong_type_is_a_codec_error_not_a_message() -> None:
    """A peer's message with a field of another type than declared is refused at the codec, so the
    core never compares a term with a string (which raised inside the Raft actor and stopped it)."""
    cases = _wire_cases()
    assert len(cases) > 400
    for name, bad in cases:
        with pytest.raises(CodecError):
            decode(msgpack.packb(bad, use_bin_type=True))
            pytest.fail(f"decoded: {name}")


def test_a_newer_peers_extra_fields_are_ignored_and_too_few_are_refused() -> None:
    for m in SAMPLES:
        raw = msgpack.unpackb(encode(m), raw=False)
        raw += [None] * (len(dataclasses.fields(m)) + 1 - len(raw))  # a newer peer sends every field it knows
        assert decode(msgpack.packb([*raw, "from a newer version"], use_bin_type=True)) == m
    with pytest.raises(CodecError):
        decode(msgpack.packb([int(MsgTag.VOTE), "n1", "n2", 7, 42], use_bin_type=True))
    for not_a_message in ([], {"tag": 1}, ["1", "n1", "n2", 1], [99, "n1", "n2", 1], [True, "n1", "n2", 1, 0, 0, 0, 0]):
        with pytest.raises(CodecError):
            decode(msgpack.packb(not_a_message, use_bin_type=True))


def test_a_conf_change_of_the_wrong_types_is_a_codec_error() -> None:
    good = [int(ConfChangeOp.PROMOTE), "n4", ["n1", "n4"], [], b""]
    assert decode_conf_change(msgpack.packb(good, use_bin_type=True)).membership.voters == ("n1", "n4")
    for pos, w in ((1, 4), (2, ["n1", 4]), (2, "n1"), (3, [None]), (4, "ctx"), (0, 9)):
        bad = list(good)
        bad[pos] = w
        with pytest.raises(CodecError):
            decode_conf_change(msgpack.packb(bad, use_bin_type=True))
