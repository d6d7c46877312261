"""Three RaftPeer actors on in-memory logs (``tests/memory_log.py``), in-memory transports
(``tests/memory_transport.py``) and in-memory state machines: no port, no lmdb, no file written.
They elect a leader, replicate what it is proposed, and go on without it once it stops."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from molens.actors.peer_handle import RaftPeerHandle
from molens.actors.raft_peer import SLOW_CYCLE_MS
from molens.config import PeerConfig, RaftSettings
from molens.raft.log import Entry, EntryKind, Membership
from tests.memory_log import MemoryPeerLog
from tests.memory_transport import MemoryNet
from tests.polling import wait_until

IDS = ("n1", "n2", "n3")
PEERS = tuple(PeerConfig(id=i, raft_addr=f"127.0.0.1:{n}", rpc_addr="", http_addr="") for n, i in enumerate(IDS, 1))
"""Raft addresses for the address book only: nothing binds or dials them in memory."""


class ListFSM:
    """A state machine that keeps the data of every entry applied, in order; each result is the
    entry's index."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.applied: list[bytes] = []
        self.index = 0

    def applied_index(self) -> int:
        return self.index

    def apply_batch(self, entries: Sequence[Entry]) -> list[Any]:
        out: list[Any] = []
        with self.lock:
            for e in entries:
                if e.index <= self.index:
                    out.append(None)
                    continue
                self.index = e.index
                if e.kind is EntryKind.NORMAL and e.data:
                    self.applied.append(e.data)
                    out.append(e.index)
                else:
                    out.append(None)
        return out

    def data(self) -> list[bytes]:
        with self.lock:
            return list(self.applied)

    def snapshot(self, path: str | os.PathLike[str]) -> int:
        with self.lock:
            Path(path).write_text(json.dumps([self.index, [d.hex() for d in self.applied]]))
            return self.index

    def restore(self, path: str | os.PathLike[str]) -> None:
        index, applied = json.loads(Path(path).read_text())
        with self.lock:
            self.index, self.applied = index, [bytes.fromhex(d) for d in applied]

    def close(self) -> None:
        pass


Cluster = tuple[dict[str, RaftPeerHandle], dict[str, ListFSM]]
"""Each peer's handle and state machine, by node id."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    net = MemoryNet()
    handles: dict[str, RaftPeerHandle] = {}
    fsms = {i: ListFSM() for i in IDS}
    try:
        for p in PEERS:
            i = p.id
            cfg = RaftSettings(bind_addr=p.raft_addr, tick_ms=10)
            log = MemoryPeerLog(Membership(IDS), tmp_path / i / "snapshots")
            handles[i] = RaftPeerHandle.start(i, cfg, tmp_path / i, fsms[i], PEERS, IDS, log=log, transport=net.transport(i))
        yield handles, fsms
    finally:
        for h in handles.values():
            h.stop()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def _leader(handles: dict[str, RaftPeerHandle]) -> str | None:
    """The leader every running peer of ``handles`` names, once it is one of them and names itself."""
    leaders = {h.standing.leader for h in handles.values() if not h.stopped.is_set()}
    one = leaders.pop() if len(leaders) == 1 else None
    return one if one in handles and handles[one].standing.leader == one else None


def _elected(handles: dict[str, RaftPeerHandle]) -> str:
    wait_until(lambda: _leader(handles) is not None, f"a leader among {sorted(handles)}", timeout=20.0)
    lead = _leader(handles)
    assert lead is not None
    return lead


def _applied(handle: RaftPeerHandle, prefix: bytes, n: int) -> list[bytes]:
    """Propose ``n`` entries through ``handle`` and wait for their results (their indexes, rising)."""
    datas = [prefix + b"%d" % k for k in range(n)]
    results = [f.result(10) for f in handle.propose_many(datas)]
    assert results == sorted(results) and len(set(results)) == n
    return datas


def test_three_peers_on_memory_logs_elect_one_leader(cluster: Cluster) -> None:
    handles, _ = cluster
    _elected(handles)
    roles = sorted(h.status()["role"] for h in handles.values())
    assert roles.count("leader") == 1
    assert set(roles) <= {"leader", "follower"}


def test_the_leaders_proposals_are_applied_on_every_peer_in_order(cluster: Cluster) -> None:
    handles, fsms = cluster
    lead = _elected(handles)
    datas = _applied(handles[lead], b"p", 50)
    assert fsms[lead].data() == datas
    wait_until(lambda: all(f.data() == datas for f in fsms.values()), "every peer to apply the proposals")


def test_after_the_leader_stops_the_other_two_elect_another_and_keep_every_entry(cluster: Cluster) -> None:
    handles, fsms = cluster
    first = _elected(handles)
    before = _applied(handles[first], b"before", 10)
    handles[first].stop()
    rest = {i: h for i, h in handles.items() if i != first}
    second = _elected(rest)
    after = _applied(handles[second], b"after", 10)
    wait_until(lambda: all(fsms[i].data() == before + after for i in rest), "both survivors to hold every entry")


class SlowFSM(ListFSM):
    """Applies an entry whose data starts with ``slow:`` only after sleeping its milliseconds."""

    def apply_batch(self, entries: Sequence[Entry]) -> list[Any]:
        for e in entries:
            if e.kind is EntryKind.NORMAL and e.data.startswith(b"slow:"):
                time.sleep(int(e.data[5:]) / 1000)
        return super().apply_batch(entries)


def _slow(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("slow raft cycle")]


def test_every_cycle_over_the_bound_is_logged_not_only_the_longest_so_far(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    one = PEERS[:1]
    fsm = SlowFSM()
    cfg = RaftSettings(bind_addr=one[0].raft_addr, tick_ms=10)
    log = MemoryPeerLog(Membership(("n1",)), tmp_path / "snapshots")
    h = RaftPeerHandle.start("n1", cfg, tmp_path, fsm, one, ("n1",), log=log, transport=MemoryNet().transport("n1"))
    try:
        _elected({"n1": h})
        with caplog.at_level(logging.WARNING, logger="molens.actors.raft_peer"):
            for ms in (SLOW_CYCLE_MS * 2, SLOW_CYCLE_MS * 1.25):  # the second is slow, and shorter than the first
                assert h.propose_many([b"slow:%d" % ms])[0].result(10) > 0
            # a cycle is timed (and logged) after it has published its results: wait for the second line
            wait_until(lambda: len(_slow(caplog)) >= 2, "a line for each slow cycle", timeout=5.0)
        assert len(_slow(caplog)) == 2, _slow(caplog)
    finally:
        h.stop()
