"""Namespace and key validation, and the name a key is stored under (the original library's rule).

A namespace is a directory name, so it is strict: ``[A-Za-z0-9_-]{1,128}``, ASCII only. A key is any
string that encodes as UTF-8 (the empty string too). The file name stem and the SQLite ``storage_key``
of a key are exactly those of the TypeScript ``mooncat-checkpoint`` (its ``safeKeySegment``): the key
itself when it matches ``[a-zA-Z0-9_.-]+``, is at most 128 characters and is not ``.`` or ``..``;
else ``sha256-`` + the first 32 hex digits of sha256(UTF-8 key). So a Node step and a Python step
find each other's records. Either way the record carries the original key, and a backend that finds
another key under a name (two keys of one name: a literal ``sha256-...`` key, or a 128-bit collision)
raises ``CorruptRecordError`` rather than return the other key's record. File names are compared
case-sensitively: keep the file backend on a case-sensitive filesystem (Linux's are).

``legacy_storage_name`` is the rule of this library's first on-disk format (``sha256-<64 hex>`` for
keys longer than 120 characters, empty, starting with ``.`` or ``sha256-``, or with a character outside
``[A-Za-z0-9._-]``): records stored under it are
still read, and move to the current name on their next write.
"""

from __future__ import annotations

import hashlib
import re

from mooncat_checkpoint.errors import InvalidKeyError, InvalidNamespaceError

__all__ = ["MAX_NAMESPACE_LEN", "check_namespace", "check_key", "storage_name", "legacy_storage_name"]

MAX_NAMESPACE_LEN = 128
_NAMESPACE = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_NAMESPACE_LEN}}}", re.ASCII)
_SAFE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}", re.ASCII)
_LEGACY_SAFE_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,119}", re.ASCII)
_checked_namespaces: set[str] = set()


def check_namespace(namespace: object) -> str:
    if type(namespace) is str and namespace in _checked_namespaces:
        return namespace
    if not isinstance(namespace, str) or _NAMESPACE.fullmatch(namespace) is None:
        raise InvalidNamespaceError(
            f"invalid namespace {namespace!r}: use 1-{MAX_NAMESPACE_LEN} characters from [A-Za-z0-9_-]"
        )
    if len(_checked_namespaces) < 4096:
        _checked_namespaces.add(namespace)
    return namespace


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidKeyError(f"invalid key {key!r}: a key is a str, not {type(key).__name__}")
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidKeyError(f"invalid key {key!r}: not encodable as UTF-8 ({e.reason})") from None
    return key


def storage_name(key: str) -> str:
    """The file name stem / ``storage_key`` for ``key``: the key itself when safe, else ``sha256-<32 hex>``."""
    if _SAFE_KEY.fullmatch(key) is not None and key != "." and key != "..":
        return key
    return "sha256-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def legacy_storage_name(key: str) -> str:
    """The name this library's first format used: the key when safe by its stricter rule, else ``sha256-<64 hex>``."""
    if _LEGACY_SAFE_KEY.fullmatch(key) is not None and not key.startswith("sha256-"):
        return key
    return "sha256-" + hashlib.sha256(key.encode("utf-8")).hexdigest()
