"""The file backend's on-disk layout, atomic writes and failure handling."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from mooncat_checkpoint import (
    BackendUnavailableError,
    CheckpointStatus,
    Claimed,
    CorruptRecordError,
    SyncCheckpointClient,
)

from .conftest import FakeClock


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "cp"


@pytest.fixture
def fcp(store: Path, clock: FakeClock) -> SyncCheckpointClient:
    return SyncCheckpointClient(f"file://{store}", clock=clock)


def test_a_safe_key_is_its_own_readable_json_file(fcp: SyncCheckpointClient, store: Path) -> None:
    c = fcp.claim("vision", "img-001.png", "run-1")
    assert isinstance(c, Claimed)
    fcp.done("vision", "img-001.png", c.lease_token, {"count": 42}, "artifacts/a.png")
    path = store / "vision" / "img-001.png.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["key"] == "img-001.png" and doc["namespace"] == "vision" and doc["status"] == "done"
    assert doc["result"] == {"count": 42} and doc["result_ref"] == "artifacts/a.png" and doc["fence"] == 1
    assert doc["lease_token"] is None  # cleared once done
    assert path.read_text().count("\n") > 10  # one field per line: diffable, hand-readable


@pytest.mark.parametrize("key", ["../x", ".hidden", "a" * 121, "sp ace", "", "sha256-abc", "ü"])
def test_other_keys_are_stored_under_their_sha256(fcp: SyncCheckpointClient, store: Path, key: str) -> None:
    assert isinstance(fcp.claim("ns", key), Claimed)
    name = "sha256-" + hashlib.sha256(key.encode()).hexdigest() + ".json"
    assert json.loads((store / "ns" / name).read_text(encoding="utf-8"))["key"] == key


def test_the_longest_safe_key_is_used_as_is(fcp: SyncCheckpointClient, store: Path) -> None:
    key = "k" * 120
    fcp.claim("ns", key)
    assert (store / "ns" / f"{key}.json").is_file()


def test_writes_leave_no_temp_files(fcp: SyncCheckpointClient, store: Path) -> None:
    for i in range(5):
        c = fcp.claim("ns", f"k{i}")
        assert isinstance(c, Claimed)
        fcp.done("ns", f"k{i}", c.lease_token, i)
    assert fcp.reset("ns", "k0")
    leftovers = [p.name for p in (store / "ns").iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []


def test_a_failed_write_keeps_the_old_record(
    fcp: SyncCheckpointClient, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = fcp.claim("ns", "k")
    assert isinstance(c, Claimed)
    before = (store / "ns" / "k.json").read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(BackendUnavailableError, match="No space left"):
        fcp.done("ns", "k", c.lease_token, "x")
    monkeypatch.undo()
    assert (store / "ns" / "k.json").read_bytes() == before
    assert not [p for p in (store / "ns").iterdir() if p.name.startswith(".tmp")]
    assert fcp.done("ns", "k", c.lease_token, "x").status is CheckpointStatus.DONE


def test_a_hand_broken_file_is_reported_not_overwritten(fcp: SyncCheckpointClient, store: Path) -> None:
    fcp.claim("ns", "k")
    (store / "ns" / "k.json").write_text("{ not json")
    with pytest.raises(CorruptRecordError, match=r"k\.json"):
        fcp.get("ns", "k")
    with pytest.raises(CorruptRecordError):
        fcp.claim("ns", "k")
    assert (store / "ns" / "k.json").read_text() == "{ not json"


def test_a_record_under_the_wrong_name_is_reported(fcp: SyncCheckpointClient, store: Path) -> None:
    fcp.claim("ns", "a")
    (store / "ns" / "a.json").rename(store / "ns" / "b.json")
    with pytest.raises(CorruptRecordError, match="holds key 'a'"):
        fcp.get("ns", "b")


def test_reading_an_unknown_namespace_creates_nothing(fcp: SyncCheckpointClient, store: Path) -> None:
    assert fcp.get("nothing_here", "k") is None
    assert fcp.list("nothing_here") == []
    assert fcp.reset("nothing_here", "k") is False
    assert fcp.touch("nothing_here", "k", "0" * 32) is None
    assert not (store / "nothing_here").exists()


def test_gc_removes_stale_temp_files(fcp: SyncCheckpointClient, store: Path) -> None:
    fcp.claim("ns", "k")
    old = store / "ns" / ".tmp-1-1"
    fresh = store / "ns" / ".tmp-1-2"
    old.write_text("partial")
    fresh.write_text("in progress")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    fcp.gc()
    assert not old.exists() and fresh.exists()


def test_the_fence_floor_survives_reset_on_disk(fcp: SyncCheckpointClient, store: Path) -> None:
    for _ in range(3):
        c = fcp.claim("ns", "k")
        assert isinstance(c, Claimed)
        fcp.reset("ns", "k")
    assert json.loads((store / "ns" / ".fence-floor").read_text()) == {"floor": 3}
    again = SyncCheckpointClient(f"file://{store}").claim("ns", "k")  # a new client, same disk
    assert isinstance(again, Claimed) and again.fence == 4


def test_foreign_directories_in_the_store_are_ignored(fcp: SyncCheckpointClient, store: Path) -> None:
    fcp.claim("ns", "k", lease_ms=1)
    (store / "not a namespace").mkdir()
    (store / "stray.txt").write_text("x")
    assert fcp.gc() == 0


def test_a_store_removed_under_a_running_client_is_made_again(fcp: SyncCheckpointClient, store: Path) -> None:
    import shutil

    fcp.claim("ns", "a")
    shutil.rmtree(store)
    c = fcp.claim("ns", "b")
    assert isinstance(c, Claimed) and (store / "ns" / "b.json").is_file()
