"""Callback signatures: ``X-Molens-Signature`` (docs/architecture.md#task-rules), shared by the FireWorker and receivers.

Header format, modelled on Stripe's::

    X-Molens-Signature: t=<unix ms>,v1=<hex>[,v1=<hex>]

where each ``<hex>`` is ``HMAC-SHA256(secret, "<t>.<fire id>.<body>")`` as 64 lowercase hex digits.
During a secret rotation the worker sends one ``v1`` per configured secret (``signing_secret`` first,
then ``signing_secret_next``), all over the same ``t``; a receiver accepts the request when any ``v1``
matches any of the secrets it knows. So the order of a rotation is: configure ``signing_secret_next``
on the nodes, give the new secret to receivers, promote it to ``signing_secret``, drop the old one.

Per namespace: a receiver of one namespace's callbacks and notifications verifies them with that
namespace's key, :func:`namespace_secret` of the cluster's secret (the node's ``worker.signing_scope``
says whether it signs with the cluster's secret, the namespace's key, or both: :func:`signing_keys`),
so a callback another namespace's task made the cluster send (a payload of its choosing, to any URL)
does not verify there.

Pure: no clocks unless ``now_ms`` is omitted, no I/O, and verification never raises on bad input.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "SIGNATURE_HEADER",
    "FIRE_ID_HEADER",
    "DEFAULT_TOLERANCE_MS",
    "compute_v1",
    "namespace_secret",
    "signing_keys",
    "SCOPES",
    "sign",
    "signature_header",
    "parse_signature",
    "verify_signature",
]

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Molens-Signature"
FIRE_ID_HEADER = "X-Fire-ID"
DEFAULT_TOLERANCE_MS = 300_000
_MAX_HEADER_LEN = 4096  # a real header has a handful of signatures; refuse to parse novels


def _key(secret: bytes | str) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)


def _secret_list(secrets: str | bytes | Iterable[str | bytes]) -> Iterable[str | bytes]:
    """``secrets`` as secrets: one ``str``/``bytes`` is one secret. Iterating it instead would make
    each character (or each byte, as an int: an all-zero key) a secret of its own."""
    return (secrets,) if isinstance(secrets, str | bytes | bytearray) else secrets


_NAMESPACE_LABEL = b"molens namespace signing key v1\0"


def namespace_secret(secret: bytes | str, namespace: str) -> str:
    """Namespace ``namespace``'s signing key under the cluster's ``secret``: 64 lowercase hex digits,
    ``HMAC-SHA256(secret, "molens namespace signing key v1\\0" + namespace)``, used as a secret of
    its own (its UTF-8 text is the HMAC key). Knowing it tells nothing of the cluster's secret or of
    another namespace's key; ``molens-node <config> signing-key --namespace <ns>`` prints it."""
    return hmac.new(_key(secret), _NAMESPACE_LABEL + namespace.encode("utf-8"), hashlib.sha256).hexdigest()


SCOPES = ("cluster", "both", "namespace")
"""``worker.signing_scope``: what signs a request of a namespace's task."""


def signing_keys(
    secrets: Sequence[str | bytes], scope: str, namespace: str | None,
) -> tuple[str | bytes, ...]:
    """What signs a request (one ``v1`` each): the cluster's ``secrets`` for scope ``cluster`` or a
    request of no namespace (``None``: a flow's notification, a task that is gone), the namespace's
    keys derived from them for ``namespace``, both (the cluster's first) for ``both``."""
    if namespace is None or scope == "cluster":
        return tuple(secrets)
    derived = tuple(namespace_secret(s, namespace) for s in secrets)
    return derived if scope == "namespace" else (*secrets, *derived)


def compute_v1(secret: bytes | str, fire_id: str, body: bytes, t_ms: int) -> str:
    """The hex HMAC-SHA256 of ``"<t>.<fire id>.<body>"`` under ``secret``."""
    msg = b"%d.%s.%s" % (t_ms, fire_id.encode("utf-8"), body)
    return hmac.new(_key(secret), msg, hashlib.sha256).hexdigest()


def sign(secret: bytes | str, fire_id: str, body: bytes, t_ms: int) -> str:
    """The header value ``t=<t_ms>,v1=<hex>`` for one secret."""
    return signature_header([secret], fire_id, body, t_ms)


def signature_header(secrets: str | bytes | Iterable[bytes | str], fire_id: str, body: bytes, t_ms: int) -> str:
    """The header value with one ``v1`` per secret (empty secrets skipped), e.g. during rotation;
    a single ``str``/``bytes`` is one secret."""
    parts = [f"t={int(t_ms)}"]
    parts.extend(f"v1={compute_v1(s, fire_id, body, t_ms)}" for s in _secret_list(secrets) if s)
    if len(parts) == 1:
        raise ValueError("signature_header needs at least one non-empty secret")
    return ",".join(parts)


def parse_signature(value: str) -> tuple[int, list[str]] | None:
    """``(t_ms, [v1 hex, ...])`` from a header value, or None when it is malformed.

    Unknown schemes (``v0=``, ``v2=``) are ignored, so a future scheme can be added alongside v1.
    """
    if not value or len(value) > _MAX_HEADER_LEN:
        return None
    t_ms: int | None = None
    v1s: list[str] = []
    for item in value.split(","):
        name, sep, val = item.strip().partition("=")
        if not sep:
            return None
        if name == "t":
            if t_ms is not None or not val.isascii() or not val.isdigit() or len(val) > 16:
                return None
            t_ms = int(val)
        elif name == "v1":
            if len(val) != 64 or not val.isascii():
                return None
            v1s.append(val.lower())
    if t_ms is None or not v1s:
        return None
    return t_ms, v1s


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    lname = name.lower()
    for k, v in headers.items():
        if isinstance(k, str) and k.lower() == lname:
            return v
    return None


def verify_signature(
    headers: Mapping[str, str],
    body: bytes,
    secrets: str | bytes | Sequence[str | bytes],
    tolerance_ms: int = DEFAULT_TOLERANCE_MS,
    now_ms: int | None = None,
) -> bool:
    """True when ``X-Molens-Signature`` carries a ``v1`` matching one of ``secrets`` (a list, or one
    secret as a ``str``/``bytes``).

    The fire id is taken from ``X-Fire-ID``; header names are matched case-insensitively.
    False (never an exception) for a missing/malformed header, a timestamp more than
    ``tolerance_ms`` away from ``now_ms`` (either direction: replayed or from the future), a tampered
    body or fire id, or no secrets. Comparisons are constant-time.
    """
    try:
        raw = _header(headers, SIGNATURE_HEADER)
        fire_id = _header(headers, FIRE_ID_HEADER)
        if not isinstance(raw, str) or not isinstance(fire_id, str) or not isinstance(body, bytes | bytearray):
            return False
        parsed = parse_signature(raw)
        if parsed is None:
            return False
        t_ms, v1s = parsed
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if abs(now - t_ms) > tolerance_ms:
            return False
        ok = False
        for secret in _secret_list(secrets):
            if not secret:
                continue
            expected = compute_v1(secret, fire_id, bytes(body), t_ms)
            for v1 in v1s:
                # no early exit: the work done does not depend on which pair matched
                ok |= hmac.compare_digest(expected, v1)
        return ok
    except Exception:  # verification must never take a receiver down; log why it said no
        log.warning("signature check failed on malformed input", exc_info=True)
        return False
