"""``thread_cpu_s`` / ``thread_switches``: CPU seconds and context switches of live threads, summed by
name without the numeric suffix."""

from __future__ import annotations

import os
import queue
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


def test_threads_python_did_not_start_count_by_their_kernel_name() -> None:
    """ZeroMQ's I/O thread is native: a reading that left it out would miss the CPU and switches of
    every message a node sends to its peers. A PAIR of sockets over inproc does not touch it, so
    the messages go over TCP on 127.0.0.1."""
    import zmq

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        port = a.bind_to_random_port("tcp://127.0.0.1")
        b.connect(f"tcp://127.0.0.1:{port}")
        before = thread_switches()
        for _ in range(200):
            b.send(b"x" * 64)
            a.recv()
        after, cpu = thread_switches(), thread_cpu_s()
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()
    assert "ZMQbg/IO" in after and "ZMQbg/IO/0" not in after
    assert after["ZMQbg/IO"] - before.get("ZMQbg/IO", 0) >= 100  # it woke for the messages it carried
    assert "ZMQbg/IO" in cpu


def test_threads_that_run_in_short_bursts_are_charged_what_they_ran() -> None:
    """32 threads that each run a few microseconds per item and then wait for the next (as waitress
    workers and I/O loops do): their readings add up to what the process used, which the kernel
    counts exactly. Clock-tick samples charged such threads about a quarter less."""
    items: queue.Queue[int | None] = queue.Queue()

    def work() -> None:
        while items.get() is not None:
            sum(range(300))

    threads = [threading.Thread(target=work, name=f"burst-{i}") for i in range(32)]
    for t in threads:
        t.start()
    try:
        before, t0 = thread_cpu_s(), os.times()
        for i in range(60_000):
            items.put(i)
            if i % 4 == 0:
                time.sleep(0)
        while not items.empty():
            time.sleep(0.01)
        after, t1 = thread_cpu_s(), os.times()
    finally:
        for _ in threads:
            items.put(None)
        for t in threads:
            t.join()
    process = (t1.user + t1.system) - (t0.user + t0.system)
    counted = sum(v - before.get(k, 0.0) for k, v in after.items() if not k.endswith(".sys"))
    assert process > 0.3, process
    assert 0.9 * process <= counted <= 1.1 * process, (counted, process)
