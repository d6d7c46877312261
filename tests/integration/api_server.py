"""The REST API on real waitress + real lmdb/SQLite (LocalContext) on 127.0.0.1, for API/SDK tests.

:func:`serve` starts an :class:`ApiServer` on a free port in this process over a fresh
:class:`LocalContext` and always stops both. :class:`Served.call` is a thin urllib3 helper that
returns ``(status, headers, json_body)``; :func:`check_schema` validates a body against a schema of
the served OpenAPI document (so the document stays truthful).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema
import urllib3

from molens.config import HttpConfig
from molens.web.api_context import ApiSettings
from molens.web.app import make_app
from molens.web.local_context import LocalContext
from molens.web.openapi import document
from molens.web.server import ApiServer, ServerOptions

_DOC = document()


def check_schema(body: Any, name: str) -> None:
    """Raise if ``body`` does not match ``#/components/schemas/<name>``."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": _DOC["components"]}
    jsonschema.Draft202012Validator(schema).validate(body)


@dataclass
class Served:
    ctx: LocalContext
    server: ApiServer
    http: urllib3.PoolManager

    @property
    def url(self) -> str:
        return self.server.url

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[int, Any, Any]:
        h = dict(headers or {})
        data: bytes | None = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        r = self.http.request(
            method, self.url + path, body=data, headers=h, fields=fields, redirect=False, retries=False
        )
        try:
            parsed = json.loads(r.data) if r.data else None
        except ValueError:
            parsed = r.data
        return r.status, r.headers, parsed

    def task_count(self) -> int:
        return len(self.ctx.store)


def delayed(**kw: Any) -> dict[str, Any]:
    """A valid delayed task body (callback to a closed port; nothing fires under LocalContext)."""
    t: dict[str, Any] = {"type": "delayed", "interval_ms": 60_000, "callback_url": "http://127.0.0.1:9/cb"}
    t.update(kw)
    return t


@contextlib.contextmanager
def serve(
    data_dir: Path,
    settings: ApiSettings | None = None,
    *,
    threads: int = 8,
    role: str = "leader",
    leader_url: str | None = None,
    http: HttpConfig | None = None,
) -> Iterator[Served]:
    ctx = LocalContext(data_dir, settings)
    ctx.role = role
    ctx.leader_url = leader_url
    server = None
    try:
        server = ApiServer(
            make_app(ctx),
            ServerOptions(replace(http or HttpConfig(), port=0, max_body_bytes=ctx.settings.max_body_bytes), threads=threads),
        ).start()
        http = urllib3.PoolManager(maxsize=16, timeout=urllib3.Timeout(connect=5, read=30))
        yield Served(ctx, server, http)
        http.clear()
    finally:
        if server is not None:
            server.stop()
        ctx.close()
