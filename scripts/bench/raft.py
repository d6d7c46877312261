#!/usr/bin/env python3
"""Raft replication benchmark: a local 3-node Molens cluster vs PySyncObj on the same machine.

Molens: three ``molens-node`` processes (default config: every commit fsync'd, group commit) with the
KV state machine; a client process keeps ``--concurrency`` proposals in flight through the leader's
admin socket (``propose``, one entry per request) and measures commits/s and per-request latency.
Light-load latency is measured with one request in flight.

PySyncObj 0.3.17: three processes, a replicated dict; the leader process keeps the same number of
calls in flight (in-process callbacks, so no client protocol at all) with the same payload sizes.

``--failover``: kill -9 the leader while a client writes; time from the kill to the next commit.

Prints ``raft: payload=16B commits_per_s=... p50_ms=... p99_ms=...`` (p50/p99 at light load), the
same for 1 KiB, ``raft_vs_pysyncobj: ratio=...``, and a final summary line.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
import zmq

from molens.admin import AdminClient, AdminError
from molens.config import NodeConfig
from molens.kv import encode_put

ROOT = Path(__file__).resolve().parents[2]
PAYLOADS = (16, 1024)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def entry(i: int, size: int) -> bytes:
    """A KV put (4-byte key) whose encoded entry is ``size`` bytes (at least 13)."""
    key = (i & 0xFFFFFFFF).to_bytes(4, "big")
    overhead = len(encode_put(key, b""))
    data = encode_put(key, b"x" * max(0, size - overhead))
    if len(data) > size:  # msgpack needs a longer length prefix past 255 bytes
        data = encode_put(key, b"x" * max(0, size - overhead - (len(data) - size)))
    return data


# --- molens cluster ---------------------------------------------------------------------------------


class MolensCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        ids = ["n1", "n2", "n3"]
        self.addrs = {}
        for nid in ids:
            raft, rpc, http, admin = free_ports(4)
            self.addrs[nid] = {
                "raft_addr": f"127.0.0.1:{raft}",
                "rpc_addr": f"127.0.0.1:{rpc}",
                "http_addr": f"127.0.0.1:{http}",
                "admin_addr": f"127.0.0.1:{admin}",
            }
        peers = [{"id": nid, **self.addrs[nid]} for nid in ids]
        self.procs: dict[str, subprocess.Popen[bytes] | None] = {}
        self.configs = {}
        for nid in ids:
            a = self.addrs[nid]
            cfg = {
                "node": {"id": nid, "data_dir": str(root / nid)},
                "cluster": {"peers": peers},
                "raft": {"bind_addr": a["raft_addr"]},
                "rpc": {"bind_addr": a["rpc_addr"]},
                "http": {"port": int(a["http_addr"].rsplit(":", 1)[1])},
                "admin": {"bind_addr": a["admin_addr"]},
                "logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")},
            }
            if "state_machine" in NodeConfig.__dataclass_fields__:  # the KV FSM, not the task store
                cfg["node"]["state_machine"] = "kv"
            path = root / f"{nid}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            self.configs[nid] = path
            self.procs[nid] = None

    def start(self, nid: str | None = None) -> None:
        for n in [nid] if nid else list(self.procs):
            log = open(self.root / f"{n}.out", "ab")  # noqa: SIM115 - lives as long as the process
            self.procs[n] = subprocess.Popen(
                [sys.executable, "-m", "molens.cli", str(self.configs[n])],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self, nid: str) -> None:
        p = self.procs[nid]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            if p is not None:
                try:
                    p.wait(40)
                except subprocess.TimeoutExpired:
                    p.kill()

    def wait_converged(self, timeout: float = 60) -> None:
        """Until all three nodes answer and have applied the same commit index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = set()
            for nid in self.procs:
                try:
                    with AdminClient(self.admin(nid), timeout_s=0.5) as c:
                        st = c.call("status")
                except AdminError:
                    break
                seen.add((st["commit_index"], st["applied_index"]))
            else:
                if len(seen) == 1 and len({x for pair in seen for x in pair}) == 1:
                    return
            time.sleep(0.05)
        raise RuntimeError("cluster did not converge")

    def admin(self, nid: str) -> str:
        return self.addrs[nid]["admin_addr"]

    def leader(self, timeout: float = 30, exclude: tuple[str, ...] = ()) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for nid, p in self.procs.items():
                if nid in exclude or p is None or p.poll() is not None:
                    continue
                try:
                    with AdminClient(self.admin(nid), timeout_s=0.5) as c:
                        st = c.call("status")
                except AdminError:
                    continue
                if st["role"] == "leader":
                    return nid
            time.sleep(0.02)
        raise RuntimeError("no leader")


def run_load(addr: str, payload: int, concurrency: int, seconds: float, start_i: int) -> dict[str, Any]:
    """Keep ``concurrency`` proposals in flight for ``seconds``; commits/s and latency percentiles."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(f"tcp://{addr}")
    sent_at: dict[int, float] = {}
    lat: list[float] = []
    i = start_i
    done = 0
    failed = 0
    errors: dict[str, int] = {}
    t0 = time.perf_counter()
    end = t0 + seconds
    try:
        while True:
            now = time.perf_counter()
            if now < end:
                while len(sent_at) < concurrency:
                    data = base64.b64encode(entry(i, payload)).decode()
                    sock.send_multipart([b"", b'{"cmd":"propose","id":%d,"data":"%s"}' % (i, data.encode())])
                    sent_at[i] = time.perf_counter()
                    i += 1
            elif not sent_at:
                break
            if not sock.poll(10_000):
                raise RuntimeError(f"no reply for 10 s ({len(sent_at)} in flight)")
            while True:
                try:
                    _, body = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                r = json.loads(body)
                t = sent_at.pop(r["id"])
                if r["ok"]:
                    done += 1
                    lat.append((time.perf_counter() - t) * 1000)
                else:
                    failed += 1
                    errors[r.get("error", "?")] = errors.get(r.get("error", "?"), 0) + 1
        elapsed = time.perf_counter() - t0
    finally:
        sock.close(0)
    return {
        "commits_per_s": done / elapsed,
        "p50_ms": pct(lat, 50),
        "p99_ms": pct(lat, 99),
        "done": done,
        "failed": failed,
        "errors": errors,
        "next_i": i,
    }


def bench_molens(args: argparse.Namespace, root: Path) -> dict[int, dict[str, Any]]:
    cluster = MolensCluster(root / "molens")
    cluster.start()
    out: dict[int, dict[str, Any]] = {}
    try:
        leader = cluster.leader()
        addr = cluster.admin(leader)
        print(f"molens: 3 nodes up, leader {leader}; data under {root / 'molens'}")
        i = 0
        for size in PAYLOADS:
            light = run_load(addr, size, 1, args.light_seconds, i)
            i = light["next_i"]
            heavy = run_load(addr, size, args.concurrency, args.seconds, i)
            i = heavy["next_i"]
            out[size] = {"light": light, "heavy": heavy}
            print(
                f"molens payload={size}B: light load (1 in flight) p50={light['p50_ms']:.2f} ms "
                f"p99={light['p99_ms']:.2f} ms; {args.concurrency} in flight: "
                f"{heavy['commits_per_s']:.0f} commits/s p50={heavy['p50_ms']:.1f} ms p99={heavy['p99_ms']:.1f} ms "
                f"(failed {heavy['failed']} {heavy['errors'] or ''})"
            )
        with AdminClient(addr, timeout_s=10) as c:
            st = c.call("stats")
        print(
            f"molens: leader stats: proposals={st['proposals']} appends={st['appends']} log_syncs={st['log_syncs']} "
            f"(entries per fsync ~{st['proposals'] / max(1, st['appends']):.1f})"
        )
        for nid in cluster.procs:
            with AdminClient(cluster.admin(nid), timeout_s=10) as c:
                s = c.call("stats")
            print(
                f"molens: {nid} max_cycle_ms={s['max_cycle_ms']:.0f} max_tick_delay_ms={s['max_tick_delay_ms']:.0f} "
                f"leader_changes={s['leader_changes']}"
            )
        if args.failover:
            out[0] = {"failover": bench_failover(cluster, args.failover_trials)}
    finally:
        cluster.stop_all()
    return out


def bench_failover(cluster: MolensCluster, trials: int) -> list[float]:
    results = []
    payload = base64.b64encode(encode_put(b"failover", b"1")).decode()
    for trial in range(trials):
        leader = cluster.leader()
        with AdminClient(cluster.admin(leader), timeout_s=2) as c:
            c.call("propose", data=payload)
        t_kill = time.monotonic()
        cluster.kill(leader)
        others = [n for n in cluster.procs if n != leader]
        clients = {n: AdminClient(cluster.admin(n), timeout_s=0.5) for n in others}
        t_commit = None
        while t_commit is None and time.monotonic() - t_kill < 30:
            for c in clients.values():
                try:
                    r = c.request({"cmd": "propose", "data": payload}, timeout_s=0.5)
                except AdminError:
                    continue
                if r.get("ok"):
                    t_commit = time.monotonic()
                    break
            else:
                time.sleep(0.002)
        for c in clients.values():
            c.close()
        if t_commit is None:
            raise RuntimeError("no commit within 30 s of the kill")
        results.append(t_commit - t_kill)
        print(
            f"failover trial {trial + 1}: kill -9 {leader} -> next commit after {(t_commit - t_kill) * 1000:.0f} ms"
        )
        cluster.start(leader)
        cluster.wait_converged()
    return results


# --- PySyncObj ----------------------------------------------------------------------------------------


def pysyncobj_node(argv: list[str]) -> None:
    """Child process: one PySyncObj node; the leader runs the load and prints JSON results."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    me, partners_csv, concurrency, seconds, light_seconds, result_path, batch_bytes = argv
    partners = partners_csv.split(",")
    # PySyncObj's defaults cap an AppendEntries batch (and its socket buffers) at 64 KiB
    tuned: dict[str, int] = {}
    if int(batch_bytes):
        tuned = dict.fromkeys(
            ("appendEntriesBatchSizeBytes", "sendBufferSize", "recvBufferSize"), int(batch_bytes)
        )

    class KV(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(me, partners, SyncObjConf(dynamicMembershipChange=False, **tuned))
            self._d: dict[bytes, bytes] = {}

        @replicated  # type: ignore[misc]
        def put(self, k: bytes, v: bytes) -> bool:
            self._d[k] = v
            return True

    kv = KV()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (kv._isReady() and kv._getLeader() is not None):
        time.sleep(0.05)
    time.sleep(1.0)
    if str(kv._getLeader()) != me:
        while not os.path.exists(result_path + ".done"):
            time.sleep(0.2)
        return
    res: dict[str, Any] = {}
    i = 0
    for size in PAYLOADS:
        for label, conc, secs in (
            ("light", 1, float(light_seconds)),
            ("heavy", int(concurrency), float(seconds)),
        ):
            w = _Window(conc)
            t0 = time.perf_counter()
            end = t0 + secs
            while time.perf_counter() < end:
                w.sem.acquire()
                k = b"%010d" % i
                i += 1
                kv.put(k, b"x" * max(0, size - 12), callback=w.callback(time.perf_counter()))
            w.drain()
            elapsed = time.perf_counter() - t0
            res[f"{size}_{label}"] = {
                "commits_per_s": w.done / elapsed,
                "p50_ms": pct(w.lat, 50),
                "p99_ms": pct(w.lat, 99),
                "errors": w.errors,
            }
    Path(result_path).write_text(json.dumps(res))
    Path(result_path + ".done").write_text("")


class _Window:
    """At most ``n`` PySyncObj calls in flight; counts commits and their latencies."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sem = threading.Semaphore(n)
        self.lock = threading.Lock()
        self.done = 0
        self.errors: dict[str, int] = {}
        self.lat: list[float] = []

    def callback(self, t: float) -> Callable[[Any, Any], None]:
        def cb(result: Any, error: Any) -> None:
            with self.lock:
                if error == 0:
                    self.done += 1
                    self.lat.append((time.perf_counter() - t) * 1000)
                else:
                    self.errors[str(error)] = self.errors.get(str(error), 0) + 1
            self.sem.release()

        return cb

    def drain(self) -> None:
        for _ in range(self.n):
            if not self.sem.acquire(timeout=30):
                break


def bench_pysyncobj(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    result = root / "pysyncobj.json"
    procs = []
    for a in addrs:
        partners = ",".join(x for x in addrs if x != a)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--pysyncobj-node",
                    a,
                    partners,
                    str(args.concurrency),
                    str(args.seconds),
                    str(args.light_seconds),
                    str(result),
                    str(args.pysyncobj_batch_bytes),
                ],
                cwd=root,
            )
        )
    try:
        deadline = time.monotonic() + 120 + 4 * (args.seconds + args.light_seconds)
        while not Path(str(result) + ".done").exists():
            if time.monotonic() > deadline:
                raise RuntimeError("pysyncobj run did not finish")
            time.sleep(0.2)
        return dict(json.loads(result.read_text()))
    finally:
        Path(str(result) + ".done").touch()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--pysyncobj-node":
        pysyncobj_node(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=1000, help="requests in flight under load")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each loaded run")
    ap.add_argument("--light-seconds", type=float, default=2.0, help="duration of each light-load run")
    ap.add_argument(
        "--failover", action="store_true", help="also measure kill -9 of the leader -> next commit"
    )
    ap.add_argument("--failover-trials", type=int, default=3)
    ap.add_argument("--skip-pysyncobj", action="store_true")
    ap.add_argument(
        "--pysyncobj-batch-bytes",
        type=int,
        default=0,
        help="raise PySyncObj's 64 KiB append batch and socket buffers to this (0: its defaults)",
    )
    args = ap.parse_args()
    keep = os.environ.get("BENCH_KEEP")  # keep the data and node logs for a look afterwards
    with tempfile.TemporaryDirectory(prefix="molens-bench-") as tmp:
        root = Path(tempfile.mkdtemp(prefix="molens-bench-kept-")) if keep else Path(tmp)
        m = bench_molens(args, root)
        summary: dict[str, str] = {}
        for size, label in ((16, "16B"), (1024, "1KiB")):
            light, heavy = m[size]["light"], m[size]["heavy"]
            print(
                f"raft: payload={label} commits_per_s={heavy['commits_per_s']:.0f} "
                f"p50_ms={light['p50_ms']:.2f} p99_ms={light['p99_ms']:.2f} "
                f"load_p50_ms={heavy['p50_ms']:.1f} load_p99_ms={heavy['p99_ms']:.1f} concurrency={args.concurrency}"
            )
            summary[f"commits_per_s_{label}"] = f"{heavy['commits_per_s']:.0f}"
            summary[f"p50_ms_{label}"] = f"{light['p50_ms']:.2f}"
        if args.failover:
            fo = m[0]["failover"]
            print(f"raft: failover_s={statistics.median(fo):.3f} max_s={max(fo):.3f} trials={len(fo)}")
            summary["failover_s"] = f"{statistics.median(fo):.3f}"
        if not args.skip_pysyncobj:
            p = bench_pysyncobj(args, root)
            for size, label in ((16, "16B"), (1024, "1KiB")):
                h, lt = p[f"{size}_heavy"], p[f"{size}_light"]
                print(
                    f"pysyncobj: payload={label} commits_per_s={h['commits_per_s']:.0f} "
                    f"p50_ms={lt['p50_ms']:.2f} p99_ms={lt['p99_ms']:.2f} load_p50_ms={h['p50_ms']:.1f}"
                )
            r16 = m[16]["heavy"]["commits_per_s"] / p["16_heavy"]["commits_per_s"]
            r1k = m[1024]["heavy"]["commits_per_s"] / p["1024_heavy"]["commits_per_s"]
            print(f"raft_vs_pysyncobj: ratio={r16:.2f} ratio_1KiB={r1k:.2f} concurrency={args.concurrency}")
            summary["ratio"] = f"{r16:.2f}"
            summary["ratio_1KiB"] = f"{r1k:.2f}"
        print("raft: " + " ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
