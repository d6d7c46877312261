"""``file://DIR``: one readable JSON file per key, ``DIR/<namespace>/<name>.json``.

Layout of a namespace directory::

    DIR/<ns>/<key>.json              the record (``naming.storage_name`` picks the name)
    DIR/<ns>/sha256-<hex>.json       a key that is not a safe file name; the record holds the key
    DIR/<ns>/.locks/00 .. 3f         flock(2) lock files, one per stripe of keys (never deleted)
    DIR/<ns>/.fence-floor            {"floor": N}: the highest fence of any deleted record
    DIR/<ns>/.tmp-<pid>-<n>          a write in progress (gc removes ones older than an hour)

Every change happens under an exclusive ``flock`` on the key's stripe lock file, so a claim is atomic
across threads and processes on one machine (flock is per open file description; each operation
opens its own). Reads need no lock: a record changes only by ``rename`` of a complete temp file.

Durability: each write is temp file -> ``fsync`` -> ``rename`` -> ``fsync`` of the directory, so a
record that was reported written survives a power cut (and a fence handed out is never handed out
again). That costs two fsyncs per change. Local filesystems only: flock over NFS is not dependable.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import itertools
import json
import os
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from mooncat_checkpoint.codec import encode_json
from mooncat_checkpoint.errors import BackendUnavailableError, CorruptRecordError
from mooncat_checkpoint.model import CheckpointStatus
from mooncat_checkpoint.naming import check_namespace, storage_name
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.rules import Decision

__all__ = ["FileBackend", "STRIPES"]

T = TypeVar("T")

STRIPES = 64
FORMAT = 1
_DEBRIS_AGE_S = 3600.0
_FLOOR_FILE = ".fence-floor"
_FLOOR_LOCK = "floor"
_temp_ids = itertools.count()  # shared by every backend in the process: temp names never collide
_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode(rec: StoredRecord) -> bytes:
    """The file text: one field per line, the result inline as its stored compact JSON."""
    e = _dumps
    lines = (
        f'{{\n  "format": {FORMAT},\n'
        f'  "namespace": {e(rec.namespace)},\n'
        f'  "key": {e(rec.key)},\n'
        f'  "status": "{rec.status.value}",\n'
        f'  "owner_run_id": {e(rec.owner_run_id)},\n'
        f'  "lease_until": {e(rec.lease_until)},\n'
        f'  "lease_ms": {e(rec.lease_ms)},\n'
        f'  "lease_token": {e(rec.lease_token)},\n'
        f'  "attempts": {rec.attempts},\n'
        f'  "fence": {rec.fence},\n'
        f'  "fingerprint": {e(rec.fingerprint)},\n'
        f'  "created_at": {rec.created_at},\n'
        f'  "updated_at": {rec.updated_at},\n'
        f'  "result": {"null" if rec.result_json is None else rec.result_json},\n'
        f'  "result_ref": {e(rec.result_ref)},\n'
        f'  "error": {e(rec.error)}\n}}\n'
    )
    return lines.encode("utf-8")


def _decode(data: bytes, path: str, key: str | None) -> StoredRecord:
    try:
        doc: dict[str, Any] = json.loads(data)
        result = doc["result"]
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
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptRecordError(f"unreadable checkpoint file {path}: {e!r}") from None
    if not isinstance(rec.key, str) or (key is not None and rec.key != key):
        raise CorruptRecordError(f"checkpoint file {path} holds key {rec.key!r}, expected {key!r}")
    return rec


class FileBackend:
    blocking = True
    durability = "fsync of each record file and of its directory on every change"

    def __init__(self, directory: str) -> None:
        self.root = os.path.abspath(directory)
        self._ready: set[str] = set()  # namespaces whose directories this backend has made or seen
        try:
            os.makedirs(self.root, exist_ok=True)
            probe = os.path.join(self.root, f".tmp-{os.getpid()}-{next(_temp_ids)}")
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise BackendUnavailableError(
                f"file backend: directory {directory!r} is not usable: {e.strerror or e}"
            ) from None

    # -- paths and locks ---------------------------------------------------------------------

    def _ns_dir(self, namespace: str, *, create: bool) -> str:
        path = os.path.join(self.root, namespace)
        if create and namespace not in self._ready:
            existed = os.path.isdir(path)
            os.makedirs(os.path.join(path, ".locks"), exist_ok=True)
            if not existed:
                _fsync_dir(self.root)
            self._ready.add(namespace)
        return path

    @contextlib.contextmanager
    def _locked(self, ns_dir: str, lock_name: str) -> Iterator[None]:
        fd = os.open(os.path.join(ns_dir, ".locks", lock_name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the open file drops the flock

    def _write(self, ns_dir: str, final: str, data: bytes) -> None:
        tmp = os.path.join(ns_dir, f".tmp-{os.getpid()}-{next(_temp_ids)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        os.replace(tmp, final)
        _fsync_dir(ns_dir)

    def _read(self, path: str, key: str | None) -> StoredRecord | None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return _decode(data, path, key)

    def _read_floor(self, ns_dir: str) -> int:
        try:
            with open(os.path.join(ns_dir, _FLOOR_FILE), "rb") as f:
                floor = json.loads(f.read())["floor"]
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptRecordError(f"unreadable fence floor in {ns_dir}: {e!r}") from None
        if not isinstance(floor, int):
            raise CorruptRecordError(f"unreadable fence floor in {ns_dir}: {floor!r}")
        return floor

    def _raise_floor(self, ns_dir: str, fence: int) -> None:
        if fence <= self._read_floor(ns_dir):
            return
        with self._locked(ns_dir, _FLOOR_LOCK):
            if fence > self._read_floor(ns_dir):
                self._write(ns_dir, os.path.join(ns_dir, _FLOOR_FILE), b'{"floor": %d}\n' % fence)

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
                return self._transact_locked(namespace, key, name, stripe, decide)

    def _transact_locked(
        self, namespace: str, key: str, name: str, stripe: str, decide: Callable[[StoredRecord | None, int], Decision[T]]
    ) -> T:
        ns_dir = self._ns_dir(namespace, create=True)
        path = os.path.join(ns_dir, name + ".json")
        with self._locked(ns_dir, stripe):
            current = self._read(path, key)
            d = decide(current, self._read_floor(ns_dir) if current is None else 0)
            if d.write is not None:
                self._write(ns_dir, path, _encode(d.write))
            elif d.delete and current is not None:
                self._raise_floor(ns_dir, current.fence)
                os.unlink(path)
                _fsync_dir(ns_dir)
            return d.value

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        with self._io(f"cannot read {namespace}"):
            return self._read(os.path.join(self.root, namespace, storage_name(key) + ".json"), key)

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        ns_dir = os.path.join(self.root, namespace)
        records = []
        with self._io(f"cannot list {namespace}"):
            try:
                entries = list(os.scandir(ns_dir))
            except FileNotFoundError:
                return []
            for entry in entries:
                if entry.name.endswith(".json") and not entry.name.startswith("."):
                    rec = self._read(entry.path, None)
                    if rec is not None:
                        records.append(rec)
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
                        if entry.name.startswith(".tmp-") and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                            try:
                                os.unlink(entry.path)
                            except OSError as e:
                                if e.errno != errno.ENOENT:
                                    raise

    def close(self) -> None:
        self._ready.clear()
