"""A write that this replica alone would refuse or answer as a no-op is decided again after a read
barrier (docs/architecture.md, linearizable writes): here a replica that is behind until its
barrier runs, for a dead letter's redrive and delete and a flow's resume."""

from __future__ import annotations

import io
import json
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import bottle
import pytest

from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import Outcome
from molens.schema import DeadLetter, FireKind
from molens.web.api_context import ApiSettings
from molens.web.app import make_app
from molens.web.local_context import LocalContext


class _Lagging:
    """The dead-letter reader of a replica that has not applied the newest writes before a barrier."""

    def __init__(self, ctx: Behind) -> None:
        self.ctx = ctx

    def get_dead(self, dead_id: str) -> DeadLetter | None:
        return None if self.ctx.behind else self.ctx.store.get_dead(dead_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ctx.store, name)


class Behind(LocalContext):
    """A :class:`LocalContext` whose reads miss dead letters and flow settings until a read barrier."""

    behind = False
    barriers = 0

    def __init__(self, data_dir: str, settings: ApiSettings | None = None) -> None:
        super().__init__(data_dir, settings)
        self.dead_letters = _Lagging(self)

    def read_barrier(self, timeout_s: float) -> None:
        self.barriers += 1
        self.behind = False

    def get_flow(self, key: str) -> Any:
        return None if self.behind else super().get_flow(key)

    def get_task(self, task_id: str) -> Any:
        return None if self.behind else super().get_task(task_id)

    def get_meta(self, key: str) -> Any:
        return None if self.behind else super().get_meta(key)


@pytest.fixture()
def app() -> Iterator[tuple[bottle.Bottle, Behind]]:
    with tempfile.TemporaryDirectory() as d:
        ctx = Behind(d)
        try:
            yield make_app(ctx), ctx
        finally:
            ctx.close()


def _call(app: bottle.Bottle, method: str, path: str, body: Any = None, query: str = "",
          token: str | None = None) -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    env = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw)), "wsgi.input": io.BytesIO(raw), "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr, "REMOTE_ADDR": "127.0.0.1",
        **({"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}),
    }
    status: list[str] = []
    out = b"".join(app(env, lambda s, h, e=None: status.append(s)))
    return int(status[0].split()[0]), json.loads(out) if out else None


def _dead_letter(app: bottle.Bottle, ctx: Behind, token: str | None = None) -> str:
    """A real dead letter: a task fired once and answered 404 (not retried)."""
    st, t = _call(app, "POST", "/api/v1/tasks",
                  {"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x"}, token=token)
    assert st == 201, t
    due = t["next_run_at"]
    fire_id = ctx.store.get_task(t["id"]).fire_id  # type: ignore[union-attr]
    sent = ctx.propose([Dispatched(due, (DispatchItem(fire_id=fire_id, task_id=t["id"], attempt=1, worker="w1",
                                                      deadline_ms=due + 60_000),))], 5)
    assert sent == [[None]], sent
    ctx.propose([Results(due + 5, (ResultItem(
        fire_id=fire_id, kind=FireKind.CALLBACK, status_code=404, outcome=Outcome.RESPONSE, response_head="",
        latency_ms=5, worker="w1", attempt=1),))], 5)
    [dl] = [d for d in ctx.store.list_dead(limit=1_000)[0] if d.task_id == t["id"]]
    return dl.id


@pytest.mark.parametrize("method,suffix", [("POST", "/redrive"), ("DELETE", "")])
def test_a_dead_letter_write_on_a_replica_behind_is_decided_after_a_barrier(
    app: tuple[bottle.Bottle, Behind], method: str, suffix: str,
) -> None:
    a, ctx = app
    dead_id = _dead_letter(a, ctx)
    ctx.behind = True
    st, out = _call(a, method, f"/api/v1/dead-letters/{dead_id}{suffix}")
    assert st == 200, out
    assert ctx.barriers == 1 and ctx.store.get_dead(dead_id) is None
    ctx.behind = True  # a dead letter that is gone after the barrier too stays a 404
    assert _call(a, method, f"/api/v1/dead-letters/{dead_id}{suffix}")[0] == 404
    assert ctx.barriers == 2


def test_a_flow_resumed_on_a_replica_behind_is_resumed_after_a_barrier(app: tuple[bottle.Bottle, Behind]) -> None:
    a, ctx = app
    key = "127.0.0.1:9"
    assert _call(a, "POST", f"/api/v1/flows/{key}/pause")[0] == 200
    ctx.behind = True
    st, out = _call(a, "POST", f"/api/v1/flows/{key}/resume")
    assert (st, out["paused"]) == (200, False), out
    settings = ctx.store.get_flow(key)
    assert ctx.barriers == 1 and settings is not None and not settings.paused


def test_a_backfill_on_a_replica_behind_is_decided_after_a_barrier(app: tuple[bottle.Bottle, Behind]) -> None:
    a, ctx = app
    st, t = _call(a, "POST", "/api/v1/tasks",
                  {"type": "periodic", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/x"})
    assert st == 201, t
    now = ctx.now_ms()
    ctx.behind = True
    st, out = _call(a, "POST", f"/api/v1/tasks/{t['id']}/backfill", {"start": now - 600_000, "end": now})
    assert st == 200, out
    assert ctx.barriers == 1
    ctx.behind = True  # a task that is gone after the barrier too stays a 404
    missing = t["id"][:-1] + ("0" if t["id"][-1] != "0" else "1")
    assert _call(a, "POST", f"/api/v1/tasks/{missing}/backfill", {"start": now - 600_000, "end": now})[0] == 404
    assert ctx.barriers == 2


def _batch(namespaces: list[str]) -> dict[str, Any]:
    return {"tasks": [{"type": "delayed", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/x",
                       "namespace": ns} for ns in namespaces]}


def test_a_batch_naming_a_namespace_that_does_not_exist_creates_nothing(app: tuple[bottle.Bottle, Behind]) -> None:
    a, ctx = app
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "pay"})[0] == 201
    st, out = _call(a, "POST", "/api/v1/tasks/batch", _batch(["pay", "nowhere", "default", "nowhere"]))
    assert st == 400, out
    assert [(e["index"], e["error"]["code"], e["error"]["field"]) for e in out["errors"]] == [
        (1, "not_found", "namespace"), (3, "not_found", "namespace")]
    assert out["error"]["message"].endswith("nothing was created"), out
    assert len(ctx.store) == 0


def test_a_batch_on_a_replica_behind_finds_its_namespace_after_a_barrier(app: tuple[bottle.Bottle, Behind]) -> None:
    a, ctx = app
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "pay"})[0] == 201
    ctx.behind = True
    st, out = _call(a, "POST", "/api/v1/tasks/batch", _batch(["pay", "default"]))
    assert st == 201, out
    assert ctx.barriers == 1 and [t["namespace"] for t in out["items"]] == ["pay", "default"]


def test_another_namespaces_object_costs_a_write_the_barrier_a_missing_one_costs() -> None:
    """A write to another namespace's task or dead letter answers the 404 of a missing one, and after
    the same read barrier: answered without it, the quicker 404 told that the id exists elsewhere."""
    token = "write-barrier-bootstrap-token"
    with tempfile.TemporaryDirectory() as d:
        ctx = Behind(d, ApiSettings(auth_token=token))
        try:
            a = make_app(ctx)
            for ns in ("a", "b"):
                assert _call(a, "POST", "/api/v1/namespaces", {"name": ns}, token=token)[0] == 201
            st, key = _call(a, "POST", "/api/v1/keys", {"name": "ka", "role": "writer", "namespaces": ["a"]}, token=token)
            assert st == 201, key
            st, other = _call(a, "POST", "/api/v1/tasks", {"type": "periodic", "interval_ms": 60_000, "namespace": "b",
                                                            "callback_url": "http://127.0.0.1:9/x"}, token=token)
            assert st == 201, other
            missing = other["id"][:-1] + ("0" if other["id"][-1] != "0" else "1")
            dead_id = _dead_letter(a, ctx, token)  # in the default namespace, which the key may not see
            for method, path in (("DELETE", f"/api/v1/tasks/{other['id']}"), ("POST", f"/api/v1/tasks/{other['id']}/pause"),
                                 ("DELETE", f"/api/v1/tasks/{missing}"), ("POST", f"/api/v1/dead-letters/{dead_id}/redrive"),
                                 ("DELETE", f"/api/v1/dead-letters/{dead_id}"),
                                 ("DELETE", f"/api/v1/dead-letters/{dead_id[:-1]}9")):
                before = ctx.barriers
                st, out = _call(a, method, path, token=key["secret"])
                assert st == 404, (path, out)
                assert ctx.barriers == before + 1, path
            assert ctx.get_task(other["id"]) is not None and ctx.store.get_dead(dead_id) is not None
        finally:
            ctx.close()
