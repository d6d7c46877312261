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

Keys are ``bytea`` (UTF-8), since PostgreSQL text cannot hold NUL; they sort in code point order.
Durability is the server's (``synchronous_commit``; on by default: a reported change survives a crash).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from typing import Any

from mooncat_checkpoint import rules
from mooncat_checkpoint.backends.base import kind_result
from mooncat_checkpoint.errors import BackendUnavailableError, CheckpointError, CorruptRecordError
from mooncat_checkpoint.model import Checkpoint, CheckpointStatus, ClaimResult, GcResult
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.urls import redact, shown_url

__all__ = ["PostgresBackend", "TABLE"]

TABLE = "mooncat_checkpoints"
_CLAIM_ATTEMPTS = 5  # a claim that loses a race to a reset or an expiry looks again, at most this often

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
    PRIMARY KEY (namespace, key)
)"""

_COLS = (
    "namespace, key, status, owner_run_id, lease_until, lease_ms, lease_token, attempts, fence, fingerprint, "
    "created_at, updated_at, result, result_ref, error"
)
_C_COLS = ", ".join("c." + c.strip() for c in _COLS.split(","))
_NOW = "coalesce(%(now)s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
_EMPTY = (
    "status = NULL, owner_run_id = NULL, lease_until = NULL, lease_ms = NULL, lease_token = NULL, attempts = 0, "
    "fingerprint = NULL, result = NULL, result_ref = NULL, error = NULL, updated_at = t.now"
)

_CLAIM = f"""WITH t AS (SELECT {_NOW} AS now)
INSERT INTO {TABLE} AS c (namespace, key, status, owner_run_id, lease_until, lease_ms, lease_token, attempts, fence,
                          fingerprint, created_at, updated_at)
SELECT %(ns)s, %(key)s, 'claimed', %(owner)s::text, t.now + %(lease)s, %(lease)s, %(token)s, 1, 1, %(fp)s::text,
       t.now, t.now FROM t
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
RETURNING {_C_COLS}"""
_CURRENT = f"SELECT {_COLS}, {_NOW} FROM {TABLE} WHERE namespace = %(ns)s AND key = %(key)s AND status IS NOT NULL"
_TOUCH = f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET lease_until = t.now + coalesce(%(ext)s::bigint, c.lease_ms, 0), updated_at = t.now FROM t
WHERE c.namespace = %(ns)s AND c.key = %(key)s AND c.status = 'claimed' AND c.lease_token = %(token)s
RETURNING {_C_COLS}"""
_DONE = f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET status = 'done', lease_until = NULL, lease_ms = NULL, lease_token = NULL, error = NULL,
    result = %(result)s::text, result_ref = %(ref)s::text, updated_at = t.now FROM t
WHERE c.namespace = %(ns)s AND c.key = %(key)s AND c.status = 'claimed' AND c.lease_token = %(token)s
RETURNING {_C_COLS}"""
_FAIL = f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET status = 'failed', lease_until = NULL, lease_ms = NULL, lease_token = NULL,
    result = NULL, result_ref = NULL, error = %(error)s, updated_at = t.now FROM t
WHERE c.namespace = %(ns)s AND c.key = %(key)s AND c.status = 'claimed' AND c.lease_token = %(token)s
RETURNING {_C_COLS}"""
_RESET = f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET {_EMPTY} FROM t
WHERE c.namespace = %(ns)s AND c.key = %(key)s AND c.status IS NOT NULL
  AND (NOT %(if_expired)s OR (c.status = 'claimed' AND (c.lease_until IS NULL OR c.lease_until <= t.now)))
RETURNING 1"""
_GC = f"""WITH t AS (SELECT {_NOW} AS now)
UPDATE {TABLE} AS c SET {_EMPTY} FROM t
WHERE c.status IS NOT NULL
  AND ((c.status = 'claimed' AND t.now - c.lease_until >= coalesce(%(older)s::bigint, 0))
       OR (%(prune)s::bigint IS NOT NULL AND c.status <> 'claimed' AND t.now - c.updated_at >= %(prune)s::bigint))
RETURNING 1"""
_GET = f"SELECT {_COLS} FROM {TABLE} WHERE namespace = %(ns)s AND key = %(key)s AND status IS NOT NULL"
_LIST = f"SELECT {_COLS} FROM {TABLE} WHERE namespace = %(ns)s AND status IS NOT NULL ORDER BY key"

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
        self._errors: tuple[type[BaseException], ...] = (psycopg.Error,)
        self._lock = threading.Lock()
        self._connect: Callable[[], Any] = lambda: psycopg.connect(url, autocommit=True, connect_timeout=5)
        self._closing = False
        try:
            self._conn = self._connect()
        except psycopg.Error as e:
            raise BackendUnavailableError(f"postgresql backend: cannot reach {shown_url(url)}: {redact(_first_line(e), url)}") from None
        try:
            with self._conn.transaction():
                # Concurrent CREATE TABLE IF NOT EXISTS can still collide: one opener at a time.
                self._conn.execute("SELECT pg_advisory_xact_lock(7243010411)")
                self._conn.execute(_SCHEMA)
        except psycopg.Error as e:
            self._conn.close()
            raise BackendUnavailableError(f"postgresql backend {shown_url(url)}: cannot create {TABLE}: {redact(_first_line(e), url)}") from None

    def _run(self, what: str, sql: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        """One statement. A connection found lost (the server restarted, a proxy dropped it) fails
        the call that found it, whose statement may or may not have run; the next call connects
        again, as redis-py does."""
        with self._lock:
            try:
                if self._conn.broken:
                    self._conn.close()
                if self._conn.closed and not self._closing:
                    self._conn = self._connect()
                return self._conn.execute(sql, params).fetchall()
            except CheckpointError:
                raise
            except self._errors as e:
                raise BackendUnavailableError(f"postgresql backend {shown_url(self.url)}: {what}: {redact(_first_line(e), self.url)}") from e

    def _current(self, namespace: str, key: bytes, now_ms: int | None) -> tuple[StoredRecord | None, int]:
        rows = self._run(f"cannot read {namespace}", _CURRENT, {"ns": namespace, "key": key, "now": now_ms})
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
        k = key.encode("utf-8")
        params = {"ns": namespace, "key": k, "now": now_ms, "owner": owner_run_id, "lease": lease_ms,
                  "fp": fingerprint, "token": token}
        current: StoredRecord | None = None
        for _ in range(_CLAIM_ATTEMPTS):
            rows = self._run(f"cannot claim in {namespace}", _CLAIM, params)
            if rows:
                return kind_result("claimed", _record(rows[0]), token)
            current, now = self._current(namespace, k, now_ms)
            if current is None:
                continue  # reset between the two statements: claim again
            if fingerprint is not None and current.fingerprint is not None and fingerprint != current.fingerprint:
                raise rules.fingerprint_mismatch(current, namespace, key, fingerprint)
            if current.status is not CheckpointStatus.CLAIMED or not current.expired(now):
                return kind_result(current.status.value if current.status is not CheckpointStatus.CLAIMED else "busy",
                                   current, token)
        assert current is not None
        return kind_result("busy", current, token)

    def _change(self, what: str, sql: str, namespace: str, key: str, params: dict[str, Any]) -> StoredRecord:
        k = key.encode("utf-8")
        rows = self._run(f"cannot {what} in {namespace}", sql, {"ns": namespace, "key": k, **params})
        if rows:
            return _record(rows[0])
        raise rules.lease_lost(self._current(namespace, k, None)[0], namespace, key)

    def touch(self, namespace: str, key: str, now_ms: int | None, token: str, extend_ms: int | None) -> Checkpoint | None:
        k = key.encode("utf-8")
        rows = self._run(f"cannot touch in {namespace}", _TOUCH,
                         {"ns": namespace, "key": k, "now": now_ms, "token": token, "ext": extend_ms})
        return _record(rows[0]).public() if rows else None  # not claimed with this token

    def done(
        self, namespace: str, key: str, now_ms: int | None, token: str, result_json: str | None, result_ref: str | None
    ) -> Checkpoint:
        return self._change("mark done", _DONE, namespace, key,
                            {"now": now_ms, "token": token, "result": result_json, "ref": result_ref}).public()

    def fail(self, namespace: str, key: str, now_ms: int | None, token: str, error: str) -> Checkpoint:
        return self._change("mark failed", _FAIL, namespace, key, {"now": now_ms, "token": token, "error": error}).public()

    def reset(self, namespace: str, key: str, now_ms: int | None, if_expired: bool) -> bool:
        rows = self._run(f"cannot reset in {namespace}", _RESET,
                         {"ns": namespace, "key": key.encode("utf-8"), "now": now_ms, "if_expired": if_expired})
        return bool(rows)

    def gc(self, now_ms: int | None, older_than_ms: int | None, prune_finished_ms: int | None) -> GcResult:
        """One statement over typed columns: every row reads (the status is CHECKed), so none is skipped."""
        return GcResult(len(self._run("cannot collect", _GC,
                                      {"now": now_ms, "older": older_than_ms, "prune": prune_finished_ms})))

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        rows = self._run(f"cannot read {namespace}", _GET, {"ns": namespace, "key": key.encode("utf-8")})
        return _record(rows[0]) if rows else None

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        return [_record(row) for row in self._run(f"cannot list {namespace}", _LIST, {"ns": namespace})]

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._conn.close()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
