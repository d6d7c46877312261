#!/usr/bin/env python3
"""What listing a small namespace costs on a cluster another namespace fills.

A real 3-node cluster (``dashboard_api.py``'s: ``molens-node`` processes on free ports in a
temporary directory). Namespace ``big`` gets ``--tasks`` delayed tasks (1-2 h out: nothing fires)
and namespace ``small`` ``--own`` of them, spread evenly among the others' ids (two each 1,000 of
``big``'s, by default), all through ``POST /api/v1/tasks/batch`` on the leader. Then the whole of
``small`` is listed with ``?namespace=small&limit=100``, following ``next_cursor`` to the end, in
each order and with a status filter (``created``, ``-created``, ``next_run``, ``status=pending``),
``--repeat`` times each: the requests a walk takes, its time, and every request's p99.

The reference, in the same run: one walk of the same number of ``big``'s tasks (a list whose every
task matches: what a page of a key's own rows costs). ``walk_vs_own`` is a walk of ``small``
against it: 1.0 when another namespace's rows cost nothing.

Prints one line: ``namespace_list: summary nodes=3 other_tasks= own_tasks= {order}_requests=
{order}_ms= request_p99_ms= reference_ms= walk_vs_own=``.

    .venv/bin/python scripts/bench/namespace_list.py [--tasks 100000] [--own 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dashboard_api import started_cluster

ORDERS = {"created": "", "newest": "&order=-created", "next_run": "&order=next_run", "pending": "&status=pending"}


def _post(http: urllib3.PoolManager, url: str, body: object) -> object:
    r = http.request("POST", url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert r.status in (200, 201), (r.status, r.data[:300])
    return json.loads(r.data)


def load(http: urllib3.PoolManager, base: str, other: int, own: int) -> None:
    for ns in ("big", "small"):
        _post(http, f"{base}/api/v1/namespaces", {"name": ns})
    per = max(1, other // max(1, own))  # one of small's after each ``per`` of big's
    made_other = made_own = 0
    t0 = time.perf_counter()
    while made_other < other or made_own < own:
        n = min(990, other - made_other)  # and up to ten of small's: at most 1,000 a batch
        tasks = []
        for i in range(made_other, made_other + n):
            tasks.append({"type": "delayed", "interval_ms": 3_600_000 + i % 3_600_000, "namespace": "big",
                          "callback_url": "http://127.0.0.1:9/bench"})
            if (i + 1) % per == 0 and made_own < own:
                tasks.append({"type": "delayed", "interval_ms": 3_600_000 + i % 3_600_000, "namespace": "small",
                              "callback_url": "http://127.0.0.1:9/bench"})
                made_own += 1
        while not n and made_own < own:  # what is left of small's after big's
            tasks.append({"type": "delayed", "interval_ms": 3_600_000, "namespace": "small",
                          "callback_url": "http://127.0.0.1:9/bench"})
            made_own += 1
        _post(http, f"{base}/api/v1/tasks/batch", {"tasks": tasks})
        made_other += n
    print(f"loaded {other:,} tasks of big and {own:,} of small in {time.perf_counter() - t0:.1f} s", flush=True)


def walk(http: urllib3.PoolManager, base: str, ns: str, query: str, want: int) -> tuple[int, float, list[float]]:
    """Requests and seconds to list ``want`` tasks of ``ns`` (``query`` added), each request's seconds."""
    cursor = None
    got = 0
    times: list[float] = []
    t0 = time.perf_counter()
    while True:
        url = f"{base}/api/v1/tasks?namespace={ns}&limit=100{query}" + (f"&cursor={cursor}" if cursor else "")
        s = time.perf_counter()
        r = http.request("GET", url)
        times.append(time.perf_counter() - s)
        assert r.status == 200, (r.status, r.data[:300])
        page = json.loads(r.data)
        got += len(page["items"])
        cursor = page["next_cursor"]
        if cursor is None or got >= want:
            break
    assert got >= want, (ns, query, got, want)
    return len(times), time.perf_counter() - t0, times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000, help="tasks of the other namespace")
    ap.add_argument("--own", type=int, default=200, help="tasks of the namespace listed")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=5, read=120))
    with started_cluster(3) as base:
        load(http, base, args.tasks, args.own)
        time.sleep(2)  # the batch answers come after the leader applied: let the last settle
        summary = [f"nodes=3 other_tasks={args.tasks} own_tasks={args.own}"]
        every: list[float] = []
        walks: list[float] = []
        for name, query in ORDERS.items():
            reqs, secs = [], []
            for _ in range(args.repeat):
                n, s, times = walk(http, base, "small", query, args.own)
                reqs.append(n)
                secs.append(s)
                every += times
            walks += secs
            med = statistics.median(secs) * 1000
            print(f"{name:>9}: {statistics.median(reqs):.0f} requests, {med:.1f} ms a walk", flush=True)
            summary.append(f"{name}_requests={statistics.median(reqs):.0f} {name}_ms={med:.1f}")
        ref = statistics.median(walk(http, base, "big", "", args.own)[1] for _ in range(args.repeat)) * 1000
        every.sort()
        p99 = every[min(len(every) - 1, int(len(every) * 0.99))] * 1000
        summary.append(f"request_p99_ms={p99:.1f} reference_ms={ref:.1f} "
                       f"walk_vs_own={statistics.median(walks) * 1000 / ref:.2f}")
    print("namespace_list: summary " + " ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
