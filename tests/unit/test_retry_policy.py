"""Retry policies (docs/architecture.md#retry-policy), through validation and machine.apply: the
seed's default exactly, backoff shapes, jitter, the top-level alias, non-retryable answers,
``X-Molens-No-Retry``, and 429/503 with ``Retry-After`` (throttled attempts are free until
``max_throttle_ms``)."""

from __future__ import annotations

from typing import Any

import pytest

from molens.errors import ValidationError
from molens.fsm.commands import ResultItem, Results
from molens.fsm.machine import Applied
from molens.model import DEFAULT_LIMITS, Outcome, RetryPolicy, Status, decode_update, validate_create
from molens.schema import Backoff, RetryJitter, task_json
from tests.unit.test_fsm_machine import URL, H


def answer(h: H, tid: str, code: int, *, after_ms: int = 50, retry_after_ms: int = 0,
           no_retry: bool = False) -> Applied:
    t = h.t(tid)
    f = h.s.get_fire(t.inflight or "")
    assert f is not None
    h.now += after_ms
    return h.apply(Results(h.now, (ResultItem(
        fire_id=f.fire_id, kind=f.kind, status_code=code, outcome=Outcome.RESPONSE, response_head="no",
        latency_ms=after_ms, worker="w1", attempt=f.attempt, retry_after_ms=retry_after_ms, no_retry=no_retry,
    ),)))


def waits(h: H, tid: str, codes: list[int], **kw: Any) -> list[int | None]:
    """Fire the task at each due time, answer ``codes`` in turn; the wait (ms) after each answer
    (None once the task stops retrying)."""
    out: list[int | None] = []
    for code in codes:
        h.fire_due(tid)
        answer(h, tid, code, after_ms=0, **kw)
        t = h.t(tid)
        out.append(t.due_ms - h.now if t.status is Status.FIRING and t.due_ms is not None else None)
    return out


def test_a_task_that_says_nothing_keeps_the_seeds_rule_1_2_4_seconds_then_fails() -> None:
    h = H()
    t = h.create()
    assert t.spec.retry is None  # stored as nothing: the seed's policy
    assert waits(h, t.id, [500, 500, 500, 500]) == [1000, 2000, 4000, None]
    assert h.t(t.id).status is Status.FAILED and h.t(t.id).attempt == 4
    shown = task_json(h.t(t.id))
    assert b'"retry":{"max_retries":3,"backoff":"exponential","initial_ms":1000,"factor":2' in shown


def test_exponential_backoff_with_its_own_base_factor_and_cap() -> None:
    h = H()
    t = h.create(retry={"max_retries": 5, "initial_ms": 100, "factor": 3, "max_ms": 1000})
    assert waits(h, t.id, [500] * 6) == [100, 300, 900, 1000, 1000, None]


def test_fixed_backoff_waits_the_same_before_every_retry() -> None:
    h = H()
    t = h.create(retry={"backoff": "fixed", "initial_ms": 250})
    assert waits(h, t.id, [502] * 4) == [250, 250, 250, None]


def test_full_jitter_draws_each_wait_below_the_backoff_and_every_replica_draws_the_same() -> None:
    p = RetryPolicy(initial_ms=10_000, jitter=RetryJitter.FULL, max_retries=10)
    drawn = [p.wait_ms(n, "T-1") for n in range(1, 6)]
    assert all(0 <= w < 10_000 * 2 ** (n - 1) for n, w in zip(range(1, 6), drawn, strict=True))
    assert drawn == [p.wait_ms(n, "T-1") for n in range(1, 6)]
    assert drawn != [p.wait_ms(n, "T-2") for n in range(1, 6)]


def test_top_level_max_retries_is_an_alias_and_a_disagreement_is_refused() -> None:
    assert validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL,
                            "max_retries": 5}).retry_policy.max_retries == 5
    spec = validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL, "retry": {"max_retries": 6}})
    assert spec.max_retries == 6 and spec.retry is None  # the seed's shape with 6 retries: stored as nothing
    same = validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL, "max_retries": 2,
                            "retry": {"max_retries": 2, "backoff": "fixed"}})
    assert same.max_retries == 2 and same.retry == RetryPolicy(max_retries=2, backoff=Backoff.FIXED)
    with pytest.raises(ValidationError) as ei:
        validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL, "max_retries": 2,
                         "retry": {"max_retries": 4}})
    assert ei.value.field == "max_retries"


@pytest.mark.parametrize(("retry", "field"), [
    ({"max_retries": 21}, "retry.max_retries"),
    ({"backoff": "linear"}, "retry.backoff"),
    ({"factor": 0}, "retry.factor"),
    ({"non_retryable_statuses": [200]}, "retry.non_retryable_statuses"),
    ({"non_retryable_statuses": list(range(400, 440))}, "retry.non_retryable_statuses"),
    ({"initial": 5}, "retry.initial"),
    ("fast", "retry"),
])
def test_a_bad_retry_policy_is_refused_naming_the_field(retry: Any, field: str) -> None:
    with pytest.raises(ValidationError) as ei:
        validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL, "retry": retry})
    assert ei.value.field == field, str(ei.value)


def test_the_node_default_policy_applies_to_fields_a_task_leaves_out() -> None:
    import dataclasses
    limits = dataclasses.replace(DEFAULT_LIMITS, default_retry=RetryPolicy(backoff=Backoff.FIXED, initial_ms=50))
    spec = validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL, "retry": {"initial_ms": 70}},
                           limits=limits)
    assert spec.retry == RetryPolicy(backoff=Backoff.FIXED, initial_ms=70)


def test_patch_of_max_retries_keeps_the_rest_of_the_policy_and_a_patch_of_retry_replaces_it() -> None:
    cur = validate_create({"type": "delayed", "interval_ms": 1, "callback_url": URL,
                           "retry": {"backoff": "fixed", "initial_ms": 70}})
    a = decode_update(b'{"max_retries": 7}', cur)
    assert a.retry == RetryPolicy(max_retries=7, backoff=Backoff.FIXED, initial_ms=70) and a.max_retries == 7
    b = decode_update(b'{"retry": {"factor": 3}}', a)
    assert b.retry == RetryPolicy(factor=3) and b.max_retries == 3
    assert decode_update(b'{"retry": null}', a).retry is None


def test_a_non_retryable_status_and_the_no_retry_header_end_the_occurrence_at_once() -> None:
    h = H()
    t = h.create(retry={"non_retryable_statuses": [400, 422]})
    assert waits(h, t.id, [422]) == [None] and h.t(t.id).status is Status.FAILED
    u = h.create()
    assert waits(h, u.id, [500], no_retry=True) == [None]
    assert h.t(u.id).status is Status.FAILED and h.t(u.id).attempt == 1
    p = h.create(type="periodic", interval_ms=60_000)
    h.fire_due(p.id)
    answer(h, p.id, 503, no_retry=True)
    assert (h.t(p.id).seq, h.t(p.id).fail_count, h.t(p.id).status) == (2, 1, Status.PENDING)


def test_throttled_attempts_wait_for_retry_after_and_do_not_use_up_max_retries() -> None:
    h = H()
    t = h.create(retry={"max_retries": 1})
    for _ in range(5):  # five 429s in a row: still retrying, each after the time the receiver gave
        h.fire_due(t.id)
        answer(h, t.id, 429, after_ms=0, retry_after_ms=h.now + 2_000)
        u = h.t(t.id)
        assert u.status is Status.FIRING and u.due_ms == h.now + 2_000
    assert h.t(t.id).free_attempts == 5
    h.fire_due(t.id)
    answer(h, t.id, 500, after_ms=0)  # the one real retry
    assert h.t(t.id).status is Status.FIRING
    h.fire_due(t.id)
    answer(h, t.id, 500, after_ms=0)
    assert h.t(t.id).status is Status.FAILED and h.t(t.id).attempt == 7


def test_throttling_counts_against_max_retries_after_max_throttle_ms() -> None:
    h = H()
    t = h.create(retry={"max_retries": 1, "max_throttle_ms": 10_000})
    h.fire_due(t.id)
    answer(h, t.id, 503, after_ms=0, retry_after_ms=h.now + 6_000)  # throttled at t0: free
    h.fire_due(t.id)
    answer(h, t.id, 503, after_ms=0, retry_after_ms=h.now + 6_000)  # 6 s in: free
    h.fire_due(t.id)
    answer(h, t.id, 503, after_ms=0, retry_after_ms=h.now + 6_000)  # 12 s in: counts (retry 1 of 1)
    assert h.t(t.id).status is Status.FIRING and h.t(t.id).due_ms == h.now + 6_000
    h.fire_due(t.id)
    answer(h, t.id, 503, after_ms=0, retry_after_ms=h.now + 6_000)
    assert h.t(t.id).status is Status.FAILED


def test_a_429_without_retry_after_is_an_ordinary_failure() -> None:
    h = H()
    t = h.create(retry={"max_retries": 1})
    assert waits(h, t.id, [429, 429]) == [1000, None]


def test_a_new_occurrence_starts_with_a_fresh_throttle_and_free_attempt_count() -> None:
    h = H()
    p = h.create(type="periodic", interval_ms=60_000)
    h.fire_due(p.id)
    answer(h, p.id, 429, retry_after_ms=h.now + 1_000)
    assert h.t(p.id).free_attempts == 1 and h.t(p.id).throttled_since_ms > 0
    h.fire_due(p.id)
    answer(h, p.id, 200)
    u = h.t(p.id)
    assert (u.seq, u.free_attempts, u.throttled_since_ms, u.attempt) == (2, 0, 0, 0)


def test_openapi_states_the_nodes_own_default_policy_and_the_status_bounds() -> None:
    import dataclasses

    from molens.schema import openapi_components
    limits = dataclasses.replace(DEFAULT_LIMITS, default_max_retries=5,
                                 default_retry=RetryPolicy(backoff=Backoff.FIXED, initial_ms=250))
    props = openapi_components(limits)["RetryPolicyCreate"]["properties"]
    assert (props["backoff"]["default"], props["initial_ms"]["default"], props["max_retries"]["default"]) == (
        "fixed", 250, 5)
    assert props["non_retryable_statuses"]["anyOf"][0]["items"] == {"type": "integer", "minimum": 300, "maximum": 599}
