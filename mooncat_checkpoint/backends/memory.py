"""``memory://``: dicts behind one lock, private to the client that opened it; for tests and demos."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from typing import TypeVar

from mooncat_checkpoint.model import UnreadableRecord
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["MemoryBackend"]

T = TypeVar("T")


class MemoryBackend:
    blocking = False
    durability = "none (process memory; gone when the client is)"

    def __init__(self) -> None:
        self._spaces: dict[str, dict[str, StoredRecord]] = {}
        self._floors: dict[str, int] = {}
        self._lock = threading.Lock()

    def transact(self, namespace: str, key: str, decide: Callable[[StoredRecord | None, int], Decision[T]]) -> T:
        with self._lock:
            space = self._spaces.get(namespace)
            current = None if space is None else space.get(key)
            d = decide(current, self._floors.get(namespace, 0) if current is None else 0)
            if d.write is not None:
                if space is None:
                    space = self._spaces[namespace] = {}
                space[key] = d.write
            elif d.delete and current is not None and space is not None:
                if current.fence > self._floors.get(namespace, 0):
                    self._floors[namespace] = current.fence
                del space[key]
            return d.value

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        with self._lock:
            space = self._spaces.get(namespace)
            return None if space is None else space.get(key)

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        with self._lock:
            space = self._spaces.get(namespace)
            records = [] if space is None else list(space.values())
        records.sort(key=lambda r: r.key)
        return records

    def list_readable(self, namespace: str) -> tuple[builtins.list[StoredRecord], builtins.list[UnreadableRecord]]:
        return self.list(namespace), []  # a record here always reads

    def namespaces(self) -> builtins.list[str]:
        with self._lock:
            return sorted(ns for ns, space in self._spaces.items() if space)

    def raise_floor(self, namespace: str, fence: int) -> None:
        with self._lock:
            if fence > self._floors.get(namespace, 0):
                self._floors[namespace] = fence

    def clean_debris(self) -> None:
        pass

    def discard(self, namespace: str, key: str) -> bool:
        """(A record here always reads: the plain delete of ``reset``.)"""
        space = self._spaces.get(namespace)
        return space is not None and space.pop(key, None) is not None

    def close(self) -> None:
        with self._lock:
            self._spaces.clear()
