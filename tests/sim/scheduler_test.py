"""The whole-scheduler simulation (tests/sim/scheduler_sim.py) over 200 seeds in CI."""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from molens.fsm.commands import BackfillTask, encode
from molens.fsm.history import History
from molens.fsm.memstate import MemoryState
from molens.fsm.store import TaskStore
from molens.raft.log import Entry, EntryKind
from molens.schema import MAX_RUNNING
from tests.sim.scheduler_sim import LATENESS_BOUND, Sim, Violation, run_seed

SEEDS = 200
pytestmark = pytest.mark.timeout(900)
"""The first test to ask for the CI runs pays for 200 seeds (a minute or two, four on a busy machine), so every
test that reads them is marked slow: the quick lane keeps the tests below that run their own few seeds."""
REGRESSION_SEEDS = [0, 5, 12, 18, 20, 27, 41, 99, 130, 136, 249, 279, 426, 491, 666, 979, 1471, 1516, 2264, 2779,
                    32251, 40430, 40798, 20000158]
"""Seeds that once failed (a checker bug or a product bug), kept so the fixed checks and code stay exercised."""


@functools.cache
def _ci_runs() -> tuple[list[Sim], list[str]]:
    """The CI seeds, run once for the tests below: the runs, and the violations found."""
    sims: list[Sim] = []
    failures: list[str] = []
    for seed in sorted(set(range(SEEDS)) | set(REGRESSION_SEEDS)):
        try:
            sims.append(run_seed(seed))
        except Violation as e:
            failures.append(str(e)[:300])
    return sims, failures


@pytest.mark.slow
@pytest.mark.sim
def test_scheduler_promises_hold_for_200_seeds() -> None:
    sims, failures = _ci_runs()
    assert not failures, "\n".join(failures)
    assert sum(len(s.deliveries) for s in sims) > SEEDS * 50  # the runs really fire


@pytest.mark.slow
@pytest.mark.sim
def test_backfills_are_exercised() -> None:
    """docs/architecture.md#backfill: over the CI seeds clients' backfills are accepted and their
    occurrences fire (the checks in ``check`` are not vacuous)."""
    sims, _ = _ci_runs()
    accepted = sum(len(b) for sim in sims for b in sim.backfills.values())
    fired = sum(1 for sim in sims for d in sim.deliveries
                if d.attempt == 1 and any(b.covers(d) for b in sim.backfills.get(d.task_id, [])))
    assert accepted > 200 and fired > 1_000, (accepted, fired)


@pytest.mark.slow
@pytest.mark.sim
def test_overlaps_are_exercised() -> None:
    """docs/architecture.md#overlap: over the CI seeds occurrences run over the next instant under
    both policies, and ``check`` checks what came after them."""
    sims, _ = _ci_runs()
    skip = sum(sim.overlaps_checked["skip"] for sim in sims)
    buffer_one = sum(sim.overlaps_checked["buffer_one"] for sim in sims)
    assert skip > 100 and buffer_one > 100, (skip, buffer_one)


@pytest.mark.slow
@pytest.mark.sim
def test_allow_occurrences_run_at_once_and_are_capped() -> None:
    """docs/architecture.md#overlap: over the CI seeds allow tasks' occurrences reach their receiver
    while others of the same task run, the instant after a running one fires at its time (checked
    by ``check``), and a receiver slow enough meets ``MAX_RUNNING`` (instants skipped)."""
    sims, _ = _ci_runs()
    concurrent = sum(sim.allow_concurrent for sim in sims)
    checked = sum(sim.overlaps_checked["allow"] for sim in sims)
    capped = sum(1 for sim in sims for e in sim.replicas[sim.nodes[0]].executions
                 if e.result == "skipped" and "(overlap allow)" in (e.response_head or ""))
    assert concurrent > 1_000 and checked > 100 and capped > 20, (concurrent, checked, capped)


@pytest.mark.slow
@pytest.mark.sim
def test_the_near_term_window_is_exercised_and_never_behind_without_a_slow_loader() -> None:
    """docs/architecture.md#near-term-window: over the CI seeds the window's edge sees creates and a
    leader is lost in the middle of a new leader's first fill; without a slow loader the window never
    falls behind the dispatch lead (so those seeds keep the full lateness check)."""
    sims, _ = _ci_runs()
    edge_fired = mid_fill = 0
    for sim in sims:
        if not sim.loader_delay:
            assert sim.loader_behind == 0, sim.seed
        mid_fill += sim.mid_fill_losses
        state = sim.replicas[sim.nodes[0]]
        edge = set(sim.edge_tasks)  # (the Cleaner may have expired them: their keys are gone from ``idem``)
        ids = {tid for tid, t in {**sim.expired, **state.tasks}.items() if t.spec.idempotency_key in edge}
        edge_fired += len(ids & {d.task_id for d in sim.deliveries if d.ok})
    assert edge_fired > 100 and mid_fill > 5, (edge_fired, mid_fill)


@pytest.mark.slow
@pytest.mark.sim
def test_flows_are_exercised_held_by_pauses_retry_after_and_their_limits() -> None:
    """docs/architecture.md#flow-control: over the CI seeds flows are paused and resumed, receivers'
    Retry-After holds them, and their fires are planned across several terms (check_flows ran on them)."""
    sims, _ = _ci_runs()
    pauses = sum(1 for sim in sims for _, _, paused in sim.pauses if paused)
    throttles = sum(len(sim.throttles) for sim in sims)
    limited = sum(1 for sim in sims for pl in sim.plan_of.values() if pl.flow in sim.flow_limits)
    terms = {(sim.seed, pl.term) for sim in sims for pl in sim.plan_of.values() if pl.flow in sim.flow_limits}
    assert pauses > 50 and throttles > 50 and limited > 2_000 and len(terms) > 200, (pauses, throttles, limited, len(terms))


def _utc(*a: int) -> int:
    return int(datetime(*a, tzinfo=UTC).timestamp() * 1000)


DAY = 86_400_000
DST_CASES = [
    # (zone, expression, run from, expected fire instants in UTC)
    ("Europe/Berlin", "30 2 * * *", _utc(2026, 3, 27, 12),  # 02:30 missing on 03-29: fires at 03:00 CEST
     [_utc(2026, 3, 28, 1, 30), _utc(2026, 3, 29, 1), _utc(2026, 3, 30, 0, 30)]),
    ("Europe/Berlin", "30 2 * * *", _utc(2026, 10, 23, 12),  # 02:30 twice on 10-25: first pass only
     [_utc(2026, 10, 24, 0, 30), _utc(2026, 10, 25, 0, 30), _utc(2026, 10, 26, 1, 30)]),
    ("America/New_York", "30 2 * * *", _utc(2026, 3, 6, 12),
     [_utc(2026, 3, 7, 7, 30), _utc(2026, 3, 8, 7), _utc(2026, 3, 9, 6, 30)]),
    ("America/New_York", "30 1 * * *", _utc(2026, 10, 30, 12),
     [_utc(2026, 10, 31, 5, 30), _utc(2026, 11, 1, 5, 30), _utc(2026, 11, 2, 6, 30)]),
]


def _cron_workload(tz: str, expr: str, crash_before: list[int]) -> Callable[[Sim], None]:
    def w(sim: Sim) -> None:
        sim.create_at(sim.t0, {"type": "periodic", "cron_expr": expr, "timezone": tz})
        for t in crash_before:
            sim.at(t - 300, lambda: sim.lose_leader(crash=True))

    return w


@pytest.mark.sim
@pytest.mark.parametrize(("tz", "expr", "t0", "expected"), DST_CASES)
@pytest.mark.parametrize("crash", [False, True], ids=["healthy", "leader-crash-before-each-fire"])
def test_cron_tasks_fire_exactly_once_on_the_expected_instants_across_dst(
    tz: str, expr: str, t0: int, expected: list[int], crash: bool
) -> None:
    sim = run_seed(7, t0=t0, end_ms=expected[-1] - t0 + 60_000, faults=False,
                   workload=_cron_workload(tz, expr, expected if crash else []))
    firsts = sorted((d for d in sim.deliveries if d.attempt == 1), key=lambda d: d.at)
    assert [d.due for d in firsts] == expected
    assert len({d.fire_id for d in sim.deliveries}) == len(expected)  # once per instant
    for d in firsts:
        assert d.at >= d.due
        if not crash:
            assert d.at - d.due <= LATENESS_BOUND


@pytest.mark.sim
@pytest.mark.parametrize("seed", [3, 11, 42])
def test_lmdb_store_replaying_a_simulated_log_equals_the_simulated_replicas(seed: int, tmp_path: Path) -> None:
    sim = run_seed(seed)
    store = TaskStore(tmp_path, history=History(tmp_path / "history.sqlite", max_records_per_task=1_000))
    entries = [Entry(i + 1, 1, EntryKind.NORMAL, encode(c)) for i, c in enumerate(sim.log)]
    for i in range(0, len(entries), 250):
        store.apply_batch(entries[i : i + 250])
    rep = sim.replicas["n0"]
    assert {t.id: t for t in store.scan_tasks()} == rep.tasks
    assert list(store.scan_due()) == sorted(rep.due)
    assert {f.fire_id: f for f in store.scan_fires()} == rep.fires
    for before in (sim.t0, sim.now - 60_000, sim.now):  # what the simulated Cleaner read is what lmdb would say
        assert store.scan_expirable(before, 1_000) == rep.scan_expirable(before, 1_000)
        assert store.scan_expirable(before, 3) == rep.scan_expirable(before, 3)
    assert store.history is not None
    assert [(e.fire_id, e.attempt, e.result) for e in store.history.iter_all()] == [
        (e.fire_id, e.attempt, e.result) for e in rep.executions
    ]
    store.close()


def _backfill_at_max_running(sim: Sim) -> None:
    """An allow task whose receiver answers in 8.2-9.5 s, so MAX_RUNNING of its occurrences run at
    once, and a backfill asked while they do (simulation seed 1471 before its fix)."""
    key = sim.create_at(sim.t0, {"type": "periodic", "interval_ms": 1_000, "overlap": "allow", "timeout_ms": 10_000,
                                 "max_fails": 3}, "crawl")

    def backfill() -> None:  # once MAX_RUNNING run, none of them sent 8 s ago yet (none ends for 200 ms)
        ld = sim.leader
        tid = sim.replicas[ld.node].get_idem(key) if ld is not None else None
        t = sim.replicas[ld.node].get_task(tid) if ld is not None and tid is not None else None
        if t is None or len(t.running) < MAX_RUNNING or min(r.sched_ms for r in t.running) <= sim.now - 8_000:
            sim.at(sim.now + 10, backfill)
            return
        sim.propose(BackfillTask(sim.now, t.id, sim.t0 + 1_500, sim.t0 + 4_500))

    sim.at(sim.t0 + 10_000, backfill)


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_backfill_asked_while_max_running_occurrences_run_waits_for_one_to_end(seed: int) -> None:
    # long enough for the three backfilled occurrences (8.2-9.5 s each, one after the other) once a
    # running one ends, also when a lost result has an occurrence retried in between (check(): never 9 at once)
    sim = run_seed(seed, faults=False, end_ms=80_000, workload=_backfill_at_max_running)
    ((tid, (bf,)),) = sim.backfills.items()
    state = MemoryState()  # the task as the backfill left it
    for cmd in itertools.takewhile(lambda c: not isinstance(c, BackfillTask), sim.log):
        state.apply(cmd)
    t = state.get_task(tid)
    assert t is not None and len(t.running) == MAX_RUNNING
    running = {r.fire_id(tid) for r in t.running}
    ds = [d for d in sim.deliveries if d.task_id == tid]
    backfilled = sorted((d for d in ds if bf.covers(d)), key=lambda d: d.at)
    assert [d.scheduled - sim.t0 for d in backfilled] == [2_000, 3_000, 4_000]
    assert backfilled[0].at > min(d.end for d in ds if d.fire_id in running)  # it waited for one of them to end


@pytest.mark.slow
@pytest.mark.sim
def test_lost_workers_and_expiry_are_exercised() -> None:
    """docs/architecture.md#lost-workers, retention: over the CI seeds the product's WorkerWatch and
    FireWatch settle fires of crashed workers early (``check_lost_workers`` has fires to check) and
    its ExpiryScan expires tasks (``check_expiry`` checks they were terminal, and that none is left)."""
    sims, _ = _ci_runs()
    early = sum(sim.lost_worker_fires for sim in sims)
    settled = sum(sim.settled_on_lost for sim in sims)
    expired = sum(len(sim.expired) for sim in sims)
    assert early > 20 and settled > 1_000 and expired > 2_000, (early, settled, expired)


@pytest.mark.slow
@pytest.mark.sim
def test_fires_not_sent_are_exercised_and_go_out_on_a_later_attempt() -> None:
    """docs/architecture.md#not-sent: over the CI seeds workers answer fires not sent (``check`` then
    sees that none used up a retry or left a history row), and most of those fires reach their
    receiver on a later attempt of the same fire id."""
    sims, _ = _ci_runs()
    not_sent = [(sim, key) for sim in sims for key in sim.not_sent]
    later = sum(1 for sim, (fid, kind, attempt) in not_sent
                if any(d.fire_id == fid and d.kind is kind and d.attempt > attempt for d in sim.deliveries))
    assert len(not_sent) > 500 and later > len(not_sent) // 2, (len(not_sent), later)


def test_a_product_exception_fails_its_seed_with_a_replay_line_and_the_sweep_goes_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seed in which the product raises (a crash, not a promise checked) is a failing seed like
    any other: printed with its replay line, and the next seed still runs."""
    from tests.sim import scheduler_sim

    real_run = Sim.run
    runs = {"n": 0}

    def run(self: Sim) -> None:
        runs["n"] += 1
        if runs["n"] == 1:
            raise OSError("a planted fault")
        real_run(self)

    monkeypatch.setattr(Sim, "run", run)
    level = logging.getLogger("molens").level
    assert scheduler_sim.main(["--seeds", "2", "--start", "40"]) == 1
    assert logging.getLogger("molens").level == level, "the CLI gives the logging level back"
    out = capsys.readouterr().out
    assert "FAIL seed=40: OSError: a planted fault" in out
    assert "replay: scripts/sim --scheduler --seed 40 --trace" in out
    assert out.splitlines()[-1] == "sim: seeds=2 failures=1"
