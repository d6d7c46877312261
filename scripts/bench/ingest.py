#!/usr/bin/env python3
"""Tasks created per second through the REST API with the Python SDK.

Three modes, in turn: ``single`` (``MolensClient.create`` from 16 threads over keep-alive),
``batch`` (``create_many`` of 500 tasks per request from a few threads, each answer holding the 500
tasks) and ``batch_ids`` (``create_many_ids``: the same requests with ``Prefer: return=minimal``, the
answer holding their ids alone). Every create carries an idempotency key (the SDK adds one), as
real clients do.

Target, by default: a real 3-node cluster (``molens-node`` processes with the task state machine
and the scheduler, on free ports under a temporary directory, as ``lateness.py`` starts it),
``target=cluster``; the nodes' CPU per create is printed summed over the three and for the leader
alone (the leader's GIL is the ceiling). ``--url`` targets a running node or cluster instead
(comma-separated URLs; ``--server-pids`` of its local nodes adds their CPU per create).
``--local`` measures the in-process stand-in instead: ``python -m molens.web.server`` over a
LocalContext (real lmdb + SQLite, fsync per applied batch, but no Raft and no scheduler),
labelled ``target=local_standin``; its figures do not describe the product.

References, measured in the same run after the product (``--no-reference`` skips them), so each
figure has a ceiling beside it:

- ``hello``: a hello-world Bottle app on waitress with the node's 32 threads, in its own process,
  answering the same two routes with the bytes the cluster answered (a real create's and a real
  batch's response, captured in the run); it parses each request body as JSON and does nothing
  else. The same SDK client, threads and bodies as the product's mode: this is what the HTTP stack
  alone costs here (and, in ``client_cpu_us_per_create``, what the SDK client costs).
- ``lmdb``: one process putting task-sized records (the size of the captured task's JSON) into
  lmdb, ``--batch`` per transaction, with the task store's durability (``sync=True,
  metasync=False``), one put per task and no index: the storage ceiling of batch ingest on this disk, before Raft and replication.

``--keys``: what API keys cost. Two 3-node clusters, both up throughout, each mode run against one
then the other: keys off (no ``http.auth_token``: the nodes are open, no request carries a key) and
keys on (a bootstrap token; an admin makes namespace ``bench`` and a ``writer`` key of it, and the
load runs with that key and ``namespace="bench"``, so every request is admitted by key and checked
against its namespace). Its summary line gives each mode's creates per second and leader CPU per create both
ways, and the ratios ``{mode}_keys_on_vs_off`` (rate) and ``{mode}_leader_cpu_on_vs_off``; with
``--rounds N`` each mode runs N times on each side, the side that goes first alternating, and the
summary gives the medians.

``--pin``: what running each node on one CPU gives (docs/deploy.md#cpu-pinning). The same two
clusters in turn, one whose nodes may use every CPU ("off", ``node.cpus: all``) and one whose node ``i`` runs on the
``i``-th CPU, round-robin (``node.cpus``; "on"); the summary names the ratios ``{mode}_pin_on_vs_off``
(rate) and ``{mode}_leader_cpu_pin_on_vs_off``, and each side's p99.

``BENCH_NODE_CONF='{"raft": {...}}'`` (JSON) is merged into every node's config, for experiments.

Prints one line per mode, ``ingest: mode=single creates_per_s=... target=cluster ... vs_hello=...``
and ``ingest: mode=batch ... vs_hello=... vs_lmdb=...``, the references' lines
``ingest_reference: ...``, then a summary line ``ingest: summary ...``. ``steal_pct`` is the share of
the machine's CPU time the hypervisor took from this VM during the mode (``/proc/stat``): the load
average does not show it, and a host that takes 20 % of the cores is a slower machine. ``p50_ms`` /
``p99_ms``: a request's time as the client saw it (one create; one batch in the batch modes).
``cores_busy``: the CPU the nodes (or the reference server) and this client used per second of the
mode, in cores: near ``cpus`` the rate is set by CPU per create; well below it, by the latency of a
request times the requests in flight.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import threadcpu  # noqa: E402  (scripts/bench/threadcpu.py)
import urllib3  # noqa: E402

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


def hello_server(port: int, single_path: str, batch_path: str, ids_path: str) -> None:
    """Child process: the ``hello`` reference (see the module docstring); serves until killed."""
    import json

    import bottle
    import waitress

    single_body = Path(single_path).read_bytes()
    batch_body = Path(batch_path).read_bytes()
    ids_body = Path(ids_path).read_bytes()
    app = bottle.Bottle()

    def batch() -> bytes:
        minimal = "minimal" in bottle.request.headers.get("Prefer", "")
        return answer(ids_body if minimal else batch_body)

    def answer(body: bytes) -> bytes:
        json.loads(bottle.request.body.read())
        bottle.response.status = 201
        bottle.response.content_type = "application/json"
        return body

    app.route("/api/v1/tasks", "POST", lambda: answer(single_body))
    app.route("/api/v1/tasks/batch", "POST", batch)
    waitress.serve(app, host="127.0.0.1", port=port, threads=32, _quiet=True)


HELLO_ON_ONE_CPU = os.environ.get("BENCH_HELLO_FREE") != "1"
"""The hello-world reference runs on one CPU (the highest), as a node places itself by default
(``node.cpus: auto``); ``BENCH_HELLO_FREE=1`` lets it use every CPU."""


def start_hello(tmp: Path, single: bytes, batch: bytes, ids: bytes) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / "single.json").write_bytes(single)
    (tmp / "batch.json").write_bytes(batch)
    (tmp / "ids.json").write_bytes(ids)
    port = _free_port()
    one_cpu = ["taskset", "-c", str(max(os.sched_getaffinity(0)))] if HELLO_ON_ONE_CPU else []
    proc = subprocess.Popen(
        [*one_cpu, sys.executable, __file__, "--hello-server", str(port), str(tmp / "single.json"),
         str(tmp / "batch.json"), str(tmp / "ids.json")],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit("hello-world reference server did not start") from None
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def lmdb_reference(tmp: Path, record_bytes: int, batch: int, seconds: float) -> tuple[float, float]:
    """Records/s and CPU us per record of fsync'd lmdb transactions of ``batch`` puts."""
    import lmdb

    env = lmdb.open(str(tmp / "lmdb-ref"), map_size=8 << 30, sync=True, metasync=False)
    value = b"x" * record_bytes
    n = 0
    c0, t0 = time.process_time(), time.perf_counter()
    stop = t0 + seconds
    while time.perf_counter() < stop:
        with env.begin(write=True) as txn:
            for _ in range(batch):
                txn.put(b"%016d" % n, value)
                n += 1
    el = time.perf_counter() - t0
    cpu = time.process_time() - c0
    env.close()
    return n / el, cpu / n * 1e6


def cpu_s(pid: int | None) -> float:
    """User+system CPU seconds of a local process (Linux /proc), 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of the whole machine so far (Linux ``/proc/stat``; zeros elsewhere)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else 0.0


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


@dataclass(frozen=True, slots=True)
class Run:
    n: int
    elapsed: float
    what: str
    server_us: float
    leader_us: float
    client_us: float
    steal: float
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    """Per request (a create, or a batch of them) as the client saw it."""

    @property
    def rate(self) -> float:
        return self.n / self.elapsed

    @property
    def cores_busy(self) -> float:
        """Cores the measured processes (the nodes, or the reference server, and this client) kept busy."""
        return (self.server_us + self.client_us) * self.rate / 1e6


def measure(client: MolensClient, mode: str, args: argparse.Namespace, pids: list[int], leader_pid: int | None) -> Run:
    """One mode's load for ``args.seconds`` through ``client``, with the CPU of ``pids``."""
    if mode == "single":
        threads, what = args.threads, f"threads={args.threads}"

        def work(k: int, i: int) -> int:
            client.create(_task(i))
            return 1
    else:
        threads, what = args.batch_threads, f"batch={args.batch} threads={args.batch_threads}"
        create = client.create_many if mode == "batch" else client.create_many_ids

        def work(k: int, i: int) -> int:
            return len(create([_task(j) for j in range(args.batch)]))

    took: list[float] = []  # list.append is atomic: the threads share it

    def timed(k: int, i: int) -> int:
        t = time.perf_counter()
        done = work(k, i)
        took.append(time.perf_counter() - t)
        return done

    urls = getattr(args, "node_urls", [])
    t0 = threadcpu.read(urls, args.token) if urls else {}
    c0, cc0, l0 = sum(cpu_s(p) for p in pids), time.process_time(), cpu_s(leader_pid)
    s0 = cpu_ticks()
    n, el = run_threads(threads, args.seconds, timed)
    steal = steal_pct(s0, cpu_ticks())
    if urls:
        print("\n".join(threadcpu.report(t0, threadcpu.read(urls, args.token), n, "create")), flush=True)
    return Run(
        n=n,
        elapsed=el,
        what=what,
        server_us=(sum(cpu_s(p) for p in pids) - c0) / n * 1e6,
        leader_us=(cpu_s(leader_pid) - l0) / n * 1e6,
        client_us=(time.process_time() - cc0) / n * 1e6,
        steal=steal,
        p50_ms=_pct(took, 0.50) * 1e3,
        p99_ms=_pct(took, 0.99) * 1e3,
    )


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def references(
    client: MolensClient, args: argparse.Namespace, modes: list[str], runs: dict[str, Run], lines: list[str],
    summary: dict[str, str],
) -> list[str]:
    """Run the ``hello`` and ``lmdb`` references (module docstring); append ratios to ``lines``."""
    leader_url = client.leader()["leader_url"]
    pool = urllib3.PoolManager(retries=False, timeout=60)
    headers = {"Content-Type": "application/json"}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    one = pool.request("POST", f"{leader_url}/api/v1/tasks", body=json.dumps(_task(-2)).encode(), headers=headers)
    many = pool.request("POST", f"{leader_url}/api/v1/tasks/batch", headers=headers,
                        body=json.dumps({"tasks": [_task(j) for j in range(args.batch)]}).encode())
    ids = pool.request("POST", f"{leader_url}/api/v1/tasks/batch", headers={**headers, "Prefer": "return=minimal"},
                       body=json.dumps({"tasks": [_task(j) for j in range(args.batch)]}).encode())
    if one.status != 201 or many.status != 201 or ids.status != 201:
        raise SystemExit(f"capturing the responses for the reference failed: {one.status} / {many.status} / {ids.status}")
    record_bytes = len(one.data)  # the task's JSON: larger than its stored record, a generous ceiling
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="molens-ingest-ref-") as d:
        tmp = Path(d)
        hproc, hurl = start_hello(tmp, one.data, many.data, ids.data)
        try:
            hclient = MolensClient([hurl], token=args.token, pool_maxsize=max(args.threads, args.batch_threads))
            for k, mode in enumerate(modes):
                r = measure(hclient, mode, args, [hproc.pid], None)
                ratio = runs[mode].rate / r.rate
                lines[k] += f" vs_hello={ratio:.2f}"
                summary[f"{mode}_vs_hello"] = f"{ratio:.2f}"
                out.append(
                    f"ingest_reference: server=waitress_hello_world mode={mode} "
                    f"req_per_s={r.rate / (1 if mode == 'single' else args.batch):.0f} creates_per_s={r.rate:.0f} "
                    f"{r.what} server_cpu_us_per_create={r.server_us:.1f} client_cpu_us_per_create={r.client_us:.1f} "
                    f"p50_ms={r.p50_ms:.2f} p99_ms={r.p99_ms:.2f} cores_busy={r.cores_busy:.2f} "
                    f"load1={os.getloadavg()[0]:.1f} steal_pct={r.steal:.0f}"
                )
            hclient.close()
        finally:
            hproc.kill()
            hproc.wait()
        batched = [m for m in modes if m != "single"]
        if batched:
            rate, cpu_us = lmdb_reference(tmp, record_bytes, args.batch, min(args.seconds, 5.0))
            for mode in batched:
                ratio = runs[mode].rate / rate
                lines[modes.index(mode)] += f" vs_lmdb={ratio:.3f}"
                summary[f"{mode}_vs_lmdb"] = f"{ratio:.3f}"
            out.append(
                f"ingest_reference: store=lmdb_batched_puts records_per_s={rate:.0f} batch={args.batch} "
                f"record_bytes={record_bytes} cpu_us_per_record={cpu_us:.1f} sync=fdatasync_per_txn"
            )
    return out


def start_cluster(root: Path, token: str | None = None, pin: bool | None = None) -> tuple[Cluster, int, list[str]]:
    """A 3-node task cluster under ``root`` (``token``: its ``http.auth_token``; ``pin``: True, each
    node on one CPU, round-robin; False, every node free to use every CPU; None, the nodes' default,
    one CPU each of their own choosing: docs/deploy.md#cpu-pinning); its leader's PID and URLs."""
    extra: dict[str, object] = {"logging": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}}
    if token is not None:
        extra["http"] = {"auth_token": token}
    if os.environ.get("BENCH_NODE_CONF"):  # JSON merged into every node's config, for experiments
        extra.update(json.loads(os.environ["BENCH_NODE_CONF"]))
    cluster = Cluster(root, 3, extra=extra, state_machine="tasks")
    cpus = cluster.pin_each_to_one_cpu() if pin else []
    if pin is False:
        for node in cluster.nodes.values():
            node.configure({"node": {"cpus": "all"}})
    cluster.start()
    leader = cluster.leader(timeout=30)
    urls = [f"http://127.0.0.1:{n.settings['http']['port']}" for n in cluster.nodes.values()]
    print(f"started a 3-node cluster (task state machine, scheduler, every commit fsync'd"
          f"{', keys on' if token else ''}{', nodes on CPUs ' + ','.join(map(str, cpus)) if cpus else ''}): "
          f"leader {leader.node_id} pid={leader.pid}, urls {','.join(urls)}")
    return cluster, leader.pid, urls


def compare_run(args: argparse.Namespace, modes: list[str], what: str) -> int:
    """``--keys`` or ``--pin`` (``what``): each mode against a cluster without it ("off"), then
    against one with it ("on"), both clusters up throughout."""
    summary: dict[str, str] = {"target": "cluster", what: "compared"}
    runs: dict[tuple[str, str], list[Run]] = {}
    clusters: list[Cluster] = []
    with tempfile.TemporaryDirectory(prefix=f"molens-ingest-{what}-") as tmp:
        try:
            sides: dict[str, tuple[MolensClient, Cluster, int, str | None]] = {}
            for side in ("off", "on"):
                bootstrap = os.urandom(16).hex() if what == "keys" and side == "on" else None
                cluster, leader_pid, urls = start_cluster(Path(tmp) / side, bootstrap,
                                                          pin=what == "pin" and side == "on")
                clusters.append(cluster)
                token, namespace = None, None
                if bootstrap is not None:
                    with MolensClient(urls, token=bootstrap) as admin:
                        admin.create_namespace("bench")
                        token = admin.create_api_key("bench-writer", role="writer", namespaces=["bench"])["secret"]
                        namespace = "bench"
                client = MolensClient(urls, token=token, namespace=namespace,
                                      pool_maxsize=max(args.threads, args.batch_threads))
                client.create(_task(-1))  # warm up + leader discovery
                sides[side] = (client, cluster, leader_pid, bootstrap)
            for rnd in range(args.rounds):
                # in turn, both clusters up throughout: a load that comes and goes hits both; each round
                # starts with the other side, so neither always runs first
                order = list(sides.items()) if rnd % 2 == 0 else list(reversed(sides.items()))
                for mode in modes:
                    for side, (client, cluster, leader_pid, bootstrap) in order:
                        args.node_urls = [f"http://127.0.0.1:{n.settings['http']['port']}"
                                          for n in cluster.nodes.values()]
                        args.token = bootstrap  # the nodes' thread CPU is read with the admin key
                        r = measure(client, mode, args, [n.pid for n in cluster.nodes.values()], leader_pid)
                        runs.setdefault((mode, side), []).append(r)
                        print(f"ingest: round={rnd + 1} mode={mode} {what}={side} creates_per_s={r.rate:.0f} {r.what} "
                              f"p50_ms={r.p50_ms:.2f} p99_ms={r.p99_ms:.2f} "
                              f"leader_cpu_us_per_create={r.leader_us:.1f} server_cpu_us_per_create={r.server_us:.1f} "
                              f"load1={os.getloadavg()[0]:.1f} steal_pct={r.steal:.0f}", flush=True)
            for client, *_ in sides.values():
                client.close()
        finally:
            for cluster in clusters:
                cluster.kill_all()
    summary["rounds"] = str(args.rounds)
    cpu_ratio = "leader_cpu_on_vs_off" if what == "keys" else f"leader_cpu_{what}_on_vs_off"
    for mode in modes:  # medians over the rounds
        off, on = runs[(mode, "off")], runs[(mode, "on")]
        off_rate, on_rate = statistics.median(r.rate for r in off), statistics.median(r.rate for r in on)
        off_us, on_us = statistics.median(r.leader_us for r in off), statistics.median(r.leader_us for r in on)
        summary[f"{mode}_creates_per_s_{what}_off"] = f"{off_rate:.0f}"
        summary[f"{mode}_creates_per_s_{what}_on"] = f"{on_rate:.0f}"
        summary[f"{mode}_{what}_on_vs_off"] = f"{on_rate / off_rate:.3f}"
        summary[f"{mode}_leader_cpu_us_per_create_{what}_off"] = f"{off_us:.1f}"
        summary[f"{mode}_leader_cpu_us_per_create_{what}_on"] = f"{on_us:.1f}"
        summary[f"{mode}_{cpu_ratio}"] = f"{on_us / off_us:.3f}"
        summary[f"{mode}_p99_ms_{what}_off"] = f"{statistics.median(r.p99_ms for r in off):.2f}"
        summary[f"{mode}_p99_ms_{what}_on"] = f"{statistics.median(r.p99_ms for r in on):.2f}"
    summary["load1"] = f"{os.getloadavg()[0]:.1f}"
    summary["steal_pct_max"] = f"{max(r.steal for rs in runs.values() for r in rs):.0f}"
    print("ingest: summary " + " ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--hello-server":
        hello_server(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
        return 0
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
    ap.add_argument("--modes", default="single,batch,batch_ids", help="comma-separated, run in this order")
    ap.add_argument(
        "--server-pids", default="", help="comma-separated PIDs of local cluster nodes: report their CPU per create"
    )
    ap.add_argument("--no-reference", action="store_true", help="skip the hello-world and lmdb references")
    ap.add_argument("--rounds", type=int, default=1,
                    help="--keys: alternate the two clusters this many rounds (each starting with the other) and "
                         "compare medians")
    ap.add_argument("--keys", action="store_true",
                    help="compare keys off (an open cluster) with a writer key of one namespace (a second cluster)")
    ap.add_argument("--pin", action="store_true",
                    help="compare a cluster whose nodes may use every CPU with one whose nodes run on one CPU each")
    args = ap.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in ("single", "batch", "batch_ids"):
            raise SystemExit(f"unknown mode {mode!r}")
    if args.keys or args.pin:
        what = "keys" if args.keys else "pin"
        if args.url or args.local or (args.keys and args.pin):
            raise SystemExit(f"--{what} starts its own two clusters: give neither --url nor --local (nor both "
                             "--keys and --pin)")
        return compare_run(args, modes, what)

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
        cluster, leader_pid, urls = start_cluster(Path(tmp.name) / "cluster")
        args.server_pids = ",".join(str(n.pid) for n in cluster.nodes.values())
        args.node_urls = urls
        target = "cluster"
    try:
        client = MolensClient(urls, token=args.token, pool_maxsize=max(args.threads, args.batch_threads))
        client.create(_task(-1))  # warm up + leader discovery
        pids = [proc.pid] if proc is not None else [int(p) for p in args.server_pids.split(",") if p]
        cpu = os.cpu_count()
        lines = []
        summary: dict[str, str] = {"target": target}
        runs: dict[str, Run] = {}
        for mode in modes:
            r = measure(client, mode, args, pids, leader_pid)
            runs[mode] = r
            load = os.getloadavg()[0]
            print(f"{mode}: {r.n} creates in {r.elapsed:.1f} s ({r.what}): {r.rate:.0f}/s wall-clock, load1 {load:.1f}, "
                  f"steal {r.steal:.0f} %")
            extra = f" client_cpu_us_per_create={r.client_us:.1f}"
            if pids:
                # The machine is shared: CPU per create is the steadier figure; 1e6 / it is the rate one
                # core would sustain for the server alone.
                print(f"{mode}: server CPU {r.server_us:.1f} us per create ({1e6 / r.server_us:.0f}/s per CPU second)")
                extra = f" server_cpu_us_per_create={r.server_us:.1f} server_cpu_rate={1e6 / r.server_us:.0f}" + extra
            if leader_pid is not None:
                print(f"{mode}: leader CPU {r.leader_us:.1f} us per create ({1e6 / r.leader_us:.0f}/s per CPU second)")
                extra = f" leader_cpu_us_per_create={r.leader_us:.1f}" + extra
                summary[f"{mode}_leader_cpu_us_per_create"] = f"{r.leader_us:.1f}"
            summary[f"{mode}_creates_per_s"] = f"{r.rate:.0f}"
            if pids:
                extra += f" cores_busy={r.cores_busy:.2f}"
            lines.append(
                f"ingest: mode={mode} creates_per_s={r.rate:.0f} {r.what} target={target} cpus={cpu} load1={load:.1f} "
                f"steal_pct={r.steal:.0f} p50_ms={r.p50_ms:.2f} p99_ms={r.p99_ms:.2f}{extra}"
            )
        st = client.stats()
        print(f"server: tasks_total={st.get('tasks_total')} role={st.get('role')} mode={st.get('mode', 'raft')}")
        refs: list[str] = []
        if not args.no_reference:
            refs = references(client, args, modes, runs, lines, summary)
        client.close()
        for line in lines:
            print(line)
        for line in refs:
            print(line)
        summary["load1"] = f"{os.getloadavg()[0]:.1f}"
        summary["steal_pct_max"] = f"{max(r.steal for r in runs.values()):.0f}"
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
