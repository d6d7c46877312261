"""What a node reports about itself beyond its counters: disk, memory, request rate, recent fires,
and its peers' reports (``/api/v1/cluster/stats``, ``/api/v1/stats?node_id=``).

- :func:`disk_usage`: bytes per part of ``data_dir`` (``lmdb`` = ``fsm/``, ``history`` =
  ``history.sqlite*``, ``raft/``, ``snapshots/``) and the file system's ``free`` bytes.
- :class:`RecentFires`: executions finished in the last ``window_ms`` by result, read from the
  node's history with its own read-only SQLite connection per thread (the history is replicated,
  so every node gives the cluster-wide figure). Cached for :data:`RECENT_CACHE_S`.
- :func:`attempts`: HTTP attempts this node's fire pool made, all or the failed ones.
- :class:`RequestRate`: HTTP requests per second over the last few seconds (one lock, a deque).
- :class:`PeerStats`: asks peers' ``GET /api/v1/stats?local=1`` in parallel with a short timeout
  (the bearer token of this node, the cluster shares it); an unreachable peer is reported as
  ``{"node_id", "error"}`` instead of failing the whole answer.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import urllib3

from molens import cpus
from molens.schema import FireKind

log = logging.getLogger(__name__)

PEER_TIMEOUT_S = 1.0
"""Per-peer budget of a cluster stats call (connect + read)."""
RECENT_WINDOW_MS = 10_000
RECENT_CACHE_S = 1.0
DISK_CACHE_S = 5.0
ROWS_CACHE_S = 5.0

_SUCCESS = frozenset({"success", "ack_success"})


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                continue
    return total


class DiskUsage:
    """Bytes used under ``data_dir`` by part, cached for :data:`DISK_CACHE_S` (a walk per scrape is waste)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._at = 0.0
        self._value: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self) -> dict[str, int]:
        with self._lock:
            if time.monotonic() - self._at < DISK_CACHE_S:
                return dict(self._value)
        d = self.data_dir
        out = {
            "lmdb_bytes": _tree_bytes(d / "fsm") if (d / "fsm").exists() else 0,
            "history_bytes": sum(_tree_bytes(p) for p in d.glob("history.sqlite*")),
            "raft_bytes": _tree_bytes(d / "raft") if (d / "raft").exists() else 0,
            "snapshots_bytes": _tree_bytes(d / "snapshots") if (d / "snapshots").exists() else 0,
        }
        try:
            out["free_bytes"] = shutil.disk_usage(d).free
        except OSError:
            pass
        with self._lock:
            self._value, self._at = out, time.monotonic()
        return dict(out)


def rss_bytes() -> int | None:
    """Resident set size of this process (Linux ``/proc``), None elsewhere."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


_THREAD_SUFFIX = re.compile(r"(-\d+$)|( \(urn:uuid:[0-9a-f-]+\)$)")
_NATIVE_SUFFIX = re.compile(r"/\d+$")


def _live_threads() -> dict[int, str]:
    """This process's live threads: native id -> name with a trailing ``-<n>`` or pykka's
    ``(urn:uuid:...)`` removed (``fire-worker-3`` is ``fire-worker``), the key both per-thread
    readings below sum by. Threads Python did not start (ZeroMQ's I/O and reaper threads) are there
    by their kernel name without a trailing ``/<n>`` (``ZMQbg/IO/0`` is ``ZMQbg/IO``), so that the
    readings cover every thread of the process."""
    out = {t.native_id: _THREAD_SUFFIX.sub("", t.name) for t in threading.enumerate() if t.native_id is not None}
    for tid in cpus.threads():
        if tid in out:
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
                out[tid] = _NATIVE_SUFFIX.sub("", f.read().strip())
        except OSError:
            continue  # ended since the listing
    return out


def thread_cpu_s(system: bool = False) -> dict[str, float]:
    """CPU seconds (user + system) spent so far by this process's live threads, summed by name
    (:func:`_live_threads`); with ``system``, also their system part as ``<name>.sys``. Linux
    ``/proc`` only; ``{}`` elsewhere. Threads that have ended are not counted, so compare two
    readings of long-lived threads (actors, pools, I/O loops, ZeroMQ's own I/O threads).

    A thread's time is the scheduler's own count of the nanoseconds it ran
    (``/proc/self/task/<tid>/schedstat``), not the clock-tick samples of its ``stat``: a thread that
    runs a few microseconds at a time (a waitress worker, an I/O loop) is seldom on the CPU when the
    tick lands, and the samples charged such threads about a quarter less than they ran (threads
    summing to 80 ticks in a process that used 108). ``stat``'s samples only split a thread's time
    into its user and system parts for ``system``; where ``schedstat`` is missing they are its time."""
    tck = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = collections.defaultdict(float)
    for tid, key in _live_threads().items():
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user, sys_ = int(fields[11]) / tck, int(fields[12]) / tck
        except (OSError, ValueError, IndexError):
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as f:
                ran = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            ran = user + sys_
        out[key] += ran
        if system:
            out[key + ".sys"] += ran * sys_ / (user + sys_) if user + sys_ else 0.0
    return {k: round(v, 6) for k, v in sorted(out.items())}


def thread_switches() -> dict[str, int]:
    """Context switches so far of this process's live threads (voluntary -- the thread blocked: a
    lock, a condition, the GIL, I/O -- plus involuntary), summed by name as :func:`thread_cpu_s`
    sums CPU. Two readings per unit of work say which threads hand work to each other, and how
    often: on this VM a switch costs a few microseconds of kernel time (docs/benchmarks.md). Linux
    ``/proc`` only; ``{}`` elsewhere."""
    out: dict[str, int] = collections.defaultdict(int)
    for tid, key in _live_threads().items():
        try:
            with open(f"/proc/self/task/{tid}/status", encoding="ascii") as f:
                n = sum(int(line.split(":", 1)[1]) for line in f if "ctxt_switches:" in line)
        except (OSError, ValueError):
            continue
        out[key] += n
    return dict(sorted(out.items()))


class Collector(Protocol):
    """What :func:`attempts` reads: a prometheus-client metric (``collect()`` yields its families)."""

    def collect(self) -> Iterable[Any]: ...


def attempts(fires: Collector, failed: bool = False) -> int:
    """HTTP attempts counted by ``fires`` (the ``molens_fires{kind,outcome}`` counter); with ``failed``,
    only those whose outcome was not ``success``: a node's figures on the console's Workers page."""
    total = 0.0
    for fam in fires.collect():
        total += sum(s.value for s in fam.samples if s.name.endswith("_total")
                     and not (failed and s.labels.get("outcome") == "success"))
    return int(total)


class RequestRate:
    """Requests per second over the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._times: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self.total = 0

    def hit(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.total += 1
            self._times.append(now)
            while self._times and now - self._times[0] > self.window_s:
                self._times.popleft()

    def per_s(self) -> float:
        now = time.monotonic()
        with self._lock:
            while self._times and now - self._times[0] > self.window_s:
                self._times.popleft()
            return round(len(self._times) / self.window_s, 2)


class RecentFires:
    """Executions (callbacks and ACK probes) finished in the last ``window_ms``, by result."""

    def __init__(self, history_path: Path, window_ms: int = RECENT_WINDOW_MS) -> None:
        self.path = history_path
        self.window_ms = window_ms
        self._local = threading.local()
        self._cache: tuple[float, dict[str, Any]] | None = None
        self._rows: tuple[float, int] | None = None

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, timeout=5)
            self._local.db = db
        return db

    def summary(self, now_ms: int) -> dict[str, Any]:
        """``{"fires_per_s", "success_rate" (None without fires), "window_ms", "by_result"}``: the
        history rows finished in the window by result; the rate and the success rate of the attempts
        among them (a history event, ``skipped``, ``updated``, ``backfill``, is no fire)."""
        c = self._cache
        if c is not None and time.monotonic() - c[0] < RECENT_CACHE_S:
            return c[1]
        by: dict[str, int] = {}
        total = ok = 0
        try:
            rows = self._db().execute(
                "SELECT kind, result, COUNT(*) FROM executions WHERE finished_ms >= ? GROUP BY kind, result",
                (now_ms - self.window_ms,),
            ).fetchall()
            for kind, result, n in rows:
                by[str(result)] = by.get(str(result), 0) + int(n)
                if kind != FireKind.EVENT:
                    total += int(n)
                    ok += int(n) if result in _SUCCESS else 0
        except sqlite3.Error as exc:  # no table yet on a fresh node, or the file is being created
            log.debug("recent fires unavailable: %s", exc)
        out = {
            "fires_per_s": round(total * 1000 / self.window_ms, 2),
            "success_rate": round(ok / total, 4) if total else None,
            "window_ms": self.window_ms,
            "by_result": by,
        }
        self._cache = (time.monotonic(), out)
        return out

    def rows(self) -> int | None:
        """Execution records held (all tasks), cached for :data:`ROWS_CACHE_S` (a count walks an
        index); None when the history cannot be read."""
        c = self._rows
        if c is not None and time.monotonic() - c[0] < ROWS_CACHE_S:
            return c[1]
        try:
            n = int(self._db().execute("SELECT COUNT(*) FROM executions").fetchone()[0])
        except sqlite3.Error:
            return None
        self._rows = (time.monotonic(), n)
        return n


class PeerStats:
    """Fetches peers' local stats over their HTTP API (see the module docstring)."""

    def __init__(self, auth_token: str = "", timeout_s: float = PEER_TIMEOUT_S) -> None:
        self._http = urllib3.PoolManager(num_pools=16, maxsize=4, retries=False)
        self._timeout = urllib3.Timeout(connect=timeout_s, read=timeout_s)
        self._headers = {"Accept": "application/json"}
        if auth_token:
            self._headers["Authorization"] = f"Bearer {auth_token}"
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="peer-stats")

    def fetch(self, node_id: str, base_url: str | None, path: str = "/api/v1/stats?local=1") -> dict[str, Any]:
        """One peer's answer to ``path`` (its ``/api/v1/stats?local=1`` by default), or ``{"node_id", "error"}``."""
        if not base_url:
            return {"node_id": node_id, "error": "no HTTP address known for this node"}
        t0 = time.monotonic()
        try:
            r = self._http.request(
                "GET", base_url.rstrip("/") + path, headers=self._headers, timeout=self._timeout
            )
        except urllib3.exceptions.HTTPError as exc:
            return {"node_id": node_id, "http_url": base_url, "error": f"unreachable: {type(exc).__name__}"}
        if r.status != 200:
            return {"node_id": node_id, "http_url": base_url, "error": f"HTTP {r.status}"}
        try:
            body = json.loads(r.data)
        except ValueError:
            return {"node_id": node_id, "http_url": base_url, "error": "answer is not JSON"}
        if not isinstance(body, dict):
            return {"node_id": node_id, "http_url": base_url, "error": "answer is not an object"}
        body.setdefault("node_id", node_id)
        body["http_url"] = base_url
        body["fetch_ms"] = round((time.monotonic() - t0) * 1000, 1)
        return body

    def fetch_all(self, peers: Mapping[str, str | None], path: str = "/api/v1/stats?local=1") -> list[dict[str, Any]]:
        """Every peer's answer, fetched in parallel (order of ``peers``)."""
        futs = [self._pool.submit(self.fetch, nid, url, path) for nid, url in peers.items()]
        return [f.result() for f in futs]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.clear()


def order_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leader first, then by node id."""
    return sorted(nodes, key=lambda n: (n.get("role") != "leader", str(n.get("node_id"))))


__all__ = ["DiskUsage", "PeerStats", "RecentFires", "RequestRate", "order_nodes", "rss_bytes"]
