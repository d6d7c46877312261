"""ClockGate and ClockProbe (molens/actors/clockprobe.py): a verdict holds only for the clock it judged
(docs/architecture.md#clock-skew). A leader whose clock jumped 11 s ahead once planned every fire of
the next 11 s at once, and a periodic task's next occurrence from its wrong clock, before the next
500 ms round judged it: the gate now says no from the instant of the jump."""

from __future__ import annotations

import doctest
import time
from collections.abc import Callable, Iterator

import msgpack
import pytest

from molens import wallclock
from molens.actors import clockprobe
from molens.actors.clockprobe import ClockGate, ClockProbe, ProbeReply, readings
from molens.actors.messages import Wake
from molens.raft.clock import ClockState, ClockVerdict

VOTERS = ["n1", "n2", "n3"]


@pytest.fixture(autouse=True)
def _clock_back() -> Iterator[None]:
    yield
    wallclock.set_offset_ms(0)


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(clockprobe).failed == 0


def test_a_gate_holds_once_the_wall_clock_steps_past_the_bound_and_not_for_drift_within_it() -> None:
    g = ClockGate("n1", max_skew_ms=500)
    g.publish(ClockVerdict(ClockState.OK, ["n1", "n2"], {"n2": 0}, 0, ""), at=(100_000, 5_000))
    assert g.leading_ok(at=(100_400, 5_000))  # 400 ms of drift: within the bound
    assert not g.leading_ok(at=(99_000, 6_000))  # stepped back 2 s
    assert g.stepped_ms((99_000, 6_000)) == -2_000
    assert not ClockGate("n1", 500).leading_ok()  # no verdict yet
    assert ClockGate.always_ok().leading_ok()


class _Cluster:
    """Peers n2 and n3 whose clocks are right; probes are answered when :meth:`answer` is called."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def send(self, peer: str, frame: bytes) -> bool:
        self.sent.append((peer, int(msgpack.unpackb(frame[1:]))))
        return True

    def answer(self, probe: ClockProbe) -> None:
        true_now = readings()[0] - wallclock.offset_ms()
        for peer, sent in self.sent:
            probe.on_receive(ProbeReply(peer, sent, true_now, readings()[0]))
        self.sent.clear()


def _probe() -> tuple[ClockProbe, _Cluster]:
    peers = _Cluster()
    gate = ClockGate("n1", max_skew_ms=500)

    def judge(verdict: Callable[[list[str]], ClockVerdict]) -> tuple[list[str], ClockVerdict]:
        return VOTERS, verdict(VOTERS)

    return ClockProbe(gate, lambda: ["n2", "n3"], peers.send, judge), peers


def test_a_clock_that_jumps_plans_nothing_from_that_instant_and_is_judged_afresh() -> None:
    probe, peers = _probe()
    probe.on_receive(Wake())
    peers.answer(probe)
    probe.on_receive(Wake())
    assert probe.gate.leading_ok() and probe.gate.verdict is not None and probe.gate.verdict.ok

    assert not probe.gate.suspect()
    wallclock.set_offset_ms(11_000)  # the clock jumps 11 s ahead: no round has run since
    assert not probe.gate.leading_ok() and probe.gate.suspect()
    peers.answer(probe)  # answers to the probes of the clock before the jump: ignored
    probe.on_receive(Wake())  # the round drops the samples of the old clock
    assert probe.gate.verdict is not None and probe.gate.verdict.state is ClockState.UNKNOWN
    assert not probe.gate.leading_ok() and probe.gate.suspect()  # its worker times no fire on it
    peers.answer(probe)
    probe.on_receive(Wake())
    v = probe.gate.verdict
    assert v is not None and v.state is ClockState.SKEWED and not probe.gate.leading_ok()

    wallclock.set_offset_ms(0)  # back: judged afresh, and fine again
    assert not probe.gate.leading_ok()
    stale = list(peers.sent)
    probe.on_receive(Wake())
    for peer, sent in stale:  # answers to probes sent from the jumped clock are ignored
        probe.on_receive(ProbeReply(peer, sent, readings()[0], readings()[0]))
    assert probe.gate.verdict is not None and probe.gate.verdict.state is ClockState.UNKNOWN
    peers.answer(probe)
    assert probe.gate.leading_ok() and not probe.gate.suspect()  # an OK clock is usable at once


def test_the_probe_goes_on_probing_when_the_wall_clock_jumps_back() -> None:
    """Its rounds are timed on the monotonic clock: on the wall clock, a jump 15 s back put the next
    round 15 s off, and a leader whose clock was 15 s behind stayed leader (planning nothing) as long."""
    peers = _Cluster()
    gate = ClockGate("n1", max_skew_ms=500)
    ref = ClockProbe.start(gate, lambda: ["n2", "n3"], peers.send, lambda verdict: (VOTERS, verdict(VOTERS)))
    try:
        _poll(lambda: len(peers.sent) >= 2, "a first round")
        wallclock.set_offset_ms(-15_000)
        sent = len(peers.sent)
        _poll(lambda: len(peers.sent) >= sent + 4, "two more rounds after the jump")
    finally:
        ref.stop()


def test_a_probe_that_fails_stops_the_node() -> None:
    """Without its rounds the last verdict would stand for good (a clock that drifted after it would
    never be judged skewed): a failure of the probe is fatal, as a leader actor's is."""
    peers = _Cluster()
    gate = ClockGate("n1", max_skew_ms=500)
    failed: list[BaseException] = []

    def judge(verdict: Callable[[list[str]], ClockVerdict]) -> tuple[list[str], ClockVerdict]:
        raise RuntimeError("judge broke")

    ref = ClockProbe.start(gate, lambda: ["n2", "n3"], peers.send, judge, fatal=failed.append)
    try:
        _poll(lambda: bool(failed), "fatal call")
        assert str(failed[0]) == "judge broke"
    finally:
        if ref.is_alive():
            ref.stop()


def _poll(ok: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout_s} s")
        time.sleep(0.01)  # poll interval
