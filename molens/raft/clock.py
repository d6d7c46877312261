"""Clock agreement between the members of a cluster (docs/architecture.md#clock-skew).

The leader stamps ``now_ms`` into every command, so a leader whose clock is wrong fires everything
early or late by as much. Each node probes every peer with its clock reading and gets the peer's
reading back; :class:`ClockWatch` turns those round trips into an estimate of each peer's offset
(NTP's rule: the peer read its clock half a round trip after ours, so
``offset = t_peer - (t_sent + t_received) / 2``, the sample with the shortest round trip of the
recent ones being the best) and :meth:`ClockWatch.verdict` says whether this node's clock agrees,
within ``max_skew_ms``, with a majority of the voters (itself included). Pure: every time is given.

>>> w = ClockWatch("n1", max_skew_ms=500)
>>> w.sample("n2", sent_ms=1_000, peer_ms=61_005, received_ms=1_010, now_ms=1_010)  # n2 is 60 s ahead
>>> w.sample("n3", sent_ms=1_000, peer_ms=1_004, received_ms=1_008, now_ms=1_010)
>>> v = w.verdict(["n1", "n2", "n3"], now_ms=1_010)
>>> v.state, v.agree
(<ClockState.OK: 'ok'>, ['n1', 'n3'])
>>> w2 = ClockWatch("n2", max_skew_ms=500)
>>> w2.sample("n1", sent_ms=61_000, peer_ms=1_005, received_ms=61_010, now_ms=61_010)
>>> w2.sample("n3", sent_ms=61_000, peer_ms=1_006, received_ms=61_010, now_ms=61_010)
>>> w2.verdict(["n1", "n2", "n3"], now_ms=61_010).state
<ClockState.SKEWED: 'skewed'>
"""

from __future__ import annotations

import enum
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


class ClockState(enum.StrEnum):
    OK = "ok"
    """A majority of the voters (this node included) agree with this node's clock."""
    SKEWED = "skewed"
    """So many voters disagree that no majority can agree with this node's clock."""
    UNKNOWN = "unknown"
    """Not enough fresh estimates to say either."""


@dataclass(frozen=True, slots=True)
class ClockVerdict:
    state: ClockState
    agree: list[str]
    """Voters whose clock is within the bound of this node's (this node first)."""
    offsets_ms: dict[str, int]
    """Fresh offset estimates: peer's clock minus this node's, ms."""
    skew_ms: int
    """The median offset of the voters from this node (0 with no estimate)."""
    reason: str

    @property
    def ok(self) -> bool:
        return self.state is ClockState.OK


@dataclass(frozen=True, slots=True)
class _Sample:
    offset_ms: float
    rtt_ms: int
    at_ms: int


class ClockWatch:
    """Offset estimates of peers' clocks from probe round trips, and the majority verdict."""

    def __init__(self, node_id: str, max_skew_ms: int, samples: int = 8, fresh_ms: int = 5_000) -> None:
        self.node_id = node_id
        self.max_skew_ms = max_skew_ms
        self.fresh_ms = fresh_ms
        self._samples: dict[str, deque[_Sample]] = {}
        self._n = samples

    def sample(self, peer: str, sent_ms: int, peer_ms: int, received_ms: int, now_ms: int) -> None:
        """A probe sent at ``sent_ms`` (this clock), read by ``peer`` as ``peer_ms``, answered at
        ``received_ms``. A negative round trip (this clock stepped back) is ignored."""
        rtt = received_ms - sent_ms
        if rtt < 0 or peer == self.node_id:
            return
        q = self._samples.setdefault(peer, deque(maxlen=self._n))
        q.append(_Sample(peer_ms - (sent_ms + received_ms) / 2, rtt, now_ms))

    def offsets(self, now_ms: int) -> dict[str, int]:
        """Peer -> offset of its clock from this one (ms), from the shortest fresh round trip --
        unless the newest sample of a round trip under the bound is off from that one by more than
        the bound: the peer's clock stepped, and the older samples describe a clock that
        no longer exists (taking them, a leader gave fires for seconds to a worker 23 s behind)."""
        out: dict[str, int] = {}
        for peer, q in self._samples.items():
            fresh = [s for s in q if now_ms - s.at_ms <= self.fresh_ms]
            if fresh:
                best = min(fresh, key=lambda s: s.rtt_ms)
                newest = next((s for s in reversed(fresh) if s.rtt_ms <= self.max_skew_ms), best)
                if abs(newest.offset_ms - best.offset_ms) > self.max_skew_ms:
                    best = newest
                out[peer] = round(best.offset_ms)
        return out

    def verdict(self, voters: Sequence[str], now_ms: int) -> ClockVerdict:
        """Whether this node's clock agrees with a majority of ``voters`` (a non-voter's own clock
        counts for nothing: it still learns how far it is from them)."""
        offs = self.offsets(now_ms)
        quorum = len(voters) // 2 + 1
        agree = [self.node_id] if self.node_id in voters else []
        disagree: list[str] = []
        for v in voters:
            if v == self.node_id or v not in offs:
                continue
            (agree if abs(offs[v]) <= self.max_skew_ms else disagree).append(v)
        voter_offs = [offs[v] for v in voters if v in offs]
        skew = round(statistics.median(voter_offs)) if voter_offs else 0
        if len(agree) >= quorum:
            return ClockVerdict(ClockState.OK, agree, offs, skew, "")
        if len(voters) - len(disagree) < quorum:
            far = ", ".join(f"{v} {offs[v]:+d} ms" for v in disagree)
            reason = f"clock off from the majority by more than {self.max_skew_ms} ms ({far})"
            return ClockVerdict(ClockState.SKEWED, agree, offs, skew, reason)
        return ClockVerdict(ClockState.UNKNOWN, agree, offs, skew, "no clock estimate from a majority yet")


__all__ = ["ClockState", "ClockVerdict", "ClockWatch"]
