"""Hard deadlines on blocking socket reads: one watchdog thread that shuts a socket down when the
time a reader was given for it has passed.

A socket timeout bounds each ``recv``, not a whole answer: a peer that sends a byte of its status
line or headers every 0.9 s holds a reader with a 1 s timeout for as long as it likes. The urllib3
path (TLS callbacks, the ``threads`` engine, notifications) reads an answer's head inside
``http.client``, where no deadline can be checked between reads, so the guarded connection puts the
socket under :data:`WATCHDOG` while it reads the head (``molens.delivery``). At the deadline the
watchdog shuts the socket down (both ways): the blocked read returns at once and the reader sees the
connection end, which the deliverer then counts as a timeout. The FireLoop needs none of this: its
own timers bound every attempt.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator


class Cut:
    """Whether the watchdog shut a block's socket down (set before it does)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


class SocketWatchdog:
    """Shuts sockets down at their deadlines (``time.monotonic()`` seconds); one daemon thread,
    started by the first :meth:`cut_at`."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, socket.socket, Cut]] = []
        self._live: set[int] = set()
        self._ids = itertools.count()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self.cut = 0
        """Sockets shut down at their deadline (for tests and stats)."""

    @contextlib.contextmanager
    def cut_at(self, deadline: float, sock: socket.socket) -> Iterator[Cut]:
        """Within the block, ``sock`` is shut down if it is still in it at ``deadline``; the
        :class:`Cut` it gives says whether it was (what was read may then end anywhere: an HTTP
        head cut short can even parse)."""
        n = next(self._ids)
        cut = Cut()
        with self._cv:
            heapq.heappush(self._heap, (deadline, n, sock, cut))
            self._live.add(n)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="socket-watchdog", daemon=True)
                self._thread.start()
            if self._heap[0][1] == n:
                self._cv.notify()
        try:
            yield cut
        finally:
            with self._cv:
                self._live.discard(n)

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)  # its block ended in time
                if not self._heap:
                    self._cv.wait()
                    continue
                deadline, n, sock, cut = self._heap[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(n)
                cut.done = True
                self.cut += 1
            with contextlib.suppress(OSError):  # closed meanwhile: nothing to cut
                # the plain socket's shutdown, also under a TLS socket (whose own would drop its state)
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


WATCHDOG = SocketWatchdog()
"""The process's watchdog (the urllib3 connections of every deliverer and the notifier share it)."""


__all__ = ["WATCHDOG", "Cut", "SocketWatchdog"]
