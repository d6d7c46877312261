"""Real network partitions between real node processes (each in a network namespace of its own:
``tests/integration/netns.py``), under a steady load of delayed tasks and a history of task reads and
writes across nodes.

Scenarios: the leader isolated; one follower cut off; the leader and one follower cut from each other
only (non-transitive); that link flapping every second for 30 s; the leader isolated while a fourth
node joins. After each, every link healed, the test checks:

- never two leaders in one term (every node's log of role changes);
- at_most_once: no fire id delivered twice; at_least_once: every acknowledged task delivered;
- the isolated old leader fires nothing planned after it lost its quorum: while it stays cut, every
  callback from its address is of a task due by the cut plus ``dispatch_lead_ms`` and a margin
  (fires it had planned and committed before, held until due);
- linearizable task reads: pause/resume (writes) and ``GET /tasks/{id}?consistency=linearizable``
  (reads) sent to random nodes while the faults happen, checked with the linearizability checker of
  ``tests/sim``; a read from the isolated old leader is refused, never answered stale;
- every replica's digest equal at one applied index.

Each scenario prints one line ``partition: scenario=... key=value ...`` (docs/benchmarks.md reports
them). Skipped with a one-line reason where network namespaces cannot be made.
"""

from __future__ import annotations

import collections
import itertools
import random
import re
import select
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from molens.client import ConflictError, MolensClient
from tests.sim.linearizability import Kind, Op, Status, check_register

from .conftest import NodeProc, wait_for
from .netns import NetnsLab, NsCluster
from .recording_receiver import RecordingReceiver

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # real faults under a shared machine's load; each test has its own deadlines

PLANNED_BY_CUT_MS = 100 + 400
"""A fire the old leader planned before the cut is due at most ``dispatch_lead_ms`` (100) after it;
plus a margin for entries that were committing at the instant of the cut."""


@pytest.fixture
def ns_cluster(lab: NetnsLab, tmp_path: Path) -> Iterator[NsCluster]:
    c = NsCluster(lab, tmp_path / "cluster", 3)
    try:
        c.start()
        yield c
    finally:
        c.kill_all()


@pytest.fixture
def ns_receiver(lab: NetnsLab, ns_cluster: NsCluster) -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver(host=lab.receiver_host)  # the address exists once the namespaces do
    yield rec
    rec.close()


class Load:
    """Creates delayed tasks (both reliabilities) and runs pause/resume/linearizable reads on a few
    periodic tasks, against every node, until :meth:`stop`. Bounded: ``max_s`` and ``max_creates``."""

    def __init__(self, c: NsCluster, rec: RecordingReceiver, max_s: float = 120, max_creates: int = 2000) -> None:
        self.c = c
        self.rec = rec
        self.urls = [n.http_url for n in c.nodes.values()]
        self.acked: dict[str, str] = {}
        """tag -> reliability, for every create the cluster acknowledged."""
        self.due: dict[str, int] = {}
        """tag -> run_at (epoch ms) of every create sent."""
        self.create_errors = 0
        self.ops: list[Op] = []
        self.registers: dict[str, str] = {}
        """register key -> task id (a periodic task whose paused/not-paused state is the register)."""
        self.stale_refused = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_s
        self._max_creates = max_creates
        self._threads: list[threading.Thread] = []
        boot = MolensClient(self.urls, timeout=5, retry_deadline_s=30)
        for k in ("r0", "r1", "r2"):
            t = boot.create(type="periodic", interval_ms=3_600_000, callback_url=rec.url(f"/ok/{k}"))
            self.registers[k] = t["id"]
        boot.close()

    def start(self) -> Load:
        self._threads = [
            threading.Thread(target=self._creates, name="load-create", daemon=True),
            *(threading.Thread(target=self._register_ops, args=(i,), name=f"load-lin{i}", daemon=True) for i in range(2)),
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _running(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._deadline

    def _creates(self) -> None:
        client = MolensClient(self.urls, timeout=3, retry_deadline_s=15)
        n = 0
        while self._running() and n < self._max_creates:
            rel = "at_most_once" if n % 2 else "at_least_once"
            tag = f"{'amo' if n % 2 else 'alo'}{n}-{uuid.uuid4().hex[:6]}"
            n += 1
            run_at = self.due[tag] = time.time_ns() // 1_000_000 + 1500
            try:
                client.create(
                    type="delayed", run_at=run_at, callback_url=self.rec.url(f"/ok/{tag}"),
                    reliability=rel, idempotency_key=tag,
                )
            except Exception:  # unknown or refused: not acknowledged, so no promise to check
                self.create_errors += 1
            else:
                self.acked[tag] = rel
            self._stop.wait(0.05)  # pacing (about 15 creates/s), not waiting for an effect
        client.close()

    def _register_ops(self, seed: int) -> None:
        rng = random.Random(seed)
        client = MolensClient(self.urls, timeout=3, retry_deadline_s=5)
        http = urllib3.PoolManager(retries=False, timeout=4)
        while self._running():
            key = rng.choice(list(self.registers))
            tid = self.registers[key]
            op = Op(next(self._ids), key, Kind.READ, None, 0)
            if rng.random() < 0.5:
                node = rng.choice(list(self.c.nodes.values()))
                op.node = node.node_id
                op.invoke = time.monotonic_ns()
                try:
                    r = http.request("GET", f"{node.http_url}/api/v1/tasks/{tid}?consistency=linearizable")
                except Exception:
                    op.status = Status.UNKNOWN
                else:
                    op.status = Status.OK if r.status == 200 else Status.UNKNOWN
                    if r.status == 200:
                        op.value = 1 if r.json()["status"] == "paused" else 0
                op.resp = time.monotonic_ns()
            else:
                pause = rng.random() < 0.5
                op.kind, op.value = Kind.WRITE, 1 if pause else 0
                op.invoke = time.monotonic_ns()
                try:
                    client.pause(tid) if pause else client.resume(tid)
                except ConflictError:  # already in that state: changed nothing
                    op.status = Status.FAIL
                except Exception:  # outcome unknown, refused after retries, timed out: may have applied
                    op.status = Status.UNKNOWN
                else:
                    op.status = Status.OK
                op.resp = time.monotonic_ns()
            with self._lock:
                self.ops.append(op)
            self._stop.wait(0.03)
        client.close()


def _leaders_by_term(c: NsCluster) -> dict[int, set[str]]:
    out: dict[int, set[str]] = collections.defaultdict(set)
    for n in c.nodes.values():
        for m in re.finditer(r"raft role node=(\S+) role=leader leader=\S+ term=(\d+)", n.log_path.read_text(errors="replace")):
            out[int(m.group(2))].add(m.group(1))
    return out


def _digests(c: NsCluster) -> set[tuple[int, str]] | None:
    ds = {(d["applied_index"], d["digest"]) for d in (n.call("digest") for n in c.running())}
    return ds if len(ds) == 1 else None


def _new_leader(c: NsCluster, old: NodeProc, timeout: float = 15) -> NodeProc:
    """A leader among the nodes other than ``old`` that they all recognise (``old`` is cut off)."""

    def find() -> NodeProc | None:
        sts = {n.node_id: n.status() for n in c.running() if n is not old}
        leaders = {st["leader_id"] for st in sts.values() if st is not None}
        if len(leaders) == 1 and None not in leaders and old.node_id not in leaders:
            lid = leaders.pop()
            return c.nodes[lid]
        return None

    return wait_for(find, timeout, f"a leader other than {old.node_id}")


def _check(c: NsCluster, load: Load, rec: RecordingReceiver, scenario: str, **facts: Any) -> dict[str, Any]:
    """The checks of the module docstring, after the load stopped and every link healed."""
    terms = _leaders_by_term(c)
    two = {t: ns for t, ns in terms.items() if len(ns) > 1}
    assert not two, f"two leaders in one term: {two}"
    alo = [tag for tag, rel in load.acked.items() if rel == "at_least_once"]
    wait_for(lambda: all(rec.by_tag(t) for t in alo), 60, "every acknowledged at_least_once task delivered")
    with rec.lock:
        reqs = list(rec.requests)
    fires: collections.Counter[str] = collections.Counter(
        r.headers.get("X-Fire-ID", "") for r in reqs if r.tag.startswith("amo") and r.kind == "callback"
    )
    twice = {f: k for f, k in fires.items() if k > 1}
    assert not twice, f"at_most_once fires delivered twice: {twice}"
    for key in load.registers:
        ok, why = check_register([o for o in load.ops if o.key == key], initial=0)
        assert ok, f"register {key} is not linearizable: {why}"
    c.wait_converged(60)
    wait_for(lambda: _digests(c), 60, "equal digests at one applied index")
    out = {
        "scenario": scenario,
        "terms": len(terms),
        "max_leaders_per_term": max((len(v) for v in terms.values()), default=0),
        "alo_acked": len(alo),
        "alo_lost": 0,
        "amo_acked": len(load.acked) - len(alo),
        "amo_twice": 0,
        "create_errors": load.create_errors,
        "lin_ops": sum(1 for o in load.ops if o.status is not Status.FAIL),
        "lin_unknown": sum(1 for o in load.ops if o.status is Status.UNKNOWN),
        "linearizable": "yes",
        "digests_equal": "yes",
        **facts,
    }
    print("partition: " + " ".join(f"{k}={v}" for k, v in out.items()))
    return out


def _deliveries_from(rec: RecordingReceiver, addr: str, after_ms: int, before_ms: int) -> list[Any]:
    with rec.lock:
        return [r for r in rec.requests if r.peer == addr and after_ms < r.at_ms < before_ms]


def _stale_read_refused(node: NodeProc, tid: str) -> int:
    """A linearizable read sent to ``node``; returns its status (503 expected from a cut-off leader)."""
    http = urllib3.PoolManager(retries=False, timeout=15)
    return int(http.request("GET", f"{node.http_url}/api/v1/tasks/{tid}?consistency=linearizable").status)


def test_isolating_the_leader_elects_another_and_the_old_one_fires_nothing_more(
    ns_cluster: NsCluster, ns_receiver: RecordingReceiver, lab: NetnsLab
) -> None:
    c = ns_cluster
    old = c.leader()
    load = Load(c, ns_receiver).start()
    time.sleep(3)  # load before the fault (the load runs meanwhile)
    t0 = time.time_ns() // 1_000_000
    lab.isolate(c.index(old))
    new = _new_leader(c, old)
    elected_ms = time.time_ns() // 1_000_000 - t0
    read_status = _stale_read_refused(old, load.registers["r0"])
    time.sleep(max(0.0, 6 - (time.time_ns() // 1_000_000 - t0) / 1000))
    t_heal = time.time_ns() // 1_000_000
    after_cut = _deliveries_from(ns_receiver, lab.addr(c.index(old)), t0, t_heal)
    late = [r for r in after_cut if load.due.get(r.tag, 0) > t0 + PLANNED_BY_CUT_MS]
    lab.heal_all()
    time.sleep(2)
    load.stop()
    assert read_status == 503, "a linearizable read on the cut-off old leader must be refused"
    assert not late, f"the cut-off old leader fired {len(late)} callbacks after losing its quorum: {late[:3]}"
    assert new.node_id != old.node_id
    _check(c, load, ns_receiver, "isolate_leader", new_leader_ms=elected_ms,
           old_leader_fires_after_cut=len(after_cut), old_leader_fires_planned_after_cut=0,
           stale_read_status=read_status)


def _leader_and_follower(c: NsCluster) -> tuple[NodeProc, NodeProc]:
    lead = c.leader()
    return lead, next(n for n in c.nodes.values() if n is not lead)


def _load_through(c: NsCluster, rec: RecordingReceiver, lab: NetnsLab, cut: Callable[[], None], seconds: float) -> tuple[Load, int]:
    """Load for 2 s, ``cut()``, ``seconds`` more, heal every link, 2 s more; the load and how many
    creates were acknowledged while cut."""
    load = Load(c, rec).start()
    time.sleep(2)
    cut()
    before = len(load.acked)
    time.sleep(seconds)
    during = len(load.acked) - before
    lab.heal_all()
    time.sleep(2)
    load.stop()
    return load, during


def test_cutting_one_follower_off_keeps_the_cluster_working(
    ns_cluster: NsCluster, ns_receiver: RecordingReceiver, lab: NetnsLab
) -> None:
    c = ns_cluster
    _, follower = _leader_and_follower(c)
    load, during = _load_through(c, ns_receiver, lab, lambda: lab.isolate(c.index(follower)), 5)
    assert during > 0, "no write was acknowledged while one follower was cut off"
    _check(c, load, ns_receiver, "cut_follower", acked_while_cut=during)


def test_a_non_transitive_cut_between_leader_and_one_follower_loses_nothing(
    ns_cluster: NsCluster, ns_receiver: RecordingReceiver, lab: NetnsLab
) -> None:
    c = ns_cluster
    lead, follower = _leader_and_follower(c)
    # both still reach the third node
    load, during = _load_through(c, ns_receiver, lab, lambda: lab.cut(c.index(lead), c.index(follower)), 6)
    assert during > 0, "no write was acknowledged during the non-transitive cut"
    leader_after = c.leader()
    _check(c, load, ns_receiver, "cut_leader_follower", acked_while_cut=during,
           leader_kept="yes" if leader_after.node_id == lead.node_id else f"no({leader_after.node_id})")


def test_a_link_flapping_every_second_for_30_s_loses_nothing(
    ns_cluster: NsCluster, ns_receiver: RecordingReceiver, lab: NetnsLab
) -> None:
    c = ns_cluster
    lead, follower = _leader_and_follower(c)
    a, b = c.index(lead), c.index(follower)
    load = Load(c, ns_receiver).start()
    end = time.monotonic() + 30
    flaps = 0
    while time.monotonic() < end:  # bounded: 30 s, one change a second
        lab.cut(a, b)
        time.sleep(1)
        lab.heal(a, b)
        time.sleep(1)
        flaps += 1
    time.sleep(2)
    load.stop()
    _check(c, load, ns_receiver, "flap_30s", flaps=flaps)


def test_isolating_the_leader_while_a_node_joins_ends_with_one_membership(
    ns_cluster: NsCluster, ns_receiver: RecordingReceiver, lab: NetnsLab
) -> None:
    c = ns_cluster
    old = c.leader()
    load = Load(c, ns_receiver).start()
    time.sleep(2)
    n4 = c.add_joiner("n4")
    n4.start()
    n4.wait_ready()
    # cut the leader as soon as the add_node went through (n4 a learner or being promoted)
    wait_for(lambda: "n4" in ((old.status() or {}).get("learners", []) + (old.status() or {}).get("voters", [])),
             20, "the leader to add n4")
    lab.isolate(c.index(old))
    new = _new_leader(c, old, timeout=20)
    time.sleep(4)
    lab.heal_all()
    wait_for(lambda: all("n4" in (n.status() or {}).get("voters", []) for n in c.running()), 60, "n4 a voter everywhere")
    time.sleep(1)
    load.stop()
    memberships = {tuple(sorted((n.status() or {}).get("voters", []))) for n in c.running()}
    assert memberships == {("n1", "n2", "n3", "n4")}, memberships
    _check(c, load, ns_receiver, "isolate_leader_during_join", new_leader=new.node_id)


_UDP_ECHO = "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind((sys.argv[1],7199))\n" \
    "print('up',flush=True)\nwhile True: print(s.recv(64).decode(),flush=True)"


def _udp_listener(lab: NetnsLab, i: int) -> subprocess.Popen[str]:
    """A process in node ``i``'s namespace printing every datagram it gets on ``addr(i):7199``."""
    p = subprocess.Popen(["ip", "netns", "exec", lab.ns[i], sys.executable, "-c", _UDP_ECHO, lab.addr(i)],
                         stdout=subprocess.PIPE, text=True)
    assert _line(p) == "up"
    return p


def _line(p: subprocess.Popen[str], timeout: float = 30) -> str:
    """The next line ``p`` prints; fails at the deadline."""
    assert p.stdout is not None
    if not select.select([p.stdout], [], [], timeout)[0]:
        pytest.fail(f"no line from the listener within {timeout} s")
    return p.stdout.readline().rstrip("\n")


def _udp_send(lab: NetnsLab, src: int, dst: int, word: str) -> None:
    code = "import socket,sys\nsocket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(sys.argv[2].encode(),(sys.argv[1],7199))"
    subprocess.run(["ip", "netns", "exec", lab.ns[src], sys.executable, "-c", code, lab.addr(dst), word], check=True)


def test_a_one_way_cut_drops_what_one_node_sends_and_nothing_the_other_sends_back(lab: NetnsLab) -> None:
    lab.add_node(1)
    lab.add_node(2)
    at1, at2 = _udp_listener(lab, 1), _udp_listener(lab, 2)
    try:
        lab.one_way(1, 2)
        _udp_send(lab, 1, 2, "dropped")
        _udp_send(lab, 2, 1, "through")
        assert _line(at1) == "through"
        lab.heal_all()
        _udp_send(lab, 1, 2, "healed")
        assert _line(at2) == "healed"  # not "dropped" first
    finally:
        at1.kill()
        at2.kill()
