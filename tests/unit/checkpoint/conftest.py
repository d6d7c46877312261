"""Fixtures for the mooncat_checkpoint unit tests.

* ``async def`` tests run in a fresh event loop each (``asyncio.run``); no plugin needed.
* ``FakeClock``: epoch milliseconds that move only when a test says so.
* ``backend`` is parametrized over memory, file, sqlite, redis and postgresql; ``make_client`` opens
  clients on the same store (for memory, the same client: ``memory://`` is private to its client) and
  closes them. Redis and PostgreSQL are real servers started once per session
  (``tests.checkpoint_servers``) and emptied before each test; a missing server binary fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mooncat_checkpoint import CheckpointClient, SyncCheckpointClient

BACKENDS = ("memory", "file", "sqlite", "redis", "postgresql")
START_MS = 1_700_000_000_000


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
    return None


class FakeClock:
    """A clock for ``CheckpointClient(clock=...)``: ``now`` ms since the epoch, moved by ``advance``."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def store_url(backend: str, tmp: Path) -> str:
    return {"memory": "memory://", "file": f"file://{tmp}/store", "sqlite": f"sqlite://{tmp}/store.db"}[backend]


class _Servers:
    """The session's Redis and PostgreSQL, started on first use and stopped at the end of the session."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.urls: dict[str, str] = {}

    def url(self, backend: str) -> str:
        if backend not in self.urls:
            from tests.checkpoint_servers import ServerMissing, postgres_server, redis_server

            try:
                self.urls[backend] = self.stack.enter_context(
                    redis_server() if backend == "redis" else postgres_server()
                )
            except ServerMissing as e:
                pytest.fail(str(e))
        return self.urls[backend]


@pytest.fixture(scope="session")
def servers() -> Iterator[_Servers]:
    s = _Servers()
    with s.stack:
        yield s


def empty_server_store(url: str) -> None:
    """Remove every checkpoint from a Redis or PostgreSQL store (each test starts on an empty one)."""
    if url.startswith("redis"):
        import redis

        with redis.Redis.from_url(url) as r:
            r.flushdb()
    else:
        import psycopg

        from mooncat_checkpoint.backends.postgres import TABLE

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (namespace text)")  # the first test makes it
            conn.execute(f"DROP TABLE {TABLE}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend in ("redis", "postgresql"):
        server_url: str = request.getfixturevalue("servers").url(backend)
        empty_server_store(server_url)
        return server_url
    return store_url(backend, tmp_path)


@pytest.fixture
def make_client(url: str, clock: FakeClock) -> Iterator[Callable[[], CheckpointClient]]:
    """Clients on the test's store, all on the fake clock. For memory:// every call returns the first."""
    made: list[CheckpointClient] = []

    def make() -> CheckpointClient:
        if made and url.startswith("memory"):
            return made[0]
        made.append(CheckpointClient(url, clock=clock))
        return made[-1]

    yield make
    for cp in made:
        cp._engine.close()


@pytest.fixture
def cp(make_client: Callable[[], CheckpointClient]) -> CheckpointClient:
    return make_client()


@pytest.fixture
def sync_cp(url: str, clock: FakeClock) -> Iterator[SyncCheckpointClient]:
    with SyncCheckpointClient(url, clock=clock) as client:
        yield client
