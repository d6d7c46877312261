#!/usr/bin/env python3
"""Per-thread CPU of the nodes under a load: two readings of each node's ``threads_cpu_s`` and
``threads_switches`` (its local ``/api/v1/stats``), printed per unit of work (µs of CPU and context
switches per fire, per create, ...) by thread name, busiest first, so a run says which concern the
load costs and which threads hand it to each other (docs/api.md, ``threads_cpu_s``). ``ingest.py``
and ``lateness.py`` import it.

Run as a script it measures the leader's task path on a real 3-node cluster (task state machine,
every commit fsync'd), in three phases, each read on the leader alone:

- ``create``: ``--creates`` single creates (``MolensClient.create``, ``--threads`` client threads)
  of delayed tasks due in an hour (the wheel does not hold them): thread switches and CPU per create;
- ``life``: the same with tasks due 1.5 s after their create, measured until every one has fired
  and its result has committed: switches and CPU per task, create and fire together;
- ``fire``: ``--fires`` tasks created in batches beforehand, due over 2 s, measured from before the
  first is due until the last result committed: switches and CPU per fire (the leader's, and the
  three nodes' CPU together).

Each phase also prints the messages each of the leader's actors handled per unit
(``mailbox_messages`` of its stats), a count the load hardly moves.

The ``hello`` reference runs in each round before the clusters: a Bottle app on the node's own HTTP
server (:class:`molens.web.server.ApiServer`, its 32 threads) in a process of its own, answering
each create with the bytes a real create was answered (captured in the run) after parsing its body
as JSON, and nothing else; the same client, threads and count as ``create``. Its switches and CPU
per request are what the HTTP layer alone costs here: the floor under the create figures
(``hello_switches``, ``create_switches_vs_hello``).

Without ``--pin`` or ``--free`` each tree's nodes place themselves as that tree does by default
(``node.cpus: auto`` here: one CPU each, docs/deploy.md#cpu-pinning; free to use every CPU in a
tree from before it), and the hello reference on the highest CPU, as a lone node places itself;
``--free`` runs this tree's nodes with ``node.cpus: all`` and the hello reference free.
``--pin`` runs each node on one CPU, round-robin over the CPUs this process may use, through
``node.cpus`` (docs/deploy.md#cpu-pinning; ``taskset`` for a ``--before`` tree that predates it), and
the hello reference on the first of them. ``--pin-ab`` runs two sides of this tree instead, ``free``
(every CPU) and ``pinned``, alternating like ``--before`` (the hello reference
free to use every CPU); the summary's ratios are then ``*_pinned_vs_free``. ``--policy-ab A,B`` runs
two values of ``node.os_scheduling`` as the sides (``normal,batch`` when not given;
docs/deploy.md#os-scheduling), both pinned with ``--pin``; ``--policy`` sets it for every side of a run (not the ``--before`` tree's,
which may predate it).

``--before REV`` also runs the ``molens`` package of git revision ``REV`` (``git archive`` into a
temporary directory; each node's ``PYTHONPATH`` points at one tree or the other), a fresh cluster
for each side and round, the side that goes first alternating (``--rounds``). It prints one line per
side and round, then ``threadcpu: summary ...`` with the medians of both sides and the ratios.
Callbacks go to ``tests/integration/recording_receiver.py`` in its own process. The load average
is printed beside every CPU figure: the machine may be shared, and thread switches are the steadier
figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import urllib3

_http = urllib3.PoolManager(maxsize=8, retries=False, timeout=5)

Reading = dict[str, tuple[str, dict[str, float], dict[str, int]]]
"""url -> (role, CPU seconds by thread name, context switches by thread name)."""


def read(urls: list[str], token: str = "") -> Reading:
    """Each node's role and CPU seconds by thread name; nodes that do not answer are left out."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out: Reading = {}
    for url in urls:
        try:
            st = json.loads(_http.request("GET", url + "/api/v1/stats?local=1", headers=headers).data)
        except (urllib3.exceptions.HTTPError, ValueError):
            continue
        out[url] = (st.get("role", "?"), st.get("threads_cpu_s") or {}, st.get("threads_switches") or {})
    return out


def report(before: Reading, after: Reading, units: int, unit: str) -> list[str]:
    """Two lines per node: µs of CPU per ``unit`` by thread (those >= 1 µs), then context switches
    per ``unit`` by thread (those >= 0.01), busiest first."""
    lines = []
    for url, (role, cpu, switches) in after.items():
        _, old_cpu, old_sw = before.get(url, ("?", {}, {}))
        n = max(1, units)
        per = {k: (v - old_cpu.get(k, 0.0)) * 1e6 / n for k, v in cpu.items()}
        top = sorted(((v, k) for k, v in per.items() if v >= 1), reverse=True)
        port = url.rsplit(":", 1)[1]
        lines.append(f"  {role} {port} us/{unit} by thread: total={sum(per.values()):.0f} "
                     + " ".join(f"{k}={v:.0f}" for v, k in top))
        if switches:
            sw = {k: (v - old_sw.get(k, 0)) / n for k, v in switches.items()}
            top_sw = sorted(((v, k) for k, v in sw.items() if v >= 0.01), reverse=True)
            lines.append(f"  {role} {port} switches/{unit} by thread: total={sum(sw.values()):.2f} "
                         + " ".join(f"{k}={v:.2f}" for v, k in top_sw))
    return lines


# ----------------------------------------------------------------------------------------------- A/B bench

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("create", "life", "fire")


def _cpu_s(pid: int) -> float:
    """User+system CPU seconds of a local process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stats(url: str) -> dict[str, Any]:
    return json.loads(_http.request("GET", url + "/api/v1/stats?local=1").data)  # type: ignore[no-any-return]


def _mailboxes(url: str) -> dict[str, int]:
    """Messages each actor of the node has handled (leader actors: this term)."""
    mm = _stats(url).get("scheduler", {}).get("mailbox_messages", {})
    return {k: int(v) for k, v in mm.items() if v is not None}


def _delivered(urls: list[str]) -> int:
    return sum(int(_stats(u).get("scheduler", {}).get("worker", {}).get("delivered", 0)) for u in urls)


def _settled(leader_url: str, urls: list[str], want: int, timeout_s: float) -> None:
    """Wait until ``want`` fires were delivered and the leader has no fire in flight."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if _delivered(urls) >= want and not _stats(leader_url).get("scheduler", {}).get("fires_in_flight"):
            time.sleep(0.3)  # the last Results entry's apply and its hand-offs
            return
        time.sleep(0.1)
    raise SystemExit(f"fires not settled in {timeout_s:.0f} s (delivered {_delivered(urls)} of {want})")


class _Side:
    """One cluster running the ``molens`` of ``tree``."""

    def __init__(self, name: str, tree: Path, root: Path, placement: str = "default", policy: str = "") -> None:
        sys.path.insert(0, str(ROOT))
        from tests.integration.conftest import Cluster

        self.name = name
        extra: dict[str, Any] = {"logging": {"level": "WARNING"}}
        if policy:
            extra["node"] = {"os_scheduling": policy}
        self.cluster = Cluster(root, 3, extra=extra, state_machine="tasks")
        for node in self.cluster.nodes.values():
            node.argv = ["env", f"PYTHONPATH={tree}", sys.executable, "-m", "molens.cli"]
        cpus_py = tree / "molens" / "cpus.py"
        if placement == "pinned" and cpus_py.exists():
            self.cluster.pin_each_to_one_cpu()
        elif placement == "pinned":  # a tree from before node.cpus: the same CPUs, given from outside
            for cpu, node in zip(self.cluster.one_cpu_each(), self.cluster.nodes.values(), strict=True):
                node.argv = ["taskset", "-c", str(cpu), *node.argv]
        elif placement == "free" and cpus_py.exists() and 'ALL = "all"' in cpus_py.read_text():
            for node in self.cluster.nodes.values():  # a tree whose default places itself (node.cpus: auto)
                node.configure({"node": {"cpus": "all"}})
        self.cluster.start()
        leader = self.cluster.leader(timeout=60)
        self.pid = leader.pid
        self.urls = [f"http://127.0.0.1:{n.settings['http']['port']}" for n in self.cluster.nodes.values()]
        self.leader_url = f"http://127.0.0.1:{leader.settings['http']['port']}"
        self.pids = [n.pid for n in self.cluster.nodes.values()]

    def stop(self) -> None:
        self.cluster.kill_all()


def _phase(side: _Side, unit: str, n: int, timed: Any, wait_fires: int) -> dict[str, float]:
    """Leader switches and CPU (µs) per ``unit``, and the nodes' CPU, over ``timed()`` and the
    settling; prints the leader's threads."""
    lu = side.leader_url
    m0 = _mailboxes(lu)
    t0, c0, a0 = read([lu]), _cpu_s(side.pid), sum(_cpu_s(p) for p in side.pids)
    load0 = os.getloadavg()[0]
    d0 = _delivered(side.urls) if wait_fires else 0
    timed()
    if wait_fires:
        _settled(lu, side.urls, d0 + wait_fires, 120)
    t1, c1, a1 = read([lu]), _cpu_s(side.pid), sum(_cpu_s(p) for p in side.pids)
    _, _, sw0 = t0[lu]
    _, _, sw1 = t1[lu]
    print("\n".join(report(t0, t1, n, unit)), flush=True)
    m1 = _mailboxes(lu)
    msgs = {k: (v - m0.get(k, 0)) / n for k, v in m1.items()}
    print(f"  leader messages/{unit} by actor: total={sum(msgs.values()):.2f} "
          + " ".join(f"{k}={v:.2f}" for k, v in sorted(msgs.items(), key=lambda kv: -kv[1])), flush=True)
    return {
        "switches": sum(v - sw0.get(k, 0) for k, v in sw1.items()) / n,
        "leader_cpu_us": (c1 - c0) * 1e6 / n,
        "cluster_cpu_us": (a1 - a0) * 1e6 / n,
        "load": (load0 + os.getloadavg()[0]) / 2,
        "messages": sum(msgs.values()),
    }


def _run(side: _Side, args: argparse.Namespace, receiver: str) -> dict[str, dict[str, float]]:
    sys.path.insert(0, str(ROOT))
    from molens.client import MolensClient

    client = MolensClient(side.urls, retry_deadline_s=60)
    client.create({"type": "delayed", "interval_ms": 3_600_000, "callback_url": receiver})  # warm the path
    out: dict[str, dict[str, float]] = {}

    def singles(delay_ms: int) -> Any:
        def go() -> None:
            per = args.creates // args.threads

            def loop() -> None:
                for _ in range(per):
                    client.create({"type": "delayed", "run_at": int(time.time() * 1000) + delay_ms,
                                   "callback_url": receiver})

            ts = [threading.Thread(target=loop) for _ in range(args.threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        return go

    n = args.creates // args.threads * args.threads
    out["create"] = _phase(side, "create", n, singles(3_600_000), 0)
    out["life"] = _phase(side, "task", n, singles(1_500), n)
    due0 = int(time.time() * 1000) + 4_000 + args.fires // 5
    bodies = [{"type": "delayed", "run_at": due0 + i * 2_000 // args.fires, "callback_url": receiver}
              for i in range(args.fires)]
    for i in range(0, len(bodies), 500):
        client.create_many(bodies[i : i + 500])
    _settled(side.leader_url, side.urls, 0, 10)  # nothing of the earlier phases still in flight
    while time.time() * 1000 < due0 - 500:
        time.sleep(0.05)
    out["fire"] = _phase(side, "fire", args.fires, lambda: None, args.fires)
    return out


def hello_server(port: int, answer_path: str) -> None:
    """Child process: the ``hello`` reference (module docstring); serves until killed."""
    sys.path.insert(0, str(ROOT))
    import bottle

    from molens.config import HttpConfig
    from molens.web.node_stats import thread_cpu_s, thread_switches
    from molens.web.server import ApiServer, ServerOptions

    answer_body = Path(answer_path).read_bytes()
    app = bottle.Bottle()

    def create() -> bytes:
        json.loads(bottle.request.body.read())
        bottle.response.status = 201
        bottle.response.content_type = "application/json"
        return answer_body

    def stats() -> dict[str, Any]:
        return {"role": "hello", "threads_cpu_s": thread_cpu_s(), "threads_switches": thread_switches()}

    app.route("/api/v1/tasks", "POST", create)
    app.route("/api/v1/stats", "GET", stats)
    server = ApiServer(app, ServerOptions(HttpConfig(port=port), threads=32)).start()
    print("listening", flush=True)
    threading.Event().wait()
    server.stop()


def _hello(args: argparse.Namespace, tmp: Path, answer: bytes, receiver: str) -> dict[str, float]:
    """The ``hello`` reference's switches and CPU per request (module docstring)."""
    from molens.client import MolensClient
    from tests.integration.conftest import free_ports

    (tmp / "answer.json").write_bytes(answer)
    port = free_ports(1)[0]
    if args.pin:
        pin = ["taskset", "-c", str(min(os.sched_getaffinity(0)))]
    elif args.free or args.pin_ab:
        pin = []
    else:  # the nodes on their default one CPU each: the reference as a lone node would place itself
        pin = ["taskset", "-c", str(max(os.sched_getaffinity(0)))]
    proc = subprocess.Popen([*pin, sys.executable, __file__, "--hello-server", str(port), str(tmp / "answer.json")],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "listening":
            raise SystemExit("hello-world reference server did not start")
        url = f"http://127.0.0.1:{port}"
        client = MolensClient([url], retry_deadline_s=60)
        body = {"type": "delayed", "interval_ms": 3_600_000, "callback_url": receiver}
        client.create(body)
        per = args.creates // args.threads
        r0, c0, load0 = read([url]), _cpu_s(proc.pid), os.getloadavg()[0]

        def loop() -> None:
            for _ in range(per):
                client.create(body)

        ts = [threading.Thread(target=loop) for _ in range(args.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        r1, c1 = read([url]), _cpu_s(proc.pid)
        n = per * args.threads
        print("\n".join(report(r0, r1, n, "request")), flush=True)
        return {"switches": sum(v - r0[url][2].get(k, 0) for k, v in r1[url][2].items()) / n,
                "cpu_us": (c1 - c0) * 1e6 / n, "load": (load0 + os.getloadavg()[0]) / 2}
    finally:
        proc.kill()
        proc.wait(10)


def _answer(receiver: str, tmp: Path) -> bytes:
    """A real create's answer bytes, from a one-node cluster of this tree (the hello's answer)."""
    from tests.integration.conftest import Cluster

    cluster = Cluster(tmp / "answer", 1, extra={"logging": {"level": "WARNING"}}, state_machine="tasks")
    cluster.start()
    try:
        leader = cluster.leader(timeout=60)
        url = f"http://127.0.0.1:{leader.settings['http']['port']}/api/v1/tasks"
        body = json.dumps({"type": "delayed", "interval_ms": 3_600_000, "callback_url": receiver}).encode()
        r = _http.request("POST", url, body=body, headers={"Content-Type": "application/json"})
        if r.status != 201:
            raise SystemExit(f"create for the hello's answer: {r.status} {r.data[:200]!r}")
        return bytes(r.data)
    finally:
        cluster.kill_all()


def _line(name: str, rnd: int, res: dict[str, dict[str, float]]) -> str:
    parts = [f"side={name} round={rnd}"]
    for ph in PHASES:
        r = res[ph]
        parts.append(f"{ph}_switches={r['switches']:.2f} {ph}_messages={r['messages']:.2f} "
                     f"{ph}_leader_cpu_us={r['leader_cpu_us']:.0f} "
                     f"{ph}_cluster_cpu_us={r['cluster_cpu_us']:.0f} {ph}_load={r['load']:.2f}")
    return "threadcpu: " + " ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="", help="git revision whose molens also runs, alternating (e.g. main)")
    ap.add_argument("--creates", type=int, default=1_000, help="single creates per phase")
    ap.add_argument("--threads", type=int, default=8, help="client threads of the single creates")
    ap.add_argument("--fires", type=int, default=3_000, help="tasks of the fire phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pin", action="store_true",
                    help="each node on one CPU, round-robin (node.cpus; taskset for a tree from before it)")
    ap.add_argument("--free", action="store_true",
                    help="every node free to use every CPU (node.cpus: all; a tree from before node.cpus: auto runs so anyway)")
    ap.add_argument("--pin-ab", action="store_true",
                    help="two sides of this tree instead: nodes free to use every CPU, and nodes on one CPU each")
    ap.add_argument("--policy-ab", nargs="?", const="normal,batch", default="", metavar="A,B",
                    help="two sides of this tree instead: node.os_scheduling A and B, normal,batch if not given "
                         "(with --pin, both pinned)")
    ap.add_argument("--policy", choices=("http-batch", "normal", "batch"), default="",
                    help="node.os_scheduling of every side (default: the nodes' default)")
    ap.add_argument("--hello-server", nargs=2, metavar=("PORT", "ANSWER_FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hello_server:
        hello_server(int(args.hello_server[0]), args.hello_server[1])
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="threadcpu-"))
    if args.pin_ab and (args.before or args.pin or args.free or args.policy_ab):
        raise SystemExit("--pin-ab compares this tree with and without pinning: give neither --before, --pin, --free "
                         "nor --policy-ab")
    if args.pin and args.free:
        raise SystemExit("--pin and --free: give one")
    placement = "pinned" if args.pin else "free" if args.free else "default"
    if args.policy_ab and (args.before or args.policy):
        raise SystemExit("--policy-ab compares this tree's two policies: give neither --before nor --policy")
    sides: dict[str, tuple[Path, str, str]] = {"after": (ROOT, placement, args.policy)}
    if args.pin_ab:
        sides = {"free": (ROOT, "free", args.policy), "pinned": (ROOT, "pinned", args.policy)}
    elif args.policy_ab:
        pair = [p.strip() for p in args.policy_ab.split(",")]
        if len(pair) != 2 or len(set(pair)) != 2 or not set(pair) <= {"http-batch", "normal", "batch"}:
            raise SystemExit(f"--policy-ab {args.policy_ab}: two different values of http-batch, normal, batch")
        sides = {name: (ROOT, placement, name) for name in pair}
    if args.before:
        old = tmp / "before"
        old.mkdir()
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.before], check=True,
                             capture_output=True, text=True).stdout.strip()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "molens"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        static = ROOT / "molens" / "web" / "static"  # built files the archive does not hold
        if static.exists():
            (old / "molens" / "web" / "static").symlink_to(static.resolve())
        sides = {"before": (old, placement, ""), "after": (ROOT, placement, args.policy)}
        print(f"threadcpu: before={rev} ({old}) after=working tree ({ROOT})", flush=True)
    sys.path.insert(0, str(ROOT))
    from tests.integration.conftest import free_ports

    port_proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.recording_receiver", str(free_ports(1)[0]), str(tmp / "received.jsonl")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert port_proc.stdout is not None
    receiver = f"http://127.0.0.1:{port_proc.stdout.readline().split()[-1]}/ok/threadcpu"
    results: dict[str, list[dict[str, dict[str, float]]]] = {k: [] for k in sides}
    hellos: list[dict[str, float]] = []
    try:
        answer = _answer(receiver, tmp)
        for rnd in range(args.rounds):
            hello = _hello(args, tmp, answer, receiver)
            hellos.append(hello)
            print(f"threadcpu: side=hello round={rnd} hello_switches={hello['switches']:.2f} "
                  f"hello_cpu_us={hello['cpu_us']:.0f} hello_load={hello['load']:.2f}", flush=True)
            names = list(sides) if rnd % 2 == 0 else list(reversed(sides))
            for name in names:
                tree, where, policy = sides[name]
                side = _Side(name, tree, tmp / f"{name}-{rnd}", placement=where, policy=policy)
                try:
                    res = _run(side, args, receiver)
                finally:
                    side.stop()
                results[name].append(res)
                print(_line(name, rnd, res), flush=True)
    finally:
        port_proc.kill()
        port_proc.wait(10)
    summary = [f"creates={args.creates} threads={args.threads} fires={args.fires} rounds={args.rounds} "
               f"pinned={'compared' if args.pin_ab else {'pinned': 'yes', 'free': 'no'}.get(placement, 'default')} "
               f"os_scheduling={'compared' if args.policy_ab else args.policy or 'default'}"]
    med: dict[str, dict[str, float]] = {}
    for name, runs in results.items():
        med[name] = {f"{ph}_{k}": statistics.median(r[ph][k] for r in runs)
                     for ph in PHASES for k in ("switches", "messages", "leader_cpu_us", "cluster_cpu_us", "load")}
        summary.append(" ".join(f"{name}_{k}={v:.2f}" if "switches" in k or "load" in k or "messages" in k else f"{name}_{k}={v:.0f}"
                                for k, v in med[name].items()))
    hello_sw = statistics.median(h["switches"] for h in hellos)
    hello_cpu = statistics.median(h["cpu_us"] for h in hellos)
    summary.append(f"hello_switches={hello_sw:.2f} hello_cpu_us={hello_cpu:.0f}")
    summary.append(" ".join(f"{name}_create_switches_vs_hello={med[name]['create_switches'] / hello_sw:.2f} "
                            f"{name}_create_leader_cpu_vs_hello={med[name]['create_leader_cpu_us'] / hello_cpu:.2f}"
                            for name in med))
    if len(med) == 2:  # the second side against the first
        (first, b), (second, a) = med.items()
        summary.append(" ".join(f"{k}_{second}_vs_{first}={a[k] / b[k]:.2f}" for k in a if "load" not in k and b[k]))
    print("threadcpu: summary " + " ".join(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
