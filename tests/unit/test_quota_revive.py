"""A namespace's quotas hold for what makes a finished task unfinished again and for a changed payload,
in the log's order (molens/fsm/machine.py ``_revive_over_quota``, ``UpdateTask.checks_payload_quota``):
a redrive of a failed task's dead letter, single or many in one entry, and a resume of an inactive
periodic task count toward ``max_pending_tasks`` as a create does; a payload changed past
``max_payload_bytes`` is refused. Entries of the release before (the flags false) apply as it did."""

from __future__ import annotations

import msgspec
import pytest

from molens.errors import QuotaExceeded
from molens.fsm import tenancy
from molens.fsm.commands import (
    PutNamespace,
    RedriveDeadLetters,
    ResumeTasks,
    UpdateTask,
    decode,
    encode,
)
from molens.fsm.tenancy import Namespace, Quotas
from molens.model import Status, validate_create
from molens.schema import DeadLetter
from tests.unit.test_fsm_machine import H
from tests.unit.test_retry_policy import answer


def _ns(h: H, **quotas: int) -> None:
    h.apply(PutNamespace(h.now, Namespace(name="pay", quotas=Quotas(**quotas)), True))


def _live(h: H) -> int:
    return tenancy.decode_count(h.s.meta.get(tenancy.LIVE_PREFIX + "pay"))


def _failed(h: H, n: int) -> list[str]:
    """``n`` delayed tasks of namespace pay that failed for good, each with its dead letter."""
    ids = []
    for _ in range(n):
        t = h.create(namespace="pay", max_retries=0)
        h.fire_due(t.id)
        answer(h, t.id, 500)
        assert h.t(t.id).status is Status.FAILED
        ids.append(t.id)
    return ids


@pytest.mark.parametrize("counts_quota", [False, True])
def test_a_bulk_redrive_counts_each_task_it_makes_unfinished_against_max_pending_tasks(counts_quota: bool) -> None:
    h = H()
    _ns(h, max_pending_tasks=2)
    failed = _failed(h, 2)
    h.create(namespace="pay", interval_ms=3_600_000)  # one unfinished task: room for one more
    assert _live(h) == 1
    dead = sorted(h.s.dead)
    res = h.apply(RedriveDeadLetters(h.now, tuple(dead), counts_quota)).results
    if not counts_quota:  # the release before: both redriven, past the quota
        assert all(isinstance(r, DeadLetter) for r in res)
        assert _live(h) == 3 and not h.s.dead
        return
    assert isinstance(res[0], DeadLetter)
    assert isinstance(res[1], QuotaExceeded) and res[1].field == "max_pending_tasks"
    assert "holds 2 unfinished tasks" in str(res[1])
    assert _live(h) == 2
    assert sorted(h.s.dead) == dead[1:]  # the refused one's dead letter stays, its task failed still
    assert [h.t(t).status for t in failed].count(Status.FAILED) == 1
    # a single redrive at the quota: refused too; once a task is deleted there is room again
    again = h.apply(RedriveDeadLetters(h.now, (dead[1],), True)).results[0]
    assert isinstance(again, QuotaExceeded)


def test_a_redrive_of_a_default_namespace_task_or_under_no_quota_is_not_counted() -> None:
    h = H()
    _ns(h, max_payload_bytes=1_000)  # a quota, but not on pending tasks
    [tid] = _failed(h, 1)
    t = h.create(max_retries=0)  # the default namespace
    h.fire_due(t.id)
    answer(h, t.id, 500)
    res = h.apply(RedriveDeadLetters(h.now, tuple(sorted(h.s.dead)), True)).results
    assert all(isinstance(r, DeadLetter) for r in res)
    assert h.t(tid).status is Status.FIRING and h.t(t.id).status is Status.FIRING


@pytest.mark.parametrize("counts_quota", [False, True])
def test_a_resume_of_an_inactive_periodic_task_counts_against_max_pending_tasks(counts_quota: bool) -> None:
    h = H()
    _ns(h, max_pending_tasks=1)
    t = h.create(namespace="pay", type="periodic", interval_ms=1_000)
    h.fire_due(t.id)
    answer(h, t.id, 404)  # a periodic task answered 404 goes inactive
    assert h.t(t.id).status is Status.INACTIVE and _live(h) == 0
    h.create(namespace="pay", interval_ms=3_600_000)  # the namespace is full
    res = h.apply(ResumeTasks(h.now, (t.id,), counts_quota=counts_quota)).results[0]
    if counts_quota:
        assert isinstance(res, QuotaExceeded) and res.field == "max_pending_tasks"
        assert h.t(t.id).status is Status.INACTIVE and _live(h) == 1
    else:
        assert h.t(t.id).status is Status.PENDING and _live(h) == 2


@pytest.mark.parametrize("checks", [False, True])
def test_an_update_cannot_grow_a_payload_past_max_payload_bytes_in_the_logs_order(checks: bool) -> None:
    h = H()
    _ns(h, max_payload_bytes=16)
    t = h.create(namespace="pay", payload={"n": 1})
    big = validate_create({"type": "delayed", "interval_ms": 1000, "callback_url": t.spec.callback_url,
                           "namespace": "pay", "payload": {"n": "x" * 40}}, now_ms=h.now)
    res = h.apply(UpdateTask(h.now, t.id, big, t.version, True, True, checks)).results[0]
    if checks:
        assert isinstance(res, QuotaExceeded) and res.field == "max_payload_bytes"
        assert h.t(t.id).spec.payload_json == t.spec.payload_json and h.t(t.id).version == t.version
    else:
        assert h.t(t.id).spec.payload_json == big.payload_json
    # a change that keeps the payload is not refused by a quota lowered since the payload was set
    h.apply(PutNamespace(h.now, Namespace(name="pay", quotas=Quotas(max_payload_bytes=2)), False))
    cur = h.t(t.id)
    scene = msgspec.structs.replace(cur.spec, scene="moved")
    res = h.apply(UpdateTask(h.now, t.id, scene, cur.version, True, True, True)).results[0]
    assert not isinstance(res, BaseException) and h.t(t.id).spec.scene == "moved"


def test_the_quota_flags_are_trailing_fields_an_entry_of_the_release_before_lacks() -> None:
    h = H()
    t = h.create()
    for cmd, before in ((RedriveDeadLetters(1, ("d",), True), RedriveDeadLetters(1, ("d",))),
                        (ResumeTasks(1, ("t",), False, True, True, True), ResumeTasks(1, ("t",), False, True, True)),
                        (UpdateTask(1, t.id, t.spec, 1, True, True, True), UpdateTask(1, t.id, t.spec, 1, True, True))):
        raw = msgspec.msgpack.decode(encode(cmd))
        assert raw[-1] is True
        assert decode(msgspec.msgpack.encode(raw[:-1])) == before
