"""Linearizability of task records: Wing & Gong's search over the model of ``task_model.py``.

Records (idempotency keys) are checked one by one: linearizability is compositional. For one record
the search places the operations one at a time in an order that respects real time (an operation
may go next only if it was invoked before every unplaced certain operation answered) and that the
model accepts, backtracking on a dead end. As in Lowe's refinement it memoises what it has tried:
a configuration is (the certain operations placed, the state), and one reached before with a subset
of the unknown operations placed covers it (fewer used, more left to place). Unknown operations never
answered, so they may go anywhere after their invocation, or nowhere.

A violation is shrunk greedily to a minimal failing sub-history (removing any one more operation
makes it linearizable) and printed as a table by :func:`report`.

>>> ok, text = check(ops)      # ops: TaskOp from any number of records
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from tests.sim.task_model import UNSEEN, Call, Outcome, State, TaskOp, step

DEFAULT_MAX_STEPS = 2_000_000


class SearchTooLarge(Exception):
    """The search for one record passed its step budget: record fewer or less concurrent operations."""


def _candidates(ops: Sequence[TaskOp]) -> tuple[str, ...]:
    """Ids an unknown create of this record may have made: named by an answer, made by no answered create."""
    made = {o.task_id for o in ops if o.call is Call.CREATE and o.code == 201}
    named = {o.task_id for o in ops if o.task_id is not None and o.task_id != UNSEEN}
    return tuple(sorted(t for t in named - made if t is not None))


def linearizable(ops: Iterable[TaskOp], initial: State = None, max_steps: int = DEFAULT_MAX_STEPS) -> bool:
    """Whether the history of one record is linearizable."""
    hist = sorted((o for o in ops if o.checked), key=lambda o: (o.invoke, o.op_id))
    n = len(hist)
    if n == 0:
        return True
    cands = _candidates(hist)
    inf = 1 << 62
    inv = [o.invoke for o in hist]
    resp = [o.resp if (o.required and o.resp is not None) else inf for o in hist]
    required = 0
    for i, o in enumerate(hist):
        if o.required:
            required |= 1 << i
    unknown = ((1 << n) - 1) & ~required
    tried: dict[tuple[int, State], list[int]] = {}
    stack: list[tuple[int, State]] = [(0, initial)]
    steps = 0
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return True
        seen_with = tried.setdefault((done & required, state), [])
        used = done & unknown
        if any(m & ~used == 0 for m in seen_with):
            continue
        seen_with.append(used)
        steps += 1
        if steps > max_steps:
            raise SearchTooLarge(f"over {max_steps} configurations for record {hist[0].key!r} ({n} operations)")
        first_resp = min(resp[i] for i in range(n) if not done >> i & 1)
        for i in range(n):
            if inv[i] >= first_resp:
                break
            if done >> i & 1:
                continue
            for after in step(state, hist[i], cands):
                stack.append((done | 1 << i, after))
    return False


def _observes(o: TaskOp) -> bool:
    """A read, or an answer that changed nothing: removing it only removes a constraint."""
    return o.call is Call.GET or (o.outcome is not Outcome.UNKNOWN and o.code not in (200, 201)) or (
        o.call is Call.CREATE and o.code == 200
    )


def _upto(ops: Sequence[TaskOp], t: int) -> list[TaskOp]:
    """The history as seen at time ``t``: the operations invoked before it, those not answered by
    then being unknown."""
    out = []
    for o in ops:
        if o.invoke >= t:
            continue
        if o.resp is not None and o.resp > t and o.outcome is not Outcome.UNKNOWN:
            o = replace(o, outcome=Outcome.UNKNOWN, resp=None, code=None, seen=None)
        out.append(o)
    return out


def witness(ops: Sequence[TaskOp]) -> int | None:
    """The op_id of the answer at which a non-linearizable history first fails (the shortest failing
    prefix ends with it), or None when it is linearizable. Failing is monotone in the prefix: a binary
    search."""
    answered = sorted((o for o in ops if o.required and o.resp is not None), key=lambda o: (o.resp, o.op_id))
    if linearizable(ops):
        return None
    lo, hi = 0, len(answered) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if linearizable(_upto(ops, answered[mid].resp or 0)):
            lo = mid + 1
        else:
            hi = mid
    return answered[lo].op_id if answered else None


def _without(kept: list[TaskOp], w: TaskOp) -> list[TaskOp]:
    """``kept`` without ``w`` and, for a create, the operations on the task it made."""
    made = w.task_id if w.call is Call.CREATE else None
    return [x for x in kept if x is not w and (made is None or x.task_id != made)]


def shrink(ops: Sequence[TaskOp]) -> list[TaskOp]:
    """A sub-history of a non-linearizable ``ops`` that still fails at the same answer, minimal in that
    removing one more operation (a create: with the operations on the task it made) makes it
    linearizable or moves where it fails. Greedy, reads and refusals first (removing one only
    relaxes the history), then writes; a write is removed only when the rest fails at the same answer,
    so the shrinking never makes a violation of its own (a resume left without its pause)."""
    kept = [o for o in ops if o.checked]
    target = witness(kept)
    changed = True
    while changed:
        changed = False
        for o in [x for x in kept if _observes(x)]:
            rest = [x for x in kept if x is not o]
            if o.op_id != target and witness(rest) == target:
                kept, changed = rest, True
        for o in [x for x in kept if not _observes(x)]:
            if o not in kept or o.op_id == target:
                continue
            rest = _without(kept, o)
            if witness(rest) == target:
                kept, changed = rest, True
    return sorted(kept, key=lambda o: (o.invoke, o.op_id))


def _describe(o: TaskOp) -> str:
    args = [o.task_id or ""] if o.call is not Call.CREATE else [o.key]
    if o.if_match is not None:
        args.append(f"If-Match {o.if_match}")
    if o.scene is not None:
        args.append(f"scene={o.scene}")
    return f"{o.call}({', '.join(a for a in args if a)})"


def _answer(o: TaskOp) -> str:
    if o.outcome is Outcome.UNKNOWN:
        return "unknown" + (f" ({o.code})" if o.code else "")
    text = f"{o.outcome} {o.code}" if o.code is not None else str(o.outcome)
    if o.seen is not None:
        text += f" {o.seen.status} v{o.seen.version} scene={o.seen.scene}"
    if o.call is Call.CREATE and o.task_id:
        text += f" id={o.task_id}"
    return text


def report(ops: Sequence[TaskOp]) -> str:
    """A table of ``ops`` (op, invoke and response in ms from the first invoke, outcome, node)."""
    if not ops:
        return "(no operations)"
    t0 = min(o.invoke for o in ops)

    def ms(t: int | None) -> str:
        return "-" if t is None else f"{(t - t0) / 1e6:.1f}"

    rows = [("op", "invoke ms", "response ms", "outcome", "node")]
    for o in sorted(ops, key=lambda o: (o.invoke, o.op_id)):
        rows.append((f"#{o.op_id} {_describe(o)}", ms(o.invoke), ms(o.resp), _answer(o), o.node or "-"))
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def check(ops: Iterable[TaskOp]) -> tuple[bool, str]:
    """(True, "") when every record's history is linearizable, else (False, the first failing
    record's minimal failing sub-history as a table)."""
    by_key: dict[str, list[TaskOp]] = {}
    for o in ops:
        by_key.setdefault(o.key, []).append(o)
    for key in sorted(by_key):
        if not linearizable(by_key[key]):
            small = shrink(by_key[key])
            return False, (
                f"record {key!r}: {len(by_key[key])} operations are not linearizable; "
                f"a minimal failing sub-history of {len(small)}:\n{report(small)}"
            )
    return True, ""
