"""ClockWatch (molens/raft/clock.py): offsets from probe round trips and the majority verdict
(docs/architecture.md#clock-skew)."""

from __future__ import annotations

import doctest

from molens.raft import clock
from molens.raft.clock import ClockState, ClockWatch

VOTERS = ["n1", "n2", "n3"]


def _probe(w: ClockWatch, peer: str, offset: int, at: int, rtt: int = 4) -> None:
    w.sample(peer, sent_ms=at, peer_ms=at + rtt // 2 + offset, received_ms=at + rtt, now_ms=at + rtt)


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(clock).failed == 0


def test_the_offset_is_taken_from_the_shortest_round_trip() -> None:
    w = ClockWatch("n1", max_skew_ms=500)
    w.sample("n2", sent_ms=0, peer_ms=900, received_ms=1_000, now_ms=1_000)  # slow answer: +400 by NTP's rule
    w.sample("n2", sent_ms=2_000, peer_ms=2_102, received_ms=2_004, now_ms=2_004)  # fast: +100
    assert w.offsets(2_004) == {"n2": 100}


def test_a_node_agreeing_with_one_of_two_peers_is_ok_and_one_disagreeing_with_both_is_skewed() -> None:
    good = ClockWatch("n1", max_skew_ms=500)
    _probe(good, "n2", 0, 1_000)
    _probe(good, "n3", -60_000, 1_000)
    assert good.verdict(VOTERS, 1_010).state is ClockState.OK
    bad = ClockWatch("n3", max_skew_ms=500)
    _probe(bad, "n1", -60_000, 61_000)
    _probe(bad, "n2", -60_000, 61_000)
    v = bad.verdict(VOTERS, 61_010)
    assert v.state is ClockState.SKEWED and "n1 -60000 ms" in v.reason and v.skew_ms == -60_000


def test_without_fresh_estimates_the_clock_is_unknown_not_skewed() -> None:
    w = ClockWatch("n1", max_skew_ms=500, fresh_ms=5_000)
    assert w.verdict(VOTERS, 0).state is ClockState.UNKNOWN
    _probe(w, "n2", 10_000, 0)
    assert w.verdict(VOTERS, 10).state is ClockState.UNKNOWN  # n3 might still agree
    _probe(w, "n3", 10_000, 0)
    assert w.verdict(VOTERS, 10).state is ClockState.SKEWED
    assert w.verdict(VOTERS, 10_000).state is ClockState.UNKNOWN  # the estimates went stale


def test_a_single_node_agrees_with_itself_and_a_negative_round_trip_is_ignored() -> None:
    w = ClockWatch("n1", max_skew_ms=500)
    assert w.verdict(["n1"], 0).state is ClockState.OK
    w.sample("n2", sent_ms=1_000, peer_ms=5, received_ms=900, now_ms=900)
    assert w.offsets(900) == {}


def test_a_skew_at_the_bound_still_agrees() -> None:
    w = ClockWatch("n1", max_skew_ms=500)
    _probe(w, "n2", 500, 0)
    _probe(w, "n3", 501, 0)
    v = w.verdict(VOTERS, 10)
    assert v.state is ClockState.OK and v.agree == ["n1", "n2"]


def test_a_peer_whose_clock_stepped_is_seen_at_its_first_sample_after_the_step() -> None:
    w = ClockWatch("n1", max_skew_ms=500)
    for at in (1_000, 1_500, 2_000):
        w.sample("n2", sent_ms=at, peer_ms=at + 1, received_ms=at + 2, now_ms=at + 2)  # agrees, 2 ms round trips
    w.sample("n2", sent_ms=2_500, peer_ms=2_505 - 23_000, received_ms=2_510, now_ms=2_510)  # stepped 23 s back
    assert w.offsets(2_510) == {"n2": -23_000}
    w.sample("n2", sent_ms=3_000, peer_ms=3_000 + 2_000 - 23_000, received_ms=4_000, now_ms=4_000)  # a slow answer
    assert w.offsets(4_000) == {"n2": -23_000}  # a round trip over the bound changes nothing
