"""The recording clients' bounds (``tests/integration/history_client.py``): a record is retired for a
fresh one after ``calls_per_record`` calls, and a thread makes at most ``calls_per_s`` calls a second.
Against a closed port: every call is refused at once and recorded unknown."""

from __future__ import annotations

import itertools
import socket
import threading

from tests.integration.history_client import record
from tests.sim.task_model import Outcome

MS = 1_000_000


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_recording_clients_retire_a_record_after_calls_per_record_calls() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"  # every call refused: recorded unknown, at once
    history = record([url], threading.Event(), 3, threads=2, records=2, max_ops=60, calls_per_record=10)
    per_key = {k: sum(o.key == k for o in history.ops) for k in {o.key for o in history.ops}}
    assert len(history.ops) == 60 and all(o.outcome is Outcome.UNKNOWN for o in history.ops)
    assert max(per_key.values()) == 10, per_key
    assert sum(n < 10 for n in per_key.values()) <= 2, per_key  # only the two records still in use


def test_a_recording_thread_makes_at_most_calls_per_s_calls_a_second() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    history = record([url], threading.Event(), 3, threads=1, records=1, max_ops=8, calls_per_s=50)
    starts = sorted(o.invoke for o in history.ops)
    assert len(starts) == 8
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 19 * MS  # 1/50 s apart, less the call's setup
