"""A create refused by a namespace's ``creates_per_s`` is held when its connection sends it before
the Retry-After it was given has passed (docs/api.md#namespaces): through the real WSGI app over a
local replica, with the hold recorded instead of slept."""

from __future__ import annotations

import io
import json
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from molens.fsm.commands import CreateTasks, DeleteTasks
from molens.web.app import Api, build_api
from molens.web.local_context import LocalContext
from molens.web.quotas import MAX_HELD, MAX_HOLD_S


@pytest.fixture()
def api() -> Iterator[tuple[Api, list[float]]]:
    with tempfile.TemporaryDirectory() as d:
        ctx = LocalContext(d)
        try:
            a = build_api(ctx)
            slept: list[float] = []
            a.sleep = slept.append
            yield a, slept
        finally:
            ctx.close()


def _call(api: Api, method: str, path: str, body: Any = None, port: int = 40000) -> tuple[int, dict[str, str], Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    env = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw)), "wsgi.input": io.BytesIO(raw), "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": str(port),
    }
    answer: list[Any] = []
    out = b"".join(api.app(env, lambda s, h, e=None: answer.append((s, h))))
    status, headers = answer[0]
    return int(status.split()[0]), dict(headers), json.loads(out) if out else None


TASK = {"type": "delayed", "interval_ms": 3_600_000, "callback_url": "http://127.0.0.1:9/cb", "namespace": "slow"}


def _holds(api: Api) -> dict[str, float]:
    """``molens_namespace_quota_holds_total`` by namespace, as ``/metrics`` shows it."""
    env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
           "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr, "wsgi.input": io.BytesIO()}
    text = b"".join(api.app(env, lambda s, h, e=None: None)).decode()
    return {s.labels["namespace"]: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "molens_namespace_quota_holds_total"}


def test_a_connection_sending_again_before_its_retry_after_is_held_and_one_that_waits_is_not(
        api: tuple[Api, list[float]]) -> None:
    a, slept = api
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "slow", "quotas": {"creates_per_s": 0.001}})[0] == 201
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 201
    st, headers, out = _call(a, "POST", "/api/v1/tasks", TASK)
    assert (st, out["error"]["quota"], headers["Retry-After"]) == (429, "creates_per_s", "1000")  # one per 1,000 s
    assert slept == []  # the first refusal of a connection is answered at once
    st, _, out = _call(a, "POST", "/api/v1/tasks/batch", {"tasks": [TASK]})  # again, not waiting
    assert (st, out["error"]["quota"]) == (429, "creates_per_s")
    assert slept == [MAX_HOLD_S]  # held (until its Retry-After passes, at most MAX_HOLD_S)
    assert _call(a, "POST", "/api/v1/tasks", TASK, port=40001)[0] == 429
    assert len(slept) == 1  # another connection was told nothing: answered at once
    assert _call(a, "POST", "/api/v1/tasks", TASK | {"namespace": "default"})[0] == 201  # other namespaces go
    assert _holds(a)["slow"] == 1
    for _ in range(MAX_HELD):  # every hold in use: the next refusal is answered at once
        assert a.held.acquire(blocking=False)
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 429
    assert len(slept) == 1


def test_a_namespaces_creates_take_turns_in_its_slots_and_one_that_finds_none_free_in_time_goes_on(
        api: tuple[Api, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    import doctest

    from molens.web import app as app_module
    from molens.web import quotas

    assert doctest.testmod(quotas).failed == 0
    a, _ = api
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "slow", "quotas": {"creates_per_s": 50}})[0] == 201
    seen: list[dict[str, int]] = []
    propose = a.ctx.propose

    def watched(cmds: Any, timeout: float) -> Any:
        seen.append(a.slots.busy())
        return propose(cmds, timeout)

    monkeypatch.setattr(a.ctx, "propose", watched)
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 201
    assert _call(a, "POST", "/api/v1/tasks/batch", {"tasks": [TASK, TASK]})[0] == 201
    assert _call(a, "POST", "/api/v1/tasks", TASK | {"namespace": "default"})[0] == 201
    assert seen == [{"slow": 1}, {"slow": 1}, {}]  # proposed holding a slot; a namespace without the quota none
    assert a.slots.busy() == {}  # given back after the answer
    assert _call(a, "POST", "/api/v1/tasks", TASK | {"callback_url": "ftp://x"})[0] == 400
    assert a.slots.busy() == {}  # and after a refusal
    monkeypatch.setattr(app_module, "MAX_SLOT_WAIT_S", 0.2)
    assert a.slots.acquire("slow", 50, 0) and a.slots.acquire("slow", 50, 0)  # both slots of 50/s busy
    threading.Timer(0.05, a.slots.release, ("slow",)).start()
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 201  # waited for the slot given back
    assert seen[-1] == {"slow": 2}
    assert a.slots.busy() == {"slow": 1} and a.slots.acquire("slow", 50, 0)  # both busy again
    st = _call(a, "POST", "/api/v1/tasks", TASK)[0]  # none comes free: goes on without one after the wait
    assert st == 201 and seen[-1] == {"slow": 2}
    assert a.slots.busy() == {"slow": 2}
    a.slots.release("slow")
    a.slots.release("slow")


def test_a_create_is_never_held_while_it_holds_its_namespaces_create_slot(
        api: tuple[Api, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    a, slept = api
    busy_when_held: list[dict[str, int]] = []
    a.sleep = lambda s: (slept.append(s), busy_when_held.append(a.slots.busy()))  # type: ignore[func-returns-value]
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "slow", "quotas": {"creates_per_s": 0.001}})[0] == 201
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 201
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 429  # told to wait 1,000 s
    assert _call(a, "POST", "/api/v1/tasks", TASK)[0] == 429  # did not: held by the early check ...
    assert slept == [MAX_HOLD_S] and busy_when_held == [{}]  # ... before it took a slot
    # The early check saw room (another create took the last token between the two checks): the
    # refusal comes from the check made inside the slot, and is answered at once, the slot given back.
    monkeypatch.setattr(a.create_rate, "wait", lambda *_args: 0)
    st, headers, out = _call(a, "POST", "/api/v1/tasks", TASK)
    assert (st, out["error"]["quota"]) == (429, "creates_per_s") and int(headers["Retry-After"]) > 0
    assert slept == [MAX_HOLD_S]
    assert a.slots.busy() == {}


@pytest.mark.parametrize("batch", [False, True])
def test_a_keyed_create_spared_its_token_that_makes_a_task_after_all_is_charged(
        api: tuple[Api, list[float]], batch: bool) -> None:
    """A create whose idempotency key names a task takes no ``creates_per_s`` token (it makes
    nothing). When that task is deleted while the create is on its way, the create makes a task:
    a delete and a keyed create again, raced, made tasks at any rate. Now the bucket is charged
    after the fact, so the next create waits for that token too (one per 1,000 s: 2,000 s for two)."""
    a, _ = api
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "slow", "quotas": {"creates_per_s": 0.001}})[0] == 201
    st, _, first = _call(a, "POST", "/api/v1/tasks", TASK | {"idempotency_key": "k1"})
    assert st == 201
    real = a.propose_one

    def delete_lands_first(cmd: Any) -> Any:
        if isinstance(cmd, CreateTasks):  # the delete of the key's task is ordered before the create
            assert real(DeleteTasks(cmd.now_ms, (first["id"],)))[0] is not None
        return real(cmd)

    a.propose_one = delete_lands_first  # type: ignore[method-assign]
    if batch:
        st, _, out = _call(a, "POST", "/api/v1/tasks/batch", {"tasks": [TASK | {"idempotency_key": "k1"}]})
        made = out["items"][0]
    else:
        st, _, made = _call(a, "POST", "/api/v1/tasks", TASK | {"idempotency_key": "k1"})
    a.propose_one = real  # type: ignore[method-assign]
    assert st == 201 and made["id"] != first["id"]  # a task was made: spared at first, it owes its token
    st, headers, out = _call(a, "POST", "/api/v1/tasks", TASK | {"idempotency_key": "k2"}, port=40002)
    assert (st, out["error"]["quota"], headers["Retry-After"]) == (429, "creates_per_s", "2000")
