"""Which CPUs a node's process runs on: ``node.cpus`` (docs/deploy.md#cpu-pinning).

CPython runs one thread's bytecode at a time however many cores there are, and a node's threads
(the HTTP threads, the actors, the Raft transport's I/O thread) hand the interpreter lock to each
other around every system call: a socket send, an lmdb commit, a wake-up of another thread. With
the process spread over two or more cores, each hand-off wakes a thread on another core, which
finds the lock taken back and sleeps again: a single create costs the leader about twice the
context switches and a third more CPU than with the process on one core, where the thread that
let go of the lock simply carries on (docs/benchmarks.md#cpu-pinning). ZeroMQ's and the kernel's
work for the node then shares that core too; batch ingest, bound by lmdb and fsync, gains less
(1.1 times the rate), and bulk Raft replication about nothing (docs/deploy.md#cpu-pinning).

:func:`parse` reads the list syntax of ``taskset -c`` and of ``Cpus_allowed_list`` in
``/proc/PID/status`` (``0``, ``0,2``, ``0-3,6``); :func:`pin` applies a list to every thread of
this process (threads started later inherit it from the thread that starts them); :func:`text`
writes a set back in that syntax.

``node.os_scheduling`` chooses the kernel's scheduling policy of the node's threads
(:func:`set_policy`, :func:`threads_started_under`). Under ``batch`` (``SCHED_BATCH``) a thread that
wakes does not take the CPU from the thread running there; it runs when that one blocks or uses up
its slice. A node's threads wake each other all the time: a waitress thread hands a create to the
Raft actor, the Raft actor hands the outcome back, the Raft transport's I/O loop wakes the actor.
Under ``normal`` each wake-up preempts the waker while it still holds the interpreter lock; the
woken thread finds the lock taken and sleeps again, and the waker comes back: two switches where
none was needed. Every thread under ``batch`` takes a third of the switches per create and per fire
away and some CPU with them, and lowers the highest sustained fire rate, whose chain of wake-ups
now waits at every step. The default, ``http-batch``, puts only the HTTP API's threads under
``batch``: the Raft actor's hand-back of an outcome no longer preempts it, and the fire path keeps
its ceiling (docs/benchmarks.md#os-scheduling). A policy only tells the kernel which of the node's
own threads may preempt which; any other process keeps its priority, and a ``nice`` value still
holds.

By default (``node.cpus: auto``) a node given more than one CPU pins itself to one of them
(:func:`choose`); ``all`` leaves it free, a list pins it there.

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

import contextlib
import os
from collections.abc import Iterable, Iterator

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


AUTO = "auto"
"""``node.cpus``'s default: one CPU of those the process is given, chosen by :func:`choose`."""
ALL = "all"
"""``node.cpus``: every CPU the process is given (as does an empty value)."""


def check_spec(spec: str) -> str | None:
    """Why ``spec`` is not a value of ``node.cpus`` (``auto``, ``all``, empty or a CPU list); None when it is."""
    if spec in (AUTO, ALL):
        return None
    try:
        parse(spec)
    except ValueError as exc:
        return f"{exc} (or auto, or all)"
    return None


def choose(place: int, given: frozenset[int]) -> frozenset[int]:
    """``node.cpus: auto``: the one CPU of ``given`` for the node at ``place`` (its position among
    the cluster's nodes), counting down from the highest so that nodes sharing a host take CPUs of
    their own, round-robin, and the first stays off CPU 0, where the host's interrupts and
    housekeeping tend to land.

    >>> [text(choose(i, frozenset({0, 1}))) for i in range(3)]
    ['1', '0', '1']
    >>> choose(5, frozenset())
    frozenset()
    """
    if not given:
        return given
    ordered = sorted(given, reverse=True)
    return frozenset({ordered[place % len(ordered)]})


def pin(cpus: frozenset[int], within: frozenset[int] | None = None) -> None:
    """Run every thread of this process on ``cpus`` alone. ValueError when one of them is not
    available to the process (a container's cpuset, a ``taskset`` around it) or the system cannot
    pin (not Linux). ``within``: the CPUs the process may have (default: those it has now; a
    process pinned before gives the ones it had then, to be widened back to them)."""
    before = allowed() if within is None else within
    if not before:
        raise ValueError("this system does not let a process choose its CPUs")
    missing = cpus - before
    if missing:
        raise ValueError(f"CPU {text(missing)} is not available to this process (it may use {text(before)})")
    for tid in threads():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    os.sched_setaffinity(0, cpus)


POLICIES = ("http-batch", "batch", "normal")
"""The values of ``node.os_scheduling``: the HTTP API's threads under ``batch`` and the rest
``normal`` (the default), every thread ``batch``, every thread ``normal``."""


def policy() -> str:
    """This thread's scheduling policy as ``node.os_scheduling`` names it; another policy (a
    real-time one, ``idle``) by the kernel's number, ``unknown`` where the system does not say."""
    try:
        now = os.sched_getscheduler(0)
    except (AttributeError, OSError):
        return "unknown"
    return {os.SCHED_BATCH: "batch", os.SCHED_OTHER: "normal"}.get(now, str(now))


def process_policy(setting: str) -> str:
    """The policy of every thread but the HTTP API's under ``node.os_scheduling`` ``setting``."""
    return "batch" if setting == "batch" else "normal"


def set_policy(name: str) -> None:
    """Every thread of this process under the scheduling policy ``name``, ``batch`` or ``normal``
    (threads started later inherit it from the thread that starts them). ValueError when the system
    refuses (not Linux, or a seccomp profile that forbids it)."""
    for tid in threads():
        try:
            _set(tid, name)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    _set(0, name)


@contextlib.contextmanager
def threads_started_under(name: str) -> Iterator[None]:
    """The threads this thread starts inside the block run under the policy ``name`` (they inherit
    it); this thread goes back to its own policy at the end. ValueError as :func:`set_policy`."""
    before = policy()
    _set(0, name)
    try:
        yield
    finally:
        if before in ("batch", "normal"):
            _set(0, before)


def _set(tid: int, name: str) -> None:
    if name not in ("batch", "normal"):
        raise ValueError(f"{name}: must be batch or normal")
    try:
        os.sched_setscheduler(tid, os.SCHED_BATCH if name == "batch" else os.SCHED_OTHER, os.sched_param(0))
    except ProcessLookupError:
        raise
    except (AttributeError, OSError) as exc:
        raise ValueError(f"this system does not let a process choose the policy {name}: {exc}") from None


def threads() -> list[int]:
    """The ids of this process's threads now (Linux ``/proc``; empty elsewhere)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


__all__ = [
    "MAX_CPU", "POLICIES", "allowed", "parse", "pin", "policy", "process_policy", "set_policy", "text",
    "threads", "threads_started_under",
]
