"""SQLite history: bounded rows per task, filters, cursor pagination, URL latency percentiles."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from molens.fsm.history import LATENCY_BUCKET_MS, History, bin_value, latency_bin, url_key
from molens.fsm.machine import Writes
from molens.model import Execution, ExecutionResult, FireKind

T0 = 1_700_000_000_000 - 1_700_000_000_000 % LATENCY_BUCKET_MS


def ex(task: str, n: int, result: ExecutionResult = ExecutionResult.SUCCESS, latency: int = 10, url: str = "http://h/cb?x=1",
       kind: FireKind = FireKind.CALLBACK, at: int | None = None) -> Execution:
    at = T0 + n * 1000 if at is None else at
    return Execution(
        task_id=task, fire_id=f"{task}-{n}", seq=n, attempt=1, kind=kind, result=result, status_code=200,
        latency_ms=latency, worker="w1", url=url, scene="default", fired_ms=at - latency, finished_ms=at,
        response_head="ok",
    )


def w(execs: list[Execution] = (), deletes: list[str] = ()) -> Writes:  # type: ignore[assignment]
    return Writes(executions=list(execs), history_deletes=list(deletes))


@pytest.fixture
def hist(tmp_path: Path) -> History:
    h = History(tmp_path / "history.sqlite", max_records_per_task=5)
    yield h  # type: ignore[misc]
    h.close()


def test_rows_per_task_are_bounded_oldest_trimmed(hist: History) -> None:
    for n in range(1, 13):
        hist.apply([(n, w([ex("a", n), ex("b", n)]))])
    assert hist.count("a") == 5 and hist.count("b") == 5
    assert [e.seq for e in hist.list_executions(task_id="a").items] == [12, 11, 10, 9, 8]


def test_bound_holds_within_one_batch_and_after_reopen(tmp_path: Path) -> None:
    h = History(tmp_path / "h.sqlite", max_records_per_task=3)
    h.apply([(1, w([ex("a", n) for n in range(10)]))])
    assert h.count("a") == 3
    h.close()
    h = History(tmp_path / "h.sqlite", max_records_per_task=3)
    h.apply([(2, w([ex("a", 10)]))])
    assert h.count("a") == 3 and h.applied_index() == 2
    h.close()


def test_bound_holds_for_more_tasks_than_one_count_query_covers_after_reopen(tmp_path: Path) -> None:
    """Counts of tasks not in the cache are read in chunks of task ids: every chunk counts."""
    tids = [f"t{i:04d}" for i in range(1_234)]
    h = History(tmp_path / "h.sqlite", max_records_per_task=2)
    h.apply([(1, w([ex(t, n) for t in tids for n in (1, 2)]))])
    h.close()
    h = History(tmp_path / "h.sqlite", max_records_per_task=2)  # empty cache: every count from the table
    h.apply([(2, w([ex(t, 3) for t in tids] + [ex("new", 1)]))])
    assert all(h.count(t) == 2 for t in tids) and h.count("new") == 1
    assert [e.seq for e in h.list_executions(task_id=tids[-1]).items] == [3, 2]
    h.close()


def test_entries_already_recorded_are_skipped(hist: History) -> None:
    hist.apply([(1, w([ex("a", 1)])), (2, w([ex("a", 2)]))])
    hist.apply([(2, w([ex("a", 2)])), (3, w([ex("a", 3)]))])
    assert [e.seq for e in hist.list_executions().items] == [3, 2, 1]


def test_a_restore_from_an_older_snapshot_records_the_entries_after_it_once(tmp_path: Path) -> None:
    """After a power loss the task store is rebuilt from a snapshot older than the history, which kept
    its rows, and the log after the snapshot is applied again: each of its rows is recorded once (the
    rows of entries 7 to 10 were there twice). The rows of the entries the snapshot holds stay."""
    h = History(tmp_path / "h.sqlite", max_records_per_task=100)
    for n in range(1, 11):
        h.apply([(n, w([ex("a", n)]))])
    h.retain_tasks(lambda t: True, 6)
    assert h.applied_index() == 6
    for n in range(7, 11):
        h.apply([(n, w([ex("a", n)]))])
    assert [e.seq for e in h.list_executions(task_id="a").items] == list(range(10, 0, -1))
    assert h.count("a") == 10
    h.close()


def test_delete_task_history(hist: History) -> None:
    hist.apply([(1, w([ex("a", 1), ex("b", 1)])), (2, w(deletes=["a"]))])
    assert hist.count("a") == 0 and hist.count("b") == 1


def test_filters_and_cursor_pagination(hist: History) -> None:
    rng = random.Random(3)
    execs = [
        ex(f"t{n % 4}", n, rng.choice([ExecutionResult.SUCCESS, ExecutionResult.FAILED, ExecutionResult.TIMEOUT]))
        for n in range(1, 41)
    ]
    big = History(hist.path.with_name("big.sqlite"), max_records_per_task=1000)
    big.apply([(1, w(execs))])
    got, cursor = [], None
    while True:
        page = big.list_executions(result="failed", cursor=cursor, limit=3)
        got.extend(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    want = [e for e in reversed(execs) if e.result is ExecutionResult.FAILED]
    assert [e.fire_id for e in got] == [e.fire_id for e in want]
    ranged = big.list_executions(task_id="t1", since_ms=T0 + 10_000, until_ms=T0 + 30_000).items
    assert [e.seq for e in ranged] == [29, 25, 21, 17, 13]
    assert ranged[0].to_json()["finished_at"] == T0 + 29_000
    with pytest.raises(ValueError):
        big.list_executions(cursor="x")
    big.close()


def test_url_latency_percentiles_within_five_percent(hist: History) -> None:
    rng = random.Random(7)
    lat = [rng.randrange(1, 2000) for _ in range(2000)]
    execs = [ex(f"t{i}", i % 50, latency=v, at=T0 + i) for i, v in enumerate(lat)]
    execs.append(ex("z", 1, latency=99, url="http://other:81/x"))
    execs.append(ex("z", 2, latency=99, kind=FireKind.ACK))  # ACK probes are not callback latency
    hist.apply([(1, w(execs))])
    stats = {s.url: s for s in hist.url_stats(T0, T0 + LATENCY_BUCKET_MS)}
    s = stats["http://h/cb"]
    assert s.count == 2000 and stats["http://other:81/x"].count == 1
    srt = sorted(lat)
    for q, got in ((0.5, s.p50_ms), (0.9, s.p90_ms), (0.99, s.p99_ms)):
        exact = srt[int(q * len(srt)) - 1]
        assert exact <= got <= exact * 1.05 + 1


def test_url_trend_buckets(hist: History) -> None:
    execs = [ex("a", 1, latency=10, at=T0 + 5), ex("a", 2, latency=100, at=T0 + 6 * LATENCY_BUCKET_MS)]
    hist.apply([(1, w(execs))])
    trend = hist.url_trend("http://h/cb?y=2", T0, T0 + 10 * LATENCY_BUCKET_MS, bucket_ms=5 * LATENCY_BUCKET_MS)
    assert [(p.bucket_ms - T0, p.count) for p in trend] == [(0, 1), (5 * LATENCY_BUCKET_MS, 1)]
    assert 10 <= trend[0].p99_ms <= 11 and 100 <= trend[1].p50_ms <= 105


def test_latency_bins_are_monotone_and_tight() -> None:
    prev = -1
    for ms in range(0, 400_000, 37):
        b = latency_bin(ms)
        assert b >= prev and bin_value(b) >= ms and bin_value(b) <= max(1, ms) * 1.05 + 1
        prev = b


def test_url_key_drops_query_and_credentials() -> None:
    assert url_key("https://u:p@Example.com:8443/a/b?q=1#f") == "https://example.com:8443/a/b"
    assert url_key("http://[::1]:9/") == "http://[::1]:9/"
    assert url_key("http://h") == "http://h/"
