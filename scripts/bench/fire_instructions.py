#!/usr/bin/env python3
"""Instructions per fire on the fire path, counted by valgrind (callgrind), against another tree.

CPU time on a shared machine moves with its load (other processes' cache misses, frequency, the
hypervisor's steal); the number of instructions a process executes does not. This counts them for
one single-threaded scenario that walks the path of one fire of ``lateness.py`` (a delayed task with
one callback) through the code that runs for it on a 3-node cluster:

- the create request decoded (``model.decode_create``; with ``--traced`` carrying a ``traceparent``);
- ``CreateTasks``, ``Dispatched`` and ``Results`` commands encoded and applied to a ``TaskStore``
  with its history (lmdb + SQLite, no fsync), ten items a command as the node batches a tick;
- the fire in the leader's fire batch frame, encoded and decoded;
- the worker's HTTP request bytes (``Deliverer.request_bytes``) and its per-attempt hook
  (``ReportingDeliverer.record`` / ``take``).

A run counts the whole process twice, with ``--fires`` and with twice as many, under
``PYTHONHASHSEED=0`` and fixed ids: the difference divided by ``--fires`` is instructions per fire
with start-up and imports cancelled out. ``--base DIR`` is a checkout of the code to compare with
(its ``molens`` package is imported instead of this tree's; this script only uses what both have);
it is measured untraced, this tree untraced and traced, ``--runs`` times each. The fire path's
share of a node's CPU is not all of it (Raft, ZeroMQ, sockets, threads are left out), so the ratio
is the cost of the changes on that path, not of the whole node.

Prints one line per run and ``fire_instructions: base=... untraced=... traced=... untraced_ratio=...
traced_ratio=...`` (median instructions per fire of each arm, ratios to the base).

    .venv/bin/python scripts/bench/fire_instructions.py --base ../molens-before [--fires 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
PER_COMMAND = 10
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def use_tree(tree: Path) -> None:
    """Import ``molens`` from ``tree``, not from the package installed in the environment (an
    editable install answers through a finder of its own, ahead of ``sys.path``)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
    sys.path.insert(0, str(tree))
    import molens

    if Path(molens.__file__).resolve().parent != tree / "molens":
        raise SystemExit(f"molens came from {molens.__file__}, not from {tree}")


def scenario(fires: int, traced: bool) -> None:
    """The fire path of ``fires`` delayed tasks, in this process (run under valgrind)."""
    import urllib3

    from molens.actors.stats import ReportingDeliverer
    from molens.delivery import DeliveryOutcome, FireRequest, FireResult, decode_fire_batch, encode_fire_batch
    from molens.fsm.commands import (
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
    from molens.model import FireKind, Outcome, decode_create, new_task_id
    from molens.node import GC_THRESHOLDS
    from molens.raft.log import Entry, EntryKind

    gc.set_threshold(*GC_THRESHOLDS)
    rng = random.Random(1)
    tmp = Path(tempfile.mkdtemp(prefix="molens-bench-fire-instructions-"))
    store = TaskStore(tmp, history=History(tmp / "history.sqlite", max_records_per_task=100), durable=False,
                      map_size=1 << 30)  # valgrind cannot map the default 64 GiB
    deliverer = ReportingDeliverer(urllib3.PoolManager(), "n2", "secret")
    index = store.applied_index()

    def apply(cmd: object) -> None:
        nonlocal index
        index += 1
        store.apply_batch([Entry(index, 1, EntryKind.NORMAL, encode(cmd))])  # type: ignore[arg-type]

    try:
        for start in range(0, fires, PER_COMMAND):
            now = T0 + start
            items = []
            for _ in range(start, min(fires, start + PER_COMMAND)):
                body = {"type": "delayed", "run_at": now + 1000, "callback_url": "http://127.0.0.1:9/cb",
                        "payload": {"due": now + 1000}}
                if traced:
                    body["traceparent"] = TP
                items.append(CreateItem(new_task_id(now, rng.getrandbits(80)),
                                        decode_create(json.dumps(body).encode(), now_ms=now)))
            apply(CreateTasks(now, tuple(items)))
            now += 1000
            apply(Dispatched(now, tuple(DispatchItem(fire_id=f"{c.task_id}-1", task_id=c.task_id, attempt=1,
                                                     worker="n2", deadline_ms=now + 10_000) for c in items)))
            reqs = [FireRequest(fire_id=f"{c.task_id}-1", task_id=c.task_id, attempt=1, kind=FireKind.CALLBACK,
                                url=c.spec.callback_url, body=b'{"due":1}', scene=c.spec.scene, timeout_ms=5000,
                                not_before_ms=now, scheduled_ms=now,
                                **({"traceparent": TP} if traced else {}))  # type: ignore[arg-type]
                    for c in items]
            results = []
            for req in decode_fire_batch(encode_fire_batch(reqs)):
                deliverer.request_bytes(req, "127.0.0.1", 9, "/cb")
                res = FireResult(fire_id=req.fire_id, kind=req.kind, status_code=200,
                                 outcome=DeliveryOutcome.SUCCESS, response_head=b"ok", latency_ms=1.0, worker="n2")
                deliverer.record(req, res)
                results.append(ResultItem(fire_id=req.fire_id, kind=req.kind, status_code=200,
                                          outcome=Outcome.RESPONSE, response_head="ok", latency_ms=1, worker="n2"))
            deliverer.take()
            apply(Results(now + 2, tuple(results)))
        counts, tasks = store.counts(), len(store)
        store.close()
        if tasks != fires or counts.get("pending") or counts.get("running"):  # every fire ran to its result
            raise SystemExit(f"fire path incomplete: {tasks} tasks, {counts}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def count(tree: Path, fires: int, traced: bool) -> int:
    """Instructions of one whole scenario process, code from ``tree``."""
    out = tempfile.mktemp(prefix="callgrind.out.")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
           "--scenario", str(tree), "--fires", str(fires)] + (["--traced"] if traced else [])
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    finally:
        Path(out).unlink(missing_ok=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    m = COLLECTED.search(p.stderr)
    if m is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{p.stderr[-2000:]}")
    return int(m.group(1))


def per_fire(tree: Path, fires: int, traced: bool) -> float:
    return (count(tree, 2 * fires, traced) - count(tree, fires, traced)) / fires


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, help="checkout of the code to compare with (its molens/ is used)")
    ap.add_argument("--fires", type=int, default=2000, help="fires of the smaller run (the larger has twice)")
    ap.add_argument("--runs", type=int, default=3, help="measurements of each arm")
    ap.add_argument("--traced", action="store_true", help="(with --scenario) tasks carry a traceparent")
    ap.add_argument("--scenario", type=Path, metavar="TREE", help="run the scenario itself on TREE's code (what valgrind counts)")
    args = ap.parse_args()
    if args.scenario:
        use_tree(args.scenario.resolve())
        scenario(args.fires, args.traced)
        return
    if args.base is None or not (args.base / "molens").is_dir():
        raise SystemExit("--base DIR: a checkout with a molens/ package to compare with")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    arms = {"base": (args.base.resolve(), False), "untraced": (ROOT, False), "traced": (ROOT, True)}
    got: dict[str, list[float]] = {k: [] for k in arms}
    for run in range(args.runs):
        for name, (tree, traced) in arms.items():
            got[name].append(per_fire(tree, args.fires, traced))
            print(f"fire instructions run {run + 1} {name}: {got[name][-1]:,.0f} per fire", flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"fire_instructions: base={med['base']:.0f} untraced={med['untraced']:.0f} traced={med['traced']:.0f} "
          f"untraced_ratio={med['untraced'] / med['base']:.4f} traced_ratio={med['traced'] / med['base']:.4f} "
          f"fires={args.fires} runs={args.runs}")


if __name__ == "__main__":
    main()
