"""The near-term window on a real 3-node cluster (docs/architecture.md#near-term-window).

200,000 pending delayed tasks due over the next 30 days (from an hour ahead) sit in `due` with a
5 s ``scheduler.wheel_horizon_ms``. Near tasks, at_least_once and at_most_once, are created across
the horizon (due 2 s to 30 s ahead: most of them wait in `due` for the loader), at the window's edge
as the leader reports it (one ms before, at, and one after), and behind the loader (inside the
window already); the leader is kill -9'd while they fire. Every at_least_once task is delivered,
no at_most_once fire id twice; the leader's wheel never held more than the horizon's worth, and the
new leader read the window, not the store. About 90 s here.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import Any

import pytest
import urllib3

from molens.client import MolensClient

from .conftest import Cluster, NodeProc
from .recording_receiver import RecordingReceiver

HORIZON_MS = 5_000
FAR = 200_000
NEAR = 2_000
NEAR_SPREAD_MS = (2_000, 30_000)
SETTINGS: dict[str, Any] = {
    "scheduler": {"wheel_horizon_ms": HORIZON_MS, "dispatch_timeout_ms": 1_000},
    "worker": {"concurrency": 32},
}

_http = urllib3.PoolManager(maxsize=8)


def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


def _post_batches(base: str, bodies: list[dict[str, Any]], threads: int = 2) -> None:
    """POST /tasks/batch, 1,000 a request, from a few threads."""
    chunks = [bodies[i : i + 1_000] for i in range(0, len(bodies), 1_000)]
    errors: list[str] = []

    def work(part: list[list[dict[str, Any]]]) -> None:
        for c in part:
            r = _http.request("POST", base + "/api/v1/tasks/batch", body=json.dumps({"tasks": c}).encode(),
                              headers={"Content-Type": "application/json"}, timeout=60, retries=False)
            if r.status != 201 or json.loads(r.data)["errors"]:
                errors.append(f"{r.status} {r.data[:200]!r}")

    ts = [threading.Thread(target=work, args=(chunks[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]


def _wheel(n: NodeProc) -> dict[str, Any] | None:
    try:
        r = _http.request("GET", _base(n) + "/api/v1/stats?local=1", timeout=2, retries=False)
    except urllib3.exceptions.HTTPError:
        return None
    if r.status != 200:
        return None
    w = json.loads(r.data).get("scheduler", {}).get("wheel")
    return w if isinstance(w, dict) else None


def _max_in_window(dues: list[int], span: int) -> int:
    dues = sorted(dues)
    best, j = 0, 0
    for i, d in enumerate(dues):
        while dues[j] < d - span:
            j += 1
        best = max(best, i - j + 1)
    return best


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_200k_pending_with_a_5s_horizon_fire_once_across_a_leader_kill_and_the_wheel_holds_only_the_window(
    make_cluster: object,
) -> None:
    receiver = RecordingReceiver()
    try:
        _run(make_cluster, receiver)
    finally:
        receiver.close()


def _run(make_cluster: object, receiver: RecordingReceiver) -> None:
    c: Cluster = make_cluster(3, extra=SETTINGS, state_machine="tasks")  # type: ignore[operator]
    leader = c.leader(timeout=30)
    now = int(time.time() * 1000)
    hour, month = 3_600_000, 30 * 86_400_000
    far = [{"type": "delayed", "run_at": now + hour + i * (month // FAR), "callback_url": receiver.url("/ok/far")}
           for i in range(FAR)]
    t = time.monotonic()
    _post_batches(_base(leader), far)
    print(f"created {FAR} far tasks in {time.monotonic() - t:.1f} s")

    client = MolensClient([_base(n) for n in c.nodes.values()], retry_deadline_s=60, max_attempts=1_000)
    due: dict[str, tuple[int, str]] = {}

    def create(bodies: list[dict[str, Any]]) -> None:
        for task in client.create_many(bodies):
            due[task["id"]] = (task["next_run_at"], task["reliability"])

    def near(run_at: int, i: int, tag: str) -> dict[str, Any]:
        amo = i % 5 == 0
        return {"type": "delayed", "run_at": run_at, "timeout_ms": 2_000,
                "reliability": "at_most_once" if amo else "at_least_once",
                "callback_url": receiver.url(f"/ok/{'amo' if amo else 'alo'}-{tag}")}

    start = int(time.time() * 1000)
    lo, hi = NEAR_SPREAD_MS
    create([near(start + lo + i * (hi - lo) // NEAR, i, "across") for i in range(NEAR)])
    sizes: list[int] = []
    loaded_by_term: dict[str, int] = {}
    edge_made = behind_made = 0
    killed_at: float | None = None
    end = time.monotonic() + 120
    while time.monotonic() < end:
        ld = c.leader(timeout=30)
        w = _wheel(ld)
        if w is not None:
            sizes.append(w["size_max"])
            loaded_by_term[ld.node_id] = w["loaded"]
            if edge_made < 10:  # at the edge the leader reports: one ms before, at, one after
                e = w["loaded_until_ms"]
                create([near(e - 1, 1, "edge"), near(e, 2, "edge"), near(e + 1, 5, "edge")])
                edge_made += 1
            if behind_made < 10:  # inside the window already: straight into the wheel
                create([near(int(time.time() * 1000) + 1_500, i, "behind") for i in range(3)])
                behind_made += 1
        if killed_at is None and time.time() * 1000 > start + 12_000:
            killed_at = time.time()
            ld.kill()
            new = c.leader(timeout=30, exclude=(ld.node_id,))
            print(f"killed {ld.node_id}; {new.node_id} leads after {time.time() - killed_at:.2f} s")
            ld.start()
            continue
        if killed_at is not None and time.time() * 1000 > start + hi + 3_000:
            st = client.stats()["tasks"]
            if st["firing"] + st["awaiting_ack"] == 0 and st["pending"] == FAR:
                break
        time.sleep(0.2)
    assert killed_at is not None and edge_made == 10 and behind_made == 10
    counts = client.stats()["tasks"]
    assert counts["pending"] == FAR, counts  # every near task ended; the far ones still wait
    with receiver.lock:
        reqs = list(receiver.requests)
    by_fire: dict[str, int] = collections.Counter(r.headers.get("X-Fire-ID", "") for r in reqs)
    assert not any(r.tag == "far" for r in reqs)
    missing = [tid for tid, (_d, rel) in due.items() if rel == "at_least_once" and by_fire[f"{tid}-1"] == 0]
    twice = [tid for tid, (_d, rel) in due.items() if rel == "at_most_once" and by_fire[f"{tid}-1"] > 1]
    assert missing == [], f"{len(missing)} at_least_once tasks never delivered: {missing[:5]}"
    assert twice == [], f"at_most_once fire ids delivered twice: {twice[:5]}"
    amo_fired = sum(1 for tid, (_d, rel) in due.items() if rel == "at_most_once" and by_fire[f"{tid}-1"] == 1)
    assert amo_fired >= len([1 for _d, rel in due.values() if rel == "at_most_once"]) * 0.5  # most are not lost
    # the horizon's worth: the near tasks due within one horizon (+ a top-up, + 1 s of slack) and
    # those overdue at the failover (at most the ~1 s of the election); never the 200,000
    bound = _max_in_window([d for d, _ in due.values()], HORIZON_MS + HORIZON_MS // 16 + 1_000) * 2
    print(f"wheel size max {max(sizes)} (bound {bound}); timers loaded per leader {loaded_by_term}")
    assert sizes and max(sizes) <= bound < FAR // 50
    assert all(n < FAR // 50 for n in loaded_by_term.values()), loaded_by_term  # the window, not the store
    client.close()
