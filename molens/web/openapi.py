"""The OpenAPI 3.1 document of the REST API, built in code (served at ``/api/v1/openapi.json``).

Schemas are JSON Schema 2020-12, so tests validate real responses against them; a test also checks
that every route of the app is here and every path here is a route. When a route changes, this
file and ``docs/api.md`` change in the same commit.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import msgspec

from molens import __version__
from molens.fsm.audit import ACTIONS as AUDIT_ACTIONS
from molens.fsm.tenancy import KeyRole
from molens.model import (
    DEFAULT_LIMITS,
    MAX_EPOCH_MS,
    TASK_ID_PATTERN,
    ExecutionResult,
    FailureKind,
    Status,
    TaskType,
)
from molens.schedule.cron import ZONES
from molens.schedule.wheel import levels_for
from molens.schema import (
    FLOW_ID_PATTERN,
    NAMESPACE_PATTERN,
    SCENE_PATTERN,
    DeadLetter,
    Execution,
    between_fields,
    openapi_components,
    record_schema,
)
from molens.web.export import EXPORT_URL_PATTERN, TICKET_PATTERN
from molens.web.fire_series import FIELDS as FIRE_SERIES_FIELDS
from molens.web.fire_series import Span
from molens.web.flows import flow_schemas
from molens.web.tenancy import KeyBody, NamespaceBody, NamespacePatch

_P = "/api/v1"
MAX_URL_FILTER = 2_048
"""Longest ``url`` filter of the task list (characters)."""
MAX_HEADER_TEXT = 1_000
"""Longest If-Match header and task-list status filter (characters)."""
MAX_STATS_WINDOW_MS = 7 * 86_400_000
"""Widest window (and trend bucket) of ``/stats/urls``."""


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(t: str, **kw: Any) -> dict[str, Any]:
    return {"type": [t, "null"], **kw}


def _nullable_enum(values: list[str], **kw: Any) -> dict[str, Any]:
    """One of ``values`` or null. An ``anyOf`` rather than ``type: [string, null]`` with null in the
    enum: both are valid JSON Schema, but client generators read the second as three types."""
    return {"anyOf": [{"type": "string", "enum": values}, {"type": "null"}], **kw}


def _json(schema: dict[str, Any], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


_ROLE_HEADER = {"X-Molens-Role": {"$ref": "#/components/headers/X-Molens-Role"}}


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return _json(schema, description, _ROLE_HEADER)


def _err(*codes: int) -> dict[str, Any]:
    names = {
        307: "NotLeader",
        400: "BadRequest",
        401: "Unauthorized",
        404: "NotFound",
        409: "Conflict",
        412: "PreconditionFailed",
        413: "TooLarge",
        415: "UnsupportedMediaType",
        503: "Unavailable",
        507: "InsufficientStorage",
    }
    return {str(c): {"$ref": f"#/components/responses/{names[c]}"} for c in codes}


def _param(name: str, where: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    """A parameter; a string in the query is never empty (an empty value is refused: leave it out)."""
    if where == "query" and schema.get("type") == "string" and "enum" not in schema:
        schema = {"minLength": 1, **schema}
    return {"name": name, "in": where, "required": required or where == "path", "schema": schema, "description": description}


_TRACEPARENT = _param(
    "traceparent", "header", {"type": "string"},
    "W3C trace context the task's requests join when the body has no traceparent field (an invalid one is "
    "ignored)",
)


_TASK_ID_SCHEMA = {"type": "string", "pattern": TASK_ID_PATTERN}
_TASK_ID = _param("task_id", "path", _TASK_ID_SCHEMA, "Task id (26 Crockford base32 characters)")
_STATUS_WORD = "|".join(s.value for s in Status)
_STATUS_LIST = f"^({_STATUS_WORD})(,({_STATUS_WORD}))*$"
"""The task list's status filter: statuses joined by commas (what the server reads, word for word)."""
_IF_MATCH = r'^\s*(\*|(W/)?"?[0-9]{1,18}"?(\s*,\s*(W/)?"?[0-9]{1,18}"?)*)\s*$'
"""If-Match as the server reads it: ``*``, or versions such as ``"3"``, ``W/"3"``, ``3``, comma-separated."""
_FLOW_KEY = _param("key", "path", {"type": "string", "pattern": FLOW_ID_PATTERN},
                   "Flow key: a callback host:port, a default-namespace task's flow_key, or <namespace>~<flow_key>")
_CURSOR = _param("cursor", "query", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,200}$"},
                 "Opaque cursor from a previous page's next_cursor")
_LIMIT = _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}, "Page size")
_EPOCH_MS: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS}
_NAMESPACE_SCHEMA = {"type": "string", "pattern": NAMESPACE_PATTERN}
_NAMESPACE_FILTER = _param("namespace", "query", _NAMESPACE_SCHEMA,
                           "Only this namespace's (403 outside the key's namespaces); left out: every namespace "
                           "the key may read")
_EXEC_FILTERS = [
    _NAMESPACE_FILTER,
    _param("result", "query", {"type": "string", "enum": [r.value for r in ExecutionResult]}, "Only this result"),
    _param("since", "query", _EPOCH_MS, "finished_at >= since (epoch ms)"),
    _param("until", "query", _EPOCH_MS, "finished_at < until (epoch ms)"),
    _CURSOR,
    _LIMIT,
]

_WRITE_ERRORS = (307, 401, 503, 507)

# The test endpoints read any body. Declared as the two media types a callback target gets (a fire's
# JSON payload, or any bytes) rather than "*/*", which client generators cannot map to a parameter.
_ANY_BODY: dict[str, Any] = {
    "required": False,
    "content": {
        "application/json": {"schema": {}},
        "application/octet-stream": {"schema": {"type": "string", "contentMediaType": "application/octet-stream"}},
    },
}


def _zone_schema() -> dict[str, Any]:
    """The time zones the server takes (``molens.schedule.cron.ZONES``), as the task's ``timezone`` states them."""
    tz = openapi_components(DEFAULT_LIMITS, zones=sorted(ZONES))["TaskCreate"]["properties"]["timezone"]
    return dict(next(a for a in tz["anyOf"] if a.get("type") == "string"))


def _schemas() -> dict[str, Any]:
    lim = DEFAULT_LIMITS
    error_obj = {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "description": "Machine-readable error code"},
            "message": {"type": "string"},
            "field": {"type": "string", "description": "The request field (or header/parameter) at fault"},
            "leader": _nullable("string", description="Leader's HTTP base URL (not_leader only)"),
            "quota": {"type": "string", "description": "The namespace's quota at fault (quota_exceeded only)"},
            "reason": {"type": "string", "enum": ["never_fires", "too_many_occurrences"],
                       "description": "Why, in a word that stays the same in every language (never_fires: a "
                       "well-formed cron_expr with no fire time; too_many_occurrences: a backfill range "
                       "holding more than 10,000)"},
        },
    }
    percentiles = {
        "count": {"type": "integer"},
        "p50_ms": {"type": "integer"},
        "p90_ms": {"type": "integer"},
        "p99_ms": {"type": "integer"},
    }
    counts = {
        "type": "object",
        "required": [s.value for s in Status],
        "properties": {s.value: {"type": "integer"} for s in Status},
    }
    node = {  # what a node says of itself first, in its cluster status and in its stats
        "node_id": {"type": "string"},
        "role": {"type": "string"},
        "term": {"type": "integer"},
        "leader_id": _nullable("string"),
    }
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": error_obj},
        },
        # TaskCreate, Task and their enums, from molens.schema; timezone: what the server validates with
        **(comps := openapi_components(lim, zones=sorted(ZONES))),
        **flow_schemas(),
        "ResumeRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "resume_from": {
                    "type": "string", "enum": ["now", "schedule"], "default": "now",
                    "description": "now: a periodic task skips what passed while paused; schedule: it takes "
                    "up the instant it was waiting for, and what it missed follows its catchup",
                }
            },
        },
        "BackfillRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["start", "end"],
            "description": "Fire the occurrences of the schedule in [start, end) now, in order (at most 10,000)",
            "properties": {
                "start": {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS,
                          "description": "epoch ms, inclusive"},
                "end": {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS,
                        "description": "epoch ms, exclusive; after start and not after now"},
            },
        },
        "BackfillAccepted": {
            "type": "object",
            "required": ["occurrences", "first", "last", "task"],
            "properties": {
                "occurrences": {"type": "integer", "minimum": 0, "maximum": 10_000,
                                "description": "How many occurrences the backfill fires"},
                "first": {**_nullable("integer"), "description": "The first one's instant (epoch ms)"},
                "last": {**_nullable("integer"), "description": "The last one's instant (epoch ms)"},
                "task": _ref("Task"),
            },
        },
        "TaskUpdate": {
            **{k: v for k, v in comps["TaskCreate"].items() if k not in ("required", "title", "allOf")},
            "title": "TaskUpdate",
            "allOf": between_fields(lim, patch=True),
            "description": "A JSON merge patch of the task's definition (top-level fields): a field given "
            "replaces the stored one, null resets it to its default, a field left out is kept. One of "
            "interval_ms, run_at, cron_expr replaces the schedule. type, idempotency_key and namespace cannot change.",
        },
        "TaskList": {
            "type": "object",
            "required": ["items", "next_cursor", "scanned"],
            "properties": {
                "items": {"type": "array", "items": _ref("Task")},
                "next_cursor": _nullable("string"),
                "scanned": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "How many tasks this request examined (bounded per request); the items are those that matched",
                },
                "partial": {
                    "type": "boolean",
                    "description": "Only with q, when true: the node's search index is at its size cap, so matches may be missing",
                },
            },
        },
        "BatchCreateRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["tasks"],
            "properties": {"tasks": {"type": "array", "maxItems": 1000, "items": _ref("TaskCreate")}},
        },
        "BatchItemError": {
            "type": "object",
            "required": ["index", "error"],
            "properties": {"index": {"type": "integer", "minimum": 0}, "error": error_obj},
        },
        "BatchCreateResponse": {
            "type": "object",
            "required": ["items", "errors"],
            "properties": {
                "items": {
                    "description": "One per item, in order: the task (with Prefer: return=minimal, its id alone), "
                    "or null where errors names the item's error",
                    "type": "array",
                    "items": {"oneOf": [_ref("Task"), _ref("TaskRef"), {"type": "null"}]},
                },
                "errors": {"type": "array", "items": _ref("BatchItemError")},
            },
        },
        "TaskRef": {
            "description": "A created (or matched) task's id, the item of a batch answer under Prefer: return=minimal",
            "type": "object",
            "required": ["id"],
            "additionalProperties": False,
            "properties": {"id": {"type": "string"}},
        },
        "BatchCreateError": {
            "description": "An invalid batch: nothing was created; every bad item is listed",
            "type": "object",
            "required": ["error", "items", "errors"],
            "properties": {
                "error": error_obj,
                "items": {"type": "array", "items": {"type": "null"}},
                "errors": {"type": "array", "items": _ref("BatchItemError")},
            },
        },
        "Execution": record_schema(Execution, closed=True),
        "ExecutionList": {
            "type": "object",
            "required": ["items", "next_cursor"],
            "properties": {
                "items": {"type": "array", "items": _ref("Execution")},
                "next_cursor": _nullable("string"),
            },
        },
        "LeaderInfo": {
            "type": "object",
            "required": ["leader_id", "leader_url", "term", "role"],
            "properties": {
                "leader_id": _nullable("string"),
                "leader_url": _nullable("string", description="Leader's HTTP base URL (null on the leader)"),
                "term": {"type": "integer"},
                "role": {"type": "string", "description": "This node's role"},
            },
        },
        "ClusterStatus": {
            "type": "object",
            "required": ["node_id", "role", "term", "leader_id", "applied_index", "nodes"],
            "properties": {
                **node,
                "commit_index": {"type": "integer"},
                "applied_index": {"type": "integer"},
                "nodes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id"],
                        "properties": {
                            "id": {"type": "string"},
                            "role": {"type": "string"},
                            "suffrage": {"type": "string", "enum": ["voter", "learner"]},
                            "http_url": _nullable("string"),
                            "match_index": _nullable("integer"),
                            "last_contact_ms": {
                                "type": "integer",
                                "description": "How long ago this node last heard a Raft message from that peer (ms)",
                            },
                        },
                    },
                },
            },
        },
        "TransferLeaderRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"to": _nullable("string", description="The voter to hand leadership to (default: the best caught-up one)")},
        },
        "TransferLeader": {
            "type": "object",
            "required": ["to"],
            "properties": {
                "to": {"type": "string", "description": "The node that leads now"},
                "ms": {"type": "number", "description": "How long the hand-over took"},
            },
        },
        "ClusterStats": {
            "type": "object",
            "required": ["nodes"],
            "properties": {
                "nodes": {
                    "type": "array",
                    "description": "Every member's Stats, leader first; an unreachable one has only node_id and error",
                    "items": {
                        "type": "object",
                        "required": ["node_id"],
                        "properties": {
                            "node_id": {"type": "string"},
                            "lag": {"type": "integer", "description": "Highest commit index seen - applied_index"},
                            "error": {"type": "string", "description": "Set when the node did not answer"},
                        },
                    },
                },
                "time_ms": {"type": "integer"},
            },
        },
        "TaskCounts": counts,
        "Stats": {
            "type": "object",
            "required": ["node_id", "role", "term", "tasks", "tasks_total", "time_ms"],
            "properties": {
                **node,
                "tasks": _ref("TaskCounts"),
                "tasks_total": {"type": "integer"},
                "time_ms": {"type": "integer"},
                "commit_index": _nullable("integer"),
                "applied_index": {"type": "integer"},
                "fires_per_s": {"type": "number", "description": "Executions finished per second (last window_ms)"},
                "success_rate": _nullable("number", minimum=0, maximum=1),
                "window_ms": {"type": "integer"},
                "by_result": {"type": "object", "additionalProperties": {"type": "integer"}},
                "fires_total": {"type": "integer", "description": "HTTP attempts made by this node's workers"},
                "lateness_p99_ms": _nullable(
                    "number", description="Due time -> HTTP request started, p99 of the recent fires this node's worker made"
                ),
                "fires_failed": {
                    "type": "integer",
                    "description": "HTTP attempts made by this node's workers whose outcome was not success",
                },
                "callback_latency_p50_ms": _nullable(
                    "number", description="HTTP request -> answer, p50 of the recent attempts this node's worker made"
                ),
                "callback_latency_p99_ms": _nullable(
                    "number", description="HTTP request -> answer, p99 of the recent attempts this node's worker made"
                ),
                "not_fired": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                    "description": "Occurrences not fired since this process started, by reason: skipped_overlap, "
                                   "skipped_catchup_none, collapsed_catchup_one, skipped_catchup_window, "
                                   "skipped_backfill, dropped_paused, dropped_end_at, dropped_max_runs (decisions "
                                   "this replica "
                                   "applied) and held_by_flow (due fires this node's leader held back)",
                },
                "qps": {"type": "number", "description": "HTTP API requests per second"},
                "rss_bytes": _nullable("integer"),
                "threads_cpu_s": {
                    "type": "object",
                    "additionalProperties": {"type": "number"},
                    "description": "CPU seconds of this process's live threads by name (fire-worker-3 counts as fire-worker; ZeroMQ's native ZMQbg/IO/0 as ZMQbg/IO)",
                },
                "threads_switches": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                    "description": "Context switches (voluntary + involuntary) of this process's live threads by name",
                },
                "cpus": {
                    "type": "string",
                    "description": "CPUs this node's process may run on, as taskset -c writes them (node.cpus: by default one, chosen by the node)",
                },
                "os_scheduling": {
                    "type": "string",
                    "description": "The kernel's scheduling policy of this node's threads (node.os_scheduling): http-batch, batch or normal",
                },
                "disk": {"type": "object", "additionalProperties": {"type": "integer"}},
                "cleanup": {
                    "type": "object",
                    "properties": {
                        "expired": {"type": "integer", "description": "Tasks removed by retention since start"},
                        "dead_letters_expired": {
                            "type": "integer", "description": "Dead letters removed by retention since start",
                        },
                        "retention_ms": {"type": "integer"},
                        "rate_limit_qps": {"type": "number"},
                    },
                },
            },
        },
        "WheelLevel": {
            "type": "object",
            "required": ["level", "start_ms", "span_ms", "total", "counts"],
            "properties": {
                "level": {"type": "integer"},
                "start_ms": {"type": "integer", "description": "Start of bucket 0 (the current one)"},
                "span_ms": {"type": "integer", "description": "Width of one bucket"},
                "total": {"type": "integer"},
                "counts": {"type": "array", "items": {"type": "integer"}, "description": "Timers per bucket"},
            },
        },
        "WheelDistribution": {
            "type": "object",
            "required": ["time_ms", "tick_ms", "wheel_size", "timers", "overflow", "levels"],
            "properties": {
                "window": {
                    "anyOf": [{"type": "null"}, {"type": "object", "required": ["horizon_ms", "until_ms"], "properties": {
                        "horizon_ms": {"type": "integer"},
                        "until_ms": {"type": "integer", "description": "Every timer due before this is in the wheel"},
                    }}],
                    "description": "The leader's near-term window: the wheel holds only what is due within horizon_ms",
                },
                "far_future": {
                    "anyOf": [{"type": "null"}, {"type": "object", "required": ["from_ms", "day_ms", "total", "days"], "properties": {
                        "from_ms": {"type": "integer"},
                        "day_ms": {"type": "integer"},
                        "total": {"type": "integer", "description": "Due entries from from_ms's UTC day on"},
                        "days": {"type": "array", "items": {"type": "object", "required": ["start_ms", "count"], "properties": {
                            "start_ms": {"type": "integer"}, "count": {"type": "integer"}}}},
                    }}],
                    "description": "The due index beyond the window, per UTC day (whole days from the window's end), "
                                   "384 days listed (days without entries left out)",
                },
                "time_ms": {"type": "integer"},
                "tick_ms": {"type": "integer"},
                "wheel_size": {"type": "integer"},
                "timers": {"type": "integer"},
                "overflow": {"type": "integer", "description": "Timers beyond the top level"},
                "levels": {"type": "array", "items": _ref("WheelLevel")},
            },
        },
        "SchedulePreview": {
            "type": "object",
            "required": ["items", "local", "timezone", "after", "description"],
            "properties": {
                "items": {"type": "array", "items": {"type": "integer"}, "description": "Fire times, epoch ms"},
                "local": {"type": "array", "items": {"type": "string"}, "description": "The same, ISO 8601 in timezone"},
                "timezone": {"type": "string"},
                "after": {"type": "integer"},
                "description": {
                    "description": "The periodic schedule in words (cron-descriptor), English and Chinese; "
                    "null for a delayed task",
                    "anyOf": [
                        {
                            "type": "object",
                            "required": ["en", "zh"],
                            "properties": {"en": {"type": "string"}, "zh": {"type": "string"}},
                        },
                        {"type": "null"},
                    ],
                },
            },
        },
        "TrendPoint": {
            "type": "object",
            "required": ["bucket_ms", *percentiles],
            "properties": {"bucket_ms": {"type": "integer"}, **percentiles},
        },
        "UrlStats": {
            "type": "object",
            "required": ["url", *percentiles, "trend"],
            "properties": {
                "url": {"type": "string", "description": "scheme://host[:port]/path (no query)"},
                **percentiles,
                "trend": {"type": "array", "items": _ref("TrendPoint")},
            },
        },
        "UrlStatsList": {
            "type": "object",
            "required": ["since", "until", "bucket_ms", "items"],
            "properties": {
                "since": {"type": "integer"},
                "until": {"type": "integer"},
                "bucket_ms": {"type": "integer"},
                "items": {"type": "array", "items": _ref("UrlStats")},
            },
        },
        "FireSeries": {
            "type": "object",
            "description": "Per bucket, oldest first: attempts, failed attempts, retries (attempt >= 2), lateness",
            "required": ["range", "step_ms", "time_ms", "t_ms", *FIRE_SERIES_FIELDS],
            "properties": {
                "range": {"type": "string", "enum": [s.value for s in Span]},
                "step_ms": {"type": "integer", "description": "Bucket width: 10 s for an hour, 5 min for a day"},
                "time_ms": {"type": "integer"},
                "t_ms": {"type": "array", "items": {"type": "integer"}, "description": "Bucket starts (epoch ms)"},
                **{f: {"type": "array", "items": {"type": "number" if f.endswith("_ms") else "integer"}}
                   for f in FIRE_SERIES_FIELDS},
                "node_id": {"type": "string", "description": "With local=1: the node answering"},
                "nodes": {"type": "array", "items": {"type": "string"}, "description": "Members counted"},
                "missing": {
                    "type": "array",
                    "description": "Members that did not answer (not counted)",
                    "items": {"type": "object", "properties": {"node_id": {"type": "string"}, "error": {"type": "string"}}},
                },
            },
        },
        "Ok": {"type": "object", "required": ["ok"], "properties": {"ok": {"const": True}}},
        "Health": {
            "type": "object",
            "required": ["ok", "node_id"],
            "properties": {"ok": {"const": True}, "node_id": {"type": "string"}},
        },
        "Ready": {
            "type": "object",
            "required": ["ready", "node_id", "role", "leader_id"],
            "properties": {
                "ready": {"const": True},
                "node_id": {"type": "string"},
                "role": {"type": "string"},
                "leader_id": _nullable("string"),
            },
        },
    }


_PREF_APPLIED = {
    "Preference-Applied": {
        "schema": {"type": "string", "enum": ["return=minimal"]},
        "description": "Present when the answer honours Prefer: return=minimal",
    }
}
_ETAG = {"ETag": {"schema": {"type": "string"}, "description": 'The version of the definition, e.g. "3" (for If-Match)'}}

_TASK_LINKS = {
    name: {"operationId": op, "parameters": {"task_id": "$response.body#/id"}, "description": f"{name} this task"}
    for name, op in (
        ("Get", "getTask"),
        ("Update", "updateTask"),
        ("Pause", "pauseTask"),
        ("Resume", "resumeTask"),
        ("Trigger", "triggerTask"),
        ("Backfill", "backfillTask"),
        ("Executions", "listTaskExecutions"),
        ("Delete", "deleteTask"),
    )
}
"""The operations a created task's id leads to (OpenAPI links: clients and fuzzers follow them)."""


def _paths(wheel_levels: int) -> dict[str, Any]:
    task_ok = _ok(_ref("Task"))
    open_: dict[str, Any] = {"security": []}

    def task_action(op: str, summary: str, extra: tuple[int, ...] = ()) -> dict[str, Any]:
        return {
            "post": {
                "operationId": f"{op}Task",
                "summary": summary,
                "tags": ["tasks"],
                "parameters": [_TASK_ID],
                "responses": {"200": task_ok, **_err(404, *extra, *_WRITE_ERRORS)},
            }
        }

    return {
        f"{_P}/tasks": {
            "post": {
                "operationId": "createTask",
                "summary": "Create a task",
                "tags": ["tasks"],
                "parameters": [
                    _param(
                        "Idempotency-Key",
                        "header",
                        {"type": "string", "maxLength": 128},
                        "Alternative to the idempotency_key field",
                    ),
                    _TRACEPARENT,
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("TaskCreate")}}},
                "responses": {
                    "201": {**_ok(_ref("Task"), "Created"), "links": _TASK_LINKS},
                    "200": {**_ok(_ref("Task"), "The idempotency key matched an existing task"), "links": _TASK_LINKS},
                    **_err(400, 404, 413, 415, *_WRITE_ERRORS),
                },
            },
            "get": {
                "operationId": "listTasks",
                "summary": "List tasks in creation order with filters",
                "tags": ["tasks"],
                "parameters": [
                    _param("status", "query", {"type": "string", "pattern": _STATUS_LIST, "maxLength": MAX_HEADER_TEXT},
                           "Comma-separated statuses"),
                    _param("type", "query", {"type": "string", "enum": [t.value for t in TaskType]}, "Task type"),
                    _param("scene", "query", {"type": "string", "pattern": SCENE_PATTERN}, "Exact scene"),
                    _param(
                        "url", "query", {"type": "string", "maxLength": MAX_URL_FILTER},
                        "Callback URL substring (case-insensitive)",
                    ),
                    _param(
                        "q", "query", {"type": "string", "maxLength": MAX_URL_FILTER},
                        "Text search: tasks whose id, callback URL, scene or payload text contains this "
                        "(case-insensitive), from the node's search index; not with order=next_run",
                    ),
                    _param(
                        "order",
                        "query",
                        {"type": "string", "enum": ["created", "-created", "next_run"], "default": "created"},
                        "created: oldest first; -created: newest first; next_run: soonest next run first "
                        "(only tasks that have one)",
                    ),
                    _NAMESPACE_FILTER,
                    _CURSOR,
                    _LIMIT,
                ],
                "responses": {"200": _ok(_ref("TaskList")), **_err(400, 401)},
            },
        },
        f"{_P}/tasks/batch": {
            "post": {
                "operationId": "createTasks",
                "summary": "Create up to 1,000 tasks in one replicated entry",
                "tags": ["tasks"],
                "parameters": [
                    _param(
                        "Prefer",
                        "header",
                        {"type": "string"},
                        "RFC 7240 preferences (the first 1,000 characters are read; what is not understood "
                        "is ignored, as the RFC asks); return=minimal answers each item with the task's id alone "
                        "(TaskRef) instead of the whole task, and says so in Preference-Applied. Other "
                        "preferences are ignored",
                    ),
                    _TRACEPARENT,
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("BatchCreateRequest")}},
                },
                "responses": {
                    "201": _json(
                        _ref("BatchCreateResponse"), "Created (at least one new task)", {**_ROLE_HEADER, **_PREF_APPLIED}
                    ),
                    "200": _json(
                        _ref("BatchCreateResponse"),
                        "Every item matched an existing idempotency key",
                        {**_ROLE_HEADER, **_PREF_APPLIED},
                    ),
                    "400": _json(
                        {"anyOf": [_ref("BatchCreateError"), _ref("Error")]},
                        "Invalid batch; nothing created: BatchCreateError lists the bad items, Error a bad body",
                    ),
                    **_err(413, 415, *_WRITE_ERRORS),
                },
            }
        },
        f"{_P}/tasks/{{task_id}}": {
            "get": {
                "operationId": "getTask",
                "summary": "Get a task",
                "tags": ["tasks"],
                "parameters": [
                    _TASK_ID,
                    _param(
                        "consistency", "query", {"type": "string", "enum": ["local", "linearizable"], "default": "local"},
                        "local: this node's replica as it is (may lag the leader); linearizable: first confirm with "
                        "the leader's quorum (Raft ReadIndex) and apply up to its commit index, so the answer "
                        "reflects every write acknowledged before the request",
                    ),
                ],
                "responses": {
                    "200": {**task_ok, "headers": {**task_ok.get("headers", {}), **_ETAG}},
                    **_err(400, 401, 404, 503),
                },
            },
            "patch": {
                "operationId": "updateTask",
                "summary": "Change a task's definition in place (validated like a create)",
                "tags": ["tasks"],
                "parameters": [
                    _TASK_ID,
                    _param(
                        "If-Match", "header", {"type": "string", "pattern": _IF_MATCH, "maxLength": MAX_HEADER_TEXT},
                        'The version the change is based on (the ETag of a GET, e.g. "3"); without it, the '
                        "change applies to the current version",
                    ),
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/merge-patch+json": {"schema": _ref("TaskUpdate")},
                        "application/json": {"schema": _ref("TaskUpdate")},
                    },
                },
                "responses": {
                    "200": {**task_ok, "headers": {**task_ok.get("headers", {}), **_ETAG}},
                    **_err(400, 404, 412, 413, 415, 507, *_WRITE_ERRORS),
                },
            },
            "delete": {
                "operationId": "deleteTask",
                "summary": "Delete a task and its history (answers the task as it was)",
                "tags": ["tasks"],
                "parameters": [_TASK_ID],
                "responses": {"200": task_ok, **_err(404, *_WRITE_ERRORS)},
            },
        },
        f"{_P}/tasks/{{task_id}}/pause": task_action("pause", "Pause a task", (409,)),
        f"{_P}/tasks/{{task_id}}/resume": {
            "post": {
                **task_action("resume", "Resume a paused (or inactive periodic) task", (400, 409, 415))["post"],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("ResumeRequest")}},
                },
            }
        },
        f"{_P}/tasks/{{task_id}}/trigger": task_action("trigger", "Run the next occurrence now", (409,)),
        f"{_P}/tasks/{{task_id}}/backfill": {
            "post": {
                "operationId": "backfillTask",
                "summary": "Fire a periodic task's occurrences scheduled in a past range now, in order",
                "tags": ["tasks"],
                "parameters": [_TASK_ID],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("BackfillRequest")}}},
                "responses": {
                    "200": _ok(_ref("BackfillAccepted")), **_err(400, 404, 409, 413, 415, *_WRITE_ERRORS),
                },
            }
        },
        f"{_P}/tasks/{{task_id}}/executions": {
            "get": {
                "operationId": "listTaskExecutions",
                "summary": "A task's executions, newest first",
                "tags": ["executions"],
                "parameters": [_TASK_ID, *_EXEC_FILTERS],
                "responses": {"200": _ok(_ref("ExecutionList")), **_err(400, 401, 404)},
            }
        },
        f"{_P}/executions": {
            "get": {
                "operationId": "listExecutions",
                "summary": "All executions, newest first",
                "tags": ["executions"],
                "parameters": [_param("task_id", "query", _TASK_ID_SCHEMA, "Only this task"), *_EXEC_FILTERS],
                "responses": {"200": _ok(_ref("ExecutionList")), **_err(400, 401)},
            }
        },
        f"{_P}/cluster/status": {
            "get": {
                "operationId": "clusterStatus",
                "summary": "This node's view of the cluster",
                "tags": ["cluster"],
                "responses": {"200": _ok(_ref("ClusterStatus")), **_err(401)},
            }
        },
        f"{_P}/cluster/leader": {
            "get": {
                "operationId": "clusterLeader",
                "summary": "Who leads",
                "tags": ["cluster"],
                "responses": {"200": _ok(_ref("LeaderInfo")), **_err(401)},
            }
        },
        f"{_P}/cluster/stats": {
            "get": {
                "operationId": "clusterStats",
                "summary": "Per-node statistics",
                "tags": ["cluster"],
                "responses": {"200": _ok(_ref("ClusterStats")), **_err(401)},
            }
        },
        f"{_P}/cluster/transfer-leader": {
            "post": {
                "operationId": "transferLeader",
                "summary": "Hand leadership to another voter (the admin transfer-leader command)",
                "tags": ["cluster"],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("TransferLeaderRequest")}},
                },
                "responses": {"200": _ok(_ref("TransferLeader")), **_err(400, 409, 415, *_WRITE_ERRORS)},
            }
        },
        f"{_P}/stats": {
            "get": {
                "operationId": "stats",
                "summary": "This node's statistics and task counts (or another member's)",
                "tags": ["stats"],
                "parameters": [
                    _param("node_id", "query", {"type": "string", "maxLength": 256},
                           "Answer for this member (asked over its HTTP API)"),
                    _param("local", "query", {"type": "string", "enum": ["0", "1", "true", "false"]}, "1: this node only"),
                ],
                "responses": {"200": _ok(_ref("Stats")), **_err(400, 401, 404, 503)},
            }
        },
        f"{_P}/flows": {
            "get": {
                "operationId": "listFlows",
                "summary": "Every flow with settings or recent fires, with the leader's live figures",
                "tags": ["flows"],
                "responses": {"200": _ok(_ref("FlowList")), **_err(401, 503)},
            }
        },
        f"{_P}/flows/{{key}}": {
            "get": {
                "operationId": "getFlow",
                "summary": "One flow's settings and live figures",
                "tags": ["flows"],
                "parameters": [_FLOW_KEY],
                "responses": {"200": _ok(_ref("FlowView")), **_err(400, 401, 404, 503)},
            },
            "put": {
                "operationId": "putFlow",
                "summary": "Set a flow's limits (replaced whole; replicated through Raft)",
                "tags": ["flows"],
                "parameters": [_FLOW_KEY],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("FlowLimitsBody")}}},
                # 404: a namespace's own flow of a namespace that does not exist; 409: the namespace's
                # flows are at MAX_NAMESPACE_FLOWS
                "responses": {"200": _ok(_ref("FlowView")), **_err(400, 404, 409, 413, 415, *_WRITE_ERRORS)},
            },
            "delete": {
                "operationId": "deleteFlow",
                "summary": "Forget a flow's limits (its fires go unlimited)",
                "tags": ["flows"],
                "parameters": [_FLOW_KEY],
                "responses": {"200": _ok(_ref("FlowView")), **_err(400, 404, *_WRITE_ERRORS)},
            },
        },
        f"{_P}/flows/{{key}}/pause": {
            "post": {
                "operationId": "pauseFlow",
                "summary": "Hold every fire of the flow (only the paused flag changes)",
                "tags": ["flows"],
                "parameters": [_FLOW_KEY],
                "responses": {"200": _ok(_ref("FlowView")), **_err(400, 404, 409, *_WRITE_ERRORS)},
            }
        },
        f"{_P}/flows/{{key}}/resume": {
            "post": {
                "operationId": "resumeFlow",
                "summary": "Let the flow's held fires go, in order, within its limits",
                "tags": ["flows"],
                "parameters": [_FLOW_KEY],
                "responses": {"200": _ok(_ref("FlowView")), **_err(400, *_WRITE_ERRORS)},
            }
        },
        f"{_P}/timewheel/distribution": {
            "get": {
                "operationId": "wheelDistribution",
                "summary": "Occupancy of the leader's time wheel per level and bucket",
                "tags": ["stats"],
                "responses": {"200": _ok(_ref("WheelDistribution")), **_err(401, 503)},
            }
        },
        f"{_P}/timewheel/distribution.png": {
            "get": {
                "operationId": "wheelDistributionPng",
                "summary": "The time wheel's occupancy as a PNG heatmap",
                "tags": ["stats"],
                "parameters": [
                    _param("level", "query", {"type": "integer", "minimum": 0, "maximum": wheel_levels - 1},
                           "Only this level (default: all)"),
                    _param(
                        "width", "query", {"type": "integer", "minimum": 400, "maximum": 4000, "default": 800}, "Pixels"
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "PNG image",
                        "content": {"image/png": {"schema": {"type": "string", "contentMediaType": "image/png"}}},
                    },
                    **_err(400, 401, 503),
                },
            }
        },
        f"{_P}/schedule/preview": {
            "get": {
                "operationId": "schedulePreview",
                "summary": "Next fire times of a cron or fixed-rate schedule in a time zone",
                "tags": ["tasks"],
                "parameters": [
                    _param("type", "query", {"type": "string", "enum": ["periodic", "delayed"], "default": "periodic"}, "Task type"),
                    _param("cron_expr", "query", {"type": "string", "maxLength": DEFAULT_LIMITS.max_cron_length},
                           "Cron expression (5 or 6 fields)"),
                    _param("timezone", "query", {**_zone_schema(), "default": "UTC"}, "IANA time zone"),
                    _param("interval_ms", "query", {"type": "integer", "minimum": 0, "maximum": DEFAULT_LIMITS.max_delay_ms},
                           "Period (periodic) or delay (delayed)"),
                    _param("run_at", "query", _EPOCH_MS, "Delayed: the absolute fire time"),
                    _param("count", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 5}, "How many"),
                    _param("after", "query", _EPOCH_MS, "Start (epoch ms, default now)"),
                ],
                "responses": {"200": _ok(_ref("SchedulePreview")), **_err(400, 401)},
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics of this node (text exposition format)",
                "tags": ["meta"],
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_err(401),
                },
            }
        },
        f"{_P}/stats/series": {
            "get": {
                "operationId": "statsSeries",
                "summary": "Fires, failures, retries and lateness over the last hour or day (the cluster's, or this node's)",
                "tags": ["stats"],
                "parameters": [
                    _param("range", "query", {"type": "string", "enum": [s.value for s in Span], "default": "hour"},
                           "hour: 360 buckets of 10 s; day: 288 buckets of 5 min"),
                    _param("local", "query", {"type": "string", "enum": ["0", "1", "true", "false"]}, "1: this node only"),
                ],
                "responses": {"200": _ok(_ref("FireSeries")), **_err(400, 401)},
            }
        },
        f"{_P}/stats/urls": {
            "get": {
                "operationId": "urlStats",
                "summary": "Callback latency p50/p90/p99 per URL with a trend",
                "tags": ["stats"],
                "parameters": [
                    _param("since", "query", _EPOCH_MS, "Window start (default: until - 1 h)"),
                    _param("until", "query", _EPOCH_MS, "Window end (default: now)"),
                    _param("url", "query", {"type": "string", "maxLength": MAX_URL_FILTER}, "Only this callback URL"),
                    _param(
                        "bucket_ms",
                        "query",
                        {"type": "integer", "minimum": 60000, "maximum": MAX_STATS_WINDOW_MS, "default": 300000},
                        "Trend bucket width (ms)",
                    ),
                    _LIMIT,
                ],
                "responses": {"200": _ok(_ref("UrlStatsList")), **_err(400, 401)},
            }
        },
        f"{_P}/test/callback": {
            "post": {
                "operationId": "testCallback",
                "summary": "Built-in callback target: answers {ok: true} after 100 ms",
                "tags": ["test"],
                **open_,
                "requestBody": _ANY_BODY,
                "responses": {"200": _ok(_ref("Ok")), **_err(413)},
            }
        },
        f"{_P}/test/ack": {
            "post": {
                "operationId": "testAck",
                "summary": "Built-in ACK target: answers {ok: true} after 100 ms",
                "tags": ["test"],
                **open_,
                "requestBody": _ANY_BODY,
                "responses": {"200": _ok(_ref("Ok")), **_err(413)},
            }
        },
        f"{_P}/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "tags": ["meta"],
                **open_,
                "responses": {"200": _ok({"type": "object"})},
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: the process answers",
                "tags": ["meta"],
                **open_,
                "responses": {"200": _ok(_ref("Health"))},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: a leader is known",
                "tags": ["meta"],
                **open_,
                "responses": {"200": _ok(_ref("Ready")), **_err(503)},
            }
        },
    }


def _responses() -> dict[str, Any]:
    err = _ref("Error")
    return {
        "BadRequest": _json(err, "Invalid request; error.field names the culprit"),
        "Unauthorized": {
            **_json(err, "Missing or wrong bearer token"),
            "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        },
        "NotFound": _json(err, "No such task (or flow, dead letter or node: the path names which)"),
        "Conflict": _json(err, "Illegal transition for the task's status (or a namespace that exists or still "
                               "holds tasks: code conflict)"),
        "Forbidden": _json(err, "The key's role may not do this, or the request names a namespace outside the "
                                "key's (code forbidden). A named object outside them is 404, as a missing one"),
        "TooManyRequests": {
            **_json(err, "Too many bad keys from this address (code too_many_requests), or over a namespace's quota "
                         "(code quota_exceeded; error.quota names it): wait Retry-After seconds"),
            "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
        },
        "PreconditionFailed": _json(err, "If-Match names another version of the task's definition; nothing changed"),
        "TooLarge": _json(err, "Body or payload too large"),
        "UnsupportedMediaType": _json(err, "Content-Type is not application/json"),
        "RequestTooLong": _json(err, "The request line is longer than http.max_request_line_bytes (code http_error); "
                                "the connection is closed"),
        "HeadTooLarge": _json(err, "More than http.max_header_count headers, or a head over http.max_head_bytes "
                              "(code http_error); the connection is closed"),
        "NotLeader": {
            **_json(err, "This node is a follower: repeat the request at Location (the leader)"),
            "headers": {
                "Location": {"schema": {"type": "string"}, "description": "Same path on the leader"},
                "X-Molens-Leader": {"schema": {"type": "string"}, "description": "Leader's HTTP base URL"},
                "X-Molens-Leader-Id": {"schema": {"type": "string"}, "description": "Leader's node id"},
            },
        },
        "Unavailable": {
            **_json(err, "No leader (code no_leader), outcome unknown (code outcome_unknown), or this node cannot answer "
                    "now (code unavailable: e.g. a linearizable read without a leader's confirmation); retry later"),
            "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
        },
        "InsufficientStorage": {
            **_json(err, "This node cannot write its disk (code insufficient_storage): nothing was applied; "
                    "it takes writes again by itself once space returns. Retry later"),
            "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
        },
    }


_DL_FILTER_PROPS: dict[str, Any] = {  # query parameters; in a redrive's body each may also be null
    "task_id": {"type": "string", "minLength": 1, "maxLength": 300, "description": "Only this task's"},
    "flow": {
        "type": "string", "minLength": 1, "maxLength": 300,
        "description": "Only this flow's (the callback URL's host:port by default)",
    },
    "kind": {"type": "string", "enum": [k.value for k in FailureKind]},
    "since": {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS, "description": "written at or after (epoch ms)"},
    "until": {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS, "description": "written at or before (epoch ms)"},
    "namespace": {**_NAMESPACE_SCHEMA, "description": "Only this namespace's (403 outside the key's namespaces)"},
}
_DL_FILTERS = [_param(k, "query", v, v.get("description", f"Only this {k}")) for k, v in _DL_FILTER_PROPS.items()]
_DL_ID = _param("dead_id", "path", {"type": "string"}, "Dead letter id ({fire_id}.{attempt})", required=True)


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema``, or null (a body field the server reads as absent when null)."""
    return {"anyOf": [{k: v for k, v in schema.items() if k != "description"}, {"type": "null"}],
            **({"description": schema["description"]} if "description" in schema else {})}


def _dead_letter_schemas() -> dict[str, Any]:
    dead = record_schema(DeadLetter)
    bulk_props: dict[str, Any] = {
        "matched": {"type": "integer"},
        "redriven": {"type": "integer"},
        "deleted": {"type": "integer"},
        "error_count": {"type": "integer"},
        "errors": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "error": {"type": "string"}, "message": {"type": "string"}}}},
        "more": {"type": "boolean", "description": "More matched than limit, or the request was interrupted: "
                                                   "send it again"},
        "interrupted": {"type": "object", "description": "Leadership moved (or the node stopped taking writes) "
                        "after part of the request applied: what the counts say applied, the rest did not",
                        "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
        "at_most_once": {"type": "integer"},
        "warning": {"type": "string"},
    }
    return {
        "DeadLetter": dead,
        "DeadLetterRedriven": {
            "type": "object", "required": dead["required"],
            "properties": {**dead["properties"],
                           "warning": {"type": "string", "description": "Set for an at_most_once redrive"}},
        },
        "DeadLetterList": {
            "type": "object", "required": ["items", "next_cursor"],
            "properties": {"items": {"type": "array", "items": _ref("DeadLetter")}, "next_cursor": _nullable("string")},
        },
        "DeadLetterFilter": {
            "type": "object", "additionalProperties": False,
            "properties": {**{k: _or_null(v) for k, v in _DL_FILTER_PROPS.items()},
                           "limit": {"type": "integer", "minimum": 1, "maximum": 10_000}},
        },
        "DeadLetterBulk": {"type": "object", "required": ["matched", "error_count", "errors", "more"],
                           "properties": bulk_props},
    }


def _dead_letter_paths() -> dict[str, Any]:
    tags = ["dead-letters"]
    return {
        f"{_P}/dead-letters": {
            "get": {
                "operationId": "listDeadLetters", "summary": "Dead letters, newest first", "tags": tags,
                "parameters": [*_DL_FILTERS, _CURSOR, _LIMIT],
                "responses": {"200": _ok(_ref("DeadLetterList")), **_err(400, 401)},
            },
            "delete": {
                "operationId": "deleteDeadLetters", "summary": "Delete the dead letters matching a filter",
                "tags": tags,
                "parameters": [*_DL_FILTERS, _param("all", "query", {"type": "string", "enum": ["true"]},
                                                     "Delete every dead letter (no filter)"),
                               _param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10_000},
                                      "At most this many (10,000)")],
                "responses": {"200": _ok(_ref("DeadLetterBulk")), **_err(400, *_WRITE_ERRORS)},
            },
        },
        f"{_P}/dead-letters/redrive": {
            "post": {
                "operationId": "redriveDeadLetters", "summary": "Redrive every dead letter matching a filter",
                "tags": tags,
                "requestBody": {"required": True,
                                "content": {"application/json": {"schema": _ref("DeadLetterFilter")}}},
                "responses": {"200": _ok(_ref("DeadLetterBulk")), **_err(400, 415, *_WRITE_ERRORS)},
            }
        },
        f"{_P}/dead-letters/{{dead_id}}": {
            "get": {
                "operationId": "getDeadLetter", "summary": "One dead letter", "tags": tags, "parameters": [_DL_ID],
                "responses": {"200": _ok(_ref("DeadLetter")), **_err(401, 404)},
            },
            "delete": {
                "operationId": "deleteDeadLetter", "summary": "Delete one dead letter", "tags": tags,
                "parameters": [_DL_ID],
                "responses": {"200": _ok({"type": "object", "properties": {"deleted": {"type": "integer"}}}),
                              **_err(404, *_WRITE_ERRORS)},
            },
        },
        f"{_P}/dead-letters/{{dead_id}}/redrive": {
            "post": {
                "operationId": "redriveDeadLetter",
                "summary": "Deliver the dead letter's occurrence again (same X-Fire-ID, attempts continuing)",
                "tags": tags, "parameters": [_DL_ID],
                "responses": {"200": _ok(_ref("DeadLetterRedriven")), **_err(404, 409, *_WRITE_ERRORS)},
            }
        },
    }


def _audit_schemas() -> dict[str, Any]:
    change = {"type": "object", "required": ["old", "new"], "properties": {"old": {}, "new": {}}}
    props: dict[str, Any] = {
        "id": {"type": "string", "description": "{raft index}.{n}: the order entries were applied in"},
        "at": {"type": "integer", "description": "When the change applied (the leader's epoch ms)"},
        "actor": {"type": "object", "required": ["key_id", "name"],
                  "properties": {"key_id": {"type": "string"}, "name": {"type": "string"}}},
        "action": {"type": "string", "enum": list(AUDIT_ACTIONS)},
        "namespace": {"type": "string"},
        "target": {"type": "string", "description": "Task id, dead letter id, flow key or node id"},
        "changes": {"type": "object", "additionalProperties": change,
                    "description": "The fields that changed; payloads and URL passwords elided"},
        "remote_addr": {"type": "string"},
    }
    return {
        "AuditEntry": {"type": "object", "required": list(props), "properties": props},
        "AuditPage": {
            "type": "object", "required": ["items", "next_cursor"],
            "properties": {"items": {"type": "array", "items": _ref("AuditEntry")}, "next_cursor": _nullable("string")},
        },
    }


def _audit_paths() -> dict[str, Any]:
    ok = _ok(_ref("AuditPage"), "A page of entries")
    params = [
        _param("namespace", "query", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,62}$"}, "Only this namespace"),
        _param("actor", "query", {"type": "string", "maxLength": 200}, "Only this key id or key name"),
        _param("action", "query", {"type": "string", "enum": list(AUDIT_ACTIONS)}, "Only this action"),
        _param("since", "query", _EPOCH_MS, "Only entries at or after (epoch ms)"),
        _param("until", "query", _EPOCH_MS, "Only entries before (epoch ms)"),
        _CURSOR, _LIMIT,
    ]
    return {f"{_P}/audit": {"get": {
        "operationId": "listAudit", "summary": "The audit trail (who changed what), newest first", "tags": ["audit"],
        "parameters": params, "responses": {"200": ok, **_err(400, 401)},
    }}}


_EDGE_ANSWERS = {"414": {"$ref": "#/components/responses/RequestTooLong"},
                 "431": {"$ref": "#/components/responses/HeadTooLarge"}}
"""What the HTTP edge answers for any route (molens/web/edge.py): a request line or head past its limits."""


_KEY_ANSWERS = {"403": {"$ref": "#/components/responses/Forbidden"},
                "429": {"$ref": "#/components/responses/TooManyRequests"}}
"""What any route that takes a key may answer (molens/web/access.py): a role or namespace it may not
use, or an address slowed down for bad keys."""


def _with_edge_answers(paths: dict[str, Any]) -> dict[str, Any]:
    for item in paths.values():
        for op in item.values():
            op["responses"].update(_EDGE_ANSWERS)
            if op.get("security") != []:
                op["responses"].update(_KEY_ANSWERS)
    return paths


_EXPORTS = (f"{_P}/tasks", f"{_P}/executions", f"{_P}/tasks/{{task_id}}/executions", f"{_P}/dead-letters", f"{_P}/audit")
"""The lists that export every matching row with ``?format=csv|jsonl`` (molens/web/export.py)."""


def _with_exports(paths: dict[str, Any]) -> dict[str, Any]:
    for path in _EXPORTS:
        op = paths[path]["get"]
        op["parameters"] += [
            _param("format", "query", {"type": "string", "enum": ["json", "csv", "jsonl"], "default": "json"},
                   "csv or jsonl: every matching row, streamed (no cursor or limit), as a download"),
            _param("ticket", "query", {"type": "string", "pattern": TICKET_PATTERN},
                   "A one-time ticket from POST /api/v1/exports in place of the key (a download link)"),
        ]
        ok = op["responses"]["200"]
        ok["description"] += "; with format=csv or jsonl every matching row"
        ok["content"]["text/csv"] = {"schema": {"type": "string"}}
        ok["content"]["application/x-ndjson"] = {"schema": {"type": "string"}}
    paths[f"{_P}/exports"] = {"post": {
        "operationId": "createExportLink", "summary": "A one-time link to an export, for a browser download",
        "tags": ["meta"],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["url"], "additionalProperties": False,
            "properties": {"url": {"type": "string", "maxLength": 4096, "pattern": EXPORT_URL_PATTERN,
                                   "description": "An export's path and query, format first: "
                                                  "/api/v1/tasks?format=csv&status=failed"}},
        }}}},
        "responses": {"201": _ok({
            "type": "object", "required": ["url", "expires_in_s"],
            "properties": {"url": {"type": "string", "description": "The same with a ticket: GET it once, "
                                   "on this node, without a key"},
                           "expires_in_s": {"type": "number"}},
        }, "The link"), **_err(400, 401, 413, 415)},
    }}
    return paths


def _tenancy_schemas() -> dict[str, Any]:
    comps = msgspec.json.schema_components((NamespaceBody, NamespacePatch, KeyBody),
                                           ref_template="#/components/schemas/{name}")[1]
    comps["NamespaceBody"]["properties"]["name"]["pattern"] = NAMESPACE_PATTERN  # as declared, not as re reads it
    comps["KeyBody"]["properties"]["namespaces"]["items"] = {
        "anyOf": [_NAMESPACE_SCHEMA, {"type": "string", "enum": ["*"]}]}
    key_props: dict[str, Any] = {
        "id": {"type": "string", "description": "Key id (also the secret's second part)"},
        "name": {"type": "string"},
        "role": {"type": "string", "enum": [r.value for r in KeyRole]},
        "namespaces": {"type": "array", "items": {"type": "string"}, "description": 'Its namespaces, or ["*"]'},
        "created_at": {"type": "integer"},
        "last_used_at": {**_nullable("integer"), "description": "When this node last admitted it (null: not since "
                                                                 "the node started)"},
    }
    ns_props: dict[str, Any] = {
        "name": _NAMESPACE_SCHEMA,
        "quotas": _ref("QuotasBody"),
        "created_at": {"type": "integer"},
        "updated_at": {"type": "integer"},
    }
    return {
        **comps,
        "Namespace": {"type": "object", "required": list(ns_props), "properties": ns_props},
        "NamespaceList": {"type": "object", "required": ["items", "next_cursor"],
                          "properties": {"items": {"type": "array", "items": _ref("Namespace")},
                                         "next_cursor": {"type": "null"}}},
        "ApiKey": {"type": "object", "required": list(key_props), "properties": key_props},
        "ApiKeyCreated": {
            "type": "object", "required": [*key_props, "secret"],
            "properties": {**key_props, "secret": {"type": "string", "description": "Shown this once only: send it as "
                                                   "Authorization: Bearer <secret>"}},
        },
        "WhoAmI": {"type": "object", "required": ["key_id", "name", "role", "namespaces", "open"],
                   "properties": {"key_id": {"type": "string", "description": "Key id (bootstrap: the config's "
                                             "token; anonymous: no key, on an open node)"},
                                  "name": {"type": "string"}, "role": key_props["role"],
                                  "namespaces": key_props["namespaces"],
                                  "open": {"type": "boolean", "description": "The node has no http.auth_token and "
                                           "the request came without a key"}}},
        "ApiKeyList": {"type": "object", "required": ["items", "next_cursor"],
                       "properties": {"items": {"type": "array", "items": _ref("ApiKey")},
                                      "next_cursor": {"type": "null"}}},
    }


def _tenancy_paths() -> dict[str, Any]:
    name = _param("name", "path", _NAMESPACE_SCHEMA, "Namespace name")
    key_id = _param("key_id", "path", {"type": "string", "pattern": "^[0-9a-f]{16}$"}, "Key id")
    ns, keys = ["namespaces"], ["keys"]

    def body(schema: str) -> dict[str, Any]:
        return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}

    return {
        f"{_P}/namespaces": {
            "get": {"operationId": "listNamespaces", "summary": "The namespaces the key may read (default first)",
                    "tags": ns, "parameters": [_NAMESPACE_FILTER],
                    "responses": {"200": _ok(_ref("NamespaceList")), **_err(400, 401)}},
            "post": {"operationId": "createNamespace", "summary": "Create a namespace (admin)", "tags": ns,
                     "requestBody": body("NamespaceBody"),
                     "responses": {"201": _ok(_ref("Namespace"), "Created"), **_err(400, 409, 415, *_WRITE_ERRORS)}},
        },
        f"{_P}/namespaces/{{name}}": {
            "get": {"operationId": "getNamespace", "summary": "One namespace", "tags": ns, "parameters": [name],
                    "responses": {"200": _ok(_ref("Namespace")), **_err(401, 404)}},
            "patch": {"operationId": "updateNamespace", "summary": "Replace a namespace's quotas (admin)", "tags": ns,
                      "parameters": [name], "requestBody": body("NamespacePatch"),
                      "responses": {"200": _ok(_ref("Namespace")), **_err(400, 404, 409, 415, *_WRITE_ERRORS)}},
            "delete": {"operationId": "deleteNamespace", "summary": "Delete an empty namespace (admin)", "tags": ns,
                       "parameters": [name],
                       "responses": {"200": _ok({"type": "object", "properties": {"deleted": {"type": "string"}}}),
                                     **_err(404, 409, *_WRITE_ERRORS)}},
        },
        f"{_P}/keys": {
            "get": {"operationId": "listKeys", "summary": "Every API key, without secrets (admin)", "tags": keys,
                    "responses": {"200": _ok(_ref("ApiKeyList")), **_err(401)}},
            "post": {"operationId": "createKey", "summary": "Create an API key; the answer holds its secret, "
                     "shown this once (admin)", "tags": keys, "requestBody": body("KeyBody"),
                     "responses": {"201": _ok(_ref("ApiKeyCreated"), "Created"),
                                   **_err(400, 404, 415, *_WRITE_ERRORS)}},
        },
        f"{_P}/whoami": {
            "get": {"operationId": "whoAmI", "summary": "The request's key: id, name, role, namespaces (any role)",
                    "tags": keys, "responses": {"200": _ok(_ref("WhoAmI")), **_err(401)}},
        },
        f"{_P}/keys/{{key_id}}": {
            "get": {"operationId": "getKey", "summary": "One API key, without its secret (admin)", "tags": keys,
                    "parameters": [key_id], "responses": {"200": _ok(_ref("ApiKey")), **_err(401, 404)}},
            "delete": {"operationId": "deleteKey", "summary": "Revoke an API key on every node (admin)", "tags": keys,
                       "parameters": [key_id],
                       "responses": {"200": _ok({"type": "object", "properties": {"deleted": {"type": "string"}}}),
                                     **_err(404, 409, *_WRITE_ERRORS)}},
        },
    }


@functools.cache
def _document(wheel_levels: int) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Molens REST API",
            "version": __version__,
            "description": "Delayed, periodic and cron HTTP callbacks on a Raft-replicated scheduler. "
            "Times are epoch milliseconds. Writes must reach the leader: followers answer 307.",
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}, {}],
        "tags": [{"name": n} for n in ("tasks", "executions", "dead-letters", "flows", "namespaces", "keys", "audit",
                                       "cluster", "stats", "test", "meta")],
        "paths": _with_edge_answers(_with_exports({**_paths(wheel_levels), **_dead_letter_paths(),
                                                   **_tenancy_paths(), **_audit_paths()})),
        "components": {
            "schemas": {**_schemas(), **_dead_letter_schemas(), **_tenancy_schemas(), **_audit_schemas()},
            "responses": _responses(),
            "headers": {
                "X-Molens-Role": {
                    "schema": {"type": "string"},
                    "description": "The answering node's Raft role (leader, follower, candidate, ...)",
                }
            },
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }


def document(wheel_levels: int | None = None) -> dict[str, Any]:
    """A fresh copy of the OpenAPI document; ``wheel_levels`` is the node's (``scheduler.tick_ms``
    decides it; the default tick's when None)."""
    return copy.deepcopy(_document(wheel_levels or levels_for()))


__all__ = ["document"]
