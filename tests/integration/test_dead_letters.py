"""Dead letters on a real 3-node cluster (docs/architecture.md#dead-letters): every kind is produced
by a real receiver's answers, a redrive arrives with the same fire id and its attempts continuing,
a bulk redrive by filter re-runs a periodic task's dead occurrences, and dead letters survive kill -9
of the leader. The ``unknown`` kind: a single node killed while its at_most_once callback runs."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from molens.client import MolensClient

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import call, send, wait_serving


def _create(n: NodeProc, **task: Any) -> dict[str, Any]:
    st, t = call(n, "POST", "/api/v1/tasks", task)
    assert st == 201, t
    return t  # type: ignore[no-any-return]


def _dead(n: NodeProc, query: str = "") -> list[dict[str, Any]]:
    st, page = call(n, "GET", f"/api/v1/dead-letters?limit=1000{query}")
    assert st == 200, page
    return page["items"]  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_kind_redrive_bulk_redrive_and_kill_9_of_the_leader(tmp_path: Path, receiver: RecordingReceiver) -> None:
    c = Cluster(tmp_path, 3, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        fast = {"backoff": "fixed", "initial_ms": 100}
        exhausted = _create(n, type="delayed", interval_ms=100, callback_url=receiver.url("/status/500/exh"),
                            retry={**fast, "max_retries": 2}, scene="dl")
        gone = _create(n, type="delayed", interval_ms=100, callback_url=receiver.url("/status/404/gone"))
        listed = _create(n, type="delayed", interval_ms=100, callback_url=receiver.url("/status/422/listed"),
                         retry={"non_retryable_statuses": [422]})
        told = _create(n, type="delayed", interval_ms=100, callback_url=receiver.url("/noretry/503/told"))
        ack = _create(n, type="delayed", interval_ms=100, callback_url=receiver.url("/ok/acked"),
                      ack_url=receiver.url("/status/500/ack"), ack_delay_ms=100)
        per = _create(n, type="periodic", interval_ms=1000, callback_url=receiver.url("/status/500/per"),
                      max_retries=0, max_fails=100)
        want = {exhausted["id"]: ("retries_exhausted", 3), gone["id"]: ("non_retryable", 1),
                listed["id"]: ("non_retryable", 1), told["id"]: ("non_retryable", 1), ack["id"]: ("ack_failed", 3)}
        wait_for(lambda: {d["task_id"] for d in _dead(n)} >= set(want), 60, "a dead letter of each task")
        wait_for(lambda: len(_dead(n, f"&task_id={per['id']}")) >= 3, 60, "three dead periodic occurrences")
        # a task's dead letters page by page, newest first, each once (the task adds more meanwhile)
        seen_before = [d["id"] for d in _dead(n, f"&task_id={per['id']}")]
        paged, cursor = [], None
        while True:
            more = f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""
            st, page = call(n, "GET", f"/api/v1/dead-letters?task_id={per['id']}&limit=1{more}")
            assert st == 200, page
            paged += [d["id"] for d in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert len(paged) == len(set(paged)) and [i for i in paged if i in seen_before] == seen_before, paged
        sdk = MolensClient([n.http_url])
        assert [d["id"] for d in sdk.dead_letters(task_id=per["id"], page_size=1)][-len(seen_before):] == seen_before
        sdk.close()
        got = {d["task_id"]: (d["kind"], d["attempts"]) for d in _dead(n) if d["task_id"] in want}
        assert got == want
        assert len(receiver.by_tag("told")) == 1 and len(receiver.by_tag("listed")) == 1  # not retried
        assert len(receiver.by_tag("exh")) == 3
        [d_exh] = _dead(n, "&kind=retries_exhausted&flow=" + f"127.0.0.1:{receiver.port}" + "&task_id="
                        + exhausted["id"])
        assert (d_exh["status_code"], d_exh["response_head"], d_exh["fire_id"]) == (
            500, '{"status": 500}', f"{exhausted['id']}-1")
        st, t = call(n, "GET", f"/api/v1/tasks/{exhausted['id']}")
        assert t["status"] == "failed"
        metrics = send("GET", n.http_url + "/metrics").data.decode()
        assert 'molens_dead_letters_total{kind="ack_failed"} 1.0' in metrics
        assert 'molens_dead_letters_total{kind="non_retryable"} 3.0' in metrics

        # dead letters survive kill -9 of the leader; the new leader serves and redrives them
        before = {d["id"]: d for d in _dead(n) if d["task_id"] in want}
        n.kill()
        n2 = c.leader(timeout=30, exclude=(n.node_id,))
        wait_serving(n2)
        assert {d["id"]: d for d in _dead(n2) if d["task_id"] in want} == before

        # fix the receiver (PATCH the URL), then redrive one: the same fire id, attempts continuing
        st, _ = call(n2, "PATCH", f"/api/v1/tasks/{exhausted['id']}", {"callback_url": receiver.url("/ok/exh-fixed")})
        assert st == 200
        st, body = call(n2, "POST", f"/api/v1/dead-letters/{d_exh['id']}/redrive")
        assert st == 200 and body["id"] == d_exh["id"] and "warning" not in body
        r = wait_for(lambda: receiver.by_tag("exh-fixed") or None, 30, "the redriven callback")[0]
        assert (r.headers["X-Fire-ID"], r.headers["X-Molens-Attempt"]) == (f"{exhausted['id']}-1", "4")
        assert r.headers["X-Molens-Scheduled-At"] == str(d_exh["scheduled_at"])
        wait_for(lambda: call(n2, "GET", f"/api/v1/tasks/{exhausted['id']}")[1]["status"] == "done", 30,
                 "the redriven task done")
        assert call(n2, "GET", f"/api/v1/dead-letters/{d_exh['id']}")[0] == 404
        assert call(n2, "POST", f"/api/v1/dead-letters/{d_exh['id']}/redrive")[0] == 404

        # bulk: pause the periodic task's stream of failures, fix it, redrive all its dead occurrences
        st, _ = call(n2, "PATCH", f"/api/v1/tasks/{per['id']}", {"callback_url": receiver.url("/ok/per-fixed")})
        assert st == 200
        dead_per = _dead(n2, f"&task_id={per['id']}")
        st, out = call(n2, "POST", "/api/v1/dead-letters/redrive", {"task_id": per["id"]})
        assert st == 200 and out["redriven"] == out["matched"] >= len(dead_per) and out["error_count"] == 0
        fire_ids = {d["fire_id"] for d in dead_per}
        wait_for(lambda: fire_ids <= {x.headers["X-Fire-ID"] for x in receiver.by_tag("per-fixed")}, 60,
                 "every dead periodic occurrence delivered again")
        wait_for(lambda: call(n2, "GET", f"/api/v1/tasks/{per['id']}")[1]["status"] == "pending", 30,
                 "the periodic task back on its own schedule")

        # delete by filter and one by id; bad requests change nothing
        assert call(n2, "DELETE", "/api/v1/dead-letters")[0] == 400
        assert call(n2, "POST", "/api/v1/dead-letters/redrive", {"kind": "nope"})[0] == 400
        assert call(n2, "POST", "/api/v1/dead-letters/redrive", {"flow": 5})[0] == 400
        assert call(n2, "GET", "/api/v1/dead-letters?cursor=zzz")[0] == 400
        assert call(n2, "DELETE", "/api/v1/dead-letters/not-an-id")[0] == 404
        st, out = call(n2, "DELETE", "/api/v1/dead-letters?kind=ack_failed")
        assert st == 200 and out["deleted"] == 1
        remaining = {d["task_id"] for d in _dead(n2)}
        assert ack["id"] not in remaining and gone["id"] in remaining
        # the Python SDK: list, redrive, delete
        client = MolensClient([n2.http_url])
        [dl] = list(client.dead_letters(task_id=listed["id"]))
        assert dl["kind"] == "non_retryable" and dl["status_code"] == 422
        client.update(listed["id"], callback_url=receiver.url("/ok/listed-fixed"))
        assert client.redrive(dl["id"])["fire_id"] == f"{listed['id']}-1"
        wait_for(lambda: receiver.by_tag("listed-fixed") or None, 30, "the SDK's redrive delivered")
        [dg] = list(client.dead_letters(task_id=gone["id"], kind="non_retryable"))
        client.delete_dead_letter(dg["id"])
        assert list(client.dead_letters(task_id=gone["id"])) == []
        for other in c.nodes.values():  # every live replica agrees
            if other.running and other is not n2:
                wait_for(lambda o=other: {d["id"] for d in _dead(o)} == {d["id"] for d in _dead(n2)}, 30,
                         "a follower's dead letters to match the leader's")
    finally:
        c.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_at_most_once_fire_lost_with_its_node_is_an_unknown_dead_letter_with_a_warning_on_redrive(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}, "scheduler": {"dispatch_timeout_ms": 1000}},
                state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        t = _create(n, type="delayed", interval_ms=100, reliability="at_most_once", timeout_ms=20_000,
                    callback_url=receiver.url("/slowfirst/15000/amo"))
        wait_for(lambda: receiver.by_tag("amo") or None, 30, "the callback to start")
        n.kill()  # the only worker dies while the callback runs: nobody knows whether it was processed
        n.start()
        wait_serving(n)
        [d] = wait_for(lambda: _dead(n) or None, 60, "the unknown dead letter")
        assert (d["task_id"], d["kind"], d["result"], d["reliability"]) == (t["id"], "unknown", "unknown",
                                                                             "at_most_once")
        st, body = call(n, "POST", f"/api/v1/dead-letters/{d['id']}/redrive")
        assert st == 200 and "at_most_once" in body["warning"]
        wait_for(lambda: len(receiver.by_tag("amo")) >= 2, 30, "the redriven at_most_once callback")
        assert receiver.by_tag("amo")[1].headers["X-Fire-ID"] == f"{t['id']}-1"
    finally:
        c.stop_all()
