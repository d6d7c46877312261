#!/usr/bin/env python3
"""Flow control on a 3-node cluster: 50 flows with different limits, fires offered at ``--rate``.

Two runs of the same traffic on one cluster (docs/architecture.md#flow-control):

- *baseline*: 50 flows without settings (nothing limited): the unlimited group's p99 lateness.
- *limited*: the same traffic in 50 flows of which 40 have a rate limit, 10 to 49 fires/s (burst 1),
  the last ten of them also a concurrency of 8, each offered 1.2 x its limit (a backlog builds), and
  10 flows without settings that take the rest of the offered rate.

``max_rate_error_pct``: the worst |achieved - limit| / limit over the 30 flows with a rate only (the
ten with a concurrency too are printed apart: when a round trip takes longer than 8 / rate, the
concurrency binds first, as it should), achieved = that
flow's deliveries received between 1 s after its first and the end of the offered window, per second
of that span (its steady state). ``unthrottled_p99_ms`` / ``baseline_p99_ms``: p99 lateness (receive
- due) of the first delivery of each fire of the 10 unlimited flows, in the limited run / in the
baseline. Every task is delayed, at_least_once, ``run_at`` spaced evenly per flow, created before
the first is due; the receiver is the recording receiver in a process of its own.

    .venv/bin/python scripts/bench/flows.py                      # 2000 fires/s for 10 s
    .venv/bin/python scripts/bench/flows.py --rate 1000 --duration 20

Last line: ``flows: flows=50 offered_per_s=... max_rate_error_pct=... unthrottled_p99_ms=...
baseline_p99_ms=...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lateness import Receiver  # noqa: E402

from molens.client import MolensClient  # noqa: E402
from tests.integration.conftest import Cluster  # noqa: E402

FLOWS = 50
LIMITED = 40
CONCURRENT_FROM = 30
"""Limited flows from this index on also have ``concurrency: CONCURRENCY``."""
CONCURRENCY = 8
OVER = 1.2
"""Each limited flow is offered this much more than its limit."""
LEAD_S = 3.0
STEADY_AFTER_MS = 1_000


SCALE = 1.0
"""``--limit-scale``: every limit times this (a machine that cannot carry 2,000 fires/s still shows
whether the limits hold)."""


def limit_of(i: int) -> float:
    return round((10 + i) * SCALE, 2)


def plan(rate: float) -> list[float]:
    """Offered fires/s per flow: the limited flows 1.2 x their limit, the unlimited ones the rest."""
    limited = [OVER * limit_of(i) for i in range(LIMITED)]
    rest = max(0.0, rate - sum(limited))
    return limited + [rest / (FLOWS - LIMITED)] * (FLOWS - LIMITED)


def offer(client: MolensClient, rec: Receiver, run: str, rates: list[float], duration: float) -> tuple[int, int]:
    """Create every task of one run; returns (tasks, t0 epoch ms)."""
    n_total = int(sum(rates) * duration)
    t0 = int(time.time() * 1000 + (LEAD_S + n_total / 10_000) * 1000)
    bodies: list[dict[str, Any]] = []
    for i, r in enumerate(rates):
        n = int(r * duration)
        for k in range(n):
            due = t0 + int(k * 1000 / r)
            bodies.append({"type": "delayed", "run_at": due, "callback_url": rec.url(f"{run}-{i}"),
                           "payload": {"due": due}, "flow_key": f"{run}-f{i}"})
    bodies.sort(key=lambda b: b["run_at"])
    t = time.monotonic()
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(client.create_many, [bodies[i:i + 1000] for i in range(0, len(bodies), 1000)]))
    print(f"  {run}: {len(bodies)} tasks in {FLOWS} flows created in {time.monotonic() - t:.1f} s", flush=True)
    if time.time() * 1000 > t0:
        print("  warning: creating them took past the first due time", flush=True)
    return len(bodies), t0


def collect(rec: Receiver, run: str, want: int, deadline_s: float) -> dict[int, list[tuple[int, int]]]:
    """Per flow index: (receive ms, due ms) of the first delivery of each fire, once ``want`` fires
    arrived (or the deadline)."""
    end = time.monotonic() + deadline_s
    prefix = f"/ok/{run}-"
    while True:
        first: dict[str, tuple[int, int, int]] = {}
        with open(rec.path) as f:
            for line in f:
                if prefix not in line or not line.endswith("\n"):
                    continue
                d = json.loads(line)
                if d["fire"] not in first:
                    first[d["fire"]] = (int(d["path"].rsplit("-", 1)[1]), d["at"], json.loads(d["body"])["due"])
        if len(first) >= want or time.monotonic() > end:
            break
        time.sleep(1.0)
    out: dict[int, list[tuple[int, int]]] = {}
    for i, at, due in first.values():
        out.setdefault(i, []).append((at, due))
    print(f"  {run}: {len(first)}/{want} fires arrived", flush=True)
    return out


def p99(lat: list[int]) -> int:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=2_000, help="fires/s offered in all (default 2000)")
    ap.add_argument("--duration", type=float, default=10, help="seconds of offered traffic per run (default 10)")
    ap.add_argument("--limit-scale", type=float, default=1.0, help="every flow's limit times this (default 1)")
    args = ap.parse_args()
    global SCALE
    SCALE = args.limit_scale
    rates = plan(args.rate)
    print(f"flows: {FLOWS} flows, {LIMITED} limited ({limit_of(0):g}..{limit_of(LIMITED - 1):g}/s), offered {sum(rates):.0f}/s "
          f"for {args.duration:g} s; load={os.getloadavg()[0]:.2f}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="molens-bench-flows-"))  # removed at the end unless BENCH_KEEP=1
    rec = Receiver(tmp)
    extra = {"logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}}
    cluster = Cluster(tmp / "cluster", 3, extra=extra, state_machine="tasks")
    try:
        cluster.start()
        cluster.leader(timeout=30)
        urls = [f"http://127.0.0.1:{n.settings['http']['port']}" for n in cluster.nodes.values()]
        client = MolensClient(urls, retry_deadline_s=60)

        run = f"b{int(time.time())}"
        n, t0 = offer(client, rec, run, rates, args.duration)
        got = collect(rec, run, n, args.duration + LEAD_S + 60)
        base = p99([at - due for i in range(LIMITED, FLOWS) for at, due in got.get(i, [])])
        print(f"  baseline: unlimited flows p99_ms={base}", flush=True)

        run = f"l{int(time.time())}"
        for i in range(LIMITED):
            client.set_flow(f"{run}-f{i}", rate_per_s=limit_of(i),
                            concurrency=CONCURRENCY if i >= CONCURRENT_FROM else None)
        n, t0 = offer(client, rec, run, rates, args.duration)
        drain = max((OVER - 1) * args.duration * 1.5, 5)  # the backlog a limited flow builds, drained at its limit
        got = collect(rec, run, n, args.duration + LEAD_S + drain + 60)
        errors = []
        achieved_all = []
        end = t0 + int(args.duration * 1000)
        for i in range(LIMITED):
            recv = sorted(at for at, _ in got.get(i, []))
            start = (recv[0] if recv else end) + STEADY_AFTER_MS
            steady = [a for a in recv if start <= a < end]
            achieved = len(steady) / ((end - start) / 1000) if end > start else 0.0
            achieved_all.append(achieved)
            errors.append(abs(achieved - limit_of(i)) / limit_of(i) * 100)
        print("  achieved/limit per limited flow: " + " ".join(
            f"f{i}={achieved_all[i]:.1f}/{limit_of(i):g}{'c' if i >= CONCURRENT_FROM else ''}" for i in range(LIMITED)))
        rate_only = range(CONCURRENT_FROM)  # flows whose rate alone limits them (the others also have a concurrency)
        worst = max(rate_only, key=lambda i: errors[i])
        conc = [errors[i] for i in range(CONCURRENT_FROM, LIMITED)]
        unthrottled = p99([at - due for i in range(LIMITED, FLOWS) for at, due in got.get(i, [])])
        print(f"  limited: worst rate-only flow f{worst} (limit {limit_of(worst):g}/s) error {errors[worst]:.1f} %; "
              f"mean {sum(errors[i] for i in rate_only) / len(rate_only):.1f} %; flows with concurrency "
              f"{CONCURRENCY} too: worst {max(conc):.1f} % (c: the concurrency may bind first); "
              f"unlimited flows p99_ms={unthrottled}", flush=True)
        flows_now = client.flows()
        held = sum(f["queued"] or 0 for f in flows_now)
        print(f"  leader's flows now: {len(flows_now)} listed, {held} fires held", flush=True)
        print(f"flows: flows={FLOWS} offered_per_s={sum(rates):.0f} max_rate_error_pct={errors[worst]:.1f} "
              f"unthrottled_p99_ms={unthrottled} baseline_p99_ms={base} load={os.getloadavg()[0]:.2f}", flush=True)
        client.close()
    finally:
        cluster.kill_all()
        rec.close()
        if os.environ.get("BENCH_KEEP") != "1":  # node data and received callbacks, ~0.1-0.2 GB a run
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
