"""Command line for the simulators: ``scripts/sim [--scheduler] --seeds N [--nodes 3|5] [--seed S --trace]``.

Runs swarm seeds of the Raft simulator — or, with ``--scheduler``, of the whole-scheduler
simulation (``tests/sim/scheduler_sim.py``) — and ends with ``sim: seeds=N failures=F`` (exit 1
when F > 0). A failing seed prints its violation and the one-line replay command. ``--scheduler
--mutants`` applies each deliberate product bug of ``tests/sim/mutants.py`` in turn and ends with
``mutants: caught=N of M`` (exit 1 unless every one is caught); ``--mutants`` alone does the same
with the Raft simulation and the storage mutants (``RAFT_MUTANTS``: syncs left out, caught when a node
loses power), ``--mutant NAME --seed S --trace`` replays one.
"""

from __future__ import annotations

import argparse
import sys
import time

from molens.raft.core import UnsafeRule
from tests.sim.raft_harness import Violation, default_config, run_seed


def main(argv: list[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if "--scheduler" in args_in:
        from tests.sim import scheduler_sim

        args_in.remove("--scheduler")
        return scheduler_sim.main(args_in)
    argv = args_in
    p = argparse.ArgumentParser(prog="scripts/sim", description=__doc__)
    p.add_argument("--scheduler", action="store_true",
                   help="run the whole-scheduler simulation instead (options: --seeds, --start, --seed, --trace)")
    p.add_argument("--seeds", type=int, default=100, help="number of seeds to run")
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument("--seed", type=int, default=None, help="run only this seed")
    p.add_argument("--nodes", type=int, choices=(3, 5), default=None, help="cluster size (default: both)")
    p.add_argument("--trace", action="store_true", help="print every step of the run")
    p.add_argument("--unsafe", choices=[r.value for r in UnsafeRule], default=None,
                   help="break one rule on purpose (the simulator must catch it)")
    p.add_argument("--stop-on-failure", action="store_true")
    p.add_argument("--mutants", action="store_true",
                   help="apply each storage mutant in turn and run seeds (--seeds per mutant, default 2,000) "
                        "until one fails")
    p.add_argument("--mutant", default=None, help="run the seeds with this storage mutant applied (replay)")
    args = p.parse_args(argv)
    from tests.sim import mutants

    if args.mutants:
        budget = args.seeds if "--seeds" in argv else 2_000
        return mutants.main(range(args.start, args.start + budget), mutants.RAFT_MUTANTS,
                            lambda seed: f"scripts/sim --nodes {mutants.raft_nodes(seed)}")
    if args.mutant is not None:
        with mutants.by_name(args.mutant, mutants.RAFT_MUTANTS).applied():
            return _run(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:

    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))
    sizes = [args.nodes] if args.nodes else [3, 5]
    config = None
    if args.unsafe:
        config = default_config(unsafe=UnsafeRule(args.unsafe))
    trace = print if args.trace else None
    failures = 0
    power_losses = 0
    runs = 0
    slowest = (-1, 0.0)
    t0 = time.monotonic()
    for seed in seeds:
        n = sizes[seed % len(sizes)] if args.seed is None else sizes[0]
        runs += 1
        t1 = time.monotonic()
        try:
            cl = run_seed(seed, n, trace=trace, config=config)
            power_losses += cl.power_losses
        except Violation as e:
            failures += 1
            print(f"FAIL {e}" + (f" --mutant {args.mutant}" if args.mutant else ""), flush=True)
            if args.stop_on_failure:
                break
        took = time.monotonic() - t1
        if took > slowest[1]:
            slowest = (seed, took)
        if runs % 500 == 0:
            print(f"... {runs} seeds, {failures} failures, {time.monotonic() - t0:.0f}s", flush=True)
    dt = time.monotonic() - t0
    print(f"ran {runs} seeds in {dt:.1f}s ({runs / dt if dt else 0:.1f} seeds/s), "
          f"slowest seed {slowest[0]} took {slowest[1]:.2f}s, {power_losses} power losses in passing seeds")
    print(f"sim: seeds={runs} failures={failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
