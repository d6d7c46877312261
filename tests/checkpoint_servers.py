"""Real Redis and PostgreSQL servers for the checkpoint tests and benchmark: Debian's binaries, started
on 127.0.0.1 on free ports in temp directories, stopped by PID.

scripts/test installs ``redis-server`` and ``postgresql``; a missing binary fails the test that
needs it (it is never skipped). PostgreSQL refuses to run as root, so it runs as the ``postgres``
system user (``Popen(user=...)``: the PID we keep is the server's own). ``running_redis`` and
``running_postgres`` also give that PID, and ``frozen`` stops a server with SIGSTOP (PostgreSQL's
postmaster and every process it forked) and always continues it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator

from tests.integration.conftest import free_ports

__all__ = ["redis_server", "postgres_server", "running_redis", "running_postgres", "RunningServer", "frozen",
           "ServerMissing"]

_START_TIMEOUT_S = 30.0


class ServerMissing(RuntimeError):
    """The server binary is not installed (scripts/test installs it)."""


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _log_tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-20:])
    except OSError:
        return "(no log)"


@dataclasses.dataclass(frozen=True, slots=True)
class RunningServer:
    url: str
    pid: int


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway redis-server; yields ``redis://127.0.0.1:PORT/0``."""
    with running_redis() as server:
        yield server.url


@contextlib.contextmanager
def postgres_server(*, fsync: bool = False) -> Iterator[str]:
    """A throwaway PostgreSQL cluster; yields ``postgresql://mooncat@127.0.0.1:PORT/postgres`` (see ``running_postgres``)."""
    with running_postgres(fsync=fsync) as server:
        yield server.url


def _descendants(pid: int) -> list[int]:
    """The processes ``pid`` forked (and theirs), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat, encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@contextlib.contextmanager
def frozen(server: RunningServer) -> Iterator[None]:
    """The server and every process it forked stopped (SIGSTOP): it accepts TCP connections (the
    kernel does) and answers nothing. Continued (SIGCONT) on the way out, whatever happens."""
    stopped: list[int] = []
    try:
        for pid in [server.pid, *_descendants(server.pid)]:  # the parent first: it forks no more
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue  # a child that ended meanwhile
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def running_redis() -> Iterator[RunningServer]:
    """A throwaway redis-server: its URL (``redis://127.0.0.1:PORT/0``) and PID."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerMissing("redis-server is not installed: scripts/test installs it (apt-get install redis-server)")
    import redis

    tmp = tempfile.mkdtemp(prefix="mooncat-redis-")
    (port,) = free_ports(1)
    log = os.path.join(tmp, "redis.log")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp, "--save", "", "--appendonly", "no",
         "--logfile", log, "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {port}:\n{_log_tail(log)}") from None
                time.sleep(0.02)
        yield RunningServer(url, proc.pid)
    finally:
        _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise ServerMissing(f"PostgreSQL's {name} is not installed: scripts/test installs it (apt-get install postgresql)")
    return found[-1]


@contextlib.contextmanager
def running_postgres(*, fsync: bool = False) -> Iterator[RunningServer]:
    """A throwaway PostgreSQL cluster (initdb in a temp dir, run as the ``postgres`` user when we are
    root): its URL, ``postgresql://mooncat@127.0.0.1:PORT/postgres``, and the postmaster's PID.
    ``fsync=False`` for tests: a crash of the machine is not what they check."""
    initdb, postgres = _pg_bin("initdb"), _pg_bin("postgres")
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServerMissing("no 'postgres' system user to run PostgreSQL as (apt-get install postgresql)") from None
        user = "postgres"
    tmp = tempfile.mkdtemp(prefix="mooncat-pg-")
    data = os.path.join(tmp, "data")
    log = os.path.join(tmp, "postgres.log")
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(tmp, pw.pw_uid, pw.pw_gid)
    run_as = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    proc: subprocess.Popen[bytes] | None = None
    try:
        out = subprocess.run(
            [initdb, "-D", data, "-U", "mooncat", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale", "C"],
            capture_output=True, timeout=120, check=False, cwd=tmp, **run_as,  # type: ignore[call-overload]
        )
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr.decode(errors='replace')[-2000:]}")
        (port,) = free_ports(1)
        with open(log, "wb") as logf:
            proc = subprocess.Popen(
                [postgres, "-D", data, "-p", str(port), "-k", tmp, "-c", "listen_addresses=127.0.0.1",
                 "-c", f"fsync={'on' if fsync else 'off'}", "-c", "max_connections=50"],
                stdout=logf, stderr=subprocess.STDOUT, cwd=tmp, **run_as,  # type: ignore[call-overload]
            )
        url = f"postgresql://mooncat@127.0.0.1:{port}/postgres"
        import psycopg

        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start on port {port}:\n{_log_tail(log)}") from None
                time.sleep(0.05)
        yield RunningServer(url, proc.pid)
    finally:
        if proc is not None:
            _stop(proc, signal.SIGINT)  # "fast" shutdown
        shutil.rmtree(tmp, ignore_errors=True)
