#!/usr/bin/env python3
"""Tasks created per second through the REST API with the Python SDK.

Two modes, in turn: ``single`` (``MolensClient.create`` from 16 threads over keep-alive) and
``batch`` (``create_many`` of 500 tasks per request from a few threads). Every create carries an
idempotency key (the SDK adds one), as real clients do.

Target, by default: a real 3-node cluster (``molens-node`` processes with the task state machine
and the scheduler, on free ports under a temporary directory, as ``lateness.py`` starts it),
``target=cluster``; the nodes' CPU per create is printed summed over the three and for the leader
alone (the leader's GIL is the ceiling). ``--url`` targets a running node or cluster instead
(comma-separated URLs; ``--server-pids`` of its local nodes adds their CPU per create).
``--local`` measures the in-process stand-in instead: ``python -m molens.web.server`` over a
LocalContext (real lmdb + SQLite, fsync per applied batch, but no Raft and no scheduler),
labelled ``target=local_standin``; its figures do not describe the product.

Prints one line per mode, ``ingest: mode=single creates_per_s=... target=cluster ...`` and
``ingest: mode=batch ...``, then a summary line ``ingest: summary ...``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from molens.client import MolensClient  # noqa: E402
from tests.integration.conftest import Cluster  # noqa: E402

CALLBACK = "http://127.0.0.1:9/bench"


def _task(i: int) -> dict[str, object]:
    return {"type": "delayed", "interval_ms": 3_600_000, "callback_url": CALLBACK, "payload": {"i": i}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_local(data_dir: str, threads: int) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "molens.web.server",
            "--data-dir",
            data_dir,
            "--port",
            str(port),
            "--threads",
            str(threads),
            "--durable",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening "):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


def cpu_s(pid: int | None) -> float:
    """User+system CPU seconds of a local process (Linux /proc), 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_threads(n: int, seconds: float, work: callable) -> tuple[int, float]:  # type: ignore[valid-type]
    stop = time.monotonic() + seconds
    counts = [0] * n
    errors: list[BaseException] = []

    def loop(k: int) -> None:
        try:
            i = 0
            while time.monotonic() < stop:
                counts[k] += work(k, i)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    t0 = time.monotonic()
    ts = [threading.Thread(target=loop, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise errors[0]
    return sum(counts), elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="", help="comma-separated node URLs (default: start a 3-node cluster)")
    ap.add_argument(
        "--local", action="store_true",
        help="measure the LocalContext stand-in (one process, no Raft, no scheduler) instead of a cluster",
    )
    ap.add_argument("--token", default=None)
    ap.add_argument("--seconds", type=float, default=10.0, help="per mode")
    ap.add_argument("--threads", type=int, default=16, help="client threads in single mode")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--batch-threads", type=int, default=4)
    ap.add_argument("--server-threads", type=int, default=16, help="--local: the stand-in's threads")
    ap.add_argument("--modes", default="single,batch", help="comma-separated, run in this order")
    ap.add_argument(
        "--server-pids", default="", help="comma-separated PIDs of local cluster nodes: report their CPU per create"
    )
    args = ap.parse_args()

    proc = None
    tmp = None
    cluster: Cluster | None = None
    leader_pid: int | None = None
    if args.url:
        urls = args.url.split(",")
        target = "cluster" if len(urls) > 1 else "node"
    elif args.local:
        tmp = tempfile.TemporaryDirectory(prefix="molens-ingest-")
        proc, url = start_local(tmp.name, args.server_threads)
        urls = [url]
        target = "local_standin"
        print(f"started python -m molens.web.server (LocalContext stand-in: durable, no Raft, no scheduler) "
              f"at {url} pid={proc.pid}")
    else:
        tmp = tempfile.TemporaryDirectory(prefix="molens-ingest-")
        extra = {"logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}}
        cluster = Cluster(Path(tmp.name) / "cluster", 3, extra=extra, state_machine="tasks")
        cluster.start()
        leader = cluster.leader(timeout=30)
        leader_pid = leader.pid
        urls = [f"http://127.0.0.1:{n.settings['http']['port']}" for n in cluster.nodes.values()]
        args.server_pids = ",".join(str(n.pid) for n in cluster.nodes.values())
        target = "cluster"
        print(f"started a 3-node cluster (task state machine, scheduler, every commit fsync'd): leader "
              f"{leader.node_id} pid={leader_pid}, urls {','.join(urls)}")
    try:
        client = MolensClient(urls, token=args.token, pool_maxsize=max(args.threads, args.batch_threads))
        client.create(_task(-1))  # warm up + leader discovery

        def single(k: int, i: int) -> int:
            client.create(_task(i))
            return 1

        def batch(k: int, i: int) -> int:
            return len(client.create_many([_task(j) for j in range(args.batch)]))

        pids = [proc.pid] if proc is not None else [int(p) for p in args.server_pids.split(",") if p]
        cpu = os.cpu_count()
        lines = []
        summary: dict[str, str] = {"target": target}
        for mode in args.modes.split(","):
            if mode == "single":
                work, threads, what = single, args.threads, f"threads={args.threads}"
            elif mode == "batch":
                work, threads, what = batch, args.batch_threads, f"batch={args.batch} threads={args.batch_threads}"
            else:
                raise SystemExit(f"unknown mode {mode!r}")
            c0, cc0, l0 = sum(cpu_s(p) for p in pids), time.process_time(), cpu_s(leader_pid)
            n, el = run_threads(threads, args.seconds, work)
            rate = n / el
            server_us = (sum(cpu_s(p) for p in pids) - c0) / n * 1e6
            leader_us = (cpu_s(leader_pid) - l0) / n * 1e6
            client_us = (time.process_time() - cc0) / n * 1e6
            load = os.getloadavg()[0]
            print(f"{mode}: {n} creates in {el:.1f} s ({what}): {rate:.0f}/s wall-clock, load1 {load:.1f}")
            extra = f" client_cpu_us_per_create={client_us:.1f}"
            if pids:
                # The machine is shared: CPU per create is the steadier figure; 1e6 / it is the rate one
                # core would sustain for the server alone.
                print(f"{mode}: server CPU {server_us:.1f} us per create ({1e6 / server_us:.0f}/s per CPU second)")
                extra = f" server_cpu_us_per_create={server_us:.1f} server_cpu_rate={1e6 / server_us:.0f}" + extra
            if leader_pid is not None:
                print(f"{mode}: leader CPU {leader_us:.1f} us per create ({1e6 / leader_us:.0f}/s per CPU second)")
                extra = f" leader_cpu_us_per_create={leader_us:.1f}" + extra
                summary[f"{mode}_leader_cpu_us_per_create"] = f"{leader_us:.1f}"
            summary[f"{mode}_creates_per_s"] = f"{rate:.0f}"
            lines.append(
                f"ingest: mode={mode} creates_per_s={rate:.0f} {what} target={target} cpus={cpu} load1={load:.1f}{extra}"
            )
        st = client.stats()
        print(f"server: tasks_total={st.get('tasks_total')} role={st.get('role')} mode={st.get('mode', 'raft')}")
        client.close()
        for line in lines:
            print(line)
        summary["load1"] = f"{os.getloadavg()[0]:.1f}"
        print("ingest: summary " + " ".join(f"{k}={v}" for k, v in summary.items()))
    finally:
        if cluster is not None:
            cluster.kill_all()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
