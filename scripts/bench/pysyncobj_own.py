#!/usr/bin/env python3
"""PySyncObj measured the way its own repository measures it: a cross-check that ``raft.py`` does not
under-measure the peer with its window-in-the-leader method.

PySyncObj's benchmark (``benchmarks/`` in its repository) starts three processes, and **every node**,
followers included, offers an open-loop rate: each second it makes ``rate / 3`` calls of a replicated
method in a burst (a follower forwards them to the leader), then sleeps out the second; it counts a
call as a success when its callback reports success, waits a few seconds for the last callbacks, and
calls a rate sustained when at least 90 % of the calls succeeded. This script does the same, with
PySyncObj's default ``SyncObjConf`` (in memory, no fsync) and a replicated dict taking values of
``--payload`` minus 12 bytes (as ``raft.py``'s PySyncObj runs do; 16 by default), for each rate of
``--rates`` in turn (a fresh cluster each), after one second of load not counted. ``raft.py`` runs
the same :func:`run` as one of the peer's configurations.

Prints per rate ``pysyncobj_own: rate=... committed_per_s=... success=... sustained=...`` (committed/s:
successful calls over the offered seconds, all nodes together) and a summary line
``pysyncobj_own: summary max_sustained_rate=... best_committed_per_s=... loadavg=...``.

    .venv/bin/python scripts/bench/pysyncobj_own.py [--rates 10000,20000,30000,40000] [--seconds 10] [--payload 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from pysyncobj_minimal import local_addrs, ready_kv  # scripts/bench, beside this file

SUCCESS = 0.9
"""PySyncObj's own criterion: a rate is sustained when this share of the calls succeeded."""
DRAIN_S = 4.0
"""Seconds left for the last callbacks after the offered seconds (PySyncObj's benchmark waits 4)."""


def node(me: str, partners: list[str], per_node: int, seconds: float, payload: int, out: str) -> None:
    """Child process: one node offering ``per_node`` calls per second; writes its counts to ``out``."""
    from pysyncobj import FAIL_REASON

    o = ready_kv(me, partners)
    time.sleep(1.0)
    counts = {"sent": 0, "ok": 0, "failed": 0}

    def counted(_res: object, err: int) -> None:
        counts["ok" if err == FAIL_REASON.SUCCESS else "failed"] += 1

    def warming(_res: object, _err: int) -> None:
        pass

    value = b"v" * max(0, payload - 12)
    key = 0
    for second in range(int(seconds) + 1):  # the first second warms up: its calls are neither sent nor ok
        cb = counted if second > 0 else warming
        st = time.monotonic()
        for _ in range(per_node):
            o.put(key, value, callback=cb)
            key += 1
        if second > 0:
            counts["sent"] += per_node
        left = 1.0 - (time.monotonic() - st)
        if left > 0:
            time.sleep(left)
    time.sleep(DRAIN_S)
    counts["leader"] = int(str(o._getLeader()) == me)
    with open(out + ".tmp", "w") as f:
        json.dump(counts, f)
    os.replace(out + ".tmp", out)
    os._exit(0)


def run(rate: int, seconds: float, payload: int = 16) -> dict[str, float]:
    """One fresh 3-node cluster offering ``rate`` calls/s in all; the nodes' counts summed."""
    addrs = local_addrs(3)
    with tempfile.TemporaryDirectory(prefix="pysyncobj-own-") as d:
        outs = [os.path.join(d, f"n{i}.json") for i in range(3)]
        procs = [
            subprocess.Popen([sys.executable, __file__, "--node", a, ",".join(x for x in addrs if x != a),
                              str(rate // 3), str(seconds), str(payload), out],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for a, out in zip(addrs, outs)
        ]
        try:
            for p in procs:
                p.wait(timeout=90 + seconds)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        total = {"sent": 0.0, "ok": 0.0, "failed": 0.0, "nodes": 0.0}
        for out in outs:
            if os.path.exists(out):
                with open(out) as f:
                    c = json.load(f)
                for k in ("sent", "ok", "failed"):
                    total[k] += c[k]
                total["nodes"] += 1
    return total


def main() -> int:
    if len(sys.argv) == 8 and sys.argv[1] == "--node":
        node(sys.argv[2], sys.argv[3].split(","), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="10000,20000,30000,40000", help="offered calls/s, all nodes together")
    ap.add_argument("--seconds", type=float, default=10.0, help="offered seconds counted per rate")
    ap.add_argument("--payload", type=int, default=16, help="entry size as in raft.py (the value is 12 bytes less)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    best_rate, best_committed = 0, 0.0
    for rate in (int(r) for r in args.rates.split(",")):
        t = run(rate, args.seconds, args.payload)
        if t["nodes"] < 3:
            print(f"pysyncobj_own: rate={rate} no result from {3 - int(t['nodes'])} node(s)", flush=True)
            continue
        success = t["ok"] / max(1.0, t["sent"])
        committed = t["ok"] / args.seconds
        sustained = success >= SUCCESS
        print(
            f"pysyncobj_own: payload={args.payload}B rate={rate} committed_per_s={committed:.0f} success={success:.3f} "
            f"failed={int(t['failed'])} unanswered={int(t['sent'] - t['ok'] - t['failed'])} "
            f"sustained={str(sustained).lower()} loadavg={os.getloadavg()[0]:.2f}",
            flush=True,
        )
        best_committed = max(best_committed, committed)
        if sustained:
            best_rate = max(best_rate, rate)
    print(
        f"pysyncobj_own: summary max_sustained_rate={best_rate} best_committed_per_s={best_committed:.0f} "
        f"seconds={args.seconds:g} loadavg={load:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
