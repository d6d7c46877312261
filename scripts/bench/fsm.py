#!/usr/bin/env python3
"""Apply throughput of the task FSM: lmdb store + SQLite history, sync on.

Creates N delayed tasks, dispatches them and applies one callback result each, in Raft batches of
1,000 entries (each entry one single-item command, the worst case for per-command overhead; the
REST batch endpoint packs up to 1,000 items in one command, measured separately as
``creates_batched``). Commands are encoded before timing (that is the leader's cost). Prints one
line per phase and a final summary line ``fsm: creates_per_s=... results_per_s=... cpu_us: ...``
(process CPU per item of each phase: the figure that stays comparable on a loaded machine).

    .venv/bin/python scripts/bench/fsm.py [--tasks 50000] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import tempfile
import time
from pathlib import Path

from molens.fsm.commands import (
    Command,
    CreateItem,
    CreateTasks,
    Dispatched,
    DispatchItem,
    ResultItem,
    Results,
    encode,
)
from molens.fsm.history import History
from molens.fsm.store import TaskStore
from molens.model import FireKind, Outcome, new_task_id, validate_create
from molens.node import GC_THRESHOLDS
from molens.raft.log import Entry, EntryKind

T0 = 1_700_000_000_000
BATCH = 1000


class Feeder:
    def __init__(self, store: TaskStore, batch: int = BATCH) -> None:
        self.store = store
        self.batch = batch
        self.index = store.applied_index()

    def run(self, cmds: list[Command], label: str, items: int | None = None) -> tuple[float, float]:
        """Apply ``cmds`` in Raft batches of ``BATCH`` entries; rates are per item (``items``, default
        one per command)."""
        n = len(cmds) if items is None else items
        data = [encode(c) for c in cmds]
        c0 = time.process_time()
        t0 = time.perf_counter()
        for i in range(0, len(data), self.batch):
            entries = []
            for d in data[i : i + self.batch]:
                self.index += 1
                entries.append(Entry(self.index, 1, EntryKind.NORMAL, d))
            self.store.apply_batch(entries)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        print(
            f"  {label}: {n} items in {len(cmds)} commands in {dt:.2f}s = {n / dt:,.0f}/s "
            f"(process CPU {cpu:.2f}s = {n / cpu:,.0f}/s of CPU; the rest is fsync and waiting for a core)"
        )
        return dt, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=50_000)
    ap.add_argument("--profile", action="store_true", help="pyinstrument the results phase")
    ap.add_argument("--batch", type=int, default=BATCH, help="entries per applied batch (one transaction)")
    ap.add_argument("--per-command", type=int, default=1,
                    help="dispatch and result items per command (the node batches a tick's fires in one)")
    args = ap.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # the node process's collector settings
    n = args.tasks
    tmp = Path(tempfile.mkdtemp(prefix="molens-bench-fsm-"))
    try:
        store = TaskStore(tmp, history=History(tmp / "history.sqlite", max_records_per_task=100), durable=True)
        feed = Feeder(store, args.batch)
        rng = random.Random(1)
        req = {
            "type": "delayed",
            "interval_ms": 0,
            "callback_url": "http://127.0.0.1:18081/api/v1/test/callback",
            "payload": {"order": 12345, "note": "bench"},
            "scene": "bench",
        }
        spec = validate_create(req, now_ms=T0)
        ids = [new_task_id(T0, rng.getrandbits(80)) for _ in range(n)]
        print(f"fsm bench: {n} tasks, batches of {BATCH} entries, lmdb sync=True, history synchronous=NORMAL, dir={tmp}")

        dt_create, cpu_create = feed.run([CreateTasks(T0, (CreateItem(t, spec),)) for t in ids], "create (1 task/command)")
        now = T0 + 1
        k = max(1, args.per_command)
        items = [DispatchItem(fire_id=f"{t}-1", task_id=t, attempt=1, worker="n1", deadline_ms=now + 10_000)
                 for t in ids]
        dt_disp, cpu_disp = feed.run(
            [Dispatched(now, tuple(items[i : i + k])) for i in range(0, n, k)], "dispatched", n
        )
        now += 30
        ritems = [
            ResultItem(
                fire_id=f"{t}-1", kind=FireKind.CALLBACK, status_code=200 if j % 4 else 500, outcome=Outcome.RESPONSE,
                response_head='{"ok": true}', latency_ms=12 + j % 50, worker="n1",
            )
            for j, t in enumerate(ids)
        ]
        results: list[Command] = [Results(now, tuple(ritems[i : i + k])) for i in range(0, n, k)]
        if args.profile:
            from pyinstrument import Profiler

            prof = Profiler()
            prof.start()
        dt_res, cpu_res = feed.run(results, "results (25% 500 -> retry scheduled)", n)
        if args.profile:
            prof.stop()
            print(prof.output_text(unicode=False, color=False, show_all=False))
        ids2 = [new_task_id(T0 + 5, rng.getrandbits(80)) for _ in range(n)]
        batched = [
            CreateTasks(T0 + 5, tuple(CreateItem(t, spec) for t in ids2[i : i + BATCH])) for i in range(0, n, BATCH)
        ]
        data = [encode(c) for c in batched]
        c0 = time.process_time()
        t0 = time.perf_counter()
        for d in data:
            feed.index += 1
            store.apply_batch([Entry(feed.index, 1, EntryKind.NORMAL, d)])
        dt_cb = time.perf_counter() - t0
        cpu_cb = time.process_time() - c0
        print(f"  create (1,000 tasks/command, one command per batch): {n} tasks in {dt_cb:.2f}s = {n / dt_cb:,.0f}/s")
        assert store.history is not None
        print(f"  store: tasks={len(store)} counts={store.counts()} history_rows={store.history.count()}")
        store.close()
        print(
            f"fsm: creates_per_s={n / dt_create:.0f} results_per_s={n / dt_res:.0f} "
            f"dispatched_per_s={n / dt_disp:.0f} creates_batched_per_s={n / dt_cb:.0f} tasks={n} sync=on "
            f"cpu_us: create={cpu_create / n * 1e6:.1f} dispatched={cpu_disp / n * 1e6:.1f} "
            f"result={cpu_res / n * 1e6:.1f} create_batched={cpu_cb / n * 1e6:.1f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
