"""What each ``molens`` command does: one function per leaf of :mod:`molens.ops_cli.parser`, taking
the client, the parsed arguments and the printer, and returning the exit code.

Every request goes through :class:`molens.client.MolensClient`, so every command follows the
leader, retries what is safe to retry and reports a lost answer as
:class:`~molens.client.OutcomeUnknownError` (exit 3) rather than guessing.

Bulk commands (``tasks pause|resume|trigger|delete`` and ``dead-letters redrive|delete`` given a
filter) first list what matches, print the count, and act only after a confirmation: a ``y`` typed
on the terminal, or ``--yes``; without a terminal and without ``--yes`` they refuse (exit 2).
``--dry-run`` lists what matches and stops there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from molens.client import (
    MAX_BULK,
    ApiError,
    ClientError,
    ConnectionFailedError,
    MolensClient,
    OutcomeUnknownError,
    UnavailableError,
)
from molens.errors import MolensError
from molens.ops_cli.render import Column, Mode, Printer, Row, col, when

Handler = Callable[[MolensClient, argparse.Namespace, Printer], int]

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3


class UsageError(MolensError):
    """A command line that cannot be carried out as given (exit 2)."""

    code = "usage"


def dur(ms: Any) -> str:
    """``300000`` -> ``5m``; ``1500`` -> ``1500ms``."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "-"
    for unit, n in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms and ms % n == 0:
            return f"{ms // n}{unit}"
    return f"{ms}ms"


def schedule(t: Row) -> str:
    if t.get("cron_expr"):
        return f"cron {t['cron_expr']} {t.get('timezone') or 'UTC'}"
    if t.get("type") == "periodic":
        return f"every {dur(t.get('interval_ms'))}"
    if t.get("run_at") is not None:
        return f"at {when(t['run_at'])}"
    return f"after {dur(t.get('interval_ms'))}"


TASK_COLUMNS = (
    col("ID", "id"), col("TYPE", "type"), col("STATUS", "status"), Column("SCHEDULE", schedule),
    col("NEXT RUN", "next_run_at", time=True), col("SCENE", "scene"), col("CALLBACK", "callback_url", max_width=48),
)
EXECUTION_COLUMNS = (
    col("FINISHED", "finished_at", time=True, width=24), col("TASK", "task_id", width=26),
    col("SEQ", "seq", width=4), col("ATTEMPT", "attempt"), col("KIND", "kind", width=8),
    col("RESULT", "result", width=13), col("STATUS", "status_code"),
    Column("LATENCY", lambda r: f"{r['latency_ms']}ms" if r.get("latency_ms") is not None else None, 60, 8),
)
DEAD_COLUMNS = (
    col("ID", "id"), col("KIND", "kind"), col("ATTEMPTS", "attempts"), col("STATUS", "status_code"),
    col("AT", "at", time=True), col("FLOW", "flow"), col("URL", "url", max_width=48),
)
FLOW_COLUMNS = (
    col("KEY", "key"), col("RATE/S", "rate_per_s"), col("BURST", "burst"), col("CONCURRENCY", "concurrency"),
    col("PAUSED", "paused"), col("ADAPTIVE", "adaptive"), col("SENT/S", "rate"), col("IN FLIGHT", "in_flight"),
    col("QUEUED", "queued"),
)
MEMBER_COLUMNS = (
    col("ID", "id"), col("ROLE", "role"), col("SUFFRAGE", "suffrage"), col("HTTP URL", "http_url"),
    col("MATCH INDEX", "match_index"), col("LAST CONTACT MS", "last_contact_ms"),
)
NAMESPACE_COLUMNS = (
    col("NAME", "name"), Column("MAX PENDING", lambda r: (r.get("quotas") or {}).get("max_pending_tasks"), 60, 0),
    Column("CREATES/S", lambda r: (r.get("quotas") or {}).get("creates_per_s"), 60, 0),
    Column("MAX PAYLOAD", lambda r: (r.get("quotas") or {}).get("max_payload_bytes"), 60, 0),
    col("CREATED", "created_at", time=True),
)
KEY_COLUMNS = (
    col("ID", "id"), col("NAME", "name"), col("ROLE", "role"),
    Column("NAMESPACES", lambda r: ",".join(r.get("namespaces") or []), 60, 0),
    col("CREATED", "created_at", time=True), col("LAST USED", "last_used_at", time=True),
)
RESULT_COLUMNS = (col("ID", "id", width=26), col("RESULT", "result", width=9), col("DETAIL", "detail", max_width=100))


def _page(limit: int | None) -> int:
    """The page size for a list printed up to ``limit``: one more item tells whether more match."""
    return 1000 if limit is None else min(limit + 1, 1000)


def _limited(rows: Iterator[Row], limit: int | None, p: Printer, what: str) -> Iterable[Row]:
    """At most ``limit`` rows; when more match, says so on stderr (after the list)."""
    if limit is None:
        yield from rows
        return
    yield from itertools.islice(rows, limit)
    if next(rows, None) is not None:
        p.note(f"(the first {limit} {what}; more match: --limit N or --all)")


# ------------------------------------------------------------------------------------------ tasks

def _task_body(a: argparse.Namespace) -> dict[str, Any]:
    """The task fields given: ``--file``, then the options, then ``--set`` and ``--unset``."""
    body: dict[str, Any] = {}
    if a.file:
        try:
            text = sys.stdin.read() if a.file == "-" else Path(a.file).read_text(encoding="utf-8")
            loaded = json.loads(text)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--file {a.file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--file {a.file}: expected a JSON object of task fields")
        body.update(loaded)
    for name, value in vars(a).items():
        if name.startswith("f_") and value is not None:
            body[name[2:]] = value
    body.update(dict(a.assignments))
    for name in getattr(a, "unset", []):
        body[name] = None
    return body


def task_create(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    body = _task_body(a)
    try:
        t = c.create(body)
    except OutcomeUnknownError as exc:
        key = exc.idempotency_keys[0] if exc.idempotency_keys else body.get("idempotency_key")
        p.note(f"idempotency key: {key}")
        p.note(f"the create may or may not have happened; run it again with --idempotency-key {key} "
               "to create it only if it did not")
        raise
    if p.mode is Mode.TABLE:
        p.table([t], TASK_COLUMNS)
    else:
        p.obj(t)
    p.note(f"idempotency key: {t.get('idempotency_key')}")
    return OK


def task_list(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    rows = c.list(status=a.status, type=a.type, scene=a.scene, url=a.callback_contains,
                  order="-created" if a.order == "newest" else a.order,
                  page_size=_page(a.limit))
    p.items(_limited(rows, a.limit, p, "tasks"), TASK_COLUMNS)
    return OK


def task_get(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    p.obj(c.get(a.id, consistency="linearizable" if a.linearizable else "local"))
    return OK


def task_patch(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    body = _task_body(a)
    if not body:
        raise UsageError("nothing to change: give task field options, --set, --unset or --file")
    p.obj(c.update(a.id, body, if_version=a.if_version))
    return OK


# Statuses each action is legal from: the default filter of a bulk action (docs/api.md#tasks).
ACTION_STATUSES = {
    "pause": ["pending", "firing", "awaiting_ack"],
    "resume": ["paused", "inactive"],
    "trigger": ["pending"],
    "delete": None,
}
PAST = {"pause": "paused", "resume": "resumed", "trigger": "triggered", "delete": "deleted",
        "redrive": "redriven"}


def _task_act(c: MolensClient, a: argparse.Namespace) -> Callable[[str], Row]:
    if a.action == "pause":
        return c.pause
    if a.action == "resume":
        return lambda i: c.resume(i, resume_from=a.resume_from)
    if a.action == "trigger":
        return c.trigger
    return c.delete


def task_action(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    filt = {k: getattr(a, k) for k in ("status", "type", "scene", "callback_contains") if getattr(a, k) is not None}
    if a.ids and filt:
        raise UsageError("give task ids or a filter, not both")
    if not a.ids and not filt:
        raise UsageError(f"give the ids of the tasks to {a.action}, or a filter (--status, --type, --scene, "
                         "--callback-contains)")
    act = _task_act(c, a)
    if len(a.ids) == 1 and not a.dry_run:
        t = act(a.ids[0])
        p.obj(t, summary=TASK_COLUMNS)
        return OK
    if a.ids:
        ids = list(dict.fromkeys(a.ids))
        what = f"{len(ids)} tasks"
        if a.dry_run:
            p.items((c.get(i) for i in ids), TASK_COLUMNS)
            return OK
    else:
        status = filt.get("status") or ACTION_STATUSES[a.action]
        matched = list(c.list(status=status, type=filt.get("type"), scene=filt.get("scene"),
                              url=filt.get("callback_contains"), page_size=1000))
        desc = ", ".join(f"{k.replace('_', '-')}={','.join(v) if isinstance(v, list) else v}"
                         for k, v in {"status": status, **filt}.items() if v)
        what = f"{len(matched)} tasks ({desc})"
        ids = [t["id"] for t in matched]
        empty = {"action": a.action, "matched": 0, PAST[a.action]: 0, "error_count": 0, "errors": [], "ids": []}
        stop = _gate(a, p, matched, TASK_COLUMNS, what, empty)
        if stop is not None:
            return stop
    return _each(ids, act, p, a.action, what)


def _gate(a: argparse.Namespace, p: Printer, matched: list[Row], columns: tuple[Column, ...], what: str,
          empty: Row) -> int | None:
    """Before a bulk action by filter: the exit code to stop with (a dry run, nothing matched, a
    confirmation refused), or None to go on."""
    if a.dry_run:
        p.items(matched, columns)
        p.note(f"{what} would be {PAST[a.action]} (dry run: nothing done)")
        return OK
    if not matched:
        p.note(f"nothing matches: {what}")
        if p.mode is not Mode.TABLE:
            p.obj(empty)
        return OK
    return None if _confirmed(a, p, f"{a.action} {what}") else FAILED


def _confirmed(a: argparse.Namespace, p: Printer, what: str) -> bool:
    if a.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(f"about to {what}: no terminal to confirm on; add --yes (or --dry-run to list them)")
    print(f"{what[0].upper()}{what[1:]}? [y/N] ", end="", file=p.err, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes"):
        return True
    p.note("declined: nothing done")
    return False


def _each(ids: list[str], act: Callable[[str], Row], p: Printer, action: str, what: str) -> int:
    """Acts on each id in turn; prints a row per id (a table) or a summary (JSON), also when the
    cluster stops serving part way (then the error follows). A warning an answer carries (a redrive
    of an at_most_once fire) is kept in its row and said once at the end."""
    results: list[Row] = []
    if p.mode is Mode.TABLE and ids:
        p.stream_header(RESULT_COLUMNS)
    unknown = 0

    def summary() -> None:
        done = sum(r["result"] == PAST[action] for r in results)
        errors = [r for r in results if r["result"] != PAST[action]]
        p.note(f"{done} of {what} {PAST[action]}" + (f", {len(errors)} failed" if errors else ""))
        if warned := [r for r in results if r.get("warning")]:
            p.note(f"warning ({len(warned)} of them): {warned[0]['warning']}")
        if p.mode is not Mode.TABLE:
            p.obj({"action": action, "matched": len(ids), PAST[action]: done, "error_count": len(errors),
                   "errors": errors, "ids": [r["id"] for r in results if r["result"] == PAST[action]]}
                  | ({"warnings": [{"id": r["id"], "warning": r["warning"]} for r in warned]} if warned else {}))

    for n, i in enumerate(ids):
        try:
            out = act(i)
            r: Row = {"id": i, "result": PAST[action], "detail": None}
            if isinstance(out, dict) and out.get("warning"):
                r["detail"] = r["warning"] = out["warning"]
        except UnavailableError:  # no leader after every retry: the next ids would meet the same
            p.note(f"stopped after {n} of {len(ids)}: the cluster is not serving")
            summary()
            raise
        except ApiError as exc:
            if exc.status in (401, 403):  # the key, not the item: every next id would meet the same
                p.note(f"stopped after {n} of {len(ids)}: {exc.code}")
                summary()
                raise
            r = {"id": i, "result": "error", "code": exc.code, "status": exc.status, "detail": str(exc)}
        except OutcomeUnknownError as exc:
            unknown += 1
            r = {"id": i, "result": "unknown", "code": exc.code, "detail": str(exc)}
        except ConnectionFailedError:
            p.note(f"stopped after {n} of {len(ids)}: no node answers")
            summary()
            raise
        except KeyboardInterrupt:  # what was done is said, and the one in flight named
            p.note(f"interrupted after {n} of {len(ids)}: {i} may or may not have been {PAST[action]}")
            results.append({"id": i, "result": "unknown", "code": "interrupted", "detail": "interrupted"})
            summary()
            raise
        results.append(r)
        if p.mode is Mode.TABLE:
            p.stream_row(r, RESULT_COLUMNS)
    summary()
    errors = [r for r in results if r["result"] != PAST[action]]
    return UNREACHABLE if unknown else FAILED if errors else OK


def task_backfill(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    end = a.end if a.end is not None else int(time.time() * 1000)
    out = c.backfill(a.id, start=a.start, end=end)
    if p.mode is Mode.TABLE:
        p.fields({"occurrences": out.get("occurrences"), "first": when(out.get("first")),
                  "last": when(out.get("last")), "task": out.get("task", {}).get("id")})
    else:
        p.obj(out)
    return OK


# ------------------------------------------------------------------------------------------ executions

def executions(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    rows = c.executions(a.task, result=a.result, since=a.since, until=a.until, page_size=_page(a.limit))
    p.items(_limited(rows, a.limit, p, "executions"), EXECUTION_COLUMNS)
    return OK


def _execution_key(e: Row) -> tuple[Any, ...]:
    """One execution on every node (its ``id`` is each replica's own row number)."""
    return (e.get("fire_id"), e.get("kind"), e.get("attempt"), e.get("result"), e.get("finished_at"),
            e.get("execution_result"))


INTERRUPT = threading.Event()
"""Set by Ctrl-C while :func:`interruptible` is in force. Python raises ``KeyboardInterrupt`` wherever the
signal lands, and where that is a finaliser (a finished response closing as it is collected) the
exception is printed as ignored and lost; a command that runs until Ctrl-C also checks this."""


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT both sets :data:`INTERRUPT` and raises ``KeyboardInterrupt``, for the block (main thread only)."""
    INTERRUPT.clear()
    if threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            INTERRUPT.clear()
        return

    def on_sigint(signum: int, frame: object) -> None:
        INTERRUPT.set()
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        INTERRUPT.clear()  # a Ctrl-C of this block is not one of the next


WATCH_OVERLAP_MS = 10_000
"""How far back each poll of ``watch`` reads before the latest execution it has seen: a result
recorded late (another worker's, or a node that applies behind the leader after a failover) still
shows; what was already printed is recognised and skipped."""


def watch(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    task = c.get(a.id)
    p.note(f"watching {task['id']} ({task['type']}, {task['status']}, {schedule(task)}); Ctrl-C stops")
    deadline = None if a.watch_timeout is None else time.monotonic() + a.watch_timeout
    latest = list(itertools.islice(c.executions(a.id, page_size=max(1, min(a.last, 1000))), max(1, a.last)))
    since = max((e["finished_at"] for e in latest), default=None)
    seen = {_execution_key(e) for e in latest}
    fresh: list[Row] = []  # finished between the two reads: new, not old news
    if since is not None:  # what the first poll's overlap reads again is old news
        for e in c.executions(a.id, since=max(0, since - WATCH_OVERLAP_MS), page_size=1000):
            if (k := _execution_key(e)) not in seen and e["finished_at"] > since:
                fresh.append(e)
            seen.add(k)
    printed: list[Row] = []

    def show(e: Row) -> None:
        printed.append(e)
        if p.mode is Mode.TABLE:
            p.stream_row(e, EXECUTION_COLUMNS)
        elif p.mode is Mode.JSONL:
            p.line(e)

    if p.mode is Mode.TABLE:
        p.stream_header(EXECUTION_COLUMNS)
    try:
        for e in reversed(latest[: a.last]):
            show(e)
        earlier = len(printed)  # --last's: they do not count towards --count
        for e in reversed(fresh):  # oldest first
            if a.count is None or len(printed) - earlier < a.count:
                show(e)
        if fresh:
            since = max(e["finished_at"] for e in fresh)
        while True:
            if INTERRUPT.is_set():  # a Ctrl-C whose KeyboardInterrupt a finaliser swallowed
                raise KeyboardInterrupt
            if a.count is not None and len(printed) - earlier >= a.count:
                return OK
            if deadline is not None and time.monotonic() >= deadline:
                return FAILED if a.count is not None else OK
            time.sleep(a.poll_s if deadline is None else max(0.0, min(a.poll_s, deadline - time.monotonic())))
            after = None if since is None else max(0, since - WATCH_OVERLAP_MS)
            page = list(c.executions(a.id, since=after, page_size=1000))
            for e in reversed(page):  # oldest first
                k = _execution_key(e)
                if k in seen:
                    continue
                seen.add(k)
                if a.count is None or len(printed) - earlier < a.count:
                    show(e)
            if page:
                since = max(since or 0, max(e["finished_at"] for e in page))
                seen = {k for k in seen if isinstance(k[4], int) and k[4] >= since - WATCH_OVERLAP_MS}
    finally:
        if p.mode is Mode.JSON:
            p.obj(printed)


# ------------------------------------------------------------------------------------------ dead letters

def _dead_filter(a: argparse.Namespace) -> dict[str, Any]:
    f = {"task_id": a.task, "flow": a.flow, "kind": a.kind, "since": a.since, "until": a.until}
    return {k: v for k, v in f.items() if v is not None}


def dead_list(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    rows = c.dead_letters(**_dead_filter(a), page_size=_page(a.limit))
    p.items(_limited(rows, a.limit, p, "dead letters"), DEAD_COLUMNS)
    return OK


def dead_get(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    p.obj(c.dead_letter(a.id))
    return OK


def dead_action(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    filt = _dead_filter(a)
    if a.ids and (filt or a.every):
        raise UsageError("give dead letter ids or a filter, not both")
    if not a.ids and not filt and not a.every:
        raise UsageError(f"give the ids of the dead letters to {a.action}, a filter (--task, --flow, --kind, "
                         "--since, --until), or --all")
    act: Callable[[str], Row] = c.redrive if a.action == "redrive" else c.delete_dead_letter
    if len(a.ids) == 1 and not a.dry_run:
        out = act(a.ids[0])
        p.obj(out, summary=DEAD_COLUMNS if a.action == "redrive" else None)
        if out.get("warning"):
            p.note(f"warning: {out['warning']}")
        return OK
    if a.ids:
        ids = list(dict.fromkeys(a.ids))
        if a.dry_run:
            p.items((c.dead_letter(i) for i in ids), DEAD_COLUMNS)
            return OK
        return _each(ids, act, p, a.action, f"{len(ids)} dead letters")
    matched = list(c.dead_letters(**filt, page_size=1000))
    desc = ", ".join(f"{k}={v}" for k, v in filt.items()) or "all"
    what = f"{len(matched)} dead letters ({desc})"
    total: dict[str, Any] = {"matched": 0, PAST[a.action]: 0, "error_count": 0, "errors": []}
    stop = _gate(a, p, matched, DEAD_COLUMNS, what, total)
    if stop is not None:
        return stop
    while total["matched"] < len(matched):  # at most what was confirmed; the API acts on MAX_BULK a call
        limit = min(MAX_BULK, len(matched) - total["matched"])
        try:
            if a.action == "redrive":
                out = c.redrive_matching(**filt, limit=limit)
            else:
                out = c.delete_dead_letters(**filt, limit=limit, all=not filt)
        except (ClientError, KeyboardInterrupt) as exc:  # what the calls before this one did, then the error
            if isinstance(exc, KeyboardInterrupt):
                p.note(f"interrupted: the request in flight (up to {limit} dead letters) may or may not have applied")
                total["interrupted"] = True
            p.obj(total)
            raise
        for k in (PAST[a.action], "error_count"):
            total[k] += out.get(k, 0)
        cut = out.get("interrupted")  # a leader change after part of it applied: the rest goes in the next call
        total["matched"] += out.get(PAST[a.action], 0) + out.get("error_count", 0) if cut else out.get("matched", 0)
        if cut:
            p.note(f"interrupted after {out.get(PAST[a.action], 0)} ({cut.get('message', '')}); going on")
        total["errors"].extend(out.get("errors", []))
        for k in ("warning", "at_most_once"):
            if k in out:
                total[k] = out[k]
        if not out.get("more") or not out.get("matched"):
            break
    p.obj(total)
    if total.get("warning"):
        p.note(f"warning: {total['warning']}")
    return FAILED if total["error_count"] else OK


# ------------------------------------------------------------------------------------------ flows

def flow_list(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    p.items(c.flows(), FLOW_COLUMNS)
    return OK


def flow_one(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    act = {"get": c.flow, "pause": c.pause_flow, "resume": c.resume_flow, "delete": c.delete_flow}[a.action]
    p.obj(act(a.key))
    return OK


def flow_put(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    p.obj(c.set_flow(a.key, rate_per_s=a.rate_per_s, burst=a.burst, concurrency=a.concurrency, paused=a.paused,
                     adaptive=a.adaptive))
    return OK


# ------------------------------------------------------------------------------------------ namespaces, keys

def resource_list(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    """``namespaces list`` and ``keys list``."""
    if a.resource == "keys":
        p.items(c.api_keys(), KEY_COLUMNS)
    else:
        p.items(c.namespaces(), NAMESPACE_COLUMNS)
    return OK


def resource_one(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    """``namespaces get|delete NAME`` and ``keys get|delete KEY_ID``."""
    acts = {
        ("namespaces", "get"): c.get_namespace, ("namespaces", "delete"): c.delete_namespace,
        ("keys", "get"): c.get_api_key, ("keys", "delete"): c.delete_api_key,
    }
    p.obj(acts[a.resource, a.action](a.ref))
    return OK


def namespace_create(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    quotas = {k: getattr(a, k) for k in ("max_pending_tasks", "creates_per_s", "max_payload_bytes", "fires_per_s")
              if getattr(a, k) is not None}
    p.obj(c.create_namespace(a.name, quotas=quotas))
    return OK


def key_create(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    k = c.create_api_key(a.name, role=a.role, namespaces=a.namespaces)
    p.obj(k)
    p.note("the secret is shown only this once: keep it now")
    return OK


# ------------------------------------------------------------------------------------------ cluster

def cluster_status(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    st = c.cluster_status()
    if p.mode is not Mode.TABLE:
        p.obj(st)
        return OK
    p.fields({k: v for k, v in st.items() if k != "nodes"})
    print(file=p.out)
    p.table(st.get("nodes", []), MEMBER_COLUMNS)
    return OK


def cluster_leader(c: MolensClient, a: argparse.Namespace, p: Printer) -> int:
    p.obj(c.leader())
    return OK


HANDLERS: dict[str, Handler] = {
    f.__name__: f for f in (
        task_create, task_list, task_get, task_patch, task_action, task_backfill, executions, watch,
        dead_list, dead_get, dead_action, flow_list, flow_one, flow_put, resource_list, resource_one,
        namespace_create, key_create, cluster_status, cluster_leader,
    )
}

__all__ = ["HANDLERS", "ClientError", "UsageError"]
