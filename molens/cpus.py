"""Which CPUs a node's process runs on: ``node.cpus`` (docs/deploy.md#cpu-pinning).

CPython runs one thread's bytecode at a time however many cores there are, and a node's threads
(the HTTP threads, the actors, the Raft transport's I/O thread) hand the interpreter lock to each
other around every system call: a socket send, an lmdb commit, a wake-up of another thread. With
the process spread over two or more cores, each hand-off wakes a thread on another core, which
finds the lock taken back and sleeps again: a single create costs the leader about twice the
context switches and a third more CPU than with the process on one core, where the thread that
let go of the lock simply carries on (docs/benchmarks.md#cpu-pinning). ZeroMQ's and the kernel's
work for the node then shares that core too; batch ingest, bound by lmdb and fsync, is unchanged.

:func:`parse` reads the list syntax of ``taskset -c`` and of ``Cpus_allowed_list`` in
``/proc/PID/status`` (``0``, ``0,2``, ``0-3,6``); :func:`pin` applies a list to every thread of
this process (threads started later inherit it from the thread that starts them); :func:`text`
writes a set back in that syntax.

>>> sorted(parse("0-2,5"))
[0, 1, 2, 5]
>>> text(parse(" 3, 0-1 "))
'0-1,3'
>>> parse("")
frozenset()
>>> parse("2-1")
Traceback (most recent call last):
ValueError: 2-1: a range must go upwards
"""

from __future__ import annotations

import os
from collections.abc import Iterable

MAX_CPU = 4095
"""The largest CPU number a list may name."""


def parse(spec: str) -> frozenset[int]:
    """The CPUs of ``spec`` (module docstring); empty: none named. Raises ValueError with the reason."""
    out: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        lo_s, sep, hi_s = part.partition("-")
        if not lo_s.strip().isdigit() or (sep and not hi_s.strip().isdigit()):
            raise ValueError(f"{part}: not a CPU number or a range such as 0-3")
        lo, hi = int(lo_s), int(hi_s) if sep else int(lo_s)
        if hi < lo:
            raise ValueError(f"{part}: a range must go upwards")
        if hi > MAX_CPU:
            raise ValueError(f"{part}: CPU numbers go up to {MAX_CPU}")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def text(cpus: Iterable[int]) -> str:
    """``cpus`` in the list syntax, runs written as ranges."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def allowed() -> frozenset[int]:
    """The CPUs this thread may run on now (Linux); empty where the system does not say."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset()


def pin(cpus: frozenset[int]) -> None:
    """Run every thread of this process on ``cpus`` alone. ValueError when one of them is not
    available to the process (a container's cpuset, a ``taskset`` around it) or the system cannot
    pin (not Linux)."""
    before = allowed()
    if not before:
        raise ValueError("this system does not let a process choose its CPUs")
    missing = cpus - before
    if missing:
        raise ValueError(f"CPU {text(missing)} is not available to this process (it may use {text(before)})")
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = []
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    os.sched_setaffinity(0, cpus)


__all__ = ["MAX_CPU", "allowed", "parse", "pin", "text"]
