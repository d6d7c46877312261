"""The worker RPC frames a member sends (heartbeats, results, clock probe replies) decode to what
was sent, and a frame of another shape or with fields of other types is refused at the codec with
one error type, before any actor sees it: a results frame passed on while its node did not lead is
decoded inside the FireWorkerPool actor, where any other exception would stop the actor."""

from __future__ import annotations

import msgpack
import pytest

from molens.actors.clockprobe import decode_reply, reply_frame
from molens.actors.fireworker import (
    WorkerHeartbeat,
    decode_heartbeat,
    decode_results_frame,
    heartbeat_frame,
    results_frame,
)
from molens.delivery import FIRE_BATCH_VERSION, DeliveryCodecError, DeliveryOutcome, FireKind, FireResult

RESULT = FireResult(fire_id="F-1", kind=FireKind.CALLBACK, status_code=200, outcome=DeliveryOutcome.SUCCESS,
                    response_head=b"ok", latency_ms=3.5, worker="n2")


def _body(v: object) -> bytes:
    return bytes(msgpack.packb(v, use_bin_type=True))


def test_what_a_member_sends_decodes_to_what_it_sent() -> None:
    assert decode_heartbeat(heartbeat_frame(4, ["A-1"])[1:]) == WorkerHeartbeat(4, frozenset({"A-1"}),
                                                                             FIRE_BATCH_VERSION)
    assert decode_heartbeat(heartbeat_frame(4, None)[1:]) == WorkerHeartbeat(4, None, None)
    assert decode_heartbeat(_body(7)) == WorkerHeartbeat(7, None, None)  # a worker of an older version
    assert decode_results_frame(results_frame(9, {"F-1": 2}, [RESULT])[1:]) == (9, {"F-1": 2}, [RESULT])
    assert decode_reply(reply_frame(_body(1_000), 2_000)[1:]) == (1_000, 2_000)


@pytest.mark.parametrize("body", [
    b"\xc1", _body("4"), _body(-1), _body(True), _body(4.0), _body([4]), _body([4, None, 1]), _body(["4", None]),
    _body([4, "A-1"]), _body([4, {"A-1": 1}]), _body({"free": 4}),
], ids=repr)
def test_a_heartbeat_of_another_shape_is_a_codec_error(body: bytes) -> None:
    with pytest.raises(DeliveryCodecError):
        decode_heartbeat(body)


def _results(free: object, attempts: object, frame: object) -> bytes:
    return _body([free, attempts, frame])


GOOD = results_frame(9, {"F-1": 2}, [RESULT])[1:]
FRAME = msgpack.unpackb(GOOD, raw=False)[2]


@pytest.mark.parametrize("body", [
    b"\xc1", _body(9), _body([9, {"F-1": 2}]), _results("9", {"F-1": 2}, FRAME), _results(-1, {"F-1": 2}, FRAME),
    _results(9, ["F-1", 2], FRAME), _results(9, {"F-1": "2"}, FRAME), _results(9, {"F-1": None}, FRAME),
    _results(9, {"F-1": 2}, "frame"), _results(9, {"F-1": 2}, b"\x93"), _body([9, {"F-1": 2}, FRAME, 1]),
], ids=repr)
def test_a_results_frame_of_another_shape_is_a_codec_error(body: bytes) -> None:
    with pytest.raises(DeliveryCodecError):
        decode_results_frame(body)


@pytest.mark.parametrize("body", [_body(["1", 2]), _body([1]), _body([1, 2.5]), _body(7), _body([1, 2, 3])], ids=repr)
def test_a_clock_reply_of_another_shape_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_reply(body)
