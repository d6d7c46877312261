#!/usr/bin/env python
"""Throughput and round-trip latency of the ZMQ Raft transport between two endpoints on 127.0.0.1.

Usage: .venv/bin/python scripts/bench/raft_transport.py [--messages N] [--curve]
One-way: endpoint a sends N messages to b as fast as ``send`` accepts them (the transport is lossy, so
drops are counted, not retried); CPU per message is this process's (both endpoints) over that run.
Ping-pong: one message in flight, b echoes, round trips timed. ``--curve``: both endpoints with CURVE
keys (encryption, ZAP, each frame's sender checked against its key). Prints one line per scenario,
then ``raft_transport: key=value ...``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import zmq.auth

from molens.raft.transport import CurveKeys, RaftTransport, TransportConfig

KEYS: dict[str, CurveKeys] = {}
"""Node id -> its CURVE keys (``--curve``), empty for plaintext."""


def make_keys(root: Path) -> None:
    public = root / "public"
    public.mkdir()
    for name in ("a", "b"):
        zmq.auth.create_certificates(root, name)
        (public / f"{name}.key").write_bytes((root / f"{name}.key").read_bytes())
    for name in ("a", "b"):
        KEYS[name] = CurveKeys.load(root / f"{name}.key_secret", public)


def one_way(size: int, n: int) -> tuple[float, int, float]:
    done = threading.Event()
    count = [0]

    def on_b(from_id: str, payload: bytes) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    cfg = TransportConfig(sndhwm=100_000, rcvhwm=100_000, max_pending=100_000)
    b = RaftTransport("b", "tcp://127.0.0.1:*", on_b, config=cfg, curve=KEYS.get("b")).start()
    a = RaftTransport("a", "tcp://127.0.0.1:*", lambda f, p: None, {"b": b.bound_addr}, config=cfg,
                      curve=KEYS.get("a")).start()
    try:
        while count[0] == 0:  # wait for the connection (IMMEDIATE drops until then)
            a.send("b", b"warm")
            time.sleep(0.01)
        count[0] = 0
        payload = b"x" * size
        start = time.perf_counter()
        cpu0 = time.process_time()
        for _ in range(n):
            while not a.send("b", payload):
                time.sleep(0.0005)  # our own queue is full: back off, do not count as a network drop
        done.wait(30)
        dt = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        return count[0] / dt, a.stats()["dropped_full"], cpu / max(1, count[0]) * 1e6
    finally:
        a.close()
        b.close()


def ping_pong(rounds: int) -> list[float]:
    got = threading.Event()

    b = RaftTransport("b", "tcp://127.0.0.1:*", lambda f, p: b.send("a", p), curve=KEYS.get("b"))
    b.start()
    a = RaftTransport("a", "tcp://127.0.0.1:*", lambda f, p: got.set(), {"b": b.bound_addr},
                      curve=KEYS.get("a")).start()
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
    ap.add_argument("--curve", action="store_true", help="CURVE keys on both endpoints")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.curve:
            make_keys(Path(tmp))
        run(args)


def run(args: argparse.Namespace) -> None:
    summary = {"curve": str(bool(KEYS)).lower()}
    for size, label in ((16, "16B"), (1024, "1KiB")):
        rate, dropped, cpu_us = one_way(size, args.messages)
        print(f"one-way payload={label} messages={args.messages}: msgs_per_s={rate:,.0f} dropped_full={dropped} "
              f"cpu_us_per_msg={cpu_us:.2f}")
        summary[f"msgs_per_s_{label}"] = f"{rate:.0f}"
        summary[f"cpu_us_per_msg_{label}"] = f"{cpu_us:.2f}"
    rtts = sorted(ping_pong(args.rounds))
    p50 = statistics.median(rtts)
    p99 = rtts[int(len(rtts) * 0.99) - 1]
    print(f"ping-pong rounds={len(rtts)}: rtt_p50_ms={p50:.3f} rtt_p99_ms={p99:.3f}")
    summary["rtt_p50_ms"] = f"{p50:.3f}"
    summary["rtt_p99_ms"] = f"{p99:.3f}"
    print("raft_transport: " + " ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
