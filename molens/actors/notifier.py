"""Notifier: the leader actor that delivers failure notifications from the replicated outbox.

Owns a :class:`NoticePlan` (per target URL: a backoff after a failed POST; the keys being
acknowledged). Receives ``Wake`` (its alarm, every :data:`INTERVAL_MS`) and ``NoticesAcked`` (the
outcome of its ``AckNotices`` proposal, from the Raft thread). Sends signed HTTP POSTs (through the
injected :class:`NoticeSender`) and ``AckNotices`` proposals. Runs on its own pykka thread, so a
slow or dead notification target never delays scheduling (docs/architecture.md#notifications).

The state machine writes a notification into the ``outbox`` of every replica in the same
transaction as what it reports (a task failed or went inactive, a dead letter), so it survives a
leader change: the next leader's Notifier finds it there. A notification leaves the outbox only when
its target answered 2xx (or it is older than ``notifications.retention_minutes``: dropped, logged
and counted), through a replicated ``AckNotices``. Hence *at least once*: a leader that dies between
the POST and the commit of the ack sends the batch again; receivers de-duplicate by event ``id``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3

from molens import __version__
from molens.actors.alarm import wall_ms
from molens.actors.messages import NoticesAcked, Wake
from molens.actors.term import LeaderActor, TermContext
from molens.fsm.commands import AckNotices
from molens.schema import Notice
from molens.signing import FIRE_ID_HEADER, SIGNATURE_HEADER, signature_header, signing_keys
from molens.tracing import fresh_traceparent

log = logging.getLogger(__name__)

INTERVAL_MS = 500
"""How often the outbox is looked at (one lmdb range read of its first entries)."""
SCAN_MAX = 5_000
"""Notifications read per look: enough that one dead target's backlog does not hide the others'."""
BACKOFF_MS = (1_000, 60_000)
"""A target that failed is tried again after 1 s, doubling to at most 60 s."""


@dataclass(frozen=True, slots=True)
class NoticeBatch:
    url: str
    notices: tuple[Notice, ...]
    traceparent: str | None = None
    """The trace of every notice in the batch (a batch holds the notices of one trace, or untraced ones)."""
    namespace: str | None = None
    """The namespace of the tasks whose notices it holds (a batch holds one namespace's): its key signs
    the batch as ``worker.signing_scope`` says; None (a flow's notices, those to the operator's
    ``notifications.url``, a task that is gone): the cluster's secret alone."""

    @property
    def id(self) -> str:
        """Names the batch in the signature (in the place of a callback's fire id)."""
        return self.notices[0].id

    def body(self) -> bytes:
        return json.dumps({"events": [n.to_json() for n in self.notices]}, separators=(",", ":")).encode()


class NoticePlan:
    """Which batches to send now, and to whom not yet (pure: ``now_ms`` in, decisions out).

    Example: notices a1, a2 (for A), b1 (for B), A failed at 10 s: at 10.5 s only ``[B: b1]`` is
    due; A again after 11 s with ``[a1, a2]``; once A answered 2xx, a1 and a2 are acknowledged."""

    def __init__(self, batch_max: int, retention_ms: int, operator_url: str = "") -> None:
        self.batch_max = batch_max
        self.retention_ms = retention_ms
        self.operator_url = operator_url
        """The node's ``notifications.url``: the operator's receiver, which hears the flows' notices and
        those of every task without a ``notify_url`` of its own. What goes there is signed with the
        cluster's secret alone, whatever the scope: one key verifies all it hears, and no namespace's
        key is sent to a URL that namespace did not choose."""
        self._backoff: dict[str, tuple[int, int]] = {}
        """url -> (not before ms, failures in a row)."""
        self.acking: set[tuple[int, str]] = set()
        self.dropped = 0

    def plan(
        self, now_ms: int, notices: list[Notice], namespace_of: Callable[[Notice], str | None] = lambda n: None,
    ) -> tuple[list[NoticeBatch], list[tuple[int, str]]]:
        """Batches to POST now (at most one per target, trace and namespace, oldest first: a POST carries
        one ``traceparent`` and is signed with one namespace's key) and the keys of notices past
        retention (to drop). ``namespace_of``: the namespace of a notice's task (None: none); a notice
        to the operator's URL counts as of none."""
        per_url: dict[tuple[str, str | None, str | None], list[Notice]] = {}
        expired: list[tuple[int, str]] = []
        for n in notices:
            key = (n.at_ms, n.id)
            if key in self.acking:
                continue
            if n.at_ms < now_ms - self.retention_ms:
                expired.append(key)
                continue
            until = self._backoff.get(n.url, (0, 0))[0]
            if until > now_ms:
                continue
            ns = None if n.url == self.operator_url else namespace_of(n)
            group = per_url.setdefault((n.url, n.traceparent, ns), [])
            if len(group) < self.batch_max:
                group.append(n)
        return [NoticeBatch(u, tuple(g), tp, ns) for (u, tp, ns), g in per_url.items()], expired

    def sent(self, url: str, ok: bool, now_ms: int) -> None:
        if ok:
            self._backoff.pop(url, None)
            return
        fails = self._backoff.get(url, (0, 0))[1] + 1
        wait = min(BACKOFF_MS[1], BACKOFF_MS[0] << min(fails - 1, 16))
        self._backoff[url] = (now_ms + wait, fails)

    def backing_off(self) -> int:
        return len(self._backoff)


class NoticeSender:
    """POSTs a batch, signed exactly like a callback (``X-Molens-Signature`` over ``X-Fire-ID``, here
    the batch id, and the body: ``molens.signing.verify_signature`` checks both), with
    ``X-Molens-Kind: notification`` and, for a traced task, a ``traceparent`` in its trace (a new span
    id per POST), through the callback host policy's guarded pool. Returns None when the target answered 2xx,
    else why not."""

    def __init__(self, pool: urllib3.PoolManager, timeout_ms: int, secrets: tuple[str, ...],
                 wall: Callable[[], int] = wall_ms, signing_scope: str = "both") -> None:
        self._pool = pool
        self._timeout_s = timeout_ms / 1000
        self._secrets = tuple(s for s in secrets if s)
        self._scope = signing_scope
        self._wall = wall

    def __call__(self, batch: NoticeBatch) -> str | None:
        body = batch.body()
        headers = {"Content-Type": "application/json", "User-Agent": f"molens/{__version__}",
                   FIRE_ID_HEADER: batch.id, "X-Molens-Kind": "notification"}
        if batch.traceparent:
            headers["traceparent"] = fresh_traceparent(batch.traceparent)
        if self._secrets:
            keys = signing_keys(self._secrets, self._scope, batch.namespace)
            headers[SIGNATURE_HEADER] = signature_header(keys, batch.id, body, self._wall())
        try:
            # the head within the timeout (the guarded connection's watchdog), the body not read at
            # all: a target that trickles or streams its answer holds the Notifier no longer
            r = self._pool.request("POST", batch.url, body=body, headers=headers, redirect=False, retries=False,
                                   timeout=urllib3.Timeout(total=self._timeout_s), preload_content=False)
        except Exception as e:  # a target that cannot be reached: try again later, never raise
            return f"{type(e).__name__}: {str(e)[:200]}"
        status = r.status
        r.close()  # the body is not wanted: the connection goes with it
        r.release_conn()
        return None if 200 <= status < 300 else f"status {status}"


class Notifier(LeaderActor):
    """The leader's notification actor (see the module docstring)."""

    name = "notifier"

    def __init__(self, ctx: TermContext) -> None:
        super().__init__(ctx)
        n = ctx.notifications
        self.plan = NoticePlan(n.batch_max, n.retention_minutes * 60_000, n.url)
        self.send: Callable[[NoticeBatch], str | None] = ctx.send_notices
        self.busy = False
        self.sent = 0
        self._namespaces: dict[str, str | None] = {}
        """task id -> its namespace (None: gone): a task's never changes, nor does an id come back."""

    def on_start(self) -> None:
        super().on_start()
        self.actor_ref.tell(Wake())

    def gauges(self) -> dict[str, Any]:
        return {"notifications_sent": self.sent, "notifications_dropped": self.plan.dropped,
                "notification_targets_backing_off": self.plan.backing_off()}

    def handle(self, message: Any) -> Any:
        if isinstance(message, NoticesAcked):
            self.busy = False
            # committed: they are out of the outbox; refused: read them again next time
            self.plan.acking.difference_update(message.keys)
        elif not isinstance(message, Wake):
            return self.unexpected(message)
        if self.ended:
            return None
        if not self.busy:
            self._run()
        self.set_alarm(wall_ms() + INTERVAL_MS)
        return None

    def _namespace_of(self, n: Notice) -> str | None:
        """The namespace of the task notice ``n`` is about (its key signs it); None for a flow's notice
        or a task that is gone."""
        if not n.task_id:
            return None
        if n.task_id not in self._namespaces:
            if len(self._namespaces) >= SCAN_MAX * 2:
                self._namespaces.clear()
            t = self.ctx.store.get_task(n.task_id)
            self._namespaces[n.task_id] = None if t is None else t.spec.namespace
        return self._namespaces[n.task_id]

    def _run(self) -> None:
        now = wall_ms()
        batches, expired = self.plan.plan(now, self.ctx.store.read_outbox(SCAN_MAX), self._namespace_of)
        done: list[tuple[int, str]] = list(expired)
        if expired:
            self.plan.dropped += len(expired)
            self.stats.add(notifications_dropped=len(expired))
            log.warning("notifications: %d older than notifications.retention_minutes dropped", len(expired))
        failed: set[str] = set()
        for b in batches:
            if self.ended:
                return
            if b.url in failed:  # another trace's batch to a target that just failed: after its backoff
                continue
            t0 = time.monotonic()
            why = self.send(b)
            self.plan.sent(b.url, why is None, wall_ms())
            if why is None:
                done.extend((n.at_ms, n.id) for n in b.notices)
                self.sent += len(b.notices)
                self.stats.add(notifications_sent=len(b.notices))
            else:
                failed.add(b.url)
                self.stats.add(notification_failures=1)
                log.warning("notifications: %d to %s not delivered (%s, %.0f ms); trying again later",
                            len(b.notices), b.url, why, (time.monotonic() - t0) * 1000)
        if done and not self.ended:
            keys = tuple(done)
            self.plan.acking.update(keys)
            self.busy = True
            self.ctx.propose(AckNotices(wall_ms(), keys),
                             self.outcome_to_self(lambda res, err: NoticesAcked(keys, err)))


__all__ = ["NoticeBatch", "NoticePlan", "NoticeSender", "Notifier"]
