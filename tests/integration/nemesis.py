"""The faults ``scripts/chaos`` injects into a real cluster, one at a time, each healed within a bound.

=============  ==================================================================================
kind           what it does (``D`` = its duration, drawn from the run's seed)
=============  ==================================================================================
``kill``       kill -9 of the leader or of a follower; started again after D = 1-3 s
``freeze``     SIGSTOP of the leader for D = 2-4 s, then SIGCONT
``restart``    a graceful stop and start of any node
``partition``  for D = 3-8 s, in network namespaces (``netns.py``): the leader or a follower cut from
               both others (a minority of one against a majority of two); ``bridge``: the leader and
               one follower cut from each other, the third node still reaching both; ``one_way``: the
               leader's packets to both followers dropped, or both followers' packets to the leader
               (silently: a TCP connection then carries data one way until its sender waits for
               acknowledgements that never come). Then every link heals
``clock``      one node's clock jumps by 2-30 s either way for D = 3-8 s, or is skewed by 100-450 ms
               (under ``raft.max_clock_skew_ms``) for D = 5-10 s; then back (the admin ``fault`` command)
``fulldisk``   the disk of the leader or of a follower (every node's ``data_dir`` is on a tmpfs of its
               own from the start) filled to ENOSPC for D = 3-8 s, then freed
``slowdisk``   every fsync of one node (Raft log commits, snapshots) delayed 50-400 ms for D = 4-8 s
=============  ==================================================================================

Kinds are dealt like cards: every kind once per round, each round in a seeded order, so a short run
still has every kind and a long one about as many of each. :class:`Nemesis` records when each fault
began and ended (:class:`Fault`); a partition's window is what :mod:`tests.integration.chaos` leaves out
of its periodic-gap bound.
"""

from __future__ import annotations

import contextlib
import enum
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from molens.admin import AdminError

from .conftest import Cluster, NodeProc
from .netns import NetnsLab, NsCluster
from .tmpfs import Tmpfs


class Kind(enum.StrEnum):
    KILL = "kill"
    FREEZE = "freeze"
    RESTART = "restart"
    PARTITION = "partition"
    CLOCK = "clock"
    FULLDISK = "fulldisk"
    SLOWDISK = "slowdisk"


ALIASES = {"disk": Kind.FULLDISK}
"""Other names ``--nemesis`` takes."""


def parse_kinds(spec: str) -> tuple[Kind, ...]:
    """``all`` or a comma list of kinds (``kill,freeze,partition,clock,disk,slowdisk``), in :class:`Kind` order."""
    if spec.strip() == "all":
        return tuple(Kind)
    names = {s.strip() for s in spec.split(",") if s.strip()}
    bad = sorted(n for n in names if n not in ALIASES and n not in Kind.__members__.values())
    if bad or not names:
        raise ValueError(f"unknown nemesis {', '.join(bad) or '(none)'}: choose all or from {', '.join(Kind)}, disk")
    chosen = {ALIASES.get(n) or Kind(n) for n in names}
    return tuple(k for k in Kind if k in chosen)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault as it struck: which kind and variant (``isolate_leader``, ``jump+4000ms``, ...), on
    which nodes, from ``start_ms`` until it was healed at ``end_ms`` (epoch ms; the cluster may need
    a moment more to serve again)."""

    kind: Kind
    variant: str
    nodes: tuple[str, ...]
    start_ms: int
    end_ms: int

    def describe(self, t0_ms: int) -> str:
        return f"{self.kind}/{self.variant}:{'+'.join(self.nodes)}@{(self.start_ms - t0_ms) / 1000:.1f}s"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Nemesis:
    """Runs one fault at a time on ``cluster`` (:meth:`strike`); ``lab`` is needed for partitions,
    ``disks`` (node id -> the tmpfs under its data) for full disks."""

    def __init__(
        self, cluster: Cluster, rng: random.Random, kinds: tuple[Kind, ...], *,
        lab: NetnsLab | None = None, disks: dict[str, Tmpfs] | None = None,
    ) -> None:
        if Kind.PARTITION in kinds and (lab is None or not isinstance(cluster, NsCluster)):
            raise ValueError("partitions need the nodes in network namespaces")
        if Kind.FULLDISK in kinds and set(disks or {}) != set(cluster.nodes):
            raise ValueError("a full disk needs every node's data_dir on a tmpfs")
        self.c, self.rng, self.kinds = cluster, rng, kinds
        self.lab, self.disks = lab, disks or {}
        self.faults: list[Fault] = []
        self._deck: list[Kind] = []

    def _draw(self) -> Kind:
        if not self._deck:
            self._deck = list(self.kinds)
            self.rng.shuffle(self._deck)
        return self._deck.pop()

    def strike(self) -> Fault:
        """One fault, held for its duration and healed; returns it (also kept in :attr:`faults`)."""
        kind = self._draw()
        leader = self.c.leader(timeout=60)
        followers = [n for n in self.c.nodes.values() if n is not leader]
        start = _now_ms()
        run: Callable[[NodeProc, list[NodeProc]], tuple[str, tuple[str, ...]]] = getattr(self, f"_{kind}")
        variant, nodes = run(leader, followers)
        fault = Fault(kind, variant, nodes, start, _now_ms())
        self.faults.append(fault)
        return fault

    def heal(self) -> None:
        """Undo whatever a fault interrupted midway left (every link up, disk space back, clocks and
        disks normal, no node stopped); safe to call at any time."""
        if self.lab is not None:
            self.lab.heal_all()
        for d in self.disks.values():
            d.free()
        for n in self.c.nodes.values():
            if n.running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(n.pid, signal.SIGCONT)

    def _hold(self, lo: float, hi: float) -> None:
        time.sleep(self.rng.uniform(lo, hi))  # the fault's own duration

    # --- the kinds ---------------------------------------------------------------------------------
    def _kill(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        which = self.rng.choice(("leader", "follower"))
        victim = leader if which == "leader" else self.rng.choice(followers)
        victim.kill()
        self._hold(1.0, 3.0)
        victim.start()
        return which, (victim.node_id,)

    def _freeze(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        os.kill(leader.pid, signal.SIGSTOP)
        try:
            self._hold(2.0, 4.0)
        finally:
            os.kill(leader.pid, signal.SIGCONT)
        return "leader", (leader.node_id,)

    def _restart(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        victim = self.rng.choice([leader, *followers])
        victim.stop()
        victim.start()
        return "leader" if victim is leader else "follower", (victim.node_id,)

    def _partition(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        assert self.lab is not None and isinstance(self.c, NsCluster)
        ix = self.c.index
        variant = self.rng.choice(("isolate_leader", "isolate_follower", "bridge", "one_way_from_leader",
                                   "one_way_to_leader"))
        other = self.rng.choice(followers)
        if variant == "isolate_leader":
            self.lab.isolate(ix(leader))
            nodes: tuple[str, ...] = (leader.node_id,)
        elif variant == "isolate_follower":
            self.lab.isolate(ix(other))
            nodes = (other.node_id,)
        elif variant == "bridge":
            self.lab.cut(ix(leader), ix(other))
            nodes = (leader.node_id, other.node_id)
        else:
            for f in followers:
                src, dst = (leader, f) if variant == "one_way_from_leader" else (f, leader)
                self.lab.one_way(ix(src), ix(dst))
            nodes = (leader.node_id,)
        try:
            self._hold(3.0, 8.0)
        finally:
            self.lab.heal_all()
        return variant, nodes

    def _clock(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        victim = self.rng.choice([leader, *followers])
        sign = self.rng.choice((-1, 1))
        if self.rng.random() < 0.5:
            offset, variant, hold = sign * self.rng.randint(2_000, 30_000), "jump", (3.0, 8.0)
        else:
            offset, variant, hold = sign * self.rng.randint(100, 450), "skew", (5.0, 10.0)
        victim.call("fault", clock_offset_ms=offset)
        try:
            self._hold(*hold)
        finally:
            _undo(victim, clock_offset_ms=0)
        return f"{variant}{offset:+d}ms", (victim.node_id,)

    def _fulldisk(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        which = self.rng.choice(("leader", "follower"))
        victim = leader if which == "leader" else self.rng.choice(followers)
        disk = self.disks[victim.node_id]
        disk.fill()
        try:
            self._hold(3.0, 8.0)
        finally:
            disk.free()
        return which, (victim.node_id,)

    def _slowdisk(self, leader: NodeProc, followers: list[NodeProc]) -> tuple[str, tuple[str, ...]]:
        victim = self.rng.choice([leader, *followers])
        delay = self.rng.randint(50, 400)
        victim.call("fault", sync_delay_ms=delay)
        try:
            self._hold(4.0, 8.0)
        finally:
            _undo(victim, sync_delay_ms=0)
        return f"{delay}ms", (victim.node_id,)


def _undo(n: NodeProc, **fault: int) -> None:
    """Switch a fault off on ``n``; a node that died meanwhile restarts without it."""
    try:
        n.call("fault", **fault)
    except AdminError:
        if n.running:
            raise


__all__ = ["ALIASES", "Fault", "Kind", "Nemesis", "parse_kinds"]
