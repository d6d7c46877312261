"""A schedule in words, English and Chinese: cron expressions through cron-descriptor, fixed rates
by their period. Pure (no clock, no I/O).

cron-descriptor's Chinese leaves weekday and month names in English ("在 09:30, Monday 到
Friday"); they are replaced by their Chinese names here, the only wording of our own.
"""

from __future__ import annotations

import functools
import re

from cron_descriptor import ExpressionDescriptor, FormatException, Options

from molens.schedule.cron import MACROS

_ZH_NAMES = {
    "Monday": "周一", "Tuesday": "周二", "Wednesday": "周三", "Thursday": "周四", "Friday": "周五",
    "Saturday": "周六", "Sunday": "周日",
    "January": "一月", "February": "二月", "March": "三月", "April": "四月", "May": "五月", "June": "六月",
    "July": "七月", "August": "八月", "September": "九月", "October": "十月", "November": "十一月",
    "December": "十二月",
}
_ZH_RE = re.compile(r"\b(" + "|".join(_ZH_NAMES) + r")\b")
_LOCALES = {"en": "en_US", "zh": "zh_CN"}


@functools.lru_cache(maxsize=1024)
def describe_cron(expr: str) -> dict[str, str]:
    """``{"en": ..., "zh": ...}`` for a cron expression this module's caller has validated."""
    text = " ".join(expr.split())
    text = MACROS.get(text.lower(), text)
    out = {}
    for lang, locale in _LOCALES.items():
        o = Options()
        o.locale_code = locale
        o.use_24hour_time_format = True
        try:
            words = str(ExpressionDescriptor(text, o).get_description())
        except (FormatException, ValueError, KeyError, IndexError) as e:
            words = f"{text} ({type(e).__name__})"
        out[lang] = (_ZH_RE.sub(lambda m: _ZH_NAMES[m.group(1)], words) if lang == "zh" else words).strip()
    return out


def describe_interval(interval_ms: int) -> dict[str, str]:
    """``{"en": "Every 90 seconds", "zh": "每 90 秒"}``: the period in its largest whole unit."""
    for ms, en, zh in ((86_400_000, "day", "天"), (3_600_000, "hour", "小时"), (60_000, "minute", "分钟"),
                       (1_000, "second", "秒"), (1, "millisecond", "毫秒")):
        if interval_ms % ms == 0 and interval_ms >= ms:
            n = interval_ms // ms
            return {"en": f"Every {n} {en}{'s' if n != 1 else ''}" if n != 1 else f"Every {en}", "zh": f"每 {n} {zh}"}
    return {"en": "At once", "zh": "立即"}


__all__ = ["describe_cron", "describe_interval"]
