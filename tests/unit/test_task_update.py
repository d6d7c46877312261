"""Updating a task in place (docs/architecture.md#update): ``UpdateTask`` through machine.apply, and
``model.decode_update`` (the merge patch validated like a create)."""

from __future__ import annotations

import msgspec
import pytest

from molens.errors import PreconditionFailed, ValidationError
from molens.fsm.commands import Dispatched, DispatchItem, PauseTasks, ResumeTasks, UpdateTask
from molens.model import (
    ExecutionResult,
    FireKind,
    IllegalTransitionError,
    Outcome,
    Reliability,
    Status,
    TaskSpec,
    decode_update,
    validate_create,
)
from molens.schema import task_json
from tests.unit.test_fsm_machine import URL, H

NEW_URL = "http://127.0.0.1:9/new"


def _update(h: H, tid: str, body: bytes, version: int | None = None) -> object:
    t = h.t(tid)
    spec = decode_update(body, t.spec, now_ms=h.now)
    out = h.apply(UpdateTask(h.now, tid, spec, t.version if version is None else version))
    return out.results[0]


def test_a_stale_version_is_refused_and_changes_nothing() -> None:
    h = H()
    t = h.create(interval_ms=60_000)
    before = h.t(t.id)
    spec = decode_update(b'{"scene":"billing"}', t.spec, now_ms=h.now)
    out = h.apply(UpdateTask(h.now, t.id, spec, version=2))
    assert isinstance(out.results[0], PreconditionFailed)
    assert out.results[0].field == "If-Match"
    assert h.t(t.id) == before
    assert out.writes.tasks == {} and out.writes.executions == []


def test_an_update_bumps_the_version_records_the_fields_and_the_next_fire_uses_them() -> None:
    h = H()
    t = h.create(interval_ms=60_000)
    h.now += 1_000
    nt = _update(h, t.id, b'{"callback_url":"' + NEW_URL.encode() + b'","payload":{"n":1},"scene":"s2"}')
    assert nt == h.t(t.id)
    assert h.t(t.id).version == 2
    assert h.t(t.id).due_ms == t.due_ms  # the schedule did not change
    rows = h.s.executions
    assert [(e.kind, e.result, e.response_head, e.url) for e in rows] == [
        (FireKind.EVENT, ExecutionResult.UPDATED, "version 2: callback_url, payload, scene", NEW_URL)
    ]
    fr = h.fire_due(t.id)
    assert (fr.url, fr.body, fr.scene) == (NEW_URL, b'{"n":1}', "s2")
    assert msgspec.json.decode(task_json(h.t(t.id)))["version"] == 2


def test_an_update_that_changes_nothing_keeps_the_version_and_writes_no_history() -> None:
    h = H()
    t = h.create(interval_ms=60_000, scene="a")
    res = _update(h, t.id, b'{"scene":"a","interval_ms":60000}')
    assert res == t and h.t(t.id).version == 1 and h.s.executions == []


def test_a_schedule_change_moves_an_occurrence_not_started_to_the_new_schedule_and_none_fires_twice() -> None:
    h = H()
    t = h.create(type="periodic", interval_ms=10_000)
    instants = [h.cycle(t.id).not_before_ms for _ in range(3)]
    assert instants == [t.created_ms + k * 10_000 for k in (1, 2, 3)]
    h.now += 2_500
    _update(h, t.id, b'{"cron_expr":"* * * * *"}')  # interval_ms dropped: one schedule field replaces the schedule
    u = h.t(t.id)
    assert u.spec.interval_ms is None and u.spec.cron_expr == "* * * * *"
    assert u.due_ms is not None and u.due_ms > h.now and u.due_ms % 60_000 == 0
    assert u.seq == 4  # the occurrence that had not fired yet, moved
    instants += [h.cycle(t.id).not_before_ms for _ in range(3)]
    assert len(set(instants)) == len(instants) == 6
    assert instants[3:] == [u.due_ms + k * 60_000 for k in range(3)]


@pytest.mark.parametrize("every_replica_reads_it", [True, False])
def test_a_schedule_change_never_lands_on_the_instant_of_a_fire_settled_lost_before_it_went_out(
    every_replica_reads_it: bool,
) -> None:
    """Occurrence 3 is planned ahead (sent to its worker before its instant), its worker is lost
    before that instant, a retry delivers it and the task moves on; the worker may still send the
    first attempt at the instant. A schedule change made before that instant must not put the next
    occurrence on it (found by the scheduler simulation, seed 33005211). Entries of a leader whose
    replicas do not all read the flags yet apply as the release before did."""
    h = H()
    t = h.create(type="periodic", interval_ms=1000, retry={"backoff": "fixed", "initial_ms": 10})
    h.cycle(t.id)
    h.cycle(t.id)
    p = t.created_ms + 3000  # occurrence 3's instant, on the 1,500 ms grid too

    def dispatch() -> None:
        u = h.t(t.id)
        out = h.apply(Dispatched(h.now, (DispatchItem(fire_id=u.fire_id, task_id=t.id, attempt=u.attempt + 1,
                                                      worker="w1", deadline_ms=h.now + 10_000),),
                                 keeps_last_fire=every_replica_reads_it))
        assert out.results == [None], out.results

    h.now = p - 500
    dispatch()  # planned 500 ms ahead
    h.now = p - 450
    h.answer(t.id, None, Outcome.LOST, after_ms=0)  # its worker lost: settled lost, retried at once
    h.now = h.t(t.id).due_ms or 0
    dispatch()
    h.answer(t.id, 200, after_ms=20)
    assert h.t(t.id).seq == 4 and h.now < p
    u = h.t(t.id)
    spec = decode_update(b'{"interval_ms":1500}', u.spec, now_ms=h.now)
    h.apply(UpdateTask(h.now, t.id, spec, u.version, after_last_fire=every_replica_reads_it))
    moved = h.t(t.id).sched_ms
    assert moved == (t.created_ms + 4500 if every_replica_reads_it else p)  # the grid's first instant after p


def test_an_at_most_once_fire_in_flight_changed_to_at_least_once_is_never_sent_again() -> None:
    h = H()
    t = h.create(reliability="at_most_once")
    h.fire_due(t.id)
    _update(h, t.id, b'{"reliability":"at_least_once","callback_url":"' + NEW_URL.encode() + b'"}')
    occ = h.t(t.id).occ_spec
    assert occ is not None and occ.reliability is Reliability.AT_MOST_ONCE
    h.answer(t.id, None, Outcome.LOST)
    after = h.t(t.id)
    assert after.status is Status.FAILED and after.due_ms is None and after.occ_spec is None
    callback_rows = [e for e in h.s.executions if e.kind is FireKind.CALLBACK]
    assert [(e.result, e.url) for e in callback_rows] == [(ExecutionResult.UNKNOWN, URL)]


def test_a_retry_after_an_update_goes_to_the_new_url() -> None:
    h = H()
    t = h.create(max_retries=2)
    h.fire_due(t.id)
    _update(h, t.id, b'{"callback_url":"' + NEW_URL.encode() + b'"}')
    h.answer(t.id, 500)
    assert h.t(t.id).status is Status.FIRING
    fr = h.fire_due(t.id)
    assert fr.url == NEW_URL and fr.fire.attempt == 2


def test_a_schedule_change_of_a_running_periodic_task_keeps_its_occurrence_and_continues_on_the_new_one() -> None:
    h = H()
    t = h.create(type="periodic", interval_ms=10_000)
    first = h.fire_due(t.id).not_before_ms
    _update(h, t.id, b'{"interval_ms":25000}')
    h.answer(t.id, 200)
    u = h.t(t.id)
    assert u.seq == 2 and u.due_ms == t.created_ms + 25_000 and u.due_ms > first


def test_a_paused_task_resumes_on_its_new_schedule() -> None:
    h = H()
    t = h.create(type="periodic", interval_ms=10_000)
    h.apply(PauseTasks(h.now, (t.id,)))
    _update(h, t.id, b'{"interval_ms":30000}')
    assert h.t(t.id).status is Status.PAUSED and h.t(t.id).due_ms is None
    h.apply(ResumeTasks(h.now, (t.id,)))
    assert h.t(t.id).due_ms == t.created_ms + 30_000


def test_end_at_moved_before_the_next_occurrence_ends_the_task() -> None:
    h = H()
    t = h.create(type="periodic", interval_ms=10_000)
    h.now += 1_000
    _update(h, t.id, f'{{"end_at":{h.now + 5_000}}}'.encode())
    assert h.t(t.id).status is Status.DONE and h.t(t.id).due_ms is None


def test_the_machine_refuses_a_type_change_even_if_the_api_let_one_through() -> None:
    h = H()
    t = h.create(interval_ms=60_000)
    spec = validate_create({"type": "periodic", "interval_ms": 60_000, "callback_url": URL}, now_ms=h.now)
    out = h.apply(UpdateTask(h.now, t.id, spec, 1))
    assert isinstance(out.results[0], IllegalTransitionError) and h.t(t.id) == t


def _spec() -> TaskSpec:
    return validate_create(
        {"type": "periodic", "interval_ms": 60_000, "callback_url": URL, "payload": {"big": 12345678901234567890}},
        now_ms=1_000_000,
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[1]", "body"),
        (b"{", "body"),
        (b'{"type":"delayed"}', "type"),
        (b'{"idempotency_key":"k"}', "idempotency_key"),
        (b'{"nope":1}', "nope"),
        (b'{"nope":null}', "nope"),
        (b'{"interval_ms":5}', "interval_ms"),
        (b'{"run_at":5}', "run_at"),
        (b'{"timezone":"Mars/Base"}', "timezone"),
        (b'{"callback_url":"http://169.254.169.254/"}', "callback_url"),
        (b'{"interval_ms":null}', "interval_ms"),  # the schedule removed and none given
    ],
)
def test_decode_update_refuses_what_a_create_would_and_what_cannot_change(body: bytes, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        decode_update(body, _spec(), now_ms=2_000_000)
    assert e.value.field == field, e.value


def test_decode_update_keeps_what_is_left_out_exactly_and_null_resets_to_the_default() -> None:
    s = _spec()
    u = decode_update(b'{"scene":"x","max_retries":null}', s, now_ms=2_000_000)
    assert u.payload_json == b'{"big":12345678901234567890}'
    assert (u.scene, u.max_retries, u.interval_ms, u.max_fails) == ("x", 3, 60_000, s.max_fails)
    u = decode_update(b'{"max_retries":7}', u, now_ms=2_000_000)
    assert decode_update(b'{"max_retries":null}', u, now_ms=2_000_000).max_retries == 3


def test_an_end_at_that_has_passed_does_not_block_other_changes() -> None:
    s = validate_create(
        {"type": "periodic", "interval_ms": 60_000, "callback_url": URL, "end_at": 5_000_000}, now_ms=1_000_000
    )
    assert decode_update(b'{"scene":"x"}', s, now_ms=9_000_000).end_at == 5_000_000
    with pytest.raises(ValidationError) as e:
        decode_update(b'{"end_at":6000000}', s, now_ms=9_000_000)
    assert e.value.field == "end_at"


@pytest.mark.parametrize("moves_waiting", [False, True])
def test_an_update_during_a_redrive_moves_the_tasks_own_occurrence_and_its_new_bounds_end_it(
    moves_waiting: bool,
) -> None:
    """The task's own next occurrence waits aside while a redriven one runs: a PATCH of its schedule
    and end_at applies to it too (it fired at 120 s, off the new 90 s grid, and the bound went unheeded)."""
    from molens.fsm.commands import RedriveDeadLetters

    h = H()
    t = h.create(type="periodic", interval_ms=60_000, retry={"max_retries": 0})
    c = t.created_ms
    h.fire_due(t.id)
    h.answer(t.id, 500)  # occurrence 1 (60 s) fails for good: a dead letter; the task waits for 120 s
    (dead,) = h.s.dead.values()
    h.apply(RedriveDeadLetters(h.now, (dead.id,)))
    body = msgspec.json.encode({"end_at": c + 100_000, "interval_ms": 90_000})
    u = h.t(t.id)
    spec = decode_update(body, u.spec, now_ms=h.now)
    h.apply(UpdateTask(h.now, t.id, spec, u.version, True, moves_waiting))
    h.cycle(t.id)  # the redriven occurrence succeeds: the task's own comes back
    own = h.t(t.id)
    if moves_waiting:
        assert (own.status, own.sched_ms - c) == (Status.PENDING, 90_000)  # the new grid's first after now
        h.cycle(t.id)
        assert h.t(t.id).status is Status.DONE  # the next, 180 s, is past end_at
    else:
        assert (own.status, own.sched_ms - c) == (Status.PENDING, 120_000)  # as the release before did


@pytest.mark.parametrize("moves_waiting", [False, True])
def test_a_backfill_waiting_behind_a_running_occurrence_is_dropped_when_the_new_schedule_leaves_it_empty(
    moves_waiting: bool,
) -> None:
    """The range held one instant of the old 10 s grid and none of the new 15 s one: kept, it turned
    the running occurrence's end into a late fire of an instant that came due while it ran."""
    from molens.fsm.commands import BackfillTask

    h = H()
    t = h.create(type="periodic", interval_ms=10_000, retry={"max_retries": 3, "initial_ms": 30_000})
    c = t.created_ms
    h.fire_due(t.id)  # occurrence 1 (10 s) in flight
    h.apply(BackfillTask(h.now, t.id, c - 12_000, c - 8_000))  # holds c - 10 s of the 10 s grid, none of 15 s'
    assert h.t(t.id).backfill is not None
    u = h.t(t.id)
    spec = decode_update(msgspec.json.encode({"interval_ms": 15_000}), u.spec, now_ms=h.now)
    h.apply(UpdateTask(h.now, t.id, spec, u.version, True, moves_waiting))
    assert (h.t(t.id).backfill is None) is moves_waiting
    h.answer(t.id, 500)
    for _ in range(3):  # the retries fail too, late, over several of the new grid's instants
        h.now = h.t(t.id).due_ms or h.now
        h.cycle(t.id, 500)
    nxt = h.t(t.id)
    assert nxt.seq == 2
    if moves_waiting:
        assert nxt.sched_ms > h.now  # the instants that came due while it ran are skipped (overlap skip)
    else:
        assert nxt.sched_ms < h.now and nxt.due_ms == h.now  # one of them fired late, as the release before did


def test_an_update_during_a_redrive_whose_bounds_exclude_the_tasks_own_occurrence_ends_the_task() -> None:
    from molens.fsm.commands import RedriveDeadLetters

    h = H()
    t = h.create(type="periodic", interval_ms=60_000, retry={"max_retries": 0})
    c = t.created_ms
    h.fire_due(t.id)
    h.answer(t.id, 500)
    (dead,) = h.s.dead.values()
    h.apply(RedriveDeadLetters(h.now, (dead.id,)))
    u = h.t(t.id)
    spec = decode_update(msgspec.json.encode({"end_at": c + 80_000, "interval_ms": 90_000}), u.spec, now_ms=h.now)
    h.apply(UpdateTask(h.now, t.id, spec, u.version, True, True))
    h.cycle(t.id)  # the redriven occurrence succeeds
    assert h.t(t.id).status is Status.DONE  # its own, at 90 s, is past end_at: none fires
