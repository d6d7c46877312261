"""The messages a RaftPeer receives and the one it publishes.

Requests (``ask``; the reply is the value named in each class, or the exception raised to the asker):
each is handled on the actor thread *between* Ready cycles, under the group-commit rule of
:mod:`molens.actors.raft_peer` -- the proposals already taken are appended first, and a Ready cycle
runs right after the request, so what it changed (a transfer, a membership entry) goes out at once
rather than at the next tick. (Not pykka proxies: a proxy call is handled before ``on_receive`` and
would skip that rule.)

Events (``tell``, from the peer's own threads, but :class:`ProposalsReady`, which the handle sends
from the proposer's thread): :class:`Tick`, :class:`Inbound`, :class:`RemovedNotice`,
:class:`ProposalsReady`, :class:`SnapshotChecked`, :class:`SnapshotDone`.

Published: :class:`LeaderChange`, to subscribers, on every role or leader change.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from molens.config import PeerConfig
from molens.raft.clock import ClockVerdict
from molens.raft.log import SnapshotMeta
from molens.raft.storage import SnapshotFile

# --- published -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Published to subscribers whenever this node's role or the known leader changes."""

    node_id: str
    role: str
    leader_id: str | None
    term: int
    heard_ago_ms: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    """When this node becomes leader: how long ago it last heard a Raft message from each peer (a
    deposed leader's worker may be gone: docs/architecture.md#lost-workers)."""
    seq: int = field(default=0, compare=False)
    """Which change this is, counted by the publishing peer from 1 (0: the state before the first):
    a subscriber that also acts on :class:`Subscribe`'s answer, on another thread, tells a stale
    one from a newer change already delivered (an election between the two)."""

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"


Subscriber = Callable[[LeaderChange], None]


# --- requests (ask) ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """Reply: this node's Raft status (role, term, indexes, members and their addresses)."""


@dataclass(frozen=True, slots=True)
class RaftPeerStats:
    """Reply: the peer's counters, the log's, the transport's and the FSM's."""


@dataclass(frozen=True, slots=True)
class KnownPeers:
    """Reply: the address book, node id -> :class:`~molens.config.PeerConfig`."""


@dataclass(frozen=True, slots=True)
class TransferLeadership:
    """Hand leadership to ``to`` (None: the most caught-up live voter). Reply ``{"to": id}``;
    ``NotLeaderError`` on a follower, :class:`~molens.actors.peer_errors.NoTransferTarget` when
    there is nobody to hand over to."""

    to: str | None = None


@dataclass(frozen=True, slots=True)
class AddNode:
    """Add ``peer`` as a learner (promoted once caught up). Reply ``{"index", "already_member",
    "peers"}``; :class:`~molens.actors.peer_errors.MembershipRefused` for the leader itself or a
    member at another Raft address."""

    peer: PeerConfig


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """Propose the removal of ``node_id``. Reply ``{"index": ...}``."""

    node_id: str


@dataclass(frozen=True, slots=True)
class LearnPeers:
    """Dial these peers and keep their addresses in the address book (a joiner's first view)."""

    peers: tuple[PeerConfig, ...]


@dataclass(frozen=True, slots=True)
class ReloadKeys:
    """Re-read the CURVE public keys of the Raft port. Reply: what the transport reports."""


@dataclass(frozen=True, slots=True)
class SnapshotNow:
    """Take a snapshot now (or join the one running). Reply: a Future of ``{"index": ...}``."""


@dataclass(frozen=True, slots=True)
class ReadIndex:
    """A linearizable read barrier (Raft's ReadIndex). Reply: a Future of the read index, set once
    this node's FSM applied it; it fails with ``TimeoutError`` if no quorum confirms within
    ``timeout_s``."""

    timeout_s: float


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Call ``fn`` (on the actor thread; keep it quick) on every role or leader change. Reply: the
    current :class:`LeaderChange` (a caller acting on it on its own thread may do so after ``fn``
    heard a newer change: compare ``seq``)."""

    fn: Subscriber


class Condition(enum.StrEnum):
    """What a :class:`WaitUntil` waits for."""

    NOT_LEADER = "not_leader"


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Reply: a Future set to True once ``condition`` holds after a Ready cycle."""

    condition: Condition


@dataclass(frozen=True, slots=True)
class JudgeClock:
    """Judge this node's clock for the current voters and act on the verdict at once (a skewed
    node stops campaigning and steps down). Reply: ``(voters, verdict)``."""

    verdict_of: Callable[[list[str]], ClockVerdict]


@dataclass(frozen=True, slots=True)
class SnapshotMetaAt:
    """From the snapshot thread: the meta of a snapshot of the FSM copied at ``index``. Reply: the
    meta, or None when the log already holds a snapshot at or past it."""

    index: int


Request = (
    PeerStatus | RaftPeerStats | KnownPeers | TransferLeadership | AddNode | RemoveNode | LearnPeers | ReloadKeys
    | SnapshotNow | ReadIndex | Subscribe | WaitUntil | JudgeClock | SnapshotMetaAt
)
"""Every request a RaftPeer answers."""


# --- events (tell) -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    sent: float
    """time.monotonic() when the ticker queued it (tick delay = how far behind the actor runs)."""


@dataclass(frozen=True, slots=True)
class Inbound:
    frm: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class RemovedNotice:
    """From the transport: ``frm`` says this node is no longer a member."""

    frm: str


@dataclass(frozen=True, slots=True)
class ProposalsReady:
    """Wake-up: the ProposalQueue has work (at most one of these is queued at a time)."""


@dataclass(frozen=True, slots=True)
class SnapshotChecked:
    """From a snapshot check thread: a snapshot received from the leader, sealed in ``path``, was
    checked and compressed into ``sf`` (None: it failed the check, or ``error``)."""

    meta: SnapshotMeta
    path: Path
    sf: SnapshotFile | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class SnapshotDone:
    """From the snapshot thread: the file is written (or the attempt failed)."""

    meta: SnapshotMeta | None
    sf: SnapshotFile | None
    error: BaseException | None
    seconds: float
