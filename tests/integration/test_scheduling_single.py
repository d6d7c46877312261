"""Single-node scheduling end to end: a real ``molens-node`` process, tasks
created over REST, callbacks received by a recording receiver (and a signature-checking receiver
process), results read back over REST.

One node is shared by the module (started once); every test uses its own tag in the callback URL.
Timing rules are checked against what the receiver saw (receive times), never by sleeping.
"""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from molens.signing import namespace_secret, verify_signature

from .conftest import ROOT, Cluster, NodeProc, wait_for
from .recording_receiver import Received, RecordingReceiver

SECRET = "test-signing-secret"
HISTORY_MAX = 3


@pytest.fixture(scope="module")
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    extra = {
        "worker": {"signing_secret": SECRET},
        "scheduler": {"history_max_records_per_task": HISTORY_MAX, "ack_ttl": 3},
        "raft": {"tick_ms": 20},
    }
    c = Cluster(tmp_path_factory.mktemp("sched1"), 1, extra=extra, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_for(lambda: _get(n, "/readyz")[0] == 200, 30, "the HTTP API to be ready")
        yield n
    finally:
        c.kill_all()


_http = urllib3.PoolManager(retries=False, timeout=10)


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _get(n: NodeProc, path: str) -> tuple[int, Any]:
    try:
        r = _http.request("GET", _base(n) + path)
    except urllib3.exceptions.HTTPError:
        return 0, None
    return r.status, json.loads(r.data) if r.data else None


def _post(n: NodeProc, path: str, body: Any = None) -> tuple[int, Any]:
    r = _http.request(
        "POST", _base(n) + path, body=json.dumps(body or {}).encode(), headers={"Content-Type": "application/json"}
    )
    return r.status, json.loads(r.data) if r.data else None


def _delete(n: NodeProc, path: str) -> int:
    return _http.request("DELETE", _base(n) + path).status


def _create(n: NodeProc, **fields: Any) -> dict[str, Any]:
    status, task = _post(n, "/api/v1/tasks", fields)
    assert status == 201, task
    assert isinstance(task, dict)
    return task


def _task(n: NodeProc, tid: str) -> dict[str, Any]:
    status, task = _get(n, f"/api/v1/tasks/{tid}")
    assert status == 200, task
    assert isinstance(task, dict)
    return task


def _wait_status(n: NodeProc, tid: str, status: str, timeout: float = 20) -> dict[str, Any]:
    return wait_for(lambda: (t := _task(n, tid))["status"] == status and t, timeout, f"task {tid} {status}")


def _wait_requests(rec: RecordingReceiver, tag: str, count: int, timeout: float = 20) -> list[Received]:
    return wait_for(lambda: len(got := rec.by_tag(tag)) >= count and got, timeout, f"{count} requests for {tag}")


def _executions(n: NodeProc, tid: str) -> list[dict[str, Any]]:
    status, page = _get(n, f"/api/v1/tasks/{tid}/executions?limit=100")
    assert status == 200, page
    return list(page["items"])


# -------------------------------------------------------------------------------------------------


def test_delayed_task_fires_once_at_its_time_with_headers_and_signature(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="delayed", interval_ms=300, callback_url=receiver.url("/ok/delayed"),
                payload={"order": 42}, scene="billing")
    (r,) = _wait_requests(receiver, "delayed", 1)
    assert r.at_ms >= t["next_run_at"]
    assert r.headers["X-Fire-ID"] == f"{t['id']}-1"
    assert r.headers["X-Task-ID"] == t["id"]
    assert r.headers["X-Scene"] == "billing"
    assert r.headers["X-Molens-Attempt"] == "1"
    assert r.headers["X-Molens-Kind"] == "callback"
    assert r.headers["X-Molens-Scheduled-At"] == str(t["next_run_at"])
    assert r.headers["Content-Type"] == "application/json"
    assert json.loads(r.body) == {"order": 42}
    assert verify_signature(r.headers, r.body, [SECRET])
    done = _wait_status(node, t["id"], "done")
    assert done["last_outcome"] == "success"
    assert len(receiver.by_tag("delayed")) == 1


def test_a_task_of_a_namespace_is_signed_with_that_namespaces_key_too(node: NodeProc, receiver: RecordingReceiver) -> None:
    """docs/receiver.md#one-key-per-namespace: with ``worker.signing_scope`` both (the default) a
    callback verifies with the cluster's secret and with its namespace's key, not another's."""
    status, ns = _post(node, "/api/v1/namespaces", {"name": "team-a"})
    assert status == 201, ns
    t = _create(node, type="delayed", interval_ms=200, callback_url=receiver.url("/ok/team-a"), namespace="team-a")
    (r,) = _wait_requests(receiver, "team-a", 1)
    assert r.headers["X-Task-ID"] == t["id"]
    assert verify_signature(r.headers, r.body, [namespace_secret(SECRET, "team-a")])
    assert verify_signature(r.headers, r.body, [SECRET])
    assert not verify_signature(r.headers, r.body, [namespace_secret(SECRET, "default")])
    _create(node, type="delayed", interval_ms=200, callback_url=receiver.url("/ok/default-ns"))
    (d,) = _wait_requests(receiver, "default-ns", 1)  # a task of the default namespace, signed with its key
    assert verify_signature(d.headers, d.body, [namespace_secret(SECRET, "default")])
    assert not verify_signature(d.headers, d.body, [namespace_secret(SECRET, "team-a")])


def test_periodic_interval_task_fires_at_a_fixed_rate(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="periodic", interval_ms=1000, callback_url=receiver.url("/ok/periodic"))
    got = _wait_requests(receiver, "periodic", 3)
    assert _delete(node, f"/api/v1/tasks/{t['id']}") in (200, 204)
    seqs = [int(r.headers["X-Fire-ID"].rsplit("-", 1)[1]) for r in got[:3]]
    assert seqs == [1, 2, 3]
    for k, r in enumerate(got[:3]):  # never early: occurrence k is due at created + (k+1) * interval
        assert r.at_ms >= t["created_at"] + (k + 1) * 1000
        assert r.headers["X-Molens-Scheduled-At"] == str(t["created_at"] + (k + 1) * 1000)


def test_cron_every_second_fires_each_second(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="periodic", cron_expr="* * * * * *", callback_url=receiver.url("/ok/cron"))
    got = _wait_requests(receiver, "cron", 3)
    assert _delete(node, f"/api/v1/tasks/{t['id']}") in (200, 204)
    seconds = [r.at_ms // 1000 for r in got[:3]]
    assert seconds == sorted(set(seconds)), "one fire per second, never two in one second"
    assert [r.headers["X-Fire-ID"] for r in got[:3]] == [f"{t['id']}-{k}" for k in (1, 2, 3)]


def test_ack_success_marks_the_task_done(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="delayed", interval_ms=100, callback_url=receiver.url("/ok/ack-ok-cb"),
                ack_url=receiver.url("/ok/ack-ok"), ack_delay_ms=300)
    (cb,) = _wait_requests(receiver, "ack-ok-cb", 1)
    (ack,) = _wait_requests(receiver, "ack-ok", 1)
    assert ack.headers["X-Molens-Kind"] == "ack"
    assert ack.headers["X-Fire-ID"] == cb.headers["X-Fire-ID"]
    assert ack.headers["X-Molens-Scheduled-At"] == cb.headers["X-Molens-Scheduled-At"] == str(t["next_run_at"])
    assert ack.at_ms >= cb.at_ms + 300
    assert _wait_status(node, t["id"], "done")["last_outcome"] == "ack_success"


def test_ack_failure_fails_after_ack_ttl_probes_and_history_stays_bounded(
    node: NodeProc, receiver: RecordingReceiver
) -> None:
    t = _create(node, type="delayed", interval_ms=100, callback_url=receiver.url("/ok/ack-bad-cb"),
                ack_url=receiver.url("/status/500/ack-bad"), ack_delay_ms=200)
    failed = _wait_status(node, t["id"], "failed")
    assert failed["last_outcome"] == "ack_failed"
    assert len(receiver.by_tag("ack-bad")) == 3  # ack_ttl
    assert len(receiver.by_tag("ack-bad-cb")) == 1
    # 1 callback + 3 probes = 4 executions, the history keeps the newest HISTORY_MAX
    ex = wait_for(lambda: len(e := _executions(node, t["id"])) == HISTORY_MAX and e, 10, "bounded history")
    assert [e["kind"] for e in ex] == ["ack"] * HISTORY_MAX


@pytest.mark.slow
def test_500_is_retried_after_1_2_4_seconds_then_the_task_fails(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="delayed", interval_ms=100, callback_url=receiver.url("/status/500/retry500"), max_retries=3)
    failed = _wait_status(node, t["id"], "failed", timeout=30)
    got = receiver.by_tag("retry500")
    assert [r.headers["X-Molens-Attempt"] for r in got] == ["1", "2", "3", "4"]
    assert len({r.headers["X-Fire-ID"] for r in got}) == 1
    assert {r.headers["X-Molens-Scheduled-At"] for r in got} == {str(t["next_run_at"])}
    gaps = [b.at_ms - a.at_ms for a, b in itertools.pairwise(got)]
    for gap, want in zip(gaps, (1000, 2000, 4000)):
        assert abs(gap - want) <= 150, gaps
    assert failed["last_status_code"] == 500


def test_periodic_404_goes_inactive(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="periodic", interval_ms=1000, callback_url=receiver.url("/status/404/p404"))
    inactive = _wait_status(node, t["id"], "inactive")
    assert inactive["last_outcome"] == "not_found"
    assert len(receiver.by_tag("p404")) == 1


def test_periodic_goes_inactive_after_max_fails_failed_occurrences(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="periodic", interval_ms=1000, callback_url=receiver.url("/status/503/maxfails"),
                max_retries=0, max_fails=2)
    inactive = _wait_status(node, t["id"], "inactive")
    assert inactive["fail_count"] == 2
    assert len(receiver.by_tag("maxfails")) == 2


def test_pause_resume_trigger_delete(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="periodic", interval_ms=3_600_000, callback_url=receiver.url("/ok/ctl"))
    tid = t["id"]
    assert _post(node, f"/api/v1/tasks/{tid}/trigger")[0] == 200
    (first,) = _wait_requests(receiver, "ctl", 1)
    assert first.headers["X-Fire-ID"] == f"{tid}-1"
    wait_for(lambda: _task(node, tid)["status"] == "pending" and _task(node, tid)["seq"] == 2, 10, "next occurrence")
    status, paused = _post(node, f"/api/v1/tasks/{tid}/pause")
    assert status == 200 and paused["status"] == "paused"
    status, err = _post(node, f"/api/v1/tasks/{tid}/trigger")
    assert status == 409, err
    status, resumed = _post(node, f"/api/v1/tasks/{tid}/resume")
    assert status == 200 and resumed["status"] == "pending"
    assert _post(node, f"/api/v1/tasks/{tid}/trigger")[0] == 200
    _wait_requests(receiver, "ctl", 2)
    assert _delete(node, f"/api/v1/tasks/{tid}") in (200, 204)
    assert _get(node, f"/api/v1/tasks/{tid}")[0] == 404
    # a paused delayed task does not fire at its time; resumed after it, it fires at once
    d = _create(node, type="delayed", interval_ms=1000, callback_url=receiver.url("/ok/ctl-delayed"))
    assert _post(node, f"/api/v1/tasks/{d['id']}/pause")[0] == 200
    wait_for(lambda: time.time() * 1000 > d["next_run_at"] + 300, 5, "the paused task's time to pass")
    assert receiver.by_tag("ctl-delayed") == []
    assert _post(node, f"/api/v1/tasks/{d['id']}/resume")[0] == 200
    _wait_requests(receiver, "ctl-delayed", 1)
    _wait_status(node, d["id"], "done")


def test_idempotency_key_returns_the_first_task_and_fires_once(node: NodeProc, receiver: RecordingReceiver) -> None:
    body = {"type": "delayed", "interval_ms": 200, "callback_url": receiver.url("/ok/idem"), "idempotency_key": "k-1"}
    s1, t1 = _post(node, "/api/v1/tasks", body)
    s2, t2 = _post(node, "/api/v1/tasks", body)
    assert (s1, s2) == (201, 200)
    assert t1["id"] == t2["id"]
    _wait_status(node, t1["id"], "done")
    assert len(receiver.by_tag("idem")) == 1


def test_an_idempotency_key_of_128_four_byte_characters_is_kept_and_answered(
    node: NodeProc, receiver: RecordingReceiver,
) -> None:
    """128 characters (the bound) of four UTF-8 bytes each are 512 bytes, one more than lmdb takes as
    a key: the entry used to fail to apply, and the node's Raft actor stopped on it."""
    key = "\U0001F600" * 128
    body = {"type": "delayed", "interval_ms": 200, "callback_url": receiver.url("/ok/wide-key"), "idempotency_key": key}
    s1, t1 = _post(node, "/api/v1/tasks", body)
    s2, t2 = _post(node, "/api/v1/tasks", body)
    assert (s1, s2) == (201, 200), (t1, t2)
    assert t1["id"] == t2["id"] and t2["idempotency_key"] == key
    _wait_status(node, t1["id"], "done")
    assert len(receiver.by_tag("wide-key")) == 1
    later = _create(node, type="delayed", interval_ms=60_000, callback_url=receiver.url("/ok/after-wide-key"))
    assert _get(node, f"/api/v1/tasks/{later['id']}")[0] == 200


def test_response_head_capture_is_512_bytes(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="delayed", interval_ms=100, callback_url=receiver.url("/big/5000/big"))
    done = _wait_status(node, t["id"], "done")
    assert len(done["last_execution_result"]) == 512
    assert done["last_execution_result"] == ("0123456789" * 52)[:512]
    (ex,) = _executions(node, t["id"])
    assert ex["execution_result"] == done["last_execution_result"]


def test_builtin_test_endpoints_make_a_task_done(node: NodeProc) -> None:
    base = _base(node)
    t = _create(node, type="delayed", interval_ms=100, callback_url=f"{base}/api/v1/test/callback",
                ack_url=f"{base}/api/v1/test/ack", ack_delay_ms=100)
    assert _wait_status(node, t["id"], "done")["last_outcome"] == "ack_success"


_RECEIVER = textwrap.dedent(
    """
    import json, sys
    from wsgiref.simple_server import make_server, WSGIRequestHandler
    from molens.receiver import verify_signature

    class Quiet(WSGIRequestHandler):
        def log_message(self, *a):
            pass

    def app(environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")}
        ok = verify_signature(headers, body, [sys.argv[2]])
        answer = json.dumps({"verified": ok, "fire": headers.get("X-Fire-Id"), "payload": json.loads(body)}).encode()
        start_response("200 OK" if ok else "401 Unauthorized", [("Content-Type", "application/json"),
                                                                ("Content-Length", str(len(answer)))])
        return [answer]

    make_server("127.0.0.1", int(sys.argv[1]), app, handler_class=Quiet).serve_forever()
    """
)


def test_signature_is_verified_by_a_real_receiver_process(node: NodeProc, tmp_path: Path) -> None:
    script = tmp_path / "receiver_app.py"
    script.write_text(_RECEIVER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(script), str(port), SECRET], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def listening() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as c:
                return c.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, 20, "the receiver process")
        t = _create(node, type="delayed", interval_ms=100, callback_url=f"http://127.0.0.1:{port}/hook",
                    payload={"hello": "world"})
        done = _wait_status(node, t["id"], "done")
        answer = json.loads(done["last_execution_result"])
        assert answer == {"verified": True, "fire": f"{t['id']}-1", "payload": {"hello": "world"}}
    finally:
        proc.kill()
        proc.wait(10)
