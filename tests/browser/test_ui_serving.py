"""molens.web.ui: the console's files, SPA fallback, cache headers and the "not built" page (plain HTTP)."""

from __future__ import annotations

from pathlib import Path

import urllib3

from molens.web.ui import IMMUTABLE
from tests.browser.conftest import serve_ui


def _get(url: str) -> urllib3.BaseHTTPResponse:
    return urllib3.request("GET", url, redirect=False, retries=False, timeout=10)


def _fake_build(root: Path) -> Path:
    static = root / "static"
    (static / "assets").mkdir(parents=True)
    (static / "index.html").write_text(
        '<!doctype html><script type="module" src="/ui/assets/app-abc123.js"></script>'
    )
    (static / "assets" / "app-abc123.js").write_text("console.log('x')")
    (static / "robots.txt").write_text("User-agent: *\n")
    return static


def test_built_console_files_fallback_and_cache_headers(tmp_path: Path) -> None:
    static = _fake_build(tmp_path)
    with serve_ui(tmp_path / "d", static_dir=static) as s:
        r = _get(s.url + "/ui/")
        assert r.status == 200 and b"app-abc123.js" in r.data
        assert r.headers["Cache-Control"] == "no-cache"
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
        assert "form-action 'self'" in r.headers["Content-Security-Policy"]  # no form posts elsewhere
        # no inline styles either: every browser test fails on a console error, which a CSP violation is
        assert "style-src 'self';" in r.headers["Content-Security-Policy"]
        assert "unsafe-inline" not in r.headers["Content-Security-Policy"]
        r = _get(s.url + "/ui/assets/app-abc123.js")
        assert r.status == 200 and r.headers["Cache-Control"] == IMMUTABLE
        assert r.headers["Content-Type"].startswith("text/javascript")
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        # history routes of the single-page app load index.html
        for route in ("/ui/tasks", "/ui/tasks/01ARZ3NDEKTSV4RRFFQ69G5FAV", "/ui/cluster"):
            r = _get(s.url + route)
            assert r.status == 200 and b"app-abc123.js" in r.data, route
        # a missing file is a 404, not the app
        assert _get(s.url + "/ui/assets/gone-123.js").status == 404
        assert _get(s.url + "/ui/favicon.ico").status == 404
        assert _get(s.url + "/ui/robots.txt").status == 200
        # nothing outside the build directory
        for bad in ("/ui/../../etc/passwd", "/ui/%2e%2e/%2e%2e/etc/passwd", "/ui/assets/..%2f..%2fsetup.cfg"):
            r = _get(s.url + bad)
            assert r.status in (400, 404) and b"root:" not in r.data, bad
        # / and /ui lead to the console
        r = _get(s.url + "/")
        assert r.status == 302 and r.headers["Location"].endswith("/ui/")
        r = _get(s.url + "/ui")
        assert r.status == 301 and r.headers["Location"].endswith("/ui/")
        # the API is untouched
        assert _get(s.url + "/api/v1/cluster/leader").status == 200


def test_missing_build_answers_a_clear_page(tmp_path: Path) -> None:
    with serve_ui(tmp_path / "d", static_dir=tmp_path / "nothing") as s:
        for route in ("/ui/", "/ui/tasks", "/ui/assets/app.js"):
            r = _get(s.url + route)
            assert r.status == 503, route
            assert r.headers["Content-Type"].startswith("text/html")
            assert b"UI not built" in r.data and b"scripts/setup" in r.data
        assert _get(s.url + "/healthz").status == 200


def test_built_console_is_under_400_kib_gzipped() -> None:
    import gzip

    from molens.web.ui import STATIC_DIR

    assert (STATIC_DIR / "index.html").is_file(), "the console is not built: run scripts/setup"
    total = sum(len(gzip.compress(p.read_bytes(), 9)) for p in STATIC_DIR.rglob("*") if p.is_file())
    assert total < 400 * 1024, f"the built console is {total} bytes gzipped"


def test_the_console_may_probe_the_members_and_only_them(tmp_path: Path) -> None:
    """CSP connect-src names every member's origin (the console asks their /readyz who leads when its
    node dies), and /readyz + /healthz are readable cross-origin; the rest of the API is not."""
    static = _fake_build(tmp_path)
    with serve_ui(tmp_path / "d", static_dir=static) as s:
        nodes = [{"id": "n1", "http_url": s.url}, {"id": "n2", "http_url": "http://10.0.0.2:18082"},
                 {"id": "n3", "http_url": "javascript:alert(1)"}]
        s.ctx.cluster_status = lambda: {"nodes": nodes}  # type: ignore[method-assign]
        csp = _get(s.url + "/ui/").headers["Content-Security-Policy"]
        connect = next(d for d in csp.split(";") if d.strip().startswith("connect-src")).split()
        assert connect == ["connect-src", "'self'", "http://10.0.0.2:18082", s.url]  # not the junk URL
        for path in ("/readyz", "/healthz"):
            assert _get(s.url + path).headers["Access-Control-Allow-Origin"] == "*"
        assert "Access-Control-Allow-Origin" not in _get(s.url + "/api/v1/cluster/status").headers
