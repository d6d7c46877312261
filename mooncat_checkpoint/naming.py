"""Namespace and key validation, and the file name a key is stored under.

A namespace is a directory name, so it is strict: ``[A-Za-z0-9_-]{1,128}``, ASCII only. A key is any
string that encodes as UTF-8 (the empty string too); the file backend uses it as the file name when it
matches ``[A-Za-z0-9._-]{1,120}`` and does not start with ``.``, else ``sha256-<hex of the UTF-8 key>``.
(A key that itself starts with ``sha256-`` is hashed too, so no key can take another key's file.)
Either way the record carries the original key, so every backend returns it unchanged. File names
are compared case-sensitively: keep the file backend on a case-sensitive filesystem (Linux's are).
"""

from __future__ import annotations

import hashlib
import re

from mooncat_checkpoint.errors import InvalidKeyError, InvalidNamespaceError

__all__ = ["MAX_NAMESPACE_LEN", "check_namespace", "check_key", "storage_name"]

MAX_NAMESPACE_LEN = 128
_NAMESPACE = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_NAMESPACE_LEN}}}", re.ASCII)
_SAFE_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,119}", re.ASCII)
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
    """The file name stem for ``key``: the key itself when safe, else ``sha256-<64 hex>``."""
    if _SAFE_KEY.fullmatch(key) is not None and not key.startswith("sha256-"):
        return key
    return "sha256-" + hashlib.sha256(key.encode("utf-8")).hexdigest()
