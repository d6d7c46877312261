"""Backfill on a real node (docs/architecture.md#backfill), through the Python SDK: a 5-minute cron
task backfills the past hour and the receiver gets 12 callbacks, in order, each its own fire id
and ``X-Molens-Scheduled-At`` its instant; then the regular schedule is where it was. The refusals
(a delayed task, too many occurrences, ``end`` in the future) answer as documented."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from molens.client import BadRequestError, ConflictError, MolensClient

from .conftest import Cluster, wait_for
from .recording_receiver import RecordingReceiver

HOUR = 3_600_000
FIVE_MIN = 300_000


@pytest.mark.timeout(120)
def test_backfill_of_an_hour_of_a_5_minute_cron_fires_12_occurrences_in_order(
    tmp_path: Path, receiver: RecordingReceiver
) -> None:
    c = Cluster(tmp_path, 1, extra={"raft": {"tick_ms": 20}}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        client = MolensClient([f"http://127.0.0.1:{n.settings['http']['port']}"])
        wait_for(lambda: client.stats(), 60, "the node to serve")
        t = client.create(type="periodic", cron_expr="*/5 * * * *", callback_url=receiver.url("/ok/bf"))
        nxt = t["next_run_at"]
        now = int(time.time() * 1000)
        start = now - now % HOUR - HOUR  # the last full hour before this one
        out = client.backfill(t["id"], start=start, end=start + HOUR)
        assert (out["occurrences"], out["first"], out["last"]) == (12, start, start + 11 * FIVE_MIN), out
        wait_for(lambda: len(receiver.by_tag("bf")) >= 12, 30, "12 backfilled callbacks")
        got = receiver.by_tag("bf")[:12]
        # in arrival order: oldest first, each its own instant
        assert [int(r.headers["X-Molens-Scheduled-At"]) for r in got] == [start + k * FIVE_MIN for k in range(12)]
        assert [r.headers["X-Fire-ID"] for r in got] == [f"{t['id']}-{k}" for k in range(1, 13)]
        assert all(r.headers["X-Molens-Attempt"] == "1" for r in got)
        after = wait_for(lambda: (lambda u: u if u["next_run_at"] is not None else None)(client.get(t["id"])), 10,
                         "the regular schedule back")
        regular = receiver.by_tag("bf")[12:]  # the regular instant, if it came meanwhile (a 5-minute boundary)
        if not regular:
            assert after["next_run_at"] == nxt and after["seq"] == 13  # where it was, as occurrence 13
        else:
            assert [(int(r.headers["X-Molens-Scheduled-At"]), r.headers["X-Fire-ID"]) for r in regular][:1] == [
                (nxt, f"{t['id']}-13")]
        rows = [e for e in client.executions(t["id"]) if e["result"] == "backfill"]
        assert len(rows) == 1 and f"[{start}, {start + HOUR})" in rows[0]["execution_result"]

        # refusals
        with pytest.raises(BadRequestError) as e400:
            client.backfill(t["id"], start=now - 20_000 * 300_000, end=now - 1)  # > 10,000 occurrences
        assert (e400.value.field, e400.value.reason) == ("end", "too_many_occurrences")
        with pytest.raises(BadRequestError):
            client.backfill(t["id"], start=now, end=now + HOUR)  # the future is not backfilled
        d = client.create(type="delayed", interval_ms=600_000, callback_url=receiver.url("/ok/bf-delayed"))
        with pytest.raises(ConflictError):
            client.backfill(d["id"], start=start, end=start + HOUR)
    finally:
        c.kill_all()
