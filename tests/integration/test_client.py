"""The Python SDK against the real REST server (waitress + LocalContext over lmdb/SQLite)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from molens.client import (
    ApiError,
    BadRequestError,
    BatchingClient,
    BatchPartlyCreatedError,
    BatchRejectedError,
    ConflictError,
    ConnectionFailedError,
    MolensClient,
    OutcomeUnknownError,
    TaskNotFoundError,
    UnauthorizedError,
    UnavailableError,
)
from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import FireKind, Outcome
from molens.web.api_context import ApiSettings
from tests.integration.api_server import Served, delayed, serve
from tests.integration.conftest import free_ports

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("client")) as s:
        yield s


@pytest.fixture
def client(api: Served) -> Iterator[MolensClient]:
    with MolensClient([api.url], backoff_base_s=0.01, backoff_max_s=0.05) as c:
        yield c


def dead_url() -> str:
    return f"http://127.0.0.1:{free_ports(1)[0]}"


def test_task_lifecycle_through_the_sdk(api: Served, client: MolensClient) -> None:
    t = client.create(delayed(scene="sdk"), payload={"k": 1})
    assert t["status"] == "pending" and t["payload"] == {"k": 1}
    assert t["idempotency_key"]  # added automatically
    assert client.get(t["id"]) == t
    assert client.pause(t["id"])["status"] == "paused"
    with pytest.raises(ConflictError) as ei:
        client.pause(t["id"])
    assert ei.value.field == "status" and ei.value.status == 409
    assert client.resume(t["id"])["status"] == "pending"
    assert client.trigger(t["id"])["next_run_at"] <= int(time.time() * 1000)
    assert client.delete(t["id"])["id"] == t["id"]
    with pytest.raises(TaskNotFoundError):
        client.get(t["id"])


def test_list_iterates_over_every_page(client: MolensClient) -> None:
    made = client.create_many([delayed(scene="sdk-list") for _ in range(23)])
    got = [t["id"] for t in client.list(scene="sdk-list", page_size=5)]
    assert got == sorted(t["id"] for t in made)
    assert [t["id"] for t in client.list(scene="sdk-list", status=["pending"], page_size=50)] == got
    assert list(client.list(scene="sdk-list", type="periodic")) == []


def test_executions_and_cluster_calls(api: Served, client: MolensClient) -> None:
    t = client.create(delayed(interval_ms=0))
    now = int(time.time() * 1000)
    fid = f"{t['id']}-1"
    api.ctx.propose([Dispatched(now, (DispatchItem(
        fire_id=fid, task_id=t["id"], attempt=1, worker="n1", deadline_ms=now + 5000,
    ),))], 5)
    api.ctx.propose([Results(now, (ResultItem(
        fire_id=fid, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE, response_head="ok",
        latency_ms=3, worker="n1",
    ),))], 5)
    [e] = list(client.executions(t["id"]))
    assert (e["fire_id"], e["result"]) == (fid, "success")
    assert any(x["task_id"] == t["id"] for x in client.executions(result="success"))
    assert client.cluster_status()["role"] == "leader"
    assert client.leader()["leader_id"] == "n1"
    assert client.stats()["tasks_total"] >= 1


def test_validation_errors_are_typed_and_name_the_field(client: MolensClient) -> None:
    with pytest.raises(BadRequestError) as ei:
        client.create(delayed(callback_url="ftp://x/"))
    assert (ei.value.status, ei.value.code, ei.value.field) == (400, "invalid_argument", "callback_url")
    with pytest.raises(BadRequestError) as ei:
        client.create(delayed(payload="x" * 70_000))
    assert (ei.value.status, ei.value.field) == (413, "payload")


def test_retry_after_a_lost_response_never_creates_a_duplicate(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    api.ctx.inject_fault("unknown_after_apply")  # applied, but the answer says "outcome unknown"
    t = client.create(delayed())
    assert api.task_count() == before + 1
    assert client.get(t["id"])["idempotency_key"] == t["idempotency_key"]


def test_batch_retry_after_a_lost_response_never_duplicates(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    api.ctx.inject_fault("unknown_after_apply")
    made = client.create_many([delayed() for _ in range(10)])
    assert len({t["id"] for t in made}) == 10
    assert api.task_count() == before + 10


def test_no_leader_is_retried_with_backoff(api: Served, client: MolensClient) -> None:
    for _ in range(3):
        api.ctx.inject_fault("no_leader")
    before = api.task_count()
    client.create(delayed())
    assert api.task_count() == before + 1


def test_unknown_outcome_of_a_pause_is_reported_not_disguised_as_a_conflict(api: Served, client: MolensClient) -> None:
    t = client.create(delayed())
    api.ctx.inject_fault("unknown_after_apply")
    with pytest.raises(OutcomeUnknownError):
        client.pause(t["id"])
    assert client.get(t["id"])["status"] == "paused"


def test_a_trigger_or_a_transfer_with_an_unknown_outcome_is_never_sent_twice(api: Served, client: MolensClient) -> None:
    """A second trigger would fire the task again (a second backfill of a range, again): the first
    ``outcome_unknown`` is the answer, not a reason to resend."""
    t = client.create(delayed())
    api.ctx.inject_fault("unknown_after_apply")
    before = api.ctx.proposals
    with pytest.raises(OutcomeUnknownError):
        client.trigger(t["id"])
    assert api.ctx.proposals == before + 1


def test_a_create_sent_every_time_without_an_answer_says_the_outcome_is_unknown_and_gives_its_key(
    api: Served,
) -> None:
    """Answers lost on every attempt: the task may exist, so not ConnectionFailedError ("nothing
    left"); the error carries the key the client made up, and creating again with it finds the task."""
    import socket
    import threading

    front = socket.create_server(("127.0.0.1", 0))
    port = front.getsockname()[1]
    host, api_port = api.url.split("//", 1)[1].split(":")

    def swallow() -> None:  # forward each request to the node, then drop the answer
        while True:
            try:
                conn, _ = front.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(body) < length:
                    body += conn.recv(65536)
                with socket.create_connection((host, int(api_port))) as up:
                    up.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
                    while up.recv(65536):
                        pass

    threading.Thread(target=swallow, daemon=True).start()
    before = api.task_count()
    try:
        with (MolensClient(f"http://127.0.0.1:{port}", max_attempts=3, backoff_base_s=0.01, timeout=5) as lossy,
              pytest.raises(OutcomeUnknownError) as exc):
            lossy.create(delayed())
    finally:
        front.close()
    assert api.task_count() == before + 1  # three attempts, one task
    (key,) = exc.value.idempotency_keys
    with MolensClient(api.url) as c:
        again = c.create(delayed(), idempotency_key=key)
    assert again["idempotency_key"] == key and api.task_count() == before + 1


def test_no_leader_from_one_node_and_a_dead_other_node_is_unavailable_not_unreachable(api: Served) -> None:
    """Which error a caller gets must not depend on which node the last attempt went to: a node that
    answered "no leader" means the cluster is there but not serving (UnavailableError)."""
    for _ in range(2):
        api.ctx.inject_fault("no_leader")
    before = api.task_count()
    with MolensClient([api.url, dead_url()], max_attempts=4, backoff_base_s=0.01, backoff_max_s=0.02) as c, \
            pytest.raises(UnavailableError) as exc:
        c.create(delayed())  # node, dead, node, dead: the last attempt fails to connect
    assert exc.value.code == "no_leader" and api.task_count() == before


def test_follower_redirect_is_followed_with_the_body(tmp_path: Path) -> None:
    with (
        serve(tmp_path / "l") as leader,
        serve(tmp_path / "f", role="follower", leader_url=leader.url) as f,
        MolensClient([f.url]) as c,
    ):
        t = c.create(delayed(payload={"via": "follower"}))
        assert leader.task_count() == 1 and f.task_count() == 0
        assert leader.ctx.get_task(t["id"]) is not None
        assert c.pause(t["id"])["status"] == "paused"  # now sent straight to the leader
        assert c.get(t["id"])["status"] == "paused"  # reads follow the writes' node
        made = c.create_many([delayed() for _ in range(5)])
        assert leader.task_count() == 6 and len(made) == 5


def test_a_dead_node_is_skipped(api: Served) -> None:
    with MolensClient([dead_url(), api.url], backoff_base_s=0.01) as c:
        assert c.create(delayed())["status"] == "pending"


def test_unreachable_cluster_fails_after_bounded_attempts() -> None:
    with (
        MolensClient([dead_url(), dead_url()], max_attempts=4, backoff_base_s=0.01, backoff_max_s=0.02) as c,
        pytest.raises(ConnectionFailedError),
    ):
        c.create(delayed())


def test_token_is_sent(tmp_path: Path) -> None:
    with serve(tmp_path, ApiSettings(auth_token="tok")) as s:
        with MolensClient([s.url], token="tok") as c:
            c.create(delayed())
        with MolensClient([s.url], token="nope") as c, pytest.raises(UnauthorizedError):
            c.create(delayed())


def test_create_many_splits_into_batches_and_reports_bad_items(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    entries = api.ctx.store.applied_index()
    made = client.create_many([delayed(payload=i) for i in range(2_100)])
    assert [t["payload"] for t in made] == list(range(2_100))
    assert api.task_count() == before + 2_100
    assert api.ctx.store.applied_index() == entries + 3
    with pytest.raises(BatchRejectedError) as ei:
        client.create_many([delayed(), delayed(timeout_ms=0), delayed()])
    assert list(ei.value.item_errors) == [1]
    assert ei.value.item_errors[1].field == "timeout_ms"
    assert api.task_count() == before + 2_100


def test_create_many_ids_answers_ids_alone_and_a_retry_returns_the_same_ones(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    keyed = [delayed(payload=i, idempotency_key=f"ids-{i}") for i in range(1_200)]
    ids = client.create_many_ids(keyed)
    assert len(ids) == 1_200 and len(set(ids)) == 1_200
    assert api.task_count() == before + 1_200
    assert [client.get(i)["payload"] for i in (ids[0], ids[999], ids[1_199])] == [0, 999, 1_199]
    assert client.create_many_ids(keyed) == ids  # matched by key: nothing new, same ids in order
    assert api.task_count() == before + 1_200
    with pytest.raises(BatchRejectedError) as ei:
        client.create_many_ids([delayed(), delayed(timeout_ms=0)])
    assert list(ei.value.item_errors) == [1]


def test_batching_client_resolves_each_future_and_flushes_on_close(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    with BatchingClient(client, max_batch=200, flush_interval_s=0.5) as b:
        futs = [b.submit(delayed(payload=i)) for i in range(450)]
        bad = [b.submit(delayed(scene="no spaces")), b.submit(delayed(callback_url="gopher://x/"))]
        more = [b.submit(delayed(payload=i)) for i in range(450, 455)]
    assert [f.result(0)["payload"] for f in futs + more] == list(range(455))
    errs = [f.exception(0) for f in bad]
    assert [type(e) for e in errs] == [BadRequestError, BadRequestError]
    assert [e.field for e in errs if isinstance(e, BadRequestError)] == ["scene", "callback_url"]
    assert api.task_count() == before + 455


def test_batching_client_with_ids_only_resolves_each_future_with_the_id(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    with BatchingClient(client, max_batch=100, flush_interval_s=0.5, ids_only=True) as b:
        futs = [b.submit(delayed(payload=i)) for i in range(250)]
        bad = b.submit(delayed(scene="no spaces"))
    got = [f.result(0) for f in futs]
    assert all(set(t) == {"id"} for t in got) and len({t["id"] for t in got}) == 250
    assert [client.get(got[i]["id"])["payload"] for i in (0, 249)] == [0, 249]
    assert isinstance(bad.exception(0), BadRequestError)
    assert api.task_count() == before + 250


def test_batching_client_flushes_by_interval(api: Served, client: MolensClient) -> None:
    with BatchingClient(client, max_batch=1000, flush_interval_s=0.05) as b:
        futs = [b.submit(delayed()) for _ in range(3)]
        # no close, no flush: the interval sends them
        assert all(f.result(timeout=10)["status"] == "pending" for f in futs)
        b.flush(timeout=10)


def test_a_redirect_loop_is_an_error_not_a_hang(tmp_path: Path) -> None:
    with (
        serve(tmp_path / "a", role="follower", leader_url="http://127.0.0.1:1") as a,
        serve(tmp_path / "b", role="follower", leader_url=a.url) as b,
    ):
        a.ctx.leader_url = b.url  # a says b leads, b says a leads
        with (
            MolensClient([a.url], backoff_base_s=0.01, backoff_max_s=0.05, max_attempts=3) as c,
            pytest.raises(UnavailableError) as ei,
        ):
            c.create(delayed())
        assert ei.value.code == "redirect"
        assert a.task_count() == b.task_count() == 0


def test_a_redirect_loop_while_an_election_settles_is_retried_until_a_leader_answers(tmp_path: Path) -> None:
    import threading

    with (
        serve(tmp_path / "leader") as leader,
        serve(tmp_path / "a", role="follower", leader_url="http://127.0.0.1:1") as a,
        serve(tmp_path / "b", role="follower", leader_url=a.url) as b,
        MolensClient([a.url], backoff_base_s=0.05, backoff_max_s=0.2, max_attempts=30) as c,
    ):
        a.ctx.leader_url = b.url  # a and b name each other until the "election" ends
        settled = threading.Timer(0.3, lambda: setattr(b.ctx, "leader_url", leader.url))
        settled.start()
        try:
            t = c.create(delayed())
        finally:
            settled.cancel()
        assert leader.ctx.get_task(t["id"]) is not None
        assert a.task_count() == b.task_count() == 0


def test_batching_client_with_several_senders(api: Served, client: MolensClient) -> None:
    before = api.task_count()
    with BatchingClient(client, max_batch=50, flush_interval_s=0.01, senders=3) as b:
        futs = [b.submit(delayed(payload=i)) for i in range(400)]
        b.flush(timeout=30)
        assert all(f.done() for f in futs)
    assert sorted(f.result()["payload"] for f in futs) == list(range(400))
    assert api.task_count() == before + 400


def test_writes_survive_a_dead_leader_until_the_new_one_is_known(tmp_path: Path) -> None:
    import threading

    with (
        serve(tmp_path / "new") as new_leader,
        serve(tmp_path / "f", role="follower", leader_url=dead_url()) as f,
        MolensClient([f.url], backoff_base_s=0.05, backoff_max_s=0.2, max_attempts=30) as c,
    ):
        # the follower keeps naming the dead leader until the "election" ends
        election = threading.Timer(0.3, lambda: setattr(f.ctx, "leader_url", new_leader.url))
        election.start()
        try:
            t = c.create(delayed())
        finally:
            election.cancel()
        assert new_leader.ctx.get_task(t["id"]) is not None


def test_a_create_whose_answer_was_lost_after_it_filled_a_quota_returns_its_task_on_the_retry(
    api: Served, client: MolensClient,
) -> None:
    """The first attempt fills the namespace's quota and its answer is lost; the retry, with the same
    key, finds the task before the quota is counted, so the SDK returns it (a node of the release
    before answered 429, which the SDK turns into OutcomeUnknownError: test_client_retries.py)."""
    client.create_namespace("full1", quotas={"max_pending_tasks": 1})
    api.ctx.inject_fault("unknown_after_apply")
    task = client.create(delayed(), namespace="full1")
    assert [t["id"] for t in client.list(namespace="full1")] == [task["id"]]


def test_delete_dead_letters_on_a_namespaced_client_needs_all_for_an_empty_filter(api: Served) -> None:
    with MolensClient([api.url], namespace="default") as c:
        with pytest.raises(BadRequestError) as ei:
            c.delete_dead_letters()
        assert ei.value.field == "all"
        assert c.delete_dead_letters(all=True)["error_count"] == 0


def test_an_answer_that_is_no_nodes_is_an_error_not_data(tmp_path: Path) -> None:
    """A 2xx that is not JSON, or a redirect other than a follower's 307, comes from something else
    than a node (a proxy's page, a server at the wrong port): an error, not an empty task."""
    import http.server
    import threading

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v1/tasks/"):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<html>\n<body>hello</body>\n</html>")
            else:
                self.send_response(301)
                self.send_header("Location", "https://example.invalid/")
                self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with MolensClient([f"http://127.0.0.1:{srv.server_address[1]}"], max_attempts=2) as c:
            with pytest.raises(ApiError) as e1:
                c.get("01ARZ3NDEKTSV4RRFFQ69G5FAV")
            assert e1.value.status == 502
            with pytest.raises(ApiError) as e2:
                c.stats()
            assert e2.value.status == 301 and "redirect" in str(e2.value)
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_429_to_the_retry_of_a_create_whose_answer_was_lost_is_an_unknown_outcome_with_its_key() -> None:
    """A node of the release before counts a quota before the idempotency key: the retry of a create
    that filled it is refused 429 though the task exists. The SDK says the outcome is unknown and
    gives the key, instead of QuotaExceededError's "nothing was created"."""
    import http.server
    import threading

    seen: list[str | None] = []

    class Before(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["idempotency_key"])
            if len(seen) == 1:  # applied, and the answer lost with the connection
                self.close_connection = True
                self.connection.shutdown(2)
                return
            body = json.dumps({"error": {"code": "quota_exceeded", "quota": "max_pending_tasks",
                                         "field": "max_pending_tasks", "message": "full"}}).encode()
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Before)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with (MolensClient([f"http://127.0.0.1:{srv.server_address[1]}"], max_attempts=3) as c,
              pytest.raises(OutcomeUnknownError) as ei):
            c.create(delayed(), namespace="full")
        assert seen[0] is not None and set(seen) == {seen[0]}, seen
        assert list(ei.value.idempotency_keys) == [seen[0]]
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_batch_applied_without_some_of_its_items_raises_with_every_task_created_so_far() -> None:
    """A namespace deleted while a batch was in flight: the node answers 201 with those items null
    and listed in ``errors`` (404), the others created. create_many says which were made, by index
    among all the tasks given, instead of one item's error that hides them."""
    import http.server
    import threading

    class Node(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["tasks"]
            items: list[dict[str, object] | None] = [{"id": t["idempotency_key"], **t} for t in sent]
            errors = []
            if len(sent) < 1000:  # the second batch: its first item's namespace went meanwhile
                items[0] = None
                errors = [{"index": 0, "error": {"code": "not_found", "message": "namespace gone not found",
                                                 "field": "namespace"}}]
            body = json.dumps({"items": items, "errors": errors}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Node)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        tasks = [delayed(payload=i) for i in range(1002)]
        with (MolensClient([f"http://127.0.0.1:{srv.server_address[1]}"]) as c,
              pytest.raises(BatchPartlyCreatedError) as ei):
            c.create_many(tasks)
        made = ei.value.tasks
        assert len(made) == 1002 and made[1000] is None
        assert [t["payload"] for t in made if t is not None] == [*range(1000), 1001]
        (err,) = ei.value.item_errors.items()
        assert err[0] == 1000 and isinstance(err[1], TaskNotFoundError) and err[1].field == "namespace"
        assert "1001 of 1002 tasks created" in str(ei.value)
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_limited_dead_letter_delete_is_not_sent_twice_after_a_lost_answer(api: Served, client: MolensClient) -> None:
    """Sent again, a delete of at most ``limit`` would delete up to ``limit`` more: after a lost
    answer it is an unknown outcome instead. Without a limit it is retried (it deletes what matches)."""
    now = int(time.time() * 1000)
    made = [client.create(delayed(interval_ms=0, scene="lost-delete", retry={"max_retries": 0})) for _ in range(3)]
    for t in made:
        fid = f"{t['id']}-1"
        api.ctx.propose([Dispatched(now, (DispatchItem(
            fire_id=fid, task_id=t["id"], attempt=1, worker="n1", deadline_ms=now + 5000,
        ),))], 5)
        api.ctx.propose([Results(now, (ResultItem(
            fire_id=fid, kind=FireKind.CALLBACK, status_code=500, outcome=Outcome.RESPONSE, response_head="no",
            latency_ms=3, worker="n1",
        ),))], 5)
    mine = {t["id"] for t in made}

    def left() -> int:
        return sum(d["task_id"] in mine for d in client.dead_letters())

    assert left() == 3
    api.ctx.inject_fault("unknown_after_apply")
    with pytest.raises(OutcomeUnknownError):
        client.delete_dead_letters(kind="retries_exhausted", limit=1)
    assert left() == 2  # applied once, not sent again
    api.ctx.inject_fault("unknown_after_apply")
    assert client.delete_dead_letters(kind="retries_exhausted")["more"] is False
    assert left() == 0
