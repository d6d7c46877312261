"""Deliberate bugs in the product's code, to show the scheduler simulation catches each.

A :class:`Mutant` names a product function or method and one line of its source to change. It is
applied in-process: the source (``inspect.getsource``) with that one change is compiled against the
defining module's globals and put in place of the original for the duration of a ``with`` block, so
every caller (the simulator, the product's own classes) runs the broken code. The simulation must
then fail some seed; :func:`hunt` runs seeds until one does. :data:`MUTANTS` break the scheduler's
logic (caught by the scheduler simulation), :data:`RAFT_MUTANTS` the storage's order of syncs
(caught by the Raft simulation when a node loses power: ``tests/sim/disk.py``).

    scripts/sim --scheduler --mutants                 # ends with: mutants: caught=N of M
    scripts/sim --scheduler --mutants --seeds 300     # seeds tried per mutant (default 2,000)
    scripts/sim --mutants                             # the Raft simulation's mutants
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """``target`` (``module:Name`` or ``module:Class.method``) with ``old`` replaced by ``new`` (once)."""

    name: str
    what: str
    target: str
    old: str
    new: str

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        mod_name, qual = self.target.split(":")
        mod = importlib.import_module(mod_name)
        owner: object = mod
        *path, attr = qual.split(".")
        for p in path:
            owner = getattr(owner, p)
        original = inspect.getattr_static(owner, attr)
        fn = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
        src = textwrap.dedent(inspect.getsource(fn))
        if src.count(self.old) != 1:
            raise ValueError(f"mutant {self.name}: {self.old!r} occurs {src.count(self.old)} times in {self.target}")
        ns: dict[str, object] = {}
        exec(compile(src.replace(self.old, self.new), f"<mutant {self.name}>", "exec"), vars(mod), ns)
        new = ns[fn.__name__]
        if isinstance(original, (staticmethod, classmethod)):
            new = type(original)(new)
        setattr(owner, attr, new)
        try:
            yield
        finally:
            setattr(owner, attr, original)


MUTANTS = [
    Mutant("lost-fire-never-redispatched", "the Monitor never gives up a fire past its deadline",
           "molens.actors.monitor:FireWatch.due", "out.append(lost_result(cur))", "pass"),
    Mutant("amo-resent-after-loss", "an at_most_once fire whose outcome is unknown (its worker or leader lost) "
           "is sent again", "molens.fsm.machine:_retry_or_end",
           "return FailureKind.UNKNOWN",
           'return {"status": Status.FIRING, "due_ms": now, "free_attempts": t.free_attempts, '
           '"throttled_since_ms": t.throttled_since_ms}'),
    Mutant("stale-result-applied", "a late result of an earlier attempt is applied to the current one",
           "molens.fsm.machine:_result", "(it.attempt is not None and it.attempt != fire.attempt)", "False"),
    Mutant("expiry-skips-one", "the Cleaner's scan leaves out the oldest expirable task",
           "molens.actors.cleaner:ExpiryScan.run", "return Expire(now_ms, tuple(items))",
           "return Expire(now_ms, tuple(items[1:]))"),
    Mutant("held-grace-ignored", "a heartbeat settles fires still on their way to the worker",
           "molens.actors.monitor:FireWatch.not_held", "self._since.get(fid, 0) <= watched_by_ms", "True"),
    Mutant("catchup-one-too-many", "after an occurrence, an instant missed by less than a period fires "
           "instead of being skipped", "molens.fsm.machine:_next_occurrence",
           "if first >= now or (lost and spec.catchup is CatchUp.ONE):",
           "if first >= now - (spec.interval_ms or 0) or (lost and spec.catchup is CatchUp.ONE):"),
    Mutant("deadline-without-timeout", "a fire's deadline leaves out the HTTP timeout",
           "molens.actors.dispatcher:DispatchPlan.plan",
           "deadline = at + t.spec.timeout_ms + self.dispatch_timeout_ms", "deadline = at + self.dispatch_timeout_ms"),
    Mutant("pause-ignored", "a paused flow's fires are planned",
           "molens.schedule.flows:FlowControl._may_go", "if lim.paused or (", "if ("),
    Mutant("resume-keeps-missed", "a paused periodic task resumed from now fires the instant it was waiting "
           "for, though that came due while it was paused", "molens.fsm.machine:_resume",
           "nxt = t.sched_ms if t.sched_ms >= now or from_schedule else next_scheduled(t, now)", "nxt = t.sched_ms"),
    Mutant("resume-mid-occurrence-keeps-missed", "a periodic task paused while it retried and resumed from now "
           "follows its catch-up for what came due while it was paused", "molens.fsm.machine:_resume",
           "if drops_paused and periodic and not from_schedule:", "if False:"),
    Mutant("resume-probes-ack-at-once", "a task paused in its ACK phase and resumed probes at once, before "
           "ack_delay_ms after the callback's 2xx", "molens.fsm.machine:_resume",
           "due = now if t.ack_from_ms is None else max(now, t.ack_from_ms + t.spec.ack_delay_ms)", "due = now"),
    Mutant("resume-drops-silently", "a periodic task resumed from now between occurrences drops the instants that "
           "came due while it was paused without their skipped row", "molens.fsm.machine:_resume",
           "if records_dropped and nxt > t.sched_ms:", "if False:"),
    Mutant("trigger-allow-planned", "a task is triggered while a fire for a later instant is on its way (an overlap "
           "allow occurrence planned ahead, or an attempt sent ahead and settled lost): the schedule after the "
           "triggered one takes that instant again",
           "molens.fsm.machine:_trigger",
           "if planned or (refuses_sent_ahead and t.last_fire_ms is not None and t.last_fire_ms > now):",
           "if False:"),
    Mutant("trigger-due-after-interval", "a triggered task's occurrence is due an interval after the trigger, not at once",
           "molens.fsm.machine:_trigger", "nt = _replace(t, due_ms=now, sched_ms=now, updated_ms=now)",
           "nt = _replace(t, due_ms=now + (t.spec.interval_ms or 0), sched_ms=now, updated_ms=now)"),
    Mutant("trigger-keeps-schedule", "a trigger makes the upcoming occurrence due now but leaves its instant: a "
           "periodic task then goes on after that instant, which never fires (the trigger replaces an occurrence "
           "instead of adding one)", "molens.fsm.machine:_trigger",
           "nt = _replace(t, due_ms=now, sched_ms=now, updated_ms=now)", "nt = _replace(t, due_ms=now, updated_ms=now)"),
    Mutant("delete-keeps-task", "a delete removes a task's fire record, key and history but leaves the task itself, "
           "which goes on firing", "molens.fsm.machine:_remove", "tx.delete(t)", "pass"),
    Mutant("delete-keeps-idempotency-key", "a deleted task's idempotency key is left behind: a create with it "
           "answers the deleted task", "molens.fsm.machine:_remove", "tx.w.idem[key] = None", "pass"),
    Mutant("delete-keeps-fire-record", "a task deleted with a fire in flight leaves that fire's record behind",
           "molens.fsm.machine:_remove", "tx.w.fires[t.inflight] = None", "pass"),
    Mutant("delete-keeps-history", "a deleted task's history rows (and dead letters) are left behind",
           "molens.fsm.machine:_remove", "tx.w.history_deletes.append(t.id)", "pass"),
    Mutant("update-delayed-keeps-time", "a delayed task whose time an update changes before its first attempt "
           "keeps its old time", "molens.fsm.machine:_update",
           "sched = new.run_at if new.run_at is not None else t.created_ms + (new.interval_ms or 0)",
           "sched = t.sched_ms"),
    Mutant("update-of-nothing-bumps-version", "an update that changes nothing counts as a change: a new version "
           "and an updated history row", "molens.fsm.machine:_update", "if not changed:", "if False:"),
    Mutant("update-restarts-attempts", "an update of a task whose occurrence started counts its attempts from "
           "zero again: the occurrence gets its retries anew", "molens.fsm.machine:_update",
           "t, spec=new, version=t.version + 1, updated_ms=now,",
           "t, spec=new, version=t.version + 1, updated_ms=now, attempt=0,"),
    Mutant("window-edge-skipped", "the loader's window skips timers due exactly at its edge",
           "molens.schedule.horizon:HorizonWheel.load", 'self.start = (until, "")', 'self.start = (until + 1, "")'),
    Mutant("reach-lags-read", "the wheel's reach says how late it is, not how far its load read: a new task due "
           "inside the window it loaded is left out of the wheel's effects",
           "molens.schedule.horizon:HorizonWheel.load", "self.reach.ms = until  # before the read",
           "self.reach.ms = now_ms  # before the read"),
    Mutant("lost-worker-fires-kept", "a worker counted lost keeps its fires until their deadlines",
           "molens.actors.monitor:FireWatch.on_lost_workers", "out.append(lost_result(cur))", "pass"),
    Mutant("worker-death-unnoticed", "the Monitor never counts a silent worker as lost (its alarm spins)",
           "molens.actors.monitor:WorkerWatch.lost", "if w in self._lost or self._silent_until(w) <= now_ms:",
           "if False:"),
    Mutant("not-sent-counted", "a fire that never left its node (answered not sent) uses up an attempt of its task",
           "molens.fsm.machine:_not_sent", 'changes["free_attempts"] = t.free_attempts + 1',
           'changes["free_attempts"] = t.free_attempts'),
    Mutant("boot-trusts-store", "a boot-id check that always trusts the store: a task store left open by an "
           "earlier boot (torn by a power loss) is used as it is",
           "molens.lmdb_snapshot:guard_boot", 'if seen not in (CLOSED_MARK, boot) and (env_dir / "data.mdb").exists():',
           "if False:"),
    Mutant("boot-marker-not-durable", "the store's boot marker is renamed into place without a directory fsync: "
           "after a power loss the store may look closed cleanly and be trusted",
           "molens.lmdb_snapshot:write_durably", "disk.fsync_dir(path.parent)", "pass"),
]


RAFT_MUTANTS = [
    Mutant("snapshot-dir-not-synced", "a missing directory fsync before compaction: a new snapshot file's "
           "rename is not durable when the log records it and compacts past it",
           "molens.raft.storage:SnapshotStore._commit", "self.disk.fsync_dir(self.dir)", "pass"),
    Mutant("snapshot-bytes-not-synced", "a snapshot file is renamed into place before its bytes are synced",
           "molens.raft.storage:SnapshotStore._commit", "self.disk.fsync(f.fileno())", "pass"),
]


def _run_scheduler(seed: int) -> None:
    from tests.sim.scheduler_sim import run_seed

    run_seed(seed)


def _run_raft(seed: int) -> None:
    from tests.sim.raft_harness import run_seed

    run_seed(seed, raft_nodes(seed))


def raft_nodes(seed: int) -> int:
    """The cluster size ``scripts/sim`` runs ``seed`` with (both sizes in turn)."""
    return (3, 5)[seed % 2]


def hunt(mutant: Mutant, seeds: range, run: Callable[[int], None] | None = None) -> int | None:
    """The first of ``seeds`` whose run (the scheduler simulation's unless ``run``, or the Raft
    simulation's for a :data:`RAFT_MUTANTS` one) breaks a promise with ``mutant`` applied (None: none did)."""
    if run is None:
        run = _run_raft if mutant in RAFT_MUTANTS else _run_scheduler
    with mutant.applied():
        for s in seeds:
            try:
                run(s)
            except AssertionError:  # both simulations' Violation
                return s
    return None


def by_name(name: str, mutants: list[Mutant] = MUTANTS) -> Mutant:
    for m in mutants:
        if m.name == name:
            return m
    raise SystemExit(f"no mutant {name!r}; one of: {', '.join(m.name for m in mutants)}")


def main(seeds: range, mutants: list[Mutant] = MUTANTS,
         replay: Callable[[int], str] = lambda seed: "scripts/sim --scheduler") -> int:
    """Hunt each of ``mutants`` over ``seeds``; print the seed that caught each and ``mutants: caught=N of M``."""
    import time

    caught = 0
    for m in mutants:
        t0 = time.monotonic()
        seed = hunt(m, seeds)
        took = time.monotonic() - t0
        if seed is None:
            print(f"mutant {m.name}: NOT caught in {len(seeds)} seeds ({took:.1f}s) -- {m.what}", flush=True)
        else:
            caught += 1
            print(f"mutant {m.name}: caught by seed {seed} ({took:.1f}s) -- {m.what}\n"
                  f"  replay: {replay(seed)} --mutant {m.name} --seed {seed} --trace", flush=True)
    print(f"mutants: caught={caught} of {len(mutants)}")
    return 0 if caught == len(mutants) else 1
