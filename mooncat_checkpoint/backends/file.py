"""``file://DIR``: one readable JSON file per key, ``DIR/<namespace>/<name>.json``, in the on-disk format
of the TypeScript ``mooncat-checkpoint`` (npm, 0.5.1), so a Node step and a Python step share a store.

Layout of a namespace directory::

    DIR/<ns>/<key>.json              the record (``naming.storage_name`` picks the name, as the original does)
    DIR/<ns>/sha256-<32 hex>.json    a key that is not a safe file name; the record holds the key
    DIR/<ns>/.locks/00 .. 3f         flock(2) lock files, one per stripe of keys (never deleted)
    DIR/<ns>/.fence-high             a symbolic link whose target is a number, the high mark: at least
                                     every fence handed out in the namespace
    DIR/<ns>/.fence-floor            {"floor": F, "high": H}: F >= the fence of every record this library
                                     deleted (H: the high mark of earlier releases)
    DIR/<ns>/.tmp-<pid>-<n>          a write in progress, or a client's spare (below; gc removes ones
                                     older than an hour, close() its own)

A record is the original's camelCase JSON (``namespace key status ownerRunId leaseToken leaseUntil
result resultRef attempts createdAt updatedAt``) plus our ``error fence fingerprint leaseMs format``,
which the original ignores (and keeps when it updates a record in place). Three kinds are read:
ours; the original's (no fence: it reads as the namespace's fence base, the high mark, so the next
claim's fence has never been handed out); and this library's first format (snake_case, ``format: 1``,
some keys under ``sha256-<64 hex>``), rewritten in the current format and name on its next write.

Fences: the high mark is at least every fence handed out in the namespace. A re-claim's fence (the old
one + 1) raises the mark past it before the record is written; a new record takes the next fence of a
block of ``FENCE_BLOCK`` fences the backend reserved above the mark (one write of the mark per block),
used only while the block's top is still the mark, i.e. while nobody handed out a newer fence. So a key
deleted by anyone (the original's reset and gc delete record files and nothing else) still continues
above its old fence, and a claim of a new key costs no write beyond its record's. The mark is a
symbolic link because its target lives in the link's inode, which the record's own directory fsync
makes durable with it: a reservation costs a ``symlink`` + ``rename``, not a third and fourth fsync.
What the original cannot see: it locks only within its own process.

Every change happens under an exclusive ``flock`` on the key's stripe lock file, so a claim is atomic
across threads and processes on one machine (flock is per open file description; each operation
opens its own). Reads need no lock: a record changes only by ``rename`` of a complete temp file.

Durability: each write is temp file -> ``fsync`` -> ``rename`` -> ``fsync`` of the directory, so a
record that was reported written survives a power cut (and a fence handed out is never handed out
again). That costs two fsyncs per change. Where a record is replaced, the rename is an atomic exchange
(``renameat2(RENAME_EXCHANGE)``, plain ``rename`` where the filesystem has none) and the old inode
becomes the thread's spare temp file for its next write: a claim + done creates one inode, not two.
Local filesystems only: flock over NFS is not dependable.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import fcntl
import itertools
import json
import os
import re
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from mooncat_checkpoint.codec import encode_json
from mooncat_checkpoint.errors import BackendUnavailableError, CorruptRecordError
from mooncat_checkpoint.model import CheckpointStatus, UnreadableRecord
from mooncat_checkpoint.naming import check_namespace, legacy_storage_name, storage_name
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["FileBackend", "STRIPES"]

T = TypeVar("T")

STRIPES = 64
FENCE_BLOCK = 1024  # fences a backend reserves for new records with one write of the high mark
FORMAT = 2  # 1: this library's first, snake_case format (still read)
_DEBRIS_AGE_S = 3600.0
_DEBRIS = re.compile(r"\.tmp-\d+-\d+|.+\.json\.tmp\.\d+")
"""Temp file names: ours (``.tmp-<pid>-<n>``) and the original library's (``<name>.json.tmp.<pid>``)."""
_FLOOR_FILE = ".fence-floor"
_HIGH_LINK = ".fence-high"
_FLOOR_LOCK = "floor"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_temp_ids = itertools.count()  # shared by every backend in the process: temp names never collide
_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _c_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """The C library's ``renameat2`` (Linux, glibc 2.28+), or None."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _c_renameat2()

_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)


def _read_file(path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist. O_NOATIME: with relatime, reading a file written
    moments ago (a claim, read back by its done) would dirty its inode for the next fsync to flush."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except PermissionError:  # O_NOATIME needs the file's owner (or CAP_FOWNER)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _unlink_if_there(path: str, fsync_dir: str | None) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    if fsync_dir is not None:
        _fsync_dir(fsync_dir)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(rec: StoredRecord) -> bytes:
    """The file text: the original library's record (its camelCase fields, in its order), then ours.

    One field per line as ``JSON.stringify(record, null, 2)`` writes it, the result inline as its
    stored compact JSON. The other side ignores ``error``, ``fence``, ``fingerprint``, ``leaseMs`` and
    ``format``, and keeps them when it spreads the record into an update (its touch and done).
    """
    e = _dumps
    lines = (
        f'{{\n  "namespace": {e(rec.namespace)},\n'
        f'  "key": {e(rec.key)},\n'
        f'  "status": "{rec.status.value}",\n'
        f'  "ownerRunId": {e(rec.owner_run_id)},\n'
        f'  "leaseToken": {e(rec.lease_token)},\n'
        f'  "leaseUntil": {e(rec.lease_until)},\n'
        f'  "result": {"null" if rec.result_json is None else rec.result_json},\n'
        f'  "resultRef": {e(rec.result_ref)},\n'
        f'  "attempts": {rec.attempts},\n'
        f'  "createdAt": {rec.created_at},\n'
        f'  "updatedAt": {rec.updated_at},\n'
        f'  "error": {e(rec.error)},\n'
        f'  "fence": {rec.fence},\n'
        f'  "fingerprint": {e(rec.fingerprint)},\n'
        f'  "leaseMs": {e(rec.lease_ms)},\n'
        f'  "format": {FORMAT}\n}}\n'
    )
    return lines.encode("utf-8")


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():  # JSON numbers written by JavaScript
        return int(value)
    raise TypeError(f"not an integer: {value!r}")


def _decode(data: bytes, path: str, key: str | None) -> StoredRecord:
    """A record of either format. ``fence`` is 0 when the record has none (the other side wrote it
    afresh): the backend then puts the namespace's fence base in its place."""
    try:
        doc: dict[str, Any] = json.loads(data)
        result = doc.get("result")
        if "owner_run_id" in doc:  # this library's first format (snake_case)
            rec = StoredRecord(
                namespace=doc["namespace"],
                key=doc["key"],
                status=CheckpointStatus(doc["status"]),
                owner_run_id=doc["owner_run_id"],
                lease_until=doc["lease_until"],
                lease_ms=doc["lease_ms"],
                lease_token=doc["lease_token"],
                attempts=doc["attempts"],
                fence=doc["fence"],
                fingerprint=doc["fingerprint"],
                created_at=doc["created_at"],
                updated_at=doc["updated_at"],
                result_json=None if result is None else encode_json(result),
                result_ref=doc["result_ref"],
                error=doc["error"],
            )
        else:
            fence = _opt_int(doc.get("fence"))
            created = _opt_int(doc["createdAt"])
            updated = _opt_int(doc.get("updatedAt"))
            rec = StoredRecord(
                namespace=doc["namespace"],
                key=doc["key"],
                status=CheckpointStatus(doc["status"]),
                owner_run_id=doc.get("ownerRunId"),
                lease_until=_opt_int(doc.get("leaseUntil")),
                lease_ms=_opt_int(doc.get("leaseMs")),
                lease_token=doc.get("leaseToken"),
                attempts=_opt_int(doc.get("attempts")) or 0,
                fence=0 if fence is None or fence < 1 else fence,
                fingerprint=doc.get("fingerprint"),
                created_at=0 if created is None else created,
                updated_at=(0 if created is None else created) if updated is None else updated,
                result_json=None if result is None else encode_json(result),
                result_ref=doc.get("resultRef"),
                error=doc.get("error"),
            )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptRecordError(f"unreadable checkpoint file {path}: {e!r}") from None
    if not isinstance(rec.key, str) or (key is not None and rec.key != key):
        raise CorruptRecordError(
            f"checkpoint file {path} holds key {rec.key!r}, not {key!r} (two keys share one file name)"
        )
    return rec


_HASHED_NAME = re.compile(r"sha256-(?:[0-9a-f]{32}|[0-9a-f]{64})")


def _key_of_name(stem: str) -> str | None:
    """The key whose record a file named ``stem.json`` is, when the name says: a key stored under its
    own name (``reset`` of that key removes the file). None for a hashed name, which names no key."""
    if storage_name(stem) != stem or _HASHED_NAME.fullmatch(stem):
        return None
    return stem


class FileBackend:
    blocking = True
    durability = "fsync of each record file and of its directory on every change"

    def __init__(self, directory: str) -> None:
        self.root = os.path.abspath(directory)
        self._ready: set[str] = set()  # namespaces whose directories and fence file this backend has seen
        # Per namespace, the block of fences this backend reserved for new records: (next, top). It is
        # used only while ``top`` is still the namespace's high mark (see ``_allocate``).
        self._blocks: dict[str, tuple[int, int]] = {}
        self._blocks_lock = threading.Lock()
        self._spares = threading.local()  # per thread: namespace directory -> its spare temp file
        self._spare_paths: set[str] = set()  # every thread's, removed by close()
        self._can_exchange = True
        try:
            os.makedirs(self.root, exist_ok=True)
            probe = os.path.join(self.root, f".tmp-{os.getpid()}-{next(_temp_ids)}")
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            why = e.strerror or str(e)
            if e.errno in (errno.EEXIST, errno.ENOTDIR):  # the path, or a directory on it, is a file
                why = "a file is in the way (a file store is a directory)"
            raise BackendUnavailableError(f"file backend: directory {directory!r} is not usable: {why}") from None

    # -- paths and locks ---------------------------------------------------------------------

    def _ns_dir(self, namespace: str, *, create: bool) -> str:
        path = os.path.join(self.root, namespace)
        if create and namespace not in self._ready:
            existed = os.path.isdir(path)
            os.makedirs(os.path.join(path, ".locks"), exist_ok=True)
            if not existed:
                _fsync_dir(self.root)
            self._init_fences(namespace, path)
            self._ready.add(namespace)
        return path

    def _init_fences(self, namespace: str, ns_dir: str) -> None:
        self._fence_base(ns_dir)  # a namespace made by an earlier release gets its mark now

    def _make_high(self, ns_dir: str) -> int:
        """Give a namespace its high mark link: earlier releases kept the mark in ``.fence-floor``, the
        first format only the floor; a link removed by hand is rebuilt from what is left."""
        os.makedirs(os.path.join(ns_dir, ".locks"), exist_ok=True)  # a namespace only the original wrote
        with self._locked(ns_dir, _FLOOR_LOCK):
            return self._mark_locked(ns_dir)

    def _mark_locked(self, ns_dir: str) -> int:
        """The high mark, made if missing; the caller holds the fence lock (a second flock of it from
        this process would wait for itself)."""
        high = self._read_high(ns_dir)
        if high is None:
            floor, old_high = self._read_fences(ns_dir)
            high = max([floor, old_high or 0, *(r.fence for r in self._scan(ns_dir))])
            self._link_high(ns_dir, high)
            _fsync_dir(ns_dir)
        return high

    @contextlib.contextmanager
    def _locked(self, ns_dir: str, lock_name: str) -> Iterator[None]:
        fd = os.open(os.path.join(ns_dir, ".locks", lock_name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the open file drops the flock

    def _write(self, ns_dir: str, final: str, data: bytes, *, replaces: bool = False) -> None:
        """Write ``final`` atomically and durably: temp file, fsync, rename, fsync of the directory.

        With ``replaces`` (a record is there) the rename is an exchange (``renameat2``
        ``RENAME_EXCHANGE``): the temp name then holds the old record's inode, kept as this thread's
        spare for the namespace and overwritten by its next write. A claim + done thus creates one
        inode instead of two, and creating one costs more CPU than the rest of the write (ext4)."""
        spares = self._thread_spares()
        tmp = spares.pop(ns_dir, None)
        fd = -1
        if tmp is not None:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
            except FileNotFoundError:  # gc removed it (idle for an hour)
                self._spare_paths.discard(tmp)
        if fd < 0:
            tmp = os.path.join(ns_dir, f".tmp-{os.getpid()}-{next(_temp_ids)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        assert tmp is not None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self._spare_paths.discard(tmp)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        if replaces and self._exchange(tmp, final):
            spares[ns_dir] = tmp
            self._spare_paths.add(tmp)
        else:
            self._spare_paths.discard(tmp)
            os.replace(tmp, final)
        _fsync_dir(ns_dir)

    def _exchange(self, a: str, b: str) -> bool:
        """Swap two names atomically; False when ``b`` is not there or the filesystem cannot."""
        if _renameat2 is None or not self._can_exchange:
            return False
        if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
            self._can_exchange = False  # this filesystem (or kernel) has no exchange: plain renames
        elif err != errno.ENOENT:
            raise OSError(err, os.strerror(err), b)
        return False

    def _thread_spares(self) -> dict[str, str]:
        spares: dict[str, str] | None = getattr(self._spares, "by_dir", None)
        if spares is None:
            spares = self._spares.by_dir = {}
        return spares

    def _read(self, path: str, key: str | None) -> StoredRecord | None:
        data = _read_file(path)
        return None if data is None else _decode(data, path, key)

    def _read_legacy(self, path: str, key: str) -> StoredRecord | None:
        """The record at ``key``'s first-format name, if it is ``key``'s: that name can be the current
        name of another key (``sha256-<64 hex>`` is a safe key now), whose record it then is."""
        data = _read_file(path)
        if data is None:
            return None
        rec = _decode(data, path, None)
        return rec if rec.key == key else None

    def _read_fences(self, ns_dir: str) -> tuple[int, int | None]:
        """(floor, high): floor >= the fence of every deleted record; high >= every fence handed out
        (None in a store of the first format, until ``_init_fences``)."""
        data = _read_file(os.path.join(ns_dir, _FLOOR_FILE))
        if data is None:
            return 0, None
        try:
            doc = json.loads(data)
            floor, high = doc["floor"], doc.get("high")
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptRecordError(f"unreadable fence floor in {ns_dir}: {e!r}") from None
        if type(floor) is not int or (high is not None and type(high) is not int):
            raise CorruptRecordError(f"unreadable fence floor in {ns_dir}: {doc!r}")
        return floor, high

    def _read_high(self, ns_dir: str) -> int | None:
        """The high mark (the ``.fence-high`` link's target), None if the namespace has none yet."""
        try:
            target = os.readlink(os.path.join(ns_dir, _HIGH_LINK))
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CorruptRecordError(f"unreadable fence high mark in {ns_dir}: {e.strerror or e}") from None
        if not target.isdigit():
            raise CorruptRecordError(f"unreadable fence high mark in {ns_dir}: {target!r}")
        return int(target)

    def _link_high(self, ns_dir: str, high: int) -> None:
        """Point the high mark at ``high`` (atomic rename). Not fsynced here: the caller's next
        directory fsync (the record write that hands the fence out) makes it durable."""
        tmp = os.path.join(ns_dir, f".tmp-{os.getpid()}-{next(_temp_ids)}")
        os.symlink(str(high), tmp)
        os.replace(tmp, os.path.join(ns_dir, _HIGH_LINK))

    def _allocate(self, namespace: str, ns_dir: str) -> int:
        """The fence of a new record: the next of this backend's block, while the block's top is still
        the namespace's high mark; else a new block of ``FENCE_BLOCK`` reserved above the mark (the
        mark raised to its top; the caller's record write makes that durable before the fence is
        returned). Why a fence never repeats for a key: every fence handed out is at most the mark;
        any other allocation (another process's block, a re-claim) raises the mark past this block's
        top first, so this block is used only while nothing newer was handed out; and this block's
        fences are handed out in increasing order."""
        mark = self._fence_base(ns_dir)
        with self._blocks_lock:
            nxt, top = self._blocks.get(namespace, (0, -1))
            if top != mark or nxt > top:
                with self._locked(ns_dir, _FLOOR_LOCK):
                    mark = self._mark_locked(ns_dir)
                    nxt, top = mark + 1, mark + FENCE_BLOCK
                    self._link_high(ns_dir, top)
            self._blocks[namespace] = (nxt + 1, top)
            return nxt

    def _raise_high_past(self, ns_dir: str, fence: int) -> None:
        """A re-claim's fence (the old one + 1) is handed out: raise the mark past it and past every
        block's top, so no block hands that fence (or one below it) to a new record later."""
        with self._locked(ns_dir, _FLOOR_LOCK):
            self._link_high(ns_dir, max(fence, self._mark_locked(ns_dir) + 1))

    def _raise_floor(self, ns_dir: str, floor: int) -> None:
        """Make ``.fence-floor``'s floor at least ``floor`` (durable; only deletes need it)."""
        cur_floor, cur_high = self._read_fences(ns_dir)
        if floor <= cur_floor:
            return
        with self._locked(ns_dir, _FLOOR_LOCK):
            cur_floor, cur_high = self._read_fences(ns_dir)
            if floor > cur_floor:
                high = max(floor, cur_high or 0, self._read_high(ns_dir) or 0)
                data = b'{"floor": %d, "high": %d}\n' % (floor, high)
                self._write(ns_dir, os.path.join(ns_dir, _FLOOR_FILE), data)

    def _fence_base(self, ns_dir: str, *, make: bool = True) -> int:
        """At least every fence the namespace ever handed out: a new record's fence is one more, and
        a record the other side wrote afresh (no fence) reads as this, so its next claim's fence (one
        more) has never been handed out either."""
        high = self._read_high(ns_dir)
        if high is not None:
            return high
        if make:
            return self._make_high(ns_dir)
        floor, old_high = self._read_fences(ns_dir)  # a read (get, list) does not write the store
        # A file that does not read is left out of this shown value (its record reports itself).
        return max([floor, old_high or 0, *(r.fence for r in self._scan(ns_dir, []))])

    def _scan(
        self, ns_dir: str, unreadable: builtins.list[UnreadableRecord] | None = None
    ) -> builtins.list[StoredRecord]:
        """Every record in the directory, one per key (a current-format name wins over a legacy one).
        A file that does not read raises ``CorruptRecordError``, or, given ``unreadable``, goes there."""
        found: dict[str, tuple[bool, StoredRecord]] = {}
        try:
            entries = list(os.scandir(ns_dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            name = entry.name
            if not name.endswith(".json") or not entry.is_file(follow_symlinks=False):
                continue
            try:
                rec = self._read(entry.path, None)
            except CorruptRecordError as e:
                if unreadable is None:
                    raise
                unreadable.append(UnreadableRecord(os.path.basename(ns_dir), _key_of_name(name[:-5]), str(e)))
                continue
            if rec is None:
                continue
            current = storage_name(rec.key) + ".json" == name
            if not current and legacy_storage_name(rec.key) + ".json" != name:
                continue  # a file under a name its key does not give (copied by hand?): not a record
            prev = found.get(rec.key)
            if prev is None or (current and not prev[0]):
                found[rec.key] = (current, rec)
        return [rec for _, rec in found.values()]

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        try:
            yield
        except OSError as e:
            raise BackendUnavailableError(f"file backend {self.root}: {what}: {e.strerror or e}") from e

    # -- Backend -----------------------------------------------------------------------------

    def transact(self, namespace: str, key: str, decide: Callable[[StoredRecord | None, int], Decision[T]]) -> T:
        name = storage_name(key)
        with self._io(f"cannot update {namespace}/{name}.json"):
            ns_dir = os.path.join(self.root, namespace)
            if namespace not in self._ready and not os.path.isdir(ns_dir):
                # No namespace, so no record: a decision that changes nothing needs no lock or directory.
                d = decide(None, 0)
                if d.write is None and not d.delete:
                    return d.value
            stripe = "%02x" % (zlib.crc32(name.encode("utf-8")) % STRIPES)
            try:
                return self._transact_locked(namespace, key, name, stripe, decide)
            except FileNotFoundError:
                if namespace not in self._ready:
                    raise
                # Somebody removed the namespace directory under us (rm -rf of the store): make it again.
                self._ready.discard(namespace)
                self._blocks.pop(namespace, None)
                return self._transact_locked(namespace, key, name, stripe, decide)

    def _transact_locked(
        self, namespace: str, key: str, name: str, stripe: str, decide: Callable[[StoredRecord | None, int], Decision[T]]
    ) -> T:
        ns_dir = self._ns_dir(namespace, create=True)
        path = os.path.join(ns_dir, name + ".json")
        with self._locked(ns_dir, stripe):
            current = self._read(path, key)
            # A key whose first-format name differs (hashed, long, dotted): its file may still be there.
            legacy = None
            old = legacy_storage_name(key)
            if old != name:
                found = self._read_legacy(os.path.join(ns_dir, old + ".json"), key)
                if found is not None:
                    legacy = os.path.join(ns_dir, old + ".json")
                    if current is None:
                        current = found
            if current is None:
                d = decide(None, 0)
                if d.write is not None:  # a claim: a new record, with a fence of this backend's block
                    d = decide(None, self._allocate(namespace, ns_dir) - 1)
            else:
                if current.fence == 0:
                    current = current._replace(fence=self._fence_base(ns_dir))
                d = decide(current, 0)
            w = d.write
            if w is not None:
                if current is not None and w.fence != current.fence:
                    self._raise_high_past(ns_dir, w.fence)
                # its directory fsync also persists the mark
                self._write(ns_dir, path, _encode(w), replaces=current is not None and legacy is None)
                if legacy is not None:
                    _unlink_if_there(legacy, ns_dir)
            elif d.delete and current is not None:
                self._raise_floor(ns_dir, current.fence)
                _unlink_if_there(path, None)
                if legacy is not None:  # else a first-format record would come back from under it
                    _unlink_if_there(legacy, None)
                _fsync_dir(ns_dir)
            return d.value

    def discard(self, namespace: str, key: str) -> bool:
        name = storage_name(key)
        with self._io(f"cannot remove {namespace}/{name}.json"):
            if not os.path.isdir(os.path.join(self.root, namespace)):
                return False
            ns_dir = self._ns_dir(namespace, create=True)
            paths = [os.path.join(ns_dir, name + ".json")]
            if legacy_storage_name(key) != name:
                paths.append(os.path.join(ns_dir, legacy_storage_name(key) + ".json"))
            with self._locked(ns_dir, "%02x" % (zlib.crc32(name.encode("utf-8")) % STRIPES)):
                there = [p for p in paths if os.path.lexists(p)]
                if not there:
                    return False
                self._raise_floor(ns_dir, self._fence_base(ns_dir))
                for p in there:
                    _unlink_if_there(p, None)
                _fsync_dir(ns_dir)
                return True

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        with self._io(f"cannot read {namespace}"):
            ns_dir = os.path.join(self.root, namespace)
            name = storage_name(key)
            rec = self._read(os.path.join(ns_dir, name + ".json"), key)
            if rec is None and legacy_storage_name(key) != name:
                rec = self._read_legacy(os.path.join(ns_dir, legacy_storage_name(key) + ".json"), key)
            if rec is not None and rec.fence == 0:
                rec = rec._replace(fence=self._fence_base(ns_dir, make=False))
            return rec

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        return self._list(namespace, None)

    def list_readable(self, namespace: str) -> tuple[builtins.list[StoredRecord], builtins.list[UnreadableRecord]]:
        unreadable: builtins.list[UnreadableRecord] = []
        records = self._list(namespace, unreadable)
        unreadable.sort(key=lambda u: u.error)  # the error names the file
        return records, unreadable

    def _list(self, namespace: str, unreadable: builtins.list[UnreadableRecord] | None) -> builtins.list[StoredRecord]:
        ns_dir = os.path.join(self.root, namespace)
        with self._io(f"cannot list {namespace}"):
            records = self._scan(ns_dir, unreadable)
            if any(r.fence == 0 for r in records):
                base = self._fence_base(ns_dir, make=False)
                records = [r._replace(fence=base) if r.fence == 0 else r for r in records]
        records.sort(key=lambda r: r.key)
        return records

    def namespaces(self) -> builtins.list[str]:
        found = []
        with self._io("cannot list namespaces"):
            for entry in os.scandir(self.root):
                if entry.is_dir(follow_symlinks=False):
                    try:
                        found.append(check_namespace(entry.name))
                    except ValueError:
                        continue  # not ours
        return sorted(found)

    def raise_floor(self, namespace: str, fence: int) -> None:
        with self._io(f"cannot raise the fence floor of {namespace}"):
            self._raise_floor(self._ns_dir(namespace, create=True), fence)

    def clean_debris(self) -> None:
        cutoff = time.time() - _DEBRIS_AGE_S
        with self._io("cannot remove stale temp files"):
            for ns in [".", *self.namespaces()]:
                with os.scandir(os.path.join(self.root, ns)) as it:
                    for entry in it:
                        name = entry.name
                        # ours (.tmp-<pid>-<n>) and the original library's (<name>.json.tmp.<pid>), exactly:
                        # a record's own name (<key>.json, of a key such as ".tmp-x" or "a.json.tmp.1") is none
                        if not _DEBRIS.fullmatch(name):
                            continue
                        try:  # a writer renames its temp file away at any moment: gone is fine
                            st = entry.stat(follow_symlinks=False)
                            if (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) and st.st_mtime < cutoff:
                                os.unlink(entry.path)
                        except FileNotFoundError:
                            continue

    def close(self) -> None:
        self._ready.clear()
        self._blocks.clear()
        for path in list(self._spare_paths):
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._spare_paths.clear()
