"""LmdbLog behaves exactly like MemoryLog, survives reopen, and refuses corrupted snapshots."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molens.raft.log import (
    CompactedError,
    Entry,
    EntryKind,
    EntryUnavailableError,
    HardState,
    LogError,
    Membership,
    MemoryLog,
    Snapshot,
    SnapshotMeta,
)
from molens.raft.storage import LmdbLog, SnapshotCorruptError, SnapshotReceiver, SnapshotStore, StorageError

M3 = Membership(("n1", "n2", "n3"))


def ents(first: int, terms: list[int], size: int = 3) -> list[Entry]:
    return [Entry(first + i, t, EntryKind.NORMAL, bytes([i % 256]) * size) for i, t in enumerate(terms)]


def outcome(fn: object, *args: object) -> object:
    try:
        return ("ok", fn(*args))  # type: ignore[operator]
    except LogError as exc:
        return ("err", type(exc).__name__)


def assert_same(a: LmdbLog, b: MemoryLog) -> None:
    assert a.initial_state() == b.initial_state()
    assert a.first_index() == b.first_index()
    assert a.last_index() == b.last_index()
    assert a.snapshot() == b.snapshot()
    lo, hi = b.first_index() - 2, b.last_index() + 2
    for i in range(max(lo, 0), hi + 1):
        assert outcome(a.term, i) == outcome(b.term, i), i
    for i in range(max(lo, 0), hi + 1):
        for j in (i, i + 1, i + 3, hi):
            for mb in (None, 0, 60):
                assert outcome(a.entries, i, j, mb) == outcome(b.entries, i, j, mb), (i, j, mb)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(-2, 3), st.lists(st.integers(1, 6), min_size=0, max_size=6)),
        st.tuples(st.just("hard"), st.integers(0, 9), st.sampled_from([None, "n1", "n2"]), st.integers(0, 30)),
        st.tuples(st.just("membership"), st.sampled_from([M3, Membership(("n1",), ("n4",))])),
        st.tuples(st.just("create_snapshot"), st.integers(-2, 1), st.binary(max_size=40)),
        st.tuples(st.just("compact"), st.integers(-3, 1)),
        st.tuples(st.just("apply_snapshot"), st.integers(-3, 5), st.integers(1, 7), st.binary(max_size=40)),
        st.tuples(st.just("save"), st.integers(0, 2), st.lists(st.integers(1, 6), max_size=4), st.integers(0, 9)),
        st.tuples(st.just("reopen")),
    ),
    max_size=25,
)


def run_op(op: tuple[object, ...], disk: LmdbLog, mem: MemoryLog, root: Path, cache: int = 64 << 20) -> LmdbLog:
    kind = op[0]
    if kind == "append":
        _, rel, terms = op
        first = mem.last_index() + 1 + int(rel)  # type: ignore[call-overload]
        batch = ents(max(first, 1), list(terms))  # type: ignore[call-overload]
        assert outcome(disk.append, batch) == outcome(mem.append, batch)
    elif kind == "hard":
        hs = HardState(int(op[1]), op[2], int(op[3]))  # type: ignore[call-overload, arg-type]
        disk.set_hard_state(hs)
        mem.set_hard_state(hs)
    elif kind == "membership":
        disk.set_membership(op[1])  # type: ignore[arg-type]
        mem.set_membership(op[1])  # type: ignore[arg-type]
    elif kind == "create_snapshot":
        idx = mem.last_index() + int(op[1])  # type: ignore[call-overload]
        assert outcome(disk.create_snapshot, idx, M3, op[2]) == outcome(mem.create_snapshot, idx, M3, op[2])
    elif kind == "compact":
        idx = mem.snapshot().meta.index + int(op[1])  # type: ignore[call-overload]
        assert outcome(disk.compact, idx) == outcome(mem.compact, idx)
    elif kind == "apply_snapshot":
        idx = max(0, mem.last_index() + int(op[1]))  # type: ignore[call-overload]
        ctx = bytes(op[3][:3])  # type: ignore[index]
        snap = Snapshot(SnapshotMeta(idx, int(op[2]), Membership(("n2",)), ctx), op[3])  # type: ignore[call-overload, arg-type]
        disk.apply_snapshot(snap)
        mem.apply_snapshot(snap)
    elif kind == "save":
        # save() must equal the three MemoryLog mutators in etcd's order
        _, rel, terms, commit = op
        batch = ents(mem.last_index() + 1 - int(rel), list(terms))  # type: ignore[call-overload]
        batch = [e for e in batch if e.index >= 1]
        hs = HardState(7, "n3", int(commit))  # type: ignore[call-overload]
        before = outcome(mem.entries, mem.first_index(), mem.last_index() + 1)
        ref = outcome(mem.append, batch)
        if ref[0] == "ok":
            mem.set_hard_state(hs)
        else:
            assert outcome(mem.entries, mem.first_index(), mem.last_index() + 1) == before
        assert outcome(disk.save, hs, batch) == ref
    elif kind == "reopen":
        disk.close()
        disk = LmdbLog(root, durable=False, keep_snapshots=2, cache_max_bytes=cache)
    return disk


@pytest.mark.parametrize("cache", [64 << 20, 40, 0], ids=["cache-all", "cache-few", "cache-none"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_lmdb_log_matches_memory_log_on_random_operations(cache: int, seq: list[tuple[object, ...]]) -> None:
    """With the tail cache holding everything, a few entries (trimmed all the time) or nothing."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        disk = LmdbLog(root, M3, durable=False, keep_snapshots=2, cache_max_bytes=cache)
        mem = MemoryLog(M3)
        try:
            for op in seq:
                disk = run_op(op, disk, mem, root, cache)
                assert_same(disk, mem)
            disk.close()
            disk = LmdbLog(root, durable=False, keep_snapshots=2, cache_max_bytes=cache)
            assert_same(disk, mem)
            assert len(disk.snapshots.files()) <= 2
        finally:
            disk.close()


def test_open_prunes_snapshot_files_newer_than_the_recorded_one_down_to_keep(tmp_path: Path) -> None:
    """Found by the random comparison above (cache-few): two snapshots at index 1, then one recorded
    at index 0 -- the index-1 files were spared as "maybe about to be recorded" even at open, where
    nothing is, and three files stayed with ``keep_snapshots=2``."""
    disk = LmdbLog(tmp_path, M3, durable=False, keep_snapshots=2)
    disk.append(ents(1, [1]))
    disk.create_snapshot(1, M3, b"")
    disk.create_snapshot(1, M3, b"\x00")
    disk.create_snapshot(0, M3, b"")
    disk.close()
    disk = LmdbLog(tmp_path, durable=False, keep_snapshots=2)
    try:
        assert disk.snapshot_meta().index == 0
        assert disk.snapshot().data == b""
        assert len(disk.snapshots.files()) <= 2
        assert disk.snapshot_file() is not None and disk.snapshot_file().path in disk.snapshots.files()
    finally:
        disk.close()


def test_reopen_after_close_recovers_hard_state_log_membership_and_snapshot(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3) as lg:
        lg.save(HardState(3, "n2", 5), ents(1, [1, 1, 2, 3, 3, 3]))
        lg.create_snapshot(4, M3, b"state@4" * 100)
        lg.compact(3)
        lg.set_membership(Membership(("n1", "n2"), ("n9",)))
    with LmdbLog(tmp_path, Membership(("ignored",))) as lg:
        assert lg.initial_state() == (HardState(3, "n2", 5), Membership(("n1", "n2"), ("n9",)))
        assert (lg.first_index(), lg.last_index()) == (4, 6)
        assert lg.term(3) == 2
        with pytest.raises(CompactedError):
            lg.term(2)
        assert [e.term for e in lg.entries(4, 7)] == [3, 3, 3]
        assert lg.snapshot() == Snapshot(SnapshotMeta(4, 3, M3), b"state@4" * 100)


def test_save_is_one_transaction_for_snapshot_entries_and_hard_state(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3) as lg:
        lg.append(ents(1, [1, 1, 1]))
        before = lg.syncs
        snap = Snapshot(SnapshotMeta(10, 2, M3), b"x")
        lg.save(HardState(2, "n1", 10), ents(11, [2, 2]), snap)
        assert lg.syncs == before + 1
        assert (lg.first_index(), lg.last_index(), lg.term(10)) == (11, 12, 2)


def test_conflicting_suffix_is_replaced_and_gap_is_refused_without_change(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3) as lg:
        lg.append(ents(1, [1, 1, 1, 1]))
        lg.append(ents(3, [2]))
        assert lg.last_index() == 3 and lg.term(3) == 2
        with pytest.raises(EntryUnavailableError):
            lg.save(HardState(9, None, 0), ents(5, [2]))
        assert lg.initial_state()[0] == HardState()
        assert lg.last_index() == 3


def test_map_grows_when_full(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3, durable=False, map_size=64 * 1024) as lg:
        for n in range(20):
            lg.append([Entry(n * 10 + i + 1, 1, data=b"z" * 1000) for i in range(10)])
        assert lg.last_index() == 200
        assert lg.entries(199, 201)[1].data == b"z" * 1000


def test_corrupted_snapshot_is_refused_at_open(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3) as lg:
        lg.append(ents(1, [1, 1]))
        lg.create_snapshot(2, M3, b"important state" * 50)
    (path,) = SnapshotStore(tmp_path / "snapshots").files()
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(SnapshotCorruptError):
        LmdbLog(tmp_path, M3)
    path.unlink()
    with pytest.raises(SnapshotCorruptError):
        LmdbLog(tmp_path, M3)
    # the operator puts a good copy back: the same process can open the log again
    path.write_bytes(bytes(raw[:-3]) + bytes([raw[-3] ^ 0xFF]) + bytes(raw[-2:]))
    with LmdbLog(tmp_path, M3) as lg:
        assert lg.snapshot().data == b"important state" * 50


def test_snapshot_files_are_pruned_and_leftover_temp_files_removed(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3, keep_snapshots=2) as lg:
        lg.append(ents(1, [1] * 10))
        for i in range(1, 6):
            lg.create_snapshot(i, M3, b"s%d" % i)
        names = [p.name for p in lg.snapshots.files()]
        assert len(names) == 2 and names[-1].startswith("snap-00000000000000000005")
        (tmp_path / "snapshots" / "snap-x.snap.tmp").write_bytes(b"half")
    with LmdbLog(tmp_path, M3, keep_snapshots=2) as lg:
        assert not list((tmp_path / "snapshots").glob("*.tmp"))
        out = tmp_path / "restore.mdb"
        assert lg.export_snapshot(out).index == 5
        assert out.read_bytes() == b"s5"


def test_second_snapshot_at_same_index_does_not_overwrite_the_recorded_file(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3) as lg:
        lg.append(ents(1, [1, 1]))
        lg.create_snapshot(2, M3, b"first bytes")
        first = lg.snapshot_file()
        lg.create_snapshot(2, M3, b"other bytes, same state")
        second = lg.snapshot_file()
        assert first is not None and second is not None and first.path != second.path
        assert first.path.exists()  # still there until pruned: a crash in between finds it intact
    with LmdbLog(tmp_path, M3) as lg:
        assert lg.snapshot().data == b"other bytes, same state"


def test_recent_entries_are_read_back_as_saved_without_touching_lmdb(tmp_path: Path) -> None:
    disk = LmdbLog(tmp_path, M3, durable=False)
    batch = ents(1, [1, 1, 1, 2])
    disk.append(batch)
    got = disk.entries(2, 5)
    assert got == batch[1:] and all(a is b for a, b in zip(got, batch[1:], strict=True))
    assert disk.cache_hits == 1
    disk.append(ents(3, [3, 3]))  # a conflicting suffix replaces cached entries too
    assert [e.term for e in disk.entries(1, 5)] == [1, 1, 3, 3]
    disk.close()
    reopened = LmdbLog(tmp_path, durable=False)
    assert [e.term for e in reopened.entries(1, 5)] == [1, 1, 3, 3] and reopened.cache_hits == 0
    reopened.close()


def test_a_large_snapshot_is_written_checked_and_exported_without_holding_it_in_memory(tmp_path: Path) -> None:
    """A state machine of millions of tasks must not cost a second copy of itself on every node's
    heap: the file is compressed, verified at open and exported piece by piece, and the log reads
    the data into memory only when asked for it (a transfer to a follower), until released."""
    import os
    import tracemalloc

    src = tmp_path / "fsm.copy"
    with open(src, "wb") as f:
        for _ in range(24):  # 24 MiB, half random (incompressible), half not
            f.write(os.urandom(1 << 19) + b"\0" * (1 << 19))
    size = src.stat().st_size
    limit = 8 << 20
    with LmdbLog(tmp_path / "log", M3) as lg:
        lg.append(ents(1, [1, 1, 1]))
        meta = SnapshotMeta(3, 1, M3)
        tracemalloc.start()
        try:
            sf = lg.snapshots.write_file(meta, src)
            lg.record_snapshot(meta, sf)
            assert tracemalloc.get_traced_memory()[1] < limit
        finally:
            tracemalloc.stop()
        assert sf.size == size and lg.snapshot_meta() == meta
        assert not lg.snapshot_held
    tracemalloc.start()
    try:
        lg2 = LmdbLog(tmp_path / "log", M3)  # checks the file's checksum and size at open
        out = tmp_path / "restore.mdb"
        assert lg2.export_snapshot(out) == meta
        assert tracemalloc.get_traced_memory()[1] < limit
    finally:
        tracemalloc.stop()
    try:
        assert not lg2.snapshot_held
        assert out.read_bytes() == src.read_bytes()
        assert lg2.snapshot().data == src.read_bytes()  # a transfer reads it in
        assert lg2.snapshot_held
        lg2.release_snapshot_data()
        assert not lg2.snapshot_held and lg2.snapshot_meta() == meta
    finally:
        lg2.close()


def test_a_truncated_snapshot_file_is_refused_by_the_streaming_check(tmp_path: Path) -> None:
    src = tmp_path / "fsm.copy"
    src.write_bytes(b"state " * 100_000)
    with LmdbLog(tmp_path / "log", M3) as lg:
        lg.append(ents(1, [1, 1]))
        meta = SnapshotMeta(2, 1, M3)
        lg.record_snapshot(meta, lg.snapshots.write_file(meta, src))
        path = lg.snapshot_file().path  # type: ignore[union-attr]
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SnapshotCorruptError):
        LmdbLog(tmp_path / "log", M3)


def test_a_snapshot_is_sent_by_slices_streamed_from_its_file(tmp_path: Path) -> None:
    """What the leader hands the core to send: every slice equals the data's, in chunk order and
    after a restart from 0 (a failed transfer), and no slice costs more than a chunk's memory."""
    import os
    import tracemalloc

    src = tmp_path / "fsm.copy"
    data = b"".join(os.urandom(1 << 16) + bytes(1 << 16) * 3 for _ in range(160))  # 40 MiB
    src.write_bytes(data)
    with LmdbLog(tmp_path / "log", M3) as lg:
        lg.append(ents(1, [1, 1, 1]))
        meta = SnapshotMeta(3, 1, M3)
        lg.record_snapshot(meta, lg.snapshots.write_file(meta, src))
        snap = lg.snapshot()
        assert lg.snapshot_held and len(snap.data) == len(data)
        chunk = 1 << 20
        tracemalloc.start()
        try:
            for off in range(0, len(data), chunk):
                assert snap.data[off : off + chunk] == data[off : off + chunk]
            assert tracemalloc.get_traced_memory()[1] < 8 * chunk
        finally:
            tracemalloc.stop()
        assert snap.data[0:chunk] == data[0:chunk]  # from the start again
        assert snap.data[3 * chunk + 5 : 3 * chunk + 17] == data[3 * chunk + 5 : 3 * chunk + 17]  # a later piece
        assert snap.data[len(data) - 3 : len(data) + 10] == data[-3:]
        lg.release_snapshot_data()
        assert not lg.snapshot_held


def test_a_snapshot_being_sent_stays_readable_after_newer_ones_prune_its_file(tmp_path: Path) -> None:
    """A leader sends a follower its snapshot chunk by chunk while it records newer snapshots: the
    file being sent is pruned (``keep_snapshots``), and the transfer must go on reading it, from
    where it was and from the start again (a failed transfer), until no transfer needs it.
    Found by the Raft simulator (seed 7301131, 5 nodes): the next chunk raised FileNotFoundError."""
    import os

    data = os.urandom(200_000)
    with LmdbLog(tmp_path, M3, keep_snapshots=2) as lg:
        lg.append(ents(1, [1] * 10))
        lg.create_snapshot(3, M3, data)
        snap = lg.snapshot()
        assert snap.data[0:1000] == data[0:1000]  # the transfer begins
        first = lg.snapshots.files()[0]
        lg.create_snapshot(6, M3, b"newer")
        lg.create_snapshot(9, M3, b"newest")
        assert not first.exists(), "the file being sent was pruned"
        assert snap.data[1000:5000] == data[1000:5000]  # the next chunk
        assert snap.data[0:1000] == data[0:1000]  # from the start again
        assert snap.data[len(data) - 10 : len(data)] == data[-10:]
        assert lg.snapshot_held, "a replaced snapshot's stream is held until released"
        assert lg.snapshot().data == b"newest"
        lg.release_snapshot_data()
        assert not lg.snapshot_held
        assert snap.data._f is None  # type: ignore[union-attr]  # its file closed


def test_a_snapshot_arriving_in_chunks_is_gathered_in_a_file_checked_and_recorded_without_holding_it(
    tmp_path: Path,
) -> None:
    """A follower receiving a snapshot of millions of tasks holds one chunk at a time: the chunks
    go to a file, the whole is checked against the CRC of what arrived while it is compressed into
    the store, and the log records that file instead of writing the data again."""
    import os
    import tracemalloc
    import zlib

    data = b"".join(os.urandom(1 << 16) + bytes(1 << 16) * 3 for _ in range(96))  # 24 MiB
    chunk = 1 << 20
    with LmdbLog(tmp_path / "log", M3) as lg:
        rcv = SnapshotReceiver(lg.snapshots)
        meta = SnapshotMeta(40, 3, M3, b"ctx")
        crc = 0
        tracemalloc.start()
        try:
            for off in range(0, len(data), chunk):
                piece = data[off : off + chunk]
                rcv.write(off, piece)
                crc = zlib.crc32(piece, crc)
            sealed = rcv.seal()
            rcv.write(0, b"the next transfer may begin")  # while the last one is checked
            sf = rcv.check(meta, crc, sealed)
            assert sf is not None
            lg.save(snapshot=Snapshot(meta, lg.snapshots.streamed(sf)))
            assert tracemalloc.get_traced_memory()[1] < 6 * chunk
        finally:
            tracemalloc.stop()
        assert lg.snapshot_file() == sf and lg.snapshot_meta() == meta and lg.first_index() == 41
        assert [p.name for p in lg.snapshots.files()] == [sf.path.name]
        assert sealed.read_bytes() == data  # what the state machine restores from
        assert rcv.path.read_bytes() == b"the next transfer may begin"
        assert not list((tmp_path / "log" / "snapshots").glob("*.tmp"))
    with LmdbLog(tmp_path / "log", M3) as lg:  # checks the recorded file at open; leftovers go
        out = tmp_path / "restore.mdb"
        assert lg.export_snapshot(out) == meta and out.read_bytes() == data
        assert sorted(p.name for p in lg.snapshots.dir.iterdir()) == [sf.path.name]


def test_a_gathered_snapshot_that_does_not_match_the_crc_of_its_chunks_is_dropped(tmp_path: Path) -> None:
    import zlib

    store = SnapshotStore(tmp_path / "snapshots")
    rcv = SnapshotReceiver(store)
    meta = SnapshotMeta(7, 2, M3)
    rcv.write(0, b"abc")
    rcv.write(3, b"def")
    sealed = rcv.seal()
    sealed.write_bytes(b"abcdeX")  # damaged on disk after the write
    assert rcv.check(meta, zlib.crc32(b"abcdef"), sealed) is None
    assert list(store.dir.iterdir()) == []
    # sent again from the start: gathered afresh
    rcv.write(0, b"abc")
    rcv.write(3, b"def")
    sealed = rcv.seal()
    sf = rcv.check(meta, zlib.crc32(b"abcdef"), sealed)
    assert sf is not None and sf.size == 6 and sorted(p.name for p in store.dir.iterdir()) == [
        sealed.name, sf.path.name,
    ]


def test_a_chunk_written_again_lands_at_its_offset_and_a_gap_is_refused(tmp_path: Path) -> None:
    """A Ready whose write failed for want of space is carried out again: its chunks are written
    again at their offsets; a new transfer (offset 0) starts the file afresh."""
    rcv = SnapshotReceiver(SnapshotStore(tmp_path / "snapshots"))
    rcv.write(0, b"old transfer")
    rcv.write(0, b"abc")
    rcv.write(3, b"def")
    rcv.write(3, b"def")
    assert rcv.path.read_bytes() == b"abcdef" and rcv.size == 6
    rcv2 = SnapshotReceiver(rcv.store)  # a fresh handle (no open file): appends where it ends
    rcv2.write(6, b"ghi")
    assert rcv2.path.read_bytes() == b"abcdefghi"
    rcv3 = SnapshotReceiver(rcv.store)
    with pytest.raises(StorageError, match="after 9 bytes"):
        rcv3.write(12, b"jkl")


def test_what_a_stopped_node_left_of_a_snapshot_is_removed_at_start(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, M3) as lg:
        rcv = SnapshotReceiver(lg.snapshots)
        rcv.write(0, b"a whole snapshot")
        rcv.seal()  # killed while it was being checked
        rcv.write(0, b"half of the next one")
        (lg.snapshots.dir / "payload-abc.tmp").write_bytes(b"staged")
        (lg.snapshots.dir / "snap-00000000000000000009-00000000000000000001-abcdefabcdef.snap.tmp").write_bytes(b"x")
        lg.append(ents(1, [1, 1]))
        lg.create_snapshot(2, M3, b"s2")
        assert rcv.path.exists()  # not while it runs: only at start
    with LmdbLog(tmp_path, M3) as lg:
        names = sorted(p.name for p in lg.snapshots.dir.iterdir())
        assert len(names) == 1 and names[0].startswith("snap-00000000000000000002")
        assert lg.snapshot().data == b"s2"


def test_pruning_keeps_a_checked_snapshot_newer_than_the_recorded_one(tmp_path: Path) -> None:
    """A received snapshot is written on a check thread and recorded a moment later; a snapshot of
    the node's own recorded meanwhile must not prune it, even with one file kept."""
    import zlib

    with LmdbLog(tmp_path, M3, keep_snapshots=1) as lg:
        lg.append(ents(1, [1] * 5))
        rcv = SnapshotReceiver(lg.snapshots)
        rcv.write(0, b"state at 9")
        meta = SnapshotMeta(9, 1, M3)
        sf = rcv.check(meta, zlib.crc32(b"state at 9"), rcv.seal())
        assert sf is not None
        lg.create_snapshot(3, M3, b"s3")
        lg.create_snapshot(4, M3, b"s4")
        assert sf.path.exists() and len(lg.snapshots.files()) == 2
        lg.save(snapshot=Snapshot(meta, lg.snapshots.streamed(sf)))
        assert lg.snapshots.files() == [sf.path]
