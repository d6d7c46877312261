"""The API's own texts in the request's language (molens/web/server_texts.py): Accept-Language
negotiation, the translation table, and a body translated in place with codes untouched."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import molens
import molens.web.app  # every module whose errors the API answers with, so their classes are known
from molens.errors import MolensError
from molens.web import errors as web_errors
from molens.web.server_texts import ZH, localize, negotiate, translate

ROOT = Path(molens.__file__).parent
API_MODULES = [*sorted((ROOT / "web").glob("*.py")), ROOT / "schema.py", ROOT / "model.py", ROOT / "fsm" / "machine.py",
               ROOT / "schedule" / "cron.py"]
"""The modules whose messages an API answer can carry (errors, validation reasons, history events)."""
NOT_ANSWERED = {"step_ms and slots must be positive"}  # a ValueError of a programming mistake, never a MolensError


def _template(node: ast.expr) -> str | None:
    """The text of a str literal or f-string as :data:`ZH` keys it (each value ``{}``, literal braces doubled)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value.replace("{", "{{").replace("}", "}}") if isinstance(v, ast.Constant) else "{}"
                       for v in node.values)
    return None


def _subclasses(c: type) -> set[str]:
    return {s.__name__ for s in c.__subclasses__()} | {n for s in c.__subclasses__() for n in _subclasses(s)}


def server_texts() -> dict[str, str]:
    """Every text the API modules raise in an error, write as a history event or give as a skip's
    reason, as template -> where."""
    raised = _subclasses(MolensError)
    out: dict[str, str] = {}
    for path in API_MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            texts = []
            if name in raised and node.args:
                texts.append(node.args[0])
            if name == "_skipped" and len(node.args) > 5:  # (tx, task, first, next, now, why, counter)
                texts.append(node.args[5])
            texts += [k.value for k in node.keywords if k.arg == "response_head" and isinstance(k.value, ast.JoinedStr)]
            for t in filter(None, map(_template, texts)):
                out.setdefault(t, f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return out


def test_every_server_text_has_a_chinese_translation() -> None:
    texts = server_texts()
    assert len(texts) > 150  # the walk finds the API's texts (not an empty list that passes)
    missing = sorted(f"{where}: {t!r}" for t, where in texts.items() if t not in ZH and t not in NOT_ANSWERED)
    assert not missing, "server texts with no zh entry in molens/web/server_texts.py ZH:\n" + "\n".join(missing)
    # the default messages of the API's own errors, and one built from values
    for cls in (web_errors.NoLeader, web_errors.OutcomeUnknown, web_errors.Unauthorized, web_errors.Forbidden,
                web_errors.InternalError):
        msg = cls().message if cls is not web_errors.InternalError else "internal error; see the node log"
        assert translate(msg, "zh") != msg, cls.__name__
    msg = web_errors.LeaderElsewhere("http://127.0.0.1:1", "n2").message
    assert translate(msg, "zh") == "\u672c\u8282\u70b9\u4e0d\u662f leader\uff08leader\uff1an2\uff09"


def test_every_chinese_text_shows_every_value_and_no_english_sentence() -> None:
    for en, zh in ZH.items():
        n = sum(1 for _text, field, _spec, _conv in string.Formatter().parse(en) if field is not None)
        filled = zh.format(*(f"<{i}>" for i in range(n)))
        assert all(f"<{i}>" in filled for i in range(n)), f"{en!r}: a value is dropped in {zh!r}"
        assert re.search(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]", zh), f"{en!r} has no Chinese in {zh!r}"
        # no English sentence left in a translation: identifiers, names and quoted values may stay
        prose = re.sub(r"<\d>|'[^']*'|\"[^\"]*\"|[\w.-]*_[\w.]*|[A-Z][\w-]*", " ", filled)
        assert not re.search(r"[a-z]+ [a-z]+ [a-z]+", prose), f"{en!r}: English words in {zh!r}"


def test_a_server_text_the_table_lacks_stays_english_and_a_known_value_is_translated_inside() -> None:
    assert translate("something new the table lacks", "zh") == "something new the table lacks"
    zh = translate("timeout_ms must be an integer or null, got string", "zh")
    assert zh == "timeout_ms \u5fc5\u987b\u662f \u6574\u6570 \u6216 null\uff0c\u6536\u5230 \u5b57\u7b26\u4e32"
    zh = translate("callback_url host 10.0.0.1 is denied by the callback host policy", "zh")
    assert "10.0.0.1" in zh and "policy" not in zh


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
    assert "\u6c38\u4e0d\u89e6\u53d1" in translate("cron_expr '0 0 30 2 *' never fires after 1767225600000", "zh")
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
