"""Deliverer against a real HTTP server on 127.0.0.1: headers, signature, capture, outcomes, reuse."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import pytest
import urllib3

from molens.delivery import (
    Deliverer,
    DeliveryCodecError,
    DeliveryOutcome,
    FireKind,
    FireRequest,
    FireResult,
    decode_fire_batch,
    decode_fire_results,
    encode_fire_batch,
    encode_fire_results,
    to_result_item,
)
from molens.delivery.pool import make_pool_manager
from molens.fsm.commands import ResultItem
from molens.model import Outcome
from molens.receiver import verify_signature
from molens.signing import namespace_secret
from tests.carrier import Carrier
from tests.integration.callback_server import CallbackServer

pytestmark = pytest.mark.integration


@pytest.fixture
def pool() -> Iterator[urllib3.PoolManager]:
    pm = urllib3.PoolManager(num_pools=8, maxsize=4)
    try:
        yield pm
    finally:
        pm.clear()


def _req(url: str, *, fire_id: str = "task1-7", kind: FireKind = FireKind.CALLBACK, timeout_ms: int = 5000,
         body: bytes = b'{"hello": "world"}') -> FireRequest:
    return FireRequest(
        fire_id=fire_id, task_id="task1", attempt=2, kind=kind, url=url, body=body, scene="billing.v2",
        timeout_ms=timeout_ms, deadline_ms=0,
    )


def test_callback_carries_headers_body_and_a_signature_the_receiver_accepts(carrier: Carrier,
    callback_server: CallbackServer, pool: urllib3.PoolManager
) -> None:
    d = Deliverer(pool, "n1", signing_secret="s1")
    res = carrier.deliver(d, _req(callback_server.url("/ok")))
    assert res == FireResult(
        fire_id="task1-7", kind=FireKind.CALLBACK, status_code=200, outcome=DeliveryOutcome.SUCCESS,
        response_head=b"ok", latency_ms=res.latency_ms, worker="n1",
    )
    assert res.latency_ms >= 0
    [got] = callback_server.recorded("/ok")
    assert got.body == b'{"hello": "world"}'
    h = {k.lower(): v for k, v in got.headers.items()}
    assert h["content-type"] == "application/json"
    assert h["x-fire-id"] == "task1-7"
    assert h["x-task-id"] == "task1"
    assert h["x-scene"] == "billing.v2"
    assert h["x-molens-attempt"] == "2"
    assert h["x-molens-kind"] == "callback"
    assert h["user-agent"].startswith("molens/")
    assert verify_signature(got.headers, got.body, ["s1"])
    assert not verify_signature(got.headers, got.body + b"x", ["s1"])
    assert not verify_signature(got.headers, got.body, ["other"])


def test_no_signature_header_without_a_secret(carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager) -> None:
    carrier.deliver(Deliverer(pool, "n1"), _req(callback_server.url("/ok"), kind=FireKind.ACK))
    [got] = callback_server.recorded("/ok")
    assert "x-molens-signature" not in {k.lower() for k in got.headers}
    assert got.headers["X-Molens-Kind"] == "ack"


def test_rotation_signs_with_both_secrets(carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager) -> None:
    d = Deliverer(pool, "n1", signing_secret="old", signing_secret_next="new", signing_scope="cluster")
    carrier.deliver(d, _req(callback_server.url("/ok")))
    [got] = callback_server.recorded("/ok")
    assert got.headers["X-Molens-Signature"].count("v1=") == 2
    assert verify_signature(got.headers, got.body, ["old"])
    assert verify_signature(got.headers, got.body, ["new"])


@pytest.mark.parametrize("scope", ["cluster", "both", "namespace"])
def test_an_attempt_is_signed_with_its_namespaces_key_by_the_signing_scope(
    carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager, scope: str,
) -> None:
    """docs/receiver.md: a receiver of namespace ``team-a`` verifies with ``team-a``'s key; a callback a
    task of ``team-b`` made the cluster send does not verify with it, whatever the scope (``cluster``:
    nor with any namespace's key, only the cluster's secret)."""
    d = Deliverer(pool, "n1", signing_secret="old", signing_secret_next="new", signing_scope=scope)
    carrier.deliver(d, dataclasses.replace(_req(callback_server.url("/ok")), namespace="team-a"))
    carrier.deliver(d, dataclasses.replace(_req(callback_server.url("/ok"), fire_id="task2-1"), namespace="team-b"))
    a, b = callback_server.recorded("/ok")
    assert a.headers["X-Molens-Signature"].count("v1=") == {"cluster": 2, "both": 4, "namespace": 2}[scope]
    a_keys = [namespace_secret("old", "team-a"), namespace_secret("new", "team-a")]
    for key in a_keys:
        assert verify_signature(a.headers, a.body, [key]) is (scope != "cluster")
        assert not verify_signature(b.headers, b.body, [key])  # team-b's callback at team-a's receiver
    for secret in ("old", "new"):
        assert verify_signature(a.headers, a.body, [secret]) is (scope != "namespace")
    assert namespace_secret("old", "team-a") != namespace_secret("old", "team-b") != "old"
    carrier.deliver(d, _req(callback_server.url("/unknown")))  # a batch of an earlier leader names no namespace
    [u] = callback_server.recorded("/unknown")
    assert verify_signature(u.headers, u.body, ["old"]) and verify_signature(u.headers, u.body, ["new"])
    assert not verify_signature(u.headers, u.body, [namespace_secret("old", "default")])


@pytest.mark.parametrize("n", [0, 100, 512, 513, 4000, 60_000])
def test_at_most_512_bytes_of_the_response_are_kept(carrier: Carrier,
    n: int, callback_server: CallbackServer, pool: urllib3.PoolManager
) -> None:
    res = carrier.deliver(Deliverer(pool, "n1"), _req(callback_server.url(f"/bytes/{n}")))
    assert res.outcome is DeliveryOutcome.SUCCESS
    assert res.response_head == (bytes(range(256)) * 256)[: min(n, 512)]


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, DeliveryOutcome.SUCCESS), (201, DeliveryOutcome.SUCCESS), (204, DeliveryOutcome.SUCCESS), (299, DeliveryOutcome.SUCCESS),
     (404, DeliveryOutcome.NOT_FOUND), (400, DeliveryOutcome.HTTP_ERROR), (410, DeliveryOutcome.HTTP_ERROR),
     (500, DeliveryOutcome.HTTP_ERROR), (503, DeliveryOutcome.HTTP_ERROR)],
)
def test_status_maps_to_outcome(carrier: Carrier, status: int, outcome: DeliveryOutcome, callback_server: CallbackServer,
                                pool: urllib3.PoolManager) -> None:
    res = carrier.deliver(Deliverer(pool, "n1"), _req(callback_server.url(f"/status/{status}")))
    assert (res.status_code, res.outcome) == (status, outcome)
    assert res.response_head == (b"" if status == 204 else b"status body")


def test_redirect_is_not_followed_and_is_an_http_error(carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager) -> None:
    res = carrier.deliver(Deliverer(pool, "n1"), _req(callback_server.url("/redirect")))
    assert (res.status_code, res.outcome) == (302, DeliveryOutcome.HTTP_ERROR)
    assert callback_server.recorded("/ok") == []


def test_no_answer_within_timeout_is_a_timeout(carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager) -> None:
    res = carrier.deliver(Deliverer(pool, "n1"), _req(callback_server.url("/hang"), timeout_ms=200))
    assert (res.status_code, res.outcome) == (None, DeliveryOutcome.TIMEOUT)
    assert "Timeout" in res.error
    assert res.latency_ms >= 200


def test_a_head_that_never_ends_is_a_timeout_at_the_attempts_deadline(carrier: Carrier, callback_server: CallbackServer) -> None:
    """A socket timeout bounds each read, not the head: a header sent a byte every 20 ms held the
    urllib3 path (TLS fires, the threads engine) for as long as the receiver liked. Reaching the
    asserts is the check (the receiver never ends it)."""
    pm = make_pool_manager(2)
    res = carrier.deliver(Deliverer(pm, "n1"), _req(callback_server.url("/trickle-head"), timeout_ms=300))
    assert (res.status_code, res.outcome) == (None, DeliveryOutcome.TIMEOUT), res
    assert carrier.deliver(Deliverer(pm, "n1"), _req(callback_server.url("/ok"))).outcome is DeliveryOutcome.SUCCESS


def test_connection_refused_is_a_network_error(carrier: Carrier, pool: urllib3.PoolManager) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = carrier.deliver(Deliverer(pool, "n1"), _req(f"http://127.0.0.1:{port}/cb"))
    assert (res.status_code, res.outcome) == (None, DeliveryOutcome.NETWORK_ERROR)
    assert res.error


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "not a url", "http://"])
def test_bad_url_is_a_network_error_not_an_exception(carrier: Carrier, url: str, pool: urllib3.PoolManager) -> None:
    res = carrier.deliver(Deliverer(pool, "n1"), _req(url))
    assert res.outcome is DeliveryOutcome.NETWORK_ERROR


def test_small_responses_reuse_the_keep_alive_connection(carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager) -> None:
    d = Deliverer(pool, "n1")
    for path in ["/ok", "/bytes/600", "/status/500", "/bytes/60000", "/status/404", "/ok"]:
        carrier.deliver(d, _req(callback_server.url(path)))
    assert len({r.client_port for r in callback_server.recorded()}) == 1


@pytest.mark.parametrize("path", ["/bytes/10000000", "/endless", "/trickle"])
def test_huge_or_endless_response_does_not_stall_and_the_connection_is_replaced(carrier: Carrier,
    path: str, callback_server: CallbackServer, pool: urllib3.PoolManager
) -> None:
    # An unbounded read would never return from /endless or /trickle: reaching the asserts is the check.
    d = Deliverer(pool, "n1")
    carrier.deliver(d, _req(callback_server.url("/ok")))
    res = carrier.deliver(d, _req(callback_server.url(path), timeout_ms=500))
    assert (res.status_code, res.outcome) == (200, DeliveryOutcome.SUCCESS)
    assert len(res.response_head) == 512 or path == "/trickle"
    carrier.deliver(d, _req(callback_server.url("/ok")))
    ports = [r.client_port for r in callback_server.recorded()]
    assert ports[0] == ports[1] != ports[2]


def test_codec_round_trips_batches() -> None:
    reqs = [
        FireRequest(
            fire_id="t-1", task_id="t", attempt=0, kind=FireKind.CALLBACK, url="http://a/b", body=b"{}",
            scene="default", timeout_ms=5000, deadline_ms=1_700_000_000_000,
        ),
        FireRequest(
            fire_id="t-2", task_id="t", attempt=3, kind=FireKind.ACK, url="https://x/é", body=b"\x00\xff",
            scene="s", timeout_ms=1, deadline_ms=0,
        ),
        FireRequest(
            fire_id="t-3", task_id="t", attempt=1, kind=FireKind.CALLBACK, url="http://a/b", body=b"{}",
            scene="s", timeout_ms=1, deadline_ms=1_700_000_009_000, not_before_ms=1_700_000_000_100,
            scheduled_ms=1_700_000_000_000,
        ),
    ]
    assert decode_fire_batch(encode_fire_batch(reqs)) == reqs
    results = [
        FireResult(
            fire_id="t-1", kind=FireKind.CALLBACK, status_code=200, outcome=DeliveryOutcome.SUCCESS,
            response_head=b"ok", latency_ms=3, worker="n1",
        ),
        FireResult(
            fire_id="t-2", kind=FireKind.ACK, status_code=None, outcome=DeliveryOutcome.TIMEOUT,
            response_head=b"", latency_ms=5000, worker="n2", error="ReadTimeoutError",
        ),
    ]
    assert decode_fire_results(encode_fire_results(results)) == results
    assert decode_fire_batch(encode_fire_batch([])) == []


@pytest.mark.parametrize(
    "frame",
    [b"", b"\xc1", encode_fire_results([]), b"\x92\xaafire_batch\x91\x90",
     b"\x92\xaafire_batch\x91\x99\x01\x02\x03\x04\x05\x06\x07\x08\x09"],
)
def test_codec_rejects_bad_frames_with_its_own_error(frame: bytes) -> None:
    with pytest.raises(DeliveryCodecError):
        decode_fire_batch(frame)


def test_results_convert_to_fsm_result_items() -> None:
    ok = to_result_item(FireResult(
        fire_id="t-1", kind=FireKind.ACK, status_code=404, outcome=DeliveryOutcome.NOT_FOUND,
        response_head=b"gone \xff", latency_ms=7, worker="n2",
    ))
    assert ok == ResultItem(
        fire_id="t-1",
        kind=FireKind.ACK,
        status_code=404,
        outcome=Outcome.RESPONSE,
        response_head="gone \ufffd",
        latency_ms=7,
        worker="n2",
    )
    lost = to_result_item(FireResult(
        fire_id="t-2", kind=FireKind.CALLBACK, status_code=None, outcome=DeliveryOutcome.TIMEOUT,
        response_head=b"", latency_ms=9, worker="n1", error="x",
    ))
    assert lost == ResultItem(
        fire_id="t-2", kind=FireKind.CALLBACK, status_code=None, outcome=Outcome.TIMEOUT, response_head=None,
        latency_ms=9, worker="n1",
    )


def test_query_string_and_default_path_reach_the_server(carrier: Carrier, callback_server: CallbackServer, pool: urllib3.PoolManager) -> None:
    d = Deliverer(pool, "n1")
    assert carrier.deliver(d, _req(callback_server.url("/ok?x=1&y=%20"))).status_code == 404
    assert carrier.deliver(d, _req(f"http://127.0.0.1:{callback_server.port}")).status_code == 404
    assert [r.path for r in callback_server.recorded()] == ["/ok?x=1&y=%20", "/"]
