"""Per-node execution history and callback URL latency in SQLite (WAL) (docs/architecture.md#state-machine).

Every node writes it while applying committed entries, one transaction per applied batch
(:meth:`History.apply`), so the history is the same on every replica up to trimming. Bounds:

- at most ``max_records_per_task`` execution rows per task: the oldest rows of a task are trimmed
  in the same transaction that inserts the new ones;
- ``url_latency`` keeps a log-scale histogram per (callback URL, minute): ``bin = ceil(log(ms) /
  log(1.05))``, so percentiles are exact to within 5 % and the table grows with distinct URLs and
  minutes, not with fires. The URL key drops the query string and fragment (a per-task query
  string must not create a row per task). Buckets older than ``latency_retention_ms`` are dropped.

The history remembers the last Raft entry index it holds (``hmeta``): the store commits the history
transaction just before its lmdb transaction, and a batch replayed after a crash between the two
skips the entries already recorded, so rows are never duplicated. Durability is
``synchronous=NORMAL``: a power loss may drop the last history transaction (never the task state).

Queries (any thread, each on its own read connection): per-task and global listings with filters
(task, result, time range) and cursor pagination (newest first, the cursor is the last row id), URL
latency percentiles p50/p90/p99 overall and per time bucket (trend).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from molens.model import Execution, ExecutionResult, FireKind

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    fire_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    result TEXT NOT NULL,
    status_code INTEGER,
    latency_ms INTEGER,
    worker TEXT NOT NULL,
    url TEXT NOT NULL,
    scene TEXT NOT NULL,
    fired_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    response_head TEXT
);
CREATE INDEX IF NOT EXISTS executions_task ON executions (task_id, id);
CREATE INDEX IF NOT EXISTS executions_finished ON executions (finished_ms);
CREATE TABLE IF NOT EXISTS url_latency (
    url TEXT NOT NULL,
    bucket_ms INTEGER NOT NULL,
    bin INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (url, bucket_ms, bin)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS url_latency_bucket ON url_latency (bucket_ms);
CREATE TABLE IF NOT EXISTS hmeta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
"""

_COLS = (
    "id, task_id, fire_id, seq, attempt, kind, result, status_code, latency_ms, worker, url, scene, "
    "fired_ms, finished_ms, response_head"
)
_LOG_BASE = math.log(1.05)
LATENCY_BUCKET_MS = 60_000
_TRIM_CACHE_MAX = 200_000
_COUNT_CHUNK = 500
"""Task ids per row-count query of :meth:`History._trim` (below SQLite's 999 bound parameters)."""


class HistoryWrites(Protocol):
    """What :meth:`History.apply` needs from the machine's writes of one entry."""

    @property
    def executions(self) -> list[Execution]: ...
    @property
    def history_deletes(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Execution]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class UrlStats:
    url: str
    count: int
    p50_ms: int
    p90_ms: int
    p99_ms: int


@dataclass(frozen=True, slots=True)
class TrendPoint:
    bucket_ms: int
    count: int
    p50_ms: int
    p90_ms: int
    p99_ms: int


def latency_bin(ms: int) -> int:
    """Histogram bin of a latency: 0 for <= 1 ms, else ceil(log_1.05(ms))."""
    return 0 if ms <= 1 else math.ceil(math.log(ms) / _LOG_BASE - 1e-9)


def bin_value(b: int) -> int:
    """The latency a bin stands for (its upper bound, so percentiles never under-report)."""
    return 1 if b <= 0 else round(math.exp(b * _LOG_BASE))


@functools.lru_cache(maxsize=4096)
def url_key(url: str) -> str:
    """``scheme://host[:port]/path`` of a callback URL (no query, no fragment, no credentials)."""
    try:
        p = urlsplit(url)
        host = p.hostname or ""
        port = f":{p.port}" if p.port else ""
    except ValueError:
        return url[:256]
    if ":" in host:
        host = f"[{host}]"
    return f"{p.scheme}://{host}{port}{p.path or '/'}"[:512]


def _percentiles(hist: Counter[int]) -> tuple[int, int, int, int]:
    total = sum(hist.values())
    if total == 0:
        return 0, 0, 0, 0
    out = []
    bins = sorted(hist)
    for q in (0.50, 0.90, 0.99):
        rank = max(1, math.ceil(q * total))
        acc = 0
        for b in bins:
            acc += hist[b]
            if acc >= rank:
                out.append(bin_value(b))
                break
    return total, out[0], out[1], out[2]


class History:
    """SQLite history database of one node (``data_dir/history.sqlite``)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_records_per_task: int = 100,
        latency_retention_ms: int = 7 * 86_400_000,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_records_per_task = max_records_per_task
        self.latency_retention_ms = latency_retention_ms
        self._db = self._connect()
        self._db.executescript(_SCHEMA)
        if "log_index" not in {r[1] for r in self._db.execute("PRAGMA table_info(executions)")}:
            # the entry that wrote each row: a restore from an older snapshot drops the rows written
            # after it, which the replay writes again (rows of an earlier release have none: kept)
            self._db.execute("ALTER TABLE executions ADD COLUMN log_index INTEGER")
        row = self._db.execute("SELECT v FROM hmeta WHERE k = 'applied_index'").fetchone()
        self._applied = int(row[0]) if row else 0
        self._counts: dict[str, int] = {}
        self._local = threading.local()
        self._oldest_bucket = 0

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=OFF")
        return db

    def _reader(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            db.execute("PRAGMA query_only=1")
            self._local.db = db
        return db

    def applied_index(self) -> int:
        return self._applied

    # ------------------------------------------------------------------ writes (apply thread)

    def apply(self, batch: Iterable[tuple[int, HistoryWrites]]) -> None:
        """Record the executions and deletions of a batch of entries in one transaction."""
        fresh = [(i, w) for i, w in batch if i > self._applied]
        if not fresh:
            return
        db = self._db
        counts = self._counts
        db.execute("BEGIN IMMEDIATE")
        try:
            pending: list[tuple[int, Execution]] = []
            for i, w in fresh:
                if w.history_deletes:
                    self._insert(db, pending)  # rows before a deletion belong before it
                    pending = []
                    for tid in w.history_deletes:
                        db.execute("DELETE FROM executions WHERE task_id = ?", (tid,))
                        counts.pop(tid, None)
                pending.extend((i, e) for e in w.executions)
            self._insert(db, pending)
            db.execute(
                "INSERT INTO hmeta (k, v) VALUES ('applied_index', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                (fresh[-1][0],),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            self._counts.clear()
            raise
        self._applied = fresh[-1][0]

    def _insert(self, db: sqlite3.Connection, rows: list[tuple[int, Execution]]) -> None:
        """``rows``: each execution with the index of the entry that wrote it."""
        if not rows:
            return
        execs = [e for _, e in rows]
        db.executemany(
            "INSERT INTO executions (task_id, fire_id, seq, attempt, kind, result, status_code, "
            "latency_ms, worker, url, scene, fired_ms, finished_ms, response_head, log_index) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    e.task_id,
                    e.fire_id,
                    e.seq,
                    e.attempt,
                    e.kind.value,
                    e.result.value,
                    e.status_code,
                    e.latency_ms,
                    e.worker,
                    e.url,
                    e.scene,
                    e.fired_ms,
                    e.finished_ms,
                    e.response_head,
                    i,
                )
                for i, e in rows
            ],
        )
        self._trim(db, Counter(e.task_id for e in execs))
        self._latency(db, execs)

    def _trim(self, db: sqlite3.Connection, added: Counter[str]) -> None:
        cap = self.max_records_per_task
        counts = self._counts
        if len(counts) > _TRIM_CACHE_MAX:
            counts.clear()
        # rows of the tasks not in the cache, the ones just inserted included: one query per
        # _COUNT_CHUNK tasks (a query per task cost ~15 us, most of a fire's history cost)
        unknown = [tid for tid in added if tid not in counts]
        stored: dict[str, int] = {}
        for i in range(0, len(unknown), _COUNT_CHUNK):
            part = unknown[i : i + _COUNT_CHUNK]
            marks = ",".join("?" * len(part))
            stored.update(db.execute(
                f"SELECT task_id, COUNT(*) FROM executions WHERE task_id IN ({marks}) GROUP BY task_id", part
            ).fetchall())
        for tid, n in added.items():
            c = counts.get(tid)
            c = stored.get(tid, 0) if c is None else c + n
            if c > cap:
                db.execute(
                    "DELETE FROM executions WHERE id IN "
                    "(SELECT id FROM executions WHERE task_id = ? ORDER BY id LIMIT ?)",
                    (tid, c - cap),
                )
                c = cap
            counts[tid] = c

    def _latency(self, db: sqlite3.Connection, execs: list[Execution]) -> None:
        agg: Counter[tuple[str, int, int]] = Counter()
        newest = 0
        for e in execs:
            if e.latency_ms is None or e.kind is not FireKind.CALLBACK:
                continue
            bucket = e.finished_ms - e.finished_ms % LATENCY_BUCKET_MS
            newest = max(newest, bucket)
            agg[(url_key(e.url), bucket, latency_bin(e.latency_ms))] += 1
        if not agg:
            return
        db.executemany(
            "INSERT INTO url_latency (url, bucket_ms, bin, n) VALUES (?,?,?,?) "
            "ON CONFLICT(url, bucket_ms, bin) DO UPDATE SET n = n + excluded.n",
            [(u, b, k, n) for (u, b, k), n in agg.items()],
        )
        horizon = newest - self.latency_retention_ms
        if horizon > self._oldest_bucket:
            db.execute("DELETE FROM url_latency WHERE bucket_ms < ?", (horizon,))
            self._oldest_bucket = horizon + LATENCY_BUCKET_MS * 10  # re-check every ten minutes

    def retain_tasks(self, exists: Callable[[str], bool], applied_index: int) -> None:
        """After a snapshot restore: drop the rows of entries after its index (the replay of the log
        writes them again: a store rebuilt from a snapshot older than this history after a power
        loss) and of tasks that no longer exist, adopt its index. The restored store is asked about
        each task this history holds (``exists``), never listed whole: a snapshot of millions of
        tasks costs no set of their ids in memory."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM executions WHERE log_index > ?", (applied_index,))
            gone = [(t,) for (t,) in db.execute("SELECT DISTINCT task_id FROM executions") if not exists(t)]
            db.executemany("DELETE FROM executions WHERE task_id = ?", gone)
            db.execute(
                "INSERT INTO hmeta (k, v) VALUES ('applied_index', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                (applied_index,),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._counts.clear()
        self._applied = applied_index

    def close(self) -> None:
        self._db.close()
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()

    # ------------------------------------------------------------------ queries (any thread)

    def list_executions(
        self,
        *,
        task_id: str | None = None,
        result: ExecutionResult | str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page:
        """Executions newest first; ``since``/``until`` bound ``finished_ms`` (inclusive/exclusive)."""
        try:
            before = int(cursor) if cursor else None
        except ValueError:
            raise ValueError(f"bad cursor {cursor!r}") from None
        given = [(cond, value) for cond, value in (
            ("task_id = ?", task_id), ("result = ?", None if result is None else str(result)),
            ("finished_ms >= ?", since_ms), ("finished_ms < ?", until_ms), ("id < ?", before),
        ) if value is not None]
        where = [cond for cond, _ in given]
        args: list[Any] = [value for _, value in given]
        sql = f"SELECT {_COLS} FROM executions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit + 1)
        rows = self._reader().execute(sql, args).fetchall()
        items = [_row(r) for r in rows[:limit]]
        nxt = str(items[-1].id) if len(rows) > limit and items else None
        return Page(items, nxt)

    def count(self, task_id: str | None = None) -> int:
        if task_id is None:
            return int(self._reader().execute("SELECT COUNT(*) FROM executions").fetchone()[0])
        q = "SELECT COUNT(*) FROM executions WHERE task_id = ?"
        return int(self._reader().execute(q, (task_id,)).fetchone()[0])

    def iter_all(self) -> Iterator[Execution]:
        for r in self._reader().execute(f"SELECT {_COLS} FROM executions ORDER BY id"):
            yield _row(r)

    def url_stats(self, since_ms: int, until_ms: int, url: str | None = None) -> list[UrlStats]:
        """p50/p90/p99 callback latency per URL over ``[since, until)`` (minute resolution)."""
        hists: dict[str, Counter[int]] = {}
        for u, b, n in self._hist_rows(since_ms, until_ms, url, "url"):
            hists.setdefault(u, Counter())[b] += n
        out = []
        for u in sorted(hists):
            total, p50, p90, p99 = _percentiles(hists[u])
            out.append(UrlStats(url=u, count=total, p50_ms=p50, p90_ms=p90, p99_ms=p99))
        return out

    def url_trend(self, url: str, since_ms: int, until_ms: int, bucket_ms: int = 300_000) -> list[TrendPoint]:
        """Percentiles of one URL per ``bucket_ms`` window (a multiple of a minute) counted from
        ``since_ms`` (rounded down to the minute), oldest first."""
        bucket_ms = max(LATENCY_BUCKET_MS, bucket_ms - bucket_ms % LATENCY_BUCKET_MS)
        start = since_ms - since_ms % LATENCY_BUCKET_MS
        hists: dict[int, Counter[int]] = {}
        for bm, b, n in self._hist_rows(since_ms, until_ms, url, "bucket_ms"):
            hists.setdefault(start + (bm - start) // bucket_ms * bucket_ms, Counter())[b] += n
        return [TrendPoint(bm, *_percentiles(hists[bm])) for bm in sorted(hists)]

    def _hist_rows(self, since: int, until: int, url: str | None, group: str) -> list[Any]:
        sql = f"SELECT {group}, bin, n FROM url_latency WHERE bucket_ms >= ? AND bucket_ms < ?"
        args: list[Any] = [since - since % LATENCY_BUCKET_MS, until]
        if url is not None:
            sql += " AND url = ?"
            args.append(url_key(url))
        return self._reader().execute(sql, args).fetchall()


def _row(r: Any) -> Execution:
    return Execution(
        task_id=r[1],
        fire_id=r[2],
        seq=r[3],
        attempt=r[4],
        kind=FireKind(r[5]),
        result=ExecutionResult(r[6]),
        status_code=r[7],
        latency_ms=r[8],
        worker=r[9],
        url=r[10],
        scene=r[11],
        fired_ms=r[12],
        finished_ms=r[13],
        response_head=r[14],
        id=r[0],
    )


__all__ = [
    "LATENCY_BUCKET_MS",
    "History",
    "HistoryWrites",
    "Page",
    "TrendPoint",
    "UrlStats",
    "bin_value",
    "latency_bin",
    "url_key",
]
