"""An in-memory state store with the lmdb store's semantics, for tests and the simulator.

It applies the machine's writes exactly as ``store.py`` does (tasks, due index, fires, idempotency
keys, meta, execution rows), so a simulated replica's state can be digested and compared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import TypeVar

from molens.fsm import machine
from molens.fsm.commands import Command, ExpireItem, FlowSettings
from molens.fsm.machine import Applied, FireRecord, MachineConfig
from molens.model import TERMINAL_STATUSES, Execution, Task
from molens.schema import DeadLetter, Notice

K = TypeVar("K")
V = TypeVar("V")


def _put_or_delete(table: dict[K, V], writes: Mapping[K, V | None]) -> None:
    """Apply a table's writes as the store does: a value is put, None deletes the key."""
    for k, v in writes.items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v


class MemoryState:
    """Dict-backed ``ScanView`` plus ``apply``; keeps every execution row (tests bound their runs)."""

    def __init__(self, config: MachineConfig = machine.DEFAULT_CONFIG) -> None:
        self.config = config
        self.tasks: dict[str, Task] = {}
        self.fires: dict[str, FireRecord] = {}
        self.idem: dict[str, str] = {}
        self.meta: dict[str, bytes] = {}
        self.due: set[tuple[int, str]] = set()
        self.flows: dict[str, FlowSettings] = {}
        self.executions: list[Execution] = []
        self.dead: dict[str, DeadLetter] = {}
        self.outbox: dict[tuple[int, str], Notice] = {}
        self.not_fired: dict[str, int] = {}
        """Occurrences not fired, by ``machine.NOT_FIRED`` key (as ``TaskStore.not_fired`` counts them)."""

    def get_task(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)

    def get_fire(self, fire_id: str) -> FireRecord | None:
        return self.fires.get(fire_id)

    def get_idem(self, key: str) -> str | None:
        return self.idem.get(key)

    def get_flow(self, key: str) -> FlowSettings | None:
        return self.flows.get(key)

    def get_meta(self, key: str) -> bytes | None:
        return self.meta.get(key)

    def scan_meta(self, prefix: str) -> list[tuple[str, bytes]]:
        return sorted((k, v) for k, v in self.meta.items() if k.startswith(prefix))

    def scan_flow_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.flows if k.startswith(prefix))

    def get_dead(self, dead_id: str) -> DeadLetter | None:
        return self.dead.get(dead_id)

    def scan_due(self) -> Iterator[tuple[int, str]]:
        return iter(sorted(self.due))

    def read_due(self, start: tuple[int, str], until_ms: int, limit: int) -> list[tuple[int, str]]:
        """As ``TaskStore.read_due``: up to ``limit`` entries ``>= start`` due before ``until_ms``."""
        rows = [r for r in sorted(self.due) if r >= start and r[0] < until_ms]
        return rows[:limit]

    def scan_fires(self) -> Iterator[FireRecord]:
        return iter([self.fires[k] for k in sorted(self.fires)])

    def scan_expirable(self, updated_before_ms: int, limit: int) -> list[ExpireItem]:
        """As ``TaskStore.scan_expirable``: terminal tasks last updated before ``updated_before_ms``
        and without dead letters, oldest first."""
        held = {d.task_id for d in self.dead.values()}
        found = sorted((t.updated_ms, t.id) for t in self.tasks.values()
                       if t.status in TERMINAL_STATUSES and t.updated_ms < updated_before_ms and t.id not in held)
        return [ExpireItem(tid, ms) for ms, tid in found[:limit]]

    def apply(self, cmd: Command) -> Applied:
        out = machine.apply(self, cmd, config=self.config)
        self.write(out)
        return out

    def write(self, out: Applied) -> None:
        w = out.writes
        for tid, t in w.tasks.items():
            old = self.tasks.get(tid)
            if old is not None and old.wake_ms is not None:
                self.due.discard((old.wake_ms, tid))
            if t is None:
                self.tasks.pop(tid, None)
            else:
                self.tasks[tid] = t
                if t.wake_ms is not None:
                    self.due.add((t.wake_ms, tid))
        _put_or_delete(self.fires, w.fires)
        _put_or_delete(self.idem, w.idem)
        _put_or_delete(self.meta, w.meta)
        _put_or_delete(self.flows, w.flows)
        gone = set(w.history_deletes)
        if gone:
            self.executions = [e for e in self.executions if e.task_id not in gone]
            self.dead = {k: d for k, d in self.dead.items() if d.task_id not in gone}
        for n in w.notices:
            self.outbox[(n.at_ms, n.id)] = n
        for key in w.notices_acked:
            self.outbox.pop(key, None)
        _put_or_delete(self.dead, w.dead)
        self.executions.extend(w.executions)
        for reason, count in w.counts.items():
            self.not_fired[reason] = self.not_fired.get(reason, 0) + count

    def digest(self) -> str:
        """A hash of the replicated state (tasks, due, fires, idem, meta)."""
        h = hashlib.sha256()
        for tid in sorted(self.tasks):
            h.update(repr(self.tasks[tid]).encode())
        h.update(repr(sorted(self.due)).encode())
        h.update(repr([self.fires[k] for k in sorted(self.fires)]).encode())
        h.update(repr(sorted(self.idem.items())).encode())
        h.update(repr(sorted(self.meta.items())).encode())
        h.update(repr(sorted(self.dead.items())).encode())
        h.update(repr(sorted(self.outbox.items())).encode())
        if self.flows:
            h.update(repr(sorted(self.flows.items())).encode())
        return h.hexdigest()
