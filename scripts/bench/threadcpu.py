"""Per-thread CPU of the nodes under a load: two readings of each node's ``threads_cpu_s`` (its
local ``/api/v1/stats``), printed per unit of work (µs per fire, per create, ...) by thread name,
busiest first, so a run says which concern the load costs (docs/api.md, ``threads_cpu_s``)."""

from __future__ import annotations

import json

import urllib3

_http = urllib3.PoolManager(maxsize=8, retries=False, timeout=5)

Reading = dict[str, tuple[str, dict[str, float]]]
"""url -> (role, CPU seconds by thread name)."""


def read(urls: list[str], token: str = "") -> Reading:
    """Each node's role and CPU seconds by thread name; nodes that do not answer are left out."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out: Reading = {}
    for url in urls:
        try:
            st = json.loads(_http.request("GET", url + "/api/v1/stats?local=1", headers=headers).data)
        except (urllib3.exceptions.HTTPError, ValueError):
            continue
        out[url] = (st.get("role", "?"), st.get("threads_cpu_s") or {})
    return out


def report(before: Reading, after: Reading, units: int, unit: str) -> list[str]:
    """One line per node: µs of CPU per ``unit`` by thread (those >= 1 µs), busiest first."""
    lines = []
    for url, (role, cpu) in after.items():
        old = before.get(url, ("?", {}))[1]
        per = {k: (v - old.get(k, 0.0)) * 1e6 / max(1, units) for k, v in cpu.items()}
        top = sorted(((v, k) for k, v in per.items() if v >= 1), reverse=True)
        lines.append(f"  {role} {url.rsplit(':', 1)[1]} us/{unit} by thread: total={sum(per.values()):.0f} "
                     + " ".join(f"{k}={v:.0f}" for v, k in top))
    return lines
