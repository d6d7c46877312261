"""Updating a task in place on a real node (``PATCH /api/v1/tasks/{id}``, docs/api.md#update-a-task):
the next fires follow the new definition, a fire in flight finishes as it was sent, a stale
``If-Match`` is a 412 that changes nothing, an invalid change is a 400 that changes nothing, and the
SDK's ``update``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from molens.client import MolensClient, PreconditionFailedError

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver

_http = urllib3.PoolManager(retries=False, timeout=10)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    c = Cluster(tmp_path_factory.mktemp("update"), 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_for(lambda: _call(n, "GET", "/readyz")[0] == 200, 30, "the HTTP API to be ready")
        yield n
    finally:
        c.kill_all()


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _call(n: NodeProc, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    h = {"Content-Type": "application/json", **{k.replace("_", "-"): v for k, v in headers.items()}}
    try:
        r = _http.request(method, _base(n) + path, body=data, headers=h)
    except urllib3.exceptions.HTTPError:
        return 0, None, {}
    return r.status, (json.loads(r.data) if r.data else None), r.headers


def _create(n: NodeProc, **req: Any) -> dict[str, Any]:
    status, t, _ = _call(n, "POST", "/api/v1/tasks", req)
    assert status == 201, t
    return dict(t)


def _history(n: NodeProc, tid: str) -> list[dict[str, Any]]:
    status, page, _ = _call(n, "GET", f"/api/v1/tasks/{tid}/executions?limit=1000")
    assert status == 200
    return list(reversed(page["items"]))


@pytest.mark.slow
def test_the_next_fires_follow_a_new_url_and_schedule_and_no_occurrence_fires_twice(
    node: NodeProc, receiver: RecordingReceiver
) -> None:
    t = _create(node, type="periodic", interval_ms=1_000, callback_url=receiver.url("/ok/upd-a"))
    wait_for(lambda: len(receiver.by_tag("upd-a")) >= 2, 30, "two fires to the first URL")
    status, _, headers = _call(node, "GET", f"/api/v1/tasks/{t['id']}")
    assert status == 200 and headers["ETag"] == '"1"'
    status, u, headers = _call(
        node, "PATCH", f"/api/v1/tasks/{t['id']}",
        {"callback_url": receiver.url("/ok/upd-b"), "interval_ms": 2_000, "payload": {"v": 2}},
        If_Match='"1"', Content_Type="application/merge-patch+json",
    )
    assert status == 200, u
    assert (u["version"], headers["ETag"], u["callback_url"], u["interval_ms"]) == (
        2, '"2"', receiver.url("/ok/upd-b"), 2_000)
    wait_for(lambda: len(receiver.by_tag("upd-b")) >= 2, 30, "two fires to the new URL")
    _call(node, "POST", f"/api/v1/tasks/{t['id']}/pause")
    a, b = receiver.by_tag("upd-a"), receiver.by_tag("upd-b")
    fire_ids = [r.headers["X-Fire-ID"] for r in a + b if r.headers["X-Molens-Attempt"] == "1"]
    assert len(fire_ids) == len(set(fire_ids)), fire_ids
    last_a = max(int(r.headers["X-Fire-ID"].rpartition("-")[2]) for r in a)
    assert all(int(r.headers["X-Fire-ID"].rpartition("-")[2]) > last_a for r in b)
    assert all(r.body == b'{"v":2}' for r in b) and all(r.body == b"null" for r in a)
    sched_a = [int(r.headers["X-Molens-Scheduled-At"]) for r in a]
    sched_b = [int(r.headers["X-Molens-Scheduled-At"]) for r in b]
    assert all((s - t["created_at"]) % 1_000 == 0 for s in sched_a)
    assert all((s - t["created_at"]) % 2_000 == 0 for s in sched_b), (t["created_at"], sched_b)  # the new grid
    assert len(set(sched_a + sched_b)) == len(sched_a + sched_b) and min(sched_b) > max(sched_a)
    events = [e for e in _history(node, t["id"]) if e["kind"] == "event"]
    assert [(e["result"], e["execution_result"]) for e in events] == [
        ("updated", "version 2: callback_url, interval_ms, payload")  # in the schema's field order
    ]


def test_a_stale_if_match_is_a_412_and_changes_nothing(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="delayed", interval_ms=3_600_000, callback_url=receiver.url("/ok/upd-stale"))
    path = f"/api/v1/tasks/{t['id']}"
    status, u, _ = _call(node, "PATCH", path, {"scene": "first"}, If_Match='"1"')
    assert status == 200 and u["version"] == 2
    status, err, _ = _call(node, "PATCH", path, {"scene": "second"}, If_Match='"1"')
    assert status == 412 and err["error"]["code"] == "precondition_failed" and err["error"]["field"] == "If-Match"
    status, now, _ = _call(node, "GET", path)
    assert now == u
    assert [e["execution_result"] for e in _history(node, t["id"])] == ["version 2: scene"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"type": "periodic"}, "type"),
        ({"nope": 1}, "nope"),
        ({"callback_url": "http://169.254.169.254/latest"}, "callback_url"),
        ({"interval_ms": -1}, "interval_ms"),
        ({"cron_expr": "* * * * *"}, "cron_expr"),  # a delayed task cannot have one
        ([1, 2], "body"),
    ],
)
def test_an_invalid_change_is_a_400_naming_the_field_and_changes_nothing(
    node: NodeProc, receiver: RecordingReceiver, patch: Any, field: str
) -> None:
    t = _create(node, type="delayed", interval_ms=3_600_000, callback_url=receiver.url("/ok/upd-bad"))
    status, err, _ = _call(node, "PATCH", f"/api/v1/tasks/{t['id']}", patch)
    assert status == 400 and err["error"]["field"] == field, err
    assert _call(node, "GET", f"/api/v1/tasks/{t['id']}")[1] == t
    assert _history(node, t["id"]) == []


def test_a_fire_in_flight_finishes_as_it_was_sent(node: NodeProc, receiver: RecordingReceiver) -> None:
    old_url = receiver.url("/slowfirst/1500/upd-old")
    t = _create(node, type="delayed", interval_ms=0, callback_url=old_url)
    wait_for(lambda: receiver.by_tag("upd-old"), 30, "the first fire to arrive (held 1.5 s by the receiver)")
    status, u, _ = _call(node, "PATCH", f"/api/v1/tasks/{t['id']}", {"callback_url": receiver.url("/ok/upd-new")})
    assert status == 200 and u["version"] == 2
    done = wait_for(
        lambda: (d := _call(node, "GET", f"/api/v1/tasks/{t['id']}")[1])["status"] == "done" and d, 30, "done"
    )
    assert done["callback_url"] == receiver.url("/ok/upd-new")
    assert len(receiver.by_tag("upd-old")) == 1 and receiver.by_tag("upd-new") == []
    rows = _history(node, t["id"])
    assert [(e["kind"], e["result"], e["url"]) for e in rows] == [
        ("event", "updated", receiver.url("/ok/upd-new")), ("callback", "success", old_url)
    ]


def test_the_sdk_updates_with_and_without_a_version(node: NodeProc, receiver: RecordingReceiver) -> None:
    with MolensClient([_base(node)]) as client:
        t = client.create(type="delayed", interval_ms=3_600_000, callback_url=receiver.url("/ok/upd-sdk"))
        u = client.update(t["id"], scene="one", if_version=t["version"])
        assert (u["version"], u["scene"]) == (2, "one")
        with pytest.raises(PreconditionFailedError) as e:
            client.update(t["id"], {"scene": "two"}, if_version=1)
        assert e.value.status == 412
        u = client.update(t["id"], scene="two", timeout_ms=None)  # None: back to the default
        assert (u["version"], u["scene"], u["timeout_ms"]) == (3, "two", 5_000)


def test_post_with_a_method_override_is_a_patch_and_nothing_else(node: NodeProc, receiver: RecordingReceiver) -> None:
    t = _create(node, type="delayed", interval_ms=3_600_000, callback_url=receiver.url("/ok/upd-override"))
    status, u, _ = _call(node, "POST", f"/api/v1/tasks/{t['id']}", {"scene": "via-post"},
                         X_HTTP_Method_Override="PATCH", If_Match='"1"')
    assert status == 200 and (u["scene"], u["version"]) == ("via-post", 2)
    status, err, _ = _call(node, "POST", f"/api/v1/tasks/{t['id']}", None, X_HTTP_Method_Override="DELETE")
    assert status == 405 and err["error"]["code"] == "method_not_allowed"
    assert _call(node, "GET", f"/api/v1/tasks/{t['id']}")[1]["scene"] == "via-post"  # not deleted
