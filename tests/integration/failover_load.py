"""The 3-node failover-under-load scenario, shared by the CI test and the full benchmark.

``run(cluster, receiver, n_alo, n_amo, spread_s)`` creates ``n_alo`` at_least_once and ``n_amo``
at_most_once delayed tasks due evenly over ``spread_s`` seconds (starting ``LEAD_S`` after the
creates), kill -9s the leader at 1/3 of the spread, restarts it once a new leader serves, kill -9s
that new leader at 2/3, restarts it, waits until every task has ended, and returns a
:class:`Report`: deliveries per fire id, duplicates, tasks never delivered, and the lateness
(receive time - due time) of first deliveries outside the failover windows (kill -> new leader
dispatching again + ``WINDOW_SLACK_MS``).
"""

from __future__ import annotations

import collections
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from molens.client import MolensClient

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver

LEAD_S = 4.0
WINDOW_SLACK_MS = 5_000
TASK_TIMEOUT_MS = 2_000
SETTINGS: dict[str, Any] = {
    "scheduler": {"dispatch_timeout_ms": 1_000},
    "worker": {"concurrency": 32},
}
"""Cluster settings: a lost fire is given up ``timeout_ms + 1 s`` after dispatch."""


@dataclass
class Report:
    n_alo: int
    n_amo: int
    kills: list[tuple[float, float]] = field(default_factory=list)
    """(kill time, time the new leader was recognised) per failover, epoch ms."""
    alo_missing: list[str] = field(default_factory=list)
    amo_twice: list[str] = field(default_factory=list)
    duplicates: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    lateness_in_windows_ms: list[int] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    gaps: list[float] = field(default_factory=list)

    def pct(self, p: float, xs: list[int] | None = None) -> int:
        xs = sorted(self.lateness_ms if xs is None else xs)
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else -1

    def summary(self) -> str:
        return (
            f"alo={self.n_alo} amo={self.n_amo} alo_missing={len(self.alo_missing)} "
            f"amo_twice={len(self.amo_twice)} duplicates={self.duplicates} "
            f"p50_ms={self.pct(0.5)} p99_ms={self.pct(0.99)} max_ms={max(self.lateness_ms, default=-1)} "
            f"in_window_max_ms={max(self.lateness_in_windows_ms, default=-1)} "
            f"failover_gaps_s={','.join(f'{g:.2f}' for g in self.gaps)} statuses={self.statuses}"
        )


def _urls(c: Cluster) -> list[str]:
    return [f"http://127.0.0.1:{n.settings['http']['port']}" for n in c.nodes.values()]


def _kill_leader(c: Cluster, report: Report) -> NodeProc:
    old = c.leader(timeout=30)
    t_kill = time.time() * 1000
    old.kill()
    new = c.leader(timeout=30)
    report.kills.append((t_kill, time.time() * 1000))
    assert new is not old
    old.start()
    old.wait_ready()
    return new


def run(c: Cluster, rec: RecordingReceiver, n_alo: int, n_amo: int, spread_s: float, log: Any = print) -> Report:
    report = Report(n_alo=n_alo, n_amo=n_amo)
    client = MolensClient(_urls(c), retry_deadline_s=60, max_attempts=1_000)
    t0 = int(time.time() * 1000 + LEAD_S * 1000)
    bodies = []
    n = n_alo + n_amo
    every = max(1, n // max(1, n_amo))
    n_amo_made = 0
    for i in range(n):
        amo = i % every == 0 and n_amo_made < n_amo
        n_amo_made += amo
        bodies.append(
            {
                "type": "delayed",
                "run_at": t0 + int(i * spread_s * 1000 / n),
                "callback_url": rec.url("/ok/amo" if amo else "/ok/alo"),
                "reliability": "at_most_once" if amo else "at_least_once",
                "timeout_ms": TASK_TIMEOUT_MS,
                "idempotency_key": f"load-{t0}-{i}",
            }
        )
    created = client.create_many(bodies)
    due = {t["id"]: (t["next_run_at"], t["reliability"]) for t in created}
    log(f"created {len(created)} tasks in {time.time() * 1000 - (t0 - LEAD_S * 1000):.0f} ms")
    wait_for(lambda: time.time() * 1000 >= t0 + spread_s * 1000 / 3, spread_s + LEAD_S + 5, "a third of the run")
    _kill_leader(c, report)
    log(f"killed the leader once; new leader after {report.kills[-1][1] - report.kills[-1][0]:.0f} ms")
    wait_for(lambda: time.time() * 1000 >= t0 + spread_s * 1000 * 2 / 3, spread_s + LEAD_S + 60, "two thirds")
    _kill_leader(c, report)
    log(f"killed the new leader; next leader after {report.kills[-1][1] - report.kills[-1][0]:.0f} ms")

    def ended() -> dict[str, int] | None:
        counts = client.stats()["tasks"]
        live = counts["pending"] + counts["firing"] + counts["awaiting_ack"]
        return None if live else counts

    report.statuses = wait_for(ended, spread_s + 120, "every task to end")
    with rec.lock:
        reqs = list(rec.requests)
    by_fire: dict[str, list[int]] = collections.defaultdict(list)
    for r in reqs:
        by_fire[r.headers.get("X-Fire-ID", "")].append(r.at_ms)
    windows = [(k, recognised + WINDOW_SLACK_MS) for k, recognised in report.kills]
    for tid, (due_ms, rel) in due.items():
        got = sorted(by_fire.get(f"{tid}-1", []))
        if rel == "at_least_once" and not got:
            report.alo_missing.append(tid)
        if rel == "at_most_once" and len(got) > 1:
            report.amo_twice.append(tid)
        report.duplicates += max(0, len(got) - 1)
        if got:
            late = got[0] - due_ms
            if any(a <= due_ms <= b or a <= got[0] <= b for a, b in windows):
                report.lateness_in_windows_ms.append(late)
            else:
                report.lateness_ms.append(late)
    for tid in report.alo_missing[:10]:  # what each task never delivered says it went through
        t = client.get(tid)
        tried = [(e["attempt"], e["result"], e["worker"], e["fired_at"]) for e in client.executions(tid)]
        log(f"missing {tid} due={due[tid][0]} status={t['status']} attempts={tried}")
    times = sorted(r.at_ms for r in reqs)
    for k, _ in report.kills:  # the longest silence in callbacks around each kill
        around = [t for t in times if k - 1_000 <= t <= k + 30_000]
        gap = max((b - a for a, b in itertools.pairwise(around)), default=0)
        report.gaps.append(gap / 1000)
    client.close()
    return report
