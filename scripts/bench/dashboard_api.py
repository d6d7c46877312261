#!/usr/bin/env python3
"""Latency of the API calls the web console makes, with 100,000 tasks in the store.

Three targets:

- default: the REST app over a :class:`~molens.web.local_context.LocalContext` (real lmdb + SQLite,
  no Raft) on a free port in this process; ``--tasks`` tasks (5 % of them paused) are loaded by
  proposing ``CreateTasks`` / ``PauseTasks`` batches directly.
- ``--node``: a real ``molens-node`` (Raft, scheduler, time wheel; ``--nodes 3`` for a cluster,
  measured on its leader, so ``/cluster/stats`` asks two peers) started on free ports in a
  temporary directory; the tasks are loaded through ``POST /api/v1/tasks/batch`` (1,000 a request),
  delayed 1-2 h so they all sit in the leader's wheel and nothing fires while measuring.
- ``--url URL``: a node already running at URL (loads ``--tasks`` the same way unless ``--tasks 0``).

Then it times each console call ``--repeat`` times over one keep-alive connection: the dashboard's
``/stats``, ``/cluster/leader`` and its charts' ``/stats/series`` (hour and day, summed over the
members), the cluster page's ``/cluster/status`` + ``/cluster/stats``, one
page of the task list (unfiltered, and filtered by a rare status, which scans up to the API's
per-request bound), the executions page's list, the time wheel page's ``/timewheel/distribution``,
the create form's ``/schedule/preview``, plus ``/metrics`` (a Prometheus scrape) and the PNG
heatmap. Then one page of the console's task list *as the console fetches it*
(frontend/src/views/TasksView.vue: following ``next_cursor`` until 50 rows or the first answer the
API cut short, at 5,000 tasks examined or 20 ms; the status order walks the statuses that have
tasks) for each of its
orders and filters, one half-way down the newest-first list, and a URL search that matches nothing
carried through the whole store by "Search further" clicks. Besides each page's time it prints the
p99 and max of every single request the console made.

Prints a table and one line: ``dashboard_api: target=... tasks=N stats_p50_ms=... stats_p99_ms=... ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from molens import model  # noqa: E402
from molens.config import HttpConfig  # noqa: E402
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
    ("series_hour", "/api/v1/stats/series?range=hour"),
    ("series_day", "/api/v1/stats/series?range=day"),
    ("tasks_page", "/api/v1/tasks?limit=50"),
    ("tasks_newest", "/api/v1/tasks?limit=50&order=-created"),
    ("tasks_next_run", "/api/v1/tasks?limit=50&order=next_run"),
    ("tasks_paused", "/api/v1/tasks?limit=50&status=paused"),
    ("executions", "/api/v1/executions?limit=50"),
    ("wheel_json", "/api/v1/timewheel/distribution"),
    ("preview", "/api/v1/schedule/preview?type=periodic&cron_expr=*%2F5+*+*+*+*&timezone=Europe%2FBerlin&count=5"),
    ("metrics", "/metrics"),
    ("wheel_png", "/api/v1/timewheel/distribution.png"),
]


def load_http(url: str, n: int, batch: int = 1_000) -> float:
    """``n`` tasks through the REST batch endpoint (delayed 1-2 h, 5 % paused afterwards)."""
    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=5, read=120))
    t0 = time.perf_counter()
    made = 0
    while made < n:
        tasks = [
            {
                "type": "delayed",
                "interval_ms": 3_600_000 + (i * 36_000) % 3_600_000,
                "callback_url": f"http://127.0.0.1:9/bench/{i % 50}",
                "scene": f"s{i % 7}",
            }
            for i in range(made, min(n, made + batch))
        ]
        r = http.request(
            "POST", url + "/api/v1/tasks/batch", body=json.dumps({"tasks": tasks}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert r.status in (200, 201), (r.status, r.data[:300])
        items = json.loads(r.data)["items"]
        for k, t in enumerate(items):
            if t is not None and (made + k) % 20 == 0:
                http.request("POST", f"{url}/api/v1/tasks/{t['id']}/pause")
        made += len(tasks)
    return time.perf_counter() - t0


def measure(base: str, repeat: int, summary: list[str]) -> None:
    u = urllib3.util.parse_url(base)
    http = urllib3.HTTPConnectionPool(u.host, u.port, maxsize=1, timeout=60)
    print(f"{'call':<16}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}  bytes")
    for name, path in CALLS:
        http.request("GET", path)  # warm
        times = []
        size = 0
        for _ in range(repeat):
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


PAGES = [
    # (name, query): one page of the console's task list as the console fetches it
    ("page_newest", "order=-created"),
    ("page_oldest", "order=created"),
    ("page_next_run", "order=next_run"),
    ("page_status", "order=status"),
    ("page_scene", "order=-created&scene=s3"),
    ("page_paused", "order=-created&status=paused"),
    ("page_url", "order=-created&url=bench/7"),
    ("page_deep", "order=-created&cursor={deep}"),
    ("page_no_match", "order=-created&url=matches-nothing"),
    ("page_status_no_match", "order=status&url=matches-nothing"),
    ("page_type_no_match", "order=-created&type=periodic"),
    ("page_paused_next_run", "order=next_run&status=paused"),
]
"""(A status filter nobody has costs the console no request: it reads the status counts first.)"""

PAGE = 50
STATUSES = ["pending", "firing", "awaiting_ack", "paused", "done", "failed", "inactive"]


class ConsoleList:
    """The console's task list fetch (``fetchRun``/``fetchPage`` of TasksView.vue), timing each request."""

    def __init__(self, http: urllib3.HTTPConnectionPool, counts: dict[str, int]) -> None:
        self.http = http
        self.counts = counts
        self.request_ms: list[float] = []

    def _run(self, query: dict[str, str], cursor: str | None, want: int, budget: dict[str, int]) -> tuple[list[Any], str | None]:
        got: list[Any] = []
        while budget["pauses"] > 0:
            asked = want - len(got)
            q = {**query, "limit": str(asked), **({"cursor": cursor} if cursor else {})}
            path = "/api/v1/tasks?" + "&".join(f"{k}={v}" for k, v in q.items())
            t0 = time.perf_counter()
            r = self.http.request("GET", path)
            self.request_ms.append((time.perf_counter() - t0) * 1000)
            assert r.status == 200, (path, r.status, r.data[:200])
            body = json.loads(r.data)
            got += body["items"]
            budget["scanned"] += body["scanned"]
            cursor = body["next_cursor"]
            if not cursor or len(got) >= want:
                break
            if len(body["items"]) < asked:
                budget["pauses"] -= 1
        return got, cursor

    def page(self, query: str, cursor: str | None = None, want: int = PAGE) -> tuple[int, str | None, int]:
        """One load (or one "Search further" from ``cursor``): (rows, next cursor, tasks scanned)."""
        f = dict(kv.split("=", 1) for kv in query.split("&"))
        cursor = f.pop("cursor", cursor)
        budget = {"pauses": 1, "scanned": 0}
        if f.get("order") != "status":
            got, nxt = self._run(f, cursor, want, budget)
            return len(got), nxt, budget["scanned"]
        i, c = (int(cursor.split(".", 1)[0]), cursor.split(".", 1)[1] or None) if cursor else (0, None)
        wanted = f["status"].split(",") if "status" in f else STATUSES
        groups = [s for s in STATUSES if s in wanted and self.counts.get(s, 0) > 0]
        rows: list[Any] = []
        while i < len(groups) and len(rows) < want and budget["pauses"] > 0:
            part, nxt = self._run({**f, "status": groups[i], "order": "-created"}, c, want - len(rows), budget)
            rows += part
            if nxt:
                c = nxt
            else:
                i, c = i + 1, None
        return len(rows), (f"{i}.{c or ''}" if i < len(groups) else None), budget["scanned"]


def pct(times: list[float], q: float) -> float:
    s = sorted(times)
    return s[min(len(s) - 1, int(len(s) * q))]


def deep_cursor(http: urllib3.HTTPConnectionPool, pages: int = 50) -> str:
    """The cursor ``pages`` x 1,000 tasks into the newest-first list (half of 100,000)."""
    cursor = ""
    for _ in range(pages):
        r = http.request("GET", "/api/v1/tasks?order=-created&limit=1000" + (f"&cursor={cursor}" if cursor else ""))
        nxt = json.loads(r.data)["next_cursor"]
        if not nxt:
            break
        cursor = nxt
    return cursor


def measure_pages(base: str, repeat: int, summary: list[str]) -> None:
    u = urllib3.util.parse_url(base)
    http = urllib3.HTTPConnectionPool(u.host, u.port, maxsize=1, timeout=60)
    deep = deep_cursor(http)
    counts = json.loads(http.request("GET", "/api/v1/stats?local=1").data)["tasks"]
    print(f"\n{'console page':<22}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}  rows requests scanned  req p99  req max")
    worst = worst_req = 0.0
    for name, query in PAGES:
        q = query.format(deep=deep)
        ConsoleList(http, counts).page(q)  # warm
        cl = ConsoleList(http, counts)
        times = []
        rows = scanned = 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            rows, _, scanned = cl.page(q)
            times.append((time.perf_counter() - t0) * 1000)
        reqs = len(cl.request_ms) // repeat
        p50, p99, rp99 = statistics.median(times), pct(times, 0.99), pct(cl.request_ms, 0.99)
        worst, worst_req = max(worst, p99), max(worst_req, rp99)
        print(f"{name:<22}{p50:>9.2f}{p99:>9.2f}{max(times):>9.2f}  {rows:>4} {reqs:>8} {scanned:>7}"
              f" {rp99:>8.2f} {max(cl.request_ms):>8.2f}")
        summary += [f"{name}_p50_ms={p50:.2f}", f"{name}_p99_ms={p99:.2f}", f"{name}_requests={reqs}"]
    # a URL nothing matches, searched through the whole store: the first load, then "Search further"
    # until the answer is final; every click is one page fetch of its own
    cl = ConsoleList(http, counts)
    clicks: list[float] = []
    total_s = scanned_all = 0.0
    for _ in range(max(1, repeat // 10)):
        cursor, first = None, True
        t_all = time.perf_counter()
        while first or cursor:
            t0 = time.perf_counter()
            _, cursor, scanned = cl.page("order=-created&url=matches-nothing", cursor)
            clicks.append((time.perf_counter() - t0) * 1000)
            scanned_all += scanned
            first = False
        total_s += time.perf_counter() - t_all
    runs = max(1, repeat // 10)
    print(f"no match, whole store: {len(clicks) // runs} clicks, {scanned_all / runs:,.0f} tasks searched, "
          f"{total_s / runs * 1000:.0f} ms in all; a click p50 {statistics.median(clicks):.2f} "
          f"p99 {pct(clicks, 0.99):.2f} ms, a request p99 {pct(cl.request_ms, 0.99):.2f} max {max(cl.request_ms):.2f} ms")
    worst, worst_req = max(worst, pct(clicks, 0.99)), max(worst_req, pct(cl.request_ms, 0.99))
    summary += [
        f"further_clicks={len(clicks) // runs}", f"further_click_p99_ms={pct(clicks, 0.99):.2f}",
        f"whole_store_no_match_ms={total_s / runs * 1000:.0f}",
        f"pages_worst_p99_ms={worst:.2f}", f"requests_worst_p99_ms={worst_req:.2f}",
    ]
    http.close()


def wait_counted(url: str, n: int, timeout_s: float = 120) -> dict[str, int]:
    """The node's task counts once it holds ``n`` tasks (the batch answer comes after apply)."""
    http = urllib3.PoolManager(retries=False, timeout=30)
    end = time.monotonic() + timeout_s
    while True:
        counts: dict[str, int] = json.loads(http.request("GET", url + "/api/v1/stats").data)["tasks"]
        if sum(counts.values()) >= n or time.monotonic() > end:
            return counts
        time.sleep(0.2)


def run_remote(url: str, n: int, repeat: int) -> list[str]:
    url = url.rstrip("/")
    if n:
        secs = load_http(url, n)
        print(f"loaded {n:,} tasks over REST in {secs:.1f} s ({n / secs:,.0f}/s)")
    counts = wait_counted(url, n)
    http = urllib3.PoolManager(retries=False, timeout=30)
    wheel = json.loads(http.request("GET", url + "/api/v1/timewheel/distribution").data)
    print(f"node holds {sum(counts.values()):,} tasks {counts}; wheel timers={wheel.get('timers')}")
    summary = [f"tasks={sum(counts.values())}", f"wheel_timers={wheel.get('timers')}"]
    measure(url, repeat, summary)
    measure_pages(url, repeat, summary)
    return summary


@contextlib.contextmanager
def started_cluster(nodes: int) -> Iterator[str]:
    """``nodes`` real molens-node processes on free ports in a temporary directory, every HTTP API
    ready; yields the leader's base URL and kills them all after."""
    with started_nodes(nodes) as (url, _):
        yield url


@contextlib.contextmanager
def started_nodes(nodes: int) -> Iterator[tuple[str, dict[str, tuple[str, int]]]]:
    """As :func:`started_cluster`, yielding the leader's URL and each node's ``(URL, pid)`` by id."""
    from tests.integration.conftest import Cluster, wait_for

    with tempfile.TemporaryDirectory() as d:
        c = Cluster(Path(d), nodes, state_machine="tasks")
        try:
            c.start()
            http = urllib3.PoolManager(retries=False, timeout=5)
            for node in c.nodes.values():
                u = f"http://127.0.0.1:{node.settings['http']['port']}"

                def ready(u: str = u) -> bool:
                    try:
                        return http.request("GET", u + "/readyz").status == 200
                    except urllib3.exceptions.HTTPError:
                        return False

                wait_for(ready, 30, f"{node.node_id}'s HTTP API")
            leader = c.leader(timeout=30)
            url = f"http://127.0.0.1:{leader.settings['http']['port']}"
            print(f"started {nodes} molens-node process(es); leader {leader.node_id} pid={leader.pid} at {url}")
            yield url, {i: (f"http://127.0.0.1:{n.settings['http']['port']}", n.pid) for i, n in c.nodes.items()}
        finally:
            c.kill_all()


def run_node(n: int, repeat: int, nodes: int) -> list[str]:
    with started_cluster(nodes) as url:
        return [f"nodes={nodes}", *run_remote(url, n, repeat)]


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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=50)
    target = ap.add_mutually_exclusive_group()
    target.add_argument("--node", action="store_true", help="start real molens-node processes and load them over REST")
    target.add_argument("--url", help="a running node's HTTP base URL (tasks loaded over REST)")
    ap.add_argument("--nodes", type=int, default=1, help="with --node: cluster size (the leader is measured)")
    args = ap.parse_args()
    if args.node:
        summary = ["target=node", *run_node(args.tasks, args.repeat, args.nodes)]
    elif args.url:
        summary = ["target=url", *run_remote(args.url, args.tasks, args.repeat)]
    else:
        summary = ["target=local"]
        with tempfile.TemporaryDirectory() as d:
            ctx = LocalContext(d, ApiSettings())
            server = ApiServer(make_app(ctx), ServerOptions(HttpConfig(port=0), threads=4)).start()
            try:
                secs = load(ctx, args.tasks)
                counts = ctx.task_counts()
                print(f"loaded {sum(counts.values()):,} tasks in {secs:.1f} s: {counts}")
                summary.append(f"tasks={sum(counts.values())}")
                measure(server.url, args.repeat, summary)
                measure_pages(server.url, args.repeat, summary)
            finally:
                server.stop()
                ctx.close()
    print("dashboard_api: " + " ".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
