"""An https front for a console served over http, as a TLS-terminating reverse proxy gives one
(docs/deploy.md): a self-signed certificate made by ``openssl`` for 127.0.0.1, every request passed
on to the http origin as it came, the answer passed back as it went. For tests only."""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import urllib3

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@contextlib.contextmanager
def https_front(target: str, workdir: Path) -> Iterator[str]:
    """``https://127.0.0.1:PORT`` in front of ``target`` (``http://HOST:PORT``) while the block runs."""
    workdir.mkdir(parents=True, exist_ok=True)
    key, cert = workdir / "key.pem", workdir / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )
    pool = urllib3.PoolManager(retries=False, timeout=30)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _pass(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "host"}
            r = pool.request(self.command, target + self.path, body=body, headers=headers, redirect=False,
                             preload_content=True, decode_content=False)
            self.send_response(r.status)
            for k, v in r.headers.items():
                if k.lower() not in _HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(r.data)))
            self.end_headers()
            self.wfile.write(r.data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, name="https-front", daemon=True)
    t.start()
    try:
        yield f"https://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)
        pool.clear()
