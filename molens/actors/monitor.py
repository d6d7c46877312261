"""The leader's Monitor: a fire with no result by its deadline is a failed attempt (worker lost).

It watches every fire record the leader learns of -- those in ``fires`` when it took over
(``machine.reconcile_on_leadership``) and every ``FireRequest`` effect applied since, of any term
(a ``Dispatched`` entry of a previous leader that commits in this term is never sent, and must
still be given up). At a fire's ``deadline_ms`` it re-reads the record from the local replica: if
that same attempt is still in flight, :func:`machine.lost_result` goes into the results batch. The
machine then re-fires an at_least_once fire (same fire id, next attempt) and records an
at_most_once one as ``unknown``. Driven by the leader session's loop (``next_deadline``/``due``).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable

from molens.fsm.commands import ResultItem
from molens.fsm.machine import Fire, lost_result
from molens.model import FireKind

log = logging.getLogger(__name__)


class Monitor:
    """Deadline heap of in-flight fires (see the module docstring)."""

    def __init__(self, get_fire: Callable[[str], Fire | None]) -> None:
        self._get_fire = get_fire
        self._heap: list[tuple[int, str, int, FireKind]] = []
        self._open: dict[str, int] = {}
        """fire id -> attempt still waiting for a result (as far as this leader knows)."""
        self.lost = 0

    def watch(self, fires: Iterable[Fire]) -> None:
        for f in fires:
            self._open[f.fire_id] = f.attempt
            heapq.heappush(self._heap, (f.deadline_ms, f.fire_id, f.attempt, f.kind))

    def answered(self, fire_id: str) -> None:
        """A result for ``fire_id`` is on its way to the log: it no longer counts as in flight."""
        self._open.pop(fire_id, None)

    def attempt_of(self, fire_id: str) -> int | None:
        return self._open.get(fire_id)

    @property
    def in_flight(self) -> int:
        return len(self._open)

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int) -> list[ResultItem]:
        """Lost results for every watched fire past its deadline whose attempt is still in flight."""
        out: list[ResultItem] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, fid, attempt, kind = heapq.heappop(heap)
            cur = self._get_fire(fid)
            if cur is None or cur.attempt != attempt or cur.kind is not kind:
                if self._open.get(fid) == attempt:
                    del self._open[fid]
                continue
            self._open.pop(fid, None)
            log.warning("monitor: fire=%s attempt=%d kind=%s worker=%s lost", fid, attempt, kind, cur.worker)
            out.append(lost_result(cur))
        self.lost += len(out)
        return out


__all__ = ["Monitor"]
