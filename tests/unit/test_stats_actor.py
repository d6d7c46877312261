"""The Stats actor fails as the other node actors do: loudly, stopping the node (``Scheduler.fatal``),
not alone with the node running on and its counters standing still. Until the node has stopped,
``/api/v1/stats`` and ``/metrics`` answer without the scheduler's counters, never with a 500."""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from molens.actors.messages import Count
from molens.actors.peer_messages import LeaderChange
from molens.actors.peer_state import Lifecycle, Standing
from molens.config import load_dict
from molens.fsm.history import History
from molens.fsm.store import TaskStore
from molens.node_context import NodeContext
from molens.raft.clock import ClockVerdict
from molens.scheduler import Scheduler
from molens.web.app import make_app


class FakePeer:
    """A follower's RaftPeer handle that knows no leader (no leader actors start)."""

    def __init__(self) -> None:
        self.lifecycle = Lifecycle()
        self.standing = Standing(term=1, members=frozenset({"n1"}))

    def subscribe(self, fn: Callable[[LeaderChange], None]) -> LeaderChange:
        return LeaderChange("n1", "follower", None, 1)

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        return {"term": 1, "commit_index": 0, "last_index": 0}

    def judge_clock(self, verdict_of: Callable[[list[str]], ClockVerdict], timeout: float = 1.0) -> Any:
        return ["n1"], verdict_of(["n1"])

    def propose_batch(self, datas: list[bytes], on_done: Callable[[list[Any], BaseException | None], None]) -> None:
        on_done([], RuntimeError("nothing is proposed here"))


class FakeRpc:
    def peers(self) -> list[str]:
        return ["n1"]

    def send(self, to: str, frame: bytes) -> bool:
        return True

    def stats(self) -> dict[str, int]:
        return {"handshake_refused": 0, "forged_sender": 0}


class Node:
    """A node's Scheduler (its real actors) and API context over fakes of Raft and worker RPC."""

    def __init__(self, tmp_path: Path) -> None:
        self.cfg = load_dict({"node": {"id": "n1", "data_dir": str(tmp_path)}, "cluster": {"peers": [
            {"id": "n1", "http_addr": "127.0.0.1:18081", "raft_addr": "127.0.0.1:19081", "rpc_addr": "127.0.0.1:19181"}]}})
        self.history = History(tmp_path / "history.sqlite")
        self.store = TaskStore(tmp_path, history=self.history)
        self.fatal: list[BaseException] = []
        self.stop_requested = threading.Event()
        self.scheduler = Scheduler(self.cfg, self.store, FakePeer(), FakeRpc(), on_fatal=self.on_fatal)  # type: ignore[arg-type]
        self.scheduler.start()
        self.ctx = NodeContext(self.cfg, FakePeer(), self.store, self.history, self.scheduler.to_json,  # type: ignore[arg-type]
                               scheduler=self.scheduler).start()
        self.app = make_app(self.ctx)

    def on_fatal(self, exc: BaseException) -> None:  # the node's request_stop
        self.fatal.append(exc)
        self.stop_requested.set()

    def get(self, path: str) -> tuple[int, bytes]:
        env = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "wsgi.input": io.BytesIO(b""),
               "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr}
        status: list[str] = []
        body = b"".join(self.app(env, lambda s, h, e=None: status.append(s)))
        return int(status[0].split()[0]), body

    def close(self) -> None:
        self.scheduler.stop(timeout=1.0)
        self.store.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.close()


def fail_stats(node: Node) -> None:
    """A count that is no number: adding it raises on the Stats actor's thread."""
    assert node.scheduler.stats is not None
    node.scheduler.stats.tell(Count((("fires_sent", "x"),)))


def test_a_stats_actor_that_fails_stops_the_node(node: Node) -> None:
    assert node.scheduler.stats is not None
    node.scheduler.stats.add(fires_sent=2)
    assert node.scheduler.stats.get("fires_sent") == 2
    fail_stats(node)
    assert node.stop_requested.wait(10), "the node ran on with its counters stopped"
    assert isinstance(node.fatal[0], TypeError)


def test_stats_and_metrics_answer_without_the_counters_while_a_failed_stats_actor_stops_the_node(node: Node) -> None:
    status, body = node.get("/metrics")
    assert status == 200 and b'molens_scheduler_events_total{event="fires_sent"}' in body
    fail_stats(node)
    assert node.stop_requested.wait(10)  # called once pykka has stopped the actor
    status, body = node.get("/api/v1/stats")
    assert status == 200, body
    assert b'"scheduler"' in body and b'"fires_sent"' not in body
    st = json.loads(body)  # nor Stats' counts elsewhere in the answer: absent, not zeros
    assert "expired" not in st["cleanup"] and "held_by_flow" not in st["not_fired"], st
    assert "sent" not in st["notifications"], st
    status, body = node.get("/metrics")
    assert status == 200, body
    assert b"molens_raft_term" in body
    assert b"molens_scheduler_events_total{" not in body  # absent: zeros would read as a counter reset
    assert node.scheduler.stats is not None
    node.scheduler.stats.add(fires_sent=1)  # the other actors' counts are dropped, not an error
    node.scheduler.set_observer(node.ctx.metrics().fires)


def test_a_stats_query_that_fails_is_answered_without_the_counters_and_keeps_the_actor() -> None:
    from molens.actors.messages import StatsBatch
    from molens.actors.stats import Stats, StatsClient

    ref = Stats.start()
    try:
        client = StatsClient(ref)
        client.tell(StatsBatch((), (("fire_lateness", [1.0]),)))
        assert client.to_json()["timings"]["fire_lateness"]["n"] == 1
        client.tell(StatsBatch((), (("fire_lateness", ["late"]),)))  # type: ignore[list-item]  # sorting now raises
        assert client.to_json() == {}  # pykka hands the asker the TypeError: no 500 above this
        assert ref.is_alive()
    finally:
        ref.stop()
