"""The OpenAPI document is valid OpenAPI 3.1 and in step with the app's routes and docs/api.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from molens.model import ValidationError
from molens.web.api_context import ApiSettings, LeaderInfo
from molens.web.app import build_api, decode_cursor, encode_cursor
from molens.web.observability import preview
from molens.web.openapi import document

ROOT = Path(__file__).resolve().parents[2]


class _Ctx:
    """Just enough of an ApiContext to build the app (no request is served)."""

    settings = ApiSettings()

    def leader_info(self) -> LeaderInfo:
        return LeaderInfo("n1", None, 1, "leader")

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"building the app must not call ctx.{name}")


def _app_routes() -> set[tuple[str, str]]:
    api = build_api(_Ctx())  # type: ignore[arg-type]
    return {(m.lower(), p) for m, p in api.routes}


def test_document_is_valid_openapi_31() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    validate(doc)


def test_every_route_is_documented_and_every_documented_path_is_a_route() -> None:
    doc = document()
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops if m in ("get", "post", "delete", "put", "patch")}
    assert _app_routes() == documented


def test_every_operation_has_an_id_a_summary_and_json_responses() -> None:
    ids = []
    for path, ops in document()["paths"].items():
        for method, op in ops.items():
            ids.append(op["operationId"])
            assert op["summary"], (method, path)
            assert any(code.startswith("2") for code in op["responses"]), (method, path)
    assert len(ids) == len(set(ids))


def test_every_schema_is_referenced_somewhere() -> None:
    doc = document()
    text = repr(doc["paths"]) + repr(doc["components"]["responses"]) + repr(doc["components"]["schemas"])
    for name in doc["components"]["schemas"]:
        assert f"#/components/schemas/{name}'" in text, name


def test_docs_api_md_covers_every_route() -> None:
    md = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^#{2,4} `(GET|POST|DELETE|PUT|PATCH) ([^`]+)`", md, re.MULTILINE))
    documented = {(m.lower(), p) for m, p in headings}
    assert documented == _app_routes()


def test_cursor_round_trip_and_rejects_foreign_cursors() -> None:
    c = encode_cursor("t", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert decode_cursor("t", c) == "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    for bad in ("", "!!!", "dA", encode_cursor("e", "12"), "a" * 7):
        with pytest.raises(ValidationError) as ei:
            decode_cursor("t", bad)
        assert ei.value.field == "cursor"


def test_schedule_preview_interval_ms_bound_is_the_one_the_server_checks() -> None:
    params = document()["paths"]["/api/v1/schedule/preview"]["get"]["parameters"]
    hi = next(p["schema"]["maximum"] for p in params if p["name"] == "interval_ms")
    kw: dict[str, Any] = {"cron_expr": None, "timezone": None, "run_at": None, "count": 1, "after_ms": 0}
    for ttype in ("delayed", "periodic"):
        assert preview(ttype, interval_ms=hi, **kw)["items"]
        with pytest.raises(ValidationError) as ei:
            preview(ttype, interval_ms=hi + 1, **kw)
        assert ei.value.field == "interval_ms"
