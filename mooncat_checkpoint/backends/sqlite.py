"""``sqlite://PATH``: one SQLite database (stdlib ``sqlite3``) in WAL mode, shared by any number of processes.

Every change is one ``BEGIN IMMEDIATE`` transaction: it takes the database write lock before reading,
so a claim's read-decide-write is atomic across processes; a writer waits up to the busy timeout
(30 s) for the lock. Reads are single statements on a WAL snapshot and never wait for writers.

Durability: ``journal_mode=WAL`` with ``synchronous=NORMAL``. A commit is atomic and survives a crash
of the process; after a power cut the last transactions before the most recent WAL checkpoint are
safe and the very latest may be lost (SQLite's documented WAL/NORMAL trade-off), in exchange for
commits that need no fsync, which is what makes SQLite the fast backend. Schema changes are recorded
in ``schema_migrations`` and applied under the write lock by whichever process opens the file first.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from mooncat_checkpoint.errors import BackendUnavailableError, CorruptRecordError
from mooncat_checkpoint.model import CheckpointStatus
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["SqliteBackend", "SCHEMA_VERSION", "BUSY_TIMEOUT_S"]

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0

_COLUMNS = (
    "namespace, key, status, owner_run_id, lease_until, lease_ms, lease_token, attempts, fence, "
    "fingerprint, created_at, updated_at, result, result_ref, error"
)

# (version, description, statements). Append only; a released migration never changes.
_MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "checkpoints and fence floors",
        (
            """CREATE TABLE checkpoints (
                namespace    TEXT    NOT NULL,
                key          TEXT    NOT NULL,
                status       TEXT    NOT NULL CHECK (status IN ('claimed', 'done', 'failed')),
                owner_run_id TEXT,
                lease_until  INTEGER,
                lease_ms     INTEGER,
                lease_token  TEXT,
                attempts     INTEGER NOT NULL,
                fence        INTEGER NOT NULL,
                fingerprint  TEXT,
                created_at   INTEGER NOT NULL,
                updated_at   INTEGER NOT NULL,
                result       TEXT,
                result_ref   TEXT,
                error        TEXT,
                PRIMARY KEY (namespace, key)
            )""",
            """CREATE TABLE fence_floors (
                namespace TEXT PRIMARY KEY,
                floor     INTEGER NOT NULL
            )""",
        ),
    ),
)
SCHEMA_VERSION = _MIGRATIONS[-1][0]

_SELECT_ONE = f"SELECT {_COLUMNS} FROM checkpoints WHERE namespace = ? AND key = ?"
# The record if any, and the namespace fence floor, in one round trip: always exactly one row.
_SELECT_FOR_UPDATE = (
    "SELECT f.floor, c.namespace, c.key, c.status, c.owner_run_id, c.lease_until, c.lease_ms, c.lease_token, "
    "c.attempts, c.fence, c.fingerprint, c.created_at, c.updated_at, c.result, c.result_ref, c.error "
    "FROM (SELECT ? AS ns, ? AS k) AS q "
    "LEFT JOIN fence_floors AS f ON f.namespace = q.ns "
    "LEFT JOIN checkpoints AS c ON c.namespace = q.ns AND c.key = q.k"
)
_INSERT = f"INSERT INTO checkpoints ({_COLUMNS}) VALUES ({', '.join('?' * 15)})"
_UPDATE = (
    "UPDATE checkpoints SET status = ?, owner_run_id = ?, lease_until = ?, lease_ms = ?, lease_token = ?, "
    "attempts = ?, fence = ?, fingerprint = ?, created_at = ?, updated_at = ?, result = ?, result_ref = ?, "
    "error = ? WHERE namespace = ? AND key = ?"
)
_DELETE = "DELETE FROM checkpoints WHERE namespace = ? AND key = ?"
_RAISE_FLOOR = (
    "INSERT INTO fence_floors (namespace, floor) VALUES (?, ?) "
    "ON CONFLICT (namespace) DO UPDATE SET floor = max(floor, excluded.floor)"
)


_STATUS = {s.value: s for s in CheckpointStatus}


def _record(row: tuple[Any, ...]) -> StoredRecord:
    status = _STATUS.get(row[2])
    if status is None:
        raise CorruptRecordError(f"unreadable checkpoint row {row[0]}/{row[1]!r}: status {row[2]!r}")
    return StoredRecord(
        row[0], row[1], status, row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10], row[11],
        row[12], row[13], row[14],
    )


class SqliteBackend:
    blocking = True
    durability = "WAL with synchronous=NORMAL (atomic commits, no fsync per commit)"

    def __init__(self, path: str, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = path
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        self._closed = False
        try:
            if path != ":memory:":
                parent = os.path.dirname(os.path.abspath(path))
                os.makedirs(parent, exist_ok=True)
            self._conn = sqlite3.connect(
                path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as e:
            raise BackendUnavailableError(f"sqlite backend: cannot open {path!r}: {e}") from None
        try:
            self._setup(busy_timeout_s)
        except (OSError, sqlite3.Error) as e:
            self._conn.close()
            raise BackendUnavailableError(f"sqlite backend: cannot use {path!r}: {e}") from None
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, busy_timeout_s: float) -> None:
        conn = self._conn
        deadline = time.monotonic() + busy_timeout_s
        while True:  # switching to WAL needs a moment alone with the file; others may be opening it too
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if mode.lower() not in ("wal", "memory"):
            raise BackendUnavailableError(f"sqlite backend: {self.path!r} refuses WAL mode (journal_mode={mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        if self._schema_version() != SCHEMA_VERSION:
            with self._transaction():
                self._migrate()

    def _schema_version(self) -> int:
        try:
            row = self._conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return 0
            raise
        return int(row[0])

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at INTEGER NOT NULL)"
        )
        current = self._schema_version()
        if current > SCHEMA_VERSION:
            raise BackendUnavailableError(
                f"sqlite backend: {self.path!r} has schema version {current}, newer than this "
                f"mooncat_checkpoint understands ({SCHEMA_VERSION}); upgrade mooncat_checkpoint"
            )
        for version, description, statements in _MIGRATIONS:
            if version > current:
                for sql in statements:
                    conn.execute(sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)",
                    (version, description, int(time.time() * 1000)),
                )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _use(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: the client is closed")
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: {what}: {e}") from e

    # -- Backend -----------------------------------------------------------------------------

    def transact(self, namespace: str, key: str, decide: Callable[[StoredRecord | None, int], Decision[T]]) -> T:
        # The hot path: written out rather than through the context managers (they cost ~10%).
        with self._lock:
            if self._closed:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: the client is closed")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    row = conn.execute(_SELECT_FOR_UPDATE, (namespace, key)).fetchone()
                    current = None if row[1] is None else _record(row[1:])
                    d = decide(current, row[0] or 0)
                    w = d.write
                    if w is not None:
                        if current is None:
                            conn.execute(_INSERT, (*w[:2], w.status.value, *w[3:]))
                        else:
                            conn.execute(_UPDATE, (w.status.value, *w[3:], namespace, key))
                    elif d.delete and current is not None:
                        conn.execute(_RAISE_FLOOR, (namespace, current.fence))
                        conn.execute(_DELETE, (namespace, key))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: cannot update {namespace}: {e}") from e
            return d.value

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        with self._use(f"cannot read {namespace}") as conn:
            row = conn.execute(_SELECT_ONE, (namespace, key)).fetchone()
        return None if row is None else _record(row)

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        with self._use(f"cannot list {namespace}") as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM checkpoints WHERE namespace = ? ORDER BY key", (namespace,)
            ).fetchall()
        return [_record(row) for row in rows]

    def namespaces(self) -> builtins.list[str]:
        with self._use("cannot list namespaces") as conn:
            rows = conn.execute("SELECT DISTINCT namespace FROM checkpoints ORDER BY namespace").fetchall()
        return [str(row[0]) for row in rows]

    def raise_floor(self, namespace: str, fence: int) -> None:
        with self._use(f"cannot raise the fence floor of {namespace}"), self._transaction() as conn:
            conn.execute(_RAISE_FLOOR, (namespace, fence))

    def clean_debris(self) -> None:
        pass

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
