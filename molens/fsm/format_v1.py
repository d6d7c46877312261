"""Reading data format 1: the hand-written msgpack lists the previous version wrote.

Format 1 packed a command as ``[tag 0..8, now_ms, ...fields]`` and a task record as
``[spec_list, status index, ...]``, enums as their index in declaration order. A node of this
version still decodes the Raft entries of format 1 (:func:`decode_command`) and migrates a task
store of format 1 when it opens it (:func:`task_from_bytes`, used by ``TaskStore``). Nothing
writes format 1 any more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from molens.fsm.commands import (
    Command,
    CommandCodecError,
    CreateItem,
    CreateTasks,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    ExpireItem,
    PauseTasks,
    PutMeta,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
)
from molens.schema import ExecutionResult, FireKind, Outcome, Reliability, Status, Task, TaskSpec, TaskType

# the enums' member order when format 1 was written (indexes into these tuples)
_TYPES = (TaskType.DELAYED, TaskType.PERIODIC)
_RELS = (Reliability.AT_LEAST_ONCE, Reliability.AT_MOST_ONCE)
_KINDS = (FireKind.CALLBACK, FireKind.ACK)
_OUTCOMES = (Outcome.RESPONSE, Outcome.TIMEOUT, Outcome.NETWORK_ERROR, Outcome.LOST)
_STATUSES = (
    Status.PENDING, Status.FIRING, Status.AWAITING_ACK, Status.PAUSED, Status.DONE, Status.FAILED, Status.INACTIVE,
)
_RESULTS = (
    ExecutionResult.SUCCESS, ExecutionResult.FAILED, ExecutionResult.TIMEOUT, ExecutionResult.NETWORK_ERROR,
    ExecutionResult.NOT_FOUND, ExecutionResult.LOST, ExecutionResult.UNKNOWN, ExecutionResult.ACK_SUCCESS,
    ExecutionResult.ACK_FAILED,
)


_SPEC_FIELDS = (
    "type", "callback_url", "interval_ms", "run_at", "cron_expr", "timezone", "ack_url", "ack_delay_ms",
    "payload_json", "scene", "timeout_ms", "max_retries", "max_fails", "reliability", "idempotency_key",
)
"""A spec list's fields, by position."""
_TASK_FIELDS = (
    "status", "created_ms", "updated_ms", "due_ms", "sched_ms", "seq", "attempt", "ack_attempt", "fail_count",
    "inflight", "last_result", "last_status_code", "last_response", "last_fire_ms",
)
"""A task record's fields after its spec list, by position."""
_ENUMS: dict[str, Callable[[Any], Any]] = {
    "type": _TYPES.__getitem__, "reliability": _RELS.__getitem__, "status": _STATUSES.__getitem__,
    "last_result": lambda i: None if i is None else _RESULTS[i],
}
"""The fields written as an enum's index: the member of an index."""


def _fields(names: tuple[str, ...], v: list[Any]) -> dict[str, Any]:
    """``names[i]``: ``v[i]``, an enum's index as its member (a shorter list is an IndexError)."""
    out = {}
    for i, name in enumerate(names):
        member = _ENUMS.get(name)
        out[name] = v[i] if member is None else member(v[i])
    return out


def spec_from_list(v: list[Any]) -> TaskSpec:
    return TaskSpec(**_fields(_SPEC_FIELDS, v))


def task_from_bytes(tid: str, raw: bytes | memoryview) -> Task:
    """A task record of format 1 (the id is the record's key)."""
    v = msgspec.msgpack.decode(raw)
    return Task(id=tid, spec=spec_from_list(v[0]), **_fields(_TASK_FIELDS, v[1:]))


def decode_command(data: bytes) -> Command:
    """A Raft entry of format 1."""
    try:
        v = msgspec.msgpack.decode(data)
        tag, now = v[0], v[1]
        if tag == 0:
            return CreateTasks(now, tuple(CreateItem(tid, spec_from_list(sl)) for tid, sl in v[2]))
        if tag == 1:
            return DeleteTasks(now, tuple(v[2]))
        if tag == 2:
            return PauseTasks(now, tuple(v[2]))
        if tag == 3:
            return ResumeTasks(now, tuple(v[2]))
        if tag == 4:
            return TriggerTask(now, v[2])
        if tag == 5:
            return Dispatched(now, tuple(DispatchItem(
                fire_id=a, task_id=b, attempt=c, worker=d, deadline_ms=e,
            ) for a, b, c, d, e in v[2]))
        if tag == 6:
            return Results(now, tuple(ResultItem(
                fire_id=a, kind=_KINDS[b], status_code=c, outcome=_OUTCOMES[d], response_head=e,
                latency_ms=f, worker=g, attempt=h,
            ) for a, b, c, d, e, f, g, h in v[2]))
        if tag == 7:
            return Expire(now, tuple(ExpireItem(a, b) for a, b in v[2]))
        if tag == 8:
            return PutMeta(now, v[2], v[3])
    except Exception as e:
        raise CommandCodecError(f"undecodable command of format 1: {e}") from e
    raise CommandCodecError(f"unknown command tag {tag!r}")


__all__ = ["decode_command", "spec_from_list", "task_from_bytes"]
