"""The recommended receiver on waitress, fed by the real Deliverer: exactly once, truthful ACK, signatures."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
import waitress
from waitress import wasyncore

from molens.actors.notifier import NoticeBatch, NoticeSender
from molens.delivery import Deliverer, DeliveryOutcome, FireKind, FireRequest, FireResult
from molens.delivery.pool import make_pool_manager
from molens.model import CallbackPolicy
from molens.receiver import Fire, PermanentFireError, ReceiverApp, make_receiver_app
from molens.schema import Notice, NoticeType
from molens.signing import compute_v1, sign

pytestmark = pytest.mark.integration

SECRET = "rcv-secret"


def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.005)


class Served:
    """A receiver app on waitress in a thread, on a free port; ``stop()`` ends it and its client."""

    def __init__(self, app: ReceiverApp, threads: int = 12) -> None:
        self.app = app
        self.server: Any = waitress.create_server(app, host="127.0.0.1", port=0, threads=threads)
        self.port: int = self.server.effective_port
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="receiver-waitress", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # poll in short rounds and close from this thread: closing sockets under a running select()
        # from another thread is a race (EBADF)
        while not self._stop.is_set():
            wasyncore.loop(timeout=0.05, map=self.server._map, use_poll=True, count=1)
        self.server.close()

    def url(self, path: str = "/fire") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.app.close()


class CountingHandler:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.gate: threading.Event | None = None
        self.fail_first: type[Exception] | None = None

    def __call__(self, fire: Fire) -> Any:
        with self.lock:
            self.calls.append(fire.fire_id)
            n = len(self.calls)
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail_first is not None and n == 1:
            raise self.fail_first("first attempt breaks")
        return {"processed": fire.fire_id, "payload": fire.json(), "attempt": fire.attempt}


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pm = urllib3.PoolManager(num_pools=4, maxsize=16)
    try:
        yield pm
    finally:
        pm.clear()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(
        handler: Callable[[Fire], Any], secrets: list[str] | None = None, url: str | None = None
    ) -> Served:
        cp_url = url or f"file://{tmp_path / 'checkpoints'}"
        s = Served(make_receiver_app(handler, cp_url, [SECRET] if secrets is None else secrets))
        started.append(s)
        return s

    try:
        yield start
    finally:
        for s in started:
            s.stop()


def _fire(
    url: str, fire_id: str = "task9-1", kind: FireKind = FireKind.CALLBACK, attempt: int = 0
) -> FireRequest:
    return FireRequest(
        fire_id=fire_id, task_id="task9", attempt=attempt, kind=kind, url=url, body=b'{"amount": 5}',
        scene="pay", timeout_ms=5000, deadline_ms=0,
    )


def test_a_fire_is_processed_once_and_duplicates_get_the_stored_result(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    results = [d.deliver(_fire(srv.url(), attempt=a)) for a in range(3)]
    assert h.calls == ["task9-1"]
    assert {(r.status_code, r.outcome) for r in results} == {(200, DeliveryOutcome.SUCCESS)}
    assert results[0].response_head == b'{"processed":"task9-1","payload":{"amount":5},"attempt":0}'
    assert results[1].response_head == results[2].response_head == results[0].response_head
    d.deliver(_fire(srv.url(), fire_id="task9-2"))
    assert h.calls == ["task9-1", "task9-2"]


def test_concurrent_duplicates_run_the_handler_once_and_the_others_are_told_to_retry(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    h.gate = threading.Event()
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    results: list[FireResult] = []
    lock = threading.Lock()

    def send() -> None:
        r = d.deliver(_fire(srv.url()))
        with lock:
            results.append(r)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    wait_until(lambda: len(results) == 7)  # all but the one holding the claim
    assert {r.status_code for r in results} == {503}
    assert h.calls == ["task9-1"]
    # while it runs the ACK says "not yet"
    assert d.deliver(_fire(srv.url(), kind=FireKind.ACK)).status_code == 409
    h.gate.set()
    for t in threads:
        t.join(10)
    assert sorted(r.status_code or 0 for r in results) == [200] + [503] * 7
    assert d.deliver(_fire(srv.url())).status_code == 200
    assert h.calls == ["task9-1"]


def test_two_receiver_processes_sharing_a_checkpoint_store_still_process_once(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h1, h2 = CountingHandler(), CountingHandler()
    a, b = serve(h1), serve(h2)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    assert d.deliver(_fire(a.url())).status_code == 200
    assert d.deliver(_fire(b.url())).status_code == 200
    assert len(h1.calls) + len(h2.calls) == 1


def test_ack_probe_answers_2xx_only_once_the_fire_is_done(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    assert d.deliver(_fire(srv.url("/ack"), kind=FireKind.ACK)).status_code == 409  # never seen
    assert d.deliver(_fire(srv.url())).status_code == 200
    ack = d.deliver(_fire(srv.url("/ack"), kind=FireKind.ACK))
    assert (ack.status_code, ack.outcome) == (200, DeliveryOutcome.SUCCESS)
    assert h.calls == ["task9-1"]  # the probe never runs the handler


def test_a_handler_exception_releases_the_fire_so_the_retry_runs_it_again(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    h.fail_first = RuntimeError
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    first = d.deliver(_fire(srv.url()))
    assert (first.status_code, first.outcome) == (500, DeliveryOutcome.HTTP_ERROR)
    assert d.deliver(_fire(srv.url(), kind=FireKind.ACK)).status_code == 409
    assert d.deliver(_fire(srv.url(), attempt=1)).status_code == 200
    assert d.deliver(_fire(srv.url(), attempt=2)).status_code == 200
    assert h.calls == ["task9-1", "task9-1"]
    assert d.deliver(_fire(srv.url(), kind=FireKind.ACK)).status_code == 200


def test_a_permanent_failure_is_recorded_and_never_retried(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    h.fail_first = PermanentFireError
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    assert [d.deliver(_fire(srv.url(), attempt=a)).status_code for a in range(3)] == [422, 422, 422]
    assert h.calls == ["task9-1"]
    assert d.deliver(_fire(srv.url(), kind=FireKind.ACK)).status_code == 409


def test_bad_or_missing_signatures_are_rejected_before_the_handler(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    srv = serve(h)
    assert Deliverer(http, "n1").deliver(_fire(srv.url())).status_code == 401
    assert Deliverer(http, "n1", signing_secret="wrong").deliver(_fire(srv.url())).status_code == 401
    now = time.time_ns() // 1_000_000
    sig = sign(SECRET, "task9-1", b'{"amount": 5}', now)
    base = {"X-Fire-ID": "task9-1", "X-Molens-Kind": "callback", "Content-Type": "application/json"}
    tampered = http.request(
        "POST", srv.url(), body=b'{"amount": 500}', headers={**base, "X-Molens-Signature": sig}
    )
    assert tampered.status == 401
    other_fire = http.request(
        "POST",
        srv.url(),
        body=b'{"amount": 5}',
        headers={**base, "X-Fire-ID": "task9-2", "X-Molens-Signature": sig},
    )
    assert other_fire.status == 401
    stale = sign(SECRET, "task9-1", b'{"amount": 5}', now - 600_000)
    replayed = http.request(
        "POST", srv.url(), body=b'{"amount": 5}', headers={**base, "X-Molens-Signature": stale}
    )
    assert replayed.status == 401
    ack = Deliverer(http, "n1", signing_secret="wrong").deliver(_fire(srv.url(), kind=FireKind.ACK))
    assert ack.status_code == 401
    genuine = http.request(
        "POST", srv.url(), body=b'{"amount": 5}', headers={**base, "X-Molens-Signature": sig}
    )
    assert genuine.status == 200
    assert h.calls == ["task9-1"]


def test_secret_rotation_is_accepted_by_receivers_on_either_secret(
    serve: Callable[..., Served], http: urllib3.PoolManager, tmp_path: Path
) -> None:
    rotating = Deliverer(http, "n1", signing_secret="old", signing_secret_next="new")
    for i, secrets in enumerate([["old"], ["new"], ["new", "old"]]):
        srv = serve(CountingHandler(), secrets=secrets, url=f"file://{tmp_path / f'cp{i}'}")
        assert rotating.deliver(_fire(srv.url())).status_code == 200
    srv = serve(CountingHandler(), secrets=["other"], url=f"file://{tmp_path / 'cpx'}")
    assert rotating.deliver(_fire(srv.url())).status_code == 401


def test_malformed_requests_get_clear_errors(serve: Callable[..., Served], http: urllib3.PoolManager) -> None:
    h = CountingHandler()
    srv = serve(h, secrets=[])
    assert http.request("GET", srv.url()).status == 405
    assert http.request("POST", srv.url(), body=b"{}").status == 400  # no X-Fire-ID
    big = http.request("POST", srv.url(), body=b"x" * ((1 << 20) + 1), headers={"X-Fire-ID": "f"})
    assert big.status == 413
    assert h.calls == []
    # unsigned receivers (secrets=[]) accept unsigned callbacks
    assert Deliverer(http, "n1").deliver(_fire(srv.url())).status_code == 200


def _doc_example() -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "receiver.md").read_text()
    section = text.split("## The recommended receiver", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_documented_receiver_runs_as_a_process_and_processes_each_fire_once(
    tmp_path: Path, http: urllib3.PoolManager
) -> None:
    (tmp_path / "receiver_app.py").write_text(_doc_example())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PORT": str(port), "MOLENS_SIGNING_SECRETS": "old,new",
           "MOONCAT_CHECKPOINT_URL": f"file://{tmp_path / 'cp'}"}
    proc = subprocess.Popen([sys.executable, "receiver_app.py"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def listening() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as c:
                return c.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening, 20)
        d = Deliverer(http, "n1", signing_secret="new")
        url = f"http://127.0.0.1:{port}/fire"
        ack = _fire(url, kind=FireKind.ACK)
        assert d.deliver(ack).status_code == 409
        first, again = d.deliver(_fire(url)), d.deliver(_fire(url, attempt=1))
        assert (first.status_code, again.status_code) == (200, 200)
        assert first.response_head == again.response_head == b'{"ok":true,"fire":"task9-1"}'
        assert d.deliver(ack).status_code == 200
        assert Deliverer(http, "n1", signing_secret="forged").deliver(_fire(url)).status_code == 401
        bad = FireRequest(
            fire_id="task9-2", task_id="task9", attempt=0, kind=FireKind.CALLBACK, url=url, body=b"[1, 2]",
            scene="pay", timeout_ms=5000, deadline_ms=0,
        )
        assert d.deliver(bad).status_code == 422
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_a_result_that_cannot_be_stored_is_a_500_and_the_fire_stays_runnable(
    tmp_path: Path, http: urllib3.PoolManager
) -> None:
    calls: list[int] = []

    def handler(fire: Fire) -> Any:
        calls.append(fire.attempt)
        return object() if len(calls) == 1 else {"ok": 1}

    srv = Served(make_receiver_app(handler, f"file://{tmp_path / 'cp'}", [SECRET]))
    try:
        d = Deliverer(http, "n1", signing_secret=SECRET)
        assert d.deliver(_fire(srv.url())).status_code == 500
        assert d.deliver(_fire(srv.url(), attempt=1)).status_code == 200
        assert calls == [0, 1]
    finally:
        srv.stop()


def test_a_handler_outliving_its_lease_loses_to_the_next_claim_and_is_told_to_retry(
    tmp_path: Path, http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    gate = threading.Event()

    def handler(fire: Fire) -> Any:
        if not h.calls:
            h.calls.append("slow")
            gate.wait(30)
            return {"run": "slow"}
        h.calls.append("fast")
        return {"run": "fast"}

    srv = Served(make_receiver_app(handler, f"file://{tmp_path / 'cp'}", [SECRET], lease_ms=100))
    try:
        d = Deliverer(http, "n1", signing_secret=SECRET)
        slow: list[FireResult] = []
        t = threading.Thread(target=lambda: slow.append(d.deliver(_fire(srv.url()))))
        t.start()
        wait_until(lambda: h.calls == ["slow"])
        # 503 while the slow run's lease is live, then the next delivery claims and runs the handler
        wait_until(lambda: d.deliver(_fire(srv.url(), attempt=1)).status_code == 200)
        gate.set()
        t.join(10)
        # its done() was refused (the lease had moved on): a throttle, so Molens asks again for the stored answer
        assert (slow[0].status_code, slow[0].retry_after_ms > 0) == (503, True)
        assert d.deliver(_fire(srv.url(), attempt=2)).response_head == b'{"run":"fast"}'
        assert h.calls == ["slow", "fast"]
    finally:
        gate.set()
        srv.stop()


@pytest.mark.parametrize("secret", ["s3cret", b"s3cret"], ids=["str", "bytes"])
def test_a_single_secret_given_as_str_or_bytes_is_one_secret(
    secret: str | bytes, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    srv = Served(make_receiver_app(h, f"file://{tmp_path / 'cp'}", secret))
    try:
        body = b'{"amount": 5}'
        now = time.time_ns() // 1_000_000
        base = {"X-Fire-ID": "task9-1", "X-Molens-Kind": "callback", "Content-Type": "application/json"}
        # a str iterated gave one-letter secrets; bytes iterated gave ints, i.e. all-zero keys, which
        # HMAC pads into the empty key
        for forged in (sign("s", "task9-1", body, now), f"t={now},v1={compute_v1(b'', 'task9-1', body, now)}"):
            r = http.request("POST", srv.url(), body=body, headers={**base, "X-Molens-Signature": forged})
            assert r.status == 401
        assert h.calls == []
        assert Deliverer(http, "n1", signing_secret="s3cret").deliver(_fire(srv.url())).status_code == 200
        assert h.calls == ["task9-1"]
    finally:
        srv.stop()


def test_a_busy_fire_is_a_throttle_molens_does_not_count_against_max_retries(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    h.gate = threading.Event()
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    first: list[FireResult] = []
    t = threading.Thread(target=lambda: first.append(d.deliver(_fire(srv.url()))))
    t.start()
    try:
        wait_until(lambda: h.calls == ["task9-1"])
        busy = d.deliver(_fire(srv.url(), attempt=1))
        # molens reads Retry-After on 429/503 only (a 409's is ignored and the attempt counts)
        assert (busy.status_code, busy.retry_after_ms > 0, busy.no_retry) == (503, True, False)
    finally:
        h.gate.set()
        t.join(10)
    assert first[0].status_code == 200
    assert d.deliver(_fire(srv.url(), attempt=2)).response_head == first[0].response_head
    assert h.calls == ["task9-1"]


def test_a_permanent_failure_tells_molens_not_to_retry_now_and_on_every_later_delivery(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    h.fail_first = PermanentFireError
    srv = serve(h)
    d = Deliverer(http, "n1", signing_secret=SECRET)
    results = [d.deliver(_fire(srv.url(), attempt=a)) for a in range(2)]
    assert [(r.status_code, r.no_retry) for r in results] == [(422, True), (422, True)]
    assert h.calls == ["task9-1"]


def test_a_notification_is_answered_without_running_the_handler(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    srv = serve(h)
    url = srv.url("/notify")
    notice = Notice(id="task9-1.3", type=NoticeType.DEAD_LETTER, task_id="task9", fire_id="task9-1",
                    at_ms=time.time_ns() // 1_000_000, detail="callback: failed", url=url)
    batch = NoticeBatch(url, (notice,))
    assert NoticeSender(make_pool_manager(1, CallbackPolicy()), 5_000, ("wrong",))(batch) == "status 401"
    assert NoticeSender(make_pool_manager(1, CallbackPolicy()), 5_000, (SECRET,))(batch) is None  # 2xx: acknowledged
    assert h.calls == []
    # the notification left no record: the fire id it named is still runnable
    d = Deliverer(http, "n1", signing_secret=SECRET)
    assert d.deliver(_fire(srv.url(), fire_id="task9-1.3", kind=FireKind.ACK)).status_code == 409


def test_only_callbacks_run_the_handler_and_an_unknown_kind_is_refused(
    serve: Callable[..., Served], http: urllib3.PoolManager
) -> None:
    h = CountingHandler()
    srv = serve(h, secrets=[])
    odd = http.request("POST", srv.url(), body=b"{}", headers={"X-Fire-ID": "task9-1", "X-Molens-Kind": "event"})
    assert odd.status == 400
    assert h.calls == []
    no_kind = http.request("POST", srv.url(), body=b"{}", headers={"X-Fire-ID": "task9-1"})
    assert no_kind.status == 200  # no X-Molens-Kind: a callback, as before
    assert h.calls == ["task9-1"]
