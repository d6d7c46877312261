"""The command codec round-trips every command exactly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from molens.fsm.commands import (
    BackfillTask,
    Command,
    CommandCodecError,
    CreateItem,
    CreateTasks,
    DeleteTasks,
    Dispatched,
    DispatchItem,
    Expire,
    ExpireItem,
    PauseTasks,
    PutMeta,
    ResultItem,
    Results,
    ResumeTasks,
    TriggerTask,
    decode,
    encode,
)
from molens.model import FireKind, Outcome, Reliability, TaskSpec, TaskType, encode_payload

SPEC = TaskSpec(
    type=TaskType.PERIODIC,
    callback_url="http://127.0.0.1/cb",
    cron_expr="*/5 * * * * *",
    timezone="Europe/Berlin",
    payload_json=encode_payload({"big": 10**40, "list": [1.5, None, "é"]}),
    reliability=Reliability.AT_MOST_ONCE,
    idempotency_key="k1",
    max_fails=7,
)

COMMANDS: list[Command] = [
    CreateTasks(1, (CreateItem("A" * 26, SPEC), CreateItem("B" * 26, TaskSpec(
        type=TaskType.DELAYED, callback_url="http://x/", interval_ms=5,
    )))),
    DeleteTasks(2, ("a", "b")),
    PauseTasks(3, ("a",)),
    ResumeTasks(4, ()),
    TriggerTask(5, "a"),
    BackfillTask(5, "a", 1_000, 2_000),
    Dispatched(6, (DispatchItem(fire_id="a-1", task_id="a", attempt=1, worker="n1", deadline_ms=100),)),
    Results(
        7,
        (
            ResultItem(
                fire_id="a-1", kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE,
                response_head="ok", latency_ms=12, worker="n1",
            ),
            ResultItem(
                fire_id="a-2", kind=FireKind.ACK, status_code=None, outcome=Outcome.LOST, response_head=None,
                latency_ms=None, worker="n2", attempt=3,
            ),
        ),
    ),
    Expire(8, (ExpireItem("a", 5),)),
    PutMeta(9, "membership", b"\x00\x01"),
    PutMeta(10, "x", None),
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: type(c).__name__)
def test_every_command_round_trips(cmd: Command) -> None:
    assert decode(encode(cmd)) == cmd


def test_garbage_is_a_codec_error() -> None:
    for data in (b"", b"\x93\x63\x01\x02", b"\xc1", encode(TriggerTask(1, "a"))[:-1]):
        with pytest.raises(CommandCodecError):
            decode(data)


@given(
    st.lists(
        st.tuples(
            st.text(max_size=30),
            st.sampled_from(list(FireKind)),
            st.one_of(st.none(), st.integers(100, 599)),
            st.sampled_from(list(Outcome)),
            st.one_of(st.none(), st.text(max_size=50)),
            st.one_of(st.none(), st.integers(0, 10**6)),
            st.text(max_size=10),
            st.one_of(st.none(), st.integers(1, 30)),
        ),
        max_size=20,
    ),
    st.integers(0, 2**62),
)
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # the examples, not their speed, are the test
def test_results_round_trip_property(items: list[tuple[object, ...]], now: int) -> None:
    cmd = Results(now, tuple(ResultItem(*i) for i in items))  # type: ignore[arg-type]
    assert decode(encode(cmd)) == cmd


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_payload_round_trips_any_json(p: object) -> None:
    spec = TaskSpec(
        type=TaskType.DELAYED, callback_url="http://x/", interval_ms=1, payload_json=encode_payload(p),
    )
    cmd = CreateTasks(1, (CreateItem("id", spec),))
    back = decode(encode(cmd))
    assert isinstance(back, CreateTasks)
    assert back.items[0].spec.payload == p
