#!/usr/bin/env python3
"""A namespace's ``creates_per_s`` quota under a create storm, on a real cluster (docs/api.md#namespaces).

Namespace ``storm`` has ``creates_per_s: --limit`` (50); namespace ``calm`` has no quota. Two runs
of ``--seconds`` (10) each on the same cluster:

- *baseline*: one client thread creates tasks in ``calm``, one after another: its latencies.
- *storm*: the same calm thread, while ``--threads`` (10) threads create tasks in ``storm`` as fast
  as the leader answers (a 429 is counted and the thread sends its next create at once).

``achieved_per_s``: the storm's creates answered 201, per second of the run; ``rejected``: those
answered 429 ``quota_exceeded``; ``calm_p99_ms`` / ``baseline_p99_ms``: the calm thread's p99 create
latency with / without the storm beside it (on a small machine the storm's own requests cost CPU
the calm thread then waits for: the ratio measures that too).

    .venv/bin/python scripts/bench/quotas.py
    .venv/bin/python scripts/bench/quotas.py --nodes 1 --limit 20 --seconds 5

Last line: ``quotas: limit_per_s=... achieved_per_s=... rejected=... calm_p99_ms=... baseline_p99_ms=...
p99_ratio=...``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import urllib3  # noqa: E402

from tests.integration.conftest import Cluster  # noqa: E402

TOKEN = "bench-quotas-token"
_HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _task(ns: str) -> bytes:
    return json.dumps({"type": "delayed", "interval_ms": 3_600_000, "callback_url": "http://127.0.0.1:9/cb",
                       "namespace": ns}).encode()


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 2) if xs else float("nan")


def calm(http: urllib3.PoolManager, url: str, until: float, out: list[float]) -> None:
    body = _task("calm")
    while time.monotonic() < until:
        t = time.perf_counter()
        r = http.request("POST", url, body=body, headers=_HEADERS, retries=False)
        out.append((time.perf_counter() - t) * 1000)
        assert r.status == 201, r.data


def storm(http: urllib3.PoolManager, url: str, until: float, counts: dict[int, int], lock: threading.Lock) -> None:
    body = _task("storm")
    while time.monotonic() < until:
        r = http.request("POST", url, body=body, headers=_HEADERS, retries=False)
        with lock:
            counts[r.status] = counts.get(r.status, 0) + 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--limit", type=float, default=50.0, help="creates_per_s of namespace storm")
    ap.add_argument("--threads", type=int, default=10, help="storm threads")
    ap.add_argument("--seconds", type=float, default=10.0, help="per run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="molens-quotas-"))
    cluster = Cluster(tmp / "cluster", args.nodes, extra={"http": {"auth_token": TOKEN}}, state_machine="tasks")
    try:
        cluster.start()
        leader = cluster.leader(timeout=30)
        base = f"http://127.0.0.1:{leader.settings['http']['port']}"
        http = urllib3.PoolManager(maxsize=args.threads + 2, timeout=30)

        def admin(path: str, body: Any) -> None:
            r = http.request("POST", base + path, body=json.dumps(body).encode(), headers=_HEADERS, retries=False)
            assert r.status == 201, r.data

        admin("/api/v1/namespaces", {"name": "storm", "quotas": {"creates_per_s": args.limit}})
        admin("/api/v1/namespaces", {"name": "calm"})
        url = base + "/api/v1/tasks"

        baseline: list[float] = []
        calm(http, url, time.monotonic() + args.seconds, baseline)
        print(f"  baseline: {len(baseline)} calm creates, p99_ms={_p99(baseline)}", flush=True)

        counts: dict[int, int] = {}
        lock = threading.Lock()
        until = time.monotonic() + args.seconds
        t0 = time.monotonic()
        threads = [threading.Thread(target=storm, args=(http, url, until, counts, lock)) for _ in range(args.threads)]
        for t in threads:
            t.start()
        during: list[float] = []
        calm(http, url, until, during)
        for t in threads:
            t.join()
        span = time.monotonic() - t0
        achieved = counts.get(201, 0) / span
        print(f"  storm: {args.threads} threads for {span:.1f} s: answers {dict(sorted(counts.items()))}; "
              f"{len(during)} calm creates, p99_ms={_p99(during)}", flush=True)
        p99s = (_p99(during), _p99(baseline))
        print(f"quotas: limit_per_s={args.limit:g} achieved_per_s={achieved:.1f} rejected={counts.get(429, 0)} "
              f"calm_p99_ms={p99s[0]} baseline_p99_ms={p99s[1]} p99_ratio={p99s[0] / p99s[1]:.2f}")
        return 0
    finally:
        cluster.kill_all()


if __name__ == "__main__":
    sys.exit(main())
