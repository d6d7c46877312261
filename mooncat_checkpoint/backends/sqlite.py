"""``sqlite://PATH``: one SQLite database (stdlib ``sqlite3``) in WAL mode, shared by any number of processes.

Every change is one ``BEGIN IMMEDIATE`` transaction: it takes the database write lock before reading,
so a claim's read-decide-write is atomic across processes; a writer waits up to the busy timeout
(30 s) for the lock. Reads are single statements on a WAL snapshot and never wait for writers.

Durability: ``journal_mode=WAL`` with ``synchronous=NORMAL``. A commit is atomic and survives a crash
of the process; after a power cut the last transactions before the most recent WAL checkpoint are
safe and the very latest may be lost (SQLite's documented WAL/NORMAL trade-off), in exchange for
commits that need no fsync, which is what makes SQLite the fast backend. Schema changes are recorded
in ``schema_migrations`` and applied under the write lock by whichever process opens the file first.

Layout: the table of the TypeScript ``mooncat-checkpoint`` (``ORIGINAL_DDL``: primary key
``(namespace, storage_key)``, ``storage_key`` = ``naming.storage_name(key)``) plus our ``fence``,
``fingerprint`` and ``lease_ms`` columns, so both libraries can share one database file; a database of
this library's first layout (``key`` as primary key) is rebuilt in place, rows kept, by migration 2.
``fence_floors(namespace, floor, high)`` keeps fences monotonic: ``floor`` >= the fence of every
row this library deleted, ``high`` >= every fence handed out, raised in the claim's own transaction. A
new row gets fence ``max(floor, high) + 1`` (so a key the original's ``reset`` or ``gc`` deleted, which
leaves ``fence_floors`` alone, still continues above its old fence), and a row the original inserted
(NULL fence) reads as fence ``max(floor, high)``, so its next claim gets a fence never handed out.
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

from mooncat_checkpoint.errors import BackendUnavailableError, CorruptRecordError, WouldBlock
from mooncat_checkpoint.model import CheckpointStatus, UnreadableRecord
from mooncat_checkpoint.naming import storage_name
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["SqliteBackend", "SqliteNowait", "SCHEMA_VERSION", "BUSY_TIMEOUT_S", "ORIGINAL_DDL"]

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0

#: The table of the TypeScript ``mooncat-checkpoint`` 0.5.1, exactly as its SQLite backend creates it
#: (``CREATE TABLE IF NOT EXISTS``, so it leaves ours alone). Ours is this plus ``fence``,
#: ``fingerprint`` and ``lease_ms``, which the original neither reads nor writes: its claim of an
#: existing row is an UPDATE that keeps them, its INSERT leaves them NULL.
ORIGINAL_DDL = """CREATE TABLE IF NOT EXISTS checkpoints (
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
      )"""
_EXTRA_COLUMNS = (("fence", "INTEGER"), ("fingerprint", "TEXT"), ("lease_ms", "INTEGER"))
_CORE_COLUMNS = frozenset({"namespace", "key", "status", "lease_until", "lease_token", "attempts", "created_at",
                           "updated_at"})
"""Columns of ``checkpoints`` in every layout: ours (both versions) and the original library's."""

# StoredRecord order, from the table's columns.
_COLUMNS = (
    "namespace, key, status, owner_run_id, lease_until, lease_ms, lease_token, attempts, fence, "
    "fingerprint, created_at, updated_at, result, result_ref, error"
)


def _v1(conn: sqlite3.Connection) -> None:
    """This library's first layout (key as primary key). A database the original made has its table
    already: v2 then only adds our columns."""
    if _has_table(conn, "checkpoints"):
        conn.execute("CREATE TABLE IF NOT EXISTS fence_floors (namespace TEXT PRIMARY KEY, floor INTEGER NOT NULL)")
        return
    conn.execute(
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
        )"""
    )
    conn.execute("CREATE TABLE fence_floors (namespace TEXT PRIMARY KEY, floor INTEGER NOT NULL)")


def _v2(conn: sqlite3.Connection) -> None:
    """The original's table (``storage_key`` primary key) plus our columns, rows kept; fence floors
    gain ``high`` (>= every fence handed out in the namespace)."""
    columns = _columns(conn, "checkpoints")
    if "storage_key" in columns:  # the original made it: add what it lacks
        for name, kind in _EXTRA_COLUMNS:
            if name not in columns:
                conn.execute(f"ALTER TABLE checkpoints ADD COLUMN {name} {kind}")
    else:
        conn.create_function("mooncat_storage_name", 1, storage_name, deterministic=True)
        conn.execute("ALTER TABLE checkpoints RENAME TO checkpoints_v1")
        conn.execute(ORIGINAL_DDL)
        for name, kind in _EXTRA_COLUMNS:
            conn.execute(f"ALTER TABLE checkpoints ADD COLUMN {name} {kind}")
        conn.execute(
            f"INSERT INTO checkpoints (storage_key, {_COLUMNS}) "
            f"SELECT mooncat_storage_name(key), {_COLUMNS} FROM checkpoints_v1"
        )
        conn.execute("DROP TABLE checkpoints_v1")
    conn.execute("ALTER TABLE fence_floors ADD COLUMN high INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "INSERT INTO fence_floors (namespace, floor, high) "
        "SELECT namespace, 0, max(coalesce(fence, 0)) FROM checkpoints WHERE true GROUP BY namespace "
        "ON CONFLICT (namespace) DO UPDATE SET high = max(floor, excluded.high)"
    )
    conn.execute("UPDATE fence_floors SET high = max(high, floor)")


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


# (version, description, migration). Append only; a released migration never changes what it makes.
_MIGRATIONS: tuple[tuple[int, str, Callable[[sqlite3.Connection], None]], ...] = (
    (1, "checkpoints and fence floors", _v1),
    (2, "the original library's table layout (storage_key) and a fence high mark", _v2),
)
SCHEMA_VERSION = _MIGRATIONS[-1][0]

_SELECT_ONE = f"SELECT {_COLUMNS} FROM checkpoints WHERE namespace = ? AND storage_key = ?"
# The record if any, and the namespace fence floor and high mark, in one round trip: always one row.
_SELECT_FOR_UPDATE = (
    "SELECT f.floor, f.high, c.namespace, c.key, c.status, c.owner_run_id, c.lease_until, c.lease_ms, "
    "c.lease_token, c.attempts, c.fence, c.fingerprint, c.created_at, c.updated_at, c.result, c.result_ref, "
    "c.error FROM (SELECT ? AS ns, ? AS k) AS q "
    "LEFT JOIN fence_floors AS f ON f.namespace = q.ns "
    "LEFT JOIN checkpoints AS c ON c.namespace = q.ns AND c.storage_key = q.k"
)
_INSERT = f"INSERT INTO checkpoints (storage_key, {_COLUMNS}) VALUES ({', '.join('?' * 16)})"
_UPDATE = (
    "UPDATE checkpoints SET key = ?, status = ?, owner_run_id = ?, lease_until = ?, lease_ms = ?, "
    "lease_token = ?, attempts = ?, fence = ?, fingerprint = ?, created_at = ?, updated_at = ?, result = ?, "
    "result_ref = ?, error = ? WHERE namespace = ? AND storage_key = ?"
)
_DELETE = "DELETE FROM checkpoints WHERE namespace = ? AND storage_key = ?"
_RAISE_FLOOR = (
    "INSERT INTO fence_floors (namespace, floor, high) VALUES (?, ?, ?) "
    "ON CONFLICT (namespace) DO UPDATE SET floor = max(floor, excluded.floor), high = max(high, excluded.high)"
)
_RAISE_HIGH = (
    "INSERT INTO fence_floors (namespace, floor, high) VALUES (?, 0, ?) "
    "ON CONFLICT (namespace) DO UPDATE SET high = max(high, excluded.high)"
)
_FENCE_BASE = "SELECT max(floor, high) FROM fence_floors WHERE namespace = ?"


_STATUS = {s.value: s for s in CheckpointStatus}


def _record(row: tuple[Any, ...], key: str | None = None, fence_base: int = 0) -> StoredRecord:
    """A row in StoredRecord order; a NULL fence (the original inserted the row) becomes ``fence_base``."""
    status = _STATUS.get(row[2])
    if status is None:
        raise CorruptRecordError(f"unreadable checkpoint row {row[0]}/{row[1]!r}: status {row[2]!r}")
    if key is not None and row[1] != key:
        raise CorruptRecordError(
            f"checkpoint row {row[0]}/{storage_name(key)} holds key {row[1]!r}, not {key!r} "
            "(two keys share one storage_key)"
        )
    return StoredRecord(
        row[0], row[1], status, row[3], row[4], row[5], row[6], row[7] or 0,
        fence_base if row[8] is None else row[8], row[9], row[10], row[11], row[12], row[13], row[14],
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
        self._nowait_conn: sqlite3.Connection | None = None
        self._nowait_lock = threading.Lock()
        try:
            self._setup(busy_timeout_s)
            if path != ":memory:":  # (a second connection to :memory: would be another database)
                self._nowait_conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
                self._nowait_conn.execute("PRAGMA synchronous = NORMAL")
        except (OSError, sqlite3.Error) as e:
            self.close()
            raise BackendUnavailableError(f"sqlite backend: cannot use {path!r}: {e}") from None
        except BaseException:
            self.close()
            raise

    def _check_is_store(self) -> None:
        """Refuse, before changing anything (not even the journal mode), a database that is not a
        checkpoint store: other tables and no ``checkpoints``, or a ``checkpoints`` table without the
        columns every layout has (someone else's table of that name)."""
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "checkpoints" in tables:
            cols = {r[1] for r in self._conn.execute("PRAGMA table_info(checkpoints)")}
            missing = sorted(_CORE_COLUMNS - cols)
            if missing:
                raise BackendUnavailableError(
                    f"sqlite backend: {self.path!r} has a table 'checkpoints' that is not a checkpoint store's "
                    f"(no column {', '.join(missing)}); use another file"
                )
        elif tables - {"schema_migrations", "fence_floors"}:
            shown = ", ".join(sorted(tables)[:5])
            raise BackendUnavailableError(
                f"sqlite backend: {self.path!r} is not a checkpoint store (it holds the tables {shown}); "
                "use another file"
            )

    def _setup(self, busy_timeout_s: float) -> None:
        conn = self._conn
        self._check_is_store()
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
        for version, description, migrate in _MIGRATIONS:
            if version > current:
                migrate(conn)
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
        with self._lock:
            if self._closed:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: the client is closed")
            return self._transact(self._conn, namespace, key, decide)

    def _transact(
        self, conn: sqlite3.Connection, namespace: str, key: str, decide: Callable[[StoredRecord | None, int], Decision[T]]
    ) -> T:
        # The hot path: written out rather than through the context managers (they cost ~10%).
        sk = storage_name(key)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(_SELECT_FOR_UPDATE, (namespace, sk)).fetchone()
                floor, high = row[0] or 0, row[1] or 0
                current = None if row[2] is None else _record(row[2:], key, max(floor, high))
                # A fresh row starts above every fence the namespace handed out, not just above the
                # deleted ones: the original library's reset/gc delete rows without raising the floor.
                d = decide(current, max(floor, high))
                w = d.write
                if w is not None:
                    if current is None:
                        conn.execute(_INSERT, (sk, *w[:2], w.status.value, *w[3:]))
                    else:
                        conn.execute(_UPDATE, (key, w.status.value, *w[3:], namespace, sk))
                    if w.fence > high:
                        conn.execute(_RAISE_HIGH, (namespace, w.fence))
                elif d.delete and current is not None:
                    conn.execute(_RAISE_FLOOR, (namespace, current.fence, current.fence))
                    conn.execute(_DELETE, (namespace, sk))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            if conn is self._nowait_conn and _busy(e):
                raise WouldBlock from None
            raise BackendUnavailableError(f"sqlite backend {self.path!r}: cannot update {namespace}: {e}") from e
        return d.value

    def discard(self, namespace: str, key: str) -> bool:
        sk = storage_name(key)
        with self._use(f"cannot remove {namespace}/{sk}"), self._transaction() as conn:
            got = conn.execute("SELECT fence FROM checkpoints WHERE namespace = ? AND storage_key = ?",
                               (namespace, sk)).fetchone()
            if got is None:
                return False
            row = conn.execute(_FENCE_BASE, (namespace,)).fetchone()
            own = got[0] if isinstance(got[0], int) else 0
            base = max((row[0] or 0) if row else 0, own)
            conn.execute(_RAISE_FLOOR, (namespace, base, base))
            conn.execute(_DELETE, (namespace, sk))
            return True

    # -- without waiting: the async client's inline path ---------------------------------------

    def nowait(self) -> SqliteNowait | None:
        """A face of this backend whose calls never wait (for a lock, another process's write lock or a
        busy timeout): they raise ``WouldBlock`` instead, and the async client then runs the call in a
        worker thread. A WAL/NORMAL transaction needs no fsync, so an uncontended one (~25 us) runs on
        the event loop in less time than a hop to a thread and back costs. The trap: the commit that
        takes the WAL past its auto-checkpoint size (1,000 pages, a few hundred pairs) also runs the
        checkpoint, fsyncs included, so the loop pauses for a few ms that often."""
        return None if self._nowait_conn is None else SqliteNowait(self)

    def transact_nowait(self, namespace: str, key: str, decide: Callable[[StoredRecord | None, int], Decision[T]]) -> T:
        conn = self._nowait_conn
        if conn is None or not self._nowait_lock.acquire(blocking=False):
            raise WouldBlock
        try:
            if self._closed:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: the client is closed")
            return self._transact(conn, namespace, key, decide)
        finally:
            self._nowait_lock.release()

    def get_nowait(self, namespace: str, key: str) -> StoredRecord | None:
        conn = self._nowait_conn
        if conn is None or not self._nowait_lock.acquire(blocking=False):
            raise WouldBlock
        try:
            if self._closed:
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: the client is closed")
            try:
                return self._get(conn, namespace, key)
            except sqlite3.Error as e:
                if _busy(e):
                    raise WouldBlock from None
                raise BackendUnavailableError(f"sqlite backend {self.path!r}: cannot read {namespace}: {e}") from e
        finally:
            self._nowait_lock.release()

    def _fence_base(self, conn: sqlite3.Connection, namespace: str) -> int:
        row = conn.execute(_FENCE_BASE, (namespace,)).fetchone()
        return 0 if row is None else int(row[0])

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        with self._use(f"cannot read {namespace}") as conn:
            return self._get(conn, namespace, key)

    def _get(self, conn: sqlite3.Connection, namespace: str, key: str) -> StoredRecord | None:
        row = conn.execute(_SELECT_ONE, (namespace, storage_name(key))).fetchone()
        if row is None:
            return None
        return _record(row, key, self._fence_base(conn, namespace) if row[8] is None else 0)

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        records, unreadable = self.list_readable(namespace)
        if unreadable:
            raise CorruptRecordError(unreadable[0].error)
        return records

    def list_readable(self, namespace: str) -> tuple[builtins.list[StoredRecord], builtins.list[UnreadableRecord]]:
        with self._use(f"cannot list {namespace}") as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM checkpoints WHERE namespace = ? ORDER BY key", (namespace,)
            ).fetchall()
            base = self._fence_base(conn, namespace) if any(row[8] is None for row in rows) else 0
        records: builtins.list[StoredRecord] = []
        unreadable: builtins.list[UnreadableRecord] = []
        for row in rows:
            try:
                records.append(_record(row, None, base))
            except CorruptRecordError as e:
                unreadable.append(UnreadableRecord(namespace, row[1] if isinstance(row[1], str) else None, str(e)))
        return records, unreadable

    def namespaces(self) -> builtins.list[str]:
        with self._use("cannot list namespaces") as conn:
            rows = conn.execute("SELECT DISTINCT namespace FROM checkpoints ORDER BY namespace").fetchall()
        return [str(row[0]) for row in rows]

    def raise_floor(self, namespace: str, fence: int) -> None:
        with self._use(f"cannot raise the fence floor of {namespace}"), self._transaction() as conn:
            conn.execute(_RAISE_FLOOR, (namespace, fence, fence))

    def clean_debris(self) -> None:
        pass

    def close(self) -> None:
        with self._lock, self._nowait_lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                if self._nowait_conn is not None:
                    self._nowait_conn.close()


class SqliteNowait:
    """What ``SqliteBackend.nowait`` returns: ``transact`` and ``get`` that raise ``WouldBlock``
    rather than wait. Only the async client uses it, and only for single-record calls."""

    blocking = False

    def __init__(self, backend: SqliteBackend) -> None:
        self._backend = backend
        self.durability = backend.durability
        self.transact = backend.transact_nowait
        self.get = backend.get_nowait

    def discard(self, namespace: str, key: str) -> bool:
        """Rare (a record that no longer reads): the async client does it on a worker thread."""
        raise WouldBlock


def _busy(e: sqlite3.Error) -> bool:
    return getattr(e, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
