#!/usr/bin/env python3
"""Latency of the API calls the web console makes, with 100,000 tasks in the store.

Starts the REST app over a :class:`~molens.web.local_context.LocalContext` (real lmdb + SQLite, no
Raft) on a free port in this process, loads ``--tasks`` tasks (5 % of them paused) by proposing
``CreateTasks`` / ``PauseTasks`` batches directly, then times each console call ``--repeat`` times over
one keep-alive connection: the dashboard's ``/stats`` and ``/cluster/leader`` (every few seconds),
the cluster page's ``/cluster/status`` + ``/cluster/stats``, and one page of the task list
(unfiltered, and filtered by a rare status, which scans up to the API's per-request bound).

Prints a table and one line: ``dashboard_api: tasks=N stats_p50_ms=... stats_p99_ms=... ...``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import urllib3

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from molens import model  # noqa: E402
from molens.fsm.commands import CreateItem, CreateTasks, PauseTasks  # noqa: E402
from molens.web.api_context import ApiSettings  # noqa: E402
from molens.web.app import make_app  # noqa: E402
from molens.web.local_context import LocalContext  # noqa: E402
from molens.web.server import ApiServer, ServerOptions  # noqa: E402

CALLS = [
    ("stats", "/api/v1/stats"),
    ("leader", "/api/v1/cluster/leader"),
    ("cluster_status", "/api/v1/cluster/status"),
    ("cluster_stats", "/api/v1/cluster/stats"),
    ("tasks_page", "/api/v1/tasks?limit=50"),
    ("tasks_paused", "/api/v1/tasks?limit=50&status=paused"),
]


def load(ctx: LocalContext, n: int, batch: int = 1_000) -> float:
    s = ctx.settings
    t0 = time.perf_counter()
    made = 0
    while made < n:
        now = ctx.now_ms()
        items = []
        for i in range(made, min(n, made + batch)):
            body = {
                "type": "periodic" if i % 3 == 0 else "delayed",
                "interval_ms": 3_600_000 + i,
                "callback_url": f"http://127.0.0.1:9/bench/{i % 50}",
                "scene": f"s{i % 7}",
            }
            items.append(CreateItem(ctx.new_task_id(), model.validate_create(body, s.policy, s.limits, now)))
        res = ctx.propose([CreateTasks(now, tuple(items))], 60)[0]
        paused = tuple(r.task.id for k, r in enumerate(res) if (made + k) % 20 == 0)
        if paused:
            ctx.propose([PauseTasks(ctx.now_ms(), paused)], 60)
        made += len(items)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ctx = LocalContext(d, ApiSettings())
        server = ApiServer(make_app(ctx), ServerOptions(port=0, threads=4)).start()
        try:
            secs = load(ctx, args.tasks)
            counts = ctx.task_counts()
            print(f"loaded {sum(counts.values()):,} tasks in {secs:.1f} s: {counts}")
            http = urllib3.HTTPConnectionPool("127.0.0.1", server.port, maxsize=1, timeout=30)
            summary = [f"tasks={sum(counts.values())}"]
            print(f"{'call':<16}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}  bytes")
            for name, path in CALLS:
                http.request("GET", path)  # warm
                times = []
                size = 0
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    r = http.request("GET", path)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert r.status == 200, (path, r.status, r.data[:200])
                    size = len(r.data)
                times.sort()
                p50 = statistics.median(times)
                p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
                print(f"{name:<16}{p50:>9.2f}{p99:>9.2f}{times[-1]:>9.2f}  {size}")
                summary += [f"{name}_p50_ms={p50:.2f}", f"{name}_p99_ms={p99:.2f}"]
            http.close()
        finally:
            server.stop()
            ctx.close()
    print("dashboard_api: " + " ".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
