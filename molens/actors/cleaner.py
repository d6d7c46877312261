"""Cleaner: the leader actor that deletes done/failed/inactive tasks after retention, rate limited.

Owns an :class:`ExpiryScan`. Receives ``Wake`` (its alarm, once a second) and ``ExpireDone`` (the
outcome of its ``Expire`` proposal, from the Raft thread). Sends ``Expire`` proposals. Runs on its
own pykka thread.

Once a second it asks the local replica for at most ``expire_rate_limit_qps`` terminal tasks last
updated more than ``task_retention_minutes`` ago (``TaskStore.scan_expirable``) and proposes them as
one ``Expire`` command; the machine deletes each only if it is still terminal and unchanged. When
there is no task to expire, it deletes dead letters older than ``dead_letter_retention_minutes``
(``TaskStore.scan_dead_before``) the same way, as one ``DeleteDeadLetters`` command; and when there is
none of those either, it trims the audit trail beyond ``audit.max_entries`` / ``audit.max_age_minutes``
(``TaskStore.audit_trim_point``) with one ``TrimAudit`` command, which every replica applies as the same
key-range delete. One proposal in flight at a time, so a slow log never lets the rate add up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from molens.actors.alarm import wall_ms
from molens.actors.messages import ExpireDone, Wake
from molens.actors.term import LeaderActor, TermContext
from molens.fsm.commands import DeleteDeadLetters, Expire, ExpireItem, TrimAudit
from molens.fsm.store import EntryResult

log = logging.getLogger(__name__)

INTERVAL_MS = 1_000


class ExpiryScan:
    """Which tasks to expire now, at most ``rate_limit_qps`` a second (pure but for ``scan``)."""

    def __init__(
        self, scan: Callable[[int, int], list[ExpireItem]], retention_minutes: int, rate_limit_qps: int,
        scan_dead: Callable[[int, int], list[str]] | None = None, dead_retention_minutes: int = 10_080,
        trim_audit: Callable[[int], int | None] | None = None,
    ) -> None:
        """``trim_audit(now_ms)`` is the log index before which the audit trail is past retention
        (``None``: nothing to trim)."""
        self._scan = scan
        self._trim_audit = trim_audit
        self._scan_dead = scan_dead
        self.dead_retention_ms = dead_retention_minutes * 60_000
        self.dead_expired = 0
        self._last: type[Expire] | type[DeleteDeadLetters] | type[TrimAudit] = Expire
        self.retention_ms = retention_minutes * 60_000
        self.rate = rate_limit_qps
        self.next_ms = 0
        self.busy = False
        self.expired = 0

    def next_deadline(self) -> int | None:
        return None if self.busy else self.next_ms

    def run(self, now_ms: int) -> Expire | DeleteDeadLetters | TrimAudit | None:
        """The command to propose now, if any (call ``done`` when it has an outcome)."""
        if self.busy or now_ms < self.next_ms:
            return None
        self.next_ms = now_ms + INTERVAL_MS
        items = self._scan(now_ms - self.retention_ms, self.rate)
        if items:
            self.busy, self._last = True, Expire
            return Expire(now_ms, tuple(items))
        ids = self._scan_dead(now_ms - self.dead_retention_ms, self.rate) if self._scan_dead else []
        if ids:
            self.busy, self._last = True, DeleteDeadLetters
            return DeleteDeadLetters(now_ms, tuple(ids))
        point = self._trim_audit(now_ms) if self._trim_audit else None
        if point is not None:
            self.busy, self._last = True, TrimAudit
            return TrimAudit(now_ms, point)
        return None

    @property
    def proposing_tasks(self) -> bool:
        """Whether the proposal in flight (or the last one) expires tasks, not dead letters."""
        return self._last is Expire

    def done(self, n: int) -> None:
        self.busy = False
        if self._last is Expire:
            self.expired += n
        elif self._last is DeleteDeadLetters:
            self.dead_expired += n


class Cleaner(LeaderActor):
    """The leader's cleaner actor (see the module docstring)."""

    name = "cleaner"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        a = ctx.audit
        self.scan = ExpiryScan(
            ctx.store.scan_expirable, ctx.cfg.task_retention_minutes, ctx.cfg.expire_rate_limit_qps,
            ctx.store.scan_dead_before, ctx.cfg.dead_letter_retention_minutes,
            lambda now: ctx.store.audit_trim_point(now, a.max_entries, a.max_age_minutes * 60_000, a.trim_batch),
        )

    def on_start(self) -> None:
        super().on_start()
        self.actor_ref.tell(Wake())

    def handle(self, message: Any) -> Any:
        if isinstance(message, ExpireDone):
            n = 0
            if message.error is None and message.results and isinstance(message.results[0], EntryResult):
                n = sum(1 for r in message.results[0].results if r is True)
            tasks = self.scan.proposing_tasks
            self.scan.done(n)
            self.stats.add(**{"expired" if tasks else "dead_letters_expired": n})
        elif not isinstance(message, Wake):
            return self.unexpected(message)
        if self.ended:
            return None
        cmd = self.scan.run(wall_ms())
        if cmd is not None:
            self.ctx.propose(cmd, self.outcome_to_self(ExpireDone))
        self.set_alarm(self.scan.next_deadline())
        return None


__all__ = ["Cleaner", "ExpiryScan"]
