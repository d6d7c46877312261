"""Carry out single attempts through either path a node uses: ``Deliverer.deliver`` (urllib3, the
https path and the ``threads`` engine) or the ``loop`` engine's FireLoop (``http://``), so the
delivery tests check both against the same server and the same expectations."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from molens.delivery import Deliverer, FireRequest, FireResult
from molens.delivery.pool import FirePool

PATHS = ("urllib3", "loop")


class Carrier:
    def __init__(self, path: str) -> None:
        self.path = path
        self._pools: dict[int, tuple[FirePool, Deliverer]] = {}
        self._cv = threading.Condition()
        self._results: dict[str, FireResult] = {}

    def _sink(self, batch: list[FireResult]) -> None:
        with self._cv:
            for r in batch:
                self._results[r.fire_id] = r
            self._cv.notify_all()

    def deliver(self, d: Deliverer, req: FireRequest) -> FireResult:
        """One attempt of ``req`` by ``d`` (one FirePool per Deliverer, kept: keep-alive is reused)."""
        if self.path == "urllib3":
            return d.deliver(req)
        entry = self._pools.get(id(d))
        if entry is None:
            pool = FirePool(d, 4, self._sink, flush_interval_ms=0.5, engine="loop", name="carrier")
            pool.start()
            self._pools[id(d)] = entry = (pool, d)
        with self._cv:
            self._results.pop(req.fire_id, None)
        assert entry[0].submit([req]).accepted == 1
        with self._cv:
            if not self._cv.wait_for(lambda: req.fire_id in self._results, timeout=30):
                raise AssertionError(f"no result for {req.fire_id} within 30 s")
            return self._results.pop(req.fire_id)

    def close(self) -> None:
        for pool, _ in self._pools.values():
            pool.stop(5)
        self._pools.clear()


@pytest.fixture(params=PATHS)
def carrier(request: pytest.FixtureRequest) -> Iterator[Carrier]:
    c = Carrier(str(request.param))
    try:
        yield c
    finally:
        c.close()
