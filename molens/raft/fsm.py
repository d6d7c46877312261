"""The state-machine interface the RaftPeer applies committed entries to.

In the spirit of hashicorp/raft's ``FSM``, batched: :meth:`StateMachine.apply_batch` gets committed
entries in index order and returns one result per entry. The contract that makes restarts cheap and
exactly-once:

* The FSM stores ``applied_index`` in the SAME write transaction as the state changes of the batch.
  After a restart the node replays only entries ``> applied_index()``; entries at or below it that
  are handed in again are skipped (result ``None``), never applied twice.
* Every entry advances ``applied_index``, including the leader's no-op (empty ``data``) and
  membership entries (``EntryKind.CONF_CHANGE``, result ``None``): the FSM never waits for them.
* A command that cannot be decoded or is invalid yields an error *result* and
  changes nothing; it must not raise, or one bad entry would stop every replica forever.
  :class:`FSMError` is raised only for caller bugs (a gap in indexes).
* :meth:`StateMachine.snapshot` writes a consistent copy of the state (at the applied index it
  returns) to a file; :meth:`StateMachine.restore` replaces the whole state with such a file.

Start-up rule for the node: if ``fsm.applied_index() < log.snapshot_meta().index`` the FSM is behind
the log's snapshot (a crash between installing a snapshot in the log and restoring the FSM, or an FSM
transaction lost to power failure after compaction): restore the FSM from
``LmdbLog.export_snapshot`` first, then replay the log after it.

Implementations: ``molens.fsm.store.TaskStore`` (the scheduler) and ``molens.kv.KVStateMachine``
(the replicated key-value FSM the Raft tests and benchmark drive).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from molens.raft.errors import FSMError
from molens.raft.log import Entry


class StateMachine(Protocol):
    """What the RaftPeer applies committed entries to (one owner thread, except :meth:`snapshot`,
    which a background thread may run while entries apply)."""

    def applied_index(self) -> int:
        """Index of the last entry whose effects are durable in the FSM (0 when empty)."""
        ...

    def apply_batch(self, entries: Sequence[Entry]) -> list[Any]:
        """Apply committed entries (increasing, contiguous indexes) atomically; one result each."""
        ...

    def snapshot(self, path: str | os.PathLike[str]) -> int:
        """Write a consistent copy of the state to ``path``; returns the applied index it reflects.
        Runs on a background thread, concurrently with :meth:`apply_batch` (one read transaction)."""
        ...

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Replace the whole state with a file made by :meth:`snapshot` (on any replica)."""
        ...

    def close(self) -> None: ...


__all__ = [
    "FSMError",
    "StateMachine",
]
