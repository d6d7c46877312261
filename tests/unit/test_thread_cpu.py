"""``thread_cpu_s``: CPU seconds of live threads, summed by name without the numeric suffix."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from molens.web.node_stats import thread_cpu_s

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
