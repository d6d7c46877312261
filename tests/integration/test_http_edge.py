"""The HTTP edge under hostile clients (molens/web/body.py, molens/web/edge.py): every route refuses a
body nested 10,000 deep, and a body where it takes none, in the API's error shape; malformed request
lines, huge chunk sizes, too many or too large headers are answered at once and the connection
closed; slow clients are answered 408 by their deadline; one address gets only its share of
connections. All over real sockets against a real waitress server."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from molens.config import HttpConfig
from molens.web.api_context import ApiSettings
from molens.web.openapi import document
from tests.integration.api_server import Served, delayed, serve

pytestmark = pytest.mark.integration

TOKEN = "edge-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEEP = b"[" * 10_000 + b"]" * 10_000
LIVENESS_S = 15.0
"""How long a test waits for an answer before it fails: a bound on a hang, not a timing claim."""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    http = HttpConfig(head_timeout_ms=1_500, body_idle_timeout_ms=1_500, keepalive_timeout_ms=1_500,
                      max_connections_per_client=20)
    with serve(tmp_path_factory.mktemp("edge"), ApiSettings(auth_token=TOKEN), http=http) as s:
        st, _, t = s.call("POST", "/api/v1/tasks", delayed(), headers=AUTH)
        assert st == 201, t
        yield s, t["id"]


def _operations(task_id: str) -> list[tuple[str, str]]:
    values = {"task_id": task_id, "key": "127.0.0.1:9", "dead_id": f"{task_id}-1.1", "name": "default",
              "key_id": "0123456789abcdef"}
    out = []
    for path, item in document()["paths"].items():
        concrete = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)
        out += [(method.upper(), concrete) for method in item]
    return out


def test_every_route_refuses_a_body_nested_ten_thousand_deep_with_a_4xx_in_the_error_shape(
    api: tuple[Served, str],
) -> None:
    s, tid = api
    ops = _operations(tid)
    assert len(ops) >= 38
    ops += [("GET", "/"), ("GET", "/ui"), ("GET", "/ui/"), ("GET", "/ui/tasks"), ("GET", "/ui/assets/x.js")]
    for method, path in ops:
        st, _, body = s.call(method, path, raw=DEEP, headers={**AUTH, "Content-Type": "application/json"})
        assert 400 <= st < 500, (method, path, st, body)
        assert isinstance(body, dict) and set(body["error"]) >= {"code", "message"}, (method, path, body)
        assert "recursion" not in body["error"]["message"], (method, path, body)
    st, _, body = s.call("GET", "/api/v1/tasks", headers=AUTH)
    assert st == 200 and [t["id"] for t in body["items"]] == [tid]  # nothing was created


@pytest.mark.parametrize("path", ["/api/v1/tasks/{tid}/pause", "/api/v1/tasks/{tid}/trigger", "/api/v1/tasks/{tid}",
                                  "/api/v1/flows/a.example:80/pause", "/healthz"])
def test_a_body_on_a_route_that_takes_none_is_refused_not_ignored(api: tuple[Served, str], path: str) -> None:
    s, tid = api
    method = "GET" if path in ("/healthz", "/api/v1/tasks/{tid}") else "POST"
    st, _, body = s.call(method, path.format(tid=tid), raw=b"[1,2,3]", headers={**AUTH, "Content-Type": "application/json"})
    assert (st, body["error"]["field"]) == (400, "body"), body
    assert "takes no request body" in body["error"]["message"]
    st, _, t = s.call("GET", f"/api/v1/tasks/{tid}", headers=AUTH)
    assert t["status"] == "pending"  # the pause did not happen


def test_an_empty_object_on_a_route_that_takes_no_body_counts_as_none(api: tuple[Served, str]) -> None:
    """Many clients send ``{}`` with every POST: a body-less action takes it as no body."""
    s, tid = api
    for raw, want in ((b" { } ", 200), (b"{}", 200), (b'{"a":1}', 400), (b"{}" + b" " * 100, 400)):
        st, _, body = s.call("POST", f"/api/v1/tasks/{tid}/pause", raw=raw,
                             headers={**AUTH, "Content-Type": "application/json"})
        assert st == want, (raw, body)
        if st == 200:
            assert s.call("POST", f"/api/v1/tasks/{tid}/resume", headers=AUTH)[0] == 200


def _exchange(s: Served, data: bytes, *, trickle: bool = False) -> tuple[bytes, float]:
    """Send ``data`` (a byte a time when ``trickle``), read until the server closes; the answer and
    how long after the last byte sent the connection closed."""
    sock = socket.create_connection(("127.0.0.1", s.server.port))
    sock.settimeout(LIVENESS_S)
    out = b""
    try:
        if trickle:
            for b in data:
                sock.sendall(bytes([b]))
                time.sleep(0.05)
        else:
            sock.sendall(data)
        sent = time.monotonic()
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out, time.monotonic() - sent
    finally:
        sock.close()


def _status_and_error(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"application/json" in head, head
    return status, json.loads(body)["error"]


MALFORMED = [
    ("bare LF ends the request line", b"GET /healthz HTTP/1.1\nHost: x\n\n", 400, "bare LF"),
    ("HTTP/0.9 request", b"GET /healthz\r\n", 400, "METHOD SP target SP HTTP/1.x"),
    ("bare LF ends a header", b"GET /healthz HTTP/1.1\r\nHost: x\n\n", 400, "bare LF"),
    ("huge chunk size", b"POST /api/v1/test/callback HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"FFFFFFFFFFFFFFFFFFFF\r\n", 400, "16 hex digits"),
    ("5,000 headers", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: y\r\n" % i for i in range(5000))
     + b"\r\n", 431, "header lines"),
    ("one 200 KB header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n", 431, "head"),
    ("request line of 40,000 bytes", b"GET /" + b"a" * 40_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request line"),
]


@pytest.mark.parametrize(("name", "data", "status", "says"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_request_is_answered_and_closed_at_once(
    api: tuple[Served, str], name: str, data: bytes, status: int, says: str,
) -> None:
    s, _ = api
    answer, closed_after = _exchange(s, data)
    line = answer.split(b"\r\n", 1)[0].decode()
    print(f"{name}: {line} closed {closed_after * 1000:.0f} ms after the request")
    got, err = _status_and_error(answer)
    assert (got, err["code"]) == (status, "http_error") and says in err["message"], (answer[:300])
    st, _, _ = s.call("GET", "/healthz")
    assert st == 200


@pytest.mark.parametrize(("what", "data"), [
    ("a head sent a byte at a time", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000),
    ("a body that stops", b"POST /api/v1/test/callback HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{}"),
    ("a connection that sends nothing", b""),
])
def test_a_slow_client_is_answered_408_by_its_deadline(api: tuple[Served, str], what: str, data: bytes) -> None:
    s, _ = api
    sock = socket.create_connection(("127.0.0.1", s.server.port))
    sock.settimeout(0.05)
    start = time.monotonic()
    out = b""
    try:
        for b in data:
            try:
                sock.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                got = sock.recv(65536)
            except TimeoutError:
                continue
            out += got
            break
        sock.settimeout(LIVENESS_S)
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    print(f"{what}: closed {time.monotonic() - start:.2f} s after the connection opened")
    status, err = _status_and_error(out)
    assert status == 408 and "ms" in err["message"], out[:300]


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(api: tuple[Served, str]) -> None:
    s, _ = api
    sock = socket.create_connection(("127.0.0.1", s.server.port))
    sock.settimeout(LIVENESS_S)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first
        assert sock.recv(65536) == b""  # closed without a word once idle past keepalive_timeout_ms
    finally:
        sock.close()


def test_one_address_gets_at_most_its_share_of_connections(api: tuple[Served, str]) -> None:
    s, _ = api
    held = [socket.create_connection(("127.0.0.1", s.server.port)) for _ in range(20)]
    try:
        answer, _ = _exchange(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, err = _status_and_error(answer)
        assert status == 429 and "more than 20 connections from 127.0.0.1" in err["message"]
        # another address is not held back by this one's connections
        other = socket.create_connection(("127.0.0.1", s.server.port), source_address=("127.0.0.2", 0))
        other.settimeout(LIVENESS_S)
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert other.recv(65536).startswith(b"HTTP/1.1 200")
        other.close()
    finally:
        for h in held:
            h.close()
        _until_served(s)  # the server counts a connection until its loop has seen it close


def _until_served(s: Served) -> None:
    """Wait (bounded by ``LIVENESS_S``) until a request from 127.0.0.1 is served again, not 429."""
    deadline = time.monotonic() + LIVENESS_S
    while True:
        answer, _ = _exchange(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if answer.startswith(b"HTTP/1.1 200"):
            return
        assert time.monotonic() < deadline, answer[:300]
        time.sleep(0.05)


def test_allow_lists_the_methods_of_the_route_table_for_every_path(api: tuple[Served, str]) -> None:
    s, tid = api
    documented: dict[str, set[str]] = {}
    for path, item in document()["paths"].items():
        documented[re.sub(r"\{(\w+)\}", lambda m: {"task_id": tid, "key": "a.example:80", "dead_id": "x", "name": "n",
                                                                    "key_id": "k"}[m.group(1)],
                          path)] = {m.upper() for m in item}
    for path, methods in documented.items():
        st, h, body = s.call("OPTIONS", path, headers=AUTH)
        assert st == 405 and {m.strip() for m in h["Allow"].split(",")} == methods, (path, h.get("Allow"), body)
    st, h, _ = s.call("GET", "/api/v1/dead-letters/redrive", headers=AUTH)  # not GET /dead-letters/{dead_id}
    assert (st, h["Allow"]) == (405, "POST")


def test_a_missing_console_file_is_a_page_for_a_browser_and_json_for_other_clients(api: tuple[Served, str]) -> None:
    s, _ = api
    r = s.http.request("GET", s.url + "/ui/assets/gone.js", headers={"Accept": "*/*"})
    assert r.status == 404 and r.headers["Content-Type"] == "application/json"
    assert json.loads(r.data)["error"]["code"] == "not_found"
    r = s.http.request("GET", s.url + "/ui/gone.png", headers={"Accept": "text/html,application/xhtml+xml"})
    assert r.status == 404 and r.headers["Content-Type"].startswith("text/html") and b"Not found" in r.data
    for path in ("/api/v1/nothing", "/api/v2/tasks", "/nothing"):
        st, _, body = s.call("GET", path, headers=AUTH)
        assert st == 404 and body["error"]["code"] == "not_found", (path, body)
    # paths no file system takes (a NUL; a name past the longest a file name may be) were a 500
    for path in ("/ui/a%00b", "/ui/assets/%00.js", "/ui/" + "a" * 300, "/ui/x/" + "b" * 300 + ".js"):
        r = s.http.request("GET", s.url + path, headers={"Accept": "*/*"})
        assert r.status == 404 and json.loads(r.data)["error"]["code"] == "not_found", (path, r.status, r.data[:200])


def test_what_the_document_allows_the_server_takes(api: tuple[Served, str]) -> None:
    """Requests the OpenAPI document calls valid, which the server used to refuse (found by fuzzing)."""
    s, tid = api
    cases = [
        ("GET", "/api/v1/executions?since=10&until=5", None, 200),  # an empty range: an empty page
        ("GET", "/api/v1/stats/urls?since=100&until=50", None, 200),
        ("GET", "/api/v1/stats/urls?since=0&until=253402300799999", None, 200),  # cut to the widest window
        ("GET", "/api/v1/dead-letters?since=10&until=5", None, 200),
        ("GET", "/api/v1/tasks?limit=100.0", None, 200),  # JSON Schema's integer: 100.0 is 100
        ("POST", f"/api/v1/tasks/{tid}/backfill", {"start": 0.0, "end": 1.0}, 409),  # a delayed task: 409, not 400
        ("POST", "/api/v1/dead-letters/redrive", {"since": 1.0, "until": None, "kind": None, "limit": 5.0}, 200),
        ("POST", "/api/v1/cluster/transfer-leader", {"to": "nobody"}, 409),
        ("PUT", "/api/v1/flows/a.example:80", {"concurrency": 3.0}, 200),
        ("POST", "/api/v1/tasks", delayed(interval_ms=60_000.0, max_retries=2.0), 201),
    ]
    for method, path, body, want in cases:
        st, _, got = s.call(method, path, body, headers=AUTH)
        assert st == want, (method, path, got)
    st, _, got = s.call("GET", "/api/v1/stats/urls?since=0&until=253402300799999", headers=AUTH)
    assert got["since"] == 253402300799999 - 7 * 86_400_000
    st, _, got = s.call("GET", f"/api/v1/tasks/{tid}", headers=AUTH)
    assert st == 200 and got["status"] == "pending"


def test_a_patch_body_is_checked_before_its_if_match(api: tuple[Served, str]) -> None:
    s, tid = api
    st, _, got = s.call("PATCH", f"/api/v1/tasks/{tid}", [None, None], headers={**AUTH, "If-Match": '"999"'})
    assert (st, got["error"]["field"]) == (400, "body"), got


def test_clients_that_stop_reading_large_answers_do_not_hold_the_servers_threads(tmp_path: Any) -> None:
    """Two clients ask for an export of big tasks and read nothing: past waitress's high watermark
    their threads wait for the output to drain, which never happens. With two threads the server
    answered nothing else, for as long as those clients stayed (a reader key suffices). After
    ``send_idle_timeout_ms`` with no byte taken, their connections are closed and the threads go."""
    http = HttpConfig(send_idle_timeout_ms=1_000)
    with serve(tmp_path / "stall", threads=2, http=http) as s:
        big = {"blob": "x" * 60_000}
        st, _, _ = s.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(payload=big) for _ in range(100)]})
        assert st == 201
        for _ in range(4):  # 400 tasks of 60 KB: 24 MB of export, past the 16 MiB high watermark
            assert s.call("POST", "/api/v1/tasks/batch", {"tasks": [delayed(payload=big) for _ in range(100)]})[0] == 201
        stalled = []
        for _ in range(2):
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.connect(("127.0.0.1", int(s.server.port)))
            c.sendall(b"GET /api/v1/tasks?format=jsonl HTTP/1.1\r\nHost: x\r\n\r\n")
            stalled.append(c)
        try:
            for _ in range(int(LIVENESS_S * 100)):  # both threads writing the exports, held
                if s.server.requests_in_progress() == 2:
                    break
                time.sleep(0.01)
            st, _, body = s.call("GET", "/healthz")  # waits, at most the client's 30 s, for a thread
            assert st == 200, body
            for c in stalled:  # closed by the server: the reads end (after what the buffers held)
                c.settimeout(LIVENESS_S)
                try:
                    while c.recv(1 << 20):
                        pass
                except ConnectionResetError:
                    pass  # closed with output unsent: a reset ends it as well
        finally:
            for c in stalled:
                c.close()
