"""The pure transition rules of the task state machine (docs/architecture.md#state-machine, #task-rules).

``apply(view, cmd)`` reads through ``view`` (the store's transaction, or a dict in tests) and
returns an :class:`Applied`: the *writes* to make (tasks, fires, idempotency keys, meta, execution
rows, history deletions), the *effects* for the leader's actors (wheel add/remove, fire requests),
and one *result* per command item for the proposer (REST 201/200/404/409 answers). It never reads
a clock: ``now_ms`` is the leader's stamp on the command, so every replica computes the same state.

Rules and timings decided here (all replicas must run the same :class:`MachineConfig`):

- **Dispatch protocol.** Nothing fires unless planned under the current term: the leader proposes
  ``Dispatched`` for a due task *before* sending, and sends only the items whose result is ``None``
  (accepted) in the :class:`SendFire` effects of that committed entry. An item is refused when the
  task is not due yet, is paused/terminal, already has a fire in flight (no overlapping
  occurrences but for ``overlap`` allow), or the fire id/attempt is stale. Accepting stores a fire
  record (``fires``) until a result arrives.
- **Dispatch ahead.** A task counts as due for ``Dispatched`` when its due time is at most
  ``MachineConfig.max_dispatch_lead_ms`` after the entry's ``now_ms``: the leader plans a fire up to
  ``scheduler.dispatch_lead_ms`` (<= that bound) early so the entry's commit is off the fire's
  critical path, and the ``SendFire`` carries ``not_before_ms`` (the due time) before which the
  worker must not send it. The bound is a code constant, not node config, so every replica accepts
  and refuses the same items. ``last_fire_ms`` is the later of the stamp and the due time, and
  with the entry's ``keeps_last_fire`` never earlier than before (an attempt settled lost before
  its due time may still go out then).
- **Results.** 2xx is ``success``; 404 on a callback is ``not_found``; any other status ``failed``;
  ``timeout`` and ``network_error`` as reported. ``Outcome.LOST`` is proposed by the Monitor when a
  fire's deadline passes without a result (worker or leader lost): for at_least_once it is a failed
  attempt (result ``lost``) that is fired again *immediately* with the same fire id and the next
  attempt number; for at_most_once it is recorded as ``unknown`` (maybe delivered, maybe not) and
  the fire is never sent again — a delayed task then ends ``failed``, a periodic one moves to its
  next occurrence without counting a failure (the endpoint did nothing wrong). A lost attempt
  counts against ``max_retries`` like any failed one. A result is applied only to the fire record
  it names (fire id, kind and, when the worker sends it, attempt): duplicates, results for deleted
  tasks and late results of an attempt already given up are answered ``NotFoundError`` and change
  nothing but the history: a late result of a lost attempt is recorded there (``_late_result``). Only the leader of the term that proposed a ``Dispatched`` entry sends its fires (see
  ``store.EntryResult.term``). A result marked ``not_sent`` for the attempt in flight (the fire never
  left its node, known for certain) is no attempt at all: :func:`_not_sent` plans the fire again,
  free, after :func:`not_sent_wait_ms`, with no history row (docs/architecture.md#not-sent).
- **Retries** (``_retry_or_end``, docs/architecture.md#retry-policy): at_least_once retries a
  failed attempt by the task's ``retry`` policy (by default after 1 s, 2 s, 4 s ...), measured from
  the result's ``now_ms``, at least until a 429/503's ``retry_after_ms``, while the attempts that
  count (``attempt - free_attempts``: throttled ones are free within ``max_throttle_ms``) are at most
  ``max_retries``. Then the occurrence has failed for good and leaves a dead letter: delayed ->
  ``failed``; periodic -> ``fail_count += 1`` and ``inactive`` once it reaches ``max_fails``, else
  the next occurrence. at_most_once never retries.
- **ACK phase** (delayed tasks with ``ack_url``): after the callback's 2xx the task is
  ``awaiting_ack`` and the probe is due ``ack_delay_ms`` later; it reuses the fire id, with
  ``X-Molens-Kind: ack``. 2xx -> ``done``; anything else retries after ``ack_delay_ms`` until
  ``ack_ttl`` (3) probes were made -> ``failed`` (result ``ack_failed``). A pause holds the probe;
  a resume sends it no sooner than ``ack_delay_ms`` after the wait began (``Task.ack_from_ms``).
- **Catch-up** (``catchup``): an occurrence is *missed* when its next instant is already due as it
  is about to start. ``one`` (default) fires it at once and it stands for the others; ``none``
  skips it and every passed instant (the task moves to its next instant not in the past); ``all``
  fires each passed instant in turn, oldest first, from ``catchup_window_ms`` back. Skipped
  instants are one ``skipped`` history row per decision.
- **Overlap** (``overlap``): instants that came due after the ending occurrence's first attempt
  was sent (``started_ms``) came due while it ran. ``skip`` (default) skips them with the missed
  ones; ``buffer_one`` makes the first of them the next occurrence, due at once and ``buffered``
  (catch-up does not skip it), and skips the instants missed before the start. ``catchup`` all
  fires every passed instant whatever ``overlap`` says. ``allow``: the occurrence leaves the task
  for ``Task.running`` when its first attempt is planned (:func:`_detach`) and the task moves on
  to its next occurrence at once; each running one has its own fire id, retries, dead letter and
  result (:func:`_dispatch_running`, :func:`_result_running`); at most ``MAX_RUNNING`` run at
  once, an instant due beyond that is skipped (:func:`_skip_running_full`; with ``catchup`` all it
  waits, ``Task.waiting``, when the entry says every replica reads ``catchup_waits``), and an occurrence that
  runs in the task's own slot instead (backfilled, redriven) waits while that many run
  (``Task.held``; due when one ends, :func:`_result_running`). The due index and the
  wheel key on ``Task.wake_ms``, the Dispatcher plans ``Task.actions(due_by)``.
- **Backfill** (``BackfillTask``): the schedule's instants in a past range fire now, oldest first,
  each its own occurrence, then the regular schedule resumes (:func:`_backfill`).
- **Periodic timing** is fixed-rate: the next occurrence is computed from the *scheduled* instant of
  the one that just ended (``sched_ms``), never from its completion, with
  ``cron.next_after_misfire``: the first schedule instant after it that is not in the past. An
  occurrence that fires late (the cluster was down, the wheel was being rebuilt) fires once, at
  once, and stands for every instant missed meanwhile; instants that pass while an occurrence is
  still firing or retrying follow ``overlap`` (skip: never overlapping, never a burst). Interval tasks are
  anchored at their creation time (``created + k * interval_ms``), cron tasks follow
  ``cron.next_cron_fire`` in their time zone (DST rules there).
- **Pause** (from pending, firing, awaiting_ack) drops the due entry and keeps everything else; a
  fire already in flight still reports, and its result is recorded (a delayed task that succeeds
  while paused is ``done``). A fire planned ahead (dispatch ahead) is in flight from its commit, so a
  pause or delete less than the dispatch lead before the due time does not stop that fire.
  **Resume** (from paused, and from inactive for periodic tasks, which also resets ``fail_count``)
  recomputes the next run: a delayed task fires at its time or now if that has passed; a periodic
  task that was between occurrences skips what it missed while paused and continues at its next
  scheduled instant (``resume_from: schedule``: it takes up the instant it was waiting for, and
  what it missed follows its ``catchup``); a retry chain continues now, an ACK phase now but not
  before ``ack_delay_ms`` after its wait began. **Trigger** (from pending, with nothing in flight;
  an overlap allow task: none of its running occurrences sent ahead of its instant) moves the
  upcoming occurrence to now; for a periodic task the schedule then continues at the next regular
  instant, so the trigger adds one occurrence.
  **Delete** removes the task, its fire record, idempotency key and history.
- **Idempotency keys**: a create whose key is already known answers the existing task (200).
- **Expire** deletes a task only if it is still terminal and unchanged since the Cleaner looked.
"""

from __future__ import annotations

import collections
import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from molens.fsm import audit, tenancy
from molens.fsm.commands import (
    AckNotices,
    Audited,
    AuditNote,
    BackfillTask,
    Command,
    CreateItem,
    CreateTasks,
    DeleteApiKey,
    DeleteDeadLetters,
    DeleteFlow,
    DeleteNamespace,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    ExpireItem,
    FlowNotices,
    FlowSettings,
    PauseTasks,
    PutApiKey,
    PutFlow,
    PutMeta,
    PutNamespace,
    RedriveDeadLetters,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
    TrimAudit,
    UpdateTask,
)
from molens.model import (
    TERMINAL_STATUSES,
    CatchUp,
    Execution,
    ExecutionResult,
    FailureKind,
    FireKind,
    IllegalTransitionError,
    MolensError,
    NotFoundError,
    Outcome,
    Overlap,
    PreconditionFailed,
    QuotaExceeded,
    Reliability,
    Status,
    Task,
    TaskType,
    ValidationError,
)
from molens.schedule.cron import ScheduleSpec, next_after_misfire, next_cron_fire, next_fire_after
from molens.schema import (
    DEFAULT_NAMESPACE,
    MAX_RUNNING,
    Backfill,
    DeadLetter,
    Notice,
    NoticeType,
    Rewound,
    Running,
    flow_of,
)

log = logging.getLogger(__name__)

_replace = msgspec.structs.replace


@dataclass(frozen=True, slots=True)
class MachineConfig:
    ack_ttl: int = 3
    response_head_chars: int = 512
    max_dispatch_lead_ms: int = 1_000
    """How far before its due time a fire may be planned (leaders use ``scheduler.dispatch_lead_ms``,
    at most this). Deliberately not read from node config: replicas must agree on it."""


DEFAULT_CONFIG = MachineConfig()


@dataclass(frozen=True, slots=True)
class FireRecord:
    """The record of an attempt in flight (lmdb ``fires``): planned under some term, no result yet."""

    fire_id: str
    task_id: str
    kind: FireKind
    attempt: int
    worker: str
    deadline_ms: int
    dispatched_ms: int
    not_before_ms: int = 0
    """The due time it was planned for (0: not known, a record of the release before it): a fire not
    sent is planned again no earlier (docs/architecture.md#not-sent)."""


class View(Protocol):
    """Read access the machine needs (the store's write transaction implements it)."""

    def get_task(self, task_id: str) -> Task | None: ...
    def get_fire(self, fire_id: str) -> FireRecord | None: ...
    def get_idem(self, key: str) -> str | None: ...
    def get_flow(self, key: str) -> FlowSettings | None: ...
    def get_dead(self, dead_id: str) -> DeadLetter | None: ...
    def get_meta(self, key: str) -> bytes | None: ...
    def scan_meta(self, prefix: str) -> list[tuple[str, bytes]]: ...
    def scan_flow_keys(self, prefix: str) -> list[str]: ...


class ScanView(View, Protocol):
    """What a new leader streams from (the store implements it without loading everything)."""

    def scan_due(self) -> Iterator[tuple[int, str]]: ...
    def scan_fires(self) -> Iterator[FireRecord]: ...


# -------------------------------------------------------------------------------------------------
# outputs


@dataclass(frozen=True, slots=True)
class WheelAdd:
    key: str
    due_ms: int
    new: bool = False
    """The entry made the task: no wheel holds the key yet (``molens.schedule.horizon.Reach``)."""


@dataclass(frozen=True, slots=True)
class WheelRemove:
    key: str


@dataclass(frozen=True, slots=True)
class SendFire:
    """Effect: send this attempt (the Dispatched entry that planned it has committed), not before
    ``not_before_ms`` (the due time it was planned for; it may still be ahead: dispatch ahead)."""

    fire: FireRecord
    url: str
    body: bytes
    scene: str
    timeout_ms: int
    reliability: Reliability
    not_before_ms: int = 0
    scheduled_ms: int = 0
    """The occurrence's nominal instant (before jitter; the same for every retry and ACK probe)."""
    traceparent: str | None = None
    """The task's (``TaskSpec.traceparent``): the attempt joins its trace."""
    namespace: str = DEFAULT_NAMESPACE
    """The task's namespace: the worker signs the attempt with its key (``molens.signing.namespace_secret``)."""


@dataclass(frozen=True, slots=True)
class FlowSet:
    """The limits of flow ``key`` changed (``None``: deleted); the leader's Dispatcher enforces them."""

    key: str
    settings: FlowSettings | None


Effect = WheelAdd | WheelRemove | SendFire | FlowSet


@dataclass(frozen=True, slots=True)
class Created:
    """Result of one CreateTasks item: ``created`` False when an idempotency key matched (200)."""

    task: Task
    created: bool


ItemResult = Any
"""Per item: ``Created`` / ``Task`` / ``None`` (accepted) / ``bool`` (expired) or a MolensError."""


@dataclass(slots=True)
class Writes:
    """Final state of everything a command touched (``None`` = delete)."""

    tasks: dict[str, Task | None] = field(default_factory=dict)
    fires: dict[str, FireRecord | None] = field(default_factory=dict)
    idem: dict[str, str | None] = field(default_factory=dict)
    meta: dict[str, bytes | None] = field(default_factory=dict)
    flows: dict[str, FlowSettings | None] = field(default_factory=dict)
    executions: list[Execution] = field(default_factory=list)
    history_deletes: list[str] = field(default_factory=list)
    """Tasks whose history (and dead letters) go with them."""
    dead: dict[str, DeadLetter | None] = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)
    """Failure notifications for the outbox (docs/architecture.md#notifications)."""
    notices_acked: list[tuple[int, str]] = field(default_factory=list)
    audit: list[audit.AuditEntry] = field(default_factory=list)
    """Audit entries of this command (docs/architecture.md#audit-trail)."""
    audit_trim: int | None = None
    """Delete the audit entries of log entries before this index (retention)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Occurrences this command decided not to fire, by :data:`NOT_FIRED` key (the store adds them
    to its process-local counters: every replica counts what it applies)."""


@dataclass(slots=True)
class Applied:
    writes: Writes
    effects: list[Effect]
    results: list[ItemResult]
    before: dict[str, Task | None] = field(default_factory=dict)
    """The view's version of every task the command read or wrote (lets the store fix its indexes)."""


# -------------------------------------------------------------------------------------------------
# transaction overlay

_V = TypeVar("_V")


def _written_or_read(written: dict[str, _V | None], key: str, read: Callable[[str], _V | None]) -> _V | None:
    """What the transaction wrote under ``key`` (None: deleted), else what ``read`` finds in the store."""
    return written[key] if key in written else read(key)


class _Tx:
    """Reads through the view, sees its own writes, remembers originals to derive wheel effects."""

    __slots__ = ("effects", "live_added", "meta_read", "orig", "view", "w")

    def __init__(self, view: View) -> None:
        self.view = view
        self.w = Writes()
        self.orig: dict[str, Task | None] = {}
        self.effects: list[Effect] = []
        self.meta_read: dict[str, bytes | None] = {}
        """Meta records read from the view (a batch's tasks of one namespace read its record once)."""
        self.live_added: dict[str, int] = {}
        """Finished tasks this entry made unfinished again, by namespace (:func:`_revive_over_quota`):
        the stored counts are written by :meth:`finish`, so a bulk redrive counts its own items here."""

    def task(self, tid: str) -> Task | None:
        tasks = self.w.tasks
        if tid in tasks:
            return tasks[tid]
        if tid in self.orig:
            return self.orig[tid]
        t = self.view.get_task(tid)
        self.orig[tid] = t
        return t

    def put(self, t: Task) -> None:
        if t.id not in self.orig and t.id not in self.w.tasks:
            self.orig[t.id] = self.view.get_task(t.id)
        self.w.tasks[t.id] = t

    def put_new(self, t: Task) -> None:
        """Put a task known to be absent (create); skips the original lookup."""
        self.orig.setdefault(t.id, None)
        self.w.tasks[t.id] = t

    def delete(self, t: Task) -> None:
        if t.id not in self.orig and t.id not in self.w.tasks:
            self.orig[t.id] = self.view.get_task(t.id)
        self.w.tasks[t.id] = None

    def fire(self, fid: str) -> FireRecord | None:
        return _written_or_read(self.w.fires, fid, self.view.get_fire)

    def idem(self, key: str) -> str | None:
        return _written_or_read(self.w.idem, key, self.view.get_idem)

    def dead(self, dead_id: str) -> DeadLetter | None:
        return _written_or_read(self.w.dead, dead_id, self.view.get_dead)

    def meta(self, key: str) -> bytes | None:
        if key in self.w.meta:
            return self.w.meta[key]
        read = self.meta_read
        if key not in read:
            read[key] = self.view.get_meta(key)
        return read[key]

    def keys(self) -> list[tenancy.ApiKey]:
        """Every API key, this entry's writes included."""
        found = dict(self.view.scan_meta(tenancy.KEY_PREFIX))
        for k, v in self.w.meta.items():
            if k.startswith(tenancy.KEY_PREFIX):
                if v is None:
                    found.pop(k, None)
                else:
                    found[k] = v
        return [tenancy.decode_key(v) for v in found.values()]

    def finish(self, results: list[ItemResult]) -> Applied:
        eff: list[Effect] = []
        deltas: dict[str, list[int]] = {}
        for tid, new in self.w.tasks.items():
            old = self.orig.get(tid)
            either = new if new is not None else old
            if either is not None and either.spec.namespace != DEFAULT_NAMESPACE:
                _count_task(deltas, either.spec.namespace, old, new)
            if new is not None and new.spec.notify_url and new.status in _NOTIFIED \
                    and (old is None or old.status is not new.status):
                _notice(self, new, _NOTIFIED[new.status], new.updated_ms,
                        f"{new.status.value} after {new.last_result or 'no'} attempt result "
                        f"(status {new.last_status_code})")
            od = old.wake_ms if old is not None else None
            nd = new.wake_ms if new is not None else None
            # The wheel may have handed the task out already, and the Dispatched entry planning its
            # old action is then refused as stale: a change of what it has to fire tells the wheel
            # even at the same ms (a redrive stamped at the very ms of the occurrence it puts aside).
            if od == nd and (nd is None or _same_actions(old, new)):
                continue
            eff.append(WheelRemove(tid) if nd is None else WheelAdd(tid, nd, old is None))  # add moves a present key
        for ns, (held, live) in deltas.items():
            for key, d in ((tenancy.COUNT_PREFIX + ns, held), (tenancy.LIVE_PREFIX + ns, live)):
                if d:
                    self.w.meta[key] = tenancy.encode_count(max(0, tenancy.decode_count(self.meta(key)) + d))
        eff.extend(self.effects)
        return Applied(self.w, eff, results, self.orig)



def _same_actions(old: Task | None, new: Task | None) -> bool:
    """Whether the task has the same fires to plan (fire id, attempt, due time) before and after."""
    return (old.actions() if old is not None else []) == (new.actions() if new is not None else [])


# -------------------------------------------------------------------------------------------------
# schedule


def schedule_of(task: Task) -> ScheduleSpec:
    """The periodic task's schedule: interval tasks run on the grid ``start_at + k * interval_ms``
    (``start_at`` itself first) or, without ``start_at``, ``created + k * interval_ms`` (k >= 1)."""
    s = task.spec
    anchor = task.created_ms if s.start_at is None or s.interval_ms is None else s.start_at - s.interval_ms
    return ScheduleSpec(anchor, s.interval_ms, s.cron_expr, s.timezone)


def next_scheduled(task: Task, after_ms: int) -> int:
    """The periodic task's first scheduled instant strictly after ``after_ms`` (fixed rate / cron),
    and not before its ``start_at``."""
    spec = task.spec
    if spec.start_at is not None and after_ms < spec.start_at:
        after_ms = spec.start_at - 1
    if spec.interval_ms is not None:  # inline fast path of cron.next_fixed_rate
        iv = spec.interval_ms
        anchor = task.created_ms if spec.start_at is None else spec.start_at - iv
        if after_ms < anchor:
            return anchor + iv
        return anchor + ((after_ms - anchor) // iv + 1) * iv
    return next_fire_after(schedule_of(task), after_ms)


def first_due(spec_task: Task) -> int:
    """Scheduled instant of a newly created task's first occurrence (before jitter)."""
    s = spec_task.spec
    now = spec_task.created_ms
    if s.type is TaskType.DELAYED:
        if s.run_at is not None:
            return s.run_at
        assert s.interval_ms is not None
        return now + s.interval_ms
    return next_scheduled(spec_task, now)


def jitter(task_id: str, seq: int, jitter_ms: int) -> int:
    """The offset of occurrence ``seq`` from its scheduled instant: in ``[0, jitter_ms)``, the same
    on every replica and under every leader (a hash of the task id and ``seq``, not a random draw)."""
    if jitter_ms <= 1:
        return 0
    h = hashlib.blake2b(f"{task_id}:{seq}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") % jitter_ms


NOT_FIRED = {
    "skipped_overlap": "instants that came due while an occurrence ran (overlap skip, or allow with 8 running)",
    "skipped_catchup_none": "missed instants skipped (catchup none)",
    "collapsed_catchup_one": "missed instants one fire stood for (catchup one)",
    "skipped_catchup_window": "missed instants older than catchup_window_ms (catchup all)",
    "skipped_backfill": "regular instants a backfill's range replaced",
    "dropped_paused": "instants that came due while a periodic task was paused, dropped by its resume from now",
    "dropped_end_at": "a periodic task's next occurrence fell at or after end_at: the task ended",
    "dropped_max_runs": "a periodic task had run max_runs occurrences: the task ended",
}
"""What :attr:`Writes.counts` counts: each a decision (one history row, for one or more instants)."""


PAUSED_DROP = "came due while the task was paused (resume_from now)"
"""Why a resume from now's dropped instants were not fired (their ``skipped`` row)."""


def _count(tx: _Tx, key: str) -> None:
    c = tx.w.counts
    c[key] = c.get(key, 0) + 1


def _ends(tx: _Tx, t: Task, seq: int, sched: int) -> bool:
    """Whether occurrence ``seq`` at ``sched`` is past the task's ``max_runs`` or ``end_at`` (then the
    task ends: counted as ``dropped_max_runs`` / ``dropped_end_at``)."""
    s = t.spec
    if s.max_runs is not None and seq > s.max_runs:
        _count(tx, "dropped_max_runs")
        return True
    if s.end_at is not None and sched >= s.end_at:
        _count(tx, "dropped_end_at")
        return True
    return False


def _skipped(tx: _Tx, t: Task, start: int, end: int, now: int, why: str, key: str) -> None:
    """One history row for the occurrences scheduled in ``[start, end)`` that are not fired; counted under ``key``."""
    _count(tx, key)
    tx.w.executions.append(Execution(
        task_id=t.id, fire_id=t.fire_id, seq=t.seq, attempt=0, kind=FireKind.EVENT, result=ExecutionResult.SKIPPED,
        status_code=None, latency_ms=None, worker="", url=t.spec.callback_url, scene=t.spec.scene, fired_ms=now,
        finished_ms=now, response_head=f"skipped the occurrences scheduled in [{start}, {end}) ms: {why}",
    ))


def _next_occurrence(tx: _Tx, t: Task, now: int, lost: bool = False) -> dict[str, Any]:
    """Changes that start the periodic task's next occurrence (or end the task at its bounds)
    (docs/architecture.md#catch-up).

    ``catchup`` one or none: the first schedule instant after the one that just ran that is not in
    the past (``cron.next_after_misfire``); instants that came due meanwhile (downtime, a long retry
    chain) are represented by the occurrence that just ran, recorded as skipped, and not fired.
    ``catchup`` all: the next instant even if it has passed (it fires at once), unless it is more
    than ``catchup_window_ms`` old: then the first instant within the window.

    ``lost``: the occurrence that ended was an at_most_once fire whose worker was lost (``unknown``):
    nothing was running while the instants after it came due (they were missed to a fault, not to
    a running occurrence), so with ``catchup`` one the next instant fires, at once if it has passed,
    instead of being skipped (docs/architecture.md#lost-workers).

    With a backfill in progress, its next occurrence comes first (:func:`_backfill_step`).
    """
    if t.backfill is not None:
        return _backfill_step(tx, t, now, t.seq + 1, t.backfill.next_ms, max(t.backfill.after_ms, t.sched_ms))
    spec = t.spec
    buffered = False
    try:
        first = next_scheduled(t, t.sched_ms)
        if t.resumed_ms is not None:  # resumed from now mid-occurrence: what came due while paused is dropped
            after = next_scheduled(t, t.resumed_ms - 1)
            if after > first:
                _skipped(tx, t, first, after, now, PAUSED_DROP, "dropped_paused")
                first = after
        if spec.catchup is CatchUp.ALL:
            floor = now - spec.catchup_window_ms
            nxt = first if first >= floor else next_scheduled(t, floor - 1)
            if nxt > first:
                _skipped(tx, t, first, nxt, now, "more than catchup_window_ms ago (catchup all)", "skipped_catchup_window")
        else:
            during = _came_due_while_running(t, now)
            if first >= now or (lost and spec.catchup is CatchUp.ONE):
                nxt = first
            elif during is not None:  # overlap buffer_one: it fires now, what came due before the start is skipped
                nxt, buffered = during, True
                if nxt > first:
                    _skipped(tx, t, first, nxt, now, f"due before the occurrence started (catchup {spec.catchup})",
                             _catchup_key(spec.catchup))
            else:
                nxt = next_after_misfire(schedule_of(t), t.sched_ms, now)
            if nxt > first and not buffered:
                ran = t.started_ms is not None and first >= t.started_ms  # came due while it ran: overlap
                _skipped(tx, t, first, nxt, now, f"due while the cluster was down, the task paused or an "
                                                 f"occurrence ran (catchup {spec.catchup})",
                         "skipped_overlap" if ran else _catchup_key(spec.catchup))
    except ValueError as exc:  # the schedule has no next instant (deterministic on every replica)
        log.error("task=%s has no next occurrence (%s): inactive", t.id, exc)
        return dict(_INACTIVE)
    if _ends(tx, t, t.seq + 1, nxt):
        return dict(_DONE)
    return {
        "status": Status.PENDING,
        "seq": t.seq + 1,
        "attempt": 0,
        "ack_attempt": 0,
        "free_attempts": 0,
        "throttled_since_ms": 0,
        "due_ms": max(now, nxt + jitter(t.id, t.seq + 1, t.spec.jitter_ms)),  # catchup all, buffer_one: at once
        "sched_ms": nxt,
        "buffered": buffered,
        "resumed_ms": None,
    }


def _catchup_key(c: CatchUp) -> str:
    return "skipped_catchup_none" if c is CatchUp.NONE else "collapsed_catchup_one"


def _came_due_while_running(t: Task, now: int) -> int | None:
    """With ``overlap`` buffer_one, the first schedule instant that came due after the occurrence
    ending now started (docs/architecture.md#overlap); None when none did, or for another policy."""
    if t.spec.overlap is not Overlap.BUFFER_ONE or t.started_ms is None:
        return None
    nxt = next_scheduled(t, max(t.started_ms, t.resumed_ms or 0, t.sched_ms))
    return nxt if nxt < now else None


# -------------------------------------------------------------------------------------------------
# the rules


def apply(view: View, cmd: Command, now_ms: int | None = None, config: MachineConfig = DEFAULT_CONFIG) -> Applied:
    """Apply one committed command; ``now_ms`` defaults to the command's leader stamp."""
    now = cmd.now_ms if now_ms is None else now_ms
    tx = _Tx(view)
    results: list[ItemResult]
    match cmd:
        case CreateTasks():
            absent: set[str] = set()
            over = _over_quota(tx, cmd.items, absent, cmd.keys_first)
            results = [over] * len(cmd.items) if over is not None else [_create(tx, it, now, absent) for it in cmd.items]
        case Dispatched():
            lead = now + config.max_dispatch_lead_ms
            results = [_dispatch(tx, it, now, lead, cmd.catchup_waits, cmd.keeps_last_fire) for it in cmd.items]
        case Results():
            results = [_result(tx, it, now, config, cmd.ack_from) for it in cmd.items]
        case DeleteTasks():
            results = [_delete(tx, tid) for tid in cmd.task_ids]
        case PauseTasks():
            results = [_pause(tx, tid, now) for tid in cmd.task_ids]
        case ResumeTasks():
            results = [_resume(tx, tid, now, cmd.from_schedule, cmd.drops_paused, cmd.records_dropped,
                               cmd.counts_quota) for tid in cmd.task_ids]
        case TriggerTask():
            results = [_trigger(tx, cmd.task_id, now, cmd.refuses_planned, cmd.refuses_sent_ahead)]
        case Expire():
            results = [_expire(tx, it) for it in cmd.items]
        case PutMeta():
            tx.w.meta[cmd.key] = cmd.value
            results = [None]
        case UpdateTask():
            results = [_update(tx, cmd, now)]
        case RedriveDeadLetters():
            results = [_redrive(tx, dead_id, now, cmd.counts_quota) for dead_id in cmd.ids]
        case DeleteDeadLetters():
            results = [_delete_dead(tx, dead_id) for dead_id in cmd.ids]
        case AckNotices():
            tx.w.notices_acked.extend(cmd.keys)
            results = [None] * len(cmd.keys)
        case FlowNotices():
            results = [_flow_notice(tx, cmd, key, until) for key, until in cmd.items]
        case BackfillTask():
            results = [_backfill(tx, cmd, now)]
        case PutFlow():
            results = [_put_flow(tx, cmd, now)]
        case DeleteFlow():
            results = [_delete_flow(tx, cmd.key)]
        case PutNamespace():
            results = [_put_namespace(tx, cmd, now)]
        case DeleteNamespace():
            results = [_delete_namespace(tx, cmd)]
        case PutApiKey():
            results = [_put_key(tx, cmd)]
        case DeleteApiKey():
            found = tx.meta(tenancy.KEY_PREFIX + cmd.key_id) is not None
            tx.w.meta[tenancy.KEY_PREFIX + cmd.key_id] = None
            results = [None if found else NotFoundError(f"key {cmd.key_id} not found", "key_id")]
        case Audited():
            applied = apply(view, cmd.command, now_ms, config)
            w = applied.writes
            applied.writes.audit.extend(audit.entries(
                cmd, view, lambda tid: w.tasks[tid] if tid in w.tasks else view.get_task(tid),
                lambda key: w.flows[key] if key in w.flows else view.get_flow(key), applied.results,
            ))
            return applied
        case AuditNote():
            tx.w.audit.append(audit.note_entry(cmd))
            results = [None]
        case TrimAudit():
            tx.w.audit_trim = cmd.before_index
            results = [None]
        case _:
            raise TypeError(f"not a command: {cmd!r}")
    return tx.finish(results)


def _put_flow(tx: _Tx, cmd: PutFlow, now: int) -> ItemResult:
    ns, sep, _ = cmd.key.partition("~")
    if cmd.checks_namespace and sep and ns != DEFAULT_NAMESPACE and tx.meta(tenancy.NS_PREFIX + ns) is None:
        # a namespace's own flow, of a namespace that does not exist (deleted while the request was on
        # its way): it would hold a namespace made again under that name
        return NotFoundError(f"namespace {ns} not found", "key")
    if cmd.only_paused:
        cur = tx.view.get_flow(cmd.key) or FlowSettings()
        new = _replace(cur, paused=cmd.settings.paused, updated_ms=now)
    else:
        new = _replace(cmd.settings, updated_ms=now)
    tx.w.flows[cmd.key] = new
    tx.effects.append(FlowSet(cmd.key, new))
    return new


def _delete_flow(tx: _Tx, key: str) -> ItemResult:
    if tx.view.get_flow(key) is None:
        return NotFoundError(f"flow {key} has no settings", "key")
    tx.w.flows[key] = None
    tx.effects.append(FlowSet(key, None))
    return None


def _put_namespace(tx: _Tx, cmd: PutNamespace, now: int) -> ItemResult:
    ns = cmd.namespace
    key = tenancy.NS_PREFIX + ns.name
    raw = tx.meta(key)
    if cmd.create and (ns.name == DEFAULT_NAMESPACE or raw is not None):
        return IllegalTransitionError(f"namespace {ns.name} exists", "name", code="conflict")
    if ns.name == DEFAULT_NAMESPACE:
        return IllegalTransitionError("the default namespace has no settings to change", "name")
    if raw is None and not cmd.create:
        return NotFoundError(f"namespace {ns.name} not found", "name")
    created = now if raw is None else tenancy.decode_namespace(raw).created_ms
    new = _replace(ns, created_ms=created, updated_ms=now)
    tx.w.meta[key] = tenancy.encode(new)
    rate = new.quotas.fires_per_s
    tx.effects.append(FlowSet(tenancy.NAMESPACE_FLOW_PREFIX + ns.name,
                              None if rate is None else FlowSettings(rate_per_s=rate, updated_ms=now)))
    return new


def _delete_namespace(tx: _Tx, cmd: DeleteNamespace) -> ItemResult:
    name = cmd.name
    if name == DEFAULT_NAMESPACE:
        return IllegalTransitionError("the default namespace always exists", "name")
    if tx.meta(tenancy.NS_PREFIX + name) is None:
        return NotFoundError(f"namespace {name} not found", "name")
    held = tenancy.decode_count(tx.meta(tenancy.COUNT_PREFIX + name))
    if held:
        return IllegalTransitionError(f"namespace {name} holds {held} tasks; delete them first", "name",
                                      code="conflict")
    if cmd.checks_keys and (named := tenancy.named_by_keys(name, tx.keys())) is not None:
        return named
    tx.w.meta[tenancy.NS_PREFIX + name] = None
    tx.w.meta[tenancy.COUNT_PREFIX + name] = None
    tx.w.meta[tenancy.LIVE_PREFIX + name] = None
    tx.effects.append(FlowSet(tenancy.NAMESPACE_FLOW_PREFIX + name, None))
    if cmd.drops_flows:  # its own flows' settings go with it: a namespace made again starts without them
        for key in tx.view.scan_flow_keys(name + "~"):
            tx.w.flows[key] = None
            tx.effects.append(FlowSet(key, None))
    return None


def _put_key(tx: _Tx, cmd: PutApiKey) -> ItemResult:
    if cmd.checks_namespaces:
        for n in cmd.key.namespaces:
            if n not in (tenancy.ALL_NAMESPACES, DEFAULT_NAMESPACE) and tx.meta(tenancy.NS_PREFIX + n) is None:
                return NotFoundError(f"namespace {n} not found", "namespaces")
    tx.w.meta[tenancy.KEY_PREFIX + cmd.key.id] = tenancy.encode(cmd.key)
    return cmd.key


def _count_task(deltas: dict[str, list[int]], ns: str, old: Task | None, new: Task | None) -> None:
    """Add a task's change to the counts of its namespace (one other than ``default``) in ``deltas``
    (namespace -> [held, unfinished]): the tasks it holds (``nsn:<name>``) and those not finished
    (``nsl:<name>``, what ``max_pending_tasks`` bounds). :meth:`_Tx.finish` writes each namespace's
    counts once per entry (a 500-task batch: one write, not 500)."""
    held = (new is not None) - (old is not None)
    live = (new is not None and new.status not in TERMINAL_STATUSES) - \
        (old is not None and old.status not in TERMINAL_STATUSES)
    if held or live:
        d = deltas.get(ns)
        if d is None:
            deltas[ns] = [held, live]
        else:
            d[0] += held
            d[1] += live


def _over_quota(tx: _Tx, items: tuple[CreateItem, ...], absent: set[str], keys_first: bool) -> QuotaExceeded | None:
    """Why a batch of creates is refused whole by its namespaces' quotas (``max_pending_tasks``,
    ``max_payload_bytes``); None when it is not (``default`` has none). Adds the namespaces named
    that do not exist to ``absent``. ``keys_first`` (``CreateTasks.keys_first``): an item that
    finds its task already made (its idempotency key's) creates nothing and is not counted."""
    by_ns = collections.Counter([it.spec.namespace for it in items])
    by_ns.pop(DEFAULT_NAMESPACE, None)
    quotas: dict[str, tenancy.Quotas] = {}
    for ns in by_ns:
        raw = tx.meta(tenancy.NS_PREFIX + ns)
        if raw is None:
            absent.add(ns)  # _create answers each of its items: no such namespace
            continue
        q = tenancy.decode_namespace(raw).quotas
        if q.max_payload_bytes is not None or q.max_pending_tasks is not None:
            quotas[ns] = q
    if not quotas:
        return None
    new = [it for it in items if it.spec.namespace in quotas and (not keys_first or _made(tx, it) is None)]
    for ns, q in quotas.items():
        mine = [it for it in new if it.spec.namespace == ns]
        if not mine:
            continue
        if q.max_payload_bytes is not None:
            big = max(len(it.spec.payload_json) for it in mine)
            if big > q.max_payload_bytes:
                return QuotaExceeded(
                    f"namespace {ns}: a payload of {big} bytes, more than its max_payload_bytes "
                    f"{q.max_payload_bytes}; nothing was created", "max_payload_bytes", namespace=ns)
        if q.max_pending_tasks is not None:
            live = tenancy.decode_count(tx.meta(tenancy.LIVE_PREFIX + ns))
            if live + len(mine) > q.max_pending_tasks:
                return QuotaExceeded(
                    f"namespace {ns} holds {live} unfinished tasks; {len(mine)} more would pass its "
                    f"max_pending_tasks {q.max_pending_tasks}; nothing was created", "max_pending_tasks", namespace=ns)
    return None


def _quotas(tx: _Tx, ns: str) -> tenancy.Quotas | None:
    """The quotas of namespace ``ns``; None for ``default`` (it has none) and a namespace that does not exist."""
    if ns == DEFAULT_NAMESPACE:
        return None
    raw = tx.meta(tenancy.NS_PREFIX + ns)
    return None if raw is None else tenancy.decode_namespace(raw).quotas


def _revive_over_quota(tx: _Tx, t: Task, nt: Task) -> QuotaExceeded | None:
    """Why a change that makes finished task ``t`` unfinished again (``nt``: a redrive of its dead
    letter, a resume of an inactive periodic task) is refused by its namespace's
    ``max_pending_tasks``, as a create would be; None when it is not, and then it is counted in
    ``tx.live_added``."""
    if t.status not in TERMINAL_STATUSES or nt.status in TERMINAL_STATUSES:
        return None
    ns = t.spec.namespace
    q = _quotas(tx, ns)
    if q is None or q.max_pending_tasks is None:
        return None
    live = tenancy.decode_count(tx.meta(tenancy.LIVE_PREFIX + ns)) + tx.live_added.get(ns, 0)
    if live + 1 > q.max_pending_tasks:
        return QuotaExceeded(
            f"namespace {ns} holds {live} unfinished tasks, its max_pending_tasks {q.max_pending_tasks}: "
            f"task {t.id} ({t.status}) would be one more; nothing was changed", "max_pending_tasks", namespace=ns)
    tx.live_added[ns] = tx.live_added.get(ns, 0) + 1
    return None


IDEM_KEY_MAX_BYTES = 511
"""The longest key, in UTF-8 bytes, the store keeps an idempotency key under as it is (lmdb's bound
on a key); a longer one (128 characters of four bytes each, or a namespace's prefix on top) is kept
under its SHA-256 digest instead."""


def idem_key(namespace: str, key: str | None) -> str | None:
    """The key a task's ``idempotency_key`` is stored under: one namespace's keys never match another's
    (``default``'s are stored as they were before namespaces existed); one longer than
    ``IDEM_KEY_MAX_BYTES`` is stored as ``NUL NUL sha256:<hex>`` (a key with a NUL is refused: ``molens.schema.IDEMPOTENCY_KEY_PATTERN``)."""
    if key is None:
        return None
    stored = key if namespace == DEFAULT_NAMESPACE else f"{namespace}\x00{key}"
    if len(stored) * 4 > IDEM_KEY_MAX_BYTES and len(raw := stored.encode()) > IDEM_KEY_MAX_BYTES:
        return "\x00\x00sha256:" + hashlib.sha256(raw).hexdigest()
    return stored


def _made(tx: _Tx, it: CreateItem) -> Task | None:
    """The task a create item finds already made: its idempotency key's, or its own id's (an entry
    proposed again); None when the item would make one."""
    key = idem_key(it.spec.namespace, it.spec.idempotency_key)
    if key is not None and (existing_id := tx.idem(key)) is not None and (t := tx.task(existing_id)) is not None:
        return t
    return tx.task(it.task_id)


def _create(tx: _Tx, it: CreateItem, now: int, absent: set[str]) -> ItemResult:
    """``absent``: the namespaces the batch names that do not exist (:func:`_over_quota`)."""
    spec = it.spec
    if (existing := _made(tx, it)) is not None:
        return Created(existing, False)
    if spec.namespace in absent:
        return NotFoundError(f"namespace {spec.namespace} not found", "namespace")
    if spec.type is TaskType.DELAYED:
        sched = spec.run_at if spec.run_at is not None else now + (spec.interval_ms or 0)
    else:
        sched = first_due(Task(
            id=it.task_id, spec=spec, status=Status.PENDING, created_ms=now, updated_ms=now, due_ms=None,
            sched_ms=now,
        ))
    t = Task(
        id=it.task_id, spec=spec, status=Status.PENDING, created_ms=now, updated_ms=now,
        due_ms=sched + jitter(it.task_id, 1, spec.jitter_ms), sched_ms=sched,
    )
    if spec.type is TaskType.PERIODIC and _ends(tx, t, 1, sched):  # no occurrence before end_at
        t = _replace(t, status=Status.DONE, due_ms=None)
    tx.put_new(t)
    if (key := idem_key(spec.namespace, spec.idempotency_key)) is not None:
        tx.w.idem[key] = t.id
    return Created(t, True)


def _dispatch(
    tx: _Tx, it: DispatchItem, now: int, due_by: int, catchup_waits: bool = False, keeps_last_fire: bool = False,
) -> ItemResult:
    t = tx.task(it.task_id)
    if t is None:
        return NotFoundError(f"task {it.task_id} not found", "task_id")
    if t.running:
        i = _running_index(t, it.fire_id)
        if i is not None:
            return _dispatch_running(tx, t, i, it, now, due_by, keeps_last_fire)
    if t.inflight is not None:
        return IllegalTransitionError(f"task {t.id} already has fire {t.inflight} in flight", "fire_id")
    if t.held:
        return IllegalTransitionError(
            f"task {t.id}: {MAX_RUNNING} occurrences still running; its own waits for one to end", "task_id"
        )
    if t.status is Status.AWAITING_ACK:
        kind, expected = FireKind.ACK, t.ack_attempt + 1
    elif t.status in (Status.PENDING, Status.FIRING):
        kind, expected = FireKind.CALLBACK, t.attempt + 1
    else:
        return IllegalTransitionError(f"task {t.id} is {t.status}, nothing to fire", "task_id")
    due = t.due_ms
    if due is None or due > due_by:
        return IllegalTransitionError(f"task {t.id} is not due (due {due}, now {now})", "task_id")
    if it.fire_id != t.fire_id or it.attempt != expected:
        return IllegalTransitionError(
            f"stale fire {it.fire_id} attempt {it.attempt}; expected {t.fire_id} attempt {expected}", "fire_id"
        )
    allow = False
    if expected == 1 and kind is FireKind.CALLBACK and t.spec.type is TaskType.PERIODIC:
        allow = t.spec.overlap is Overlap.ALLOW and t.rewound is None and t.backfill is None
        if allow and len(t.running) >= MAX_RUNNING:
            if catchup_waits and t.spec.catchup is CatchUp.ALL:  # every instant fires: it waits for a slot
                tx.put(_replace(t, waiting=True, updated_ms=now))
                return IllegalTransitionError(
                    f"task {t.id}: {MAX_RUNNING} occurrences still running; its own waits for one to end", "task_id"
                )
            _skip_running_full(tx, t, now)
            return IllegalTransitionError(f"task {t.id}: {MAX_RUNNING} occurrences still running (overlap allow)",
                                          "task_id")
        caught = _catch_up(tx, t, now)
        if caught is None:
            return IllegalTransitionError(f"task {t.id}: missed occurrences skipped (catchup)", "task_id")
        t, due = caught, caught.due_ms or due
    fire = FireRecord(
        fire_id=it.fire_id, task_id=t.id, kind=kind, attempt=it.attempt, worker=it.worker,
        deadline_ms=it.deadline_ms, dispatched_ms=now, not_before_ms=due,
    )
    tx.w.fires[fire.fire_id] = fire
    if kind is FireKind.ACK:
        nt = _replace(t, ack_attempt=it.attempt, due_ms=None, inflight=fire.fire_id, updated_ms=now)
        url = t.spec.ack_url
        assert url is not None
    else:
        nt = _replace(
            t,
            status=Status.FIRING,
            attempt=it.attempt,
            due_ms=None,
            skipped_to=False,
            inflight=fire.fire_id,
            last_fire_ms=_last_fire(t, now, due, keeps_last_fire),
            updated_ms=now,
            started_ms=max(now, due) if it.attempt == 1 else t.started_ms,
            buffered=False,
            waiting=False,
        )
        url = t.spec.callback_url
    if allow:
        nt = _detach(tx, nt, now)
    tx.put(nt)
    tx.effects.append(
        SendFire(
            fire=fire, url=url, body=t.spec.payload_json, scene=t.spec.scene, timeout_ms=t.spec.timeout_ms,
            reliability=t.spec.reliability, not_before_ms=due, scheduled_ms=t.sched_ms,
            traceparent=t.spec.traceparent, namespace=t.spec.namespace,
        )
    )
    return None


# -------------------------------------------------------------------------------------------------
# overlap allow: occurrences that run beside the task's next ones


def _running_index(t: Task, fire_id: str) -> int | None:
    for i, r in enumerate(t.running):
        if r.fire_id(t.id) == fire_id:
            return i
    return None


def _with_running(t: Task, i: int, r: Running | None) -> tuple[Running, ...]:
    """``t.running`` with its ``i``-th occurrence replaced by ``r`` (None: removed)."""
    rest = list(t.running)
    if r is None:
        del rest[i]
    else:
        rest[i] = r
    return tuple(rest)


def _detach(tx: _Tx, started: Task, now: int) -> Task:
    """The allow task whose occurrence's first attempt is being sent (``started``, firing, that
    attempt in flight): the occurrence goes to ``running`` and the task moves on to its next
    occurrence, due at its own time (catch-up rules as if the one sent had ended now)."""
    run = Running(seq=started.seq, sched_ms=started.sched_ms, attempt=started.attempt, due_ms=None, inflight=True)
    nxt = _next_occurrence(tx, started, now)
    if nxt["status"] is not Status.PENDING:  # bounds reached: nothing of its own left, the running ones finish
        nxt["attempt"] = 0
    return _replace(started, **nxt, inflight=None, started_ms=None, occ_spec=None, running=(*started.running, run))


def _skip_running_full(tx: _Tx, t: Task, now: int) -> None:
    """The allow task's occurrence came due with ``MAX_RUNNING`` of its occurrences running: it is
    skipped (history ``skipped``), the task waits for its first instant that is not in the past."""
    try:
        nxt = next_after_misfire(schedule_of(t), t.sched_ms, now)
    except ValueError as exc:
        log.error("task=%s has no next occurrence (%s): inactive", t.id, exc)
        tx.put(_replace(t, **_INACTIVE, updated_ms=now))
        return
    _skipped(tx, t, t.sched_ms, nxt, now, f"{MAX_RUNNING} occurrences still running (overlap allow)",
             "skipped_overlap")
    if _ends(tx, t, t.seq, nxt):
        tx.put(_replace(t, **_DONE, updated_ms=now))
        return
    tx.put(_replace(t, sched_ms=nxt, due_ms=nxt + jitter(t.id, t.seq, t.spec.jitter_ms), skipped_to=False,
                    updated_ms=now))


def _last_fire(t: Task, now: int, due: int, keeps: bool) -> int:
    """A dispatched attempt's ``last_fire_ms``: the later of the stamp and its due time, and with
    ``keeps`` (a ``Dispatched`` entry of a cluster whose every replica reads it) never earlier than
    before: an attempt settled lost before its due time (its worker lost) may still go out then."""
    return max(now, due, t.last_fire_ms or 0) if keeps else max(now, due)


def _dispatch_running(
    tx: _Tx, t: Task, i: int, it: DispatchItem, now: int, due_by: int, keeps_last_fire: bool = False,
) -> ItemResult:
    """A retry of running occurrence ``t.running[i]`` (overlap allow), under the task's definition."""
    r = t.running[i]
    if r.inflight:
        return IllegalTransitionError(f"fire {it.fire_id} is already in flight", "fire_id")
    if r.due_ms is None or r.due_ms > due_by:
        return IllegalTransitionError(f"fire {it.fire_id} is not due (due {r.due_ms}, now {now})", "task_id")
    if it.attempt != r.attempt + 1:
        return IllegalTransitionError(
            f"stale fire {it.fire_id} attempt {it.attempt}; expected attempt {r.attempt + 1}", "fire_id"
        )
    fire = FireRecord(
        fire_id=it.fire_id, task_id=t.id, kind=FireKind.CALLBACK, attempt=it.attempt, worker=it.worker,
        deadline_ms=it.deadline_ms, dispatched_ms=now, not_before_ms=r.due_ms,
    )
    tx.w.fires[fire.fire_id] = fire
    nr = _replace(r, attempt=it.attempt, due_ms=None, inflight=True)
    tx.put(_replace(t, running=_with_running(t, i, nr), last_fire_ms=_last_fire(t, now, r.due_ms, keeps_last_fire),
                    updated_ms=now))
    s = t.spec
    tx.effects.append(SendFire(
        fire=fire, url=s.callback_url, body=s.payload_json, scene=s.scene, timeout_ms=s.timeout_ms,
        reliability=s.reliability, not_before_ms=r.due_ms, scheduled_ms=r.sched_ms, traceparent=s.traceparent,
        namespace=s.namespace,
    ))
    return None


def _as_occurrence(t: Task, r: Running) -> Task:
    """The task as the rules of one occurrence see it, with ``r``'s fields (retry, dead letter)."""
    return _replace(t, seq=r.seq, sched_ms=r.sched_ms, attempt=r.attempt, free_attempts=r.free_attempts,
                    throttled_since_ms=r.throttled_since_ms, occ_spec=r.occ_spec, inflight=None, rewound=None)


def _result_running(
    tx: _Tx, t: Task, i: int, it: ResultItem, fire: FireRecord, now: int, cfg: MachineConfig
) -> ItemResult:
    """The result of running occurrence ``t.running[i]``'s attempt (overlap allow): it retries by
    the task's policy or ends (success; failed for good: a dead letter, and a failure counted
    against ``max_fails`` as for any occurrence; 404: the task goes inactive)."""
    r = t.running[i]
    occ = _as_occurrence(t, r)
    sent = r.occ_spec or t.spec
    res = _classify(it, fire.kind, sent.reliability)
    head = _head_of(it, cfg)
    tx.w.executions.append(Execution(
        task_id=t.id, fire_id=fire.fire_id, seq=r.seq, attempt=fire.attempt, kind=fire.kind, result=res,
        status_code=it.status_code, latency_ms=it.latency_ms, worker=it.worker, url=sent.callback_url,
        scene=sent.scene, fired_ms=fire.dispatched_ms, finished_ms=now, response_head=head,
    ))
    changes: dict[str, Any] = {"last_result": res, "last_status_code": it.status_code, "last_response": head,
                               "updated_ms": now}
    nr: Running | None = None
    if res is ExecutionResult.SUCCESS:
        changes["fail_count"] = 0
    else:
        decision = _retry_or_end(occ, it, res, fire, now, sent.reliability)
        if not isinstance(decision, FailureKind):
            nr = _replace(r, due_ms=None if t.status is Status.PAUSED else decision["due_ms"], inflight=False,
                          free_attempts=decision["free_attempts"], throttled_since_ms=decision["throttled_since_ms"],
                          occ_spec=None, not_sent=0)
        else:
            _dead_letter(tx, occ, it, res, fire, now, decision, head)
            # not while the task's own slot holds an occurrence in progress (a backfilled or
            # redriven one, maybe waiting for its retry): it ends on its own, then queued redrives run
            can_end = t.status not in TERMINAL_STATUSES and t.inflight is None and t.rewound is None \
                and t.attempt == 0
            if res is ExecutionResult.NOT_FOUND:
                if can_end:
                    changes.update(_INACTIVE)
            elif res is not ExecutionResult.UNKNOWN:
                changes["fail_count"] = t.fail_count + 1
                if changes["fail_count"] >= t.spec.max_fails and can_end:
                    changes.update(_INACTIVE)
    nt = _replace(t, running=_with_running(t, i, nr), **changes)
    if t.held and not nt.held and nt.due_ms is not None:  # its own occurrence waited for this one: due now
        nt = _replace(nt, due_ms=max(nt.due_ms, now), waiting=False)
    tx.put(nt)
    return None


def _catch_up(tx: _Tx, t: Task, now: int) -> Task | None:
    """The periodic occurrence about to start, after the catch-up rule (docs/architecture.md#catch-up):
    ``t`` itself unless it was missed (its next instant is already due); then, with ``catchup``
    none, None (the task moved to its next instant that is not in the past, nothing fires), with
    all, ``t`` moved to its first instant within ``catchup_window_ms`` (fired now, the later ones
    after it), with one, ``t`` (fired now; it stands for the others, skipped when it ends)."""
    spec = t.spec
    if spec.catchup is CatchUp.ONE or t.skipped_to or t.buffered or (t.backfill is not None and t.backfill.current):
        return t
    try:
        if next_scheduled(t, t.sched_ms) > now:
            return t
        if spec.catchup is CatchUp.NONE:
            nxt = next_after_misfire(schedule_of(t), t.sched_ms, now)
            why = "missed (catchup none)"
        else:
            floor = now - spec.catchup_window_ms
            if t.sched_ms >= floor:
                return t
            nxt = next_scheduled(t, floor - 1)
            why = "more than catchup_window_ms ago (catchup all)"
    except ValueError:
        return t  # no next instant: this one fires, the task then ends (_next_occurrence)
    _skipped(tx, t, t.sched_ms, nxt, now, why,
             "skipped_catchup_none" if spec.catchup is CatchUp.NONE else "skipped_catchup_window")
    moved = _replace(t, sched_ms=nxt, due_ms=nxt + jitter(t.id, t.seq, spec.jitter_ms), updated_ms=now,
                     skipped_to=spec.catchup is CatchUp.NONE)
    if _ends(tx, t, t.seq, nxt):
        tx.put(_replace(moved, status=Status.DONE, due_ms=None))
        return None
    assert moved.due_ms is not None
    if spec.catchup is CatchUp.NONE or moved.due_ms > now:
        tx.put(moved)
        return None
    return moved


def _classify(it: ResultItem, kind: FireKind, reliability: Reliability) -> ExecutionResult:
    if it.outcome is Outcome.RESPONSE:
        code = it.status_code or 0
        ok = 200 <= code < 300
        if kind is FireKind.ACK:
            return ExecutionResult.ACK_SUCCESS if ok else ExecutionResult.ACK_FAILED
        if ok:
            return ExecutionResult.SUCCESS
        return ExecutionResult.NOT_FOUND if code == 404 else ExecutionResult.FAILED
    if kind is FireKind.ACK:
        return ExecutionResult.ACK_FAILED
    if it.outcome is Outcome.LOST:
        return ExecutionResult.UNKNOWN if reliability is Reliability.AT_MOST_ONCE else ExecutionResult.LOST
    if it.outcome is Outcome.TIMEOUT:
        return ExecutionResult.TIMEOUT
    return ExecutionResult.NETWORK_ERROR


def _result(tx: _Tx, it: ResultItem, now: int, cfg: MachineConfig, ack_from: bool = False) -> ItemResult:
    fire = tx.fire(it.fire_id)
    if fire is None or fire.kind is not it.kind or (it.attempt is not None and it.attempt != fire.attempt):
        _late_result(tx, it, fire, now, cfg)
        return NotFoundError(
            f"no {it.kind} fire {it.fire_id} attempt {it.attempt} in flight (stale or duplicate result)", "fire_id"
        )
    if it.worker != fire.worker:  # only the worker it was dispatched to answers for it (docs/architecture.md#results)
        log.warning("result for fire=%s from worker=%s but it was dispatched to worker=%s: ignored",
                    fire.fire_id, it.worker, fire.worker)
        return IllegalTransitionError(f"fire {it.fire_id} was not dispatched to worker {it.worker}", "fire_id")
    tx.w.fires[fire.fire_id] = None
    t = tx.task(fire.task_id)
    if t is None:
        return None
    if it.not_sent and it.attempt is not None:  # bound to this very attempt: known never sent
        return _not_sent(tx, t, fire, now)
    if t.running and fire.kind is FireKind.CALLBACK:
        i = _running_index(t, fire.fire_id)
        if i is not None:
            return _result_running(tx, t, i, it, fire, now, cfg)
    sent = t.occ_spec or t.spec  # the definition the fire went out under (docs/architecture.md#update)
    res = _classify(it, fire.kind, sent.reliability)
    head = _head_of(it, cfg)
    url = sent.ack_url if fire.kind is FireKind.ACK else sent.callback_url
    tx.w.executions.append(
        Execution(
            task_id=t.id,
            fire_id=fire.fire_id,
            seq=t.seq,
            attempt=fire.attempt,
            kind=fire.kind,
            result=res,
            status_code=it.status_code,
            latency_ms=it.latency_ms,
            worker=it.worker,
            url=url or "",
            scene=sent.scene,
            fired_ms=fire.dispatched_ms,
            finished_ms=now,
            response_head=head,
        )
    )
    if t.inflight != fire.fire_id:  # cannot happen with a correct store; keep the task as is
        log.warning("result for fire=%s but task=%s has inflight=%s", fire.fire_id, t.id, t.inflight)
        return None
    changes: dict[str, Any] = {
        "inflight": None,
        "occ_spec": None,
        "not_sent": 0,
        "last_result": res,
        "last_status_code": it.status_code,
        "last_response": head,
        "updated_ms": now,
    }
    if fire.kind is FireKind.ACK:
        changes.update(_after_ack(tx, t, it, res, fire, now, cfg, head))
    else:
        changes.update(_after_callback(tx, t, it, res, fire, now, sent.reliability, head))
    if ack_from and changes["status"] is Status.AWAITING_ACK:  # the next probe waits ack_delay_ms from now
        changes["ack_from_ms"] = now
    if t.status is Status.PAUSED and changes["status"] not in TERMINAL_STATUSES:
        changes["status"] = Status.PAUSED
        changes["due_ms"] = None
    nt = _replace(t, **changes)
    if nt.redrives and nt.rewound is None and _idle(nt):  # redrives queued while this occurrence ran
        nt = _start_redrive(nt, now, _own(nt))
    tx.put(nt)
    return None


def _head_of(it: ResultItem, cfg: MachineConfig) -> str | None:
    """The result's response head, cut to ``cfg.response_head_chars``."""
    head = it.response_head
    return head if head is None or len(head) <= cfg.response_head_chars else head[: cfg.response_head_chars]


def _late_result(tx: _Tx, it: ResultItem, fire: FireRecord | None, now: int, cfg: MachineConfig) -> None:
    """A worker's result for an attempt already given up as lost (docs/architecture.md#lost-workers):
    recorded in the history, the task left as it is. That is a callback result for the task's current
    occurrence whose attempt is older than the task's latest one (the at_least_once fire was sent
    again), or, for an at_most_once fire recorded ``unknown``, the unknown attempt itself.
    (A result that arrives twice is recorded twice; the worker sends each once.)"""
    del fire
    if it.attempt is None or it.outcome is Outcome.LOST or it.not_sent:  # no attempt to record
        return
    task_id, _, seq = it.fire_id.rpartition("-")
    t = tx.task(task_id)
    if t is None or not seq.isdigit():
        return
    if it.kind is FireKind.ACK:  # a lost ACK probe is on record as ack_failed, like a refused one
        return
    i = _running_index(t, it.fire_id) if t.running else None
    if i is not None:  # overlap allow: an occurrence still running, sent again after a lost attempt
        newer = it.attempt < t.running[i].attempt
    else:
        newer = t.fire_id == it.fire_id and (it.attempt < t.attempt or (
            it.attempt == t.attempt and t.inflight is None and t.last_result is ExecutionResult.UNKNOWN))
    if not newer:
        return
    head = _head_of(it, cfg)
    spec = t.spec
    tx.w.executions.append(
        Execution(
            task_id=t.id, fire_id=it.fire_id, seq=int(seq), attempt=it.attempt, kind=it.kind,
            result=_classify(it, it.kind, spec.reliability), status_code=it.status_code, latency_ms=it.latency_ms,
            worker=it.worker, url=spec.callback_url,
            scene=spec.scene, fired_ms=now, finished_ms=now, response_head=head,
        )
    )


NOT_SENT_WAIT_MS = 200
"""The wait before a fire not sent is planned again, doubled for each time in a row it was not sent."""
NOT_SENT_WAIT_MAX_MS = 5_000


def not_sent_wait_ms(times: int) -> int:
    """The wait before planning again a fire not sent ``times`` times in a row (200 ms doubling, at
    most 5 s): a worker whose queue is full or whose clock stepped is not asked again at once.

    >>> [not_sent_wait_ms(n) for n in (1, 2, 3, 5, 6, 40)]
    [200, 400, 800, 3200, 5000, 5000]
    """
    return min(NOT_SENT_WAIT_MAX_MS, NOT_SENT_WAIT_MS << min(max(times, 1) - 1, 8))


def _not_sent(tx: _Tx, t: Task, fire: FireRecord, now: int) -> ItemResult:
    """``fire`` never left its node (docs/architecture.md#not-sent): it is planned again, no earlier
    than the time it was planned for, after :func:`not_sent_wait_ms`, and the attempt number it took
    is free (``free_attempts`` for a callback, ``ack_base`` for an ACK probe), so it uses up no retry
    and no probe whatever the reliability; no history row (nothing was delivered, nor tried)."""
    if t.running and fire.kind is FireKind.CALLBACK:
        i = _running_index(t, fire.fire_id)
        if i is not None:
            r = t.running[i]
            due = max(now + not_sent_wait_ms(r.not_sent + 1), fire.not_before_ms)
            nr = _replace(r, due_ms=None if t.status is Status.PAUSED else due, inflight=False,
                          free_attempts=r.free_attempts + 1, not_sent=r.not_sent + 1, occ_spec=None)
            tx.put(_replace(t, running=_with_running(t, i, nr), updated_ms=now))
            return None
    if t.inflight != fire.fire_id:  # cannot happen with a correct store; keep the task as is
        log.warning("not-sent result for fire=%s but task=%s has inflight=%s", fire.fire_id, t.id, t.inflight)
        return None
    due = max(now + not_sent_wait_ms(t.not_sent + 1), fire.not_before_ms)
    changes: dict[str, Any] = {"inflight": None, "occ_spec": None, "not_sent": t.not_sent + 1, "updated_ms": now,
                               "due_ms": None if t.status is Status.PAUSED else due}
    if fire.kind is FireKind.ACK:
        changes["ack_base"] = t.ack_base + 1
    else:
        changes["free_attempts"] = t.free_attempts + 1
    tx.put(_replace(t, **changes))
    return None


_DONE: dict[str, Any] = {"status": Status.DONE, "due_ms": None}
_FAILED: dict[str, Any] = {"status": Status.FAILED, "due_ms": None}
_INACTIVE: dict[str, Any] = {"status": Status.INACTIVE, "due_ms": None}


def _after_callback(
    tx: _Tx, t: Task, it: ResultItem, res: ExecutionResult, fire: FireRecord, now: int, sent_as: Reliability,
    head: str | None,
) -> dict[str, Any]:
    """Changes after a callback attempt's result (``t`` is the task before it; ``sent_as`` the
    reliability the attempt was sent with: an at_most_once fire is never sent again). An
    occurrence that fails for good leaves a dead letter (docs/architecture.md#dead-letters)."""
    if t.rewound is not None:
        return _after_redriven(tx, t, it, res, fire, now, sent_as, head)
    spec = t.spec
    periodic = spec.type is TaskType.PERIODIC
    if res is ExecutionResult.SUCCESS:
        if periodic:
            return {**_next_occurrence(tx, t, now), "fail_count": 0}
        if spec.ack_url is not None:
            return {"status": Status.AWAITING_ACK, "ack_attempt": t.ack_base, "due_ms": now + spec.ack_delay_ms}
        return _DONE
    decision = _retry_or_end(t, it, res, fire, now, sent_as)
    if not isinstance(decision, FailureKind):
        return decision
    _dead_letter(tx, t, it, res, fire, now, decision, head)
    if res is ExecutionResult.NOT_FOUND:
        return _INACTIVE if periodic else _FAILED
    if res is ExecutionResult.UNKNOWN:
        return _next_occurrence(tx, t, now, lost=True) if periodic else _FAILED
    if not periodic:
        return _FAILED
    fails = t.fail_count + 1
    if fails >= spec.max_fails:
        return {**_INACTIVE, "fail_count": fails}
    return {**_next_occurrence(tx, t, now), "fail_count": fails}


THROTTLE_STATUSES = frozenset({429, 503})


def _retry_or_end(
    t: Task, it: ResultItem, res: ExecutionResult, fire: FireRecord, now: int, sent_as: Reliability
) -> dict[str, Any] | FailureKind:
    """The retry of a failed callback attempt (docs/architecture.md#retry-policy), or why the
    occurrence failed for good.

    A 429/503 with ``Retry-After`` is *throttled*: the retry waits at least until the time it gave,
    and the attempt is free (does not count against ``max_retries``) while the occurrence has been
    throttled for less than ``retry.max_throttle_ms``. Attempts count from the task's
    ``free_attempts`` on (throttled ones, and those made before a redrive)."""
    spec = t.spec
    policy = spec.retry_policy
    code = it.status_code
    if res is ExecutionResult.NOT_FOUND:
        return FailureKind.NON_RETRYABLE
    if res is ExecutionResult.UNKNOWN:
        return FailureKind.UNKNOWN
    if res is ExecutionResult.FAILED and (it.no_retry or code in policy.non_retryable_statuses):
        return FailureKind.NON_RETRYABLE
    if sent_as is not Reliability.AT_LEAST_ONCE or spec.reliability is not Reliability.AT_LEAST_ONCE:
        return FailureKind.RETRIES_EXHAUSTED
    free, since = t.free_attempts, t.throttled_since_ms
    if res is ExecutionResult.FAILED and code in THROTTLE_STATUSES and it.retry_after_ms > 0:
        since = since or now
        if now - since < policy.max_throttle_ms:
            free += 1
    counted = fire.attempt - free
    if counted > spec.max_retries:
        return FailureKind.RETRIES_EXHAUSTED
    due = now if res is ExecutionResult.LOST else now + policy.wait_ms(max(1, counted), fire.fire_id)
    return {
        "status": Status.FIRING, "due_ms": max(due, it.retry_after_ms), "free_attempts": free,
        "throttled_since_ms": since,
    }


_NOTIFIED = {Status.FAILED: NoticeType.TASK_FAILED, Status.INACTIVE: NoticeType.TASK_INACTIVE}


def _flow_notice(tx: _Tx, cmd: FlowNotices, key: str, until: int) -> ItemResult:
    """A flow's receiver held it with ``Retry-After`` until ``until`` (0: the hold ended)."""
    if not cmd.url:
        return None
    kind = NoticeType.FLOW_PAUSED if until else NoticeType.FLOW_RESUMED
    detail = (f"flow {key} held by its receiver's Retry-After until {until}" if until
              else f"flow {key} sends again")
    tx.w.notices.append(Notice(id=f"flow.{key}.{kind.value}.{cmd.now_ms}", type=kind, task_id="", fire_id="",
                               at_ms=cmd.now_ms, detail=detail[:512], url=cmd.url))
    return None


def _notice(tx: _Tx, t: Task, kind: NoticeType, at: int, detail: str, key: str = "") -> None:
    """A notification of ``t``'s to its ``notify_url`` (the caller checked there is one)."""
    url = t.spec.notify_url
    assert url is not None
    tx.w.notices.append(Notice(
        id=f"{t.id}.{kind.value}.{key or at}", type=kind, task_id=t.id, fire_id=t.fire_id, at_ms=at,
        detail=detail[:512], url=url, traceparent=t.spec.traceparent,
    ))


def _dead_letter(
    tx: _Tx, t: Task, it: ResultItem, res: ExecutionResult, fire: FireRecord, now: int, kind: FailureKind,
    head: str | None,
) -> None:
    sent = t.occ_spec or t.spec
    ack = fire.kind is FireKind.ACK
    dl = DeadLetter(
        id=f"{fire.fire_id}.{'ack' if ack else ''}{fire.attempt}", task_id=t.id, fire_id=fire.fire_id, seq=t.seq,
        kind=kind, attempts=fire.attempt, status_code=it.status_code, response_head=head, at_ms=now,
        flow=flow_of(sent), scene=sent.scene, url=(sent.ack_url if ack else sent.callback_url) or "",
        reliability=sent.reliability, sched_ms=t.sched_ms, result=res, namespace=t.spec.namespace,
    )
    tx.w.dead[dl.id] = dl
    if t.spec.notify_url:
        _notice(tx, t, NoticeType.DEAD_LETTER, now, f"{kind.value}: {res.value} after {fire.attempt} attempt(s), "
                f"status {it.status_code}; dead letter {dl.id}", key=dl.id)


def _after_ack(
    tx: _Tx, t: Task, it: ResultItem, res: ExecutionResult, fire: FireRecord, now: int, cfg: MachineConfig,
    head: str | None,
) -> dict[str, Any]:
    if res is ExecutionResult.ACK_SUCCESS:
        return _DONE
    if fire.attempt - t.ack_base < cfg.ack_ttl:
        return {"status": Status.AWAITING_ACK, "due_ms": now + t.spec.ack_delay_ms}
    _dead_letter(tx, t, it, res, fire, now, FailureKind.ACK_FAILED, head)
    return _FAILED


# -------------------------------------------------------------------------------------------------
# dead letters and redrives

MAX_QUEUED_REDRIVES = 1_000
"""Redriven occurrences one periodic task may have waiting (a bulk redrive beyond it is refused per item)."""


def acking(t: Task) -> bool:
    """Whether the delayed task is in its ACK phase (its callback answered 2xx; ACK probes to come),
    paused there or not: what it does next needs its ``ack_url`` (docs/api.md#patch-apiv1taskstask_id)."""
    if t.status is Status.AWAITING_ACK:
        return True
    return t.status is Status.PAUSED and t.spec.type is TaskType.DELAYED and (
        t.ack_attempt > t.ack_base or t.last_result is ExecutionResult.SUCCESS)


def _idle(t: Task) -> bool:
    """Nothing of the task's own is running or retrying: a redrive may start."""
    return t.inflight is None and t.status in (Status.PENDING, Status.INACTIVE, Status.DONE, Status.FAILED)


def _own(t: Task) -> Rewound:
    return Rewound(
        status=t.status, seq=t.seq, sched_ms=t.sched_ms, due_ms=t.due_ms, attempt=t.attempt,
        ack_attempt=t.ack_attempt, free_attempts=t.free_attempts, throttled_since_ms=t.throttled_since_ms,
        skipped_to=t.skipped_to, started_ms=t.started_ms, buffered=t.buffered,
    )


def _start_redrive(t: Task, now: int, own: Rewound) -> Task:
    """The periodic task rewound to the first queued redrive, due now, its own occurrence put aside."""
    seq, sched, attempts = t.redrives[0]
    return _replace(
        t, rewound=own, redrives=t.redrives[1:], status=Status.FIRING, seq=seq, sched_ms=sched, due_ms=now,
        attempt=attempts, ack_attempt=0, free_attempts=attempts, throttled_since_ms=0, skipped_to=False,
        started_ms=None, buffered=False, updated_ms=now,
    )


def _end_redrive(t: Task, now: int) -> dict[str, Any]:
    """Changes when a redriven occurrence ends: the next queued redrive, or the task's own state."""
    own = t.rewound
    assert own is not None
    if t.redrives:
        nt = _start_redrive(t, now, own)
        return {k: getattr(nt, k) for k in ("rewound", "redrives", "status", "seq", "sched_ms", "due_ms", "attempt",
                                            "ack_attempt", "free_attempts", "throttled_since_ms", "skipped_to",
                                            "started_ms", "buffered")}
    return {
        "rewound": None, "status": own.status, "seq": own.seq, "sched_ms": own.sched_ms, "due_ms": own.due_ms,
        "attempt": own.attempt, "ack_attempt": own.ack_attempt, "free_attempts": own.free_attempts,
        "throttled_since_ms": own.throttled_since_ms, "skipped_to": own.skipped_to, "started_ms": own.started_ms,
        "buffered": own.buffered,
    }


def _after_redriven(
    tx: _Tx, t: Task, it: ResultItem, res: ExecutionResult, fire: FireRecord, now: int, sent_as: Reliability,
    head: str | None,
) -> dict[str, Any]:
    """A redriven periodic occurrence's result: retried by the task's policy; when it ends (success,
    or failed for good: a new dead letter) the task goes back to its own schedule, untouched."""
    if res is not ExecutionResult.SUCCESS:
        decision = _retry_or_end(t, it, res, fire, now, sent_as)
        if not isinstance(decision, FailureKind):
            return decision
        _dead_letter(tx, t, it, res, fire, now, decision, head)
    return _end_redrive(t, now)


def _redrive(tx: _Tx, dead_id: str, now: int, counts_quota: bool = False) -> ItemResult:
    """Deliver a dead letter's occurrence again, same fire id, its attempts continuing, with a full
    retry budget; the dead letter is removed (a new one is written if it fails for good again).
    ``counts_quota`` (``RedriveDeadLetters.counts_quota``): refused, the dead letter kept, when it
    would make a finished task unfinished past its namespace's ``max_pending_tasks``."""
    dl = tx.dead(dead_id)
    if dl is None:
        return NotFoundError(f"dead letter {dead_id} not found", "id")
    t = tx.task(dl.task_id)
    if t is None:
        return NotFoundError(f"task {dl.task_id} of dead letter {dead_id} no longer exists", "task_id")
    if t.status is Status.PAUSED:
        return IllegalTransitionError(f"task {t.id} is paused; resume it before a redrive", "status")
    if t.spec.type is TaskType.DELAYED:
        if t.status is not Status.FAILED:
            return IllegalTransitionError(f"task {t.id} is {t.status}: only a failed task is redriven", "status")
        nt = _replace(
            t, status=Status.FIRING, due_ms=now, ack_base=t.ack_attempt, free_attempts=t.attempt,
            throttled_since_ms=0, updated_ms=now,
        )
    else:
        queued = {q[0] for q in t.redrives}
        if dl.seq in queued or (t.rewound is not None and t.seq == dl.seq):
            return IllegalTransitionError(f"occurrence {dl.fire_id} is already being redriven", "id")
        if len(t.redrives) >= MAX_QUEUED_REDRIVES:
            return IllegalTransitionError(
                f"task {t.id} has {MAX_QUEUED_REDRIVES} redrives waiting already; retry later", "id"
            )
        nt = _replace(t, redrives=(*t.redrives, (dl.seq, dl.sched_ms, dl.attempts)), updated_ms=now)
        if nt.rewound is None and _idle(nt):
            nt = _start_redrive(nt, now, _own(nt))
    if counts_quota and (over := _revive_over_quota(tx, t, nt)) is not None:
        return over
    tx.put(nt)
    tx.w.dead[dead_id] = None
    return dl


def _delete_dead(tx: _Tx, dead_id: str) -> ItemResult:
    if tx.dead(dead_id) is None:
        return False
    tx.w.dead[dead_id] = None
    return True


def _remove(tx: _Tx, t: Task) -> None:
    tx.delete(t)
    if t.inflight is not None:
        tx.w.fires[t.inflight] = None
    for r in t.running:
        if r.inflight:
            tx.w.fires[r.fire_id(t.id)] = None
    key = idem_key(t.spec.namespace, t.spec.idempotency_key)
    if key is not None and tx.idem(key) == t.id:
        tx.w.idem[key] = None
    tx.w.history_deletes.append(t.id)


def _delete(tx: _Tx, tid: str) -> ItemResult:
    t = tx.task(tid)
    if t is None:
        return NotFoundError(f"task {tid} not found", "task_id")
    _remove(tx, t)
    return t


def _pause(tx: _Tx, tid: str, now: int) -> ItemResult:
    t = tx.task(tid)
    if t is None:
        return NotFoundError(f"task {tid} not found", "task_id")
    if t.status not in (Status.PENDING, Status.FIRING, Status.AWAITING_ACK):
        return IllegalTransitionError(f"cannot pause a task that is {t.status}", "status")
    running = tuple(_replace(r, due_ms=None) if r.due_ms is not None else r for r in t.running)
    nt = _replace(t, status=Status.PAUSED, due_ms=None, updated_ms=now, running=running)
    tx.put(nt)
    return nt


def _resume(
    tx: _Tx, tid: str, now: int, from_schedule: bool = False, drops_paused: bool = False, records_dropped: bool = False,
    counts_quota: bool = False,
) -> ItemResult:
    t = tx.task(tid)
    if t is None:
        return NotFoundError(f"task {tid} not found", "task_id")
    periodic = t.spec.type is TaskType.PERIODIC
    if t.status is Status.INACTIVE and periodic:
        nxt = next_scheduled(t, now)
        nt = _replace(
            t,
            status=Status.PENDING,
            seq=t.seq + 1,
            attempt=0,
            ack_attempt=0,
            free_attempts=0,
            throttled_since_ms=0,
            fail_count=0,
            due_ms=nxt + jitter(t.id, t.seq + 1, t.spec.jitter_ms),
            sched_ms=nxt,
            updated_ms=now,
            backfill=None,
        )
        if _ends(tx, t, t.seq + 1, nxt):
            nt = _replace(nt, status=Status.DONE, due_ms=None)
        if counts_quota and (over := _revive_over_quota(tx, t, nt)) is not None:
            return over
    elif t.status is not Status.PAUSED:
        return IllegalTransitionError(f"cannot resume a task that is {t.status}", "status")
    elif t.ack_attempt > t.ack_base or (t.last_result is ExecutionResult.SUCCESS and t.spec.ack_url and not periodic):
        # the probe the pause held: no sooner than ack_delay_ms after its wait began (when that is known)
        due = now if t.ack_from_ms is None else max(now, t.ack_from_ms + t.spec.ack_delay_ms)
        nt = _replace(t, status=Status.AWAITING_ACK, due_ms=due, updated_ms=now)
    elif t.attempt > 0:
        nt = _replace(t, status=Status.FIRING, due_ms=max(now, t.sched_ms), updated_ms=now)
        if drops_paused and periodic and not from_schedule:  # what came due while paused is dropped
            nt = _replace(nt, resumed_ms=now)
    elif t.backfill is not None and t.backfill.current:  # a backfill occurrence fires now (docs: #backfill)
        nt = _replace(t, status=Status.PENDING, due_ms=now, updated_ms=now)
    elif periodic:
        # resume_from now: what passed while paused is dropped; schedule: it is missed (catch-up rule)
        nxt = t.sched_ms if t.sched_ms >= now or from_schedule else next_scheduled(t, now)
        if records_dropped and nxt > t.sched_ms:
            _skipped(tx, t, t.sched_ms, nxt, now, PAUSED_DROP, "dropped_paused")
        nt = _replace(
            t, status=Status.PENDING, due_ms=nxt + jitter(t.id, t.seq, t.spec.jitter_ms), sched_ms=nxt, updated_ms=now
        )
        if _ends(tx, t, t.seq, nxt):
            nt = _replace(nt, status=Status.DONE, due_ms=None)
    else:  # a delayed task: its occurrence at its time (and its jitter offset: drops_paused)
        offset = jitter(t.id, t.seq, t.spec.jitter_ms) if drops_paused else 0
        nt = _replace(t, status=Status.PENDING, due_ms=max(now, t.sched_ms + offset), updated_ms=now)
    if nt.redrives and nt.rewound is None and _idle(nt):
        nt = _start_redrive(nt, now, _own(nt))
    if t.status is Status.PAUSED and t.running:  # running occurrences' retries held by the pause go on now
        nt = _replace(nt, running=tuple(_replace(r, due_ms=now) if not r.inflight and r.due_ms is None else r
                                        for r in nt.running))
    tx.put(nt)
    return nt


def _trigger(tx: _Tx, tid: str, now: int, refuses_planned: bool = False, refuses_sent_ahead: bool = False) -> ItemResult:
    t = tx.task(tid)
    if t is None:
        return NotFoundError(f"task {tid} not found", "task_id")
    if t.status is not Status.PENDING or t.inflight is not None:
        return IllegalTransitionError(f"cannot trigger a task that is {t.status}", "status")
    if t.backfill is not None and t.backfill.current:
        return IllegalTransitionError("cannot trigger a task while a backfill runs", "status")
    planned = refuses_planned and any(r.sched_ms > now for r in t.running)
    if planned or (refuses_sent_ahead and t.last_fire_ms is not None and t.last_fire_ms > now):
        # the schedule after the triggered occurrence would take a later instant a fire was sent for
        # again: an occurrence planned for it is on its way (overlap allow), or an attempt sent ahead
        # for it was settled lost and its worker may still send it then
        if planned:
            return IllegalTransitionError("cannot trigger a task while an occurrence planned for a later instant "
                                          "is on its way", "status")
        return IllegalTransitionError(
            f"cannot trigger a task before {t.last_fire_ms} (epoch ms): an attempt sent ahead for that instant "
            "may still go out", "status")
    nt = _replace(t, due_ms=now, sched_ms=now, updated_ms=now)
    tx.put(nt)
    return nt


_SCHEDULE_FIELDS = frozenset({"interval_ms", "run_at", "cron_expr", "timezone", "start_at", "end_at", "max_runs",
                              "jitter_ms"})
"""Fields whose change moves a task's next occurrence."""


def _update(tx: _Tx, cmd: UpdateTask, now: int) -> ItemResult:
    """Replace the definition (docs/architecture.md#update): refused unless the task is still at
    ``cmd.version``; a change of nothing keeps the version. A fire in flight finishes as it was
    sent: its result is judged by the reliability it had (``occ_spec``); what follows (retries,
    the ACK probe, the next occurrence) follows the new definition. A schedule change of an
    occurrence not started yet moves it to the new schedule's first instant after now and after
    the last fire's time (a delayed task: to its new time); one started keeps its retries and the next is taken from the new
    schedule, after the instant of the one that ran, so no instant fires twice."""
    t = tx.task(cmd.task_id)
    if t is None:
        return NotFoundError(f"task {cmd.task_id} not found", "task_id")
    if t.version != cmd.version:
        return PreconditionFailed(
            f"task {t.id} is at version {t.version}, not {cmd.version}", "If-Match"
        )
    old, new = t.spec, cmd.spec
    if new.type is not old.type:
        return IllegalTransitionError("a task's type cannot be changed; create a new task", "type")
    if new.idempotency_key != old.idempotency_key:
        return IllegalTransitionError("a task's idempotency_key cannot be changed", "idempotency_key")
    if new.namespace != old.namespace:
        return IllegalTransitionError("a task's namespace cannot be changed; create a new task", "namespace")
    changed = [f.encode_name for f in msgspec.structs.fields(old) if getattr(old, f.name) != getattr(new, f.name)]
    if not changed:
        return t
    if cmd.checks_payload_quota and new.payload_json != old.payload_json:
        q = _quotas(tx, new.namespace)
        if q is not None and q.max_payload_bytes is not None and len(new.payload_json) > q.max_payload_bytes:
            return QuotaExceeded(
                f"namespace {new.namespace}: a payload of {len(new.payload_json)} bytes, more than its "
                f"max_payload_bytes {q.max_payload_bytes}; nothing was changed", "max_payload_bytes",
                namespace=new.namespace)
    nt = _replace(
        t, spec=new, version=t.version + 1, updated_ms=now,
        occ_spec=(t.occ_spec or old) if t.inflight is not None else None,
        running=tuple(_replace(r, occ_spec=r.occ_spec or old) if r.inflight else r for r in t.running),
    )
    started = t.inflight is not None or t.attempt > 0 or t.ack_attempt > t.ack_base or t.status is Status.AWAITING_ACK
    if _SCHEDULE_FIELDS.intersection(changed) and not started and t.backfill is not None and t.backfill.current:
        # the backfill occurrence not started yet is taken again from the new schedule
        moved = _backfill_step(tx, nt, now, t.seq, t.sched_ms, t.backfill.after_ms)
        if t.status is Status.PAUSED and moved["status"] is Status.PENDING:
            moved["due_ms"] = None
            moved["status"] = Status.PAUSED
        nt = _replace(nt, **moved)
    elif _SCHEDULE_FIELDS.intersection(changed) and not started and t.status in (Status.PENDING, Status.PAUSED):
        if new.type is TaskType.DELAYED:
            sched = new.run_at if new.run_at is not None else t.created_ms + (new.interval_ms or 0)
        else:  # (allow: and after the instants still running, which may have been sent ahead of now; and
            # after the last fire's time: one planned ahead and settled lost may still go out then)
            floor = max(now, t.last_fire_ms or 0) if cmd.after_last_fire else now
            sched = next_scheduled(nt, max([floor, *(r.sched_ms for r in t.running)]))
        due = sched + jitter(t.id, t.seq, new.jitter_ms)
        nt = _replace(nt, sched_ms=sched, due_ms=due if t.status is Status.PENDING else None)
        if new.type is TaskType.PERIODIC and _ends(tx, nt, t.seq, sched):
            nt = _replace(nt, status=Status.DONE, due_ms=None)
    if cmd.moves_waiting and _SCHEDULE_FIELDS.intersection(changed):
        nt = _move_waiting(tx, nt, cmd, now)
    tx.put(nt)
    tx.w.executions.append(Execution(
        task_id=t.id, fire_id=t.fire_id, seq=t.seq, attempt=0, kind=FireKind.EVENT, result=ExecutionResult.UPDATED,
        status_code=None, latency_ms=None, worker="", url=new.callback_url, scene=new.scene, fired_ms=now,
        finished_ms=now, response_head=f"version {nt.version}: {', '.join(changed)}",
    ))
    return nt


def _move_waiting(tx: _Tx, t: Task, cmd: UpdateTask, now: int) -> Task:
    """``t`` (already at its new definition) with what waits behind its running occurrence moved to
    the new schedule (``UpdateTask.moves_waiting``): its own occurrence put aside by a redrive, not
    started, to the first instant after now (and the last fire's time), or the task's end when the
    new bounds exclude it; a backfill waiting its turn dropped when its range holds no instant of
    the new schedule any more."""
    own = t.rewound
    if own is not None and own.status is Status.PENDING and own.attempt == 0 and t.spec.type is TaskType.PERIODIC:
        floor = max(now, t.last_fire_ms or 0) if cmd.after_last_fire else now
        sched = next_scheduled(t, floor)
        moved = _replace(own, sched_ms=sched, due_ms=sched + jitter(t.id, own.seq, t.spec.jitter_ms))
        if _ends(tx, t, own.seq, sched):
            moved = _replace(moved, status=Status.DONE, due_ms=None)
        t = _replace(t, rewound=moved)
    bf = t.backfill
    if bf is not None and not bf.current and not backfill_instants(t, bf.next_ms, bf.end_ms, 1):
        t = _replace(t, backfill=None)
    return t


MAX_BACKFILL = 10_000
"""The most occurrences one backfill request fires (docs/api.md#backfill)."""
TOO_MANY_OCCURRENCES = "too_many_occurrences"
"""The error ``reason`` of a backfill range holding more than :data:`MAX_BACKFILL` occurrences."""


def backfill_instants(t: Task, start_ms: int, end_ms: int, limit: int) -> list[int]:
    """The periodic task's scheduled instants in ``[start_ms, end_ms)`` that its bounds allow
    (``start_at``, ``end_at``), in order, at most ``limit`` of them. The schedule reaches back
    before the task was created: an interval task's grid is ``created + k * interval_ms`` for every
    ``k`` (``start_at + k * interval_ms`` with ``start_at``), a cron task's every cron instant."""
    s = t.spec
    lo = start_ms if s.start_at is None else max(start_ms, s.start_at)
    end = end_ms if s.end_at is None else min(end_ms, s.end_at)
    if s.interval_ms is not None:
        iv = s.interval_ms
        anchor = t.created_ms if s.start_at is None else s.start_at
        first = anchor - (anchor - lo) // iv * iv  # the first grid instant at or after lo
        return list(range(first, end, iv)[:limit]) if first < end else []
    assert s.cron_expr is not None
    out: list[int] = []
    at = lo - 1
    while len(out) < limit:
        try:
            nxt = next_cron_fire(s.cron_expr, s.timezone, at)
        except ValueError:  # the schedule has no further instant
            break
        if nxt >= end:
            break
        out.append(nxt)
        at = nxt
    return out


def _backfill(tx: _Tx, cmd: BackfillTask, now: int) -> ItemResult:
    """Start a backfill (docs/architecture.md#backfill): the occurrences scheduled in ``[start,
    end)`` fire now, in order, each its own occurrence (seq, fire id), then the regular schedule
    resumes. An occurrence not started yet gives way (it fires after the backfill); one running
    finishes first. One backfill at a time per task; ``end`` not after now."""
    t = tx.task(cmd.task_id)
    if t is None:
        return NotFoundError(f"task {cmd.task_id} not found", "task_id")
    if t.spec.type is not TaskType.PERIODIC:
        return IllegalTransitionError("only a periodic task has a schedule to backfill", "type")
    if t.status not in (Status.PENDING, Status.FIRING, Status.PAUSED):
        return IllegalTransitionError(f"cannot backfill a task that is {t.status}", "status")
    if t.backfill is not None:
        return IllegalTransitionError(
            f"task {t.id} is still backfilling (up to {t.backfill.end_ms}); one backfill at a time", "status"
        )
    if t.rewound is not None or t.redrives:
        return IllegalTransitionError(f"task {t.id} is redriving an older occurrence; backfill when it ends", "status")
    if not 0 <= cmd.start_ms < cmd.end_ms <= now:
        return ValidationError(f"start must be before end and end not after now ({now})", "end")
    found = backfill_instants(t, cmd.start_ms, cmd.end_ms, 1)
    if not found:
        return t
    first = found[0]
    end = cmd.end_ms if t.spec.end_at is None else min(cmd.end_ms, t.spec.end_at)
    waiting = t.inflight is None and t.attempt == 0 and t.ack_attempt == 0 and t.status is not Status.FIRING
    if waiting:  # the occurrence not started yet gives way; the first backfilled one takes its seq
        _skipped_before_backfill(tx, t, t.sched_ms - 1, first, now)
        bf = Backfill(next_ms=first + 1, end_ms=end, after_ms=t.sched_ms - 1, left=MAX_BACKFILL - 1, current=True)
        nt = _replace(t, sched_ms=first, due_ms=now if t.status is Status.PENDING else None, skipped_to=False,
                      backfill=bf, updated_ms=now)
    else:  # the running occurrence ends first (_next_occurrence)
        bf = Backfill(next_ms=first, end_ms=end, after_ms=t.sched_ms, left=MAX_BACKFILL, current=False)
        nt = _replace(t, backfill=bf, updated_ms=now)
    tx.put(nt)
    tx.w.executions.append(Execution(
        task_id=t.id, fire_id=t.fire_id, seq=t.seq, attempt=0, kind=FireKind.EVENT, result=ExecutionResult.BACKFILL,
        status_code=None, latency_ms=None, worker="", url=t.spec.callback_url, scene=t.spec.scene, fired_ms=now,
        finished_ms=now, response_head=f"backfill of the occurrences scheduled in [{cmd.start_ms}, {cmd.end_ms}) ms, "
                                       f"the first at {first}",
    ))
    return nt


def _skipped_before_backfill(tx: _Tx, t: Task, after: int, first: int, now: int) -> None:
    """The skipped row for the regular instants after ``after`` and before the backfill's ``first``
    instant: the schedule resumes after the range, so they do not fire."""
    try:
        regular = next_scheduled(t, after)
    except ValueError:
        return
    if regular < first:
        _skipped(tx, t, regular, first, now, "before the backfilled range, after which the schedule resumes",
                 "skipped_backfill")


def _backfill_step(tx: _Tx, t: Task, now: int, seq: int, next_ms: int, after_ms: int) -> dict[str, Any]:
    """Changes that make occurrence ``seq`` the backfill's next one, its first instant at or after
    ``next_ms`` (due now), or, when it has none left, the regular schedule's first instant after
    ``after_ms`` (catch-up decides at its dispatch if that has passed). Bounds end the task. When
    the backfill starts after a regular occurrence, the regular instants from it to the range
    (which the schedule resumes after) are recorded as skipped."""
    bf = t.backfill
    assert bf is not None
    found = backfill_instants(t, next_ms, bf.end_ms, 1) if bf.left > 0 else []
    if found and not bf.current:
        _skipped_before_backfill(tx, t, t.sched_ms, found[0], now)
    start = {"status": Status.PENDING, "seq": seq, "attempt": 0, "ack_attempt": 0, "free_attempts": 0,
             "throttled_since_ms": 0, "skipped_to": False, "buffered": False}
    if found:
        nxt = found[0]
        if _ends(tx, t, seq, nxt):
            return {**_DONE, "backfill": None}
        return {**start, "due_ms": now, "sched_ms": nxt,
                "backfill": Backfill(next_ms=nxt + 1, end_ms=bf.end_ms, after_ms=after_ms, left=bf.left - 1,
                                     current=True)}
    try:
        nxt = next_scheduled(t, after_ms)
    except ValueError as exc:  # the schedule has no next instant (deterministic on every replica)
        log.error("task=%s has no next occurrence after its backfill (%s): inactive", t.id, exc)
        return {**_INACTIVE, "backfill": None}
    if _ends(tx, t, seq, nxt):
        return {**_DONE, "backfill": None}
    # passed during the backfill: due now; catch-up decides at its dispatch
    return {**start, "due_ms": max(now, nxt + jitter(t.id, seq, t.spec.jitter_ms)), "sched_ms": nxt, "backfill": None}


def _expire(tx: _Tx, it: ExpireItem) -> ItemResult:
    t = tx.task(it.task_id)
    if t is None or t.status not in TERMINAL_STATUSES or t.updated_ms != it.updated_ms or t.running:
        return False
    _remove(tx, t)
    return True


# -------------------------------------------------------------------------------------------------
# leadership


@dataclass(slots=True)
class LeadershipPlan:
    """What a new leader streams: every due entry for its wheel, every in-flight fire to watch."""

    due: Iterator[tuple[int, str]]
    inflight: Iterator[FireRecord]


def reconcile_on_leadership(view: ScanView, now_ms: int) -> LeadershipPlan:
    """Start-of-term reconciliation (docs/architecture.md#task-rules, Failover).

    The wheel is rebuilt from ``due``; every fire still in ``fires`` had no result: the Monitor
    watches it and, once ``deadline_ms`` passes, proposes :func:`lost_result` for it. The machine
    then re-fires at_least_once fires (same fire id, next attempt) and records at_most_once ones as
    ``unknown``. Nothing is re-sent without a new ``Dispatched`` under the new term.
    """
    del now_ms  # deadlines are compared by the Monitor as time passes
    return LeadershipPlan(view.scan_due(), view.scan_fires())


def lost_result(fire: FireRecord, worker: str = "") -> ResultItem:
    """The Monitor's result for a fire whose deadline passed without an answer."""
    return ResultItem(
        fire_id=fire.fire_id, kind=fire.kind, status_code=None, outcome=Outcome.LOST, response_head=None,
        latency_ms=None, worker=worker or fire.worker, attempt=fire.attempt,
    )


def expired_fires(fires: Iterator[FireRecord] | list[FireRecord], now_ms: int) -> list[ResultItem]:
    """``lost_result`` for every fire whose deadline is at or before ``now_ms``."""
    return [lost_result(f) for f in fires if f.deadline_ms <= now_ms]


__all__ = [
    "DEFAULT_CONFIG",
    "Applied",
    "Created",
    "Effect",
    "FireRecord",
    "FlowSet",
    "LeadershipPlan",
    "MachineConfig",
    "MAX_BACKFILL",
    "MolensError",
    "ScanView",
    "SendFire",
    "View",
    "WheelAdd",
    "WheelRemove",
    "Writes",
    "apply",
    "backfill_instants",
    "expired_fires",
    "first_due",
    "jitter",
    "lost_result",
    "next_scheduled",
    "reconcile_on_leadership",
]
