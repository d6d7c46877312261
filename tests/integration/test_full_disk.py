"""A full disk on real nodes (docs/architecture.md#full-disk): each node under test keeps its
``data_dir`` on a small tmpfs mounted by the test, and the test fills it with a file until the
kernel answers ENOSPC, then deletes the file ("space returns").

- One node: writes answer ``507 insufficient_storage`` + ``Retry-After`` while its Raft log cannot
  grow, ``/readyz`` and ``/metrics`` say why, the log says it once; the node stays up and takes
  writes again by itself once space returns; every task acknowledged before is delivered; after a
  restart every file opens and holds every acknowledged task.
- A follower's disk full: the cluster goes on without it; it does not ack, then catches up; digests equal.
- The leader's disk full: it stops leading (it sends nothing it has not written), another node
  leads and takes the writes; the old leader catches up once space returns; digests equal.
- A node whose disk is full still carries out the fires the new leader gives its worker.

Skipped with a one-line reason where a tmpfs cannot be mounted (not root, no mount namespace rights).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from molens.client import MolensClient

from .conftest import Cluster, NodeProc, wait_for
from .recording_receiver import RecordingReceiver
from .tmpfs import Tmpfs, TmpfsError, put_data_dir_on

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]  # real faults under a shared machine's load; each test has its own deadlines

_http = urllib3.PoolManager(retries=False, timeout=15)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, int], Tmpfs]]:
    made: list[Tmpfs] = []

    def make(name: str, size: int = 48 << 20) -> Tmpfs:
        try:
            t = Tmpfs(tmp_path / f"tmpfs-{name}", size)
        except TmpfsError as exc:
            pytest.skip(str(exc))
        made.append(t)
        return t

    yield make
    for t in made:  # make_cluster's teardown (kill -9) runs first: fixtures tear down in reverse
        t.unmount()


def _post(n: NodeProc, tag: str, rec: RecordingReceiver, due_in_ms: int, **extra: Any) -> urllib3.BaseHTTPResponse:
    body = {
        "type": "delayed", "run_at": time.time_ns() // 1_000_000 + due_in_ms,
        "callback_url": rec.url(f"/ok/{tag}"), **extra,
    }
    return _http.request("POST", n.http_url + "/api/v1/tasks", json=body, redirect=False)


def _metric(n: NodeProc, name: str) -> float | None:
    r = _http.request("GET", n.http_url + "/metrics")
    m = re.search(rf"^{name} (\S+)$", r.data.decode(), re.M)
    return float(m.group(1)) if m else None


def _digests(c: Cluster) -> set[tuple[int, str]] | None:
    ds = {(d["applied_index"], d["digest"]) for d in (n.call("digest") for n in c.running())}
    return ds if len(ds) == 1 else None


def _delivered(rec: RecordingReceiver, tags: list[str]) -> bool:
    return all(rec.by_tag(t) for t in tags)


def _wait_delivered(rec: RecordingReceiver, tags: list[str], nodes: list[NodeProc], timeout: float = 40) -> None:
    """Wait for every acknowledged task's callback; at the deadline fail naming the missing tags,
    what each node says of those tasks, and the tail of each node's log (so a rare failure can be
    read from CI's output: the run's temporary directories are gone by then)."""
    try:
        wait_for(lambda: _delivered(rec, tags), timeout, "every acknowledged task delivered")
    except pytest.fail.Exception as exc:
        missing = [t for t in tags if not rec.by_tag(t)]
        fields = ("id", "status", "reliability", "next_run_at", "attempt", "fail_count", "last_outcome", "last_fire_at")
        lines = [f"{exc}: {len(missing)} of {len(tags)} missing: {missing}"]
        for n in nodes:
            try:
                items = _http.request("GET", n.http_url + "/api/v1/tasks?limit=1000", timeout=5).json()["items"]
                seen = {tk["callback_url"].rsplit("/", 1)[-1]: tk for tk in items}
                lines.append(f"{n.node_id} says: " + "; ".join(
                    f"{t}: " + (str({k: seen[t].get(k) for k in fields}) if t in seen else "no such task")
                    for t in missing))
            except (OSError, ValueError, KeyError, urllib3.exceptions.HTTPError) as err:
                lines.append(f"{n.node_id}: no task list ({err!r})")
            lines.append(f"--- {n.node_id} log tail ---\n{n.tail(80)}")
        pytest.fail("\n".join(lines))


def test_a_single_node_refuses_writes_with_507_while_its_disk_is_full_and_recovers_by_itself(
    make_cluster: Any, tmpfs: Any, receiver: RecordingReceiver
) -> None:
    t = tmpfs("n1")
    c: Cluster = make_cluster(1, start=False, state_machine="tasks")
    n1 = c.nodes["n1"]
    put_data_dir_on(n1, t)
    c.start()
    c.leader()
    acked = []
    for i in range(20):
        r = _post(n1, f"before{i}", receiver, 4000)
        assert r.status == 201, r.data
        acked.append(f"before{i}")

    t.fill()
    # The first write that meets the full disk is appended in memory only: its outcome is unknown
    # (503 outcome_unknown after the propose timeout) and it applies once space returns. Every later
    # write is refused at once. (A write lmdb could still fit into pages its files already hold
    # succeeds: its 201 is kept like any other.)
    answers: list[tuple[int, dict[str, Any]]] = []

    def refused() -> urllib3.BaseHTTPResponse | None:
        tag = f"full{len(answers)}"
        r = _post(n1, tag, receiver, 1000, reliability="at_most_once")
        answers.append((r.status, r.json() if r.data else {}))
        if r.status == 201:
            acked.append(tag)
        return r if r.status == 507 else None

    r = wait_for(refused, 40, "a write refused with 507", interval=0.2)
    body = r.json()
    assert body["error"]["code"] == "insufficient_storage", body
    assert "storage full" in body["error"]["message"], body
    assert r.headers.get("Retry-After", "").isdigit(), dict(r.headers)
    assert all(s in (201, 503, 507) for s, _ in answers), answers  # a 201 only for a write it keeps (below)
    assert n1.running, n1.tail()
    ready = _http.request("GET", n1.http_url + "/readyz")
    assert ready.status == 503 and "storage full" in ready.json()["error"]["message"], ready.data
    assert _metric(n1, "molens_storage_full") == 1
    assert (_metric(n1, "molens_storage_stalls_total") or 0) >= 1
    # reads still work from the local replica
    assert _http.request("GET", n1.http_url + "/api/v1/tasks?limit=5").status == 200

    t.free()
    wait_for(lambda: _post(n1, "after", receiver, 500).status == 201, 30, "a write accepted once space returned", 0.2)
    acked.append("after")
    assert _http.request("GET", n1.http_url + "/readyz").status == 200
    assert _metric(n1, "molens_storage_full") == 0
    _wait_delivered(receiver, acked, [n1])

    text = n1.log_path.read_text(errors="replace")
    assert text.count("storage full node=n1") == 1, "the warning is logged once per episode"
    assert "storage writable again node=n1" in text

    # no file left corrupt: a graceful restart opens the log, the task store and the history,
    # and they hold what they held
    def tasks() -> dict[str, str]:
        items = _http.request("GET", n1.http_url + "/api/v1/tasks?limit=1000").json()["items"]
        return {tk["callback_url"].rsplit("/", 1)[-1]: tk["id"] for tk in items}

    def executions() -> int:
        return len(_http.request("GET", n1.http_url + "/api/v1/executions?limit=1000").json()["items"])

    before = tasks()
    assert set(acked) <= set(before)
    # a delivery is on the receiver before its result is applied and in the history: wait for them
    wait_for(lambda: executions() >= len(acked) or None, 30, "an execution of every acknowledged task", 0.2)
    execs = executions()
    assert n1.stop() == 0
    n1.start()
    n1.wait_ready()
    c.leader()
    assert tasks() == before
    assert executions() >= execs


def test_a_full_history_database_holds_the_results_back_until_space_returns_and_records_each_once(
    make_cluster: Any, tmpfs: Any, receiver: RecordingReceiver
) -> None:
    """Only the history is on the tmpfs (``history.sqlite`` a symlink into it; SQLite follows it and
    keeps its WAL beside the target): the Raft log and the task store have room, the history's
    SQLITE_FULL stops the applying of results until space returns."""
    t = tmpfs("history", 8 << 20)
    c: Cluster = make_cluster(1, start=False, state_machine="tasks")
    n1 = c.nodes["n1"]
    t.data.mkdir()
    n1.data_dir.mkdir(parents=True, exist_ok=True)
    (n1.data_dir / "history.sqlite").symlink_to(t.data / "history.sqlite")
    c.start()
    c.leader()
    # rows big enough that the WAL must grow: each execution keeps the first 512 bytes of the answer
    acked = []
    for i in range(10):
        tag = f"h{i}"
        body = {"type": "delayed", "run_at": time.time_ns() // 1_000_000 + 2500,
                "callback_url": receiver.url(f"/big/512/{tag}")}
        r = _http.request("POST", n1.http_url + "/api/v1/tasks", json=body)
        assert r.status == 201, r.data
        acked.append((tag, r.json()["id"]))
    t.fill()
    ready = wait_for(lambda: (r := _http.request("GET", n1.http_url + "/readyz")).status == 503 and r, 30,
                     "readyz to report the full history database")
    assert "history database" in ready.json()["error"]["message"], ready.data
    r = _post(n1, "refused", receiver, 1000)
    assert r.status == 507 and r.json()["error"]["code"] == "insufficient_storage", r.data
    assert n1.running, n1.tail()
    t.free()
    wait_for(lambda: _http.request("GET", n1.http_url + "/readyz").status == 200, 30, "n1 ready again")
    for tag, tid in acked:
        wait_for(lambda tid=tid: _http.request("GET", f"{n1.http_url}/api/v1/tasks/{tid}").json()["status"] == "done",
                 60, f"{tag} done")
        execs = _http.request("GET", f"{n1.http_url}/api/v1/tasks/{tid}/executions").json()["items"]
        attempts = [(e["fire_id"], e["attempt"], e["kind"]) for e in execs]
        assert execs and len(set(attempts)) == len(attempts), (tag, execs)  # recorded, none twice
        assert receiver.by_tag(tag)
    assert n1.log_path.read_text(errors="replace").count("storage full node=n1 step=apply") == 1


def _lead(c: Cluster, nid: str) -> None:
    lead = c.leader()
    if lead.node_id != nid:
        lead.call("transfer_leader", to=nid)
    wait_for(lambda: c.leader().node_id == nid, 20, f"{nid} to lead")


def _create_many(client: MolensClient, rec: RecordingReceiver, prefix: str, n: int, due_in_ms: int) -> list[str]:
    tags = []
    for i in range(n):
        tag = f"{prefix}{i}-{uuid.uuid4().hex[:6]}"
        client.create(
            type="delayed", run_at=time.time_ns() // 1_000_000 + due_in_ms, callback_url=rec.url(f"/ok/{tag}"),
            idempotency_key=tag,
        )
        tags.append(tag)
    return tags


def _full_disk_in_a_cluster(
    make_cluster: Any, tmpfs: Any, receiver: RecordingReceiver, nid: str, lead: str, **client_args: Any
) -> tuple[Cluster, Tmpfs, MolensClient, list[str]]:
    """A 3-node cluster led by ``lead`` with ``nid`` on a tmpfs, 10 tasks acknowledged, then that
    tmpfs filled."""
    t = tmpfs(nid)
    c: Cluster = make_cluster(3, start=False, state_machine="tasks")
    put_data_dir_on(c.nodes[nid], t)
    c.start()
    _lead(c, lead)
    client = MolensClient([n.http_url for n in c.nodes.values()], **client_args)
    acked = _create_many(client, receiver, "a", 10, 4000)
    t.fill()
    return c, t, client, acked


def test_a_follower_whose_disk_is_full_stops_acking_and_catches_up_when_space_returns(
    make_cluster: Any, tmpfs: Any, receiver: RecordingReceiver
) -> None:
    c, t, client, acked = _full_disk_in_a_cluster(make_cluster, tmpfs, receiver, "n3", lead="n1")
    n3 = c.nodes["n3"]
    acked += _create_many(client, receiver, "b", 200, 3000)  # the leader and n2 are a quorum
    wait_for(lambda: _http.request("GET", n3.http_url + "/readyz").status == 503, 20, "n3 to say its disk is full")
    assert "storage full" in _http.request("GET", n3.http_url + "/readyz").json()["error"]["message"]
    st = n3.status()
    assert st is not None and st["applied_index"] < c.nodes["n1"].status()["commit_index"]  # type: ignore[index]
    assert c.leader().node_id == "n1"
    t.free()
    wait_for(lambda: _http.request("GET", n3.http_url + "/readyz").status == 200, 30, "n3 ready again")
    acked += _create_many(client, receiver, "c", 10, 500)
    _wait_delivered(receiver, acked, list(c.nodes.values()))
    c.wait_converged()
    wait_for(lambda: _digests(c), 30, "equal digests")
    assert n3.running
    assert n3.log_path.read_text(errors="replace").count("storage full node=n3") == 1


def test_a_leader_whose_disk_is_full_hands_over_and_catches_up_when_space_returns(
    make_cluster: Any, tmpfs: Any, receiver: RecordingReceiver
) -> None:
    c, t, client, acked = _full_disk_in_a_cluster(make_cluster, tmpfs, receiver, "n1", lead="n1", retry_deadline_s=60)
    n1 = c.nodes["n1"]
    # the first write meets the full disk: n1 stops sending (it cannot persist), n2 or n3 leads
    unknown = []
    for i in range(30):
        tag = f"b{i}-{uuid.uuid4().hex[:6]}"
        try:
            client.create(
                type="delayed", run_at=time.time_ns() // 1_000_000 + 3000,
                callback_url=receiver.url(f"/ok/{tag}"), idempotency_key=tag,
            )
            acked.append(tag)
        except Exception as exc:  # the SDK does not retry 507 or an unknown outcome without its key
            unknown.append((tag, repr(exc)))
    new = c.leader(timeout=30, exclude=("n1",)) if c.leader(timeout=30).node_id == "n1" else c.leader()
    assert new.node_id != "n1"
    assert n1.running, n1.tail()
    print(f"full disk, leader: new leader {new.node_id}; {len(acked) - 10} of 30 writes acknowledged, errors: {unknown}")
    assert len(acked) >= 10 + 25, unknown  # only the writes in flight when the disk filled may fail
    t.free()
    wait_for(lambda: _http.request("GET", n1.http_url + "/readyz").status == 200, 30, "n1 ready again")
    _wait_delivered(receiver, acked, list(c.nodes.values()))
    c.wait_converged()
    wait_for(lambda: _digests(c), 30, "equal digests")
    assert n1.log_path.read_text(errors="replace").count("storage full node=n1") == 1
    # the old leader's files are whole: it restarts and agrees
    n1.kill()
    n1.start()
    n1.wait_ready()
    c.wait_converged()
    wait_for(lambda: _digests(c), 30, "equal digests after restarting n1")


def test_a_node_whose_disk_is_full_still_fires_what_the_new_leader_gives_it(
    make_cluster: Any, tmpfs: Any, receiver: RecordingReceiver
) -> None:
    """Its worker heartbeats the leader its Raft core follows, so the leader gives it fires; they
    must be carried out, not refused as batches of a term the node "has not reached" because it
    cannot write that term down (they were, and each such fire was lost: an at_least_once fire
    without retries failed, a periodic occurrence was skipped)."""
    c, t, client, _ = _full_disk_in_a_cluster(make_cluster, tmpfs, receiver, "n1", lead="n1", retry_deadline_s=60)
    n1 = c.nodes["n1"]
    with contextlib.suppress(Exception):  # the write that meets the full disk: n1 stops leading
        client.create(type="delayed", run_at=time.time_ns() // 1_000_000, callback_url=receiver.url("/ok/first"))
    new = c.leader(timeout=30, exclude=("n1",))
    wait_for(lambda: (n1.status() or {}).get("leader_id") == new.node_id, 30, "n1 to follow the new leader")
    tags = []
    for i in range(60):  # no retries: a fire refused by its worker is lost for good
        tag = f"r{i}-{uuid.uuid4().hex[:6]}"
        client.create(type="delayed", run_at=time.time_ns() // 1_000_000 + 1500, callback_url=receiver.url(f"/ok/{tag}"),
                      idempotency_key=tag, reliability="at_least_once", max_retries=0)
        tags.append(tag)
    _wait_delivered(receiver, tags, list(c.nodes.values()))
    assert _http.request("GET", n1.http_url + "/readyz").status == 503  # its disk was full all along
    assert "n1" in {e["worker"] for e in client.executions()}, "the new leader gave n1 no fire"
    t.free()


def test_storage_failure_tells_a_full_disk_from_other_errors(tmpfs: Any, tmp_path: Path) -> None:
    """The classification the Raft actor relies on, against the real errors: lmdb's commit on a
    full tmpfs, SQLite's SQLITE_FULL, a file write's ENOSPC, and lmdb's MapFullError."""
    import sqlite3

    import lmdb

    from molens.actors.peer_errors import storage_failure

    t = tmpfs("probe", 4 << 20)
    t.data.mkdir()
    env = lmdb.open(str(t.data / "db"), map_size=1 << 30)
    errors: list[BaseException] = []
    try:
        for i in range(10_000):
            with env.begin(write=True) as txn:
                txn.put(b"%09d" % i, os.urandom(4000))
    except lmdb.Error as exc:
        errors.append(exc)
    with env.begin() as txn:  # the failed transaction left the file whole
        assert txn.get(b"%09d" % 0) is not None
    env.close()
    db = sqlite3.connect(t.data / "h.sqlite")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS x (v BLOB)")
        for _ in range(10_000):
            db.execute("INSERT INTO x VALUES (?)", (os.urandom(4000),))
            db.commit()
    except sqlite3.OperationalError as exc:
        errors.append(exc)
    db.close()
    try:
        t.fill()
        with open(t.path / "more", "wb") as f:
            f.write(b"\0" * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        errors.append(exc)
    t.free()
    # a map full long before the disk (not on the tmpfs: lmdb's lock file is a shared map, and
    # creating one on a full tmpfs is SIGBUS)
    small = lmdb.open(str(tmp_path / "small"), map_size=64 << 10)
    try:
        with small.begin(write=True) as txn:
            for i in range(1000):
                txn.put(b"%09d" % i, b"x" * 1000)
    except lmdb.MapFullError as exc:
        errors.append(exc)
    small.close()
    assert len(errors) == 4, errors
    for exc in errors:
        assert storage_failure(exc, t.path), exc
    assert storage_failure(ValueError("bug")) is None
    assert storage_failure(lmdb.CorruptedError("mdb_get: MDB_CORRUPTED")) is None
    assert storage_failure(OSError(errno.EACCES, "Permission denied")) is None


def test_a_snapshot_that_meets_a_full_disk_leaves_no_partial_file(tmpfs: Any) -> None:
    from molens.raft.log import Membership, SnapshotMeta
    from molens.raft.storage import SnapshotStore

    t = tmpfs("snap", 1 << 20)
    store = SnapshotStore(t.path / "snapshots")
    with pytest.raises(OSError) as err:
        store.write(SnapshotMeta(10, 2, Membership(("n1",))), os.urandom(4 << 20))  # incompressible
    assert err.value.errno == errno.ENOSPC
    assert list((t.path / "snapshots").iterdir()) == []


def test_a_snapshot_received_on_a_full_disk_is_checked_again_once_space_returns(tmpfs: Any) -> None:
    """A follower gathering a snapshot whose disk fills: checking and compressing it fails with
    ENOSPC and leaves no staged payload or partial snapshot file, only the gathered file; checking
    again after space returns succeeds."""
    import zlib

    from molens.raft.log import Membership, SnapshotMeta
    from molens.raft.storage import SnapshotReceiver, SnapshotStore

    t = tmpfs("recv", 12 << 20)  # the gathered file, the staged payload and the snapshot file
    rcv = SnapshotReceiver(SnapshotStore(t.path / "snapshots"))
    data = os.urandom(3 << 20)  # incompressible: the compressed copy needs as much again
    meta = SnapshotMeta(10, 2, Membership(("n1",)))
    rcv.write(0, data[: 1 << 20])
    rcv.write(1 << 20, data[1 << 20 :])
    sealed = rcv.seal()
    t.fill()
    with pytest.raises(OSError) as err:
        rcv.check(meta, zlib.crc32(data), sealed)
    assert err.value.errno == errno.ENOSPC
    assert [p.name for p in (t.path / "snapshots").iterdir()] == [sealed.name]
    t.free()
    sf = rcv.check(meta, zlib.crc32(data), sealed)
    assert sf is not None and sf.size == len(data) and sealed.read_bytes() == data
