"""NodeContext.propose as the HTTP thread sees it: the outcome the Raft thread reports (on its own
thread, or at once when the queue refuses) becomes the result or the API error, never a 500; no
outcome in time is OutcomeUnknown."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from molens.actors.peer_errors import LeadershipLost, ProposalRefused
from molens.actors.peer_messages import LeaderChange
from molens.actors.peer_state import Lifecycle
from molens.config import load_dict
from molens.fsm.commands import DeleteTasks
from molens.fsm.history import History
from molens.fsm.store import EntryResult, TaskStore
from molens.node_context import NodeContext
from molens.raft.core import NotLeaderError
from molens.web.errors import LeaderElsewhere, NoLeader, OutcomeUnknown, Unavailable

Outcome = tuple[list[Any], BaseException | None] | None
"""What the fake Raft peer reports for a proposal; None: nothing, ever."""


class FakePeer:
    """A leader whose proposals get ``outcome`` from another thread (as the Raft thread reports)."""

    def __init__(self, outcome: Outcome, *, same_thread: bool = False) -> None:
        self.lifecycle = Lifecycle()
        self.outcome = outcome
        self.same_thread = same_thread
        self.proposed: list[list[bytes]] = []

    def subscribe(self, fn: Callable[[LeaderChange], None]) -> LeaderChange:
        return LeaderChange("n1", "leader", "n1", 3)

    def propose_batch(self, datas: list[bytes], on_done: Callable[[list[Any], BaseException | None], None]) -> None:
        self.proposed.append(datas)
        if self.outcome is None:
            return
        results, error = self.outcome
        if self.same_thread:
            on_done(results, error)
        else:
            threading.Thread(target=on_done, args=(results, error)).start()


def _ctx(tmp_path: Path, peer: FakePeer) -> NodeContext:
    cfg = load_dict({"node": {"id": "n1", "data_dir": str(tmp_path)},
                     "cluster": {"peers": [
                         {"id": n, "http_addr": f"127.0.0.1:1808{i}", "raft_addr": f"127.0.0.1:1908{i}",
                          "rpc_addr": f"127.0.0.1:1918{i}"} for i, n in ((1, "n1"), (2, "n2"))]}})
    history = History(tmp_path / "history.sqlite")
    store = TaskStore(tmp_path, history=history)
    return NodeContext(cfg, peer, store, history).start()  # type: ignore[arg-type]


CMD = DeleteTasks(1, ("01J0000000000000000000000A",))


def test_the_raft_threads_results_come_back_per_command(tmp_path: Path) -> None:
    peer = FakePeer(([EntryResult(index=7, term=3, results=[None], effects=[])], None))
    assert _ctx(tmp_path, peer).propose([CMD], 5) == [[None]]
    assert len(peer.proposed) == 1 and len(peer.proposed[0]) == 1


@pytest.mark.parametrize(("error", "expected"), [
    (NotLeaderError("n2"), LeaderElsewhere),  # leadership lost between the check and the append
    (NotLeaderError(None), NoLeader),
    (LeadershipLost("x"), OutcomeUnknown),
    (ProposalRefused("raft peer stopped"), Unavailable),
    (RuntimeError("x"), Unavailable),
])
@pytest.mark.parametrize("same_thread", [False, True])
def test_every_failure_the_raft_thread_reports_is_an_api_error(
    tmp_path: Path, error: BaseException, expected: type[Exception], same_thread: bool
) -> None:
    ctx = _ctx(tmp_path, FakePeer(([None], error), same_thread=same_thread))
    with pytest.raises(expected):
        ctx.propose([CMD], 5)


def test_no_outcome_in_time_is_outcome_unknown(tmp_path: Path) -> None:
    with pytest.raises(OutcomeUnknown):
        _ctx(tmp_path, FakePeer(None)).propose([CMD], 0.05)


def test_a_new_leader_gives_ids_above_every_task_its_replica_holds(tmp_path: Path) -> None:
    """Its clock may be behind the old leader's: GET /tasks lists in id (creation) order."""
    import time

    from molens.model import task_id_ms
    from tests.unit.test_fsm_store import T0, CreateItem, CreateTasks, Log, new_task_id, spec

    ahead = new_task_id(int(time.time() * 1000) + 3_600_000, 5)  # by a leader whose clock ran an hour ahead
    store = TaskStore(tmp_path / "seed")
    Log(store).apply(CreateTasks(T0, (CreateItem(ahead, spec()),)))
    assert store.last_task_id() == ahead
    store.close()
    ctx = _ctx(tmp_path / "seed", FakePeer(None))  # the fake peer reports this node as the leader
    try:
        tid = ctx.new_task_id()
        assert tid > ahead and task_id_ms(tid) == task_id_ms(ahead)
        assert all(t > ahead for t in ctx.new_task_ids(3))
    finally:
        ctx.store.close()
