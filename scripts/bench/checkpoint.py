#!/usr/bin/env python3
"""Benchmark: claim + done pairs per second, per backend, with 1 and 8 processes, async and sync clients.

For each backend (memory, file, sqlite, redis, postgresql) and each process count, every process opens
its own client on one fresh store (a fresh namespace on the servers), waits at a barrier, then for
``--seconds`` runs a sequential loop of ``claim`` + ``done`` on keys nobody else uses (so each pair is
a fresh claim and a real completion: two durable writes on file and sqlite, two round trips on the
servers). The rate is all pairs over the wall time of the slowest process. ``memory://`` is private to
each client, so its 8-process figure is 8 independent stores. Redis and PostgreSQL are Debian's
servers started here on 127.0.0.1 (tests/checkpoint_servers.py), PostgreSQL with fsync on, Redis with
its defaults (no AOF).

Runs go backend by backend, async then sync for each process count, so the two clients of one backend
are measured minutes apart at most. For every backend measured with both clients at one process a
line gives ``async_sync_ratio`` (async pairs/s over sync pairs/s). Each run's line also gives the CPU
time per pair (all threads of the worker processes, kernel time included) and the load average when
the run started: on a shared machine the rate moves with the load, the CPU cost much less. The first
line calibrates: the cost of one fsync'd atomic file replace (a file pair needs two, so
``fsync_bound_pairs_per_s`` = 1000 / (2 x that)) and bare SQLite commits per second, on this machine
at this moment. The disk of a shared machine changes its mind within seconds, so each one-process file
run measures the replace cost for a second just before and just after it, prints the bound from their
mean and ``of_fsync_bound`` (the run's pairs/s over that bound). Because the disk also changes within
a run, a further line gives ``interleaved_of_fsync_bound``: the median over twelve alternating
quarter-second windows of pairs and bare replaces (``interleaved_bound_ratio``), with its min and max.

Prints one line per run and a final summary line; no timed assertions (CONVENTIONS: benchmarks).
    .venv/bin/python scripts/bench/checkpoint.py [--seconds 3] [--backends memory,file,sqlite,redis,postgresql]
                                                 [--procs 1,8] [--clients async,sync]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from typing import NamedTuple

from mooncat_checkpoint import CheckpointClient, Claimed, SyncCheckpointClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGETS = {"memory": 50_000, "file": 800, "sqlite": 5_000}  # one process, async, this 2-core machine
WARMUP_PAIRS = 50
CHECK_EVERY = 20  # pairs between looks at the clock


class Outcome(NamedTuple):
    pairs: int
    wall_s: float
    cpu_s: float
    durability: str


async def _async_pairs(url: str, ns: str, worker: int, seconds: float, barrier: Barrier) -> Outcome:
    cp = CheckpointClient(url)
    for i in range(WARMUP_PAIRS):
        c = await cp.claim(ns + "-warmup", f"w{worker}-{i}")
        assert isinstance(c, Claimed)
        await cp.done(ns + "-warmup", f"w{worker}-{i}", c.lease_token)
    barrier.wait()
    n = 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() < start + seconds:
        for _ in range(CHECK_EVERY):
            key = f"p{worker}-{n}"
            c = await cp.claim(ns, key, "bench")
            assert isinstance(c, Claimed), c
            await cp.done(ns, key, c.lease_token, {"n": n})
            n += 1
    out = Outcome(n, time.perf_counter() - start, time.process_time() - cpu, cp.durability)
    await cp.aclose()
    return out


def _sync_pairs(url: str, ns: str, worker: int, seconds: float, barrier: Barrier) -> Outcome:
    cp = SyncCheckpointClient(url)
    for i in range(WARMUP_PAIRS):
        c = cp.claim(ns + "-warmup", f"w{worker}-{i}")
        assert isinstance(c, Claimed)
        cp.done(ns + "-warmup", f"w{worker}-{i}", c.lease_token)
    barrier.wait()
    n = 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() < start + seconds:
        for _ in range(CHECK_EVERY):
            key = f"p{worker}-{n}"
            c = cp.claim(ns, key, "bench")
            assert isinstance(c, Claimed), c
            cp.done(ns, key, c.lease_token, {"n": n})
            n += 1
    out = Outcome(n, time.perf_counter() - start, time.process_time() - cpu, cp.durability)
    cp.close()
    return out


def _worker(
    client: str, url: str, ns: str, worker: int, seconds: float, barrier: Barrier, out: mp.Queue[Outcome]
) -> None:
    if client == "async":
        out.put(asyncio.run(_async_pairs(url, ns, worker, seconds, barrier)))
    else:
        out.put(_sync_pairs(url, ns, worker, seconds, barrier))


def run(client: str, backend: str, procs: int, seconds: float, servers: dict[str, str]) -> tuple[float, float, str]:
    """(pairs/s over all processes, CPU microseconds per pair, durability setting)."""
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-", dir=os.environ.get("BENCH_TMPDIR"))
    if backend in servers:
        url = servers[backend]
    else:
        url = {"memory": "memory://", "file": f"file://{tmp}/cp", "sqlite": f"sqlite://{tmp}/cp.db"}[backend]
    ns = f"bench-{client}-{procs}-{os.getpid()}-{time.monotonic_ns()}"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    out: mp.Queue[Outcome] = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(client, url, ns, w, seconds, barrier, out)) for w in range(procs)]
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


def fsync_replace_ms(seconds: float = 1.0) -> float:
    """The cost, in ms, of one fsync'd atomic file write (temp file, fsync, rename, fsync of the
    directory) on this disk now, averaged over ``seconds`` of them. Like a claim + done, each name is
    written twice, first as a new file and then replaced: the file backend does two per pair."""
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-cal-", dir=os.environ.get("BENCH_TMPDIR"))
    try:
        n, elapsed = _replaces(tmp, 0, seconds)
        return elapsed / n * 1000
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _replaces(directory: str, first: int, seconds: float) -> tuple[int, float]:
    """Bare fsync'd atomic replaces for ``seconds`` (at least 20): (how many, seconds taken)."""
    n = 0
    start = time.perf_counter()
    while n < 20 or time.perf_counter() < start + seconds:
        i = first + n
        part = os.path.join(directory, f".tmp-{i}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b'{"status": "done"}\n' * 20)
        os.fsync(fd)
        os.close(fd)
        os.replace(part, os.path.join(directory, f"k{i // 2}.json"))  # as a pair: create, then replace
        dfd = os.open(directory, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        n += 1
    return n, time.perf_counter() - start


def interleaved_bound_ratio(rounds: int = 12, window_s: float = 0.25) -> list[float]:
    """The file backend's pairs/s over its fsync bound in ``rounds`` short windows: bare replaces,
    claim + done pairs (sync client, one process, a store on the same disk), bare replaces, ... Each
    pair window's rate is divided by the bound (replaces/s / 2) of the windows just before and after
    it. The disk of a shared machine changes its speed within seconds, which one bound measured
    around a 3 s run cannot follow; adjacent quarter-second windows can."""
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-ab-", dir=os.environ.get("BENCH_TMPDIR"))
    cp = SyncCheckpointClient(f"file://{tmp}/cp")
    raw = os.path.join(tmp, "raw")
    os.makedirs(raw)
    try:
        done = 0
        written, taken = _replaces(raw, 0, window_s)
        before = written / taken
        ratios = []
        for _ in range(rounds):
            n, start = 0, time.perf_counter()
            while n < 10 or time.perf_counter() < start + window_s:
                key = f"p-{done + n}"
                c = cp.claim("bench", key, "bench")
                assert isinstance(c, Claimed), c
                cp.done("bench", key, c.lease_token, {"n": n})
                n += 1
            pairs = n / (time.perf_counter() - start)
            done += n
            more, taken = _replaces(raw, written, window_s)
            written += more
            after = more / taken
            ratios.append(pairs / ((before + after) / 2 / 2))
            before = after
        return ratios
    finally:
        cp.close()
        shutil.rmtree(tmp, ignore_errors=True)


def calibrate() -> tuple[float, float, float]:
    """What this machine's disk and SQLite do right now, without mooncat_checkpoint: the fsync'd
    replace cost (``fsync_replace_ms``) and bare SQLite WAL commits per second with
    ``synchronous=NORMAL`` (the sqlite backend's setting) and with ``FULL`` (an fsync per commit).
    The file and sqlite figures follow these numbers."""
    replace_ms = fsync_replace_ms()
    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-cal-", dir=os.environ.get("BENCH_TMPDIR"))
    try:
        return replace_ms, _bare_commits(tmp, "NORMAL", 5000), _bare_commits(tmp, "FULL", 1000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bare_commits(tmp: str, synchronous: str, n: int) -> float:
    """Commits per second of ``n`` one-row ``BEGIN IMMEDIATE`` transactions on a WAL database."""
    import sqlite3

    db = sqlite3.connect(os.path.join(tmp, f"cal-{synchronous}.db"), isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous}")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        start = time.perf_counter()
        for i in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t VALUES (?, 'x')", (i,))
            db.execute("COMMIT")
        return n / (time.perf_counter() - start)
    finally:
        db.close()


TS_VERSION = "0.5.1"
"""The original TypeScript mooncat-checkpoint, as scripts/test installs it (npm, into .cache/)."""

TS_DURABILITY = {
    "memory": "none (process memory)",
    "file": "none: writeFileSync of a temp file + renameSync, no fsync",
}

TS_LOOP = r"""
import { CheckpointClient } from "%(lib)s";
const [url, seconds] = [process.argv[2], Number(process.argv[3])];
const cp = new CheckpointClient({ url });
const ns = "bench-ts-" + process.pid;
for (let i = 0; i < 50; i++) {  // warm-up, as the Python loop
  const c = await cp.claim(ns + "-warmup", "w" + i, { ownerRunId: "bench" });
  await cp.done(ns + "-warmup", "w" + i, { leaseToken: c.leaseToken });
}
const cpu0 = process.cpuUsage();
const t0 = performance.now();
let n = 0;
while (performance.now() < t0 + seconds * 1000) {
  for (let k = 0; k < 20; k++) {
    const key = "p-" + n;
    const c = await cp.claim(ns, key, { ownerRunId: "bench" });
    if (c.kind !== "claimed") throw new Error("not claimed: " + c.kind);
    await cp.done(ns, key, { leaseToken: c.leaseToken, result: { n } });
    n++;
  }
}
const wall = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ pairs: n, wall_s: wall, cpu_s: (cpu.user + cpu.system) / 1e6 }));
"""


def ts_lib_dir() -> str | None:
    """Where the npm package is, or None when it (or node) is missing."""
    d = os.environ.get("MOONCAT_CHECKPOINT_NODE_DIR") or os.path.join(ROOT, ".cache", f"npm-mooncat-checkpoint-{TS_VERSION}")
    lib = os.path.join(d, "node_modules", "mooncat-checkpoint", "dist", "index.js")
    return lib if os.path.exists(lib) and shutil.which("node") else None


def run_typescript(lib: str, backend: str, seconds: float) -> tuple[float, float]:
    """The same one-process claim + done loop in Node with the TypeScript library: (pairs/s, CPU us per pair)."""
    import json
    import subprocess

    tmp = tempfile.mkdtemp(prefix="bench-checkpoint-ts-", dir=os.environ.get("BENCH_TMPDIR"))
    try:
        script = os.path.join(tmp, "loop.mjs")
        with open(script, "w") as f:
            f.write(TS_LOOP % {"lib": lib})
        url = {"memory": "memory://", "file": f"file://{tmp}/cp"}[backend]
        out = subprocess.run(["node", script, url, str(seconds)], capture_output=True, text=True, timeout=seconds + 120,
                             check=True, cwd=tmp)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        return r["pairs"] / r["wall_s"], r["cpu_s"] / r["pairs"] * 1e6
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def versus_typescript(seconds: float, rounds: int) -> dict[str, float]:
    """Python (async client, the same loop as above) and the TypeScript original, in turn, one process
    each, memory and file backends (the TypeScript SQLite backend needs the native better-sqlite3,
    which the install leaves out). Ratio = Python pairs/s over TypeScript's, the better run of each."""
    lib = ts_lib_dir()
    if lib is None:
        print("checkpoint_vs_typescript: skipped (node or the npm package is missing: run scripts/test once)")
        return {}
    out: dict[str, float] = {}
    for backend in ("memory", "file"):
        py: list[float] = []
        ts: list[float] = []
        for _ in range(rounds):
            load = os.getloadavg()[0]
            rate, cpu_us, durability = run("async", backend, 1, seconds, {})
            py.append(rate)
            print(f"checkpoint: side=python backend={backend} claim_done_pairs_per_s={rate:.0f} cpu_us_per_pair={cpu_us:.0f} "
                  f'loadavg={load:.2f} durability="{durability}"', flush=True)
            load = os.getloadavg()[0]
            rate, cpu_us = run_typescript(lib, backend, seconds)
            ts.append(rate)
            print(f"checkpoint: side=typescript backend={backend} claim_done_pairs_per_s={rate:.0f} cpu_us_per_pair={cpu_us:.0f} "
                  f'loadavg={load:.2f} durability="{TS_DURABILITY[backend]}"', flush=True)
        ratio = max(py) / max(ts)
        fsyncs = "python" if backend == "file" else "neither"
        print(f"checkpoint_vs_typescript: backend={backend} ratio={ratio:.2f} python_pairs_per_s={max(py):.0f} "
              f"typescript_pairs_per_s={max(ts):.0f} fsyncs={fsyncs} typescript_version={TS_VERSION}", flush=True)
        out[f"vs_ts_{backend}_ratio"] = ratio
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="claim + done pairs per second per mooncat_checkpoint backend")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured time of each run (default 3)")
    ap.add_argument("--backends", default="memory,file,sqlite,redis,postgresql")
    ap.add_argument("--procs", default="1,8")
    ap.add_argument("--clients", default="async,sync", help="async, sync or async,sync")
    ap.add_argument(
        "--vs-typescript", type=int, default=0, metavar="ROUNDS",
        help="only compare with the original TypeScript library (memory, file), this many rounds each",
    )
    args = ap.parse_args()
    if args.vs_typescript:
        print(f"checkpoint: cpus={os.cpu_count()} seconds={args.seconds} loadavg={os.getloadavg()[0]:.2f} "
              f"fsync_replace_ms={fsync_replace_ms():.2f}", flush=True)
        res = versus_typescript(args.seconds, args.vs_typescript)
        print("checkpoint: " + " ".join(f"{k}={v:.2f}" for k, v in res.items()) + f" loadavg={os.getloadavg()[0]:.2f}")
        return
    backends = args.backends.split(",")
    replace_ms, commits, full_commits = calibrate()
    bound = 1000 / (2 * replace_ms)
    print(
        f"checkpoint: cpus={os.cpu_count()} seconds={args.seconds} loadavg={os.getloadavg()[0]:.2f} "
        f"fsync_replace_ms={replace_ms:.2f} fsync_bound_pairs_per_s={bound:.0f} sqlite_bare_commits_per_s={commits:.0f} "
        f"sqlite_full_commits_per_s={full_commits:.0f}",
        flush=True,
    )
    summary: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        servers = _start_servers(stack, backends)
        for backend in backends:
            for procs in (int(p) for p in args.procs.split(",")):
                for client in args.clients.split(","):
                    extra = ""
                    if backend == "file" and procs == 1:  # the disk's cost right around the run
                        before = fsync_replace_ms()
                    load = os.getloadavg()[0]
                    rate, cpu_us, durability = run(client, backend, procs, args.seconds, servers)
                    summary[f"{backend}_{procs}" + ("" if client == "async" else "_sync")] = rate
                    if backend == "file" and procs == 1:
                        bound = 1000 / (before + fsync_replace_ms())  # 2 replaces per pair, mean of 2
                        extra = f" fsync_bound_pairs_per_s={bound:.0f} of_fsync_bound={rate / bound:.2f}"
                    print(
                        f"checkpoint: backend={backend} procs={procs} claim_done_pairs_per_s={rate:.0f} "
                        f"client={client} cpu_us_per_pair={cpu_us:.0f}{extra} loadavg={load:.2f} "
                        f'durability="{durability}"',
                        flush=True,
                    )
            if backend == "file" and "1" in args.procs.split(","):
                ratios = sorted(interleaved_bound_ratio())
                summary["file_interleaved_of_fsync_bound"] = statistics.median(ratios)
                print(f"checkpoint: backend=file procs=1 client=sync interleaved_of_fsync_bound="
                      f"{statistics.median(ratios):.2f} min={ratios[0]:.2f} max={ratios[-1]:.2f} "
                      f"rounds={len(ratios)} window_s=0.25 loadavg={os.getloadavg()[0]:.2f}", flush=True)
            if f"{backend}_1" in summary and f"{backend}_1_sync" in summary:
                a, s = summary[f"{backend}_1"], summary[f"{backend}_1_sync"]
                print(f"checkpoint: backend={backend} async_sync_ratio={a / s:.2f} async_pairs_per_s={a:.0f} "
                      f"sync_pairs_per_s={s:.0f} procs=1", flush=True)
    met = all(summary.get(f"{b}_1", t) >= t for b, t in TARGETS.items())
    parts = " ".join(f"{k}={v:.2f}" if k.endswith("bound") else f"{k}={v:.0f}" for k, v in summary.items())
    print(f"checkpoint: {parts} one_process_targets_met={'yes' if met else 'no'} loadavg={os.getloadavg()[0]:.2f}")


def _start_servers(stack: contextlib.ExitStack, backends: list[str]) -> dict[str, str]:
    """Debian's redis-server / postgres on free ports, stopped when the stack closes."""
    if not {"redis", "postgresql"} & set(backends):
        return {}
    sys.path.insert(0, ROOT)
    from tests.checkpoint_servers import postgres_server, redis_server

    servers = {}
    if "redis" in backends:
        servers["redis"] = stack.enter_context(redis_server())
    if "postgresql" in backends:
        servers["postgresql"] = stack.enter_context(postgres_server(fsync=True))
    return servers


if __name__ == "__main__":
    main()
