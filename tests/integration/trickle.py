"""Slow clients against a node's HTTP port, for the slow-client test and ``scripts/bench/slow_clients.py``.

:func:`trickle` opens ``n`` connections spread over several loopback source addresses (127.0.0.2, ...:
Linux routes all of 127/8 to the loopback device, so one machine plays many clients), sends each a
request head a byte every ``gap_s`` and never finishes it, and meanwhile asks ``/healthz`` over one
keep-alive connection from 127.0.0.1 every ``probe_every_s``. It returns when every slow connection
was closed by the server, or at ``give_up_s`` (then :attr:`Trickle.open_at_end` says how many were not;
with ``n`` 0 it probes until then).
One thread and a selector drive all of it; nothing sleeps on an effect.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

HEAD = b"GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 4096


@dataclass
class Trickle:
    closed_after_s: list[float] = field(default_factory=list)
    """Per slow connection: from its first byte sent to the server closing it."""
    answered_408: int = 0
    open_at_end: int = 0
    probes_ms: list[float] = field(default_factory=list)
    probe_failures: list[str] = field(default_factory=list)
    rss_peak: int = 0

    def p(self, values: list[float], q: float) -> float:
        s = sorted(values)
        return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def trickle(
    port: int, n: int, *, per_address: int = 100, gap_s: float = 1.0, probe_every_s: float = 0.02,
    give_up_s: float = 60.0, pid: int | None = None,
) -> Trickle:
    out = Trickle()
    sel = selectors.DefaultSelector()
    started: dict[socket.socket, float] = {}
    sent: dict[socket.socket, int] = {}
    answers: dict[socket.socket, bytes] = {}
    for i in range(n):
        source = f"127.0.0.{2 + i // per_address}"
        s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        s.setblocking(False)
        s.send(HEAD[:1])
        started[s], sent[s], answers[s] = time.monotonic(), 1, b""
        sel.register(s, selectors.EVENT_READ)
    probe = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    end = time.monotonic() + give_up_s
    next_byte = time.monotonic() + gap_s
    next_probe = time.monotonic()
    while (started or n == 0) and time.monotonic() < end:  # n == 0: the probe alone, until give_up_s
        now = time.monotonic()
        if now >= next_probe:
            t0 = time.perf_counter()
            try:
                probe.request("GET", "/healthz")
                r = probe.getresponse()
                r.read()
                if r.status != 200:
                    out.probe_failures.append(f"status {r.status}")
            except (OSError, http.client.HTTPException) as e:
                out.probe_failures.append(repr(e))
                probe.close()
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            out.probes_ms.append((time.perf_counter() - t0) * 1000)
            next_probe = now + probe_every_s
            if pid is not None and len(out.probes_ms) % 25 == 0:
                out.rss_peak = max(out.rss_peak, rss_bytes(pid))
        if now >= next_byte:
            for s in list(started):
                i = sent[s]
                try:
                    s.send(HEAD[i : i + 1])
                    sent[s] = min(i + 1, len(HEAD) - 1)
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    pass
            next_byte = now + gap_s
        for key, _ in sel.select(timeout=max(0.0, min(next_probe, next_byte) - time.monotonic())):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""
            if data:
                answers[s] += data
                continue
            out.closed_after_s.append(time.monotonic() - started.pop(s))
            out.answered_408 += answers.pop(s).startswith(b"HTTP/1.1 408")
            sel.unregister(s)
            s.close()
    out.open_at_end = len(started)
    for s in started:
        s.close()
    probe.close()
    sel.close()
    return out


__all__ = ["Trickle", "rss_bytes", "trickle"]
