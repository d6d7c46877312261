"""Requests that leadership moves under after part of them applied (docs/api.md): a bulk dead-letter
redrive or delete goes through Raft 500 ids to an entry, and when leadership moves after some entries
applied the answer is a 200 with what applied, ``more`` and ``interrupted`` -- not a 307 or 503 that
has the client send the whole request again (a limited delete would then act on more than its
limit); a request whose first entry could not be proposed is refused whole, as before. A leadership
transfer whose leader was deposed after its audit note is a 409, not a 307 to a new leader that
would hand over once more."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import bottle
import pytest

from molens.fsm.commands import Audited, Command, DeleteDeadLetters, RedriveDeadLetters
from molens.web.app import make_app
from molens.web.errors import LeaderElsewhere, NoLeader
from tests.unit.test_write_barrier import Behind, _dead_letter
from tests.unit.test_write_barrier import _call as _call_path


class Moving(Behind):
    """A context whose leadership moves after ``allowed`` bulk entries applied."""

    allowed: int | None = None
    error: Exception = LeaderElsewhere("http://127.0.0.1:9", "n2")

    def propose(self, commands: Sequence[Command], timeout_s: float) -> list[list[Any]]:
        inner = [c.command if isinstance(c, Audited) else c for c in commands]
        if any(isinstance(c, RedriveDeadLetters | DeleteDeadLetters) for c in inner) and self.allowed is not None:
            if self.allowed == 0:
                raise self.error
            self.allowed -= 1
        return super().propose(commands, timeout_s)


def _call(app: bottle.Bottle, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    route, _, query = path.partition("?")
    return _call_path(app, method, route, body, query=query)


@pytest.fixture()
def app(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[bottle.Bottle, Moving]]:
    monkeypatch.setattr("molens.web.dead_letters.CHUNK", 2)
    ctx = Moving(str(tmp_path))
    try:
        a = make_app(ctx)
        for _ in range(5):
            _dead_letter(a, ctx)
        yield a, ctx
    finally:
        ctx.close()


@pytest.mark.parametrize("error", [LeaderElsewhere("http://127.0.0.1:9", "n2"), NoLeader()])
def test_a_bulk_delete_interrupted_after_an_entry_answers_what_applied(
    app: tuple[bottle.Bottle, Moving], error: Exception,
) -> None:
    a, ctx = app
    ctx.allowed, ctx.error = 1, error
    st, out = _call(a, "DELETE", "/api/v1/dead-letters?all=true&limit=5")
    assert st == 200, out
    assert (out["matched"], out["deleted"], out["more"], out["interrupted"]["code"]) == (
        5, 2, True, error.code), out  # type: ignore[attr-defined]
    assert len(ctx.store.list_dead(limit=10)[0]) == 3
    ctx.allowed = None  # sent again: the rest
    st, out = _call(a, "DELETE", "/api/v1/dead-letters?all=true&limit=5")
    assert (st, out["deleted"], out["more"], "interrupted" in out) == (200, 3, False, False), out


def test_a_bulk_redrive_interrupted_after_an_entry_answers_what_applied(
    app: tuple[bottle.Bottle, Moving],
) -> None:
    a, ctx = app
    ctx.allowed = 2
    st, out = _call(a, "POST", "/api/v1/dead-letters/redrive", {})
    assert st == 200, out
    assert (out["matched"], out["redriven"], out["more"], out["interrupted"]["code"]) == (5, 4, True, "not_leader")
    assert len(ctx.store.list_dead(limit=10)[0]) == 1


def test_a_bulk_request_whose_first_entry_is_refused_is_refused_whole(
    app: tuple[bottle.Bottle, Moving],
) -> None:
    a, ctx = app
    ctx.allowed = 0
    st, out = _call(a, "DELETE", "/api/v1/dead-letters?all=true")
    assert st == 307, out
    ctx.error = NoLeader()
    st, out = _call(a, "POST", "/api/v1/dead-letters/redrive", {})
    assert (st, out["error"]["code"]) == (503, "no_leader"), out
    assert len(ctx.store.list_dead(limit=10)[0]) == 5


class Deposed(Behind):
    """A leader that loses leadership between the transfer's audit note and the transfer."""

    def transfer_leader(self, to: str | None) -> dict[str, Any]:
        raise LeaderElsewhere("http://127.0.0.1:9", "n2")


def test_a_transfer_whose_leader_was_deposed_meanwhile_is_refused_not_redirected(tmp_path: Any) -> None:
    """A 307 would have the client ask the new leader, which would hand leadership over once more."""
    ctx = Deposed(str(tmp_path))
    try:
        st, out = _call(make_app(ctx), "POST", "/api/v1/cluster/transfer-leader")
        assert (st, out["error"]["code"], out["error"]["field"]) == (409, "illegal_transition", "to"), out
        assert "transferred nothing" in out["error"]["message"] and "n2" in out["error"]["message"]
    finally:
        ctx.close()
