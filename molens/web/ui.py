"""Serves the built web console (``frontend/`` -> ``molens/web/static/``) at ``/ui/``.

:func:`install_ui` adds the routes to the REST app: files under ``static/`` by path, anything else
under ``/ui/`` without a file extension answers ``index.html`` (the console is a single-page app
with history routing, so ``/ui/tasks/ID`` must load it too), and ``/`` redirects to ``/ui/``. A
missing file (``/ui/assets/x.js``, ``/ui/a.png``) is a ``404``: a small HTML page for a browser that
asks for HTML, the API's JSON error body for any other client.

- Hashed build outputs (``/ui/assets/*``) are immutable: cached for a year. ``index.html`` is
  ``no-cache`` so a rebuilt console is picked up at once.
- The console needs no token to load (it shows its own login when the API answers 401).
- When ``static/index.html`` is missing, every console URL answers ``503`` with a short HTML page
  saying to run ``scripts/setup`` (which runs ``npm ci && npm run build``), instead of a bare 404.
- ``index.html`` carries a Content-Security-Policy allowing only same-origin scripts, and
  connections to this node and the other cluster members (whose open ``/readyz`` the console asks
  who leads when its node stops answering); the console never renders API text as HTML.
"""

from __future__ import annotations

import json
import logging
import mimetypes
from collections.abc import Callable, Iterable
from pathlib import Path

import bottle

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
UI_PREFIX = "/ui"
IMMUTABLE = "public, max-age=31536000, immutable"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def csp(connect_origins: Iterable[str] = ()) -> str:
    """:data:`CSP` with ``connect-src`` widened to the cluster members' origins (the console asks
    their open ``/readyz`` who leads when its own node stops answering)."""
    extra = " ".join(sorted(set(connect_origins)))
    return CSP.replace("connect-src 'self'", f"connect-src 'self' {extra}") if extra else CSP

NOT_BUILT_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Molens - UI not built</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:4rem auto;padding:0 1rem;color:#1d2433}
code{background:#f0f2f6;padding:.1rem .3rem;border-radius:4px}</style></head>
<body><h1>UI not built</h1>
<p>The web console of this node has not been built. Run <code>scripts/setup</code> in the Molens checkout
(it runs <code>npm ci</code> and <code>npm run build</code> in <code>frontend/</code>, writing
<code>molens/web/static/</code>), then reload this page.</p>
<p>The REST API works without it: <a href="/api/v1/openapi.json">/api/v1/openapi.json</a>.</p>
</body></html>
"""

mimetypes.add_type("text/javascript", ".js")
mimetypes.add_type("text/javascript", ".mjs")
mimetypes.add_type("application/manifest+json", ".webmanifest")
mimetypes.add_type("image/svg+xml", ".svg")


def _security_headers(resp: bottle.BaseResponse) -> None:
    resp.set_header("X-Content-Type-Options", "nosniff")
    resp.set_header("Referrer-Policy", "same-origin")
    resp.set_header("X-Frame-Options", "DENY")


def _not_built() -> bottle.HTTPResponse:
    resp = bottle.HTTPResponse(NOT_BUILT_HTML, status=503)
    resp.content_type = "text/html; charset=utf-8"
    resp.set_header("Cache-Control", "no-store")
    _security_headers(resp)
    return resp


NOT_FOUND_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Molens - not found</title></head>
<body><h1>Not found</h1><p>The console has no file here. <a href="/ui/">Open the console</a>.</p></body></html>
"""


def _not_found(path: str) -> bottle.HTTPResponse:
    """A console file that is not there: a page for a browser that navigated here (it asks for HTML),
    the API's JSON error for anything else (the console's own requests, scripts, tools)."""
    if "text/html" in bottle.request.get_header("Accept", ""):
        resp = bottle.HTTPResponse(NOT_FOUND_HTML, status=404)
        resp.content_type = "text/html; charset=utf-8"
    else:
        body = {"error": {"code": "not_found", "message": f"no console file /ui/{path[:200]}", "field": "path"}}
        resp = bottle.HTTPResponse(json.dumps(body), status=404)
        resp.content_type = "application/json"
    resp.set_header("Cache-Control", "no-store")
    _security_headers(resp)
    return resp


def _serve(static_dir: Path, rel: str, cache: str, policy: str = CSP) -> bottle.HTTPResponse:
    resp = bottle.static_file(rel, root=str(static_dir))
    if resp.status_code in (200, 206, 304):
        resp.set_header("Cache-Control", cache)
        if rel == "index.html":
            resp.set_header("Content-Security-Policy", policy)
    _security_headers(resp)
    assert isinstance(resp, bottle.HTTPResponse)
    return resp


def install_ui(
    app: bottle.Bottle,
    static_dir: Path | None = None,
    connect_origins: Callable[[], Iterable[str]] | None = None,
) -> None:
    """Add the console routes (``/``, ``/ui``, ``/ui/<path>``) to ``app``; see the module docstring.

    ``connect_origins`` names the members' origins for the CSP of ``index.html`` (see :func:`csp`).
    """
    root = (static_dir or STATIC_DIR).resolve()

    def policy() -> str:
        if connect_origins is None:
            return CSP
        try:
            return csp(connect_origins())
        except Exception:  # membership unknown right now: the console still loads, same-origin only
            log.info("no member origins for the console CSP", exc_info=True)
            return CSP

    def index() -> bottle.HTTPResponse:
        if not (root / "index.html").is_file():
            return _not_built()
        return _serve(root, "index.html", "no-cache", policy())

    def asset(path: str) -> bottle.HTTPResponse:
        if not (root / "index.html").is_file():
            return _not_built()
        try:
            target = (root / path).resolve()
            found = target.is_relative_to(root) and target.is_file()
        except (OSError, ValueError):  # a NUL in the path, a name longer than the file system takes
            return _not_found(path)
        if not target.is_relative_to(root):
            return _not_found(path)
        if found:
            cache = IMMUTABLE if path.startswith("assets/") else "no-cache"
            return _serve(root, target.relative_to(root).as_posix(), cache)
        last = path.rsplit("/", 1)[-1]
        if path.startswith("assets/") or "." in last:
            return _not_found(path)  # a missing file, not a console route
        return index()

    def to_ui() -> None:
        bottle.redirect(f"{UI_PREFIX}/", 302)

    def to_ui_slash() -> None:
        qs = bottle.request.query_string
        bottle.redirect(f"{UI_PREFIX}/" + (f"?{qs}" if qs else ""), 301)

    app.route("/", "GET", to_ui)
    app.route(UI_PREFIX, "GET", to_ui_slash)
    app.route(f"{UI_PREFIX}/", "GET", index)
    app.route(f"{UI_PREFIX}/<path:path>", "GET", asset)
    if not (root / "index.html").is_file():
        log.warning("web console not built static_dir=%s (run scripts/setup)", root)


def ui_built(static_dir: Path | None = None) -> bool:
    """Whether the console's ``index.html`` is present."""
    return ((static_dir or STATIC_DIR) / "index.html").is_file()


__all__ = ["CSP", "STATIC_DIR", "csp", "install_ui", "ui_built"]
