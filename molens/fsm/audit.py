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

import zlib
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeGuard
from urllib.parse import urlsplit, urlunsplit

import msgspec

from molens.fsm import commands, tenancy
from molens.model import Task
from molens.schema import DEFAULT_NAMESPACE, DeadLetter, TaskSpec

_replace = msgspec.structs.replace

CLUSTER = tenancy.ALL_NAMESPACES
"""The namespace of an entry about the whole cluster (keys, namespaces' settings, flows, membership,
leadership): only a key of every namespace reads those."""

Changes = dict[str, dict[str, Any]]


class TaskImage(msgspec.Struct, frozen=True, array_like=True):
    """What the trail keeps of a task before or after a change: its definition without the payload
    (the payload's size and CRC-32 instead, so a change of it shows, never its bytes) and its state."""

    spec: TaskSpec
    status: str
    due_ms: int | None
    payload_bytes: int
    payload_crc: int


_IMAGE_ENCODER = msgspec.msgpack.Encoder()
_IMAGE_DECODER = msgspec.msgpack.Decoder(TaskImage)


def task_image(t: Task | None) -> bytes | None:
    """``t``'s :class:`TaskImage`, encoded (a few microseconds: the diff is made when the entry is read)."""
    if t is None:
        return None
    p = t.spec.payload_json
    return _IMAGE_ENCODER.encode(TaskImage(
        spec=_replace(t.spec, payload_json=b""), status=t.status.value, due_ms=t.due_ms,
        payload_bytes=len(p), payload_crc=zlib.crc32(p),
    ))


class AuditEntry(msgspec.Struct, frozen=True, array_like=True):
    """One change on record. ``id`` is given by the store (``"{raft index}.{n}"``). A task's entry
    keeps its images before and after (``old``/``new``) and its ``changes`` are computed from them
    when the entry is read (:meth:`all_changes`); other entries carry their ``changes`` as written."""

    at_ms: int
    key_id: str
    name: str
    action: str
    namespace: str
    target: str
    changes: Changes
    remote_addr: str
    old: bytes | None = None
    new: bytes | None = None
    id: str = ""

    def all_changes(self) -> Changes:
        if self.old is None and self.new is None:
            return self.changes
        return {**diff(_image_fields(self.old), _image_fields(self.new)), **self.changes}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "at": self.at_ms, "actor": {"key_id": self.key_id, "name": self.name},
            "action": self.action, "namespace": self.namespace, "target": self.target,
            "changes": self.all_changes(), "remote_addr": self.remote_addr,
        }


class Before(Protocol):
    """The state a command started from (the store's transaction before its writes)."""

    def get_task(self, task_id: str) -> Task | None: ...
    def get_flow(self, key: str) -> commands.FlowSettings | None: ...
    def get_dead(self, dead_id: str) -> DeadLetter | None: ...
    def get_meta(self, key: str) -> bytes | None: ...
    def scan_flow_keys(self, prefix: str) -> list[str]: ...


_ENTRY_DECODER = msgspec.msgpack.Decoder(AuditEntry)


def canonical(raw: bytes) -> bytes:
    """An encoded audit entry as this release writes it: its task images too (an earlier release's
    lack the fields appended since)."""
    a = _ENTRY_DECODER.decode(raw)
    old = None if a.old is None else _IMAGE_ENCODER.encode(_IMAGE_DECODER.decode(a.old))
    new = None if a.new is None else _IMAGE_ENCODER.encode(_IMAGE_DECODER.decode(a.new))
    return _IMAGE_ENCODER.encode(msgspec.structs.replace(a, old=old, new=new))


def action_of(cmd: commands.AuditedCommand) -> str:
    """The audit action name of a command (``task.pause``, ``flow.put``, ...)."""
    if isinstance(cmd, commands.PutFlow) and cmd.only_paused:
        return "flow.pause" if cmd.settings.paused else "flow.resume"
    if isinstance(cmd, commands.PutNamespace):
        return "namespace.create" if cmd.create else "namespace.patch"
    return _ACTIONS[type(cmd)]


_ACTIONS: dict[type, str] = {
    commands.CreateTasks: "task.create",
    commands.UpdateTask: "task.patch",
    commands.PauseTasks: "task.pause",
    commands.ResumeTasks: "task.resume",
    commands.DeleteTasks: "task.delete",
    commands.TriggerTask: "task.trigger",
    commands.BackfillTask: "task.backfill",
    commands.RedriveDeadLetters: "dead_letter.redrive",
    commands.DeleteDeadLetters: "dead_letter.delete",
    commands.PutFlow: "flow.put",
    commands.DeleteFlow: "flow.delete",
    commands.PutNamespace: "namespace.patch",
    commands.DeleteNamespace: "namespace.delete",
    commands.PutApiKey: "key.create",
    commands.DeleteApiKey: "key.delete",
}



def is_audited(cmd: object) -> TypeGuard[commands.AuditedCommand]:
    """Whether ``cmd`` is a change a caller makes (the API wraps those in ``Audited``)."""
    return type(cmd) in _ACTIONS


ACTIONS = tuple(sorted({*_ACTIONS.values(), "flow.pause", "flow.resume", "namespace.create",
                        "cluster.transfer_leader", "cluster.add_node", "cluster.remove_node"}))
"""Every action an entry may name."""

_ELIDED = frozenset({"payload_json"})
_URLS = frozenset({"callback_url", "ack_url", "notify_url"})


def elide(field: str, value: Any) -> Any:
    """What the trail shows of ``value``: payloads as their size, a URL's password as ``<elided>``."""
    if value is None:
        return None
    if field in _ELIDED:
        n = value.size if isinstance(value, _Payload) else len(value if isinstance(value, bytes) else str(value).encode())
        return f"<elided {n} bytes>"
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


def _image_fields(raw: bytes | None) -> dict[str, Any]:
    """A task image as plain values by field name; the payload as ``(size, crc)`` (elided on output)."""
    if raw is None:
        return {}
    im = _IMAGE_DECODER.decode(raw)
    out: dict[str, Any] = msgspec.to_builtins(msgspec.structs.asdict(im.spec))
    out["payload_json"] = _Payload(im.payload_bytes, im.payload_crc)
    out["status"], out["due_ms"] = im.status, im.due_ms
    return out


class _Payload(NamedTuple):
    size: int
    crc: int


def _flow_fields(f: commands.FlowSettings | None) -> dict[str, Any]:
    if f is None:
        return {}
    out: dict[str, Any] = msgspec.structs.asdict(f)
    out.pop("updated_ms")
    return out


def _namespace_fields(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        return {}
    return {"quotas": msgspec.to_builtins(tenancy.decode_namespace(raw).quotas)}


def _key_fields(raw: bytes | None) -> dict[str, Any]:
    """What the trail shows of a key: never its hash nor salt (nor, since the log never holds it, its secret)."""
    if raw is None:
        return {}
    k = tenancy.decode_key(raw)
    return {"name": k.name, "role": k.role.value, "namespaces": list(k.namespaces)}


def _dead_fields(d: DeadLetter) -> dict[str, Any]:
    return {"dead_letter": {"task_id": d.task_id, "fire_id": d.fire_id, "kind": d.kind.value, "at": d.at_ms}}


def flow_namespace(a: AuditEntry) -> str | None:
    """The namespace whose own flow a flow change on record is about (``<namespace>~<flow_key>``):
    written as the cluster's (``CLUSTER``) by every release, read as that namespace's; None for
    any other entry."""
    if a.namespace != CLUSTER or not a.action.startswith("flow."):
        return None
    ns, sep, _ = a.target.partition("~")
    return ns if sep and ns else None


def _failed(res: Any) -> bool:
    return isinstance(res, BaseException)


def entries(
    cmd: commands.Audited,
    before: Before,
    after_task: Callable[[str], Task | None],
    after_flow: Callable[[str], commands.FlowSettings | None],
    results: list[Any],
) -> list[AuditEntry]:
    """The entries of an applied :class:`~molens.fsm.commands.Audited` command: one per target it changed.

    ``before`` reads the state the command started from; ``after_task`` / ``after_flow`` the state it
    left; ``results`` are the command's per-item results (errors changed nothing)."""
    inner, st, now = cmd.command, cmd.stamp, cmd.now_ms
    action = action_of(inner)
    out: list[AuditEntry] = []

    def add(ns: str, target: str, changes: Changes, old: bytes | None = None, new: bytes | None = None,
            what: str | None = None) -> None:
        out.append(AuditEntry(
            at_ms=now, key_id=st.key_id, name=st.name, action=what or action, namespace=ns, target=target,
            changes=changes, remote_addr=st.remote_addr, old=old, new=new,
        ))

    def task_change(tid: str, res: Any, extra: Changes | None = None) -> None:
        if _failed(res):
            return
        old, new = before.get_task(tid), after_task(tid)
        oi, ni = task_image(old), task_image(new)
        if oi == ni and not extra:  # e.g. a patch to the values the task has: nothing changed, nothing on record
            return
        t = old if old is not None else new
        add(t.namespace if t is not None else DEFAULT_NAMESPACE, tid, extra or {}, oi, ni)

    match inner:
        case commands.CreateTasks():
            for it, res in zip(inner.items, results, strict=True):
                if not _failed(res) and res.created:
                    task_change(it.task_id, res)
        case commands.DeleteTasks() | commands.PauseTasks() | commands.ResumeTasks():
            for tid, res in zip(inner.task_ids, results, strict=True):
                task_change(tid, res)
        case commands.TriggerTask() | commands.UpdateTask():
            task_change(inner.task_id, results[0])
        case commands.BackfillTask():
            task_change(inner.task_id, results[0], {"backfill": {"old": None, "new": {
                "start": inner.start_ms, "end": inner.end_ms}}})
        case commands.RedriveDeadLetters() | commands.DeleteDeadLetters():
            for did, res in zip(inner.ids, results, strict=True):
                dl = before.get_dead(did)
                if _failed(res) or res is False or dl is None:
                    continue
                add(dl.namespace, did, diff(_dead_fields(dl), {}))
        case commands.PutFlow() | commands.DeleteFlow():
            if not _failed(results[0]):
                add(CLUSTER, inner.key, diff(_flow_fields(before.get_flow(inner.key)),
                                             _flow_fields(after_flow(inner.key))))
        case commands.PutNamespace() | commands.DeleteNamespace():
            name = inner.namespace.name if isinstance(inner, commands.PutNamespace) else inner.name
            if not _failed(results[0]):
                key = tenancy.NS_PREFIX + name
                old_ns = _namespace_fields(before.get_meta(key))
                new_ns = (
                    {}
                    if isinstance(inner, commands.DeleteNamespace)
                    else {"quotas": msgspec.to_builtins(inner.namespace.quotas)}
                )
                add(CLUSTER, name, diff(old_ns, new_ns))
                if isinstance(inner, commands.DeleteNamespace) and inner.drops_flows:
                    # its own flows' settings went with it: each on record as deleted (read as the
                    # namespace's, as every change of them is: flow_namespace)
                    for fk in before.scan_flow_keys(name + "~"):
                        add(CLUSTER, fk, diff(_flow_fields(before.get_flow(fk)), {}), what="flow.delete")
        case commands.PutApiKey() | commands.DeleteApiKey():
            kid = inner.key.id if isinstance(inner, commands.PutApiKey) else inner.key_id
            if not _failed(results[0]):
                key = tenancy.KEY_PREFIX + kid
                new_k = {} if isinstance(inner, commands.DeleteApiKey) else _key_fields(tenancy.encode(inner.key))
                add(CLUSTER, kid, diff(_key_fields(before.get_meta(key)), new_k))
    return out


def note_entry(cmd: commands.AuditNote) -> AuditEntry:
    """The entry of an audit-only note (a change made outside the state machine)."""
    st: commands.AuditStamp = cmd.stamp
    return AuditEntry(
        at_ms=cmd.now_ms, key_id=st.key_id, name=st.name, action=cmd.action, namespace=CLUSTER,
        target=cmd.target, changes={k: dict(v) for k, v in cmd.changes.items()}, remote_addr=st.remote_addr,
    )


__all__ = [
    "ACTIONS",
    "CLUSTER",
    "AuditEntry",
    "TaskImage",
    "action_of",
    "canonical",
    "diff",
    "elide",
    "entries",
    "flow_namespace",
    "is_audited",
    "note_entry",
    "task_image",
]
