"""The time wheel's occupancy: the JSON the console draws and a PNG heatmap rendered with Pillow.

:class:`WheelDistribution` is what the leader's wheel looks like at one instant: per level, the
timer count of each of its ``size`` buckets counted from the current one (bucket ``i`` of level
``l`` covers ``[start_ms + i * span_ms, start_ms + (i + 1) * span_ms)``), plus the overflow set.
The leader's wheel holds only the near-term window (docs/architecture.md#near-term-window), so
:class:`FarFuture` adds, separately, the ``due`` index by UTC day from the day the window ends
(whole days: the first one also counts its part inside the window), read from the store's per-day
counts.

:func:`render_png` draws one band per level: a grid of ``COLUMNS`` buckets per row (so 512 buckets
are 8 rows), colour on a log scale (empty = light grey, then blue to dark red) shared by all levels
drawn, row labels with the offset from now, column ticks, a title per level and a legend. Layout
is computed from ``width`` so the picture stays readable from 400 to 4000 px (800 px is the target).
"""

from __future__ import annotations

import colorsys
import functools
import io
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from molens.schedule.wheel import HierarchicalWheel

log = logging.getLogger(__name__)

MIN_WIDTH = 400
MAX_WIDTH = 4000
DEFAULT_WIDTH = 800
COLUMNS = 64
"""Buckets per grid row."""
DAY_MS = 86_400_000
FAR_DAYS = 384
"""Days of the far future listed (and drawn: six rows); ``total`` counts every day."""

_BG = (255, 255, 255)
_EMPTY = (243, 245, 249)
_TEXT = (34, 40, 49)
_MUTED = (110, 118, 130)
_GRID = (225, 229, 236)


@dataclass(frozen=True, slots=True)
class WheelLevel:
    """One level's buckets, from the current one on."""

    level: int
    start_ms: int
    span_ms: int
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "start_ms": self.start_ms,
            "span_ms": self.span_ms,
            "total": self.total,
            "counts": list(self.counts),
        }


@dataclass(frozen=True, slots=True)
class FarFuture:
    """Due entries per UTC day from ``from_ms``'s day (``FAR_DAYS`` of them), and the window they follow."""

    from_ms: int
    days: tuple[tuple[int, int], ...]
    """``(day start ms, due entries)`` of the days that have any, in order."""
    total: int
    """Due entries from ``from_ms``'s day on, all days."""
    horizon_ms: int | None = None
    """The leader's ``scheduler.wheel_horizon_ms`` (None without a scheduler)."""

    def counts(self) -> tuple[int, ...]:
        """Entries per day for ``FAR_DAYS`` days from ``from_ms``'s day (zeros included)."""
        first = self.from_ms // DAY_MS
        out = [0] * FAR_DAYS
        for start, n in self.days:
            i = start // DAY_MS - first
            if 0 <= i < FAR_DAYS:
                out[i] = n
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "from_ms": self.from_ms, "day_ms": DAY_MS, "total": self.total,
            "days": [{"start_ms": start, "count": n} for start, n in self.days],
        }


def far_future_of(rows: Sequence[tuple[int, int]], from_ms: int, horizon_ms: int | None) -> FarFuture:
    """From ``(day start ms, count)`` rows (every day from ``from_ms``'s day on)."""
    last = (from_ms // DAY_MS + FAR_DAYS) * DAY_MS
    return FarFuture(from_ms, tuple(r for r in rows if r[0] < last), sum(n for _, n in rows), horizon_ms)


@dataclass(frozen=True, slots=True)
class WheelDistribution:
    """The wheel at ``time_ms``: every level, the overflow set and the total timer count."""

    time_ms: int
    tick_ms: int
    size: int
    levels: tuple[WheelLevel, ...]
    overflow: int
    timers: int
    far: FarFuture | None = None
    """The ``due`` index beyond the in-memory window."""

    def to_json(self) -> dict[str, Any]:
        far = self.far
        return {
            "time_ms": self.time_ms,
            "tick_ms": self.tick_ms,
            "wheel_size": self.size,
            "timers": self.timers,
            "overflow": self.overflow,
            "levels": [lv.to_json() for lv in self.levels],
            "window": None if far is None or far.horizon_ms is None else {"horizon_ms": far.horizon_ms, "until_ms": far.from_ms},
            "far_future": None if far is None else far.to_json(),
        }


def distribution_of(wheel: HierarchicalWheel[Any], now_ms: int, far: FarFuture | None = None) -> WheelDistribution:
    """Read every level of ``wheel`` (call it on the wheel's owner thread)."""
    levels = []
    for lv in range(wheel.levels):
        cells = wheel.distribution(lv)
        levels.append(WheelLevel(lv, cells[0].start_ms, cells[0].span_ms, tuple(c.count for c in cells)))
    return WheelDistribution(
        time_ms=now_ms, tick_ms=wheel.tick_ms, size=wheel.wheel_size, levels=tuple(levels),
        overflow=wheel.overflow_count, timers=len(wheel), far=far,
    )


def color(count: int, max_count: int) -> tuple[int, int, int]:
    """Log-scale colour of a cell (the console's scale): empty -> grey, 1 -> light blue, max -> dark red."""
    if count <= 0:
        return _EMPTY
    x = math.log1p(count) / math.log1p(max(1, max_count))
    hue = (220 - 220 * x) / 360
    light = (80 - 45 * x) / 100
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.7)
    return round(r * 255), round(g * 255), round(b * 255)


def fmt_duration(ms: int) -> str:
    """``750 ms``, ``5.12 s``, ``43.7 min``, ``15.5 d`` -- short labels for spans and offsets."""
    if ms < 1000:
        return f"{ms} ms"
    for unit, size in (("y", 31_557_600_000), ("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms >= size:
            return f"{ms / size:.3g} {unit}"
    return f"{ms / 1000:.3g} s"


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError, ImportError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def render_png(dist: WheelDistribution, width: int = DEFAULT_WIDTH, level: int | None = None) -> bytes:
    """The heatmap of ``dist`` (all levels, or just ``level``) as a PNG exactly ``width`` px wide."""
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise ValueError(f"width must be in {MIN_WIDTH}..{MAX_WIDTH}, got {width}")
    levels: Sequence[WheelLevel] = dist.levels if level is None else [lv for lv in dist.levels if lv.level == level]
    scale = width / DEFAULT_WIDTH
    fs = max(11, round(13 * scale))
    font, small = _font(fs), _font(max(10, fs - 2))
    margin_l = round(78 * scale)
    margin_r = round(16 * scale)
    cell = max(3, (width - margin_l - margin_r) // COLUMNS)
    grid_w = cell * COLUMNS
    line = fs + 6
    max_count = max([1, *(c for lv in levels for c in lv.counts)])

    bands = []
    for lv in levels:
        rows = max(1, math.ceil(len(lv.counts) / COLUMNS))
        bands.append((lv, rows, 2 * line + rows * cell + line))
    far = dist.far if level is None else None
    far_counts = far.counts() if far is not None else ()
    far_h = 2 * line + (FAR_DAYS // COLUMNS) * cell + line if far is not None else 0
    legend_h = 3 * line
    height = line + 8 + sum(b[2] for b in bands) + far_h + legend_h + (line if not levels else 0)

    img = Image.new("RGB", (width, height), _BG)
    d = ImageDraw.Draw(img)
    title = f"Time wheel occupancy: {dist.timers:,} timers, tick {fmt_duration(dist.tick_ms)}"
    d.text((8, 4), title, fill=_TEXT, font=font)
    y = line + 8
    if not levels:
        d.text((8, y), "no level to show", fill=_MUTED, font=font)
        y += line
    def grid(y: int, head: str, unit: str, labels: list[str], counts: Sequence[int], top: int) -> int:
        """Draw one band (a head line, column ticks, a row of cells per label) from ``y``; return the
        ``y`` below it."""
        d.text((8, y), head, fill=_TEXT, font=font)
        y += line
        for c in range(0, COLUMNS, 16):  # column ticks: bucket (or day) index within the row
            x = margin_l + c * cell
            d.line([(x, y + line - 4), (x, y + line - 1)], fill=_MUTED)
            d.text((x + 2, y), f"+{c}{unit}", fill=_MUTED, font=small)
        y += line
        for r, label in enumerate(labels):
            d.text((8, y + (cell - fs) // 2 - 1), label, fill=_MUTED, font=small)
            for c in range(min(COLUMNS, len(counts) - r * COLUMNS)):
                x0 = margin_l + c * cell
                d.rectangle([x0, y, x0 + cell - 2, y + cell - 2], fill=color(counts[r * COLUMNS + c], top))
            y += cell
        return y + line

    for lv, rows, _band_h in bands:
        head = (
            f"Level {lv.level}: bucket {fmt_duration(lv.span_ms)}, "
            f"window {fmt_duration(lv.span_ms * len(lv.counts))}, {lv.total:,} timers"
        )
        labels = ["now" if r == 0 else "+" + fmt_duration(r * COLUMNS * lv.span_ms) for r in range(rows)]
        y = grid(y, head, "", labels, lv.counts, max_count)
    if far is not None:  # the due index beyond the window, by day, on its own colour scale
        head = (f"Far future (due index, by UTC day from the window's end): {far.total:,} tasks, "
                f"busiest day {max(far_counts, default=0):,}")
        labels = ["window end" if r == 0 else f"+{r * COLUMNS} d" for r in range(FAR_DAYS // COLUMNS)]
        y = grid(y, head, " d", labels, far_counts, max([1, *far_counts]))

    # legend: the log colour scale with its ends, and the overflow set
    d.line([(8, y - line // 2), (width - 8, y - line // 2)], fill=_GRID)
    bar_x, bar_w = margin_l, min(grid_w, round(320 * scale))
    d.text((8, y + 2), "timers", fill=_MUTED, font=small)
    for i in range(bar_w):
        n = round(math.expm1(math.log1p(max_count) * (i + 1) / bar_w))
        d.line([(bar_x + i, y + 2), (bar_x + i, y + line - 2)], fill=color(max(1, n), max_count))
    d.text((bar_x, y + line), "1", fill=_TEXT, font=small)
    d.text((bar_x + bar_w - 6 * len(f"{max_count:,}"), y + line), f"{max_count:,}", fill=_TEXT, font=small)
    d.rectangle([bar_x + bar_w + 16, y + 2, bar_x + bar_w + 16 + cell, y + 2 + cell], fill=_EMPTY)
    d.text((bar_x + bar_w + 22 + cell, y + 2), "empty (log colour scale)", fill=_MUTED, font=small)
    d.text((bar_x + bar_w + 16, y + line + 2), f"overflow: {dist.overflow:,}", fill=_TEXT, font=small)

    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


__all__ = [
    "COLUMNS", "DEFAULT_WIDTH", "FAR_DAYS", "MAX_WIDTH", "MIN_WIDTH", "FarFuture", "WheelDistribution", "WheelLevel",
    "color", "distribution_of", "far_future_of", "render_png",
]
