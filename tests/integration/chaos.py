"""A chaos soak of a real 3-node cluster under a nemesis: ``scripts/chaos [--seconds N] [--seed S]
[--nemesis all|KIND,...] [--net netns|loopback]``.

While the nemesis (:mod:`tests.integration.nemesis`) strikes one fault at a time, each healed within
a bound and followed by 3-7 s of quiet -- kill -9 and SIGSTOP, graceful restarts, network partitions
(minority/majority, bridge, one-way), clock jumps and skew, a full disk and a slow disk on one node --
a client creates delayed tasks (at_least_once, at_most_once, at_least_once with an ACK URL), due
0.5-4 s ahead, about ``CREATE_PER_S`` a second, and ``N_PERIODIC`` periodic tasks fire every
``PERIODIC_MS``; and ``HISTORY_THREADS`` recording clients (:mod:`tests.integration.history_client`)
send create (by idempotency key), ``GET ?consistency=linearizable``, ``PATCH`` with ``If-Match``,
pause, resume and delete calls on a few task records of their own to random nodes, at most
``HISTORY_CALLS_PER_S`` a second each, a ``HISTORY_TIMEOUT_S`` read timeout, and record each call's
invoke and answer times and outcome (ok, fail, unknown). Then the faults stop, every node runs
again, and the run checks (:class:`Report`):

- ``lost``: acknowledged at_least_once tasks whose callback was never answered 2xx (the promise:
  never zero), plus ACK tasks never probed;
- ``amo_twice``: at_most_once fire ids delivered more than once (the promise: never twice);
- ``stuck``: delayed tasks still pending, firing or awaiting_ack when everything should have ended;
- ``periodic_max_gap_ms``: the longest time between two occurrences of one periodic task, and
  ``periodic_max_gap_outside_partitions_ms`` the longest of those that overlap no partition (a
  partition's window runs from its start until it healed);
- ``digests_equal``: every replica's state digest the same at one applied index (each node reads
  its index and digest in one transaction; the periodic tasks are paused first so the log settles);
- ``ns_index_ok``: every replica's namespace index (``molens.fsm.ns_index``) holds exactly the keys
  its records imply, marked at its applied index (``tests/ns_index_check.py``, read from each
  node's store file beside the running node);
- ``linearizable``: the recorded history of the task records checked against the sequential model of
  one record (``tests/sim/task_linearizability.py``, per record); a violation prints the first failing
  record's minimal failing sub-history (``chaos: history:`` lines, :func:`summary_lines`).

The seed is random unless given, and printed first: ``chaos: seed=S`` (``--seed S`` replays the
run's choices; the timing of a real cluster is its own). Nodes run in network namespaces of their
own (``--net netns``, the default where they can be made: root with ``ip netns``) or on 127.0.0.1
(``--net loopback``, where partitions cannot be made). A fault the machine cannot make stops the run
with the reason before it starts. The last line counts each fault kind:
``chaos: seed=... faults=N kill=... freeze=... restart=... partition=... clock=... fulldisk=... slowdisk=...
lost=0 amo_twice=0 periodic_max_gap_ms=... periodic_max_gap_outside_partitions_ms=... digests_equal=yes
ns_index_ok=yes history_ops=N linearizable=yes``, after ``chaos: history: ops=N records=M linearizable=yes|no ...``;
the exit status is 1 when a promise is broken or the history is not shown linearizable.
``tests/integration/test_chaos.py`` runs 120 s of it with a random seed and every fault kind.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from molens.client import ApiError, MolensClient
from tests.ns_index_check import mismatches

from .conftest import Cluster, NodeProc, wait_for
from .history_client import History, Linearizable, Verdict, record, verdict
from .nemesis import Fault, Kind, Nemesis, parse_kinds
from .netns import NetnsError, NetnsLab, NsCluster, make_lab
from .recording_receiver import RecordingReceiver
from .tmpfs import Tmpfs, TmpfsError, put_data_dir_on

CREATE_PER_S = 40
N_PERIODIC = 20
PERIODIC_MS = 2_000
TASK_TIMEOUT_MS = 2_000
ALO_MAX_RETRIES = 5
SETTINGS: dict[str, Any] = {
    "node": {"fault_injection": True},
    "worker": {"concurrency": 32},
    "scheduler": {"history_max_records_per_task": 2_000},
}
"""The product's defaults otherwise (worker_lost_ms 2 s, dispatch_timeout_ms 10 s); more history per
task than the default 200 rows, so a long run can still show the executions around its longest gap;
the admin ``fault`` command on (clock jumps, slow disks)."""
DISK_BYTES = 512 << 20
"""The tmpfs under each node's data (the nemesis fills one at a time): room for a long run's data."""
FAULT_GAP_S = (3.0, 7.0)
"""Quiet time between the end of one fault (cluster serving again) and the next."""
SETTLE_S = 120.0
"""After the faults: how long every delayed task has to end."""
HISTORY_THREADS = 3
HISTORY_RECORDS = 4
"""Task records in use at a time, shared by the recording threads (so their calls on one record overlap)."""
HISTORY_CALLS_PER_S = 5.0
"""At most this many calls a second from each recording thread."""
HISTORY_CALLS_PER_RECORD = 200
"""A record is retired for a fresh one after this many calls: the check's cost stays linear in the run."""
HISTORY_TIMEOUT_S = 3.0


@dataclass
class Report:
    seed: int
    kinds: tuple[Kind, ...] = tuple(Kind)
    net: str = ""
    """Where the nodes run: ``netns`` or ``loopback``."""
    faults: list[Fault] = field(default_factory=list)
    created: dict[str, str] = field(default_factory=dict)
    """Task id -> kind (alo, amo, ack, periodic) of every acknowledged create."""
    lost: list[str] = field(default_factory=list)
    lost_detail: list[str] = field(default_factory=list)
    """What the cluster says of the first lost tasks (record and executions), and what the receiver got."""
    amo_twice: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    periodic_max_gap_ms: int = 0
    periodic_max_gap_outside_partitions_ms: int = 0
    periodic_max_gap_at: str = ""
    """Which task and when (seconds into the run) the longest gap began."""
    periodic_gap_detail: list[str] = field(default_factory=list)
    """That task's executions around the gap (seconds into the run), to tell which fault made it."""
    t0_ms: int = 0
    digests_equal: bool = False
    ns_index: list[str] = field(default_factory=["not checked"].copy)
    """What is wrong with each replica's namespace index (``tests/ns_index_check.py``); empty: nothing."""
    create_errors: int = 0
    deliveries: int = 0
    history: Verdict | None = None
    """What the check of the recorded task-record history found (None: nothing was checked)."""

    @property
    def linearizable(self) -> Linearizable:
        return Linearizable.UNDECIDED if self.history is None else self.history.linearizable

    @property
    def ok(self) -> bool:
        return (not self.lost and not self.amo_twice and not self.stuck and self.digests_equal
                and not self.ns_index and self.linearizable is Linearizable.YES)

    def counts(self) -> dict[Kind, int]:
        """How many faults of each chosen kind struck."""
        out = dict.fromkeys(self.kinds, 0)
        for f in self.faults:
            out[f.kind] += 1
        return out

    def partitions(self) -> list[tuple[int, int]]:
        return [(f.start_ms, f.end_ms) for f in self.faults if f.kind is Kind.PARTITION]

    def line(self) -> str:
        counts = " ".join(f"{k}={n}" for k, n in self.counts().items())
        return (
            f"chaos: seed={self.seed} faults={len(self.faults)} {counts} lost={len(self.lost)} "
            f"amo_twice={len(self.amo_twice)} periodic_max_gap_ms={self.periodic_max_gap_ms} "
            f"periodic_max_gap_outside_partitions_ms={self.periodic_max_gap_outside_partitions_ms} "
            f"digests_equal={'yes' if self.digests_equal else 'no'} "
            f"ns_index_ok={'no' if self.ns_index else 'yes'} "
            f"history_ops={self.history.counts['size'] if self.history else 0} linearizable={self.linearizable}"
        )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Creator(threading.Thread):
    """Creates delayed tasks until stopped; only acknowledged creates count."""

    def __init__(self, client: MolensClient, rec: RecordingReceiver, rng: random.Random, report: Report) -> None:
        super().__init__(name="chaos-creator", daemon=True)
        self.client, self.rec, self.rng, self.report = client, rec, rng, report
        self.stop = threading.Event()
        self.n = 0
        self.last_error = ""

    def run(self) -> None:
        batch = max(1, CREATE_PER_S // 10)
        while not self.stop.wait(0.1):
            bodies, kinds = [], []
            for _ in range(batch):
                self.n += 1
                kind = self.rng.choices(("alo", "amo", "ack"), weights=(45, 35, 20))[0]
                body: dict[str, Any] = {
                    "type": "delayed", "run_at": _now_ms() + self.rng.randint(500, 4_000),
                    "timeout_ms": TASK_TIMEOUT_MS, "idempotency_key": f"chaos-{self.report.seed}-{self.n}",
                    "reliability": "at_most_once" if kind == "amo" else "at_least_once",
                    "callback_url": self.rec.url(f"/ok/{kind}"),
                }
                if kind != "amo":
                    body["max_retries"] = ALO_MAX_RETRIES
                if kind == "ack":
                    body["ack_url"] = self.rec.url("/ok/ackprobe")
                    body["ack_delay_ms"] = 500
                bodies.append(body)
                kinds.append(kind)
            try:
                made = self.client.create_many(bodies)
            except (ApiError, OSError) as exc:  # not acknowledged: the promise does not cover it
                self.report.create_errors += 1
                self.last_error = repr(exc)
                continue
            for t, kind in zip(made, kinds, strict=True):
                self.report.created[t["id"]] = kind


def _serving(c: Cluster, timeout: float = 60.0) -> NodeProc:
    """Every node runs and one leader is recognised by all of them."""
    for n in c.nodes.values():
        if not n.running:
            n.start()
    for n in c.nodes.values():
        n.wait_ready()
    return c.leader(timeout=timeout)


def netns_unavailable() -> str | None:
    """Why nodes cannot run in network namespaces here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip command (iproute2)"
    if shutil.which("iptables") is None:
        return "no iptables command (a one-way partition drops packets with it)"
    try:
        make_lab()
    except NetnsError as exc:
        return str(exc)
    return None


def run(
    seconds: float, seed: int, root: Path, log: Any = print, kinds: tuple[Kind, ...] = tuple(Kind),
    net: str = "netns",
) -> Report:
    """One chaos run under ``root`` with the nemesis ``kinds``; the nodes in network namespaces
    (``net="netns"``) or on 127.0.0.1 (``"loopback"``). Every node process is stopped, and every
    namespace and tmpfs it made removed, before it returns."""
    if Kind.PARTITION in kinds and net != "netns":
        raise ValueError("partitions need --net netns")
    rng = random.Random(seed)
    report = Report(seed=seed, kinds=kinds, net=net, t0_ms=_now_ms())
    lab: NetnsLab | None = None
    disks: dict[str, Tmpfs] = {}
    rec: RecordingReceiver | None = None
    c: Cluster | None = None
    creator: _Creator | None = None
    stop_history = threading.Event()
    try:
        if net == "netns":
            lab = make_lab()
            c = NsCluster(lab, root, 3, SETTINGS)
            rec = RecordingReceiver(host=lab.receiver_host)  # the address exists once the namespaces do
        else:
            c = Cluster(root, 3, SETTINGS, state_machine="tasks")
            rec = RecordingReceiver()
        if Kind.FULLDISK in kinds:
            for nid, n in c.nodes.items():
                disks[nid] = Tmpfs(root / f"tmpfs-{nid}", DISK_BYTES)
                put_data_dir_on(n, disks[nid])
        nemesis = Nemesis(c, rng, kinds, lab=lab, disks=disks)
        report.faults = nemesis.faults
        c.start()
        _serving(c)
        client = MolensClient([n.http_url for n in c.nodes.values()], retry_deadline_s=60)
        wait_for(lambda: client.cluster_status(), 30, "the cluster to serve")
        for i in range(N_PERIODIC):
            t = client.create(
                type="periodic", interval_ms=PERIODIC_MS, timeout_ms=TASK_TIMEOUT_MS,
                reliability="at_least_once" if i % 2 == 0 else "at_most_once",
                callback_url=rec.url(f"/ok/periodic{i}"),
            )
            report.created[t["id"]] = "periodic"
        creator = _Creator(client, rec, random.Random(rng.random()), report)
        creator.start()
        history = History()
        recorder = _start_recording(c, seed, seconds, stop_history, history)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(*FAULT_GAP_S))  # quiet time between faults
            if time.monotonic() >= end:
                break
            try:
                fault = nemesis.strike()
            finally:
                nemesis.heal()
            log(f"chaos: fault {len(report.faults)} {fault.describe(report.t0_ms)} "
                f"({(fault.end_ms - fault.start_ms) / 1000:.1f} s)")
            _serving(c)
        creator.stop.set()
        stop_history.set()
        creator.join(30)
        recorder.join(HISTORY_TIMEOUT_S + 30)
        if recorder.is_alive():
            raise RuntimeError("the recording clients did not stop")
        _serving(c)
        log(f"chaos: faults over; {len(report.created)} tasks created, {report.create_errors} create batches refused, "
            f"{len(history.ops)} calls recorded")
        _settle(c, client, report)
        _quiesce(c, client, report)
        _check(c, client, rec, report)
        client.close()
        report.history = verdict(history)
    finally:
        stop_history.set()
        if creator is not None:
            creator.stop.set()
        if c is not None:
            for n in c.nodes.values():  # a node left stopped must not keep the others from exiting
                with contextlib.suppress(ProcessLookupError, AssertionError):
                    if n.running:
                        os.kill(n.pid, signal.SIGCONT)
            c.kill_all()
        if rec is not None:
            rec.close()
        for d in disks.values():
            d.unmount()
        if lab is not None:
            lab.destroy()
    return report


def _start_recording(c: Cluster, seed: int, seconds: float, stop: threading.Event, history: History) -> threading.Thread:
    """The recording clients, in a thread, until ``stop`` is set; they append to ``history``."""
    urls = {nid: n.http_url for nid, n in c.nodes.items()}
    kwargs: dict[str, Any] = {
        "threads": HISTORY_THREADS, "records": HISTORY_RECORDS, "calls_per_s": HISTORY_CALLS_PER_S,
        "calls_per_record": HISTORY_CALLS_PER_RECORD, "timeout_s": HISTORY_TIMEOUT_S,
        # bounds the rate already sets; the faults end with stop
        "max_ops": int(HISTORY_THREADS * HISTORY_CALLS_PER_S * (seconds + 120)), "max_seconds": seconds + 600,
        "into": history,
    }
    recorder = threading.Thread(target=record, args=(urls, stop, seed), kwargs=kwargs, name="chaos-history", daemon=True)
    recorder.start()
    return recorder


def summary_lines(report: Report) -> list[str]:
    """What ``scripts/chaos`` prints at the end, the summary line (:meth:`Report.line`) last."""
    out = [
        f"chaos: faults={','.join(f.describe(report.t0_ms) for f in report.faults)}",
        f"chaos: periodic_max_gap_at={report.periodic_max_gap_at}",
        *(f"chaos:   {line}" for line in report.periodic_gap_detail),
        f"chaos: tasks={len(report.created)} deliveries={report.deliveries} stuck={len(report.stuck)} "
        f"create_batches_refused={report.create_errors}",
    ]
    for what, ids in (("lost", report.lost), ("amo_twice", report.amo_twice), ("stuck", report.stuck)):
        if ids:
            out.append(f"chaos: {what}: {' '.join(ids[:20])}")
    out += [f"chaos:   {line}" for line in report.lost_detail]
    out += [f"chaos: ns_index: {line}" for line in report.ns_index[:20]]
    if report.history is not None:
        out.append(f"chaos: {report.history.line()}")
        out += [f"chaos: history:   {line}" for line in report.history.report.splitlines()]
    out.append(report.line())
    return out


def _settle(c: Cluster, client: MolensClient, report: Report) -> None:
    delayed = {tid for tid, k in report.created.items() if k != "periodic"}

    deadline = time.monotonic() + SETTLE_S
    while True:  # what is still live at the deadline is reported stuck
        live = {t["id"] for t in client.list(status=["pending", "firing", "awaiting_ack"], type="delayed")}
        report.stuck = sorted(live & delayed)
        if not report.stuck or time.monotonic() >= deadline:
            break
        time.sleep(0.5)  # poll interval
    c.wait_converged(timeout=60)


def _quiesce(c: Cluster, client: MolensClient, report: Report) -> None:
    """Pause the periodic tasks, so the log soon stops growing (:func:`_digests` compares the
    replicas at one applied index either way)."""
    del c
    for tid, kind in report.created.items():
        if kind == "periodic":
            client.pause(tid)


def _digests(c: Cluster) -> set[tuple[int, str]] | None:
    """Every replica's (applied index, digest) once all have applied the same index."""
    ds = {(d["applied_index"], d["digest"]) for d in (n.call("digest") for n in c.running())}
    return ds if len({i for i, _ in ds}) == 1 else None


def _check(c: Cluster, client: MolensClient, rec: RecordingReceiver, report: Report) -> None:
    with rec.lock:
        reqs = list(rec.requests)
    report.deliveries = len(reqs)
    callbacks: dict[str, list[int]] = collections.defaultdict(list)
    acks: set[str] = set()
    for r in reqs:
        fid = r.headers.get("X-Fire-ID", "")
        if r.kind == "ack":
            acks.add(fid)
        else:
            callbacks[fid].append(r.at_ms)
    for tid, kind in report.created.items():
        if kind == "periodic":
            continue
        got = callbacks.get(f"{tid}-1", [])
        if kind in ("alo", "ack") and not got:
            report.lost.append(tid)
        if kind == "ack" and got and f"{tid}-1" not in acks:
            report.lost.append(tid)
        if kind == "amo" and len(got) > 1:
            report.amo_twice.append(tid)
    # the longest time between the first deliveries of consecutive occurrences of a periodic task
    gap, gap_task, gap_start = 0, "", 0
    partitions = report.partitions()
    for tid, kind in report.created.items():
        if kind != "periodic":
            continue
        firsts = sorted(min(ts) for fid, ts in callbacks.items() if fid.rpartition("-")[0] == tid)
        for a, b in itertools.pairwise(firsts):
            if b - a > gap:
                gap, gap_task, gap_start = b - a, tid, a
                report.periodic_max_gap_at = f"{tid}@{(a - report.t0_ms) / 1000:.1f}s"
            if b - a > report.periodic_max_gap_outside_partitions_ms and not any(
                a < end and start < b for start, end in partitions
            ):
                report.periodic_max_gap_outside_partitions_ms = b - a
    report.periodic_max_gap_ms = gap
    report.lost_detail = [line for tid in report.lost[:5] for line in _task_detail(client, report, tid, reqs)]
    if gap_task:
        report.periodic_gap_detail = _gap_detail(client, report, gap_task, gap_start, gap_start + gap)
    c.wait_converged(timeout=60)
    digests = wait_for(lambda: _digests(c), 60, "every replica at one applied index")
    report.digests_equal = len(digests) == 1 and len(c.running()) == 3
    report.ns_index = [f"{n.node_id}: {m}" for n in c.running() for m in mismatches(n.data_dir / "fsm")]


def _task_detail(client: MolensClient, report: Report, tid: str, reqs: list[Any]) -> list[str]:
    """One task's record, executions and the requests the receiver got for it (times in seconds into the run)."""
    def s(ms: Any) -> str:
        return f"{(ms - report.t0_ms) / 1000:.2f}s" if isinstance(ms, int) else "-"
    try:
        t = client.get(tid)
        out = [f"{tid} kind={report.created[tid]} status={t.get('status')} created={s(t.get('created_at'))} "
               f"run_at={s(t.get('run_at'))} attempt={t.get('attempt')} fail_count={t.get('fail_count')} "
               f"last_outcome={t.get('last_outcome')} last_fire_at={s(t.get('last_fire_at'))}"]
        out += [f"  {e['fire_id']} attempt={e['attempt']} kind={e['kind']} worker={e['worker']} fired={s(e['fired_at'])} "
                f"finished={s(e['finished_at'])} result={e['result']}" for e in client.executions(tid)][::-1]
    except (ApiError, OSError) as exc:
        out = [f"{tid}: no record ({exc!r})"]
    out += [f"  received {r.headers.get('X-Fire-ID', '')} {r.kind} at {s(r.at_ms)} from {r.peer}"
            for r in reqs if r.headers.get("X-Fire-ID", "").rpartition("-")[0] == tid]
    return out


def _gap_detail(client: MolensClient, report: Report, tid: str, a: int, b: int) -> list[str]:
    """The executions of ``tid`` that started within 3 s of the gap ``[a, b]`` (epoch ms)."""
    def s(ms: Any) -> str:
        return f"{(ms - report.t0_ms) / 1000:.2f}s" if isinstance(ms, int) else "-"
    out = []
    for e in client.executions(tid, since=a - 3_000, until=b + 3_000):
        out.append(f"{e['fire_id']} attempt={e['attempt']} kind={e['kind']} worker={e['worker']} "
                   f"fired={s(e['fired_at'])} finished={s(e['finished_at'])} result={e['result']}")
    return out[::-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0, help="how long faults are injected")
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: a random one, printed first)")
    p.add_argument("--nemesis", default="all",
                   help=f"all, or a comma list of: {', '.join(Kind)} (disk = fulldisk)")
    p.add_argument("--net", choices=("netns", "loopback"), default=None,
                   help="where the nodes run (default: netns where namespaces can be made, else loopback)")
    p.add_argument("--keep", action="store_true", help="keep the nodes' data and logs (printed)")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    print(f"chaos: seed={seed}", flush=True)
    try:
        kinds = parse_kinds(args.nemesis)
    except ValueError as exc:
        p.error(str(exc))
    why_not = netns_unavailable() if args.net != "loopback" else "--net loopback"
    net = args.net or ("netns" if why_not is None else "loopback")
    if Kind.PARTITION in kinds and why_not is not None:
        print(f"chaos: cannot partition the network: {why_not} (leave partition out of --nemesis)", flush=True)
        return 2
    print(f"chaos: nemesis={','.join(kinds)} net={net} seconds={args.seconds:g}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="molens-chaos-"))
    try:
        report = run(args.seconds, seed, root, kinds=kinds, net=net)
    except (TmpfsError, NetnsError) as exc:
        print(f"chaos: cannot set up the faults: {exc} (leave that kind out of --nemesis)", flush=True)
        return 2
    finally:
        if args.keep:
            print(f"chaos: data and logs in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("\n".join(summary_lines(report)), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
