"""``postgresql://user@host:port/db``: a store shared by many hosts, on the database's clock (psycopg 3, imported lazily).

One table, one statement per change (autocommit, so each is its own transaction):

* ``claim`` is ``INSERT ... ON CONFLICT (namespace, key) DO UPDATE ... WHERE <claimable>`` (``rules``:
  free, or a claim whose lease ended or that names none, ``lease_until IS NULL``): PostgreSQL
  locks the conflicting row and re-checks the WHERE on its latest version, so of many concurrent
  claims exactly one takes a free or expired record; the others read the record and report it.
* ``touch``/``done``/``fail`` are ``UPDATE ... WHERE status = 'claimed' AND lease_token = $token``.
* Time is ``clock_timestamp()`` of the server (epoch ms), so hosts whose clocks disagree still agree
  on leases.
* Fences: the row is the key's counter (``fence + 1`` on every successful claim). ``reset`` and ``gc``
  do not delete the row but empty it (``status IS NULL``: no record), so the counter survives them.
  A key that was reset keeps a small row; that is the price of fences that never repeat.

Keys are ``bytea`` (UTF-8), since PostgreSQL text cannot hold NUL; they sort in code point order. A
key is stored under its own bytes whenever the primary key's btree can hold them (a row of about 2,700
bytes, after compression): every key of at most ``ALWAYS_PLAIN`` bytes, and longer ones that compress
(every key earlier releases could store). A key the index cannot hold (an insert fails with
``program_limit_exceeded``) is stored under ``U+DFFF "sha256:" <64 hex>`` in UTF-8 (its digest behind a lone
surrogate's bytes, which no key's UTF-8 contains, so no other key has that name; an earlier release
lists such a row under that name), and the key itself in ``full_key``. Statements on a key longer than
``ALWAYS_PLAIN`` look under both names; its claim takes the digest's row if there is one, so a key
never has two. ``full_key`` is added to a table of an earlier release when a client opens it (a
catalog-only ``ALTER TABLE``; its statements name their columns, so they work on as before). A client
that cannot add it (not the table's owner) works on without it and refuses such keys with
``InvalidKeyError`` until the column is there.

A call whose server does not answer within ``socket_timeout`` seconds (``?socket_timeout=S`` in the
URL, default 30: libpq has no read timeout, and ``statement_timeout`` is the server's, of no use when
the server is stopped or cut off) fails with ``BackendUnavailableError``: a watchdog thread shuts the
connection's socket, the next call connects again (``connect_timeout``, default 5). A change whose
answer was lost may or may not have been applied.

Durability is the server's (``synchronous_commit``; on by default: a reported change survives a crash).
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mooncat_checkpoint import rules
from mooncat_checkpoint.backends.base import kind_result
from mooncat_checkpoint.errors import (
    BackendUnavailableError,
    CheckpointError,
    CorruptRecordError,
    InvalidKeyError,
)
from mooncat_checkpoint.model import Checkpoint, CheckpointStatus, ClaimResult, GcResult
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.urls import redact, seconds_option, shown_url, url_option

__all__ = ["PostgresBackend", "TABLE", "ALWAYS_PLAIN", "DEFAULT_SOCKET_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S"]

log = logging.getLogger(__name__)

TABLE = "mooncat_checkpoints"
ALWAYS_PLAIN = 1000  # bytes: a key this long always fits a btree row (even of 4 kB pages) under its own bytes
DEFAULT_SOCKET_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 5
_T = TypeVar("_T")
_CLAIM_ATTEMPTS = 5  # a claim that loses a race to a reset or an expiry looks again, at most this often
_DIGEST_MARK = "\udfff".encode("utf-8", "surrogatepass")
_MIGRATION_LOCK_TIMEOUT = "5s"  # ALTER TABLE waits this long for the table, holding up statements queued behind it

_SCHEMA = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    namespace    text    NOT NULL,
    key          bytea   NOT NULL,
    status       text    CHECK (status IN ('claimed', 'done', 'failed')),
    owner_run_id text,
    lease_until  bigint,
    lease_ms     bigint,
    lease_token  text,
    attempts     integer NOT NULL DEFAULT 0,
    fence        bigint  NOT NULL DEFAULT 0,
    fingerprint  text,
    created_at   bigint,
    updated_at   bigint,
    result       text,
    result_ref   text,
    error        text,
    full_key     bytea,
    PRIMARY KEY (namespace, key)
)"""
_HAS_FULL_KEY = "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%(table)s) AND attname = 'full_key' AND NOT attisdropped"
_ADD_FULL_KEY = f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS full_key bytea"

_FIELDS = (
    "status", "owner_run_id", "lease_until", "lease_ms", "lease_token", "attempts", "fence", "fingerprint", "created_at",
    "updated_at", "result", "result_ref", "error",
)
_NOW = "coalesce(%(now)s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
_EMPTY = (
    "status = NULL, owner_run_id = NULL, lease_until = NULL, lease_ms = NULL, lease_token = NULL, attempts = 0, "
    "fingerprint = NULL, result = NULL, result_ref = NULL, error = NULL, updated_at = t.now"
)
# The key's row under either of its names (``hkey`` is NULL for a key of at most ALWAYS_PLAIN bytes).
_MATCH = "c.namespace = %(ns)s AND c.key IN (%(key)s::bytea, %(hkey)s::bytea)"
_MATCH_PLAIN = "c.namespace = %(ns)s AND c.key = %(key)s::bytea"  # a table without full_key has no digest rows


@dataclass(frozen=True, slots=True)
class _Statements:
    claim: str
    current: str
    touch: str
    done: str
    fail: str
    reset: str
    gc: str
    get: str
    list: str


def _statements(full_key: bool) -> _Statements:
    """The statements on a table with ``full_key`` (keys under their digest), or on one without it."""
    key = "coalesce(c.full_key, c.key)" if full_key else "c.key"
    match = _MATCH if full_key else _MATCH_PLAIN

    # The claim's row: the digest's if it has one or ``digest`` says the key's own bytes do not fit.
    target = (
        f"SELECT CASE WHEN %(digest)s OR EXISTS (SELECT 1 FROM {TABLE} WHERE namespace = %(ns)s AND key = %(hkey)s::bytea)"
        " THEN %(hkey)s::bytea ELSE %(key)s::bytea END AS key"
        if full_key else "SELECT %(key)s::bytea AS key"
    )
    full_col, full_val = (", full_key", ", CASE WHEN k.key = %(key)s::bytea THEN NULL ELSE %(key)s::bytea END") if full_key else ("", "")
    c_cols = ", ".join(["c.namespace", key, *("c." + f for f in _FIELDS)])
    return _Statements(
        claim=f"""WITH t AS (SELECT {_NOW} AS now), k AS ({target})
INSERT INTO {TABLE} AS c (namespace, key{full_col}, status, owner_run_id, lease_until, lease_ms, lease_token, attempts,
                          fence, fingerprint, created_at, updated_at)
SELECT %(ns)s, k.key{full_val}, 'claimed', %(owner)s::text, t.now + %(lease)s, %(lease)s, %(token)s, 1, 1,
       %(fp)s::text, t.now, t.now FROM t, k
ON CONFLICT (namespace, key) DO UPDATE SET
    status = 'claimed', owner_run_id = excluded.owner_run_id, lease_until = excluded.lease_until,
    lease_ms = excluded.lease_ms, lease_token = excluded.lease_token,
    attempts = CASE WHEN c.status IS NULL THEN 1 ELSE c.attempts + 1 END,
    fence = c.fence + 1,
    fingerprint = CASE WHEN c.status IS NULL THEN excluded.fingerprint
                       ELSE coalesce(excluded.fingerprint, c.fingerprint) END,
    created_at = CASE WHEN c.status IS NULL THEN excluded.created_at ELSE c.created_at END,
    updated_at = excluded.updated_at, result = NULL, result_ref = NULL, error = NULL
WHERE c.status IS NULL
   OR (c.status = 'claimed' AND (c.lease_until IS NULL OR c.lease_until <= excluded.updated_at)
       AND (excluded.fingerprint IS NULL OR c.fingerprint IS NULL OR c.fingerprint = excluded.fingerprint))
RETURNING {c_cols}""",
        current=f"SELECT {c_cols}, {_NOW} FROM {TABLE} AS c WHERE {match} AND c.status IS NOT NULL",
        touch=f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET lease_until = t.now + coalesce(%(ext)s::bigint, c.lease_ms, 0), updated_at = t.now FROM t
WHERE {match} AND c.status = 'claimed' AND c.lease_token = %(token)s
RETURNING {c_cols}""",
        done=f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET status = 'done', lease_until = NULL, lease_ms = NULL, lease_token = NULL, error = NULL,
    result = %(result)s::text, result_ref = %(ref)s::text, updated_at = t.now FROM t
WHERE {match} AND c.status = 'claimed' AND c.lease_token = %(token)s
RETURNING {c_cols}""",
        fail=f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET status = 'failed', lease_until = NULL, lease_ms = NULL, lease_token = NULL,
    result = NULL, result_ref = NULL, error = %(error)s, updated_at = t.now FROM t
WHERE {match} AND c.status = 'claimed' AND c.lease_token = %(token)s
RETURNING {c_cols}""",
        reset=f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET {_EMPTY} FROM t
WHERE {match} AND c.status IS NOT NULL
  AND (NOT %(if_expired)s OR (c.status = 'claimed' AND (c.lease_until IS NULL OR c.lease_until <= t.now)))
RETURNING 1""",
        gc=f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET {_EMPTY} FROM t
WHERE c.status IS NOT NULL
  AND ((c.status = 'claimed' AND t.now - c.lease_until >= coalesce(%(older)s::bigint, 0))
       OR (%(prune)s::bigint IS NOT NULL AND c.status <> 'claimed' AND t.now - c.updated_at >= %(prune)s::bigint))
RETURNING 1""",
        get=f"SELECT {c_cols} FROM {TABLE} AS c WHERE {match} AND c.status IS NOT NULL",
        list=f"SELECT {c_cols} FROM {TABLE} AS c WHERE c.namespace = %(ns)s AND c.status IS NOT NULL ORDER BY {key}",
    )


_SQL = {True: _statements(True), False: _statements(False)}


def _names(key: str) -> dict[str, bytes | None]:
    """The key's own bytes and, for a key over ALWAYS_PLAIN bytes, the name of its digest."""
    k = key.encode("utf-8")
    if len(k) <= ALWAYS_PLAIN:
        return {"key": k, "hkey": None}
    return {"key": k, "hkey": _DIGEST_MARK + b"sha256:" + hashlib.sha256(k).hexdigest().encode("ascii")}


_STATUS = {s.value: s for s in CheckpointStatus}


def _record(row: tuple[Any, ...]) -> StoredRecord:
    status = _STATUS.get(row[2])
    key = bytes(row[1]).decode("utf-8", "surrogatepass")
    if status is None:
        raise CorruptRecordError(f"unreadable checkpoint row {row[0]}/{key!r}: status {row[2]!r}")
    return StoredRecord(
        row[0], key, status, row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10], row[11], row[12],
        row[13], row[14],
    )


class _KeyDoesNotFit(Exception):
    """Internal: an insert met ``program_limit_exceeded``, a key over what a btree row holds."""


class _NoAnswer(Exception):
    """Internal: the watchdog shut the socket of a statement the server had not answered in time."""


class _Watchdog:
    """Bounds a blocking psycopg call: ``arm(fd)`` before it, ``disarm()`` after (True: it fired). At the
    deadline a thread shuts the socket down, so libpq's wait for an answer ends with an error at once;
    a stopped or cut-off server can do nothing else to end it. The thread starts on the first ``arm``
    and is woken only when it is idle: in a run of calls it wakes once per ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._cond = threading.Condition(threading.Lock())
        self._fd = -1  # the armed socket, -1 when none
        self._deadline = 0.0
        self._fired = False
        self._idle = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def arm(self, fd: int) -> None:
        with self._cond:
            self._fd, self._deadline, self._fired = fd, time.monotonic() + self.seconds, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="mooncat-postgres-watchdog", daemon=True)
                self._thread.start()
            elif self._idle:
                self._cond.notify()

    def disarm(self) -> bool:
        with self._cond:
            self._fd = -1
            return self._fired

    def close(self) -> None:
        with self._cond:
            self._closed, self._fd = True, -1
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if self._fd < 0:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                elif (left := self._deadline - time.monotonic()) > 0:
                    self._cond.wait(left)  # a later arm moves the deadline: looked at again on waking
                else:
                    _shut(self._fd)
                    self._fired, self._fd = True, -1


def _shut(fd: int) -> None:
    """Shut a connection's socket down (both ways) without closing the descriptor, which libpq owns."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already gone
    finally:
        sock.close()


class PostgresBackend:
    blocking = True
    server_side = True
    durability = "the PostgreSQL server's (synchronous_commit); each change is one atomic statement"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise BackendUnavailableError(
                f"{shown_url(url)}: the postgresql backend needs psycopg 3: "
                "pip install 'molens[postgresql]' (or: pip install 'psycopg[binary]')"
            ) from None
        self.url = url
        driver_url, timeout = url_option(url, "socket_timeout")  # ours: libpq would refuse it
        self.socket_timeout_s = seconds_option(url, "socket_timeout", timeout, DEFAULT_SOCKET_TIMEOUT_S)
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error,)
        self._lock = threading.Lock()
        self._watchdog = _Watchdog(self.socket_timeout_s)
        self._closing = False
        connect_timeout = url_option(url, "connect_timeout")[1]  # libpq's: 0 would mean "no limit"
        seconds_option(url, "connect_timeout", connect_timeout, DEFAULT_CONNECT_TIMEOUT_S)
        extra: dict[str, Any] = {} if connect_timeout is not None else {"connect_timeout": DEFAULT_CONNECT_TIMEOUT_S}
        self._connect: Callable[[], Any] = lambda: psycopg.connect(driver_url, autocommit=True, **extra)
        try:
            self._conn = self._connect()
        except psycopg.Error as e:
            raise BackendUnavailableError(f"postgresql backend: cannot reach {shown_url(url)}: {redact(_first_line(e), url)}") from None
        try:
            self.full_key = self._answered(self._open_table)
        except (psycopg.Error, _NoAnswer) as e:
            self._conn.close()
            self._watchdog.close()
            reason = self._no_answer() if isinstance(e, _NoAnswer) else redact(_first_line(e), url)
            raise BackendUnavailableError(f"postgresql backend {shown_url(url)}: cannot create {TABLE}: {reason}") from None
        self._sql = _SQL[self.full_key]

    def _open_table(self) -> bool:
        """Create the table, or add ``full_key`` to an earlier release's; whether it has ``full_key``."""
        import psycopg

        conn = self._conn
        with conn.transaction():
            # Concurrent CREATE TABLE IF NOT EXISTS can still collide: one opener at a time.
            conn.execute("SELECT pg_advisory_xact_lock(7243010411)")
            conn.execute(_SCHEMA)
            if conn.execute(_HAS_FULL_KEY, {"table": TABLE}).fetchone() is not None:
                return True  # no ALTER, so no lock on the table, when there is nothing to do
            try:
                with conn.transaction():
                    conn.execute(f"SET LOCAL lock_timeout = '{_MIGRATION_LOCK_TIMEOUT}'")
                    conn.execute(_ADD_FULL_KEY)
            except (psycopg.errors.InsufficientPrivilege, psycopg.errors.LockNotAvailable) as e:
                log.warning("table=%s full_key=missing reason=%r: keys over what its index holds are refused",
                            TABLE, _first_line(e))
                return False
            return True

    def _answered(self, call: Callable[[], _T]) -> _T:
        """``call()`` on the connection, bounded by ``socket_timeout``: ``_NoAnswer`` when the watchdog cut it."""
        self._watchdog.arm(self._conn.fileno())
        try:
            result = call()
        except self._errors as e:
            if self._watchdog.disarm():
                raise _NoAnswer() from e
            raise
        except BaseException:
            self._watchdog.disarm()
            raise
        if self._watchdog.disarm():
            self._conn.close()  # answered just as the time ran out: its socket is shut, connect again next time
        return result

    def _no_answer(self) -> str:
        return (f"no answer within {self.socket_timeout_s:g} s (socket_timeout): the server is stopped or cut off; "
                "a change the call asked for may or may not have been applied")

    def _run(
        self, what: str, sql: str, params: dict[str, Any], *, inserts_key: bool = False
    ) -> builtins.list[tuple[Any, ...]]:
        """One statement, bounded by ``socket_timeout``. A connection found lost (the server restarted, a
        proxy dropped it) or that got no answer in time fails the call, whose statement may or may not
        have run; the next call connects again, as redis-py does."""
        with self._lock:
            try:
                if self._conn.broken:
                    self._conn.close()
                if self._conn.closed and not self._closing:
                    self._conn = self._connect()
                return self._answered(lambda: self._conn.execute(sql, params).fetchall())
            except CheckpointError:
                raise
            except _NoAnswer as e:
                raise BackendUnavailableError(f"postgresql backend {shown_url(self.url)}: {what}: {self._no_answer()}") from e
            except self._errors as e:
                if inserts_key and getattr(e, "sqlstate", None) == "54000":  # program_limit_exceeded
                    raise _KeyDoesNotFit(_first_line(e)) from e
                raise BackendUnavailableError(f"postgresql backend {shown_url(self.url)}: {what}: {redact(_first_line(e), self.url)}") from e

    def _current(self, namespace: str, names: dict[str, bytes | None], now_ms: int | None) -> tuple[StoredRecord | None, int]:
        rows = self._run(f"cannot read {namespace}", self._sql.current, {"ns": namespace, **names, "now": now_ms})
        if not rows:
            return None, 0
        return _record(rows[0]), int(rows[0][15])

    # -- ServerBackend -----------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self._run("cannot read the clock", f"SELECT {_NOW}", {"now": None})[0][0])

    def claim(
        self, namespace: str, key: str, now_ms: int | None, owner_run_id: str | None, lease_ms: int,
        fingerprint: str | None, token: str,
    ) -> ClaimResult:
        names = _names(key)
        params = {"ns": namespace, **names, "digest": False, "now": now_ms, "owner": owner_run_id, "lease": lease_ms,
                  "fp": fingerprint, "token": token}
        current: StoredRecord | None = None
        for _ in range(_CLAIM_ATTEMPTS):
            rows = self._claim_rows(namespace, params)
            if rows:
                return kind_result("claimed", _record(rows[0]), token)
            current, now = self._current(namespace, names, now_ms)
            if current is None:
                continue  # reset between the two statements: claim again
            if fingerprint is not None and current.fingerprint is not None and fingerprint != current.fingerprint:
                raise rules.fingerprint_mismatch(current, namespace, key, fingerprint)
            if current.status is not CheckpointStatus.CLAIMED or not current.expired(now):
                return kind_result(current.status.value if current.status is not CheckpointStatus.CLAIMED else "busy",
                                   current, token)
        assert current is not None
        return kind_result("busy", current, token)

    def _claim_rows(self, namespace: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        """The claim statement, under the key's own bytes, else (they do not fit the index) its digest."""
        what = f"cannot claim in {namespace}"
        try:
            return self._run(what, self._sql.claim, params, inserts_key=True)
        except _KeyDoesNotFit as e:
            size = len(params["key"])
            if params["hkey"] is None:
                raise InvalidKeyError(f"a key of {size} bytes does not fit {TABLE}'s index ({e})") from None
            if not self.full_key and not self._found_full_key():
                raise InvalidKeyError(
                    f"a key of {size} bytes does not fit {TABLE}'s index ({e}), and the table has no full_key column to "
                    f"keep it under its digest: its owner can add it (ALTER TABLE {TABLE} ADD COLUMN full_key bytea)"
                ) from None
        params["digest"] = True  # and so for the claim's further attempts
        return self._run(what, self._sql.claim, params)

    def _found_full_key(self) -> bool:
        """Whether ``full_key`` has been added since this client opened the table (its owner ran the
        ALTER TABLE); if so, this client keeps such keys under their digest from now on too."""
        if self._run("cannot read the table's columns", _HAS_FULL_KEY, {"table": TABLE}):
            self.full_key, self._sql = True, _SQL[True]
        return self.full_key

    def _change(self, what: str, sql: str, namespace: str, key: str, params: dict[str, Any]) -> StoredRecord:
        names = _names(key)
        rows = self._run(f"cannot {what} in {namespace}", sql, {"ns": namespace, **names, **params})
        if rows:
            return _record(rows[0])
        raise rules.lease_lost(self._current(namespace, names, None)[0], namespace, key)

    def touch(self, namespace: str, key: str, now_ms: int | None, token: str, extend_ms: int | None) -> Checkpoint | None:
        rows = self._run(f"cannot touch in {namespace}", self._sql.touch,
                         {"ns": namespace, **_names(key), "now": now_ms, "token": token, "ext": extend_ms})
        return _record(rows[0]).public() if rows else None  # not claimed with this token

    def done(
        self, namespace: str, key: str, now_ms: int | None, token: str, result_json: str | None, result_ref: str | None
    ) -> Checkpoint:
        return self._change("mark done", self._sql.done, namespace, key,
                            {"now": now_ms, "token": token, "result": result_json, "ref": result_ref}).public()

    def fail(self, namespace: str, key: str, now_ms: int | None, token: str, error: str) -> Checkpoint:
        return self._change("mark failed", self._sql.fail, namespace, key,
                            {"now": now_ms, "token": token, "error": error}).public()

    def reset(self, namespace: str, key: str, now_ms: int | None, if_expired: bool) -> bool:
        rows = self._run(f"cannot reset in {namespace}", self._sql.reset,
                         {"ns": namespace, **_names(key), "now": now_ms, "if_expired": if_expired})
        return bool(rows)

    def gc(self, now_ms: int | None, older_than_ms: int | None, prune_finished_ms: int | None) -> GcResult:
        """One statement over typed columns: every row reads (the status is CHECKed), so none is skipped."""
        return GcResult(len(self._run("cannot collect", self._sql.gc,
                                      {"now": now_ms, "older": older_than_ms, "prune": prune_finished_ms})))

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        rows = self._run(f"cannot read {namespace}", self._sql.get, {"ns": namespace, **_names(key)})
        return _record(rows[0]) if rows else None

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        return [_record(row) for row in self._run(f"cannot list {namespace}", self._sql.list, {"ns": namespace})]

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._conn.close()
        self._watchdog.close()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
