"""Commands of the replicated state machine (docs/architecture.md#state-machine) and their compact msgpack codec.

Every command carries ``now_ms``, stamped by the leader when it proposes, so applying it gives the
same result on every replica. Batch commands carry tuples of small item records. The wire form is
a msgpack array ``[tag, now_ms, ...fields]`` with items as nested arrays (no field names); payloads
travel as their JSON encoding (``TaskSpec.payload_json``, the exact callback body) so any JSON value
(including integers beyond 64 bits) round-trips exactly and is never re-encoded.

Task ids are chosen by the leader before proposing (``model.new_task_id``), never on apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from molens.errors import MolensError
from molens.model import (
    FireKind,
    Outcome,
    Reliability,
    TaskSpec,
    TaskType,
)


class CodecError(MolensError, ValueError):
    """Bytes that do not decode to a known command."""


@dataclass(frozen=True, slots=True)
class CreateItem:
    task_id: str
    spec: TaskSpec


@dataclass(frozen=True, slots=True)
class CreateTasks:
    now_ms: int
    items: tuple[CreateItem, ...]


@dataclass(frozen=True, slots=True)
class DeleteTasks:
    now_ms: int
    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PauseTasks:
    now_ms: int
    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ResumeTasks:
    now_ms: int
    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TriggerTask:
    now_ms: int
    task_id: str


@dataclass(frozen=True, slots=True)
class DispatchItem:
    """The leader's plan to send one HTTP attempt; proposed *before* the fire is sent."""

    fire_id: str
    task_id: str
    attempt: int
    worker: str
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class Dispatched:
    now_ms: int
    items: tuple[DispatchItem, ...]


@dataclass(frozen=True, slots=True)
class ResultItem:
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


@dataclass(frozen=True, slots=True)
class Results:
    now_ms: int
    items: tuple[ResultItem, ...]


@dataclass(frozen=True, slots=True)
class ExpireItem:
    """Delete ``task_id`` if it is still terminal and unchanged since ``updated_ms``."""

    task_id: str
    updated_ms: int


@dataclass(frozen=True, slots=True)
class Expire:
    now_ms: int
    items: tuple[ExpireItem, ...]


@dataclass(frozen=True, slots=True)
class PutMeta:
    """Node metadata (e.g. membership as seen by the FSM); ``value`` None deletes the key."""

    now_ms: int
    key: str
    value: bytes | None


Command = (
    CreateTasks | DeleteTasks | PauseTasks | ResumeTasks | TriggerTask | Dispatched | Results | Expire | PutMeta
)

# -------------------------------------------------------------------------------------------------
# codec

_TYPES = tuple(TaskType)
_RELS = tuple(Reliability)
_KINDS = tuple(FireKind)
_OUTCOMES = tuple(Outcome)
_TYPE_IX = {t: i for i, t in enumerate(_TYPES)}
_REL_IX = {t: i for i, t in enumerate(_RELS)}
_KIND_IX = {t: i for i, t in enumerate(_KINDS)}
_OUTCOME_IX = {t: i for i, t in enumerate(_OUTCOMES)}


def spec_to_list(s: TaskSpec) -> list[Any]:
    return [
        _TYPE_IX[s.type],
        s.callback_url,
        s.interval_ms,
        s.run_at,
        s.cron_expr,
        s.timezone,
        s.ack_url,
        s.ack_delay_ms,
        s.payload_json,
        s.scene,
        s.timeout_ms,
        s.max_retries,
        s.max_fails,
        _REL_IX[s.reliability],
        s.idempotency_key,
    ]


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


_T_CREATE, _T_DELETE, _T_PAUSE, _T_RESUME, _T_TRIGGER, _T_DISPATCHED, _T_RESULTS, _T_EXPIRE, _T_META = range(9)


def encode(cmd: Command) -> bytes:
    """Serialise a command for the Raft log."""
    body: list[Any]
    match cmd:
        case CreateTasks(now, items):
            body = [_T_CREATE, now, [[i.task_id, spec_to_list(i.spec)] for i in items]]
        case DeleteTasks(now, ids):
            body = [_T_DELETE, now, list(ids)]
        case PauseTasks(now, ids):
            body = [_T_PAUSE, now, list(ids)]
        case ResumeTasks(now, ids):
            body = [_T_RESUME, now, list(ids)]
        case TriggerTask(now, tid):
            body = [_T_TRIGGER, now, tid]
        case Dispatched(now, items):
            body = [_T_DISPATCHED, now, [[i.fire_id, i.task_id, i.attempt, i.worker, i.deadline_ms] for i in items]]
        case Results(now, items):
            body = [
                _T_RESULTS,
                now,
                [
                    [
                        i.fire_id,
                        _KIND_IX[i.kind],
                        i.status_code,
                        _OUTCOME_IX[i.outcome],
                        i.response_head,
                        i.latency_ms,
                        i.worker,
                        i.attempt,
                    ]
                    for i in items
                ],
            ]
        case Expire(now, items):
            body = [_T_EXPIRE, now, [[i.task_id, i.updated_ms] for i in items]]
        case PutMeta(now, key, value):
            body = [_T_META, now, key, value]
        case _:
            raise CodecError(f"not a command: {cmd!r}")
    out: bytes = msgpack.packb(body, use_bin_type=True)
    return out


def _create_items(raw: list[Any]) -> tuple[CreateItem, ...]:
    """Create items of one command; items with equal specs share one TaskSpec (batches often
    repeat a spec, and the store encodes a shared spec once)."""
    specs: dict[tuple[Any, ...], TaskSpec] = {}
    items = []
    for tid, sl in raw:
        k = tuple(sl)
        spec = specs.get(k)
        if spec is None:
            spec = specs[k] = spec_from_list(sl)
        items.append(CreateItem(tid, spec))
    return tuple(items)


def decode(data: bytes) -> Command:
    """Inverse of :func:`encode`; raises :class:`CodecError` on anything else."""
    try:
        v = msgpack.unpackb(data, raw=False, use_list=True)
        tag, now = v[0], v[1]
        if tag == _T_CREATE:
            return CreateTasks(now, _create_items(v[2]))
        if tag == _T_DELETE:
            return DeleteTasks(now, tuple(v[2]))
        if tag == _T_PAUSE:
            return PauseTasks(now, tuple(v[2]))
        if tag == _T_RESUME:
            return ResumeTasks(now, tuple(v[2]))
        if tag == _T_TRIGGER:
            return TriggerTask(now, v[2])
        if tag == _T_DISPATCHED:
            return Dispatched(now, tuple(DispatchItem(
                fire_id=a, task_id=b, attempt=c, worker=d, deadline_ms=e,
            ) for a, b, c, d, e in v[2]))
        if tag == _T_RESULTS:
            return Results(
                now,
                tuple(ResultItem(
                    fire_id=a, kind=_KINDS[b], status_code=c, outcome=_OUTCOMES[d], response_head=e,
                    latency_ms=f, worker=g, attempt=h,
                ) for a, b, c, d, e, f, g, h in v[2]),
            )
        if tag == _T_EXPIRE:
            return Expire(now, tuple(ExpireItem(a, b) for a, b in v[2]))
        if tag == _T_META:
            return PutMeta(now, v[2], v[3])
    except CodecError:
        raise
    except Exception as e:
        raise CodecError(f"undecodable command: {e}") from e
    raise CodecError(f"unknown command tag {tag!r}")


__all__ = [
    "CodecError",
    "Command",
    "CreateItem",
    "CreateTasks",
    "DeleteTasks",
    "DispatchItem",
    "Dispatched",
    "Expire",
    "ExpireItem",
    "PauseTasks",
    "PutMeta",
    "ResultItem",
    "Results",
    "ResumeTasks",
    "TriggerTask",
    "decode",
    "encode",
    "spec_from_list",
    "spec_to_list",
]
