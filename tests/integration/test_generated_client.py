"""A Python client generated from a real node's ``/api/v1/openapi.json`` by openapi-python-client
drives create/get/list/pause/delete against that node: the document is complete enough for users
of any other language to generate their client from it.

The generator must report nothing: a warning means an endpoint or a response it left out. Its one
setting maps ``image/png`` (the time wheel heatmap) to bytes, the generator's documented way for
binary media types it does not list.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.integration.conftest import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PACKAGE = "molens_rest_api_client"


@pytest.fixture(scope="module")
def node_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    c = Cluster(tmp_path_factory.mktemp("generated-client"), 1, state_machine="tasks")
    try:
        c.start()
        c.leader(timeout=30)
        url = f"http://127.0.0.1:{c.nodes['n1'].settings['http']['port']}"
        wait_for(lambda: urllib3.request("GET", f"{url}/readyz", retries=False).status == 200, 30, "readyz")
        yield url
    finally:
        c.kill_all()


@pytest.fixture(scope="module")
def generated(node_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    out = tmp_path_factory.mktemp("gen")
    doc = out / "openapi.json"
    r = urllib3.request("GET", f"{node_url}/api/v1/openapi.json", retries=False)
    assert r.status == 200
    doc.write_bytes(r.data)
    cfg = out / "config.yaml"
    cfg.write_text("content_type_overrides:\n  image/png: application/octet-stream\n")
    bindir = Path(sys.executable).parent
    proc = subprocess.run(
        [str(bindir / "openapi-python-client"), "generate", "--path", str(doc), "--meta", "none",
         "--config", str(cfg), "--output-path", str(out / PACKAGE)],
        cwd=out, env={**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout
    assert "warning" not in proc.stdout.lower(), f"the generator found problems in openapi.json:\n{proc.stdout}"
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def test_generated_client_creates_gets_lists_pauses_and_deletes_a_task(generated: Any, node_url: str) -> None:
    api = importlib.import_module(f"{PACKAGE}.api.tasks")
    models = importlib.import_module(f"{PACKAGE}.models")
    for op in ("create_task", "get_task", "list_tasks", "pause_task", "delete_task"):
        importlib.import_module(f"{PACKAGE}.api.tasks.{op}")
    client = generated.Client(base_url=node_url, raise_on_unexpected_status=True)
    with client:
        body = models.TaskCreate(
            type_=models.TaskType.DELAYED,
            callback_url=f"{node_url}/api/v1/test/callback",
            interval_ms=3_600_000,
            scene="generated",
            payload={"order_id": 42},
            idempotency_key="generated-client-1",
        )
        r = api.create_task.sync_detailed(client=client, body=body)
        assert r.status_code == 201, r.content
        task = r.parsed
        assert isinstance(task, models.Task)
        assert task.status == models.Status.PENDING and task.payload == {"order_id": 42}

        again = api.create_task.sync_detailed(client=client, body=body)
        assert again.status_code == 200 and again.parsed.id == task.id  # same idempotency key

        got = api.get_task.sync(client=client, task_id=task.id)
        assert isinstance(got, models.Task) and got.id == task.id and got.scene == "generated"

        page = api.list_tasks.sync(client=client, scene="generated", status="pending", limit=10)
        assert isinstance(page, models.TaskList) and [t.id for t in page.items] == [task.id]

        paused = api.pause_task.sync(client=client, task_id=task.id)
        assert isinstance(paused, models.Task) and paused.status == models.Status.PAUSED
        conflict = api.pause_task.sync(client=client, task_id=task.id)
        assert isinstance(conflict, models.Error) and conflict.error.code == "illegal_transition"
        assert conflict.error.field == "status"

        deleted = api.delete_task.sync(client=client, task_id=task.id)
        assert isinstance(deleted, models.Task) and deleted.id == task.id
        gone = api.get_task.sync(client=client, task_id=task.id)
        assert isinstance(gone, models.Error) and gone.error.code == "not_found"

        bad = api.create_task.sync(client=client, body=models.TaskCreate(
            type_=models.TaskType.DELAYED, callback_url=f"{node_url}/cb"))
        assert isinstance(bad, models.Error) and bad.error.field == "interval_ms"
