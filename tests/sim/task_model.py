"""The sequential model of one task record, as the task API answers it.

A record is named by its idempotency key: ``absent``, or one task (its id, ``status`` pending or
paused, ``version``, ``scene``). A delete frees the key, so a later create with it makes a new task
with a new id. Each operation is one API call with the answer it got; :func:`step` says which states
the record may be in after it, given the state before (none: the answer cannot follow that state).

==========  =============================================  ==================================
call        answer                                         needs / does
==========  =============================================  ==================================
create      ``201`` the new task                           absent -> pending, version 1
create      ``200`` the task the key names                 that task, unchanged
get         ``200`` the fields / ``404``                   those fields / absent or another id
patch       ``200`` version v+1 (``If-Match: v``)          the task at version v -> v+1, scene
patch       ``412``                                        the task at another version
pause       ``200`` paused / ``409``                       pending -> paused / already paused
resume      ``200`` pending / ``409``                      paused -> pending / already pending
delete      ``200`` the task as it was                     the task -> absent
any write   ``404``                                        absent, or the key names another id
==========  =============================================  ==================================

An operation whose outcome is unknown (timeout, cut connection, ``503 outcome_unknown``) is modelled
by its effect had it succeeded; the search may also leave it out (it never happened). An unknown
create may have made a task whose id nobody was told: its id is one of ``candidates`` (ids the
history shows for this key that no acknowledged create made), or :data:`UNSEEN`.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, field


class Call(enum.StrEnum):
    CREATE = "create"
    GET = "get"
    PATCH = "patch"
    DELETE = "delete"
    PAUSE = "pause"
    RESUME = "resume"


class Outcome(enum.StrEnum):
    """``ok``: a 2xx answer (or a read's 404). ``fail``: a definite refusal; with ``code`` 404, 409
    or 412 it still says something about the record and is checked, any other refusal (307 to the
    leader, ``503 no_leader``, ``507``) changed nothing and constrains nothing. ``unknown``: may have
    taken effect, or not."""

    PENDING = "pending"
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"


INFORMATIVE_REFUSALS = frozenset({404, 409, 412})

UNSEEN = "?"
"""The id of a task an unknown create made that no answer ever named."""


@dataclass(frozen=True, slots=True)
class Seen:
    """The fields of a task an answer showed."""

    status: str
    version: int
    scene: str


@dataclass(frozen=True, slots=True)
class Rec:
    """A task present under the key."""

    task_id: str
    status: str
    version: int
    scene: str

    def seen(self) -> Seen:
        return Seen(self.status, self.version, self.scene)


State = Rec | None


@dataclass(slots=True)
class TaskOp:
    """One API call of a recorded history; times in any one monotonic clock (ns)."""

    op_id: int
    key: str
    """The idempotency key: which record."""
    call: Call
    invoke: int
    resp: int | None = None
    outcome: Outcome = Outcome.PENDING
    node: str = ""
    task_id: str | None = None
    """The id the call targets, or (create) the id its answer named."""
    if_match: int | None = None
    scene: str | None = None
    """The scene a create or patch sent."""
    code: int | None = None
    """The HTTP status answered (None: no answer)."""
    seen: Seen | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def checked(self) -> bool:
        """Whether the op constrains the history at all."""
        if self.outcome is Outcome.OK:
            return True
        if self.outcome is Outcome.FAIL:
            return self.code in INFORMATIVE_REFUSALS
        return self.outcome is Outcome.UNKNOWN and self.call is not Call.GET

    @property
    def required(self) -> bool:
        """Whether the op certainly happened, so every linearization must place it."""
        return self.checked and self.outcome is not Outcome.UNKNOWN


def _same(state: State, task_id: str | None) -> bool:
    return state is not None and state.task_id == task_id


def _answers(after: State, op: TaskOp) -> bool:
    return after is not None and (op.seen is None or op.seen == after.seen())


def step(state: State, op: TaskOp, candidates: Collection[str] = ()) -> list[State]:
    """The states the record may be in after ``op`` from ``state`` (empty: impossible there)."""
    if op.outcome is Outcome.UNKNOWN:
        return _effect(state, op, candidates)
    code = op.code
    if code == 404:
        return [state] if not _same(state, op.task_id) else []
    if op.call is Call.CREATE:
        if code == 201:
            return _effect(state, op, ())
        return [state] if _same(state, op.task_id) and _answers(state, op) else []
    if not _same(state, op.task_id):
        return []
    assert state is not None
    if op.call is Call.GET or (op.call is Call.DELETE and code == 200):
        return ([state] if op.call is Call.GET else [None]) if _answers(state, op) else []
    if code == 412 and op.call is Call.PATCH:
        return [state] if state.version != op.if_match else []
    if code == 409 and op.call in (Call.PAUSE, Call.RESUME):
        already = "paused" if op.call is Call.PAUSE else "pending"
        return [state] if state.status == already else []
    if code == 200:
        return _effect(state, op, ())
    return []


def _effect(state: State, op: TaskOp, candidates: Collection[str]) -> list[State]:
    """The states after ``op`` took effect (its answer, when there was one, matching)."""
    if op.call is Call.CREATE:
        if state is not None:
            return [state] if op.outcome is Outcome.UNKNOWN else []
        scene = op.scene or ""
        ids = [op.task_id] if op.task_id is not None else [*candidates, UNSEEN]
        return [a for tid in ids if _answers(a := Rec(str(tid), "pending", 1, scene), op)]
    if op.call is Call.GET or not _same(state, op.task_id):
        return []
    assert state is not None
    after: State
    if op.call is Call.DELETE:
        return [None]
    if op.call is Call.PATCH:
        if state.version != op.if_match:
            return []
        after = Rec(state.task_id, state.status, state.version + 1, op.scene or "")
    elif op.call is Call.PAUSE:
        if state.status != "pending":
            return []
        after = Rec(state.task_id, "paused", state.version, state.scene)
    else:
        if state.status != "paused":
            return []
        after = Rec(state.task_id, "pending", state.version, state.scene)
    return [after] if _answers(after, op) else []
