"""The file backend's on-disk layout, atomic writes and failure handling."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mooncat_checkpoint import (
    BackendUnavailableError,
    Busy,
    CheckpointStatus,
    Claimed,
    CorruptRecordError,
    Done,
    LeaseLostError,
    SyncCheckpointClient,
)

from .conftest import FakeClock


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "cp"


@pytest.fixture
def fcp(store: Path, clock: FakeClock) -> SyncCheckpointClient:
    return SyncCheckpointClient(f"file://{store}", clock=clock)


def test_a_safe_key_is_its_own_file_in_the_original_librarys_camelcase_format(
    fcp: SyncCheckpointClient, store: Path
) -> None:
    c = fcp.claim("vision", "img-001.png", "run-1")
    assert isinstance(c, Claimed)
    doc = json.loads((store / "vision" / "img-001.png.json").read_text(encoding="utf-8"))
    assert doc["ownerRunId"] == "run-1" and doc["leaseToken"] == c.lease_token
    assert doc["leaseUntil"] == c.checkpoint.lease_until and doc["leaseMs"] == 60_000
    fcp.done("vision", "img-001.png", c.lease_token, {"count": 42}, "artifacts/a.png")
    path = store / "vision" / "img-001.png.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    # The original's fields, in its order, then ours.
    assert list(doc) == [
        "namespace", "key", "status", "ownerRunId", "leaseToken", "leaseUntil", "result", "resultRef",
        "attempts", "createdAt", "updatedAt", "error", "fence", "fingerprint", "leaseMs", "format",
    ]
    assert doc["key"] == "img-001.png" and doc["namespace"] == "vision" and doc["status"] == "done"
    assert doc["result"] == {"count": 42} and doc["resultRef"] == "artifacts/a.png" and doc["fence"] == 1
    assert doc["leaseToken"] is None and doc["leaseUntil"] is None  # cleared once done
    assert doc["format"] == 2
    assert path.read_text().count("\n") > 10  # one field per line: diffable, hand-readable


@pytest.mark.parametrize("key", ["../x", ".", "..", "a" * 129, "sp ace", "", "ü", "a/b"])
def test_unsafe_keys_are_stored_under_sha256_and_32_hex(fcp: SyncCheckpointClient, store: Path, key: str) -> None:
    assert isinstance(fcp.claim("ns", key), Claimed)
    name = "sha256-" + hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
    assert json.loads((store / "ns" / name).read_text(encoding="utf-8"))["key"] == key


@pytest.mark.parametrize("key", ["k" * 128, ".hidden", "sha256-abc", "a.b-c_D9", "...", "-"])
def test_keys_the_original_keeps_are_used_as_file_names(fcp: SyncCheckpointClient, store: Path, key: str) -> None:
    assert isinstance(fcp.claim("ns", key), Claimed)
    assert json.loads((store / "ns" / f"{key}.json").read_text(encoding="utf-8"))["key"] == key
    assert [r.key for r in fcp.list("ns")] == [key]


def _legacy_doc(key: str, **changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "format": 1, "namespace": "ns", "key": key, "status": "done", "owner_run_id": "old-run",
        "lease_until": None, "lease_ms": None, "lease_token": None, "attempts": 2, "fence": 7,
        "fingerprint": "fp", "created_at": 1_000, "updated_at": 2_000, "result": {"v": 1},
        "result_ref": "r", "error": None,
    }
    doc.update(changes)
    return doc


def test_a_store_of_the_first_format_is_read_and_upgraded_on_the_next_write(
    fcp: SyncCheckpointClient, store: Path, clock: FakeClock
) -> None:
    ns = store / "ns"
    ns.mkdir(parents=True)
    long_key = "x" * 125  # first format hashed it (> 120 characters); the original keeps it
    old_name = "sha256-" + hashlib.sha256(long_key.encode()).hexdigest() + ".json"
    (ns / old_name).write_text(json.dumps(_legacy_doc(long_key, status="claimed", lease_until=clock.now - 1,
                                                       lease_ms=10, lease_token="a" * 32, result=None)))
    (ns / "plain.json").write_text(json.dumps(_legacy_doc("plain", fence=3)))
    (ns / ".fence-floor").write_text('{"floor": 2}')
    rec = fcp.get("ns", long_key)
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED and rec.fence == 7 and rec.fingerprint == "fp"
    plain = fcp.get("ns", "plain")
    assert plain is not None and plain.result == {"v": 1} and plain.owner_run_id == "old-run" and plain.fence == 3
    assert sorted(r.key for r in fcp.list("ns")) == sorted([long_key, "plain"])
    c = fcp.claim("ns", long_key, "new-run")  # the expired claim is taken over: written anew
    assert isinstance(c, Claimed) and c.fence == 8 and c.checkpoint.attempts == 3
    assert not (ns / old_name).exists()
    doc = json.loads((ns / f"{long_key}.json").read_text())
    assert doc["format"] == 2 and doc["ownerRunId"] == "new-run" and doc["fence"] == 8
    assert os.readlink(ns / ".fence-high") == "8"  # the high mark; the floor file is left as it was
    assert json.loads((ns / ".fence-floor").read_text()) == {"floor": 2}
    assert fcp.reset("ns", "plain") and not (ns / "plain.json").exists()


def test_gc_keeps_finished_records_of_an_earlier_release_unless_pruning_is_asked(
    fcp: SyncCheckpointClient, store: Path, clock: FakeClock
) -> None:
    ns = store / "ns"
    ns.mkdir(parents=True)
    (ns / "done.json").write_text(json.dumps(_legacy_doc("done")))
    (ns / "failed.json").write_text(json.dumps(_legacy_doc("failed", status="failed", result=None, error="x")))
    (ns / "live.json").write_text(json.dumps(_legacy_doc(
        "live", status="claimed", lease_until=clock.now + 60_000, lease_ms=60_000, lease_token="a" * 32, result=None)))
    (ns / "expired.json").write_text(json.dumps(_legacy_doc(
        "expired", status="claimed", lease_until=clock.now - 1, lease_ms=10, lease_token="b" * 32, result=None)))
    assert fcp.gc(older_than_ms=0) == 1  # the expired claim only, however long the others sat idle
    assert [r.key for r in fcp.list("ns")] == ["done", "failed", "live"]
    assert fcp.gc(prune_finished_older_than_ms=0) == 2
    assert [r.key for r in fcp.list("ns")] == ["live"]


def test_a_record_the_original_rewrote_without_our_fields_gets_a_fence_never_handed_out(
    fcp: SyncCheckpointClient, store: Path, clock: FakeClock
) -> None:
    for _ in range(3):  # fence 3 handed out for "k"
        c = fcp.claim("ns", "k", lease_ms=1)
        assert isinstance(c, Claimed)
        clock.advance(2)
    # The original took over the expired claim: a fresh record, no fence, fingerprint or leaseMs.
    (store / "ns" / "k.json").write_text(json.dumps({
        "namespace": "ns", "key": "k", "status": "claimed", "ownerRunId": "node", "leaseToken": "b" * 32,
        "leaseUntil": clock.now - 1, "result": None, "resultRef": None, "attempts": 4,
        "createdAt": clock.now - 10, "updatedAt": clock.now - 5,
    }, indent=2))
    rec = fcp.get("ns", "k")
    mark = int(os.readlink(store / "ns" / ".fence-high"))  # at least every fence handed out
    assert rec is not None and rec.owner_run_id == "node" and rec.fence == mark >= 3 and rec.expired(clock.now)
    with pytest.raises(LeaseLostError):
        fcp.done("ns", "k", c.lease_token)  # our overtaken owner stays refused
    again = fcp.claim("ns", "k")
    assert isinstance(again, Claimed) and again.fence == mark + 1 and again.checkpoint.attempts == 5


def test_writes_leave_one_spare_temp_file_until_close_and_a_done_creates_no_inode_for_the_claim(
    fcp: SyncCheckpointClient, store: Path
) -> None:
    def temps() -> list[Path]:
        return [p for p in (store / "ns").iterdir() if p.name.startswith(".tmp")]

    for i in range(5):
        c = fcp.claim("ns", f"k{i}")
        assert isinstance(c, Claimed)
        claim_inode = (store / "ns" / f"k{i}.json").stat().st_ino
        fcp.done("ns", f"k{i}", c.lease_token, i)
        # done swapped its temp file with the claim's record: the claim's inode is now the spare
        (spare,) = temps()
        assert spare.stat().st_ino == claim_inode
        assert json.loads((store / "ns" / f"k{i}.json").read_text())["status"] == "done"
    assert fcp.reset("ns", "k0")
    fcp.close()
    assert temps() == []


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


def test_gc_keeps_the_records_of_keys_named_like_temp_files(
    fcp: SyncCheckpointClient, store: Path, clock: FakeClock,
) -> None:
    """Keys such as ``.tmp-x`` and ``a.json.tmp.1`` are kept as ``<key>.json``: records, not debris,
    however old (gc once removed them, and their finished steps ran again)."""
    keys = (".tmp-x", ".tmp-1-1", "a.json.tmp.1", "b.json.tmp.22")
    for key in keys:
        c = fcp.claim("ns", key)
        assert isinstance(c, Claimed)
        fcp.done("ns", key, c.lease_token)
    debris = [store / "ns" / ".tmp-7-3", store / "ns" / "k.json.tmp.4242"]
    for path in debris:
        path.write_text("partial")
    two_hours_ago = time.time() - 7200
    for path in [*debris, *(store / "ns").glob("*.json")]:
        os.utime(path, (two_hours_ago, two_hours_ago))
    fcp.gc()
    assert not any(p.exists() for p in debris)
    for key in keys:
        rec = fcp.get("ns", key)
        assert rec is not None and rec.status is CheckpointStatus.DONE, key
        assert isinstance(fcp.claim("ns", key), Done)


def test_a_touch_without_extend_ms_renews_a_claim_the_original_wrote_by_its_own_default(
    fcp: SyncCheckpointClient, store: Path, clock: FakeClock,
) -> None:
    """The original's records name no lease (``leaseMs``): a touch without ``extend_ms`` adds its
    ``DEFAULT_EXTEND_MS`` (60 s), as its own touch does, instead of ending the lease now."""
    (store / "ns").mkdir(parents=True)
    (store / "ns" / "k.json").write_text(json.dumps({
        "namespace": "ns", "key": "k", "status": "claimed", "ownerRunId": "node", "leaseToken": "b" * 32,
        "leaseUntil": clock.now + 600_000, "result": None, "resultRef": None, "attempts": 1,
        "createdAt": clock.now, "updatedAt": clock.now,
    }, indent=2))
    rec = fcp.touch("ns", "k", "b" * 32)
    assert rec is not None and rec.lease_until == clock.now + 60_000
    assert isinstance(fcp.claim("ns", "k"), Busy)


def test_gc_is_not_upset_by_a_temp_file_renamed_away_under_it_or_a_directory_named_like_one(
    fcp: SyncCheckpointClient, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's write renames its temp file into place at any moment: gc listed it, then
    found it gone (and failed with 'cannot remove stale temp files' now and then, under load)."""
    fcp.claim("ns", "k")
    old_dir = store / "ns" / ".tmp-9-9"
    old_dir.mkdir()
    gone = store / "ns" / ".tmp-1-1"
    gone.write_text("a writer's")
    two_hours_ago = time.time() - 7200
    for p in (old_dir, gone):
        os.utime(p, (two_hours_ago, two_hours_ago))
    real_scandir = os.scandir

    class Renaming(contextlib.AbstractContextManager["Renaming"]):
        def __init__(self, path: str) -> None:
            self.entries = list(real_scandir(path))

        def __exit__(self, *exc: object) -> None:
            return None

        def __iter__(self) -> Iterator[os.DirEntry[str]]:
            for entry in self.entries:
                if entry.name == gone.name:  # listed, then renamed before gc looks at it
                    gone.rename(store / "ns" / "renamed.keep")
                yield entry

    monkeypatch.setattr(os, "scandir", Renaming)
    fcp.gc()
    assert old_dir.is_dir() and not gone.exists()  # a directory is not ours to remove, nor an error


def test_the_fence_floor_survives_reset_on_disk(fcp: SyncCheckpointClient, store: Path) -> None:
    fences = []
    for _ in range(3):
        c = fcp.claim("ns", "k")
        assert isinstance(c, Claimed)
        fences.append(c.fence)
        fcp.reset("ns", "k")
    assert fences == [1, 2, 3]  # new records take the next fences of the client's reserved block
    assert json.loads((store / "ns" / ".fence-floor").read_text())["floor"] == 3
    again = SyncCheckpointClient(f"file://{store}").claim("ns", "k")  # a new client, same disk
    assert isinstance(again, Claimed) and again.fence > 3  # above the block the first client reserved


def test_a_spare_temp_file_removed_under_the_client_is_made_again(fcp: SyncCheckpointClient, store: Path) -> None:
    c = fcp.claim("ns", "a")
    assert isinstance(c, Claimed)
    fcp.done("ns", "a", c.lease_token, 1)
    for spare in (store / "ns").glob(".tmp-*"):
        spare.unlink()  # as another process's gc does to a temp file idle for an hour
    c = fcp.claim("ns", "b")
    assert isinstance(c, Claimed) and fcp.done("ns", "b", c.lease_token, 2).result == 2


def test_without_an_atomic_exchange_writes_are_plain_renames(
    fcp: SyncCheckpointClient, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctypes
    import errno

    from mooncat_checkpoint.backends import file as file_backend

    def no_exchange(*_args: object) -> int:
        ctypes.set_errno(errno.EINVAL)  # what a filesystem without RENAME_EXCHANGE answers
        return -1

    monkeypatch.setattr(file_backend, "_renameat2", no_exchange)
    for key in ("a", "b"):
        c = fcp.claim("ns", key)
        assert isinstance(c, Claimed)
        assert fcp.done("ns", key, c.lease_token, key).result == key
    assert [p.name for p in (store / "ns").iterdir() if p.name.startswith(".tmp")] == []
    assert [r.result for r in fcp.list("ns", "done")] == ["a", "b"]


def test_a_high_mark_removed_by_hand_is_rebuilt_from_the_records(fcp: SyncCheckpointClient, store: Path) -> None:
    c = fcp.claim("ns", "k", lease_ms=1)
    assert isinstance(c, Claimed)
    fcp.done("ns", "k", c.lease_token)
    (store / "ns" / ".fence-high").unlink()
    assert fcp.get("ns", "k") is not None and not (store / "ns" / ".fence-high").exists()  # reads write nothing
    other = fcp.claim("ns", "other")  # the client's block is no longer the mark's: a new one, above "k"
    assert isinstance(other, Claimed) and other.fence > c.fence
    assert int(os.readlink(store / "ns" / ".fence-high")) >= other.fence


def test_a_new_record_never_gets_a_fence_its_key_had_whoever_allocated_it(store: Path) -> None:
    """Two clients (as two processes) each hold a block of fences; re-claims and deletes by the other
    (the original's reset deletes only the file) never let a block hand a key a fence it had."""
    url = f"file://{store}"
    a, b = SyncCheckpointClient(url), SyncCheckpointClient(url)
    seen: dict[str, list[int]] = {}

    def claim(cp: SyncCheckpointClient, key: str, lease_ms: int = 60_000) -> None:
        c = cp.claim("ns", key, lease_ms=lease_ms)
        assert isinstance(c, Claimed)
        assert all(c.fence > f for f in seen.get(key, [])), (key, c.fence, seen.get(key))
        seen.setdefault(key, []).append(c.fence)

    claim(a, "k", lease_ms=1)  # a's block
    claim(b, "x")  # b reserves above a's block
    deadline = time.monotonic() + 10
    while not b.list("ns", expired=True):  # the 1 ms lease of k runs out
        assert time.monotonic() < deadline
        time.sleep(0.001)
    claim(b, "k")  # re-claim of the expired k by b: a's fence + 1, inside a's old block
    (store / "ns" / "k.json").unlink()  # the original's reset
    claim(a, "k")  # a must not use its old block: it would hand out a fence k already had
    claim(a, "y")
    (store / "ns" / "k.json").unlink()
    claim(b, "k")
    a.close()
    b.close()


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


def test_a_first_format_file_left_beside_a_current_one_never_comes_back_after_reset(
    fcp: SyncCheckpointClient, store: Path
) -> None:
    key = "a/b"  # hashed by both rules, to names of different lengths
    ns = store / "ns"
    ns.mkdir(parents=True)
    old_name = "sha256-" + hashlib.sha256(key.encode()).hexdigest() + ".json"
    (ns / old_name).write_text(json.dumps(_legacy_doc(key, fence=5)))
    c = fcp.claim("ns", "other")  # the original, say, wrote the current name meanwhile
    assert isinstance(c, Claimed)
    current = ns / ("sha256-" + hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")
    current.write_text(json.dumps({
        "namespace": "ns", "key": key, "status": "done", "ownerRunId": "node", "leaseToken": None,
        "leaseUntil": None, "result": "node", "resultRef": None, "attempts": 1, "createdAt": 1, "updatedAt": 2,
    }))
    rec = fcp.get("ns", key)
    assert rec is not None and rec.result == "node"  # the current name wins
    assert [r.key for r in fcp.list("ns")].count(key) == 1
    assert fcp.reset("ns", key)
    assert fcp.get("ns", key) is None and not (ns / old_name).exists()


def test_a_key_named_like_another_keys_first_format_file_is_left_alone(
    fcp: SyncCheckpointClient, store: Path
) -> None:
    tricky = "../x"
    lookalike = "sha256-" + hashlib.sha256(tricky.encode()).hexdigest()  # tricky's first-format name
    b = fcp.claim("ns", lookalike)
    assert isinstance(b, Claimed)
    a = fcp.claim("ns", tricky)  # not taken for a first-format record of tricky
    assert isinstance(a, Claimed) and a.fence == b.fence + 1  # a new record starts above the high mark
    fcp.done("ns", tricky, a.lease_token, "tricky")
    assert fcp.reset("ns", tricky)
    rec = fcp.get("ns", lookalike)
    assert rec is not None and rec.status is CheckpointStatus.CLAIMED  # survived tricky's write and reset
    assert fcp.get("ns", tricky) is None


@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("use_async", [False, True])
def test_reset_removes_a_record_that_no_longer_reads_and_the_next_fence_is_still_new(
    tmp_path: Path, clock: FakeClock, kind: str, use_async: bool
) -> None:
    """A record broken by hand (or by a disk) blocked everything on its key, reset included; reset
    deletes any record, so it deletes that one too, and since its fence cannot be read the namespace's
    floor goes up to every fence handed out: the next claim's fence is still one never seen."""
    import asyncio
    import sqlite3

    from mooncat_checkpoint import CheckpointClient

    url = f"file://{tmp_path}/cp" if kind == "file" else f"sqlite://{tmp_path}/cp.db"
    cp = SyncCheckpointClient(url, clock=clock)
    for k in ("a", "b", "broken"):
        c = cp.claim("ns", k)
        assert isinstance(c, Claimed)
    high = c.fence  # "broken" got the highest fence so far
    if kind == "file":
        (tmp_path / "cp" / "ns" / "broken.json").write_text("{ not json")
    else:
        with sqlite3.connect(tmp_path / "cp.db") as db:
            db.execute("UPDATE checkpoints SET status = 'weird', fence = NULL WHERE key = 'broken'")
    with pytest.raises(CorruptRecordError):
        cp.get("ns", "broken")
    with pytest.raises(CorruptRecordError):
        cp.reset("ns", "broken", if_expired=True)  # whether it expired cannot be read
    if use_async:
        acp = CheckpointClient(url, clock=clock)
        assert asyncio.run(acp.reset("ns", "broken")) is True
        asyncio.run(acp.aclose())
    else:
        assert cp.reset("ns", "broken") is True
    assert cp.get("ns", "broken") is None and cp.reset("ns", "broken") is False
    again = cp.claim("ns", "broken")
    assert isinstance(again, Claimed) and again.fence > high
    assert [r.key for r in cp.list("ns")] == ["a", "b", "broken"]
    cp.close()


def test_gc_collects_around_files_that_do_not_read_and_reports_them_by_key_or_file_name(
    fcp: SyncCheckpointClient, store: Path, clock: FakeClock
) -> None:
    """A file that no longer parses, or of a status this library does not know, costs gc that file
    only: every namespace is collected, that one's too, and the result names the key whose reset
    removes the file, or None for a hashed name (its error names the file)."""
    for ns in ("aaa", "bad", "zzz"):
        fcp.claim(ns, "expired", lease_ms=10)
    fcp.claim("bad", "broken")
    fcp.claim("bad", "a/b")  # stored under a hashed name
    (store / "bad" / "broken.json").write_text("{ not json")
    hashed = store / "bad" / ("sha256-" + hashlib.sha256(b"a/b").hexdigest()[:32] + ".json")
    hashed.write_text(hashed.read_text(encoding="utf-8").replace('"claimed"', '"running"'), encoding="utf-8")
    clock.advance(20)
    result = fcp.gc()
    assert result == 3  # the expired claim of every namespace, "bad" included
    assert [(u.namespace, u.key) for u in result.unreadable] == [("bad", "broken"), ("bad", None)]
    assert "broken.json" in result.unreadable[0].error and hashed.name in result.unreadable[1].error
    assert all(fcp.get(ns, "expired") is None for ns in ("aaa", "bad", "zzz"))
    assert (store / "bad" / "broken.json").read_text() == "{ not json" and hashed.exists()  # left in place
    assert fcp.reset("bad", "broken") is True
    again = fcp.gc()
    assert again == 0 and [u.key for u in again.unreadable] == [None]
