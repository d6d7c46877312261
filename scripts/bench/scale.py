#!/usr/bin/env python3
"""Scale: a real 3-node cluster holding N pending delayed tasks spread over 30 days, with a steady
near-term load, a leader kill -9 in the middle, and listing (docs/architecture.md#near-term-window).

1. Load: ``--pending`` N delayed tasks due from an hour ahead over 30 days, through the batch API
   (1,000 a request, ``--threads`` clients). ``load_per_s`` is that rate.
2. Ingest probe: 20,000 more far tasks, timed alone: ``ingest_per_s`` (comparable across N).
3. Steady load: ``--rate`` fires/s of near-term at_least_once tasks for ``--duration`` s (created
   ahead, due 1/rate s apart; a recording receiver in its own process). Halfway the leader is
   kill -9'd. ``p99_ms`` = p99 lateness (receive - due) of first deliveries outside the failover
   (kill -> 5 s after the new leader is known); ``failover_first_fire_s`` = kill -> first callback of a
   fire due more than ``scheduler.dispatch_lead_ms`` after the kill (only the new leader can
   have planned it).
4. Memory, just before the kill: ``leader_anon_mb`` / ``follower_anon_mb`` (``RssAnon`` of the
   leader's and the followers' largest process: the heap) and ``leader_file_mb`` (``RssFile``: lmdb
   pages the OS keeps resident, a cache); ``lmdb_bytes_per_task`` = the leader's ``fsm/data.mdb``
   size / ``tasks_total`` of its stats.
5. Listing, after the run: 100 requests each of ``GET /tasks?limit=100`` at a random cursor,
   ``?status=pending&limit=100`` and ``?status=done&limit=100`` on a follower: ``list_p99_ms``.

6. With ``--snapshot``: a snapshot of the whole store on the leader (``snapshot_s``, the file's
   size), then a fourth node joins and catches up from it by InstallSnapshot (the nodes keep a
   100-entry log tail behind a snapshot for this, so the log cannot serve the joiner instead) (``join_catch_up_s``,
   whether the leader's term changed, the leader's and the joiner's heap (``RssAnon``) at their peak,
   read every 50 ms by a thread of its own, and after). Prints ``scale_snapshot: ...``.

Prints ``scale: pending=... leader_anon_mb=... follower_anon_mb=... leader_file_mb=...
lmdb_bytes_per_task=... failover_first_fire_s=... p99_ms=... ingest_per_s=... list_p99_ms=...``
with the node processes' CPU per fire and the load average.

    .venv/bin/python scripts/bench/scale.py --pending 0
    .venv/bin/python scripts/bench/scale.py --pending 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import urllib3  # noqa: E402
from lateness import Receiver, _cpu_s  # noqa: E402

from molens.config import SchedulerConfig  # noqa: E402
from tests.integration.conftest import Cluster, NodeProc  # noqa: E402

HOUR, DAY = 3_600_000, 86_400_000
PROBE = 20_000
_http = urllib3.PoolManager(maxsize=16, retries=False, timeout=120)


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def post_batches(base: str, bodies_of: Any, n: int, threads: int) -> float:
    """Create ``n`` tasks, ``bodies_of(i)`` each, 1,000 a request from ``threads`` threads; seconds taken."""
    starts = list(range(0, n, 1_000))
    errors: list[str] = []
    leader = [base]

    def work(part: list[int]) -> None:
        for lo in part:
            body = json.dumps({"tasks": [bodies_of(i) for i in range(lo, min(n, lo + 1_000))]}).encode()
            for _ in range(60):
                try:
                    r = _http.request("POST", leader[0] + "/api/v1/tasks/batch", body=body, redirect=False,
                                      headers={"Content-Type": "application/json"}, preload_content=False)
                except urllib3.exceptions.HTTPError:
                    time.sleep(0.5)
                    continue
                st, loc = r.status, r.headers.get("Location", "")
                r.drain_conn()
                if st == 201:
                    break
                if st == 307 and loc:  # leadership moved: the answer names the new leader
                    leader[0] = loc.split("/api/", 1)[0]
                else:
                    time.sleep(0.5)
            else:
                errors.append(f"batch at {lo}: {st}")

    t = time.monotonic()
    ts = [threading.Thread(target=work, args=(starts[i::threads],)) for i in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    if errors:
        raise SystemExit(f"scale: create failed: {errors[:3]}")
    return time.monotonic() - t


def status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class PeakAnon:
    """The peak ``RssAnon`` (MiB) of some processes, read every 50 ms on a thread of its own: a
    node's admin socket does not answer while its Raft actor writes or restores a snapshot, so
    sampling between admin calls missed those moments."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.peak = {name: 0.0 for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for name, pid in self.pids.items():
                try:
                    self.peak[name] = max(self.peak[name], status_kb(pid, "RssAnon") / 1024)
                except OSError:  # not started yet, or gone
                    pass

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return self.peak


def snapshot_and_join(c: Cluster, n: int) -> None:
    """Phase 6: a snapshot of the whole store on the leader, then a fourth node joining from it."""
    leader = c.leader(timeout=30)
    term = leader.status()["term"]  # type: ignore[index]
    anon_before = status_kb(leader.pid, "RssAnon") / 1024
    t = time.monotonic()
    leader.call("snapshot", timeout_s=3_600)
    snap_s = time.monotonic() - t
    files = sorted((leader.data_dir / "snapshots").glob("snap-*.snap"))
    snap_mb = files[-1].stat().st_size / 2**20 if files else float("nan")
    anon_after_snap = status_kb(leader.pid, "RssAnon") / 1024
    print(f"  snapshot on {leader.node_id}: {snap_s:.1f} s, {snap_mb:.0f} MiB compressed; leader anon "
          f"{anon_before:.0f} -> {anon_after_snap:.0f} MiB", flush=True)
    target = leader.status()["commit_index"]  # type: ignore[index]
    joiner = c.add_joiner("n4").start()
    t = time.monotonic()
    assert joiner.pid is not None
    peaks = PeakAnon({"leader": leader.pid, "joiner": joiner.pid})
    caught = float("nan")
    while time.monotonic() - t < 3_600:
        st = joiner.status()
        if st is not None and st.get("applied_index", 0) >= target:
            caught = time.monotonic() - t
            break
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and leader.call("stats")["snapshot_held"]:
        time.sleep(0.2)
    peak = peaks.stop()
    st = leader.status() or {}
    j_stats = joiner.call("stats")
    anon_end = status_kb(leader.pid, "RssAnon") / 1024
    j_end = status_kb(joiner.pid, "RssAnon") / 1024
    print(
        f"scale_snapshot: pending={n} snapshot_s={snap_s:.1f} snapshot_mb={snap_mb:.0f} join_catch_up_s={caught:.1f} "
        f"joiner_snapshots_installed={j_stats['snapshots_installed']} term_changed={'yes' if st.get('term') != term else 'no'} "
        f"leader_anon_mb_before={anon_before:.0f} leader_anon_mb_peak={max(peak['leader'], anon_after_snap):.0f} "
        f"leader_anon_mb_after={anon_end:.0f} joiner_anon_mb_peak={peak['joiner']:.0f} joiner_anon_mb_after={j_end:.0f} "
        f"leader_snapshot_held={leader.call('stats')['snapshot_held']}",
        flush=True,
    )


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pending", type=int, default=1_000_000, help="far-future tasks to load (0, 1M, 10M)")
    ap.add_argument("--rate", type=float, default=1_000, help="near-term fires per second")
    ap.add_argument("--duration", type=float, default=20, help="seconds of near-term fires")
    ap.add_argument("--threads", type=int, default=3, help="client threads creating")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--snapshot", action="store_true",
                    help="then snapshot the whole store on the leader and time a fourth node joining from it")
    return ap.parse_args()


def main() -> int:
    args = _args()
    tmp = Path(tempfile.mkdtemp(prefix="molens-scale-"))
    rec = Receiver(tmp)
    extra = {"logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}, "worker": {"concurrency": 64}}
    if args.snapshot:  # the log keeps a short tail, so the joiner must take the snapshot (batches are few entries)
        extra["raft"] = {"keep_log_tail": 100}
    c = Cluster(tmp / "cluster", 3, extra=extra, state_machine="tasks")
    try:
        c.start()
        leader = c.leader(timeout=30)
        pids = [n.pid for n in c.nodes.values()]
        base = _base(leader)
        now = int(time.time() * 1000)
        n = args.pending
        spread = 30 * DAY

        def far(i: int) -> dict[str, Any]:
            return {"type": "delayed", "run_at": now + HOUR + (i * 7919 % max(1, n)) * (spread // max(1, n)),
                    "callback_url": rec.url("far")}

        load_s = post_batches(base, far, n, args.threads) if n else 0.0
        print(f"  loaded {n} pending tasks in {load_s:.1f} s ({n / load_s if load_s else 0:.0f}/s)", flush=True)
        probe_s = post_batches(base, lambda i: {"type": "delayed", "run_at": now + 2 * HOUR + i * 1000,
                                               "callback_url": rec.url("far")}, PROBE, args.threads)
        ingest = PROBE / probe_s
        print(f"  ingest probe: {PROBE} tasks in {probe_s:.1f} s ({ingest:.0f}/s)", flush=True)

        # steady near-term load with a leader kill halfway
        rate, dur = args.rate, args.duration
        m = int(rate * dur)
        t0 = int(time.time() * 1000) + 4_000 + int(m / 5)
        post_batches(base, lambda i: {"type": "delayed", "run_at": t0 + int(i * 1000 / rate), "callback_url": rec.url("near"),
                                      "payload": {"due": t0 + int(i * 1000 / rate)}}, m, args.threads)
        if time.time() * 1000 > t0:
            print("  warning: the near tasks were created after the first was due", flush=True)
        kill_at = t0 + dur * 500
        cpu0 = {pid: _cpu_s([pid]) for pid in pids}
        while time.time() * 1000 < kill_at - 1_000:
            time.sleep(0.05)
        leader = c.leader(timeout=10)
        followers = [x for x in c.nodes.values() if x is not leader]
        anon = status_kb(leader.pid, "RssAnon") / 1024
        f_anon = max(status_kb(x.pid, "RssAnon") for x in followers) / 1024
        file_mb = status_kb(leader.pid, "RssFile") / 1024
        mdb = leader.data_dir / "fsm" / "data.mdb"
        st = json.loads(_http.request("GET", _base(leader) + "/api/v1/stats?local=1").data)
        bytes_per_task = mdb.stat().st_size / max(1, st["tasks_total"])
        wheel = st.get("scheduler", {}).get("wheel", {})
        print(f"  leader {leader.node_id}: anon {anon:.0f} MiB, file {file_mb:.0f} MiB; followers' anon max {f_anon:.0f} MiB; "
              f"wheel {wheel}", flush=True)
        while time.time() * 1000 < kill_at:
            time.sleep(0.01)
        cpu_old = _cpu_s([leader.pid]) - cpu0[leader.pid]
        t_kill = time.time() * 1000
        leader.kill()
        new = c.leader(timeout=30)
        t_new = time.time() * 1000
        print(f"  killed {leader.node_id}; {new.node_id} leads after {t_new - t_kill:.0f} ms", flush=True)
        first: dict[str, tuple[int, int]] = {}  # fire id -> (first receive, due)
        end = time.monotonic() + dur + 60
        while time.monotonic() < end:
            for d in rec.lines("near"):
                at = d["at"]
                if d["fire"] not in first or at < first[d["fire"]][0]:
                    first[d["fire"]] = (at, json.loads(d["body"])["due"])
            if len(first) >= m:
                break
            time.sleep(0.5)
        cpu = cpu_old + sum(_cpu_s([x.pid]) - cpu0[x.pid] for x in c.nodes.values() if x is not leader)
        window = (t_kill, t_new + 5_000)
        lat = sorted(at - due for at, due in first.values() if not (window[0] <= due <= window[1] or window[0] <= at <= window[1]))
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else -1
        lead = SchedulerConfig().dispatch_lead_ms
        after = [at for at, due in first.values() if due > t_kill + lead]
        first_fire = (min(after) - t_kill) / 1000 if after else float("nan")
        print(f"  delivered {len(first)}/{m} near fires; p99 {p99} ms outside the failover; first fire after the kill "
              f"{first_fire:.2f} s", flush=True)

        # listing on a follower (reads are local)
        reader = next(x for x in c.nodes.values() if x is not new and x.running)
        rb = _base(reader)
        cursors: list[str | None] = [None]
        for _ in range(20):  # positions spread over the first 20,000 tasks
            nxt = json.loads(_http.request("GET", rb + "/api/v1/tasks?limit=1000"
                                           + (f"&cursor={cursors[-1]}" if cursors[-1] else "")).data)["next_cursor"]
            if nxt is None:
                break
            cursors.append(nxt)
        rng = random.Random(1)
        times: list[float] = []
        for q in ("limit=100", "status=pending&limit=100", "status=done&limit=100"):
            for _ in range(100):
                cur = rng.choice(cursors)
                url = rb + "/api/v1/tasks?" + q + (f"&cursor={cur}" if cur and q == "limit=100" else "")
                t = time.monotonic()
                r = _http.request("GET", url)
                times.append((time.monotonic() - t) * 1000)
                assert r.status == 200, r.data[:200]
        times.sort()
        list_p99 = times[int(0.99 * len(times))]
        load = os.getloadavg()
        print(
            f"scale: pending={n} leader_anon_mb={anon:.0f} follower_anon_mb={f_anon:.0f} leader_file_mb={file_mb:.0f} "
            f"lmdb_bytes_per_task={bytes_per_task:.0f} failover_first_fire_s={first_fire:.2f} p99_ms={p99} "
            f"ingest_per_s={ingest:.0f} load_per_s={n / load_s if load_s else 0:.0f} list_p99_ms={list_p99:.1f} "
            f"cluster_cpu_us_per_fire={cpu * 1e6 / max(1, len(first)):.0f} delivered={len(first)}/{m} "
            f"loadavg={load[0]:.1f},{load[1]:.1f},{load[2]:.1f}",
            flush=True,
        )
        if args.snapshot:
            snapshot_and_join(c, n)
        return 0
    finally:
        c.kill_all()
        rec.close()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
