"""The callback host policy at fire time: the worker resolves the host, checks every address and
connects only to a checked one (DNS names and rebinding cannot reach denied addresses).

Real sockets and a real HTTP/1.1 server thread; the only stand-in is a resolver for made-up names
(``socket.getaddrinfo`` answers them from a table), so a name can resolve to metadata or to two
addresses without a DNS server.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3

from molens.delivery import Deliverer, DeliveryOutcome, FireKind, FireRequest, FireResult, to_result_item
from molens.delivery.pool import make_pool_manager
from molens.errors import ValidationError
from molens.model import DEFAULT_LIMITS, DEFAULT_POLICY, CallbackPolicy, Outcome, check_url
from tests.carrier import Carrier

DENY_LOOPBACK = CallbackPolicy(deny_cidrs=(*DEFAULT_POLICY.deny_cidrs, "127.0.0.0/8", "::1/128"))


class Server:
    """Keep-alive HTTP/1.1 server on one address: counts accepted connections and requests."""

    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.connections = 0
        self.requests: list[dict[str, str]] = []
        self.sni: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.requests.append(dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Httpd(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = super().get_request()
                owner.connections += 1
                return sock, addr

        self.httpd = Httpd((host, 0), Handler)
        if tls is not None:
            def on_sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
                owner.sni.append(name)

            tls.sni_callback = on_sni
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


_CARRIER: list[Carrier] = []
_DELIVERERS: dict[int, tuple[urllib3.PoolManager, Deliverer]] = {}


@pytest.fixture(autouse=True)
def _path(carrier: Carrier) -> Iterator[None]:
    """Every test runs through both delivery paths (urllib3 and the loop engine)."""
    _CARRIER[:] = [carrier]
    yield
    _CARRIER.clear()
    _DELIVERERS.clear()


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, Callable[[], list[str]]]:
    """Made-up names -> a function giving the addresses they resolve to now; other names resolve as usual."""
    table: dict[str, Callable[[], list[str]]] = {}
    real = socket.getaddrinfo

    def fake(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0) -> Any:
        if host not in table:
            return real(host, port, family, type, proto, flags)
        out: list[Any] = []
        for a in table[host]():
            if ":" in a:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)))
        return out

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return table


def _fire(url: str, policy: CallbackPolicy = DEFAULT_POLICY, kind: FireKind = FireKind.CALLBACK,
          pm: urllib3.PoolManager | None = None) -> FireResult:
    pm = pm or make_pool_manager(2, policy)
    d = _DELIVERERS.setdefault(id(pm), (pm, Deliverer(pm, "n1")))[1]  # one per pool: keep-alive as on a node
    return _CARRIER[0].deliver(d, FireRequest(
        fire_id="t1-1", task_id="t1", attempt=1, kind=kind, url=url, body=b"{}", scene="default",
        timeout_ms=2000,
    ))


def _assert_refused(res: FireResult, reason: str) -> None:
    assert res.outcome is DeliveryOutcome.NETWORK_ERROR
    assert res.status_code is None
    assert res.response_head.decode() == reason
    item = to_result_item(res)
    assert item.outcome is Outcome.NETWORK_ERROR and item.response_head == reason  # recorded on the execution


def test_allowed_name_is_delivered_with_its_host_header(server: Server) -> None:
    res = _fire(f"http://localhost:{server.port}/cb")
    assert res.outcome is DeliveryOutcome.SUCCESS and res.response_head == b"ok"
    assert [r["Host"] for r in server.requests] == [f"localhost:{server.port}"]


def test_name_resolving_to_a_denied_cidr_is_refused_before_connecting(server: Server) -> None:
    url = f"http://localhost:{server.port}/cb"
    check_url(url, "callback_url", DENY_LOOPBACK, DEFAULT_LIMITS)  # validation cannot see it: a name
    res = _fire(url, DENY_LOOPBACK)
    _assert_refused(res, "callback host localhost resolves to 127.0.0.1, denied by the callback host policy")
    assert server.connections == 0 and server.requests == []


def test_allow_cidrs_without_loopback_refuse_localhost_unless_the_name_is_allowed(server: Server) -> None:
    url = f"http://localhost:{server.port}/cb"
    res = _fire(url, CallbackPolicy(allow_cidrs=("10.0.0.0/8",)))
    _assert_refused(res, "callback host localhost resolves to 127.0.0.1, not in the callback host allow list")
    assert server.connections == 0
    assert _fire(url, CallbackPolicy(allow_cidrs=("127.0.0.0/8",))).outcome is DeliveryOutcome.SUCCESS
    assert _fire(url, CallbackPolicy(allow_hosts=("localhost",), allow_cidrs=("10.0.0.0/8",))).outcome is (
        DeliveryOutcome.SUCCESS
    )
    assert len(server.requests) == 2


def test_ip_literal_hosts_are_checked_again_at_fire_time(server: Server) -> None:
    url = f"http://127.0.0.1:{server.port}/cb"
    assert _fire(url).outcome is DeliveryOutcome.SUCCESS
    _assert_refused(_fire(url, DENY_LOOPBACK),
                    "callback host 127.0.0.1 resolves to 127.0.0.1, denied by the callback host policy")
    assert server.connections == 1


@pytest.mark.parametrize("host", ["0.0.0.0", "0", "[::]", "[0:0::0]"])
def test_the_unspecified_address_is_loopback_to_the_policy(
    server: Server, resolver: dict[str, Callable[[], list[str]]], host: str,
) -> None:
    """A connect() to 0.0.0.0 (or ::) reaches this host: a policy that denies loopback denies it too,
    written in the URL or resolved from a name (it used to reach the listener on 127.0.0.1)."""
    url = f"http://{host}:{server.port}/cb"
    with pytest.raises(ValidationError, match="denied by the callback host policy"):
        check_url(url, "callback_url", DENY_LOOPBACK, DEFAULT_LIMITS)
    assert _fire(url, DENY_LOOPBACK).outcome is DeliveryOutcome.NETWORK_ERROR
    resolver["here.example"] = lambda: ["0.0.0.0"]
    _assert_refused(_fire(f"http://here.example:{server.port}/cb", DENY_LOOPBACK),
                    "callback host here.example resolves to 0.0.0.0, denied by the callback host policy")
    assert server.connections == 0


@pytest.mark.parametrize("address", ["100.100.100.200", "168.63.129.16"])
def test_other_clouds_metadata_addresses_are_denied_by_default(address: str) -> None:
    with pytest.raises(ValidationError, match="denied by the callback host policy"):
        check_url(f"http://{address}/latest/meta-data/", "callback_url", DEFAULT_POLICY, DEFAULT_LIMITS)


def test_name_resolving_to_cloud_metadata_is_refused(resolver: dict[str, Callable[[], list[str]]]) -> None:
    resolver["evil.example"] = lambda: ["169.254.169.254"]
    check_url("http://evil.example/", "callback_url", DEFAULT_POLICY, DEFAULT_LIMITS)
    _assert_refused(_fire("http://evil.example/"),
                    "callback host evil.example resolves to 169.254.169.254, denied by the callback host policy")


def test_every_resolved_address_is_checked(server: Server, resolver: dict[str, Callable[[], list[str]]]) -> None:
    resolver["mixed.example"] = lambda: ["127.0.0.1", "169.254.169.254"]
    _assert_refused(_fire(f"http://mixed.example:{server.port}/"),
                    "callback host mixed.example resolves to 169.254.169.254, denied by the callback host policy")
    assert server.connections == 0


def test_ipv6_addresses_are_checked_and_connected_to() -> None:
    if not urllib3.util.connection.HAS_IPV6:
        pytest.skip("no IPv6 loopback")
    srv = Server("::1")
    try:
        assert _fire(f"http://[::1]:{srv.port}/").outcome is DeliveryOutcome.SUCCESS
        _assert_refused(_fire(f"http://[::1]:{srv.port}/", DENY_LOOPBACK),
                        "callback host ::1 resolves to ::1, denied by the callback host policy")
        assert srv.connections == 1
    finally:
        srv.stop()


def test_a_denied_ipv6_address_refuses_a_dual_stack_name(
    server: Server, resolver: dict[str, Callable[[], list[str]]]
) -> None:
    resolver["dual.example"] = lambda: ["127.0.0.1", "::1"]
    policy = CallbackPolicy(deny_cidrs=(*DEFAULT_POLICY.deny_cidrs, "::1/128"))
    _assert_refused(_fire(f"http://dual.example:{server.port}/", policy),
                    "callback host dual.example resolves to ::1, denied by the callback host policy")
    assert server.connections == 0
    assert _fire(f"http://dual.example:{server.port}/").outcome is DeliveryOutcome.SUCCESS


def test_a_name_rebound_to_a_denied_address_is_refused_on_the_next_connection(
    server: Server, resolver: dict[str, Callable[[], list[str]]]
) -> None:
    answers = iter([["127.0.0.1"], ["169.254.169.254"]])
    resolver["rebind.example"] = lambda: next(answers)
    pm = make_pool_manager(2)
    assert _fire(f"http://rebind.example:{server.port}/", pm=pm).outcome is DeliveryOutcome.SUCCESS
    pm.clear()  # the next fire opens a new connection and resolves again
    _DELIVERERS.clear()  # (the loop path: a new Deliverer gets a new FireLoop, whose connections are its own)
    _assert_refused(_fire(f"http://rebind.example:{server.port}/", pm=pm),
                    "callback host rebind.example resolves to 169.254.169.254, denied by the callback host policy")
    assert len(server.requests) == 1


def test_keep_alive_reuses_one_connection_to_an_allowed_name(server: Server) -> None:
    pm = make_pool_manager(2)
    for _ in range(2):
        assert _fire(f"http://localhost:{server.port}/cb", pm=pm).outcome is DeliveryOutcome.SUCCESS
    assert len(server.requests) == 2
    assert server.connections == 1


def test_ack_probes_are_guarded_too(server: Server) -> None:
    url = f"http://localhost:{server.port}/ack"
    _assert_refused(_fire(url, DENY_LOOPBACK, FireKind.ACK),
                    "callback host localhost resolves to 127.0.0.1, denied by the callback host policy")
    assert server.connections == 0
    assert _fire(url, kind=FireKind.ACK).outcome is DeliveryOutcome.SUCCESS
    assert [r["X-Molens-Kind"] for r in server.requests] == ["ack"]


def test_a_name_that_does_not_resolve_is_an_ordinary_network_error(
    resolver: dict[str, Callable[[], list[str]]]
) -> None:
    def fail() -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    resolver["gone.example"] = fail
    res = _fire("http://gone.example/")
    assert res.outcome is DeliveryOutcome.NETWORK_ERROR and "NameResolutionError" in res.error
    assert to_result_item(res).response_head is None


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI to make a certificate")
def test_https_keeps_sni_and_certificate_check_on_the_name(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv = Server(tls=tls)
    try:
        pm = make_pool_manager(2)
        pm.connection_pool_kw.update(cert_reqs="CERT_REQUIRED", ca_certs=str(cert))
        res = _fire(f"https://localhost:{srv.port}/cb", pm=pm)
        assert res.outcome is DeliveryOutcome.SUCCESS, res.error
        assert srv.sni == ["localhost"]
        assert [r["Host"] for r in srv.requests] == [f"localhost:{srv.port}"]
        bad = _fire(f"https://127.0.0.1:{srv.port}/cb", pm=pm)  # the certificate names localhost only
        assert bad.outcome is DeliveryOutcome.NETWORK_ERROR and "certificate" in bad.error.lower()
        _assert_refused(_fire(f"https://localhost:{srv.port}/cb", DENY_LOOPBACK),
                        "callback host localhost resolves to 127.0.0.1, denied by the callback host policy")
        assert len(srv.requests) == 1
    finally:
        srv.stop()
