"""What is particular to the Redis and PostgreSQL backends: the store's clock, fence counters that
outlive reset and gc, no KEYS, one round trip per change, keys longer than PostgreSQL's index rows,
a bound on a call the server does not answer. Real servers (see conftest)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mooncat_checkpoint import (
    BackendUnavailableError,
    Busy,
    Claimed,
    InvalidKeyError,
    LeaseLostError,
    SyncCheckpointClient,
    engine,
)

from .test_contract import four_byte_key


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


# -- keys longer than an index row (PostgreSQL) ----------------------------------------------------

LONG = four_byte_key(10_000, 3)  # 40,000 bytes that do not compress: no btree row holds them
COMPRESSIBLE = "x" * 10_000  # 10,000 bytes that compress into a btree row: earlier releases stored it

# The table and the claim of the releases before ``full_key`` (copied verbatim, but for RETURNING):
# an earlier release, still running beside this one.
EARLIER_SCHEMA = """CREATE TABLE IF NOT EXISTS mooncat_checkpoints (
    namespace    text    NOT NULL,
    key          bytea   NOT NULL,
    status       text    CHECK (status IN ('claimed', 'done', 'failed')),
    owner_run_id text,
    lease_until  bigint,
    lease_ms     bigint,
    lease_token  text,
    attempts     integer NOT NULL DEFAULT 0,
    fence        bigint  NOT NULL DEFAULT 0,
    fingerprint  text,
    created_at   bigint,
    updated_at   bigint,
    result       text,
    result_ref   text,
    error        text,
    PRIMARY KEY (namespace, key)
)"""
EARLIER_NOW = "coalesce(%(now)s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
EARLIER_CLAIM = f"""WITH t AS (SELECT {EARLIER_NOW} AS now)
INSERT INTO mooncat_checkpoints AS c (namespace, key, status, owner_run_id, lease_until, lease_ms, lease_token, attempts, fence,
                          fingerprint, created_at, updated_at)
SELECT %(ns)s, %(key)s, 'claimed', %(owner)s::text, t.now + %(lease)s, %(lease)s, %(token)s, 1, 1, %(fp)s::text,
       t.now, t.now FROM t
ON CONFLICT (namespace, key) DO UPDATE SET
    status = 'claimed', owner_run_id = excluded.owner_run_id, lease_until = excluded.lease_until,
    lease_ms = excluded.lease_ms, lease_token = excluded.lease_token,
    attempts = CASE WHEN c.status IS NULL THEN 1 ELSE c.attempts + 1 END,
    fence = c.fence + 1,
    fingerprint = CASE WHEN c.status IS NULL THEN excluded.fingerprint
                       ELSE coalesce(excluded.fingerprint, c.fingerprint) END,
    created_at = CASE WHEN c.status IS NULL THEN excluded.created_at ELSE c.created_at END,
    updated_at = excluded.updated_at, result = NULL, result_ref = NULL, error = NULL
WHERE c.status IS NULL
   OR (c.status = 'claimed' AND (c.lease_until IS NULL OR c.lease_until <= excluded.updated_at)
       AND (excluded.fingerprint IS NULL OR c.fingerprint IS NULL OR c.fingerprint = excluded.fingerprint))
RETURNING c.fence"""
EARLIER_LIST = "SELECT key FROM mooncat_checkpoints WHERE namespace = %(ns)s AND status IS NOT NULL ORDER BY key"


def _earlier_claim(conn: Any, key: str, token: str) -> int | None:
    row = conn.execute(EARLIER_CLAIM, {"ns": "ns", "key": key.encode(), "now": None, "owner": None, "lease": 60_000,
                                       "fp": None, "token": token}).fetchone()
    return None if row is None else int(row[0])


def _earlier_list(conn: Any) -> list[str]:
    """The keys an earlier release lists (it decodes keys with ``surrogatepass``)."""
    return [bytes(k).decode("utf-8", "surrogatepass") for (k,) in conn.execute(EARLIER_LIST, {"ns": "ns"})]


def _empty_postgres(servers: object) -> str:
    from .conftest import empty_server_store

    url: str = servers.url("postgresql")  # type: ignore[attr-defined]
    empty_server_store(url)
    return url


def _has_full_key(conn: Any) -> bool:
    return conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = 'mooncat_checkpoints'::regclass "
                        "AND attname = 'full_key' AND NOT attisdropped").fetchone() is not None


def test_postgresql_keeps_a_key_its_index_cannot_hold_under_its_digest(servers: object) -> None:
    """Such a key's row is named by its digest behind U+DFFF's bytes (no key's UTF-8 holds them), the
    key in ``full_key``; every other key stays under its own bytes, as earlier releases stored it, and
    an earlier release lists the digest's row under that name instead of failing."""
    import psycopg

    url = _empty_postgres(servers)
    with SyncCheckpointClient(url) as cp:
        for key in (LONG, COMPRESSIBLE, "k"):
            assert isinstance(cp.claim("ns", key), Claimed)
    digest_name = "\udfff".encode("utf-8", "surrogatepass") + b"sha256:" + hashlib.sha256(LONG.encode()).hexdigest().encode()
    with psycopg.connect(url, autocommit=True) as conn:
        rows = {bytes(k): None if f is None else bytes(f)
                for k, f in conn.execute("SELECT key, full_key FROM mooncat_checkpoints").fetchall()}
        assert rows == {digest_name: LONG.encode(), COMPRESSIBLE.encode(): None, b"k": None}
        assert _earlier_list(conn) == ["k", COMPRESSIBLE, digest_name.decode("utf-8", "surrogatepass")]


def test_postgresql_adds_full_key_to_an_earlier_releases_table_and_finds_its_rows(servers: object) -> None:
    import psycopg

    url = _empty_postgres(servers)
    with psycopg.connect(url, autocommit=True) as earlier:
        earlier.execute(EARLIER_SCHEMA)
        assert _earlier_claim(earlier, "short", "a" * 32) == 1
        assert _earlier_claim(earlier, COMPRESSIBLE, "b" * 32) == 1
        SyncCheckpointClient(url).close()
        with SyncCheckpointClient(url) as cp:  # a second open finds the column there: nothing to do
            assert _has_full_key(earlier)
            assert cp.get("ns", "short") is not None and cp.done("ns", "short", "a" * 32).status.value == "done"
            assert isinstance(cp.claim("ns", COMPRESSIBLE), Busy)  # the earlier release's row, not a second one
            assert cp.done("ns", COMPRESSIBLE, "b" * 32).key == COMPRESSIBLE
            long_claim = cp.claim("ns", LONG)
            assert isinstance(long_claim, Claimed) and long_claim.fence == 1
            # The earlier release works on beside this one: its statements name their columns.
            assert _earlier_claim(earlier, "later", "c" * 32) == 1
            assert [r.key for r in cp.list("ns")] == ["later", "short", COMPRESSIBLE, LONG]
            assert _earlier_list(earlier)[:3] == ["later", "short", COMPRESSIBLE]
            assert cp.reset("ns", LONG) and isinstance(again := cp.claim("ns", LONG), Claimed) and again.fence == 2
        assert earlier.execute("SELECT count(*) FROM mooncat_checkpoints").fetchone() == (4,)


def test_postgresql_without_full_key_refuses_a_key_its_index_cannot_hold(servers: object) -> None:
    """A client that may not add ``full_key`` (not the table's owner; it may create tables, as opening
    one always needed) opens the table and works on; a key that needs the column is refused with
    InvalidKeyError saying so, and nothing is written. Once the owner adds it, that client uses it."""
    import psycopg

    url = _empty_postgres(servers)
    with psycopg.connect(url, autocommit=True) as owner:
        owner.execute(EARLIER_SCHEMA)
        if owner.execute("SELECT 1 FROM pg_roles WHERE rolname = 'mooncat_worker'").fetchone() is None:
            owner.execute("CREATE ROLE mooncat_worker LOGIN")
        owner.execute("GRANT CREATE ON SCHEMA public TO mooncat_worker")
        owner.execute("GRANT SELECT, INSERT, UPDATE ON mooncat_checkpoints TO mooncat_worker")
        with SyncCheckpointClient(url.replace("//mooncat@", "//mooncat_worker@")) as cp:
            assert isinstance(cp.claim("ns", "short"), Claimed)
            assert isinstance(cp.claim("ns", COMPRESSIBLE), Claimed)
            with pytest.raises(InvalidKeyError, match=r"40000 bytes does not fit mooncat_checkpoints.s index .*full_key"):
                cp.claim("ns", LONG)
            assert cp.get("ns", LONG) is None and [r.key for r in cp.list("ns")] == ["short", COMPRESSIBLE]
            assert not _has_full_key(owner)
            owner.execute("ALTER TABLE mooncat_checkpoints ADD COLUMN full_key bytea")  # as the error says
            assert isinstance(cp.claim("ns", LONG), Claimed)  # the open client finds the column
            assert [r.key for r in cp.list("ns")] == ["short", COMPRESSIBLE, LONG]


# -- a server that does not answer -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_a_call_to_a_stopped_server_fails_within_its_socket_timeout_and_may_have_been_applied(kind: str) -> None:
    """SIGSTOP the server (it accepts connections, the kernel does, and answers nothing): a claim ends
    with BackendUnavailableError near its ``socket_timeout`` (1 s), not never, and says its outcome is
    unknown; the next call, connecting again, ends at its connect timeout (2 s). The bounds asserted
    are 3x those: they tell "returns" from "hangs". Once the server goes on, the lost claim turns out
    applied: reporting it as not applied would have been wrong."""
    from tests.checkpoint_servers import frozen, running_postgres, running_redis

    if kind == "redis":
        server_cm, bounds = running_redis(), "?socket_timeout=1&socket_connect_timeout=2"
    else:
        server_cm, bounds = running_postgres(), "?socket_timeout=1&connect_timeout=2"
    with server_cm as server, SyncCheckpointClient(server.url + bounds) as cp:
        assert isinstance(cp.claim("ns", "before"), Claimed)  # connected, scripts loaded
        with frozen(server):
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError,
                               match=r"cannot claim in ns: no answer within 1 s .* may or may not have been applied"):
                cp.claim("ns", "k")
            assert time.monotonic() - started < 3 * 1
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError):
                cp.get("ns", "k")
            assert time.monotonic() - started < 3 * 2
        deadline = time.monotonic() + 30
        while True:
            try:
                rec = cp.get("ns", "k")
            except BackendUnavailableError:
                rec = None  # the first call after the pause may meet a connection the server ended
            if rec is not None:
                break
            assert time.monotonic() < deadline, "the claim sent before the pause never showed"
            time.sleep(0.05)
        assert rec.status.value == "claimed"
        assert isinstance(cp.claim("ns", "k"), Busy)
