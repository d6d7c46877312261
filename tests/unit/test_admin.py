from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
import zmq

from molens.admin import AdminClient, AdminError, AdminServer


def _free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class Handler:
    def __init__(self) -> None:
        self.pending: list[Future[dict[str, Any]]] = []

    def __call__(self, req: dict[str, Any]) -> dict[str, Any] | Future[dict[str, Any]]:
        if req["cmd"] == "status":
            return {"ok": True, "role": "leader"}
        if req["cmd"] == "slow":
            fut: Future[dict[str, Any]] = Future()
            self.pending.append(fut)
            return fut
        if req["cmd"] == "boom":
            raise RuntimeError("kaput")
        return {"ok": False, "error": f"unknown cmd {req['cmd']!r}"}


@pytest.fixture
def server() -> Iterator[tuple[AdminServer, Handler]]:
    handler = Handler()
    srv = AdminServer(_free_addr(), handler).start()
    yield srv, handler
    srv.close()


def test_status_round_trip(server: tuple[AdminServer, Handler]) -> None:
    srv, _ = server
    with AdminClient(srv.bind_addr, timeout_s=5) as client:
        assert client.call("status") == {"ok": True, "role": "leader"}
        assert client.request({"cmd": "nope"}) == {"ok": False, "error": "unknown cmd 'nope'"}
        with pytest.raises(AdminError, match="unknown cmd"):
            client.call("nope")
        reply = client.request({"cmd": "boom"})
        assert reply["ok"] is False and "kaput" in reply["error"]


def test_bad_json_gets_an_error_reply(server: tuple[AdminServer, Handler]) -> None:
    srv, _ = server
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.REQ) as s:
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://{srv.bind_addr}")
        s.send(b"{not json")
        assert s.poll(5000)
        reply = json.loads(s.recv())
        assert reply["ok"] is False and reply["error"].startswith("bad request")
        s.send(b'{"no": "cmd"}')
        assert s.poll(5000)
        assert json.loads(s.recv())["ok"] is False


def test_deferred_replies_do_not_block_other_requests(server: tuple[AdminServer, Handler]) -> None:
    srv, handler = server
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as d:
        d.setsockopt(zmq.LINGER, 0)
        d.connect(f"tcp://{srv.bind_addr}")
        d.send_multipart([b"", json.dumps({"cmd": "slow", "id": 1}).encode()])
        with AdminClient(srv.bind_addr, timeout_s=5) as client:
            # the slow request is parked; status is still answered
            assert client.call("status")["role"] == "leader"
        assert not d.poll(50)
        handler.pending[0].set_result({"ok": True, "index": 7})
        assert d.poll(5000)
        _, body = d.recv_multipart()
        assert json.loads(body) == {"ok": True, "index": 7, "id": 1}


def test_client_times_out_when_nobody_answers() -> None:
    addr = _free_addr()
    client = AdminClient(addr, timeout_s=0.2)
    with pytest.raises(AdminError, match=f"no answer from admin socket {addr} within 0.2 s"):
        client.call("status")
    client.close()


def test_bind_conflict_is_a_clear_error(server: tuple[AdminServer, Handler]) -> None:
    srv, _ = server
    with pytest.raises(AdminError, match="cannot bind admin socket"):
        AdminServer(srv.bind_addr, Handler())


def test_a_request_nested_too_deep_is_a_bad_request_and_the_server_keeps_answering(
    server: tuple[AdminServer, Handler],
) -> None:
    """``json.loads`` of ~1,000 '[' raises RecursionError, not ValueError: it ended the admin thread,
    and every later command timed out on a socket still bound."""
    srv, _ = server
    ctx = zmq.Context.instance()
    with ctx.socket(zmq.REQ) as s:
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://{srv.bind_addr}")
        deep = b"[" * 5_000 + b"]" * 5_000
        for body in (b"[" * 100_000, deep, b'{"cmd": "status", "x": ' + deep + b"}"):
            s.send(body)
            assert s.poll(5000), "no answer to a deeply nested request"
            reply = json.loads(s.recv())
            assert reply["ok"] is False and reply["error"].startswith("bad request: "), reply
        # an "id" that decodes but is too deep to encode again in the reply (a depth just under the
        # decoder's limit: where exactly depends on the stack, so every depth around it)
        errors = set()
        for depth in range(900, 1_001):
            s.send(b'{"cmd": "status", "id": ' + b"[" * depth + b"]" * depth + b"}")
            assert s.poll(5000), f"no answer to a request with an id nested {depth} deep"
            body = s.recv()  # an echoed id this deep is not decoded here: this stack is deeper still
            if not body.startswith(b'{"ok":true,"role":"leader","id":[['):
                error = json.loads(body)["error"]
                assert error.startswith("bad request: "), error
                errors.add("encoding" if "reply not encodable" in error else "decoding" if "decoding" in error else error)
        assert errors == {"encoding", "decoding"}, errors  # both limits met: decoded but not encodable, and deeper
    with AdminClient(srv.bind_addr, timeout_s=5) as client:
        assert client.call("status") == {"ok": True, "role": "leader"}


def test_a_request_over_max_request_bytes_is_not_read_and_the_server_keeps_answering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``zmq.MAXMSGSIZE``: ZeroMQ drops the connection of a larger frame before it is buffered whole."""
    import molens.admin as admin_mod

    monkeypatch.setattr(admin_mod, "MAX_REQUEST_BYTES", 4096)
    srv = AdminServer(_free_addr(), Handler()).start()
    try:
        ctx = zmq.Context.instance()
        with ctx.socket(zmq.REQ) as big, AdminClient(srv.bind_addr, timeout_s=5) as client:
            big.setsockopt(zmq.LINGER, 0)
            big.connect(f"tcp://{srv.bind_addr}")
            big.send(json.dumps({"cmd": "status", "pad": "x" * 8192}).encode())
            assert client.call("status")["role"] == "leader"  # answered after the big frame was sent
            assert not big.poll(200), "a request over MAX_REQUEST_BYTES was read and answered"
            with AdminClient(srv.bind_addr, timeout_s=5) as small:
                assert small.request({"cmd": "status", "pad": "x" * 2048})["ok"] is True
    finally:
        srv.close()


def test_an_admin_socket_bound_off_loopback_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    port = _free_addr().rsplit(":", 1)[1]  # another for each bind: ZeroMQ unbinds on close in the background
    with caplog.at_level("WARNING", logger="molens.admin"):
        AdminServer(_free_addr(), Handler()).close()
        assert not caplog.records
        AdminServer(f"0.0.0.0:{port}", Handler()).close()
    [rec] = caplog.records
    assert rec.levelname == "WARNING" and f"addr=tcp://0.0.0.0:{port}" in rec.getMessage()
    assert "no authentication" in rec.getMessage()


def test_membership_forwarding_to_the_same_admin_address_names_the_leader_instead_of_looping() -> None:
    """Every node's admin_addr is 127.0.0.1:18111 on its own host (deploy.md's real-hosts example):
    the leader's address, as this node knows it, is this node's own socket."""
    from molens.cli import CliError, cmd_membership
    from molens.config import load_dict

    addr = _free_addr()
    asked: list[dict[str, Any]] = []

    def follower(req: dict[str, Any]) -> dict[str, Any]:
        asked.append(req)
        return {"ok": False, "error": "not_leader", "leader_id": "n2", "leader_admin_addr": addr}

    srv = AdminServer(addr, follower).start()
    try:
        cfg = load_dict({"node": {"id": "n1"}, "admin": {"bind_addr": addr}})
        with pytest.raises(CliError, match=r"the leader is n2, whose admin socket is at .* run the command there"):
            cmd_membership(cfg, {"cmd": "remove_node", "id": "n3"})
        assert len(asked) == 1
    finally:
        srv.close()
