"""The Python SDK against a real ``molens-node`` (docs/api.md#python-sdk): ``resume`` with
``resume_from``, one dead letter by id, dead letters deleted by filter (and the API's refusal of an
empty one), and the cluster, stats and health calls. Dead letters come from a real receiver's 404s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from molens.client import (
    MAX_BULK,
    BadRequestError,
    ConflictError,
    DeadLetterKind,
    ForbiddenError,
    MolensClient,
    QuotaExceededError,
    ResumeFrom,
    Role,
    TaskNotFoundError,
    UnauthorizedError,
)

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import one_task_node, wait_serving

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    c = Cluster(tmp_path_factory.mktemp("client-node"), 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n, 30)
        yield n
    finally:
        c.kill_all()


@pytest.fixture
def client(node: NodeProc) -> Iterator[MolensClient]:
    with MolensClient([node.http_url], backoff_base_s=0.01, backoff_max_s=0.05) as c:
        yield c


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_resume_from_schedule_takes_up_the_missed_instant_and_from_now_drops_it(
    client: MolensClient, receiver: RecordingReceiver
) -> None:
    tasks = {mode: client.create(type="periodic", interval_ms=2_000, callback_url=receiver.url(f"/ok/resume-{mode}"))
             for mode in ("schedule", "now")}
    for t in tasks.values():
        assert client.pause(t["id"])["status"] == "paused"
    missed = {mode: t["next_run_at"] for mode, t in tasks.items()}
    wait_for(lambda: _now_ms() > max(missed.values()) + 200, 10, "the paused tasks' next instants to pass",
             interval=0.05)
    assert receiver.requests == []  # paused before their first instant

    resumed_at = _now_ms()
    r = client.resume(tasks["schedule"]["id"], resume_from="schedule")
    assert r["status"] == "pending" and r["next_run_at"] == missed["schedule"] < resumed_at
    fired = wait_for(lambda: receiver.by_tag("resume-schedule") or None, 30, "the missed instant fired")
    assert fired[0].headers["X-Molens-Scheduled-At"] == str(missed["schedule"])

    r = client.resume(tasks["now"]["id"], resume_from=ResumeFrom.NOW)
    assert r["status"] == "pending" and r["next_run_at"] > missed["now"] and r["next_run_at"] >= resumed_at

    with pytest.raises(ConflictError):  # a pending task cannot be resumed
        client.resume(tasks["now"]["id"], resume_from=ResumeFrom.SCHEDULE)
    with pytest.raises(ValueError, match="resume_from"):
        client.resume(tasks["now"]["id"], resume_from="yesterday")
    with pytest.raises(TaskNotFoundError):
        client.resume("01M8MABE0SEAD6S92SY1NA2EWB", resume_from="schedule")


def test_one_dead_letter_by_id_and_deleting_by_filter(client: MolensClient, receiver: RecordingReceiver) -> None:
    flow = f"127.0.0.1:{receiver.port}"  # the receiver's own flow: no other test's dead letters match it
    made = [client.create(type="delayed", interval_ms=100, callback_url=receiver.url(f"/status/404/dl{i}"))
            for i in range(4)]

    def all_dead() -> list[dict[str, Any]] | None:
        got = list(client.dead_letters(flow=flow, page_size=2))  # two pages and more: cursors followed
        return got if len(got) == 4 else None

    dead = wait_for(all_dead, 30, "a dead letter of each task (404: not retried)")
    by_task = {d["task_id"]: d for d in dead}
    assert set(by_task) == {t["id"] for t in made}

    one = by_task[made[0]["id"]]
    assert client.dead_letter(one["id"]) == one
    assert one["kind"] == DeadLetterKind.NON_RETRYABLE and one["status_code"] == 404 and one["attempts"] == 1
    with pytest.raises(TaskNotFoundError) as ei:
        client.dead_letter(f"{made[0]['id']}-9.1")
    assert ei.value.status == 404 and ei.value.field == "id"

    with pytest.raises(BadRequestError) as bad:  # an empty filter without all=True deletes nothing
        client.delete_dead_letters()
    assert bad.value.status == 400 and bad.value.field == "all"
    assert len(list(client.dead_letters(flow=flow))) == 4

    out = client.delete_dead_letters(task_id=made[0]["id"])
    assert (out["matched"], out["deleted"], out["error_count"], out["more"]) == (1, 1, 0, False)
    with pytest.raises(TaskNotFoundError):
        client.dead_letter(one["id"])
    out = client.delete_dead_letters(flow=flow, kind="non_retryable", limit=2)
    assert (out["matched"], out["deleted"], out["more"]) == (2, 2, True)
    out = client.delete_dead_letters(flow=flow, since=min(d["at"] for d in dead), until=_now_ms(), limit=MAX_BULK)
    assert (out["matched"], out["deleted"], out["more"]) == (1, 1, False)
    assert list(client.dead_letters(flow=flow)) == []

    again = client.create(type="delayed", interval_ms=100, callback_url=receiver.url("/status/404/dl-all"))
    wait_for(lambda: list(client.dead_letters(task_id=again["id"])), 30, "one more dead letter")
    out = client.delete_dead_letters(all=True)
    assert out["deleted"] >= 1 and out["more"] is False
    assert list(client.dead_letters()) == []


def test_redrive_matching_takes_the_same_filter(client: MolensClient, receiver: RecordingReceiver) -> None:
    t = client.create(type="delayed", interval_ms=100, callback_url=receiver.url("/status/404/rd"))
    [d] = wait_for(lambda: list(client.dead_letters(task_id=t["id"])), 30, "the dead letter")
    client.update(t["id"], callback_url=receiver.url("/ok/rd-fixed"))
    out = client.redrive_matching(task_id=t["id"], kind=DeadLetterKind.NON_RETRYABLE, limit=1)
    assert (out["matched"], out["redriven"], out["error_count"], out["more"]) == (1, 1, 0, False)
    r = wait_for(lambda: receiver.by_tag("rd-fixed") or None, 30, "the redriven occurrence")[0]
    assert r.headers["X-Fire-ID"] == d["fire_id"]


def test_cluster_stats_and_health_calls(client: MolensClient, node: NodeProc) -> None:
    assert client.healthz() == {"ok": True, "node_id": node.node_id}
    ready = client.readyz()
    assert ready["ready"] is True and ready["role"] == "leader" and ready["leader_id"] == node.node_id
    [member] = client.cluster_stats()["nodes"]
    assert member["node_id"] == node.node_id
    assert client.stats(local=True)["node_id"] == node.node_id
    assert client.stats(node_id=node.node_id)["node_id"] == node.node_id
    now = _now_ms()
    urls = client.url_stats(since=now - 3_600_000, until=now, bucket_ms=600_000, limit=5)
    assert (urls["since"], urls["until"], urls["bucket_ms"]) == (now - 3_600_000, now, 600_000)
    assert isinstance(urls["items"], list)


def test_schedule_preview_wheel_distribution_and_metrics(client: MolensClient) -> None:
    after = 1_800_000_000_000
    p = client.schedule_preview(interval_ms=60_000, count=3, after=after)
    assert p["items"] == [after + 60_000, after + 120_000, after + 180_000] and p["timezone"] == "UTC"
    d = client.schedule_preview(type="delayed", run_at=after)
    assert d["items"] == [after]
    with pytest.raises(BadRequestError) as bad:
        client.schedule_preview(cron_expr="not a cron")
    assert bad.value.field == "cron_expr"
    wheel = client.wheel_distribution()
    assert wheel["tick_ms"] > 0 and wheel["levels"]
    assert client.wheel_distribution_png(level=0, width=400).startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(BadRequestError) as bad:
        client.wheel_distribution_png(level=len(wheel["levels"]))
    assert bad.value.field == "level"
    assert "# TYPE molens_" in client.metrics()


@pytest.mark.parametrize("codec", ["msgspec", "json"])
def test_both_json_codecs_create_read_and_map_errors_alike(
    codec: str, node: NodeProc, receiver: RecordingReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK decodes answers with msgspec when it can, with the json module otherwise: the same
    tasks, answers and typed errors either way (non-ASCII text included)."""
    import molens.client as client_mod
    from molens.client import BatchRejectedError

    if codec == "json":
        monkeypatch.setattr(client_mod, "_msgspec", None)
    with MolensClient([node.http_url], backoff_base_s=0.01, backoff_max_s=0.05) as c:
        bodies = [{"type": "delayed", "interval_ms": 60_000, "scene": f"codec-{codec}",
                   "callback_url": receiver.url(f"/ok/codec-{codec}-日本-{i}"),
                   "idempotency_key": f"codec-{codec}-{i}"} for i in range(3)]
        made = c.create_many(bodies)
        assert [t["callback_url"] for t in made] == [b["callback_url"] for b in bodies]
        assert all(t["scene"] == f"codec-{codec}" for t in made)
        assert c.get(made[1]["id"]) == made[1]
        assert c.create_many_ids(bodies[:1]) == [made[0]["id"]]  # its key names the task made above
    with MolensClient([node.http_url], backoff_base_s=0.01, backoff_max_s=0.05) as c:
        with pytest.raises(BatchRejectedError) as rejected:
            c.create_many([{**bodies[0], "idempotency_key": None}, {**bodies[0], "interval_ms": -5}])
        assert set(rejected.value.item_errors) == {1}
        with pytest.raises(TaskNotFoundError):
            c.get("01M8MABE0SEAD6S92SY1NA2EWB")


ADMIN_TOKEN = "client-admin-s3cret"


@pytest.fixture(scope="module")
def keyed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    with one_task_node(tmp_path_factory.mktemp("client-keys"), {"http": {"auth_token": ADMIN_TOKEN}}) as n:
        yield n


def _task(**fields: Any) -> dict[str, Any]:
    return {"type": "delayed", "interval_ms": 3_600_000, "callback_url": "http://127.0.0.1:9/hook", **fields}


def test_an_admin_makes_a_namespace_and_a_writer_key_whose_client_creates_and_lists_in_it(
    keyed_node: NodeProc,
) -> None:
    with MolensClient([keyed_node.http_url], ADMIN_TOKEN) as admin:
        ns = admin.create_namespace("payments", quotas={"max_pending_tasks": 100})
        assert ns["name"] == "payments" and ns["quotas"]["max_pending_tasks"] == 100
        assert [n["name"] for n in admin.namespaces()][:1] == ["default"]
        assert "payments" in [n["name"] for n in admin.namespaces()]
        assert admin.update_namespace("payments", quotas={"max_pending_tasks": 50})["quotas"]["max_pending_tasks"] == 50
        key = admin.create_api_key("billing-ci", role=Role.WRITER, namespaces=["payments"])
        assert key["secret"] and key["role"] == "writer" and key["namespaces"] == ["payments"]
        shown = admin.get_api_key(key["id"])
        assert "secret" not in shown and shown["name"] == "billing-ci"
        assert all("secret" not in k for k in admin.api_keys())
        assert key["id"] in [k["id"] for k in admin.api_keys()]
        in_default = admin.create(_task())

    with MolensClient([keyed_node.http_url], key["secret"], namespace="payments") as writer:
        one = writer.create(_task())
        two, three = writer.create_many([_task(), _task()])
        assert {one["namespace"], two["namespace"], three["namespace"]} == {"payments"}
        listed = {t["id"] for t in writer.list()}
        assert listed == {one["id"], two["id"], three["id"]}
        with pytest.raises(ForbiddenError):  # a namespace outside the key's
            writer.create(_task(), namespace="default")
        with pytest.raises(ForbiddenError):
            list(writer.list(namespace="default"))
        with pytest.raises(TaskNotFoundError):  # another namespace's task is as good as missing
            writer.get(in_default["id"])
        with pytest.raises(ForbiddenError):  # admin routes need an admin key
            writer.api_keys()

    with MolensClient([keyed_node.http_url], ADMIN_TOKEN) as admin:
        assert {t["id"] for t in admin.list(namespace="payments")} == {one["id"], two["id"], three["id"]}
        assert in_default["id"] in {t["id"] for t in admin.list(namespace="default")}
        with pytest.raises(ConflictError):  # it still holds tasks
            admin.delete_namespace("payments")
        admin.delete_api_key(key["id"])
        with pytest.raises(TaskNotFoundError):
            admin.get_api_key(key["id"])
    with MolensClient([keyed_node.http_url], key["secret"]) as revoked, pytest.raises(UnauthorizedError):
        revoked.get(one["id"])


def test_a_reader_keys_write_is_refused_with_forbidden_and_a_quota_with_quota_exceeded(keyed_node: NodeProc) -> None:
    with MolensClient([keyed_node.http_url], ADMIN_TOKEN) as admin:
        admin.create_namespace("tight", quotas={"max_pending_tasks": 1})
        reader = admin.create_api_key("dashboards", role="reader", namespaces=["tight"])
        with MolensClient([keyed_node.http_url], reader["secret"], namespace="tight") as r:
            with pytest.raises(ForbiddenError) as refused:
                r.create(_task())
            assert refused.value.status == 403 and refused.value.code == "forbidden"
            assert list(r.list()) == []
        first = admin.create(_task(namespace="tight"))
        assert first["namespace"] == "tight"
        with pytest.raises(QuotaExceededError) as over:
            admin.create_many([_task()], namespace="tight")
        assert over.value.status == 429 and over.value.quota == "max_pending_tasks"
        assert over.value.retry_after_s is not None and over.value.retry_after_s >= 1
        assert [t["id"] for t in admin.list(namespace="tight")] == [first["id"]]
