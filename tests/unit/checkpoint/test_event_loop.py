"""File and SQLite calls wait in worker threads: a claim stuck behind another process's lock leaves the
event loop free, and goes through as soon as the lock is released."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mooncat_checkpoint import CheckpointClient, Claimed
from mooncat_checkpoint.backends.file import STRIPES


@contextmanager
def foreign_lock(backend: str, tmp_path: Path) -> Iterator[None]:
    """Hold the lock a claim of ns/k needs, as another process would."""
    if backend == "sqlite":
        db = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            db.execute("ROLLBACK")
            db.close()
    else:
        path = tmp_path / "f" / "ns" / ".locks" / ("%02x" % (zlib.crc32(b"k") % STRIPES))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            os.close(fd)


@pytest.mark.parametrize("backend", ["file", "sqlite"])
async def test_a_claim_waiting_for_a_lock_does_not_block_the_event_loop(backend: str, tmp_path: Path) -> None:
    cp = CheckpointClient(f"sqlite://{tmp_path}/s.db" if backend == "sqlite" else f"file://{tmp_path}/f")
    await cp.claim("ns", "warm-up")  # directories and tables exist before the lock is taken
    ticks = 0
    with foreign_lock(backend, tmp_path):
        claim = asyncio.create_task(cp.claim("ns", "k"))
        for _ in range(20):
            await asyncio.sleep(0.01)
            ticks += 1
        assert not claim.done()  # still waiting for the lock, and the loop ran meanwhile
    result = await asyncio.wait_for(claim, 30)
    assert isinstance(result, Claimed) and ticks == 20
    await cp.aclose()


INLINE_PROBE = r"""
import asyncio, sys, threading
from mooncat_checkpoint import CheckpointClient, Claimed

async def main():
    cp = CheckpointClient(sys.argv[1])
    for i in range(50):
        c = await cp.claim("ns", f"k{i}")
        assert isinstance(c, Claimed)
        await cp.done("ns", f"k{i}", c.lease_token, i)
        assert (await cp.get("ns", f"k{i}")).result == i
    print(sorted(t.name for t in threading.enumerate() if t.name.startswith("mooncat-checkpoint-io")))
    await cp.aclose()

asyncio.run(main())
"""


def test_uncontended_sqlite_calls_run_on_the_event_loop_without_a_thread(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", INLINE_PROBE, f"sqlite://{tmp_path}/s.db"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # no worker thread was ever started
    # A file store always goes through a worker thread (its writes fsync).
    out = subprocess.run([sys.executable, "-c", INLINE_PROBE, f"file://{tmp_path}/f"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() != "[]"
