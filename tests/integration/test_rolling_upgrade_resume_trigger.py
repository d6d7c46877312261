"""A rolling upgrade to fire batch version 8 (docs/deploy.md#rolling-upgrade) on real nodes: two
nodes of this release and one of the release before (``dea6445``, version 7, its code taken from
git) in one 3-node cluster, then that node restarted on this release's code on its data.

Version 8 added three entry fields that replicas of version 7 do not apply, so the leader (the API,
the Monitor) sets them only once every member advertised version 8 (``Scheduler.replicas_read``):

* ``Results.ack_from``: a delayed task paused in its ACK phase and resumed probes no sooner than
  ``ack_delay_ms`` after its wait began (version 7: at once);
* ``ResumeTasks.records_dropped``: a periodic task resumed from now writes the instants it drops as
  one ``skipped`` row (version 7: none);
* ``TriggerTask.refuses_planned``: an ``overlap: allow`` task is not triggered while an occurrence
  sent ahead of its instant (dispatch lead) is on its way (version 7: triggered, and that instant
  fires twice).

Mixed, each rule applies as version 7 applied it, and every replica holds the same state at one
applied index; after the upgrade each applies as version 8 says, and again every replica agrees.

This release stores a task record one field longer (``ack_from_ms``, appended) than the release
before. Its admin ``digest`` hashes every record as this release writes it
(``molens.fsm.store.canonical_record``), but the node of the release before hashes its own layout, so
while it runs the replicas are compared by :func:`_state_digest`, the same hash read from each
node's files (it is the admin ``digest`` of a node of this release: checked). Once all three run
this release, their admin digests agree although n3's files still hold records in the earlier
layout (checked: the stored bytes differ). The history (``skipped`` rows), which no digest covers,
is compared row by row through each node's API.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest

from molens.fsm.machine import PAUSED_DROP
from molens.fsm.store import DATABASES, canonical_record

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import Received, RecordingReceiver
from .rest import call, wait_serving
from .test_rolling_upgrade import LAUNCH, ROOT, release_tree, start_beside

pytestmark = pytest.mark.slow

RELEASE_BEFORE = "dea6445"
"""The last commit of fire batch version 7 (``RESUME_VERSION``): it applies none of version 8's fields."""
INTERVAL_MS = 1_000
LEAD_MS = 900
"""``scheduler.dispatch_lead_ms``: an allow task's next occurrence is on its way (sent ahead of its
instant) 900 ms of every 1,000, so a trigger aimed 450 ms before an instant lands in that window
whatever the scheduling noise."""
AIM_MS = 450
ACK_DELAY_MS = 5_000
PLANNED = "planned for a later instant"
DECODE_TROUBLE = re.compile(r"Traceback|bad frame|undecodable|failed to apply|unknown frame tag|CodecError")
VOLATILE_META = (b"applied_index", b"applied_term", b"counts")
"""The meta keys ``TaskStore.digest_state`` leaves out."""


@pytest.fixture(scope="module")
def release_before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``molens`` package of the release before version 8, extracted from this repository's history."""
    out = release_tree(tmp_path_factory, RELEASE_BEFORE)
    if "\nFIRE_BATCH_VERSION = 7\n" not in (out / "molens" / "delivery" / "__init__.py").read_text():
        pytest.fail(f"{RELEASE_BEFORE} does not advertise fire batch version 7")
    return out


def _this_release() -> list[str]:
    """A node running this tree's code (the environment's editable install may name another checkout)."""
    return [sys.executable, "-c", LAUNCH, str(ROOT)]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _until(ms: int) -> None:
    """Wait for the wall clock (the nodes' and the receiver's) to reach ``ms``."""
    wait_for(lambda: _now_ms() >= ms, (ms - _now_ms()) / 1000 + 5, f"the clock to reach {ms}", interval=0.005)


def _ok(n: NodeProc, method: str, path: str, body: Any = None, want: int = 200) -> Any:
    st, out = call(n, method, path, body)
    assert st == want, f"{method} {path} on {n.node_id}: {st} {out}"
    return out


def _leader(c: Cluster, mixed: bool) -> NodeProc:
    n = c.leader(timeout=30)
    if mixed:
        assert n.node_id != "n3", "the node of the release before leads"
    wait_serving(n)
    return n


def _create(n: NodeProc, body: dict[str, Any]) -> str:
    return str(_ok(n, "POST", "/api/v1/tasks", body, want=201)["id"])


def _task(n: NodeProc, tid: str) -> dict[str, Any]:
    out: dict[str, Any] = _ok(n, "GET", f"/api/v1/tasks/{tid}")
    return out


def _executions(n: NodeProc, tid: str) -> list[dict[str, Any]]:
    """The task's history on ``n``'s own replica."""
    out: list[dict[str, Any]] = _ok(n, "GET", f"/api/v1/tasks/{tid}/executions?limit=1000")["items"]
    return out


def _paused_drops(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in rows if e["result"] == "skipped" and PAUSED_DROP in (e["execution_result"] or "")]


def _scheduled(r: Received) -> int:
    return int(r.headers["X-Molens-Scheduled-At"])


def _state_digest(n: NodeProc, canonical: bool = True) -> tuple[int, str]:
    """``(applied_index, sha256)`` of ``n``'s state machine as this release's ``TaskStore.digest_state``
    hashes it, read from its files (each record as this release writes it); ``canonical`` False: the
    stored bytes as they are."""
    env = lmdb.open(str(n.data_dir / "fsm"), readonly=True, max_dbs=len(DATABASES) + 1)
    try:
        dbs = [(name, env.open_db(name, create=False)) for name in DATABASES]
        h = hashlib.sha256()
        with env.begin() as txn:
            applied = txn.get(b"applied_index", db=dict(dbs)[b"meta"])
            for name, db in dbs:
                h.update(name)
                for k, v in txn.cursor(db=db):
                    if name == b"meta" and bytes(k) in VOLATILE_META:
                        continue
                    value = canonical_record(name, bytes(k), bytes(v)) if canonical else bytes(v)
                    h.update(len(k).to_bytes(8, "big") + bytes(k) + len(value).to_bytes(8, "big") + value)
        return (int.from_bytes(applied, "big") if applied else 0), h.hexdigest()
    finally:
        env.close()


def _at_one_index(c: Cluster) -> dict[str, tuple[int, str, str]]:
    """Each node's ``(applied_index, admin digest, state digest)``, all read at one applied index."""

    def read() -> dict[str, tuple[int, str, str]] | None:
        out = {}
        for n in c.running():
            d = n.call("digest")
            i, s = _state_digest(n)
            if i != d["applied_index"]:
                return None
            out[n.node_id] = (i, d["digest"], s)
        return out if len(out) == 3 and len({v[0] for v in out.values()}) == 1 else None

    return wait_for(read, 30, "the three replicas at one applied index")


def _histories(c: Cluster, tids: list[str]) -> None:
    """Every replica holds the same history rows of these tasks."""
    def same() -> dict[str, Any] | None:
        seen = {n.node_id: {tid: _executions(n, tid) for tid in tids} for n in c.running()}
        return seen if len({repr(v) for v in seen.values()}) == 1 else None
    wait_for(same, 30, f"every replica's history of {tids} to be the same",
             explain=lambda: repr({n.node_id: {t: _executions(n, t) for t in tids} for n in c.running()}))


def _no_decode_trouble(old: NodeProc) -> None:
    log = old.log_path.read_text(errors="replace")
    bad = [line for line in log.splitlines() if DECODE_TROUBLE.search(line)]
    assert not bad, f"{old.node_id} logged:\n" + "\n".join(bad[:20])


def _ack_phase_paused_and_resumed(leader: NodeProc, tid: str) -> dict[str, Any]:
    """Pause the task in its ACK phase and resume it at once; returns the resumed task."""
    assert _ok(leader, "POST", f"/api/v1/tasks/{tid}/pause")["status"] == "paused"
    resumed: dict[str, Any] = _ok(leader, "POST", f"/api/v1/tasks/{tid}/resume")
    assert resumed["status"] == "awaiting_ack", resumed
    return resumed


def _ack_task(leader: NodeProc, receiver: RecordingReceiver, tag: str) -> tuple[str, Received]:
    """A delayed task whose callback answers 200 and whose first ACK probe answers 500; returns it and
    its callback once it awaits its first probe."""
    tid = _create(leader, {
        "type": "delayed", "interval_ms": 200, "callback_url": receiver.url(f"/ok/{tag}"),
        "ack_url": receiver.url(f"/flaky/1/{tag}-ack"), "ack_delay_ms": ACK_DELAY_MS})
    (cb,) = wait_for(lambda: receiver.by_tag(tag), 30, f"the callback of {tag}")
    wait_for(lambda: _task(leader, tid)["status"] == "awaiting_ack", 30, f"{tag} to await its ACK probe")
    return tid, cb


def _periodic_paused_across_instants(
        leader: NodeProc, receiver: RecordingReceiver, tag: str) -> tuple[str, int, dict[str, Any]]:
    """A periodic task that fired, paused across at least one of its instants, resumed from now;
    returns it, the instant it last fired and the resumed task."""
    tid = _create(leader, {"type": "periodic", "interval_ms": INTERVAL_MS, "callback_url": receiver.url(f"/ok/{tag}")})
    wait_for(lambda: receiver.by_tag(tag), 30, f"a callback of {tag}")
    assert _ok(leader, "POST", f"/api/v1/tasks/{tid}/pause")["status"] == "paused"
    # an occurrence sent ahead of its instant still goes out; once its result is in, the task
    # waits between occurrences, and the next instant passes while it is paused
    wait_for(lambda: _task(leader, tid)["attempt"] == 0, 30, f"{tag}'s occurrence on its way to end")
    last = max(_scheduled(r) for r in receiver.by_tag(tag))
    _until(last + INTERVAL_MS + 300)
    resumed: dict[str, Any] = _ok(leader, "POST", f"/api/v1/tasks/{tid}/resume", {"resume_from": "now"})
    assert resumed["status"] == "pending", resumed
    assert resumed["next_run_at"] >= last + 2 * INTERVAL_MS, ("no instant came due while paused", last, resumed)
    return tid, last, resumed


def _allow_task(leader: NodeProc, receiver: RecordingReceiver, tag: str) -> tuple[str, int]:
    """An overlap allow periodic task; returns it and one instant of its grid once it fired."""
    tid = _create(leader, {
        "type": "periodic", "interval_ms": INTERVAL_MS, "overlap": "allow", "callback_url": receiver.url(f"/ok/{tag}")})
    first = wait_for(lambda: receiver.by_tag(tag), 30, f"a callback of {tag}")[0]
    return tid, _scheduled(first)


def _aimed_trigger(leader: NodeProc, tid: str, grid: int) -> tuple[int, int, Any]:
    """Trigger the allow task ``AIM_MS`` before one of its instants (``grid`` is one), while that
    instant's occurrence is on its way; returns the instant, the status and the answer."""
    instant = grid + ((_now_ms() + AIM_MS + 100 - grid) // INTERVAL_MS + 1) * INTERVAL_MS
    _until(instant - AIM_MS)
    st, out = call(leader, "POST", f"/api/v1/tasks/{tid}/trigger")
    return instant, st, out


def _fired(receiver: RecordingReceiver, tag: str, instant: int) -> int:
    return sum(_scheduled(r) == instant for r in receiver.by_tag(tag))


def _quiet(c: Cluster, leader: NodeProc, periodic: list[str], done: list[str]) -> None:
    """Pause the periodic tasks, wait for the others to be done and every replica to apply the log."""
    for tid in periodic:
        _ok(leader, "POST", f"/api/v1/tasks/{tid}/pause")
    for tid in done:
        wait_for(lambda tid=tid: _task(leader, tid)["status"] == "done", 30, f"{tid} done")
    c.wait_converged()


@pytest.mark.timeout(170)
def test_version_8_rules_apply_alike_on_every_replica_before_and_after_the_upgrade(
        tmp_path: Path, receiver: RecordingReceiver, release_before: Path) -> None:
    c = Cluster(tmp_path, 3, extra={"scheduler": {"dispatch_lead_ms": LEAD_MS}}, state_machine="tasks")
    old = c.nodes["n3"]
    for n in (c.nodes["n1"], c.nodes["n2"]):
        n.argv = _this_release()
    old.argv = [sys.executable, "-c", LAUNCH, str(release_before)]
    try:
        start_beside(c, old)
        leader = _leader(c, mixed=True)

        # --- mixed: every rule as version 7 applied it -------------------------------------------
        # (a) paused in the ACK phase and resumed: the probe is due at the resume
        a1, cb1 = _ack_task(leader, receiver, "a1")
        resumed = _ack_phase_paused_and_resumed(leader, a1)
        assert resumed["updated_at"] < cb1.at_ms + ACK_DELAY_MS, "the resume came too late to tell the rules apart"
        assert resumed["next_run_at"] == resumed["updated_at"], (
            "with a member of version 7 the probe is due at the resume", resumed)
        # (b) paused across instants, resumed from now: no skipped row
        b1, _, _ = _periodic_paused_across_instants(leader, receiver, "b1")
        assert _paused_drops(_executions(leader, b1)) == []
        # (c) triggered while an occurrence sent ahead of its instant is on its way: applied, and that
        # instant fires again after the triggered one
        c1, grid = _allow_task(leader, receiver, "c1")
        aimed = []
        for _ in range(3):
            instant, st, out = _aimed_trigger(leader, c1, grid)
            assert st == 200, ("with a member of version 7 a trigger applies as it did", instant, st, out)
            aimed.append(instant)
        wait_for(lambda: any(_fired(receiver, "c1", s) >= 2 for s in aimed), 30,
                 "an instant of the triggered allow task fired twice (as version 7 does)",
                 explain=lambda: repr({s: _fired(receiver, "c1", s) for s in aimed}))
        wait_for(lambda: receiver.by_tag("a1-ack"), 30, "the ACK probe after the resume")
        assert receiver.by_tag("a1-ack")[0].at_ms >= resumed["updated_at"]

        _quiet(c, leader, [b1, c1], [a1])
        assert [e["result"] for e in _executions(leader, a1) if e["kind"] == "ack"] == ["ack_success", "ack_failed"]
        _histories(c, [a1, b1, c1])
        state = _at_one_index(c)
        assert state["n1"][2] == state["n1"][1], "the state digest is not the admin digest of this release"
        assert state["n1"][1] == state["n2"][1], state
        assert len({s for _, _, s in state.values()}) == 1, ("the replicas differ", state)
        assert old.running, f"the node of the release before stopped:\n{old.tail()}"
        _no_decode_trouble(old)

        # --- upgrade: n3 restarted on this release's code, on its data ---------------------------
        assert old.stop() == 0
        old.argv = _this_release()
        old.start()
        old.wait_ready(timeout=60)
        leader = _leader(c, mixed=False)
        c.wait_converged()
        # (c) once the leader heard n3 advertise version 8, an aimed trigger is refused
        c2, grid = _allow_task(leader, receiver, "c2")

        def refused() -> bool:
            instant, st, out = _aimed_trigger(leader, c2, grid)
            if st == 200:  # n3 not heard yet: applied as version 7 did
                return False
            assert st == 409 and PLANNED in out["error"]["message"], (instant, st, out)
            return True

        wait_for(refused, 40, "a trigger refused while an occurrence is on its way (the leader heard version 8)")
        instant, st, out = _aimed_trigger(leader, c2, grid)
        assert st == 409 and PLANNED in out["error"]["message"], (st, out)
        wait_for(lambda: _fired(receiver, "c2", instant + INTERVAL_MS), 30, "the instant after the refused trigger")
        assert _fired(receiver, "c2", instant) == 1, "the instant of the refused trigger fired twice"
        # (b) a resume from now writes the instants it drops as one skipped row
        b2, last, resumed = _periodic_paused_across_instants(leader, receiver, "b2")
        (row,) = _paused_drops(_executions(leader, b2))
        assert f"[{last + INTERVAL_MS}, {resumed['next_run_at']})" in row["execution_result"], row
        # (a) paused in the ACK phase and resumed: no probe before ack_delay_ms after the wait began,
        # the callback's 2xx and then the failed probe
        a2, cb2 = _ack_task(leader, receiver, "a2")
        resumed = _ack_phase_paused_and_resumed(leader, a2)
        assert resumed["updated_at"] < cb2.at_ms + ACK_DELAY_MS, "the resume came too late to tell the rules apart"
        assert resumed["next_run_at"] > resumed["updated_at"], ("the probe is not due at the resume", resumed)
        assert resumed["next_run_at"] >= cb2.at_ms + ACK_DELAY_MS, ("the probe waits ack_delay_ms", cb2.at_ms, resumed)
        (p1,) = wait_for(lambda: receiver.by_tag("a2-ack"), 30, "the first ACK probe of a2")
        assert p1.at_ms >= cb2.at_ms + ACK_DELAY_MS, (cb2.at_ms, p1.at_ms)
        wait_for(lambda: (t := _task(leader, a2))["status"] == "awaiting_ack" and t["ack_attempt"] == 1
                 and t["next_run_at"] is not None, 30, "a2 to await its second probe")
        resumed = _ack_phase_paused_and_resumed(leader, a2)
        assert resumed["updated_at"] < p1.at_ms + ACK_DELAY_MS, "the resume came too late to tell the rules apart"
        assert resumed["next_run_at"] > resumed["updated_at"], ("the probe is not due at the resume", resumed)
        assert resumed["next_run_at"] >= p1.at_ms + ACK_DELAY_MS, ("the probe waits ack_delay_ms", p1.at_ms, resumed)
        _quiet(c, leader, [b2, c2], [a2])
        (p1, p2) = receiver.by_tag("a2-ack")
        assert p2.at_ms >= p1.at_ms + ACK_DELAY_MS, (p1.at_ms, p2.at_ms)

        for n in c.running():  # each replica counted the drop it applied
            wait_for(lambda n=n: _ok(n, "GET", "/api/v1/stats?local=1")["not_fired"]["dropped_paused"] == 1, 30,
                     f"{n.node_id} to count the dropped instants")
        _histories(c, [a1, b1, c1, a2, b2, c2])
        state = _at_one_index(c)
        assert len({s for _, _, s in state.values()}) == 1, ("the replicas differ", state)
        # every node runs this release: the admin digests agree, though n3 still stores the records it
        # wrote under the release before in that layout
        assert len({d for _, d, _ in state.values()}) == 1, ("the replicas' digests differ", state)
        stored = {n.node_id: _state_digest(n, canonical=False) for n in c.running()}
        assert stored["n1"] == stored["n2"] != stored["n3"], ("n3 holds no record of the earlier layout", stored)
        _no_decode_trouble(old)
    finally:
        c.stop_all()
