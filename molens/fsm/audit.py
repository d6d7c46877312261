"""Audit entries: who changed what (docs/architecture.md#audit-trail), computed when a change applies.

The API wraps what a caller asks for in :class:`~molens.fsm.commands.Audited` (actor and address);
applying it applies the command and, from the state before and after, writes one :class:`AuditEntry`
per target the command changed, in the same store transaction as the change. An item that changed
nothing (a 404, a 409, a create answered by its idempotency key, a patch to the values the task
already has) has no entry, so a client that retries a write whose outcome it did not learn adds no
second entry. Every replica applies
the same entries, so every replica holds the same trail; the store numbers entries by their Raft
index (``"{index}.{n}"``), which no clock can reorder.

``changes`` maps each field that changed to ``{"old": ..., "new": ...}``; payloads and the password
of a URL are elided, so the trail can be shown to anyone allowed to read it. Example: pausing a
pending task gives ``{"status": {"old": "pending", "new": "paused"}, "due_ms": {"old": 1700000060000,
"new": null}}`` (fields by their names in :class:`~molens.schema.TaskSpec` and :class:`~molens.schema.Task`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeGuard
from urllib.parse import urlsplit, urlunsplit

import msgspec

from molens.fsm.commands import (
    Audited,
    AuditedCommand,
    AuditNote,
    AuditStamp,
    BackfillTask,
    CreateTasks,
    DeleteDeadLetters,
    DeleteFlow,
    DeleteTasks,
    FlowSettings,
    PauseTasks,
    PutFlow,
    RedriveDeadLetters,
    ResumeTasks,
    TriggerTask,
    UpdateTask,
)
from molens.model import Task
from molens.schema import DeadLetter

DEFAULT_NAMESPACE = "default"

Changes = dict[str, dict[str, Any]]


class AuditEntry(msgspec.Struct, frozen=True, array_like=True):
    """One change on record. ``id`` is given by the store (``"{raft index}.{n}"``)."""

    at_ms: int
    key_id: str
    name: str
    action: str
    namespace: str
    target: str
    changes: Changes
    remote_addr: str
    id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "at": self.at_ms, "actor": {"key_id": self.key_id, "name": self.name},
            "action": self.action, "namespace": self.namespace, "target": self.target, "changes": self.changes,
            "remote_addr": self.remote_addr,
        }


class Before(Protocol):
    """The state a command started from (the store's transaction before its writes)."""

    def get_task(self, task_id: str) -> Task | None: ...
    def get_flow(self, key: str) -> FlowSettings | None: ...
    def get_dead(self, dead_id: str) -> DeadLetter | None: ...


def namespace_of(obj: object) -> str:
    """The namespace a target belongs to (every object is in ``default`` until objects carry one)."""
    ns = getattr(obj, "namespace", DEFAULT_NAMESPACE)
    return ns if isinstance(ns, str) else DEFAULT_NAMESPACE


def action_of(cmd: AuditedCommand) -> str:
    """The audit action name of a command (``task.pause``, ``flow.put``, ...)."""
    if isinstance(cmd, PutFlow) and cmd.only_paused:
        return "flow.pause" if cmd.settings.paused else "flow.resume"
    return _ACTIONS[type(cmd)]


_ACTIONS: dict[type, str] = {
    CreateTasks: "task.create", UpdateTask: "task.patch", PauseTasks: "task.pause", ResumeTasks: "task.resume",
    DeleteTasks: "task.delete", TriggerTask: "task.trigger", BackfillTask: "task.backfill",
    RedriveDeadLetters: "dead_letter.redrive", DeleteDeadLetters: "dead_letter.delete", PutFlow: "flow.put",
    DeleteFlow: "flow.delete",
}



def is_audited(cmd: object) -> TypeGuard[AuditedCommand]:
    """Whether ``cmd`` is a change a caller makes (the API wraps those in ``Audited``)."""
    return type(cmd) in _ACTIONS


ACTIONS = (*sorted(_ACTIONS.values()), "flow.pause", "flow.resume", "cluster.transfer_leader", "cluster.add_node",
           "cluster.remove_node")
"""Every action an entry may name."""

# Task fields on record besides the definition (spec): what an operator changes or sees change.
_TASK_STATE = ("status", "due_ms")
_ELIDED = frozenset({"payload_json"})
_URLS = frozenset({"callback_url", "ack_url", "notify_url"})


def elide(field: str, value: Any) -> Any:
    """What the trail shows of ``value``: payloads as their size, a URL's password as ``<elided>``."""
    if value is None:
        return None
    if field in _ELIDED:
        raw = value if isinstance(value, bytes) else str(value).encode()
        return f"<elided {len(raw)} bytes>"
    if field in _URLS and isinstance(value, str):
        parts = urlsplit(value)
        if parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            return urlunsplit(parts._replace(netloc=f"{parts.username}:<elided>@{host}"))
    return value


def diff(old: dict[str, Any], new: dict[str, Any]) -> Changes:
    """The fields whose values differ, each ``{"old", "new"}`` (elided), in name order."""
    return {
        k: {"old": elide(k, old.get(k)), "new": elide(k, new.get(k))}
        for k in sorted(old.keys() | new.keys())
        if old.get(k) != new.get(k)
    }


def task_fields(t: Task | None) -> dict[str, Any]:
    """A task's definition and state as plain values (the JSON names of the API)."""
    if t is None:
        return {}
    fields = msgspec.structs.asdict(t.spec)
    out: dict[str, Any] = {k: v if k in _ELIDED else msgspec.to_builtins(v) for k, v in fields.items()}
    for k in _TASK_STATE:
        out[k] = msgspec.to_builtins(getattr(t, k))
    return out


def _flow_fields(f: FlowSettings | None) -> dict[str, Any]:
    if f is None:
        return {}
    out: dict[str, Any] = msgspec.structs.asdict(f)
    out.pop("updated_ms")
    return out


def _dead_fields(d: DeadLetter) -> dict[str, Any]:
    return {"dead_letter": {"task_id": d.task_id, "fire_id": d.fire_id, "kind": d.kind.value, "at": d.at_ms}}


def _failed(res: Any) -> bool:
    return isinstance(res, BaseException)


def entries(
    cmd: Audited, before: Before, after_task: Callable[[str], Task | None], after_flow: Callable[[str], FlowSettings | None],
    results: list[Any],
) -> list[AuditEntry]:
    """The entries of an applied :class:`Audited` command: one per target it changed.

    ``before`` reads the state the command started from; ``after_task`` / ``after_flow`` the state it
    left; ``results`` are the command's per-item results (errors changed nothing)."""
    inner, st, now = cmd.command, cmd.stamp, cmd.now_ms
    action = action_of(inner)
    out: list[AuditEntry] = []

    def add(ns: str, target: str, changes: Changes) -> None:
        out.append(AuditEntry(
            at_ms=now, key_id=st.key_id, name=st.name, action=action, namespace=ns, target=target,
            changes=changes, remote_addr=st.remote_addr,
        ))

    def task_change(tid: str, res: Any, extra: Changes | None = None) -> None:
        if _failed(res):
            return
        old, new = before.get_task(tid), after_task(tid)
        ch = diff(task_fields(old), task_fields(new))
        if extra:
            ch.update(extra)
        if not ch:  # e.g. a patch to the values the task has: nothing changed, nothing on record
            return
        add(namespace_of(old if old is not None else new), tid, ch)

    match inner:
        case CreateTasks():
            for it, res in zip(inner.items, results, strict=True):
                if not _failed(res) and res.created:
                    task_change(it.task_id, res)
        case DeleteTasks() | PauseTasks() | ResumeTasks():
            for tid, res in zip(inner.task_ids, results, strict=True):
                task_change(tid, res)
        case TriggerTask() | UpdateTask():
            task_change(inner.task_id, results[0])
        case BackfillTask():
            task_change(inner.task_id, results[0], {"backfill": {"old": None, "new": {
                "start": inner.start_ms, "end": inner.end_ms}}})
        case RedriveDeadLetters() | DeleteDeadLetters():
            for did, res in zip(inner.ids, results, strict=True):
                dl = before.get_dead(did)
                if _failed(res) or res is False or dl is None:
                    continue
                add(namespace_of(dl), did, diff(_dead_fields(dl), {}))
        case PutFlow() | DeleteFlow():
            if not _failed(results[0]):
                add(DEFAULT_NAMESPACE, inner.key, diff(_flow_fields(before.get_flow(inner.key)),
                                                       _flow_fields(after_flow(inner.key))))
    return out


def note_entry(cmd: AuditNote) -> AuditEntry:
    """The entry of an audit-only note (a change made outside the state machine)."""
    st: AuditStamp = cmd.stamp
    return AuditEntry(
        at_ms=cmd.now_ms, key_id=st.key_id, name=st.name, action=cmd.action, namespace=DEFAULT_NAMESPACE,
        target=cmd.target, changes={k: dict(v) for k, v in cmd.changes.items()}, remote_addr=st.remote_addr,
    )


__all__ = [
    "ACTIONS",
    "DEFAULT_NAMESPACE",
    "AuditEntry",
    "action_of",
    "diff",
    "elide",
    "entries",
    "is_audited",
    "namespace_of",
    "note_entry",
    "task_fields",
]
