"""Task records stay linearizable while the leader is killed and restarted and a follower is frozen.

Clients (``history_client.py``) record create / linearizable get / patch with If-Match / delete /
pause / resume calls sent to random nodes while the faults run: the leader killed -9, a new leader
elected, the old one restarted; then a follower frozen (SIGSTOP) and thawed (SIGCONT). Each fault
lasts until the clients have recorded a given number of further calls (no fixed durations). The
history is checked against the sequential model of a task record; a violation fails the test with
the minimal failing sub-history. Prints ``history: size=... ok=... fail=... unknown=...``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.sim.task_model import Call, Seen

from .conftest import Cluster, wait_for
from .history_client import History, check, record

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # a killed leader and a frozen follower under a shared machine's load

CALLS_PER_PHASE = 150


def _progress(history: History, recorder: threading.Thread) -> Callable[[int], None]:
    """``more(n)``: until the clients have answered ``n`` more calls (or stopped by themselves)."""

    def more(n: int) -> None:
        target = len(history.ops) + n
        wait_for(lambda: len(history.ops) >= target or not recorder.is_alive(), 120, f"{n} more recorded calls")

    return more


def test_task_records_stay_linearizable_through_a_leader_kill_and_a_frozen_follower(
    make_cluster: Callable[..., Cluster],
) -> None:
    c = make_cluster(3, state_machine="tasks")
    leader = c.leader()
    stop = threading.Event()
    history = History()
    urls = {nid: n.http_url for nid, n in c.nodes.items()}
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"history: seed={seed}")
    kwargs: dict[str, Any] = {"threads": 4, "records": 4, "max_ops": 2000, "max_seconds": 150.0, "into": history}
    recorder = threading.Thread(target=record, args=(urls, stop, seed), kwargs=kwargs, daemon=True)
    started = time.monotonic()
    recorder.start()
    more = _progress(history, recorder)
    frozen = None
    try:
        more(CALLS_PER_PHASE)
        leader.kill()
        c.leader(timeout=30, exclude=(leader.node_id,))
        more(CALLS_PER_PHASE)
        leader.start().wait_ready()
        more(CALLS_PER_PHASE)
        frozen = c.followers()[0]
        os.kill(frozen.pid, signal.SIGSTOP)
        more(CALLS_PER_PHASE)
        os.kill(frozen.pid, signal.SIGCONT)
        frozen = None
        more(CALLS_PER_PHASE)
    finally:
        if frozen is not None:
            os.kill(frozen.pid, signal.SIGCONT)
        stop.set()
        recorder.join(60)
    assert not recorder.is_alive(), "the recording clients did not stop"
    counts = history.counts()
    print(f"history: {history.summary()} records=4 threads=4 seconds={time.monotonic() - started:.0f}")
    assert counts["ok"] > 0 and counts["size"] >= 4 * CALLS_PER_PHASE, counts
    checking = time.monotonic()
    ok, report = check(history)
    print(f"history: check_seconds={time.monotonic() - checking:.1f}")
    assert ok, report
    _assert_checked_for_real(history)


def _assert_checked_for_real(history: History) -> None:
    """The same history with one read's answer altered is refused: the check saw the reads."""
    read = next(o for o in history.ops if o.call is Call.GET and o.seen is not None)
    read.seen = Seen(read.seen.status, read.seen.version + 7, read.seen.scene)
    ok, report = check(history)
    assert not ok and f"#{read.op_id} get" in report, report
