"""``GET /stats``'s recent fires (docs/api.md#stats): ``by_result`` counts every history row finished
in the window, ``fires_per_s`` and ``success_rate`` only the HTTP attempts among them: a history
event (a definition updated, instants skipped, a backfill asked for) is no fire."""

from __future__ import annotations

from pathlib import Path

import pytest

from molens.fsm.commands import Dispatched, DispatchItem, ResultItem, Results
from molens.model import Outcome
from molens.schema import FireKind
from molens.web.app import make_app
from molens.web.local_context import LocalContext
from tests.polling import wait_until
from tests.unit.test_write_barrier import _call


def test_history_events_count_by_result_but_are_no_fires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("molens.web.node_stats.RECENT_CACHE_S", 0.0)
    ctx = LocalContext(str(tmp_path))
    try:
        app = make_app(ctx)
        body = {"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x"}
        st, edited = _call(app, "POST", "/api/v1/tasks", body)
        assert st == 201, edited
        st, out = _call(app, "PATCH", f"/api/v1/tasks/{edited['id']}", {"scene": "renamed"})
        assert st == 200, out

        def stats() -> dict[str, object]:
            st, out = _call(app, "GET", "/api/v1/stats")
            assert st == 200, out
            return {k: out[k] for k in ("by_result", "fires_per_s", "success_rate")}

        wait_until(lambda: stats()["by_result"] == {"updated": 1}, "the updated row", 10)
        assert stats() == {"by_result": {"updated": 1}, "fires_per_s": 0.0, "success_rate": None}

        st, fired = _call(app, "POST", "/api/v1/tasks", body)
        assert st == 201, fired
        due, fire_id = fired["next_run_at"], ctx.store.get_task(fired["id"]).fire_id  # type: ignore[union-attr]
        assert ctx.propose([Dispatched(due, (DispatchItem(fire_id=fire_id, task_id=fired["id"], attempt=1,
                                                          worker="w1", deadline_ms=due + 60_000),))], 5) == [[None]]
        ctx.propose([Results(due + 5, (ResultItem(
            fire_id=fire_id, kind=FireKind.CALLBACK, status_code=200, outcome=Outcome.RESPONSE, response_head="",
            latency_ms=5, worker="w1", attempt=1),))], 5)
        wait_until(lambda: stats()["by_result"] == {"updated": 1, "success": 1}, "the success row", 10)
        assert stats() == {"by_result": {"updated": 1, "success": 1}, "fires_per_s": 0.1, "success_rate": 1.0}
    finally:
        ctx.close()
