"""Failure notifications (docs/architecture.md#notifications): the machine writes one into the
replicated outbox for a task that fails or goes inactive and for every dead letter, only for tasks
with a ``notify_url``, with ids every replica agrees on; ``AckNotices`` takes them out. The
Notifier's plan batches per target, backs a failing target off without holding the others, and
drops what is past retention; the sender signs like a callback."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

from molens.actors.notifier import NoticeBatch, NoticePlan, NoticeSender
from molens.delivery.pool import make_pool_manager
from molens.fsm.commands import AckNotices
from molens.model import CallbackPolicy
from molens.schema import Notice, NoticeType
from molens.signing import SIGNATURE_HEADER, verify_signature
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


def test_the_sender_posts_the_batch_signed_like_a_callback_and_reports_a_refusal() -> None:
    got: list[tuple[dict[str, str], bytes]] = []
    codes = [500, 200]

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
        url = f"http://127.0.0.1:{srv.server_address[1]}/n"
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
    finally:
        srv.shutdown()
        srv.server_close()


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
    from molens.fsm.commands import FlowNotices
    h = H()
    h.apply(FlowNotices(h.now, NOTIFY, (("a:80", h.now + 2_000), ("b:80", 0))))
    got = sorted(h.s.outbox.values(), key=lambda n: n.id)
    assert [(n.type, n.url, n.task_id) for n in got] == [(NoticeType.FLOW_PAUSED, NOTIFY, ""),
                                                         (NoticeType.FLOW_RESUMED, NOTIFY, "")]
    assert got[0].to_json()["task_id"] is None and "a:80" in got[0].detail
    h.apply(FlowNotices(h.now + 1, "", (("c:80", h.now + 5_000),)))
    assert len(h.s.outbox) == 2
