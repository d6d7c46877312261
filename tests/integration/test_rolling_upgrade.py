"""A rolling upgrade (docs/deploy.md#rolling-upgrade) on real nodes: a leader of this release and a
worker running the previous release's code itself (taken from git), in one 3-node cluster. The
previous release refuses a whole fire batch with one 12-field item (a ``traceparent``); it
advertises no fire batch version, so the leader sends it the 11-field items it reads, and the
traced fires it is given are delivered (without a ``traceparent``, which that release does not
send), while this release's workers still send theirs. Then the other way round: the earlier
release's node leads, and reads the heartbeats of this release's workers (the version they
advertise rides in the list of fires held) without a bad frame."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .rest import call, wait_serving

pytestmark = pytest.mark.slow

PREVIOUS_RELEASE = "95ab36f"
"""The last commit whose fire batch items are exactly 11 fields and whose workers advertise no version."""
ROOT = Path(__file__).resolve().parents[2]
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
_TP = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")
N = 30
LAUNCH = (
    "import runpy, sys\n"
    "tree = sys.argv.pop(1)\n"
    # the environment's editable install answers imports of molens through a finder of its own
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]\n"
    "sys.path.insert(0, tree)\n"
    "import molens\n"
    "assert molens.__file__.startswith(tree), molens.__file__\n"
    "runpy.run_module('molens.cli', run_name='__main__', alter_sys=True)\n"
)


def release_tree(tmp_path_factory: pytest.TempPathFactory, commit: str) -> Path:
    """Commit ``commit``'s ``molens`` package, extracted from this repository's history into a new
    folder (the folder to put first on a node's path: ``LAUNCH``)."""
    out = tmp_path_factory.mktemp(f"release-{commit}")
    got = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "molens"], capture_output=True)
    if got.returncode:
        pytest.fail(f"the release {commit} cannot be read from git: {got.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(out, filter="data")
    return out


def start_beside(c: Cluster, old: NodeProc) -> None:
    """Start every node of ``c`` but ``old`` (this release's), wait for them to elect a leader, then
    start ``old`` (another release's) beside them and wait until it is ready."""
    for n in c.nodes.values():
        if n is not old:
            n.start()
    c.leader(timeout=60)  # elected by this release's nodes
    old.start()
    old.wait_ready(timeout=60)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``molens`` package, extracted from this repository's history."""
    return release_tree(tmp_path_factory, PREVIOUS_RELEASE)


@pytest.fixture
def receiver() -> Iterator[RecordingReceiver]:
    rec = RecordingReceiver()
    yield rec
    rec.close()


@pytest.mark.timeout(240)
def test_traced_fires_given_to_a_worker_of_the_previous_release_are_delivered(
        tmp_path: Path, receiver: RecordingReceiver, previous_release: Path) -> None:
    # a fire whose batch was refused is only settled at its deadline: far past this test's waits
    c = Cluster(tmp_path, 3, extra={"scheduler": {"dispatch_timeout_ms": 120_000}}, state_machine="tasks")
    old = c.nodes["n3"]
    old.argv = [sys.executable, "-c", LAUNCH, str(previous_release)]
    try:
        start_beside(c, old)
        leader = c.leader(timeout=60)
        assert leader is not old
        wait_serving(leader)
        ids: dict[str, int] = {}
        for i in range(N):
            st, t = call(leader, "POST", "/api/v1/tasks", {
                "type": "delayed", "interval_ms": 2_000, "callback_url": receiver.url(f"/ok/t{i}"),
                "traceparent": f"00-{TRACE}-{i + 1:016x}-01"})
            assert st == 201, t
            ids[t["id"]] = i
        wait_for(lambda: all(receiver.by_tag(f"t{i}") for i in range(N)), 60, "every callback")

        def worker_of(n: NodeProc, tid: str) -> str | None:
            st, page = call(n, "GET", f"/api/v1/tasks/{tid}/executions")
            done = [e for e in page["items"] if e["result"] == "success"] if st == 200 else []
            return str(done[0]["worker"]) if done else None
        workers = {tid: wait_for(lambda tid=tid: worker_of(leader, tid), 30, f"the execution of {tid}") for tid in ids}
        for tid, i in ids.items():
            (cb,) = receiver.by_tag(f"t{i}")
            assert cb.headers["X-Molens-Attempt"] == "1", f"{tid}: a first attempt was lost (a refused batch?)"
        assert old.node_id in workers.values(), f"the previous release's worker carried no fire: {workers}"
        for tid, i in ids.items():
            (cb,) = receiver.by_tag(f"t{i}")
            if workers[tid] == old.node_id:
                assert "traceparent" not in cb.headers  # that release sends none
            else:
                m = _TP.match(cb.headers["traceparent"])
                assert m is not None and m.group(1) == TRACE, cb.headers

        # the other way round: a leader of the previous release reads this release's heartbeats
        leader.call("transfer_leader", to=old.node_id, timeout_s=5)
        wait_for(lambda: c.leader(timeout=30) is old or None, 60, "the previous release's node to lead")
        wait_serving(old)
        later: dict[str, int] = {}
        for i in range(N):
            st, t = call(old, "POST", "/api/v1/tasks", {
                "type": "delayed", "interval_ms": 2_000, "callback_url": receiver.url(f"/ok/u{i}")})
            assert st == 201, t
            later[t["id"]] = i
        wait_for(lambda: all(receiver.by_tag(f"u{i}") for i in range(N)), 60, "every callback")
        assert all(receiver.by_tag(f"u{i}")[0].headers["X-Molens-Attempt"] == "1" for i in range(N))
        carried = {wait_for(lambda tid=tid: worker_of(old, tid), 30, f"the execution of {tid}") for tid in later}
        assert carried - {old.node_id}, f"this release's workers carried no fire for the earlier leader: {carried}"
        assert "bad frame" not in old.log_path.read_text(errors="replace")
    finally:
        c.stop_all()
