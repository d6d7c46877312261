"""ApiServer lifecycle: graceful stop finishes requests in progress; the module entry point serves
over LocalContext in its own process and exits cleanly on SIGTERM."""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import urllib3

from molens.client import ConnectionFailedError, MolensClient
from molens.config import HttpConfig
from molens.web.api_context import ApiSettings
from molens.web.app import make_app
from molens.web.local_context import LocalContext
from molens.web.server import ApiServer, ServerOptions
from tests.integration.api_server import delayed
from tests.integration.conftest import ROOT, free_ports, wait_for

pytestmark = pytest.mark.integration


def test_stop_lets_a_request_in_progress_finish_then_refuses_connections(tmp_path: Path) -> None:
    ctx = LocalContext(tmp_path, ApiSettings(test_endpoint_delay_ms=500))
    server = ApiServer(make_app(ctx), ServerOptions(HttpConfig(port=0), threads=4)).start()
    http = urllib3.PoolManager(retries=False)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(http.request, "POST", server.url + "/api/v1/test/callback", body=b"{}")
            wait_for(lambda: server.requests_in_progress() > 0, 10, "the request to start")
            server.stop()
            r = fut.result(timeout=10)
        assert (r.status, r.data) == (200, b'{"ok":true}')
        with pytest.raises(urllib3.exceptions.HTTPError):
            urllib3.PoolManager(retries=False).request("GET", server.url + "/healthz")
    finally:
        server.stop()
        ctx.close()


def test_module_entry_point_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "molens.web.server", "--data-dir", str(tmp_path), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"listening http://127.0.0.1:{port}"
        with MolensClient([f"http://127.0.0.1:{port}"]) as c:
            t = c.create(delayed())
            assert c.get(t["id"])["id"] == t["id"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        with (
            MolensClient([f"http://127.0.0.1:{port}"], max_attempts=2, backoff_base_s=0.01) as c,
            pytest.raises(ConnectionFailedError),
        ):
            c.get(t["id"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_later_routes_plug_in_with_auth_and_non_json_answers(tmp_path: Path) -> None:
    import bottle

    from molens.web.app import build_api

    ctx = LocalContext(tmp_path, ApiSettings(auth_token="t"))
    api = build_api(ctx)

    @api.route("GET", "/metrics")
    def metrics() -> bottle.HTTPResponse:
        return bottle.HTTPResponse("molens_up 1\n", status=200, headers={"Content-Type": "text/plain; version=0.0.4"})

    server = ApiServer(api.app, ServerOptions(HttpConfig(port=0))).start()
    http = urllib3.PoolManager(retries=False)
    try:
        assert http.request("GET", server.url + "/metrics").status == 401
        r = http.request("GET", server.url + "/metrics", headers={"Authorization": "Bearer t"})
        assert (r.status, r.data, r.headers["Content-Type"]) == (200, b"molens_up 1\n", "text/plain; version=0.0.4")
        assert ("GET", "/metrics") in api.routes
        r = http.request("GET", server.url + "/nope")
        assert r.status == 404 and r.headers["X-Molens-Role"] == "leader"
    finally:
        server.stop()
        ctx.close()


def _serving_big(tmp_path: Path, big: bytes) -> tuple[LocalContext, ApiServer]:
    """The API, plus ``GET /big`` answering ``big``, served with two task threads."""
    import bottle

    from molens.web import access
    from molens.web.app import build_api

    ctx = LocalContext(tmp_path, ApiSettings())
    api = build_api(ctx)

    @api.route("GET", "/big", needs=access.OPEN)
    def big_answer() -> bottle.HTTPResponse:
        return bottle.HTTPResponse(big, status=200, headers={"Content-Type": "application/octet-stream"})

    return ctx, ApiServer(api.app, ServerOptions(HttpConfig(port=0), threads=2)).start()


def test_answers_larger_than_the_socket_buffers_arrive_whole_and_in_order_on_one_connection(tmp_path: Path) -> None:
    """The task thread sends what the socket takes and the I/O loop the rest (molens.web.server's
    channel): pipelined requests for an 8 MB answer, a small one and the large one again, read only
    after all three were sent (through a 256 KiB receive buffer), come back whole, in order, each
    with its own headers."""
    import socket

    big = bytes(range(256)) * 32768
    ctx, server = _serving_big(tmp_path, big)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)
            req = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            sock.sendall(req + b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out = bytearray()
            while chunk := sock.recv(65536):
                out += chunk
        answers = []
        rest = bytes(out)
        while rest:
            head, sep, rest = rest.partition(b"\r\n\r\n")
            assert sep, rest[:200]
            length = int(next(ln.split(b":", 1)[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")))
            answers.append((head.split(b"\r\n", 1)[0], rest[:length]))
            rest = rest[length:]
        assert [(status, len(body)) for status, body in answers] == [
            (b"HTTP/1.1 200 OK", len(big)), (b"HTTP/1.1 200 OK", len(answers[1][1])), (b"HTTP/1.1 200 OK", len(big))
        ]
        assert answers[0][1] == big and answers[2][1] == big
        assert b'"ok":true' in answers[1][1]
    finally:
        server.stop()
        ctx.close()


def test_a_small_answer_leaves_in_one_send_with_its_headers_and_a_large_one_from_its_own_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task thread joins an answer's status line and headers to a small body (one ``send``, one
    TCP segment, one wake-up of the client); a body of ``JOIN_LIMIT`` or more is not copied into
    the headers' buffer but queued after them. Every ``send`` of the server's channels is recorded."""
    import socket

    from molens.web import server as web_server

    sends: list[bytes] = []
    real_send = web_server._StrictChannel.send

    def recording_send(self: Any, data: Any, *args: Any, **kw: Any) -> int:
        n = int(real_send(self, data, *args, **kw))
        sends.append(bytes(data[:n]))
        return n

    monkeypatch.setattr(web_server._StrictChannel, "send", recording_send)
    big = b"b" * (web_server.JOIN_LIMIT + 1)
    ctx, server = _serving_big(tmp_path, big)
    http = urllib3.PoolManager(retries=False)
    try:
        r = http.request("GET", server.url + "/healthz")
        assert r.status == 200 and b'"ok":true' in r.data
        wait_for(lambda: bool(sends), 5, "the answer's send")
        assert len(sends) == 1, [s[:40] for s in sends]
        assert sends[0].startswith(b"HTTP/1.1 200 OK\r\n") and sends[0].endswith(r.data)

        sends.clear()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out = bytearray()
            while chunk := sock.recv(65536):
                out += chunk
        head, _, body = bytes(out).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and body == big
        assert sends[0] == head + b"\r\n\r\n", sends[0][:200]  # the headers alone: the body was not copied
        assert b"".join(sends[1:]) == big
    finally:
        server.stop()
        ctx.close()
