"""The node's :class:`~molens.web.api_context.ApiContext`: the REST app over RaftPeer + TaskStore.

- Writes: :meth:`NodeContext.propose` encodes the commands and proposes them together (one Raft
  append) and waits until they apply here, bounded by ``timeout_s``. Not the leader:
  :class:`~molens.web.errors.NotLeader` with the leader's HTTP URL (the app answers 307) or
  :class:`~molens.web.errors.NoLeader` (503 + Retry-After); appended then leadership lost, or no
  answer in time: :class:`~molens.web.errors.OutcomeUnknown` (the SDK retries with the same
  idempotency key); refused/stopping: :class:`~molens.web.errors.Unavailable`.
- Reads come from the local replica (the store and history of this node).
- Who leads is cached from RaftPeer's leadership notifications, so :meth:`leader_info` costs no
  actor round trip; a leader's HTTP URL comes from the config's peers or, for a node that joined
  later, from one ``status`` call, then cached.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from molens import model
from molens.actors import raft_peer as rp
from molens.config import Config
from molens.fsm.commands import Command, encode
from molens.fsm.history import History
from molens.fsm.store import EntryResult, TaskStore
from molens.model import Task
from molens.web.api_context import (
    ApiSettings,
    LeaderInfo,
    cluster_status_from_raft,
    http_url,
    settings_from_config,
)
from molens.web.errors import OutcomeUnknown, Unavailable, from_proposal_error

log = logging.getLogger(__name__)


class NodeContext:
    """ApiContext of a Raft node (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        peer: rp.RaftPeerHandle,
        store: TaskStore,
        history: History,
        extra_stats: Callable[[], dict[str, Any]] | None = None,
        settings: ApiSettings | None = None,
    ) -> None:
        self.cfg = cfg
        self.peer = peer
        self.store = store
        self._history = history
        self._settings = settings or settings_from_config(cfg)
        self._extra_stats = extra_stats
        self._urls: dict[str, str | None] = {p.id: http_url(p.http_addr) for p in cfg.initial_peers()}
        self._lock = threading.Lock()
        self._last = rp.LeaderChange(cfg.node.id, "follower", None, 0)
        self.stopping = False
        self.proposals = 0

    def start(self) -> NodeContext:
        self._on_change(self.peer.subscribe(self._on_change))
        return self

    def _on_change(self, ch: rp.LeaderChange) -> None:
        with self._lock:
            if ch.term >= self._last.term:
                self._last = ch

    # ------------------------------------------------------------------ ApiContext

    @property
    def settings(self) -> ApiSettings:
        return self._settings

    @property
    def history(self) -> History:
        return self._history

    def _leader_url(self, leader_id: str | None) -> str | None:
        if not leader_id:
            return None
        if leader_id not in self._urls:
            try:
                for p in self.peer.status().get("peers", []):
                    self._urls[p["id"]] = http_url(p.get("http_addr", ""))
            except Exception as exc:
                log.info("leader url lookup failed: %s", exc)
                return None
        return self._urls.get(leader_id)

    def leader_info(self) -> LeaderInfo:
        ch = self._last
        if ch.is_leader:
            return LeaderInfo(ch.node_id, self._leader_url(ch.node_id), ch.term, ch.role)
        return LeaderInfo(ch.leader_id, self._leader_url(ch.leader_id), ch.term, ch.role)

    def propose(self, commands: Sequence[Command], timeout_s: float) -> list[list[Any]]:
        if self.stopping:
            raise Unavailable("node is stopping")
        ch = self._last
        if not ch.is_leader:
            raise from_proposal_error(rp.NotLeader(ch.leader_id), self._leader_url)
        futs = self.peer.propose_many([encode(c) for c in commands])
        self.proposals += 1
        deadline = time.monotonic() + timeout_s
        out: list[list[Any]] = []
        for fut in futs:
            try:
                r = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                raise OutcomeUnknown(f"the write did not apply within {timeout_s:g} s; outcome unknown") from None
            except rp.RaftPeerError as exc:
                raise from_proposal_error(exc, self._leader_url) from exc
            out.append(r.results if isinstance(r, EntryResult) else [r])
        return out

    def get_task(self, task_id: str) -> Task | None:
        return self.store.get_task(task_id)

    def scan_tasks(self, after: str = "") -> Iterator[Task]:
        return self.store.scan_tasks(after, chunk=256)

    def task_counts(self) -> dict[str, int]:
        return self.store.counts()

    def cluster_status(self) -> dict[str, Any]:
        st = self.peer.status()
        for p in st.get("peers", []):
            self._urls.setdefault(p["id"], http_url(p.get("http_addr", "")))
        return cluster_status_from_raft(st)

    def cluster_stats(self) -> dict[str, Any]:
        return {"nodes": [self.stats()]}

    def stats(self) -> dict[str, Any]:
        li = self.leader_info()
        out: dict[str, Any] = {
            "node_id": self.cfg.node.id,
            "role": li.role,
            "term": li.term,
            "leader_id": li.leader_id,
            "applied_index": self.store.applied_index(),
            "tasks": self.store.counts(),
            "api_proposals": self.proposals,
        }
        if self._extra_stats is not None:
            out["scheduler"] = self._extra_stats()
        return out

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def new_task_id(self) -> str:
        return model.new_task_id(self.now_ms(), secrets.randbits(80))


__all__ = ["NodeContext"]
