"""Whole-scheduler simulation in virtual time: machine + replicas + wheel + dispatcher +
monitor + workers + receivers, with seeded faults, checking the delivery promises of docs/architecture.md#task-rules.

Raft is replaced by a single-log stand-in with Raft's observable behaviour: a leader (one per
term) proposes; a proposal commits after a small latency, in proposal order, and is applied by every
live replica (a restarted replica catches up from the log). When the leader crashes or is
partitioned away, a random *prefix* of its uncommitted proposals is committed by the next leader
(entries it had replicated to a majority) and the rest are lost -- so a ``Dispatched`` entry can
commit without its leader ever sending the fire, the case failover reconciliation exists for.

The leader runs the product's own leader logic (docs/architecture.md#actors), one instance per
term: the TimeWheel's :class:`LeaderWheel` (a :class:`HorizonWheel`, docs/architecture.md#near-term-window)
with a small horizon (300 ms to 3 s, sometimes 10 min) fed by the machine's wheel effects a few ms
after the replica applied them (the mailbox: the loader can read a newer ``due`` than the wheel has
heard of) and filled from ``due`` slice by slice (slices of 1 to 4,096 entries, each its own event,
sometimes delayed: a slow loader); the Dispatcher's :class:`DispatchPlan` and :class:`FlowControl`
planning the tasks due within the seed's dispatch lead (0, 100 ms or the machine's bound: dispatch
ahead) onto the workers that reported capacity recently, and sending only the fires of entries
committed in its own term, each held by its worker until the due time (``not_before_ms``); the
Monitor's :class:`FireWatch` and :class:`WorkerWatch` giving up fires past their deadline, the
fires of a worker silent for ``WORKER_LOST`` ms, and those a worker's heartbeat no longer lists;
its results buffer flushed every few ms; the Cleaner's :class:`ExpiryScan` expiring terminal tasks
after the retention. Only the actors' mailboxes and alarms (events here), time, the network (each
worker's ordered link to the leader: results and heartbeats), the disk (Raft: a log stand-in) and
the HTTP receivers are simulated; :mod:`tests.sim.mutants` breaks the product's code on purpose to
show the checks catch it. Workers run on every node; receivers answer by the behaviour encoded
in the task's URL (2xx / 404 / 500 / too slow / random; ACK endpoints 2xx or 500) and record every
request they get. Faults per seed: leader crashes (losing its wheel, buffers and its workers'
requests), some of them power losses (a new boot id; the node opens its task store through the product's
``guard_boot`` on a :class:`~tests.sim.disk.SimDisk`, and a store it trusts is torn: an earlier prefix of the
log under the newer applied index, as unsynced lmdb pages may leave it), leader partitions (it steps down, its workers keep going), worker crashes mid-callback,
lost result messages, workers that answer a fire not sent (its queue full, its clock stepped:
docs/architecture.md#not-sent), clients that retry creates with the same idempotency key, flows with a rate,
a concurrency or a pause (lifted later) and receivers answering 429 with Retry-After
(docs/architecture.md#flow-control: the leader runs the real ``FlowControl``), leader losses
right after a slice (often in the middle of a new leader's first fill), creates due at the
window's edge, one ms before and one after it, while the loader moves it, clients asking once for
a backfill of a past range of a periodic task (docs/architecture.md#backfill), often starting before
the task was created, clients pausing and resuming tasks of their own (delayed and periodic, before,
between or in the middle of an occurrence, resumed from now or from their schedule, some twice), clients
triggering tasks of their own (``TriggerTask``: delayed ones before their time, periodic ones with every
``catchup`` and ``overlap``, once or twice at random times; a refused or lost trigger asked again, up to
five times), clients deleting tasks of their own (``DeleteTasks``: delayed ones before their time, with a
fire in flight or a retry waiting, awaiting their ACK or finished, periodic ones at a random time), some
created again afterwards with the same idempotency key, and clients updating delayed tasks of their own
(``UpdateTask``: before their time, moved earlier or later, some into the past; while an attempt is out, a
retry waits or their ACK is awaited; some twice; some with a patch that changes nothing).

After a quiet period the run checks (:func:`check`): replicas identical; at_most_once fire ids
delivered at most once; every request at or after its due time, and within tick + latencies of it
while the cluster is healthy (of the end of the occurrence before it, when that came later: under
``skip``/``buffer_one`` an occurrence starts only when the one before it ended, and catchup all fires
an instant that passed meanwhile then, its due time still its instant); no overlapping requests per task; every at_least_once occurrence
delivered with 2xx or ended with its retries exhausted on record; nothing planned for a paused or
Retry-After-held flow, no window of a flow above its rate, no more requests of a flow at once than its
concurrency (:func:`check_flows`; fires of an unlimited flow are never late, whatever other flows
hold back); 404 deactivation and max_fails
exactly at the threshold; the ACK phase; fixed-rate periodic timing without drift; one task per
idempotency key; a fire on a crashed worker given up within ``WORKER_LOST`` ms of the worker's last
heartbeat (:func:`check_lost_workers`); the Cleaner expiring only terminal tasks, and every one past
the retention (:func:`check_expiry`); no alarm spinning in place (a livelock fails the seed). Delivery control (docs/architecture.md#retry-policy, #dead-letters): receivers that
throttle (429 with Retry-After, a few times per fire) and operators who redrive at_least_once dead
letters after fixing the receiver; checked: no retry before the Retry-After time on record, throttled
attempts and attempts not sent never use up retries (an attempt not sent has no history row but
the one of a lost attempt, when its answer reached no leader in time), a failed delayed task has exactly one dead letter and a done one none,
every redrive that applied delivered its fire id again with the attempts continuing (or failed for
good again), and no task is left rewound.
Backfills: an occurrence whose instant is not after the one before is inside a
range the machine accepted, fired after it was asked, and instants go back at most once per backfill
(oldest first within one); an instant fires once, plus once per accepted backfill covering it (at
most once a fire id for at_most_once, as for every fire); the bounds hold for backfilled
occurrences too; every instant of an accepted range fires on an at_least_once task that answers 2xx
(unless an occurrence was lost whole); the occurrence after a backfill is on time from when the
backfill ended. Overlap (docs/architecture.md#overlap): after an occurrence of an at_least_once
task that ran over an instant (its first attempt reached the receiver before it, its result was
applied after it), ``skip``'s next occurrence is not before the result and ``buffer_one``'s is the
first instant after the start, due when the result was applied. Pauses (:func:`check_pauses`): nothing
sent from a ``Dispatched`` entry applied while the task was paused, no instant that came due while it
was paused fired after a resume from now, and a periodic task fires again after its resume. Triggers
(:func:`check_triggers`): the triggered occurrence is due, and scheduled, at the trigger's ``now_ms``, and
reaches the receiver within ``LATENESS_BOUND`` of the trigger's commit while the cluster is healthy (unless
the machine skipped it by its rules); a periodic task's next occurrence is never before the schedule's next
regular instant after the trigger nor at an instant already sent for, and is that instant when the triggered
one ended before it (the trigger adds one occurrence; the other checks leave only the triggered occurrence's
own timing and the instants it took the place of to this one). Deletes (:func:`check_deletes`): nothing of a
deleted task is sent from a ``Dispatched`` entry applied after its delete; right after a replica applies the
delete and on every replica at the end, the task, its fire records, idempotency key, history and dead
letters are gone; a create with the key afterwards makes a new task; the other checks see a deleted task as
it was just before its delete (as the Cleaner's expired ones), but for where it stood at the end. Updates of
delayed tasks (:func:`check_delayed_updates`): a change adds one version and one ``updated`` row, a change of
nothing neither; a schedule change before the first attempt moves the task to its new time (every first
attempt sent after it due then, never at the old time, and sent in time on a healthy cluster: a time already
past is due when the update applied); a change after it starts no second occurrence, the attempts go on and a
waiting retry keeps its time.

    .venv/bin/python -m tests.sim.scheduler_sim --seeds 5000        # ends with: sim: seeds=N failures=F
    .venv/bin/python -m tests.sim.scheduler_sim --seed 17 --trace   # replay one seed
    scripts/sim --scheduler --mutants                               # ends with: mutants: caught=N of M
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import logging
import random
import shutil
import sys
import tempfile
import time
import weakref
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from molens import lmdb_snapshot
from molens.actors.cleaner import INTERVAL_MS as EXPIRY_INTERVAL_MS
from molens.actors.cleaner import ExpiryScan
from molens.actors.dispatcher import REPORT_INTERVAL_S, DispatchPlan, limits_of, with_attempt
from molens.actors.monitor import HELD_GRACE_MS, FireWatch, WorkerWatch, congested, sweep
from molens.actors.supervisor import route_effects
from molens.actors.timewheel import LeaderWheel
from molens.delivery import FireResult, to_result_item
from molens.fsm.commands import (
    BackfillTask,
    Command,
    CreateItem,
    CreateTasks,
    DeleteTasks,
    Dispatched,
    Expire,
    FlowSettings,
    PauseTasks,
    PutFlow,
    RedriveDeadLetters,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
    UpdateTask,
)
from molens.fsm.machine import (
    DEFAULT_CONFIG,
    PAUSED_DROP,
    Applied,
    SendFire,
    jitter,
    next_scheduled,
)
from molens.fsm.memstate import MemoryState
from molens.fsm.store import EntryResult
from molens.model import (
    TERMINAL_STATUSES,
    CatchUp,
    ExecutionResult,
    FailureKind,
    FireKind,
    Outcome,
    Overlap,
    Reliability,
    Status,
    Task,
    TaskSpec,
    TaskType,
    decode_update,
    new_task_id,
    validate_create,
)
from molens.schedule.flows import FlowControl
from molens.schema import MAX_RUNNING, flow_id
from tests.sim.disk import SIM_ROOT, SimDisk

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TICK = 10
COMMIT_LAT = (1, 5)
NET_LAT = (0, 3)
RESULT_FLUSH = 5
DISPATCH_SLACK = 1_000
MAILBOX_LAT = (0, 2)
"""Applied effects reach the leader's wheel this long after the replica applied them."""
LATENESS_BOUND = TICK + COMMIT_LAT[1] + 2 * NET_LAT[1] + MAILBOX_LAT[1] + 1
FAULT_WINDOW = 25_000
END = 100_000
ACK_TTL = 3
WORKER_LOST = 2_000
"""``scheduler.worker_lost_ms``: the leader counts a worker dead this long as lost."""
REPORT_MS = int(REPORT_INTERVAL_S * 1000)
"""Workers report their free capacity and the fires they hold this often (their heartbeat)."""
POOL = 64
"""Each worker's pool: at most this many fires held at once."""
RETENTION_MINUTES = 1
"""``scheduler.task_retention_minutes``: the Cleaner expires tasks terminal for this long."""
EXPIRE_QPS = 50
"""``scheduler.expire_rate_limit_qps``."""
LIVELOCK_EVENTS = 200_000
"""More events than this in one virtual ms: something (an alarm set in the past) spins."""
RECOVERY_WINDOW = 15_000
"""After a fault, how long an affected occurrence may take to recover (deadline + retries)."""


class Violation(AssertionError):
    """A broken promise; the message names the seed and what went wrong."""


@dataclass
class Delivery:
    """One HTTP request as the receiver saw it."""

    task_id: str
    fire_id: str
    kind: FireKind
    attempt: int
    due: int
    at: int
    end: int = -1
    code: int | None = None
    """The answer the receiver gave (None: still running, timed out or cut)."""
    ok: bool = False
    scheduled: int = -1
    """The occurrence's nominal instant as the fire carried it (``X-Molens-Scheduled-At``)."""
    sent_as: Reliability | None = None


@dataclass(frozen=True)
class BackfillAsked:
    """A backfill request the machine accepted (docs/architecture.md#backfill), as committed."""

    start: int
    end: int
    at: int
    """The command's ``now_ms``: no occurrence of it fires before."""
    seq_before: int
    """The task's occurrence then: the backfilled ones are numbered from it on."""

    def covers(self, d: Delivery) -> bool:
        """Whether ``d`` may be one of this backfill's occurrences."""
        return self.start <= d.scheduled < self.end and d.at >= self.at and _seq(d) >= self.seq_before


@dataclass(frozen=True)
class TriggerApplied:
    """A client's ``TriggerTask`` that applied (docs/architecture.md#task-rules), as committed."""

    task_id: str
    index: int
    """Its log index (1-based, as ``dispatch_index``)."""
    at: int
    """When it committed."""
    now_ms: int
    """The command's ``now_ms``: the triggered occurrence's due time and instant."""
    seq: int
    """The occurrence it moved (fire id ``{task id}-{seq}``)."""
    periodic: bool
    next_ms: int | None
    """A periodic task's next regular instant after ``now_ms``: where its schedule continues."""
    before_sched: int
    """The instant of the occurrence it moved; when that is not after ``now_ms`` (it had come due, not
    fired yet) the trigger took its place (and with ``catchup`` all those after it up to ``now_ms``)."""
    full: bool
    """``MAX_RUNNING`` occurrences of an allow task ran then (its own may wait for one or be skipped)."""


@dataclass(frozen=True)
class DeleteApplied:
    """A client's ``DeleteTasks`` that removed a task (docs/architecture.md#task-rules), as committed."""

    task: Any
    """The task as it was just before (its checks still apply to what it did until then)."""
    index: int
    at: int
    now_ms: int


@dataclass(frozen=True)
class UpdateApplied:
    """A client's ``UpdateTask`` of a delayed task that applied (docs/architecture.md#update), as committed."""

    index: int
    at: int
    """When it committed."""
    spec: TaskSpec
    """The definition it carried."""
    before: Task
    after: Task

    @property
    def before_first_attempt(self) -> bool:
        """The task had sent nothing of its occurrence yet (pending, no attempt made, nothing in flight)."""
        b = self.before
        return b.status is Status.PENDING and b.attempt == 0 and b.inflight is None and b.ack_attempt == 0

    @property
    def moves(self) -> bool:
        """A schedule change of an occurrence not started yet: the task goes to its new time."""
        old = self.before.spec
        return self.before_first_attempt and (old.run_at, old.interval_ms, old.jitter_ms) != (
            self.spec.run_at, self.spec.interval_ms, self.spec.jitter_ms)

    def new_due(self) -> int:
        """The new time (``run_at``, or created + ``interval_ms``) plus the task's offset."""
        s, b = self.spec, self.before
        at = s.run_at if s.run_at is not None else b.created_ms + (s.interval_ms or 0)
        return at + jitter(b.id, b.seq, s.jitter_ms)


@dataclass
class Plan:
    behaviour: str
    ack: str | None = None
    idem: str | None = None
    throttle: int = 0
    """``throttle``: the first this-many requests of each fire id answer 429 with Retry-After."""
    task_id: str | None = None
    """The task the client's create found on record under ``idem`` (set when its create is done)."""


@dataclass
class _Job:
    node: str
    incarnation: int
    delivery: Delivery
    fr: SendFire
    done: bool = False


@dataclass
class Leader:
    """One term's leader: the product's pure leader logic (the TimeWheel's :class:`LeaderWheel`, the
    Dispatcher's :class:`DispatchPlan` and :class:`FlowControl`, the Monitor's :class:`FireWatch`
    and :class:`WorkerWatch`, the Cleaner's :class:`ExpiryScan`), with the mailboxes and alarms of
    their actor shells as events of the simulation."""

    node: str
    term: int
    wheel: LeaderWheel
    plan: DispatchPlan
    watch: FireWatch
    workers: WorkerWatch
    scan: ExpiryScan
    backlog: list[str] = field(default_factory=list)
    wake_at: int | None = None
    load_at: int | None = None
    monitor_at: int | None = None
    inbox: list[list[Any]] = field(default_factory=list)
    inbox_at: int = 0
    slices: int = 0
    filled: bool = False
    results: list[ResultItem] = field(default_factory=list)
    flush_at: int | None = None
    flows: FlowControl = field(default_factory=lambda: FlowControl(credit_ms=TICK))
    flow_wake_at: int | None = None


@dataclass(frozen=True)
class Sent:
    """A fire as its leader sent it to a worker."""

    fire_id: str
    attempt: int
    worker: str
    at: int
    deadline: int
    term: int


@dataclass(frozen=True)
class Planned:
    """One fire as the leader planned it: when, its slot (when its flow's bucket let it go: it goes
    at its due time or at once, never before the slot), by which term, in which flow."""

    at: int
    go: float
    term: int
    flow: str


class Sim:
    def __init__(
        self,
        seed: int,
        nodes: int = 3,
        trace: Callable[[str], None] | None = None,
        *,
        t0: int = T0,
        end_ms: int = END,
        workload: Callable[[Sim], None] | None = None,
        faults: bool = True,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.trace = trace
        self.t0 = t0
        self.end_ms = end_ms
        self.custom_workload = workload
        self.with_faults = faults
        self.now = t0
        self._q: list[tuple[int, int, Callable[[], None]]] = []
        self._n = 0
        self.nodes = [f"n{i}" for i in range(nodes)]
        self.alive = dict.fromkeys(self.nodes, True)
        self.incarnation = dict.fromkeys(self.nodes, 0)
        self.replicas = {n: MemoryState() for n in self.nodes}
        self.applied = dict.fromkeys(self.nodes, 0)
        self.noted = 0
        """Log entries whose first apply on ``nodes[0]`` was recorded (a replica rebuilt replays them)."""
        self.root = Path(tempfile.mkdtemp(prefix=f"schedsim-{seed}-", dir=SIM_ROOT))
        weakref.finalize(self, shutil.rmtree, self.root, True)
        self.disk = SimDisk()
        """Each node's task store directory (its boot marker) is synced through it."""
        self.boots = dict.fromkeys(self.nodes, 0)
        self.prng = random.Random(seed * 104_729 + 7)
        """The power-loss draws (the rest of a seed stays as it was)."""
        self.p_power_loss = self.prng.choice([0.0, 0.5, 1.0]) if faults else 0.0
        """Per node crash: the machine loses power (the store's unsynced writes may be torn)."""
        self.power_losses: list[str] = []
        self.stores_discarded = 0
        for n in self.nodes:
            self.open_store(n)
        self.log: list[Command] = []
        self.log_terms: list[int] = []
        """The term each entry of ``log`` was proposed in."""
        self.term = 0
        self.leader: Leader | None = None
        self.pending: list[tuple[int, Command]] = []
        self.survivors: list[tuple[int, Command]] = []
        """Uncommitted entries of a lost leader that the next leader commits before its own (lose_leader)."""
        self.last_commit_at = 0
        self.faults: list[int] = []
        self.deliveries: list[Delivery] = []
        self.jobs: dict[str, list[_Job]] = defaultdict(list)
        self.planned: dict[tuple[str, FireKind, int], int] = {}
        self.plans: dict[str, Plan] = {}
        self.client_n = 0
        self.specs: dict[str, list[TaskSpec]] = defaultdict(list)
        """Every definition a client proposed in an update, by task id (docs/architecture.md#update)."""
        self.created_spec: dict[str, TaskSpec] = {}
        self.settled_on_lost = 0
        """Fires settled because their worker was seen gone or no longer held them (before their deadline)."""
        self.holding: dict[str, dict[str, int]] = {n: defaultdict(int) for n in self.nodes}
        """Fire ids each worker holds (waiting for their due time, running, or their result not sent yet)."""
        self.last_beat: dict[str, int] = {}
        """When each worker last sent a heartbeat (a new leader's Monitor starts from its Raft contact)."""
        self.link_at = dict.fromkeys(self.nodes, 0)
        """Each worker's frames to the leader arrive in order (results and heartbeats share one link)."""
        self.down_since: dict[str, int] = {}
        self.outcomes: dict[int, tuple[Leader, Callable[[Applied], None]]] = {}
        """Proposals whose proposer waits for their outcome (the Cleaner), by ``id`` of the command."""
        self.expired: dict[str, Any] = {}
        """Tasks the Cleaner's ``Expire`` removed, as they were just before (their checks still apply)."""
        self.expired_execs: list[Any] = []
        self.sent: list[Sent] = []
        """Every fire a leader sent to a worker."""
        self.answered: set[tuple[str, int | None]] = set()
        """(fire id, attempt) whose worker sent a result (maybe lost on the way)."""
        self.given_up: dict[tuple[str, int | None], int] = {}
        """(fire id, attempt) -> when the leader's Monitor gave it up as lost."""
        self.downs: dict[str, list[list[int]]] = defaultdict(list)
        """Each node's crashes: [down at, back at]."""
        self.term_end: dict[int, int] = {}
        self.term_start: dict[int, int] = {}
        self.lost_worker_fires = 0
        """Fires on a crashed worker whose early settling ``check_lost_workers`` checked."""
        self.nrng = random.Random(seed * 7_919 + 13)
        """The not-sent draws (the rest of a seed's draws stay as they were)."""
        self.p_not_sent = self.nrng.choice([0.0, 0.0, 0.05, 0.2]) if faults else 0.0
        """Per fire a worker starts: it answers not sent instead (its queue full, its clock stepped, the
        deadline passed while queued: docs/architecture.md#not-sent)."""
        self.not_sent: set[tuple[str, FireKind, int]] = set()
        """(fire id, kind, attempt) of the fires a worker answered not sent."""
        r = self.rng
        self.p_result_loss = r.choice([0.0, 0.0, 0.02, 0.1])
        self.p_slow_result = r.choice([0.0, 0.0, 0.02, 0.05])
        self.p_worker_crash = r.choice([0, 1, 2])
        self.leader_crashes = r.choice([0, 1, 1, 2, 3])
        self.partitions = r.choice([0, 0, 1, 2])
        self.outages = r.choice([0, 0, 1])
        self.lead = r.choice([0, 100, 100, DEFAULT_CONFIG.max_dispatch_lead_ms])
        """Dispatch ahead: the leader plans fires this long before their due time."""
        self.horizon = r.choice([h for h in (300, 300, 1_000, 1_500, 3_000, 600_000) if h >= self.lead + 200])
        """``scheduler.wheel_horizon_ms`` (at least the lead, as a node's config requires)."""
        self.report_ms = REPORT_MS
        if end_ms > END:  # runs over days (cron across DST): an hour, so the loader wakes ~16 times an hour
            self.horizon = 3_600_000
            self.report_ms = 60_000  # and workers report once a minute: the leader plans on its own worker
        self.slice_limit = r.choice([1, 2, 3, 8, 4096])
        self.loader_delay = r.choice([0, 0, 0, 20, 200, 1_500])
        """A slow loader: each slice waits up to this long after it is wanted."""
        if self.slice_limit <= 3:  # slices of a few timers up to 1.5 s apart carry ~1 timer a second, less
            self.loader_delay = min(self.loader_delay, 200)  # than the workload: no scheduler could keep up
        self.slice_faults = r.choice([0, 0, 1, 2])
        """Leader losses right after a slice."""
        self.loader_behind = 0
        """Slices read, after a term's first fill, while the window had fallen behind the dispatch lead
        (only a slow loader does that; a fault: fires may be late)."""
        self.mid_fill_losses = 0
        self.edge_tasks: list[str] = []
        self.flow_limits: dict[str, FlowSettings] = {}
        """Flows of this seed with a rate or a concurrency (set once, before their tasks)."""
        self.flow_set_at: dict[str, int] = {}
        """When each flow's settings first committed."""
        self.pauses: list[tuple[str, int, bool]] = []
        """Committed pause/resume of flows: (flow, commit time, paused)."""
        self.plan_of: dict[tuple[str, int, FireKind], Planned] = {}
        self.throttles: list[tuple[int, str, int, int]] = []
        """(term, flow, from, until) of every Retry-After the leader took."""
        self.rng2 = random.Random(seed * 7_919 + 1)
        """Draws of the delivery-control workload (throttling receivers, operators' redrives), apart
        from the main stream so the other draws of a seed stay as they were."""
        self.throttled: dict[str, int] = defaultdict(int)
        """Requests per fire id a throttling receiver has answered 429."""
        self.retry_after: dict[tuple[str, int], int] = {}
        """(fire id, attempt) -> the Retry-After time its 429 asked for."""
        self.redriven: dict[str, Any] = {}
        """Dead letters an operator redrove (id -> the dead letter); their fire ids answer 2xx since
        (the operator fixed the receiver first)."""
        self.redriven_fires: set[str] = set()
        self.redrive_base: dict[str, int] = {}
        """Dead letter id -> the task's callback attempts when it was redriven."""
        self.redrive_at: dict[str, list[int]] = defaultdict(list)
        """Task id -> when redrives of its dead letters were proposed (its own occurrences wait while a
        redriven one runs: docs/architecture.md#dead-letters)."""
        self.backfills: dict[str, list[BackfillAsked]] = defaultdict(list)
        """Backfills the machine accepted, by task id, in log order."""
        self.overlaps_checked: dict[str, int] = defaultdict(int)
        """Occurrences after one that ran over an instant, checked by ``check``, by overlap policy."""
        self.brng = random.Random(seed * 1_000_003 + 14)
        """The backfill workload's own draws (the rest of a seed's workload stays as it was)."""
        self.arng = random.Random(seed * 2_147_483 + 31)
        """The overlap-allow workload's own draws."""
        self.allow_concurrent = 0
        """Requests of an allow task that reached the receiver while another occurrence of it ran."""
        self.trng = random.Random(seed * 3_000_017 + 23)
        """The pause workload's own draws."""
        self.commit_at: list[int] = []
        """When each entry of ``log`` committed."""
        self.task_pauses: dict[str, list[tuple[int, int, bool, bool, int]]] = defaultdict(list)
        """Task id -> its pauses and resumes that applied, in log order: (log index, commit time, paused,
        from_schedule, the command's ``now_ms``); an entry that ended a pause otherwise (a result: the task
        went inactive or done) counts as a resume from schedule (nothing it missed is dropped)."""
        self.resumed_in_redrive: set[tuple[str, int]] = set()
        """(task id, log index) of the resumes that applied while a redrive of the task's ran (its own
        occurrence, put aside, waits for the redrive: docs/architecture.md#dead-letters)."""
        self.paused_firing: set[tuple[str, int]] = set()
        """(task id, log index) of the pauses that applied in the middle of an occurrence (an attempt made)."""
        self.dispatch_index: dict[tuple[str, FireKind, int], int] = {}
        """(fire id, kind, attempt) -> the log index of the ``Dispatched`` entry that sent it."""
        self.sent_instant: dict[str, tuple[int, int]] = {}
        """Callback fire id -> the instant its first send carried (``X-Molens-Scheduled-At``), delivered or not,
        and the log index of the ``Dispatched`` entry that sent it."""
        self.xrng = random.Random(seed * 5_000_011 + 29)
        """The trigger workload's own draws."""
        self.drng = random.Random(seed * 6_000_023 + 37)
        """The delete workload's own draws."""
        self.client_reqs: dict[str, tuple[dict[str, Any], Plan]] = {}
        """Idempotency key -> the create request and plan of each client task made by ``create_at``."""
        self.triggers: list[TriggerApplied] = []
        """Triggers that applied, in log order."""
        self.trigger_outcome: dict[TriggerTask, bool] = {}
        """A proposed ``TriggerTask`` -> whether it applied (False: refused) once a replica applied it (keyed by
        the command, not its ``id``: a lost command's id may be reused by a later one)."""
        self.triggers_refused = 0
        self.deleted: dict[str, DeleteApplied] = {}
        """Tasks a client's ``DeleteTasks`` removed, by id (the first delete that applied)."""
        self.deleted_execs: list[Any] = []
        """Their history rows just before the delete (what they did until then is still checked)."""
        self.deleted_dead: dict[str, Any] = {}
        """Their dead letters just before the delete."""
        self.delete_residue: list[str] = []
        """What a replica still held of a task right after applying its delete (must stay empty)."""
        self.unrecorded_drops: list[str] = []
        """Resumes from now that dropped instants without their ``skipped`` row (must stay empty)."""
        self.recorded_drops = 0
        """Resumes from now between occurrences that dropped instants, each with its row."""
        self.recreates: dict[str, tuple[str, Plan, int]] = {}
        """Idempotency key -> (the deleted task's id, the plan of the create made with the key after the
        delete, when that create was asked)."""
        self.urng = random.Random(seed * 7_000_003 + 41)
        """The delayed-update workload's own draws."""
        self.delayed_updates: dict[str, list[UpdateApplied]] = defaultdict(list)
        """Task id -> the updates of a delayed task that applied, in log order."""
        self.delayed_updates_refused = 0
        """Updates of a delayed task the machine refused (a client's retry at a version since changed)."""

    # ---------------------------------------------------------------- event loop

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._n += 1
        heapq.heappush(self._q, (t, self._n, fn))

    def log_(self, msg: str) -> None:
        if self.trace:
            self.trace(f"{self.now - self.t0:>7} {msg}")

    def run(self) -> None:
        for n in self.nodes:
            self.heartbeats(n)
        self.elect()
        if self.custom_workload is not None:
            self.custom_workload(self)
        else:
            self.workload()
        if self.with_faults:
            self.schedule_faults()
        same = 0
        while self._q:
            t, _, fn = heapq.heappop(self._q)
            if t > self.t0 + self.end_ms:
                break
            same = same + 1 if t <= self.now else 0
            if same > LIVELOCK_EVENTS:
                raise Violation(f"seed={self.seed}: livelock: {same} events at {t - self.t0} ms without time moving")
            self.now = max(self.now, t)
            fn()
        for n in self.nodes:  # everyone back for the final comparison
            if not self.alive[n]:
                self.alive[n] = True
                self.open_store(n)
            self.catch_up(n)

    # ---------------------------------------------------------------- the log stand-in

    def propose(self, cmd: Command, then: Callable[[Applied], None] | None = None) -> None:
        if self.leader is None:
            return
        if then is not None:
            self.outcomes[id(cmd)] = (self.leader, then)
        t = max(self.now + self.rng.randint(*COMMIT_LAT), self.last_commit_at)
        self.last_commit_at = t
        item = (self.term, cmd)
        self.pending.append(item)
        self.at(t, lambda: self._commit(item))

    def _commit(self, item: tuple[int, Command]) -> None:
        if not self.pending or self.pending[0] is not item or self.leader is None or item[0] != self.term:
            return
        self.pending.pop(0)
        self.append(*item)

    def append(self, term: int, cmd: Command) -> None:
        """``cmd``, proposed in ``term``, is committed: the next entry of the log."""
        self.log.append(cmd)
        self.log_terms.append(term)
        self.commit_at.append(self.now)
        if isinstance(cmd, PutFlow):
            self.flow_set_at.setdefault(cmd.key, self.now)
            self.pauses.append((cmd.key, self.now, cmd.settings.paused))
        for n in self.nodes:
            if self.alive[n]:
                self.catch_up(n)

    def catch_up(self, n: str) -> None:
        rep = self.replicas[n]
        while self.applied[n] < len(self.log):
            cmd, term = self.log[self.applied[n]], self.log_terms[self.applied[n]]
            self.applied[n] += 1
            ld = self.leader
            is_leader = ld is not None and ld.node == n
            dues: dict[str, tuple[int | None, int]] = {}
            if is_leader and isinstance(cmd, Dispatched):
                for it in cmd.items:
                    t = rep.get_task(it.task_id)
                    r = next((r for r in t.running if r.fire_id(t.id) == it.fire_id), None) if t else None
                    dues[it.fire_id] = (r.due_ms, r.sched_ms) if r else (t.due_ms, t.sched_ms) if t else (None, -1)
            before = rep.get_task(cmd.task_id) if isinstance(cmd, BackfillTask | TriggerTask | UpdateTask) else None
            first = n == self.nodes[0] and self.applied[n] > self.noted
            if first:
                self.noted = self.applied[n]
            if isinstance(cmd, Expire) and first:
                gone = {it.task_id: rep.get_task(it.task_id) for it in cmd.items}
                execs = [e for e in rep.executions if e.task_id in gone]
            was_paused = {tid for tid in self.task_pauses if (t := rep.get_task(tid)) is not None
                          and t.status is Status.PAUSED} if first else set()
            resumed_from = {tid: rep.get_task(tid) for tid in cmd.task_ids} \
                if isinstance(cmd, ResumeTasks) and first else {}
            if isinstance(cmd, DeleteTasks) and first:
                doomed = {tid: rep.get_task(tid) for tid in cmd.task_ids}
                doomed_execs = [e for e in rep.executions if e.task_id in doomed]
                doomed_dead = {k: d for k, d in rep.dead.items() if d.task_id in doomed}
            out = rep.apply(cmd)
            if isinstance(cmd, TriggerTask):
                self.trigger_outcome.setdefault(cmd, not isinstance(out.results[0], Exception))
                if first:
                    self.note_trigger(cmd, before, out)
            if isinstance(cmd, UpdateTask) and first:
                self.note_update(cmd, before, out)
            if isinstance(cmd, DeleteTasks):
                for tid, res in zip(cmd.task_ids, out.results):
                    if isinstance(res, Exception):
                        continue
                    self.delete_residue += self.residue(rep, tid, f"{n} right after applying its delete "
                                                                  f"(entry {self.applied[n]})")
                    if first and tid not in self.deleted:
                        idx = self.applied[n]
                        self.deleted[tid] = DeleteApplied(doomed[tid], idx, self.commit_at[idx - 1], cmd.now_ms)
                        self.deleted_execs += [e for e in doomed_execs if e.task_id == tid]
                        self.deleted_dead.update({k: d for k, d in doomed_dead.items() if d.task_id == tid})
            for tid in was_paused:  # left paused by a result (max_fails reached, a delayed task done)
                t = rep.get_task(tid)
                if not isinstance(cmd, ResumeTasks) and (t is None or t.status is not Status.PAUSED):
                    idx = self.applied[n]
                    self.task_pauses[tid].append((idx, self.commit_at[idx - 1], False, True, cmd.now_ms))
            if isinstance(cmd, Expire) and first:
                for it, res in zip(cmd.items, out.results):
                    if res is True:
                        self.expired[it.task_id] = gone[it.task_id]
                        self.expired_execs += [e for e in execs if e.task_id == it.task_id]
            if is_leader and id(cmd) in self.outcomes:
                who, then = self.outcomes.pop(id(cmd))
                if who is ld:
                    then(out)
            if isinstance(cmd, ResumeTasks) and first:
                self.note_dropped(cmd, resumed_from, out)
            if isinstance(cmd, PauseTasks | ResumeTasks) and first:
                paused, fs = isinstance(cmd, PauseTasks), isinstance(cmd, ResumeTasks) and cmd.from_schedule
                for tid, res in zip(cmd.task_ids, out.results):
                    if not isinstance(res, Exception):
                        idx = self.applied[n]
                        self.task_pauses[tid].append((idx, self.commit_at[idx - 1], paused, fs, cmd.now_ms))
                        if paused and res.attempt > 0:
                            self.paused_firing.add((tid, idx))
                        if not paused and res.rewound is not None:
                            self.resumed_in_redrive.add((tid, idx))
            if isinstance(cmd, BackfillTask) and first and before is not None \
                    and not isinstance(out.results[0], Exception):
                self.backfills[cmd.task_id].append(BackfillAsked(cmd.start_ms, cmd.end_ms, cmd.now_ms, before.seq))
            if is_leader:
                self.on_applied(cmd, term, out, dues)

    def note_dropped(self, cmd: ResumeTasks, before: dict[str, Task | None], out: Applied) -> None:
        """A resume from now of a periodic task paused between occurrences whose instant came due while
        it was paused: the instants it drops, ``[before.sched_ms, nt.sched_ms)``, are one ``skipped``
        row of the entry (docs/architecture.md#catch-up)."""
        for tid, nt in zip(cmd.task_ids, out.results):
            t = before.get(tid)
            if cmd.from_schedule or isinstance(nt, Exception) or t is None or t.status is not Status.PAUSED \
                    or t.spec.type is not TaskType.PERIODIC or t.attempt > 0 or t.ack_attempt > t.ack_base \
                    or t.backfill is not None or nt.sched_ms <= t.sched_ms:
                continue
            want = f"skipped the occurrences scheduled in [{t.sched_ms}, {nt.sched_ms}) ms: {PAUSED_DROP}"
            if [e.response_head for e in out.writes.executions if e.task_id == tid] != [want]:
                self.unrecorded_drops.append(f"{tid}: resumed from now at {cmd.now_ms - self.t0}, its instants "
                                             f"[{t.sched_ms - self.t0}, {nt.sched_ms - self.t0}) dropped without "
                                             f"their skipped row: {out.writes.executions}")
            else:
                self.recorded_drops += 1

    def note_trigger(self, cmd: TriggerTask, before: Any, out: Applied) -> None:
        """Record a ``TriggerTask`` as ``nodes[0]`` first applied it (``before``: its task then)."""
        nt = out.results[0]
        if isinstance(nt, Exception) or before is None:
            self.triggers_refused += 1
            return
        idx = self.applied[self.nodes[0]]
        periodic = nt.spec.type is TaskType.PERIODIC
        self.triggers.append(TriggerApplied(
            cmd.task_id, idx, self.commit_at[idx - 1], cmd.now_ms, nt.seq, periodic,
            next_scheduled(nt, cmd.now_ms) if periodic else None, before.sched_ms,
            len(before.running) >= MAX_RUNNING,
        ))

    def note_update(self, cmd: UpdateTask, before: Task | None, out: Applied) -> None:
        """Record an ``UpdateTask`` of a delayed task as ``nodes[0]`` first applied it (``before``: its task then)."""
        if before is None or before.spec.type is not TaskType.DELAYED:
            return
        nt = out.results[0]
        if isinstance(nt, Exception):
            self.delayed_updates_refused += 1
            return
        idx = self.applied[self.nodes[0]]
        self.delayed_updates[cmd.task_id].append(UpdateApplied(idx, self.commit_at[idx - 1], cmd.spec, before, nt))

    @staticmethod
    def residue(rep: MemoryState, tid: str, where: str) -> list[str]:
        """What replica ``rep`` still holds of deleted task ``tid``: the task, a fire record, its
        idempotency key, history rows, dead letters (docs/architecture.md#task-rules: all go)."""
        left = []
        if tid in rep.tasks:
            left.append(f"the task {rep.tasks[tid]}")
        left += [f"fire record {f}" for f in rep.fires.values() if f.task_id == tid]
        left += [f"idempotency key {k!r}" for k, v in rep.idem.items() if v == tid]
        rows = [e for e in rep.executions if e.task_id == tid]
        if rows:
            left.append(f"{len(rows)} history rows (first {rows[0]})")
        left += [f"dead letter {d.id}" for d in rep.dead.values() if d.task_id == tid]
        return [f"deleted task {tid}: {where}, {what} left" for what in left]

    # ---------------------------------------------------------------- leadership

    def elect(self) -> None:
        if self.leader is not None:
            return
        cands = [n for n in self.nodes if self.alive[n]]
        if not cands:
            self.at(self.now + 200, self.elect)
            return
        survivors, self.survivors = self.survivors, []
        for term, cmd in survivors:  # committed by the next leader, whose term starts after them, whichever
            self.append(term, cmd)   # way it is elected (a node's restart may elect it before new_term runs)
        self.term += 1
        node = self.rng.choice(cands)
        rep = self.replicas[node]
        self.leader = ld = Leader(
            node=node, term=self.term,
            wheel=LeaderWheel(TICK, self.now, self.horizon, slice_limit=self.slice_limit,
                              monotonic=lambda: self.now / 1000),
            plan=DispatchPlan(node, rep.get_task, lambda: self.free(node), DISPATCH_SLACK,
                              clock=lambda: self.now / 1000, liveness_ms=WORKER_LOST),
            watch=FireWatch(rep.get_fire),
            workers=WorkerWatch(node, WORKER_LOST, self.now, heard=self.heard_by(node)),
            scan=ExpiryScan(rep.scan_expirable, RETENTION_MINUTES, EXPIRE_QPS),
        )
        self.faults.append(self.now)
        self.term_start[self.term] = self.now
        self.log_(f"leader {node} term {self.term}")
        for n in cands:
            self.catch_up(n)
        for key, fs in rep.flows.items():
            ld.flows.configure(key, limits_of(fs), self.now)
        self.schedule_load()
        fires = list(rep.scan_fires())
        ld.watch.watch(fires)  # the Monitor's Rebuild: watched since before this term
        for f in fires:
            t = rep.get_task(f.task_id)
            if t is not None:  # the Dispatcher's adopt: an earlier term's fires count against their flows
                ld.flows.adopt(f.fire_id, f.attempt, flow_id(t.spec), f.deadline_ms, self.now)
        self.monitor()
        self.clean()
        self.wake()

    def lose_leader(self, crash: bool, delay: int | None = None) -> None:
        """The leader crashes or is cut off; the next one is elected ``delay`` ms later (default
        0.3-1.5 s; an outage of the whole cluster: several periods)."""
        ld = self.leader
        if ld is None:
            return
        self.faults.append(self.now)
        self.term_end[ld.term] = self.now
        self.leader = None
        keep = self.rng.randint(0, len(self.pending))
        self.survivors = self.pending[:keep]
        self.pending = []
        self.log_(f"{'crash' if crash else 'partition'} leader {ld.node}; {keep} uncommitted entries survive")
        self.last_beat[ld.node] = self.now  # its Raft heartbeats reached the others until now
        if crash:
            self.crash(ld.node)
        if delay is None:
            delay = self.rng.randint(300, 1_500)

        def new_term() -> None:
            self.faults.append(self.now)
            self.elect()

        self.at(self.now + delay, new_term)

    def heard_by(self, node: str) -> dict[str, int]:
        """When ``node``, becoming leader, last heard from each other node (the peer's ``heard_ago_ms``):
        a worker's last report stands for it (a deposed leader's last heartbeat, for the leader it
        was), but only one since ``node`` itself last started: a restarted process remembers nothing of
        before (the node then counts from the term's start)."""
        since = self.downs[node][-1][1] if self.downs[node] else 0
        return {w: t for w, t in self.last_beat.items() if w != node and t >= since}

    def crash(self, n: str, down: tuple[int, int] = (500, 3_000)) -> None:
        self.faults.append(self.now)
        self.alive[n] = False
        self.incarnation[n] += 1
        self.downs[n].append([self.now, 1 << 62])
        self.down_since[n] = self.now
        self.holding[n].clear()
        for job in self.jobs.pop(n, []):
            if not job.done and job.delivery.end < 0:
                job.delivery.end = self.now  # the connection is cut
            job.done = True
        power_loss = self.p_power_loss > 0 and self.prng.random() < self.p_power_loss
        self.log_(f"{'power loss' if power_loss else 'crash'} {n}")
        if power_loss:
            self.lose_power(n)

        def restart() -> None:
            self.alive[n] = True
            self.open_store(n)
            self.down_since.pop(n, None)
            self.downs[n][-1][1] = self.now
            self.faults.append(self.now)
            self.catch_up(n)
            self.heartbeats(n)
            if self.leader is None:
                self.elect()

        self.at(self.now + self.rng.randint(*down), restart)

    def store_dir(self, n: str) -> Path:
        return self.root / n / "fsm"

    def open_store(self, n: str) -> None:
        """Node ``n`` opens its task store as ``TaskStore`` does: the product's boot guard (through
        the simulated disk) decides whether the store can be trusted; a discarded one is rebuilt from
        the log (the stand-in log holds every entry: what the snapshot and the Raft log give back)."""
        d = self.store_dir(n)
        if not d.exists():
            self.disk.track(d)
        if lmdb_snapshot.guard_boot(d, f"{n}-boot-{self.boots[n]}", "task store", self.disk):
            self.stores_discarded += 1
            self.log_(f"{n}: task store discarded at open, rebuilt from the log")
            self.replicas[n] = MemoryState()
            self.applied[n] = 0
        (d / "data.mdb").touch()  # lmdb creates its file at open

    def lose_power(self, n: str) -> None:
        """Node ``n``'s machine loses power: the disk drops what was not synced, the next boot has
        another id, and the store, open with unsynced commits, is torn: its meta page (the applied
        index) may reach the disk while the pages of the last commits do not -- the state of an
        earlier prefix of the log under the newer applied index, unless the guard discards it."""
        self.power_losses.append(n)
        self.disk.power_loss(self.root / n, self.prng)
        self.boots[n] += 1
        k = self.prng.randint(0, self.applied[n])
        if k < self.applied[n]:
            torn = MemoryState()
            for cmd in self.log[:k]:
                torn.apply(cmd)
            self.replicas[n] = torn
            self.log_(f"{n}: store torn at {k} of {self.applied[n]} applied")

    def free(self, n: str) -> int:
        """A worker's free capacity (its pool's size less the fires it holds)."""
        return max(0, POOL - len(self.holding[n]))

    def heartbeats(self, n: str) -> None:
        """Worker ``n`` reports its free capacity and the fires it holds every ``REPORT_INTERVAL_S``
        while it lives (a fireworker's heartbeat), on the link its results take."""
        inc = self.incarnation[n]

        def beat() -> None:
            if not self.alive[n] or self.incarnation[n] != inc:
                return
            self.last_beat[n] = self.now
            free, held = self.free(n), frozenset(self.holding[n])
            self.send_to_leader(n, self.on_report(n, free, held))
            self.at(self.now + self.report_ms, beat)

        self.at(self.now + self.rng.randint(0, REPORT_MS), beat)

    def send_to_leader(self, n: str, deliver: Callable[[Leader], None]) -> None:
        """A frame from worker ``n`` to whoever leads when it arrives (one ordered link per worker;
        the leader's own worker is in-process)."""
        ld = self.leader
        lat = 0 if ld is not None and ld.node == n else self.rng.randint(*NET_LAT)
        t = max(self.now + lat, self.link_at[n])
        self.link_at[n] = t

        def arrive() -> None:
            ld2 = self.leader
            if ld2 is not None:
                deliver(ld2)

        self.at(t, arrive)

    def on_report(self, n: str, free: int, held: frozenset[str]) -> Callable[[Leader], None]:
        def handle(ld: Leader) -> None:  # the Dispatcher's and the Monitor's WorkerReport
            ld.plan.report(n, free)
            ld.workers.heard(n, self.now)
            gone = ld.watch.not_held(n, held, self.now - HELD_GRACE_MS)
            self.settled_on_lost += len(gone)
            self.settle(ld, gone)
            if ld.backlog:
                self.wake_at(ld, self.now)
            self.monitor()

        return handle

    def monitor(self) -> None:
        """The Monitor's pump: lost results for fires past their deadline and for the open fires of
        workers silent for ``WORKER_LOST`` ms; the Dispatcher forgets lost workers; its alarm."""
        ld = self.leader
        if ld is None:
            return
        sw = sweep(ld.watch, ld.workers, self.now)  # the product's own pump step
        self.settle(ld, sw.lost)
        self.settled_on_lost += len(sw.on_lost_workers)
        self.settle(ld, sw.on_lost_workers)
        for w in ld.workers.take_lost():
            ld.plan.forget(w)
        if sw.next_at is None:
            return
        t = max(self.now, sw.next_at)
        if ld.monitor_at is not None and ld.monitor_at <= t:
            return
        ld.monitor_at = t

        def alarm() -> None:
            if self.leader is ld and ld.monitor_at == t:
                ld.monitor_at = None
                self.monitor()

        self.at(t, alarm)

    def settle(self, ld: Leader, items: list[ResultItem]) -> None:
        for it in items:
            self.given_up.setdefault((it.fire_id, it.attempt), self.now)
            self.log_(f"monitor: {it.fire_id} attempt {it.attempt} lost")
            self.result_in(ld, it)

    def clean(self) -> None:
        """The Cleaner: its :class:`ExpiryScan` once a second, one ``Expire`` proposal at a time."""
        ld = self.leader
        if ld is None:
            return
        cmd = ld.scan.run(self.now)
        if cmd is not None:
            self.log_(f"cleaner: expire {[it.task_id for it in cmd.items]}")

            def done(out: Applied) -> None:  # ExpireDone
                ld.scan.done(sum(1 for r in out.results if r is True))
                self.clean()

            self.propose(cmd, done)
        nd = ld.scan.next_deadline()
        if nd is not None:
            self.at(max(nd, self.now), lambda: self.clean() if self.leader is ld and not ld.scan.busy else None)

    # ---------------------------------------------------------------- leader shells

    def on_applied(self, cmd: Command, term: int, out: Applied, dues: dict[str, tuple[int | None, int]]) -> None:
        """The entry ``cmd`` of ``term`` applied on the leader's node: its effects go where the
        supervisor's ``route_effects`` sends them (the window's reach read after the entry applied,
        as the Raft thread does)."""
        ld = self.leader
        assert ld is not None
        routed = route_effects([EntryResult(index=self.applied[ld.node], term=term, results=out.results,
                                            effects=out.effects)], ld.term, ld.wheel.window.reach)
        if routed.wheel:
            self.to_wheel(ld, routed.wheel)
        if routed.flows:  # through the Dispatcher's mailbox, as FlowsChanged
            def configure() -> None:
                if self.leader is ld:
                    for key, settings in routed.flows:
                        ld.flows.configure(key, None if settings is None else limits_of(settings), self.now)
                    self.wake()
            self.at(self.now + MAILBOX_LAT[1], configure)
        if isinstance(cmd, Dispatched):  # refused items give their capacity and flow slot back
            ld.plan.give_back(DispatchPlan.refused(cmd.items, out.results), ld.flows)
        if routed.other:  # Committed: an earlier term's fires, never sent by this leader, watched
            ld.watch.watch((e.fire for e in routed.other), self.now)
        fires = routed.own
        if fires:  # Committed: the Monitor watches first, then the Dispatcher sends
            ld.watch.watch((e.fire for e in fires), self.now)
            for e in fires:
                due, sched = dues.get(e.fire.fire_id, (None, -1))
                if sched != e.scheduled_ms:  # catchup all moved it past instants too old for its window
                    due = e.not_before_ms
                assert due is not None
                self.planned[(e.fire.fire_id, e.fire.kind, e.fire.attempt)] = due
            for wid, group in DispatchPlan.group(fires).items():
                if wid == ld.node:
                    ld.plan.sent_local(len(group))
            for e in fires:
                self.dispatch_index[(e.fire.fire_id, e.fire.kind, e.fire.attempt)] = self.applied[ld.node]
                if e.fire.kind is FireKind.CALLBACK:
                    self.sent_instant.setdefault(e.fire.fire_id, (e.scheduled_ms, self.applied[ld.node]))
                self.send_fire(e, ld.term)
            self.monitor()
        self.wake()

    def to_wheel(self, ld: Leader, effects: list[Any]) -> None:
        """The wheel hears of applied effects a little later, in log order (the TimeWheel's mailbox)."""
        ld.inbox.append(effects)
        ld.inbox_at = max(ld.inbox_at, self.now + self.rng.randint(*MAILBOX_LAT))

        def deliver() -> None:
            if self.leader is not ld:
                return
            ld.wheel.apply(ld.inbox.pop(0))
            self.wake()
            self.schedule_load()

        self.at(ld.inbox_at, deliver)

    def schedule_load(self) -> None:
        """The loader's next slice: when the window wants one (later when the loader is slow)."""
        ld = self.leader
        if ld is None or ld.load_at is not None:
            return
        t = max(self.now, ld.wheel.window.next_load_ms())
        if self.loader_delay:
            t += self.rng.randint(0, self.loader_delay)
        ld.load_at = t

        def load() -> None:
            if self.leader is not ld:
                return
            ld.load_at = None
            w = ld.wheel.window
            if w.load_wanted(self.now):
                if w.loaded_until_ms <= self.now + self.lead:
                    self.loader_behind += ld.filled
                    self.faults.append(self.now)
                if not ld.wheel.load(self.replicas[ld.node].read_due, self.now):
                    ld.filled = True
                ld.slices += 1
                self.log_(f"loader: slice {ld.slices} -> window until {w.loaded_until_ms - self.t0}, {len(w)} timers")
                if self.slice_faults and self.rng.random() < (0.5 if not ld.filled else 0.02):
                    self.slice_faults -= 1
                    self.mid_fill_losses += not ld.filled
                    self.log_("leader lost right after a slice")
                    self.lose_leader(crash=self.rng.random() < 0.5)
                    return
            self.wake()
            self.schedule_load()

        self.at(t, load)

    def wake_at(self, ld: Leader, t: int) -> None:
        """The Dispatcher's alarm: it plans at ``t`` (unless it already will, sooner)."""
        if ld.wake_at is not None and ld.wake_at <= t:
            return
        ld.wake_at = t

        def fire() -> None:
            if self.leader is ld and ld.wake_at == t:
                ld.wake_at = None
                self.dispatch()
                self.wake()

        self.at(t, fire)

    def wake(self) -> None:
        ld = self.leader
        if ld is None:
            return
        fw = ld.flows.next_tick_wake(self.now)  # as the Dispatcher: on tick boundaries
        if ld.flows.can_release(self.now):
            fw = self.now
        if fw is not None and (ld.flow_wake_at is None or fw < ld.flow_wake_at):
            ld.flow_wake_at = fw
            term = ld.term

            def flow_wake() -> None:
                if self.leader is None or self.leader.term != term:
                    return
                self.leader.flow_wake_at = None
                self.dispatch()
                self.wake()

            self.at(fw, flow_wake)
        if ld.backlog:  # no capacity for them before: looked at again a tick later
            self.wake_at(ld, self.now + TICK)
        nd = ld.wheel.next_deadline()
        if nd is not None:
            self.wake_at(ld, max(nd - self.lead, self.now))

    def dispatch(self) -> None:
        """The TimeWheel's advance and the Dispatcher's plan (``DispatchPlan.plan`` with its flows)."""
        ld = self.leader
        assert ld is not None
        rep = self.replicas[ld.node]
        fc = ld.flows
        fc.sweep(self.now)
        ids = fc.release(self.now) + ld.backlog + ld.wheel.advance(self.now + self.lead)
        items, ld.backlog = ld.plan.plan(ids, self.now, 1 << 30, self.lead, fc)
        for it, lag in zip(items, ld.plan.lags):
            t = rep.get_task(it.task_id)
            assert t is not None
            kind = FireKind.ACK if it.fire_id == t.fire_id and t.status is Status.AWAITING_ACK else FireKind.CALLBACK
            go = max(self.now, self.now - int(lag))
            slot = fc.fire_slot(it.fire_id)
            assert slot is not None and slot <= go, (slot, go)  # it goes at ``go``: never before its slot
            self.plan_of[(it.fire_id, it.attempt, kind)] = Planned(self.now, slot, ld.term, flow_id(t.spec))
        if items:
            self.propose(Dispatched(self.now, tuple(items), catchup_waits=True, keeps_last_fire=True))
        self.schedule_load()

    def to_leader(self, item: ResultItem) -> Callable[[Leader], None]:
        """A worker's result as the leader's Monitor takes it (``FireResults``)."""
        def handle(ld: Leader) -> None:
            ld.workers.heard(item.worker, self.now)
            ld.watch.answered(item.fire_id, item.attempt)
            self.result_in(ld, item)
            self.monitor()

        return handle

    def result_in(self, ld: Leader, item: ResultItem) -> None:
        """A result (or a lost one) into the Monitor's buffer, flushed ``RESULT_FLUSH`` ms later; its
        end frees its flow's slot in the Dispatcher."""
        ld.results.append(item)
        got = ld.flows.fire_flow(item.fire_id)
        if got is not None and item.retry_after_ms > self.now and (item.attempt is None or got[1] == item.attempt):
            self.throttles.append((ld.term, got[0], self.now, item.retry_after_ms))
        ld.flows.ended(item.fire_id, item.attempt, self.now, congested=congested(item),
                       retry_after_ms=item.retry_after_ms)
        self.wake()
        if ld.flush_at is None:
            ld.flush_at = self.now + RESULT_FLUSH

            def flush() -> None:
                if self.leader is not ld:
                    return
                items, ld.results, ld.flush_at = ld.results, [], None
                self.propose(Results(self.now, tuple(items), ack_from=True))

            self.at(ld.flush_at, flush)

    # ---------------------------------------------------------------- workers and receivers

    def send_fire(self, fr: SendFire, term: int) -> None:
        w = fr.fire.worker
        self.sent.append(Sent(fr.fire.fire_id, fr.fire.attempt, w, self.now, fr.fire.deadline_ms, term))

        def arrive() -> None:
            if not self.alive[w]:
                return
            self.holding[w][fr.fire.fire_id] += 1  # listed in its heartbeats until its result is sent
            if fr.not_before_ms > self.now:  # planned ahead: the worker holds it until its due time
                inc = self.incarnation[w]

                def release() -> None:
                    if self.alive[w] and self.incarnation[w] == inc:
                        self.start_request(w, fr)

                self.at(fr.not_before_ms, release)
                return
            self.start_request(w, fr)

        self.at(self.now + self.rng.randint(*NET_LAT), arrive)

    def start_request(self, w: str, fr: SendFire) -> None:
        f = fr.fire
        if self.p_not_sent and self.nrng.random() < self.p_not_sent:
            self.give_back(w, fr)
            return
        t = self.replicas[w].get_task(f.task_id) or self.replicas[self.leader.node if self.leader else w].get_task(
            f.task_id
        )
        d = Delivery(
            task_id=f.task_id, fire_id=f.fire_id, kind=f.kind, attempt=f.attempt,
            due=self.planned.get((f.fire_id, f.kind, f.attempt), -1), at=-1, scheduled=fr.scheduled_ms,
            sent_as=fr.reliability,
        )
        job = _Job(node=w, incarnation=self.incarnation[w], delivery=d, fr=fr)
        self.jobs[w].append(job)
        inc = self.incarnation[w]
        net = self.rng.randint(*NET_LAT)
        plan = self.plans[f.task_id]
        beh = plan.ack if f.kind is FireKind.ACK else plan.behaviour
        if f.kind is FireKind.CALLBACK and f.fire_id in self.redriven_fires:
            beh = "ok"
        retry_after = 0
        if beh == "throttle" and f.kind is FireKind.CALLBACK and self.throttled[f.fire_id] < plan.throttle:
            self.throttled[f.fire_id] += 1
            code, proc = 429, self.rng2.randint(1, 30)
            retry_after = self.rng2.randint(100, 1_500)
        else:
            code, proc = self.behave("ok" if beh == "throttle" else (beh or "ok"))
        timeout = fr.timeout_ms
        start = self.now

        def received() -> None:
            if self.incarnation[w] != inc:
                return
            d.at = self.now
            self.deliveries.append(d)

        self.at(start + net, received)
        if net + proc >= timeout:
            finish_at, outcome, sc = start + timeout, Outcome.TIMEOUT, None
        else:
            finish_at, outcome, sc = start + net + proc + self.rng.randint(*NET_LAT), Outcome.RESPONSE, code
        del t

        def finished() -> None:
            if self.incarnation[w] != inc or job.done:
                return
            job.done = True
            d.end = min(self.now, start + net + proc) if outcome is Outcome.RESPONSE else self.now
            if outcome is Outcome.RESPONSE:
                d.code = sc
                d.ok = sc is not None and 200 <= sc < 300
            ra = 0
            if retry_after and sc == 429:
                ra = self.now + retry_after
                self.retry_after[(f.fire_id, f.attempt)] = ra
            item = ResultItem(
                fire_id=f.fire_id, kind=f.kind, status_code=sc, outcome=outcome,
                response_head=None if sc is None else f"{sc}", latency_ms=self.now - start, worker=w,
                attempt=f.attempt, retry_after_ms=ra,
            )
            if self.rng.random() < self.p_result_loss:
                self.log_(f"result of {f.fire_id} lost")
                self.faults.append(self.now)
                self.unhold(w, f.fire_id)
                self.answered.add((f.fire_id, f.attempt))
                return
            if self.rng.random() < self.p_slow_result:  # a stalled worker: it sends the result after the
                self.faults.append(self.now)  # Monitor gave the attempt up (it holds the fire until then)

                def stalled() -> None:
                    if self.incarnation[w] == inc:
                        self.answered.add((f.fire_id, f.attempt))
                        self.unhold(w, f.fire_id)
                        self.send_to_leader(w, self.to_leader(item))

                self.at(self.now + fr.timeout_ms + DISPATCH_SLACK + 500, stalled)
                return
            self.unhold(w, f.fire_id)
            self.answered.add((f.fire_id, f.attempt))
            self.send_to_leader(w, self.to_leader(item))

        self.at(finish_at, finished)

    def give_back(self, w: str, fr: SendFire) -> None:
        """The worker does not send ``fr`` and says so, through the product's own not-sent result."""
        f = fr.fire
        self.log_(f"{f.fire_id} attempt {f.attempt} not sent by {w}")
        self.faults.append(self.now)
        self.not_sent.add((f.fire_id, f.kind, f.attempt))
        self.unhold(w, f.fire_id)
        self.answered.add((f.fire_id, f.attempt))
        item = with_attempt(to_result_item(FireResult.unsent(f.fire_id, f.kind, w, "worker queue full")), f.attempt)
        self.send_to_leader(w, self.to_leader(item))

    def unhold(self, w: str, fire_id: str) -> None:
        held = self.holding[w]
        held[fire_id] -= 1
        if held[fire_id] <= 0:
            del held[fire_id]

    def behave(self, b: str) -> tuple[int, int]:
        r = self.rng
        if b == "ok":
            return 200, r.randint(1, 30)
        if b == "notfound":
            return 404, r.randint(1, 30)
        if b == "err":
            return 500, r.randint(1, 30)
        if b == "slow":
            return 200, 5_000
        if b == "slowok":  # overlap allow: answers after the next instants came due, within its timeout
            return 200, r.randint(1_200, 2_600)
        if b == "crawl":  # overlap allow: so slow that MAX_RUNNING occurrences run at once
            return 200, r.randint(8_200, 9_500)
        if b == "ackfail":
            return 503, r.randint(1, 30)
        # flaky
        return r.choice([(200, 5), (500, 5), (200, 5_000), (204, 20)])

    # ---------------------------------------------------------------- workload and faults

    def workload(self) -> None:
        r = self.rng
        kinds: list[tuple[dict[str, Any], Plan]] = []
        for _ in range(r.randint(6, 12)):
            b = r.choice(["ok", "ok", "err", "slow", "flaky", "notfound"])
            req: dict[str, Any] = {"type": "delayed", "interval_ms": r.randint(0, 10_000), "max_retries": r.randint(0, 3)}
            plan = Plan(b)
            if r.random() < 0.3:
                plan.ack = r.choice(["ok", "ackfail", "flaky"])
                req["ack_url"] = f"http://127.0.0.1/ack/{plan.ack}"
                req["ack_delay_ms"] = r.choice([100, 500])
            kinds.append((req, plan))
        for _ in range(r.randint(3, 8)):
            b = r.choice(["ok", "err", "slow", "flaky"])
            kinds.append(({"type": "delayed", "interval_ms": r.randint(0, 10_000), "reliability": "at_most_once"}, Plan(b)))
        for _ in range(r.randint(1, 4)):
            b = r.choice(["ok", "ok", "err", "notfound", "flaky"])
            req = {"type": "periodic", "interval_ms": r.choice([1_000, 1_500, 3_000]), "max_retries": r.randint(0, 2),
                   "max_fails": r.randint(2, 3)}
            kinds.append((req, Plan(b)))
        for _ in range(r.randint(0, 2)):
            req = {"type": "periodic", "interval_ms": r.choice([1_000, 2_000]), "reliability": "at_most_once",
                   "max_fails": 3}
            kinds.append((req, Plan(r.choice(["ok", "flaky"]))))
        for _ in range(r.randint(0, 3)):  # jitter (under half the period: see docs/api.md) and bounds
            req = {"type": "periodic", "interval_ms": r.choice([1_000, 2_000]), "jitter_ms": r.choice([0, 200, 400]),
                   "reliability": r.choice(["at_least_once", "at_most_once"]), "max_fails": 3}
            if r.random() < 0.5:
                req["max_runs"] = r.randint(1, 6)
            if r.random() < 0.5:
                req["end_at"] = r.randint(5_000, 25_000)  # from the create: made absolute below
            kinds.append((req, Plan(r.choice(["ok", "ok", "flaky"]))))
            for _ in range(r.choice([0, 0, 1, 2])):  # updated in place while it runs: a new period and jitter
                patch = {"interval_ms": r.choice([1_000, 1_500, 2_000]), "jitter_ms": r.choice([0, 200, 400])}
                k = len(kinds) - 1
                self.at(self.t0 + r.randint(1_000, 25_000), lambda k=k, p=patch: self.client_update(f"k{k}", p))
        for req, _ in kinds:  # catch-up of missed occurrences (docs/architecture.md#catch-up)
            if req["type"] == "periodic" and r.random() < 0.6:
                req["catchup"] = r.choice(["one", "none", "all", "all"])
                if req["catchup"] == "all" and r.random() < 0.3:
                    req["catchup_window_ms"] = 2_000
        r2 = self.rng2
        for _ in range(r2.randint(0, 3)):  # receivers that throttle (429 + Retry-After) before they answer
            periodic = r2.random() < 0.3
            req = ({"type": "periodic", "interval_ms": r2.choice([2_000, 3_000]), "max_fails": 3} if periodic
                   else {"type": "delayed", "interval_ms": r2.randint(0, 10_000)})
            req["max_retries"] = r2.randint(0, 2)
            req["flow_key"] = f"throttling-{len(kinds)}"  # its Retry-After holds its own flow only
            kinds.append((req, Plan("throttle", throttle=r2.randint(1, 5))))
        for _ in range(r2.randint(0, 2)):  # an operator redrives dead letters after fixing the receiver
            self.at(self.t0 + r2.randint(5_000, FAULT_WINDOW + 10_000), self.operator_redrive)
        for _ in range(r.randint(1, 4) if self.horizon <= 3_000 else 0):  # due at the window's edge as it moves
            self.at(self.t0 + r.randint(0, 20_000), self.edge_creates)
        if r.random() < 0.7:
            self.flow_workload()
        self.pause_workload()
        self.trigger_workload()
        self.delete_workload()
        self.delayed_update_workload()
        self.allow_workload(kinds)
        for i, (req, plan) in enumerate(kinds):
            req["callback_url"] = f"http://127.0.0.1/cb/{plan.behaviour}"
            req.setdefault("timeout_ms", 1_000)
            plan.idem = f"k{i}"
            req["idempotency_key"] = plan.idem
            when = self.t0 + (0 if r.random() < 0.5 else r.randint(0, 20_000))
            if "end_at" in req:
                req["end_at"] += when + 1_000  # after every retried create of it
            self.at(when, lambda req=req, plan=plan: self.client_create(req, plan))
        b = self.brng
        for req, _ in kinds:  # instants due while an occurrence runs (docs/architecture.md#overlap)
            if req["type"] == "periodic" and b.random() < 0.5:
                req.setdefault("overlap", b.choice(["skip", "buffer_one"]))  # (allow tasks keep allow)
        for i, (req, _) in enumerate(kinds):  # backfills of past ranges (docs/architecture.md#backfill)
            if req["type"] == "periodic" and b.random() < 0.5:
                for _ in range(b.choice([1, 1, 2])):
                    self.at(self.t0 + b.randint(2_000, 30_000), lambda i=i: self.client_backfill(i))

    def allow_workload(self, kinds: list[tuple[dict[str, Any], Plan]]) -> None:
        """Periodic tasks with ``overlap: allow`` (docs/architecture.md#overlap): some of the others
        switched to it, and tasks whose receiver answers after the next instants came due (``slowok``)
        or so slowly that ``MAX_RUNNING`` of them run at once (``crawl``), with catch-up, jitter,
        bounds and updates in place."""
        a = self.arng
        for req, _ in kinds:
            if req["type"] == "periodic" and "overlap" not in req and a.random() < 0.25:
                req["overlap"] = "allow"
        for _ in range(a.choice([0, 1, 1, 2, 3])):
            req: dict[str, Any] = {
                "type": "periodic", "interval_ms": a.choice([1_000, 1_000, 1_500]), "overlap": "allow",
                "timeout_ms": 3_000, "reliability": a.choice(["at_least_once", "at_least_once", "at_most_once"]),
                "max_retries": a.randint(0, 2), "max_fails": 3,
            }
            if a.random() < 0.4:
                req["catchup"] = a.choice(["one", "none"])
            if a.random() < 0.3:
                req["jitter_ms"] = a.choice([200, 400])
            if a.random() < 0.2:
                req["max_runs"] = a.randint(2, 10)
            kinds.append((req, Plan(a.choice(["slowok", "slowok", "flaky"]))))
            if a.random() < 0.2:
                patch = {"jitter_ms": a.choice([0, 200])}
                k = len(kinds) - 1
                self.at(self.t0 + a.randint(2_000, 20_000), lambda k=k, p=patch: self.client_update(f"k{k}", p))
        if a.random() < 0.3:
            kinds.append(({"type": "periodic", "interval_ms": 1_000, "overlap": "allow", "timeout_ms": 10_000,
                           "max_fails": 3, "reliability": a.choice(["at_least_once", "at_most_once"])},
                          Plan("crawl")))

    def flow_workload(self) -> None:
        """Flows with limits (docs/architecture.md#flow-control): a rate, a concurrency, a pause that
        is lifted later, receivers answering 429 with Retry-After; delayed tasks in them, created
        after their flow's settings, bunched so the limits bite."""
        r = self.rng
        flows: dict[str, FlowSettings] = {}
        if r.random() < 0.8:
            flows["fa"] = FlowSettings(rate_per_s=r.choice([1.0, 2.0, 5.0, 10.0]), burst=r.choice([None, 1, 2, 4]))
        if r.random() < 0.8:
            flows["fb"] = FlowSettings(concurrency=r.choice([1, 2, 3]), rate_per_s=r.choice([None, None, 20.0]))
        if r.random() < 0.6:
            flows["fc"] = FlowSettings(paused=True, concurrency=r.choice([None, 2]))
        for key, fs in flows.items():
            self.flow_limits[key] = fs
            self.at(self.t0, lambda key=key, fs=fs: self.client_put_flow(key, fs))
            if fs.paused:
                self.at(self.t0 + r.randint(3_000, 30_000), lambda key=key: self.client_put_flow(key, None, paused=False))
            elif r.random() < 0.3:  # paused for a while in the middle of its traffic, resumed once that is on record
                def resume_later(key: str = key) -> None:
                    self.at(self.now + r.randint(500, 8_000), lambda: self.client_put_flow(key, None, paused=False))

                self.at(self.t0 + r.randint(2_000, 20_000),
                        lambda key=key, then=resume_later: self.client_put_flow(key, None, paused=True, then=then))
        for key in flows:
            start = r.randint(500, 15_000)
            for _ in range(r.randint(4, 15)):  # many due at the same instant: the limits bite
                beh = r.choice(["ok", "ok", "ok", "throttle", "err", "slow"] if key != "fc" else ["ok", "throttle"])
                req: dict[str, Any] = {"type": "delayed", "interval_ms": r.choice([0, 0, 500, r.randint(0, 2_000)]),
                                       "flow_key": key,
                                       "max_retries": r.randint(0, 3),
                                       "reliability": r.choice(["at_least_once", "at_least_once", "at_most_once"])}
                self.create_at(self.t0 + start + r.randint(0, 1_000), req, beh, throttle=r.randint(1, 3))

    def pause_workload(self) -> None:
        """Tasks a client pauses and resumes (docs/architecture.md#task-rules): delayed ones paused before
        their time, while they retry or while their ACK is awaited; periodic ones between or in the middle
        of an occurrence, resumed from now or from their schedule, some paused again later. Each stays
        paused for up to 6 s once the pause is on record (one with an ACK: 2.5 s, mostly within its delay)."""
        p = self.trng
        for _ in range(p.choice([0, 1, 2, 3, 4])):
            ack = None
            rel = p.choice(["at_least_once", "at_least_once", "at_most_once"])
            if p.random() < 0.4:
                req: dict[str, Any] = {"type": "delayed", "interval_ms": p.randint(500, 12_000),
                                       "max_retries": p.randint(0, 3), "reliability": rel}
                beh = p.choice(["ok", "ok", "flaky", "err", "slow"])
                if p.random() < 0.5 and rel == "at_least_once":
                    ack = p.choice(["ok", "flaky"])
                    req["ack_url"] = f"http://127.0.0.1/ack/{ack}"
                    req["ack_delay_ms"] = p.choice([100, 500, 3_000, 3_000])  # (3 s: resumed before the probe is due)
            else:
                req = {"type": "periodic", "interval_ms": p.choice([1_000, 1_500, 2_000]), "max_fails": 3,
                       "max_retries": p.randint(0, 2), "reliability": rel,
                       "catchup": p.choice(["one", "none", "all"]), "overlap": p.choice(["skip", "buffer_one", "allow"])}
                if p.random() < 0.3:
                    req["jitter_ms"] = p.choice([200, 400])
                beh = p.choice(["ok", "ok", "flaky", "slow", "err"])
            when = self.t0 + p.randint(0, 10_000)
            idem = self.create_at(when, req, beh, ack=ack)
            cycles = p.choice([1, 1, 2])
            # paused in the middle of an occurrence when it can be (a task with an ACK: always, from just
            # before its time, and soon resumed: the probe the pause held is due ack_delay_ms after the 2xx)
            wait = 5_000 if p.random() < 0.5 or ack else 0
            pause_at = when + p.randint(200, 15_000) if ack is None else when + req["interval_ms"] - p.randint(0, 300)
            self.at(pause_at,
                    lambda idem=idem, cycles=cycles, wait=wait: self.client_pause(idem, cycles, self.now + wait))

    def trigger_workload(self) -> None:
        """Tasks a client triggers (docs/architecture.md#task-rules): delayed ones before their time,
        periodic ones (jitter, every ``catchup`` and ``overlap``) between occurrences, once or twice at
        random times; a trigger the machine refuses (the task not pending, or a fire in flight) is
        asked again a little later, up to five times in all."""
        x = self.xrng
        for _ in range(x.choice([0, 1, 2, 3])):
            ack = None
            rel = x.choice(["at_least_once", "at_least_once", "at_most_once"])
            if x.random() < 0.35:
                req: dict[str, Any] = {"type": "delayed", "interval_ms": x.randint(2_000, 30_000),
                                       "max_retries": x.randint(0, 2), "reliability": rel}
                beh = x.choice(["ok", "ok", "flaky", "err"])
                if x.random() < 0.3 and rel == "at_least_once":
                    ack = x.choice(["ok", "flaky"])
                    req["ack_url"] = f"http://127.0.0.1/ack/{ack}"
                    req["ack_delay_ms"] = x.choice([100, 500])
            else:
                req = {"type": "periodic", "interval_ms": x.choice([1_000, 1_500, 2_000, 3_000, 5_000]),
                       "max_fails": 3, "max_retries": x.randint(0, 2), "reliability": rel,
                       "catchup": x.choice(["one", "none", "all"]),
                       "overlap": x.choice(["skip", "buffer_one", "allow"])}
                if x.random() < 0.3:
                    req["jitter_ms"] = x.choice([200, 400])
                beh = x.choice(["ok", "ok", "ok", "flaky", "slow", "err"])
            when = self.t0 + x.randint(0, 10_000)
            idem = self.create_at(when, req, beh, ack=ack)
            for _ in range(x.choice([1, 1, 2])):
                self.at(when + x.randint(300, 30_000), lambda idem=idem: self.client_trigger(idem, 5))

    def client_trigger(self, idem: str, tries: int) -> None:
        """A client triggering the task of ``idem``; refused or lost, it asks again (``tries`` in all)."""
        ld = self.leader
        plan = self.client_reqs[idem][1]
        if ld is None or plan.task_id is None:  # no leader, or not created yet: the client waits
            self.at(self.now + 300, lambda: self.client_trigger(idem, tries))
            return
        t = self.replicas[ld.node].get_task(plan.task_id)
        if t is None or t.status in TERMINAL_STATUSES:
            return  # nothing left to trigger
        cmd = TriggerTask(self.now, plan.task_id, refuses_planned=True, refuses_sent_ahead=True)
        self.log_(f"client: trigger {plan.task_id} ({t.status}, due {t.due_ms and t.due_ms - self.t0})")
        self.propose(cmd)

        def verify() -> None:
            if not self.trigger_outcome.get(cmd, False) and tries > 1:
                self.at(self.now + self.xrng.randint(100, 700), lambda: self.client_trigger(idem, tries - 1))

        self.at(self.now + 50, verify)

    def delete_workload(self) -> None:
        """Tasks a client deletes (docs/architecture.md#task-rules): delayed ones before their time, while
        an attempt is out or a retry waits, while their ACK is awaited, or once finished; periodic ones at
        a random time. After some deletes the client creates again with the same idempotency key."""
        d = self.drng
        for _ in range(d.choice([0, 1, 2, 3, 4])):
            mode = d.choice(["pending", "firing", "firing", "ack", "periodic", "finished"])
            rel = d.choice(["at_least_once", "at_least_once", "at_most_once"])
            ack = None
            want: str | None = None
            req: dict[str, Any] = {"type": "delayed", "interval_ms": d.randint(2_000, 20_000),
                                   "max_retries": d.randint(0, 3), "reliability": rel}
            beh = d.choice(["ok", "flaky"])
            after = d.randint(0, req["interval_ms"])  # mostly before its time
            if mode == "firing":  # an attempt out (a slow receiver: until its timeout) or a retry waiting
                req["interval_ms"] = d.randint(0, 5_000)
                req["max_retries"] = d.randint(1, 3)
                beh, want, after = d.choice(["slow", "slow", "err", "flaky"]), "firing", 0
            elif mode == "ack":
                req["reliability"] = "at_least_once"
                ack = d.choice(["ok", "ackfail", "flaky"])
                req["ack_url"] = f"http://127.0.0.1/ack/{ack}"
                req["ack_delay_ms"] = 500
                req["interval_ms"] = d.randint(0, 5_000)
                beh, want, after = "ok", "ack", 0
            elif mode == "finished":
                req["interval_ms"] = d.randint(0, 3_000)
                want, after = "finished", 0
            elif mode == "periodic":
                req = {"type": "periodic", "interval_ms": d.choice([1_000, 1_500, 2_000]), "max_fails": 3,
                       "max_retries": d.randint(0, 2), "reliability": rel,
                       "catchup": d.choice(["one", "none", "all"]),
                       "overlap": d.choice(["skip", "buffer_one", "allow"])}
                beh = d.choice(["ok", "ok", "flaky", "slow", "err"])
                want = "firing" if d.random() < 0.4 else None
                after = d.randint(1_000, 20_000)
            when = self.t0 + d.randint(0, 15_000)
            idem = self.create_at(when, req, beh, ack=ack)
            recreate = d.random() < 0.4
            self.at(when + after, lambda idem=idem, want=want, recreate=recreate:
                    self.client_delete(idem, want, self.now + 15_000, recreate))

    def client_delete(self, idem: str, want: str | None, until: int, recreate: bool) -> None:
        """A client deleting the task of ``idem`` once its create is done (until ``until``, when it is in
        the state ``want``: ``firing`` with a fire in flight, ``ack`` awaiting its ACK, ``finished``),
        again until the leader's replica shows it gone; then, if ``recreate``, creating with the key again."""
        ld = self.leader
        req, plan = self.client_reqs[idem]
        if ld is not None and plan.task_id is not None:
            tid = plan.task_id
            t = self.replicas[ld.node].get_task(tid)
            if t is None:
                if recreate and tid in self.deleted and idem not in self.recreates:
                    again = Plan("ok", idem=idem)
                    self.recreates[idem] = (tid, again, self.now)
                    self.log_(f"client: create again with the key {idem} of deleted task {tid}")
                    self.at(self.now + self.drng.randint(0, 3_000), lambda: self.client_create(
                        {**req, "callback_url": "http://127.0.0.1/cb/ok"}, again))
                return  # deleted (or expired)
            state = {"firing": t.status is Status.FIRING and (t.inflight is not None or any(r.inflight for r in t.running)),
                     "ack": t.status is Status.AWAITING_ACK,
                     "finished": t.status in TERMINAL_STATUSES}
            if want is not None and not state[want] and self.now < until:
                self.at(self.now + 20, lambda: self.client_delete(idem, want, until, recreate))
                return
            self.log_(f"client: delete {tid} ({t.status}, attempt {t.attempt}, in flight {t.inflight})")
            self.propose(DeleteTasks(self.now, (tid,)))
        self.at(self.now + 300, lambda: self.client_delete(idem, want, until, recreate))

    def delayed_update_workload(self) -> None:
        """Delayed tasks a client updates in place (docs/architecture.md#update), created with ``run_at`` or
        ``interval_ms``, with retries or an ACK, at_least_once and at_most_once: before their time (moved
        earlier or later, some into the past: due now), while an attempt is out, while a retry waits or while
        their ACK is awaited; some changed again a little later, some patched with what they already have."""
        u = self.urng
        for _ in range(u.choice([0, 1, 2, 3, 4, 5])):
            mode = u.choice(["pending", "pending", "pending", "firing", "retry", "ack"])
            rel = u.choice(["at_least_once", "at_least_once", "at_most_once"])
            when = self.t0 + u.randint(0, 15_000)
            delay = u.randint(1_000, 15_000)
            beh = u.choice(["ok", "ok", "flaky", "err", "slow"])
            ack = None
            want, after = "pending", u.randint(0, delay)  # mostly before its time
            if mode == "firing":  # an attempt out (a slow receiver: until its timeout)
                delay, beh, want, after = u.randint(0, 3_000), u.choice(["slow", "slow", "flaky"]), "firing", 0
            elif mode == "retry":  # a failed attempt's retry waiting (1, 2, 4 s by the default policy)
                rel, delay, beh, want, after = "at_least_once", u.randint(0, 3_000), u.choice(["err", "err", "flaky"]), "retry", 0
            elif mode == "ack":
                rel, delay, beh, want, after = "at_least_once", u.randint(0, 5_000), "ok", "ack", 0
                ack = u.choice(["ok", "ackfail", "flaky"])
            req: dict[str, Any] = {"type": "delayed", "reliability": rel, "max_retries": u.randint(0, 3)}
            if mode in ("firing", "retry"):
                req["max_retries"] = u.randint(1, 3)
            if ack is not None:
                req["ack_url"] = f"http://127.0.0.1/ack/{ack}"
                req["ack_delay_ms"] = u.choice([500, 2_000])
            if u.random() < 0.3:
                req["run_at"] = when + delay  # (a create retried later keeps the time it asked for)
            else:
                req["interval_ms"] = delay
            idem = self.create_at(when, req, beh, ack=ack)
            again = u.random() < 0.3
            self.at(when + after, lambda idem=idem, want=want, again=again:
                    self.client_reschedule(idem, want, self.now + 15_000, again))

    def client_reschedule(self, idem: str, want: str | None, until: int, again: bool) -> None:
        """A client updating the delayed task of ``idem`` once its create is done (until ``until``, when it is
        in the state ``want``: ``pending`` before its first attempt, ``firing`` with an attempt out, ``retry``
        with a retry waiting, ``ack`` awaiting its ACK): to a new time near its current one or now, earlier or
        later (in the past: due now), by ``run_at`` or ``interval_ms``, or with the schedule it already has (a
        change of nothing); ``again``: once more, in whatever state it is then, a little later."""
        ld = self.leader
        plan = self.client_reqs[idem][1]
        if ld is None or plan.task_id is None:  # no leader, or not created yet: the client waits
            self.at(self.now + 300, lambda: self.client_reschedule(idem, want, until, again))
            return
        t = self.replicas[ld.node].get_task(plan.task_id)
        if t is None:
            return
        state = {"pending": t.status is Status.PENDING and t.attempt == 0 and t.inflight is None,
                 "firing": t.status is Status.FIRING and t.inflight is not None,
                 "retry": t.status is Status.FIRING and t.inflight is None and t.attempt > 0,
                 "ack": t.status is Status.AWAITING_ACK}
        if want is not None and not state[want] and self.now < until:
            self.at(self.now + 20, lambda: self.client_reschedule(idem, want, until, again))
            return
        u = self.urng
        how = u.choice(["run_at", "run_at", "interval_ms", "interval_ms", "same"])
        if how == "same":
            patch: dict[str, Any] = ({"interval_ms": t.spec.interval_ms} if t.spec.interval_ms is not None
                                     else {"run_at": t.spec.run_at})
        else:
            target = u.choice([self.now, t.sched_ms + u.randint(-10_000, -1), t.sched_ms + u.randint(1, 10_000),
                               self.now + u.randint(-5_000, 8_000)])
            target = min(target, self.now + 15_000)
            patch = {"run_at": target} if how == "run_at" else {"interval_ms": max(0, target - t.created_ms)}
        self.log_(f"client: reschedule {t.id} ({t.status}, attempt {t.attempt}, due {t.due_ms and t.due_ms - self.t0})")
        self.client_update(idem, patch, once=how == "same")
        if again:
            self.at(self.now + u.randint(100, 6_000), lambda: self.client_reschedule(idem, None, self.now, False))

    def client_pause(self, idem: str, cycles: int, firing_until: int = 0) -> None:
        """A client pausing the task of ``idem``, again until the leader's replica shows it paused (then
        resumed a little later), finished or gone; until ``firing_until`` it waits for the task to be
        firing (an attempt out or a retry waiting) or, with an ``ack_url``, waiting for its ACK."""
        ld = self.leader
        if ld is not None:
            rep = self.replicas[ld.node]
            tid = rep.get_idem(idem)
            t = rep.get_task(tid) if tid is not None else None
            if tid is not None and (t is None or t.status in TERMINAL_STATUSES):
                return  # gone (expired), or nothing left to pause
            if t is not None:
                if t.status is Status.PAUSED:
                    p = self.trng
                    fs = t.spec.type is TaskType.PERIODIC and p.random() < 0.4
                    paused_for = p.randint(100, 6_000 if t.spec.ack_url is None else 2_500)  # (ACK: within its delay)
                    self.at(self.now + paused_for, lambda: self.client_resume(idem, fs, cycles - 1))
                    return
                mid = (Status.FIRING,) if t.spec.ack_url is None else (Status.FIRING, Status.AWAITING_ACK)
                if t.status not in mid and self.now < firing_until:
                    self.at(self.now + 20, lambda: self.client_pause(idem, cycles, firing_until))
                    return
                self.log_(f"client: pause {tid} ({t.status}, attempt {t.attempt})")
                self.propose(PauseTasks(self.now, (tid,)))
        self.at(self.now + 300, lambda: self.client_pause(idem, cycles))

    def client_resume(self, idem: str, from_schedule: bool, cycles: int) -> None:
        """A client resuming the task of ``idem`` (from its schedule or from now), again until the leader's
        replica shows it no longer paused; ``cycles`` more pauses follow."""
        ld = self.leader
        if ld is not None:
            rep = self.replicas[ld.node]
            tid = rep.get_idem(idem)
            t = rep.get_task(tid) if tid is not None else None
            if t is None:
                return
            if t.status is not Status.PAUSED:
                if cycles > 0:
                    self.at(self.now + self.trng.randint(300, 5_000), lambda: self.client_pause(idem, cycles))
                return
            self.log_(f"client: resume {tid} from {'schedule' if from_schedule else 'now'}")
            self.propose(ResumeTasks(self.now, (tid,), from_schedule=from_schedule, drops_paused=True,
                                     records_dropped=True, counts_quota=True))
        self.at(self.now + 300, lambda: self.client_resume(idem, from_schedule, cycles))

    def client_put_flow(
        self, key: str, fs: FlowSettings | None, paused: bool = False, then: Callable[[], None] | None = None
    ) -> None:
        """An operator setting a flow (``fs``) or only pausing/resuming it, retrying until the leader's
        replica shows it (then ``then``)."""
        ld = self.leader
        if ld is not None:
            cur = self.replicas[ld.node].get_flow(key)
            if (fs is not None and cur is not None and msgspec.structs.replace(cur, updated_ms=0) == fs) or (
                    fs is None and cur is not None and cur.paused == paused):
                if then is not None:
                    then()
                return
            cmd = PutFlow(self.now, key, fs if fs is not None else FlowSettings(paused=paused), only_paused=fs is None)
            self.log_(f"client: flow {key} {fs if fs is not None else ('pause' if paused else 'resume')}")
            self.propose(cmd)
        self.at(self.now + 300, lambda: self.client_put_flow(key, fs, paused, then))

    def operator_redrive(self) -> None:
        """Redrive up to three at_least_once dead letters the leader's replica shows (an at_most_once
        redrive is a deliberate second delivery: not one the invariants could check)."""
        ld = self.leader
        if ld is None:
            return
        dead = [d for d in self.replicas[ld.node].dead.values()
                if d.reliability is Reliability.AT_LEAST_ONCE and d.id not in self.redriven]
        picked = self.rng2.sample(sorted(dead, key=lambda d: d.id), min(3, len(dead)))
        if not picked:
            return
        rep = self.replicas[ld.node]
        for d in picked:
            self.redriven[d.id] = d
            self.redriven_fires.add(d.fire_id)
            t = rep.get_task(d.task_id)
            if t is not None:  # callback attempts made before the redrive (ACK probes: the dead letter's)
                self.redrive_base[d.id] = t.attempt
        for d in picked:
            self.redrive_at[d.task_id].append(self.now)
        self.log_(f"operator: redrive {[d.id for d in picked]}")
        self.propose(RedriveDeadLetters(self.now, tuple(d.id for d in picked), counts_quota=True))

    def edge_creates(self) -> None:
        """Three delayed tasks due one ms before the leader's window ends, at its end and one after."""
        ld = self.leader
        edge = ld.wheel.window.loaded_until_ms if ld is not None else self.now + self.horizon
        edge = max(edge, self.now + 1)
        rel = self.rng.choice(["at_least_once", "at_most_once"])
        for off in (-1, 0, 1):
            self.edge_tasks.append(self.create_at(self.now, {"type": "delayed", "run_at": edge + off, "reliability": rel}))

    def create_at(self, when: int, req: dict[str, Any], behaviour: str = "ok", throttle: int = 0,
                  ack: str | None = None) -> str:
        """Schedule a client create of ``req`` (callback answered per ``behaviour``, ``throttle`` and
        ``ack`` as :class:`Plan`'s); returns its idempotency key."""
        self.client_n += 1
        plan = Plan(behaviour, ack=ack, idem=f"client-{self.client_n}", throttle=throttle)
        req = {"callback_url": f"http://127.0.0.1/cb/{behaviour}", "timeout_ms": 1_000, **req,
               "idempotency_key": plan.idem}
        self.client_reqs[plan.idem] = (req, plan)
        self.at(when, lambda: self.client_create(req, plan))
        return plan.idem

    def client_create(self, req: dict[str, Any], plan: Plan) -> None:
        """A client creating with an idempotency key, retrying until the task exists."""
        assert plan.idem is not None
        ld = self.leader
        if ld is not None:
            rep = self.replicas[ld.node]
            tid = rep.get_idem(plan.idem)
            if tid is not None:
                self.plans.setdefault(tid, plan)
                plan.task_id = tid
                return
            spec = validate_create(req, now_ms=self.now)
            new_id = new_task_id(self.now, self.rng.getrandbits(80))
            self.plans[new_id] = plan  # harmless if this attempt is lost: it never fires
            self.created_spec[new_id] = spec
            self.propose(CreateTasks(self.now, (CreateItem(new_id, spec),)))
        self.at(self.now + 300, lambda: self.client_create(req, plan))

    def client_update(self, idem: str, patch: dict[str, Any], after: int = 0, once: bool = False) -> None:
        """A client changing the task of idempotency key ``idem`` without If-Match, again until the
        leader's replica shows the change or a version after the one it proposed from (its change
        applied, maybe then changed again by another client); ``once``: asked once, whatever the
        replica shows (a patch that may change nothing)."""
        ld = self.leader
        if ld is not None:
            rep = self.replicas[ld.node]
            tid = rep.get_idem(idem)
            t = rep.get_task(tid) if tid is not None else None
            if tid is not None and t is None:
                return  # gone (expired)
            if t is not None:
                if not once and (all(getattr(t.spec, k) == v for k, v in patch.items()) or (after and t.version > after)):
                    return
                spec = decode_update(json.dumps(patch).encode(), t.spec, now_ms=self.now)
                self.specs[tid].append(spec)
                self.log_(f"client: update {tid} {patch} at version {t.version}")
                self.propose(UpdateTask(self.now, tid, spec, t.version, after_last_fire=True, moves_waiting=True))
                if once:
                    return
                after = t.version
        self.at(self.now + 300, lambda: self.client_update(idem, patch, after, once))

    def client_backfill(self, i: int) -> None:
        """A client asking once for a backfill of task ``k{i}``: a past range of up to eight periods,
        ending up to two periods ago, that may start before the task was created."""
        ld = self.leader
        if ld is None:
            self.at(self.now + 300, lambda: self.client_backfill(i))
            return
        rep = self.replicas[ld.node]
        tid = rep.get_idem(f"k{i}")
        t = rep.get_task(tid) if tid is not None else None
        if t is None:
            if tid is None:  # not created yet
                self.at(self.now + 300, lambda: self.client_backfill(i))
            return
        iv = t.spec.interval_ms or 1_000
        b = self.brng
        end = self.now - b.randint(0, 2 * iv)
        start = max(0, end - b.randint(1, 8) * iv + b.randint(-iv // 2, iv // 2))
        self.log_(f"client: backfill {tid} [{start - self.t0}, {end - self.t0})")
        self.propose(BackfillTask(self.now, tid, start, end))

    def schedule_faults(self) -> None:
        r = self.rng
        for _ in range(self.leader_crashes):
            self.at(self.t0 + r.randint(500, FAULT_WINDOW), lambda: self.lose_leader(crash=True))
        for _ in range(self.partitions):
            self.at(self.t0 + r.randint(500, FAULT_WINDOW), lambda: self.lose_leader(crash=False))
        for _ in range(self.outages):  # no leader for several periods: what catch-up is for
            self.at(self.t0 + r.randint(500, FAULT_WINDOW),
                    lambda: self.lose_leader(crash=False, delay=r.randint(2_500, 6_000)))
        for _ in range(self.p_worker_crash):

            def worker_crash() -> None:
                others = [n for n in self.nodes if self.alive[n] and (self.leader is None or n != self.leader.node)]
                if others:  # down long enough, often, for the leader to see it lost (WORKER_LOST)
                    self.crash(r.choice(others), down=(500, 3 * WORKER_LOST))

            self.at(self.t0 + r.randint(500, FAULT_WINDOW), worker_crash)


# -------------------------------------------------------------------- invariants


def _seq(d: Delivery) -> int:
    return int(d.fire_id.rsplit("-", 1)[1])


def _healthy(sim: Sim, start: int, end: int) -> bool:
    return not any(start <= f <= end for f in sim.faults)


def check(sim: Sim) -> None:
    """Raise :class:`Violation` on the first broken promise."""
    seed = sim.seed

    def fail(msg: str) -> None:
        raise Violation(f"seed={seed}: {msg}")

    reps = list(sim.replicas.values())
    digests = {sim.replicas[n].digest() for n in sim.nodes}
    if len(digests) != 1:
        fail("replicas differ")
    state = reps[0]
    check_deletes(sim, fail)
    # the Cleaner's expired tasks and the clients' deleted ones as they were: their checks still apply
    # (a deleted one's to what it did until its delete)
    tasks = {**sim.expired, **{tid: dl.task for tid, dl in sim.deleted.items()}, **state.tasks}
    executions = [*sim.expired_execs, *sim.deleted_execs, *state.executions]
    dead = {**sim.deleted_dead, **state.dead}
    check_expiry(sim, state, fail)
    check_lost_workers(sim, fail)
    by_task: dict[str, list[Delivery]] = defaultdict(list)
    for d in sim.deliveries:
        by_task[d.task_id].append(d)

    # one task per idempotency key
    keys: dict[str, int] = defaultdict(int)
    for tid, t in tasks.items():
        if t.spec.idempotency_key and tid not in sim.deleted:  # a delete frees its key (check_deletes)
            keys[t.spec.idempotency_key] += 1
    for k, n in keys.items():
        if n != 1:
            fail(f"{n} tasks for idempotency key {k}")
    # deliveries only for tasks that exist (creates lost in failover never fire), a deleted one's only
    # from a Dispatched entry applied before its delete (check_deletes)
    for d in sim.deliveries:
        if d.task_id not in tasks:
            fail(f"delivery for a task that does not exist: {d}")

    check_triggers(sim, tasks, executions, fail)

    check_flows(sim, fail)
    check_pauses(sim, tasks, fail)
    check_delayed_updates(sim, tasks, executions, fail)
    throttled_flows = {flow for _, flow, _, _ in sim.throttles}
    ends: dict[tuple[str, int], int] = defaultdict(int)
    backfilled_seqs = set()
    for d in sim.deliveries:
        if d.kind is FireKind.CALLBACK:
            ends[(d.task_id, _seq(d))] = max(ends[(d.task_id, _seq(d))], d.end)
            if any(b.covers(d) for b in sim.backfills.get(d.task_id, [])):
                backfilled_seqs.add((d.task_id, _seq(d)))
    for d in sim.deliveries:
        if d.due < 0:
            fail(f"delivery of a fire that was never planned: {d}")
        if d.at < d.due:
            fail(f"fired early: {d}")
        pl = sim.plan_of.get((d.fire_id, d.attempt, d.kind))
        if pl is not None and (pl.flow in sim.flow_limits or pl.flow in throttled_flows):
            continue  # held by its flow on purpose (check_flows); every other flow is never late
        start, bound = d.due, LATENESS_BOUND
        prev = (d.task_id, _seq(d) - 1)
        if d.attempt == 1 and prev in ends and (prev in backfilled_seqs or not any(
                s.overlap is Overlap.ALLOW for s in (sim.created_spec[d.task_id], *sim.specs.get(d.task_id, ())))):
            # could start when the occurrence before it ended: a backfill's, or any under skip and
            # buffer_one (catchup all fires a passed instant then, its due still its instant)
            start = max(d.due, ends[prev])
            bound += RESULT_FLUSH + COMMIT_LAT[1]
        mv = moved_by(sim, d)
        if mv is not None:  # a delayed task moved to a time already past: due when its update applied
            start = max(start, mv.at)
        redriving = any(r - DISPATCH_SLACK <= d.at <= r + RECOVERY_WINDOW for r in sim.redrive_at.get(d.task_id, ()))
        if held_by_pause(sim, d):
            continue  # due while its task was paused, sent once resumed (check_pauses)
        if _healthy(sim, d.due - 2 * DISPATCH_SLACK, d.at) and d.at - start > bound and not redriving:
            fail(f"late by {d.at - start} ms on a healthy cluster: {d}")

    for tid, ds in by_task.items():
        t = tasks[tid]
        plan = sim.plans[tid]
        ds.sort(key=lambda d: d.at)
        if t.spec.overlap is Overlap.ALLOW:  # its occurrences run at once; each one's requests never overlap
            check_allow(sim, tid, ds, fail)
        else:
            for a, b in itertools.pairwise(ds):
                if a.end < 0 or b.at < a.end:
                    fail(f"overlapping requests for task {tid}: {a} / {b}")
        if t.spec.reliability is Reliability.AT_MOST_ONCE:
            seen = set()
            for d in ds:
                if d.kind is FireKind.CALLBACK:
                    if d.fire_id in seen:
                        fail(f"at_most_once fire {d.fire_id} delivered twice")
                    seen.add(d.fire_id)
        sent: dict[str, int] = defaultdict(int)  # a fire ever sent at_most_once is delivered once at most
        amo = {d.fire_id for d in ds if d.kind is FireKind.CALLBACK and d.sent_as is Reliability.AT_MOST_ONCE}
        for d in ds:
            if d.kind is FireKind.CALLBACK and d.fire_id in amo:
                sent[d.fire_id] += 1
                if sent[d.fire_id] > 1:
                    fail(f"fire {d.fire_id} sent at_most_once delivered twice")
        del plan

    # each attempt is on record once; a second row for it is only the late result of an attempt
    # given up as lost (docs/architecture.md#lost-workers), recorded and not applied
    execs: dict[str, list[Any]] = defaultdict(list)
    first_row: dict[tuple[str, FireKind, int], Any] = {}
    for e in executions:
        if e.kind is FireKind.EVENT:  # an update on record, not an attempt
            continue
        key = (e.fire_id, e.kind, e.attempt)
        prev = first_row.get(key)
        if prev is None:
            first_row[key] = e
            execs[e.task_id].append(e)
        elif prev.result not in (ExecutionResult.LOST, ExecutionResult.UNKNOWN) or e.result in (
                ExecutionResult.LOST, ExecutionResult.UNKNOWN):
            fail(f"attempt recorded twice: {prev} / {e}")

    # an attempt a worker answered not sent left no history row of an outcome (nothing claims it was
    # delivered or tried) but the one of a lost attempt, when its answer reached no leader before the
    # Monitor gave it up
    for key, e in first_row.items():
        if key in sim.not_sent and (e.fire_id, e.attempt) not in sim.given_up:
            fail(f"attempt not sent on record: {e}")
    # a 429 with Retry-After on record: the next attempt of that fire is not due before the time it gave
    due_of = {(d.fire_id, d.attempt): d.due for d in sim.deliveries if d.kind is FireKind.CALLBACK}
    for (fid, kind, attempt), e in first_row.items():
        ra = sim.retry_after.get((fid, attempt))
        if kind is FireKind.CALLBACK and e.status_code == 429 and ra is not None:
            nxt = due_of.get((fid, attempt + 1))
            if nxt is not None and nxt < ra:
                fail(f"retry of {fid} attempt {attempt + 1} due {nxt}, before Retry-After {ra}")
    # throttled attempts are free (max_throttle_ms is an hour here): a throttling receiver's
    # at_least_once occurrence that ended failed used up its retries on other answers
    for tid, t in tasks.items():
        if sim.plans[tid].behaviour == "throttle" and t.spec.type is TaskType.DELAYED and t.status is Status.FAILED \
                and t.spec.reliability is Reliability.AT_LEAST_ONCE:
            counted = [e for e in execs.get(tid, []) if e.kind is FireKind.CALLBACK and e.status_code != 429]
            if len(counted) < t.spec.max_retries + 1:
                fail(f"throttled task {tid} failed with {len(counted)} counted attempts: {execs.get(tid)}")
    # every dead letter names an occurrence that failed for good; a failed delayed task has one, a done one none
    for d in state.dead.values():
        if d.task_id not in tasks:
            fail(f"dead letter of a task that does not exist: {d}")
    for tid, t in tasks.items():
        if t.spec.type is TaskType.DELAYED:
            mine = [d for d in dead.values() if d.task_id == tid]  # (a deleted task's: as they were)
            if t.status is Status.FAILED and len(mine) != 1:
                fail(f"failed delayed task {tid} with {len(mine)} dead letters: {mine}")
            if t.status is Status.DONE and mine:
                fail(f"done delayed task {tid} with dead letters: {mine}")
    # a redrive that applied delivered its fire id again with the attempts continuing, or failed for
    # good again (a new dead letter of the same fire id)
    for did, d in sim.redriven.items():
        if did in state.dead or d.task_id not in tasks:
            continue  # the redrive was lost with its leader before it committed
        if d.task_id in sim.deleted:
            continue  # deleted since, with its dead letters: nothing of it goes on (check_deletes)
        if d.kind is FailureKind.ACK_FAILED:  # the callback again, then the ACK probes, numbered on
            if tasks[d.task_id].status is not Status.DONE and not any(
                    (x.fire_id == d.fire_id and x.kind is FailureKind.ACK_FAILED and x.attempts > d.attempts)
                    or (x.fire_id == d.fire_id and x.kind is not FailureKind.ACK_FAILED)
                    for x in state.dead.values()):
                fail(f"redriven dead letter {did} neither done nor dead again: {tasks[d.task_id]}")
            continue
        again = [x for x in sim.deliveries if x.fire_id == d.fire_id and x.kind is FireKind.CALLBACK
                 and x.attempt > d.attempts]
        if not any(x.ok for x in again) and not any(
                x.fire_id == d.fire_id and x.attempts > d.attempts for x in state.dead.values()):
            fail(f"redriven dead letter {did} neither delivered again nor dead again: {again}")
    for t in tasks.values():
        if (t.rewound is not None or t.redrives) and t.id not in sim.deleted:  # (a deleted one's end: its delete)
            fail(f"task {t.id} still in a redrive at the end: {t}")

    after_unknown = {(e.task_id, e.seq + 1) for e in executions if e.result is ExecutionResult.UNKNOWN}
    """Occurrences that follow one lost with its worker: started when that was settled, maybe after
    their instant (docs/architecture.md#lost-workers)."""
    for tid, t in tasks.items():
        plan = sim.plans[tid]
        spec = t.spec
        ds = by_task.get(tid, [])
        ex = execs.get(tid, [])
        alo = spec.reliability is Reliability.AT_LEAST_ONCE
        if spec.type is TaskType.DELAYED:
            if t.status not in (Status.DONE, Status.FAILED) and tid not in sim.deleted:
                fail(f"delayed task not finished at the end: {t}")
            if t.status is Status.DONE:
                if not any(d.ok and d.kind is FireKind.CALLBACK for d in ds):
                    fail(f"done without a 2xx delivery: {t}")
                if spec.ack_url and not any(d.ok and d.kind is FireKind.ACK for d in ds):
                    fail(f"done without a 2xx ACK: {t}")
            elif alo and t.status is Status.FAILED:  # (a task deleted before it finished: nothing to tell)
                # redrives that applied (their dead letter is gone): the attempts before them do not count
                applied = [d for d in sim.redriven.values() if d.task_id == tid and d.id not in dead]
                base = max((sim.redrive_base.get(d.id, 0) for d in applied), default=0)
                ack_base = max((d.attempts for d in applied if d.kind is FailureKind.ACK_FAILED), default=0)
                cb = [e for e in ex if e.kind is FireKind.CALLBACK and e.attempt > base]
                acks = [e for e in ex if e.kind is FireKind.ACK and e.attempt > ack_base]
                counted = [e for e in cb if not (e.status_code == 429 and (e.fire_id, e.attempt) in sim.retry_after)]
                exhausted = len(counted) == spec.max_retries + 1 and all(
                    e.result is not ExecutionResult.SUCCESS for e in cb
                )
                if not (
                    exhausted
                    or (cb and cb[-1].result is ExecutionResult.NOT_FOUND)
                    or (len(acks) == ACK_TTL and all(e.result is ExecutionResult.ACK_FAILED for e in acks))
                ):
                    fail(f"at_least_once task failed without exhausting its retries: {t} {ex}")
            if spec.ack_url:
                succ = [d for d in ds if d.kind is FireKind.CALLBACK and d.ok]
                for d in ds:
                    if d.kind is FireKind.ACK and succ and d.at < succ[0].at + spec.ack_delay_ms:
                        fail(f"ACK probe before ack_delay_ms: {d}")
                if plan.ack == "ackfail" and t.status is Status.DONE:
                    fail(f"done although every ACK failed: {t}")
        else:
            by_seq: dict[int, list[Any]] = defaultdict(list)
            for e in ex:
                by_seq[e.seq].append(e)
            if alo:
                still = {r.seq for r in t.running}  # allow: started, not ended when the run stopped
                for seq in range(1, t.seq):
                    if seq in still:
                        continue
                    es = by_seq.get(seq, [])
                    if not (
                        any(e.result in (ExecutionResult.SUCCESS, ExecutionResult.NOT_FOUND) for e in es)
                        or len(es) >= spec.max_retries + 1
                    ):
                        fail(f"periodic occurrence {seq} of {tid} neither delivered nor exhausted: {es}")
                allow = spec.overlap is Overlap.ALLOW  # occurrences started before the one that ended it end too
                if tid in sim.deleted:
                    pass  # where it stood at the end: it ended at its delete
                elif plan.behaviour == "notfound":
                    nf = [e.seq for e in ex if e.result is ExecutionResult.NOT_FOUND]
                    if t.status is not Status.INACTIVE or (nf and not allow and (t.seq != nf[0] or len(nf) != 1)):
                        fail(f"periodic 404 must go inactive at its first 404: {t} {nf}")
                    if allow and nf and any(e.seq > t.seq for e in ex):
                        fail(f"allow task fired after going inactive: {t}")
                    if not nf and (t.fail_count < spec.max_fails if allow else t.fail_count != spec.max_fails):
                        fail(f"periodic task inactive without a 404 or max_fails: {t}")  # (lost until max_fails)
                if plan.behaviour == "err" and tid not in sim.deleted:
                    if allow:
                        if t.status is not Status.INACTIVE or t.fail_count < spec.max_fails or t.seq < spec.max_fails:
                            fail(f"allow task inactive before max_fails: {t}")
                    elif t.status is not Status.INACTIVE or t.fail_count != spec.max_fails or t.seq != spec.max_fails:
                        fail(f"periodic max_fails not exactly at threshold: {t}")
            own = t.rewound.seq if t.rewound is not None else t.seq  # (deleted in the middle of a redrive)
            if any(d.kind is FireKind.CALLBACK and int(d.fire_id.rsplit("-", 1)[1]) > own for d in ds):
                fail(f"delivery of an occurrence after the last one: {t}")
            cbs = [d for d in ds if d.kind is FireKind.CALLBACK]
            if spec.max_runs is not None and any(_seq(d) > spec.max_runs for d in cbs):
                fail(f"occurrence after max_runs {spec.max_runs}: {t} {[d.fire_id for d in cbs]}")
            if spec.end_at is not None and any(d.attempt == 1 and d.scheduled >= spec.end_at for d in cbs):
                fail(f"occurrence at or after end_at {spec.end_at}: {t}")
            bfs = sim.backfills.get(tid, [])

            def backfilled(d: Delivery, bfs: list[BackfillAsked] = bfs) -> bool:
                return any(b.covers(d) for b in bfs)

            firsts = {_seq(d): d for d in cbs if d.attempt == 1}
            back = 0
            ordered = sorted(q for q in firsts if not triggered(sim, firsts[q]))  # (a trigger's: at its own time)
            for sa, sb in itertools.pairwise(ordered):  # no instant fired twice, in order, but for backfills
                a, b = firsts[sa].scheduled, firsts[sb].scheduled
                if b <= a:
                    if not backfilled(firsts[sb]):
                        fail(f"occurrences {sa} and {sb} of {tid} at instants {a} and {b}")
                    back += 1
            if back > len(bfs):  # each backfill goes back once, then oldest first
                fail(f"{tid}: instants went back {back} times with {len(bfs)} backfills: {sorted(firsts.items())}")
            fired_at: dict[int, set[int]] = defaultdict(set)
            for d in cbs:  # (a triggered occurrence is at the trigger's time, not at an instant, also when an
                if not triggered(sim, d):  # allow task is triggered in the very ms one of its instants goes)
                    fired_at[d.scheduled].add(_seq(d))
            for inst, seqs in fired_at.items():  # an instant fires once, and once more per backfill of it
                if len(seqs) > 1 + sum(b.start <= inst < b.end for b in bfs):
                    fail(f"{tid}: instant {inst} fired as occurrences {sorted(seqs)} ({len(bfs)} backfills)")
            resumed = {q for q in firsts if q - 1 not in firsts or backfilled(firsts[q - 1])
                       or any(firsts[q - 1].at <= b.at <= firsts[q].at for b in bfs)} if bfs else set()
            """Occurrences that may be the first after a backfill: due when it ended, maybe after their instant
            (also after a backfill accepted while the one before ran that then had no instant left to fire:
            an update moved the grid off its range, and the schedule resumes at once, docs/architecture.md#backfill)."""
            if (bfs and plan.behaviour == "ok" and alo and tid not in sim.specs and spec.interval_ms
                    and spec.max_runs is None and spec.end_at is None and t.status is Status.PENDING):
                iv = spec.interval_ms
                for bf in bfs:  # every instant of an accepted range fired, unless its occurrence was lost whole
                    if t.backfill is not None and bf is bfs[-1]:  # still under way when the run ended
                        if not (sim.loader_behind or sim.loader_delay):  # only a slow loader makes fires that late
                            fail(f"{tid}: backfill [{bf.start}, {bf.end}) still under way at the end: {t.backfill}")
                        continue
                    first = t.created_ms - (t.created_ms - bf.start) // iv * iv
                    want = list(range(first, bf.end, iv))
                    got = {d.scheduled for d in cbs if _seq(d) >= bf.seq_before and d.at >= bf.at}
                    missing = [i for i in want if i not in got]
                    delivered_seqs = {_seq(d) for d in cbs}
                    lost = [q for q in range(bf.seq_before, t.seq) if q not in delivered_seqs]
                    if len(missing) > len(lost):
                        fail(f"{tid}: backfill [{bf.start}, {bf.end}) never fired {missing} "
                             f"({len(lost)} occurrences lost whole)")
            if (alo and spec.interval_ms and tid not in sim.specs and not bfs and spec.catchup is not CatchUp.ALL):
                iv = spec.interval_ms
                ended: dict[int, int] = defaultdict(int)
                for e in ex:
                    if e.kind is FireKind.CALLBACK:
                        ended[e.seq] = max(ended[e.seq], e.finished_ms)

                def after(x: int, iv: int = iv, anchor: int = t.created_ms) -> int:
                    return anchor + ((x - anchor) // iv + 1) * iv

                allow_skips = [e for e in executions if e.task_id == tid and e.kind is FireKind.EVENT]
                for k in sorted(firsts):
                    nxt = firsts.get(k + 1)
                    if nxt is None or k not in ended or f"{tid}-{k}" in sim.redriven_fires or any(
                            firsts[k].at <= r <= nxt.at for r in sim.redrive_at.get(tid, ())):
                        continue  # a redriven occurrence ran again later, or ran between: the next one waited
                    if paused_between(sim, tid, firsts[k].at, nxt.at):
                        continue  # the next one waited for a resume (check_pauses)
                    if triggered(sim, nxt):
                        continue  # a trigger moved the next one to its own time (check_triggers)
                    began, end = firsts[k].at, ended[k]  # the first attempt reached the receiver; the result applied
                    hi, lo = after(began), after(began - 2 * LATENESS_BOUND)
                    if hi >= end:
                        continue  # nothing came due while it ran
                    if spec.overlap is Overlap.ALLOW:  # the next instant fired at its time, beside this one
                        want = after(firsts[k].scheduled)
                        if spec.catchup is CatchUp.NONE or began >= want or any(
                                e.result is ExecutionResult.SKIPPED and f"[{want}, " in (e.response_head or "")
                                and "(overlap allow)" in (e.response_head or "") for e in allow_skips):
                            continue  # missed ones follow catch-up; with MAX_RUNNING running an instant is skipped
                        sim.overlaps_checked[spec.overlap] += 1
                        off = jitter(tid, k + 1, spec.jitter_ms)
                        if nxt.scheduled != want:
                            fail(f"{tid} allow: occurrence {k} at {firsts[k].scheduled} ran {began}..{end}; next at "
                                 f"{nxt.scheduled}, not {want}")
                        if (want + off + LATENESS_BOUND < end and nxt.at >= end
                                and _healthy(sim, want - 2 * DISPATCH_SLACK, nxt.at)):
                            fail(f"{tid} allow: occurrence {k} ran {began}..{end}; the next, due {want + off}, "
                                 f"waited for it until {nxt.at}")
                    elif spec.overlap is Overlap.BUFFER_ONE:
                        sim.overlaps_checked[spec.overlap] += 1
                        want_due = max(end, nxt.scheduled + jitter(tid, k + 1, spec.jitter_ms))
                        if not (lo <= nxt.scheduled <= hi and nxt.due == want_due):
                            fail(f"{tid} buffer_one: occurrence {k} ran {began}..{end}; next at {nxt.scheduled} due "
                                 f"{nxt.due}, not the first instant after its start ({lo}..{hi}) due {want_due}")
                    else:
                        sim.overlaps_checked[spec.overlap] += 1
                        if nxt.scheduled < end:
                            fail(f"{tid} overlap skip: occurrence {k} ran {began}..{end}; next at {nxt.scheduled}")
            if spec.catchup is CatchUp.NONE and spec.interval_ms and tid not in sim.specs:
                moved = {e.seq for e in executions if e.task_id == tid and e.result is ExecutionResult.SKIPPED
                         and "catchup none" in (e.response_head or "")}
                for d in cbs:  # a missed occurrence (its next instant due when it would start) never fires,
                    # unless it is the one none skipped to, late again (a lagging scheduler must fire), or backfilled
                    if d.attempt == 1 and d.at >= d.scheduled + spec.interval_ms + LATENESS_BOUND and _seq(d) not in moved \
                            and not backfilled(d) and spec.overlap is not Overlap.BUFFER_ONE:
                        fail(f"catchup none fired a missed occurrence: {d} (interval {spec.interval_ms})")
            if (spec.catchup is CatchUp.ALL and spec.interval_ms and tid not in sim.specs
                    and spec.catchup_window_ms >= END and not bfs and tid not in sim.task_pauses):
                got = sorted({(_seq(d), d.scheduled) for d in cbs  # occurrence n is instant n: none skipped,
                              if not triggered(sim, d)})  # but for those a trigger added (check_triggers)
                added = {tr.seq for tr in sim.triggers if tr.task_id == tid}
                for (sa, a), (sb, b) in itertools.pairwise(got):  # (one may never arrive: lost, no retries left)
                    if b - a != (sb - sa - sum(sa < q < sb for q in added)) * spec.interval_ms \
                            and not dropped_by_trigger(sim, tid, a, b):
                        fail(f"catchup all skipped instants between {a} and {b}: {tid}")
            if tid in sim.specs:  # updated in place: each occurrence on the grid and jitter of a definition it had
                history = [sim.created_spec[tid], *sim.specs[tid]]
                for d in cbs:
                    if d.attempt != 1:
                        continue
                    if not any((d.scheduled - t.created_ms) % s.interval_ms == 0 for s in history if s.interval_ms):
                        fail(f"updated task {tid}: occurrence {d.fire_id} at {d.scheduled} on no grid it had")
                    if backfilled(d):  # fired now, not at its instant
                        continue
                    # caught up, or right after a fire lost with its worker: due when it could start
                    late_ok = (any(s.catchup is CatchUp.ALL or s.overlap is Overlap.BUFFER_ONE for s in history)
                               or (tid, _seq(d)) in after_unknown or _seq(d) in resumed)
                    if all(d.due - d.scheduled != jitter(tid, _seq(d), s.jitter_ms)
                           and not (late_ok and d.due > d.scheduled + jitter(tid, _seq(d), s.jitter_ms))
                           for s in history):
                        fail(f"updated task {tid}: occurrence {d.fire_id} due {d.due} has no jitter it had")
                continue
            for d in cbs:  # the due instant is the scheduled one plus the task's own offset, whoever led
                off = jitter(tid, _seq(d), spec.jitter_ms)  # (catchup all: or later, when it could start)
                if d.attempt == 1 and d.due - d.scheduled != off and not backfilled(d) and not triggered(sim, d) and not (
                        (spec.catchup is CatchUp.ALL or (tid, _seq(d)) in after_unknown or _seq(d) in resumed
                         or spec.overlap is Overlap.BUFFER_ONE)
                        and d.due > d.scheduled + off):
                    fail(f"occurrence {d.fire_id} due {d.due} is not its instant {d.scheduled} + its offset")
            if spec.jitter_ms and spec.interval_ms:  # the offset is the task's own, whoever led
                for d in cbs:
                    if d.attempt == 1 and (d.scheduled - t.created_ms) % spec.interval_ms and not triggered(sim, d):
                        fail(f"jittered occurrence {d.fire_id} due {d.due} is not its grid instant + its offset")
            if plan.behaviour == "ok" and spec.interval_ms:
                iv, anchor = spec.interval_ms, t.created_ms
                on_grid = sorted(d.scheduled for d in ds if d.attempt == 1 and d.kind is FireKind.CALLBACK
                                 and not triggered(sim, d))  # (a trigger's occurrence is at its own time)
                for due in on_grid:
                    if (due - anchor) % iv:
                        fail(f"periodic occurrence off its fixed-rate grid: task {tid} due {due}")
                for a, b in itertools.pairwise(on_grid if not bfs else []):  # (a backfill holds the schedule up)
                    if b - a != iv and _healthy(sim, a - RECOVERY_WINDOW, b) and not paused_between(sim, tid, a, b) \
                            and not dropped_by_trigger(sim, tid, a, b):
                        fail(f"periodic instant skipped between {a} and {b} on a healthy cluster (interval {iv})")


@dataclass(frozen=True)
class PausedSpan:
    """A task's pause and the resume that ended it, as applied (docs/architecture.md#task-rules)."""

    paused_index: int
    paused_at: int
    """When the pause committed."""
    resumed_index: int
    resumed_now: int
    """The resume's ``now_ms`` (its commit time is later): what came due before it was missed."""
    from_schedule: bool
    mid_occurrence: bool
    """Paused with an attempt of its occurrence made (retrying, or its ACK awaited)."""
    in_redrive: bool
    """Resumed while a redrive of the task's ran: its own occurrence, put aside, is taken up after the
    redrive as the redrive left it (it waited for the redrive, not for the pause)."""


def paused_spans(sim: Sim, tid: str) -> list[PausedSpan]:
    """The pauses of task ``tid`` that applied, each with the resume that ended it (none: open to the end)."""
    spans: list[PausedSpan] = []
    start: tuple[int, int] | None = None
    for idx, at, paused, from_schedule, now_ms in sim.task_pauses.get(tid, ()):
        if paused and start is None:
            start = (idx, at)
        elif not paused and start is not None:
            spans.append(PausedSpan(start[0], start[1], idx, now_ms, from_schedule, (tid, start[0]) in sim.paused_firing,
                                    (tid, idx) in sim.resumed_in_redrive))
            start = None
    if start is not None:
        spans.append(PausedSpan(start[0], start[1], 1 << 62, 1 << 62, False, (tid, start[0]) in sim.paused_firing,
                                False))
    return spans


def held_by_pause(sim: Sim, d: Delivery) -> bool:
    """Whether ``d`` was due before a resume of its task and sent after it (held by the pause)."""
    di = sim.dispatch_index.get((d.fire_id, d.kind, d.attempt), 0)
    return any(d.due < sp.resumed_now and di > sp.resumed_index for sp in paused_spans(sim, d.task_id))


def paused_between(sim: Sim, tid: str, a: int, b: int) -> bool:
    """Whether task ``tid`` was paused at some time in ``[a, b]``."""
    return any(s.paused_at <= b and s.resumed_now >= a for s in paused_spans(sim, tid))


def check_pauses(sim: Sim, tasks: dict[str, Any], fail: Callable[[str], None]) -> None:
    """Paused tasks (docs/architecture.md#task-rules): no attempt of a paused task is sent from a
    ``Dispatched`` entry after its pause and before its resume (one planned ahead and committed before
    the pause may still go); after a resume from now, no occurrence starts at an instant that came due
    while it was paused; a periodic task that answers 2xx fires again after its last resume."""
    by_task: dict[str, list[Delivery]] = defaultdict(list)
    for d in sim.deliveries:
        by_task[d.task_id].append(d)
    for tid in sim.task_pauses:
        t = tasks.get(tid)
        if t is None:
            continue
        spans = paused_spans(sim, tid)
        periodic = t.spec.type is TaskType.PERIODIC
        for d in by_task.get(tid, ()):
            di = sim.dispatch_index.get((d.fire_id, d.kind, d.attempt))
            if di is None:
                fail(f"{tid}: delivery without a Dispatched entry on record: {d}")
            for sp in spans:
                if sp.paused_index < di < sp.resumed_index:
                    fail(f"{tid}: attempt {d.attempt} of {d.fire_id} sent from entry {di}, while paused "
                         f"(entries {sp.paused_index}..{sp.resumed_index}): {d}")
                if (periodic and not sp.from_schedule and not sp.in_redrive and d.kind is FireKind.CALLBACK
                        and d.attempt == 1
                        and di > sp.resumed_index and sp.paused_at <= d.scheduled < sp.resumed_now):
                    fail(f"{tid}: instant {d.scheduled} came due while paused ({sp.paused_at}..{sp.resumed_now}) "
                         f"and fired after a resume from now: {d}")
        last = spans[-1] if spans else None
        if (periodic and last is not None and last.resumed_index < (1 << 62) and sim.plans[tid].behaviour == "ok"
                and t.status is Status.PENDING
                and last.resumed_now + t.spec.interval_ms + t.spec.jitter_ms + RECOVERY_WINDOW < sim.t0 + sim.end_ms
                and not any((sim.dispatch_index.get((d.fire_id, d.kind, d.attempt)) or 0) > last.resumed_index
                            for d in by_task.get(tid, ()))):
            fail(f"{tid}: periodic task never fired after its resume at {last.resumed_now}: {t}")


def last_trigger(sim: Sim, tid: str, seq: int) -> TriggerApplied | None:
    """The last trigger that moved occurrence ``seq`` of task ``tid`` (one before it was moved again)."""
    found = None
    for tr in sim.triggers:
        if tr.task_id == tid and tr.seq == seq:
            found = tr
    return found


def triggered(sim: Sim, d: Delivery) -> bool:
    """Whether ``d`` is a request of an occurrence a trigger moved to its own time (due and scheduled
    at the trigger's ``now_ms``, off the schedule's grid: check_triggers)."""
    tr = last_trigger(sim, d.task_id, _seq(d)) if d.kind is FireKind.CALLBACK else None
    return tr is not None and d.scheduled == tr.now_ms


def dropped_by_trigger(sim: Sim, tid: str, a: int, b: int) -> bool:
    """Whether a trigger of task ``tid`` took the place of instants in ``(a, b)`` that had come due and
    not fired yet (the occurrence it moved to now was theirs: docs/architecture.md#task-rules)."""
    return any(tr.task_id == tid and tr.before_sched <= tr.now_ms and tr.before_sched < b and tr.now_ms > a
               for tr in sim.triggers)


def check_triggers(sim: Sim, tasks: dict[str, Any], executions: list[Any], fail: Callable[[str], None]) -> None:
    """Triggers (docs/architecture.md#task-rules): a trigger that applied makes the task's upcoming
    occurrence due at its ``now_ms`` (its instant too); a request of it reaches the receiver within
    ``LATENESS_BOUND`` of the trigger's commit while the cluster is healthy (unless the machine skipped
    it by its rules: ``MAX_RUNNING`` of an allow task's ran, or its next instant had come due before it
    started); a periodic task's next occurrence (as its first send carried it) is never before the
    schedule's first regular instant after the trigger, nor at an instant another occurrence was sent for,
    and is that instant (or was skipped from it by the catch-up rules) when the triggered one ended (allow:
    was sent) before it -- the trigger adds one occurrence and no instant fires twice."""
    t0, end = sim.t0, sim.t0 + sim.end_ms
    by_fire: dict[str, list[Delivery]] = defaultdict(list)
    for d in sorted(sim.deliveries, key=lambda d: d.at):
        if d.kind is FireKind.CALLBACK:
            by_fire[d.fire_id].append(d)
    skips: dict[str, list[Any]] = defaultdict(list)
    rows: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for e in executions:
        if e.result is ExecutionResult.SKIPPED:
            skips[e.task_id].append(e)
        elif e.kind is FireKind.CALLBACK:
            rows[(e.task_id, e.seq)].append(e)
    first_sent: dict[str, int] = {}
    for snt in sim.sent:
        first_sent.setdefault(snt.fire_id, snt.at)
    last = {(tr.task_id, tr.seq): tr for tr in sim.triggers}  # one moved again: by its last trigger
    for (tid, seq), tr in last.items():
        fid = f"{tid}-{seq}"
        ds = by_fire.get(fid, [])
        d1 = next((d for d in ds if d.attempt == 1), None)
        skip = next((e for e in skips[tid] if (e.response_head or "").startswith(
            f"skipped the occurrences scheduled in [{tr.now_ms}, ")), None)
        if skip is not None:
            if "(overlap allow)" in (skip.response_head or "") or (
                    tr.next_ms is not None and tr.next_ms <= skip.finished_ms):
                continue  # MAX_RUNNING ran, or it was missed (catch-up): skipped by the rules
            fail(f"{tid}: the occurrence {seq} triggered at {tr.now_ms - t0} (entry {tr.index}) was skipped: {skip}")
        if d1 is not None and (d1.due != tr.now_ms or d1.scheduled != tr.now_ms):
            fail(f"{tid}: triggered at {tr.now_ms - t0} (entry {tr.index}), occurrence {seq} went out due "
                 f"{d1.due - t0} for instant {d1.scheduled - t0}, not at the trigger's time: {d1}")
        deadline = tr.at + LATENESS_BOUND
        first = ds[0].at if ds else None
        redriven = any(tr.now_ms - RECOVERY_WINDOW <= r <= deadline for r in sim.redrive_at.get(tid, ()))
        if (not tr.full and not redriven and deadline < end and (first is None or first > deadline)
                and _healthy(sim, tr.now_ms - 2 * DISPATCH_SLACK, end if first is None else first)):
            # (healthy until it arrived, as the lateness check: a slow loader counts when it falls behind)
            fail(f"{tid}: trigger committed at {tr.at - t0} (entry {tr.index}) on a healthy cluster; occurrence {seq} "
                 f"reached the receiver at {None if first is None else first - t0}, not by {deadline - t0}")
        if not tr.periodic or tr.next_ms is None or (tid, seq + 1) in last:
            continue  # (the next one triggered too: its trigger's check)
        nfid = f"{tid}-{seq + 1}"
        if nfid not in sim.sent_instant or any(tr.now_ms <= r <= first_sent[nfid] for r in sim.redrive_at.get(tid, ())):
            continue  # not sent (yet), or a redrive ran between: the next one waited for it
        inst, sent_by = sim.sent_instant[nfid]  # the next occurrence's instant, as its first send carried it
        if inst < tr.next_ms:
            fail(f"{tid}: occurrence {seq} triggered at {tr.now_ms - t0} (entry {tr.index}); the next, {seq + 1}, is "
                 f"at {inst - t0}, before the schedule's next regular instant {tr.next_ms - t0}")
        twice = sorted(int(f.rsplit("-", 1)[1]) for f, (at, by) in sim.sent_instant.items()  # (sent before it)
                       if at == inst and by < sent_by and f.rsplit("-", 1)[0] == tid)
        if twice and not sim.backfills.get(tid):
            fail(f"{tid}: occurrence {seq} triggered at {tr.now_ms - t0} (entry {tr.index}); the schedule went on at "
                 f"{inst - t0} (occurrence {seq + 1}), an instant occurrence {twice} was sent for already: a "
                 f"trigger adds one occurrence, no instant fires twice")
        if tasks[tid].spec.overlap is Overlap.ALLOW:  # the next one is taken when the triggered one is sent
            in_time = fid in first_sent and first_sent[fid] < tr.next_ms
        else:
            ended = rows.get((tid, seq), [])
            in_time = bool(ended) and max(e.finished_ms for e in ended) < tr.next_ms
        missed = any(e.seq == seq + 1 and (e.response_head or "").startswith(
            f"skipped the occurrences scheduled in [{tr.next_ms}, ") for e in skips[tid])  # (catch-up rules)
        if in_time and inst != tr.next_ms and not missed:
            fail(f"{tid}: occurrence {seq} triggered at {tr.now_ms - t0} (entry {tr.index}) was over before the "
                 f"schedule's next regular instant {tr.next_ms - t0}, yet the next, {seq + 1}, is at "
                 f"{inst - t0}: a trigger adds one occurrence, the schedule goes on at its next instant")


def check_deletes(sim: Sim, fail: Callable[[str], None]) -> None:
    """Deletes (docs/architecture.md#task-rules): nothing of a deleted task is sent from a ``Dispatched``
    entry applied after its delete (one committed before may still go: a fire planned ahead is in flight
    from its commit); right after a replica applies the delete and on every replica at the end, the task,
    its fire records, its idempotency key, its history and its dead letters are gone; a create with the same
    idempotency key after the delete makes a new task."""
    t0 = sim.t0
    for d in sim.deliveries:
        dl = sim.deleted.get(d.task_id)
        if dl is None:
            continue
        di = sim.dispatch_index.get((d.fire_id, d.kind, d.attempt))
        if di is None:
            fail(f"deleted task {d.task_id}: delivery without a Dispatched entry on record: {d}")
        elif di > dl.index:
            fail(f"deleted task {d.task_id}: attempt {d.attempt} of {d.fire_id} sent from the Dispatched entry {di}, "
                 f"applied after its delete (entry {dl.index}, committed at {dl.at - t0}): {d}")
    for msg in sim.delete_residue + sim.unrecorded_drops:
        fail(msg)
    for n in sim.nodes:
        for tid in sim.deleted:
            for msg in sim.residue(sim.replicas[n], tid, f"{n} at the end"):
                fail(msg)
    state = sim.replicas[sim.nodes[0]]
    for idem, (old, plan, asked) in sim.recreates.items():
        if plan.task_id is None:
            if asked < t0 + sim.end_ms - 20_000:
                fail(f"a create with the idempotency key {idem} of deleted task {old}, asked at {asked - t0}, "
                     f"never made a task")
            continue
        new = state.tasks.get(plan.task_id) or sim.expired.get(plan.task_id)
        if plan.task_id == old or new is None or new.spec.idempotency_key != idem:
            fail(f"a create with the idempotency key {idem} of deleted task {old} after its delete found "
                 f"{plan.task_id} ({new}), not a new task")


def moved_by(sim: Sim, d: Delivery) -> UpdateApplied | None:
    """The update that last moved ``d``'s delayed occurrence before its first attempt (applied before the
    ``Dispatched`` entry that sent ``d``; None: none did): ``d`` goes at the time it set (check_delayed_updates)."""
    if d.kind is not FireKind.CALLBACK or d.attempt != 1:
        return None
    di = sim.dispatch_index.get((d.fire_id, d.kind, d.attempt), 0)
    found = None
    for u in sim.delayed_updates.get(d.task_id, ()):
        if u.moves and u.index < di:
            found = u
    return found


def check_delayed_updates(sim: Sim, tasks: dict[str, Any], executions: list[Any], fail: Callable[[str], None]) -> None:
    """Updates of delayed tasks (docs/architecture.md#update): an update that applied puts its definition in
    place, one more version for a change and the same for a change of nothing, and one ``updated`` history
    row per change; a schedule change before the first attempt was sent moves the task to its new time
    (``run_at``, or created + ``interval_ms``): every first attempt sent from a ``Dispatched`` entry applied
    after it is due then, never at the old time, and one is sent by ``LATENESS_BOUND`` after that time (or
    after the update's commit, for a time already past) while the cluster is healthy (a send's own lateness:
    ``check``); an update once the first attempt was sent starts no second occurrence (fire id
    ``{task}-1``), the attempts go on from where they were, and a retry waiting keeps its time. (An
    at_most_once fire is delivered once at most, an at_least_once task ends with a 2xx or its retries
    exhausted: ``check``, for these tasks as for the others.)"""
    t0, end = sim.t0, sim.t0 + sim.end_ms
    by_task: dict[str, list[Delivery]] = defaultdict(list)
    for d in sorted(sim.deliveries, key=lambda d: d.at):
        if d.kind is FireKind.CALLBACK:
            by_task[d.task_id].append(d)
    rows: dict[str, int] = defaultdict(int)
    for e in executions:
        if e.kind is FireKind.EVENT and e.result is ExecutionResult.UPDATED:
            rows[e.task_id] += 1

    def di(d: Delivery) -> int:
        got = sim.dispatch_index.get((d.fire_id, d.kind, d.attempt))
        if got is None:
            fail(f"{d.task_id}: delivery without a Dispatched entry on record: {d}")
        assert got is not None
        return got

    for tid, ups in sim.delayed_updates.items():
        if tid not in tasks or tid in sim.deleted:
            continue  # (a create lost in failover never fires; a deleted task's rows went with it)
        ds = by_task.get(tid, [])
        changes = 0
        for u in ups:
            changed = u.spec != u.before.spec
            changes += changed
            if u.after.spec != u.spec or u.after.version != u.before.version + changed:
                fail(f"{tid}: update at entry {u.index} ({'a change' if changed else 'a change of nothing'}) left "
                     f"version {u.after.version} after {u.before.version}, definition in place "
                     f"{u.after.spec == u.spec}")
        if rows[tid] != changes:
            fail(f"{tid}: {rows[tid]} updated history rows for {changes} changes of its definition")
        for d in ds:
            if d.fire_id != f"{tid}-1":
                fail(f"updated delayed task {tid} sent another occurrence than its one: {d}")
        moving = [u for u in ups if u.moves]
        for u, nxt in zip(moving, [*moving[1:], None]):
            until = nxt.index if nxt is not None else 1 << 62
            want = u.new_due()
            sent = [d for d in ds if u.index < di(d) < until]
            for d in sent:
                if d.attempt == 1 and (d.due != want or d.at < want):
                    fail(f"{tid}: updated at {u.at - t0} (entry {u.index}) before its first attempt, to be due at "
                         f"{want - t0} (was {u.before.due_ms and u.before.due_ms - t0}); its first attempt, sent from "
                         f"entry {di(d)}, went out due {d.due - t0} and reached the receiver at {d.at - t0}: {d}")
            start = max(want, u.at)
            upto = nxt.at if nxt is not None else end
            if not sent and start + LATENESS_BOUND < min(upto, end) and _healthy(sim, start - 2 * DISPATCH_SLACK, upto):
                fail(f"{tid}: updated at {u.at - t0} (entry {u.index}) to be due at {want - t0} on a healthy cluster; "
                     f"nothing sent by {upto - t0}")
        for u in ups:
            if u.before_first_attempt:
                continue
            b = u.before
            later = [d for d in ds if di(d) > u.index]
            for d in later:
                if d.attempt <= b.attempt:
                    fail(f"{tid}: updated at {u.at - t0} (entry {u.index}) after attempt {b.attempt} of its "
                         f"occurrence; attempt {d.attempt} sent from entry {di(d)} after it: {d}")
            if b.status is Status.FIRING and b.inflight is None and b.due_ms is not None:
                nxt_try = next((d for d in later if d.attempt == b.attempt + 1), None)
                if nxt_try is not None and nxt_try.due != b.due_ms:
                    fail(f"{tid}: updated at {u.at - t0} (entry {u.index}) while retry {b.attempt + 1} waited for "
                         f"{b.due_ms - t0}; it went out due {nxt_try.due - t0}: {nxt_try}")


def check_lost_workers(sim: Sim, fail: Callable[[str], None]) -> None:
    """docs/architecture.md#lost-workers: a fire on a worker that crashed and stayed down, with no
    result sent, is given up by the leader that sent it within ``WORKER_LOST`` ms of the worker's
    last heartbeat (at most one link latency after the crash) -- before its deadline if that is later
    (unless its task was deleted by then: the delete removed its fire record)."""
    for s in sim.sent:
        if (s.fire_id, s.attempt) in sim.answered:
            continue
        for down, back in sim.downs.get(s.worker, []):
            if down < s.at:
                continue
            by = down + WORKER_LOST + NET_LAT[1] + 1
            gone = sim.deleted.get(s.fire_id.rsplit("-", 1)[0])
            if gone is not None and gone.at <= by:
                break  # its task was deleted before, with its fire record: nothing left to give up
            if back > by and sim.term_end.get(s.term, 1 << 62) > by and s.deadline > by and by < sim.t0 + sim.end_ms:
                sim.lost_worker_fires += 1
                got = sim.given_up.get((s.fire_id, s.attempt))
                if got is None or got > by:
                    fail(f"fire {s.fire_id} attempt {s.attempt} on worker {s.worker}, down since "
                         f"{down - sim.t0}, given up at {None if got is None else got - sim.t0}, not by {by - sim.t0}")
            break


def check_expiry(sim: Sim, state: MemoryState, fail: Callable[[str], None]) -> None:
    """The Cleaner (docs/architecture.md#task-rules, retention): a task it removed was terminal and
    unchanged since, and had no dead letter; every task terminal for the retention (plus a few of
    its rounds) without a dead letter is gone by the end."""
    for t in sim.expired.values():
        if t is None or t.status not in TERMINAL_STATUSES or t.running:
            fail(f"expired a task that was not terminal: {t}")
    keep = {d.task_id for d in state.dead.values()}
    limit = sim.t0 + sim.end_ms - RETENTION_MINUTES * 60_000 - 5 * EXPIRY_INTERVAL_MS
    for t in state.tasks.values():
        if t.status in TERMINAL_STATUSES and t.updated_ms < limit and t.id not in keep:
            fail(f"task {t.id} {t.status} since {t.updated_ms - sim.t0} not expired by the end")


def check_allow(sim: Sim, tid: str, ds: list[Delivery], fail: Callable[[str], None]) -> None:
    """An ``overlap: allow`` task (docs/architecture.md#overlap): the requests of one occurrence (fire
    id) never overlap; occurrences do, at most ``MAX_RUNNING`` at once while the cluster is healthy
    (a request a lost worker still runs after its fire was given up may add one)."""
    by_fire: dict[str, list[Delivery]] = defaultdict(list)
    for d in ds:
        by_fire[d.fire_id].append(d)
    for fid, fds in by_fire.items():
        for a, b in itertools.pairwise(fds):
            if a.end < 0 or b.at < a.end:
                fail(f"overlapping requests of occurrence {fid}: {a} / {b}")
    for d in ds:
        running = {x.fire_id for x in ds if x.at <= d.at < (x.end if x.end >= 0 else x.at + 5_000)}
        if len(running) > 1 and d.kind is FireKind.CALLBACK:
            sim.allow_concurrent += 1
        if len(running) > MAX_RUNNING and _healthy(sim, d.at - 10_000, d.at):
            fail(f"{len(running)} occurrences of allow task {tid} at once at {d.at}: {sorted(running)}")


def check_flows(sim: Sim, fail: Callable[[str], None]) -> None:
    """docs/architecture.md#flow-control: nothing planned for a flow while it is paused or held by a
    Retry-After; within a term, no window of a rate-limited flow has more fires meant to go than
    ``burst + rate * window``; no more requests of a concurrency-limited flow at the receiver at once
    than its limit. (A leader learns of a committed setting a mailbox hop later, or from the store if it
    committed by the start of its term; a new leader starts
    with an empty bucket and counts only the fires it planned itself.)"""
    hop = MAILBOX_LAT[1]
    plans = sorted(sim.plan_of.items(), key=lambda kv: kv[1].at)
    for key, pl in plans:
        began = sim.term_start.get(pl.term, -1)  # what committed by then, the leader read from the store
        events = [(t, p) for f, t, p in sim.pauses if f == pl.flow and (t + hop < pl.at or t <= began)]
        hearing = any(f == pl.flow and t + hop == pl.at and t > began for f, t, _ in sim.pauses)
        """The leader hears of a pause or resume in this very ms: before or after this plan."""
        if events and events[-1][1] and not hearing:
            fail(f"fire {key} planned at {pl.at - sim.t0} while its flow {pl.flow} was paused "
                 f"(since {events[-1][0] - sim.t0})")
        for term, flow, frm, until in sim.throttles:
            if term == pl.term and flow == pl.flow and frm < pl.at and pl.go < until:
                fail(f"fire {key} of flow {flow} meant to go at {pl.go - sim.t0}, held by a Retry-After "
                     f"until {until - sim.t0}")
    by_flow: dict[tuple[int, str], list[float]] = defaultdict(list)
    for _, pl in plans:
        fs = sim.flow_limits.get(pl.flow)
        if fs is not None and fs.rate_per_s is not None and pl.at > sim.flow_set_at.get(pl.flow, 1 << 62) + hop:
            by_flow[(pl.term, pl.flow)].append(pl.go)
    for (term, flow), gos in by_flow.items():
        fs = sim.flow_limits[flow]
        assert fs.rate_per_s is not None
        burst = fs.burst or 1
        gos.sort()
        for i in range(len(gos)):
            for j in range(i + burst, len(gos)):
                if j - i + 1 > burst + fs.rate_per_s * (gos[j] - gos[i]) / 1000 + 1e-9:
                    fail(f"flow {flow} term {term}: {j - i + 1} fires meant to go within "
                         f"{gos[j] - gos[i]} ms at {fs.rate_per_s}/s, burst {burst}")
    open_: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for d in sim.deliveries:
        pl = sim.plan_of.get((d.fire_id, d.attempt, d.kind))
        fs = sim.flow_limits.get(pl.flow) if pl is not None else None
        if pl is None or fs is None or fs.concurrency is None or d.end < 0:
            continue
        if pl.at > sim.flow_set_at.get(pl.flow, 1 << 62) + hop:
            open_[(pl.term, pl.flow)] += [(d.at, 1), (d.end, -1)]
    for (term, flow), evs in open_.items():
        n = 0
        limit = sim.flow_limits[flow].concurrency
        assert limit is not None
        for _, step in sorted(evs, key=lambda e: (e[0], e[1])):  # an end before a start at the same ms
            n += step
            if n > limit:
                fail(f"flow {flow} term {term}: {n} requests at the receiver at once, limit {limit}")


def run_seed(seed: int, nodes: int = 3, trace: Callable[[str], None] | None = None, **kw: Any) -> Sim:
    sim = Sim(seed, nodes, trace, **kw)
    sim.run()
    check(sim)
    return sim


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/sim --scheduler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--trace", action="store_true")
    p.add_argument("--mutants", action="store_true",
                   help="apply each deliberate product bug of tests/sim/mutants.py in turn and run seeds "
                        "(--seeds per mutant, default 2,000) until one fails")
    p.add_argument("--mutant", default=None, help="run the seeds with this one mutant applied (replay)")
    args = p.parse_args(argv)
    molens_log = logging.getLogger("molens")
    level = molens_log.level
    molens_log.setLevel(logging.DEBUG if args.trace else logging.CRITICAL)
    try:  # given back: a caller in the same process (a test) keeps its logging as it was
        return _main(args, argv)
    finally:
        molens_log.setLevel(level)


def _main(args: argparse.Namespace, argv: list[str] | None) -> int:
    from tests.sim import mutants

    if args.mutants:
        budget = args.seeds if "--seeds" in (argv or sys.argv) else 2_000
        return mutants.main(range(args.start, args.start + budget))
    if args.mutant is not None:
        with mutants.by_name(args.mutant).applied():
            return _run(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))
    failures = 0
    t0 = time.monotonic()
    fires = settled = power_losses = discarded = paused = mid = drops = 0
    trig = refused = periodic_trig = 0
    deletes: dict[str, int] = defaultdict(int)
    recreated = 0
    upd = upd_moved = upd_started = upd_same = upd_refused = 0
    for s in seeds:
        sim = Sim(s, 3, print if args.trace else None)
        try:
            try:
                sim.run()
            finally:
                fires += len(sim.deliveries)  # a failing seed's too: its requests were made all the same
                settled += sim.settled_on_lost
                power_losses += len(sim.power_losses)
                discarded += sim.stores_discarded
                spans = [sp for tid in sim.task_pauses for sp in paused_spans(sim, tid)]
                paused += len(spans)
                mid += sum(sp.mid_occurrence for sp in spans)
                drops += sim.recorded_drops
                trig += len(sim.triggers)
                periodic_trig += sum(tr.periodic for tr in sim.triggers)
                refused += sim.triggers_refused
                for dl in sim.deleted.values():
                    t = dl.task
                    deletes["firing" if t.inflight is not None or any(r.inflight for r in t.running)
                            else t.status.value] += 1
                recreated += sum(p.task_id is not None for _, p, _ in sim.recreates.values())
                ups = [u for us in sim.delayed_updates.values() for u in us]
                upd += len(ups)
                upd_moved += sum(u.moves for u in ups)
                upd_started += sum(not u.before_first_attempt for u in ups)
                upd_same += sum(u.spec == u.before.spec for u in ups)
                upd_refused += sim.delayed_updates_refused
            check(sim)
        except Exception as e:  # a violation, or the product raising where it must not (a crash)
            failures += 1
            mutant = f" --mutant {args.mutant}" if args.mutant else ""
            what = e if isinstance(e, Violation) else f"seed={s}: {type(e).__name__}: {e}"
            print(f"FAIL {what}\n  replay: scripts/sim --scheduler{mutant} --seed {s} --trace", flush=True)
    dt = time.monotonic() - t0
    print(f"ran {len(seeds)} scheduler seeds in {dt:.1f}s ({len(seeds) / dt if dt else 0:.1f} seeds/s), "
          f"{fires} callbacks delivered, {settled} fires settled on lost workers, {power_losses} power losses "
          f"({discarded} task stores discarded by the boot guard), {paused} task pauses ({mid} in the middle "
          f"of an occurrence; {drops} resumes from now that dropped instants), {trig} triggers ({periodic_trig} periodic; {refused} refused), "
          f"{sum(deletes.values())} deletes ({', '.join(f'{n} {k}' for k, n in sorted(deletes.items()))}; "
          f"{recreated} created again with the key), {upd} delayed-task updates ({upd_moved} moved before their "
          f"first attempt, {upd_started} after it started, {upd_same} that changed nothing; {upd_refused} refused)")
    print(f"sim: seeds={len(seeds)} failures={failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
