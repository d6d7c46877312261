"""The task text-search index: id order, cursors both ways, updates, a restore's reset and its size cap."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from molens.fsm import search
from molens.fsm.search import TaskIndex, task_text
from molens.model import Status, Task, validate_create

NOW = 1_700_000_000_000


def _task(tid: str, payload: Any = None, scene: str = "default") -> Task:
    body = {"type": "delayed", "interval_ms": 1000, "callback_url": "http://127.0.0.1:9/x", "scene": scene, "payload": payload}
    spec = validate_create(body, now_ms=NOW)
    return Task(id=tid, spec=spec, status=Status.PENDING, created_ms=NOW, updated_ms=NOW, due_ms=NOW, sched_ms=NOW)


def test_matches_in_id_order_from_a_cursor_both_ways() -> None:
    tasks = [_task(f"t{i}", {"n": f"Fox-{i % 2}"}) for i in range(6)]
    ix = TaskIndex(lambda: iter(tasks))
    assert list(ix.matches("fox-1")) == ["t1", "t3", "t5"]
    assert list(ix.matches("FOX-1", after="t1")) == ["t3", "t5"]
    assert list(ix.matches("fox-1", reverse=True)) == ["t5", "t3", "t1"]
    assert list(ix.matches("fox-1", after="t5", reverse=True)) == ["t3", "t1"]
    assert list(ix.matches("t4")) == ["t4"]
    assert ix.size[0] == 6 and not ix.partial


def test_writes_after_the_build_update_it_and_a_restore_resets_it() -> None:
    tasks = [_task("t1", "cat"), _task("t3", "dog")]
    ix = TaskIndex(lambda: iter(tasks))
    ix.apply({"t0": _task("t0", "cat")})  # before the first search: the build reads the store
    assert list(ix.matches("cat")) == ["t1"]
    ix.apply({"t2": _task("t2", "cat"), "t3": None, "t1": _task("t1", "bird")})
    assert list(ix.matches("cat")) == ["t2"] and list(ix.matches("dog")) == []
    tasks = [_task("t9", "cat")]
    ix.apply(None)
    assert list(ix.matches("cat")) == ["t9"]


def test_past_its_cap_it_leaves_tasks_out_and_says_it_is_partial() -> None:
    one = len(task_text(_task("t0", "x")))
    ix = TaskIndex(lambda: iter([_task("t0", "x"), _task("t1", "x")]), max_bytes=2 * one)
    assert list(ix.matches("x")) == ["t0", "t1"] and not ix.partial
    ix.apply({"t2": _task("t2", "x")})
    assert ix.partial and list(ix.matches("x")) == ["t0", "t1"] and ix.size == (2, 2 * one)
    ix.apply({"t0": None})
    ix.apply({"t3": _task("t3", "x")})
    assert list(ix.matches("x")) == ["t1", "t3"] and ix.size[1] <= ix.max_bytes


def test_blocks_stay_right_through_inserts_in_the_middle_changes_and_deletes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "BLOCK", 2)
    tasks = [_task(f"t{i:02d}", "eel" if i % 3 == 0 else "cod") for i in range(0, 20, 2)]
    ix = TaskIndex(lambda: iter(tasks))
    assert list(ix.matches("eel")) == ["t00", "t06", "t12", "t18"]
    ix.apply({"t05": _task("t05", "eel"), "t12": _task("t12", "cod"), "t00": None, "t19": _task("t19", "eel")})
    assert list(ix.matches("eel")) == ["t05", "t06", "t18", "t19"]
    assert list(ix.matches("eel", reverse=True)) == ["t19", "t18", "t06", "t05"]
    assert list(ix.matches("eel", after="t06")) == ["t18", "t19"]
    assert list(ix.matches("eel", after="t18", reverse=True)) == ["t06", "t05"]
    assert list(ix.matches("cod")) == ["t02", "t04", "t08", "t10", "t12", "t14", "t16"]
    assert list(ix.matches("e\x00l")) == []


def test_the_first_build_never_holds_up_a_write_and_keeps_the_writes_made_meanwhile() -> None:
    """The build reads the store (seconds for millions of tasks) while the apply thread goes on: a write
    committed mid-read is applied at once, not after the read, and the index ends up with it."""
    tasks = [_task(f"t{i}", "old") for i in range(4)]
    ix = TaskIndex(lambda: iter([]))
    done: list[bool] = []

    def write_meanwhile() -> None:  # the apply thread, committing while the build reads
        ix.apply({"t1": _task("t1", "new"), "t2": None, "t9": _task("t9", "new")})
        done.append(True)

    def load() -> Any:
        for i, t in enumerate(tasks):
            if i == 2:
                w = threading.Thread(target=write_meanwhile)
                w.start()
                w.join(10)
                assert done == [True], "a write waited for the build"
            yield t

    ix._load = load  # type: ignore[method-assign]
    assert list(ix.matches("new")) == ["t1", "t9"]
    assert list(ix.matches("old")) == ["t0", "t3"]


def test_a_restore_during_the_build_makes_it_read_the_store_again() -> None:
    stores = [[_task("t0", "before")], [_task("t5", "after")]]
    reads: list[int] = []
    ix = TaskIndex(lambda: iter([]))

    def load() -> Any:
        n = len(reads)
        reads.append(n)
        yield from stores[min(n, 1)]
        if n == 0:
            ix.apply(None)  # a snapshot restore lands while the first read runs

    ix._load = load  # type: ignore[method-assign]
    assert list(ix.matches("after")) == ["t5"] and list(ix.matches("before")) == []
    assert reads == [0, 1]


def test_a_search_of_some_namespaces_yields_only_their_tasks_built_updated_and_deleted() -> None:
    def in_ns(tid: str, ns: str, payload: Any) -> Task:
        t = _task(tid, payload)
        return msgspec.structs.replace(t, spec=msgspec.structs.replace(t.spec, namespace=ns))

    tasks = [in_ns("t0", "default", "cat"), in_ns("t1", "pay", "cat"), in_ns("t2", "ops", "cat")]
    ix = TaskIndex(lambda: iter(tasks))
    assert list(ix.matches("cat")) == ["t0", "t1", "t2"]
    assert list(ix.matches("cat", namespaces={"pay"})) == ["t1"]
    assert list(ix.matches("cat", namespaces={"default", "ops"}, reverse=True)) == ["t2", "t0"]
    assert list(ix.matches("cat", namespaces=frozenset())) == []
    ix.apply({"t3": in_ns("t3", "pay", "cat"), "t1": None, "t0": in_ns("t0", "default", "dog")})
    assert list(ix.matches("cat", namespaces={"pay"})) == ["t3"]
    assert list(ix.matches("cat", namespaces={"default"})) == []
    ix.apply({"t1": in_ns("t1", "ops", "cat")})  # an id deleted from one namespace and made in another
    assert list(ix.matches("cat", namespaces={"ops"})) == ["t1", "t2"]
    assert list(ix.matches("cat", namespaces={"pay"})) == ["t3"]
