"""A single-process :class:`~molens.web.api_context.ApiContext`: the real FSM without Raft.

Commands are encoded with the real codec, numbered as log entries and applied to a real
:class:`~molens.fsm.store.TaskStore` (lmdb) + :class:`~molens.fsm.history.History` (SQLite) by one
committer thread that groups whatever proposals are waiting into one ``apply_batch`` (one lmdb
transaction, like RaftPeer's group commit). It is what the REST tests, the ingest benchmark and
``python -m molens.web`` run on; nothing fires (there is no scheduler behind it).

Test hooks: :attr:`LocalContext.role` / :attr:`leader_url` make it answer as a follower
(``LeaderElsewhere``) or without a leader (``NoLeader``); :meth:`inject_fault` makes the next proposal
fail before applying (``no_leader``) or *after* applying (``unknown_after_apply``: the write
happened, the proposer sees ``OutcomeUnknown``) -- the lost-response case the SDK's idempotency
keys exist for.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from molens import model
from molens.fsm.commands import Command, encode
from molens.fsm.history import History
from molens.fsm.store import EntryResult, TaskStore
from molens.model import NotFoundError
from molens.raft.log import Entry
from molens.schedule.wheel import HierarchicalWheel
from molens.web.api_context import ApiSettings, LeaderInfo
from molens.web.errors import LeaderElsewhere, NoLeader, OutcomeUnknown, Unavailable
from molens.web.fire_series import Span
from molens.web.heatmap import WheelDistribution, distribution_of
from molens.web.metrics import MetricsSnapshot, NodeMetrics, pending_by_namespace
from molens.web.node_stats import DiskUsage, RecentFires, RequestRate, rss_bytes
from molens.web.store_reads import StoreReads

log = logging.getLogger(__name__)

MAX_GROUP = 1024
"""Most proposals applied in one lmdb transaction."""

class LocalContext(StoreReads):
    """Single-node ApiContext over a real store in ``data_dir`` (see the module docstring)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        settings: ApiSettings | None = None,
        *,
        durable: bool = False,
        history_max_records_per_task: int = 200,
    ) -> None:
        self.data_dir = Path(data_dir)
        history = History(self.data_dir / "history.sqlite", max_records_per_task=history_max_records_per_task)
        store = TaskStore(self.data_dir, history=history, durable=durable)
        super().__init__(store, history, settings or ApiSettings())
        self.role = "leader"
        """``leader`` applies; anything else refuses writes with LeaderElsewhere/NoLeader."""
        self.leader_url: str | None = None
        """The leader's HTTP base URL reported when :attr:`role` is not ``leader``."""
        self.leader_id: str | None = None
        self.term = 1
        self._index = self.store.applied_index()
        self._faults: collections.deque[str] = collections.deque()
        self._queue: collections.deque[tuple[list[bytes], Future[list[list[Any]]], str | None]] = (
            collections.deque()
        )
        self._cv = threading.Condition()
        self._closed = False
        self.proposals = 0
        self.batches = 0
        self._metrics: NodeMetrics | None = None
        self._requests = RequestRate()
        self._disk = DiskUsage(self.data_dir)
        self._recent = RecentFires(self.data_dir / "history.sqlite")
        self._wheel_cache: tuple[int, WheelDistribution] | None = None
        self._thread = threading.Thread(target=self._commit_loop, name="local-commit", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ ApiContext

    def leader_info(self) -> LeaderInfo:
        if self.role == "leader":
            return LeaderInfo(self.settings.node_id, None, self.term, "leader")
        return LeaderInfo(self.leader_id, self.leader_url, self.term, self.role)

    def inject_fault(self, kind: str) -> None:
        """Make the next proposal fail: ``no_leader`` (before applying) or ``unknown_after_apply``."""
        if kind not in ("no_leader", "unknown_after_apply"):
            raise ValueError(kind)
        with self._cv:
            self._faults.append(kind)

    def _leader_only(self) -> None:
        """Refuse what only a leader does: ``LeaderElsewhere`` when one is known, else ``NoLeader``."""
        if self.role != "leader":
            if self.leader_url:
                raise LeaderElsewhere(self.leader_url, self.leader_id)
            raise NoLeader()

    def propose(self, commands: Sequence[Command], timeout_s: float) -> list[list[Any]]:
        self._leader_only()
        datas = [encode(c) for c in commands]
        fut: Future[list[list[Any]]] = Future()
        with self._cv:
            if self._closed:
                raise Unavailable("node is stopping")
            fault = self._faults.popleft() if self._faults else None
            if fault == "no_leader":
                raise NoLeader()
            self._queue.append((datas, fut, fault))
            self._cv.notify()
        try:
            return fut.result(timeout=timeout_s)
        except FutureTimeout:
            raise OutcomeUnknown(f"proposal did not apply within {timeout_s:g} s; outcome unknown") from None

    def flow_states(self) -> None:
        """No scheduler runs here: no live figures."""
        return None

    def replicas_read(self, version: int) -> bool:
        """One replica, of this release."""
        return True

    def _opening(self, li: LeaderInfo) -> dict[str, Any]:
        """The members the status and the stats answers open with."""
        return {"node_id": self.settings.node_id, "role": li.role, "term": li.term, "leader_id": li.leader_id}

    def cluster_status(self) -> dict[str, Any]:
        li = self.leader_info()
        applied = self.store.applied_index()
        return {
            **self._opening(li),
            "leader_url": li.leader_url,
            "commit_index": applied,
            "applied_index": applied,
            "nodes": [
                {
                    "id": self.settings.node_id,
                    "role": li.role,
                    "suffrage": "voter",
                    "http_url": None,
                    "match_index": applied,
                }
            ],
            "mode": "local",
        }

    def transfer_leader(self, to: str | None) -> dict[str, Any]:
        self._leader_only()
        raise Unavailable("a single-process node has no other voter to hand leadership to")

    def cluster_stats(self) -> dict[str, Any]:
        return {"nodes": [{**self.stats(), "lag": 0}]}

    def stats(self) -> dict[str, Any]:
        li = self.leader_info()
        counts = self.store.counts()
        applied = self.store.applied_index()
        return {
            **self._opening(li),
            "tasks": counts,
            "tasks_total": sum(counts.values()),
            "dead_letters": self.store.dead_count(),
            "notifications": {"outbox": self.store.outbox_count()},
            "time_ms": self.now_ms(),
            "commit_index": applied,
            "applied_index": applied,
            **self._recent.summary(self.now_ms()),
            "qps": self._requests.per_s(),
            "rss_bytes": rss_bytes(),
            "disk": self._disk.get(),
            "proposals": self.proposals,
            "apply_batches": self.batches,
            "mode": "local",
        }

    def fire_series(self, span: Span, local: bool = False) -> dict[str, Any]:
        out = {**self.metrics().fires.series.to_json(span, self.now_ms()), "node_id": self.settings.node_id}
        return out if local else {**out, "nodes": [self.settings.node_id], "missing": []}

    def node_stats(self, node_id: str) -> dict[str, Any]:
        if node_id == self.settings.node_id:
            return self.stats()
        raise NotFoundError(f"node {node_id[:64]} is not in the cluster", "node_id")

    def wheel_distribution(self) -> WheelDistribution | None:
        """What a leader's wheel would hold: built from the store's due index (cached per applied
        index for a second; there is no scheduler in a LocalContext)."""
        now = self.now_ms()
        applied = self.store.applied_index()
        c = self._wheel_cache
        if c is not None and c[0] == applied and now - c[1].time_ms < 1000:
            return c[1]
        wheel: HierarchicalWheel[str] = HierarchicalWheel(start_ms=now)
        for due_ms, tid in self.store.scan_due():
            wheel.add(tid, due_ms)
        dist = distribution_of(wheel, now)
        self._wheel_cache = (applied, dist)
        return dist

    def metrics(self) -> NodeMetrics:
        with self._cv:
            if self._metrics is None:
                self._metrics = NodeMetrics(self._metrics_snapshot, self._task_namespace)
            return self._metrics

    def _metrics_snapshot(self) -> MetricsSnapshot:
        li = self.leader_info()
        applied = self.store.applied_index()
        return MetricsSnapshot(
            node_id=self.settings.node_id,
            role=li.role,
            tasks=(counts := self.store.counts()),
            namespaces=pending_by_namespace(self.store.scan_meta, counts, model.TERMINAL_STATUSES),
            raft={"term": li.term, "commit_index": applied, "applied_index": applied},
            queues={"proposals_waiting": len(self._queue)},
            history_rows=self._recent.rows(),
            disk_bytes={k.removesuffix("_bytes"): v for k, v in self._disk.get().items()},
        )

    def clock_problem(self) -> str:
        return ""  # one process, one clock

    def storage_problem(self) -> str:
        return ""

    def read_barrier(self, timeout_s: float) -> None:
        """One process applies every write before answering it: every read is linearizable."""

    def request_seen(self) -> None:
        self._requests.hit()

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    # ------------------------------------------------------------------ committer

    def _commit_loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue and self._closed:
                    return
                group = []
                n = 0
                while self._queue and n < MAX_GROUP:
                    item = self._queue.popleft()
                    group.append(item)
                    n += len(item[0])
            try:
                self._apply_group(group)
            except BaseException as exc:  # the store is unusable: fail loudly, every waiter sees it
                log.exception("local context apply failed")
                for _, fut, _ in group:
                    if not fut.done():
                        fut.set_exception(Unavailable(f"apply failed: {type(exc).__name__}"))

    def _apply_group(self, group: list[tuple[list[bytes], Future[list[list[Any]]], str | None]]) -> None:
        entries: list[Entry] = []
        for datas, _, _ in group:
            for d in datas:
                self._index += 1
                entries.append(Entry(self._index, self.term, data=d))
        results = self.store.apply_batch(entries)
        self.proposals += len(group)
        self.batches += 1
        pos = 0
        for datas, fut, fault in group:
            per_cmd: list[list[Any]] = []
            for _ in datas:
                r = results[pos]
                pos += 1
                per_cmd.append(r.results if isinstance(r, EntryResult) else [r])
            if fault == "unknown_after_apply":
                fut.set_exception(OutcomeUnknown())
            else:
                fut.set_result(per_cmd)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=10)
        self.store.close()


__all__ = ["LocalContext"]
