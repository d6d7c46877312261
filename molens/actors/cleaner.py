"""Cleaner: the leader actor that deletes done/failed/inactive tasks after retention, rate limited.

Owns an :class:`ExpiryScan`. Receives ``Wake`` (its alarm, once a second) and ``ExpireDone`` (the
outcome of its ``Expire`` proposal, from the Raft thread). Sends ``Expire`` proposals. Runs on its
own pykka thread.

Once a second it asks the local replica for at most ``expire_rate_limit_qps`` terminal tasks last
updated more than ``task_retention_minutes`` ago (``TaskStore.scan_expirable``) and proposes them as
one ``Expire`` command; the machine deletes each only if it is still terminal and unchanged. One
proposal in flight at a time, so a slow log never lets the rate add up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from molens.actors.alarm import wall_ms
from molens.actors.messages import ExpireDone, Wake
from molens.actors.term import LeaderActor, TermContext
from molens.fsm.commands import Expire, ExpireItem
from molens.fsm.store import EntryResult

log = logging.getLogger(__name__)

INTERVAL_MS = 1_000


class ExpiryScan:
    """Which tasks to expire now, at most ``rate_limit_qps`` a second (pure but for ``scan``)."""

    def __init__(self, scan: Callable[[int, int], list[ExpireItem]], retention_minutes: int, rate_limit_qps: int) -> None:
        self._scan = scan
        self.retention_ms = retention_minutes * 60_000
        self.rate = rate_limit_qps
        self.next_ms = 0
        self.busy = False
        self.expired = 0

    def next_deadline(self) -> int | None:
        return None if self.busy else self.next_ms

    def run(self, now_ms: int) -> Expire | None:
        """The Expire command to propose now, if any (call ``done`` when it has an outcome)."""
        if self.busy or now_ms < self.next_ms:
            return None
        self.next_ms = now_ms + INTERVAL_MS
        items = self._scan(now_ms - self.retention_ms, self.rate)
        if not items:
            return None
        self.busy = True
        return Expire(now_ms, tuple(items))

    def done(self, n: int) -> None:
        self.busy = False
        self.expired += n


class Cleaner(LeaderActor):
    """The leader's cleaner actor (see the module docstring)."""

    name = "cleaner"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        self.scan = ExpiryScan(ctx.store.scan_expirable, ctx.cfg.task_retention_minutes, ctx.cfg.expire_rate_limit_qps)

    def on_start(self) -> None:
        super().on_start()
        self.actor_ref.tell(Wake())

    def handle(self, message: Any) -> Any:
        if isinstance(message, ExpireDone):
            n = 0
            if message.error is None and message.results and isinstance(message.results[0], EntryResult):
                n = sum(1 for r in message.results[0].results if r is True)
            self.scan.done(n)
            self.stats.add(expired=n)
        elif not isinstance(message, Wake):
            return super().on_receive(message)
        if self.ended:
            return None
        cmd = self.scan.run(wall_ms())
        if cmd is not None:
            self.ctx.propose(cmd, self.outcome_to_self(ExpireDone))
        self.set_alarm(self.scan.next_deadline())
        return None


__all__ = ["Cleaner", "ExpiryScan"]
