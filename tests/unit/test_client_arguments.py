"""MolensClient refuses bad arguments with a ValueError naming them before any request, and its
closed sets of strings are the server's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from molens import client as client_mod
from molens import schema
from molens.client import MAX_BULK, BatchingClient, DeadLetterKind, MolensClient, SeriesRange
from molens.web.fire_series import Span

TID = "01M8MABE0SEAD6S92SY1NA2EWB"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> MolensClient:
    def no_request(*args: Any, **kw: Any) -> Any:
        raise AssertionError(f"a request was sent: {args}")

    c = MolensClient("http://127.0.0.1:1")
    monkeypatch.setattr(c, "_request", no_request)
    return c


BAD: list[tuple[str, Callable[[MolensClient], Any]]] = [
    ("range", lambda c: c.stats_series("week")),
    ("resume_from", lambda c: c.resume(TID, resume_from="yesterday")),
    ("task_id", lambda c: c.resume("", resume_from="now")),
    ("task_id", lambda c: c.get("")),
    ("dead_id", lambda c: c.dead_letter("")),
    ("dead_id", lambda c: c.redrive("")),
    ("dead_id", lambda c: c.delete_dead_letter("")),
    ("kind", lambda c: c.dead_letters(kind="bogus")),
    ("page_size", lambda c: c.dead_letters(page_size=0)),
    ("page_size", lambda c: c.dead_letters(page_size=1_001)),
    ("page_size", lambda c: c.list(page_size=True)),
    ("page_size", lambda c: c.executions(TID, page_size=5_000)),
    ("until", lambda c: c.dead_letters(since=5, until=4)),
    ("since", lambda c: c.redrive_matching(since=-1)),
    ("since", lambda c: c.redrive_matching(since="yesterday")),  # type: ignore[arg-type]
    ("limit", lambda c: c.redrive_matching(task_id=TID, limit=0)),
    ("limit", lambda c: c.delete_dead_letters(task_id=TID, limit=MAX_BULK + 1)),
    ("flow", lambda c: c.delete_dead_letters(flow="x" * 301)),
    ("flow", lambda c: c.delete_dead_letters(flow="")),
    ("kind", lambda c: c.delete_dead_letters(kind="lost")),
    ("all", lambda c: c.delete_dead_letters(all="yes")),  # type: ignore[arg-type]
    ("end", lambda c: c.backfill(TID, start=2, end=1)),
    ("start", lambda c: c.backfill(TID, start=-1, end=1)),
    ("local", lambda c: c.stats(node_id="n1", local=True)),
    ("bucket_ms", lambda c: c.url_stats(bucket_ms=1)),
    ("until", lambda c: c.url_stats(since=10, until=10)),
    ("if_version", lambda c: c.update(TID, scene="x", if_version=-1)),
    ("key", lambda c: c.flow("")),
    ("type", lambda c: c.schedule_preview(type="weekly", interval_ms=60_000)),
    ("count", lambda c: c.schedule_preview(interval_ms=60_000, count=101)),
    ("after", lambda c: c.schedule_preview(interval_ms=60_000, after=-5)),
    ("cron_expr", lambda c: c.schedule_preview(cron_expr="")),
    ("level", lambda c: c.wheel_distribution_png(level=64)),
    ("width", lambda c: c.wheel_distribution_png(width=100)),
    ("task_id", lambda c: c.executions("")),  # it listed every task's executions
    ("since", lambda c: c.executions(TID, since=-5)),
    ("since", lambda c: c.executions(since="abc")),  # type: ignore[arg-type]
    ("since", lambda c: c.executions(since=10**16)),
    ("until", lambda c: c.executions(since=2000, until=1000)),
    ("result", lambda c: c.executions(result="")),
    ("order", lambda c: c.list(order="newest")),
    ("consistency", lambda c: c.get(TID, consistency="strong")),
    ("to", lambda c: c.transfer_leader("")),
    ("namespace", lambda c: c.list(namespace="../keys")),
    ("namespace", lambda c: c.create_many([], namespace="Payments")),
    ("namespace", lambda c: c.dead_letters(namespace="")),
    ("name", lambda c: c.get_namespace("a/b")),
    ("name", lambda c: c.create_namespace("-leading-dash")),
    ("role", lambda c: c.create_api_key("ci", role="owner", namespaces=["payments"])),
    ("namespaces", lambda c: c.create_api_key("ci", role="writer", namespaces="payments")),
    ("namespaces", lambda c: c.create_api_key("ci", role="writer", namespaces=[])),
    ("key_id", lambda c: c.delete_api_key("")),
]


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("node URL", lambda: MolensClient("127.0.0.1:18081")),  # no scheme: it retried for 30 s
        ("node URL", lambda: MolensClient("ftp://127.0.0.1:18081")),
        ("node URL", lambda: MolensClient("http://127.0.0.1:99999")),
        ("node URL", lambda: MolensClient(["http://127.0.0.1:1", "http://"])),
        ("node URL", lambda: MolensClient("https://gw.example/molens")),  # every route would answer 404
        ("node URL", lambda: MolensClient("http://127.0.0.1:1/?x=1")),
        ("node URL", lambda: MolensClient("http://user:secret@127.0.0.1:1")),
        ("timeout", lambda: MolensClient("http://127.0.0.1:1", timeout=-1)),
        ("retry_deadline_s", lambda: MolensClient("http://127.0.0.1:1", retry_deadline_s=0)),
        ("max_attempts", lambda: MolensClient("http://127.0.0.1:1", max_attempts=0)),
        ("namespace", lambda: MolensClient("http://127.0.0.1:1", namespace="Not Valid")),
        ("max_pending", lambda: BatchingClient(MolensClient("http://127.0.0.1:1"), max_pending=0)),  # submit hung
    ],
)
def test_bad_client_settings_are_a_value_error_at_construction(name: str, make: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match=name) as ei:
        make()
    assert "secret" not in str(ei.value)  # a URL's password is never echoed


@pytest.mark.parametrize(("name", "call"), BAD, ids=[f"{i}-{n}" for i, (n, _) in enumerate(BAD)])
def test_a_bad_argument_is_a_value_error_naming_it_before_any_request(
    client: MolensClient, name: str, call: Callable[[MolensClient], Any]
) -> None:
    with pytest.raises(ValueError, match=name):
        call(client)


def test_the_clients_namespace_goes_on_creates_and_lists_and_a_calls_own_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[str, str, Any]] = []

    def record(method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, dict[str, Any]]:
        sent.append((method, path, body))
        items = [{"id": str(i)} for i in range(len(body["tasks"]))] if body and "tasks" in body else []
        return 200, {"id": "t", "items": items, "next_cursor": None}

    c = MolensClient("http://127.0.0.1:1", namespace="payments")
    monkeypatch.setattr(c, "_request", record)
    c.create(type="delayed")
    c.create(type="delayed", namespace="orders")
    c.create_many([{"type": "delayed"}, {"type": "delayed", "namespace": "orders"}], namespace="audit")
    list(c.list())
    list(c.dead_letters(namespace="orders"))
    list(c.executions("t"))
    c.redrive_matching()
    bodies = [b for _, _, b in sent]
    assert bodies[0]["namespace"] == "payments" and bodies[1]["namespace"] == "orders"
    assert [t["namespace"] for t in bodies[2]["tasks"]] == ["audit", "orders"]
    assert sent[3][1].endswith("namespace=payments") and "namespace=orders" in sent[4][1]
    assert "namespace" not in sent[5][1]  # a task's executions are its own namespace's
    assert bodies[6] == {"namespace": "payments"}
    plain = MolensClient("http://127.0.0.1:1")
    monkeypatch.setattr(plain, "_request", record)
    plain.create(type="delayed")
    list(plain.list())
    assert "namespace" not in sent[7][2] and "namespace" not in sent[8][1]


def test_the_client_closed_sets_are_the_servers() -> None:
    assert {k.value for k in DeadLetterKind} == {k.value for k in schema.FailureKind}
    assert {k.value for k in SeriesRange} == {k.value for k in Span}
    assert client_mod.MAX_EPOCH_MS == schema._MAX_EPOCH_MS


JSON_VALUES: list[Any] = [
    {"tasks": [{"type": "delayed", "interval_ms": 5000, "callback_url": "http://127.0.0.1:1/ok/é/日本", "headers": {}}]},
    {"n": 2**63 - 1, "neg": -(2**62), "big": 10**30, "f": 1.5, "t": True, "none": None, "nested": [[], {}, [1, "2"]]},
    {"quote": 'a"b\\c\n\t\u0001', "emoji": "\U0001f600"},
    [],
    "plain",
]


@pytest.mark.parametrize("value", JSON_VALUES)
def test_both_decoders_read_the_same_values_and_bodies_round_trip(value: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    assert client_mod._msgspec is not None, "the test environment has msgspec: the fast path is tested"
    body = client_mod._dumps(value)
    assert json.loads(body) == value
    assert client_mod._loads(body) == value
    assert client_mod._loads(json.dumps(value, ensure_ascii=False).encode()) == value
    monkeypatch.setattr(client_mod, "_msgspec", None)
    assert client_mod._dumps(value) == body
    assert client_mod._loads(body) == value


@pytest.mark.parametrize("fast", [True, False])
def test_bodies_refuse_what_json_cannot_hold_and_both_decoders_refuse_answers_that_are_not_json(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime

    if not fast:
        monkeypatch.setattr(client_mod, "_msgspec", None)
    # the json module's rules whatever is installed (msgspec would send bytes as base64, a datetime as text)
    for odd in (object(), b"raw", datetime.datetime(2026, 12, 3), {1, 2}):
        with pytest.raises(TypeError):
            client_mod._dumps({"payload": odd})
    for bad in (b"{", b"<html>502</html>", b'{"a": 1} x', b"\xff\xfe{"):
        with pytest.raises(ValueError):
            client_mod._loads(bad)


def test_an_api_error_carries_the_reason_a_client_branches_on() -> None:
    body = {"error": {"code": "invalid_argument", "message": "cron_expr '0 0 30 2 *' never fires after 1",
                      "field": "cron_expr", "reason": "never_fires"}}
    err = client_mod.BadRequestError(400, "invalid_argument", body["error"]["message"], "cron_expr", body)
    assert (err.code, err.field, err.reason) == ("invalid_argument", "cron_expr", "never_fires")
    assert client_mod.ApiError(404, "not_found", "task X not found", "task_id", {"error": {}}).reason is None
    assert client_mod.ApiError(502, "http_502", "bad gateway", None, b"<html>").reason is None


class _FakePool:
    """A node that answers each request from a script: (status, headers, body)."""

    def __init__(self, answers: list[Any], seen: list[str], name: str) -> None:
        self.answers, self.seen, self.name = answers, seen, name

    def request(self, method: str, path: str, data: Any, headers: Any, timeout: float) -> Any:
        import email.message

        self.seen.append(self.name)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, hdrs, body = answer
        msg = email.message.Message()
        for k, v in hdrs.items():
            msg[k] = v
        return client_mod._Answer(status, msg, body)  # type: ignore[arg-type]


def _scripted(monkeypatch: pytest.MonkeyPatch, c: MolensClient, script: dict[str, list[Any]]) -> list[str]:
    seen: list[str] = []
    pools = {base: _FakePool(answers, seen, base) for base, answers in script.items()}
    monkeypatch.setattr(c, "_pool", lambda base: pools[base])
    return seen


def test_a_redirect_from_https_to_plain_http_is_not_followed_the_next_node_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A follower behind a TLS proxy names its plain address: following it would send the token
    unencrypted. The SDK asks its next configured node instead, and with one node it says why."""
    ok = (200, {}, b'{"tasks": {}}')
    to_plain = (307, {"Location": "http://10.0.0.2:18081/api/v1/stats"}, b"")
    with MolensClient(["https://a.example", "https://b.example"], token="t0ken", backoff_base_s=0.001,
                      backoff_max_s=0.001) as c:
        seen = _scripted(monkeypatch, c, {"https://a.example": [to_plain], "https://b.example": [ok]})
        assert c.stats() == {"tasks": {}}
        assert seen == ["https://a.example", "https://b.example"]
    with MolensClient(["https://a.example"], token="t0ken") as c:
        _scripted(monkeypatch, c, {"https://a.example": [to_plain]})
        with pytest.raises(client_mod.UnavailableError, match="plain http") as ei:
            c.stats()
        assert "t0ken" not in str(ei.value)


def test_a_full_disk_answer_is_retried_and_then_raised_with_its_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    full = (507, {"Retry-After": "7"}, b'{"error": {"code": "insufficient_storage", "message": "disk full"}}')
    with MolensClient(["http://a.example"], max_attempts=3, backoff_base_s=0.001, backoff_max_s=0.001) as c:
        seen = _scripted(monkeypatch, c, {"http://a.example": [full, full, full]})
        with pytest.raises(client_mod.InsufficientStorageError) as ei:
            c.stats()
        assert (ei.value.status, ei.value.retry_after_s, len(seen)) == (507, 7, 3)
        assert isinstance(ei.value, client_mod.UnavailableError)


def test_a_full_disk_answer_before_a_node_that_cannot_be_reached_is_raised_as_the_full_disk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last attempt finds no node: the error is the answer a node gave before (507 with its
    ``Retry-After``, as the Go and Java SDKs raise it), not "unreachable" nor a 503."""
    full = (507, {"Retry-After": "7"}, b'{"error": {"code": "insufficient_storage", "message": "disk full"}}')
    refused = client_mod._TransportError("connection refused", sent=False)
    with MolensClient(["http://a.example"], max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.001) as c:
        _scripted(monkeypatch, c, {"http://a.example": [full, refused]})
        with pytest.raises(client_mod.InsufficientStorageError) as ei:
            c.stats()
        assert (ei.value.status, ei.value.code, ei.value.retry_after_s) == (507, "insufficient_storage", 7)
    no_leader = (503, {}, b'{"error": {"code": "no_leader", "message": "no leader"}}')
    with MolensClient(["http://a.example"], max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.001) as c:
        _scripted(monkeypatch, c, {"http://a.example": [no_leader, refused]})
        with pytest.raises(client_mod.UnavailableError) as eu:
            c.stats()
        assert (eu.value.status, eu.value.code) == (503, "no_leader")
        assert not isinstance(eu.value, client_mod.InsufficientStorageError)


def test_a_batch_items_error_is_labelled_by_its_code_as_the_go_and_java_sdks_do() -> None:
    def item(code: str) -> client_mod.ApiError:
        return client_mod._item_error({"index": 0, "error": {"code": code, "message": "m", "field": None}})

    assert [(e.status, type(e).__name__) for e in (item("not_found"), item("internal"), item("invalid_argument"))] == [
        (404, "TaskNotFoundError"), (500, "ApiError"), (400, "BadRequestError")]
