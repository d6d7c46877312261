"""The Python SDK's batching and bulk creates when things go wrong part-way (docs/api.md#python-sdk):
a future cancelled before its batch is sent is left out and the sender goes on; a submit waiting for
room when the client closes is refused, not lost; a flush waits for what was submitted before it
only; an error out of ``create_many`` says which tasks exist and carries every task's key. The
network is replaced by a scripted ``_create_batch_items`` (what ``BatchingClient`` calls)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import CancelledError
from typing import Any

import pytest

from molens import client as client_mod
from molens.client import BatchingClient, ClientError, MolensClient, OutcomeUnknownError


class Server:
    """Answers each batch with its tasks (``{"id": key}``); ``gate`` holds a batch until set."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_at: int | None = None
        self.delay_s = 0.0
        """How long each batch takes to answer."""
        self.lock = threading.Lock()

    def __call__(self, bodies: Sequence[dict[str, Any]], minimal: bool = False) -> list[Any]:
        with self.lock:
            n = len(self.batches)
            self.batches.append([str(b["idempotency_key"]) for b in bodies])
        self.entered.set()
        assert self.gate.wait(30)
        threading.Event().wait(self.delay_s)
        if n == self.fail_at:
            raise OutcomeUnknownError("the answer was lost")
        return [{"id": b["idempotency_key"]} for b in bodies]


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> tuple[MolensClient, Server]:
    c = MolensClient("http://127.0.0.1:1")
    s = Server()
    monkeypatch.setattr(c, "_create_batch_items", s)
    return c, s


def test_a_future_cancelled_before_its_batch_is_sent_is_left_out_and_the_sender_goes_on(
    server: tuple[MolensClient, Server],
) -> None:
    c, s = server
    with BatchingClient(c, flush_interval_s=60) as b:
        kept, dropped = b.submit(idempotency_key="kept"), b.submit(idempotency_key="dropped")
        assert dropped.cancel()
        b.flush(timeout=30)
        assert kept.result(0) == {"id": "kept"} and s.batches == [["kept"]]
        s.gate.clear()  # a batch in flight: its future can no longer be cancelled
        s.entered.clear()
        sent = b.submit(idempotency_key="sent")
        b_flush = threading.Thread(target=b.flush, daemon=True)
        b_flush.start()
        assert s.entered.wait(30)
        assert not sent.cancel()
        s.gate.set()
        assert sent.result(30) == {"id": "sent"}
        b_flush.join(30)
        later = b.submit(idempotency_key="later")  # the sender thread is still there
        b.flush(timeout=30)
        assert later.result(0) == {"id": "later"}
    with pytest.raises(CancelledError):
        dropped.result(0)


def test_a_submit_waiting_for_room_when_the_client_closes_is_refused_not_lost(
    server: tuple[MolensClient, Server],
) -> None:
    c, s = server
    b = BatchingClient(c, flush_interval_s=60, max_pending=1)
    first = b.submit(idempotency_key="first")
    outcome: list[Any] = []
    waiting = threading.Thread(target=lambda: outcome.append(_submit(b, "second")), daemon=True)
    waiting.start()
    waiting.join(0.2)  # it waits for room in the queue (it may also not have reached the wait yet)
    b.close(timeout=30)
    waiting.join(30)
    assert first.result(0) == {"id": "first"}
    assert len(outcome) == 1 and isinstance(outcome[0], ClientError), outcome
    assert s.batches == [["first"]]


def _submit(b: BatchingClient, key: str) -> Any:
    try:
        return b.submit(idempotency_key=key)
    except ClientError as exc:
        return exc


def test_a_flush_waits_for_what_was_submitted_before_it_not_for_what_comes_after(
    server: tuple[MolensClient, Server],
) -> None:
    c, s = server
    s.delay_s = 0.01  # a batch of at most 5 each 10 ms, a task submitted each ms: the queue never empties
    stop = threading.Event()
    with BatchingClient(c, flush_interval_s=60, max_batch=5) as b:
        before = [b.submit(idempotency_key=f"before-{i}") for i in range(3)]

        def produce() -> None:  # a steady stream that never leaves the queue empty for long
            for i in range(20_000):
                if stop.is_set():
                    return
                b.submit(idempotency_key=f"after-{i}")
                stop.wait(0.001)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        try:
            b.flush(timeout=10)
            assert all(f.result(0)["id"].startswith("before-") for f in before)
        finally:
            stop.set()
            producer.join(30)


def test_an_error_out_of_create_many_names_the_tasks_created_and_carries_every_key(
    server: tuple[MolensClient, Server],
) -> None:
    c, s = server
    s.fail_at = 1
    tasks = [{"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x"} for _ in range(2_500)]
    tasks[7]["idempotency_key"] = "mine"
    with pytest.raises(OutcomeUnknownError) as ei:
        c.create_many(tasks)
    keys = ei.value.idempotency_keys
    assert len(keys) == 2_500 and keys[7] == "mine" and len(set(keys)) == 2_500
    assert keys == tuple(k for batch in s.batches for k in batch) + keys[2_000:]
    assert [t["id"] for t in ei.value.created] == list(keys[:1_000])
    s.fail_at = None  # created again with the keys: the ones that exist come back, nothing twice
    again = c.create_many_ids([{**t, "idempotency_key": k} for t, k in zip(tasks, keys, strict=True)])
    assert again == list(keys)
    assert client_mod.ClientError.created == () and client_mod.ClientError.idempotency_keys == ()


def test_a_lost_batch_answer_gives_each_future_its_own_tasks_key(server: tuple[MolensClient, Server]) -> None:
    """An unknown outcome is settled by creating again with the task's key: each future's error
    carries its own task's key (the one the client made up included), not the whole batch's."""
    c, s = server
    s.fail_at = 0
    with BatchingClient(c, flush_interval_s=60) as b:
        futures = [b.submit(idempotency_key="given"), b.submit({"type": "delayed"})]
        b.flush(timeout=30)
    (sent,) = s.batches
    errors = [f.exception(timeout=5) for f in futures]
    assert all(isinstance(e, OutcomeUnknownError) for e in errors), errors
    assert [e.idempotency_keys for e in errors if isinstance(e, OutcomeUnknownError)] == [(k,) for k in sent]
    assert sent[0] == "given" and len(sent[1]) == 32


def test_a_close_that_times_out_says_so(server: tuple[MolensClient, Server]) -> None:
    c, s = server
    s.gate.clear()  # the first batch is held by the server
    b = BatchingClient(c, flush_interval_s=0.01)
    fut = b.submit(idempotency_key="held")
    assert s.entered.wait(30)
    with pytest.raises(TimeoutError, match="1 submitted tasks are not answered yet"):
        b.close(timeout=0.05)
    s.gate.set()
    assert fut.result(timeout=30) == {"id": "held"}
    b.close(timeout=30)  # done now: nothing left, no error
