"""Benchmark next_cron_fire: how many next-fire computations per second the FSM can count on.

A mix of expressions and zones (parsed once, then cached), each asked for its next fire from random
instants across a year, so DST transitions are included; then a burst on one expression (many tasks
reporting at the top of the hour), which the last-answer memo serves. Rates are per CPU second of this process (shared machine).
"""

from __future__ import annotations

import argparse
import random
import time

from molens.schedule.cron import next_cron_fire, next_fixed_rate

EXPRS = [
    "*/5 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9 * * MON-FRI",
    "15 */6 * * *",
    "0 0 1 * *",
    "*/10 * * * * *",
    "0 0 L * *",
    "45 23 * * 0",
    "0 8-18/2 * * 1-5",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Sydney"]
YEAR_MS = 365 * 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    work = [(rng.choice(EXPRS), rng.choice(ZONES), T0 + rng.randrange(YEAR_MS)) for _ in range(a.calls)]
    for expr in EXPRS:  # parse outside the timing, as a running FSM has
        for tz in ZONES:
            next_cron_fire(expr, tz, T0)
    t0 = time.process_time()
    for expr, tz, after in work:
        next_cron_fire(expr, tz, after)
    t_cron = time.process_time() - t0
    print(f"next_cron_fire: {a.calls} calls over {len(EXPRS)} expressions x {len(ZONES)} zones in {t_cron:.3f} s")
    # A burst: many tasks on one expression report results at about the same instant.
    burst = [T0 + 3_600_000 + rng.randrange(5_000) for _ in range(a.calls)]
    t0 = time.process_time()
    for after in burst:
        next_cron_fire("0 * * * *", "Europe/Berlin", after)
    t_burst = time.process_time() - t0
    print(f"next_cron_fire burst: {a.calls} calls for one expression within 5 s in {t_burst:.3f} s")
    t0 = time.process_time()
    for _, _, after in work:
        next_fixed_rate(T0, 60_000, after)
    t_rate = time.process_time() - t0
    print(f"next_fixed_rate: {a.calls} calls in {t_rate:.3f} s")
    print(
        f"cron: calls={a.calls} next_cron_fire_per_s={a.calls / t_cron:.0f} "
        f"burst_per_s={a.calls / t_burst:.0f} next_fixed_rate_per_s={a.calls / t_rate:.0f}"
    )


if __name__ == "__main__":
    main()
