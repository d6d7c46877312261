#!/usr/bin/env python3
"""CPU a traced task adds to each fire (docs/observability.md#traces), by part, against the same
untraced task; and with span export on, what the spans of one attempt cost.

Single thread but for the exporter's, process CPU time (comparable on a loaded machine). Per attempt:

- ``request_us``: the worker builds the attempt's HTTP request (``Deliverer.request_bytes``: the
  ``traceparent`` header, its span id a hash);
- ``wire_us``: one fire in the leader's fire batch frame, encoded and decoded (55 more bytes);
- ``record_us``: a task record encoded and decoded (every replica, at dispatch and at the result);
- ``hook_us``: the worker's per-attempt hook (``ReportingDeliverer.record``) without export;
- ``per_fire_us``: what a fire adds on a 3-node cluster: request + wire + hook once, record on 3
  replicas x 2 changes;
- ``export_us``: with ``tracing.otlp_endpoint`` set, a ``molens.fire`` and a ``molens.result`` span
  built, batched and POSTed (protobuf) to an OTLP/HTTP receiver in another process, exporter thread
  included.

Prints ``tracing: request_us=+... wire_us=+... record_us=+... hook_us=+... per_fire_us=+...
export_us=...`` (the ``+`` figures are traced minus untraced).

    .venv/bin/python scripts/bench/tracing.py [--n 50000]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import urllib3  # noqa: E402
from codec import cpu_us  # noqa: E402  (scripts/bench/codec.py)

from molens import model  # noqa: E402
from molens.actors.stats import ReportingDeliverer  # noqa: E402
from molens.delivery import DeliveryOutcome, FireRequest, FireResult, decode_fire_batch, encode_fire_batch  # noqa: E402
from molens.fsm import store  # noqa: E402
from molens.model import FireKind  # noqa: E402
from molens.tracing import OtlpSpans  # noqa: E402

T0 = 1_700_000_000_000
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _parts(tp: str, n: int) -> dict[str, float]:
    req = FireRequest(fire_id="01HF7YAT000000000000000001-1", task_id="01HF7YAT000000000000000001", attempt=1,
                      kind=FireKind.CALLBACK, url="http://127.0.0.1:9/x", body=b'{"i":1}', scene="bench",
                      timeout_ms=5000, scheduled_ms=T0, traceparent=tp)
    res = FireResult(fire_id=req.fire_id, kind=req.kind, status_code=200, outcome=DeliveryOutcome.SUCCESS,
                     response_head=b"ok", latency_ms=1.0, worker="n1")
    d = ReportingDeliverer(urllib3.PoolManager(), "n1", "secret")
    spec = model.decode_create(
        b'{"type":"delayed","interval_ms":1000,"callback_url":"http://127.0.0.1:9/x","payload":{"i":1}'
        + (f',"traceparent":"{tp}"' if tp else "").encode() + b"}", now_ms=T0)
    task = model.Task(id=req.task_id, spec=spec, status=model.Status.PENDING, created_ms=T0, updated_ms=T0,
                      due_ms=T0 + 1000, sched_ms=T0 + 1000)
    batch = [req] * 100
    return {
        "request_us": cpu_us(lambda: d.request_bytes(req, "127.0.0.1", 9, "/x"), n),
        "wire_us": cpu_us(lambda: decode_fire_batch(encode_fire_batch(batch)), max(1, n // 100)) / 100,
        "record_us": cpu_us(lambda: store.task_from_bytes(store.task_to_bytes(task)), n),
        "hook_us": cpu_us(lambda: (d.record(req, res), d.take()), n),
    }


def _export_us(n: int) -> float:
    rec = subprocess.Popen([sys.executable, "-m", "tests.integration.otlp_receiver"], cwd=ROOT, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # its own process: its CPU is not counted
    assert rec.stdin is not None and rec.stdout is not None
    try:
        spans = OtlpSpans(rec.stdout.readline().strip(), "n1")
        attrs = {"molens.fire_id": "T-1", "molens.attempt": 1, "molens.outcome": "success",
                 "http.response.status_code": 200}
        now = time.time_ns()
        c0 = time.process_time()
        for i in range(n):
            tp = f"00-{random.getrandbits(128):032x}-00f067aa0ba902b7-01"
            spans.fire(tp, "T", "T-1", "callback", 1, now, now + 1_000_000, attrs)
            spans.result(tp, "T-1", "callback", 1, now, now + 1_000_000, attrs)
            if i % 1000 == 999:
                time.sleep(0.2)  # 5,000 attempts/s at most: the exporter keeps up, no span is dropped
        spans.shutdown()  # exports what is left
        cpu = time.process_time() - c0
    finally:
        rec.stdin.close()
        got = rec.stdout.readline().strip()
        rec.wait(timeout=10)
    print(f"tracing bench: {got} of {2 * n} spans reached the OTLP receiver", flush=True)
    return cpu / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50_000, help="repetitions of each part")
    ap.add_argument("--spans", type=int, default=10_000, help="attempts whose spans are exported")
    args = ap.parse_args()
    plain, traced = _parts("", args.n), _parts(TP, args.n)
    delta = {k: traced[k] - plain[k] for k in plain}
    per_fire = delta["request_us"] + delta["wire_us"] + delta["hook_us"] + 6 * delta["record_us"]
    print("tracing bench untraced: " + " ".join(f"{k}={v:.2f}" for k, v in plain.items()), flush=True)
    print("tracing bench traced:   " + " ".join(f"{k}={v:.2f}" for k, v in traced.items()), flush=True)
    export = _export_us(args.spans)
    print("tracing: " + " ".join(f"{k}={v:+.2f}" for k, v in delta.items())
          + f" per_fire_us={per_fire:+.2f} export_us={export:.1f}")


if __name__ == "__main__":
    main()
