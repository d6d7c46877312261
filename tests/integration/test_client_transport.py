"""The Python SDK's own HTTP/1.1 transport (``molens.client._NodePool``) against a scripted server on
a real socket: keep-alive reuse, a connection the server closed while idle, chunked and ``Connection:
close`` answers, and whether a failed request counts as possibly applied."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from molens.client import ApiError, ConnectionFailedError, MolensClient, OutcomeUnknownError, UnavailableError
from tests.integration.conftest import free_ports
from tests.integration.raw_server import RawServer

pytestmark = pytest.mark.integration

TASK = {"id": "01TESTTASK", "status": "pending"}

def _json(body: object, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n{extra}\r\n"
    ).encode() + data


@contextmanager
def scripted(answer: Callable[[int, bytes], bytes | None], close_after_each: bool = False) -> Iterator[RawServer]:
    """A RawServer answering request number n (1, 2, ...) with ``answer(n, request)``; None closes
    the connection without an answer."""

    def script(conn: socket.socket, req: bytes) -> bool:
        out = answer(len(srv.requests), req)
        if out is None:
            return False
        conn.sendall(out)
        return not close_after_each

    srv = RawServer(script)
    try:
        yield srv
    finally:
        srv.stop()


def _client(port: int, **kw: object) -> MolensClient:
    return MolensClient([f"http://127.0.0.1:{port}"], backoff_base_s=0.01, backoff_max_s=0.02, **kw)  # type: ignore[arg-type]


def test_keep_alive_reuses_one_connection_and_sends_one_write_per_request() -> None:
    seen: list[bytes] = []

    def answer(n: int, req: bytes) -> bytes:
        seen.append(req)
        return _json(TASK)

    with scripted(answer) as st, _client(st.port) as c:
        for _ in range(5):
            assert c.get("01TESTTASK") == TASK
        created = c.create({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x"})
        assert created == TASK
    assert st.connections == 1 and len(st.requests) == 6
    head, _, body = seen[-1].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /api/v1/tasks HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{st.port}".encode() in head
    assert b"\r\nAccept-Encoding: identity\r\n" in head and b"\r\nUser-Agent: molens-python/" in head
    assert json.loads(body)["idempotency_key"]  # the body arrived whole, by its Content-Length


def test_a_connection_the_server_closed_while_idle_is_not_written_to() -> None:
    # the server answers, then closes the connection (its keep-alive timeout): the next request must
    # go out on a new connection at the first attempt, not fail on the stale one and count as "maybe applied"
    with scripted(lambda n, req: _json(TASK), close_after_each=True) as st, _client(st.port, max_attempts=1) as c:
        for _ in range(3):
            assert c.pause("01TESTTASK") == TASK  # not retried on an unknown outcome: max_attempts=1
            threading.Event().wait(0.05)  # let the server's close arrive before the next request
    assert st.connections == 3 and len(st.requests) == 3


def test_chunked_and_connection_close_answers_are_read_whole() -> None:
    body = json.dumps(TASK).encode()
    chunked = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body[:5]):x}\r\n".encode() + body[:5] + b"\r\n"
        + f"{len(body[5:]):x}\r\n".encode() + body[5:] + b"\r\n0\r\n\r\n"
    )

    def answer(n: int, req: bytes) -> bytes:
        return chunked if n == 1 else _json(TASK, "Connection: close\r\n")

    with scripted(answer) as st, _client(st.port) as c:
        assert c.get("01TESTTASK") == TASK  # chunked, kept alive
        assert c.get("01TESTTASK") == TASK  # same connection, answered with Connection: close
        assert st.connections == 1
        assert c.get("01TESTTASK") == TASK  # so a new one
    assert st.connections == 2


def test_a_request_sent_without_an_answer_is_an_unknown_outcome_a_refused_connect_is_not() -> None:
    # the server reads the request and closes without answering: it may have applied it
    with scripted(lambda n, req: None) as st, _client(st.port, max_attempts=2) as c, pytest.raises(
        OutcomeUnknownError
    ):
        c.pause("01TESTTASK")
    assert len(st.requests) == 2
    # nobody listens: the request never left, so the error says no node answered (not "maybe applied")
    with _client(free_ports(1)[0], max_attempts=2) as c, pytest.raises(ConnectionFailedError):
        c.pause("01TESTTASK")


def test_a_read_timeout_after_sending_is_an_unknown_outcome() -> None:
    gate = threading.Event()

    def answer(n: int, req: bytes) -> bytes | None:
        gate.wait(2)  # longer than the client's read timeout
        return None

    with scripted(answer) as st, _client(st.port, max_attempts=1, timeout=0.2) as c:
        with pytest.raises(OutcomeUnknownError):
            c.pause("01TESTTASK")
        gate.set()


def test_https_checks_the_certificate_and_sends_nothing_to_an_untrusted_server(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    got: list[bytes] = []

    def serve() -> None:
        srv.settimeout(5)
        try:
            conn, _ = srv.accept()
            with ctx.wrap_socket(conn, server_side=True) as tls:
                got.append(tls.recv(65536))
        except (OSError, ssl.SSLError):
            pass  # the client refuses the handshake: nothing arrives

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with MolensClient([f"https://127.0.0.1:{port}"], max_attempts=1) as c, pytest.raises(ConnectionFailedError) as ei:
        c.pause("01TESTTASK")  # not a keyed create: an unknown outcome would raise OutcomeUnknownError instead
    t.join(5)
    srv.close()
    assert "CERTIFICATE_VERIFY_FAILED" in str(ei.value) and got == []


@pytest.mark.parametrize("token", ["a\r\nX-Evil: 1", "tok en", "tök"])
def test_a_token_that_could_break_the_request_head_is_refused(token: str) -> None:
    with pytest.raises(ValueError, match="token"):
        MolensClient(["http://127.0.0.1:9"], token=token)


def _redirect(location: str, status: int = 307) -> bytes:
    return f"HTTP/1.1 {status} Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()


@pytest.mark.parametrize("then", ["bad", "loop", "proxy"])
def test_a_create_whose_retry_ends_on_a_redirect_after_a_lost_answer_is_an_unknown_outcome(then: str) -> None:
    """The first attempt reached a node and got no answer (it may have made the task); the retries
    then meet a bad redirect, nodes naming each other as leader until the budget ends, or a proxy's
    302: the caller must learn that the first may have been applied, with the key to find out, not
    a plain error after which it would create again under a new key."""
    here: list[int] = []

    def answer(n: int, req: bytes) -> bytes | None:
        if n == 1:
            return None  # read, then closed without an answer
        if then == "bad":
            return _redirect("ftp://user:s3cret@elsewhere/x")
        if then == "loop":
            return _redirect(f"http://127.0.0.1:{here[0]}/api/v1/tasks")
        return _redirect("http://login.example/", 302)

    with scripted(answer) as st:
        here.append(st.port)
        with _client(st.port, max_attempts=3, retry_deadline_s=5) as c, pytest.raises(OutcomeUnknownError) as ei:
            c.create({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x",
                      "idempotency_key": "k-1"})
    assert ei.value.idempotency_keys == ("k-1",)
    assert "s3cret" not in str(ei.value)


def test_a_redirect_error_never_echoes_a_password_in_its_location() -> None:
    with scripted(lambda n, req: _redirect("ftp://user:s3cret@elsewhere/x")) as st, _client(st.port) as c, \
            pytest.raises(UnavailableError, match="bad redirect") as ei:
        c.get("01TESTTASK")
    assert "s3cret" not in str(ei.value) and "***@" in str(ei.value)


def test_an_answer_longer_than_max_response_bytes_is_refused() -> None:
    big = {"id": "01TESTTASK", "payload": "x" * 5_000}
    with scripted(lambda n, req: _json(big)) as st, _client(st.port, max_response_bytes=4_096) as c:
        with pytest.raises(ApiError, match="longer than max_response_bytes") as ei:
            c.get("01TESTTASK")
        assert ei.value.status == 502
        # a write answered at all may have been applied: its key finds out
        with pytest.raises(OutcomeUnknownError) as eu:
            c.create({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x",
                      "idempotency_key": "k-2"})
        assert eu.value.idempotency_keys == ("k-2",)
    with scripted(lambda n, req: _json(big)) as st, _client(st.port, max_response_bytes=len(_json(big))) as c:
        assert c.get("01TESTTASK") == big  # the bound counts the body, not the head


def test_many_attempts_back_off_without_overflowing() -> None:
    with MolensClient(["http://127.0.0.1:9"], max_attempts=5_000) as c:
        c._backoff(2_000, deadline=0.0)  # 2 ** 1999 is past a float: capped, no OverflowError


@pytest.mark.parametrize("scheme", ["http", "HTTP", "Http"])
def test_a_redirect_from_https_to_plain_http_is_not_followed_whatever_the_case_of_its_scheme(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bearer token would go unencrypted: ``HTTP://`` is plain http too (the redirect is parsed
    before it is compared). The pools are stand-ins: what matters is where the client sends."""
    import http.client

    from molens import client as client_mod

    asked: list[str] = []

    class Pool:
        def __init__(self, base: str) -> None:
            self.base = base

        def request(self, method: str, path: str, *args: object) -> client_mod._Answer:
            asked.append(self.base)
            head = http.client.HTTPMessage()
            head["Location"] = f"{scheme}://10.0.0.2:8080{path}"
            return client_mod._Answer(307, head, b"")

        def close(self) -> None:
            pass

    with MolensClient(["https://node-1.example"], token="t0ken", max_attempts=2) as c:
        monkeypatch.setattr(c, "_pool", Pool)
        with pytest.raises(UnavailableError, match="is plain http; not following it from https"):
            c.get("01TESTTASK")
    assert asked == ["https://node-1.example"]


def _proxy(status: int) -> bytes:
    return (f"HTTP/1.1 {status} Gateway\r\nContent-Type: text/html\r\nContent-Length: 13\r\n\r\n"
            "<html></html>").encode()


def test_a_proxys_502_or_504_is_a_lost_answer_retried_when_safe_and_unknown_for_a_write() -> None:
    """No node answers 502 or 504: a proxy in front of it does when the node behind it did not answer,
    which may have had the request. A read is asked again; a keyed create too, and it ends unknown
    with its key; a write that is never sent twice ends unknown at once (a plain error made a caller
    create again under a new key, or trigger again)."""
    with scripted(lambda n, req: _proxy(502) if n == 1 else _json(TASK)) as st, _client(st.port) as c:
        assert c.get("01TESTTASK") == TASK
        assert len(st.requests) == 2
    with scripted(lambda n, req: _proxy(504)) as st, _client(st.port, max_attempts=3) as c:
        with pytest.raises(OutcomeUnknownError) as ei:
            c.create({"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x",
                      "idempotency_key": "k-3"})
        assert ei.value.idempotency_keys == ("k-3",) and len(st.requests) == 3
    with scripted(lambda n, req: _proxy(502)) as st, _client(st.port, max_attempts=3) as c:
        with pytest.raises(OutcomeUnknownError):
            c.trigger("01TESTTASK")
        assert len(st.requests) == 1
    with scripted(lambda n, req: _proxy(502)) as st, _client(st.port, max_attempts=2) as c:
        with pytest.raises(ApiError) as eg:
            c.get("01TESTTASK")
        assert eg.value.status == 502 and len(st.requests) == 2
