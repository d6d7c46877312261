"""``node.cpus``: the CPU list syntax, and pinning every thread of a process (molens/cpus.py)."""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
import textwrap

import pytest

from molens import cpus
from molens.config import ConfigError, load_dict
from molens.node import cpu_place as node_place


def test_the_module_examples_hold() -> None:
    assert doctest.testmod(cpus).failed == 0


@pytest.mark.parametrize(
    ("spec", "want"),
    [("0", {0}), ("0,2", {0, 2}), ("0-3,6", {0, 1, 2, 3, 6}), (" 1 , 1-2 ", {1, 2}), ("", set()), (",", set())],
)
def test_lists_read_as_taskset_writes_them(spec: str, want: set[int]) -> None:
    assert cpus.parse(spec) == want
    assert cpus.parse(cpus.text(want)) == want


@pytest.mark.parametrize("spec", ["a", "-1", "1-", "1--2", "2-1", "0-4096", "1.5"])
def test_anything_else_is_refused_with_the_part_named(spec: str) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(spec)}: (not a CPU number|a range|CPU numbers go up)"):
        cpus.parse(spec)


def test_auto_is_the_default_and_all_or_empty_leave_the_node_free() -> None:
    assert load_dict({}, env={}).node.cpus == "auto"
    for spec in ("auto", "all", "", "0-1"):
        assert cpus.check_spec(spec) is None, spec
    assert load_dict({"node": {"cpus": "all"}}, env={}).node.cpus == "all"
    with pytest.raises(ConfigError, match=r"node\.cpus.*Auto: not a CPU number or a range such as 0-3 \(or auto, or all\)"):
        load_dict({"node": {"cpus": "Auto"}}, env={})


def test_auto_gives_nodes_sharing_a_host_cpus_of_their_own_from_the_highest() -> None:
    four = frozenset({0, 1, 2, 3})
    assert [cpus.text(cpus.choose(i, four)) for i in range(6)] == ["3", "2", "1", "0", "3", "2"]
    assert cpus.choose(7, frozenset({5})) == {5}
    assert cpus.choose(2, frozenset({2, 9, 4})) == {2}  # the third highest, not the CPU numbered 2 by chance


def _peers(*ids: str) -> list[dict[str, str]]:
    return [{"id": nid, "raft_addr": f"127.0.0.1:{10 + i}", "rpc_addr": f"127.0.0.1:{20 + i}",
             "http_addr": f"127.0.0.1:{30 + i}"} for i, nid in enumerate(ids)]


def test_a_nodes_place_is_its_rank_among_the_peers_ids() -> None:
    peers = _peers("n3", "n1", "n2")  # listed in any order: the place follows the sorted ids
    places = [node_place(load_dict({"node": {"id": nid}, "cluster": {"peers": peers}}, env={})) for nid in ("n1", "n2", "n3")]
    assert places == [0, 1, 2]
    assert node_place(load_dict({}, env={})) == 0  # a lone node
    joiner = load_dict({"node": {"id": "n9"}, "cluster": {"join_addrs": ["127.0.0.1:1"]}}, env={})
    other = load_dict({"node": {"id": "n8"}, "cluster": {"join_addrs": ["127.0.0.1:1"]}}, env={})
    assert node_place(joiner) == node_place(joiner) != node_place(other)  # stable, and not every joiner on one CPU


def test_a_yaml_number_is_a_one_cpu_list() -> None:
    assert load_dict({"node": {"cpus": 0}}, env={}).node.cpus == "0"
    assert load_dict({}, env={"MOLENS_NODE__CPUS": "0-1"}).node.cpus == "0-1"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60,
                          check=False)


def test_pin_moves_threads_already_running_and_those_started_after() -> None:
    one = min(os.sched_getaffinity(0))
    out = _run(f"""
        import os, threading
        from molens import cpus
        started = threading.Event(); stop = threading.Event()
        early = threading.Thread(target=lambda: (started.set(), stop.wait())); early.start(); started.wait()
        cpus.pin(frozenset({{{one}}}))
        late = threading.Thread(target=stop.wait); late.start()
        for t in (early, late):
            print(sorted(os.sched_getaffinity(t.native_id)))
        stop.set()
        print(cpus.text(cpus.allowed()))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [f"[{one}]", f"[{one}]", str(one)]


def test_a_pinned_process_is_widened_back_only_within_what_it_says_it_had() -> None:
    given = sorted(os.sched_getaffinity(0))
    assert len(given) >= 2, "narrowing and widening back needs a process given two CPUs (this machine kind has 2)"
    out = _run(f"""
        import os, threading
        from molens import cpus
        given = frozenset({given})
        stop = threading.Event()
        t = threading.Thread(target=stop.wait); t.start()
        cpus.pin(frozenset({{max(given)}}))
        try:
            cpus.pin(given)
        except ValueError as exc:
            print("refused")
        cpus.pin(given, within=given)
        print(sorted(os.sched_getaffinity(0)) == sorted(given), sorted(os.sched_getaffinity(t.native_id)) == sorted(given))
        stop.set()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["refused", "True True"], out.stdout


def test_a_cpu_the_process_may_not_use_is_refused_naming_what_it_may() -> None:
    allowed = cpus.text(os.sched_getaffinity(0))
    out = _run("""
        from molens import cpus
        try:
            cpus.pin(frozenset({4095}))
        except ValueError as exc:
            print(exc)
    """)
    assert out.stdout.strip() == f"CPU 4095 is not available to this process (it may use {allowed})", out.stderr


def test_a_policy_covers_threads_already_running_and_those_started_after() -> None:
    out = _run("""
        import os, threading
        from molens import cpus
        started = threading.Event(); stop = threading.Event()
        early = threading.Thread(target=lambda: (started.set(), stop.wait())); early.start(); started.wait()
        print(cpus.policy())
        cpus.set_policy("batch")
        late = threading.Thread(target=stop.wait); late.start()
        print([os.sched_getscheduler(t.native_id) == os.SCHED_BATCH for t in (early, late)], cpus.policy())
        cpus.set_policy("normal")
        print([os.sched_getscheduler(t.native_id) == os.SCHED_OTHER for t in (early, late)], cpus.policy())
        stop.set()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["normal", "[True, True] batch", "[True, True] normal"]


def test_threads_started_in_the_block_run_under_its_policy_and_the_starter_goes_back() -> None:
    out = _run("""
        import os, threading
        from molens import cpus
        stop = threading.Event()
        with cpus.threads_started_under("batch"):
            inside = threading.Thread(target=stop.wait); inside.start()
            print(cpus.policy())
        after = threading.Thread(target=stop.wait); after.start()
        print(cpus.policy(), [os.sched_getscheduler(t.native_id) == os.SCHED_BATCH for t in (inside, after)])
        stop.set()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["batch", "normal [True, False]"]


def test_a_policy_must_be_one_the_node_knows() -> None:
    with pytest.raises(ValueError, match=r"^fifo: must be batch or normal$"):
        cpus.set_policy("fifo")
    with pytest.raises(ValueError, match=r"node\.os_scheduling: must be one of http-batch, batch, normal"):
        load_dict({"node": {"os_scheduling": "fifo"}}, env={})
    assert load_dict({}, env={}).node.os_scheduling == "http-batch"
    assert load_dict({}, env={"MOLENS_NODE__OS_SCHEDULING": "batch"}).node.os_scheduling == "batch"
    assert [cpus.process_policy(v) for v in cpus.POLICIES] == ["normal", "batch", "normal"]
