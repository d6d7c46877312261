#!/usr/bin/env python3
"""Slow clients against one node with its default edge settings (docs/architecture.md#http-edge).

``--clients`` connections (500), spread over loopback source addresses 100 to an address, each send a
request head a byte a second and never finish it; meanwhile one client asks ``/healthz`` over a
keep-alive connection every 20 ms. Prints the ``/healthz`` latency (p50, p99, max) while the slow
connections are open, when the node closed each (seconds after its first byte; the default head
deadline is 10 s) and how many were answered 408, and the node's RSS before, at the peak and after.
First, without slow clients, the same ``/healthz`` probe for ``--seconds`` as the reference.

    .venv/bin/python scripts/bench/slow_clients.py
    .venv/bin/python scripts/bench/slow_clients.py --clients 200

Last line: ``slow_clients: clients=... healthz_p99_ms=... healthz_p99_idle_ms=... closed_max_s=...
answered_408=... rss_base_mib=... rss_peak_mib=... rss_after_mib=...``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.conftest import Cluster  # noqa: E402
from tests.integration.trickle import rss_bytes, trickle  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=5.0, help="the idle reference's length")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="molens-slow-") as tmp:
        c = Cluster(Path(tmp), 1, state_machine="tasks")
        try:
            c.start()
            node = c.leader(timeout=30)
            port = int(node.settings["http"]["port"])
            idle = trickle(port, 0, give_up_s=args.seconds)  # no slow clients: the probe alone
            trickle(port, 20, give_up_s=30)  # warm the code paths, so the baseline includes them
            base = rss_bytes(node.pid)
            t0 = time.monotonic()
            got = trickle(port, args.clients, give_up_s=60, pid=node.pid)
            took = time.monotonic() - t0
            time.sleep(2)  # a benchmark, not a test: let the allocator settle before the last reading
            after = rss_bytes(node.pid)
        finally:
            c.kill_all()
    closes = sorted(got.closed_after_s)
    p = got.p
    print(f"idle: /healthz {len(idle.probes_ms)} requests p50 {p(idle.probes_ms, 0.5):.1f} ms "
          f"p99 {p(idle.probes_ms, 0.99):.1f} ms")
    print(f"{args.clients} slow clients for {took:.1f} s: /healthz {len(got.probes_ms)} requests "
          f"p50 {p(got.probes_ms, 0.5):.1f} ms p99 {p(got.probes_ms, 0.99):.1f} ms max {max(got.probes_ms):.1f} ms, "
          f"failed {len(got.probe_failures)}; closed after first byte min {closes[0]:.2f} s median "
          f"{p(closes, 0.5):.2f} s max {closes[-1]:.2f} s, answered 408 {got.answered_408}, "
          f"left open {got.open_at_end}")
    print(f"slow_clients: clients={args.clients} healthz_p99_ms={p(got.probes_ms, 0.99):.1f} "
          f"healthz_p99_idle_ms={p(idle.probes_ms, 0.99):.1f} closed_max_s={closes[-1]:.2f} "
          f"answered_408={got.answered_408} rss_base_mib={base / 2**20:.0f} rss_peak_mib={got.rss_peak / 2**20:.0f} "
          f"rss_after_mib={after / 2**20:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
