"""The task-record checker accepts linearizable histories (with concurrency and unknown outcomes) and
refuses known violations, printing the expected minimal failing sub-history."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from tests.sim import task_linearizability as lin
from tests.sim.task_model import Call, Outcome, Seen, TaskOp

_ids = itertools.count(1)
OK, FAIL, UNKNOWN = Outcome.OK, Outcome.FAIL, Outcome.UNKNOWN


def op(call: Call, inv: int, resp: int | None, outcome: Outcome = OK, code: int | None = 200, *,
       tid: str | None = "A", seen: tuple[str, int, str] | None = None, if_match: int | None = None,
       scene: str | None = None, key: str = "k", node: str = "n1") -> TaskOp:
    return TaskOp(
        op_id=next(_ids), key=key, call=call, invoke=inv * 1_000_000,
        resp=None if resp is None else resp * 1_000_000, outcome=outcome, node=node, task_id=tid,
        if_match=if_match, scene=scene, code=code, seen=None if seen is None else Seen(*seen),
    )


def create(inv: int, resp: int | None, code: int | None = 201, seen: tuple[str, int, str] | None = ("pending", 1, "s0"),
           outcome: Outcome = OK, tid: str | None = "A", **kw: Any) -> TaskOp:
    return op(Call.CREATE, inv, resp, outcome, code, tid=tid, seen=seen, scene="s0", **kw)


def get(inv: int, resp: int, seen: tuple[str, int, str] | None, tid: str = "A", **kw: Any) -> TaskOp:
    return op(Call.GET, inv, resp, code=200 if seen else 404, seen=seen, tid=tid, **kw)


def patch(inv: int, resp: int | None, if_match: int, scene: str, code: int | None = 200,
          outcome: Outcome = OK, **kw: Any) -> TaskOp:
    seen = ("pending", if_match + 1, scene) if code == 200 else None
    return op(Call.PATCH, inv, resp, outcome, code, if_match=if_match, scene=scene, seen=kw.pop("seen", seen), **kw)


def write(call: Call, inv: int, resp: int | None, code: int | None = 200, outcome: Outcome = OK,
          seen: tuple[str, int, str] | None = None, **kw: Any) -> TaskOp:
    return op(call, inv, resp, outcome, code, seen=seen, **kw)


def ids(ops: Iterable[TaskOp]) -> list[int]:
    return [o.op_id for o in ops]


# --- linearizable histories ------------------------------------------------------------------------

def test_a_sequential_life_of_a_task_is_linearizable() -> None:
    h = [
        create(0, 1), get(2, 3, ("pending", 1, "s0")), patch(4, 5, 1, "s1"),
        write(Call.PAUSE, 6, 7, seen=("paused", 2, "s1")), write(Call.PAUSE, 8, 9, 409),
        get(10, 11, ("paused", 2, "s1")), write(Call.RESUME, 12, 13, seen=("pending", 2, "s1")),
        write(Call.RESUME, 14, 15, 409), patch(16, 17, 1, "s9", 412), write(Call.DELETE, 18, 19, seen=("pending", 2, "s1")),
        get(20, 21, None), write(Call.PAUSE, 22, 23, 404), create(24, 25, tid="B"), get(26, 27, ("pending", 1, "s0"), tid="B"),
        get(28, 29, None, tid="A"),
    ]
    assert lin.check(h) == (True, "")


def test_concurrent_patches_with_one_if_match_let_exactly_one_win() -> None:
    h = [create(0, 1), patch(2, 10, 1, "x"), patch(3, 9, 1, "y", 412), get(4, 5, ("pending", 1, "s0")),
         get(11, 12, ("pending", 2, "x"))]
    assert lin.check(h)[0]


def test_a_read_concurrent_with_a_write_may_see_it_or_not() -> None:
    h = [create(0, 1), write(Call.PAUSE, 2, 20, seen=("paused", 1, "s0")), get(3, 4, ("paused", 1, "s0")),
         get(5, 6, ("paused", 1, "s0")), get(21, 22, ("paused", 1, "s0"))]
    assert lin.check(h)[0]
    h2 = [create(0, 1), write(Call.PAUSE, 2, 20, seen=("paused", 1, "s0")), get(3, 4, ("pending", 1, "s0")),
          get(5, 6, ("paused", 1, "s0"))]
    assert lin.check(h2)[0]


def test_an_unknown_write_may_take_effect_late_or_never() -> None:
    late = [create(0, 1), patch(2, None, 1, "x", code=None, outcome=UNKNOWN), get(3, 4, ("pending", 1, "s0")),
            get(50, 51, ("pending", 2, "x"))]
    never = [create(0, 1), patch(2, None, 1, "x", code=None, outcome=UNKNOWN), get(50, 51, ("pending", 1, "s0")),
             patch(52, 53, 1, "y")]
    gone = [create(0, 1), write(Call.DELETE, 2, None, None, UNKNOWN), get(30, 31, ("pending", 1, "s0")),
            get(40, 41, None)]
    assert lin.check(late)[0] and lin.check(never)[0] and lin.check(gone)[0]


def test_an_unknown_create_may_have_made_the_task_a_later_create_names() -> None:
    h = [create(0, None, code=None, seen=None, outcome=UNKNOWN, tid=None), get(5, 6, None, tid="A"),
         create(7, 8, code=200, tid="A"), get(9, 10, ("pending", 1, "s0"))]
    assert lin.check(h)[0]


def test_refusals_that_say_nothing_constrain_nothing() -> None:
    h = [create(0, 1), write(Call.PAUSE, 2, 3, 307, FAIL), write(Call.PAUSE, 4, 5, 503, FAIL),
         get(6, 7, ("pending", 1, "s0")), op(Call.GET, 8, 9, UNKNOWN, 503)]
    assert lin.check(h)[0]


def test_records_are_checked_independently() -> None:
    h = [create(0, 1, key="a"), create(0, 1, key="b", tid="B"), get(2, 3, ("pending", 1, "s0"), key="a"),
         get(2, 3, ("pending", 1, "s0"), tid="B", key="b")]
    assert lin.check(h)[0]


# --- violations: each with the minimal failing sub-history the checker must print ------------------

def stale_read_after_patch() -> tuple[list[TaskOp], list[TaskOp]]:
    c, p, g = create(0, 1), patch(4, 5, 1, "s1"), get(6, 7, ("pending", 1, "s0"), node="n3")
    return [c, get(2, 3, ("pending", 1, "s0")), p, g, get(8, 9, ("pending", 2, "s1"))], [c, p, g]


def two_patches_with_one_if_match_both_succeed() -> tuple[list[TaskOp], list[TaskOp]]:
    c, p1, p2 = create(0, 1), patch(2, 6, 1, "x"), patch(3, 7, 1, "y", seen=("pending", 2, "y"))
    return [c, p1, p2, get(8, 9, ("pending", 2, "y"))], [c, p1, p2]


def read_of_a_deleted_task() -> tuple[list[TaskOp], list[TaskOp]]:
    c, d, g = create(0, 1), write(Call.DELETE, 4, 5, seen=("pending", 1, "s0")), get(6, 7, ("pending", 1, "s0"))
    return [c, write(Call.PAUSE, 2, 3, 404, FAIL, tid="Z"), d, g, get(8, 9, None)], [c, d, g]


def pause_lost_without_resume() -> tuple[list[TaskOp], list[TaskOp]]:
    c, p, g = create(0, 1), write(Call.PAUSE, 2, 3, seen=("paused", 1, "s0")), get(6, 7, ("pending", 1, "s0"))
    return [c, p, get(4, 5, ("paused", 1, "s0")), g, write(Call.RESUME, 8, 9, seen=("pending", 1, "s0"))], [c, p, g]


def second_create_makes_another_task() -> tuple[list[TaskOp], list[TaskOp]]:
    a, b = create(0, 1), create(2, 3, tid="B")
    return [a, get(4, 5, ("pending", 1, "s0")), b], [a, b]


def not_found_after_an_acknowledged_create() -> tuple[list[TaskOp], list[TaskOp]]:
    c, w = create(0, 1), write(Call.PAUSE, 4, 5, 404, FAIL, node="n2")
    return [c, get(2, 3, ("pending", 1, "s0")), w, patch(6, 7, 1, "s1", 412)], [c, w]


VIOLATIONS: list[Callable[[], tuple[list[TaskOp], list[TaskOp]]]] = [
    stale_read_after_patch, two_patches_with_one_if_match_both_succeed, read_of_a_deleted_task,
    pause_lost_without_resume, second_create_makes_another_task, not_found_after_an_acknowledged_create,
]


def assert_violations_caught() -> None:
    for case in VIOLATIONS:
        history, minimal = case()
        ok, text = lin.check(history)
        assert not ok, f"{case.__name__} accepted"
        assert ids(lin.shrink(history)) == ids(minimal), case.__name__
        assert text.count("\n#") == len(minimal), text
        for o in minimal:
            assert f"#{o.op_id} " in text


def test_known_violations_fail_with_their_minimal_sub_history() -> None:
    assert_violations_caught()


def test_the_printed_table_names_op_times_outcome_and_node() -> None:
    ok, text = lin.check(stale_read_after_patch()[0])
    assert not ok
    header, *rows = text.splitlines()[1:]
    assert header.split() == ["op", "invoke", "ms", "response", "ms", "outcome", "node"]
    assert "patch(A, If-Match 1, scene=s1)" in rows[1] and "ok 200 pending v2 scene=s1" in rows[1]
    assert rows[2].rstrip().endswith("n3") and "6.0" in rows[2] and "7.0" in rows[2]


def _lax_steps() -> dict[str, Callable[..., list[Any]]]:
    real = lin.step

    def accept_all(state: Any, o: TaskOp, c: Any = ()) -> list[Any]:
        return real(state, o, c) or [state]

    def unknown_as_ok(state: Any, o: TaskOp, c: Any = ()) -> list[Any]:
        return real(state, o, c) if o.code is None or o.code < 400 else [state]

    def ignore_answers(state: Any, o: TaskOp, c: Any = ()) -> list[Any]:
        seen, o.seen = o.seen, None
        try:
            return real(state, o, c)
        finally:
            o.seen = seen

    return {"accept_all": accept_all, "refusals_unchecked": unknown_as_ok, "answers_unchecked": ignore_answers}


@pytest.mark.parametrize("mutant", sorted(_lax_steps()))
def test_a_lax_checker_fails_these_tests(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: with the model loosened, the violation tests above no longer pass."""
    monkeypatch.setattr(lin, "step", _lax_steps()[mutant])
    with pytest.raises(AssertionError):
        assert_violations_caught()


def test_a_checker_that_accepts_everything_fails_these_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lin, "linearizable", lambda *a, **k: True)
    with pytest.raises(AssertionError):
        assert_violations_caught()


def test_real_time_order_matters() -> None:
    """The same operations overlapping are linearizable; in sequence they are not."""
    overlapping = [create(0, 1), write(Call.PAUSE, 2, 10, seen=("paused", 1, "s0")), get(3, 4, ("pending", 1, "s0"))]
    in_order = [create(0, 1), write(Call.PAUSE, 2, 3, seen=("paused", 1, "s0")), get(4, 5, ("pending", 1, "s0"))]
    assert lin.check(overlapping)[0] and not lin.check(in_order)[0]
