"""A small exact linearizability checker for a history of register operations.

Each key is an independent register (linearizability is compositional, so keys are checked
separately). Operations are recorded as invoke/ok/fail/unknown: ``fail`` operations certainly
never took effect and are dropped; an ``unknown`` write may have taken effect at any point after
its invocation (or never); an ``unknown`` read constrains nothing and is dropped. The search is
Wing & Gong's with memoisation of (linearized set, register value) as in Lowe's refinement; it is
exponential only in the number of concurrent operations, so keep histories small.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field


class Status(enum.StrEnum):
    PENDING = "pending"
    OK = "ok"
    FAIL = "fail"
    UNKNOWN = "unknown"


class Kind(enum.StrEnum):
    WRITE = "w"
    READ = "r"


@dataclass(slots=True)
class Op:
    op_id: int
    key: str
    kind: Kind
    value: int | None
    """Written value, or the value the read returned (None = never written)."""
    invoke: int
    resp: int | None = None
    status: Status = Status.PENDING
    node: str = ""
    extra: dict[str, object] = field(default_factory=dict)


def check_register(ops: Iterable[Op], initial: int | None = None) -> tuple[bool, str]:
    """(True, "") when the history of one register is linearizable, else (False, reason)."""
    hist: list[Op] = []
    for o in ops:
        if o.status is Status.FAIL or o.status is Status.PENDING:
            continue
        if o.status is Status.UNKNOWN and o.kind is Kind.READ:
            continue
        hist.append(o)
    hist.sort(key=lambda o: o.invoke)
    n = len(hist)
    if n == 0:
        return True, ""
    inf = 1 << 62
    inv = [o.invoke for o in hist]
    resp = [o.resp if (o.status is Status.OK and o.resp is not None) else inf for o in hist]
    required = 0
    for i, o in enumerate(hist):
        if o.status is Status.OK:
            required |= 1 << i
    is_write = [o.kind is Kind.WRITE for o in hist]
    vals = [o.value for o in hist]
    seen: set[tuple[int, int | None]] = set()

    # iterative DFS over (done mask, value)
    stack: list[tuple[int, int | None]] = [(0, initial)]
    seen.add((0, initial))
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return True, ""
        min_resp = inf
        for i in range(n):
            if not done >> i & 1 and resp[i] < min_resp:
                min_resp = resp[i]
        for i in range(n):
            if inv[i] >= min_resp:
                break
            if done >> i & 1:
                continue
            if is_write[i]:
                ns = vals[i]
            elif vals[i] != state:
                continue
            else:
                ns = state
            key = (done | 1 << i, ns)
            if key not in seen:
                seen.add(key)
                stack.append(key)
    return False, f"no linearization of {n} operations on key {hist[0].key!r}"


def check_history(ops: Iterable[Op]) -> tuple[bool, str]:
    """Check every key's register history; returns the first failure."""
    by_key: dict[str, list[Op]] = {}
    for o in ops:
        by_key.setdefault(o.key, []).append(o)
    for key in sorted(by_key):
        ok, why = check_register(by_key[key])
        if not ok:
            return ok, why
    return True, ""
