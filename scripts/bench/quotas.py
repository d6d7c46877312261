#!/usr/bin/env python3
"""A namespace's ``creates_per_s`` quota under a create storm, on a real cluster (docs/api.md#namespaces).

Namespace ``storm`` has ``creates_per_s: --limit`` (50); namespace ``calm`` has no quota. Four runs
of ``--seconds`` (10) each on the same cluster:

- *baseline*: one client thread creates tasks in ``calm``, one after another: its latencies.
- *hostile storm*: the same calm thread, while ``--threads`` (10) threads of another process create
  tasks in ``storm`` as fast as the leader answers (a 429 is counted and the thread sends its next
  create at once, ignoring its Retry-After). In the calm thread's process they would hold its
  interpreter lock and the calm latency would measure this harness.
- *polite storm*: the same, but a thread answered 429 waits its Retry-After first, as the SDKs do.
- *paced*: the same threads sending the quota's own rate evenly (``--limit`` per second in all,
  nothing refused): what creating that many tasks costs the calm thread, so that ``_vs_paced``
  ratios say what the refused excess costs it.

``achieved_per_s``: the storm's creates answered 201, per second of the run; ``rejected``: those
answered 429 ``quota_exceeded``; ``calm_p99_ms`` / ``baseline_p99_ms``: the calm thread's p99 create
latency with / without the storm beside it (on a small machine the storm's own requests cost CPU
the calm thread then waits for: the ratio measures that too).

    .venv/bin/python scripts/bench/quotas.py
    .venv/bin/python scripts/bench/quotas.py --nodes 1 --limit 20 --seconds 5

``--pin`` runs each node on one CPU, round-robin (``node.cpus``, docs/deploy.md#cpu-pinning); ``--free``
lets every node use every CPU (``node.cpus: all``); neither: the default, ``node.cpus: auto``.

``--rounds N`` runs the four N times each, in an order that turns every round, and the last line
gives the medians (one 10 s p99 is set by its dozen slowest creates and moves by a quarter from run
to run on a shared machine).

Last line: ``quotas: limit_per_s=... rounds=... achieved_per_s=... rejected=... calm_p99_ms=... baseline_p99_ms=...
p99_ratio=... p99_ratio_vs_paced=... polite_achieved_per_s=... polite_p99_ratio=... polite_p99_ratio_vs_paced=...``
(the first six of the hostile storm).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
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


def storm(http: urllib3.PoolManager, url: str, until: float, counts: dict[int, int], lock: threading.Lock,
          kind: str, every_s: float) -> None:
    body = _task("storm")
    nxt = time.monotonic()
    while time.monotonic() < until:
        if kind == "paced":  # the quota's own rate, sent evenly: nothing to refuse
            nxt += every_s
            time.sleep(max(0.0, nxt - time.monotonic()))
        r = http.request("POST", url, body=body, headers=_HEADERS, retries=False)
        with lock:
            counts[r.status] = counts.get(r.status, 0) + 1
        wait = r.headers.get("Retry-After", "")
        if kind == "polite" and r.status == 429 and wait.isdigit():  # as the SDKs do
            time.sleep(max(0.0, min(float(wait), until - time.monotonic())))


def storm_process(url: str, threads: int, until_wall: float, kind: str, every_s: float, out: Any) -> None:
    """The storm's threads in a process of their own (``multiprocessing``), so that they do not hold the
    calm thread's interpreter lock: the calm thread's latency is then the cluster's, not this harness's.
    Puts its answer counts on ``out``."""
    http = urllib3.PoolManager(maxsize=threads, timeout=30)
    until = time.monotonic() + max(0.0, until_wall - time.time())
    counts: dict[int, int] = {}
    lock = threading.Lock()
    ts = [threading.Thread(target=storm, args=(http, url, until, counts, lock, kind, every_s)) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put(counts)


def _run(ctx: Any, http: urllib3.PoolManager, url: str, kind: str, args: argparse.Namespace) -> tuple[float, int, float]:
    """One run of ``kind`` (``baseline``: the calm thread alone): (storm creates answered 201 per
    second, answers 429, the calm thread's p99 ms)."""
    during: list[float] = []
    t0 = time.monotonic()
    until = t0 + args.seconds
    if kind == "baseline":
        calm(http, url, until, during)
        print(f"  baseline: {len(during)} calm creates, p99_ms={_p99(during)}", flush=True)
        return 0.0, 0, _p99(during)
    answers = ctx.Queue()
    proc = ctx.Process(target=storm_process, args=(url, args.threads, time.time() + args.seconds, kind,
                                                   args.threads / args.limit, answers))
    proc.start()
    calm(http, url, until, during)
    counts: dict[int, int] = answers.get(timeout=args.seconds + 60)
    proc.join(30)
    span = time.monotonic() - t0
    achieved = counts.get(201, 0) / span
    print(f"  {kind} storm: {args.threads} threads for {span:.1f} s: answers {dict(sorted(counts.items()))} "
          f"({achieved:.1f} created/s); {len(during)} calm creates, p99_ms={_p99(during)}", flush=True)
    return achieved, counts.get(429, 0), _p99(during)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--limit", type=float, default=50.0, help="creates_per_s of namespace storm")
    ap.add_argument("--threads", type=int, default=10, help="storm threads")
    place = ap.add_mutually_exclusive_group()
    place.add_argument("--pin", action="store_true", help="each node on one CPU, round-robin (docs/deploy.md#cpu-pinning)")
    place.add_argument("--free", action="store_true", help="every node free to use every CPU (node.cpus: all)")
    ap.add_argument("--seconds", type=float, default=10.0, help="per run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every kind this many times, in a turning order, and compare medians")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="molens-quotas-"))
    extra: dict[str, Any] = {"http": {"auth_token": TOKEN}}
    if args.free:
        extra["node"] = {"cpus": "all"}
    cluster = Cluster(tmp / "cluster", args.nodes, extra=extra, state_machine="tasks")
    if args.pin:
        print(f"quotas: nodes on CPUs {','.join(map(str, cluster.pin_each_to_one_cpu()))}", flush=True)
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

        ctx = multiprocessing.get_context("fork")
        kinds = ("baseline", "paced", "hostile", "polite")
        runs: dict[str, list[tuple[float, int, float]]] = {k: [] for k in kinds}
        for rnd in range(args.rounds):
            # each round in another order, so that no kind always runs first or after the same one
            order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
            for kind in order:
                runs[kind].append(_run(ctx, http, url, kind, args))
        med = {k: statistics.median(r[2] for r in runs[k]) for k in kinds}
        base_p99, paced_p99 = med["baseline"], med["paced"]
        achieved = statistics.median(r[0] for r in runs["hostile"])
        rejected = int(statistics.median(r[1] for r in runs["hostile"]))
        p_achieved = statistics.median(r[0] for r in runs["polite"])
        p99, p_p99 = med["hostile"], med["polite"]
        print(f"quotas: limit_per_s={args.limit:g} rounds={args.rounds} achieved_per_s={achieved:.1f} rejected={rejected} "
              f"calm_p99_ms={p99} baseline_p99_ms={base_p99} p99_ratio={p99 / base_p99:.2f} "
              f"p99_ratio_vs_paced={p99 / paced_p99:.2f} polite_achieved_per_s={p_achieved:.1f} "
              f"polite_p99_ratio={p_p99 / base_p99:.2f} polite_p99_ratio_vs_paced={p_p99 / paced_p99:.2f} "
              f"paced_p99_ms={paced_p99} load1={os.getloadavg()[0]:.1f}")
        return 0
    finally:
        cluster.kill_all()


if __name__ == "__main__":
    sys.exit(main())
