"""A raw socket HTTP server on 127.0.0.1 that answers exactly what each test scripts, for the tests of
the HTTP clients' reading (the fire loop's, the SDK's): it frames requests by Content-Length and
hands each one's bytes to the script."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

Script = Callable[[socket.socket, bytes], bool]
"""Answers one request (its raw bytes) on the connection; False closes the connection after it."""


class RawServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, path: str = "/cb") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        n = int(v)
                while len(rest) < n:
                    rest += conn.recv(65536)
                req, buf = head + b"\r\n\r\n" + rest[:n], rest[n:]
                self.requests.append(req)
                try:
                    if not self.script(conn, req):
                        return
                except OSError:
                    return

    def stop(self) -> None:
        self._stop = True
        self.sock.close()
        self._thread.join(2)
