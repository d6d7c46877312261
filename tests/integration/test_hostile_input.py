"""Hostile input reaches no 500 and changes nothing: the cases an attacker's fuzzing found
(docs/architecture.md#principles). Each was a 500 (or an accepted request that should not be) on the
code before; each is now a 4xx JSON error naming what is wrong, with the task count unchanged."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from molens.web.api_context import ApiSettings
from tests.integration.api_server import Served, check_schema, delayed, serve

pytestmark = pytest.mark.integration

T = "/api/v1/tasks"
E = "/api/v1/executions"
BIG = "99999999999999999999"
JSON = {"Content-Type": "application/json"}


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    with serve(tmp_path_factory.mktemp("hostile"), ApiSettings()) as s:
        st, _, t = s.call("POST", T, delayed())
        assert st == 201
        yield s, t["id"]


# (id, method, path, json body | raw bytes | None, headers, status, field)
CASES: list[Any] = [
    ("executions since past int64", "GET", f"{E}?since={BIG}", None, None, 400, "since"),
    ("executions until past int64", "GET", f"{E}?until={BIG}", None, None, 400, "until"),
    ("task executions since past int64", "GET", f"{T}/{{id}}/executions?since={BIG}", None, None, 400, "since"),
    ("task executions until past int64", "GET", f"{T}/{{id}}/executions?until={BIG}", None, None, 400, "until"),
    ("url stats until past int64", "GET", f"/api/v1/stats/urls?until={BIG}", None, None, 400, "until"),
    ("url stats since past int64", "GET", f"/api/v1/stats/urls?since={BIG}", None, None, 400, "since"),
    ("cursor not base64 of ascii", "GET", f"{E}?cursor=ZTrCsg", None, None, 400, "cursor"),
    ("cursor row id past int64", "GET", f"{E}?cursor={_cursor('e:' + BIG)}", None, None, 400, "cursor"),
    ("cursor row id in arabic digits", "GET", f"{E}?cursor={_cursor('e:١٢٣')}", None, None, 400, "cursor"),
    ("preview run_at past year 9999", "GET", "/api/v1/schedule/preview?type=delayed&run_at=10000000000000000",
     None, None, 400, "run_at"),
    ("preview after past year 9999", "GET", "/api/v1/schedule/preview?interval_ms=1000&after=253402300800000",
     None, None, 400, "after"),
    ("preview delayed lands past year 9999", "GET",
     "/api/v1/schedule/preview?type=delayed&interval_ms=157680000000&after=253402300799000", None, None, 400, "after"),
    ("max_fails 2^64", "POST", T, delayed(type="periodic", interval_ms=60_000, max_fails=2**64), None, 400, "max_fails"),
    ("batch max_fails 2^64", "POST", f"{T}/batch",
     {"tasks": [delayed(type="periodic", interval_ms=60_000, max_fails=2**64)]}, None, 400, "tasks[0].max_fails"),
    ("Idempotency-Key not utf-8", "POST", T, delayed(), {"Idempotency-Key": "caf\xe9"}, 400, "Idempotency-Key"),
    ("idempotency_key lone surrogate", "POST", T,
     b'{"type":"delayed","interval_ms":1,"callback_url":"http://127.0.0.1:9/x","idempotency_key":"\\ud800"}',
     JSON, 400, "body"),
    ("callback path lone surrogate", "POST", T,
     b'{"type":"delayed","interval_ms":1,"callback_url":"http://127.0.0.1:9/\\udfff"}', JSON, 400, "body"),
    ("cron_expr lone surrogate", "POST", T,
     b'{"type":"periodic","cron_expr":"\\ud83d * * * *","callback_url":"http://127.0.0.1:9/x"}', JSON, 400, "body"),
    ("object key lone surrogate", "POST", T,
     b'{"type":"delayed","interval_ms":1,"callback_url":"http://127.0.0.1:9/x","\\ud800":1}', JSON, 400, "body"),
    # callback policy on the address an IPv6 literal carries, host confusion, credentials
    ("ipv4-compatible metadata", "POST", T, delayed(callback_url="http://[::169.254.169.254]/"), None, 400,
     "callback_url"),
    ("nat64 metadata", "POST", T, delayed(callback_url="http://[64:ff9b::a9fe:a9fe]/"), None, 400, "callback_url"),
    ("nat64 local-use metadata", "POST", T, delayed(callback_url="http://[64:ff9b:1:a9fe:a9:fe00::]/"), None, 400,
     "callback_url"),
    ("6to4 metadata", "POST", T, delayed(callback_url="http://[2002:a9fe:a9fe::]/"), None, 400, "callback_url"),
    ("teredo metadata", "POST", T, delayed(callback_url="http://[2001:0:4136:e378:8000:63bf:5601:5601]/"), None, 400,
     "callback_url"),
    ("backslash host confusion", "POST", T, delayed(callback_url="http://127.0.0.1\\@evil.com/"), None, 400,
     "callback_url"),
    ("credentials in callback url", "POST", T, delayed(callback_url="http://alice:s3cret@127.0.0.1:9/"), None, 400,
     "callback_url"),
    ("credentials in ack url", "POST", T, delayed(ack_url="http://alice:s3cret@127.0.0.1:9/"), None, 400, "ack_url"),
    # query values: empty or not plain ASCII digits
    ("empty type filter", "GET", f"{T}?type=", None, None, 400, "type"),
    ("empty limit", "GET", f"{T}?limit=", None, None, 400, "limit"),
    ("limit with underscore", "GET", f"{T}?limit=1_000", None, None, 400, "limit"),
    ("limit with a space", "GET", f"{T}?limit=%20100", None, None, 400, "limit"),
    ("limit in arabic digits", "GET", f"{T}?limit=%D9%A1", None, None, 400, "limit"),
    # one batch, one idempotency key twice
    ("batch items sharing an idempotency key", "POST", f"{T}/batch",
     {"tasks": [delayed(idempotency_key="dup"), delayed(idempotency_key="dup")]}, None, 400, "tasks[1].idempotency_key"),
]


@pytest.mark.parametrize(("name", "method", "path", "body", "headers", "status", "field"), CASES, ids=[c[0] for c in CASES])
def test_hostile_request_gets_a_4xx_naming_the_field_and_changes_nothing(
    api: tuple[Served, str], name: str, method: str, path: str, body: Any, headers: dict[str, str] | None,
    status: int, field: str,
) -> None:
    s, tid = api
    before = s.task_count()
    if isinstance(body, bytes):
        st, _, got = s.call(method, path.format(id=tid), raw=body, headers=headers)
    else:
        st, _, got = s.call(method, path.format(id=tid), body, headers=headers)
    assert st == status, got
    check_schema(got, "Error") if "errors" not in got else check_schema(got, "BatchCreateError")
    if "errors" in got:
        assert [f"tasks[{e['index']}].{e['error']['field']}" for e in got["errors"]] == [field], got
    else:
        assert got["error"]["field"] == field, got
    assert s.task_count() == before


def test_batch_route_answers_its_methods(api: tuple[Served, str]) -> None:
    s, _ = api
    for method in ("GET", "DELETE", "OPTIONS"):
        st, h, got = s.call(method, f"{T}/batch")
        assert st == 405 and h["Allow"] == "POST", (method, got)
        assert got["error"]["code"] == "method_not_allowed"


def _raw_http(s: Served, data: bytes) -> bytes:
    host, port = s.url.split("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            out += chunk
    return out


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed(api: tuple[Served, str]) -> None:
    s, _ = api
    body = b'{"type":"delayed","interval_ms":60000,"callback_url":"http://127.0.0.1:9/x"}'
    chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    smuggled = b"GET /api/v1/tasks HTTP/1.1\r\nHost: x\r\n\r\n"
    req = (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(chunked)).encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    before = s.task_count()
    out = _raw_http(s, req + smuggled)
    assert out.startswith(b"HTTP/1.1 400"), out[:200]
    assert out.count(b"HTTP/1.1 ") == 1, out  # the pipelined request after it is not served
    assert s.task_count() == before


def test_a_token_header_that_is_not_utf8_is_refused_not_a_500(tmp_path_factory: pytest.TempPathFactory) -> None:
    with serve(tmp_path_factory.mktemp("token"), ApiSettings(auth_token="s3cret-token")) as s:
        st, _, got = s.call("GET", T, headers={"Authorization": "Bearer caf\xe9"})
        assert st == 401 and got["error"]["code"] == "unauthorized", got
        st, _, got = s.call("GET", T, headers={"Authorization": "Bearer s3cret-token"})
        assert st == 200, got


def test_a_path_that_is_not_utf8_is_a_404_that_says_so(api: tuple[Served, str]) -> None:
    s, _ = api
    for path, message in ((b"/api/v1/tasks/%ff%fe", "no route: the path is not valid UTF-8"),
                          (b"/api/v1/caf%C3%A9", "no route /api/v1/caf\u00e9")):
        out = _raw_http(s, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, body = out.partition(b"\r\n\r\n")
        assert head.split(b" ", 2)[1] == b"404", out[:300]
        assert json.loads(body)["error"] == {"code": "not_found", "message": message}


def test_a_body_too_large_for_the_http_server_gets_the_apis_own_413(api: tuple[Served, str]) -> None:
    """Past ``max_body_bytes`` + 1 KiB waitress refuses the request before the app sees it; the
    answer is still ``body_too_large`` naming the configured limit, as the app's own 413 is."""
    s, _ = api
    limit = ApiSettings().max_body_bytes
    out = _raw_http(s, b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n{" % (limit + 4096))
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"413", out[:300]
    err = json.loads(body)["error"]
    assert (err["code"], err["field"]) == ("body_too_large", "body")
    assert err["message"] == f"request body is more than {limit} bytes"


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /api/v1/tasks HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
    (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 400),
    (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400),
    (b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
], ids=["header without colon", "duplicate content-length", "signed content-length", "unknown transfer coding"])
def test_requests_waitress_refuses_get_the_json_error_shape_and_a_closed_connection(
    api: tuple[Served, str], request_bytes: bytes, status: int
) -> None:
    s, _ = api
    out = _raw_http(s, request_bytes + b"GET /api/v1/tasks HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"%d" % status and head.startswith(b"HTTP/1."), out[:300]
    assert b"Content-Type: application/json" in head and b"Connection: close" in head, head
    assert json.loads(body)["error"]["code"] == "http_error"
    assert out.count(b"HTTP/1.") == 1
