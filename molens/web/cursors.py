"""List cursors: opaque to clients, and sealed for a key limited to some namespaces.

A cursor names where a page stopped: ``<kind>:<position>``, the position being the store's (a task
id, a next-run time and id, a dead letter's time-index key, a history row id). A page stops where
its scan stopped, and that can be an object of a namespace the key may not see. For a key of every
namespace (or an open node) the cursor is base64url of the text; for a key limited to some
namespaces it is sealed under a secret derived from that key's record (its salt, which no answer
shows and every replica holds), so the key cannot read another namespace's ids or times in it, and
a cursor works only for the key it was issued to. The seal: a random 12-byte nonce, the text XORed
with an HMAC-SHA256 keystream, and a 16-byte HMAC-SHA256 tag over nonce and ciphertext (encrypt then
MAC; distinct message prefixes keep the keystream and the tag apart).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets

from molens.errors import ValidationError

CURSOR_RE = re.compile(r"[A-Za-z0-9_-]{1,300}")
"""What a cursor may look like on the way in (anything else is refused before it is decoded)."""
_NONCE = 12
_TAG = 16


def cursor_key(salt: bytes) -> bytes:
    """The sealing secret of the key whose record holds ``salt``."""
    return hmac.new(salt, b"molens list cursor", hashlib.sha256).digest()


def _stream(key: bytes, nonce: bytes, n: int) -> bytes:
    blocks = [hmac.new(key, b"s" + nonce + i.to_bytes(4, "big"), hashlib.sha256).digest() for i in range(-(-n // 32))]
    return b"".join(blocks)[:n]


def _tag(key: bytes, nonce: bytes, ct: bytes) -> bytes:
    return hmac.new(key, b"t" + nonce + ct, hashlib.sha256).digest()[:_TAG]


def seal(key: bytes, text: bytes) -> bytes:
    nonce = secrets.token_bytes(_NONCE)
    ct = bytes(a ^ b for a, b in zip(text, _stream(key, nonce, len(text)), strict=True))
    return nonce + ct + _tag(key, nonce, ct)


def unseal(key: bytes, sealed: bytes) -> bytes | None:
    """The text ``seal(key, text)`` sealed; None for anything else (another key's, altered, made up)."""
    if len(sealed) <= _NONCE + _TAG:
        return None
    nonce, ct, tag = sealed[:_NONCE], sealed[_NONCE:-_TAG], sealed[-_TAG:]
    if not hmac.compare_digest(tag, _tag(key, nonce, ct)):
        return None
    return bytes(a ^ b for a, b in zip(ct, _stream(key, nonce, len(ct)), strict=True))


def encode_cursor(kind: str, position: str, key: bytes = b"") -> str:
    """The cursor of ``position`` in a list of ``kind``, sealed under ``key`` when one is given."""
    text = f"{kind}:{position}".encode()
    return base64.urlsafe_b64encode(seal(key, text) if key else text).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str, key: bytes = b"") -> str:
    """The position in a cursor of ``kind`` (sealed under ``key`` when one is given); anything this
    API did not issue to this key is refused (strictly: the position is printable ASCII)."""
    bad = ValidationError("cursor is not a cursor this API issued", "cursor")
    if not CURSOR_RE.fullmatch(cursor):
        raise bad
    try:
        raw: bytes | None = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise bad from None
    if key and raw is not None:
        raw = unseal(key, raw)
    if raw is None:
        raise bad
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise bad from None
    k, sep, pos = text.partition(":")
    if not sep or k != kind or not pos or not pos.isprintable():
        raise bad
    return pos


__all__ = ["CURSOR_RE", "cursor_key", "decode_cursor", "encode_cursor", "seal", "unseal"]
