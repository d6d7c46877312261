#!/usr/bin/env python3
"""What the state digest costs: ``TaskStore.digest_state`` (the admin ``digest``, every record
decoded and encoded again in this release's layout: docs/deploy.md#rolling-upgrade) against a hash
of the same records as they are stored, the reference, in the same run and process.

A real lmdb store (``fsm/``, not synced) is filled with ``--tasks`` delayed tasks in batches of
1,000 through the state machine's own apply path, each create audited (an audit entry with its task
images per task). Then ``--rounds`` rounds, each timing both digests in turn (the order alternates),
in CPU seconds of this process (``time.process_time``: the machine is shared); medians.

    .venv/bin/python scripts/bench/digest.py
    .venv/bin/python scripts/bench/digest.py --tasks 1000000 --rounds 3

Prints ``digest: tasks=N records=R canonical_s=... stored_s=... ratio=... added_us_per_task=...``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import molens.lmdb_snapshot as lmdb_snapshot  # noqa: E402
from molens.fsm.commands import Audited, AuditStamp, CreateItem, CreateTasks, encode  # noqa: E402
from molens.fsm.store import TaskStore  # noqa: E402
from molens.model import new_task_id, validate_create  # noqa: E402
from molens.raft.log import Entry, EntryKind  # noqa: E402

T0 = 1_790_000_000_000  # an epoch-ms instant in 2026
VOLATILE = (b"applied_index", b"applied_term", b"counts")


def fill(store: TaskStore, n: int) -> int:
    spec = validate_create({"type": "delayed", "interval_ms": 30 * 86_400_000, "payload": {"order": 42},
                            "callback_url": "http://127.0.0.1:9/cb", "scene": "bench"}, now_ms=T0)
    stamp = AuditStamp("k1", "bench", "127.0.0.1")
    index = store.applied_index()
    for start in range(0, n, 1000):
        items = tuple(CreateItem(new_task_id(T0, i), spec) for i in range(start, min(n, start + 1000)))
        index += 1
        store.apply_batch([Entry(index, 1, EntryKind.NORMAL, encode(Audited(T0, stamp, CreateTasks(T0, items))))])
    with store._env.begin() as txn:  # the records the digest reads, every database
        return sum(int(txn.stat(db)["entries"]) for db in store._dbs.values())


def stored(store: TaskStore) -> None:
    lmdb_snapshot.digest_state(store._env, store._meta, tuple(store._dbs.items()), volatile=VOLATILE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=200_000, help="tasks in the store")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both digests, order alternating")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="molens-digest-") as d:
        store = TaskStore(Path(d), durable=False)
        try:
            t = time.perf_counter()
            records = fill(store, args.tasks)
            print(f"digest: filled {args.tasks:,} tasks ({records:,} records) in {time.perf_counter() - t:.1f} s",
                  flush=True)
            canon: list[float] = []
            raw: list[float] = []
            for r in range(args.rounds):
                runs = [("canonical", store.digest_state, canon), ("stored", lambda: stored(store), raw)]
                for name, fn, out in (runs if r % 2 == 0 else runs[::-1]):
                    c = time.process_time()
                    fn()
                    out.append(time.process_time() - c)
                    print(f"digest: round {r + 1} {name} {out[-1]:.3f} s CPU", flush=True)
        finally:
            store.close()
    c, s = statistics.median(canon), statistics.median(raw)
    print(f"digest: tasks={args.tasks} records={records} canonical_s={c:.3f} stored_s={s:.3f} ratio={c / s:.2f} "
          f"added_us_per_task={(c - s) / args.tasks * 1e6:.2f} loadavg={os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
