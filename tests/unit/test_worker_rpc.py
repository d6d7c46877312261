"""Who may send what on worker RPC (molens.worker_rpc.refusal) and the term-stamped batch frame."""

from __future__ import annotations

import pytest

from molens.worker_rpc import batch_frame, refusal, split_batch


def why(tag: bytes, sender: str, frame_term: int | None = None, *, leader: str | None = "n1",
        removed: bool = False) -> str:
    """The refusal on a node that knows term 7, led by ``leader``, members n1..n3."""
    return refusal(tag, sender, frame_term=frame_term, term=7, leader=leader,
                   members=frozenset({"n1", "n2", "n3"}), removed=removed)


@pytest.mark.parametrize("term", [0, 1, 127, 128, 255, 256, 65_535, 65_536, 2**32 - 1, 2**32, 2**63])
def test_a_batch_frame_carries_its_term_and_the_batch_unchanged(term: int) -> None:
    frame = batch_frame(term, b"\x92batch")
    assert frame[:1] == b"B"
    assert split_batch(frame[1:]) == (term, b"\x92batch")


@pytest.mark.parametrize("body", [b"", b"\x92\xa4fire", b"\xcd\x01", b"\xa1x"])
def test_a_batch_frame_without_a_term_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        split_batch(body)


def test_a_fire_batch_is_taken_only_from_the_leader_of_the_term_this_node_knows() -> None:
    assert why(b"B", "n1", 7) == ""
    assert "not the leader" in why(b"B", "n2", 7)
    assert "older" in why(b"B", "n1", 6)
    assert "not reached" in why(b"B", "n2", 8)
    assert why(b"B", "n1", None)
    assert why(b"B", "n1", 7, leader=None)


def test_results_and_heartbeats_only_from_members_probes_from_anyone() -> None:
    for tag in (b"R", b"H"):
        assert why(tag, "n3") == ""
        assert "not a member" in why(tag, "n9")
    for tag in (b"T", b"t"):
        assert why(tag, "n9") == ""


def test_a_removed_node_takes_no_batch_result_or_heartbeat() -> None:
    for tag in (b"B", b"R", b"H"):
        assert "removed" in why(tag, "n1", 7, removed=True)
