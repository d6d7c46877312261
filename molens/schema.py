"""The task schema, declared once (docs/architecture.md#schema).

:class:`TaskSpec` (what the user asked for) and :class:`Task` (a task as replicated) are msgspec
Structs; every other shape of a task is derived from their fields here:

- the **create request** (:func:`create_type`): each ``TaskSpec`` field under its JSON name,
  nullable (null = absent = the default), with the bounds its :func:`rule` states, the upper
  bounds that are node settings read from the given ``Limits``;
- the **JSON object** the API returns (:func:`view_type`, :func:`tasks_json`): ``Task``'s fields in
  order with ``spec`` flattened into them, JSON names from ``msgspec.field(name=...)``, fields
  marked ``internal`` left out, ``bytes`` fields (pre-encoded JSON) spliced in as ``msgspec.Raw``;
- the **stored and Raft encoding**: the Structs themselves, ``array_like`` msgpack (fields by
  position, enums by value; :data:`FORMAT` numbers the layout);
- the **OpenAPI components** (:func:`openapi_components`) from ``msgspec.json.schema_components``.

So a new field is one line in ``TaskSpec`` (or ``Task``) with a default: the request accepts and
bounds it, the JSON shows it, ``openapi.json`` documents it, records written before it decode with
the default (``array_like`` decoding fills missing trailing fields), and records written after it
are read by an older build that ignores the extra trailing field. Fields are only ever appended.

The rules between fields (a delayed task has ``interval_ms`` or ``run_at``...) are declared here too
(:data:`SCHEDULES`, :data:`PERIODIC_ONLY`, :data:`ACK_RELIABILITY`): :func:`molens.model.validate_create`
applies them to the decoded request, and :func:`between_fields` states them in the OpenAPI
document. What JSON Schema cannot state (the clock, the callback host policy, cron expressions that
never fire, the automatic ``max_fails``...) only the server checks.

Bounds live in ``Meta.extra`` (:func:`rule`), not in ``Meta``'s own constraints, so that decoding a
stored record checks none of them: a bound tightened in a later version must not make a stored
task unreadable.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import operator
import re
import types
import typing
import urllib.parse
from collections.abc import Sequence
from typing import Annotated, Any, cast

import msgspec

from molens.errors import ValidationError
from molens.tracing import TRACEPARENT_PATTERN, ZERO_TRACEPARENT

FORMAT = 3
"""Version of the stored layout: 1 was the hand-written msgpack lists (enums as indexes), 2 these
Structs, 3 the same records plus the secondary indexes (tasks by status and by scene, due entries
per day). ``molens.fsm.store`` writes it into the store's ``meta`` and reads formats 1 and 2 by
migrating."""

# -------------------------------------------------------------------------------------------------
# enums


class TaskType(enum.StrEnum):
    DELAYED = "delayed"
    PERIODIC = "periodic"


class Status(enum.StrEnum):
    PENDING = "pending"
    """Waiting for its next occurrence (has a due time unless the task is being dispatched)."""
    FIRING = "firing"
    """An occurrence is in flight or waiting for a retry."""
    AWAITING_ACK = "awaiting_ack"
    """Callback answered 2xx; the ACK probe is scheduled or in flight."""
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    INACTIVE = "inactive"


class Reliability(enum.StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


class CatchUp(enum.StrEnum):
    """What a periodic task does with occurrences it missed (docs/architecture.md#catch-up)."""

    ONE = "one"
    """One fire, at once, stands for every occurrence missed (the default)."""
    NONE = "none"
    """Missed occurrences are skipped; the schedule continues at its next instant."""
    ALL = "all"
    """Each missed occurrence fires, oldest first, at most ``catchup_window_ms`` back."""


class Overlap(enum.StrEnum):
    """What a periodic task does with instants that come due while an occurrence runs
    (docs/architecture.md#overlap)."""

    SKIP = "skip"
    """They do not fire; the schedule goes on at its first instant after the occurrence ended (the default)."""
    BUFFER_ONE = "buffer_one"
    """The first of them fires as soon as the occurrence has ended; the others are skipped."""
    ALLOW = "allow"
    """They fire at their time, beside the running one (each its own fire id), at most
    ``MAX_RUNNING`` at once; an instant that comes due with that many running is skipped."""


MAX_RUNNING = 8
"""The most occurrences of one ``overlap: allow`` task that run at once (firing or retrying)."""


class FireKind(enum.StrEnum):
    """Value of the ``X-Molens-Kind`` header."""

    CALLBACK = "callback"
    ACK = "ack"
    EVENT = "event"
    """Only in the history: a row that is not an HTTP attempt (the definition was updated)."""


class Outcome(enum.StrEnum):
    """What a worker (or the Monitor) observed for one HTTP attempt."""

    RESPONSE = "response"
    """An HTTP response arrived; see the status code."""
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"
    LOST = "lost"
    """No result before the fire's deadline (worker or leader lost); proposed by the Monitor."""


class ExecutionResult(enum.StrEnum):
    SUCCESS = "success"
    FAILED = "failed"
    """Non-2xx answer other than 404."""
    TIMEOUT = "timeout"
    NETWORK_ERROR = "network_error"
    NOT_FOUND = "not_found"
    LOST = "lost"
    """at_least_once attempt that produced no result before its deadline; it is fired again."""
    UNKNOWN = "unknown"
    """at_most_once fire with no result: it may or may not have been delivered, and never will be again."""
    ACK_SUCCESS = "ack_success"
    ACK_FAILED = "ack_failed"
    SKIPPED = "skipped"
    """History only (kind ``event``): scheduled occurrences that were not fired (catch-up, overlap);
    ``execution_result`` names the range and the rule."""
    UPDATED = "updated"
    """History only (kind ``event``): the task's definition changed (PATCH); ``execution_result``
    names the version and the fields."""
    BACKFILL = "backfill"
    """History only (kind ``event``): a backfill was requested; ``execution_result`` names the range."""


class Backoff(enum.StrEnum):
    """How the wait before a retry grows (docs/architecture.md#retry-policy)."""

    EXPONENTIAL = "exponential"
    """``initial_ms * factor ** (n - 1)`` before retry ``n``, at most ``max_ms``."""
    FIXED = "fixed"
    """``initial_ms`` before every retry."""


class RetryJitter(enum.StrEnum):
    NONE = "none"
    FULL = "full"
    """The wait is drawn from ``[0, wait)`` (a hash of the fire id and attempt: every replica agrees)."""


class FailureKind(enum.StrEnum):
    """Why an occurrence failed for good (docs/architecture.md#dead-letters)."""

    RETRIES_EXHAUSTED = "retries_exhausted"
    """Every attempt failed (an at_most_once fire has one)."""
    NON_RETRYABLE = "non_retryable"
    """The receiver's answer ended the retries: 404, a status in ``retry.non_retryable_statuses``,
    or ``X-Molens-No-Retry: true``."""
    ACK_FAILED = "ack_failed"
    """The callback was answered 2xx but every ACK probe failed."""
    UNKNOWN = "unknown"
    """An at_most_once fire whose worker was lost: maybe delivered, never sent again."""


class NoticeType(enum.StrEnum):
    """What a failure notification says (docs/architecture.md#notifications)."""

    TASK_FAILED = "task_failed"
    TASK_INACTIVE = "task_inactive"
    DEAD_LETTER = "dead_letter"
    FLOW_PAUSED = "flow_paused"
    """A receiver's ``Retry-After`` holds its flow (node-wide: ``notifications.url``)."""
    FLOW_RESUMED = "flow_resumed"


# -------------------------------------------------------------------------------------------------
# the declaration

from molens.wallclock import MAX_EPOCH_MS as _MAX_EPOCH_MS  # noqa: E402


def rule(
    description: str,
    *,
    ge: int | None = None,
    le: int | str | None = None,
    min_length: int | None = None,
    max_length: int | str | None = None,
    pattern: str | None = None,
    default: str | None = None,
    internal: bool = False,
    format: str | None = None,
    view: str | None = None,
    nullable: bool = True,
    pattern_per_value: bool = False,
) -> msgspec.Meta:
    """A field's description and request bounds. A ``str`` bound or ``default`` names a ``Limits``
    attribute (a node setting), ``default="rule"`` a default that a rule of
    :func:`molens.model.validate_create` decides; ``internal`` keeps the field out of the API's JSON;
    ``view`` names the attribute the JSON shows instead of the stored value (a property resolving a
    default); ``nullable=False`` documents a ``T | None`` field of a :class:`Record` as never null in
    an answer (only its writer sees it unset); ``pattern_per_value`` leaves ``pattern`` to
    :func:`per_value_patterns` (a value the tasks of a batch share, matched once per batch instead of
    once per task by the decoder: a regex costs the decoder a quarter of a microsecond per task)."""
    extra = {
        k: v
        for k, v in (
            ("ge", ge), ("le", le), ("min_length", min_length), ("max_length", max_length),
            ("pattern", pattern), ("default", default), ("internal", internal or None), ("format", format),
            ("view", view), ("nullable", None if nullable else False),
            ("pattern_per_value", pattern_per_value or None),
        )
        if v is not None
    }
    return msgspec.Meta(description=description or None, extra=extra)


def python_pattern(pattern: str) -> str:
    """``pattern`` (a JSON Schema regex, which ends at ``$``) as Python's ``re`` must read it: there
    ``$`` also matches before a final newline, so ``"payments\\n"`` would pass ``^[a-z]+$``; ``\\Z``
    ends at the string's end only. The OpenAPI document shows ``pattern`` itself."""
    return pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith(r"\$") else pattern


def _declared_patterns(node: Any) -> None:
    """Every ``pattern`` under ``node`` as declared (``$``), not as :func:`python_pattern` made it."""
    if isinstance(node, dict):
        p = node.get("pattern")
        if isinstance(p, str) and p.endswith(r"\Z"):
            node["pattern"] = p[:-2] + "$"
        for v in node.values():
            _declared_patterns(v)
    elif isinstance(node, list):
        for v in node:
            _declared_patterns(v)


SCENE_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
"""What a task's ``scene`` may be (and the ``scene`` filter of the task list)."""
FLOW_KEY_PATTERN = r"^[A-Za-z0-9_.:\[\]-]{1,128}$"
"""What a task's ``flow_key`` may be; a URL's ``host:port`` fits it."""
FLOW_NAMESPACE_SEPARATOR = "~"
"""Between a namespace and its own flow key in the key of that namespace's flow (``payments~batch``):
no flow key and no namespace name holds it, and a URL path carries it as it is."""
FLOW_ID_PATTERN = r"^([a-z0-9][a-z0-9_-]{0,62}~)?[A-Za-z0-9_.:\[\]-]{1,128}$"
"""What the key of a flow may be (``/flows/{key}``, the ``flow`` metrics label): a ``host:port``, a
``flow_key`` of the default namespace, or ``<namespace>~<flow_key>`` (:func:`flow_id`)."""
IDEMPOTENCY_KEY_PATTERN = r"^[^\u0000]*$"
"""No NUL: the store keeps another namespace's keys as ``namespace NUL key`` (``molens.fsm.machine.idem_key``)."""
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""What a namespace name may be (a task's ``namespace``, ``/namespaces/{name}``, ``?namespace=``)."""
DEFAULT_NAMESPACE = "default"
"""The namespace of a task that names none, and of every task stored before namespaces existed."""


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How an at_least_once occurrence is retried (docs/architecture.md#retry-policy). The defaults
    are the seed's rule: up to 3 retries after 1 s, 2 s, 4 s. Encoded as a map (it is stored only
    when it differs from those defaults: ``TaskSpec.retry`` is None otherwise)."""

    max_retries: Annotated[int, rule("Retries of one occurrence (the top-level max_retries is an alias)", ge=0,
                                     le="max_retries")] = 3
    backoff: Annotated[Backoff, rule("exponential (initial_ms * factor^(n-1)) or fixed (initial_ms)")] = (
        Backoff.EXPONENTIAL
    )
    initial_ms: Annotated[int, rule("Wait before the first retry", ge=0, le=86_400_000)] = 1_000
    factor: Annotated[int, rule("exponential: growth of the wait per retry", ge=1, le=10)] = 2
    max_ms: Annotated[int, rule("Longest wait before a retry", ge=0, le=86_400_000)] = 3_600_000
    jitter: Annotated[RetryJitter, rule("none, or full: the wait is drawn from [0, wait)")] = RetryJitter.NONE
    non_retryable_statuses: Annotated[
        tuple[int, ...], rule("HTTP statuses that fail the occurrence at once (404 always does)", max_length=32)
    ] = ()
    max_throttle_ms: Annotated[
        int,
        rule("429/503 with Retry-After do not use up max_retries until the occurrence has been throttled this long",
             ge=0, le=604_800_000),
    ] = 3_600_000

    def wait_ms(self, retry: int, fire_id: str) -> int:
        """The wait before retry ``retry`` (1-based) of the fire ``fire_id``."""
        if self.backoff is Backoff.FIXED:
            wait = self.initial_ms
        else:
            wait = self.initial_ms * self.factor ** min(retry - 1, 64)
        wait = min(wait, self.max_ms)
        if self.jitter is RetryJitter.FULL and wait > 1:
            h = hashlib.blake2b(f"{fire_id}:{retry}".encode(), digest_size=8).digest()
            wait = int.from_bytes(h, "big") % wait
        return wait


DEFAULT_RETRY = RetryPolicy()


class TaskSpec(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """A validated create request: what the user asked for, with defaults resolved."""

    type: Annotated[TaskType, rule("delayed fires once; periodic repeats (interval_ms or cron_expr)")]
    callback_url: Annotated[
        str, rule("http(s) URL the callback is POSTed to", max_length="max_url_length", format="uri")
    ]
    interval_ms: Annotated[
        int | None,
        rule(
            "delayed: delay from creation; periodic: period (>= 1000). "
            "Required unless run_at (delayed) or cron_expr (periodic)",
            ge=0,
            le="max_delay_ms",
        ),
    ] = None
    run_at: Annotated[
        int | None,
        rule("delayed only: absolute fire time (epoch ms), at most max_delay_ms from now", ge=0, le=_MAX_EPOCH_MS),
    ] = None
    cron_expr: Annotated[
        str | None, rule("periodic only; 5 fields, or 6 with seconds first", max_length="max_cron_length")
    ] = None
    timezone: Annotated[str, rule("IANA time zone of cron_expr (default UTC)")] = "UTC"
    ack_url: Annotated[
        str | None, rule(
            "Probed ack_delay_ms after the callback's 2xx; delayed at_least_once only (at_most_once: 400; "
            "periodic tasks ignore it and store null)",
            max_length="max_url_length", format="uri",
        )
    ] = None
    ack_delay_ms: Annotated[
        int, rule("Delay of the ACK probe after a 2xx", ge=0, le="max_ack_delay_ms", default="default_ack_delay_ms")
    ] = 1_000
    payload_json: Annotated[
        bytes, rule("Any JSON value; POSTed as the callback body (max_payload_bytes encoded)")
    ] = msgspec.field(default=b"null", name="payload")
    """The payload as the exact callback body (compact UTF-8 JSON); see :attr:`payload`."""
    scene: Annotated[str, rule("Label for grouping and stats", pattern=SCENE_PATTERN, pattern_per_value=True)] = "default"
    timeout_ms: Annotated[
        int, rule("HTTP timeout of one attempt", ge=1, le="max_timeout_ms", default="default_timeout_ms")
    ] = 5_000
    max_retries: Annotated[
        int, rule("Retries of one occurrence", ge=0, le="max_retries", default="default_max_retries")
    ] = 3
    max_fails: Annotated[
        int,
        rule(
            "periodic: failed occurrences in a row before inactive (default: an hour's worth, 3..100)",
            ge=1,
            le=1_000_000,
            default="rule",
        ),
    ] = 3
    reliability: Annotated[Reliability, rule("at_least_once (default) or at_most_once")] = Reliability.AT_LEAST_ONCE
    idempotency_key: Annotated[
        str | None,
        rule(
            "Same key again returns the first task (200 instead of 201); no NUL character (it separates a "
            "namespace from its keys where they are stored)",
            min_length=1,
            max_length="max_idempotency_key",
            pattern=IDEMPOTENCY_KEY_PATTERN,
        ),
    ] = None

    jitter_ms: Annotated[
        int,
        rule(
            "Each occurrence fires up to this much after its scheduled instant, by an offset fixed by "
            "(task id, occurrence): spreads tasks scheduled at one instant",
            ge=0,
            le=86_400_000,
        ),
    ] = 0
    start_at: Annotated[
        int | None, rule("periodic only: no occurrence before this epoch ms", ge=0, le=_MAX_EPOCH_MS)
    ] = None
    end_at: Annotated[
        int | None, rule("periodic only: no occurrence at or after this epoch ms (then done)", ge=0, le=_MAX_EPOCH_MS)
    ] = None
    max_runs: Annotated[
        int | None, rule("periodic only: done after this many occurrences", ge=1, le=1_000_000_000)
    ] = None
    catchup: Annotated[
        CatchUp,
        rule(
            "periodic only: occurrences missed (the next one was already due when one was started, or "
            "came due while it ran): one (a single fire at once stands for them), none (skipped), all "
            "(each fired, oldest first, at most catchup_window_ms back)"
        ),
    ] = CatchUp.ONE
    catchup_window_ms: Annotated[
        int, rule("periodic, catchup all: how far back missed occurrences are still fired", ge=0, le=31_536_000_000)
    ] = 3_600_000
    retry: Annotated[
        RetryPolicy | None,
        rule("at_least_once: the retry policy; fields left out take the node's default (scheduler.retry)",
             view="retry_policy"),
    ] = None
    """None when the policy is the seed's (with this spec's ``max_retries``): see :attr:`retry_policy`."""
    notify_url: Annotated[
        str | None,
        rule("http(s) URL that gets signed failure notifications (task failed or inactive, dead letter); "
             "default: the node's notifications.url", max_length="max_url_length", format="uri"),
    ] = None

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retry policy in force (``max_retries`` is the top-level field's)."""
        r = self.retry
        if r is None:
            return DEFAULT_RETRY if self.max_retries == 3 else RetryPolicy(max_retries=self.max_retries)
        return r

    overlap: Annotated[
        Overlap,
        rule(
            "periodic only: instants that come due while an occurrence is firing, retrying or awaiting its ACK: "
            "skip (not fired, the default), buffer_one (the first of them fires as soon as the occurrence ended) "
            "or allow (they fire at their time, beside it, each its own fire id; at most 8 run at once, an instant "
            "that comes due with 8 running is skipped)"
        ),
    ] = Overlap.SKIP
    flow_key: Annotated[
        str | None,
        rule(
            "Flow the task's fires belong to (limits set with PUT /flows/{key}); default: the callback "
            "URL's host:port. A flow key of a namespace other than default is that namespace's own: its "
            "flow's key is <namespace>~<flow_key>",
            pattern=FLOW_KEY_PATTERN, pattern_per_value=True,
        ),
    ] = None
    traceparent: Annotated[
        str | None,
        rule(
            "W3C trace context the task's requests join: each callback, ACK probe and failure notification "
            "carries a traceparent with this trace id and a span id of its own (default: the create request's "
            "traceparent header)",
            pattern=TRACEPARENT_PATTERN,
        ),
    ] = None

    namespace: Annotated[
        str,
        rule("Namespace the task belongs to (created by an admin, POST /namespaces); its executions and dead "
             "letters belong to it too. Cannot change", pattern=NAMESPACE_PATTERN, pattern_per_value=True),
    ] = DEFAULT_NAMESPACE

    @property
    def payload(self) -> Any:
        """The payload as a JSON value (decoded on each access; the body is kept encoded)."""
        return msgspec.json.decode(self.payload_json)


# -------------------------------------------------------------------------------------------------
# the rules between fields, declared once: molens.model checks a request with them and
# between_fields() states them in JSON Schema (the OpenAPI document's TaskCreate and TaskUpdate)

SCHEDULES: dict[TaskType, tuple[str, str]] = {
    TaskType.DELAYED: ("interval_ms", "run_at"),
    TaskType.PERIODIC: ("interval_ms", "cron_expr"),
}
"""Each type's schedule (JSON names): exactly one of its two fields; the field only the other type
has is refused."""
SCHEDULE_FIELDS = ("interval_ms", "run_at", "cron_expr")
PERIODIC_ONLY: dict[str, Any] = {
    "start_at": None, "end_at": None, "max_runs": None,
    "catchup": CatchUp.ONE, "catchup_window_ms": 3_600_000, "overlap": Overlap.SKIP,
}
"""Fields only a periodic task may give, each with the one value a delayed task may still send
(its default: generated clients send defaults; None: none)."""
ACK_RELIABILITY = Reliability.AT_LEAST_ONCE
"""A delayed task with an ``ack_url`` has this reliability (a periodic task ignores ``ack_url``)."""


class Rewound(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """A periodic task's own occurrence, put aside while a redrive re-runs an older one
    (docs/architecture.md#dead-letters); restored when the redriven occurrence ends."""

    status: Status
    seq: int
    sched_ms: int
    due_ms: int | None
    attempt: int
    ack_attempt: int
    free_attempts: int
    throttled_since_ms: int
    skipped_to: bool
    started_ms: int | None = None
    buffered: bool = False


class Running(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """An occurrence of an ``overlap: allow`` task that runs beside the task's later ones
    (docs/architecture.md#overlap): fire id ``{task id}-{seq}``, its own attempts and retries.

    Example: a task every 10 s whose receiver answers in 25 s; occurrence 3 (instant 30 s) is sent
    at 30 s and becomes ``Running(seq=3, sched_ms=30_000, attempt=1, due_ms=None, inflight=True)``
    while the task itself is pending at occurrence 4 (40 s); a failed attempt sets ``due_ms`` to its
    retry and ``inflight`` False; its success removes it."""

    seq: int
    sched_ms: int
    attempt: int
    due_ms: int | None
    """Its next attempt (a retry); None while an attempt is in flight or the task is paused."""
    inflight: bool
    free_attempts: int = 0
    throttled_since_ms: int = 0
    occ_spec: TaskSpec | None = None
    """The definition its attempt in flight was sent under, when the task was updated meanwhile."""
    not_sent: int = 0
    """Its latest attempts that were not sent, in a row (docs/architecture.md#not-sent)."""

    def fire_id(self, task_id: str) -> str:
        return f"{task_id}-{self.seq}"


class Backfill(msgspec.Struct, frozen=True, array_like=True):
    """A backfill in progress (docs/architecture.md#backfill): the schedule's instants in
    ``[next_ms, end_ms)`` not started yet fire one after another, then the regular schedule resumes
    at its first instant after ``after_ms`` and after the last instant backfilled.

    Example: a 5-minute cron pending at 10:05 (not started), backfill of [08:00, 09:00) at 09:30:
    the 10:05 occurrence gives way, 08:00 fires now (``current``), ``next_ms`` 08:00:00.001; 08:05
    ... 08:55 follow, each when the one before ended; then the task is pending at 10:05 again
    (``after_ms`` 10:04:59.999)."""

    next_ms: int
    """The instants still to fire are the schedule's instants at or after this..."""
    end_ms: int
    """... and before this (the request's end, clipped to ``end_at``)."""
    after_ms: int
    """The regular schedule resumes at its first instant after this (and after the last backfilled
    instant): the instant of the occurrence that ran before the backfill, or just before the one
    that was pending."""
    left: int
    """How many more occurrences the backfill may start (a request has at most 10,000)."""
    current: bool
    """The task's current occurrence is one of the backfill's (it fires now, not after catch-up)."""


class Task(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """A task as replicated in the state store.

    ``due_ms`` is the time of the next action (callback occurrence, retry or ACK probe) and is
    indexed; ``None`` while a fire is in flight or when nothing is scheduled. ``seq`` numbers the
    current occurrence (fire id ``{id}-{seq}``); ``sched_ms`` is its scheduled instant, from which a
    periodic task computes the next one (fixed rate). ``attempt`` counts callback attempts of the
    current occurrence, ``ack_attempt`` ACK probes. ``inflight`` is the fire id in flight, if any.
    """

    id: Annotated[str, rule("Task id (26 Crockford base32 characters, sorting by creation time)")]
    spec: TaskSpec
    status: Annotated[Status, rule("Where the task is in its life (docs/architecture.md#state-machine)")]
    created_ms: Annotated[int, rule("epoch ms")] = msgspec.field(name="created_at")
    updated_ms: Annotated[int, rule("epoch ms")] = msgspec.field(name="updated_at")
    due_ms: Annotated[int | None, rule("epoch ms of the next action (null while firing)")] = msgspec.field(
        name="next_run_at"
    )
    sched_ms: Annotated[int, rule("Scheduled instant of the current occurrence", internal=True)]
    seq: Annotated[int, rule("Current occurrence; X-Fire-ID is {id}-{seq}")] = 1
    attempt: Annotated[int, rule("Callback attempts of the current occurrence")] = 0
    ack_attempt: Annotated[int, rule("ACK probes of the current occurrence")] = 0
    fail_count: Annotated[int, rule("Failed occurrences in a row (periodic)")] = 0
    inflight: Annotated[str | None, rule("Fire id in flight", internal=True)] = None
    last_result: Annotated[ExecutionResult | None, rule("Outcome of the last attempt (success, failed, ...)")] = (
        msgspec.field(default=None, name="last_outcome")
    )
    last_status_code: Annotated[int | None, rule("HTTP status of the last attempt")] = None
    last_response: Annotated[
        str | None, rule("The latest callback response: its first 512 bytes (the seed's LastExecutionResult)")
    ] = msgspec.field(default=None, name="last_execution_result")
    last_fire_ms: Annotated[int | None, rule("epoch ms of the last attempt: the latest time one was to be sent")] = msgspec.field(
        default=None, name="last_fire_at"
    )
    version: Annotated[
        int, rule("Version of the definition: 1 at create, one more at each update that changes it (ETag, If-Match)")
    ] = 1
    occ_spec: Annotated[TaskSpec | None, rule("The definition the fire in flight was sent under", internal=True)] = None
    """Set when the definition changes while a fire is in flight: that fire's result is judged by
    the reliability it was sent with (docs/architecture.md#update)."""
    skipped_to: Annotated[bool, rule("catchup none moved this occurrence past missed ones", internal=True)] = False
    """Set when ``catchup`` none skipped missed instants to this occurrence: it then fires even if
    it is late again (a scheduler lagging by more than a period must still fire something)."""
    free_attempts: Annotated[
        int, rule("Attempts of this occurrence that do not count against max_retries", internal=True)
    ] = 0
    """Throttled attempts (429/503 with Retry-After, within ``retry.max_throttle_ms``) and the
    attempts made before a redrive (docs/architecture.md#retry-policy)."""
    throttled_since_ms: Annotated[
        int, rule("When this occurrence was first throttled (0: not throttled)", internal=True)
    ] = 0
    rewound: Annotated[
        Rewound | None, rule("The task's own state while a redrive re-runs an older occurrence", internal=True)
    ] = None
    redrives: Annotated[
        tuple[tuple[int, int, int], ...],
        rule("Redriven occurrences waiting their turn: (seq, scheduled instant, attempts made)", internal=True),
    ] = ()
    ack_base: Annotated[int, rule("ACK probes made before the latest redrive", internal=True)] = 0
    """A redriven delayed task's ACK probes go on numbering from here (an ACK attempt is never
    recorded twice) and get ``ack_ttl`` probes again."""
    backfill: Annotated[Backfill | None, rule("A backfill in progress", internal=True)] = None
    started_ms: Annotated[int | None, rule("When the current occurrence's first attempt was sent", internal=True)] = None
    """Tells the instants missed before the occurrence started (catch-up) from those that came due
    while it ran (overlap)."""
    buffered: Annotated[bool, rule("overlap buffer_one: this occurrence came due while the last ran", internal=True)] = False
    """It fires when the one before ended, late by design: catch-up does not skip it."""
    running: Annotated[
        tuple[Running, ...], rule("overlap allow: earlier occurrences still firing or retrying", internal=True)
    ] = ()
    """An allow task's occurrence leaves the task when its first attempt is sent (the task moves on
    to its next occurrence) and lives here until it ends: the task's own fields describe the next."""
    not_sent: Annotated[int, rule("Attempts not sent in a row (each waits longer before the next)", internal=True)] = 0
    """The fire's latest attempts that never left their node, in a row: the next waits 200 ms doubled
    for each, at most 5 s (docs/architecture.md#not-sent). Such an attempt is free (``free_attempts``)."""
    waiting: Annotated[
        bool, rule("overlap allow, catchup all: its own occurrence waits for one of those running to end", internal=True)
    ] = False
    """Set by a ``Dispatched`` entry (``catchup_waits``) that found ``MAX_RUNNING`` running: catchup
    all fires every instant, so the occurrence waits for a slot (:attr:`held`) rather than being
    skipped; cleared when it starts or one of them ends (docs/architecture.md#overlap)."""
    resumed_ms: Annotated[
        int | None, rule("resume_from now of a periodic occurrence paused mid-retry: instants before it are dropped",
                         internal=True)
    ] = None
    """Set by a ``ResumeTasks`` entry with ``drops_paused``: when the occurrence ends, its next one is
    the first instant at or after this time, whatever ``catchup`` and ``overlap`` say of the instants
    that came due while it was paused; cleared when the next occurrence starts."""
    ack_from_ms: Annotated[
        int | None, rule("When the task's wait for its next ACK probe began (a 2xx, a failed probe)", internal=True)
    ] = None
    """Set by a ``Results`` entry with ``ack_from`` whose result makes the task wait for an ACK probe
    (its callback's 2xx, a failed probe): a resume after a pause in the ACK phase sends the probe no
    sooner than ``ack_delay_ms`` after it (docs/api.md#post-apiv1taskstask_idresume)."""

    @property
    def fire_id(self) -> str:
        return f"{self.id}-{self.seq}"

    @property
    def namespace(self) -> str:
        """The namespace the task belongs to (its definition's; it never changes)."""
        return self.spec.namespace

    @property
    def held(self) -> bool:
        """Its own occurrence waits for one of ``MAX_RUNNING`` running ones to end: it would run in
        the task's own slot beside them (a backfilled or redriven one, or any once the task is no
        longer allow), not join them, so starting it would make one more than ``MAX_RUNNING``; or
        it would join them, but catchup all fires every instant, so it waits (:attr:`waiting`)."""
        return len(self.running) >= MAX_RUNNING and (self.waiting or not (
            self.spec.overlap is Overlap.ALLOW and self.rewound is None and self.backfill is None
        ))

    @property
    def wake_ms(self) -> int | None:
        """When the task next has something to fire (its own occurrence, unless :attr:`held`, or a
        running one's retry): the key of the ``due`` index and the timing wheel."""
        if not self.running:  # the common case: nothing running, so not held either
            return self.due_ms
        due = None if self.held else self.due_ms
        for r in self.running:
            if r.due_ms is not None and (due is None or r.due_ms < due):
                due = r.due_ms
        return due

    def next_action(self) -> tuple[str, int, int] | None:
        """``(fire id, attempt, due_ms)`` of what fires next: a running occurrence's retry or the
        task's own occurrence, the earliest first; None when nothing is due to be planned."""
        actions = self.actions()
        return actions[0] if actions else None

    def actions(self, due_by: int | None = None) -> list[tuple[str, int, int]]:
        """Every ``(fire id, attempt, due_ms)`` the task has to plan (due by ``due_by`` when given),
        earliest first, the task's own occurrence first on a tie: with ``overlap`` allow several at once."""
        out: list[tuple[str, int, int]] = []
        if self.due_ms is not None and self.inflight is None and not self.held:
            if self.status is Status.AWAITING_ACK:
                out.append((self.fire_id, self.ack_attempt + 1, self.due_ms))
            elif self.status in (Status.PENDING, Status.FIRING):
                out.append((self.fire_id, self.attempt + 1, self.due_ms))
        for r in self.running:
            if r.due_ms is not None and not r.inflight:
                out.append((r.fire_id(self.id), r.attempt + 1, r.due_ms))
        if due_by is not None:
            out = [a for a in out if a[2] <= due_by]
        if len(out) > 1:
            out.sort(key=lambda a: a[2])  # stable: the task's own first on a tie
        return out

    def to_json(self) -> dict[str, Any]:
        """The JSON object the REST API returns, as Python values (times are epoch ms)."""
        out: dict[str, Any] = msgspec.json.decode(task_json(self))
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Task:
        """Inverse of :meth:`to_json` (internal fields: ``sched_ms`` from ``sched_at`` or the next
        run, ``inflight`` none)."""
        return _from_view(cls, d)


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """A record the API shows as it is: its JSON object (:meth:`to_json`) and its OpenAPI schema
    (:func:`record_schema`) are its fields in order, under their JSON names (``msgspec.field(name=...)``),
    each described by its :func:`rule`."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object the REST API returns, as Python values (enums as their values)."""
        out = msgspec.to_builtins(self)
        if isinstance(out, list):  # an array_like record: its values by position
            return dict(zip(_json_names(type(self)), out, strict=True))
        return cast(dict[str, Any], out)


class Execution(Record, frozen=True, kw_only=True):
    """One HTTP attempt (callback or ACK probe) as recorded in the history (an event's row too)."""

    id: Annotated[int | None, rule("", nullable=False)] = None
    """History row id (assigned by the history database; ``None`` before insert, so never null in an answer)."""
    task_id: str
    fire_id: str
    seq: int
    attempt: int
    kind: FireKind
    result: ExecutionResult
    status_code: int | None
    latency_ms: Annotated[int | None, rule("Request sent -> answer read, on the worker (null: no answer)")]
    worker: Annotated[str, rule("Node id of the worker that made the request (empty for events)")]
    url: str
    scene: str
    fired_ms: Annotated[
        int,
        rule("Epoch ms the leader handed the fire to a worker: up to scheduler.dispatch_lead_ms before its due "
             "time, at which the request leaves (events: when it was recorded)"),
    ] = msgspec.field(name="fired_at")
    finished_ms: Annotated[int, rule("Epoch ms the result was recorded")] = msgspec.field(name="finished_at")
    response_head: Annotated[
        str | None, rule("The response's first 512 bytes (events: what happened)")
    ] = msgspec.field(default=None, name="execution_result")


class DeadLetter(Record, frozen=True, array_like=True, kw_only=True):
    """An occurrence that failed for good (docs/architecture.md#dead-letters), replicated (stored by
    position: the JSON names are the API's only)."""

    id: str
    """``{fire_id}.{attempt}`` (``.ack{n}`` for an ACK phase): one per attempt that ended an occurrence."""
    task_id: str
    fire_id: Annotated[str, rule("X-Fire-ID of the occurrence (a redrive sends it again)")]
    seq: int
    kind: FailureKind
    attempts: Annotated[int, rule("Attempts made (ACK probes for ack_failed)")]
    status_code: int | None
    response_head: str | None
    at_ms: Annotated[int, rule("When the occurrence failed for good (epoch ms)")] = msgspec.field(name="at")
    flow: str
    scene: str
    url: str
    reliability: Reliability
    sched_ms: Annotated[
        int, rule("The occurrence's nominal instant (X-Molens-Scheduled-At)")
    ] = msgspec.field(name="scheduled_at")
    result: ExecutionResult
    namespace: Annotated[str, rule("Its task's namespace")] = DEFAULT_NAMESPACE
    """Its task's (dead letters written before namespaces existed read as ``default``)."""


class Notice(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """One failure notification waiting in the replicated outbox until its target acknowledged it."""

    id: str
    """Deterministic (the same on every replica), so a receiver can de-duplicate redeliveries."""
    type: NoticeType
    task_id: str
    fire_id: str
    at_ms: int
    detail: str
    url: str
    traceparent: str | None = None
    """The task's ``traceparent``: the notification's POST joins its trace."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type.value, "task_id": self.task_id or None,
                "fire_id": self.fire_id or None, "at": self.at_ms, "detail": self.detail}


# -------------------------------------------------------------------------------------------------
# derivations


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _split(hint: Any) -> tuple[Any, dict[str, Any], str]:
    """``(bare type, rule extra, description)`` of an ``Annotated[T, rule(...)]`` hint."""
    if typing.get_origin(hint) is Annotated:
        bare, *metas = typing.get_args(hint)
        extra: dict[str, Any] = {}
        desc = ""
        for m in metas:
            if isinstance(m, msgspec.Meta):
                extra.update(m.extra or {})
                desc = m.description or desc
        return bare, extra, desc
    return hint, {}, ""


def _non_null(t: Any) -> Any:
    """``T`` of ``T | None``; ``t`` itself otherwise."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return args[0] if len(args) == 1 else t
    return t


def _bound(v: int | str | None, limits: Any) -> int | None:
    return getattr(limits, v) if isinstance(v, str) else v


@functools.cache
def create_type(limits: Any, spec_type: type[TaskSpec] = TaskSpec) -> type[msgspec.Struct]:
    """The create request for a node with ``limits``: every ``spec_type`` field under its JSON
    name, nullable, with its bounds; unknown fields refused."""
    return _request_type(limits, spec_type, "TaskCreate")


@functools.cache
def _request_type(limits: Any, cls: type[msgspec.Struct], name: str) -> type[msgspec.Struct]:
    """``cls`` as a request: its fields nullable and bounded; a nested Struct field the same way."""
    fields: list[tuple[str, Any, Any]] = []
    hints = _hints(cls)
    for f in msgspec.structs.fields(cls):
        bare, extra, desc = _split(hints[f.name])
        inner = _non_null(bare)
        if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
            sub = _request_type(limits, inner, f"{inner.__name__}Create")
            fields.append((f.encode_name, Annotated[sub | None, msgspec.Meta(description=desc)], None))
            continue
        if inner is bytes:
            raw_t: Any = Annotated[msgspec.Raw | msgspec.UnsetType, msgspec.Meta(description=desc)]
            fields.append((f.encode_name, raw_t, msgspec.UNSET))
            continue
        cons: dict[str, Any] = {}
        for k in ("ge", "le", "min_length", "max_length"):
            v = extra.get(k)
            if v is not None:
                cons[k] = _bound(v, limits)
        shown: dict[str, Any] = {}
        if "pattern" in extra:
            if extra.get("pattern_per_value"):  # per_value_patterns: matched by resolve_create
                shown["pattern"] = extra["pattern"]
            else:
                cons["pattern"] = python_pattern(extra["pattern"])  # openapi_components shows the declared one
        required = f.required
        if "format" in extra:
            shown["format"] = extra["format"]
        if shown:
            cons["extra_json_schema"] = shown
        bounded: Any = Annotated[inner, msgspec.Meta(**cons)] if cons else inner
        typ: Any = Annotated[bounded if required else bounded | None, msgspec.Meta(description=desc)]
        fields.append((f.encode_name, typ, msgspec.NODEFAULT if required else None))
    return msgspec.defstruct(
        name, fields, forbid_unknown_fields=True, frozen=True, kw_only=True,
        module=__name__,
    )


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


@functools.cache
def _json_names(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(f.encode_name for f in msgspec.structs.fields(cls))


_JSON_TYPES = {str: "string", int: "integer", bool: "boolean"}


def record_schema(cls: type[Record], *, closed: bool = False) -> dict[str, Any]:
    """The OpenAPI schema of a :class:`Record`: every field required, under its JSON name, in order;
    an enum inline (its values in declaration order), ``T | None`` as ``type: [T, "null"]`` (unless
    its rule says ``nullable=False``), the rule's description after the type. ``closed`` adds
    ``additionalProperties: false``."""
    hints = _hints(cls)
    props: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        bare, extra, desc = _split(hints[f.name])
        inner = _non_null(bare)
        p: dict[str, Any]
        if isinstance(inner, type) and issubclass(inner, enum.Enum):
            p = {"type": "string", "enum": [e.value for e in inner]}
        elif inner is not bare and extra.get("nullable", True):
            p = {"type": [_JSON_TYPES[inner], "null"]}
        else:
            p = {"type": _JSON_TYPES[inner]}
        if desc:
            p["description"] = desc
        props[f.encode_name] = p
    out: dict[str, Any] = {"type": "object", "required": list(props)}
    if closed:
        out["additionalProperties"] = False
    out["properties"] = props
    return out


@functools.cache
def spec_fields(spec_type: type[TaskSpec] = TaskSpec) -> tuple[msgspec.structs.FieldInfo, ...]:
    return msgspec.structs.fields(spec_type)


@functools.cache
def per_value_patterns(spec_type: type[TaskSpec] = TaskSpec) -> tuple[tuple[str, re.Pattern[str], str], ...]:
    """``(JSON name, regex, declared pattern)`` of each field whose rule says ``pattern_per_value``:
    the create request's decoder leaves these to :func:`molens.model.resolve_create`, which a batch
    calls once per distinct shape of its tasks."""
    hints = _hints(spec_type)
    out = []
    for f in msgspec.structs.fields(spec_type):
        extra = _split(hints[f.name])[1]
        if extra.get("pattern_per_value"):
            out.append((f.encode_name, re.compile(python_pattern(extra["pattern"])), extra["pattern"]))
    return tuple(out)


@functools.cache
def spec_defaults(limits: Any, spec_type: type[TaskSpec] = TaskSpec) -> dict[str, Any]:
    """Each ``spec_type`` field's value when a request leaves it out (``Limits`` defaults applied).
    Cached: the caller copies it."""
    out: dict[str, Any] = {}
    hints = _hints(spec_type)
    for f in msgspec.structs.fields(spec_type):
        _, extra, _ = _split(hints[f.name])
        if extra.get("default", "rule") != "rule":
            out[f.name] = getattr(limits, extra["default"])
        elif f.default is not msgspec.NODEFAULT:
            out[f.name] = f.default
    return out


@functools.cache
def rule_defaulted(spec_type: type[TaskSpec] = TaskSpec) -> frozenset[str]:
    """Names of the fields whose default a rule of :func:`molens.model.validate_create` decides
    (``default="rule"``, e.g. ``max_fails``)."""
    hints = _hints(spec_type)
    return frozenset(
        f.name for f in msgspec.structs.fields(spec_type) if _split(hints[f.name])[1].get("default") == "rule"
    )


class _View:
    """The JSON object of a ``task_type``: its fields, and one getter that reads them all.

    The getter picks the values out of the task's fields and its flattened struct's fields as
    tuples (``msgspec.structs.astuple``): a dotted attrgetter of the same paths cost twice the
    whole render, and a batch create renders every task it made."""

    def __init__(self, task_type: type[Task]) -> None:
        hints = _hints(task_type)
        fields: list[tuple[str, Any]] = []
        picks: list[int] = []
        self._raw: list[int] = []
        self._parts: list[str] = []
        self._views: list[tuple[int, str, str]] = []
        offset = len(msgspec.structs.fields(task_type))
        for pos, f in enumerate(msgspec.structs.fields(task_type)):
            bare, extra, desc = _split(hints[f.name])
            if extra.get("internal"):
                continue
            if isinstance(bare, type) and issubclass(bare, msgspec.Struct):  # the spec, flattened
                shints = _hints(bare)
                self._parts.append(f.name)
                for spos, sf in enumerate(msgspec.structs.fields(bare)):
                    sbare, sextra, sdesc = _split(shints[sf.name])
                    if sextra.get("internal"):
                        continue
                    if _non_null(sbare) is bytes:
                        self._raw.append(len(fields))
                        sbare = Any
                    if "view" in sextra:
                        sbare = _non_null(sbare)
                        self._views.append((len(fields), f.name, sextra["view"]))
                    fields.append((sf.encode_name, Annotated[sbare, msgspec.Meta(description=sdesc)]))
                    picks.append(offset + spos)
                offset += len(msgspec.structs.fields(bare))
                continue
            fields.append((f.encode_name, Annotated[bare, msgspec.Meta(description=desc)]))
            picks.append(pos)
        self.type: type[msgspec.Struct] = msgspec.defstruct("Task", fields, module=__name__)
        self._pick = operator.itemgetter(*picks)

    def render(self, t: Task) -> msgspec.Struct:
        vals = msgspec.structs.astuple(t)
        for part in self._parts:
            vals += msgspec.structs.astuple(getattr(t, part))
        v = list(self._pick(vals))
        for i, part, name in self._views:
            v[i] = getattr(getattr(t, part), name)
        for i in self._raw:
            v[i] = msgspec.Raw(v[i])
        return self.type(*v)


@functools.cache
def view(task_type: type[Task] = Task) -> _View:
    return _View(task_type)


def view_type(task_type: type[Task] = Task) -> type[msgspec.Struct]:
    """The JSON object of a task (what GET /tasks/{id} returns)."""
    return view(task_type).type


_DEFAULT_PORTS = {"http": 80, "https": 443}


@functools.lru_cache(maxsize=4096)
def url_flow(url: str) -> str:
    """The default flow of a callback URL: its ``host:port``, host lower-cased, default port filled in
    (``https://API.example.com/x`` -> ``api.example.com:443``; an IPv6 host keeps its brackets)."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme.lower(), 0)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def flow_of(spec: TaskSpec) -> str:
    """The flow as the task names it: its ``flow_key``, else the callback URL's ``host:port`` (what a
    dead letter records; the flow its fires count against is :func:`flow_id`)."""
    return spec.flow_key if spec.flow_key is not None else url_flow(spec.callback_url)


def flow_id(spec: TaskSpec) -> str:
    """The key of the flow a task's fires count against (docs/api.md#flows): the callback URL's
    ``host:port`` (every namespace's tasks to that receiver share it: its capacity is one); a
    ``flow_key`` of the default namespace as it is; a ``flow_key`` of another namespace is that
    namespace's alone, ``<namespace>~<flow_key>``, so a writer of one namespace cannot put its tasks
    (and its receiver's ``Retry-After``) in a flow of another's.

    >>> spec = TaskSpec(type=TaskType.DELAYED, callback_url="https://API.example.com/hook", interval_ms=1)
    >>> flow_id(spec), flow_id(msgspec.structs.replace(spec, flow_key="batch"))
    ('api.example.com:443', 'batch')
    >>> flow_id(msgspec.structs.replace(spec, flow_key="batch", namespace="payments"))
    'payments~batch'
    """
    if spec.flow_key is None:
        return url_flow(spec.callback_url)
    if spec.namespace == DEFAULT_NAMESPACE:
        return spec.flow_key
    return f"{spec.namespace}{FLOW_NAMESPACE_SEPARATOR}{spec.flow_key}"


_JSON = msgspec.json.Encoder()


def task_json(t: Task) -> bytes:
    """The task's JSON object (compact UTF-8, the stored payload bytes spliced in)."""
    return _JSON.encode(view(type(t)).render(t))


def tasks_json(tasks: Sequence[Task | None]) -> bytes:
    """``[task_json(t) or null, ...]`` as one JSON array."""
    return _JSON.encode([None if t is None else view(type(t)).render(t) for t in tasks])


def _from_view(cls: type[Task], d: dict[str, Any]) -> Task:
    hints = _hints(cls)
    spec_cls = _hints(cls)["spec"]
    spec_kw = {}
    for sf in msgspec.structs.fields(spec_cls):
        v = d[sf.encode_name]
        spec_kw[sf.name] = msgspec.json.encode(v) if _non_null(_split(_hints(spec_cls)[sf.name])[0]) is bytes else v
    kw: dict[str, Any] = {"spec": _convert(spec_kw, spec_cls)}
    for f in msgspec.structs.fields(cls):
        if f.name == "spec" or _split(hints[f.name])[1].get("internal"):
            continue
        kw[f.name] = d[f.encode_name]
    kw["sched_ms"] = d.get("sched_at", d["next_run_at"] or d["created_at"])
    task: Task = _convert(kw, cls)
    return task


def _convert(kw: dict[str, Any], cls: type[Any]) -> Any:
    """``cls`` (an ``array_like`` Struct) from field values by name, types checked."""
    return msgspec.convert([kw.get(f.name, f.default) for f in msgspec.structs.fields(cls)], cls)


def openapi_components(
    limits: Any, spec_type: type[TaskSpec] = TaskSpec, task_type: type[Task] = Task, zones: Sequence[str] = (),
) -> dict[str, Any]:
    """JSON Schema of ``TaskCreate`` and ``Task`` (refs as ``#/components/schemas/{name}``); a
    request field's ``default`` is the value a node with ``limits`` uses when it is left out.
    ``zones``, when given, are the time zones a request's ``timezone`` may name (as a pattern: client
    generators make an identifier of each enum value, and GMT+0 and GMT0 collide)."""
    (_, _), comps = msgspec.json.schema_components(
        [create_type(limits, spec_type), view_type(task_type)], ref_template="#/components/schemas/{name}"
    )
    _declared_patterns(comps)
    for comp in comps.values():  # tuple defaults of nested policies as JSON arrays
        for p in comp.get("properties", {}).values():
            if isinstance(p.get("default"), tuple):
                p["default"] = list(p["default"])
    props = comps["TaskCreate"]["properties"]
    defaults = spec_defaults(limits, spec_type)
    for f in msgspec.structs.fields(spec_type):
        p = props[f.encode_name]
        p.pop("default", None)
        d = defaults.get(f.name)
        by_rule = _split(_hints(spec_type)[f.name])[1].get("default") == "rule"
        if d is not None and not f.required and not isinstance(d, bytes) and not by_rule:
            p["default"] = _plain(d)
    if zones:
        alts = "|".join(re.escape(z).replace("\\-", "-").replace("\\/", "/") for z in sorted(zones))
        tz = props["timezone"]
        tz["anyOf"] = [{"type": "string", "pattern": f"^({alts})$"} if a.get("type") == "string" else a
                       for a in tz["anyOf"]]
    comps["TaskCreate"]["allOf"] = between_fields(limits, spec_type=spec_type)
    retry = comps.get("RetryPolicyCreate")
    if retry is not None:  # the node's own default policy, field by field (scheduler.retry)
        node = msgspec.structs.replace(limits.default_retry, max_retries=limits.default_max_retries)
        for name, p in retry["properties"].items():
            v = getattr(node, name)
            p["default"] = list(v) if isinstance(v, tuple) else _plain(v)
            if name == "non_retryable_statuses":  # the rule between fields (model._resolve_retry)
                p["anyOf"][0]["items"] = {"type": "integer", "minimum": 300, "maximum": 599}
    return comps


def _nulls(*names: str) -> dict[str, Any]:
    """Each of ``names`` absent or null (null is absent in a request)."""
    return {"properties": {n: {"type": "null"} for n in names}}


def between_fields(limits: Any, *, patch: bool = False, spec_type: type[TaskSpec] = TaskSpec) -> list[dict[str, Any]]:
    """The rules between a task's fields (:data:`SCHEDULES`, :data:`PERIODIC_ONLY`,
    :data:`ACK_RELIABILITY`, ``limits.min_period_ms``, a ``traceparent`` with a zero id, as
    :func:`molens.model.resolve_create` checks them) as JSON Schema, for an ``allOf`` of the create
    request; with ``patch``, of a merge patch: there a rule that needs the stored definition (the
    type when the patch does not give it, a schedule field it keeps) is left to the server. Left to
    the server too: ``max_retries`` equal to ``retry.max_retries`` when both are given (JSON Schema
    compares a value with constants only, and one branch per value makes the schema too large for
    generators to combine with the type's branches).

    Example: ``{"type": "delayed", "interval_ms": 1000, "overlap": "allow"}`` fails the delayed
    branch (``overlap`` must be ``skip`` or null); ``{"type": "periodic", "cron_expr": "* * * * *"}``
    passes the periodic one."""
    hints = _hints(spec_type)
    json_type = {int: "integer", str: "string"}

    def own(name: str) -> dict[str, Any]:  # the field given: its type without null
        return {"type": json_type[_non_null(_split(hints[name])[0])]}

    kinds: list[dict[str, Any]] = []
    for ttype, (a, b) in SCHEDULES.items():
        other = next(k for k in SCHEDULE_FIELDS if k not in (a, b))
        props: dict[str, Any] = {"type": {"const": ttype.value}, other: {"type": "null"}}
        kind: dict[str, Any] = {"required": ["type"], "properties": props}
        a_schema = own(a)
        if ttype is TaskType.PERIODIC:
            a_schema["minimum"] = limits.min_period_ms
            if patch:
                props[a] = {"anyOf": [a_schema, {"type": "null"}]}
        else:
            props.update({k: {"enum": [None] if v is None else [_plain(v), None]} for k, v in PERIODIC_ONLY.items()})
            kind["anyOf"] = [{"properties": {"reliability": {"enum": [_plain(ACK_RELIABILITY), None]}}},
                             _nulls("ack_url")]
        if not patch:
            kind["oneOf"] = [
                {"required": [a], "properties": {a: a_schema, b: {"type": "null"}}},
                {"required": [b], "properties": {b: own(b), a: {"type": "null"}}},
            ]
        kinds.append(kind)
    if patch:
        kinds.append({"not": {"required": ["type"]}})
    rules: list[dict[str, Any]] = [{"oneOf": kinds}]
    if patch:  # one schedule field replaces the schedule: two of them are two schedules, whatever the type
        rules.append({"anyOf": [_nulls(x, y) for i, x in enumerate(SCHEDULE_FIELDS) for y in SCHEDULE_FIELDS[i + 1:]]})
    rules.append({"properties": {"traceparent": {"not": {"type": "string", "pattern": ZERO_TRACEPARENT}}}})
    return rules


# -------------------------------------------------------------------------------------------------
# msgspec's errors, as the API's


_FIELDS_AS_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _whole(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [_whole(x) for x in v]
    if isinstance(v, dict):
        return {k: _whole(x) for k, x in v.items()}
    return v


def whole_numbers(body: bytes, keep: frozenset[str] = frozenset({"payload"})) -> bytes | None:
    """``body`` (a JSON object) with every whole-number float outside the fields ``keep`` written as an
    integer (``1000.0`` -> ``1000``), or None when it holds none or is not an object. JSON has one
    number type and JSON Schema counts ``1000.0`` as an integer, so an integer field accepts it; the
    decoders are strict, so a body they refused for a float is rewritten and decoded once more.
    ``keep`` names fields kept as sent (a task's payload reaches the receiver byte for byte)."""
    try:
        fields = _FIELDS_AS_RAW.decode(body)
    except msgspec.MsgspecError:
        return None
    changed = False
    for k, raw in fields.items():
        text = bytes(raw)
        if k in keep or (b"." not in text and b"e" not in text and b"E" not in text):
            continue
        v = msgspec.json.decode(text)
        w = _whole(v)
        if repr(w) != repr(v):
            fields[k] = msgspec.Raw(msgspec.json.encode(w))
            changed = True
    return msgspec.json.encode(fields) if changed else None


_AT = re.compile(r" - at `\$(?:\[\d+\])?\.?(?P<path>[^`]*)`$")
_TYPE_NAMES = {"int": "an integer", "str": "a string", "float": "a number", "bool": "a boolean",
               "null": "null", "array": "an array", "object": "an object"}


def _kind(spec: str) -> str:
    names = [_TYPE_NAMES.get(p.strip(), p.strip()) for p in spec.split("|") if p.strip() != "null"]
    return " or ".join(names) or "null"


def request_error(
    exc: msgspec.MsgspecError, limits: Any, spec_type: type[TaskSpec] = TaskSpec, *, whole_body: bool = True
) -> ValidationError:
    """The :class:`ValidationError` (naming the field) for a create request msgspec refused;
    ``whole_body`` False for one item of a batch (an item that is not an object names no field)."""
    msg = str(exc)
    if not isinstance(exc, msgspec.ValidationError):  # malformed JSON (ValidationError subclasses DecodeError)
        if "truncated" in msg:
            msg = "truncated, or a string holds a lone UTF-16 surrogate"
        return ValidationError(f"request body is not valid JSON: {msg}", "body")
    m = _AT.search(msg)
    field = m.group("path") if m else None
    what = msg[: m.start()] if m else msg
    if mm := re.fullmatch(r"Object contains unknown field `(.*)`", what, re.S):
        name = f"{field}.{mm.group(1)}" if field else mm.group(1)
        return ValidationError(f"unknown field {name!r}", name)
    if mm := re.fullmatch(r"Object missing required field `(.*)`", what, re.S):
        return ValidationError(f"{mm.group(1)} is required", mm.group(1))
    if field is None:
        if mm := re.fullmatch(r"Expected `object`, got `(\w+)`", what):
            got = _TYPE_NAMES.get(mm.group(1), mm.group(1)).split(" ")[-1]
            if not whole_body:
                return ValidationError(f"a task must be a JSON object, got {got}", None)
            return ValidationError(f"the body must be a JSON object (one task), got {got}", "body")
        return ValidationError(what, None)
    if mm := re.fullmatch(r"Expected `([^`]*)`, got `(\w+)`", what):
        got = _TYPE_NAMES.get(mm.group(2), mm.group(2)).split(" ")[-1]
        return ValidationError(f"{field} must be {_kind(mm.group(1))}, got {got}", field)
    owner: Any = spec_type
    leaf = field
    if "." in field:  # a nested policy's field: retry.max_retries
        head, _, leaf = field.partition(".")
        f = next((f for f in msgspec.structs.fields(spec_type) if f.encode_name == head), None)
        nested = _non_null(_split(_hints(spec_type)[f.name])[0]) if f is not None else None
        owner = nested if isinstance(nested, type) and issubclass(nested, msgspec.Struct) else None
    if owner is None:
        return ValidationError(f"{field}: {what}", field)
    if what.startswith("Invalid enum value"):
        f = next((f for f in msgspec.structs.fields(owner) if f.encode_name == leaf), None)
        if f is not None:
            bare = _non_null(_split(_hints(owner)[f.name])[0])
            if isinstance(bare, type) and issubclass(bare, enum.Enum):
                allowed = " or ".join(repr(e.value) for e in bare)
                return ValidationError(f"{field} must be {allowed}", field)
    for f in msgspec.structs.fields(owner):
        if f.encode_name != leaf:
            continue
        _, extra, _ = _split(_hints(owner)[f.name])
        if "pattern" in extra and "regex" in what:
            return ValidationError(f"{field} must match {extra['pattern'].strip('^$')}", field)
        if "length" in what:
            lo, hi = extra.get("min_length", 0), _bound(extra.get("max_length"), limits)
            if hi is None:
                return ValidationError(f"{field} must be at least {lo} characters", field)
            unit = "items" if "Array" in what else "characters"
            return ValidationError(f"{field} must be {lo}..{hi} {unit}", field)
        if "ge" in extra or "le" in extra:
            lo, hi = extra.get("ge"), _bound(extra.get("le"), limits)
            rng = f"{lo}..{hi}" if lo is not None and hi is not None else (f">= {lo}" if lo is not None else f"<= {hi}")
            return ValidationError(f"{field} must be in {rng}", field)
    return ValidationError(f"{field}: {what}", field)


__all__ = [
    "per_value_patterns",
    "ACK_RELIABILITY",
    "DEFAULT_NAMESPACE",
    "DEFAULT_RETRY",
    "PERIODIC_ONLY",
    "SCHEDULES",
    "SCHEDULE_FIELDS",
    "FLOW_ID_PATTERN",
    "FLOW_KEY_PATTERN",
    "FLOW_NAMESPACE_SEPARATOR",
    "NAMESPACE_PATTERN",
    "SCENE_PATTERN",
    "python_pattern",
    "FORMAT",
    "MAX_RUNNING",
    "Backoff",
    "Backfill",
    "CatchUp",
    "DeadLetter",
    "Execution",
    "FailureKind",
    "Notice",
    "NoticeType",
    "ExecutionResult",
    "FireKind",
    "Overlap",
    "Outcome",
    "Record",
    "Reliability",
    "RetryJitter",
    "RetryPolicy",
    "Running",
    "Status",
    "Task",
    "TaskSpec",
    "TaskType",
    "between_fields",
    "create_type",
    "flow_id",
    "flow_of",
    "openapi_components",
    "record_schema",
    "url_flow",
    "request_error",
    "rule",
    "rule_defaulted",
    "spec_defaults",
    "task_json",
    "tasks_json",
    "view",
    "view_type",
]
