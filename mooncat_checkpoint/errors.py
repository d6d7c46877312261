"""The one exception hierarchy of mooncat_checkpoint: everything it raises on purpose is a ``CheckpointError``.

Errors caused by bad arguments also derive from ``ValueError`` or ``TypeError`` so generic handlers work,
and ``WaitTimeoutError`` is also a ``TimeoutError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mooncat_checkpoint.model import Checkpoint

__all__ = [
    "CheckpointError",
    "LeaseLostError",
    "FingerprintMismatchError",
    "CheckpointResultTooLargeError",
    "CheckpointResultSerializationError",
    "InvalidArgumentError",
    "InvalidNamespaceError",
    "InvalidKeyError",
    "BackendUnavailableError",
    "CorruptRecordError",
    "StepFailedError",
    "WaitTimeoutError",
]


class CheckpointError(Exception):
    """Base class of every error mooncat_checkpoint raises on purpose."""


class LeaseLostError(CheckpointError):
    """``done``/``fail`` with a token that is not the current token of a claimed record; the message
    says which: no record, already done, already failed, never valid for the record's only claim, or
    not the current claim's after a re-claim. (``touch`` returns None in these cases instead.)"""


class FingerprintMismatchError(CheckpointError):
    """A claim brought a fingerprint different from the one stored with the record (other inputs)."""


class CheckpointResultTooLargeError(CheckpointError, ValueError):
    """The JSON encoding of ``result`` is over 64 KiB (65,536 bytes UTF-8); use ``result_ref``."""


class CheckpointResultSerializationError(CheckpointError, TypeError):
    """``result`` cannot be encoded as JSON (an object, a cycle, NaN, ...)."""


class InvalidArgumentError(CheckpointError, ValueError):
    """An argument is out of range or of the wrong type (lease_ms <= 0, a non-str key, ...)."""


class InvalidNamespaceError(InvalidArgumentError):
    """A namespace must match ``[A-Za-z0-9_-]{1,128}`` (ASCII only)."""


class InvalidKeyError(InvalidArgumentError):
    """A key must be a ``str`` that encodes as UTF-8 (no lone surrogates); any other content is fine."""


class BackendUnavailableError(CheckpointError):
    """The backend cannot be opened or used: unknown URL scheme, unwritable directory, locked database, a
    server lost or not answering within its ``socket_timeout``. A change whose answer was lost that way
    may or may not have been applied (a claim may hold the key, under a token nobody has): read it back."""


class CorruptRecordError(CheckpointError):
    """A stored record cannot be read back (a hand-edited file with bad JSON, a wrong key, ...)."""


class StepFailedError(CheckpointError):
    """``@checkpointed`` found the step in the terminal ``failed`` state; ``reset`` it to run again."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        super().__init__(
            f"{checkpoint.namespace}/{checkpoint.key!r} failed earlier ({checkpoint.error}); reset it to retry"
        )
        self.checkpoint = checkpoint


class WaitTimeoutError(CheckpointError, TimeoutError):
    """``wait_done`` (or a busy ``@checkpointed`` call) gave up before the step finished."""


class WouldBlock(CheckpointError):
    """Internal, never raised to callers: a call on the async client's inline path would have had to
    wait (for a lock), so the client runs it in a worker thread instead."""
