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
