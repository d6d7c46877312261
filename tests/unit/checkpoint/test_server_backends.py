"""What is particular to the Redis and PostgreSQL backends: the store's clock, fence counters that
outlive reset and gc, no KEYS, one round trip per change. Real servers (see conftest)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mooncat_checkpoint import Claimed, LeaseLostError, SyncCheckpointClient, engine


@pytest.fixture(params=["redis", "postgresql"])
def server_url(request: pytest.FixtureRequest, servers: object) -> str:
    from .conftest import empty_server_store

    url: str = servers.url(request.param)  # type: ignore[attr-defined]
    empty_server_store(url)
    return url


@pytest.fixture
def wrong_local_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This host's clock says 1970 (a client made now would default to it)."""
    monkeypatch.setattr(engine, "wall_clock_ms", lambda: 1_000)
    yield


def _server_ms(url: str) -> int:
    if url.startswith("redis"):
        import redis

        with redis.Redis.from_url(url) as r:
            sec, usec = r.time()
            return int(sec) * 1000 + int(usec) // 1000
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
        assert row is not None
        return int(row[0])


def test_leases_are_on_the_servers_clock_not_this_hosts(server_url: str, wrong_local_clock: None) -> None:
    with SyncCheckpointClient(server_url) as cp:
        before = _server_ms(server_url)
        c = cp.claim("ns", "k", lease_ms=60_000)
        after = _server_ms(server_url)
        assert isinstance(c, Claimed)
        assert before <= c.checkpoint.created_at <= after
        assert c.checkpoint.lease_until == c.checkpoint.created_at + 60_000
        assert cp.list("ns", expired=True) == []  # "now" is the server's too


def test_a_local_store_uses_this_hosts_clock(tmp_path: object, wrong_local_clock: None) -> None:
    with SyncCheckpointClient(f"sqlite://{tmp_path}/s.db") as cp:  # the control for the test above
        c = cp.claim("ns", "k", lease_ms=60_000)
        assert isinstance(c, Claimed) and c.checkpoint.created_at == 1_000


def test_the_fence_counter_outlives_reset_and_gc(server_url: str) -> None:
    with SyncCheckpointClient(server_url) as cp:
        first = cp.claim("ns", "k", lease_ms=1)
        assert isinstance(first, Claimed) and first.fence == 1
        assert cp.reset("ns", "k") and cp.get("ns", "k") is None and cp.list("ns") == []
        second = cp.claim("ns", "k", lease_ms=1)
        assert isinstance(second, Claimed) and second.fence == 2 and second.checkpoint.attempts == 1
        deadline = time.monotonic() + 10
        while cp.gc() == 0:  # the 1 ms lease runs out on the server's clock
            assert time.monotonic() < deadline
        third = cp.claim("ns", "k")
        assert isinstance(third, Claimed) and third.fence == 3
        with pytest.raises(LeaseLostError):
            cp.done("ns", "k", second.lease_token)
        assert isinstance(cp.claim("ns", "other"), Claimed) and cp.get("ns", "other").fence == 1  # type: ignore[union-attr]


def test_redis_lists_and_collects_by_sscan_never_keys(servers: object) -> None:
    import redis

    from .conftest import empty_server_store

    url: str = servers.url("redis")  # type: ignore[attr-defined]
    empty_server_store(url)
    with redis.Redis.from_url(url) as r:
        r.config_resetstat()
        with SyncCheckpointClient(url) as cp:
            for i in range(1200):  # more than one SSCAN batch
                c = cp.claim("ns", f"k{i}", lease_ms=60_000 if i % 2 else 1)
                assert isinstance(c, Claimed)
            assert len(cp.list("ns")) == 1200
            deadline = time.monotonic() + 10
            while len(cp.list("ns", expired=True)) < 600:
                assert time.monotonic() < deadline
            assert cp.gc() == 600
            assert sorted(r.key for r in cp.list("ns")) == sorted(f"k{i}" for i in range(1, 1200, 2))
        stats = r.info("commandstats")
    assert "cmdstat_sscan" in stats
    assert "cmdstat_keys" not in stats and "cmdstat_scan" not in stats
    # Every claim was one script call (commands inside scripts count too, so HSET shows up), and no
    # optimistic transaction from the client.
    assert stats["cmdstat_evalsha"]["calls"] >= 1200
    assert "cmdstat_watch" not in stats and "cmdstat_multi" not in stats


def test_postgresql_keeps_one_row_per_key_that_reset_empties(servers: object) -> None:
    import psycopg

    from mooncat_checkpoint.backends.postgres import TABLE

    from .conftest import empty_server_store

    url: str = servers.url("postgresql")  # type: ignore[attr-defined]
    empty_server_store(url)
    with SyncCheckpointClient(url) as cp:
        key = "nul\x00 and ünïcödé"
        c = cp.claim("ns", key)
        assert isinstance(c, Claimed)
        assert cp.reset("ns", key)
        with psycopg.connect(url) as conn:
            rows = conn.execute(f"SELECT key, status, fence FROM {TABLE}").fetchall()
        assert rows == [(key.encode(), None, 1)]
        again = cp.claim("ns", key)
        assert isinstance(again, Claimed) and again.fence == 2 and again.checkpoint.key == key


def test_a_client_whose_connection_the_server_dropped_connects_again(server_url: str) -> None:
    """The server ended the client's connection (a restart, an idle proxy): the call that finds it
    lost fails (its statement may have run), and the next one connects again, for both servers."""
    from mooncat_checkpoint import BackendUnavailableError

    with SyncCheckpointClient(server_url) as cp:
        c = cp.claim("ns", "before")
        assert isinstance(c, Claimed)
        if server_url.startswith("redis"):
            import redis

            with redis.Redis.from_url(server_url) as r:
                assert r.execute_command("CLIENT", "KILL", "SKIPME", "yes") >= 1
        else:
            import psycopg

            with psycopg.connect(server_url, autocommit=True) as conn:
                ended = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                     "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
            assert ended and all(ok for (ok,) in ended)
        after: object = None
        for _ in range(2):  # redis-py connects again at once; psycopg's connection fails once first
            try:
                after = cp.claim("ns", "after")
                break
            except BackendUnavailableError:
                continue
        assert isinstance(after, Claimed)
        cp.done("ns", "before", c.lease_token)
        rec = cp.get("ns", "before")
        assert rec is not None and rec.status.value == "done"


def test_redis_lists_a_key_once_when_its_scan_returns_it_twice(servers: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """SSCAN may return a member more than once while the set is rehashed under it (keys added
    during the scan); ``list`` still gives each record once, sorted by key, and ``gc`` counts each
    once."""
    from mooncat_checkpoint.backends.redis import RedisBackend

    from .conftest import empty_server_store

    url: str = servers.url("redis")  # type: ignore[attr-defined]
    empty_server_store(url)
    with SyncCheckpointClient(url) as cp:
        for k in ("a", "b", "c"):
            assert isinstance(cp.claim("ns", k, lease_ms=1), Claimed)
    backend = RedisBackend(url)
    try:
        scan = backend._r.sscan_iter
        monkeypatch.setattr(backend._r, "sscan_iter", lambda *a, **kw: [m for m in scan(*a, **kw) for _ in (1, 2)])
        assert [r.key for r in backend.list("ns")] == ["a", "b", "c"]
        time.sleep(0.01)  # the 1 ms leases are over
        assert backend.gc(None, None, None) == 3
    finally:
        backend.close()
