"""The time wheel heatmap: a valid PNG of the asked width, different for uniform vs bunched timers."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from PIL import Image, ImageStat

from molens.schedule.wheel import HierarchicalWheel
from molens.web.heatmap import (
    FAR_DAYS,
    MAX_WIDTH,
    MIN_WIDTH,
    WheelDistribution,
    WheelLevel,
    color,
    distribution_of,
    far_future_of,
    render_png,
)

SIZE = 512
TIMERS = 100_000


def _dist(level0: list[int], other: int = 0) -> WheelDistribution:
    levels = [WheelLevel(0, 0, 10, tuple(level0))]
    levels += [WheelLevel(lv, 0, 10 * SIZE**lv, tuple([other] * SIZE)) for lv in (1, 2, 3)]
    return WheelDistribution(
        time_ms=0, tick_ms=10, size=SIZE, levels=tuple(levels), overflow=0, timers=sum(level0) + 3 * SIZE *
        other,
    )


def _uniform() -> WheelDistribution:
    return _dist([TIMERS // SIZE] * SIZE)


def _bunched() -> WheelDistribution:
    counts = [0] * SIZE
    counts[100] = TIMERS  # every timer in one 10 ms bucket
    return _dist(counts)


def _image(png: bytes) -> Image.Image:
    Image.open(io.BytesIO(png)).verify()  # a well-formed PNG (verify() consumes the file)
    img = Image.open(io.BytesIO(png))
    assert img.format == "PNG"
    return img.convert("RGB")


def _colours(img: Image.Image) -> Counter[tuple[int, int, int]]:
    return Counter({c: n for n, c in img.getcolors(maxcolors=1 << 24) or []})


def _empty_fraction(img: Image.Image) -> float:
    """Share of pixels painted with the empty-bucket colour."""
    return _colours(img)[color(0, 1)] / (img.size[0] * img.size[1])


@pytest.mark.parametrize("width", [MIN_WIDTH, 800, 1600])
def test_png_is_valid_and_exactly_the_asked_width(width: int) -> None:
    img = _image(render_png(_uniform(), width))
    assert img.size[0] == width
    assert width // 4 < img.size[1] < 2 * width  # four levels of 8 rows fit in a readable picture


def test_one_level_is_a_shorter_picture_than_all_levels() -> None:
    all_levels = _image(render_png(_uniform(), 800))
    one = _image(render_png(_uniform(), 800, level=1))
    assert one.size[0] == 800 and one.size[1] < all_levels.size[1] / 2


def test_width_out_of_range_is_refused() -> None:
    for w in (MIN_WIDTH - 1, MAX_WIDTH + 1):
        with pytest.raises(ValueError, match="width"):
            render_png(_uniform(), w)


def test_uniform_and_bunched_distributions_look_different_by_pixel_statistics() -> None:
    uni = _image(render_png(_uniform(), 800, level=0))
    bun = _image(render_png(_bunched(), 800, level=0))
    assert uni.size == bun.size  # same layout: only the cells' colours differ
    # level 0's grid is filled everywhere when uniform, all but one cell empty when bunched
    assert _empty_fraction(uni) < 0.02
    assert _empty_fraction(bun) > _empty_fraction(uni) + 0.25
    # the scale is relative to the fullest bucket: every uniform cell is at the top of it, only
    # one bunched cell is
    hottest = color(1, 1)
    area = uni.size[0] * uni.size[1]
    assert _colours(uni)[hottest] > 0.25 * area
    assert 0 < _colours(bun)[hottest] < 0.01 * area
    # and mean brightness differs clearly (light empty cells vs dark full ones)
    mean_uni = ImageStat.Stat(uni.convert("L")).mean[0]
    mean_bun = ImageStat.Stat(bun.convert("L")).mean[0]
    assert mean_bun - mean_uni > 20, (mean_bun, mean_uni)


def test_colour_scale_is_log_and_darkens_with_the_count() -> None:
    assert color(0, 1000) == color(0, 1)
    lum = [sum(color(n, 1000)) for n in (1, 10, 100, 1000)]
    assert lum == sorted(lum, reverse=True) and lum[0] > lum[-1]


def test_distribution_of_a_wheel_counts_every_timer_once() -> None:
    w: HierarchicalWheel[int] = HierarchicalWheel(tick_ms=10, start_ms=1_000)
    for i in range(5_000):
        w.add(i, 1_000 + i * 997)  # spread over ~83 minutes: levels 0, 1 and 2
    d = distribution_of(w, 1_000)
    assert d.timers == 5_000
    assert sum(lv.total for lv in d.levels) + d.overflow == 5_000
    assert [len(lv.counts) for lv in d.levels] == [w.wheel_size] * w.levels
    assert d.levels[0].total > 0 and d.levels[1].total > 0 and d.levels[2].total > 0
    js = d.to_json()
    assert js["levels"][1]["span_ms"] == 10 * w.wheel_size and js["timers"] == 5_000


DAY = 86_400_000


def test_the_far_future_is_a_band_of_days_of_its_own_in_the_json_and_the_png() -> None:
    start = 20_000 * DAY + 5 * 3_600_000  # the window ends at 05:00 UTC
    rows = [(20_000 * DAY, 7), (20_003 * DAY, 40_000), ((20_000 + FAR_DAYS + 10) * DAY, 5)]
    far = far_future_of(rows, start, 600_000)
    assert far.total == 40_012 and far.days == tuple(rows[:2])  # listed: FAR_DAYS days; counted: all
    counts = far.counts()
    assert len(counts) == FAR_DAYS and counts[0] == 7 and counts[3] == 40_000 and sum(counts) == 40_007
    base = _uniform()
    dist = WheelDistribution(base.time_ms, base.tick_ms, base.size, base.levels, base.overflow, base.timers, far)
    js = dist.to_json()
    assert js["window"] == {"horizon_ms": 600_000, "until_ms": start}
    assert js["far_future"]["total"] == 40_012 and js["far_future"]["days"][1] == {"start_ms": 20_003 * DAY, "count": 40_000}
    plain, with_far = _image(render_png(base)), _image(render_png(dist))
    assert with_far.size[0] == plain.size[0] and with_far.size[1] > plain.size[1]  # one band more
    assert _image(render_png(dist, level=1)).size == _image(render_png(base, level=1)).size  # a level alone: no band
    assert base.to_json()["far_future"] is None and base.to_json()["window"] is None
