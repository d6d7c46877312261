"""The chaos soak's history check fails the run on a non-linearizable task-record history.

A history as the soak's recording clients make it is doctored (a stale read after an acknowledged
patch; a read of a version nobody wrote) and put through what ``scripts/chaos`` does with it
(:func:`history_client.verdict` into the :class:`chaos.Report`, :func:`chaos.summary_lines`,
``Report.ok`` for the exit status): the run fails, says ``linearizable=no`` and prints the minimal
failing sub-history.
"""

from __future__ import annotations

import itertools

from tests.integration import chaos
from tests.integration.history_client import History, Linearizable, verdict
from tests.sim.task_model import Call, Outcome, Seen, TaskOp

MS = 1_000_000


class _Calls:
    """Builds the TaskOps the recording clients record (times in ms)."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.ops: list[TaskOp] = []

    def add(self, call: Call, key: str, at: tuple[int, int], code: int, *, tid: str = "t1",
            seen: tuple[str, int, str] | None = None, if_match: int | None = None, scene: str | None = None,
            node: str = "n1") -> TaskOp:
        outcome = Outcome.OK if code in (200, 201) or (code == 404 and call is Call.GET) else Outcome.FAIL
        o = TaskOp(op_id=next(self.ids), key=key, call=call, invoke=at[0] * MS, resp=at[1] * MS, outcome=outcome,
                   node=node, task_id=tid, if_match=if_match, scene=scene, code=code,
                   seen=None if seen is None else Seen(*seen))
        self.ops.append(o)
        return o

    def life(self, key: str, tid: str, t0: int) -> dict[str, TaskOp]:
        """A linearizable life of one record on three nodes, from ``t0`` (ms)."""
        return {
            "create": self.add(Call.CREATE, key, (t0, t0 + 5), 201, tid=tid, seen=("pending", 1, "c1"), scene="c1"),
            "get1": self.add(Call.GET, key, (t0 + 10, t0 + 12), 200, tid=tid, seen=("pending", 1, "c1"), node="n2"),
            "patch": self.add(Call.PATCH, key, (t0 + 20, t0 + 30), 200, tid=tid, seen=("pending", 2, "p2"),
                              if_match=1, scene="p2"),
            "late": self.add(Call.PATCH, key, (t0 + 25, t0 + 35), 412, tid=tid, if_match=1, scene="p3", node="n3"),
            "get2": self.add(Call.GET, key, (t0 + 40, t0 + 42), 200, tid=tid, seen=("pending", 2, "p2"), node="n3"),
            "pause": self.add(Call.PAUSE, key, (t0 + 50, t0 + 55), 200, tid=tid, seen=("paused", 2, "p2")),
            "get3": self.add(Call.GET, key, (t0 + 60, t0 + 61), 200, tid=tid, seen=("paused", 2, "p2"), node="n2"),
            "resume": self.add(Call.RESUME, key, (t0 + 70, t0 + 80), 200, tid=tid, seen=("pending", 2, "p2"),
                               node="n3"),
        }


def _soak_report(history: History) -> chaos.Report:
    """A soak whose delivery checks all passed, with ``history`` checked as the soak checks it."""
    report = chaos.Report(seed=7, digests_equal=True, ns_index=[])
    report.history = verdict(history)
    return report


def _table(report: chaos.Report) -> list[str]:
    """The minimal failing sub-history's rows as ``scripts/chaos`` prints them (header left out)."""
    return [line for line in chaos.summary_lines(report) if line.startswith("chaos: history:   #")]


def _history() -> tuple[History, _Calls, dict[str, TaskOp]]:
    calls = _Calls()
    calls.life("lin-7-0", "t0", 0)
    mine = calls.life("lin-7-1", "t1", 5)
    calls.life("lin-7-2", "t2", 100)
    return History(ops=calls.ops, seed=7), calls, mine


def test_the_soak_passes_a_linearizable_history() -> None:
    history, _, _ = _history()
    report = _soak_report(history)
    assert report.linearizable is Linearizable.YES and report.ok
    assert report.line().endswith(f"digests_equal=yes ns_index_ok=yes history_ops={len(history.ops)} linearizable=yes")
    assert f"chaos: history: ops={len(history.ops)} records=3 linearizable=yes" in "\n".join(chaos.summary_lines(report))
    assert _table(report) == []


def test_a_stale_read_after_an_acknowledged_patch_fails_the_soak_with_its_minimal_sub_history() -> None:
    history, calls, mine = _history()
    stale = calls.add(Call.GET, "lin-7-1", (100, 102), 200, tid="t1", seen=("pending", 1, "c1"), node="n2")
    report = _soak_report(history)
    assert report.linearizable is Linearizable.NO and not report.ok
    assert report.line().endswith("linearizable=no")
    lines = chaos.summary_lines(report)
    assert f"chaos: history: ops={len(history.ops)} records=3 linearizable=no" in "\n".join(lines)
    assert "chaos: history:   record 'lin-7-1': 9 operations are not linearizable; a minimal failing sub-history of 3:" in lines
    rows = _table(report)
    assert [row.split()[2] for row in rows] == [f"#{mine['create'].op_id}", f"#{mine['patch'].op_id}", f"#{stale.op_id}"]
    assert "get(t1)" in rows[-1] and "ok 200 pending v1 scene=c1" in rows[-1] and rows[-1].endswith("n2")


def test_a_read_of_a_version_never_written_fails_the_soak() -> None:
    history, calls, mine = _history()
    ghost = calls.add(Call.GET, "lin-7-1", (100, 102), 200, tid="t1", seen=("pending", 9, "zz"), node="n3")
    report = _soak_report(history)
    assert report.linearizable is Linearizable.NO and not report.ok
    rows = _table(report)
    assert rows and f"#{ghost.op_id} get(t1)" in rows[-1] and "v9 scene=zz" in rows[-1], rows
    assert f"#{mine['get1'].op_id} " not in "\n".join(rows)


def test_the_soak_fails_when_no_history_was_checked() -> None:
    report = chaos.Report(seed=7, digests_equal=True, ns_index=[])
    assert report.linearizable is Linearizable.UNDECIDED and not report.ok
