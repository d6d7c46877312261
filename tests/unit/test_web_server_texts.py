"""The API's own texts in the request's language (molens/web/server_texts.py): Accept-Language
negotiation, the translation table, and a body translated in place with codes untouched."""

from __future__ import annotations

from molens.web.server_texts import localize, negotiate, translate


def test_negotiation_prefers_the_highest_q_of_a_supported_language() -> None:
    assert negotiate("zh-CN,zh;q=0.9,en;q=0.8") == "zh"
    assert negotiate("en-GB,zh;q=0.5") == "en"
    assert negotiate("fr, zh;q=0") == "en"  # q=0: not acceptable
    assert negotiate("fr, zh;q=0.3") == "zh"
    assert negotiate("de;q=x, zh-Hans") == "zh"  # a broken q is skipped, not a 500
    assert negotiate(None) == negotiate("") == "en"


def test_history_events_and_errors_in_chinese_keep_their_numbers() -> None:
    skipped = ("skipped the occurrences scheduled in [1764800000000, 1764800300000) ms: due while the cluster "
               "was down, the task paused or an occurrence ran (catchup one)")
    zh = translate(skipped, "zh")
    assert zh.startswith("\u8df3\u8fc7") and "[1764800000000, 1764800300000) ms" in zh and "catchup one" in zh
    assert "\u7248" in translate("version 2: callback_url, cron_expr", "zh")
    assert "\u56de\u586b" in translate("backfill of the occurrences scheduled in [1, 2) ms, the first at 1", "zh")
    assert "never fires" in translate("cron_expr '0 0 30 2 *' never fires after 1767225600000", "zh")
    assert translate("timeout_ms must be in 1..300000", "zh") == "timeout_ms \u5fc5\u987b\u5728 1 \u5230 300000 \u4e4b\u95f4"
    assert translate("a text with no translation", "zh") == "a text with no translation"
    assert translate("timeout_ms must be in 1..300000", "en") == "timeout_ms must be in 1..300000"


def test_localize_translates_messages_and_events_only() -> None:
    body = {"error": {"code": "invalid_argument", "message": "callback_url is required", "field": "callback_url"},
            "errors": [{"index": 1, "error": {"code": "not_found", "message": "task X1 not found", "field": "task_id"}}]}
    assert localize(body, "zh")
    assert body["error"]["code"] == "invalid_argument" and body["error"]["field"] == "callback_url"
    assert body["error"]["message"] == "\u7f3a\u5c11 callback_url"
    assert body["errors"][0]["error"]["message"] == "\u4efb\u52a1 X1 \u4e0d\u5b58\u5728"
    rows = {"items": [{"kind": "event", "execution_result": "version 3: scene"},
                      {"kind": "callback", "execution_result": "version 3: scene"}]}
    assert localize(rows, "zh")
    assert rows["items"][0]["execution_result"] != "version 3: scene"
    assert rows["items"][1]["execution_result"] == "version 3: scene"  # a receiver's answer is never touched
    assert not localize({"items": [{"kind": "event", "execution_result": "version 3: scene"}]}, "en")
