"""The leader's Dispatcher: due task ids -> ``Dispatched`` items -> (after commit) FireBatches.

Two halves, both run by the leader session's loop thread (:mod:`molens.scheduler`):

- :meth:`Dispatcher.plan` turns due task ids into :class:`DispatchItem` s (fire id, next attempt,
  worker, deadline) read from the local replica, skipping what is no longer due or already in
  flight. The session proposes them as one ``Dispatched`` entry per batch: nothing is sent before
  that entry commits under the session's own term (DESIGN §6: nothing fires unless planned).
  *Dispatch ahead*: a task counts as due ``lead_ms`` (``scheduler.dispatch_lead_ms``) before its due
  time, so the commit happens while the fire waits; the worker holds it until the due time
  (``not_before_ms``), and its deadline counts from the due time: due + HTTP timeout +
  ``dispatch_timeout_ms``.
- :meth:`Dispatcher.send` groups the committed ``FireRequest`` effects by worker and sends one
  frame per worker (the local pool gets the list directly).

Workers are picked by smooth weighted round-robin (nginx's), weighted by each live worker's free
capacity: the local pool's as it is now, a remote node's as last reported (every results frame and
a heartbeat every ``REPORT_INTERVAL_S`` carry it) minus what was given to it since. A worker not
heard from for ``WORKER_LIVENESS_S`` is not used. With no capacity anywhere, ``plan`` keeps the
rest for later (the session retries them on its next loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from molens.delivery import FireRequest as WireFire
from molens.fsm.commands import DispatchItem
from molens.fsm.machine import FireRequest
from molens.model import Status, Task

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.5
WORKER_LIVENESS_S = 2.5


@dataclass(slots=True)
class _Worker:
    free: int
    seen: float
    given: int = 0
    current: int = 0


def to_wire(e: FireRequest) -> WireFire:
    """The worker's FireRequest for a committed fire effect."""
    f = e.fire
    return WireFire(
        f.fire_id, f.task_id, f.attempt, f.kind, e.url, e.body, e.scene, e.timeout_ms, f.deadline_ms, e.not_before_ms
    )


class Dispatcher:
    """Plans fires and picks workers (see the module docstring)."""

    def __init__(
        self,
        node_id: str,
        get_task: Callable[[str], Task | None],
        local_free: Callable[[], int],
        dispatch_timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self._get_task = get_task
        self._local_free = local_free
        self.dispatch_timeout_ms = dispatch_timeout_ms
        self._clock = clock
        self._workers: dict[str, _Worker] = {}
        self.planned = 0
        self.skipped = 0
        self.lags: list[float] = []
        """due -> planned, ms, of the items of the last ``plan`` call."""

    def report(self, worker: str, free: int) -> None:
        """A worker's free capacity as it just reported it."""
        w = self._workers.get(worker)
        if w is None:
            self._workers[worker] = _Worker(free, self._clock())
        else:
            w.free, w.seen, w.given = free, self._clock(), 0

    def live_workers(self) -> dict[str, int]:
        """Worker id -> estimated free capacity, for every live worker (this node included)."""
        now = self._clock()
        out = {self.node_id: max(0, self._local_free() - self._given(self.node_id))}
        for wid, w in list(self._workers.items()):  # a copy: the API thread reads it too (stats)
            if wid != self.node_id and now - w.seen <= WORKER_LIVENESS_S:
                out[wid] = max(0, w.free - w.given)
        return out

    def _given(self, wid: str) -> int:
        w = self._workers.get(wid)
        return w.given if w is not None else 0

    def plan(
        self, task_ids: Iterable[str], now_ms: int, limit: int, lead_ms: int = 0
    ) -> tuple[list[DispatchItem], list[str]]:
        """Items to propose for ``task_ids`` due by ``now_ms + lead_ms`` (at most ``limit``), and the
        ids left for later."""
        due_by = now_ms + lead_ms
        caps = self.live_workers()
        total = sum(caps.values())
        items: list[DispatchItem] = []
        later: list[str] = []
        lags: list[float] = []
        self.lags = lags
        get = self._get_task
        for tid in task_ids:
            if len(items) >= limit or total <= 0:
                later.append(tid)
                continue
            t = get(tid)
            if t is None or t.due_ms is None or t.due_ms > due_by or t.inflight is not None:
                self.skipped += 1
                continue
            if t.status is Status.AWAITING_ACK:
                attempt = t.ack_attempt + 1
            elif t.status in (Status.PENDING, Status.FIRING):
                attempt = t.attempt + 1
            else:
                self.skipped += 1
                continue
            wid = self._pick(caps, total)
            caps[wid] -= 1
            total -= 1
            at = max(now_ms, t.due_ms)
            deadline = at + t.spec.timeout_ms + self.dispatch_timeout_ms
            items.append(DispatchItem(t.fire_id, tid, attempt, wid, deadline))
            lags.append(now_ms - t.due_ms)
        self.planned += len(items)
        return items, later

    def _pick(self, caps: dict[str, int], total: int) -> str:
        """Smooth weighted round-robin over ``caps`` (weights = free capacity)."""
        best: _Worker | None = None
        best_id = self.node_id
        for wid, cap in caps.items():
            if cap <= 0:
                continue
            w = self._workers.get(wid)
            if w is None:
                w = self._workers[wid] = _Worker(0, self._clock())
            w.current += cap
            if best is None or w.current > best.current:
                best, best_id = w, wid
        assert best is not None
        best.current -= total
        best.given += 1
        return best_id

    def settle(self, items: Iterable[DispatchItem]) -> None:
        """Planned items that will not be sent after all (refused): give their capacity back."""
        for it in items:
            w = self._workers.get(it.worker)
            if w is not None and w.given > 0:
                w.given -= 1

    def sent_local(self, n: int) -> None:
        """``n`` fires went to the local pool: its live free capacity now counts them."""
        w = self._workers.get(self.node_id)
        if w is not None:
            w.given = max(0, w.given - n)

    @staticmethod
    def group(effects: Iterable[FireRequest]) -> dict[str, list[WireFire]]:
        """Committed fire effects grouped by the worker they were planned for."""
        out: dict[str, list[WireFire]] = {}
        for e in effects:
            out.setdefault(e.fire.worker, []).append(to_wire(e))
        return out


__all__ = ["REPORT_INTERVAL_S", "WORKER_LIVENESS_S", "Dispatcher", "to_wire"]
