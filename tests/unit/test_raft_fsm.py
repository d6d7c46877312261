"""KVStateMachine: results per entry, applied_index in the same transaction, no double apply."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from molens.kv import KVError, KVStateMachine, encode_cas, encode_delete, encode_get, encode_put
from molens.raft.fsm import FSMError, StateMachine
from molens.raft.log import Entry, EntryKind


def entries(first: int, datas: list[bytes], term: int = 1) -> list[Entry]:
    return [Entry(first + i, term, data=d) for i, d in enumerate(datas)]


def test_kv_commands_return_one_result_per_entry(tmp_path: Path) -> None:
    with KVStateMachine(tmp_path) as fsm:
        assert isinstance(fsm, KVStateMachine)
        sm: StateMachine = fsm
        res = sm.apply_batch(
            [
                *entries(
                1,
                [
                    b"",  # leader no-op
                    encode_put("a", "1"),
                    encode_get("a"),
                    encode_cas("a", "0", "2"),
                    encode_cas("a", "1", "2"),
                    encode_delete("missing"),
                    encode_cas("b", None, "x"),
                    encode_delete("b"),
                    b"\xc1",  # not msgpack
                    msgpack.packb(["frobnicate", b"k"]),
                    msgpack.packb(["put", b"", b"v"]),
                    ],
                ),
                Entry(12, 1, EntryKind.CONF_CHANGE, b"opaque"),
            ]
        )
        assert res[:8] == [None, True, b"1", False, True, False, True, True]
        assert all(isinstance(r, KVError) for r in res[8:11]) and res[11] is None
        assert res[9].index == 10
        assert fsm.applied_index() == 12
        assert fsm.get("a") == b"2" and fsm.get("b") is None
        assert fsm.applied_total == 12


def test_restart_replays_only_entries_after_applied_index(tmp_path: Path) -> None:
    with KVStateMachine(tmp_path) as fsm:
        fsm.apply_batch(entries(1, [encode_put(f"k{i}", f"v{i}") for i in range(100)]))
    with KVStateMachine(tmp_path) as fsm:
        assert fsm.applied_index() == 100
        # the node replays from its last compacted point: entries <= 100 are skipped, not re-applied
        res = fsm.apply_batch(entries(90, [encode_cas(f"new{i}", None, "again") for i in range(15)]))
        assert res[:11] == [None] * 11 and res[11:] == [True] * 4
        assert fsm.applied_total == 4 and fsm.skipped_total == 11
        assert fsm.get("new0") is None and fsm.get("new14") == b"again" and fsm.applied_index() == 104


def test_gap_in_indexes_is_a_caller_error_and_changes_nothing(tmp_path: Path) -> None:
    with KVStateMachine(tmp_path) as fsm:
        fsm.apply_batch(entries(1, [encode_put("a", "1")]))
        with pytest.raises(FSMError):
            fsm.apply_batch(entries(3, [encode_put("a", "2")]))
        assert fsm.applied_index() == 1 and fsm.get("a") == b"1"


def test_snapshot_and_restore_move_whole_state_between_replicas(tmp_path: Path) -> None:
    with KVStateMachine(tmp_path / "a") as a, KVStateMachine(tmp_path / "b") as b:
        a.apply_batch(entries(1, [encode_put(f"k{i}", b"x" * i) for i in range(200)]))
        b.apply_batch(entries(1, [encode_put("stale", "1")]))
        snap = tmp_path / "snap.mdb"
        assert a.snapshot(snap) == 200
        a.apply_batch(entries(201, [encode_put("after", "1")]))
        b.restore(snap)
        assert b.applied_index() == 200 and b.get("stale") is None
        b.apply_batch(entries(201, [encode_put("after", "1")]))
        assert a.digest() == b.digest() and len(b) == 201
    with KVStateMachine(tmp_path / "b") as b:
        assert b.applied_index() == 201


def test_restore_refuses_a_file_that_is_not_a_snapshot(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"garbage" * 1000)
    with KVStateMachine(tmp_path / "x") as fsm:
        fsm.apply_batch(entries(1, [encode_put("a", "1")]))
        with pytest.raises(FSMError):
            fsm.restore(bad)
        assert fsm.get("a") == b"1"


def test_map_grows_when_full(tmp_path: Path) -> None:
    with KVStateMachine(tmp_path, durable=False, map_size=64 * 1024) as fsm:
        res = fsm.apply_batch(entries(1, [encode_put(f"k{i}", b"v" * 1000) for i in range(300)]))
        assert res == [True] * 300 and len(fsm) == 300


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.binary(min_size=0, max_size=3)), max_size=30),
       st.integers(1, 7))
def test_batching_does_not_change_the_state(ops: list[tuple[str, bytes]], split: int) -> None:
    """Same entries applied in one batch or many, with restarts between: same digest and results."""
    import tempfile

    datas = [encode_delete(k) if not v else encode_put(k, v) for k, v in ops]
    with tempfile.TemporaryDirectory() as d:
        one = KVStateMachine(Path(d) / "one", durable=False)
        r1 = one.apply_batch(entries(1, datas))
        r2: list[object] = []
        i = 0
        while i < len(datas):
            many = KVStateMachine(Path(d) / "many", durable=False)
            r2 += many.apply_batch(entries(i + 1, datas[i : i + split]))
            many.close()
            i += split
        many = KVStateMachine(Path(d) / "many", durable=False)
        assert r1 == r2 and one.digest() == many.digest()
        one.close()
        many.close()


def test_a_put_with_a_key_lmdb_cannot_hold_is_a_kv_error_not_a_crash(tmp_path: Path) -> None:
    with KVStateMachine(tmp_path) as fsm:
        res = fsm.apply_batch(entries(1, [encode_put(b"k" * 600, b"v"), encode_put(b"k", b"v")]))
        assert isinstance(res[0], KVError) and "key too long" in res[0].reason
        assert res[1] is True and fsm.get(b"k") == b"v" and fsm.applied_index() == 2


# --- a Raft node's KV FSM is log-backed, as its task store (docs/architecture.md#fsm-durability)


def _boot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, boot: str) -> None:
    import molens.lmdb_snapshot as lmdb_snapshot

    path = tmp_path / "boot_id"
    path.write_text(boot + "\n")
    monkeypatch.setattr(lmdb_snapshot, "BOOT_ID_PATH", path)


def test_log_backed_kv_is_kept_after_a_clean_close_or_a_process_death_and_rebuilt_after_a_system_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from molens.lmdb_snapshot import BOOT_MARKER, CLOSED_MARK

    marker = tmp_path / "fsm" / BOOT_MARKER
    _boot(monkeypatch, tmp_path, "boot-a")
    fsm = KVStateMachine(tmp_path, log_backed=True)
    assert fsm.stats()["sync"] == "log" and marker.read_text() == "boot-a"
    fsm.apply_batch(entries(1, [encode_put(f"k{i}", "v") for i in range(5)]))
    fsm.close()
    assert marker.read_text() == CLOSED_MARK
    _boot(monkeypatch, tmp_path, "boot-b")  # closed cleanly, then the machine restarted: kept
    fsm = KVStateMachine(tmp_path, log_backed=True)
    assert fsm.applied_index() == 5 and not fsm.discarded_after_os_stop
    fsm.apply_batch(entries(6, [encode_put("k5", "v")]))
    fsm._env.close()  # left open: the process died (its writes in the page cache)
    fsm = KVStateMachine(tmp_path, log_backed=True)  # the same boot: kept
    assert fsm.applied_index() == 6 and fsm.get("k5") == b"v" and not fsm.discarded_after_os_stop
    fsm._env.close()  # left open again, and now the system stops
    _boot(monkeypatch, tmp_path, "boot-c")
    with caplog.at_level("WARNING"):
        fsm = KVStateMachine(tmp_path, log_backed=True)
    assert fsm.discarded_after_os_stop and fsm.stats()["discarded_after_os_stop"] is True
    assert fsm.applied_index() == 0 and len(fsm) == 0  # the node restores its snapshot and replays the log
    assert "kv fsm" in caplog.text and "open when the system stopped" in caplog.text
    assert marker.read_text() == "boot-c"
    fsm.close()


def test_kv_without_a_boot_id_or_not_log_backed_syncs_each_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import molens.lmdb_snapshot as lmdb_snapshot

    with KVStateMachine(tmp_path / "plain") as fsm:
        assert fsm.stats()["sync"] == "batch"
    assert not (tmp_path / "plain" / "fsm" / lmdb_snapshot.BOOT_MARKER).exists()
    monkeypatch.setattr(lmdb_snapshot, "BOOT_ID_PATH", tmp_path / "absent")
    with KVStateMachine(tmp_path / "no-boot-id", log_backed=True) as fsm:
        assert fsm.stats()["sync"] == "batch"
    with KVStateMachine(tmp_path / "tests", durable=False, log_backed=True) as fsm:
        assert fsm.stats()["sync"] == "none"
