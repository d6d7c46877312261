"""The leader's Cleaner: deletes done/failed/inactive tasks after retention, rate limited.

Once a second (``run``) it asks the local replica for at most ``expire_rate_limit_qps`` terminal
tasks last updated more than ``task_retention_minutes`` ago (``TaskStore.scan_expirable``) and
returns them as one ``Expire`` command; the machine deletes each only if it is still terminal and
unchanged. One proposal in flight at a time, so a slow log never lets the rate add up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from molens.fsm.commands import Expire, ExpireItem

log = logging.getLogger(__name__)

INTERVAL_MS = 1_000


class Cleaner:
    def __init__(
        self,
        scan: Callable[[int, int], list[ExpireItem]],
        retention_minutes: int,
        rate_limit_qps: int,
    ) -> None:
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


__all__ = ["Cleaner"]
