"""Clients that record a history of task API calls against a real cluster, for the task-record
linearizability checker (``tests/sim/task_linearizability.py``).

:func:`record` runs a few threads on a small set of records (idempotency keys), each call to a node
picked at random: create (with the record's ``Idempotency-Key``), ``GET ?consistency=linearizable``,
``PATCH`` with ``If-Match`` (the version last seen, so some win and some get ``412``; a new scene each
time, so every success makes a new version), delete, pause, resume. Every call becomes a
:class:`~tests.sim.task_model.TaskOp` with its invoke and answer times and outcome:

- ``ok``: 200/201 (a read's 404 too: it read "absent").
- ``fail`` with a code the model checks: 404, 409, 412 (the write was refused for what the record is).
- a write sent to a follower answers ``307`` to the leader, having applied nothing; the call follows
  it (at most ``MAX_REDIRECTS`` times, as a client does) and is recorded as one call, invoked when
  its first request was sent and answered by the last answer, so it is checked like any other
  (``redirects`` counts them). A ``307`` not followed further is a ``fail`` that says nothing.
- ``fail`` that says nothing: ``503 no_leader`` and ``507`` (nothing applied); any other 4xx.
- ``unknown``: no answer (timeout, cut connection), ``503 outcome_unknown`` or another 5xx: the
  write may have happened, at any time after it was sent. An unknown read is dropped.

It stops by itself after ``max_ops`` calls or ``max_seconds``, or when ``stop`` is set, and returns
the :class:`History`; :func:`check` says whether it is linearizable, with the minimal failing
sub-history when it is not. ``calls_per_s`` bounds each thread's rate; ``calls_per_record`` retires a
record after that many calls for a fresh one (a new key), so a long recording stays many short
per-record histories and the check (and the shrinking of a violation) stays cheap. The chaos soak
records while its faults run and keeps the :func:`verdict` (counts, ``linearizable=yes|no``, the
minimal failing sub-history)::

    history = record(urls, stop, seed, calls_per_s=5, calls_per_record=200)   # in a thread; stop.set() to end
    found = verdict(history)                    # found.linearizable, found.line(), found.report
"""

from __future__ import annotations

import enum
import itertools
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import urllib3

from tests.sim import task_linearizability
from tests.sim.task_model import Call, Outcome, Seen, TaskOp

CALLBACK_URL = "http://127.0.0.1:9/never"
"""Records are periodic tasks due in an hour: nothing fires while the history is recorded."""

INTERVAL_MS = 3_600_000

MAX_REDIRECTS = 2
"""How many ``307`` answers one call follows (a leader that changed while it was redirected: one more)."""

WEIGHTS = {Call.GET: 35, Call.PATCH: 20, Call.PAUSE: 12, Call.RESUME: 12, Call.CREATE: 12, Call.DELETE: 5}
"""How often each call is made once the record's task is known (before, every call is a create)."""


@dataclass(slots=True)
class History:
    """The calls recorded, in the order they were answered."""

    ops: list[TaskOp] = field(default_factory=list)
    seed: int = 0

    def counts(self) -> dict[str, int]:
        """``size`` (all calls), calls by outcome, ``unknown_writes`` (the unknowns the checker keeps),
        ``refusals`` (404/409/412 of writes: checked), ``redirects`` (calls that followed a 307)."""
        c = Counter(str(o.outcome) for o in self.ops)
        return {
            "size": len(self.ops), **{k: c.get(k, 0) for k in ("ok", "fail", "unknown")},
            "unknown_writes": sum(o.outcome is Outcome.UNKNOWN and o.call is not Call.GET for o in self.ops),
            "refusals": sum(o.outcome is Outcome.FAIL and o.checked for o in self.ops),
            "redirects": sum("redirects" in o.extra for o in self.ops),
        }

    def summary(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.counts().items())


def check(history: History) -> tuple[bool, str]:
    """(True, "") when every record's history is linearizable, else (False, the minimal failing
    sub-history as a table)."""
    return task_linearizability.check(history.ops)


class Linearizable(enum.StrEnum):
    YES = "yes"
    NO = "no"
    UNDECIDED = "undecided"
    """The search for one record passed its step budget (``SearchTooLarge``): neither shown nor refuted."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`verdict` found of a history."""

    counts: dict[str, int]
    """:meth:`History.counts`."""
    records: int
    """How many records (idempotency keys) the calls went to."""
    linearizable: Linearizable
    report: str
    """Why not: the first failing record's minimal failing sub-history as a table ("" when yes)."""
    check_s: float

    def line(self) -> str:
        c = self.counts
        return (f"history: ops={c['size']} records={self.records} linearizable={self.linearizable} ok={c['ok']} "
                f"fail={c['fail']} unknown={c['unknown']} unknown_writes={c['unknown_writes']} "
                f"refusals={c['refusals']} redirects={c['redirects']} check_s={self.check_s:.1f}")


def verdict(history: History) -> Verdict:
    """Check ``history`` (:func:`check`) and say what was checked."""
    started = time.monotonic()
    try:
        ok, report = check(history)
        found = Linearizable.YES if ok else Linearizable.NO
    except task_linearizability.SearchTooLarge as exc:
        found, report = Linearizable.UNDECIDED, str(exc)
    return Verdict(counts=history.counts(), records=len({o.key for o in history.ops}), linearizable=found,
                   report=report, check_s=time.monotonic() - started)


class _Recorder:
    """The shared part of one recording: what the threads learned of each record, and the history."""

    def __init__(self, urls: Mapping[str, str] | Sequence[str], seed: int, records: int, max_ops: int, max_seconds: float,
                 stop: threading.Event, timeout_s: float, history: History, calls_per_s: float | None = None,
                 calls_per_record: int | None = None) -> None:
        self.nodes = list(urls.items()) if isinstance(urls, Mapping) else [(u.rsplit(":", 1)[-1], u) for u in urls]
        """(name, REST base URL) of each node: the name labels the calls sent to it."""
        self.seed = seed
        self.keys = [f"lin-{seed}-{i}" for i in range(records)]
        """The records in use, one per slot; a slot's record is retired after ``calls_per_record`` calls."""
        self.calls_per_record = calls_per_record
        self.calls_on: Counter[str] = Counter()
        self.generation = [0] * records
        self.min_gap_s = 0.0 if calls_per_s is None else 1.0 / calls_per_s
        self.task_id: dict[str, str] = {}
        """key -> the id of the task an answer last named for it."""
        self.version: dict[str, int] = {}
        """key -> the version an answer last showed."""
        self.history = history
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.budget = max_ops
        self.deadline = time.monotonic() + max_seconds
        self.stop = stop
        self.timeout = urllib3.Timeout(connect=1.0, read=timeout_s)

    def take(self) -> int | None:
        """A new op id, or None when the recording is over."""
        with self.lock:
            if self.stop.is_set() or time.monotonic() >= self.deadline or self.budget <= 0:
                return None
            self.budget -= 1
            return next(self.ids)

    def pick(self, rng: random.Random) -> str:
        """The record of the next call: one of the slots' at random, counted; a slot whose record has
        had ``calls_per_record`` calls gets a fresh one (``lin-SEED-SLOT.GENERATION``). Under the lock."""
        slot = rng.randrange(len(self.keys))
        key = self.keys[slot]
        self.calls_on[key] += 1
        if self.calls_per_record is not None and self.calls_on[key] >= self.calls_per_record:
            self.generation[slot] += 1
            self.keys[slot] = f"lin-{self.seed}-{slot}.{self.generation[slot]}"
        return key

    def run(self, thread: int) -> None:
        rng = random.Random(f"{self.history.seed}-{thread}")
        http = urllib3.PoolManager(retries=False, timeout=self.timeout)
        try:
            while (op_id := self.take()) is not None:
                began = time.monotonic()
                self.call(http, rng, op_id)
                # pacing between calls (at most calls_per_s a thread), not waiting for an effect
                self.stop.wait(max(rng.uniform(0, 0.02), self.min_gap_s - (time.monotonic() - began)))
        finally:
            http.clear()

    def call(self, http: urllib3.PoolManager, rng: random.Random, op_id: int) -> None:
        with self.lock:
            key = self.pick(rng)
            tid, version = self.task_id.get(key), self.version.get(key, 1)
        call = Call.CREATE if tid is None else rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        node, base = rng.choice(self.nodes)
        o = TaskOp(op_id=op_id, key=key, call=call, invoke=0, node=node,
                   task_id=None if call is Call.CREATE else tid)
        method, path, body, headers = self.request(o, version, op_id)
        o.invoke = time.monotonic_ns()
        try:
            r = http.request(method, base + path, body=body, headers=headers, redirect=False)
            hops = 0
            while r.status == 307 and hops < MAX_REDIRECTS and (location := r.headers.get("Location")):
                hops += 1  # nothing was applied where it was sent: the same call goes on at the leader
                o.extra["redirects"] = hops
                r = http.request(method, location, body=body, headers=headers, redirect=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # no answer: it may have happened
            o.resp, o.outcome = time.monotonic_ns(), Outcome.UNKNOWN
            o.extra["error"] = type(exc).__name__
        else:
            o.resp = time.monotonic_ns()
            self.judge(o, r.status, r.data)
        with self.lock:
            self.history.ops.append(o)
            if o.code in (200, 201) and o.seen is not None and (o.call is not Call.DELETE):
                if o.task_id is not None:
                    self.task_id[key] = o.task_id
                self.version[key] = o.seen.version

    @staticmethod
    def request(o: TaskOp, version: int, op_id: int) -> tuple[str, str, bytes | None, dict[str, str]]:
        tasks = "/api/v1/tasks"
        if o.call is Call.CREATE:
            o.scene = f"c{op_id}"
            body = {"type": "periodic", "interval_ms": INTERVAL_MS, "callback_url": CALLBACK_URL, "scene": o.scene}
            return "POST", tasks, json.dumps(body).encode(), {"Content-Type": "application/json", "Idempotency-Key": o.key}
        if o.call is Call.GET:
            return "GET", f"{tasks}/{o.task_id}?consistency=linearizable", None, {}
        if o.call is Call.PATCH:
            o.scene, o.if_match = f"p{op_id}", version
            return "PATCH", f"{tasks}/{o.task_id}", json.dumps({"scene": o.scene}).encode(), {
                "Content-Type": "application/merge-patch+json", "If-Match": f'"{version}"'}
        if o.call is Call.DELETE:
            return "DELETE", f"{tasks}/{o.task_id}", None, {}
        return "POST", f"{tasks}/{o.task_id}/{o.call}", None, {}

    @staticmethod
    def judge(o: TaskOp, status: int, data: bytes) -> None:
        """Sets the op's outcome, code and what the answer showed."""
        o.code = status
        if status in (200, 201):
            task: dict[str, Any] = json.loads(data)
            o.outcome = Outcome.OK
            o.seen = Seen(task["status"], int(task["version"]), task["scene"])
            if o.call is Call.CREATE:
                o.task_id = task["id"]
        elif status == 404 and o.call is Call.GET:
            o.outcome = Outcome.OK
        elif 400 <= status < 500 or status in (307, 507) or (status == 503 and _error_code(data) == "no_leader"):
            o.outcome = Outcome.FAIL  # 404/409/412 are checked; the others changed nothing
        else:
            o.outcome = Outcome.UNKNOWN
        if o.outcome is not Outcome.OK and status not in (404, 409, 412):
            o.extra["error"] = _error_code(data) or str(status)


def _error_code(data: bytes) -> str | None:
    try:
        return str(json.loads(data)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def record(node_urls: Mapping[str, str] | Sequence[str], stop: threading.Event, seed: int, *, threads: int = 4, records: int = 4,
           max_ops: int = 1500, max_seconds: float = 120.0, timeout_s: float = 3.0,
           calls_per_s: float | None = None, calls_per_record: int | None = None,
           into: History | None = None) -> History:
    """Record a history of task API calls against the nodes at ``node_urls`` (their REST base URLs, or
    node name -> URL to label the calls by name) until ``stop`` is set, ``max_ops`` calls were made or
    ``max_seconds`` passed; returns it. ``records`` are in use at a time, each retired for a fresh one
    after ``calls_per_record`` calls (None: never); each thread makes at most ``calls_per_s`` calls a
    second (None: as fast as answers come). ``into``: a History to append to as calls are answered
    (its length shows the progress while it runs)."""
    history = into if into is not None else History()
    history.seed = seed
    rec = _Recorder(node_urls, seed, records, max_ops, max_seconds, stop, timeout_s, history,
                    calls_per_s=calls_per_s, calls_per_record=calls_per_record)
    workers = [threading.Thread(target=rec.run, args=(i,), name=f"history-{i}", daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    with rec.lock:
        rec.history.ops.sort(key=lambda o: (o.resp or 0, o.op_id))
        return rec.history
