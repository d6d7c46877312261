"""Benchmark the time wheel: add N timers spread over an hour, expire them all by advancing virtual time.

Timing and memory are separate runs so tracemalloc does not distort the rates. Rates are per CPU
second of this process (``time.process_time``): the machine is shared, and wall time would measure the
neighbours. Expiry is measured two ways: *tick* advances virtual time one tick at a time (the summary
line's ``advance_per_s``); *exact* sleeps until ``next_deadline()`` and advances to it each time, as
an idle leader does, so most calls hand out a single timer and per-call cost dominates; *dense*
squeezes the same timers into a minute, so each tick hands out ~1,700 (per-timer cost, a busy leader).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
import tracemalloc

from molens.schedule.wheel import HierarchicalWheel

START_MS = 1_790_000_000_000  # an epoch-ms instant in 2026


def make_timers(n: int, span_ms: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    keys = [f"01J{i:023d}" for i in range(n)]  # task-id-sized strings (26 chars)
    dues = [START_MS + rng.randrange(span_ms) for _ in range(n)]
    return keys, dues


def timing_run(
    keys: list[str], dues: list[int], tick_ms: int, wheel_size: int, exact: bool
) -> tuple[float, float, int, int]:
    """Add all timers, then expire them: tick by tick, or (exact) jumping to each ``next_deadline()``."""
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=START_MS)
    add, advance, next_deadline = wheel.add, wheel.advance, wheel.next_deadline
    gc.disable()
    try:
        t0 = time.process_time()
        for key, due in zip(keys, dues):
            add(key, due)
        t_add = time.process_time() - t0
        expired = calls = 0
        t0 = time.process_time()
        if exact:
            deadline = next_deadline()
            while deadline is not None:
                expired += len(advance(deadline))
                calls += 1
                deadline = next_deadline()
        else:
            now = START_MS
            end = max(dues) + tick_ms
            while now < end:
                expired += len(advance(now))
                calls += 1
                now += tick_ms
        t_adv = time.process_time() - t0
    finally:
        gc.enable()
    assert expired == len(keys) and len(wheel) == 0
    return t_add, t_adv, expired, calls


def memory_run(keys: list[str], dues: list[int], tick_ms: int, wheel_size: int) -> float:
    """Python heap bytes per pending timer; keys exist before (the engine holds them anyway)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=START_MS)
    for key, due in zip(keys, dues):
        wheel.add(key, due + 0)  # a fresh int, as an engine computing due times would pass
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(wheel) == len(keys)
    return used / len(keys)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--span-ms", type=int, default=3_600_000, help="due times uniform over this range")
    p.add_argument("--dense-span-ms", type=int, default=60_000, help="range of the dense (busy) run")
    p.add_argument("--tick-ms", type=int, default=10)
    p.add_argument("--wheel-size", type=int, default=512)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print(f"load average before the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    keys, dues = make_timers(a.tasks, a.span_ms, a.seed)
    t_add, t_adv, expired, calls = timing_run(keys, dues, a.tick_ms, a.wheel_size, exact=False)
    print(f"added {a.tasks} timers uniform over {a.span_ms} ms in {t_add:.3f} CPU s ({a.tasks / t_add:.0f}/s)")
    print(
        f"tick mode: expired {expired} in {calls} advance calls, one per {a.tick_ms} ms tick, "
        f"in {t_adv:.3f} CPU s ({expired / t_adv:.0f}/s)"
    )
    _, t_exact, expired_x, calls_x = timing_run(keys, dues, a.tick_ms, a.wheel_size, exact=True)
    print(
        f"exact mode: expired {expired_x} in {calls_x} advance calls, each to next_deadline(), "
        f"in {t_exact:.3f} CPU s ({expired_x / t_exact:.0f}/s)"
    )
    dense = [START_MS + (d - START_MS) * a.dense_span_ms // a.span_ms for d in dues]
    _, t_dense, expired_d, calls_d = timing_run(keys, dense, a.tick_ms, a.wheel_size, exact=False)
    print(
        f"dense tick mode (same timers squeezed into {a.dense_span_ms} ms, a busy leader): expired {expired_d} "
        f"in {calls_d} advance calls in {t_dense:.3f} CPU s ({expired_d / t_dense:.0f}/s)"
    )
    bpt = memory_run(keys, dues, a.tick_ms, a.wheel_size)
    print(f"tracemalloc: {bpt:.1f} bytes of Python heap per pending timer (keys not counted, due ints counted)")
    print(
        f"wheel: tasks={a.tasks} add_per_s={a.tasks / t_add:.0f} advance_per_s={expired / t_adv:.0f} "
        f"bytes_per_task={bpt:.0f} exact_advance_per_s={expired_x / t_exact:.0f} "
        f"dense_advance_per_s={expired_d / t_dense:.0f}"
    )


if __name__ == "__main__":
    main()
