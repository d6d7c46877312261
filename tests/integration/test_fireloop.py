"""The loop engine's HTTP/1.1 reading against a raw socket server that answers exactly what each test
scripts: chunked bodies, interim answers, close-delimited bodies, answers split byte by byte,
malformed heads, a peer closing an idle keep-alive connection, a status followed by silence."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import urllib3

from molens.delivery import Deliverer, DeliveryOutcome, FireKind, FireRequest, FireResult
from molens.delivery.pool import FirePool
from tests.integration.raw_server import RawServer, Script

pytestmark = pytest.mark.integration

@pytest.fixture
def serve() -> Iterator[Callable[[Script], RawServer]]:
    servers: list[RawServer] = []

    def make(script: Script) -> RawServer:
        servers.append(RawServer(script))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


def _collector() -> tuple[list[FireResult], threading.Condition, Callable[[list[FireResult]], None]]:
    """Results as a pool hands them over: the list, a condition notified on each batch, the sink."""
    done: list[FireResult] = []
    cv = threading.Condition()

    def sink(batch: list[FireResult]) -> None:
        with cv:
            done.extend(batch)
            cv.notify_all()

    return done, cv, sink


class Loop:
    """One loop-engine FirePool; ``fire(url)`` carries out one attempt and returns its result."""

    def __init__(self, deliverer: Deliverer | None = None) -> None:
        self.deliverer = deliverer or Deliverer(urllib3.PoolManager(), "n1")
        self.results: dict[str, FireResult] = {}
        self.cv = threading.Condition()
        self.pool = FirePool(self.deliverer, 4, self._sink, flush_interval_ms=0.5, engine="loop", name="rawloop")
        self.pool.start()
        self.n = 0

    def _sink(self, batch: list[FireResult]) -> None:
        with self.cv:
            self.results.update((r.fire_id, r) for r in batch)
            self.cv.notify_all()

    def fire(self, url: str, timeout_ms: int = 3000) -> FireResult:
        self.n += 1
        fid = f"f-{self.n}"
        self.pool.submit([FireRequest(
            fire_id=fid, task_id="t", attempt=0, kind=FireKind.CALLBACK, url=url, body=b'{"a":1}', scene="s",
            timeout_ms=timeout_ms,
        )])
        with self.cv:
            assert self.cv.wait_for(lambda: fid in self.results, timeout=20)
            return self.results[fid]


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.pool.stop(5)


def _answer(raw: bytes, keep: bool = True) -> Script:
    def script(conn: socket.socket, _req: bytes) -> bool:
        conn.sendall(raw)
        return keep

    return script


def test_chunked_body_with_extensions_and_trailers_keeps_the_connection(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n"))
    for _ in range(3):
        res = loop.fire(srv.url())
        assert (res.status_code, res.outcome, res.response_head) == (200, DeliveryOutcome.SUCCESS, b"hello, world")
    assert srv.connections == 1


def test_answer_split_into_single_bytes_is_read_whole(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    raw = b"HTTP/1.1 201 Created\r\nContent-Length: 6\r\nX-Molens-No-Retry: true\r\n\r\ncreated"[:-1]

    def trickle(conn: socket.socket, _req: bytes) -> bool:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(raw)):
            conn.sendall(raw[i : i + 1])
            time.sleep(0.001)
        return True

    srv = serve(trickle)
    res = loop.fire(srv.url())
    assert (res.status_code, res.response_head, res.no_retry) == (201, b"create", False)  # no_retry only >= 300
    assert loop.fire(srv.url()).status_code == 201
    assert srv.connections == 1


def test_interim_answers_are_skipped(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\ngone"))
    res = loop.fire(srv.url())
    assert (res.status_code, res.outcome, res.response_head) == (404, DeliveryOutcome.NOT_FOUND, b"gone")


def test_close_delimited_body_of_an_http10_answer(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.0 200 OK\r\n\r\nbody until close", keep=False))
    for _ in range(2):
        res = loop.fire(srv.url())
        assert (res.status_code, res.response_head) == (200, b"body until close")
    assert srv.connections == 2


def test_connection_close_is_honoured(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", keep=False))
    assert [loop.fire(srv.url()).status_code for _ in range(3)] == [200, 200, 200]
    assert srv.connections == 3


def test_a_peer_closing_an_idle_connection_is_noticed_before_reuse(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    def answer_then_close_soon(conn: socket.socket, _req: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        time.sleep(0.05)  # the server's keep-alive timeout, without saying Connection: close
        return False

    srv = serve(answer_then_close_soon)
    assert loop.fire(srv.url()).status_code == 200
    time.sleep(0.3)
    res = loop.fire(srv.url())
    assert (res.status_code, res.outcome) == (200, DeliveryOutcome.SUCCESS)
    assert srv.connections == 2


def test_throttled_answer_carries_retry_after_and_no_retry(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 429 Too Many\r\nretry-after: 7\r\nX-MOLENS-NO-RETRY:  True \r\nContent-Length: 0\r\n\r\n"))
    before = time.time() * 1000
    res = loop.fire(srv.url())
    assert (res.status_code, res.outcome, res.no_retry) == (429, DeliveryOutcome.HTTP_ERROR, True)
    assert before + 6_000 <= res.retry_after_ms <= time.time() * 1000 + 7_000


@pytest.mark.parametrize("raw", [
    b"SPDY/3 200 OK\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
])
def test_a_malformed_head_is_a_network_error_and_the_connection_is_dropped(
    raw: bytes, serve: Callable[[Script], RawServer], loop: Loop
) -> None:
    bad = serve(_answer(raw))
    res = loop.fire(bad.url())
    assert (res.status_code, res.outcome) == (None, DeliveryOutcome.NETWORK_ERROR)
    assert res.error
    good = serve(_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    assert loop.fire(good.url()).status_code == 200  # the loop goes on


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 500 Oops\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: gzip\r\n\r\n",
])
def test_a_body_that_cannot_be_framed_keeps_the_status(raw: bytes, serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(raw))
    res = loop.fire(srv.url())
    # the receiver has answered: its status stands even though the body cannot be read
    assert (res.status_code, res.outcome) == (500, DeliveryOutcome.HTTP_ERROR)
    assert srv.connections == 1
    assert loop.fire(srv.url()).status_code == 500
    assert srv.connections == 2  # that connection was not reused


def test_status_then_silence_ends_at_the_budget_with_the_status(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"))
    res = loop.fire(srv.url(), timeout_ms=300)
    assert (res.status_code, res.outcome, res.response_head) == (200, DeliveryOutcome.SUCCESS, b"partial")
    assert res.latency_ms >= 300


def test_reset_before_the_status_is_a_network_error(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    def reset(conn: socket.socket, _req: bytes) -> bool:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        return False

    srv = serve(reset)
    res = loop.fire(srv.url())
    assert (res.status_code, res.outcome) == (None, DeliveryOutcome.NETWORK_ERROR)


def test_request_bytes_are_what_the_receiver_reads(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 204 No Content\r\n\r\n"))
    assert loop.fire(srv.url("/cb?x=1")).status_code == 204
    head, _, body = srv.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /cb?x=1 HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])}
    assert headers[b"host"] == f"127.0.0.1:{srv.port}".encode()
    assert headers[b"content-length"] == b"7" and body == b'{"a":1}'
    assert headers[b"x-fire-id"] == b"f-1" and headers[b"x-molens-kind"] == b"callback"


def test_a_header_value_with_a_line_break_is_refused_before_sending(serve: Callable[[Script], RawServer], loop: Loop) -> None:
    srv = serve(_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    loop.pool.submit([FireRequest(
        fire_id="bad", task_id="t", attempt=0, kind=FireKind.CALLBACK, url=srv.url(), body=b"{}",
        scene="x\r\nX-Injected: 1", timeout_ms=2000,
    )])
    with loop.cv:
        assert loop.cv.wait_for(lambda: "bad" in loop.results, timeout=10)
    assert loop.results["bad"].outcome is DeliveryOutcome.NETWORK_ERROR
    assert srv.requests == []


def test_many_attempts_at_once_share_few_connections(serve: Callable[[Script], RawServer]) -> None:
    srv = serve(_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    done, cv, sink = _collector()
    pool = FirePool(Deliverer(urllib3.PoolManager(), "n1"), 8, sink, queue_limit=2000, engine="loop", name="rawmany")
    pool.start()
    try:
        fires = [FireRequest(
            fire_id=f"m-{i}", task_id="t", attempt=0, kind=FireKind.CALLBACK, url=srv.url(), body=b"{}", scene="s",
            timeout_ms=10_000,
        ) for i in range(1000)]
        assert pool.submit(fires).accepted == 1000
        with cv:
            assert cv.wait_for(lambda: len(done) == 1000, timeout=60)
    finally:
        pool.stop(5)
    assert sorted(r.fire_id for r in done) == sorted(f.fire_id for f in fires)
    assert all(r.status_code == 200 for r in done)
    assert srv.connections <= 8  # at most `concurrency` connections, each reused


def test_a_host_that_never_answers_the_connect_holds_only_its_own_attempts(serve: Callable[[Script], RawServer]) -> None:
    # a listener whose accept queue is full: the kernel drops further SYNs, so connects to it hang
    hole = socket.create_server(("127.0.0.1", 0), backlog=0)
    fillers = []
    try:
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(hole.getsockname())
            fillers.append(s)
        time.sleep(0.2)
        good = serve(_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
        order: list[str] = []
        cv = threading.Condition()

        def sink(batch: list[FireResult]) -> None:
            with cv:
                order.extend(r.fire_id for r in batch)
                cv.notify_all()

        pool = FirePool(Deliverer(urllib3.PoolManager(), "n1"), 16, sink, engine="loop", name="rawhole")
        pool.start()
        try:
            port = hole.getsockname()[1]
            stuck = [FireRequest(
                fire_id=f"hole-{i}", task_id="t", attempt=0, kind=FireKind.CALLBACK, url=f"http://localhost:{port}/",
                body=b"{}", scene="s", timeout_ms=3000,
            ) for i in range(8)]
            fine = [FireRequest(
                fire_id=f"good-{i}", task_id="t", attempt=0, kind=FireKind.CALLBACK, url=good.url(), body=b"{}",
                scene="s", timeout_ms=3000,
            ) for i in range(4)]
            pool.submit(stuck)
            time.sleep(0.2)  # the stuck ones are connecting (more of them than resolver threads)
            pool.submit(fine)
            with cv:
                assert cv.wait_for(lambda: len(order) == 12, timeout=30)
        finally:
            pool.stop(5)
        # every good fire (a new connection each, to another host) was answered before any stuck one ended
        assert sorted(order[:4]) == [f"good-{i}" for i in range(4)], order
        assert all(f.startswith("hole-") for f in order[4:])
    finally:
        for s in fillers:
            s.close()
        hole.close()


def test_an_answer_before_the_whole_request_was_sent_ends_the_connection() -> None:
    """A receiver refusing a large body at once (413 after the head, body unread): the answer stands,
    and the connection, with the rest of the request still unsent, is not used again."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    conns: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            conns.append(c)
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += c.recv(65536)
            c.sendall(b"HTTP/1.1 413 Too Large\r\nContent-Length: 3\r\n\r\nbig")  # and never reads the body

    threading.Thread(target=accept, daemon=True).start()
    results: dict[str, FireResult] = {}
    cv = threading.Condition()

    def sink(batch: list[FireResult]) -> None:
        with cv:
            results.update((r.fire_id, r) for r in batch)
            cv.notify_all()

    pool = FirePool(Deliverer(urllib3.PoolManager(), "n1"), 1, sink, engine="loop", name="rawearly")
    pool.start()
    try:
        for i in range(2):
            pool.submit([FireRequest(
                fire_id=f"big-{i}", task_id="t", attempt=0, kind=FireKind.CALLBACK, url=f"http://127.0.0.1:{port}/",
                body=b"x" * (8 << 20), scene="s", timeout_ms=5000,
            )])
            with cv:
                assert cv.wait_for(lambda i=i: f"big-{i}" in results, timeout=20)  # type: ignore[misc]
            assert (results[f"big-{i}"].status_code, results[f"big-{i}"].response_head) == (413, b"big")
    finally:
        pool.stop(5)
        lsock.close()
        for c in conns:
            c.close()
    assert len(conns) == 2  # the second fire did not go down the first connection


def test_with_a_tick_paced_fires_go_out_together_and_never_before_their_time(
    serve: Callable[[Script], RawServer],
) -> None:
    """``tick_ms``: at most one selector pass per tick while busy (plus the first after idling), so
    40 fires due 5 ms apart take a handful of passes, not two each; none leaves before its time."""
    arrived: dict[str, int] = {}

    def script(conn: socket.socket, req: bytes) -> bool:
        fid = req.split(b"X-Fire-ID: ", 1)[1].split(b"\r\n", 1)[0].decode()
        arrived[fid] = time.time_ns() // 1_000_000
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return True

    srv = serve(script)
    done, cv, sink = _collector()
    tick_ms = 25
    pool = FirePool(Deliverer(urllib3.PoolManager(), "n1"), 8, sink, queue_limit=100, engine="loop", name="rawtick",
                    loop_tick_ms=tick_ms)
    t0 = time.monotonic()
    pool.start()
    try:
        first = time.time_ns() // 1_000_000 + 200
        fires = [FireRequest(
            fire_id=f"k-{i}", task_id="t", attempt=1, kind=FireKind.CALLBACK, url=srv.url(), body=b"{}", scene="s",
            timeout_ms=10_000, not_before_ms=first + 5 * i,
        ) for i in range(40)]
        assert pool.submit(fires).accepted == 40
        with cv:
            assert cv.wait_for(lambda: len(done) == 40, timeout=30)
        elapsed = time.monotonic() - t0
        assert pool._loop is not None
        passes = pool._loop.passes
    finally:
        pool.stop(5)
    assert all(r.status_code == 200 for r in done)
    assert all(arrived[f.fire_id] >= f.not_before_ms for f in fires)
    assert passes <= elapsed * 1000 / tick_ms + 2, (passes, elapsed)
