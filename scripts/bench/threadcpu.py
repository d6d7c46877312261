"""Per-thread CPU of the nodes under a load: two readings of each node's ``threads_cpu_s`` and
``threads_switches`` (its local ``/api/v1/stats``), printed per unit of work (µs of CPU and context
switches per fire, per create, ...) by thread name, busiest first, so a run says which concern the
load costs and which threads hand it to each other (docs/api.md, ``threads_cpu_s``)."""

from __future__ import annotations

import json

import urllib3

_http = urllib3.PoolManager(maxsize=8, retries=False, timeout=5)

Reading = dict[str, tuple[str, dict[str, float], dict[str, int]]]
"""url -> (role, CPU seconds by thread name, context switches by thread name)."""


def read(urls: list[str], token: str = "") -> Reading:
    """Each node's role and CPU seconds by thread name; nodes that do not answer are left out."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out: Reading = {}
    for url in urls:
        try:
            st = json.loads(_http.request("GET", url + "/api/v1/stats?local=1", headers=headers).data)
        except (urllib3.exceptions.HTTPError, ValueError):
            continue
        out[url] = (st.get("role", "?"), st.get("threads_cpu_s") or {}, st.get("threads_switches") or {})
    return out


def report(before: Reading, after: Reading, units: int, unit: str) -> list[str]:
    """Two lines per node: µs of CPU per ``unit`` by thread (those >= 1 µs), then context switches
    per ``unit`` by thread (those >= 0.01), busiest first."""
    lines = []
    for url, (role, cpu, switches) in after.items():
        _, old_cpu, old_sw = before.get(url, ("?", {}, {}))
        n = max(1, units)
        per = {k: (v - old_cpu.get(k, 0.0)) * 1e6 / n for k, v in cpu.items()}
        top = sorted(((v, k) for k, v in per.items() if v >= 1), reverse=True)
        port = url.rsplit(":", 1)[1]
        lines.append(f"  {role} {port} us/{unit} by thread: total={sum(per.values()):.0f} "
                     + " ".join(f"{k}={v:.0f}" for v, k in top))
        if switches:
            sw = {k: (v - old_sw.get(k, 0)) / n for k, v in switches.items()}
            top_sw = sorted(((v, k) for k, v in sw.items() if v >= 0.01), reverse=True)
            lines.append(f"  {role} {port} switches/{unit} by thread: total={sum(sw.values()):.2f} "
                         + " ".join(f"{k}={v:.2f}" for v, k in top_sw))
    return lines
