"""Reading data format 1: the hand-written msgpack lists the previous version wrote.

Format 1 packed a command as ``[tag 0..8, now_ms, ...fields]`` and a task record as
``[spec_list, status index, ...]``, enums as their index in declaration order. A node of this
version still decodes the Raft entries of format 1 (:func:`decode_command`) and migrates a task
store of format 1 when it opens it (:func:`task_from_bytes`, used by ``TaskStore``). Nothing
writes format 1 any more.
"""

from __future__ import annotations

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


def spec_from_list(v: list[Any]) -> TaskSpec:
    return TaskSpec(
        type=_TYPES[v[0]],
        callback_url=v[1],
        interval_ms=v[2],
        run_at=v[3],
        cron_expr=v[4],
        timezone=v[5],
        ack_url=v[6],
        ack_delay_ms=v[7],
        payload_json=v[8],
        scene=v[9],
        timeout_ms=v[10],
        max_retries=v[11],
        max_fails=v[12],
        reliability=_RELS[v[13]],
        idempotency_key=v[14],
    )


def task_from_bytes(tid: str, raw: bytes | memoryview) -> Task:
    """A task record of format 1 (the id is the record's key)."""
    v = msgspec.msgpack.decode(raw)
    return Task(
        id=tid,
        spec=spec_from_list(v[0]),
        status=_STATUSES[v[1]],
        created_ms=v[2],
        updated_ms=v[3],
        due_ms=v[4],
        sched_ms=v[5],
        seq=v[6],
        attempt=v[7],
        ack_attempt=v[8],
        fail_count=v[9],
        inflight=v[10],
        last_result=None if v[11] is None else _RESULTS[v[11]],
        last_status_code=v[12],
        last_response=v[13],
        last_fire_ms=v[14],
    )


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
