"""The part of an :class:`~molens.web.api_context.ApiContext` that reads this node's replica: the
task store (tasks, flows, meta, search, counts, audit trail, dead letters), the history, the settings
and new task ids. :class:`~molens.node_context.NodeContext` (a Raft node) and
:class:`~molens.web.local_context.LocalContext` (one process, no Raft) share it; each adds how it
proposes, leads and reports."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence

from molens import model
from molens.fsm.commands import FlowSettings
from molens.fsm.history import History
from molens.fsm.search import TaskIndex
from molens.fsm.store import TaskStore
from molens.model import Task
from molens.web.api_context import ApiSettings

SCAN_CHUNK = 256
"""Tasks (or due entries) read per store transaction while a scan is iterated."""


class StoreReads(abc.ABC):
    """Reads of the local replica; a subclass hands :meth:`__init__` its store, history and settings
    and says :meth:`now_ms`."""

    def __init__(self, store: TaskStore, history: History, settings: ApiSettings) -> None:
        self.store = store
        self.history = history
        self.settings = settings
        self.audit = self.dead_letters = store
        """The store holds the audit trail and the dead letters too."""
        self._ids = model.TaskIds()

    @abc.abstractmethod
    def now_ms(self) -> int:
        """This node's wall clock, epoch ms (new task ids embed it)."""

    def get_task(self, task_id: str) -> Task | None:
        return self.store.get_task(task_id)

    def get_idem(self, key: str) -> str | None:
        return self.store.get_idem(key)

    def scan_tasks(self, after: str = "") -> Iterator[Task]:
        return self.store.scan_tasks(after, chunk=SCAN_CHUNK)

    def scan_tasks_before(self, before: str = "") -> Iterator[Task]:
        return self.store.scan_tasks_before(before, chunk=SCAN_CHUNK)

    def scan_tasks_where(
        self, statuses: Sequence[str], scene: str | None, after: str = "", reverse: bool = False,
        namespaces: Iterable[str] | None = None,
    ) -> Iterator[Task]:
        return self.store.scan_tasks_where(statuses=statuses, scene=scene, after=after, reverse=reverse,
                                           namespaces=namespaces)

    def scan_due(
        self, after: tuple[int, str] | None = None, namespaces: Iterable[str] | None = None,
    ) -> Iterator[tuple[int, str]]:
        return self.store.scan_due(chunk=SCAN_CHUNK, after=after, namespaces=namespaces)

    def task_search(self) -> TaskIndex:
        return self.store.search

    def task_counts(self) -> dict[str, int]:
        return self.store.counts()

    def scan_flows(self) -> list[tuple[str, FlowSettings]]:
        return self.store.scan_flows()

    def get_flow(self, key: str) -> FlowSettings | None:
        return self.store.get_flow(key)

    def get_meta(self, key: str) -> bytes | None:
        return self.store.get_meta(key)

    def scan_meta(self, prefix: str) -> list[tuple[str, bytes]]:
        return self.store.scan_meta(prefix)

    def _task_namespace(self, task_id: str) -> str | None:
        t = self.store.get_task(task_id)
        return None if t is None else t.namespace

    def new_task_id(self) -> str:
        return self._ids.new(self.now_ms())

    def new_task_ids(self, n: int) -> list[str]:
        return self._ids.new_many(self.now_ms(), n)


__all__ = ["SCAN_CHUNK", "StoreReads"]
