"""kill -9 a real process while it writes: every acknowledged save survives, FSM state matches applied_index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from molens.kv import KVStateMachine
from molens.raft.log import Entry, HardState, Membership
from molens.raft.storage import LmdbLog

pytestmark = pytest.mark.integration

WRITER = textwrap.dedent(
    """
    import sys
    from molens.kv import KVStateMachine, encode_put
    from molens.raft.log import Entry, HardState, Membership
    from molens.raft.storage import LmdbLog

    root = sys.argv[1]
    lg = LmdbLog(root, Membership(("n1",)))
    fsm = KVStateMachine(root)
    idx = lg.last_index()
    while True:
        batch = [Entry(idx + i + 1, 2, data=encode_put(b"k%d" % (idx + i + 1), b"v" * 100)) for i in range(50)]
        lg.save(HardState(2, "n1", idx + 50), batch)
        idx += 50
        print(idx, flush=True)  # acknowledged: durable from here on
        fsm.apply_batch(batch)
    """
)


def test_kill_9_during_writes_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    acked = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while acked < 5000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(10)
    assert acked >= 5000, "writer did not get going"

    with LmdbLog(tmp_path) as lg:
        assert lg.last_index() >= acked
        hs = lg.initial_state()[0]
        assert hs.term == 2 and hs.commit >= acked and hs.commit <= lg.last_index()
        got = lg.entries(1, lg.last_index() + 1)
        assert [e.index for e in got] == list(range(1, lg.last_index() + 1))
        assert all(e.term == 2 for e in got)
        last = lg.last_index()
    with KVStateMachine(tmp_path) as fsm:
        applied = fsm.applied_index()
        assert applied <= last
        # state and applied_index come from the same transaction: keys exist for exactly 1..applied
        assert len(fsm) == applied
        if applied:
            assert fsm.get(b"k%d" % applied) == b"v" * 100
        assert fsm.get(b"k%d" % (applied + 1)) is None
        # a restarted node replays just the tail, not from zero
        with LmdbLog(tmp_path) as lg:
            fsm.apply_batch(lg.entries(applied + 1, last + 1) if applied < last else [])
        assert fsm.applied_total == last - applied and len(fsm) == last


def test_bootstrap_membership_only_applies_to_an_empty_directory(tmp_path: Path) -> None:
    with LmdbLog(tmp_path, Membership(("a", "b"))) as lg:
        lg.save(HardState(1, "a", 0), [Entry(1, 1)])
    with LmdbLog(tmp_path, Membership(("x",))) as lg:
        assert lg.initial_state()[1] == Membership(("a", "b"))
