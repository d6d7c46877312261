"""API key secrets and the bad-key brake (docs/api.md#keys-and-roles).

A secret reads ``mlk_<id>_<random>``: ``<id>`` (16 hex digits) names the key, so a request's key is
found by one lookup; ``<random>`` is 32 random bytes (base64url). The replicated record
(:class:`molens.fsm.tenancy.ApiKey`) holds only ``HMAC-SHA256(salt, secret)`` under a random
16-byte salt of its own, compared with :func:`hmac.compare_digest`. The secret is shown once, in
the answer to its creation, and never logged.

:class:`FailureBrake` slows down an address that keeps sending bad keys: each address has a bucket
of :data:`FAILURE_BURST` failures refilled at one per :data:`FAILURE_REFILL_S`; an address whose
bucket is empty is answered ``429`` + ``Retry-After`` before its key is even looked at. At most
:data:`MAX_ADDRESSES` addresses are tracked (the least recently failing forgotten first). Pure:
every method takes ``now`` (monotonic seconds).

Example: an address sends 10 bad keys at t=0; the 11th request at t=0.5 is 429 with
``Retry-After: 1``; at t=1.0 one failure has leaked out and one more key is checked.
"""

from __future__ import annotations

import base64
import hmac
import math
import os
import re
import threading

from molens.fsm.tenancy import ApiKey
from molens.web.lru import BoundedLru

SECRET_PREFIX = "mlk_"
_SECRET_RE = re.compile(r"mlk_([0-9a-f]{16})_[A-Za-z0-9_-]{43}")
FAILURE_BURST = 10
FAILURE_REFILL_S = 1.0
MAX_ADDRESSES = 4096


def new_secret() -> tuple[str, str]:
    """``(key id, secret)`` of a new key: 64 random bits of id, 256 of secret."""
    kid = os.urandom(8).hex()
    rand = base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    return kid, f"{SECRET_PREFIX}{kid}_{rand}"


def key_id_of(secret: str) -> str | None:
    """The key id a secret names; None for anything that is not a secret of this form."""
    m = _SECRET_RE.fullmatch(secret)
    return m.group(1) if m else None


def digest(salt: bytes, secret: str) -> bytes:
    """``HMAC-SHA256(salt, secret)`` (the one-shot form: no HMAC object per request)."""
    return hmac.digest(salt, secret.encode("ascii"), "sha256")


def new_salt() -> bytes:
    return os.urandom(16)


def verify(key: ApiKey, secret: str) -> bool:
    """Whether ``secret`` is ``key``'s (constant time in the secret)."""
    return hmac.compare_digest(digest(key.salt, secret), key.digest)


class FailureBrake:
    """Per-address leaky bucket of failed authentications (see the module docstring)."""

    def __init__(self, burst: int = FAILURE_BURST, refill_s: float = FAILURE_REFILL_S,
                 max_addresses: int = MAX_ADDRESSES) -> None:
        self.burst = burst
        self.refill_s = refill_s
        self.max_addresses = max_addresses
        self._level: BoundedLru[str, tuple[float, float]] = BoundedLru(max_addresses)
        """address -> (failures in the bucket, when last drained)."""
        self._lock = threading.Lock()

    def _drained(self, addr: str, now: float) -> float:
        level, at = self._level.get(addr) or (0.0, now)
        return max(0.0, level - (now - at) / self.refill_s)

    def wait_s(self, addr: str, now: float) -> int:
        """Seconds ``addr`` must wait before its next key is checked (0: check it now)."""
        with self._lock:
            if addr not in self._level:
                return 0
            over = self._drained(addr, now) - (self.burst - 1)
        return 0 if over <= 0 else max(1, math.ceil(over * self.refill_s))

    def failed(self, addr: str, now: float) -> None:
        """Count one bad key from ``addr``."""
        with self._lock:
            level = self._drained(addr, now) + 1
            self._level.put(addr, (level, now))


__all__ = ["FAILURE_BURST", "SECRET_PREFIX", "FailureBrake", "digest", "key_id_of", "new_salt", "new_secret",
           "verify"]
