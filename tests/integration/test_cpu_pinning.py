"""``node.cpus`` on a real node process: every thread runs on the CPUs named (by default one each,
chosen by the node: ``auto``), the stats say so, and a CPU the process may not use stops the start
with the key named (docs/deploy.md#cpu-pinning).
``node.os_scheduling``: every thread runs under the policy named (docs/deploy.md#os-scheduling)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import urllib3

from molens import cpus
from tests.integration.conftest import Cluster

_http = urllib3.PoolManager(retries=False, timeout=10)


def _threads_cpus(pid: int) -> dict[str, str]:
    """Each live thread of ``pid``: its name -> its ``Cpus_allowed_list``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        allowed = next(line.split(":", 1)[1].strip() for line in status.splitlines()
                       if line.startswith("Cpus_allowed_list:"))
        out[f"{name}/{tid}"] = allowed
    return out


def test_a_pinned_node_runs_every_thread_on_its_cpu_and_says_so(make_cluster: Callable[..., Cluster]) -> None:
    one = str(max(os.sched_getaffinity(0)))
    c = make_cluster(1, {"node": {"cpus": one}}, state_machine="tasks")
    node = c.leader()
    st = json.loads(_http.request("GET", f"{node.http_url}/api/v1/stats?local=1").data)
    assert st["cpus"] == one
    threads = _threads_cpus(node.pid)
    assert len(threads) > 10  # the actors, the HTTP threads, ZeroMQ's I/O threads ...
    assert set(threads.values()) == {one}, threads
    assert f"node runs on CPUs {one} (node.cpus)" in node.tail(200)


def test_a_node_told_all_keeps_every_cpu_it_was_given(make_cluster: Callable[..., Cluster]) -> None:
    c = make_cluster(1, {"node": {"cpus": "all"}}, state_machine="tasks")
    node = c.leader()
    st = json.loads(_http.request("GET", f"{node.http_url}/api/v1/stats?local=1").data)
    assert st["cpus"] == cpus.text(os.sched_getaffinity(0))
    assert set(_threads_cpus(node.pid).values()) == {cpus.text(os.sched_getaffinity(0))}


def test_by_default_each_node_of_a_cluster_sharing_a_host_takes_one_cpu_of_its_own(
    make_cluster: Callable[..., Cluster],
) -> None:
    given = sorted(os.sched_getaffinity(0), reverse=True)
    assert len(given) >= 2, "this test needs a process given two CPUs or more"
    c = make_cluster(3, state_machine="tasks")
    for place, nid in enumerate(sorted(c.nodes)):
        node = c.nodes[nid]
        want = str(given[place % len(given)])
        st = json.loads(_http.request("GET", f"{node.http_url}/api/v1/stats?local=1").data)
        assert st["cpus"] == want, (nid, st["cpus"])
        threads = _threads_cpus(node.pid)
        assert set(threads.values()) == {want}, (nid, threads)
        assert f"node runs on CPU {want} of the {cpus.text(given)} it was given (node.cpus: auto" in node.tail(200)


def test_by_default_a_node_given_one_cpu_is_left_on_it(tmp_path: Path) -> None:
    lowest = str(min(os.sched_getaffinity(0)))  # not the CPU auto would choose when it had two
    c = Cluster(tmp_path, 1, state_machine="tasks")
    node = c.nodes["n1"]
    node.argv = ["taskset", "-c", lowest, *node.argv]
    try:
        c.start()
        node = c.leader()
        st = json.loads(_http.request("GET", f"{node.http_url}/api/v1/stats?local=1").data)
        assert st["cpus"] == lowest
        assert set(_threads_cpus(node.pid).values()) == {lowest}
        assert "node runs on" not in node.tail(200)
    finally:
        c.kill_all()


def test_a_cpu_the_node_may_not_use_stops_its_start_naming_the_key(tmp_path: Path) -> None:
    c = Cluster(tmp_path, 1, {"node": {"cpus": "4095"}}, state_machine="tasks")
    node = c.nodes["n1"]
    try:
        node.start()
        assert node.proc is not None
        assert node.proc.wait(timeout=30) != 0
        out = node.tail(40)
        assert "node.cpus 4095: CPU 4095 is not available to this process (it may use " in out, out
    finally:
        c.kill_all()


def _threads_policies(pid: int) -> dict[str, int]:
    """Each live thread of ``pid``: its name -> its scheduling policy (the kernel's number)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            out[f"{name}/{tid}"] = os.sched_getscheduler(int(tid))
        except (OSError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return out


def test_each_thread_runs_under_the_policy_named_and_the_stats_say_which(
    make_cluster: Callable[..., Cluster],
) -> None:
    """n1 ``batch``: every thread; n2 ``normal``: none; n3 the default ``http-batch``: the HTTP API's
    threads alone (its 32 waitress workers and its I/O loop), ZeroMQ's and the actors' not."""
    c = make_cluster(3, {"node": {"os_scheduling": "batch"}}, start=False, state_machine="tasks")
    c.nodes["n2"].configure({"node": {"os_scheduling": "normal"}})
    c.nodes["n3"].configure({"node": {"os_scheduling": "http-batch"}})
    c.start()
    c.leader()
    for node, name in ((c.nodes["n1"], "batch"), (c.nodes["n2"], "normal"), (c.nodes["n3"], "http-batch")):
        st = json.loads(_http.request("GET", f"{node.http_url}/api/v1/stats?local=1").data)
        assert st["os_scheduling"] == name
        policies = _threads_policies(node.pid)
        zmq = {n: p for n, p in policies.items() if n.startswith("ZMQbg/")}
        assert zmq, policies  # ZeroMQ's threads are there, and inherit the process's policy
        batch = [n for n, p in policies.items() if p == os.SCHED_BATCH]
        if name == "batch":
            assert set(policies.values()) == {os.SCHED_BATCH}, policies
        elif name == "normal":
            assert set(policies.values()) == {os.SCHED_OTHER}, policies
        else:
            assert len(batch) == 33, policies
            assert set(policies.values()) == {os.SCHED_BATCH, os.SCHED_OTHER}, policies
            assert set(zmq.values()) == {os.SCHED_OTHER}, zmq
