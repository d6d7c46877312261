"""MolensClient backoff: exponential, capped, jittered into [0.5, 1] of the step, never past the deadline."""

from __future__ import annotations

import time

import pytest

from molens import client as client_mod
from molens.client import MolensClient


def test_backoff_doubles_up_to_the_cap_with_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    c = MolensClient("http://127.0.0.1:1", backoff_base_s=0.1, backoff_max_s=1.0)
    far = time.monotonic() + 3600
    for n in range(1, 9):
        c._backoff(n, far)
    steps = [min(1.0, 0.1 * 2 ** (n - 1)) for n in range(1, 9)]
    assert all(0.5 * s <= d <= s for d, s in zip(slept, steps, strict=True)), slept
    assert len({round(d, 6) for d in slept}) > 1  # jittered


def test_backoff_never_sleeps_past_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    c = MolensClient(["http://127.0.0.1:1"], backoff_base_s=10, backoff_max_s=10)
    c._backoff(5, time.monotonic() + 0.2)
    c._backoff(5, time.monotonic() - 1)
    assert slept[0] <= 0.2 and slept[1] == 0.0


def test_urls_are_reduced_to_base_urls_and_rotated() -> None:
    c = MolensClient(["http://a:1/", "http://b:2"])
    assert c._urls == ["http://a:1", "http://b:2"]
    with pytest.raises(ValueError, match="no path"):  # the API is at the root: a path prefix would answer 404
        MolensClient(["http://a:1/x/"])
    assert c._next_node("http://a:1") == "http://b:2"
    assert c._next_node("http://b:2") == "http://a:1"
    assert c._next_node("http://leader-not-listed:3") == "http://a:1"
    with pytest.raises(ValueError):
        MolensClient([])


def test_a_retry_goes_only_with_time_left_to_be_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node answers 503 no_leader: a keyed create backs off up to its retry deadline. The retry
    after that backoff went with a millisecond left, could not be answered, and turned the clean
    failure (nothing applied) into an unknown outcome. Now a backoff leaves a retry MIN_ATTEMPT_S,
    and with less left the client gives up with the nodes' answer (here 1 s of a 3 s deadline, so a
    loaded machine answers the retry within its time)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from molens.client import OutcomeUnknownError, UnavailableError

    monkeypatch.setattr(client_mod, "MIN_ATTEMPT_S", 1.0, raising=False)

    arrivals: list[float] = []

    class NoLeader(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrivals.append(time.monotonic())
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(0.02)  # a node's answer takes a moment
            body = json.dumps({"error": {"code": "no_leader", "message": "no leader yet"}}).encode()
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NoLeader)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = MolensClient(f"http://127.0.0.1:{server.server_address[1]}", retry_deadline_s=3.0, max_attempts=1_000,
                         backoff_base_s=10, backoff_max_s=10)
        with pytest.raises(UnavailableError) as err:
            c.create(type="delayed", interval_ms=1000, callback_url="http://127.0.0.1:9/cb")
        assert not isinstance(err.value, OutcomeUnknownError) and err.value.code == "no_leader"
        assert len(arrivals) == 2  # the first, and one retry after a backoff that left it its time
    finally:
        server.shutdown()
        server.server_close()
