"""mooncat_checkpoint: claim / done / fail step records with leases and fencing tokens.

"Did this step already run?" answered exactly, on ``file://`` (default), ``sqlite://`` or ``memory://``
with nothing outside the standard library, and for many hosts on ``redis://`` (redis-py) or
``postgresql://`` (psycopg 3), imported only when used. The file and SQLite stores are those of the
TypeScript ``mooncat-checkpoint``, so Node and Python steps can share one::

    cp = CheckpointClient()                   # url > $MOONCAT_CHECKPOINT_URL > file://./.mooncat/checkpoints
    c = await cp.claim("vision", image_hash, owner_run_id="run-1")
    match c:
        case Done(checkpoint=prev): return prev.result
        case Busy() | Failed(): return None
        case Claimed(lease_token=token, fence=fence): ...
    await cp.done("vision", image_hash, token, result={"count": 42})

See ``rules`` for the state machine, ``step`` for ``async with cp.step(...)``, ``decorator`` for
``@checkpointed`` and the README section "mooncat_checkpoint quick start".
"""

from __future__ import annotations

from mooncat_checkpoint.client import CheckpointClient
from mooncat_checkpoint.codec import MAX_RESULT_BYTES
from mooncat_checkpoint.decorator import checkpointed, default_key
from mooncat_checkpoint.engine import DEFAULT_LEASE_MS, Clock, wall_clock_ms
from mooncat_checkpoint.errors import (
    BackendUnavailableError,
    CheckpointError,
    CheckpointResultSerializationError,
    CheckpointResultTooLargeError,
    CorruptRecordError,
    FingerprintMismatchError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidNamespaceError,
    LeaseLostError,
    StepFailedError,
    WaitTimeoutError,
)
from mooncat_checkpoint.model import (
    Busy,
    Checkpoint,
    CheckpointStatus,
    Claimed,
    ClaimResult,
    Done,
    Failed,
    GcResult,
    JSONValue,
    UnreadableRecord,
)
from mooncat_checkpoint.step import Step, SyncStep
from mooncat_checkpoint.sync_client import SyncCheckpointClient
from mooncat_checkpoint.urls import DEFAULT_URL, ENV_VAR

__all__ = [
    "CheckpointClient",
    "SyncCheckpointClient",
    "checkpointed",
    "default_key",
    "Step",
    "SyncStep",
    "Checkpoint",
    "CheckpointStatus",
    "ClaimResult",
    "Done",
    "Claimed",
    "Busy",
    "Failed",
    "GcResult",
    "UnreadableRecord",
    "JSONValue",
    "Clock",
    "wall_clock_ms",
    "DEFAULT_LEASE_MS",
    "DEFAULT_URL",
    "ENV_VAR",
    "MAX_RESULT_BYTES",
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
