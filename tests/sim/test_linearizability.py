"""The register linearizability checker accepts exactly the linearizable histories."""

from __future__ import annotations

from tests.sim.linearizability import Kind, Op, Status, check_history, check_register


def w(i: int, v: int, inv: int, resp: int | None, status: Status = Status.OK) -> Op:
    return Op(op_id=i, key="k", kind=Kind.WRITE, value=v, invoke=inv, resp=resp, status=status)


def r(i: int, v: int | None, inv: int, resp: int, status: Status = Status.OK) -> Op:
    return Op(op_id=i, key="k", kind=Kind.READ, value=v, invoke=inv, resp=resp, status=status)


def test_sequential_history_is_linearizable() -> None:
    assert check_register([w(1, 1, 1, 2), r(2, 1, 3, 4), w(3, 2, 5, 6), r(4, 2, 7, 8)])[0]


def test_stale_read_after_completed_write_is_not_linearizable() -> None:
    ok, why = check_register([w(1, 1, 1, 2), w(2, 2, 3, 4), r(3, 1, 5, 6)])
    assert not ok and "no linearization" in why


def test_concurrent_write_may_be_seen_or_not() -> None:
    assert check_register([w(1, 1, 1, 10), r(2, None, 2, 3), r(3, 1, 4, 5)])[0]
    assert not check_register([w(1, 1, 1, 10), r(2, 1, 2, 3), r(3, None, 4, 5)])[0]


def test_unknown_write_may_take_effect_late_or_never() -> None:
    assert check_register([w(1, 1, 1, None, Status.UNKNOWN), r(2, None, 2, 3), r(3, 1, 40, 41)])[0]
    assert check_register([w(1, 1, 1, None, Status.UNKNOWN), r(2, None, 2, 3)])[0]
    # but once seen it cannot be unseen
    assert not check_register([w(1, 1, 1, None, Status.UNKNOWN), r(2, 1, 2, 3), r(3, None, 4, 5)])[0]


def test_failed_write_never_happened() -> None:
    assert not check_register([w(1, 1, 1, 2, Status.FAIL), r(2, 1, 3, 4)])[0]


def test_keys_are_checked_independently() -> None:
    a = Op(op_id=1, key="a", kind=Kind.WRITE, value=1, invoke=1, resp=2, status=Status.OK)
    b = Op(op_id=2, key="b", kind=Kind.READ, value=1, invoke=3, resp=4, status=Status.OK)
    assert not check_history([a, b])[0]
    assert check_history([a, Op(
        op_id=3, key="a", kind=Kind.READ, value=1, invoke=3, resp=4, status=Status.OK,
    )])[0]
