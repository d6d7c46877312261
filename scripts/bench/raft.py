#!/usr/bin/env python3
"""Raft replication benchmark: a local 3-node Molens cluster vs PySyncObj, driven the same way.

Mode ``inprocess`` (the comparison): each system runs as three processes on this machine, and the
leader process itself keeps ``--window`` calls in flight (PySyncObj's own way: a semaphore released
by each call's callback). Molens: ``molens.node.Node`` with its default configuration (every commit
fsync'd, group commit) and the KV state machine, proposals through ``RaftPeerHandle.propose_batch``
with one entry and one callback per call. PySyncObj 0.3.17: a replicated dict, ``put(..., callback=...)``, in its
default ``SyncObjConf`` and in a tuned one (1 MiB append batches and socket buffers, 1.5-3 s election
timeouts), in memory with no fsync; and in the default one with each node on one CPU
(``taskset``, round-robin from the highest), as Molens nodes place themselves by default
(``node.cpus: auto``, docs/deploy.md#cpu-pinning). Every run starts a fresh cluster, waits 1 s after a leader is known, loads for ``--warmup``
seconds uncounted, then counts the commits of ``--seconds``; calls still in flight then drain
uncounted. Errors and calls never answered (timeouts) are printed for every run. Light-load latency:
a window of 1. A minimal PySyncObj harness of its own (default conf, 30,000-call window, 1 s warm-up)
runs in turn with the others: ``peer_vs_reference`` is the peer's figure (the one in ``ratio``) over
it, ``default_vs_reference`` the default-conf window run's (the same method as the reference; both
move by 2-5x from one fresh PySyncObj cluster to the next, as its leader stalls or is lost).
PySyncObj answers a full window in bursts (12,000-30,000 callbacks, then 1-1.5 s of nothing), so
the interval is 10 s (a count over 5 s moved by 25 % with where its edges fell; the pauses are
printed), and each system runs ``--rounds`` times (2) in turn, its best run counting: the peer's
best case. PySyncObj is also measured its own repository's way (``pysyncobj_own.py``: every node offers an
open-loop rate, ``--own-rates``), and the peer's figure in ``ratio`` is the best of all its runs.

``BENCH_RAFT='{"max_proposal_batch": 4096}'`` (JSON) overrides ``raft`` config keys of the Molens
nodes, ``BENCH_NODE='{"cpus": "all"}'`` their ``node`` keys, for experiments; ``BENCH_KEEP=1`` keeps the data and node logs. ``--threads`` prints each
Molens run's CPU per commit by thread, on the leader and the followers, over the measured interval;
``BENCH_TRACE=1`` prints the critical path of a light-load commit, step by step (:func:`critical_path`).

``--client``: Molens also through the admin socket from a client process (``propose``, one entry per
request), ``mode=client``, no peer figure. ``--failover``: kill -9 the leader while a client writes;
time from the kill to the next commit.

Prints per payload ``raft: mode=inprocess payload=16B commits_per_s=... ratio=... peer_vs_reference=...``,
then ``raft_vs_pysyncobj: mode=inprocess ratio=... peer_vs_reference=...`` and a final summary line.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import itertools
import json
import logging
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
import zmq

from molens import cpus
from molens.admin import AdminClient, AdminError
from molens.config import NodeConfig
from molens.kv import encode_put
from molens.web.node_stats import thread_cpu_s

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


def value_for(size: int) -> bytes:
    """The value that makes a KV put with a 4-byte key exactly ``size`` bytes (at least 13)."""
    overhead = len(encode_put(b"kkkk", b""))
    v = b"x" * max(0, size - overhead)
    while v and len(encode_put(b"kkkk", v)) > size:  # msgpack's length prefix grows past 255 bytes
        v = v[:-1]
    return v


def entry(i: int, size: int) -> bytes:
    """A KV put (4-byte key) whose encoded entry is ``size`` bytes (at least 13)."""
    return encode_put((i & 0xFFFFFFFF).to_bytes(4, "big"), value_for(size))


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
                "node": {"id": nid, "data_dir": str(root / nid), **json.loads(os.environ.get("BENCH_NODE", "{}"))},
                "cluster": {"peers": peers},
                "raft": {"bind_addr": a["raft_addr"], **json.loads(os.environ.get("BENCH_RAFT", "{}"))},
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


# --- in-process load: the leader process proposes through a bounded window ------------------------

PYSYNCOBJ_FAIL = {1: "queue_full", 2: "missing_leader", 3: "discarded", 4: "not_leader", 5: "leader_changed",
                  6: "request_denied", 7: "unknown_outcome"}
"""pysyncobj.FAIL_REASON codes, by name."""

TUNED_BYTES = 1 << 20
"""PySyncObj's tuned configuration: append batches and socket buffers of 1 MiB (default 64 KiB)..."""

TUNED_TIMEOUTS = {"raftMinTimeout": 1.5, "raftMaxTimeout": 3.0}
"""... and election timeouts of 1.5-3 s (default 0.4-1.4 s): on a busy machine its leader's
heartbeats run late and the default timeouts cost it the leadership mid-run."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One measured run: a fresh 3-node cluster, ``window`` proposals in flight from the leader
    process, ``warmup`` seconds not counted, then ``seconds`` counted; the drain is not counted."""

    system: str  # molens | pysyncobj | reference
    payload: int
    window: int
    warmup: float
    seconds: float
    conf: str = "default"  # pysyncobj: default | tuned | pinned (default, each node on one CPU)
    drain_s: float = 30.0


class _Window:
    """At most ``n`` calls in flight; counts what completes inside the measured interval.

    The callbacks take a system's own ``(result, error)`` and are handed to it as they are (no
    wrapper per call), and only some calls (:func:`window_load` picks them) carry their send time for the latency
    percentiles: per call it costs what the reference harness's bare loop costs (3.3-3.4 against
    3.2-3.4 us with a dummy system, 5.0-7.6 before), so it takes no more of the leader's CPU (and
    GIL) from either system. ``failed(error)`` names an error, or gives None on success."""

    def __init__(self, n: int, t_measure: float, t_end: float, failed: Callable[[Any], str | None]) -> None:
        self.sem = threading.Semaphore(n)
        self.lock = threading.Lock()
        self.t_measure = t_measure
        self.t_end = t_end
        self.failed = failed
        self.done = 0
        self.times: list[float] = []
        self.lat: list[float] = []
        self.errors: dict[str, int] = {}
        self.completed = 0

    def settle(self, _result: Any, error: Any) -> None:
        self._settle(error, None)

    def settle_timed(self, t_sent: float, _result: Any, error: Any) -> None:
        self._settle(error, t_sent)

    def _settle(self, error: Any, t_sent: float | None) -> None:
        now = time.perf_counter()
        name = self.failed(error)
        with self.lock:
            self.completed += 1
            if name is not None:
                self.errors[name] = self.errors.get(name, 0) + 1
            elif self.t_measure <= now < self.t_end:
                self.done += 1
                self.times.append(now)
                if t_sent is not None:
                    self.lat.append((now - t_sent) * 1000)
        self.sem.release()


PAUSE_S = 0.1
"""A pause of this long between two completions counts in :func:`pauses`."""


def pauses(times: list[float]) -> int:
    """How often the completions paused for ``PAUSE_S`` or longer. With a full window PySyncObj
    answers in bursts (12,000-30,000 callbacks at once, then nothing for 1-1.5 s), so a count over
    the interval moves by a burst with where the interval's edges fall: printed so that a reader
    sees it; Molens shows none but a slow flush."""
    ts = sorted(times)
    return sum(1 for a, b in itertools.pairwise(ts) if b - a >= PAUSE_S)


def cpu_delta(before: dict[str, float], after: dict[str, float], units: int) -> dict[str, float]:
    """Microseconds of CPU per unit by thread, the busiest first (threads under 0.5 us left out), then
    the system part of each (``<thread>.sys``)."""
    per = {k: (v - before.get(k, 0.0)) * 1e6 / max(1, units) for k, v in after.items()}
    return {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1])
            if v >= 0.5 and not k.endswith(".sys")} | {k: round(v, 1) for k, v in per.items() if k.endswith(".sys")}


def _marks(result_path: str) -> tuple[str, str]:
    """Files the leader creates when the measured interval starts and ends (followers read their
    thread CPU at both)."""
    return result_path + ".t0", result_path + ".t1"


Callback = Callable[[Any, Any], None]
"""A system's own completion callback: ``(result, error)``."""


def window_load(submit: Callable[[int, Callback], None], plan: Plan, failed: Callable[[Any], str | None],
                result_path: str | None = None) -> dict[str, Any]:
    """Drive ``submit(i, on_done)`` as PySyncObj's own examples do: a semaphore of ``plan.window``
    calls, released by each call's callback. Commits/s over the interval after the warm-up; the
    calls still in flight at its end drain afterwards, uncounted (timeouts: left after ``drain_s``)."""
    t0 = time.perf_counter()
    sample = 1 if plan.window <= 64 else 16  # light load: every call's latency
    w = _Window(plan.window, t0 + plan.warmup, t0 + plan.warmup + plan.seconds, failed)
    settle = w.settle
    i = 0
    cpu0: float | None = None
    threads0: dict[str, float] = {}
    while True:
        now = time.perf_counter()
        if now >= w.t_end:
            break
        if cpu0 is None and now >= w.t_measure:
            cpu0 = time.process_time()
            threads0 = thread_cpu_s(system=True)
            if result_path:
                Path(_marks(result_path)[0]).touch()
        if not w.sem.acquire(timeout=0.05):
            continue
        submit(i, functools.partial(w.settle_timed, time.perf_counter()) if i % sample == 0 else settle)
        i += 1
    cpu = time.process_time() - (cpu0 if cpu0 is not None else time.process_time())
    threads1 = thread_cpu_s(system=True)
    if result_path:
        Path(_marks(result_path)[1]).touch()
    sent = i
    deadline = time.perf_counter() + plan.drain_s
    while time.perf_counter() < deadline:
        with w.lock:
            if w.completed >= sent:
                break
        time.sleep(0.01)
    with w.lock:
        timeouts = sent - w.completed
        return {
            "commits_per_s": w.done / plan.seconds,
            "pauses": pauses(w.times),
            "done": w.done,
            "p50_ms": pct(w.lat, 50),
            "p99_ms": pct(w.lat, 99),
            "errors": dict(w.errors),
            "timeouts": timeouts,
            "sent": sent,
            "leader_cpu_us_per_commit": cpu / max(1, w.done) * 1e6,
            "leader_threads_us": cpu_delta(threads0, threads1, w.done),
        }


def _finish(result_path: str, res: Any) -> None:
    Path(result_path + ".tmp").write_text(json.dumps(res))
    os.replace(result_path + ".tmp", result_path)


def _wait_file(path: str, timeout: float, poll: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(poll)


class Trace:
    """``BENCH_TRACE=1`` at window 1: timestamps (CLOCK_MONOTONIC ns, comparable across the node
    processes) of each step of a commit on the leader and the followers, recorded by wrapping the
    shell's methods in the node process; the parent lines them up by log index (:func:`critical_path`)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def ev(self, name: str, idx: int = 0) -> None:
        self.events.append((name, time.monotonic_ns(), idx))

    def install(self) -> None:
        from molens.actors import raft_peer as rp
        from molens.actors.peer_messages import Inbound
        from molens.kv import KVStateMachine
        from molens.raft import messages as mm
        from molens.raft.storage import LmdbLog

        ev = self.ev

        def wrap(cls: Any, name: str, before: Callable[..., None] | None, after: Callable[..., None] | None) -> None:
            orig = getattr(cls, name)

            def f(*a: Any, **k: Any) -> Any:
                if before:
                    before(*a, **k)
                out = orig(*a, **k)
                if after:
                    after(*a, **k)
                return out

            setattr(cls, name, f)

        def kind(payload: bytes) -> tuple[str, int] | None:
            with contextlib.suppress(Exception):
                m = mm.decode(payload)
                if isinstance(m, mm.AppendEntries) and m.entries:
                    return "app", m.entries[-1].index
                if isinstance(m, mm.AppendResponse) and not m.reject:
                    return "ack", m.index
            return None

        def on_io(_self: Any, _frm: str, payload: bytes) -> None:
            k = kind(payload)
            if k:
                ev("io_" + k[0], k[1])

        def on_actor(_self: Any, message: Any) -> None:
            if isinstance(message, Inbound):
                k = kind(message.payload)
                if k:
                    ev("actor_" + k[0], k[1])

        def on_send(_self: Any, msgs: Any) -> None:
            for m in msgs:
                if isinstance(m, mm.AppendEntries) and m.entries:
                    ev("send_app", m.entries[-1].index)
                elif isinstance(m, mm.AppendResponse) and not m.reject:
                    ev("send_ack", m.index)

        def last_of(entries: Any) -> int:
            return entries[-1].index if entries else 0

        wrap(rp.RaftPeer, "_on_transport_message", on_io, None)
        wrap(rp.RaftPeer, "on_receive", on_actor, None)
        wrap(rp.RaftPeer, "_send", on_send, None)
        wrap(rp.RaftPeer, "_flush_proposals", lambda s: s._batch_datas and ev("take"), None)
        wrap(LmdbLog, "save", lambda _s, hard_state=None, entries=(), **_k: ev("save0", last_of(entries)),
             lambda _s, hard_state=None, entries=(), **_k: ev("save1", last_of(entries)))
        wrap(KVStateMachine, "apply_batch", lambda _s, es: ev("apply0", last_of(es)),
             lambda _s, es: ev("apply1", last_of(es)))


def critical_path(leader: list[list[Any]], followers: list[list[list[Any]]]) -> dict[str, float]:
    """Median ms of each step of a commit at window 1, lined up by log index: the leader's wake-up,
    its send and save, the quicker follower's receive, hand-off, save and ack, the ack's way back,
    the apply and the callback."""
    def by_idx(evs: list[list[Any]], name: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for n, t, i in evs:
            if n == name and i and i not in out:
                out[i] = t
        return out

    def after(evs: list[list[Any]], name: str, t0: int) -> int | None:
        for n, t, _i in evs:
            if n == name and t >= t0:
                return int(t)
        return None

    def before(evs: list[list[Any]], name: str, t0: int) -> int | None:
        best = None
        for n, t, _i in evs:
            if n == name and t <= t0:
                best = t
        return best

    send_app = by_idx(leader, "send_app")
    save0, save1 = by_idx(leader, "save0"), by_idx(leader, "save1")
    io_ack, actor_ack = by_idx(leader, "io_ack"), by_idx(leader, "actor_ack")
    apply0, apply1 = by_idx(leader, "apply0"), by_idx(leader, "apply1")
    fs = [{k: by_idx(f, k) for k in ("io_app", "actor_app", "save0", "save1", "send_ack")} for f in followers]
    steps: dict[str, list[float]] = {}

    def add(k: str, a: int | None, b: int | None) -> None:
        if a is not None and b is not None:
            steps.setdefault(k, []).append((b - a) / 1e6)

    for idx, t_send in send_app.items():
        if idx not in apply1 or idx not in io_ack:
            continue
        t_prop, t_take = before(leader, "propose", t_send), before(leader, "take", t_send)
        t_done = after(leader, "done", apply1[idx])
        fast = min((f for f in fs if idx in f["send_ack"]), key=lambda f: f["send_ack"][idx], default=None)
        add("1 propose->actor takes it", t_prop, t_take)
        add("2 take->AppendEntries queued", t_take, t_send)
        add("3 leader log save (2 fdatasync)", save0.get(idx), save1.get(idx))
        if fast is not None:
            add("4 send->follower io thread", t_send, fast["io_app"].get(idx))
            add("5 follower io->actor", fast["io_app"].get(idx), fast["actor_app"].get(idx))
            add("6 follower actor->save start", fast["actor_app"].get(idx), fast["save0"].get(idx))
            add("7 follower log save (2 fdatasync)", fast["save0"].get(idx), fast["save1"].get(idx))
            add("8 follower save->ack queued", fast["save1"].get(idx), fast["send_ack"].get(idx))
            add("9 ack->leader io thread", fast["send_ack"].get(idx), io_ack[idx])
        add("10 leader io->actor", io_ack[idx], actor_ack.get(idx))
        add("11 actor->apply start", actor_ack.get(idx), apply0.get(idx))
        add("12 apply (kv txn, 1 fdatasync)", apply0.get(idx), apply1.get(idx))
        add("13 apply end->callback", apply1[idx], t_done)
        add("total propose->callback", t_prop, t_done)
        add("leader save end - follower ack in (slack)", save1.get(idx), io_ack[idx])
    return {k: statistics.median(v) for k, v in sorted(steps.items(), key=lambda kv: (len(kv[0].split()[0]), kv[0]))}


def molens_node(config_path: str, plan_json: str, result_path: str) -> None:
    """Child process: one Molens node (``molens.node.Node``, as ``molens-node`` runs it); once a
    leader is known and 1 s has passed (as for PySyncObj), the leader runs the plan in-process
    through ``RaftPeerHandle.propose_batch`` with one entry per call and its callback (as
    PySyncObj's ``put(..., callback=...)``), and writes the result."""
    from molens.config import load
    from molens.node import Node

    plan = Plan(**json.loads(plan_json))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("pykka").setLevel(logging.ERROR)
    trace = Trace() if os.environ.get("BENCH_TRACE") and plan.window == 1 else None
    if trace is not None:
        trace.install()
    node = Node(load(config_path))
    node.start()
    try:
        peer = node.peer
        assert peer is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and peer.status()["leader_id"] is None:
            time.sleep(0.05)
        time.sleep(1.0)
        if peer.status()["role"] != "leader":
            t0, t1 = _marks(result_path)
            _wait_file(t0, 120 + plan.warmup, poll=0.005)
            before = thread_cpu_s(system=True)
            _wait_file(t1, 120 + plan.warmup + plan.seconds, poll=0.005)
            after = thread_cpu_s(system=True)
            if trace is not None:
                _finish(f"{result_path}.{node.cfg.node.id}.trace", trace.events)
            _wait_file(result_path, 120 + plan.drain_s)
            with contextlib.suppress(OSError, ValueError):
                done = json.loads(Path(result_path).read_text())["done"]
                _finish(f"{result_path}.{node.cfg.node.id}.threads", cpu_delta(before, after, done))
            return
        value = value_for(plan.payload)
        propose = peer.propose_batch

        def submit(i: int, on_done: Callback) -> None:
            if trace is not None:
                trace.ev("propose")
                done = on_done

                def on_done(res: Any, err: Any) -> None:
                    trace.ev("done")
                    done(res, err)
            propose([encode_put((i & 0xFFFFFFFF).to_bytes(4, "big"), value)], on_done)

        res = window_load(submit, plan, lambda err: None if err is None else type(err).__name__, result_path)
        if trace is not None:
            res["trace"] = trace.events
        st = peer.stats()
        res["entries_per_append"] = st["proposals"] / max(1, st["appends"])
        res["entries_per_message"] = 2 * st["proposals"] / max(1, st["messages_out"])
        res["log_syncs"] = st["log_syncs"]
        res["cycles"] = st["cycles"]
        _finish(result_path, res)
    finally:
        logging.disable(logging.CRITICAL)
        os._exit(0)  # the run's data is thrown away; no graceful hand-over needed


def pysyncobj_node(me: str, partners_csv: str, plan_json: str, result_path: str) -> None:
    """Child process: one PySyncObj node (a replicated dict) in ``plan.conf``; once it has a leader
    and 1 s has passed, the leader runs the plan with ``put(..., callback=...)``."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    plan = Plan(**json.loads(plan_json))
    conf = SyncObjConf()
    if plan.conf == "tuned":
        conf = SyncObjConf(
            appendEntriesBatchSizeBytes=TUNED_BYTES, sendBufferSize=TUNED_BYTES, recvBufferSize=TUNED_BYTES,
            **TUNED_TIMEOUTS,
        )

    class KV(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(me, partners_csv.split(","), conf)
            self._d: dict[bytes, bytes] = {}

        @replicated  # type: ignore[misc]
        def put(self, k: bytes, v: bytes) -> bool:
            self._d[k] = v
            return True

    kv = KV()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (kv._isReady() and kv._getLeader() is not None):
            time.sleep(0.05)
        time.sleep(1.0)
        if str(kv._getLeader()) != me:
            _wait_file(result_path, 120 + plan.warmup + plan.seconds + plan.drain_s)
            return
        value = b"x" * max(0, plan.payload - 12)

        def submit(i: int, on_done: Callback) -> None:
            kv.put(b"%010d" % i, value, callback=on_done)

        _finish(result_path, window_load(submit, plan, lambda err: None if err == 0 else PYSYNCOBJ_FAIL.get(err, str(err))))
    finally:
        os._exit(0)


def reference_node(me: str, partners_csv: str, payload: int, seconds: float, result_path: str) -> None:
    """The minimal PySyncObj harness the peer's figure is checked against, written apart from the
    one above: default ``SyncObjConf``, load in the leader with a 30,000-call window, the first
    second not counted, no drain in the interval."""
    from pysyncobj import SyncObj, replicated

    class Ref(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(me, partners_csv.split(","))
            self.d: dict[bytes, bytes] = {}

        @replicated  # type: ignore[misc]
        def put(self, k: bytes, v: bytes) -> None:
            self.d[k] = v

    o = Ref()
    try:
        while not (o._isReady() and o._getLeader() is not None):
            time.sleep(0.05)
        time.sleep(1.0)
        if str(o._getLeader()) != me:
            _wait_file(result_path, 120 + seconds)
            return
        sem = threading.Semaphore(30_000)
        ok = [0]

        def cb(_res: Any, err: int) -> None:
            if err == 0:
                ok[0] += 1
            sem.release()

        v = b"x" * max(0, payload - 12)
        i = 0
        t0 = time.perf_counter()
        start = t0 + 1.0
        n0 = None
        while True:
            now = time.perf_counter()
            if n0 is None and now >= start:
                n0 = ok[0]
            if now >= start + seconds:
                break
            if sem.acquire(timeout=0.1):  # callbacks lost with a leader change must not hang the run
                o.put(b"%010d" % i, v, callback=cb)
                i += 1
        _finish(result_path, {"commits_per_s": (ok[0] - (n0 or 0)) / (now - start)})
    finally:
        os._exit(0)


def run_plan(plan: Plan, root: Path, n: int) -> dict[str, Any]:
    """A fresh 3-node cluster of ``plan.system``, the plan run in its leader; the leader's result."""
    d = root / f"run{n}-{plan.system}-{plan.conf}-{plan.payload}"
    d.mkdir(parents=True)
    result = str(d / "result.json")
    pj = json.dumps(asdict(plan))
    load1 = os.getloadavg()[0]
    if plan.system == "molens":
        cluster = MolensCluster(d)
        cmds = [[sys.executable, __file__, "--molens-node", str(cluster.configs[nid]), pj, result]
                for nid in cluster.procs]
    else:
        addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
        cmds = []
        for a in addrs:
            partners = ",".join(x for x in addrs if x != a)
            if plan.system == "reference":
                cmds.append([sys.executable, __file__, "--reference-node", a, partners, str(plan.payload),
                             str(plan.seconds), result])
            else:
                cmds.append([sys.executable, __file__, "--pysyncobj-node", a, partners, pj, result])
        if plan.conf == "pinned":  # as a Molens node places itself by default (node.cpus: auto)
            given = frozenset(os.sched_getaffinity(0))
            cmds = [["taskset", "-c", cpus.text(cpus.choose(k, given)), *c] for k, c in enumerate(cmds)]
    logs = [open(d / f"node{k}.out", "wb") for k in range(3)]  # noqa: SIM115 - closed below
    procs = [subprocess.Popen(c, cwd=ROOT, stdout=lg, stderr=subprocess.STDOUT) for c, lg in zip(cmds, logs)]
    try:
        deadline = time.monotonic() + 60 + 2 * (plan.warmup + plan.seconds) + plan.drain_s
        while not os.path.exists(result):
            if time.monotonic() > deadline or all(p.poll() is not None for p in procs):
                raise RuntimeError(f"{plan.system} run did not finish; logs in {d}")
            time.sleep(0.1)
        res = dict(json.loads(Path(result).read_text()))
        if plan.system == "molens":
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and len(list(d.glob("result.json.*.threads"))) < 2:
                if all(p.poll() is not None for p in procs):
                    break
                time.sleep(0.05)
            res["follower_threads_us"] = {f.name.split(".")[2]: json.loads(f.read_text())
                                          for f in sorted(d.glob("result.json.*.threads"))}
            if "trace" in res:
                fol = [json.loads(f.read_text()) for f in sorted(d.glob("result.json.*.trace"))]
                res["critical_path_ms"] = critical_path(res.pop("trace"), fol)
    finally:
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for lg in logs:
            lg.close()
    res["loadavg"] = load1
    return res


def describe(name: str, plan: Plan, r: dict[str, Any]) -> str:
    extra = ""
    if "errors" in r:
        extra = (f" p50_ms={r['p50_ms']:.2f} p99_ms={r['p99_ms']:.2f} errors={sum(r['errors'].values())}"
                 f"{' ' + json.dumps(r['errors'], separators=(',', ':')) if r['errors'] else ''}"
                 f" timeouts={r['timeouts']} leader_cpu_us_per_commit={r['leader_cpu_us_per_commit']:.1f}")
    if "pauses" in r:
        extra += f" pauses={r['pauses']}"
    if "entries_per_append" in r:
        extra += (f" entries_per_append={r['entries_per_append']:.0f}"
                  f" entries_per_message={r['entries_per_message']:.1f}")
    return (f"{name}: payload={label_of(plan.payload)} window={plan.window} commits_per_s={r['commits_per_s']:.0f}"
            f"{extra} loadavg={r['loadavg']:.2f}")


def print_threads(r: dict[str, Any]) -> None:
    """CPU per commit by thread, leader and followers, over the measured interval."""
    def fmt(per: dict[str, float]) -> str:
        threads = {k: v for k, v in per.items() if not k.endswith(".sys")}
        return f"total={sum(threads.values()):.1f} " + " ".join(
            f"{k}={v:.1f}(sys {per.get(k + '.sys', 0.0):.1f})" for k, v in threads.items())
    print(f"  leader us/commit by thread: {fmt(r.get('leader_threads_us', {}))}", flush=True)
    for nid, per in r.get("follower_threads_us", {}).items():
        print(f"  follower {nid} us/commit by thread: {fmt(per)}", flush=True)


def label_of(size: int) -> str:
    return "16B" if size == 16 else f"{size // 1024}KiB" if size % 1024 == 0 else f"{size}B"


def own_way(args: argparse.Namespace, size: int) -> float:
    """PySyncObj its own repository's way (``pysyncobj_own.py``) at each of ``--own-rates``: the best
    committed/s, a run per rate on a fresh cluster."""
    import pysyncobj_own  # scripts/bench, beside this file

    best = 0.0
    for rate in args.own_rates:
        t = pysyncobj_own.run(rate, args.own_seconds, size)
        committed = t["ok"] / args.own_seconds
        print(f"pysyncobj_own: payload={label_of(size)} rate={rate} committed_per_s={committed:.0f} "
              f"success={t['ok'] / max(1.0, t['sent']):.3f} failed={int(t['failed'])} "
              f"unanswered={int(t['sent'] - t['ok'] - t['failed'])} nodes={int(t['nodes'])} "
              f"loadavg={os.getloadavg()[0]:.2f}", flush=True)
        if t["nodes"] == 3:
            best = max(best, committed)
    return best


def bench_inprocess(args: argparse.Namespace, root: Path) -> dict[str, str]:
    """Molens and PySyncObj (default, tuned, and the reference harness) in turn, per payload."""
    n = 0
    summary: dict[str, str] = {}
    ratios: dict[int, float] = {}
    check: list[float] = []  # the peer's figure (in ``ratio``) over its minimal reference harness's
    like: list[float] = []  # the default-conf window runs over the reference: the same method, both
    for size in args.payload_sizes:
        runs: dict[str, dict[str, Any]] = {}
        order = ["molens"] if args.skip_pysyncobj else ["molens", "pysyncobj_default", "reference", "pysyncobj_tuned",
                                                           "pysyncobj_pinned"]
        for rnd in range(args.rounds):  # each system's best run counts: the peer gets its best case
            peers = order[1:]
            for name in order[:1] + peers[rnd % len(peers):] + peers[:rnd % len(peers)] if peers else order:
                os.sync()  # the last run's writes (a Molens run fsyncs hundreds of MB) are not the next one's load
                time.sleep(1.0)
                system, _, conf = name.partition("_")
                plan = Plan(system=system, payload=size, window=args.window, warmup=args.warmup,
                            seconds=args.seconds, conf=conf or "default")
                n += 1
                r = run_plan(plan, root, n)
                if args.threads and system == "molens":
                    print_threads(r)
                if name not in runs or r["commits_per_s"] > runs[name]["commits_per_s"]:
                    runs[name] = r
                print(describe({"molens": "molens", "reference": "pysyncobj_reference"}.get(name, name), plan, r),
                      flush=True)
        light = Plan(system="molens", payload=size, window=1, warmup=0.5, seconds=args.light_seconds)
        n += 1
        lt = run_plan(light, root, n)
        print(describe("molens_light", light, lt), flush=True)
        if args.threads:
            print_threads(lt)
        for step, ms in lt.get("critical_path_ms", {}).items():
            print(f"  critical path p50 {step}: {ms:.3f} ms", flush=True)
        m = runs["molens"]
        summary[f"commits_per_s_{label_of(size)}"] = f"{m['commits_per_s']:.0f}"
        summary[f"p50_ms_{label_of(size)}"] = f"{lt['p50_ms']:.2f}"
        if not args.skip_pysyncobj:
            plt = Plan(system="pysyncobj", payload=size, window=1, warmup=0.5, seconds=args.light_seconds)
            n += 1
            plr = run_plan(plt, root, n)
            print(describe("pysyncobj_light", plt, plr), flush=True)
            own = own_way(args, size)
            best = max(runs["pysyncobj_default"]["commits_per_s"], runs["pysyncobj_tuned"]["commits_per_s"],
                       runs["pysyncobj_pinned"]["commits_per_s"], own)
            ratios[size] = m["commits_per_s"] / best
            check.append(best / runs["reference"]["commits_per_s"])
            like.append(runs["pysyncobj_default"]["commits_per_s"] / runs["reference"]["commits_per_s"])
            print(
                f"raft: mode=inprocess payload={label_of(size)} commits_per_s={m['commits_per_s']:.0f} "
                f"p50_ms={lt['p50_ms']:.2f} p99_ms={lt['p99_ms']:.2f} fsync=every_commit "
                f"pysyncobj_best={best:.0f} pysyncobj_own={own:.0f} pysyncobj_p50_ms={plr['p50_ms']:.2f} ratio={ratios[size]:.2f} "
                f"peer_vs_reference={check[-1]:.2f} default_vs_reference={like[-1]:.2f} "
                f"pysyncobj_reference={runs['reference']['commits_per_s']:.0f} loadavg={m['loadavg']:.2f}",
                flush=True,
            )
        else:
            print(f"raft: mode=inprocess payload={label_of(size)} commits_per_s={m['commits_per_s']:.0f} "
                  f"p50_ms={lt['p50_ms']:.2f} p99_ms={lt['p99_ms']:.2f} loadavg={m['loadavg']:.2f}", flush=True)
    if 16 in ratios and 1024 in ratios:
        print(
            f"raft_vs_pysyncobj: mode=inprocess ratio={ratios[16]:.2f} ratio_1KiB={ratios[1024]:.2f} "
            f"peer_vs_reference={check[0]:.2f} peer_vs_reference_1KiB={check[1]:.2f} "
            f"default_vs_reference={like[0]:.2f} default_vs_reference_1KiB={like[1]:.2f} window={args.window} "
            f"molens_fsync=every_commit pysyncobj_fsync=none",
            flush=True,
        )
        summary["ratio"] = f"{ratios[16]:.2f}"
        summary["ratio_1KiB"] = f"{ratios[1024]:.2f}"
        summary["peer_vs_reference"] = f"{check[0]:.2f}"
    return summary


def main() -> None:
    child = {"--molens-node": molens_node, "--pysyncobj-node": pysyncobj_node}
    if len(sys.argv) > 1 and sys.argv[1] in child:
        child[sys.argv[1]](*sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--reference-node":
        me, partners, payload, seconds, result = sys.argv[2:]
        reference_node(me, partners, int(payload), float(seconds), result)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", type=int, default=30_000, help="calls in flight from the leader process")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured interval of each loaded run")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the measured interval")
    ap.add_argument("--light-seconds", type=float, default=2.0, help="duration of each light-load run")
    ap.add_argument("--rounds", type=int, default=2, help="loaded runs per system and payload, in turn; the best counts")
    ap.add_argument("--own-rates", default="15000,20000,25000",
                    help="PySyncObj its own way: offered calls/s, all nodes together, a run each")
    ap.add_argument("--own-seconds", type=float, default=5.0, help="PySyncObj its own way: offered seconds per rate")
    ap.add_argument("--skip-pysyncobj", action="store_true")
    ap.add_argument("--threads", action="store_true",
                    help="print CPU per commit by thread (leader and followers) for each Molens run")
    ap.add_argument("--payloads", default="16,1024", help="payload sizes in bytes, comma-separated")
    ap.add_argument(
        "--client", action="store_true",
        help="also measure Molens through the admin socket from a client process (no peer figure)",
    )
    ap.add_argument("--concurrency", type=int, default=1000, help="--client: requests in flight")
    ap.add_argument(
        "--failover", action="store_true", help="also measure kill -9 of the leader -> next commit"
    )
    ap.add_argument("--failover-trials", type=int, default=3)
    args = ap.parse_args()
    args.payload_sizes = tuple(int(x) for x in args.payloads.split(","))
    args.own_rates = tuple(int(x) for x in args.own_rates.split(",") if x)
    keep = os.environ.get("BENCH_KEEP")  # keep the data and node logs for a look afterwards
    with tempfile.TemporaryDirectory(prefix="molens-bench-") as tmp:
        root = Path(tempfile.mkdtemp(prefix="molens-bench-kept-")) if keep else Path(tmp)
        print(f"raft: cpus={os.cpu_count()} loadavg={os.getloadavg()[0]:.2f} window={args.window} "
              f"warmup_s={args.warmup} seconds={args.seconds}", flush=True)
        summary = {"mode": "inprocess", **bench_inprocess(args, root)}
        if args.client or args.failover:
            m = bench_molens(args, root)
            for size in PAYLOADS if args.client else ():
                light, heavy = m[size]["light"], m[size]["heavy"]
                print(
                    f"raft: mode=client payload={label_of(size)} commits_per_s={heavy['commits_per_s']:.0f} "
                    f"p50_ms={light['p50_ms']:.2f} p99_ms={light['p99_ms']:.2f} "
                    f"load_p50_ms={heavy['p50_ms']:.1f} load_p99_ms={heavy['p99_ms']:.1f} "
                    f"concurrency={args.concurrency} failed={heavy['failed']}"
                )
                summary[f"client_commits_per_s_{label_of(size)}"] = f"{heavy['commits_per_s']:.0f}"
            if args.failover:
                fo = m[0]["failover"]
                print(f"raft: failover_s={statistics.median(fo):.3f} max_s={max(fo):.3f} trials={len(fo)}")
                summary["failover_s"] = f"{statistics.median(fo):.3f}"
        summary["loadavg"] = f"{os.getloadavg()[0]:.2f}"
        print("raft: " + " ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
