"""The replicated key-value state machine: ``node.state_machine: kv``, driven by the Raft tests and
the Raft benchmark (``scripts/bench/raft.py``) to measure consensus without the scheduler on top.

It follows the contract of :class:`molens.raft.fsm.StateMachine`: ``applied_index`` in the same write
transaction as the batch's changes, error results instead of exceptions for bad commands.

Durability of :class:`KVStateMachine`: lmdb ``sync=True, metasync=False`` by default -- one
fdatasync per batch, database integrity kept on power loss, the last batch may be rolled back (then
it is replayed from the Raft log, which is the durable record). ``log_backed=True`` (a Raft node's
FSM, as the task store's: docs/architecture.md#fsm-durability) skips that fdatasync too and guards
the file with the boot id instead (:func:`molens.lmdb_snapshot.guard_boot`): a file left open by an
earlier boot is discarded at open and rebuilt from the snapshot and the log. ``durable=False``
skips every sync (kill -9 safe, not power-loss safe: tests).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import msgpack

from molens import lmdb_snapshot
from molens.lmdb_snapshot import META_APPLIED as _META_APPLIED
from molens.lmdb_snapshot import U64 as _U64
from molens.lmdb_snapshot import StateFile
from molens.raft.fsm import FSMError
from molens.raft.log import Entry, EntryKind

log = logging.getLogger(__name__)

_META_APPLIED_TERM = b"applied_term"

DEFAULT_MAP_SIZE = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class KVError:
    """Result of a KV command that was refused; the state did not change."""

    index: int
    reason: str


def _b(x: bytes | str) -> bytes:
    return x.encode() if isinstance(x, str) else x


def encode_put(key: bytes | str, value: bytes | str) -> bytes:
    return msgpack.packb(["put", _b(key), _b(value)], use_bin_type=True)  # type: ignore[no-any-return]


def encode_delete(key: bytes | str) -> bytes:
    return msgpack.packb(["delete", _b(key)], use_bin_type=True)  # type: ignore[no-any-return]


def encode_cas(key: bytes | str, expected: bytes | str | None, new: bytes | str | None) -> bytes:
    """Set ``key`` to ``new`` (``None``: delete) iff its value is ``expected`` (``None``: absent)."""
    return msgpack.packb(  # type: ignore[no-any-return]
        ["cas", _b(key), None if expected is None else _b(expected), None if new is None else _b(new)],
        use_bin_type=True,
    )


def encode_get(key: bytes | str) -> bytes:
    """A read through the log (linearizable): the result is the value at that point, or ``None``."""
    return msgpack.packb(["get", _b(key)], use_bin_type=True)  # type: ignore[no-any-return]


class KVStateMachine(StateFile):
    """Replicated key-value FSM on lmdb under ``data_dir/fsm/`` (dbs ``kv`` and ``meta``).

    Commands are msgpack lists: ``["put", k, v]`` -> ``True``; ``["delete", k]`` -> whether it
    existed; ``["cas", k, expected|None, new|None]`` -> whether it swapped; ``["get", k]`` -> value or
    ``None``. Keys and values are bytes (``encode_*`` accept str and UTF-8 encode it).
    """

    full_error = FSMError

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        durable: bool = True,
        log_backed: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> None:
        super().__init__(data_dir, what="kv fsm", durable=durable, log_backed=log_backed, map_size=map_size)
        self.applied_total = 0
        """Entries applied (not skipped) since this object was created: a restart that replays only
        the missing entries shows a small number here, a replay from zero shows the whole log."""
        self.skipped_total = 0
        self.batches_total = 0
        self._open()

    def _open(self) -> None:
        self._env = self._open_env(max_dbs=2)
        self._kv = self._env.open_db(b"kv")
        self._meta = self._env.open_db(b"meta")
        with self._env.begin() as txn:
            raw = txn.get(_META_APPLIED, db=self._meta)
            raw_term = txn.get(_META_APPLIED_TERM, db=self._meta)
        self._applied = _U64.unpack(raw)[0] if raw is not None else 0
        self._applied_term = _U64.unpack(raw_term)[0] if raw_term is not None else 0
        log.info("kv fsm opened dir=%s applied_index=%d", self.dir, self._applied)

    # --- StateMachine -------------------------------------------------------------------------
    def applied_index(self) -> int:
        return int(self._applied)

    def applied_term(self) -> int:
        return int(self._applied_term)

    def apply_batch(self, entries: Sequence[Entry]) -> list[Any]:
        fresh = [e for e in entries if e.index > self._applied]
        skipped = len(entries) - len(fresh)
        for n, e in enumerate(fresh):
            expect = self._applied + 1 + n
            if e.index != expect:
                raise FSMError(f"gap: entry {e.index} where {expect} was expected")
        results: list[Any] = [None] * skipped
        if not fresh:
            self.skipped_total += skipped
            return results
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    out = self._apply_all(txn, fresh)
                    txn.put(_META_APPLIED, _U64.pack(fresh[-1].index), db=self._meta)
                    txn.put(_META_APPLIED_TERM, _U64.pack(fresh[-1].term), db=self._meta)
                break
            except lmdb.MapFullError:
                self._grow()
        self._applied = fresh[-1].index
        self._applied_term = fresh[-1].term
        self.applied_total += len(fresh)
        self.skipped_total += skipped
        self.batches_total += 1
        return results + out

    def _apply_all(self, txn: lmdb.Transaction, entries: Sequence[Entry]) -> list[Any]:
        """Results of ``entries`` in order: the common command (``["put", k, v]``, the same rules as
        :meth:`_apply_one`) inline through one cursor -- a method call and a keyword lookup less per
        entry, ~0.2 us of 0.8 -- anything else through :meth:`_apply_one`."""
        out: list[Any] = []
        append = out.append
        put = txn.cursor(db=self._kv).put
        unpack = msgpack.unpackb
        normal = EntryKind.NORMAL
        for e in entries:
            data = e.data
            if e.kind is normal and data:
                try:
                    cmd = unpack(data, raw=False)
                except (ValueError, msgpack.UnpackException):
                    cmd = None  # _apply_one reports it
                if type(cmd) is list and len(cmd) == 3 and cmd[0] == "put":
                    key, value = cmd[1], cmd[2]
                    if type(key) is bytes and key and type(value) is bytes:
                        try:
                            put(key, value)
                        except lmdb.BadValsizeError as exc:
                            append(KVError(e.index, f"key too long: {exc}"))
                        else:
                            append(True)
                        continue
            append(self._apply_one(txn, e))
        return out

    def _apply_one(self, txn: lmdb.Transaction, e: Entry) -> Any:
        if e.kind is not EntryKind.NORMAL or not e.data:
            return None
        try:
            cmd = msgpack.unpackb(e.data, raw=False)
        except (ValueError, msgpack.UnpackException) as exc:
            return KVError(e.index, f"undecodable command: {exc}")
        # the common case first, the same rules as below: ["put", non-empty bytes key, bytes value]
        if type(cmd) is list and len(cmd) == 3 and cmd[0] == "put":
            key, value = cmd[1], cmd[2]
            if type(key) is bytes and key and type(value) is bytes:
                try:
                    txn.put(key, value, db=self._kv)
                except lmdb.BadValsizeError as exc:
                    return KVError(e.index, f"key too long: {exc}")
                return True
        if not isinstance(cmd, list) or not cmd or not isinstance(cmd[0], str):
            return KVError(e.index, "command must be a list [op, ...]")
        op, args = cmd[0], cmd[1:]
        if not args or not isinstance(args[0], bytes) or not args[0]:
            return KVError(e.index, "key must be non-empty bytes")
        if not all(a is None or isinstance(a, bytes) for a in args):
            return KVError(e.index, "arguments must be bytes or nil")
        if op == "put" and len(args) == 2 and args[1] is not None:
            try:
                txn.put(args[0], args[1], db=self._kv)
            except lmdb.BadValsizeError as exc:
                return KVError(e.index, f"key too long: {exc}")
            return True
        if op == "delete" and len(args) == 1:
            return bool(txn.delete(args[0], db=self._kv))
        if op == "get" and len(args) == 1:
            return txn.get(args[0], db=self._kv)
        if op == "cas" and len(args) == 3:
            key, expected, new = args
            if txn.get(key, db=self._kv) != expected:
                return False
            if new is None:
                txn.delete(key, db=self._kv)
            else:
                txn.put(key, new, db=self._kv)
            return True
        return KVError(e.index, f"unknown command {op!r} with {len(args)} arguments")

    def snapshot(self, path: str | os.PathLike[str]) -> int:
        dest = Path(path)
        index = self._snapshot_to(dest)
        log.info("kv fsm snapshot path=%s applied_index=%d bytes=%d", dest, index, dest.stat().st_size)
        return index

    def restore(self, path: str | os.PathLike[str]) -> None:
        src = Path(path)

        def applied_in(env: lmdb.Environment) -> bytes | None:
            meta = env.open_db(b"meta", create=False)
            with env.begin() as txn:
                raw: bytes | None = txn.get(_META_APPLIED, db=meta)
            return raw

        try:
            raw = self._swap_in(src, applied_in)
        except lmdb.Error as exc:
            raise FSMError(f"{src}: not a KV FSM snapshot: {exc}") from exc
        log.info("kv fsm restored from=%s applied_index=%d (snapshot says %s)", src, self._applied,
                 _U64.unpack(raw)[0] if raw else 0)

    def close(self) -> None:
        self._close_env()

    # --- local reads and test helpers ---------------------------------------------------------
    def get(self, key: bytes | str) -> bytes | None:
        with self._env.begin(db=self._kv) as txn:
            v = txn.get(_b(key))
        return None if v is None else bytes(v)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        with self._env.begin(db=self._kv) as txn:
            for k, v in txn.cursor():
                yield bytes(k), bytes(v)

    def __len__(self) -> int:
        with self._env.begin(db=self._kv) as txn:
            return int(txn.stat(self._kv)["entries"])

    def digest(self) -> str:
        """sha256 over the sorted (key, value) pairs: equal on replicas with equal state."""
        return self.digest_state()[1]

    def digest_state(self) -> tuple[int, str]:
        """``(applied_index, digest)`` read in one transaction (any thread)."""
        return lmdb_snapshot.digest_state(self._env, self._meta, ((b"", self._kv),))

    def stats(self) -> dict[str, Any]:
        return {
            "applied_index": self.applied_index(),
            "applied_total": self.applied_total,
            "skipped_total": self.skipped_total,
            "batches_total": self.batches_total,
            "keys": len(self),
            "sync": self.sync_mode,
            "discarded_after_os_stop": self.discarded_after_os_stop,
        }

    def __enter__(self) -> KVStateMachine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["KVError", "KVStateMachine", "encode_cas", "encode_delete", "encode_get", "encode_put"]
