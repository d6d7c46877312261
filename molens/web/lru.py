"""A map that keeps at most ``max_items`` keys, forgetting the least recently written first: what the
API remembers per client (connection, address) stays bounded however many clients come and go."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedLru(Generic[K, V]):
    """``put`` makes a key the newest and drops the oldest past ``max_items``; ``get`` does not
    reorder. Not thread-safe: its owner reads and writes it under its own lock, e.g.::

        seen = BoundedLru[str, int](2)
        seen.put("a", 1); seen.put("b", 2); seen.put("a", 3); seen.put("c", 4)
        seen.get("b")  # None: "b" was the least recently written when "c" came
    """

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._items: OrderedDict[K, V] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)


__all__ = ["BoundedLru"]
