"""The lmdb state store of the task FSM (docs/architecture.md#state-machine), shaped as ``molens.raft.fsm.StateMachine``.

``apply_batch(entries)`` decodes each committed command, runs :func:`molens.fsm.machine.apply`
against the open write transaction (so a command sees the writes of the commands before it), writes
the result and finally ``applied_index`` -- all in ONE lmdb write transaction. Databases under
``data_dir/fsm/``:

- ``tasks``  task id -> task record (msgpack array, see :func:`task_to_bytes`)
- ``due``    ``Task.wake_ms`` (u64 big-endian) ``|`` task id -> ``b""`` -- scans in due order (the
  task's next action: its ``due_ms``, or an earlier retry of an ``overlap`` allow occurrence)
- ``fires``  fire id -> in-flight fire record
- ``idem``   idempotency key -> task id
- ``meta``   ``applied_index``, ``applied_term``, ``counts`` (tasks per status), ``m:<key>`` user meta
- ``expiry`` ``updated_ms | task id`` of every done/failed/inactive task, so the Cleaner finds
  what retention expires without walking all tasks (:meth:`TaskStore.scan_expirable`)
- ``by_status`` ``status | 0x00 | task id`` and ``by_scene`` ``scene | 0x00 | task id`` -> ``b""``:
  a filtered list reads one page of its index (:meth:`TaskStore.scan_tasks_where`), not the store
- ``due_days`` ``day`` (u64, ``due_ms // 86,400,000``) -> entries of ``due`` that day (u64): the far
  future's distribution without reading ``due`` (:meth:`TaskStore.due_by_day`)
- ``flows``  flow key -> its limits (``FlowSettings``, msgpack array; docs/architecture.md#flow-control)
- ``audit``  ``raft index (u64) | n (u32)`` -> :class:`~molens.fsm.audit.AuditEntry` (docs/architecture.md#audit-trail):
  written in the transaction of the change it records, so it is in every snapshot and replica
- ``by_namespace`` each namespace's tasks, due entries, dead letters and audit entries
  (:mod:`molens.fsm.ns_index`): derived, not in the digest (snapshots carry it); rebuilt when the
  store opens unless current

The secondary indexes and ``counts`` are written in the same transaction as the records they
describe (data format 3; a store of format 1 or 2 gets them built when it opens).

History rows (executions) of the batch go to :class:`molens.fsm.history.History` in one SQLite
transaction committed just *before* the lmdb transaction; the history remembers the last entry index
it holds, so a batch replayed after a crash between the two commits does not duplicate rows.

Durability: by default lmdb ``sync=True, metasync=False`` (one fdatasync per batch; on power loss
the last batch may roll back and is replayed from the Raft log). A Raft node's store is
``log_backed``: its commits are not fsync'd at all, because the Raft log (fsync'd on every save)
and the snapshot files hold everything it applied, and the store is rebuilt from them when its file
may be torn -- after the operating system stopped while the store was open (power loss, kernel
crash), told by the boot id recorded at open (:data:`BOOT_MARKER`). A process that dies (kill -9,
OOM) leaves its writes in the page cache: the store is kept. See docs/architecture.md#fsm-durability.
Entries at or below ``applied_index`` are skipped
(result ``None``). A command that cannot be decoded yields a :class:`CommandCodecError` result, and one
whose application raises (a bug: the machine is deterministic, so every replica raises alike) a
:class:`StoreError` result; either changes nothing and never stops the replica. Snapshots are ``env.copyfd(compact=True)`` of a read transaction.

Leader effects (wheel adds/removes, fire requests) are returned in each entry's :class:`EntryResult`
(with the entry's term: see there for which fire requests a leader may send) and also passed, after
the commit, to ``on_applied`` (the entries that have effects) if one is set.
"""

from __future__ import annotations

import heapq
import logging
import os
import re
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import lmdb
import msgpack
import msgspec

from molens.fsm import audit, format_v1, machine, ns_index, search, tenancy
from molens.fsm.audit import AuditEntry
from molens.fsm.commands import Command, CommandCodecError, ExpireItem, FlowSettings, decode, encode
from molens.fsm.history import History
from molens.fsm.machine import Applied, Effect, FireRecord, MachineConfig, Writes
from molens.lmdb_snapshot import StateFile, digest_state
from molens.model import TERMINAL_STATUSES, FireKind, MolensError, Status, Task, ValidationError
from molens.schema import FORMAT, DeadLetter, Notice

log = logging.getLogger(__name__)

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_APPLIED = b"applied_index"
_APPLIED_TERM = b"applied_term"
_COUNTS = b"counts"
_FORMAT = b"format"
DAY_MS = 86_400_000
# Address space, not disk: the file grows with the data. Large enough never to grow in practice
# (~140M tasks), because lmdb must not remap while other threads (HTTP reads) hold read transactions.
DEFAULT_MAP_SIZE = 64 << 30

DATABASES = (
    b"tasks", b"due", b"fires", b"idem", b"meta", b"expiry", b"by_status", b"by_scene", b"due_days",
    b"dead", b"dead_at", b"outbox", b"flows", b"audit",
)
"""The store's lmdb databases, in the order :meth:`TaskStore.digest_state` reads them: named once, so
every one opened is in the digest. ``dead`` holds dead letters by id (``{task id}-{seq}.{attempt}``: a
task's are together), ``dead_at`` the same by time (``at_ms|id``), ``outbox`` the failure
notifications waiting for their target's 2xx (``at_ms|id`` -> ``Notice``)."""

_KINDS = tuple(FireKind)
_KIND_IX = {k: i for i, k in enumerate(_KINDS)}


def _newest_first(cur: Any, cursor: str | None, until_ms: int | None) -> Iterator[bytes]:
    """The keys of ``cur``'s database, last first: from ``cursor`` (a key in hex, inclusive: where a
    page stopped), else from before ``until_ms`` (keys that begin with a time as 8 big-endian bytes),
    else from the last. ``cur`` stays on the key yielded until the next is asked for."""
    if cursor:
        try:
            k0 = bytes.fromhex(cursor)
        except ValueError:  # a position of the other form (a task's dead letters are paged by time and id)
            raise ValidationError("cursor is not a cursor this API issued", "cursor") from None
        found = cur.set_range(k0)
        ok = True if found and bytes(cur.key()) == k0 else (cur.prev() if found else cur.last())
    elif until_ms is not None:
        ok = cur.prev() if cur.set_range(_U64.pack(min(until_ms, 2**64 - 2) + 1)) else cur.last()
    else:
        ok = cur.last()
    while ok:
        yield bytes(cur.key())
        ok = cur.prev()


class StoreError(MolensError):
    """A caller bug (entries out of order) or an unusable snapshot."""


class EntryLike(Protocol):
    """What the store needs of a Raft log entry (``molens.raft.log.Entry`` fits)."""

    @property
    def index(self) -> int: ...
    @property
    def term(self) -> int: ...
    @property
    def kind(self) -> int: ...
    @property
    def data(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class _Pair:
    """An ``(index, data)`` pair seen as a normal entry of term 0."""

    index: int
    data: bytes
    term: int = 0
    kind: int = 0


@dataclass(frozen=True, slots=True)
class EntryResult:
    """What applying one entry produced: per-item results for the proposer, effects for the leader.

    ``term`` is the entry's Raft term. The leader's Dispatcher sends the ``SendFire`` effects of
    an entry only if ``term`` is its own current term: a ``Dispatched`` entry of an earlier leader
    that commits at the start of a new term was never sent by the new leader, and is left to the
    Monitor (its fires stay in ``fires`` until their deadline, then go ``lost``/``unknown``).
    """

    index: int
    term: int
    results: list[Any]
    effects: list[Effect]


# -------------------------------------------------------------------------------------------------
# record codecs


_TASK_ENCODER = msgspec.msgpack.Encoder()
_TASK_DECODER = msgspec.msgpack.Decoder(Task)
_FLOW_DECODER = msgspec.msgpack.Decoder(FlowSettings)
_AUDIT_ENCODER = msgspec.msgpack.Encoder()
_AUDIT_DECODER = msgspec.msgpack.Decoder(AuditEntry)


def _audit_from(key: bytes, raw: bytes | memoryview) -> AuditEntry:
    """The entry stored under ``key``, with its id; a change of a namespace's own flow
    (``<namespace>~<flow_key>``, stored as the cluster's) read as that namespace's, so the keys that
    may change the flow see it on record (:func:`molens.fsm.audit.flow_namespace`)."""
    index, n = _U64.unpack_from(key)[0], _U32.unpack_from(key, 8)[0]
    a = _AUDIT_DECODER.decode(raw)
    ns = audit.flow_namespace(a)
    return msgspec.structs.replace(a, id=f"{index}.{n}", namespace=ns) if ns is not None else \
        msgspec.structs.replace(a, id=f"{index}.{n}")


def _audit_matches(a: AuditEntry, f: AuditFilter) -> bool:
    return (
        (f.namespace is None or a.namespace == f.namespace)
        and (f.namespaces is None or a.namespace in f.namespaces)
        and (f.actor is None or f.actor in (a.key_id, a.name))
        and (f.action is None or a.action == f.action)
        and (f.since_ms is None or a.at_ms >= f.since_ms)
        and (f.until_ms is None or a.at_ms < f.until_ms)
    )


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which audit entries a reader wants (``None``: any); ``actor`` matches a key id or a name;
    ``since_ms`` inclusive, ``until_ms`` exclusive."""

    namespace: str | None = None
    actor: str | None = None
    action: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    namespaces: frozenset[str] | None = None
    """Only the entries of these namespaces (a key of several): the page is filled with them."""


def task_to_bytes(t: Task) -> bytes:
    """The task record: the schema's ``Task`` as an msgpack array (data format 2)."""
    return _TASK_ENCODER.encode(t)


def task_from_bytes(raw: bytes | memoryview) -> Task:
    return _TASK_DECODER.decode(raw)


def fire_to_bytes(f: FireRecord) -> bytes:
    """``[task_id, kind, attempt, worker, deadline_ms, dispatched_ms, not_before_ms]`` (a release
    before ``not_before_ms`` reads the first six and wrote only those)."""
    b: bytes = msgpack.packb(
        [f.task_id, _KIND_IX[f.kind], f.attempt, f.worker, f.deadline_ms, f.dispatched_ms, f.not_before_ms],
        use_bin_type=True,
    )
    return b


def fire_from_bytes(fid: str, raw: bytes | memoryview) -> FireRecord:
    v = msgpack.unpackb(raw, raw=False, use_list=True)
    return FireRecord(
        fire_id=fid, task_id=v[0], kind=_KINDS[v[1]], attempt=v[2], worker=v[3], deadline_ms=v[4],
        dispatched_ms=v[5], not_before_ms=v[6] if len(v) > 6 else 0,
    )


_KNOWN_MAX = 512  # proposals in flight at once stay far below this
_ABSENT = b"\x00absent"
"""What the cache's ``get`` answers for a key it does not hold (compared by identity)."""
_META_CACHE_MAX = 4096
"""Meta records :meth:`TaskStore.get_meta` keeps in memory (keys, namespaces: the records every
request reads); past it the cache starts again empty (ids nobody made, asked by bad keys, fill it)."""
DEAD_ID = re.compile(r"[0-9A-Z]{26}-[0-9]{1,12}\.(?:ack)?[0-9]{1,9}")
"""A dead letter's id: its task's id, ``-``, the occurrence, ``.``, the attempt (``ack`` before an ACK probe's)."""
DEAD_CURSOR = re.compile(r"(?:[0-9a-f]{2}){9,60}|[0-9]{1,16}:" + DEAD_ID.pattern)
"""The positions :meth:`TaskStore.list_dead` issues (and the API takes back): a key of the time index
(hex), or, filtered by task, the last dead letter's ``at_ms:id``."""
TASK_DEAD_MAX = 100_000
"""Most dead letters of one task a filtered list reads and sorts per page (retention keeps fewer,
unless a task fails every few seconds for days)."""


_NOTICE_ENCODER = msgspec.msgpack.Encoder()
_NOTICE_DECODER = msgspec.msgpack.Decoder(Notice)
_DEAD_ENCODER = msgspec.msgpack.Encoder()
_DEAD_DECODER = msgspec.msgpack.Decoder(DeadLetter)


_META_NS = b"m:" + tenancy.NS_PREFIX.encode()
_META_KEY = b"m:" + tenancy.KEY_PREFIX.encode()


def canonical_record(db: bytes, key: bytes, raw: bytes) -> bytes:
    """Record ``key`` of database ``db`` as this release writes it: a record an earlier release wrote
    (fields appended since absent, read as their defaults) decoded and encoded again, so that a replica
    that applied the same log under an earlier release hashes alike in :meth:`TaskStore.digest_state`
    (docs/deploy.md#rolling-upgrade); a record of this release comes out as it is."""
    if db == b"tasks":
        return _TASK_ENCODER.encode(_TASK_DECODER.decode(raw))
    if db == b"fires":
        return fire_to_bytes(fire_from_bytes(key.decode(), raw))
    if db == b"dead":
        return _DEAD_ENCODER.encode(_DEAD_DECODER.decode(raw))
    if db == b"outbox":
        return _NOTICE_ENCODER.encode(_NOTICE_DECODER.decode(raw))
    if db == b"flows":
        return _TASK_ENCODER.encode(_FLOW_DECODER.decode(raw))
    if db == b"audit":
        return audit.canonical(raw)
    if db == b"meta" and key.startswith(_META_NS):
        return tenancy.encode(tenancy.decode_namespace(raw))
    if db == b"meta" and key.startswith(_META_KEY):
        return tenancy.encode(tenancy.decode_key(raw))
    return raw


def _dead_matches(dl: DeadLetter, flow: str | None, kind: str | None, since: int | None, until: int | None,
                  namespaces: frozenset[str] | None) -> bool:
    return (flow is None or dl.flow == flow) and (kind is None or dl.kind == kind) \
        and (since is None or dl.at_ms >= since) and (until is None or dl.at_ms <= until) \
        and (namespaces is None or dl.namespace in namespaces)


def due_key(due_ms: int, tid: str) -> bytes:
    return _U64.pack(due_ms) + tid.encode()


_STATUS_PREFIX = {s: s.value.encode() + b"\x00" for s in Status}


def _status_key(status: Status, tid: bytes) -> bytes:
    return _STATUS_PREFIX[status] + tid


def _scene_key(scene: str, tid: bytes) -> bytes:
    return scene.encode() + b"\x00" + tid


# -------------------------------------------------------------------------------------------------


class _Desc:
    """Bytes ordered backwards (a newest-first merge's heap key)."""

    __slots__ = ("b",)

    def __init__(self, b: bytes) -> None:
        self.b = b

    def __lt__(self, other: _Desc) -> bool:
        return self.b > other.b


class _TxnView:
    """machine.View over an lmdb transaction."""

    __slots__ = ("_dead", "_fires", "_flows", "_idem", "_meta", "_tasks", "_txn")

    def __init__(
        self, txn: lmdb.Transaction, tasks: Any, fires: Any, idem: Any, dead: Any, flows: Any, meta: Any,
    ) -> None:
        self._txn, self._tasks, self._fires, self._idem, self._dead = txn, tasks, fires, idem, dead
        self._flows, self._meta = flows, meta

    def get_meta(self, key: str) -> bytes | None:
        raw = self._txn.get(b"m:" + key.encode(), db=self._meta)
        return None if raw is None else bytes(raw)

    def get_dead(self, dead_id: str) -> DeadLetter | None:
        raw = self._txn.get(dead_id.encode(), db=self._dead)
        return None if raw is None else _DEAD_DECODER.decode(raw)

    def get_task(self, task_id: str) -> Task | None:
        raw = self._txn.get(task_id.encode(), db=self._tasks)
        return None if raw is None else task_from_bytes(raw)

    def get_fire(self, fire_id: str) -> FireRecord | None:
        raw = self._txn.get(fire_id.encode(), db=self._fires)
        return None if raw is None else fire_from_bytes(fire_id, raw)

    def get_idem(self, key: str) -> str | None:
        raw = self._txn.get(key.encode(), db=self._idem)
        return None if raw is None else bytes(raw).decode()

    def get_flow(self, key: str) -> FlowSettings | None:
        raw = self._txn.get(key.encode(), db=self._flows)
        return None if raw is None else _FLOW_DECODER.decode(raw)

    def scan_meta(self, prefix: str) -> list[tuple[str, bytes]]:
        return _scan_meta(self._txn, self._meta, prefix)

    def scan_flow_keys(self, prefix: str) -> list[str]:
        """The keys of the flows with settings whose key starts with ``prefix``, by key."""
        start = prefix.encode()
        out = []
        cur = self._txn.cursor(db=self._flows)
        if cur.set_range(start):
            for k in cur.iternext(values=False):
                if not bytes(k).startswith(start):
                    break
                out.append(bytes(k).decode())
        return out


def _scan_meta(txn: lmdb.Transaction, db: Any, prefix: str) -> list[tuple[str, bytes]]:
    """Every meta record whose key starts with ``prefix``, by key."""
    start = b"m:" + prefix.encode()
    out = []
    cur = txn.cursor(db=db)
    if cur.set_range(start):
        for k, v in cur:
            if not bytes(k).startswith(start):
                break
            out.append((bytes(k)[2:].decode(), bytes(v)))
    return out


class TaskStore(StateFile):
    """The task FSM on lmdb under ``data_dir/fsm/`` plus the node's history database."""

    full_error = StoreError

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        history: History | None = None,
        durable: bool = True,
        log_backed: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
        config: MachineConfig = machine.DEFAULT_CONFIG,
        on_applied: Callable[[list[EntryResult]], None] | None = None,
        search_max_bytes: int = search.DEFAULT_MAX_BYTES,
    ) -> None:
        """``durable=False`` skips every fsync (tests). ``log_backed=True`` (a Raft node's store: the
        log holds every entry it applies) skips the fsync of each applied batch and guards the file
        with the boot id instead (module docstring); where the system has no boot id to read, the
        store syncs each batch as a plain durable one."""
        super().__init__(data_dir, what="task store", durable=durable, log_backed=log_backed, map_size=map_size)
        self.history = history
        self.config = config
        self.on_applied = on_applied
        self.search = search.TaskIndex(self.scan_tasks, search_max_bytes)
        """The text-search index over this replica's tasks (fed after each commit, built on first use)."""
        self._changed: dict[str, Task | None] = {}
        self._ns_ops: dict[bytes, bool] = {}
        """The batch being applied: each task key of the namespace index it changed, True to put."""
        # commands this node proposed, by the id of their encoded bytes (see encode_proposal)
        self._known: dict[int, tuple[bytes, Command]] = {}
        self._meta_cache: dict[str, bytes | None] = {}
        """Meta records as last read (None: absent), for :meth:`get_meta`; a record an apply writes
        leaves it before the apply counts as applied. Every API request reads a key's record and a
        create its namespace's: each lmdb read transaction lets go of the interpreter lock, which
        other threads then hold, so three of them cost a busy leader ~50 us of a create."""
        self._meta_written: set[str] = set()
        self._meta_gen = 0
        """Bumped, under ``_meta_lock``, whenever records leave the cache: a read that began before
        does not put what it read back."""
        self._meta_lock = threading.Lock()
        self.decodes_skipped = 0
        self.dead_written: dict[str, int] = {}
        """Dead letters this replica's applies wrote since the process started, by kind (metrics)."""
        self.not_fired: dict[str, int] = {}
        """Occurrences this replica's applies decided not to fire since the process started, by
        ``machine.NOT_FIRED`` key (metrics): every replica applies the same entries, so each counts
        the cluster's decisions it applied."""
        self._open()

    def _open(self) -> None:
        self._env = self._open_env(max_dbs=24)  # room for more than DATABASES and the local index
        self._dbs = {name: self._env.open_db(name) for name in DATABASES}
        self._by_ns = self._env.open_db(ns_index.DB_NAME)
        (self._tasks, self._due, self._fires, self._idem, self._meta, self._expiry, self._by_status, self._by_scene,
         self._due_days, self._dead, self._dead_at, self._outbox, self._flows, self._audit) = self._dbs.values()
        with self._env.begin() as txn:
            raw = txn.get(_APPLIED, db=self._meta)
            raw_term = txn.get(_APPLIED_TERM, db=self._meta)
            raw_counts = txn.get(_COUNTS, db=self._meta)
        self._applied = _U64.unpack(raw)[0] if raw is not None else 0
        self._applied_term = _U64.unpack(raw_term)[0] if raw_term is not None else 0
        self._counts: dict[str, int] = dict(msgpack.unpackb(raw_counts, raw=False)) if raw_counts else {}
        self._check_format()
        self._check_ns_index()
        log.info("task store opened dir=%s applied_index=%d", self.dir, self._applied)

    def _check_ns_index(self) -> None:
        """Rebuild the namespace index unless it is current (:mod:`molens.fsm.ns_index`)."""
        with self._env.begin() as txn:
            at = ns_index.marked_at(txn, self._by_ns)
            empty = txn.stat(self._tasks)["entries"] == 0 and txn.stat(self._dead)["entries"] == 0 \
                and txn.stat(self._audit)["entries"] == 0
        if at == self._applied:
            return
        if empty:
            with self._env.begin(write=True) as txn:
                txn.drop(self._by_ns, delete=False)
                ns_index.mark(txn, self._by_ns, self._applied)
            return
        log.warning("namespace index rebuild dir=%s applied_index=%d index_at=%s", self.dir, self._applied, at)

        def task_keys(k: bytes, v: bytes) -> list[bytes]:
            return ns_index.task_entries(_TASK_DECODER.decode(v), k)

        def dead_keys(k: bytes, v: bytes) -> list[bytes]:
            dl = _DEAD_DECODER.decode(v)
            return [ns_index.dead_key(dl, _U64.pack(dl.at_ms) + k)]

        def audit_keys(k: bytes, v: bytes) -> list[bytes]:
            return [ns_index.audit_key(_AUDIT_DECODER.decode(v), k)]

        n = ns_index.rebuild(self._env, self._by_ns, self._applied,
                             [(self._tasks, task_keys), (self._dead, dead_keys), (self._audit, audit_keys)])
        log.warning("namespace index rebuilt dir=%s records=%d", self.dir, n)

    def _check_format(self) -> None:
        """Write :data:`molens.schema.FORMAT` into a new store, migrate a store of format 1 (the
        previous versions', which wrote no format key) or 2, refuse any other."""
        with self._env.begin() as txn:
            raw = txn.get(_FORMAT, db=self._meta)
            empty = txn.stat(self._tasks)["entries"] == 0
        fmt = _U64.unpack(raw)[0] if raw is not None else (FORMAT if empty and not self._applied else 1)
        if fmt == FORMAT:
            if raw is None:
                with self._env.begin(write=True) as txn:
                    txn.put(_FORMAT, _U64.pack(FORMAT), db=self._meta)
            return
        if fmt not in (1, 2):
            self._env.close()
            raise StoreError(
                f"{self.dir}: task store of data format {fmt}; this molens reads formats 1 to {FORMAT} "
                "(a newer molens wrote it: run that version, or start this node on an empty data directory)"
            )
        n = 0
        with self._env.begin(write=True) as txn:  # one transaction: the store is either the old format or the new
            if fmt == 1:
                cur = txn.cursor(db=self._tasks)
                for k, v in list(cur.iternext()):
                    txn.put(k, _TASK_ENCODER.encode(format_v1.task_from_bytes(k.decode(), v)), db=self._tasks)
            n = self._build_indexes(txn)
            txn.put(_FORMAT, _U64.pack(FORMAT), db=self._meta)
        log.warning("task store migrated from data format %d to %d dir=%s tasks=%d", fmt, FORMAT, self.dir, n)

    def _build_indexes(self, txn: lmdb.Transaction) -> int:
        """(Re)write the secondary indexes of format 3 from the records; returns the number of tasks."""
        for db in (self._by_status, self._by_scene, self._due_days):
            txn.drop(db, delete=False)
        n = 0
        for k, v in txn.cursor(db=self._tasks):
            t = _TASK_DECODER.decode(v)
            txn.put(_status_key(t.status, bytes(k)), b"", db=self._by_status)
            txn.put(_scene_key(t.spec.scene, bytes(k)), b"", db=self._by_scene)
            n += 1
        days: dict[int, int] = {}
        for k in txn.cursor(db=self._due).iternext(values=False):
            d = _U64.unpack_from(k)[0] // DAY_MS
            days[d] = days.get(d, 0) + 1
        for d, c in days.items():
            txn.put(_U64.pack(d), _U64.pack(c), db=self._due_days)
        return n

    def encode_proposal(self, cmd: Command) -> bytes:
        """``encode(cmd)`` for a proposal of this node. The store remembers ``cmd`` for those very
        bytes, so when the entry comes back to be applied here (the same object: the leader applies
        from its in-memory log) it is not decoded again -- about 2 us of the leader's CPU per
        created task, on the process whose GIL bounds batch ingest. Bounded: proposals that never
        apply (leadership lost) are dropped when the map fills."""
        data = encode(cmd)
        known = self._known
        if len(known) >= _KNOWN_MAX:
            known.clear()
        known[id(data)] = (data, cmd)
        return data

    # ------------------------------------------------------------------ StateMachine

    def applied_index(self) -> int:
        return int(self._applied)

    def applied_term(self) -> int:
        return int(self._applied_term)

    def apply_batch(self, entries: Sequence[EntryLike] | Sequence[tuple[int, bytes]]) -> list[Any]:
        """Apply committed entries in one write transaction; one result per entry.

        ``entries`` are Raft log entries (``index``, ``term``, ``kind``, ``data``) or plain
        ``(index, command_bytes)`` pairs (term 0)."""
        norm: list[EntryLike] = [_Pair(e[0], e[1]) if isinstance(e, tuple) else e for e in entries]
        fresh = [e for e in norm if e.index > self._applied]
        skipped = len(entries) - len(fresh)
        for n, e in enumerate(fresh):
            if e.index != self._applied + 1 + n:
                raise StoreError(f"gap: entry {e.index} where {self._applied + 1 + n} was expected")
        results: list[Any] = [None] * skipped
        if not fresh:
            return results
        tallies = (self.not_fired, self.dead_written)
        counted = [dict(t) for t in tallies]  # the tallies as they were: an attempt that fails counts nothing
        while True:
            counts = dict(self._counts)
            days: dict[int, int] = {}
            self._changed = {}
            self._meta_written = set()
            self._ns_ops = {}
            try:
                with self._env.begin(write=True) as txn:
                    out, hist = self._apply_in(txn, fresh, counts, days)
                    self._write_days(txn, days)
                    self._write_ns_ops(txn)
                    txn.put(_APPLIED, _U64.pack(fresh[-1].index), db=self._meta)
                    ns_index.mark(txn, self._by_ns, fresh[-1].index)
                    txn.put(_APPLIED_TERM, _U64.pack(fresh[-1].term), db=self._meta)
                    txn.put(_COUNTS, msgpack.packb(counts, use_bin_type=True), db=self._meta)
                    if self.history is not None and hist:
                        self.history.apply(hist)
                break
            except BaseException as exc:
                for t, was in zip(tallies, counted):
                    t.clear()
                    t.update(was)
                if not isinstance(exc, lmdb.MapFullError):
                    raise
                self._grow()
        if self._meta_written:
            self._forget_meta(self._meta_written)
        self._applied = fresh[-1].index
        self._applied_term = fresh[-1].term
        self._counts = counts
        if self._changed:
            self.search.apply(self._changed)
            self._changed = {}
        if self.on_applied is not None:
            with_effects = [r for r in out if isinstance(r, EntryResult) and r.effects]
            if with_effects:
                self.on_applied(with_effects)
        return results + out

    def _apply_in(
        self, txn: lmdb.Transaction, entries: list[EntryLike], counts: dict[str, int], days: dict[int, int]
    ) -> tuple[list[Any], list[tuple[int, Writes]]]:
        view = _TxnView(txn, self._tasks, self._fires, self._idem, self._dead, self._flows, self._meta)
        known = self._known
        out: list[Any] = []
        hist: list[tuple[int, Writes]] = []
        for e in entries:
            if e.kind != 0 or not e.data:
                out.append(None)
                continue
            hit = known.pop(id(e.data), None) if known else None
            if hit is not None and hit[0] is e.data:
                cmd = hit[1]
                self.decodes_skipped += 1
            else:
                try:
                    cmd = decode(e.data)
                except CommandCodecError as exc:
                    log.error("undecodable entry index=%d: %s", e.index, exc)
                    out.append(exc)
                    continue
            try:
                applied = machine.apply(view, cmd, config=self.config)
            except Exception as exc:  # a machine bug: same on every replica, so skip the entry alike
                log.exception("entry index=%d (%s) failed to apply; it changes nothing", e.index, type(cmd).__name__)
                out.append(StoreError(f"entry {e.index} failed to apply: {type(exc).__name__}: {exc}", code="internal"))
                continue
            self._write(txn, applied, counts, days)
            if applied.writes.audit or applied.writes.audit_trim is not None:
                self._write_audit(txn, e.index, applied.writes)
            if applied.writes.counts:
                nf = self.not_fired
                for k, v in applied.writes.counts.items():
                    nf[k] = nf.get(k, 0) + v
            if applied.writes.executions or applied.writes.history_deletes:
                hist.append((e.index, applied.writes))
            out.append(EntryResult(e.index, e.term, applied.results, applied.effects))
        return out, hist

    def _write(self, txn: lmdb.Transaction, applied: Applied, counts: dict[str, int], days: dict[int, int]) -> None:
        w = applied.writes
        before = applied.before
        put, delete = txn.put, txn.delete
        tasks_db, due_db = self._tasks, self._due
        exp_db, st_db, sc_db = self._expiry, self._by_status, self._by_scene
        ns_record, ns_ops = ns_index.record, self._ns_ops
        pack_u64 = _U64.pack
        delta: dict[Status, int] = {}  # status count changes of this command, folded in below
        status_prefix = _STATUS_PREFIX
        self._changed.update(w.tasks)
        for tid, t in w.tasks.items():
            old = before.get(tid)
            k = tid.encode()
            ns_record(ns_ops, old, t, k)
            nd = None if t is None else t.wake_ms  # its next action: own occurrence or a running one's retry
            od = None
            if old is not None:
                ost = old.status
                delta[ost] = delta.get(ost, 0) - 1
                od = old.wake_ms
                if od is not None and od != nd:
                    delete(pack_u64(od) + k, db=due_db)
                    day = od // DAY_MS
                    days[day] = days.get(day, 0) - 1
                if ost in TERMINAL_STATUSES:
                    delete(pack_u64(old.updated_ms) + k, db=exp_db)
                if t is None or t.status is not ost:
                    delete(status_prefix[ost] + k, db=st_db)
                if t is None or t.spec.scene != old.spec.scene:
                    delete(_scene_key(old.spec.scene, k), db=sc_db)
            if t is None:
                delete(k, db=tasks_db)
                continue
            st = t.status
            delta[st] = delta.get(st, 0) + 1
            put(k, _TASK_ENCODER.encode(t), db=tasks_db)
            if nd is not None and (old is None or od != nd):
                put(pack_u64(nd) + k, b"", db=due_db)
                day = nd // DAY_MS
                days[day] = days.get(day, 0) + 1
            if st in TERMINAL_STATUSES:
                put(pack_u64(t.updated_ms) + k, b"", db=exp_db)
            if old is None or st is not old.status:
                put(status_prefix[st] + k, b"", db=st_db)
            if old is None or t.spec.scene != old.spec.scene:
                put(_scene_key(t.spec.scene, k), b"", db=sc_db)
        for st, d in delta.items():
            counts[st.value] = counts.get(st.value, 0) + d
        for fid, f in w.fires.items():
            if f is None:
                delete(fid.encode(), db=self._fires)
            else:
                put(fid.encode(), fire_to_bytes(f), db=self._fires)
        for key, v in w.idem.items():
            if v is None:
                delete(key.encode(), db=self._idem)
            else:
                put(key.encode(), v.encode(), db=self._idem)
        self._meta_written.update(w.meta)
        for mk, mv in w.meta.items():
            if mv is None:
                delete(b"m:" + mk.encode(), db=self._meta)
            else:
                put(b"m:" + mk.encode(), mv, db=self._meta)
        for fk, fv in w.flows.items():
            if fv is None:
                delete(fk.encode(), db=self._flows)
            else:
                put(fk.encode(), _TASK_ENCODER.encode(fv), db=self._flows)
        if w.dead or (w.history_deletes and txn.stat(self._dead)["entries"]):
            self._write_dead(txn, w)
        for n in w.notices:
            put(_U64.pack(n.at_ms) + n.id.encode(), _NOTICE_ENCODER.encode(n), db=self._outbox)
        for at, nid in w.notices_acked:
            delete(_U64.pack(at) + nid.encode(), db=self._outbox)

    def _write_audit(self, txn: lmdb.Transaction, index: int, w: Writes) -> None:
        """The entry's audit records, keyed by its log index; a trim deletes every key before its bound."""
        if w.audit_trim is not None:
            bound = _U64.pack(w.audit_trim)
            cur = txn.cursor(db=self._audit)
            ok = cur.first()
            while ok and (k := bytes(cur.key())) and k < bound:  # b"": the last record went, the cursor stands nowhere
                txn.delete(ns_index.audit_key(_AUDIT_DECODER.decode(cur.value()), k), db=self._by_ns)
                ok = cur.delete()
        for n, a in enumerate(w.audit):
            k = _U64.pack(index) + _U32.pack(n)
            txn.put(k, _AUDIT_ENCODER.encode(a), db=self._audit)
            txn.put(ns_index.audit_key(a, k), b"", db=self._by_ns)

    def _write_dead(self, txn: lmdb.Transaction, w: Writes) -> None:
        """Dead letters written, deleted, and those of deleted tasks (they go with their history)."""
        dead, dead_at = self._dead, self._dead_at
        gone: list[tuple[bytes, DeadLetter]] = []
        for tid in w.history_deletes:
            prefix = tid.encode() + b"-"
            cur = txn.cursor(db=dead)
            ok = cur.set_range(prefix)
            while ok and bytes(cur.key()).startswith(prefix):
                gone.append((bytes(cur.key()), _DEAD_DECODER.decode(cur.value())))
                ok = cur.next()
        for did, dl in w.dead.items():
            k = did.encode()
            raw = txn.get(k, db=dead)
            if raw is not None:
                gone.append((k, _DEAD_DECODER.decode(raw)))
            if dl is not None:
                if raw is None:
                    self.dead_written[dl.kind.value] = self.dead_written.get(dl.kind.value, 0) + 1
                txn.put(k, _DEAD_ENCODER.encode(dl), db=dead)
                txn.put(_U64.pack(dl.at_ms) + k, b"", db=dead_at)
                txn.put(ns_index.dead_key(dl, _U64.pack(dl.at_ms) + k), b"", db=self._by_ns)
        for k, old in gone:
            if k.decode() not in w.dead or w.dead[k.decode()] is None:
                txn.delete(k, db=dead)
            new = w.dead.get(k.decode())
            if new is None or new.at_ms != old.at_ms:
                txn.delete(_U64.pack(old.at_ms) + k, db=dead_at)
            if new is None or new.at_ms != old.at_ms or new.namespace != old.namespace:
                txn.delete(ns_index.dead_key(old, _U64.pack(old.at_ms) + k), db=self._by_ns)

    def _write_ns_ops(self, txn: lmdb.Transaction) -> None:
        """The batch's task keys of the namespace index, each key's last change: the deletes, then
        the puts in one call (cheaper than a put per key from here)."""
        ops, db = self._ns_ops, self._by_ns
        puts = []
        for k, keep in ops.items():
            if keep:
                puts.append((k, b""))
            else:
                txn.delete(k, db=db)
        if puts:
            txn.cursor(db=db).putmulti(puts)

    def _write_days(self, txn: lmdb.Transaction, days: dict[int, int]) -> None:
        """Fold a batch's changes of due entries per day into ``due_days``."""
        for day, d in days.items():
            if not d:
                continue
            key = _U64.pack(day)
            raw = txn.get(key, db=self._due_days)
            n = (_U64.unpack(raw)[0] if raw is not None else 0) + d
            if n > 0:
                txn.put(key, _U64.pack(n), db=self._due_days)
            else:
                txn.delete(key, db=self._due_days)

    def snapshot(self, path: str | os.PathLike[str]) -> int:
        """A consistent compacted copy of the store in one file; returns its applied index."""
        dest = Path(path)
        index = self._snapshot_to(dest)
        log.info("task store snapshot path=%s applied_index=%d", dest, index)
        return index

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Replace the whole state with a :meth:`snapshot` file (history is per node and kept,
        except that rows of tasks that no longer exist are dropped)."""
        src = Path(path)

        def is_task_store(env: lmdb.Environment) -> None:
            env.open_db(b"tasks", create=False)
            env.open_db(b"meta", create=False)

        try:
            self._swap_in(src, is_task_store, then=lambda: self._forget_meta(None))
        except lmdb.Error as exc:
            raise StoreError(f"{src}: not a task store snapshot: {exc}") from exc
        self.search.apply(None)
        if self.history is not None:
            with self._env.begin(db=self._tasks) as txn:
                self.history.retain_tasks(lambda t: txn.get(t.encode()) is not None, self._applied)
        log.info("task store restored from=%s applied_index=%d", src, self._applied)

    def close(self) -> None:
        self._close_env()
        if self.history is not None:
            self.history.close()

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads (any thread)

    def last_task_id(self) -> str:
        """The greatest task id in the store ("" when it holds none)."""
        with self._env.begin(db=self._tasks) as txn:
            cur = txn.cursor()
            return bytes(cur.key()).decode() if cur.last() else ""

    def get_task(self, task_id: str) -> Task | None:
        with self._env.begin() as txn:
            raw = txn.get(task_id.encode(), db=self._tasks)
            return None if raw is None else task_from_bytes(raw)

    def get_fire(self, fire_id: str) -> FireRecord | None:
        with self._env.begin() as txn:
            raw = txn.get(fire_id.encode(), db=self._fires)
            return None if raw is None else fire_from_bytes(fire_id, raw)

    def get_idem(self, key: str) -> str | None:
        with self._env.begin() as txn:
            raw = txn.get(key.encode(), db=self._idem)
            return None if raw is None else bytes(raw).decode()

    def get_flow(self, key: str) -> FlowSettings | None:
        with self._env.begin() as txn:
            raw = txn.get(key.encode(), db=self._flows)
            return None if raw is None else _FLOW_DECODER.decode(raw)

    def scan_flows(self) -> list[tuple[str, FlowSettings]]:
        """Every flow with settings, by key."""
        with self._env.begin() as txn:
            return [(bytes(k).decode(), _FLOW_DECODER.decode(v)) for k, v in txn.cursor(db=self._flows)]

    def get_meta(self, key: str) -> bytes | None:
        """The meta record ``key`` as this replica has applied it (None: absent), from memory when
        it was read before and no apply has written it since."""
        cache = self._meta_cache
        hit = cache.get(key, _ABSENT)
        if hit is not _ABSENT:
            return hit
        gen = self._meta_gen
        with self._env.begin() as txn:
            raw = txn.get(b"m:" + key.encode(), db=self._meta)
            value = None if raw is None else bytes(raw)
        with self._meta_lock:
            if self._meta_gen == gen:  # no apply wrote meta since the read began
                if len(cache) >= _META_CACHE_MAX:
                    cache.clear()
                cache[key] = value
        return value

    def _forget_meta(self, keys: Iterable[str] | None) -> None:
        """Drop ``keys`` (None: every record) from :meth:`get_meta`'s cache, after the write
        transaction that changed them committed: a read that began before cannot cache the old
        value after this (the generation moved), and one that begins after reads the new."""
        with self._meta_lock:
            self._meta_gen += 1
            if keys is None:
                self._meta_cache.clear()
            else:
                for k in keys:
                    self._meta_cache.pop(k, None)

    def scan_meta(self, prefix: str) -> list[tuple[str, bytes]]:
        """Every meta record whose key starts with ``prefix``, by key."""
        with self._env.begin() as txn:
            return _scan_meta(txn, self._meta, prefix)

    def stats(self) -> dict[str, Any]:
        """Counters for the admin ``stats`` command."""
        return {
            "applied_index": self._applied, "decodes_skipped": self.decodes_skipped,
            "sync": self.sync_mode,
            "discarded_after_os_stop": self.discarded_after_os_stop,
        }

    def counts(self) -> dict[str, int]:
        """Tasks per status (every status present, zeros included)."""
        return {s.value: self._counts.get(s.value, 0) for s in Status}

    def __len__(self) -> int:
        return self._entries(self._tasks)

    def scan_due(
        self, chunk: int = 4096, after: tuple[int, str] | None = None, namespaces: Iterable[str] | None = None,
    ) -> Iterator[tuple[int, str]]:
        """Every due entry in due order (strictly after ``(due_ms, task_id)`` when given), read in
        chunks of short read transactions (streaming); of ``namespaces`` only unless None, read
        from the namespace index (a page costs their entries only)."""
        if namespaces is not None:
            prefixes = [ns_index.head(ns) + ns_index.DUE for ns in sorted(set(namespaces))]
            for k in self._ns_ids(prefixes, due_key(*after) if after else b"", False, chunk):
                yield _U64.unpack_from(k)[0], k[8:].decode()
            return
        start = due_key(*after) + b"\x00" if after else b""
        while True:
            rows: list[bytes] = []
            with self._env.begin(db=self._due) as txn:
                cur = txn.cursor()
                ok = cur.set_range(start) if start else cur.first()
                while ok and len(rows) < chunk:
                    rows.append(bytes(cur.key()))
                    ok = cur.next()
            for k in rows:
                yield _U64.unpack_from(k)[0], k[8:].decode()
            if len(rows) < chunk:
                return
            start = rows[-1] + b"\x00"

    def read_due(self, start: tuple[int, str], until_ms: int, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` due entries ``(due_ms, task_id) >= start`` with ``due_ms < until_ms``, in due
        order: one read transaction, one cursor range (the leader's window loader,
        ``docs/architecture.md#near-term-window``)."""
        out: list[tuple[int, str]] = []
        if limit <= 0 or start[0] >= until_ms:
            return out
        end = _U64.pack(until_ms)
        unpack = _U64.unpack_from
        with self._env.begin(db=self._due) as txn:
            cur = txn.cursor()
            ok = cur.set_range(due_key(*start))
            while ok and len(out) < limit:
                k = cur.key()
                if k[:8] >= end:
                    break
                out.append((unpack(k)[0], bytes(k[8:]).decode()))
                ok = cur.next()
        return out

    def scan_expirable(self, updated_before_ms: int, limit: int) -> list[ExpireItem]:
        """Up to ``limit`` terminal tasks last updated before ``updated_before_ms``, oldest first
        (the Cleaner proposes them as ``Expire`` items; the machine re-checks on apply)."""
        out: list[ExpireItem] = []
        with self._env.begin(db=self._expiry) as txn:
            cur = txn.cursor()
            ok = cur.first()
            while ok and len(out) < limit:
                k = bytes(cur.key())
                ms = _U64.unpack_from(k)[0]
                if ms >= updated_before_ms:
                    break
                if not self._has_dead(txn, k[8:]):  # kept while it has dead letters, to redrive them
                    out.append(ExpireItem(k[8:].decode(), ms))
                ok = cur.next()
        return out

    def _has_dead(self, txn: lmdb.Transaction, tid: bytes) -> bool:
        cur = txn.cursor(db=self._dead)
        return cur.set_range(tid + b"-") and bytes(cur.key()).startswith(tid + b"-")

    def get_dead(self, dead_id: str) -> DeadLetter | None:
        with self._env.begin(db=self._dead) as txn:
            raw = txn.get(dead_id.encode())
            return None if raw is None else _DEAD_DECODER.decode(raw)

    def list_dead(
        self, *, task_id: str | None = None, flow: str | None = None, kind: str | None = None,
        since_ms: int | None = None, until_ms: int | None = None, cursor: str | None = None, limit: int = 100,
        scan_budget: int = 20_000, namespaces: frozenset[str] | None = None,
    ) -> tuple[list[DeadLetter], str | None]:
        """Dead letters newest first, filtered; ``(page, next cursor)``. A filter by task reads that
        task's range (its ids sort as text, ``-10.1`` before ``-2.1``, so it is sorted by time here; at
        most :data:`TASK_DEAD_MAX` of them); the others walk the time index from ``until_ms`` (or the
        cursor) down, at most ``scan_budget`` entries per call: then the page may be short and the
        cursor says where to go on. ``namespaces`` (None: all) keeps only their dead letters, so a
        page of a key of some namespaces is filled with its own."""
        out: list[DeadLetter] = []
        nxt: str | None = None
        with self._env.begin() as txn:
            if task_id is not None:
                after: tuple[int, str] | None = None
                if cursor:
                    at, sep, did = cursor.partition(":")
                    if not sep or not at.isdigit():
                        raise ValidationError("cursor is not a cursor this API issued", "cursor")
                    after = (int(at), did)
                prefix = task_id.encode() + b"-"
                cur = txn.cursor(db=self._dead)
                rows: list[DeadLetter] = []
                ok = cur.set_range(prefix)
                while ok and bytes(cur.key()).startswith(prefix) and len(rows) < TASK_DEAD_MAX:
                    dl = _DEAD_DECODER.decode(cur.value())
                    if _dead_matches(dl, flow, kind, since_ms, until_ms, namespaces) and (
                        after is None or (dl.at_ms, dl.id) < after
                    ):
                        rows.append(dl)
                    ok = cur.next()
                rows.sort(key=lambda d: (d.at_ms, d.id), reverse=True)
                out = rows[:limit]
                if len(rows) > limit:
                    nxt = f"{out[-1].at_ms}:{out[-1].id}"
                return out, nxt
            keys = _newest_first(txn.cursor(db=self._dead_at), cursor, until_ms) if namespaces is None \
                else self._ns_newest(namespaces, ns_index.DEAD, cursor, until_ms)
            for scanned, k in enumerate(keys):
                if since_ms is not None and _U64.unpack_from(k)[0] < since_ms:
                    break
                if scanned >= scan_budget:
                    nxt = k.hex()
                    break
                raw = txn.get(k[8:], db=self._dead)
                if raw is None:
                    continue
                dl = _DEAD_DECODER.decode(raw)
                if namespaces is not None and (dl.namespace not in namespaces or _U64.unpack_from(k)[0] != dl.at_ms):
                    continue  # the index, read after, says otherwise: never shown; a restamped one is where it went
                if len(out) == limit:
                    nxt = k.hex()
                    break
                if _dead_matches(dl, flow, kind, since_ms, until_ms, None):
                    out.append(dl)
        return out, nxt

    def list_audit(
        self, f: AuditFilter, *, cursor: str | None = None, limit: int = 100, scan_budget: int = 20_000,
    ) -> tuple[list[AuditEntry], str | None]:
        """Audit entries newest first, filtered; ``(page, next cursor)``: at most ``scan_budget``
        entries are read per call, so a rare filter gives short pages and a cursor to go on from. A
        filter by namespace reads the namespace index: only that namespace's entries are read (and
        counted), so nothing of another shapes a page of a key of some namespaces."""
        out: list[AuditEntry] = []
        nxt: str | None = None
        nss = f.namespaces
        if f.namespace is not None:
            nss = frozenset((f.namespace,)) if nss is None or f.namespace in nss else frozenset()
        with self._env.begin(db=self._audit) as txn:
            keys = _newest_first(txn.cursor(), cursor, None) if nss is None \
                else self._ns_newest(nss, ns_index.AUDIT, cursor, None)
            for scanned, k in enumerate(keys):
                if scanned >= scan_budget:
                    nxt = k.hex()
                    break
                raw = txn.get(k)
                if raw is None:  # trimmed since the index was read
                    continue
                a = _audit_from(k, raw)
                if nss is not None and a.namespace not in nss:
                    continue  # the index said otherwise: never shown
                if len(out) == limit:
                    nxt = k.hex()
                    break
                if _audit_matches(a, f):
                    out.append(a)
        return out, nxt

    def audit_trim_point(self, now_ms: int, max_entries: int, max_age_ms: int, limit: int) -> int | None:
        """The log index before which retention deletes audit entries (more than ``max_entries``, or
        written before ``now_ms - max_age_ms``), at most ``limit`` of them; ``None``: nothing to trim."""
        with self._env.begin(db=self._audit) as txn:
            total: int = txn.stat(self._audit)["entries"]
            excess = max(0, total - max_entries)
            cur = txn.cursor()
            ok = cur.first()
            n = 0
            last: bytes | None = None
            while ok and n < limit:
                k = bytes(cur.key())
                if n >= excess and _AUDIT_DECODER.decode(cur.value()).at_ms >= now_ms - max_age_ms:
                    break
                last, n = k, n + 1
                ok = cur.next()
        # whole log entries only: a trim bound is an index (a batch's entries go together)
        return None if last is None else _U64.unpack_from(last)[0] + 1

    def _entries(self, db: Any) -> int:
        """How many records ``db`` holds."""
        with self._env.begin() as txn:
            return int(txn.stat(db)["entries"])

    def audit_count(self) -> int:
        return self._entries(self._audit)

    def scan_dead_before(self, at_before_ms: int, limit: int) -> list[str]:
        """Ids of up to ``limit`` dead letters written before ``at_before_ms`` (retention), oldest first."""
        out: list[str] = []
        with self._env.begin(db=self._dead_at) as txn:
            for k, _ in txn.cursor():
                if _U64.unpack_from(k)[0] >= at_before_ms or len(out) >= limit:
                    break
                out.append(bytes(k[8:]).decode())
        return out

    def read_outbox(self, limit: int, after: tuple[int, str] | None = None) -> list[Notice]:
        """Up to ``limit`` notifications waiting, oldest first, strictly after ``after``."""
        out: list[Notice] = []
        with self._env.begin(db=self._outbox) as txn:
            cur = txn.cursor()
            ok = cur.set_range(_U64.pack(after[0]) + after[1].encode() + b"\x00") if after else cur.first()
            while ok and len(out) < limit:
                out.append(_NOTICE_DECODER.decode(cur.value()))
                ok = cur.next()
        return out

    def outbox_count(self) -> int:
        return self._entries(self._outbox)

    def dead_count(self) -> int:
        return self._entries(self._dead)

    def scan_fires(self, chunk: int = 4096) -> Iterator[FireRecord]:
        """Every in-flight fire, in fire id order, streaming."""
        for k, v in self._scan(self._fires, b"", chunk):
            yield fire_from_bytes(k.decode(), v)

    def scan_tasks(self, after: str = "", chunk: int = 1024) -> Iterator[Task]:
        """Tasks in id (= creation) order, starting after task id ``after`` (cursor pagination)."""
        start = (after.encode() + b"\x00") if after else b""
        for _k, v in self._scan(self._tasks, start, chunk):
            yield task_from_bytes(v)

    def scan_tasks_before(self, before: str = "", chunk: int = 1024) -> Iterator[Task]:
        """Tasks newest first (reverse id order), starting before task id ``before`` ("" = the newest)."""
        end = before.encode() if before else None
        while True:
            rows: list[tuple[bytes, bytes]] = []
            with self._env.begin(db=self._tasks) as txn:
                cur = txn.cursor()
                if end is None:
                    ok = cur.last()
                else:
                    ok = cur.set_range(end)  # first key >= end: step back from it (or from the end)
                    ok = cur.prev() if ok else cur.last()
                while ok and len(rows) < chunk:
                    rows.append((bytes(cur.key()), bytes(cur.value())))
                    ok = cur.prev()
            for _k, v in rows:
                yield task_from_bytes(v)
            if len(rows) < chunk:
                return
            end = rows[-1][0]

    def scan_tasks_where(
        self, *, statuses: Sequence[str] = (), scene: str | None = None, after: str = "", reverse: bool = False,
        chunk: int = 256, namespaces: Iterable[str] | None = None,
    ) -> Iterator[Task]:
        """Tasks of any of ``statuses`` (or of ``scene`` when no status is given) in id order (newest
        first with ``reverse``), strictly after (before) task id ``after``, read from the
        ``by_status`` / ``by_scene`` index: a page costs its own rows, not the store's. With both
        filters the status index is read and the scene checked per task. ``namespaces`` (None: all)
        reads their part of the namespace index instead (every status's, merged, without a status
        filter; a scene checked per task), so another namespace's tasks are never read."""
        if namespaces is not None:
            db = self._by_ns
            prefixes = [ns_index.status_prefix(ns, s) for ns in sorted(set(namespaces))
                        for s in sorted(set(statuses or Status))]
        elif statuses:
            db, prefixes = self._by_status, [s.encode() + b"\x00" for s in sorted(set(statuses))]
        elif scene is not None:
            db, prefixes = self._by_scene, [scene.encode() + b"\x00"]
        else:
            raise ValueError("scan_tasks_where needs statuses, a scene or namespaces")
        for tid in self._merged_ids(db, prefixes, after.encode(), reverse, chunk):
            with self._env.begin(db=self._tasks) as txn:
                raw = txn.get(tid)
            if raw is None:  # deleted between the index read and this one
                continue
            t = task_from_bytes(raw)
            if scene is not None and db is not self._by_scene and t.spec.scene != scene:
                continue
            yield t

    def _merged_ids(self, db: Any, prefixes: list[bytes], after: bytes, reverse: bool, chunk: int) -> Iterator[bytes]:
        """What follows each prefix of an index (a task id, a ``due | id`` or a time key), merged in
        order (newest first with ``reverse``), strictly after (before) ``after`` (``b""``: from the
        start, or the end). Read in rounds of ``chunk`` rows, each round one read transaction over
        every prefix: a task that changes status between rounds is not yielded twice nor missed,
        as the prefixes read lazily each in transactions of their own could (the merge yields a
        position once, and the next round starts past the last position yielded)."""
        if not prefixes:
            return
        pos = after
        while True:
            rows: list[bytes] = []
            with self._env.begin(db=db) as txn:
                heap: list[tuple[Any, int, bytes, Any]] = []  # (order, prefix number, rest, cursor) of each next row
                for n, p in enumerate(prefixes):
                    cur = txn.cursor()
                    if not reverse:
                        ok = cur.set_range(p + pos + b"\x00" if pos else p)
                    else:
                        ok = cur.set_range(p + pos if pos else p + b"\xff")
                        ok = cur.prev() if ok else cur.last()
                    if ok and (k := bytes(cur.key())).startswith(p):
                        rest = k[len(p):]
                        heap.append((_Desc(rest) if reverse else rest, n, rest, (cur, p)))
                heapq.heapify(heap)
                while heap and len(rows) < chunk:
                    _, n, rest, (cur, p) = heap[0]
                    rows.append(rest)
                    ok = cur.prev() if reverse else cur.next()
                    if ok and (k := bytes(cur.key())).startswith(p):
                        nxt = k[len(p):]
                        heapq.heapreplace(heap, (_Desc(nxt) if reverse else nxt, n, nxt, (cur, p)))
                    else:
                        heapq.heappop(heap)
            yield from rows
            if len(rows) < chunk:
                return
            pos = rows[-1]

    def _ns_ids(self, prefixes: list[bytes], after: bytes, reverse: bool, chunk: int) -> Iterator[bytes]:
        return self._merged_ids(self._by_ns, prefixes, after, reverse, chunk)

    def _ns_newest(self, namespaces: Iterable[str], kind: bytes, cursor: str | None, until_ms: int | None) -> Iterator[bytes]:
        """The keys of ``namespaces``' dead letters (``kind`` :data:`ns_index.DEAD`: ``dead_at``
        keys) or audit entries (``AUDIT``: ``audit`` keys), newest first, from where
        :func:`_newest_first` would start."""
        if cursor:
            try:
                after = bytes.fromhex(cursor) + b"\x00"  # inclusive: strictly before its successor
            except ValueError:
                raise ValidationError("cursor is not a cursor this API issued", "cursor") from None
        elif until_ms is not None:
            after = _U64.pack(min(until_ms, 2**64 - 2) + 1)
        else:
            after = b""
        return self._ns_ids([ns_index.head(ns) + kind for ns in sorted(set(namespaces))], after, True, 256)

    def due_by_day(self, from_ms: int, days: int) -> list[tuple[int, int]]:
        """``(day start ms, due entries that day)`` for the ``days`` days from ``from_ms``'s day
        (days without entries left out), read from ``due_days``: O(days), not O(entries)."""
        first = from_ms // DAY_MS
        out: list[tuple[int, int]] = []
        with self._env.begin(db=self._due_days) as txn:
            cur = txn.cursor()
            ok = cur.set_range(_U64.pack(first))
            while ok:
                d = _U64.unpack(cur.key())[0]
                if d >= first + days:
                    break
                out.append((d * DAY_MS, _U64.unpack(cur.value())[0]))
                ok = cur.next()
        return out

    def due_count(self) -> int:
        return self._entries(self._due)

    def task_ids(self) -> Iterator[str]:
        for k, _ in self._scan(self._tasks, b"", 4096):
            yield k.decode()

    def _scan(self, db: Any, start: bytes, chunk: int) -> Iterator[tuple[bytes, bytes]]:
        while True:
            rows: list[tuple[bytes, bytes]] = []
            with self._env.begin(db=db) as txn:
                cur = txn.cursor()
                ok = cur.set_range(start) if start else cur.first()
                while ok and len(rows) < chunk:
                    rows.append((bytes(cur.key()), bytes(cur.value())))
                    ok = cur.next()
            yield from rows
            if len(rows) < chunk:
                return
            start = rows[-1][0] + b"\x00"

    def digest(self) -> str:
        """sha256 over every database's sorted (key, value) pairs except volatile meta."""
        return self.digest_state()[1]

    def digest_state(self) -> tuple[int, str]:
        """``(applied_index, digest)`` read in one transaction (any thread); every record hashed as
        this release writes it (:func:`canonical_record`)."""
        return digest_state(
            self._env, self._meta, tuple(self._dbs.items()),
            volatile=(_APPLIED, _APPLIED_TERM, _COUNTS), canonical=canonical_record,
        )


__all__ = [
    "DATABASES",
    "AuditFilter",
    "EntryLike",
    "EntryResult",
    "StoreError",
    "TaskStore",
    "canonical_record",
    "due_key",
    "fire_from_bytes",
    "fire_to_bytes",
    "task_from_bytes",
    "task_to_bytes",
]
