"""``thread_cpu_s`` / ``thread_switches``: CPU seconds and context switches of live threads, summed by
name without the numeric suffix."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from molens.web.node_stats import thread_cpu_s, thread_switches

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_sums_threads_by_name_without_suffix() -> None:
    stop = threading.Event()
    spun = threading.Barrier(3)

    def spin() -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.15:  # CPU time of this thread, not wall time
            pass
        spun.wait()
        stop.wait()

    threads = [threading.Thread(target=spin, name=f"busy-{i}") for i in (3, 12)]
    for t in threads:
        t.start()
    try:
        spun.wait()
        cpu = thread_cpu_s()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert "busy-3" not in cpu and "busy-12" not in cpu
    assert cpu["busy"] >= 0.25  # both threads' 0.15 s, at clock-tick resolution
    assert "MainThread" in cpu


def test_pykka_names_lose_their_counter() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="RaftPeer-17")
    t.start()
    try:
        assert "RaftPeer" in thread_cpu_s()
    finally:
        stop.set()
        t.join()


def test_switches_count_each_time_a_thread_blocks_summed_by_name() -> None:
    """Each ``sleep`` blocks the thread once: 40 sleeps in each of two threads are at least 80
    switches under one name; a thread that has not run since is not charged for them."""
    slept = threading.Barrier(3)
    stop = threading.Event()

    def sleepy() -> None:
        for _ in range(40):
            time.sleep(0.001)
        slept.wait()
        stop.wait()

    idle = threading.Thread(target=stop.wait, name="idle-1")
    idle.start()
    before = thread_switches()
    threads = [threading.Thread(target=sleepy, name=f"sleepy-{i}") for i in (1, 2)]
    for t in threads:
        t.start()
    try:
        slept.wait()
        after = thread_switches()
    finally:
        stop.set()
        for t in [*threads, idle]:
            t.join()
    assert "sleepy-1" not in after and "sleepy" in after
    assert after["sleepy"] >= 80
    assert after["idle"] - before["idle"] <= 2  # blocked the whole time: no new switches of its own
    assert all(isinstance(v, int) for v in after.values())
