"""Commands of the replicated state machine (docs/architecture.md#state-machine) and their codec.

Every command carries ``now_ms`` (its first field, declared once in ``_Command``), stamped by the
leader when it proposes, so applying it gives the same result on every replica. Batch commands carry tuples of small item records. Commands are
msgspec Structs encoded as msgpack arrays (``array_like``: fields by position, no names), the first
element the command's tag (16 and up); a create item's spec is the schema's ``TaskSpec``
(:mod:`molens.schema`). Payloads travel as their JSON encoding (``TaskSpec.payload_json``, the
exact callback body) so any JSON value round-trips exactly and is never re-encoded.

Entries written by data format 1 (tags 0..8, hand-written lists) are still decoded
(:mod:`molens.fsm.format_v1`), so a node reads the Raft log of the previous version.

Task ids are chosen by the leader before proposing (``model.new_task_id``), never on apply.
"""

from __future__ import annotations

import msgspec

from molens.errors import MolensError
from molens.fsm.tenancy import ApiKey, Namespace
from molens.schema import FireKind, Outcome, TaskSpec


class CommandCodecError(MolensError, ValueError):
    """Bytes that do not decode to a known command."""


class _Command(msgspec.Struct, frozen=True, array_like=True):
    """What every command is: an ``array_like`` Struct (encoded after its tag, fields by position)
    whose first field is ``now_ms``, the leader's time when it proposed it."""

    now_ms: int


class CreateItem(msgspec.Struct, frozen=True, array_like=True):
    task_id: str
    spec: TaskSpec


class CreateTasks(_Command, frozen=True, tag=16):
    """Create these tasks (their ids chosen by the leader)."""

    items: tuple[CreateItem, ...]
    keys_first: bool = False
    """A namespace's ``max_pending_tasks`` and ``max_payload_bytes`` count only the items that make
    a task: one whose idempotency key already names a task answers it, even over the quota (the
    retry of a create whose answer was lost). Set once every member has advertised
    ``KEYS_FIRST_VERSION``; an entry of the release before decodes with it false and is applied as
    that release did, quota first."""


class _OnTasks(_Command, frozen=True):
    """A command on each task of ``task_ids``."""

    task_ids: tuple[str, ...]


class DeleteTasks(_OnTasks, frozen=True, tag=17):
    """Delete these tasks (each with its fire record, idempotency key and history)."""


class PauseTasks(_OnTasks, frozen=True, tag=18):
    """Pause these tasks: nothing of theirs fires until they are resumed."""


class ResumeTasks(_OnTasks, frozen=True, tag=19):
    """Resume these paused tasks."""

    from_schedule: bool = False
    """``resume_from: schedule``: a paused periodic task takes up its schedule where it stopped, and
    what it missed meanwhile follows its ``catchup`` (docs/architecture.md#catch-up)."""
    drops_paused: bool = False
    """Without ``from_schedule``: a periodic task paused in the middle of an occurrence (retrying)
    drops the instants that came due while it was paused once that occurrence ends (``Task.resumed_ms``),
    as one paused between occurrences does, whatever its ``catchup`` and ``overlap``; and a delayed
    task's occurrence keeps its ``jitter_ms`` offset. Set once every member has advertised
    ``RESUME_VERSION``; an entry of the release before decodes with it false and is applied as that
    release did."""
    records_dropped: bool = False
    """Without ``from_schedule``: a periodic task paused between occurrences writes the instants that
    came due while it was paused, which the resume drops, as one ``skipped`` history row (as one
    paused in the middle of an occurrence does when that occurrence ends). Set once every member has
    advertised ``RESUME_TRIGGER_VERSION``, as ``drops_paused`` is set for ``RESUME_VERSION``."""
    counts_quota: bool = False
    """A resume that makes a finished task unfinished again (an inactive periodic task) is refused
    when its namespace holds ``max_pending_tasks`` unfinished tasks already, as a create is. Set once
    every member has advertised ``QUOTA_VERSION``; an entry of the release before decodes with it
    false and is applied as that release did (the quota not counted)."""


class TriggerTask(_Command, frozen=True, tag=20):
    """Make a pending task's occurrence due now."""

    task_id: str
    refuses_planned: bool = False
    """An ``overlap`` allow task is not triggered while one of its running occurrences is planned
    for a later instant (sent ahead of its time): the schedule after the triggered occurrence would
    take that instant again. Set once every member has advertised ``RESUME_TRIGGER_VERSION``; an entry
    of the release before decodes with it false and is applied as that release did."""
    refuses_sent_ahead: bool = False
    """Nor is a task triggered before its ``last_fire_ms`` (an attempt sent ahead for a later instant
    and settled lost, its worker gone, may still go out then): the schedule after the triggered
    occurrence would take that instant again. Set once every member has advertised
    ``TRIGGER_AHEAD_VERSION``, as ``refuses_planned`` is for ``RESUME_TRIGGER_VERSION``."""


class DispatchItem(msgspec.Struct, frozen=True, array_like=True):
    """The leader's plan to send one HTTP attempt; proposed *before* the fire is sent."""

    fire_id: str
    task_id: str
    attempt: int
    worker: str
    deadline_ms: int


class Dispatched(_Command, frozen=True, tag=21):
    items: tuple[DispatchItem, ...]
    catchup_waits: bool = False
    """An ``overlap: allow``, ``catchup: all`` task's own occurrence that would start while
    ``MAX_RUNNING`` of its occurrences run waits for one to end (``Task.waiting``) instead of being
    skipped (docs/architecture.md#overlap). The leader sets it once every member has advertised
    ``CATCHUP_WAIT_VERSION``; an entry of the release before decodes with it false and is applied
    as that release did, so replicas of both releases apply the same log alike."""
    keeps_last_fire: bool = False
    """A task's ``last_fire_ms`` never goes back: an attempt settled lost before its due time (its
    worker lost) may still go out then, and a retry sent earlier must not hide that. Set once every
    member has advertised ``LAST_FIRE_VERSION``, as ``catchup_waits`` is."""


class ResultItem(msgspec.Struct, frozen=True, array_like=True):
    """What one attempt produced. ``outcome`` LOST is proposed by the Monitor after the deadline."""

    fire_id: str
    kind: FireKind
    status_code: int | None
    outcome: Outcome
    response_head: str | None
    latency_ms: int | None
    worker: str
    attempt: int | None = None
    """The attempt this result is for (``X-Molens-Attempt``). Workers should always set it: a result
    of an attempt the Monitor already declared lost, arriving after the retry was dispatched with
    the same fire id, is then recognised as stale instead of being credited to the retry."""
    retry_after_ms: int = 0
    """Epoch ms before which the receiver asked not to be called again (a 429/503 with
    ``Retry-After``, capped by ``worker.max_retry_after_ms``); 0 when it did not."""
    no_retry: bool = False
    """The response said ``X-Molens-No-Retry: true``: the occurrence is not retried."""
    not_sent: bool = False
    """The attempt never left its node (known for certain, never guessed): with ``attempt`` set it is
    planned again without using up an attempt (docs/architecture.md#not-sent). A replica of the
    release before this field reads the item without it, as the network error it then was."""


class Results(_Command, frozen=True, tag=22):
    items: tuple[ResultItem, ...]
    ack_from: bool = False
    """A result that makes the task wait for an ACK probe (its callback's 2xx, a failed probe)
    records when (``Task.ack_from_ms``), so a resume sends the probe no sooner than ``ack_delay_ms``
    after it. Set once every member has advertised ``RESUME_TRIGGER_VERSION``; an entry of the release
    before decodes with it false and is applied as that release did."""


class ExpireItem(msgspec.Struct, frozen=True, array_like=True):
    """Delete ``task_id`` if it is still terminal and unchanged since ``updated_ms``."""

    task_id: str
    updated_ms: int


class Expire(_Command, frozen=True, tag=23):
    items: tuple[ExpireItem, ...]


class PutMeta(_Command, frozen=True, tag=24):
    """Node metadata (e.g. membership as seen by the FSM); ``value`` None deletes the key."""

    key: str
    value: bytes | None


class UpdateTask(_Command, frozen=True, tag=25):
    """Replace the definition of ``task_id`` with ``spec`` (validated like a create), if the task's
    definition is still ``version`` (the one ``spec`` was computed from)."""

    task_id: str
    spec: TaskSpec
    version: int
    after_last_fire: bool = False
    """An occurrence not started yet moves to the new schedule's first instant after now and after
    the task's ``last_fire_ms`` (a fire planned ahead and settled lost may still go out then), not
    only after now. Set once every member has advertised ``LAST_FIRE_VERSION``."""
    moves_waiting: bool = False
    """What waits behind a running occurrence follows the new schedule too: the task's own
    occurrence put aside while a redrive runs moves (or the task ends, when the new bounds exclude
    it), and a backfill the new schedule leaves no instant in is dropped. Set once every member has
    advertised ``RESUME_VERSION``; without it both keep what the old schedule gave them."""
    checks_payload_quota: bool = False
    """A changed payload longer than the namespace's ``max_payload_bytes`` is refused, as a create's
    is, in the log's order (a quota lowered while the update was on its way counts). Set once every
    member has advertised ``QUOTA_VERSION``; without it the API's screen on its replica is the only check."""


class _OnDeadLetters(_Command, frozen=True):
    """A command on each dead letter of ``ids``."""

    ids: tuple[str, ...]


class RedriveDeadLetters(_OnDeadLetters, frozen=True, tag=26):
    """Deliver the occurrences of these dead letters again (docs/architecture.md#dead-letters)."""

    counts_quota: bool = False
    """A redrive that makes a finished task unfinished again (a failed delayed task, an ended
    periodic one) is refused when its namespace holds ``max_pending_tasks`` unfinished tasks
    already, as a create is (the dead letter stays). Set once every member has advertised
    ``QUOTA_VERSION``; an entry of the release before decodes with it false and is applied as that
    release did."""


class DeleteDeadLetters(_OnDeadLetters, frozen=True, tag=27):
    """Delete these dead letters (an operator's delete, or the Cleaner's retention)."""


class FlowNotices(_Command, frozen=True, tag=29):
    """Retry-After holds of flows that began ``(flow, until_ms)`` or ended ``(flow, 0)``, for the
    node-wide notification target ``url`` (the leader's ``notifications.url``)."""

    url: str
    items: tuple[tuple[str, int], ...]


class BackfillTask(_Command, frozen=True, tag=32):
    """Fire the periodic task's occurrences scheduled in ``[start_ms, end_ms)`` now, one after
    another, then resume its schedule (docs/architecture.md#backfill)."""

    task_id: str
    start_ms: int
    end_ms: int


class AckNotices(_Command, frozen=True, tag=28):
    """Notifications their target acknowledged (or past retention): out of the outbox, by
    ``(at_ms, id)``."""

    keys: tuple[tuple[int, str], ...]


class FlowSettings(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """The limits of one flow (docs/architecture.md#flow-control); ``None`` is unlimited."""

    rate_per_s: float | None = None
    burst: int | None = None
    """Fires allowed at once after an idle spell (the token bucket's size; default 1: evenly spaced at the rate)."""
    concurrency: int | None = None
    paused: bool = False
    adaptive: bool = False
    """Back the rate off on 429/503/timeouts and ramp it back (AIMD)."""
    updated_ms: int = 0


class PutFlow(_Command, frozen=True, tag=30):
    """Set the limits of flow ``key``; with ``only_paused`` only its ``paused`` flag changes (pause
    and resume never undo a concurrent edit of the limits)."""

    key: str
    settings: FlowSettings
    only_paused: bool = False
    checks_namespace: bool = False
    """A namespace's own flow (``<namespace>~<flow_key>``) is refused unless the namespace exists when
    the entry applies (deleted while the request was on its way, its flow would hold a namespace
    made again under the name). Set once every member has advertised ``NAMESPACE_FLOWS_VERSION``."""


class DeleteFlow(_Command, frozen=True, tag=31):
    """Forget the limits of flow ``key`` (its fires go unlimited)."""

    key: str


class PutNamespace(_Command, frozen=True, tag=40):
    """Create namespace ``namespace.name`` (``create``: refused if it exists) or replace its quotas
    (refused if it does not exist)."""

    namespace: Namespace
    create: bool


class DeleteNamespace(_Command, frozen=True, tag=41):
    """Forget namespace ``name``; refused while it holds tasks, and for ``default``."""

    name: str
    checks_keys: bool = False
    """Refused too while an API key names it (a namespace made again under the same name would be
    that key's again): decided here, in the log's order, so a key created while the delete was on
    its way cannot be left naming a deleted namespace. Set once every member has advertised
    ``TENANCY_VERSION``; an entry of the release before decodes with it false and is applied as that
    release did (the API checked the keys it had applied before proposing)."""
    drops_flows: bool = False
    """The settings of the namespace's own flows (``<name>~<flow_key>``) go with it, so a namespace
    made again under the name starts without them. Set once every member has advertised
    ``NAMESPACE_FLOWS_VERSION``."""


class PutApiKey(_Command, frozen=True, tag=42):
    """Add an API key (its secret's keyed hash only: the secret never enters the log)."""

    key: ApiKey
    checks_namespaces: bool = False
    """Refused unless every namespace the key names exists when the entry applies (a namespace
    deleted while the create was on its way would otherwise be named by the key, and be its again
    if made anew). Set once every member has advertised ``TENANCY_VERSION``, as ``checks_keys`` is."""


class DeleteApiKey(_Command, frozen=True, tag=43):
    """Revoke API key ``key_id``: every replica refuses it once it has applied this entry."""

    key_id: str


# -------------------------------------------------------------------------------------------------
# audit trail (docs/architecture.md#audit-trail): tags 50..59


class AuditStamp(msgspec.Struct, frozen=True, array_like=True):
    """Who asked for a change and from where: the API's stamp on what it proposes."""

    key_id: str
    name: str
    remote_addr: str


AuditedCommand = (
    CreateTasks | DeleteTasks | PauseTasks | ResumeTasks | TriggerTask | UpdateTask | BackfillTask
    | RedriveDeadLetters | DeleteDeadLetters | PutFlow | DeleteFlow | PutNamespace | DeleteNamespace | PutApiKey
    | DeleteApiKey
)
"""The commands a caller of the API makes; the others (dispatch, results, expiry, notices) are the
cluster's own and never audited."""


class Audited(_Command, frozen=True, tag=50):
    """``command`` as an API caller asked for it: applying it applies ``command`` and writes one audit
    entry per target it changed, in the same log entry, so a change is never without its entry nor
    an entry without its change (the wrapper rather than a field on every command keeps the
    commands of the cluster's own machinery free of it, and the log of earlier versions decodable)."""

    stamp: AuditStamp
    command: AuditedCommand


class AuditNote(_Command, frozen=True, tag=51):
    """An audit entry of a change that is no state machine command (leadership transfer, membership),
    proposed after the change succeeded."""

    stamp: AuditStamp
    action: str
    target: str
    changes: dict[str, dict[str, object]]


class TrimAudit(_Command, frozen=True, tag=52):
    """Retention: delete the audit entries of log entries before ``before_index`` (the Cleaner's
    choice from its replica; applied as a key range, so every replica deletes the same entries)."""

    before_index: int


Command = (
    CreateTasks | DeleteTasks | PauseTasks | ResumeTasks | TriggerTask | Dispatched | Results | Expire | PutMeta
    | UpdateTask | RedriveDeadLetters | DeleteDeadLetters | AckNotices | BackfillTask | PutFlow | DeleteFlow
    | FlowNotices | PutNamespace | DeleteNamespace | PutApiKey | DeleteApiKey | Audited | AuditNote | TrimAudit
)

# -------------------------------------------------------------------------------------------------
# codec

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Command)


def encode(cmd: Command) -> bytes:
    """Serialise a command for the Raft log."""
    if not isinstance(cmd, _COMMANDS):
        raise CommandCodecError(f"not a command: {cmd!r}")
    return _ENCODER.encode(cmd)


def decode(data: bytes) -> Command:
    """Inverse of :func:`encode` (and of format 1's encoder); raises :class:`CommandCodecError` on
    anything else."""
    if len(data) > 1 and data[0] & 0xF0 == 0x90 and data[1] < 16:  # fixarray, tag 0..15: format 1
        from molens.fsm import format_v1

        return format_v1.decode_command(data)
    try:
        return _DECODER.decode(data)
    except msgspec.MsgspecError as e:
        raise CommandCodecError(f"undecodable command: {e}") from e


_COMMANDS = (
    CreateTasks, DeleteTasks, PauseTasks, ResumeTasks, TriggerTask, Dispatched, Results, Expire, PutMeta, UpdateTask,
    RedriveDeadLetters, DeleteDeadLetters, AckNotices, BackfillTask, PutFlow, DeleteFlow, FlowNotices,
    PutNamespace, DeleteNamespace, PutApiKey, DeleteApiKey, Audited, AuditNote, TrimAudit,
)


__all__ = [
    "AckNotices",
    "AuditNote",
    "AuditStamp",
    "Audited",
    "AuditedCommand",
    "BackfillTask",
    "CommandCodecError",
    "Command",
    "CreateItem",
    "CreateTasks",
    "DeleteApiKey",
    "DeleteDeadLetters",
    "DeleteNamespace",
    "DeleteFlow",
    "FlowNotices",
    "DeleteTasks",
    "DispatchItem",
    "Dispatched",
    "Expire",
    "ExpireItem",
    "FlowSettings",
    "PauseTasks",
    "PutApiKey",
    "PutFlow",
    "PutNamespace",
    "PutMeta",
    "RedriveDeadLetters",
    "ResultItem",
    "Results",
    "ResumeTasks",
    "TriggerTask",
    "TrimAudit",
    "UpdateTask",
    "decode",
    "encode",
]
