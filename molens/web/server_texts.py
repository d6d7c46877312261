"""The API's own texts in the request's language: error messages and history-event texts.

A response is in English unless the request's ``Accept-Language`` prefers a language this table
has (only ``zh`` today); then every ``error.message`` and every history event's
``execution_result`` (rows of kind ``event``) that matches one of the table's patterns is answered
translated, with ``Content-Language``. Codes, fields and everything else stay as they are: clients
branch on ``code``, never on text, and a text with no translation stays English.

The table is a list of (pattern, template): the first pattern that matches the whole text wins, its
groups filled into the template (a group named ``why`` is translated again, by :data:`_ZH_WHY`).
Epoch-millisecond ranges keep their ``[a, b) ms`` shape so a console can show them as times.
"""

from __future__ import annotations

import re
from typing import Any

SUPPORTED = ("en", "zh")

_ZH_WHY: dict[str, str] = {
    "more than catchup_window_ms ago (catchup all)": "早于 catchup_window_ms\uff08catchup all\uff09",
    "missed (catchup none)": "已错过\uff08catchup none\uff09",
    "before the backfilled range, after which the schedule resumes": "在回填范围之前\uff0c回填之后按计划继续",
}

_ZH: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p, re.DOTALL), zh)
    for p, zh in [
        # history events (molens/fsm/machine.py)
        (r"skipped the occurrences scheduled in \[(\d+), (\d+)\) ms: (?P<why>.*)", "跳过了计划在 [{0}, {1}) ms 内的执行\uff1a{why}"),
        (r"version (\d+): (.*)", "修改为第 {0} 版\uff1a{1}"),
        (r"backfill of the occurrences scheduled in \[(\d+), (\d+)\) ms, the first at (\d+)",
         "回填计划在 [{0}, {1}) ms 内的执行\uff0c第一次在 {2}"),
        # reasons of skipped occurrences (groups of the skipped event)
        (r"due before the occurrence started \(catchup (\w+)\)", "在本次执行开始之前到期\uff08catchup {0}\uff09"),
        (r"due while the cluster was down, the task paused or an occurrence ran \(catchup (\w+)\)",
         "在集群停机、任务暂停或上一次执行进行期间到期\uff08catchup {0}\uff09"),
        (r"(\d+) occurrences still running \(overlap allow\)", "仍有 {0} 次执行在进行\uff08overlap allow\uff09"),
        # schedule errors (molens/schedule/cron.py)
        (r"cron_expr ('.*') never fires after \d+", "cron 表达式 {0} 永不触发\uff08never fires\uff09"),
        (r"invalid cron_expr ('.*'): the (\w+) field ('.*') is not valid.*", "cron 表达式 {0} 无效\uff1a{1} 字段 {2} 不合法"),
        (r"cron_expr has (\d+) fields; give 5 \(minute hour day month weekday\) or 6 with seconds first",
         "cron 表达式有 {0} 个字段\uff1b应为 5 个\uff08分 时 日 月 周\uff09\uff0c或 6 个\uff08秒在最前\uff09"),
        (r"unknown time zone ('.*'): use an IANA name such as Europe/Berlin", "未知时区 {0}\uff1a请使用 IANA 名称\uff0c例如 Europe/Berlin"),
        (r"unknown time zone ('.*')", "未知时区 {0}"),
        # request validation (molens/schema.py, molens/web/app.py)
        (r"(\w+) is required", "缺少 {0}"),
        (r"(\w+) must be in (-?\d+)\.\.(-?\d+)(?:, got (-?\d+))?", "{0} 必须在 {1} 到 {2} 之间"),
        (r"(\w+) must be an http or https URL", "{0} 必须是 http 或 https 地址"),
        (r"(\w+) must match (.+)", "{0} 必须符合 {1}"),
        (r"task (\w+) not found", "任务 {0} 不存在"),
        (r"no leader is known \(election in progress\); retry shortly", "当前没有 leader\uff08正在选举\uff09\uff1b请稍后重试"),
        (r"this node is not the leader \(leader: (.*)\)", "本节点不是 leader\uff08leader\uff1a{0}\uff09"),
    ]
]


def negotiate(accept_language: str | None) -> str:
    """The language of :data:`SUPPORTED` the ``Accept-Language`` header prefers (``en`` by default).

    >>> negotiate("zh-CN,zh;q=0.9,en;q=0.8"), negotiate("en-GB,zh;q=0.5"), negotiate("fr, zh;q=0"), negotiate(None)
    ('zh', 'en', 'en', 'en')
    """
    best, best_q = "en", 0.0
    for i, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        m = re.search(r"q=([0-9.]+)", params)
        if m:
            try:
                q = float(m.group(1))
            except ValueError:
                continue
        lang = tag.strip().lower().split("-")[0]
        # earlier entries win ties, as the header lists them in order of preference
        if lang in SUPPORTED and q > 0 and q - i * 1e-6 > best_q:
            best, best_q = lang, q - i * 1e-6
    return best


def translate(text: str, lang: str) -> str:
    """``text`` in ``lang`` when the table has it, else ``text`` unchanged."""
    if lang != "zh" or not text:
        return text
    for pattern, template in _ZH:
        m = pattern.fullmatch(text)
        if m:
            named = {k: _ZH_WHY.get(v, translate(v, lang)) for k, v in m.groupdict().items()}
            plain = [g for i, g in enumerate(m.groups(), 1) if i not in pattern.groupindex.values()]
            return template.format(*plain, **named)
    return text


def localize(body: Any, lang: str) -> bool:
    """Translate, in place, a JSON body's ``error.message`` (and a batch's per-item errors) and its
    history events' ``execution_result``; whether anything was translated."""
    if lang == "en" or not isinstance(body, dict):
        return False
    changed = False
    errors = [body.get("error"), *(body.get("errors") or [])]
    for err in errors:
        holder = err.get("error", err) if isinstance(err, dict) else None
        if isinstance(holder, dict) and isinstance(holder.get("message"), str):
            new = translate(holder["message"], lang)
            changed |= new != holder["message"]
            holder["message"] = new
    for row in body.get("items") or []:
        if isinstance(row, dict) and row.get("kind") == "event" and isinstance(row.get("execution_result"), str):
            new = translate(row["execution_result"], lang)
            changed |= new != row["execution_result"]
            row["execution_result"] = new
    return changed
