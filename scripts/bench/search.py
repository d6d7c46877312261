#!/usr/bin/env python3
"""Latency of the task text search (``GET /api/v1/tasks?q=``) with 100,000 tasks on a 3-node cluster.

Starts ``--nodes`` real ``molens-node`` processes on free ports in a temporary directory, loads
``--tasks`` tasks through ``POST /api/v1/tasks/batch`` (1,000 a request, delayed 1-2 h so nothing
fires; each payload holds a unique order number), waits until the leader holds them, makes one
search (the index is built on the first one; that time is printed apart), then times ``--repeat``
searches on the leader over one keep-alive connection, each for a different order number that
matches exactly one task, so every search examines the whole index. Ends with one summary line:
``search: nodes=N tasks=N build_ms=... p50_ms=... p99_ms=... max_ms=...``.

With ``--create-cost M`` it also prices what a built index costs each write: the CPU time all nodes
spend (``/proc/<pid>/stat``, user + system) per created task while ``M`` more tasks are loaded, twice
before any search (the two figures show the drift of a growing store) and once after every node was
searched (every node then keeps its index up to date on each write):
``create_cpu_us: before=... before_again=... searched=... ratio=...`` (searched / the mean before),
added to the summary line; the index is then built there, so ``build_ms`` is an ordinary search.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import urllib3

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from dashboard_api import pct, started_nodes, wait_counted  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def load(url: str, n: int, batch: int = 1_000, first: int = 0) -> float:
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=5, read=120))
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        tasks = [
            {
                "type": "delayed",
                "interval_ms": 3_600_000 + (i * 36_000) % 3_600_000,
                "callback_url": f"http://127.0.0.1:9/bench/{i % 50}",
                "scene": f"s{i % 7}",
                "payload": {"order": f"ORD-{i:07d}-x", "customer": f"c{i % 997}", "note": "bench search payload"},
            }
            for i in range(first + start, first + min(n, start + batch))
        ]
        r = http.request(
            "POST", url + "/api/v1/tasks/batch", body=json.dumps({"tasks": tasks}).encode(),
            headers={"Content-Type": "application/json", "Prefer": "return=minimal"},
        )
        assert r.status in (200, 201), (r.status, r.data[:300])
    return time.perf_counter() - t0


def measure(url: str, n: int, repeat: int) -> str:
    http = urllib3.HTTPConnectionPool("127.0.0.1", int(url.rsplit(":", 1)[1]), maxsize=1, retries=False, timeout=30)

    def search(i: int) -> float:
        t0 = time.perf_counter()
        r = http.request("GET", f"/api/v1/tasks?q=ord-{i:07d}-x&limit=50")
        ms = (time.perf_counter() - t0) * 1000
        page = json.loads(r.data)
        assert r.status == 200 and len(page["items"]) == 1 and page["next_cursor"] is None, (r.status, r.data[:300])
        assert "partial" not in page
        return ms

    build = search(0)
    rnd = random.Random(7)
    times = [search(rnd.randrange(n)) for _ in range(repeat)]
    return (
        f"build_ms={build:.0f} p50_ms={pct(times, 0.5):.1f} p99_ms={pct(times, 0.99):.1f} max_ms={max(times):.1f}"
    )


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / _TICK


def create_cost(url: str, nodes: dict[str, tuple[str, int]], first: int, m: int) -> str:
    pids = [pid for _, pid in nodes.values()]
    http = urllib3.PoolManager(retries=False, timeout=120)

    def per_create(start: int) -> float:
        c0 = cpu_s(pids)
        load(url, m, first=start)
        wait_counted(url, start + m)
        for u, _ in nodes.values():  # every replica applied them (their CPU counts)
            wait_counted(u, start + m)
        return (cpu_s(pids) - c0) / m * 1e6

    before = per_create(first)
    again = per_create(first + m)
    builds = []
    for u, _ in nodes.values():  # every node builds its index
        t0 = time.perf_counter()
        r = http.request("GET", u + "/api/v1/tasks?q=ord-0000001-x&limit=1")
        builds.append((time.perf_counter() - t0) * 1000)
        assert r.status == 200, r.data[:300]
    searched = per_create(first + 2 * m)
    ratio = searched / ((before + again) / 2)
    return (f"create_cpu_us: before={before:.1f} before_again={again:.1f} searched={searched:.1f} ratio={ratio:.3f}"
            f" (builds on {first + 2 * m:,} tasks: {', '.join(f'{b:.0f}' for b in builds)} ms)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--create-cost", type=int, default=0, metavar="M",
                    help="also the CPU per created task before and after the index is built, M tasks each")
    a = ap.parse_args()
    with started_nodes(a.nodes) as (url, nodes):
        secs = load(url, a.tasks)
        held = sum(wait_counted(url, a.tasks).values())
        print(f"loaded {a.tasks:,} tasks in {secs:.1f} s; leader holds {held:,}", file=sys.stderr)
        cost = create_cost(url, nodes, a.tasks, a.create_cost) if a.create_cost else ""
        if cost:
            print(cost, file=sys.stderr)
        print(f"search: nodes={a.nodes} tasks={held} repeat={a.repeat} {measure(url, a.tasks, a.repeat)}"
              + (f" {cost}" if cost else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
