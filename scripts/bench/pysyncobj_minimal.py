#!/usr/bin/env python3
"""PySyncObj alone, in the plainest harness: a cross-check of the peer figures of ``raft.py``.

Three processes on 127.0.0.1 with PySyncObj's default ``SyncObjConf`` (in memory, no fsync), a
replicated dict. The leader runs a generator thread that blocks on a 30,000-slot semaphore and calls
``put(i, 4 bytes, callback=...)``; each callback counts a commit and frees a slot. One second of
load is not counted, then ``--seconds`` (10) are. Written apart from ``raft.py``'s two PySyncObj
harnesses (its peer runs and its reference) so that a handicap in those would show here.

Prints ``pysyncobj_minimal: commits_per_s=... window=30000 seconds=... loadavg=...``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

WINDOW = 30_000


def local_addrs(n: int) -> list[str]:
    """``n`` free ``127.0.0.1:port`` addresses for PySyncObj nodes. ``pysyncobj_own.py`` uses it too."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    addrs = [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()
    return addrs


def ready_kv(me: str, partners: list[str]) -> Any:
    """PySyncObj's replicated dict (``put(key, value)``) in its default ``SyncObjConf``, once the
    cluster has a leader; the process exits if none appears within 60 s. ``pysyncobj_own.py`` uses it too."""
    from pysyncobj import SyncObj, replicated

    class KV(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(me, partners)
            self.d: dict[int, bytes] = {}

        @replicated  # type: ignore[misc]
        def put(self, k: int, v: bytes) -> None:
            self.d[k] = v

    o = KV()
    deadline = time.monotonic() + 60
    while not (o._isReady() and o._getLeader() is not None):
        if time.monotonic() > deadline:
            os._exit(1)
        time.sleep(0.05)
    return o


def node(me: str, partners: list[str], seconds: float, out: str) -> None:
    o = ready_kv(me, partners)
    ready_at = time.monotonic()
    time.sleep(1.0)
    if str(o._getLeader()) != me:
        while not os.path.exists(out) and time.monotonic() < ready_at + seconds + 30:
            time.sleep(0.1)
        os._exit(0)
    sem = threading.Semaphore(WINDOW)
    done = [0]

    def cb(_res: object, err: int) -> None:
        if err == 0:
            done[0] += 1
        sem.release()

    stop = threading.Event()

    def generate() -> None:
        i = 0
        while not stop.is_set():
            if sem.acquire(timeout=0.5):
                o.put(i, b"xxxx", callback=cb)
                i += 1

    threading.Thread(target=generate, daemon=True).start()
    time.sleep(1.0)
    a, t0 = done[0], time.perf_counter()
    time.sleep(seconds)
    b, t1 = done[0], time.perf_counter()
    stop.set()
    with open(out + ".tmp", "w") as f:
        json.dump({"commits_per_s": (b - a) / (t1 - t0)}, f)
    os.replace(out + ".tmp", out)
    os._exit(0)


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--node":
        node(sys.argv[2], sys.argv[3].split(","), float(sys.argv[4]), sys.argv[5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="counted seconds; PySyncObj answers in bursts of up to a window, so a short count is noisy")
    args = ap.parse_args()
    addrs = local_addrs(3)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pysyncobj-minimal-") as d:
        out = os.path.join(d, "result.json")
        procs = [
            subprocess.Popen([sys.executable, __file__, "--node", a, ",".join(x for x in addrs if x != a),
                              str(args.seconds), out])
            for a in addrs
        ]
        try:
            for p in procs:
                p.wait(timeout=120 + args.seconds)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if not os.path.exists(out):
            print("pysyncobj_minimal: no result (no leader?)")
            return 1
        with open(out) as f:
            rate = json.load(f)["commits_per_s"]
    print(f"pysyncobj_minimal: commits_per_s={rate:.0f} window={WINDOW} seconds={args.seconds:g} loadavg={load:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
