"""Encoding of results and error texts, and checks on the small string arguments.

``result`` is stored as compact JSON (``separators=(",", ":")``, ``ensure_ascii=False``, no NaN) and
that text, measured in UTF-8 bytes, may be at most ``MAX_RESULT_BYTES`` (64 KiB = 65,536). It comes
back through ``json.loads``: tuples read back as lists and non-str dict keys as strings, as with any
JSON store. Error texts longer than 64 KiB are cut (they are messages, not data).
"""

from __future__ import annotations

import json

from mooncat_checkpoint.errors import (
    CheckpointResultSerializationError,
    CheckpointResultTooLargeError,
    InvalidArgumentError,
)
from mooncat_checkpoint.model import JSONValue

__all__ = [
    "MAX_RESULT_BYTES",
    "MAX_ERROR_BYTES",
    "MAX_LABEL_CHARS",
    "encode_json",
    "encode_result",
    "error_text",
    "check_label",
    "MAX_DURATION_MS",
    "check_ms",
]

MAX_RESULT_BYTES = 64 * 1024
MAX_ERROR_BYTES = 64 * 1024
MAX_LABEL_CHARS = 4096  # owner_run_id, fingerprint, result_ref: identifiers, not payloads

#: The one encoding of stored results (json.dumps with arguments would build an encoder per call).
encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode_result(result: JSONValue) -> str | None:
    """The stored JSON text of ``result`` (None stays None), or the matching ``CheckpointError``."""
    if result is None:
        return None
    try:
        text = encode_json(result)
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as e:
        raise CheckpointResultSerializationError(f"result is not JSON serializable: {e}") from e
    if size > MAX_RESULT_BYTES:
        raise CheckpointResultTooLargeError(
            f"result is {size} bytes as UTF-8 JSON, over the {MAX_RESULT_BYTES}-byte limit; "
            "store the artifact elsewhere and pass result_ref"
        )
    return text


def error_text(error: str | BaseException) -> str:
    """``"Type: message"`` for an exception, the string itself otherwise; cut to 64 KiB of UTF-8."""
    if isinstance(error, BaseException):
        msg = str(error)
        text = f"{type(error).__name__}: {msg}" if msg else type(error).__name__
    elif isinstance(error, str):
        text = error
    else:
        raise InvalidArgumentError(f"error must be a str or an exception, not {type(error).__name__}")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep the message, lose the odd character
        data = text.encode("utf-8", "replace")
        text = data.decode("utf-8")
    if len(data) > MAX_ERROR_BYTES:
        text = data[:MAX_ERROR_BYTES].decode("utf-8", "ignore")
    return text


def check_label(name: str, value: object) -> str | None:
    """A short optional string argument: None or a UTF-8-encodable str of at most 4096 characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str or None, not {type(value).__name__}")
    if len(value) > MAX_LABEL_CHARS:
        raise InvalidArgumentError(f"{name} is {len(value)} characters, over the limit of {MAX_LABEL_CHARS}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"{name} is not encodable as UTF-8") from None
    return value


MAX_DURATION_MS = 3_155_760_000_000
"""100 years: the longest lease, extension or age a call takes. ``now + lease`` then stays an exact
JSON number for the TypeScript library sharing a store (2**53) and fits SQLite's and PostgreSQL's
64-bit integers."""


def check_ms(name: str, value: object, *, minimum: int) -> int:
    """A duration in milliseconds: an int (not a bool) in ``minimum``..:data:`MAX_DURATION_MS`."""
    if type(value) is not int or not minimum <= value <= MAX_DURATION_MS:
        raise InvalidArgumentError(f"{name} must be an int in {minimum}..{MAX_DURATION_MS} (100 years), got {value!r}"[:200])
    return value
