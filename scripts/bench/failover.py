#!/usr/bin/env python3
"""Failover: the callback gap when the leader is kill -9'd at 1,000 fires/s, and the wheel rebuild.

1. A 3-node cluster (``molens-node`` processes, default Raft timeouts) fires ``--rate`` delayed
   at_least_once callbacks per second for ``--duration`` s into a recording receiver process; at the
   middle the leader is kill -9'd. ``gap_s`` is the longest time with no callback received around
   the kill; ``first_fire_s`` is the time from the kill to the first callback of a fire due more
   than ``scheduler.dispatch_lead_ms`` after it (only a new leader can have planned that one). Repeated ``--trials`` times (a new cluster
   each), the worst trial is reported.
2. Wheel rebuild with ``--pending`` (1,000,000) pending tasks: a TaskStore (lmdb, the node's own
   code) is filled through ``apply_batch`` with CreateTasks batches (due over the next hour), then
   timed as a new leader does it: fill a fresh wheel's window (``scheduler.wheel_horizon_ms``, the
   default) slice by slice from ``due`` (``LeaderWheel.fill``) and read ``fires``.
3. ``--full``: the failover load scenario at full size (20,000 at_least_once + 2,000 at_most_once
   delayed tasks due over 60 s, the leader kill -9'd twice) -- the CI test runs it scaled down.

Prints ``failover: gap_s=... first_fire_s=... rebuild_s=... rebuild_tasks=...`` last.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from molens.actors.timewheel import LeaderWheel  # noqa: E402
from molens.client import MolensClient  # noqa: E402
from molens.config import SchedulerConfig  # noqa: E402
from molens.fsm.commands import CreateItem, CreateTasks, encode  # noqa: E402
from molens.fsm.store import TaskStore  # noqa: E402
from molens.model import new_task_id, validate_create  # noqa: E402
from molens.raft.log import Entry  # noqa: E402
from tests.integration import failover_load  # noqa: E402
from tests.integration.conftest import Cluster, free_ports  # noqa: E402
from tests.integration.recording_receiver import RecordingReceiver  # noqa: E402


def _receiver(root: Path) -> tuple[Any, int, Path]:
    import subprocess

    root.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    path = root / "received.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.recording_receiver", str(port), str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc, port, path


def _lines(path: Path) -> list[str]:
    with open(path) as f:
        return f.readlines()


def gap_trial(root: Path, rate: float, duration: float) -> tuple[float, float]:
    proc, port, path = _receiver(root)
    extra = {"logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}}
    c = Cluster(root / "cluster", 3, extra=extra, state_machine="tasks")
    try:
        c.start()
        c.leader(timeout=30)
        urls = [f"http://127.0.0.1:{n.settings['http']['port']}" for n in c.nodes.values()]
        client = MolensClient(urls, retry_deadline_s=60)
        n = int(rate * duration)
        t0 = int(time.time() * 1000 + 3_000 + n / 10)
        bodies = [
            {"type": "delayed", "run_at": (d := t0 + int(i * 1000 / rate)), "callback_url": f"http://127.0.0.1:{port}/ok/g",
             "payload": {"due": d}}
            for i in range(n)
        ]
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(client.create_many, [bodies[i : i + 1000] for i in range(0, n, 1000)]))
        kill_at = t0 + duration * 500
        while time.time() * 1000 < kill_at:
            time.sleep(0.01)
        leader = c.leader(timeout=10)
        t_kill = time.time() * 1000
        leader.kill()
        new = c.leader(timeout=30)
        print(f"  killed {leader.node_id}; {new.node_id} leads after {time.time() * 1000 - t_kill:.0f} ms", flush=True)
        end = time.time() + duration / 2 + 30
        while time.time() < end and len({json.loads(line)["fire"] for line in _lines(path)}) < n:
            time.sleep(0.5)  # distinct fires: at-least-once re-deliveries add lines too
        recs = [json.loads(line) for line in _lines(path)]
        times = sorted(r["at"] for r in recs)
        last_due = t0 + (n - 1) * 1000 / rate  # after it silence is the end of the run, not a gap
        around = [t for t in times if t_kill - 1_000 <= t <= min(t_kill + 30_000, last_due)]
        gap = max((b - a for a, b in itertools.pairwise(around)), default=0) / 1000
        # fires due within the dispatch lead after the kill were planned (and, on live workers,
        # delivered) by the old leader: only later ones need the new leader
        lead = SchedulerConfig().dispatch_lead_ms
        after = [r["at"] for r in recs if json.loads(r["body"])["due"] > t_kill + lead]
        first = (min(after) - t_kill) / 1000 if after else float("nan")
        got = len({r["fire"] for r in recs})
        print(f"  trial: delivered {got}/{n} fires, gap_s={gap:.2f} first_fire_s={first:.2f}", flush=True)
        client.close()
        return gap, first
    finally:
        c.kill_all()
        proc.kill()
        proc.wait(10)


def rebuild(root: Path, pending: int) -> tuple[float, int]:
    store = TaskStore(root / "rebuild", durable=False)
    now = int(time.time() * 1000)
    spec = validate_create({"type": "delayed", "interval_ms": 3_600_000, "callback_url": "http://127.0.0.1:9/x"},
                           now_ms=now)
    t = time.monotonic()
    index = 0
    batch = 1000
    for lo in range(0, pending, batch * 10):
        entries = []
        for b in range(lo, min(pending, lo + batch * 10), batch):
            items = tuple(
                CreateItem(new_task_id(now + (b + i) % 3_600_000, secrets.randbits(80)), spec)
                for i in range(min(batch, pending - b))
            )
            index += 1
            # stamped over the last hour: with interval_ms 3,600,000 they are due evenly over the next one
            entries.append(Entry(index, 1, data=encode(CreateTasks(now - 3_600_000 + b * 3_600_000 // pending, items))))
        store.apply_batch(entries)
    print(f"  filled a store with {len(store)} pending tasks in {time.monotonic() - t:.1f} s", flush=True)
    t = time.monotonic()
    now = int(time.time() * 1000)
    wheel = LeaderWheel(10, now, SchedulerConfig().wheel_horizon_ms)
    n = wheel.fill(store.read_due, now)
    fires = sum(1 for _ in store.scan_fires())
    took = time.monotonic() - t
    print(f"  rebuild: {n} tasks into the wheel, {fires} fires read, in {took:.2f} s", flush=True)
    store.close()
    return took, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--full", action="store_true", help="also the 20,000 + 2,000 task, two-kill load scenario")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="molens-failover-"))
    extra: dict[str, str] = {}
    gaps, firsts = [], []
    for i in range(args.trials):
        g, f = gap_trial(tmp / f"trial{i}", args.rate, args.duration)
        gaps.append(g)
        firsts.append(f)
    took, n = rebuild(tmp, args.pending) if args.pending else (0.0, 0)
    if args.full:
        rec = RecordingReceiver()
        c = Cluster(tmp / "full", 3, extra=failover_load.SETTINGS, state_machine="tasks")
        try:
            c.start()
            c.leader(timeout=30)
            report = failover_load.run(c, rec, n_alo=20_000, n_amo=2_000, spread_s=60)
            print("failover_full:", report.summary(), flush=True)
            extra = {
                "full_alo_missing": str(len(report.alo_missing)),
                "full_amo_twice": str(len(report.amo_twice)),
                "full_duplicates": str(report.duplicates),
                "full_p99_ms": str(report.pct(0.99)),
            }
        finally:
            c.kill_all()
            rec.close()
    more = "".join(f" {k}={v}" for k, v in extra.items())
    print(
        f"failover: gap_s={max(gaps):.2f} first_fire_s={max(firsts):.2f} rate={args.rate:g} trials={args.trials} "
        f"rebuild_s={took:.2f} rebuild_tasks={n}{more}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
