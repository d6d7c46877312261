"""Faults a test can switch on in a running node (``node.fault_injection``): a clock jump and a slow disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from molens import disk, wallclock
from molens.config import load_dict
from molens.node import Node
from molens.raft.log import Membership
from molens.raft.storage import LmdbLog


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    wallclock.set_offset_ms(0)
    disk.set_sync_delay_ms(0)


def _node(tmp_path: Path, on: bool) -> Node:
    return Node(load_dict({"node": {"id": "n1", "data_dir": str(tmp_path), "fault_injection": on}}))


def test_the_fault_command_is_refused_unless_fault_injection_is_on(tmp_path: Path) -> None:
    reply = _node(tmp_path, on=False)._fault({"cmd": "fault", "clock_offset_ms": 5_000})
    assert reply == {"ok": False, "error": "fault injection is off (node.fault_injection)"}
    assert wallclock.offset_ms() == 0


def test_the_fault_command_shifts_the_clock_and_slows_syncs_each_only_when_given(tmp_path: Path) -> None:
    node = _node(tmp_path, on=True)
    assert node._fault({"cmd": "fault", "clock_offset_ms": -30_000}) == {
        "ok": True, "clock_offset_ms": -30_000, "sync_delay_ms": 0}
    assert node._fault({"cmd": "fault", "sync_delay_ms": 250}) == {
        "ok": True, "clock_offset_ms": -30_000, "sync_delay_ms": 250}
    assert node._fault({"cmd": "fault", "clock_offset_ms": 0, "sync_delay_ms": 0})["clock_offset_ms"] == 0
    assert node._fault({"cmd": "fault", "sync_delay_ms": "slow"})["ok"] is False


def test_a_slow_disk_delays_every_durable_sync_and_nothing_once_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(disk.time, "sleep", waits.append)
    log = LmdbLog(tmp_path / "n1", Membership(voters=("n1",)))
    f = tmp_path / "f"
    f.write_bytes(b"x")
    with open(f, "rb") as fh:
        disk.OS_DISK.fsync(fh.fileno())
    assert waits == []
    disk.set_sync_delay_ms(200)
    with open(f, "rb") as fh:
        disk.OS_DISK.fsync(fh.fileno())
    disk.OS_DISK.fsync_dir(tmp_path)
    log.set_hard_state(log.hard_state())  # one durable commit of the Raft log
    assert waits == [0.2, 0.2, 0.2]
    disk.set_sync_delay_ms(0)
    log.set_hard_state(log.hard_state())
    assert waits == [0.2, 0.2, 0.2]
    log.close()
