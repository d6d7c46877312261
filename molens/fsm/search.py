"""The task text-search index a serving node keeps from its state machine (``GET /api/v1/tasks?q=``).

One lower-cased text per task (its id, callback URL, scene and payload JSON, a task's payload cut at
:data:`MAX_TASK_TEXT` characters), kept in a dict plus the sorted list of task ids, so a search walks
the ids in id order from a cursor and tests each text for the substring (``str.__contains__``): no
tokenising, any substring matches. The store feeds it every task write after the write commits
(:meth:`TaskIndex.apply`) and a reset after a snapshot restore; it is built from the store on the
first search, so a node that is never searched pays nothing. The build reads the store without
holding up the apply thread: writes that commit meanwhile are kept aside and applied after it.

**Namespaces**: the index keeps each task's namespace (those of the default namespace implied), and a
search for a key of some namespaces yields only theirs: what another namespace's tasks hold never
decides what such a search walks, counts or stops on (``GET /api/v1/tasks?q=`` with ``limit=1`` must
not tell, by its cursor, whether another namespace's payload holds a text).

**Bounded**: the texts held never exceed ``max_bytes`` characters. A task whose text would go past
the cap is not indexed and the index turns *partial* (:attr:`TaskIndex.partial`): the API answers a
search with ``"partial": true`` from then on (until a restore or restart rebuilds it), meaning tasks
may be missing from the answer. Deletes free their space.
"""

from __future__ import annotations

import bisect
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

from molens.model import Task
from molens.schema import DEFAULT_NAMESPACE

MAX_TASK_TEXT = 4096
"""Characters of one task's payload text that are indexed (a longer payload is searched in its head)."""

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Default cap on the characters all indexed texts hold together."""


def task_text(t: Task) -> str:
    """What a search looks in: id, callback URL, scene and payload text, lower-cased."""
    s = t.spec
    payload = bytes(s.payload_json or b"")[:MAX_TASK_TEXT].decode("utf-8", "replace")
    return f"{t.id}\n{s.callback_url}\n{s.scene}\n{payload}".lower()


BLOCK = 512
"""Tasks per block: a search tests a block's joined texts at once and only a block that holds the
text is tested task by task."""

_SEP = "\x00"  # between the texts of a block (no task text holds one: JSON escapes it)


class TaskIndex:
    """Substring index over tasks; thread-safe (the apply thread writes, request threads read)."""

    def __init__(self, load: Callable[[], Iterable[Task]], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._load = load
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._texts: dict[str, str] = {}
        self._ns: dict[str, str] = {}
        """The namespace of each indexed task outside the default namespace."""
        self._ids: list[str] = []
        self._blocks: list[str | None] = []  # joined texts of ids[b*BLOCK:(b+1)*BLOCK], built on demand
        self._bytes = 0
        self._built = False
        self.partial = False
        """True once a task was left out for the cap (answers may miss tasks)."""
        self._build_lock = threading.Lock()
        """One build at a time: searches wait on it for the index; the apply thread never does."""
        self._pending: dict[str, Task | None] | None = None
        """While a build reads the store: the writes committed meanwhile, each task's latest."""
        self._epoch = 0
        """Counts restores: a build that began before one is dropped."""

    @property
    def size(self) -> tuple[int, int]:
        """``(tasks, characters)`` indexed."""
        return len(self._texts), self._bytes

    def _changed_at(self, i: int, shifted: bool) -> None:
        b = i // BLOCK
        if shifted:  # ids moved: every block from here on
            del self._blocks[b:]
        elif b < len(self._blocks):
            self._blocks[b] = None

    def _drop(self, tid: str) -> None:
        i = bisect.bisect_left(self._ids, tid)
        del self._ids[i]
        self._changed_at(i, True)
        self._ns.pop(tid, None)

    def _put(self, tid: str, text: str | None, namespace: str = DEFAULT_NAMESPACE) -> None:
        old = self._texts.get(tid)
        if old == text:
            return  # a status change: the text is the same (and a task never changes namespace)
        if old is not None:
            del self._texts[tid]
            self._bytes -= len(old)
            if text is None:
                self._drop(tid)
        if text is None:
            return
        if self._bytes + len(text) > self.max_bytes:
            self.partial = True
            if old is not None:
                self._drop(tid)
            return
        self._texts[tid] = text
        self._bytes += len(text)
        if namespace != DEFAULT_NAMESPACE:
            self._ns[tid] = sys.intern(namespace)
        ids = self._ids
        if old is not None:
            self._changed_at(bisect.bisect_left(ids, tid), False)
        elif not ids or ids[-1] < tid:
            ids.append(tid)  # the usual case: ids grow with time
            self._changed_at(len(ids) - 1, False)
        else:
            i = bisect.bisect_left(ids, tid)
            ids.insert(i, tid)
            self._changed_at(i, True)

    def apply(self, changed: Mapping[str, Task | None] | None) -> None:
        """Task writes that committed (None = deleted); ``changed=None`` (a restore): forget all."""
        with self._lock:
            if changed is None:
                self._texts, self._ns, self._ids, self._blocks, self._bytes = {}, {}, [], [], 0
                self._built = self.partial = False
                self._pending = None
                self._epoch += 1
                return
            if self._pending is not None:  # a build is reading the store: it applies these when done
                self._pending.update(changed)
                return
            if not self._built:
                return
            for tid, t in changed.items():
                self._put_task(tid, t)

    def _ensure_built(self) -> None:
        """Builds the index from the store unless built. The store is read without holding the lock the
        apply thread takes (on a large store that read takes seconds): writes committed meanwhile are
        kept aside, each task's latest, and applied over the read once it is done (a task read after
        its write gets the same text again)."""
        with self._build_lock:
            while True:
                with self._lock:
                    if self._built:
                        return
                    epoch, self._pending = self._epoch, {}
                fresh = TaskIndex(self._load, self.max_bytes)
                for task in self._load():
                    fresh._put_task(task.id, task)
                with self._lock:
                    pending, self._pending = self._pending, None
                    if self._epoch != epoch or pending is None:  # a restore came in between: read again
                        continue
                    self._texts, self._ns, self._ids, self._blocks = fresh._texts, fresh._ns, fresh._ids, fresh._blocks
                    self._bytes, self.partial = fresh._bytes, fresh.partial
                    for tid, t in pending.items():
                        self._put_task(tid, t)
                    self._built = True
                    return

    def _put_task(self, tid: str, t: Task | None) -> None:
        self._put(tid, None, DEFAULT_NAMESPACE) if t is None else self._put(tid, task_text(t), t.spec.namespace)

    def _block_hits(self, b: int, needle: str, namespaces: frozenset[str] | None) -> list[str]:
        """Ids in block ``b`` whose text holds ``needle``, of ``namespaces`` only unless None (under the lock)."""
        blocks, ids, texts = self._blocks, self._ids, self._texts
        members = ids[b * BLOCK:(b + 1) * BLOCK]
        while len(blocks) <= b:
            blocks.append(None)
        joined = blocks[b]
        if joined is None:
            joined = blocks[b] = _SEP.join(texts[tid] for tid in members)
        if needle not in joined:
            return []
        if namespaces is None:
            return [tid for tid in members if needle in texts[tid]]
        ns = self._ns
        return [tid for tid in members if ns.get(tid, DEFAULT_NAMESPACE) in namespaces and needle in texts[tid]]

    def matches(
        self, text: str, after: str = "", reverse: bool = False, namespaces: Iterable[str] | None = None
    ) -> Iterator[str]:
        """Ids of tasks whose text contains ``text`` (case-insensitive), in id order strictly after
        ``after`` (newest first strictly before it with ``reverse``; ``""`` = from the end); of
        ``namespaces`` only, unless None (every namespace)."""
        only = None if namespaces is None else frozenset(namespaces)
        self._ensure_built()
        needle = text.lower()
        if _SEP in needle:
            return
        while True:
            with self._lock:
                ids = self._ids
                if reverse:
                    stop = bisect.bisect_left(ids, after) if after else len(ids)
                    if stop == 0:
                        return
                    hits = [tid for tid in self._block_hits((stop - 1) // BLOCK, needle, only)
                            if not after or tid < after]
                    hits.reverse()
                    after = ids[((stop - 1) // BLOCK) * BLOCK]
                else:
                    start = bisect.bisect_right(ids, after) if after else 0
                    if start >= len(ids):
                        return
                    b = start // BLOCK
                    hits = [tid for tid in self._block_hits(b, needle, only) if tid > after]
                    after = ids[min(len(ids), (b + 1) * BLOCK) - 1]
            yield from hits


__all__ = ["BLOCK", "DEFAULT_MAX_BYTES", "MAX_TASK_TEXT", "TaskIndex", "task_text"]
