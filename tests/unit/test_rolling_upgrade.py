"""A leader and workers of two releases side by side (docs/deploy.md#rolling-upgrade): a worker that
advertised no fire batch version is sent items the release before traces reads (11 fields, no
``traceparent``), and a leader of that release reads the heartbeat that advertises a version.

``_previous_*`` are the previous release's decoders, as it ships them: the other side of the wire."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import tempfile
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from molens.actors.fireworker import WorkerHeartbeat, decode_heartbeat, heartbeat_frame
from molens.actors.peer_state import Standing
from molens.delivery import (
    CATCHUP_WAIT_VERSION,
    FIRE_BATCH_V1,
    FIRE_BATCH_VERSION,
    NAMESPACE_ITEM_VERSION,
    NOT_SENT_VERSION,
    RESUME_TRIGGER_VERSION,
    RESUME_VERSION,
    TENANCY_VERSION,
    FireRequest,
    decode_fire_batch,
    encode_fire_batch,
)
from molens.fsm.commands import (
    Audited,
    Command,
    CreateItem,
    CreateTasks,
    DeleteNamespace,
    Dispatched,
    DispatchItem,
    PauseTasks,
    PutApiKey,
    ResultItem,
    Results,
)
from molens.fsm.tenancy import ApiKey, KeyRole
from molens.model import FireKind, Outcome, new_task_id, validate_create
from molens.scheduler import Scheduler
from molens.signing import namespace_secret
from molens.web.api_context import ApiSettings
from molens.web.app import make_app
from molens.web.local_context import LocalContext
from tests.unit.test_not_sent import monitor_proposals
from tests.unit.test_write_barrier import _call

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _req(fire_id: str, tp: str = "") -> FireRequest:
    return FireRequest(fire_id=fire_id, task_id=fire_id[:-2], attempt=1, kind=FireKind.CALLBACK,
                       url="http://127.0.0.1:9/x", body=b"null", scene="default", timeout_ms=1000, traceparent=tp)


def _previous_fire_batch_items(frame: bytes) -> list[Any]:
    """The previous release's check of a fire batch: every item exactly 11 fields, or the whole
    batch is refused."""
    obj = msgpack.unpackb(frame, raw=False, use_list=True, strict_map_key=True)
    assert isinstance(obj, list) and len(obj) == 2 and obj[0] == "fire_batch"
    for i, item in enumerate(obj[1]):
        if not isinstance(item, list) or not 11 <= len(item) <= 11:
            raise ValueError(f"fire_batch: item {i} is not a 11-tuple")
    return list(obj[1])


def _previous_decode_heartbeat(body: bytes) -> tuple[int, frozenset[Any] | None]:
    """The previous release's heartbeat decoder."""
    v = msgpack.unpackb(body)
    if isinstance(v, int):
        return v, None
    free, held = v
    return int(free), (frozenset(held) if held is not None else None)


def test_a_traced_fire_in_a_new_batch_makes_the_previous_release_refuse_the_whole_batch() -> None:
    frame = encode_fire_batch([_req("A-1"), _req("B-1", TP)])
    with pytest.raises(ValueError, match="item 1"):
        _previous_fire_batch_items(frame)


def test_a_worker_of_the_previous_release_gets_every_fire_without_the_traceparent() -> None:
    frame = encode_fire_batch([_req("A-1"), _req("B-1", TP)], FIRE_BATCH_V1)
    assert [item[0] for item in _previous_fire_batch_items(frame)] == ["A-1", "B-1"]
    assert decode_fire_batch(frame) == [_req("A-1"), _req("B-1")]


def test_a_worker_that_reads_version_2_gets_the_traceparent() -> None:
    frame = encode_fire_batch([_req("A-1"), _req("B-1", TP)], FIRE_BATCH_VERSION)
    assert [len(item) for item in msgpack.unpackb(frame, raw=False)[1]] == [11, 12]
    assert decode_fire_batch(frame) == [_req("A-1"), _req("B-1", TP)]


def test_a_heartbeat_advertises_the_version_and_a_leader_of_the_previous_release_still_reads_it() -> None:
    body = heartbeat_frame(3, ["A-1", "B-1"])[1:]
    assert decode_heartbeat(body) == WorkerHeartbeat(3, frozenset({"A-1", "B-1"}), FIRE_BATCH_VERSION)
    free, held = _previous_decode_heartbeat(body)
    # the version is one more element of the held set: no fire id, so no open fire is listed by it
    assert free == 3 and held is not None and {"A-1", "B-1"} <= held
    assert held - {"A-1", "B-1"} == {FIRE_BATCH_VERSION}


def test_a_heartbeat_of_the_previous_release_advertises_version_1_and_one_without_a_list_says_nothing() -> None:
    previous = bytes(msgpack.packb([5, ["A-1"]]))
    assert decode_heartbeat(previous) == WorkerHeartbeat(5, frozenset({"A-1"}), FIRE_BATCH_V1)
    assert decode_heartbeat(bytes(msgpack.packb([5, []]))).batch_version == FIRE_BATCH_V1
    assert decode_heartbeat(heartbeat_frame(5, None)[1:]).batch_version is None
    assert _previous_decode_heartbeat(heartbeat_frame(5, None)[1:]) == (5, None)


def _sched(versions: dict[str, int]) -> Any:
    """A leader's scheduler (n1 of three members) that heard these fire batch versions advertised."""
    return SimpleNamespace(node_id="n1", batch_versions=versions,
                           peer=SimpleNamespace(standing=Standing(members=frozenset({"n1", "n2", "n3"}))))


def test_catchup_waits_is_proposed_once_every_other_member_advertised_catchup_wait_version() -> None:
    """docs/deploy.md#rolling-upgrade: until every other member's node reads ``Dispatched.catchup_waits``
    (``CATCHUP_WAIT_VERSION``), the Dispatcher proposes it false (the instant is skipped, as before)."""
    v = CATCHUP_WAIT_VERSION
    assert Scheduler.replicas_read(_sched({"n2": v, "n3": v}), v)
    assert not Scheduler.replicas_read(_sched({"n2": v, "n3": v - 1}), v)
    assert not Scheduler.replicas_read(_sched({"n2": v}), v)  # n3 not heard yet
    assert Scheduler.replicas_read(_sched({"n2": v - 1, "n3": v - 1}), NOT_SENT_VERSION)  # the release before reads not_sent
    assert v <= FIRE_BATCH_VERSION  # this release's nodes advertise it


def test_refuses_planned_and_ack_from_are_proposed_once_every_other_member_advertised_version_8() -> None:
    v = RESUME_TRIGGER_VERSION
    assert Scheduler.replicas_read(_sched({"n2": v, "n3": v}), v)
    assert not Scheduler.replicas_read(_sched({"n2": v, "n3": v - 1}), v)
    assert not Scheduler.replicas_read(_sched({"n2": v}), v)  # n3 not heard yet
    assert Scheduler.replicas_read(_sched({"n2": v - 1, "n3": v - 1}), RESUME_VERSION)  # the release before reads drops_paused
    assert v <= FIRE_BATCH_VERSION


@pytest.mark.parametrize("readable", [True, False])
def test_the_monitor_proposes_results_with_ack_from_as_the_replicas_read_it(readable: bool) -> None:
    """A replica of the release before would not keep when a task's ACK wait began, and a resume would
    then probe at once where this release waits ``ack_delay_ms``: the replicas would differ."""
    proposed = monitor_proposals([ResultItem(
        fire_id="f-1", kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE, response_head="",
        latency_ms=3, worker="n2", attempt=1)], replicas_read=lambda v: readable or v < RESUME_TRIGGER_VERSION)
    assert [type(c) for c in proposed] == [Results] and proposed[0].ack_from is readable


class _Before(LocalContext):
    """One replica whose cluster still has a member of the release before version 8."""

    def replicas_read(self, version: int) -> bool:
        return version < RESUME_TRIGGER_VERSION


@pytest.mark.parametrize("all_read_it", [True, False])
def test_the_api_refuses_an_allow_trigger_beside_an_occurrence_sent_ahead_once_every_replica_reads_it(
    all_read_it: bool,
) -> None:
    """``POST /tasks/{id}/trigger`` proposes ``refuses_planned`` as the replicas read it: 409 while an
    overlap allow task's occurrence sent ahead of its instant is on its way; with a member of the
    release before, the trigger applies as that release applied it."""
    with tempfile.TemporaryDirectory() as d:
        ctx = LocalContext(d) if all_read_it else _Before(d)
        try:
            app = make_app(ctx)
            st, t = _call(app, "POST", "/api/v1/tasks", {"type": "periodic", "interval_ms": 60_000,
                                                          "overlap": "allow", "callback_url": "http://127.0.0.1:9/x"})
            assert st == 201, t
            task = ctx.store.get_task(t["id"])
            assert task is not None and task.due_ms is not None
            planned_at = task.due_ms - 300  # the leader sends it 300 ms ahead of its instant, a minute from now
            sent = ctx.propose([Dispatched(planned_at, (DispatchItem(
                fire_id=task.fire_id, task_id=task.id, attempt=1, worker="w1", deadline_ms=planned_at + 60_000),))], 5)
            assert sent == [[None]], sent
            st, out = _call(app, "POST", f"/api/v1/tasks/{t['id']}/trigger")
            if all_read_it:
                assert st == 409 and out["error"]["code"] == "illegal_transition", out
                assert "planned for a later instant" in out["error"]["message"]
            else:
                assert st == 200 and out["status"] == "pending", out
        finally:
            ctx.close()


@pytest.mark.parametrize("all_read_it", [True, False])
def test_the_api_resumes_with_records_dropped_once_every_replica_reads_it(all_read_it: bool) -> None:
    """``POST /tasks/{id}/resume`` proposes ``records_dropped`` as the replicas read it: the instants a
    resume from now drops are one ``skipped`` row; with a member of the release before, none."""
    with tempfile.TemporaryDirectory() as d:
        ctx = LocalContext(d) if all_read_it else _Before(d)
        try:
            app = make_app(ctx)
            created = ctx.now_ms() - 600_000  # created ten minutes ago, paused ever since
            spec = validate_create({"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/x"},
                                   now_ms=created)
            tid = new_task_id(created, 1)
            assert ctx.propose([CreateTasks(created, (CreateItem(tid, spec),)), PauseTasks(created, (tid,))], 5)
            st, out = _call(app, "POST", f"/api/v1/tasks/{tid}/resume")
            assert st == 200 and out["status"] == "pending", out
            st, rows = _call(app, "GET", f"/api/v1/tasks/{tid}/executions")
            assert st == 200, rows
            skipped = [r for r in rows["items"] if r["result"] == "skipped"]
            assert len(skipped) == (1 if all_read_it else 0), rows
            if all_read_it:
                assert "came due while the task was paused" in skipped[0]["execution_result"], skipped
        finally:
            ctx.close()


class _Racing(LocalContext):
    """A replica where another admin's entry lands between this request's checks and its own entry;
    ``all_read``: every member has advertised ``TENANCY_VERSION``."""

    def __init__(self, data_dir: str, token: str, all_read: bool) -> None:
        super().__init__(data_dir, ApiSettings(auth_token=token))
        self.all_read = all_read
        self.racing: Command | None = None
        self.proposed: list[Command] = []

    def replicas_read(self, version: int) -> bool:
        return self.all_read or version < TENANCY_VERSION

    def propose(self, commands: Sequence[Command], timeout_s: float) -> list[list[Any]]:
        if self.racing is not None:
            first, self.racing = self.racing, None
            [[applied]] = super().propose([first], timeout_s)
            assert not isinstance(applied, Exception), applied
        self.proposed.extend(c.command if isinstance(c, Audited) else c for c in commands)
        return super().propose(commands, timeout_s)


@pytest.mark.parametrize("all_read_it", [True, False])
def test_a_key_create_and_a_namespace_delete_racing_leave_no_key_naming_a_deleted_namespace_once_every_replica_checks(
    all_read_it: bool,
) -> None:
    """``POST /keys`` and ``DELETE /namespaces/{name}`` check each other's records before proposing,
    and propose ``checks_namespaces`` / ``checks_keys`` as the replicas read them: then the state
    machine decides again in the log's order, and the request whose entry lands second is refused
    (404 / 409) though its own check passed. With a member of the release before, both apply, as
    that release applied them: a key is left naming a deleted namespace."""
    token = "racing-bootstrap-token"
    with tempfile.TemporaryDirectory() as d:
        ctx = _Racing(d, token, all_read_it)
        try:
            app = make_app(ctx)
            for ns in ("pay", "ops"):
                assert _call(app, "POST", "/api/v1/namespaces", {"name": ns}, token=token)[0] == 201
            ctx.racing = DeleteNamespace(ctx.now_ms(), "pay", True)  # its API check ran before the key's entry
            st, out = _call(app, "POST", "/api/v1/keys", {"name": "k", "role": "writer", "namespaces": ["pay"]},
                            token=token)
            assert isinstance(ctx.proposed[-1], PutApiKey) and ctx.proposed[-1].checks_namespaces is all_read_it
            assert _call(app, "GET", "/api/v1/namespaces/pay", token=token)[0] == 404  # the delete applied
            keys_left = [k["name"] for k in _call(app, "GET", "/api/v1/keys", token=token)[1]["items"]]
            if all_read_it:
                assert st == 404 and out["error"] == {"code": "not_found", "message": "namespace pay not found",
                                                      "field": "namespaces"}, out
                assert keys_left == []
            else:
                assert st == 201 and out["namespaces"] == ["pay"], out
                assert keys_left == ["k"]
            other = ApiKey(id="00000000000000aa", name="other", role=KeyRole.READER, namespaces=("ops",),
                           salt=b"s" * 16, digest=b"d" * 32, created_ms=ctx.now_ms())
            ctx.racing = PutApiKey(ctx.now_ms(), other, True)  # created while the delete was on its way
            st, out = _call(app, "DELETE", "/api/v1/namespaces/ops", token=token)
            assert isinstance(ctx.proposed[-1], DeleteNamespace) and ctx.proposed[-1].checks_keys is all_read_it
            if all_read_it:
                assert st == 409 and out["error"]["code"] == "conflict", out
                assert out["error"]["message"] == "namespace ops is named by API keys 00000000000000aa; delete them first"
                assert _call(app, "GET", "/api/v1/namespaces/ops", token=token)[0] == 200
            else:
                assert st == 200 and out == {"deleted": "ops"}, out
                assert _call(app, "GET", "/api/v1/namespaces/ops", token=token)[0] == 404
        finally:
            ctx.close()


def test_a_tasks_namespace_travels_in_a_13th_field_to_workers_of_version_8_only() -> None:
    """A worker of version 8 signs with the namespace's key and so needs the namespace: a 13th field,
    the default namespace's too; a worker of an earlier version refuses a 13-field item (a whole
    batch), so it is sent the 11 or 12 it reads and signs with the cluster's secret. An item without
    it (a leader of an earlier version) names no namespace: a worker of version 8 then signs with the
    cluster's secret alone, never with the default namespace's key."""
    named = dataclasses.replace(_req("A-1"), namespace="team-a")
    traced_named = dataclasses.replace(_req("B-1", TP), namespace="team-a")
    plain = dataclasses.replace(_req("C-1"), namespace="default")
    frame = encode_fire_batch([named, traced_named, plain], NAMESPACE_ITEM_VERSION)
    raw = msgpack.unpackb(frame, raw=False)[1]
    assert [len(it) for it in raw] == [13, 13, 13]
    assert decode_fire_batch(frame) == [named, traced_named, plain]
    before = encode_fire_batch([named, traced_named, plain], NAMESPACE_ITEM_VERSION - 1)
    assert [len(it) for it in msgpack.unpackb(before, raw=False)[1]] == [11, 12, 11]
    assert [r.namespace for r in decode_fire_batch(before)] == ["", "", ""]
    assert NAMESPACE_ITEM_VERSION <= FIRE_BATCH_VERSION


def test_a_namespaces_key_is_the_hmac_of_its_name_under_the_clusters_secret() -> None:
    """The derivation a receiver's operator can redo with any HMAC-SHA256 (docs/receiver.md)."""
    want = hmac.new(b"cluster-secret", b"molens namespace signing key v1\0team-a", hashlib.sha256).hexdigest()
    assert namespace_secret("cluster-secret", "team-a") == want == namespace_secret(b"cluster-secret", "team-a")
    assert namespace_secret("cluster-secret", "team-b") != want
