#!/usr/bin/env python3
"""Tasks created per second through the Go SDK's batching client (``sdk/go``, ``Batcher``).

Builds ``scripts/bench/sdk_go`` (a small Go program over the SDK; offline: no module proxy) and runs
it for ``--seconds`` against ``--url``: by default the local 3-node cluster of ``scripts/cluster up``
(HTTP 18081-18083), which must be running. Goroutines submit delayed tasks (due in an hour: nothing
fires) as fast as the batcher takes them; every task carries the SDK's idempotency key. The Go
process's own CPU per create shows how much of the work is the SDK's.

Prints ``sdk_go: creates_per_s=... batch=... senders=... target=... sdk_cpu_us_per_create=...``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "scripts" / "bench" / "sdk_go"
CLUSTER = "http://127.0.0.1:18081,http://127.0.0.1:18082,http://127.0.0.1:18083"


def go_env() -> dict[str, str]:
    cache = ROOT / "build" / "go"
    return {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off", "CGO_ENABLED": "0",
            "GOCACHE": str(cache / "cache"), "GOPATH": str(cache / "path")}


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of a local process (Linux /proc), 0 when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=CLUSTER, help="comma-separated node URLs (default: scripts/cluster's)")
    ap.add_argument("--token", default="")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--submitters", type=int, default=4)
    ap.add_argument(
        "--server-pids", default="", help="comma-separated PIDs of local cluster nodes: report their CPU per create"
    )
    args = ap.parse_args()
    pids = [int(p) for p in args.server_pids.split(",") if p]
    go = shutil.which("go")
    if go is None:
        raise SystemExit("go is missing (apt-get install golang-go)")
    binary = ROOT / "build" / "go" / "bin" / "sdkgo"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=PROGRAM, env=go_env(), check=True)
    urls = args.url.split(",")
    target = "cluster" if len(urls) > 1 else "node"
    c0 = sum(cpu_s(p) for p in pids)
    print(f"running {binary.name} for {args.seconds:g} s against {args.url}")
    proc = subprocess.run(
        [str(binary), "-urls", args.url, "-token", args.token, "-seconds", str(args.seconds),
         "-batch", str(args.batch), "-senders", str(args.senders), "-submitters", str(args.submitters)],
        stdout=subprocess.PIPE, text=True, timeout=args.seconds + 120, check=False,
    )
    if not proc.stdout.strip():
        raise SystemExit(f"the Go program printed nothing (exit {proc.returncode})")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    extra = ""
    if pids and r["created"]:
        server_us = (sum(cpu_s(p) for p in pids) - c0) / r["created"] * 1e6
        extra = f" server_cpu_us_per_create={server_us:.1f}"
    load = os.getloadavg()[0]
    print(f"{r['created']} creates in {r['elapsed_s']:.1f} s, {r['failed']} failed"
          + (f" (first: {r['first_error']})" if r["first_error"] else ""))
    print(
        f"sdk_go: creates_per_s={r['creates_per_s']:.0f} batch={args.batch} senders={args.senders} "
        f"submitters={args.submitters} target={target} created={r['created']} failed={r['failed']} "
        f"sdk_cpu_us_per_create={r['sdk_cpu_us_per_create']:.2f} cpus={os.cpu_count()} load1={load:.1f}{extra}"
    )
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
