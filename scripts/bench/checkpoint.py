#!/usr/bin/env python3
"""Benchmark: claim + done pairs per second, per backend, with 1 and 4 processes.

For each backend (memory, file, sqlite) and each process count, every process opens its own client on
one fresh store, waits at a barrier, then for ``--seconds`` runs a sequential loop of ``claim`` +
``done`` on keys nobody else uses (so each pair is a fresh claim and a real completion: two durable
writes on file and sqlite). The rate is all pairs over the wall time of the slowest process.
``memory://`` is private to each client, so its 4-process figure is 4 independent stores.

The headline runs use the async ``CheckpointClient`` (file and sqlite calls hop to a worker thread
and back); ``--clients async,sync`` adds the same runs through ``SyncCheckpointClient`` to show what
the backend alone does. Each line also gives the CPU time per pair (all threads of the worker
processes, kernel time included) and the load average when the run started: on a shared machine the
rate moves with the load, the CPU cost much less. The first line calibrates: the cost of one fsync'd
atomic file replace and bare SQLite commits per second on this machine at this moment.

Prints one line per run and a final summary line; no timed assertions (CONVENTIONS: benchmarks).
    .venv/bin/python scripts/bench/checkpoint.py [--seconds 3] [--backends memory,file,sqlite]
                                                 [--procs 1,4] [--clients async]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from multiprocessing.synchronize import Barrier
from typing import NamedTuple

from mooncat_checkpoint import CheckpointClient, Claimed, SyncCheckpointClient

TARGETS = {"memory": 50_000, "file": 800, "sqlite": 5_000}  # one process, async, this 2-core machine
WARMUP_PAIRS = 50
CHECK_EVERY = 20  # pairs between looks at the clock


class Outcome(NamedTuple):
    pairs: int
    wall_s: float
    cpu_s: float
    durability: str


async def _async_pairs(url: str, worker: int, seconds: float, barrier: Barrier) -> Outcome:
    cp = CheckpointClient(url)
    for i in range(WARMUP_PAIRS):
        c = await cp.claim("warmup", f"w{worker}-{i}")
        assert isinstance(c, Claimed)
        await cp.done("warmup", f"w{worker}-{i}", c.lease_token)
    barrier.wait()
    n = 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() < start + seconds:
        for _ in range(CHECK_EVERY):
            key = f"p{worker}-{n}"
            c = await cp.claim("bench", key, "bench")
            assert isinstance(c, Claimed), c
            await cp.done("bench", key, c.lease_token, {"n": n})
            n += 1
    out = Outcome(n, time.perf_counter() - start, time.process_time() - cpu, cp.durability)
    await cp.aclose()
    return out


def _sync_pairs(url: str, worker: int, seconds: float, barrier: Barrier) -> Outcome:
    cp = SyncCheckpointClient(url)
    for i in range(WARMUP_PAIRS):
        c = cp.claim("warmup", f"w{worker}-{i}")
        assert isinstance(c, Claimed)
        cp.done("warmup", f"w{worker}-{i}", c.lease_token)
    barrier.wait()
    n = 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() < start + seconds:
        for _ in range(CHECK_EVERY):
            key = f"p{worker}-{n}"
            c = cp.claim("bench", key, "bench")
            assert isinstance(c, Claimed), c
            cp.done("bench", key, c.lease_token, {"n": n})
            n += 1
    out = Outcome(n, time.perf_counter() - start, time.process_time() - cpu, cp.durability)
    cp.close()
    return out


def _worker(client: str, url: str, worker: int, seconds: float, barrier: Barrier, out: mp.Queue[Outcome]) -> None:
    if client == "async":
        out.put(asyncio.run(_async_pairs(url, worker, seconds, barrier)))
    else:
        out.put(_sync_pairs(url, worker, seconds, barrier))


def run(client: str, backend: str, procs: int, seconds: float) -> tuple[float, float, str]:
    """(pairs/s over all processes, CPU microseconds per pair, durability setting)."""
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-", dir=os.environ.get("BENCH_TMPDIR"))
    url = {"memory": "memory://", "file": f"file://{tmp}/cp", "sqlite": f"sqlite://{tmp}/cp.db"}[backend]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    out: mp.Queue[Outcome] = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(client, url, w, seconds, barrier, out)) for w in range(procs)]
    try:
        for p in workers:
            p.start()
        results = [Outcome(*out.get(timeout=seconds + 120)) for _ in workers]
        for p in workers:
            p.join()
    finally:
        for p in workers:
            if p.is_alive():
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    pairs = sum(r.pairs for r in results)
    return pairs / max(r.wall_s for r in results), sum(r.cpu_s for r in results) / pairs * 1e6, results[0].durability


def calibrate() -> tuple[float, float]:
    """What this machine's disk and SQLite do right now, without mooncat_checkpoint: the cost of one
    fsync'd atomic file replace (write, fsync, rename, fsync of the directory) in ms, and bare SQLite
    WAL/NORMAL commits per second. The file and sqlite figures follow these two numbers."""
    import sqlite3

    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-cal-", dir=os.environ.get("BENCH_TMPDIR"))
    try:
        n = 100
        start = time.perf_counter()
        for i in range(n):
            part = os.path.join(tmp, f".tmp-{i}")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b'{"status": "done"}\n' * 20)
            os.fsync(fd)
            os.close(fd)
            os.replace(part, os.path.join(tmp, f"k{i % 10}.json"))
            dfd = os.open(tmp, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
        replace_ms = (time.perf_counter() - start) / n * 1000
        db = sqlite3.connect(os.path.join(tmp, "cal.db"), isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        n = 5000
        start = time.perf_counter()
        for i in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t VALUES (?, 'x')", (i,))
            db.execute("COMMIT")
        commits = n / (time.perf_counter() - start)
        db.close()
        return replace_ms, commits
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="claim + done pairs per second per mooncat_checkpoint backend")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured time of each run (default 3)")
    ap.add_argument("--backends", default="memory,file,sqlite")
    ap.add_argument("--procs", default="1,4")
    ap.add_argument("--clients", default="async", help="async, sync or async,sync")
    args = ap.parse_args()
    replace_ms, commits = calibrate()
    print(
        f"checkpoint: cpus={os.cpu_count()} seconds={args.seconds} loadavg={os.getloadavg()[0]:.2f} "
        f"fsync_replace_ms={replace_ms:.2f} sqlite_bare_commits_per_s={commits:.0f}"
    )
    summary: dict[str, float] = {}
    for client in args.clients.split(","):
        for backend in args.backends.split(","):
            for procs in (int(p) for p in args.procs.split(",")):
                load = os.getloadavg()[0]
                rate, cpu_us, durability = run(client, backend, procs, args.seconds)
                summary[f"{backend}_{procs}" + ("" if client == "async" else "_sync")] = rate
                print(
                    f"checkpoint: backend={backend} procs={procs} claim_done_pairs_per_s={rate:.0f} "
                    f"client={client} cpu_us_per_pair={cpu_us:.0f} loadavg={load:.2f} "
                    f'durability="{durability}"',
                    flush=True,
                )
    met = all(summary.get(f"{b}_1", t) >= t for b, t in TARGETS.items())
    parts = " ".join(f"{k}={v:.0f}" for k, v in summary.items())
    print(f"checkpoint: {parts} one_process_targets_met={'yes' if met else 'no'} loadavg={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
