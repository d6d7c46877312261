"""Flow control on a real 3-node cluster (docs/architecture.md#flow-control): a rate spreads fires
due at once, a concurrency bounds what the receiver holds at once, a pause holds due fires until
resume, a throttled flow never delays another, a 429 with Retry-After holds the flow, and flow
settings survive kill -9 of the leader. What the receiver saw (receive times, requests held at
once) is the evidence; nothing waits by sleeping.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import send, send_json, task_cluster, wait_serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]

def _base(n: NodeProc) -> str:
    return f"http://127.0.0.1:{n.settings['http']['port']}"


@pytest.fixture(scope="module")
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with task_cluster(tmp_path_factory.mktemp("flows3")) as c:
        yield c


def _leader(c: Cluster) -> str:
    return _base(c.leader(timeout=30))


def _put_flow(c: Cluster, key: str, body: dict[str, Any]) -> dict[str, Any]:
    st, out = send_json("PUT", f"{_leader(c)}/api/v1/flows/{key}", body)
    assert st == 200, out
    return dict(out)


def _create(c: Cluster, tasks: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for i in range(0, len(tasks), 500):
        st, out = send_json("POST", f"{_leader(c)}/api/v1/tasks/batch", {"tasks": tasks[i:i + 500]})
        assert st == 201, out
        ids += [t["id"] for t in out["items"]]
    return ids


def _due_at(url: str, run_at: int, flow: str | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"type": "delayed", "run_at": run_at, "callback_url": url}
    if flow is not None:
        t["flow_key"] = flow
    return t


def _flow(c: Cluster, key: str) -> dict[str, Any] | None:
    st, out = send_json("GET", f"{_leader(c)}/api/v1/flows/{key}")
    return out if st == 200 else None


def test_a_flow_at_20_per_second_spreads_200_fires_due_at_once_over_at_least_9_5_seconds(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    _put_flow(cluster, "rate20", {"rate_per_s": 20})
    due = int(time.time() * 1000) + 2_000
    _create(cluster, [_due_at(receiver.url(f"/ok/rate20-{i}"), due, "rate20") for i in range(200)])

    def arrivals() -> list[int] | None:
        got = [r for r in receiver.requests if r.path.startswith("/ok/rate20-")]
        return sorted(r.at_ms for r in got) if len({r.tag for r in got}) == 200 else None

    seen = wait_for(arrivals, 60, "all 200 fires of the rate-limited flow")
    assert seen[-1] - seen[0] >= 9_500, f"200 fires at 20/s took only {seen[-1] - seen[0]} ms"
    live = wait_for(lambda: _flow(cluster, "rate20"), 10, "the flow's state")
    assert live["live"] is True and live["queued"] == 0


def test_a_flow_with_concurrency_3_never_has_more_than_3_requests_at_the_receiver(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    _put_flow(cluster, "conc3", {"concurrency": 3})
    due = int(time.time() * 1000) + 1_500
    _create(cluster, [_due_at(receiver.url(f"/slow/300/conc3-{i}"), due, "conc3") for i in range(30)])
    wait_for(lambda: len({r.tag for r in receiver.requests if r.path.startswith("/slow/300/conc3-")}) == 30
             and receiver.max_concurrent("/slow/300") > 0 and all(
                 receiver.answered(f"conc3-{i}") for i in range(30)), 60, "all 30 slow fires answered")
    assert receiver.max_concurrent("/slow/300") <= 3
    assert receiver.max_concurrent("/slow/300") >= 2, "the limit allows 3 at once and 30 were due"


def test_a_paused_flow_holds_its_due_fires_and_delivers_all_after_resume_while_another_flow_is_not_delayed(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    _put_flow(cluster, "held", {"paused": True})
    due = int(time.time() * 1000) + 1_500
    ids = _create(cluster, [_due_at(receiver.url(f"/ok/held-{i}"), due, "held") for i in range(20)])
    _create(cluster, [_due_at(receiver.url(f"/ok/free-{i}"), due) for i in range(20)])
    wait_for(lambda: (_flow(cluster, "held") or {}).get("queued") == 20, 30, "20 fires held by the pause")
    wait_for(lambda: len({r.tag for r in receiver.requests if r.path.startswith("/ok/free-")}) == 20, 30,
             "the unlimited flow's fires")
    assert not [r for r in receiver.requests if r.path.startswith("/ok/held-")], "a paused flow fired"
    st, out = send_json("GET", f"{_leader(cluster)}/api/v1/tasks/{ids[0]}")
    assert st == 200 and out["status"] == "pending"
    st, out = send_json("POST", f"{_leader(cluster)}/api/v1/flows/held/resume")
    assert st == 200 and out["paused"] is False
    wait_for(lambda: len({r.tag for r in receiver.requests if r.path.startswith("/ok/held-")}) == 20, 30,
             "every held fire after resume")


def test_a_rate_limited_flow_never_delays_an_unlimited_one(cluster: Cluster, receiver: RecordingReceiver) -> None:
    _put_flow(cluster, "slow2", {"rate_per_s": 2})
    due = int(time.time() * 1000) + 1_500
    ids = _create(cluster, [_due_at(receiver.url(f"/ok/slow2-{i}"), due, "slow2") for i in range(12)]
                  + [_due_at(receiver.url(f"/ok/fast-{i}"), due) for i in range(50)])

    def by(prefix: str, n: int) -> list[int] | None:
        got = sorted(r.at_ms for r in receiver.requests if r.path.startswith(prefix))
        return got if len(got) >= n else None

    fast = wait_for(lambda: by("/ok/fast-", 50), 30, "the unlimited flow's 50 fires")
    slow = wait_for(lambda: by("/ok/slow2-", 12), 30, "the limited flow's 12 fires")
    # the limited flow lets one fire go every 500 ms: its 5th is 2 s after its first; every fire of
    # the other flow, due at the same instant, arrived before that
    if fast[-1] >= slow[4]:  # say what the late ones went through
        late = {r.tag: r.at_ms - due for r in receiver.requests if r.path.startswith("/ok/fast-") and r.at_ms >= slow[4]}
        history = {
            tag: [(e["attempt"], e["result"], e.get("status_code"), e["fired_at"] - due, e["worker"], e.get("execution_result"))
                  for e in send_json("GET", f"{_leader(cluster)}/api/v1/tasks/{ids[12 + int(tag[5:])]}/executions")[1]["items"]]
            for tag in late
        }
        raise AssertionError(f"late fires of the unlimited flow: {late}; their history: {history}; "
                             f"the limited flow's: {[s - due for s in slow]}")


def test_a_429_with_retry_after_holds_the_flow_until_then(cluster: Cluster, receiver: RecordingReceiver) -> None:
    now = int(time.time() * 1000)
    _create(cluster, [_due_at(receiver.url("/throttle/3/1/ra-first"), now + 1_500, "ra")])
    wait_for(lambda: receiver.by_tag("ra-first"), 30, "the first fire (answered 429, Retry-After: 3)")
    first = receiver.by_tag("ra-first")[0].at_ms
    held = wait_for(lambda: (_flow(cluster, "ra") or {}).get("throttled_until") or None, 10, "the flow throttled")
    assert held >= first + 3_000
    _create(cluster, [_due_at(receiver.url(f"/ok/ra-{i}"), 0, "ra") for i in range(5)])
    wait_for(lambda: len(receiver.by_tag("ra-first")) >= 2 and all(receiver.by_tag(f"ra-{i}") for i in range(5)),
             30, "the retry and the other fires of the flow")
    later = [receiver.by_tag(f"ra-{i}")[0].at_ms for i in range(5)] + [receiver.by_tag("ra-first")[1].at_ms]
    assert min(later) >= first + 3_000, [t - first for t in later]


def test_flow_settings_and_held_fires_survive_kill_9_of_the_leader(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    _put_flow(cluster, "durable", {"paused": True, "rate_per_s": 50, "concurrency": 4})
    due = int(time.time() * 1000) + 1_000
    _create(cluster, [_due_at(receiver.url(f"/ok/durable-{i}"), due, "durable") for i in range(10)])
    wait_for(lambda: (_flow(cluster, "durable") or {}).get("queued") == 10, 30, "10 fires held")
    old = cluster.leader()
    old.kill()
    new = cluster.leader(timeout=30, exclude=(old.node_id,))
    wait_serving(new, 30)
    st, out = send_json("GET", f"{_base(new)}/api/v1/flows/durable")
    assert st == 200
    assert (out["paused"], out["rate_per_s"], out["concurrency"]) == (True, 50, 4)
    wait_for(lambda: (_flow(cluster, "durable") or {}).get("queued") == 10, 30, "the new leader holding the 10 fires")
    assert not [r for r in receiver.requests if r.path.startswith("/ok/durable-")]
    assert send_json("POST", f"{_base(new)}/api/v1/flows/durable/resume")[0] == 200
    wait_for(lambda: len({r.tag for r in receiver.requests if r.path.startswith("/ok/durable-")}) == 10, 30,
             "every held fire from the new leader")
    old.start()
    old.wait_ready()
    wait_serving(old, 30)
    cluster.wait_converged()
    st, out = send_json("GET", f"{_base(old)}/api/v1/flows")
    assert st == 200 and "durable" in [i["key"] for i in out["items"]]


def test_an_adaptive_flow_halves_its_rate_on_503s_and_a_follower_shows_the_leaders_figures(
    cluster: Cluster, receiver: RecordingReceiver
) -> None:
    _put_flow(cluster, "aimd", {"rate_per_s": 20, "adaptive": True})
    due = int(time.time() * 1000) + 1_000
    _create(cluster, [_due_at(receiver.url(f"/status/503/aimd-{i}"), due, "aimd") | {"max_retries": 0}
                      for i in range(5)])
    backed_off = wait_for(lambda: (f := _flow(cluster, "aimd")) and f["effective_rate_per_s"] < 20 and f,
                          30, "the adaptive flow backed off")
    assert backed_off["effective_rate_per_s"] == 10  # halved once per second at most
    follower = cluster.followers()[0]
    r = send("GET", f"{_base(follower)}/api/v1/flows")
    assert r.status == 200 and r.headers["X-Molens-Served-By"] == _leader(cluster)
    items = {i["key"]: i for i in json.loads(r.data)["items"]}
    assert items["aimd"]["live"] is True and items["aimd"]["adaptive"] is True
