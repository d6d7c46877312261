#!/usr/bin/env python3
"""POSTs/s through the fire pool (FirePool + Deliverer, each engine: loop and threads) to a local receiver process.

The receiver runs in a subprocess so it does not share our GIL: by default a minimal asyncio
HTTP/1.1 keep-alive server (so the pool, not the receiver, is what is measured); ``--receiver
waitress`` serves a one-line WSGI app on waitress instead. For each concurrency the pool gets
``--fires`` callbacks, fed as fast as ``free_capacity()`` allows; latency is each FireResult's
``latency_ms`` (request start to response head). Prints one line per concurrency and finally

    delivery: posts_per_s=... p50_ms=... p99_ms=... concurrency=... (the best run) c16_posts_per_s=...

``--profile`` runs the first concurrency under pyinstrument and prints where the time went.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from molens.delivery import Deliverer, DeliveryOutcome, FireKind, FireRequest, FireResult
from molens.delivery.pool import FirePool, make_pool_manager
from molens.signing import SCOPES

_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: application/json\r\n\r\n{\"ok\":true}"


class _Http(asyncio.Protocol):
    """Just enough HTTP/1.1 for keep-alive POSTs with Content-Length."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            n = int(head[i + 15:head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else len(head)]) if i >= 0 else 0
            if len(self.buf) < end + 4 + n:
                return
            self.buf = self.buf[end + 4 + n:]
            self.t.write(_RESPONSE)


async def _serve_asyncio() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Http, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin


def _serve_waitress() -> None:
    import waitress

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "11")])
        return [b'{"ok":true}']

    srv = waitress.create_server(app, host="127.0.0.1", port=0, threads=8, connection_limit=1000)
    print(srv.effective_port, flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    srv.run()


def _run(port: int, concurrency: int, fires: int, profile: bool, engine: str = "loop",
         scope: str = "both") -> tuple[float, float, float, float]:
    url = f"http://127.0.0.1:{port}/callback"
    done = threading.Event()
    results: list[FireResult] = []

    def collect(batch: list[FireResult]) -> None:
        results.extend(batch)
        if len(results) >= fires:
            done.set()

    http = make_pool_manager(concurrency)
    pool = FirePool(Deliverer(http, "bench", signing_secret="bench-secret", signing_scope=scope), concurrency, collect,
                    engine=engine)
    body = b'{"order": 12345, "note": "benchmark payload"}'
    reqs = [FireRequest(
        fire_id=f"b{concurrency}-{i}", task_id=f"b{concurrency}", attempt=0, kind=FireKind.CALLBACK, url=url,
        body=body, scene="bench", timeout_ms=5000, deadline_ms=0, namespace="bench",
    )
            for i in range(fires)]
    pool.start()
    profiler = None
    if profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    sent = 0
    while sent < fires:
        room = pool.free_capacity()
        if room <= 0:
            time.sleep(0.0005)
            continue
        sent += pool.submit(reqs[sent:sent + room]).accepted
    done.wait(300)
    elapsed = time.perf_counter() - t0
    cpu_us = (time.process_time() - cpu0) * 1e6 / fires
    if profiler is not None:
        profiler.stop()
    pool.stop()
    http.clear()
    if profiler is not None:
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    ok = sum(1 for r in results if r.outcome is DeliveryOutcome.SUCCESS)
    if ok != fires:
        print(f"warning: {fires - ok} of {fires} fires did not succeed", file=sys.stderr)
    lat = sorted(r.latency_ms for r in results)
    p50 = lat[len(lat) // 2]
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return fires / elapsed, p50, p99, cpu_us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fires", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--receiver", choices=["asyncio", "waitress"], default="asyncio")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--signing-scope", choices=SCOPES, nargs="+", default=["both"],
                    help="worker.signing_scope of the runs (several: after the runs of the first, --rounds rounds of "
                         "each in turn, the order rotated every round, on the first engine and concurrency; the "
                         "median CPU per POST of each against the first's)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the signing scopes' comparison")
    ap.add_argument("--engine", choices=["loop", "threads"], nargs="+", default=["loop", "threads"],
                    help="FirePool engines to run, in turn (default both; the summary is the first's best run)")
    ap.add_argument("--serve", choices=["asyncio", "waitress"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve == "asyncio":
        asyncio.run(_serve_asyncio())
        return 0
    if args.serve == "waitress":
        _serve_waitress()
        return 0

    child = subprocess.Popen([sys.executable, __file__, "--serve", args.receiver],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        print(f"receiver: {args.receiver} pid={child.pid} port={port}; {args.fires} signed POSTs per run "
              f"(signing_scope {args.signing_scope[0]} first)")
        runs = []
        by_engine: dict[str, list[tuple[int, float, float, float, float]]] = {}
        for engine in args.engine:
            for i, c in enumerate(args.concurrency):
                rate, p50, p99, cpu_us = _run(port, c, args.fires, args.profile and i == 0, engine,
                                              args.signing_scope[0])
                by_engine.setdefault(engine, []).append((c, rate, p50, p99, cpu_us))
                print(f"delivery_run: engine={engine} concurrency={c} posts_per_s={rate:.0f} p50_ms={p50:.2f} "
                      f"p99_ms={p99:.2f} client_cpu_us_per_post={cpu_us:.0f}", flush=True)
        runs = [(c, rate, p50, p99) for c, rate, p50, p99, _ in by_engine[args.engine[0]]]
        scopes = list(dict.fromkeys(args.signing_scope))
        by_scope: dict[str, list[float]] = {s: [] for s in scopes}
        for r in range(args.rounds if len(scopes) > 1 else 0):
            for scope in scopes[r % len(scopes):] + scopes[:r % len(scopes)]:
                c = args.concurrency[0]
                rate, p50, p99, cpu_us = _run(port, c, args.fires, False, args.engine[0], scope)
                print(f"delivery_run: round={r} engine={args.engine[0]} signing_scope={scope} concurrency={c} "
                      f"posts_per_s={rate:.0f} p50_ms={p50:.2f} p99_ms={p99:.2f} client_cpu_us_per_post={cpu_us:.1f}",
                      flush=True)
                by_scope[scope].append(cpu_us)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    best = max(runs, key=lambda r: r[1])
    extra = " ".join(f"c{c}_posts_per_s={rate:.0f}" for c, rate, _, _ in runs)
    for engine, er in by_engine.items():
        top = max(er, key=lambda r: r[1])
        extra += f" {engine}_posts_per_s={top[1]:.0f} {engine}_cpu_us_per_post={top[4]:.0f}"
    if any(by_scope.values()):
        med = {s: statistics.median(v) for s, v in by_scope.items()}
        ref = scopes[0]
        extra += "".join(f" {s}_cpu_us_per_post={u:.1f}" + (f" {s}_vs_{ref}_cpu={u / med[ref]:.3f}" if s != ref else "")
                         for s, u in med.items())
    print(f"delivery: engine={args.engine[0]} signing_scope={args.signing_scope[0]} posts_per_s={best[1]:.0f} "
          f"p50_ms={best[2]:.2f} p99_ms={best[3]:.2f} concurrency={best[0]} receiver={args.receiver} {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
