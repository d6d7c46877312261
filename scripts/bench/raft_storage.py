#!/usr/bin/env python
"""Durable append rate of LmdbLog (one durable commit per batch), read rate, and KV FSM apply rate.

Usage: .venv/bin/python scripts/bench/raft_storage.py [--seconds S] [--dir DIR]
Prints one line per scenario, then one summary line ``raft_storage: key=value ...``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from molens.kv import KVStateMachine, encode_put
from molens.raft.log import Entry, HardState, Membership
from molens.raft.storage import LmdbLog


def bench_append(root: Path, size: int, batch: int, seconds: float) -> tuple[float, float]:
    """Entries/s and commits/s appending ``batch`` entries of ``size`` bytes per save()."""
    payload = b"x" * size
    with LmdbLog(root, Membership(("n1",)), durable=True) as lg:
        idx = 0
        commits = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            ents = [Entry(idx + i + 1, 1, data=payload) for i in range(batch)]
            idx += batch
            lg.save(HardState(1, "n1", idx), ents)
            commits += 1
        dt = time.perf_counter() - start
        assert lg.syncs >= commits
    return idx / dt, commits / dt


def bench_read(root: Path, seconds: float) -> tuple[float, float]:
    with LmdbLog(root, durable=True) as lg:
        last = lg.last_index()
        n = 0
        start = time.perf_counter()
        lo = lg.first_index()
        while time.perf_counter() - start < seconds:
            got = lg.entries(lo, min(lo + 64, last + 1))
            n += len(got)
            lo = lo + 64 if lo + 64 <= last else lg.first_index()
        ents_per_s = n / (time.perf_counter() - start)
        terms = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds / 2:
            for i in range(lg.first_index(), min(lg.first_index() + 1000, last)):
                lg.term(i)
                terms += 1
        return ents_per_s, terms / (time.perf_counter() - start)


def bench_fsm(root: Path, batch: int, seconds: float) -> float:
    with KVStateMachine(root) as fsm:
        idx = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            fsm.apply_batch([Entry(idx + i + 1, 1, data=encode_put(b"k%d" % ((idx + i) % 100_000), b"v" * 16))
                             for i in range(batch)])
            idx += batch
        return idx / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=1.0, help="per scenario")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    summary: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        base = Path(d)
        print(f"dir={base} seconds_per_scenario={args.seconds}")
        for size, label in ((16, "16B"), (1024, "1KiB")):
            for batch in (1, 64, 512):
                root = base / f"append-{label}-{batch}"
                eps, cps = bench_append(root, size, batch, args.seconds)
                print(f"append payload={label} batch={batch}: entries_per_s={eps:,.0f} commits_per_s={cps:,.0f} "
                      f"ms_per_commit={1000 / cps:.3f}")
                summary[f"b{batch}_{label}"] = f"{eps:.0f}"
        ents_s, terms_s = bench_read(base / "append-16B-512", args.seconds)
        print(f"read: entries_per_s={ents_s:,.0f} (64 per call) term_lookups_per_s={terms_s:,.0f}")
        summary["read_entries_per_s"] = f"{ents_s:.0f}"
        summary["term_per_s"] = f"{terms_s:.0f}"
        for batch in (1, 64, 512):
            aps = bench_fsm(base / f"fsm-{batch}", batch, args.seconds)
            print(f"kv fsm apply batch={batch}: entries_per_s={aps:,.0f}")
            summary[f"fsm_b{batch}"] = f"{aps:.0f}"
    print("raft_storage: " + " ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
