#!/usr/bin/env python3
"""CPU per task of the schema's codecs (molens/schema.py): validating a create request body,
rendering a task's JSON, a task record's encode/decode and a CreateTasks command's encode/decode.

Single thread, process CPU time (comparable on a loaded machine). Prints one summary line
``codec: validate_us=... task_json_us=... record_enc_us=... record_dec_us=... record_bytes=...
cmd_enc_us=... cmd_dec_us=... cmd_bytes=...`` (per task; commands of 500 items).

    .venv/bin/python scripts/bench/codec.py [--n 20000]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from molens import model
from molens.fsm import store
from molens.fsm.commands import CreateItem, CreateTasks, decode, encode

T0 = 1_700_000_000_000
REQUEST = {
    "type": "delayed",
    "interval_ms": 1000,
    "callback_url": "http://127.0.0.1:9/x",
    "payload": {"i": 1, "note": "bench"},
    "scene": "bench",
}


def cpu_us(fn: Callable[[], object], n: int) -> float:
    fn()
    c0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - c0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000, help="repetitions of the single-task operations")
    n = ap.parse_args().n
    body = json.dumps(REQUEST).encode()
    spec = model.decode_create(body, now_ms=T0)
    task = model.Task(id=model.new_task_id(T0, 5), spec=spec, status=model.Status.PENDING, created_ms=T0,
                      updated_ms=T0, due_ms=T0 + 1000, sched_ms=T0 + 1000)
    page = [task] * 500
    raw = store.task_to_bytes(task)
    cmd = CreateTasks(T0, tuple(CreateItem(model.new_task_id(T0, i), spec) for i in range(500)))
    data = encode(cmd)
    figures = {
        "validate_us": cpu_us(lambda: model.decode_create(body, now_ms=T0), n),
        "task_json_us": cpu_us(lambda: model.tasks_json(page), max(1, n // 500)) / 500,
        "record_enc_us": cpu_us(lambda: store.task_to_bytes(task), n),
        "record_dec_us": cpu_us(lambda: store.task_from_bytes(raw), n),
        "cmd_enc_us": cpu_us(lambda: encode(cmd), max(1, n // 500)) / 500,
        "cmd_dec_us": cpu_us(lambda: decode(data), max(1, n // 500)) / 500,
    }
    print(f"codec bench: {n} repetitions, task records of {len(raw)} bytes, commands of 500 items ({len(data)} bytes)")
    print(
        "codec: " + " ".join(f"{k}={v:.2f}" for k, v in figures.items())
        + f" record_bytes={len(raw)} cmd_bytes={len(data) / 500:.0f}"
    )


if __name__ == "__main__":
    main()
