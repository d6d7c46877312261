"""Jitter and schedule bounds on real 3-node clusters (docs/api.md, ``jitter_ms``, ``start_at``,
``end_at``, ``max_runs``).

* 1,000 delayed tasks due at one instant with ``jitter_ms`` 10 s, created in one batch: their
  callbacks spread over the window, none before its task's jittered instant, each with
  ``X-Molens-Scheduled-At`` the shared nominal instant.
* A periodic task's jittered next instant, read before a kill -9 of the leader, is the one the new
  leader reports, and the occurrence is delivered at (not before) it.
* ``max_runs`` 3 on a 1 s task: three occurrences, then ``done`` and no fourth.
* ``end_at`` a few seconds ahead: no occurrence at or after it, then ``done``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import Received, RecordingReceiver
from .rest import call, wait_serving

pytestmark = pytest.mark.integration

EXTRA = {"raft": {"tick_ms": 20}}
PERIOD = 1_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _firsts(rs: list[Received]) -> dict[str, Received]:
    """The first callback received of each occurrence, by fire id (a retry stands for a first
    attempt lost on the way: a burst of callbacks at one instant overflows the receiver)."""
    out: dict[str, Received] = {}
    for r in rs:
        out.setdefault(r.headers["X-Fire-ID"], r)
    return out


def _get(n: NodeProc, tid: str) -> dict[str, Any]:
    st, t = call(n, "GET", f"/api/v1/tasks/{tid}")
    assert st == 200, (st, t)
    return dict(t)


def _create(n: NodeProc, body: dict[str, Any]) -> dict[str, Any]:
    st, t = call(n, "POST", "/api/v1/tasks", body)
    assert st == 201, (st, t)
    return dict(t)


def _no_more_callbacks(receiver: RecordingReceiver, tag: str, count: int, seconds: float) -> None:
    """Watch ``tag`` for ``seconds``: fails as soon as more than ``count`` callbacks arrived."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = receiver.by_tag(tag)
        assert len(got) == count, [(r.headers["X-Fire-ID"], r.headers["X-Molens-Scheduled-At"]) for r in got]
        time.sleep(0.05)


@pytest.fixture(scope="module")
def tasks3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-node scheduler cluster shared by the tests that do not kill a node."""
    c = Cluster(tmp_path_factory.mktemp("jitter3"), 3, extra=EXTRA, state_machine="tasks")
    try:
        c.start()
        wait_serving(c.leader(timeout=30))
        yield c
    finally:
        c.kill_all()


N_TASKS = 1_000
JITTER = 10_000
LEAD_MS = 6_000  # the shared instant is this far after the batch is sent
LATE_MS = 3_000  # lateness allowed to a callback past the window (a shared 2-core machine)
SUBWINDOWS = 10


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_jitter_spreads_a_thousand_tasks_due_at_one_instant_over_the_window(
    tasks3: Cluster, receiver: RecordingReceiver
) -> None:
    lead = tasks3.leader()
    tag = "jit-spread"
    run_at = _now_ms() + LEAD_MS
    body = {"type": "delayed", "run_at": run_at, "jitter_ms": JITTER, "callback_url": receiver.url(f"/ok/{tag}")}
    st, out = call(lead, "POST", "/api/v1/tasks/batch", {"tasks": [body] * N_TASKS})
    assert st == 201 and out["errors"] == [], (st, out and out.get("errors"))
    created_by = _now_ms()
    assert created_by < run_at, f"the batch took {created_by - run_at + LEAD_MS} ms: the instant passed meanwhile"
    tasks = out["items"]
    assert len({t["id"] for t in tasks}) == N_TASKS
    due = {f"{t['id']}-1": t["next_run_at"] for t in tasks}
    # the API shows each task's jittered instant, in [run_at, run_at + jitter_ms)
    assert all(run_at <= d < run_at + JITTER for d in due.values()), sorted(due.values())[:: N_TASKS // 10]

    wait_for(lambda: len(_firsts(receiver.by_tag(tag))) >= N_TASKS, LEAD_MS / 1000 + JITTER / 1000 + 40,
             f"{N_TASKS} callbacks")
    got = _firsts(receiver.by_tag(tag))
    assert set(got) == set(due), set(got) ^ set(due)
    assert {r.headers["X-Molens-Scheduled-At"] for r in receiver.by_tag(tag)} == {str(run_at)}
    early = {f: (r.at_ms, due[f]) for f, r in got.items() if r.at_ms < due[f]}
    assert not early, f"{len(early)} callbacks before their jittered instant: {list(early.items())[:5]}"
    at = sorted(r.at_ms - run_at for r in got.values())
    assert at[0] >= 0 and at[-1] <= JITTER + LATE_MS, (at[0], at[-1])
    # spread over the window, not bunched at the instant: most sub-windows hit, none holding a quarter
    width = JITTER // SUBWINDOWS
    counts = [sum(1 for a in at if k * width <= a < (k + 1) * width) for k in range(SUBWINDOWS)]
    assert sum(1 for c in counts if c) >= 8, counts
    assert max(counts) <= N_TASKS // 4, counts
    assert at[-1] - at[0] >= 0.8 * JITTER, (at[0], at[-1])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_max_runs_3_delivers_three_occurrences_then_the_task_is_done(
    tasks3: Cluster, receiver: RecordingReceiver
) -> None:
    lead = tasks3.leader()
    tag = "max-runs"
    t = _create(lead, {"type": "periodic", "interval_ms": PERIOD, "max_runs": 3,
                       "callback_url": receiver.url(f"/ok/{tag}")})
    assert t["max_runs"] == 3
    wait_for(lambda: len(receiver.by_tag(tag)) >= 3, 30, "three callbacks")
    wait_for(lambda: _get(lead, t["id"])["status"] == "done", 30, "the task to be done")
    _no_more_callbacks(receiver, tag, 3, 3.5 * PERIOD / 1000)  # three periods and a half: no fourth
    got = sorted(_firsts(receiver.by_tag(tag)).values(), key=lambda r: r.at_ms)
    assert [r.headers["X-Fire-ID"] for r in got] == [f"{t['id']}-{k}" for k in (1, 2, 3)]
    assert [int(r.headers["X-Molens-Scheduled-At"]) - t["created_at"] for r in got] == [1_000, 2_000, 3_000]
    done = _get(lead, t["id"])
    assert (done["status"], done["next_run_at"]) == ("done", None), done


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_end_at_ends_the_task_with_no_occurrence_at_or_after_it(
    tasks3: Cluster, receiver: RecordingReceiver
) -> None:
    lead = tasks3.leader()
    tag = "end-at"
    end_at = _now_ms() + 3_500
    t = _create(lead, {"type": "periodic", "interval_ms": PERIOD, "end_at": end_at,
                       "callback_url": receiver.url(f"/ok/{tag}")})
    assert t["end_at"] == end_at
    expected = [t["created_at"] + k * PERIOD for k in range(1, 10) if t["created_at"] + k * PERIOD < end_at]
    assert len(expected) >= 2, (t["created_at"], end_at)  # the create took under 1.5 s
    wait_for(lambda: len(receiver.by_tag(tag)) >= len(expected), 30, f"{len(expected)} callbacks")
    wait_for(lambda: _get(lead, t["id"])["status"] == "done", 30, "the task to be done")
    _no_more_callbacks(receiver, tag, len(expected), 2.5 * PERIOD / 1000)
    sched = [int(r.headers["X-Molens-Scheduled-At"]) for r in
             sorted(_firsts(receiver.by_tag(tag)).values(), key=lambda r: r.at_ms)]
    assert all(s < end_at for s in sched), (sched, end_at)
    assert sched == expected, (sched, expected)
    done = _get(lead, t["id"])
    assert (done["status"], done["next_run_at"]) == ("done", None), done


KILL_JITTER = 5_000
KILL_LEAD_MS = 10_000  # the first instant is this far ahead: the kill and the failover come before it
FAILOVER_LATE_MS = 8_000


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_same_jittered_occurrence_fires_at_the_same_instant_after_a_leader_kill_9(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    c = Cluster(tmp_path, 3, extra=EXTRA, state_machine="tasks")
    try:
        c.start()
        old = c.leader(timeout=30)
        wait_serving(old)
        tag = "jit-kill"
        start_at = _now_ms() + KILL_LEAD_MS
        t = _create(old, {"type": "periodic", "interval_ms": 60_000, "start_at": start_at,
                          "jitter_ms": KILL_JITTER, "callback_url": receiver.url(f"/ok/{tag}")})
        due = t["next_run_at"]
        assert start_at <= due < start_at + KILL_JITTER, (start_at, due)
        c.wait_converged()
        old.kill()
        assert _now_ms() < due, "the leader was killed after the instant"
        new = c.leader(timeout=30, exclude=(old.node_id,))
        wait_serving(new)
        seen = _get(new, t["id"])
        read_at = _now_ms()
        assert read_at < due, f"the new leader answered {read_at - due} ms after the instant"
        assert (seen["seq"], seen["next_run_at"]) == (t["seq"], due), (seen, t)

        wait_for(lambda: _firsts(receiver.by_tag(tag)), KILL_LEAD_MS / 1000 + KILL_JITTER / 1000 + 30,
                 "the first occurrence")
        rs = receiver.by_tag(tag)
        assert {r.headers["X-Fire-ID"] for r in rs} == {f"{t['id']}-1"}, rs
        assert {r.headers["X-Molens-Scheduled-At"] for r in rs} == {str(start_at)}
        first = min(r.at_ms for r in rs)
        assert due <= first <= due + FAILOVER_LATE_MS, f"delivered {first - due} ms after the jittered instant"
    finally:
        c.kill_all()
