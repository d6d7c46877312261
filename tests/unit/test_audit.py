"""The audit trail: one entry per changed target, written with the change, through snapshots and trims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from molens.fsm.audit import AuditEntry, elide, entries
from molens.fsm.commands import (
    Audited,
    AuditNote,
    AuditStamp,
    CreateItem,
    CreateTasks,
    DeleteFlow,
    Dispatched,
    DispatchItem,
    FlowSettings,
    PauseTasks,
    PutFlow,
    ResumeTasks,
    TrimAudit,
    UpdateTask,
    decode,
    encode,
)
from molens.fsm.history import History
from molens.fsm.machine import apply
from molens.fsm.memstate import MemoryState
from molens.fsm.store import AuditFilter, TaskStore
from molens.model import new_task_id, validate_create
from molens.raft.log import Entry, EntryKind
from tests.ns_index_check import mismatches

T0 = 1_700_000_000_000
URL = "http://127.0.0.1:9/cb"
ALICE = AuditStamp("k1", "alice", "10.0.0.1")
BOB = AuditStamp("k2", "bob", "10.0.0.2")


def spec(**kw: Any) -> Any:
    r: dict[str, Any] = {"type": "delayed", "interval_ms": 60_000, "callback_url": URL}
    r.update(kw)
    return validate_create(r, now_ms=T0)


def audit_of(ms: MemoryState, cmd: Audited) -> list[Any]:
    """Apply ``cmd`` to ``ms`` and return the audit entries it wrote."""
    applied = apply(ms, cmd)
    ms.apply(cmd)
    return applied.writes.audit


def test_audited_command_round_trips_through_the_codec() -> None:
    cmd = Audited(T0, ALICE, PauseTasks(T0, ("a", "b")))
    assert decode(encode(cmd)) == cmd
    note = AuditNote(T0, ALICE, "cluster.transfer_leader", "n2", {"leader": {"old": "n1", "new": "n2"}})
    assert decode(encode(note)) == note


def test_batch_create_writes_one_entry_per_task_with_payload_elided() -> None:
    ms = MemoryState()
    ids = [new_task_id(T0, i) for i in range(3)]
    cmd = Audited(T0, ALICE, CreateTasks(T0, tuple(CreateItem(t, spec(payload={"card": "4111"})) for t in ids)))
    out = audit_of(ms, cmd)
    assert [a.target for a in out] == ids
    a = out[0]
    assert (a.key_id, a.name, a.action, a.namespace, a.remote_addr, a.at_ms) == (
        "k1", "alice", "task.create", "default", "10.0.0.1", T0)
    assert a.all_changes()["status"] == {"old": None, "new": "pending"}
    assert a.all_changes()["callback_url"] == {"old": None, "new": URL}
    t = ms.get_task(ids[0])
    assert t is not None and t.spec.payload_json is not None
    assert a.all_changes()["payload_json"] == {"old": None, "new": f"<elided {len(t.spec.payload_json)} bytes>"}
    assert "4111" not in repr(out)


def test_pause_records_only_the_fields_that_changed_and_nothing_for_a_refused_item() -> None:
    ms = MemoryState()
    tid = new_task_id(T0, 1)
    ms.apply(CreateTasks(T0, (CreateItem(tid, spec()),)))
    out = audit_of(ms, Audited(T0 + 5, BOB, PauseTasks(T0 + 5, (tid, "missing"))))
    assert len(out) == 1 and out[0].target == tid and out[0].action == "task.pause"
    assert out[0].all_changes() == {"status": {"old": "pending", "new": "paused"},
                              "due_ms": {"old": T0 + 60_000, "new": None}}
    assert audit_of(ms, Audited(T0 + 6, BOB, PauseTasks(T0 + 6, (tid,)))) == []  # already paused: 409, no entry
    out = audit_of(ms, Audited(T0 + 7, BOB, ResumeTasks(T0 + 7, (tid,))))
    assert [a.action for a in out] == ["task.resume"]


def test_patch_diffs_the_definition() -> None:
    ms = MemoryState()
    tid = new_task_id(T0, 2)
    ms.apply(CreateTasks(T0, (CreateItem(tid, spec(timeout_ms=5000)),)))
    t = ms.get_task(tid)
    assert t is not None
    out = audit_of(ms, Audited(T0 + 1, ALICE, UpdateTask(T0 + 1, tid, spec(timeout_ms=7000), t.version)))
    assert out[0].action == "task.patch" and out[0].all_changes() == {"timeout_ms": {"old": 5000, "new": 7000}}
    t = ms.get_task(tid)
    assert t is not None
    again = Audited(T0 + 2, ALICE, UpdateTask(T0 + 2, tid, spec(timeout_ms=7000), t.version))
    assert audit_of(ms, again) == []  # the same values again (a client's retry): nothing changed, no entry
    ms.apply(UpdateTask(T0 + 2, tid, spec(timeout_ms=7000, payload={"a": 1}), t.version))
    t = ms.get_task(tid)
    assert t is not None
    same_size = Audited(T0 + 3, ALICE, UpdateTask(T0 + 3, tid, spec(timeout_ms=7000, payload={"a": 2}), t.version))
    out = audit_of(ms, same_size)
    assert out[0].all_changes() == {"payload_json": {"old": "<elided 7 bytes>", "new": "<elided 7 bytes>"}}


def test_flow_changes_are_diffed_without_their_timestamp() -> None:
    ms = MemoryState()
    out = audit_of(ms, Audited(T0, ALICE, PutFlow(T0, "api.example", FlowSettings(rate_per_s=5.0))))
    assert out[0].action == "flow.put" and out[0].target == "api.example"
    assert out[0].all_changes() == {"adaptive": {"old": None, "new": False}, "paused": {"old": None, "new": False},
                              "rate_per_s": {"old": None, "new": 5.0}}
    out = audit_of(ms, Audited(T0 + 1, ALICE, PutFlow(T0 + 1, "api.example", FlowSettings(paused=True),
                                                          only_paused=True)))
    assert out[0].action == "flow.pause" and out[0].all_changes() == {"paused": {"old": False, "new": True}}
    out = audit_of(ms, Audited(T0 + 2, ALICE, DeleteFlow(T0 + 2, "api.example")))
    assert out[0].action == "flow.delete" and out[0].all_changes()["rate_per_s"] == {"old": 5.0, "new": None}
    assert audit_of(ms, Audited(T0 + 3, ALICE, DeleteFlow(T0 + 3, "api.example"))) == []  # 404: no entry


def test_internal_commands_write_no_entry() -> None:
    ms = MemoryState()
    tid = new_task_id(T0, 3)
    ms.apply(CreateTasks(T0, (CreateItem(tid, spec(interval_ms=0)),)))
    applied = apply(ms, Dispatched(T0, (DispatchItem(f"{tid}-1", tid, 1, "w", T0 + 5000),)))
    assert applied.writes.audit == []


def test_url_password_is_elided() -> None:
    assert elide("callback_url", "https://u:s3cret@h.example/x?a=1") == "https://u:<elided>@h.example/x?a=1"
    assert elide("callback_url", URL) == URL
    assert elide("payload_json", "[1,2]") == "<elided 5 bytes>"


def test_entries_reads_results_not_guesses() -> None:
    """A create answered by its idempotency key (200, nothing changed) has no entry."""
    ms = MemoryState()
    tid = new_task_id(T0, 4)
    ms.apply(CreateTasks(T0, (CreateItem(tid, spec(idempotency_key="once")),)))
    again = Audited(T0 + 1, ALICE, CreateTasks(T0 + 1, (CreateItem(new_task_id(T0, 5), spec(idempotency_key="once")),)))
    applied = apply(ms, again)
    assert applied.writes.audit == []
    assert entries(again, ms, ms.get_task, ms.get_flow, applied.results) == []


# ------------------------------------------------------------------------------------------- store


class Log:
    def __init__(self, store: TaskStore) -> None:
        self.store, self.index = store, store.applied_index()

    def apply(self, *cmds: Any) -> list[Any]:
        out = []
        for c in cmds:
            self.index += 1
            out.append(Entry(self.index, 1, EntryKind.NORMAL, encode(c)))
        return self.store.apply_batch(out)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = TaskStore(tmp_path / "n1", history=History(tmp_path / "n1" / "history.sqlite"))
    yield s
    s.close()


def _fill(lg: Log, n: int) -> list[str]:
    ids = [new_task_id(T0, i) for i in range(n)]
    for i, tid in enumerate(ids):
        who = (ALICE, BOB)[i % 2]
        lg.apply(Audited(T0 + i, who, CreateTasks(T0 + i, (CreateItem(tid, spec()),))))
    return ids


def scan(store: TaskStore, f: AuditFilter, chunk: int = 1024) -> list[AuditEntry]:
    """Every matching entry, newest first, page by page as the export reads them."""
    out: list[AuditEntry] = []
    cursor: str | None = None
    while True:
        page, cursor = store.list_audit(f, cursor=cursor, limit=chunk, scan_budget=chunk)
        out += page
        if cursor is None:
            return out


def test_store_lists_newest_first_with_filters_and_cursor(store: TaskStore) -> None:
    lg = Log(store)
    ids = _fill(lg, 7)
    page, cur = store.list_audit(AuditFilter(), limit=3)
    assert [a.target for a in page] == ids[::-1][:3] and cur is not None
    rest, cur2 = store.list_audit(AuditFilter(), cursor=cur, limit=10)
    assert [a.target for a in page + rest] == ids[::-1] and cur2 is None
    assert [a.id for a in page] == ["7.0", "6.0", "5.0"]
    bob = [a.target for a in scan(store, AuditFilter(actor="bob"), chunk=2)]
    assert bob == [ids[5], ids[3], ids[1]]
    assert [a.target for a in scan(store, AuditFilter(since_ms=T0 + 5))] == [ids[6], ids[5]]
    assert store.list_audit(AuditFilter(action="task.pause"))[0] == []
    assert store.list_audit(AuditFilter(namespace="payments"))[0] == []


def test_audit_is_in_the_snapshot_and_the_digest(tmp_path: Path, store: TaskStore) -> None:
    lg = Log(store)
    _fill(lg, 4)
    lg.apply(AuditNote(T0 + 9, ALICE, "cluster.transfer_leader", "n2", {"leader": {"old": "n1", "new": "n2"}}))
    snap = tmp_path / "snap.mdb"
    store.snapshot(snap)
    other = TaskStore(tmp_path / "n2", history=History(tmp_path / "n2" / "h.sqlite"))
    try:
        other.restore(snap)
        assert other.digest() == store.digest()
        assert list(scan(other, AuditFilter())) == list(scan(store, AuditFilter()))
        assert other.audit_count() == 5
    finally:
        other.close()


def test_trim_deletes_by_count_and_age_as_a_key_range(store: TaskStore) -> None:
    lg = Log(store)
    ids = _fill(lg, 10)
    point = store.audit_trim_point(T0 + 10, max_entries=6, max_age_ms=10**9, limit=1000)
    assert point == 5
    lg.apply(TrimAudit(T0 + 10, point))
    assert [a.target for a in scan(store, AuditFilter())] == ids[::-1][:6]
    point = store.audit_trim_point(T0 + 10, max_entries=100, max_age_ms=2, limit=1000)  # at < T0 + 8 expire
    lg.apply(TrimAudit(T0 + 10, point))  # type: ignore[arg-type]
    assert [a.target for a in scan(store, AuditFilter())] == [ids[9], ids[8]]
    assert store.audit_trim_point(T0 + 10, max_entries=100, max_age_ms=2, limit=1000) is None
    point = store.audit_trim_point(T0 + 10, max_entries=0, max_age_ms=10**9, limit=1)  # one at a time
    assert point == 10


def test_a_trim_of_every_entry_empties_the_trail_and_its_index(tmp_path: Path, store: TaskStore) -> None:
    """A trim whose bound is past the last entry (a quiet cluster past ``max_age``): the cursor that
    deleted the last record stands nowhere, and the namespace index's keys of the entries it deletes
    were read from it -- an empty record that failed to decode, on every replica alike."""
    lg = Log(store)
    _fill(lg, 4)
    point = store.audit_trim_point(T0 + 10**9, max_entries=100, max_age_ms=1, limit=1000)
    assert point is not None
    lg.apply(TrimAudit(T0 + 10**9, point))
    assert store.audit_count() == 0 and scan(store, AuditFilter(namespaces=frozenset({"default"}))) == []
    path = store.dir.parent
    store.close()
    assert mismatches(path / "fsm") == []
