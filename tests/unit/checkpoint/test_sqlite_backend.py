"""The SQLite backend shares its table with the TypeScript ``mooncat-checkpoint`` 0.5.1 and migrates ours.

The original's SQLite backend needs better-sqlite3, a native module that cannot be built here, so these
tests play its part with the statements of its ``dist/backends/sqlite.js``, copied verbatim.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from mooncat_checkpoint import CheckpointStatus, Claimed, Done, LeaseLostError, SyncCheckpointClient

from .conftest import FakeClock

# dist/backends/sqlite.js of mooncat-checkpoint 0.5.1
ORIGINAL_DDL = """
      CREATE TABLE IF NOT EXISTS checkpoints (
        namespace     TEXT    NOT NULL,
        storage_key   TEXT    NOT NULL,
        key           TEXT    NOT NULL,
        status        TEXT    NOT NULL,
        owner_run_id  TEXT,
        lease_token   TEXT,
        lease_until   INTEGER,
        result        TEXT,
        result_ref    TEXT,
        error         TEXT,
        attempts      INTEGER NOT NULL DEFAULT 0,
        created_at    INTEGER NOT NULL,
        updated_at    INTEGER NOT NULL,
        PRIMARY KEY (namespace, storage_key)
      )
    """
ORIGINAL_INSERT = """INSERT INTO checkpoints (namespace, storage_key, key, status, owner_run_id,
             lease_token, lease_until, result, result_ref, error, attempts, created_at, updated_at)
             VALUES (?, ?, ?, 'claimed', ?, ?, ?, NULL, NULL, NULL, ?, ?, ?)"""
ORIGINAL_RECLAIM = """UPDATE checkpoints SET status='claimed', owner_run_id=?, lease_token=?,
             lease_until=?, result=NULL, result_ref=NULL, error=NULL, attempts=?, updated_at=?
             WHERE namespace=? AND storage_key=?"""
ORIGINAL_COLUMNS = [
    "namespace", "storage_key", "key", "status", "owner_run_id", "lease_token", "lease_until", "result",
    "result_ref", "error", "attempts", "created_at", "updated_at",
]


def safe_key_segment(key: str) -> str:
    """sanitize.js of the original, in Python."""
    import re

    if re.fullmatch(r"[a-zA-Z0-9_.-]+", key) and len(key) <= 128 and key not in (".", ".."):
        return key
    return "sha256-" + hashlib.sha256(key.encode()).hexdigest()[:32]


KEYS = ["plain", "k" * 128, "k" * 129, "ünï", "..", "sha256-abc", "a/b"]


def test_our_table_is_the_originals_plus_our_columns(tmp_path: Path) -> None:
    SyncCheckpointClient(f"sqlite://{tmp_path}/s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(checkpoints)")]
        pk = [row[1] for row in sorted(db.execute("PRAGMA table_info(checkpoints)"), key=lambda r: r[5]) if row[5]]
        db.execute(ORIGINAL_DDL)  # the original opening our database: a no-op
    assert columns == [*ORIGINAL_COLUMNS, "fence", "fingerprint", "lease_ms"]
    assert pk == ["namespace", "storage_key"]


def test_storage_key_is_the_originals_for_every_key_kind(tmp_path: Path, clock: FakeClock) -> None:
    with SyncCheckpointClient(f"sqlite://{tmp_path}/s.db", clock=clock) as cp:
        for key in KEYS:
            assert isinstance(cp.claim("ns", key), Claimed)
    with sqlite3.connect(tmp_path / "s.db") as db:
        rows = dict(db.execute("SELECT key, storage_key FROM checkpoints"))
    assert rows == {key: safe_key_segment(key) for key in KEYS}


def test_a_database_the_original_made_is_used_and_its_rows_read(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "node.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(ORIGINAL_DDL)
        for i, key in enumerate(KEYS):
            db.execute(ORIGINAL_INSERT, ("ns", safe_key_segment(key), key, "node", f"{i:032x}",
                                         clock.now + (10_000 if i % 2 else -1), 1, clock.now - 5, clock.now - 5))
        db.execute("UPDATE checkpoints SET status='done', lease_token=NULL, lease_until=NULL, result=?, "
                   "updated_at=? WHERE storage_key=?", ('{"by":"node"}', clock.now, "plain"))
    with SyncCheckpointClient(f"sqlite://{path}", clock=clock) as cp:
        assert sorted(r.key for r in cp.list("ns")) == sorted(KEYS)
        done = cp.claim("ns", "plain")
        assert isinstance(done, Done) and done.checkpoint.result == {"by": "node"}
        fences = []
        for i, key in enumerate(KEYS[1:], start=1):
            c = cp.claim("ns", key, "py")
            if i % 2:  # a live lease of the original's
                assert c.kind == "busy" and c.checkpoint.owner_run_id == "node"
            else:  # expired: taken over, with a fence never handed out
                assert isinstance(c, Claimed) and c.checkpoint.attempts == 2
                fences.append(c.fence)
                with pytest.raises(LeaseLostError):
                    cp.done("ns", key, f"{i:032x}")  # the original's stale token
                cp.done("ns", key, c.lease_token, {"by": "py"})
                rec = cp.get("ns", key)
                assert rec is not None and rec.status is CheckpointStatus.DONE and rec.result == {"by": "py"}
        assert fences == [1, 2, 3]  # each above every fence handed out before it: none repeats


def test_a_row_the_original_reclaimed_keeps_our_fence_and_the_next_claim_goes_beyond(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "s.db"
    with SyncCheckpointClient(f"sqlite://{path}", clock=clock) as cp:
        for _ in range(3):
            c = cp.claim("ns", "k", lease_ms=1)
            assert isinstance(c, Claimed)
            clock.advance(2)
        cp.reset("ns", "gone")
        with sqlite3.connect(path) as db:  # the original takes over the expired claim, then a fresh key
            db.execute(ORIGINAL_RECLAIM, ("node", "b" * 32, clock.now - 1, 4, clock.now - 1, "ns", "k"))
            db.execute(ORIGINAL_INSERT, ("ns", "fresh", "fresh", "node", "c" * 32, clock.now - 1, 1, 0, 0))
        again = cp.claim("ns", "k")
        assert isinstance(again, Claimed) and again.fence == 4 and again.checkpoint.attempts == 5
        fresh = cp.claim("ns", "fresh")  # no fence stored: it gets one above every fence handed out
        assert isinstance(fresh, Claimed) and fresh.fence == 5


def test_a_database_of_our_first_layout_is_migrated_in_place(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, description TEXT NOT NULL,
                                            applied_at INTEGER NOT NULL);
            INSERT INTO schema_migrations VALUES (1, 'checkpoints and fence floors', 0);
            CREATE TABLE checkpoints (
                namespace TEXT NOT NULL, key TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('claimed', 'done', 'failed')),
                owner_run_id TEXT, lease_until INTEGER, lease_ms INTEGER, lease_token TEXT,
                attempts INTEGER NOT NULL, fence INTEGER NOT NULL, fingerprint TEXT,
                created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                result TEXT, result_ref TEXT, error TEXT, PRIMARY KEY (namespace, key));
            CREATE TABLE fence_floors (namespace TEXT PRIMARY KEY, floor INTEGER NOT NULL);
            INSERT INTO fence_floors VALUES ('ns', 9);
            """
        )
        db.execute("INSERT INTO checkpoints VALUES ('ns', 'ünï', 'done', 'old', NULL, NULL, NULL, 1, 4, 'fp', "
                   "1, 2, '[1,2]', 'ref', NULL)")
        db.execute("INSERT INTO checkpoints VALUES ('ns', 'live', 'claimed', 'old', ?, 60000, ?, 2, 12, NULL, "
                   "1, 2, NULL, NULL, NULL)", (clock.now + 60_000, "d" * 32))
    with SyncCheckpointClient(f"sqlite://{path}", clock=clock) as cp:
        rec = cp.get("ns", "ünï")
        assert rec is not None and (rec.result, rec.result_ref, rec.fence, rec.fingerprint) == ([1, 2], "ref", 4, "fp")
        live = cp.get("ns", "live")
        assert live is not None and live.fence == 12
        assert cp.touch("ns", "live", "d" * 32) is not None  # the old token still owns it
        cp.done("ns", "live", "d" * 32)
        assert cp.reset("ns", "ünï")
        c = cp.claim("ns", "ünï")
        assert isinstance(c, Claimed) and c.fence == 13  # above the floor (9) and every fence handed out (12)
    with sqlite3.connect(path) as db:
        assert [row[1] for row in db.execute("PRAGMA table_info(checkpoints)")][:13] == ORIGINAL_COLUMNS
        assert dict(db.execute("SELECT key, storage_key FROM checkpoints")) == {
            "ünï": safe_key_segment("ünï"), "live": "live"
        }
        assert db.execute("SELECT floor, high FROM fence_floors").fetchall() == [(9, 13)]  # the claim above raised the high mark
