"""Catch-up on a real node (docs/architecture.md#catch-up): three 1 s periodic tasks with ``catchup``
one, none and all; the node is stopped for ten periods and started again. one fires a single
occurrence for the missed ones, none fires none of them, all fires every one of them, oldest first;
the history records what was skipped. Then ``resume_from: schedule`` on a paused task."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import Received, RecordingReceiver
from .rest import call, wait_serving

PERIOD = 1_000
DOWN_S = 10.5  # the node is stopped for ten periods


def _sched(rs: list[Received]) -> list[int]:
    """The nominal instants fired (first attempts), in order."""
    return sorted({int(r.headers["X-Molens-Scheduled-At"]) for r in rs})


def _skipped(n: NodeProc, tid: str) -> list[str]:
    st, page = call(n, "GET", f"/api/v1/tasks/{tid}/executions?result=skipped&limit=100")
    assert st == 200
    return [e["execution_result"] for e in page["items"]]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_one_none_and_all_after_the_node_was_stopped_for_ten_periods(tmp_path: Path, receiver: RecordingReceiver) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        ids = {}
        for mode in ("one", "none", "all"):
            st, t = call(n, "POST", "/api/v1/tasks", {
                "type": "periodic", "interval_ms": PERIOD, "catchup": mode,
                "callback_url": receiver.url(f"/ok/catchup-{mode}"),
            })
            assert st == 201, t
            ids[mode] = t
        wait_for(lambda: all(len(receiver.by_tag(f"catchup-{m}")) >= 2 for m in ids), 30, "two fires of each")
        n.stop()
        before = {m: _sched(receiver.by_tag(f"catchup-{m}")) for m in ids}
        time.sleep(DOWN_S)  # the outage itself: ten periods with the node down
        restart = int(time.time() * 1000)
        n.start()
        wait_serving(n)
        wait_for(lambda: all(max(_sched(receiver.by_tag(f"catchup-{m}"))) >= restart + 3 * PERIOD for m in ids),
                 60, "regular fires again after the restart")
        for tid in (t["id"] for t in ids.values()):
            call(n, "POST", f"/api/v1/tasks/{tid}/pause")
        # first attempts received after the restart: (instant, received at)
        post = {m: sorted((int(r.headers["X-Molens-Scheduled-At"]), r.at_ms) for r in receiver.by_tag(f"catchup-{m}")
                          if r.at_ms >= restart and r.headers["X-Molens-Attempt"] == "1") for m in ids}
        # one: a single late occurrence stands for the ten missed ones
        late = [s for s, _ in post["one"] if s < restart]
        assert late == [before["one"][-1] + PERIOD], (before["one"], post["one"])
        assert any("catchup one" in h for h in _skipped(n, ids["one"]["id"]))
        # none: no occurrence fires once its next instant has come (each starts within its period)
        assert all(at - s < PERIOD + 500 for s, at in post["none"]), post["none"]
        assert [s for s, _ in post["none"] if s < restart - PERIOD] == [], post["none"]
        assert any("catchup none" in h for h in _skipped(n, ids["none"]["id"]))
        # all: every instant, none skipped, each once
        grid = _sched(receiver.by_tag("catchup-all"))
        assert grid == list(range(grid[0], grid[-1] + 1, PERIOD)), grid
        assert len([s for s, _ in post["all"] if s < restart]) >= 10
        assert _skipped(n, ids["all"]["id"]) == []
        firsts = [r for r in receiver.by_tag("catchup-all") if r.headers["X-Molens-Attempt"] == "1"]
        assert len({r.headers["X-Fire-ID"] for r in firsts}) == len(firsts) == len(grid)  # one fire id each
    finally:
        c.kill_all()


@pytest.mark.slow
def test_resume_from_schedule_applies_the_catchup_to_what_was_missed_while_paused(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        st, t = call(n, "POST", "/api/v1/tasks", {
            "type": "periodic", "interval_ms": PERIOD, "catchup": "all", "callback_url": receiver.url("/ok/resume-all"),
        })
        assert st == 201
        wait_for(lambda: receiver.by_tag("resume-all"), 30, "a first fire")
        assert call(n, "POST", f"/api/v1/tasks/{t['id']}/pause")[0] == 200
        paused = _sched(receiver.by_tag("resume-all"))
        wait_for(lambda: int(time.time() * 1000) > paused[-1] + 5 * PERIOD and True, 30, "five periods paused",
                 interval=0.2)
        st, bad = call(n, "POST", f"/api/v1/tasks/{t['id']}/resume", {"resume_from": "yesterday"})
        assert st == 400 and bad["error"]["field"] == "resume_from"
        st, r = call(n, "POST", f"/api/v1/tasks/{t['id']}/resume", {"resume_from": "schedule"})
        assert st == 200 and r["status"] == "pending", r
        wait_for(lambda: len(_sched(receiver.by_tag("resume-all"))) >= len(paused) + 5, 30, "the missed instants")
        call(n, "POST", f"/api/v1/tasks/{t['id']}/pause")
        grid = _sched(receiver.by_tag("resume-all"))
        assert grid == list(range(grid[0], grid[-1] + 1, PERIOD)), grid  # every instant while paused, none skipped
    finally:
        c.kill_all()
