"""Dead letters and redrives (docs/architecture.md#dead-letters), through machine.apply: every kind
is written, a redrive sends the same fire id with its attempts continuing, a periodic task re-runs
the old occurrence and then goes back to its own schedule untouched, redrives queue, and dead
letters go with their task."""

from __future__ import annotations

from molens.fsm.commands import (
    DeleteDeadLetters,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    PauseTasks,
    RedriveDeadLetters,
    Results,
)
from molens.fsm.machine import WheelAdd, lost_result
from molens.model import (
    FailureKind,
    FireKind,
    IllegalTransitionError,
    NotFoundError,
    Reliability,
    Status,
)
from molens.schema import DeadLetter
from tests.unit.test_fsm_machine import H
from tests.unit.test_retry_policy import answer


def dead(h: H) -> list[DeadLetter]:
    return sorted(h.s.dead.values(), key=lambda d: d.id)


def test_retries_exhausted_writes_one_dead_letter_with_the_last_answer() -> None:
    h = H()
    t = h.create(max_retries=1, scene="orders")
    for _ in range(2):
        h.fire_due(t.id)
        answer(h, t.id, 500)
    [d] = dead(h)
    assert (d.id, d.kind, d.attempts, d.status_code, d.response_head, d.fire_id, d.scene, d.flow) == (
        f"{t.id}-1.2", FailureKind.RETRIES_EXHAUSTED, 2, 500, "no", f"{t.id}-1", "orders", "127.0.0.1:9")
    assert d.at_ms == h.now and d.sched_ms == t.sched_ms


def test_an_at_most_once_failure_is_a_dead_letter_after_its_one_attempt() -> None:
    h = H()
    t = h.create(reliability="at_most_once")
    h.fire_due(t.id)
    answer(h, t.id, 500)
    assert [(d.kind, d.attempts, d.reliability) for d in dead(h)] == [
        (FailureKind.RETRIES_EXHAUSTED, 1, Reliability.AT_MOST_ONCE)]


def test_non_retryable_answers_404_listed_statuses_and_no_retry_are_dead_letters() -> None:
    h = H()
    a, b, c = h.create(), h.create(retry={"non_retryable_statuses": [410]}), h.create()
    for tid, code, nr in ((a.id, 404, False), (b.id, 410, False), (c.id, 500, True)):
        h.fire_due(tid)
        answer(h, tid, code, no_retry=nr)
    assert [(d.task_id, d.kind, d.status_code) for d in dead(h)] == sorted(
        [(a.id, FailureKind.NON_RETRYABLE, 404), (b.id, FailureKind.NON_RETRYABLE, 410),
         (c.id, FailureKind.NON_RETRYABLE, 500)])


def test_ack_attempts_exhausted_is_an_ack_failed_dead_letter() -> None:
    h = H()
    t = h.create(ack_url="http://127.0.0.1:9/ack", ack_delay_ms=100)
    h.fire_due(t.id)
    answer(h, t.id, 200)
    for _ in range(3):
        h.fire_due(t.id)
        answer(h, t.id, 500)
    [d] = dead(h)
    assert (d.id, d.kind, d.attempts, d.url) == (f"{t.id}-1.ack3", FailureKind.ACK_FAILED, 3, "http://127.0.0.1:9/ack")
    assert h.t(t.id).status is Status.FAILED


def test_an_at_most_once_fire_lost_with_its_worker_is_an_unknown_dead_letter() -> None:
    h = H()
    t = h.create(reliability="at_most_once")
    h.fire_due(t.id)
    f = h.s.get_fire(h.t(t.id).inflight or "")
    assert f is not None
    h.apply(Results(h.now + 10_000, (lost_result(f),)))
    assert [(d.kind, d.status_code) for d in dead(h)] == [(FailureKind.UNKNOWN, None)]


def test_success_and_retries_in_progress_write_no_dead_letter() -> None:
    h = H()
    t = h.create()
    h.fire_due(t.id)
    answer(h, t.id, 500)
    h.fire_due(t.id)
    answer(h, t.id, 200)
    assert dead(h) == []


def test_redrive_of_a_failed_delayed_task_sends_the_same_fire_id_with_attempts_continuing() -> None:
    h = H()
    t = h.create(max_retries=1)
    for _ in range(2):
        h.fire_due(t.id)
        answer(h, t.id, 500)
    [d] = dead(h)
    out = h.apply(RedriveDeadLetters(h.now, (d.id,)))
    assert out.results == [d] and dead(h) == []
    fr = h.fire_due(t.id)
    assert (fr.fire.fire_id, fr.fire.attempt, fr.scheduled_ms) == (f"{t.id}-1", 3, d.sched_ms)
    answer(h, t.id, 500)  # the policy applies again in full: one more retry
    assert h.t(t.id).status is Status.FIRING
    fr = h.fire_due(t.id)
    assert fr.fire.attempt == 4
    answer(h, t.id, 200)
    assert h.t(t.id).status is Status.DONE and dead(h) == []


def test_a_redrive_that_fails_again_writes_a_new_dead_letter() -> None:
    h = H()
    t = h.create(max_retries=0)
    h.fire_due(t.id)
    answer(h, t.id, 500)
    h.apply(RedriveDeadLetters(h.now, (f"{t.id}-1.1",)))
    h.fire_due(t.id)
    answer(h, t.id, 500)
    assert [d.id for d in dead(h)] == [f"{t.id}-1.2"]


def test_a_periodic_redrive_reruns_the_old_occurrence_then_the_task_continues_where_it_was() -> None:
    h = H()
    p = h.create(type="periodic", interval_ms=60_000, max_retries=0)
    h.fire_due(p.id)
    answer(h, p.id, 500)  # occurrence 1 dead
    h.fire_due(p.id)
    answer(h, p.id, 200)  # occurrence 2 fine; the task waits for occurrence 3
    before = h.t(p.id)
    assert (before.seq, before.fail_count) == (3, 0)
    [d] = dead(h)
    h.apply(RedriveDeadLetters(h.now, (d.id,)))
    during = h.t(p.id)
    assert (during.status, during.seq, during.due_ms) == (Status.FIRING, 1, h.now)
    fr = h.fire_due(p.id)
    assert (fr.fire.fire_id, fr.fire.attempt, fr.scheduled_ms) == (f"{p.id}-1", 2, d.sched_ms)
    answer(h, p.id, 200)
    after = h.t(p.id)
    assert (after.status, after.seq, after.sched_ms, after.due_ms, after.fail_count, after.rewound) == (
        Status.PENDING, 3, before.sched_ms, before.due_ms, 0, None)


def test_redrives_of_one_periodic_task_queue_and_run_one_after_another() -> None:
    h = H()
    p = h.create(type="periodic", interval_ms=60_000, max_retries=0, max_fails=10)
    for _ in range(3):
        h.fire_due(p.id)
        answer(h, p.id, 500)
    ids = [d.id for d in dead(h)]
    assert len(ids) == 3
    out = h.apply(RedriveDeadLetters(h.now, tuple(ids)))
    assert all(isinstance(r, DeadLetter) for r in out.results)
    assert isinstance(h.apply(RedriveDeadLetters(h.now, (ids[0],))).results[0], NotFoundError)  # gone: redriven
    seen = []
    for _ in range(3):
        fr = h.fire_due(p.id)
        seen.append(fr.fire.fire_id)
        answer(h, p.id, 200)
    assert sorted(seen) == sorted(f"{p.id}-{k}" for k in (1, 2, 3))
    u = h.t(p.id)
    assert (u.seq, u.status, u.rewound, u.redrives, u.fail_count) == (4, Status.PENDING, None, (), 3)


def test_a_redrive_queued_while_the_task_retries_starts_when_that_occurrence_ends() -> None:
    h = H()
    p = h.create(type="periodic", interval_ms=60_000, max_retries=1)
    for _ in range(2):
        h.fire_due(p.id)
        answer(h, p.id, 500)  # occurrence 1: dead after 2 attempts
    h.fire_due(p.id)
    answer(h, p.id, 500)  # occurrence 2 retrying
    [d] = dead(h)
    h.apply(RedriveDeadLetters(h.now, (d.id,)))
    assert h.t(p.id).seq == 2 and h.t(p.id).redrives
    h.fire_due(p.id)
    answer(h, p.id, 200)  # occurrence 2 ends: the redrive of 1 starts at once
    u = h.t(p.id)
    assert (u.seq, u.status, u.due_ms) == (1, Status.FIRING, h.now)
    assert u.rewound is not None and u.rewound.seq == 3


def test_a_redrive_at_the_ms_the_next_occurrence_is_due_tells_the_wheel() -> None:
    """The redriven occurrence is due at the very ms the occurrence it puts aside was (the wake time
    is unchanged), and the wheel may have handed the task out for that one already: the Dispatched
    entry planning it is refused as stale, so the redrive itself must put the task back on the
    wheel, or nothing of the task fires again (simulation seed 979)."""
    h = H()
    p = h.create(type="periodic", interval_ms=1_000, max_retries=0)
    h.fire_due(p.id)
    answer(h, p.id, 500)  # occurrence 1 dead; the task waits for occurrence 2
    [d] = dead(h)
    u = h.t(p.id)
    h.now = u.wake_ms or 0  # the wheel hands the task out for occurrence 2 and the Dispatcher plans it...
    planned = DispatchItem(fire_id=u.fire_id, task_id=p.id, attempt=1, worker="w1", deadline_ms=h.now + 9_000)
    out = h.apply(RedriveDeadLetters(h.now, (d.id,)))  # ... while the redrive, stamped that ms, commits first
    v = h.t(p.id)
    assert (v.seq, v.wake_ms) == (1, u.wake_ms)
    assert WheelAdd(p.id, h.now) in out.effects
    refused = h.apply(Dispatched(h.now, (planned,)))
    assert isinstance(refused.results[0], IllegalTransitionError)
    fr = h.fire_due(p.id)  # what the wheel, told again, hands out
    assert (fr.fire.fire_id, fr.fire.attempt) == (f"{p.id}-1", 2)


def test_redrive_refusals_paused_task_unfailed_delayed_task_unknown_id_and_deleted_task() -> None:
    h = H()
    t = h.create(max_retries=0)
    h.fire_due(t.id)
    answer(h, t.id, 500)
    [d] = dead(h)
    h.apply(RedriveDeadLetters(h.now, (d.id,)))
    h.fire_due(t.id)
    answer(h, t.id, 500)
    [d2] = dead(h)
    p = h.create(type="periodic", interval_ms=60_000, max_retries=0)
    h.fire_due(p.id)
    answer(h, p.id, 500)
    dp = next(x for x in dead(h) if x.task_id == p.id)
    h.apply(PauseTasks(h.now, (p.id,)))
    assert isinstance(h.apply(RedriveDeadLetters(h.now, (dp.id,))).results[0], IllegalTransitionError)
    assert isinstance(h.apply(RedriveDeadLetters(h.now, ("nope-1.1",))).results[0], NotFoundError)
    h.apply(DeleteTasks(h.now, (t.id,)))
    assert d2.id not in h.s.dead  # a task's dead letters go with it
    assert [x.task_id for x in dead(h)] == [p.id]


def test_delete_dead_letters_answers_per_id() -> None:
    h = H()
    t = h.create(max_retries=0)
    h.fire_due(t.id)
    answer(h, t.id, 500)
    [d] = dead(h)
    assert h.apply(DeleteDeadLetters(h.now, (d.id, d.id + "x"))).results == [True, False]
    assert dead(h) == []


def test_a_redriven_at_most_once_fire_goes_out_once_more_and_is_not_retried() -> None:
    h = H()
    t = h.create(reliability="at_most_once")
    h.fire_due(t.id)
    answer(h, t.id, 503)
    [d] = dead(h)
    h.apply(RedriveDeadLetters(h.now, (d.id,)))
    fr = h.fire_due(t.id)
    assert fr.fire.attempt == 2 and fr.reliability is Reliability.AT_MOST_ONCE and fr.fire.kind is FireKind.CALLBACK
    answer(h, t.id, 503)
    assert h.t(t.id).status is Status.FAILED and [x.id for x in dead(h)] == [f"{t.id}-1.2"]


def test_a_redriven_ack_failed_task_fires_its_callback_again_and_numbers_its_ack_probes_on() -> None:
    h = H()
    t = h.create(ack_url="http://127.0.0.1:9/ack", ack_delay_ms=100)
    h.fire_due(t.id)
    answer(h, t.id, 200)
    for _ in range(3):
        h.fire_due(t.id)
        answer(h, t.id, 500)
    h.apply(RedriveDeadLetters(h.now, (f"{t.id}-1.ack3",)))
    fr = h.fire_due(t.id)
    assert (fr.fire.kind, fr.fire.attempt) == (FireKind.CALLBACK, 2)
    answer(h, t.id, 200)
    probes = []
    for _ in range(3):
        probes.append(h.fire_due(t.id).fire.attempt)
        answer(h, t.id, 500)
    assert probes == [4, 5, 6]  # ack_ttl probes again, each attempt recorded once
    assert [d.id for d in dead(h)] == [f"{t.id}-1.ack6"] and h.t(t.id).status is Status.FAILED


def test_a_buffered_occurrence_put_aside_by_a_redrive_is_still_buffered_when_it_comes_back() -> None:
    h = H()
    p = h.create(type="periodic", interval_ms=1_000, max_retries=0, max_fails=10, overlap="buffer_one",
                 catchup="none")
    h.fire_due(p.id)
    answer(h, p.id, 500)  # occurrence 1 dead
    [d] = dead(h)
    h.fire_due(p.id)  # occurrence 2 runs over the next instants
    h.apply(RedriveDeadLetters(h.now, (d.id,)))  # queued behind it
    answer(h, p.id, 200, after_ms=2_500)  # 2 ends; the instant that came due while it ran is buffered
    u = h.t(p.id)
    assert u.seq == 1 and u.rewound is not None and u.rewound.buffered
    h.fire_due(p.id)
    answer(h, p.id, 200, after_ms=3_000)  # the redrive runs long: the buffered instant is well past
    back = h.t(p.id)
    assert (back.seq, back.buffered, back.rewound) == (3, True, None)
    assert h.fire_due(p.id).fire.fire_id == f"{p.id}-3"  # fires, not skipped as missed (catchup none)
