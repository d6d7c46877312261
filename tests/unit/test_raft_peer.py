from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgpack
import pytest

from molens.actors.address_book import AddressBook, peer_context, peer_from_context
from molens.actors.peer_errors import LeadershipLost, ProposalRefused
from molens.actors.peer_state import BatchOutcome, BatchSlot, ProposalQueue
from molens.config import PeerConfig


def _futs(n: int) -> list[Future[Any]]:
    return [Future() for _ in range(n)]


def test_proposal_queue_wakes_the_actor_once_per_burst() -> None:
    q = ProposalQueue(limit=100)
    assert q.put([b"a"], _futs(1)) is True  # first put: send a wake-up
    assert q.put([b"b", b"c"], _futs(2)) is False  # a wake-up is already pending
    datas, futs, more = q.take(2, max_bytes=1 << 20)
    assert datas == [b"a", b"b"] and len(futs) == 2 and more
    assert q.put([b"d"], _futs(1)) is False  # still pending: the actor re-wakes itself
    datas, _, more = q.take(10, max_bytes=1 << 20)
    assert datas == [b"c", b"d"] and not more
    assert q.put([b"e"], _futs(1)) is True


def test_proposal_queue_slices_by_bytes_but_always_takes_one() -> None:
    q = ProposalQueue()
    q.put([b"x" * 10, b"y" * 10, b"z" * 10], _futs(3))
    datas, _, more = q.take(10, max_bytes=15)
    assert datas == [b"x" * 10, b"y" * 10] and more
    q2 = ProposalQueue()
    q2.put([b"big" * 100], _futs(1))
    assert q2.take(10, max_bytes=1)[0] == [b"big" * 100]


def test_proposal_queue_refuses_beyond_its_bound_and_after_close() -> None:
    q = ProposalQueue(limit=2)
    ok, over = _futs(2), _futs(1)
    q.put([b"a", b"b"], ok)
    q.put([b"c"], over)
    with pytest.raises(ProposalRefused, match="overloaded"):
        over[0].result(0)
    assert q.close() == ok
    late = _futs(1)
    q.put([b"d"], late)
    with pytest.raises(ProposalRefused, match="stopped"):
        late[0].result(0)


def test_address_book_persists_learned_peers_and_reports_changes(tmp_path: Path) -> None:
    n1 = PeerConfig(
        id="n1", raft_addr="127.0.0.1:1", rpc_addr="127.0.0.1:2", http_addr="127.0.0.1:3",
        admin_addr="127.0.0.1:4",
    )
    n4 = PeerConfig(
        id="n4", raft_addr="127.0.0.1:11", rpc_addr="127.0.0.1:12", http_addr="127.0.0.1:13",
        admin_addr="127.0.0.1:14",
    )
    seen: list[PeerConfig] = []
    book = AddressBook(tmp_path / "peers.json", (n1,), seen.append)
    assert book.update(n4) is True and book.update(n4) is False
    assert seen == [n4]
    again = AddressBook(tmp_path / "peers.json", (n1,))
    assert again.peers == {"n1": n1, "n4": n4}


def test_conf_change_context_carries_the_addresses() -> None:
    p = PeerConfig(
        id="n4", raft_addr="127.0.0.1:11", rpc_addr="127.0.0.1:12", http_addr="127.0.0.1:13",
        admin_addr="127.0.0.1:14",
    )
    assert peer_from_context(peer_context(p)) == p
    assert peer_from_context(b"\xc1garbage") is None


def test_a_peers_http_address_for_members_travels_only_when_set_so_an_older_node_reads_the_rest(tmp_path: Path) -> None:
    """``peer_http_addr`` is left out of the book's file and of the conf-change context when it is not
    set: a node of the version before, which builds a PeerConfig from exactly the five fields it
    knows, reads what this version writes for such a peer."""
    plain = PeerConfig(id="n4", raft_addr="127.0.0.1:11", rpc_addr="127.0.0.1:12", http_addr="127.0.0.1:13")
    inner = PeerConfig(id="n5", raft_addr="n5:1", rpc_addr="n5:2", http_addr="127.0.0.1:18085",
                       peer_http_addr="molens-n5:18081")
    known = {"id", "raft_addr", "rpc_addr", "http_addr", "admin_addr"}
    assert set(msgpack.unpackb(peer_context(plain))) == known
    assert msgpack.unpackb(peer_context(inner))["peer_http_addr"] == "molens-n5:18081"
    assert peer_from_context(peer_context(inner)) == inner
    book = AddressBook(tmp_path / "peers.json", ())
    book.update(plain)
    book.update(inner)
    stored = json.loads((tmp_path / "peers.json").read_text())
    assert set(stored["n4"]) == known and stored["n5"]["peer_http_addr"] == "molens-n5:18081"
    assert AddressBook(tmp_path / "peers.json", ()).peers == {"n4": plain, "n5": inner}


def test_batch_reports_once_and_unknown_outcome_wins_over_refusal() -> None:
    calls: list[tuple[list[Any], BaseException | None]] = []
    batch = BatchOutcome(3, lambda results, err: calls.append((results, err)))
    slots = [BatchSlot(batch, i) for i in range(3)]
    slots[0].set_result("r0")
    slots[1].set_exception(ProposalRefused("x"))
    assert not calls
    slots[2].set_exception(LeadershipLost("y"))
    slots[2].set_result("ignored: already done")
    assert len(calls) == 1
    results, err = calls[0]
    assert results[0] == "r0" and isinstance(err, LeadershipLost)
    ok: list[tuple[list[Any], BaseException | None]] = []
    b2 = BatchOutcome(2, lambda results, err: ok.append((results, err)))
    BatchSlot(b2, 1).set_result(True)
    BatchSlot(b2, 0).set_result(False)
    assert ok == [([False, True], None)]
