"""Plain HTTP calls to a node's REST API, for integration tests that check what goes over the wire
(statuses, headers, bodies) rather than what the SDK makes of it.

Redirects are never followed: a follower's ``307`` is an answer the tests look at. A body is sent as
JSON; an answer's body is parsed as JSON (``None`` when empty).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import urllib3

from .conftest import Cluster, NodeProc, wait_for

_http = urllib3.PoolManager(retries=False, timeout=15, maxsize=4)


def send(method: str, url: str, body: Any = None) -> urllib3.BaseHTTPResponse:
    """One request to ``url``; raises urllib3's ``HTTPError`` when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    return _http.request(method, url, body=data, headers={"Content-Type": "application/json"}, redirect=False)


def send_json(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """``(status, parsed body)`` of one request to ``url``; raises like :func:`send`."""
    r = send(method, url, body)
    return r.status, (json.loads(r.data) if r.data else None)


def call(n: NodeProc, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``(status, parsed body)`` of ``path`` on node ``n``; ``(0, None)`` when the node does not
    answer, so a poll waits through a node starting or dying."""
    try:
        return send_json(method, n.http_url + path, body)
    except urllib3.exceptions.HTTPError:
        return 0, None


def wait_serving(n: NodeProc, timeout: float = 60) -> None:
    """Wait until ``/readyz`` of node ``n`` answers ``200``: it knows a leader and serves its REST
    API (``NodeProc.wait_ready`` only waits for its admin socket)."""
    wait_for(lambda: call(n, "GET", "/readyz")[0] == 200, timeout, f"{n.node_id} to serve")


@contextlib.contextmanager
def task_cluster(root: Path, n: int = 3, extra: dict[str, Any] | None = None) -> Iterator[Cluster]:
    """A started ``n``-node task cluster under ``root`` (``extra``: config merged into each node's),
    every node serving its REST API; every node killed on leaving the block, also on failure."""
    c = Cluster(root, n, extra=extra, state_machine="tasks")
    try:
        c.start()
        c.leader(timeout=30)
        for node in c.nodes.values():
            wait_serving(node, 30)
        yield c
    finally:
        c.kill_all()


@contextlib.contextmanager
def one_task_node(root: Path, extra: dict[str, Any] | None = None) -> Iterator[NodeProc]:
    """A 1-node task cluster under ``root`` (Raft tick 20 ms; ``extra``'s config sections beside it),
    serving its REST API; stopped on leaving the block, also on failure."""
    c = Cluster(root, 1, extra={"raft": {"tick_ms": 20}, **(extra or {})}, state_machine="tasks")
    try:
        c.start()
        n = c.leader(timeout=30)
        wait_serving(n)
        yield n
    finally:
        c.stop_all()
