"""Clock skew on a real 3-node cluster (docs/architecture.md#clock-skew): n3's clock is shifted with
``node.clock_offset_ms`` (the whole process reads ``molens.wallclock``).

+60 s: once n3 has judged its clock (it may win the very first election before that, and then
plans nothing and steps down) it refuses to campaign (a transfer to it and two leader kills never
make it leader), says why on /readyz and /metrics, gets no fires, and nothing is delivered before
its due time.
+300 ms (under ``raft.max_clock_skew_ms``): n3 may lead and work, and fires stay within the bound
of their due time.
A jump of the leader's clock by 15 s ahead or back while it runs: periodic tasks keep their pace.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
import yaml

from molens.admin import AdminError
from molens.client import MolensClient

from .conftest import Cluster, NodeProc, _merge, wait_for
from .recording_receiver import RecordingReceiver

pytestmark = pytest.mark.slow

_http = urllib3.PoolManager(retries=False, timeout=5)


@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _skewed_cluster(make_cluster: Any, offset_ms: int) -> Cluster:
    c: Cluster = make_cluster(3, start=False, state_machine="tasks")
    n3 = c.nodes["n3"]
    n3.settings = _merge(n3.settings, {"node": {"clock_offset_ms": offset_ms}})
    n3.config_path.write_text(yaml.safe_dump(n3.settings, sort_keys=False))
    return c.start()


def _metric(n: NodeProc, name: str) -> float | None:
    r = _http.request("GET", _base(n) + "/metrics")
    m = re.search(rf"^{name} (\S+)$", r.data.decode(), re.M)
    return float(m.group(1)) if m else None


def _create(client: MolensClient, rec: RecordingReceiver, tag: str, n: int, ahead_ms: int) -> dict[str, int]:
    due = {}
    for i in range(n):
        run_at = time.time_ns() // 1_000_000 + ahead_ms
        t = client.create(
            type="delayed", run_at=run_at, callback_url=rec.url(f"/ok/{tag}{i}"),
            reliability="at_most_once" if i % 2 else "at_least_once",
        )
        due[f"{tag}{i}"] = run_at
        assert t["next_run_at"] == run_at
    return due


def _delivered(rec: RecordingReceiver, due: dict[str, int]) -> dict[str, int] | None:
    got = {tag: min((r.at_ms for r in rec.by_tag(tag)), default=-1) for tag in due}
    return got if all(v >= 0 for v in got.values()) else None


def _led_after_its_clock_was_judged(n: NodeProc) -> bool:
    text = n.log_path.read_text(errors="replace")
    judged = text.find("clock: clock off from the majority")
    assert judged >= 0, "n3 never logged why it does not lead"
    return f"raft leader node={n.node_id} " in text[judged:]


@pytest.mark.timeout(240)
def test_a_node_60_s_ahead_never_leads_and_never_fires_early(make_cluster: Any, receiver: RecordingReceiver) -> None:
    c = _skewed_cluster(make_cluster, 60_000)
    n3 = c.nodes["n3"]
    c.leader(timeout=30)  # n3 may win the first election, before any clock estimate: it plans nothing

    def says_why() -> bool:
        r = _http.request("GET", _base(n3) + "/readyz")
        return r.status == 503 and "clock off from the majority" in json.loads(r.data)["error"]["message"]

    wait_for(says_why, 30, "n3's /readyz to say its clock is off")
    leader = c.leader(timeout=30)
    assert leader is not n3
    assert _metric(n3, "molens_clock_skewed") == 1
    skew = _metric(n3, "molens_clock_skew_ms")
    assert skew is not None and -61_000 < skew < -59_000  # the others are 60 s behind it
    for n in c.nodes.values():
        if n is not n3:
            assert _http.request("GET", _base(n) + "/readyz").status == 200
            assert _metric(n, "molens_clock_skewed") == 0
    # a transfer to n3 does not make it leader: it refuses to campaign (checked in its log at the end)
    with contextlib.suppress(AdminError):  # the transfer may also be refused or time out
        leader.call("transfer_leader", to="n3", timeout_s=5)
    assert c.leader(timeout=30) is not n3
    client = MolensClient([_base(n) for n in c.nodes.values()], retry_deadline_s=60, max_attempts=1_000)
    due = _create(client, receiver, "a", 10, 3_000)
    for _ in range(2):  # two leader losses (back at once, as a supervisor restarts it): n3 is never elected
        old = c.leader(timeout=30)
        old.kill()
        old.start()
        old.wait_ready()
        assert c.leader(timeout=30) is not n3
    due |= _create(client, receiver, "b", 10, 2_000)
    got = wait_for(lambda: _delivered(receiver, due), 60, "every callback")
    early = {tag: due[tag] - at for tag, at in got.items() if at < due[tag]}
    assert early == {}, f"fired early (ms): {early}"
    assert not _led_after_its_clock_was_judged(n3)
    workers = {e["worker"] for e in client.executions()}
    assert workers and "n3" not in workers  # its worker would have let them go 60 s early
    client.close()


@pytest.mark.timeout(180)
def test_a_node_300_ms_ahead_may_lead_and_fires_stay_within_the_bound(
    make_cluster: Any, receiver: RecordingReceiver
) -> None:
    c = _skewed_cluster(make_cluster, 300)
    n3 = c.nodes["n3"]
    c.leader(timeout=30)
    wait_for(lambda: _metric(n3, "molens_clock_skewed") == 0, 30, "n3's clock to be judged fine")
    if c.leader() is not n3:
        c.leader().call("transfer_leader", to="n3", timeout_s=5)
    wait_for(lambda: c.leader() is n3, 30, "n3 to lead")
    client = MolensClient([_base(n) for n in c.nodes.values()], retry_deadline_s=60, max_attempts=1_000)
    due = _create(client, receiver, "c", 30, 2_000)
    got = wait_for(lambda: _delivered(receiver, due), 60, "every callback")
    bound = 500  # raft.max_clock_skew_ms
    too_early = {tag: due[tag] - at for tag, at in got.items() if at < due[tag] - bound}
    assert too_early == {}, f"fired earlier than the skew bound (ms): {too_early}"
    assert "n3" in {e["worker"] for e in client.executions()}  # n3 works too
    client.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("jump_ms", [15_000, -15_000])
def test_a_leader_whose_clock_jumps_keeps_periodic_tasks_at_their_pace(
    make_cluster: Any, receiver: RecordingReceiver, jump_ms: int
) -> None:
    """The leader's clock jumps 15 s ahead or back while it runs (the admin ``fault`` command), for
    4 s. It must neither plan from that clock nor give up the fires in flight as past their deadline
    (ahead, it did both: the retries, and the periodic task's next occurrence, came 15 s late), and
    must step down once judged (back, its clock probe slept 15 s on a wall-clock alarm first); a 1 s
    periodic task waits at most 6 s between two occurrences throughout."""
    c: Cluster = make_cluster(3, extra={"node": {"fault_injection": True}}, state_machine="tasks")
    leader = c.leader(timeout=30)
    wait_for(lambda: _metric(leader, "molens_clock_skewed") == 0, 30, "the leader's clock to be judged fine")
    client = MolensClient([_base(n) for n in c.nodes.values()], retry_deadline_s=60, max_attempts=1_000)
    client.create(type="periodic", interval_ms=1_000, callback_url=receiver.url("/ok/tick"), reliability="at_least_once")
    wait_for(lambda: len(receiver.by_tag("tick")) >= 3 or None, 30, "three occurrences")
    leader.call("fault", clock_offset_ms=jump_ms)
    time.sleep(4)  # the fault's own duration
    leader.call("fault", clock_offset_ms=0)
    after = time.time_ns() // 1_000_000
    wait_for(lambda: sum(1 for r in receiver.by_tag("tick") if r.at_ms > after) >= 5 or None, 60,
             "five occurrences after the clock came back")
    firsts = sorted({r.headers["X-Fire-ID"]: r.at_ms for r in reversed(receiver.by_tag("tick"))}.values())
    gaps = [b - a for a, b in itertools.pairwise(firsts)]
    assert max(gaps) <= 6_000, f"a 1 s periodic task waited {max(gaps)} ms (gaps {gaps})"
    client.close()


def _not_sent_events(n: NodeProc) -> float:
    r = _http.request("GET", _base(n) + "/metrics")
    m = re.search(r'^molens_scheduler_events_total\{event="not_sent"\} (\S+)$', r.data.decode(), re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.timeout(180)
def test_fires_a_worker_gives_back_when_its_clock_steps_use_up_no_attempt(
    make_cluster: Any, receiver: RecordingReceiver
) -> None:
    """docs/architecture.md#not-sent: a worker's clock steps 15 s back while fires planned a second
    ahead wait on it for their time; it gives them back unsent, and the leader plans them again
    without using up an attempt. Every at_least_once task with ``max_retries`` 0 is delivered and
    none fails (each fire given back used to end its task ``failed``, its one attempt used up by a
    request that never left the worker)."""
    c: Cluster = make_cluster(3, extra={"node": {"fault_injection": True}, "scheduler": {"dispatch_lead_ms": 1_000}},
                              state_machine="tasks")
    leader = c.leader(timeout=30)
    worker = next(n for n in c.nodes.values() if n is not leader)
    wait_for(lambda: _metric(worker, "molens_clock_skewed") == 0, 30, "the worker's clock to be judged fine")
    client = MolensClient([_base(n) for n in c.nodes.values()], retry_deadline_s=60, max_attempts=1_000)
    start = time.time_ns() // 1_000_000 + 4_000
    n = 600  # 100 due per second for 6 s: a third of them held by the worker at any time
    ids = client.create_many_ids([
        {"type": "delayed", "run_at": start + i * 10, "callback_url": receiver.url(f"/ok/g{i}"),
         "reliability": "at_least_once", "max_retries": 0}
        for i in range(n)])
    wait_for(lambda: time.time_ns() // 1_000_000 >= start + 2_000 or None, 30, "the fires to be under way")
    worker.call("fault", clock_offset_ms=-15_000)
    time.sleep(4)  # the fault's own duration
    worker.call("fault", clock_offset_ms=0)
    wait_for(lambda: sum(1 for _ in client.list(status=("done", "failed"))) == n or None, 90, "every task to end")
    failed = [t["id"] for t in client.list(status="failed")]
    assert failed == [], f"{len(failed)} tasks failed: {[list(client.executions(i)) for i in failed[:3]]}"
    assert len(ids) == n and all(receiver.by_tag(f"g{i}") for i in range(n))
    given_back = _not_sent_events(c.leader(timeout=30))
    assert given_back > 0, "the worker gave no fire back: the test did not exercise what it is for"
    client.close()
