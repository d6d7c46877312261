#!/usr/bin/env python
"""Throughput and round-trip latency of the ZMQ Raft transport between two endpoints on 127.0.0.1.

Usage: .venv/bin/python scripts/bench/raft_transport.py [--messages N]
One-way: endpoint a sends N messages to b as fast as ``send`` accepts them (the transport is lossy, so
drops are counted, not retried). Ping-pong: one message in flight, b echoes, round trips timed.
Prints one line per scenario, then ``raft_transport: key=value ...``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from molens.raft.transport import RaftTransport, TransportConfig


def one_way(size: int, n: int) -> tuple[float, int]:
    done = threading.Event()
    count = [0]

    def on_b(from_id: str, payload: bytes) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    cfg = TransportConfig(sndhwm=100_000, rcvhwm=100_000, max_pending=100_000)
    b = RaftTransport("b", "tcp://127.0.0.1:*", on_b, config=cfg).start()
    a = RaftTransport("a", "tcp://127.0.0.1:*", lambda f, p: None, {"b": b.bound_addr}, config=cfg).start()
    try:
        while count[0] == 0:  # wait for the connection (IMMEDIATE drops until then)
            a.send("b", b"warm")
            time.sleep(0.01)
        count[0] = 0
        payload = b"x" * size
        start = time.perf_counter()
        for _ in range(n):
            while not a.send("b", payload):
                time.sleep(0.0005)  # our own queue is full: back off, do not count as a network drop
        done.wait(30)
        dt = time.perf_counter() - start
        return count[0] / dt, a.stats()["dropped_full"]
    finally:
        a.close()
        b.close()


def ping_pong(rounds: int) -> list[float]:
    got = threading.Event()

    b = RaftTransport("b", "tcp://127.0.0.1:*", lambda f, p: b.send("a", p))
    b.start()
    a = RaftTransport("a", "tcp://127.0.0.1:*", lambda f, p: got.set(), {"b": b.bound_addr}).start()
    b.add_peer("a", a.bound_addr)
    try:
        while not got.is_set():
            a.send("b", b"warm")
            got.wait(0.01)
        out = []
        for _ in range(rounds):
            got.clear()
            t0 = time.perf_counter()
            a.send("b", b"p" * 64)
            if not got.wait(1.0):
                continue
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        a.close()
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=2_000)
    args = ap.parse_args()
    summary = {}
    for size, label in ((16, "16B"), (1024, "1KiB")):
        rate, dropped = one_way(size, args.messages)
        print(f"one-way payload={label} messages={args.messages}: msgs_per_s={rate:,.0f} dropped_full={dropped}")
        summary[f"msgs_per_s_{label}"] = f"{rate:.0f}"
    rtts = sorted(ping_pong(args.rounds))
    p50 = statistics.median(rtts)
    p99 = rtts[int(len(rtts) * 0.99) - 1]
    print(f"ping-pong rounds={len(rtts)}: rtt_p50_ms={p50:.3f} rtt_p99_ms={p99:.3f}")
    summary["rtt_p50_ms"] = f"{p50:.3f}"
    summary["rtt_p99_ms"] = f"{p99:.3f}"
    print("raft_transport: " + " ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
