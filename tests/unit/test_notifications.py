"""Failure notifications (docs/architecture.md#notifications): the machine writes one into the
replicated outbox for a task that fails or goes inactive and for every dead letter, only for tasks
with a ``notify_url``, with ids every replica agrees on; ``AckNotices`` takes them out. The
Notifier's plan batches per target, backs a failing target off without holding the others, and
drops what is past retention; the sender signs like a callback. The Dispatcher announces flow holds
as ``FlowNotices`` and proposes a refused one again, until its term ends."""

from __future__ import annotations

import contextlib
import doctest
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Condition, Event, Thread
from typing import Any

import msgspec
import pytest

from molens.actors import dispatcher
from molens.actors.alarm import wall_ms
from molens.actors.dispatcher import Dispatcher, HoldNotices
from molens.actors.messages import DueBatch, FireEnd, InFlight
from molens.actors.notifier import NoticeBatch, NoticePlan, NoticeSender
from molens.actors.peer_errors import StorageFull
from molens.actors.stats import Stats, StatsClient
from molens.actors.term import TermContext
from molens.config import NotificationsConfig, SchedulerConfig
from molens.delivery.pool import make_pool_manager
from molens.fsm.commands import AckNotices, CreateItem, CreateTasks, Dispatched, FlowNotices, decode, encode
from molens.fsm.store import TaskStore
from molens.model import CallbackPolicy, new_task_id, validate_create
from molens.raft.errors import NotLeaderError
from molens.schema import Notice, NoticeType, flow_of
from molens.signing import SIGNATURE_HEADER, namespace_secret, verify_signature
from tests.unit.test_fsm_machine import H
from tests.unit.test_retry_policy import answer

NOTIFY = "http://127.0.0.1:9/notify"


def kinds(h: H) -> list[tuple[str, str]]:
    return [(n.type.value, n.task_id) for _, n in sorted(h.s.outbox.items())]


def test_a_failed_task_with_a_notify_url_leaves_a_dead_letter_and_a_task_failed_notice() -> None:
    h = H()
    t = h.create(max_retries=0, notify_url=NOTIFY)
    quiet = h.create(max_retries=0)
    for tid in (t.id, quiet.id):
        h.fire_due(tid)
        answer(h, tid, 500)
    assert sorted(kinds(h)) == [("dead_letter", t.id), ("task_failed", t.id)]
    dl = next(n for n in h.s.outbox.values() if n.type is NoticeType.DEAD_LETTER)
    assert dl.id == f"{t.id}.dead_letter.{t.id}-1.1" and dl.url == NOTIFY and "retries_exhausted" in dl.detail


def test_a_periodic_task_going_inactive_is_notified_once() -> None:
    h = H()
    p = h.create(type="periodic", interval_ms=60_000, notify_url=NOTIFY)
    h.fire_due(p.id)
    answer(h, p.id, 404)
    assert sorted(kinds(h)) == [("dead_letter", p.id), ("task_inactive", p.id)]


def test_ack_notices_empties_the_outbox() -> None:
    h = H()
    t = h.create(max_retries=0, notify_url=NOTIFY)
    h.fire_due(t.id)
    answer(h, t.id, 500)
    assert len(h.s.outbox) == 2
    for key in list(h.s.outbox):
        h.apply(AckNotices(h.now, (key,)))
    assert h.s.outbox == {}


def _n(i: int, url: str, at: int = 1_000) -> Notice:
    return Notice(id=f"n{i}", type=NoticeType.TASK_FAILED, task_id="T", fire_id="T-1", at_ms=at + i, detail="",
                  url=url)


def test_the_plan_batches_per_target_backs_off_a_failing_one_and_drops_what_is_too_old() -> None:
    plan = NoticePlan(batch_max=2, retention_ms=60_000)
    notices = [_n(0, "A"), _n(1, "A"), _n(2, "A"), _n(3, "B")]
    batches, expired = plan.plan(10_000, notices)
    assert [(b.url, [n.id for n in b.notices]) for b in batches] == [("A", ["n0", "n1"]), ("B", ["n3"])]
    assert expired == []
    plan.sent("A", False, 10_000)
    batches, _ = plan.plan(10_500, notices)
    assert [b.url for b in batches] == ["B"]  # A waits 1 s; B is not held behind it
    batches, _ = plan.plan(11_000, notices)
    assert [b.url for b in batches] == ["A", "B"]
    plan.sent("A", False, 11_000)
    assert [b.url for b in plan.plan(12_500, notices)[0]] == ["B"]  # now 2 s
    plan.sent("A", True, 13_000)
    plan.acking.update({(1_000, "n0"), (1_001, "n1")})
    assert [[n.id for n in b.notices] for b in plan.plan(13_000, notices)[0]] == [["n2"], ["n3"]]
    _, expired = plan.plan(70_000, notices)
    assert expired == [(1_002, "n2"), (1_003, "n3")]


@contextlib.contextmanager
def _target(codes: list[int]) -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A notification target on 127.0.0.1 answering ``codes`` in turn: its URL and what it received."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append(({k: v for k, v in self.headers.items()}, body))
            self.send_response(codes.pop(0))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/n", got
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_sender_posts_the_batch_signed_like_a_callback_and_reports_a_refusal() -> None:
    with _target([500, 200]) as (url, got):
        send = NoticeSender(make_pool_manager(1, CallbackPolicy()), 2_000, ("s3cret",), wall=lambda: 1_700_000_000_000)
        b = NoticeBatch(url, (_n(0, url), _n(1, url)))
        assert send(b) == "status 500"
        assert send(b) is None
        headers, body = got[1]
        assert json.loads(body)["events"][1] == {"id": "n1", "type": "task_failed", "task_id": "T", "fire_id": "T-1",
                                                  "at": 1_001, "detail": ""}
        assert (headers["X-Fire-ID"], headers["X-Molens-Kind"]) == ("n0", "notification")
        assert SIGNATURE_HEADER in headers
        assert verify_signature(headers, body, ["s3cret"], now_ms=1_700_000_000_000)
        assert not verify_signature(headers, body, ["other"], now_ms=1_700_000_000_000)
        assert not verify_signature(headers, body + b" ", ["s3cret"], now_ms=1_700_000_000_000)
        denied = NoticeSender(make_pool_manager(1, CallbackPolicy(deny_cidrs=("127.0.0.0/8",))), 2_000, ())
        assert denied(b) is not None and len(got) == 2  # the host policy applies to notifications too


def test_the_plan_keeps_each_namespaces_notices_in_batches_of_their_own() -> None:
    plan = NoticePlan(batch_max=10, retention_ms=60_000)
    a, b, flow = _n(0, "A"), msgspec.structs.replace(_n(1, "A"), task_id="U"), msgspec.structs.replace(
        _n(2, "A"), task_id="")
    ns = {"T": "team-a", "U": "team-b"}
    batches, _ = plan.plan(10_000, [a, b, flow], lambda n: ns.get(n.task_id))
    assert [(bt.namespace, [n.id for n in bt.notices]) for bt in batches] == [
        ("team-a", ["n0"]), ("team-b", ["n1"]), (None, ["n2"])]


def test_notices_to_the_operators_url_are_of_no_namespace_whoever_sent_them() -> None:
    """docs/receiver.md#one-key-per-namespace: the node's ``notifications.url`` (the operator's, the
    target of every task without a ``notify_url``) verifies all it hears with the cluster's secret."""
    plan = NoticePlan(batch_max=10, retention_ms=60_000, operator_url="OPS")
    own, ops = _n(0, "A"), _n(1, "OPS")
    other = msgspec.structs.replace(_n(2, "OPS"), task_id="U")
    batches, _ = plan.plan(10_000, [own, ops, other], lambda n: {"T": "team-a", "U": "team-b"}[n.task_id])
    assert [(bt.url, bt.namespace, [n.id for n in bt.notices]) for bt in batches] == [
        ("A", "team-a", ["n0"]), ("OPS", None, ["n1", "n2"])]


@pytest.mark.parametrize("scope", ["cluster", "both", "namespace"])
def test_a_namespaces_notices_are_signed_with_its_key_by_the_signing_scope(scope: str) -> None:
    """docs/receiver.md#one-key-per-namespace: a notify_url receiver of ``team-a`` verifies with its
    key; a batch of no namespace (a flow's notice) is signed with the cluster's secret whatever the scope."""
    now = 1_700_000_000_000
    with _target([200, 200]) as (url, got):
        send = NoticeSender(make_pool_manager(1, CallbackPolicy()), 2_000, ("s3cret",), wall=lambda: now,
                            signing_scope=scope)
        assert send(NoticeBatch(url, (_n(0, url),), namespace="team-a")) is None
        assert send(NoticeBatch(url, (_n(1, url),))) is None
    (named, nb), (plain, pb) = got
    key = namespace_secret("s3cret", "team-a")
    assert verify_signature(named, nb, [key], now_ms=now) is (scope != "cluster")
    assert verify_signature(named, nb, ["s3cret"], now_ms=now) is (scope != "namespace")
    assert not verify_signature(named, nb, [namespace_secret("s3cret", "team-b")], now_ms=now)
    assert verify_signature(plain, pb, ["s3cret"], now_ms=now) and not verify_signature(plain, pb, [key], now_ms=now)


def test_flow_holds_are_announced_once_when_they_begin_and_once_when_they_end() -> None:
    from molens.schedule.flows import FlowControl
    fc = FlowControl()
    fc.throttle("a:80", 5_000)
    fc.throttle("b:80", 3_000)
    assert fc.holds(1_000) == ([("a:80", 5_000), ("b:80", 3_000)], [])
    fc.throttle("a:80", 8_000)  # extended by another 429: no new announcement
    assert fc.holds(2_000) == ([], []) and fc.next_hold_end() == 3_000
    assert fc.holds(3_000) == ([], ["b:80"])
    assert fc.holds(7_999) == ([], []) and fc.next_hold_end() == 8_000
    assert fc.holds(8_000) == ([], ["a:80"]) and fc.next_hold_end() is None
    fc.throttle("a:80", 7_000)  # already over when looked at: nothing to announce
    assert fc.holds(9_000) == ([], [])


def test_flow_notices_go_to_the_nodes_target_and_nothing_without_one() -> None:
    h = H()
    h.apply(FlowNotices(h.now, NOTIFY, (("a:80", h.now + 2_000), ("b:80", 0))))
    got = sorted(h.s.outbox.values(), key=lambda n: n.id)
    assert [(n.type, n.url, n.task_id) for n in got] == [(NoticeType.FLOW_PAUSED, NOTIFY, ""),
                                                         (NoticeType.FLOW_RESUMED, NOTIFY, "")]
    assert got[0].to_json()["task_id"] is None and "a:80" in got[0].detail
    h.apply(FlowNotices(h.now + 1, "", (("c:80", h.now + 5_000),)))
    assert len(h.s.outbox) == 2


# ---- the Dispatcher's flow notices --------------------------------------------------------------------


class DispatcherRig:
    """A Dispatcher of term 1 over a store of its own, its proposals answered by the test: a
    ``Dispatched`` entry applies (its fires are not sent), a ``FlowNotices`` one fails with the
    next error of ``notice_errors`` (applies once none are left)."""

    def __init__(self, tmp_path: Path, urls: list[str], notice_errors: list[BaseException]) -> None:
        self.store = TaskStore(tmp_path, durable=False)
        self.now = wall_ms()
        past = self.now - 10_000
        self.tasks = {url: new_task_id(past, i) for i, url in enumerate(urls)}
        specs = {url: validate_create({"type": "delayed", "interval_ms": 1_000, "callback_url": url}, now_ms=past)
                 for url in urls}
        self.store.apply_batch([(1, encode(CreateTasks(past, tuple(
            CreateItem(tid, specs[url]) for url, tid in self.tasks.items()))))])
        self.flows = {url: flow_of(specs[url]) for url in urls}
        self.notice_errors = notice_errors
        self.proposed: list[Any] = []
        self.cv = Condition()
        self.failed: list[BaseException] = []
        self.stats = Stats.start()
        ctx = TermContext(
            node_id="n1", term=1, cfg=SchedulerConfig(), store=self.store, propose_batch=self.propose,
            stats=StatsClient(self.stats), send_fires=lambda groups: {}, local_free=lambda: 10,
            fatal=self.failed.append, ended=Event(), notifications=NotificationsConfig(url=NOTIFY),
        )
        self.ref = Dispatcher.start(ctx)

    def propose(self, datas: list[bytes], done: Any) -> None:  # the Dispatcher's thread
        cmd = decode(datas[0])
        err = None
        if isinstance(cmd, FlowNotices):
            with self.cv:
                err = self.notice_errors.pop(0) if self.notice_errors else None
        done([], err)  # the outcome is queued before the test can see the proposal
        with self.cv:
            self.proposed.append(cmd)
            self.cv.notify_all()

    def wait_for(self, kind: type, n: int) -> list[Any]:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.of(kind)) >= n, timeout=10), self.proposed
            return self.of(kind)

    def of(self, kind: type) -> list[Any]:
        return [c for c in self.proposed if isinstance(c, kind)]

    def hold(self, url: str, until_ms: int) -> None:
        """The task of ``url`` is dispatched and its fire ends with a ``Retry-After`` until ``until_ms``."""
        n = len(self.of(Dispatched))
        self.ref.tell(DueBatch([self.tasks[url]]))
        (item,) = self.wait_for(Dispatched, n + 1)[n].items
        self.ref.tell(InFlight(0, 0, ended=(FireEnd(item.fire_id, item.attempt, retry_after_ms=until_ms),)))

    def close(self) -> None:
        self.ref.stop()
        self.stats.stop()
        self.store.close()


URL_A, URL_B = "http://127.0.0.1:9/a", "http://127.0.0.2:9/b"


def test_a_refused_flow_notice_is_proposed_again(tmp_path: Path) -> None:
    rig = DispatcherRig(tmp_path, [URL_A], [StorageFull("disk full")])
    try:
        until = rig.now + 60_000
        rig.hold(URL_A, until)
        first, again = rig.wait_for(FlowNotices, 2)[:2]
        assert first.items == again.items == ((rig.flows[URL_A], until),)
        assert again.url == NOTIFY and again.now_ms >= first.now_ms
        assert rig.failed == []
    finally:
        rig.close()


def test_a_flow_notice_refused_because_the_term_is_over_is_not_proposed_again(tmp_path: Path) -> None:
    rig = DispatcherRig(tmp_path, [URL_A, URL_B], [NotLeaderError(None)])
    try:
        until = rig.now + 60_000
        rig.hold(URL_A, until)
        rig.wait_for(FlowNotices, 1)
        rig.hold(URL_B, until)  # after the refusal's outcome: the next proposal carries B's hold alone
        assert [c.items for c in rig.wait_for(FlowNotices, 2)] == [((rig.flows[URL_A], until),),
                                                                   ((rig.flows[URL_B], until),)]
    finally:
        rig.close()


def test_waiting_flow_notices_are_bounded_the_oldest_dropped_and_a_hold_and_its_end_both_go() -> None:
    assert doctest.testmod(dispatcher).failed == 0
    hn = HoldNotices(max_pending=2)
    assert hn.add([("a:80", 5_000), ("b:80", 5_000)], ["c:80"]) == 1
    assert hn.take(1_000) == (("b:80", 5_000), ("c:80", 0))
    assert hn.add([("d:80", 6_000)], ["b:80"]) == 0
    assert hn.refused(1_000) == 2  # the refused two are the oldest changes waiting
    assert hn.take(1_099) == () and hn.next_wake() == 1_100
    assert hn.take(1_100) == (("d:80", 6_000), ("b:80", 0))
    hn.add([("e:80", 7_000)], [])
    assert hn.give_up() == 3 and hn.take(2_000) == () and hn.next_wake() is None
    hn = HoldNotices()  # a receiver paused and resumed before either was announced is told both, in order
    hn.add([("a:80", 5_000)], [])
    hn.add([], ["a:80"])
    hn.add([("a:80", 9_000)], [])  # held again: the newer hold stands over the older one
    assert hn.take(1_000) == (("a:80", 0), ("a:80", 9_000))


class _Endless:
    """A raw HTTP target that never finishes its answer: ``head`` trickles the status line and
    headers one byte at a time, ``body`` sends a whole head then streams its body. It stops by
    itself after ``limit`` bytes (or when the client hangs up: ``hung_up``)."""

    def __init__(self, mode: str, limit: int) -> None:
        import socket

        self.mode, self.limit = mode, limit
        self.sent = 0
        self.hung_up = Event()
        self.finished = Event()
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._srv.getsockname()[1]}/n"
        Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import time

        conn, _ = self._srv.accept()
        with conn:
            conn.recv(65536)
            try:
                if self.mode == "head":
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    while self.sent < self.limit:
                        conn.sendall(b"X")  # a header line that never ends
                        self.sent += 1
                        time.sleep(0.005)
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
                    chunk = b"x" * 65536
                    while self.sent < self.limit:
                        conn.sendall(chunk)
                        self.sent += len(chunk)
            except OSError:
                self.hung_up.set()
        self.finished.set()
        self._srv.close()


def test_a_target_that_never_finishes_its_answer_does_not_hold_the_notifier() -> None:
    """One tenant's notify_url must not stall the others' notifications: the head must come within
    the timeout and the body is not read (the Notifier sends one batch at a time)."""
    for mode, limit in (("head", 10_000), ("body", 64 << 20)):
        target = _Endless(mode, limit)
        send = NoticeSender(make_pool_manager(1, CallbackPolicy()), 500, ())
        why = send(NoticeBatch(target.url, (_n(0, target.url),)))
        assert target.finished.wait(60) and target.hung_up.is_set(), (mode, target.sent)
        assert target.sent < limit
        if mode == "head":
            assert why is not None  # no head within the timeout: tried again later
        else:
            assert why is None  # a 200 head: delivered, the body left unread
