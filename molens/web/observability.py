"""Observability routes of the REST app: ``/metrics``, the time wheel's distribution (JSON
and PNG) and the schedule preview. Installed by :func:`molens.web.app.build_api`.

- ``GET /metrics``: Prometheus text (:mod:`molens.web.metrics`); behind the bearer token like the
  API (Prometheus sends one with ``authorization: {credentials: ...}``).
- ``GET /api/v1/timewheel/distribution``: ``{"time_ms", "tick_ms", "wheel_size", "timers",
  "overflow", "levels": [{"level", "start_ms", "span_ms", "total", "counts": [n, ...]}]}`` --
  bucket ``i`` of a level covers ``start_ms + i * span_ms`` for ``span_ms``. The wheel lives on the
  leader: a follower passes the request to the leader and returns its answer (``503`` with no
  leader), so the console on any node can draw it without a cross-origin request.
- ``GET /api/v1/timewheel/distribution.png?level=&width=``: the same as a heatmap
  (:mod:`molens.web.heatmap`); ``level`` omitted = every level; ``width`` 400..4000 (800).
- ``GET /api/v1/schedule/preview?type=periodic&cron_expr=&timezone=|interval_ms=&count=&after=``:
  the next ``count`` (1..100, default 5) fire instants after ``after`` (default now) with the same
  validation as task creation (a bad field is a ``400`` naming it), as epoch ms in ``items`` and
  as ISO-8601 local times of ``timezone`` in ``local``. ``type=delayed`` previews the one fire of
  ``interval_ms`` (from ``after``) or ``run_at``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import bottle
import urllib3

from molens.model import TaskType, ValidationError, check_epoch_ms
from molens.schedule import cron
from molens.schedule.describe import describe_cron, describe_interval
from molens.web import heatmap, metrics
from molens.web.errors import NoLeader, Unavailable

if TYPE_CHECKING:
    from molens.web.app import Api

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
MAX_PREVIEW = 100
DEFAULT_PREVIEW = 5
_http = urllib3.PoolManager(num_pools=4, maxsize=4, retries=False)
_LEADER_TIMEOUT = urllib3.Timeout(connect=1.0, read=5.0)
_PREVIEW_FIELDS = frozenset({"type", "cron_expr", "timezone", "interval_ms", "run_at", "count", "after"})
_PNG_FIELDS = frozenset({"width", "level"})


def install_observability(api: Api) -> None:
    """Register the routes of this module on ``api``."""
    ctx = api.ctx

    @api.route("GET", "/metrics")
    def prometheus() -> bottle.HTTPResponse:
        body = ctx.metrics().render()
        return bottle.HTTPResponse(body, 200, {"Content-Type": metrics.CONTENT_TYPE, "Cache-Control": "no-store"})

    def wheel() -> heatmap.WheelDistribution | bottle.HTTPResponse:
        """This node's wheel, or the leader's answer to the same request (a follower has none)."""
        dist = ctx.wheel_distribution()
        if dist is not None:
            return dist
        li = ctx.leader_info()
        if li.leader_url and not li.is_leader:
            return from_leader(li.leader_url)
        raise NoLeader("the time wheel lives on the leader and no leader is known (or it is rebuilding)")

    @api.route("GET", f"{PREFIX}/timewheel/distribution")
    def wheel_json() -> tuple[int, Any] | bottle.HTTPResponse:
        dist = wheel()
        return dist if isinstance(dist, bottle.HTTPResponse) else (200, dist.to_json())

    @api.route("GET", f"{PREFIX}/timewheel/distribution.png")
    def wheel_png() -> bottle.HTTPResponse:
        _known_only(_PNG_FIELDS)
        width = api.q_int("width", heatmap.DEFAULT_WIDTH, heatmap.MIN_WIDTH, heatmap.MAX_WIDTH)
        assert width is not None
        level = api.q_int("level", None, 0, ctx.settings.wheel_levels - 1)
        dist = wheel()
        if isinstance(dist, bottle.HTTPResponse):
            return dist
        if level is not None and level >= len(dist.levels):  # the leader's wheel has fewer levels than this node's
            raise ValidationError(f"level must be in 0..{len(dist.levels) - 1}, got {level}", "level")
        png = heatmap.render_png(dist, width, level)
        return bottle.HTTPResponse(png, 200, {"Content-Type": "image/png", "Cache-Control": "no-store"})

    @api.route("GET", f"{PREFIX}/schedule/preview")
    def schedule_preview() -> tuple[int, Any]:
        _known_only(_PREVIEW_FIELDS)
        now = ctx.now_ms()
        count = api.q_int("count", DEFAULT_PREVIEW, 1, MAX_PREVIEW)
        after = api.q_ms("after", now)
        assert count is not None and after is not None
        return 200, preview(
            api.q_str("type") or TaskType.PERIODIC.value,
            cron_expr=api.q_str("cron_expr"),
            timezone=api.q_str("timezone"),
            interval_ms=api.q_int("interval_ms", None, 0),
            run_at=api.q_ms("run_at", None),
            count=count,
            after_ms=after,
            min_period_ms=ctx.settings.limits.min_period_ms,
            max_delay_ms=ctx.settings.limits.max_delay_ms,
            max_cron_length=ctx.settings.limits.max_cron_length,
        )


def _known_only(fields: frozenset[str]) -> None:
    """A 400 naming the first query parameter not in ``fields``: a misspelt one is not ignored."""
    for k in bottle.request.query:
        if k not in fields:
            raise ValidationError(f"unknown parameter {k[:40]!r}; this endpoint takes {', '.join(sorted(fields))}",
                                  k[:64])


def from_leader(leader_url: str) -> bottle.HTTPResponse:
    """The leader's answer to this GET (same path, query and bearer token), passed through.

    Why not a 307 as for writes: the console reads the wheel with ``fetch``, and following a
    redirect to another origin fails on CORS with an error in the browser console."""
    req = bottle.request
    qs = req.query_string
    url = leader_url.rstrip("/") + req.path + (f"?{qs}" if qs else "")
    env = req.environ  # headers as sent (latin-1 strings), passed on without decoding them as UTF-8
    headers = {"Accept": env.get("HTTP_ACCEPT", "*/*")}
    auth = env.get("HTTP_AUTHORIZATION")
    if auth:
        headers["Authorization"] = auth
    try:
        r = _http.request("GET", url, headers=headers, timeout=_LEADER_TIMEOUT, redirect=False)
    except urllib3.exceptions.HTTPError as exc:
        raise Unavailable(f"the leader at {leader_url} did not answer: {type(exc).__name__}") from None
    out = {"Content-Type": r.headers.get("Content-Type", "application/octet-stream"), "Cache-Control": "no-store"}
    out["X-Molens-Served-By"] = leader_url
    if "Retry-After" in r.headers:
        out["Retry-After"] = r.headers["Retry-After"]
    return bottle.HTTPResponse(r.data, r.status, out)


def preview(
    type_: str,
    *,
    cron_expr: str | None,
    timezone: str | None,
    interval_ms: int | None,
    run_at: int | None,
    count: int,
    after_ms: int,
    min_period_ms: int = 1_000,
    max_delay_ms: int = 5 * 365 * 86_400_000,
    max_cron_length: int = 256,
) -> dict[str, Any]:
    """The preview answer (see the module docstring); :class:`ValidationError` names the bad field."""
    try:
        ttype = TaskType(type_)
    except ValueError:
        raise ValidationError("type must be 'delayed' or 'periodic'", "type") from None
    tz = timezone or "UTC"
    try:
        cron.validate_timezone(tz)
    except cron.ScheduleError as e:
        raise ValidationError(str(e), "timezone") from None
    if ttype is TaskType.DELAYED:
        if cron_expr is not None:
            raise ValidationError("cron_expr is only for periodic tasks", "cron_expr")
        if (interval_ms is None) == (run_at is None):
            raise ValidationError("a delayed preview needs interval_ms or run_at (one of them)", "interval_ms")
        if interval_ms is not None and interval_ms > max_delay_ms:
            raise ValidationError(f"interval_ms must be at most {max_delay_ms}", "interval_ms")
        items = [run_at if run_at is not None else after_ms + (interval_ms or 0)]
    else:
        if run_at is not None:
            raise ValidationError("run_at is only for delayed tasks", "run_at")
        if (interval_ms is None) == (cron_expr is None):
            raise ValidationError("a periodic preview needs interval_ms or cron_expr (one of them)", "cron_expr")
        if cron_expr is not None:
            if len(cron_expr) > max_cron_length:
                raise ValidationError(f"cron_expr is longer than {max_cron_length}", "cron_expr")
            spec = cron.ScheduleSpec(after_ms, None, cron_expr, tz)
        else:
            assert interval_ms is not None
            if not min_period_ms <= interval_ms <= max_delay_ms:
                raise ValidationError(f"interval_ms must be in {min_period_ms}..{max_delay_ms}", "interval_ms")
            spec = cron.ScheduleSpec(after_ms, interval_ms, None, tz)
        try:
            if cron_expr is not None:
                cron.validate_cron(cron_expr, tz)
            items = cron.preview(spec, after_ms, count)
        except cron.ScheduleError as e:
            err = ValidationError(str(e), e.field)
            err.reason = e.reason
            raise err from None
        except ValueError as e:
            raise ValidationError(str(e) or "invalid schedule", "cron_expr") from None
    for ms in items:
        check_epoch_ms(ms, "run_at" if run_at is not None else "after")
    zone = ZoneInfo(tz)
    try:  # whole seconds then ms: a float of ms / 1000 rounds the last millisecond of year 9999 down
        local = [datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000).astimezone(zone)
                 .isoformat(timespec="milliseconds") for ms in items]
    except OverflowError:  # an instant of 9999-12-31 UTC is already the year 10000 in a zone ahead of UTC
        raise ValidationError(f"the times are past the year 9999 in {tz}: no local time can show them",
                              "timezone") from None
    description = describe_cron(cron_expr) if cron_expr is not None else (
        describe_interval(interval_ms) if ttype is TaskType.PERIODIC and interval_ms is not None else None
    )
    return {"items": items, "local": local, "timezone": tz, "after": after_ms, "description": description}


__all__ = ["install_observability", "preview"]
