"""``redis://host:port/db``: a store shared by many hosts, on the Redis server's clock (redis-py, imported lazily).

Every change is one Lua script (one round trip, atomic on the server): ``claim``, ``touch``, ``done``,
``fail``, ``reset`` and gc's per-key ``collect`` run the state machine of ``rules`` where the record
lives, and read the time with ``TIME`` there, so clients on hosts whose clocks disagree still agree
on leases. Keys of a namespace share one hash tag (``{ns}``); a claim's script also adds to
``mooncat:namespaces``, another slot, so the store is one server (with its replicas), not a Redis
Cluster. A connection the server dropped is opened again by redis-py on the next call. A call the
server does not answer within ``socket_timeout`` seconds (redis-py's URL parameter, ``?socket_timeout=S``;
default 30; ``socket_connect_timeout`` 5) fails with ``BackendUnavailableError``, and is never sent again
by redis-py: a script re-sent after its answer was lost could meet its own change (a claim would see
its own lease as busy). Whether such a call changed the record is unknown::

    mooncat:{<ns>}:r:<key>    hash: the record (absent fields are None)
    mooncat:{<ns>}:f:<key>    the key's fence counter: INCR on every successful claim, never deleted,
                              so fences keep growing across expiry, reset and gc
    mooncat:{<ns>}:i          set of the namespace's keys: list and gc SSCAN it (never KEYS)
    mooncat:namespaces        set of namespaces

Durability is the server's: with Redis's default (RDB snapshots, no AOF) a crash of the server loses
the changes since the last snapshot; run it with ``appendonly yes`` (``appendfsync everysec``: up to
about a second lost) when a lost ``done`` would mean a step runs twice. A fence counter survives only
as long as the server's data does.
"""

from __future__ import annotations

import builtins
from typing import Any

from mooncat_checkpoint import rules
from mooncat_checkpoint.backends.base import kind_result
from mooncat_checkpoint.errors import BackendUnavailableError, CheckpointError, CorruptRecordError
from mooncat_checkpoint.model import Checkpoint, CheckpointStatus, ClaimResult, GcResult, UnreadableRecord
from mooncat_checkpoint.record import StoredRecord
from mooncat_checkpoint.urls import redact, seconds_option, shown_url, url_option

__all__ = ["RedisBackend", "DEFAULT_SOCKET_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S"]

_SCAN_COUNT = 500
DEFAULT_SOCKET_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
_NAMESPACES = "mooncat:namespaces"

# Shared by every script: the clock, optional arguments ('' is None, else '=' .. value), the record.
_PRELUDE = """
local function now_ms(arg)
  local n = tonumber(arg)
  if n >= 0 then return n end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function opt(v)
  if v == '' then return nil end
  return string.sub(v, 2)
end
local function load(k)
  local flat = redis.call('HGETALL', k)
  if #flat == 0 then return nil, flat end
  local r = {}
  for i = 1, #flat, 2 do r[flat[i]] = flat[i + 1] end
  return r, flat
end
local function lost(r, token)
  return r == nil or r.status ~= 'claimed' or r.lease_token ~= token
end
"""

# KEYS: record, fence counter, index, namespaces. ARGV: now, namespace, key, owner, lease_ms, fingerprint, token.
_CLAIM = _PRELUDE + """
local now = now_ms(ARGV[1])
local owner, lease, fp, token = opt(ARGV[4]), tonumber(ARGV[5]), opt(ARGV[6]), ARGV[7]
local r, flat = load(KEYS[1])
local attempts, created = 1, now
if r ~= nil then
  if fp ~= nil and r.fingerprint ~= nil and fp ~= r.fingerprint then return {'fingerprint', now, flat} end
  if r.status == 'done' then return {'done', now, flat} end
  if r.status == 'failed' then return {'failed', now, flat} end
  -- rules: expired when now >= lease_until, or when the claim names no lease (written by hand or by
  -- another writer). Another status, or a lease that is no number: the client reports the record
  -- as unreadable (CorruptRecordError), as the other backends do; nothing changes.
  local lease_until = tonumber(r.lease_until)
  if r.status ~= 'claimed' or (r.lease_until ~= nil and lease_until == nil) then return {'unreadable', now, flat} end
  if lease_until ~= nil and lease_until > now then return {'busy', now, flat} end
  attempts, created = (tonumber(r.attempts) or 0) + 1, r.created_at or now
  if fp == nil then fp = r.fingerprint end
  -- a record written without our counter (by hand) still gets a fence above its own
  local held = tonumber(r.fence)
  if held ~= nil and held > (tonumber(redis.call('GET', KEYS[2])) or 0) then redis.call('SET', KEYS[2], held) end
  redis.call('DEL', KEYS[1])
else
  redis.call('SADD', KEYS[3], ARGV[3])
  redis.call('SADD', KEYS[4], ARGV[2])
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'namespace', ARGV[2], 'key', ARGV[3], 'status', 'claimed',
  'lease_until', now + lease, 'lease_ms', lease, 'lease_token', token, 'attempts', attempts,
  'fence', fence, 'created_at', created, 'updated_at', now)
if owner ~= nil then redis.call('HSET', KEYS[1], 'owner_run_id', owner) end
if fp ~= nil then redis.call('HSET', KEYS[1], 'fingerprint', fp) end
return {'claimed', now, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: record. ARGV: now, token, extend_ms ('' = the claim's lease).
_TOUCH = _PRELUDE + """
local now = now_ms(ARGV[1])
local r, flat = load(KEYS[1])
if lost(r, ARGV[2]) then return {'none', now, flat} end
local ext = opt(ARGV[3])
local lease = tonumber(ext or r.lease_ms or '0')
redis.call('HSET', KEYS[1], 'lease_until', now + lease, 'updated_at', now)
return {'ok', now, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: record. ARGV: now, token, result, result_ref.
_DONE = _PRELUDE + """
local now = now_ms(ARGV[1])
local r, flat = load(KEYS[1])
if lost(r, ARGV[2]) then return {'lost', now, flat} end
redis.call('HDEL', KEYS[1], 'lease_until', 'lease_ms', 'lease_token', 'error', 'result', 'result_ref')
redis.call('HSET', KEYS[1], 'status', 'done', 'updated_at', now)
local result, ref = opt(ARGV[3]), opt(ARGV[4])
if result ~= nil then redis.call('HSET', KEYS[1], 'result', result) end
if ref ~= nil then redis.call('HSET', KEYS[1], 'result_ref', ref) end
return {'ok', now, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: record. ARGV: now, token, error.
_FAIL = _PRELUDE + """
local now = now_ms(ARGV[1])
local r, flat = load(KEYS[1])
if lost(r, ARGV[2]) then return {'lost', now, flat} end
redis.call('HDEL', KEYS[1], 'lease_until', 'lease_ms', 'lease_token', 'result', 'result_ref')
redis.call('HSET', KEYS[1], 'status', 'failed', 'updated_at', now, 'error', ARGV[3])
return {'ok', now, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: record, index, fence counter. ARGV: now, key, mode ('reset', 'expired' or 'gc'), older_than_ms
# (grace on expired claims, '' = none), prune_finished_older_than_ms ('' = keep done/failed records).
# The record goes (1), its fence counter stays (raised to the record's fence first: a record written
# by hand has none); 0: nothing to delete; -1: the record does not read (a time that is no number),
# left alone. As ``rules``: 'expired' takes a claim that names no lease, 'gc' leaves it (it has no
# lease end to count the grace from).
_DELETE = _PRELUDE + """
local now = now_ms(ARGV[1])
local r = load(KEYS[1])
if r == nil then return 0 end
local mode = ARGV[3]
if mode ~= 'reset' then
  local lease_until, updated = tonumber(r.lease_until), tonumber(r.updated_at or '0')
  if (r.lease_until ~= nil and lease_until == nil) or updated == nil then return -1 end
  local expired = false
  if r.status == 'claimed' then
    if lease_until == nil then
      expired = mode == 'expired'
    else
      local grace = 0
      if mode == 'gc' then grace = tonumber(opt(ARGV[4]) or '0') end
      expired = now - lease_until >= grace
    end
  end
  local prune = opt(ARGV[5])
  local idle = mode == 'gc' and prune ~= nil and (r.status == 'done' or r.status == 'failed')
    and now - updated >= tonumber(prune)
  if not (expired or idle) then return 0 end
end
local held = tonumber(r.fence)
if held ~= nil and held > (tonumber(redis.call('GET', KEYS[3])) or 0) then redis.call('SET', KEYS[3], held) end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1
"""

_INT_FIELDS = frozenset({"lease_until", "lease_ms", "attempts", "fence", "created_at", "updated_at"})


def _opt(value: str | None) -> str:
    return "" if value is None else "=" + value


def _now_arg(now_ms: int | None) -> int:
    return -1 if now_ms is None else now_ms


class RedisBackend:
    blocking = True
    server_side = True
    durability = "the Redis server's (appendonly/appendfsync); changes are atomic Lua scripts"

    def __init__(self, url: str) -> None:
        try:
            import redis
        except ImportError:
            raise BackendUnavailableError(
                f"{shown_url(url)}: the redis backend needs the redis package: pip install 'molens[redis]' (or: pip install redis)"
            ) from None
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = url
        for option in ("socket_timeout", "socket_connect_timeout"):  # redis-py takes 0 as "do not wait at all"
            seconds_option(url, option, url_option(url, option)[1], 1.0)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self._timeout: type[BaseException] = redis.TimeoutError
        try:
            # The URL's own socket_timeout / socket_connect_timeout win over these defaults (redis-py's rule).
            self._r = redis.Redis.from_url(url, socket_connect_timeout=DEFAULT_CONNECT_TIMEOUT_S,
                                           socket_timeout=DEFAULT_SOCKET_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
            self.socket_timeout_s = float(self._r.connection_pool.connection_kwargs["socket_timeout"])
            self._r.ping()
        except (redis.RedisError, ValueError) as e:
            raise BackendUnavailableError(f"redis backend: cannot reach {shown_url(url)}: {redact(str(e), url)}") from None
        self._claim = self._r.register_script(_CLAIM)
        self._touch = self._r.register_script(_TOUCH)
        self._done = self._r.register_script(_DONE)
        self._fail = self._r.register_script(_FAIL)
        self._delete = self._r.register_script(_DELETE)

    # -- layout ------------------------------------------------------------------------------

    @staticmethod
    def _record_key(namespace: str, key: str) -> bytes:
        return b"mooncat:{" + namespace.encode() + b"}:r:" + key.encode("utf-8")

    @staticmethod
    def _fence_key(namespace: str, key: str) -> bytes:
        return b"mooncat:{" + namespace.encode() + b"}:f:" + key.encode("utf-8")

    @staticmethod
    def _index_key(namespace: str) -> bytes:
        return b"mooncat:{" + namespace.encode() + b"}:i"

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except CheckpointError:
            raise
        except self._errors as e:
            reason = redact(str(e), self.url)
            if isinstance(e, self._timeout):
                reason = (f"no answer within {self.socket_timeout_s:g} s (socket_timeout: {reason}): the server is "
                          "stopped or cut off; a change the call asked for may or may not have been applied")
            raise BackendUnavailableError(f"redis backend {shown_url(self.url)}: {what}: {reason}") from e

    @staticmethod
    def _record(found: builtins.list[bytes] | dict[bytes, bytes]) -> StoredRecord | None:
        """A record from a script's flat HGETALL reply or redis-py's dict; None when empty (no record)."""
        if not found:
            return None
        pairs = found.items() if isinstance(found, dict) else zip(found[::2], found[1::2], strict=True)
        return _from_hash({f.decode(): v.decode("utf-8") for f, v in pairs})

    # -- ServerBackend -----------------------------------------------------------------------

    def now_ms(self) -> int:
        sec, usec = self._call("cannot read the clock", self._r.time)
        return int(sec) * 1000 + int(usec) // 1000

    def claim(
        self, namespace: str, key: str, now_ms: int | None, owner_run_id: str | None, lease_ms: int,
        fingerprint: str | None, token: str,
    ) -> ClaimResult:
        kind, _now, flat = self._call(
            f"cannot claim in {namespace}", self._claim,
            keys=[self._record_key(namespace, key), self._fence_key(namespace, key), self._index_key(namespace),
                  _NAMESPACES],
            args=[_now_arg(now_ms), namespace, key.encode("utf-8"), _opt(owner_run_id), lease_ms, _opt(fingerprint),
                  token],
        )
        kind = kind.decode()
        rec = self._record(flat)
        assert rec is not None
        if kind == "unreadable":  # (``_record`` raised already, unless Python reads what Lua cannot)
            raise CorruptRecordError(f"unreadable redis checkpoint record {key!r}: lease_until {rec.lease_until!r}")
        if kind == "fingerprint":
            assert fingerprint is not None
            raise rules.fingerprint_mismatch(rec, namespace, key, fingerprint)
        return kind_result(kind, rec, token)

    def _change(self, what: str, script: Any, namespace: str, key: str, args: list[Any]) -> tuple[str, StoredRecord | None]:
        kind, _now, flat = self._call(f"cannot {what} in {namespace}", script,
                                      keys=[self._record_key(namespace, key)], args=args)
        kind = kind.decode()
        rec = self._record(flat)
        if kind == "lost":
            raise rules.lease_lost(rec, namespace, key)
        return kind, rec

    def touch(self, namespace: str, key: str, now_ms: int | None, token: str, extend_ms: int | None) -> Checkpoint | None:
        ext = "" if extend_ms is None else "=" + str(extend_ms)
        kind, rec = self._change("touch", self._touch, namespace, key, [_now_arg(now_ms), token, ext])
        return None if rec is None or kind == "none" else rec.public()  # none: not claimed with this token

    def done(
        self, namespace: str, key: str, now_ms: int | None, token: str, result_json: str | None, result_ref: str | None
    ) -> Checkpoint:
        _, rec = self._change(
            "mark done", self._done, namespace, key, [_now_arg(now_ms), token, _opt(result_json), _opt(result_ref)]
        )
        assert rec is not None
        return rec.public()

    def fail(self, namespace: str, key: str, now_ms: int | None, token: str, error: str) -> Checkpoint:
        _, rec = self._change("mark failed", self._fail, namespace, key, [_now_arg(now_ms), token, error])
        assert rec is not None
        return rec.public()

    def reset(self, namespace: str, key: str, now_ms: int | None, if_expired: bool) -> bool:
        n = self._call(
            f"cannot reset in {namespace}", self._delete,
            keys=[self._record_key(namespace, key), self._index_key(namespace), self._fence_key(namespace, key)],
            args=[_now_arg(now_ms), key.encode("utf-8"), "expired" if if_expired else "reset", "", ""],
        )
        if n < 0:  # whether it expired cannot be read: leave it, as the other backends do
            raise CorruptRecordError(
                f"unreadable redis checkpoint record {key!r}: a lease or update time that is not a number"
            )
        return int(n) > 0

    def _keys(self, namespace: str) -> builtins.list[bytes]:
        """The namespace's keys, each once: SSCAN may return a member twice while the set is
        rehashed under it (keys added meanwhile), and a record listed twice would be read twice."""
        return list(dict.fromkeys(self._call(f"cannot list {namespace}", self._r.sscan_iter,
                                             self._index_key(namespace), count=_SCAN_COUNT)))

    def gc(self, now_ms: int | None, older_than_ms: int | None, prune_finished_ms: int | None) -> GcResult:
        """Per batch of keys: read the records (one that does not read is reported and left alone),
        then one delete script per readable record, which decides on the server's clock."""
        removed = 0
        unreadable: builtins.list[UnreadableRecord] = []
        older, prune = (_opt(None if v is None else str(v)) for v in (older_than_ms, prune_finished_ms))
        for ns in self._namespaces():
            keys = self._keys(ns)
            for start in range(0, len(keys), _SCAN_COUNT):
                batch = keys[start:start + _SCAN_COUNT]
                readable = []
                for k, flat in zip(batch, self._hgetall("cannot collect", ns, batch), strict=True):
                    try:
                        if self._record(flat) is not None:
                            readable.append(k)
                    except CorruptRecordError as e:
                        unreadable.append(UnreadableRecord(ns, k.decode("utf-8"), str(e)))
                pipe = self._r.pipeline(transaction=False)
                for k in readable:
                    key = k.decode("utf-8")
                    self._delete(keys=[self._record_key(ns, key), self._index_key(ns), self._fence_key(ns, key)],
                                 args=[_now_arg(now_ms), k, "gc", older, prune], client=pipe)
                for k, n in zip(readable, self._call("cannot collect", pipe.execute), strict=True):
                    if n < 0:  # it stopped reading since it was read: leave it too
                        unreadable.append(UnreadableRecord(
                            ns, k.decode("utf-8"), f"unreadable redis checkpoint record {k.decode('utf-8')!r}: "
                            "a lease or update time that is not a number"))
                    else:
                        removed += n
        return GcResult(removed, unreadable)

    def _hgetall(self, what: str, namespace: str, keys: builtins.list[bytes]) -> builtins.list[Any]:
        """The flat records of ``keys`` in one round trip (empty for a key whose record went)."""
        pipe = self._r.pipeline(transaction=False)
        for k in keys:
            pipe.hgetall(self._record_key(namespace, k.decode("utf-8")))
        result: builtins.list[Any] = self._call(what, pipe.execute)
        return result

    def _namespaces(self) -> builtins.list[str]:
        return sorted(m.decode() for m in self._call("cannot list namespaces", self._r.smembers, _NAMESPACES))

    def get(self, namespace: str, key: str) -> StoredRecord | None:
        return self._record(self._call(f"cannot read {namespace}", self._r.hgetall, self._record_key(namespace, key)))

    def list(self, namespace: str) -> builtins.list[StoredRecord]:
        keys = self._keys(namespace)
        records = []
        for start in range(0, len(keys), _SCAN_COUNT):
            for flat in self._hgetall(f"cannot list {namespace}", namespace, keys[start:start + _SCAN_COUNT]):
                rec = self._record(flat)
                if rec is not None:
                    records.append(rec)
        records.sort(key=lambda r: r.key)
        return records

    def close(self) -> None:
        self._r.close()


def _from_hash(doc: dict[str, str]) -> StoredRecord:
    try:
        ints = {f: int(doc[f]) if f in doc else None for f in _INT_FIELDS}
        return StoredRecord(
            doc["namespace"], doc["key"], CheckpointStatus(doc["status"]), doc.get("owner_run_id"),
            ints["lease_until"], ints["lease_ms"], doc.get("lease_token"), ints["attempts"] or 0, ints["fence"] or 0,
            doc.get("fingerprint"), ints["created_at"] or 0, ints["updated_at"] or 0, doc.get("result"),
            doc.get("result_ref"), doc.get("error"),
        )
    except (KeyError, ValueError) as e:
        raise CorruptRecordError(f"unreadable redis checkpoint record {doc.get('key')!r}: {e!r}") from None
