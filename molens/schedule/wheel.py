"""A pure hierarchical time wheel (Kafka ``TimingWheel`` style): time is the ``now_ms`` argument.

Level ``l`` has ``wheel_size`` buckets of ``tick_ms * wheel_size**l`` ms each (defaults: 10 ms tick,
512 buckets, 4 levels: 5.12 s, 43.7 min, 15.5 days, 21 years). A timer goes to the lowest level
whose window, measured from the current tick, still contains its due time; timers beyond the top
level wait in an overflow set that is re-examined when the top level can take its earliest member.
When a bucket's start is reached, it is *opened*: where Kafka cascades each timer into finer
levels, this wheel sorts the bucket once and reads it in order as a *run* (one C-level sort instead
of a Python loop per timer and level; a bucket of more than 20,000 timers is split in one pass and
sorted window by window of the level below, as a whole-bucket sort misses the cache). Timers due in the current tick wait in a small heap. So
:meth:`HierarchicalWheel.advance` returns timers in exact due order: firing precision is not limited by the
tick.

Representation (sized for millions of timers): a bucket is a ``dict`` ``key -> stamp`` and
``_where`` maps ``key -> the dict that holds it``, so ``remove`` is two dict deletions (keys handed
out from an opened bucket linger there, marked stale, until the bucket is used up: see ``_Run``). The stamp is
one int, ``due_ms << 64 | seq``: sorting by it gives due order with ties in ``add`` order. Non-empty
buckets are found through a heap of bucket ids (``start_ms * (levels + 1) + level``), so advancing
over a long empty stretch costs nothing per empty tick, and :meth:`HierarchicalWheel.next_deadline` is the
start of the first unopened bucket or the first due time among the opened ones.

Not thread-safe: one owner (the leader's scheduler) drives it.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from heapq import heappop, heappush
from operator import itemgetter
from typing import Generic, TypeVar, cast

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

DEFAULT_TICK_MS = 10
DEFAULT_WHEEL_SIZE = 512
#: the wheel levels (without overflow) cover at least this far ahead: five years, leap days included
DEFAULT_HORIZON_MS = 5 * 366 * 86_400_000

_SEQ_BITS = 64
#: a reached bucket with more timers than this is sorted window by window rather than whole
_CHUNK_MIN = 20_000
_second = itemgetter(1)
_sink: deque[object] = deque(maxlen=0)
_drain = _sink.extend  # consumes an iterator at C speed


def levels_for(tick_ms: int = DEFAULT_TICK_MS, wheel_size: int = DEFAULT_WHEEL_SIZE, horizon_ms: int = DEFAULT_HORIZON_MS) -> int:
    """How many levels a wheel of ``tick_ms`` and ``wheel_size`` has: enough to cover ``horizon_ms``
    ahead (the top level always accepts anything less than ``wheel_size - 1`` of its buckets ahead)."""
    levels = 1
    while (wheel_size - 1) * tick_ms * wheel_size ** (levels - 1) < horizon_ms:
        levels += 1
    return levels


@dataclass(frozen=True, slots=True)
class BucketStat:
    """One cell of the occupancy heatmap: a bucket's window ``[start_ms, start_ms + span_ms)``."""

    start_ms: int
    span_ms: int
    count: int


class _Bucket(dict[K, int]):
    """A bucket, ``key -> stamp``. Once opened as a run, ``taken`` is the stamp below which its keys
    have been handed out (they stay in it, and in ``_where``, until the run is used up or the key
    is added or removed again), and ``removed`` counts pending keys removed or moved out since."""

    __slots__ = ("removed", "taken")

    def __init__(self) -> None:
        super().__init__()
        self.taken: int | None = None
        self.removed = 0


class _Run(Generic[K]):
    """A reached bucket, sorted once: ``keys[pos:]`` (stamps in ``stamps[pos:]``) may be pending.

    ``entries`` is the bucket and stays the truth for what is pending: ``_where`` points at it and it
    never gains members, so a key at or after ``pos`` that is no longer in it was removed or moved
    and is skipped (``skipped`` counts those passed; ``entries.removed`` all of them). Keys handed
    out stay in ``entries`` *and in* ``_where``, stale (``stamp < entries.taken``), until the run is
    used up; then they leave ``_where`` in one C-level sweep in insertion order. Deleting them from
    the big key index one by one, in due order, missed the cache on every timer and cost a third of
    the expiry time. ``stamps`` are the bucket's own int objects, in order: the due prefix is found
    by bisecting them against ``(now_ms + 1) << 64`` (no per-timer shift into a packed array).
    """

    __slots__ = ("chunks", "entries", "keys", "level", "pos", "skipped", "stamps")

    def __init__(self, entries: _Bucket[K], level: int, chunk_span: int = 0) -> None:
        """``chunk_span`` > 0: a big bucket, split in one pass into windows of that many ms that
        are each sorted when reached (sorting it whole missed the cache on every comparison)."""
        self.entries = entries
        entries.removed = 0
        self.level = level
        self.skipped = 0
        self.chunks: list[dict[K, int]] = []  # the windows still to sort, last one first
        if not chunk_span:
            self._load(entries)
            return
        parts: dict[int, dict[K, int]] = {}
        unit = chunk_span << _SEQ_BITS
        for key, stamp in entries.items():
            w = stamp // unit
            part = parts.get(w)
            if part is None:
                part = parts[w] = {}
            part[key] = stamp
        self.chunks = [parts[w] for w in sorted(parts, reverse=True)]
        self._load(self.chunks.pop())

    def _load(self, part: dict[K, int]) -> None:
        self.keys = sorted(part, key=part.__getitem__)
        self.stamps = list(map(part.__getitem__, self.keys))  # a small dict: in cache
        self.pos = 0

    def live(self) -> int:
        rest = len(self.keys) - self.pos + sum(map(len, self.chunks))
        return rest - (self.entries.removed - self.skipped)

    def head(self) -> int | None:
        """Due time of the first live entry (skipping dead ones for good), or ``None`` when used up."""
        entries = self.entries
        while True:
            keys, pos = self.keys, self.pos
            n = len(keys)
            while pos < n and keys[pos] not in entries:
                pos += 1
                self.skipped += 1
            self.pos = pos
            if pos < n:
                return self.stamps[pos] >> _SEQ_BITS
            if not self.chunks:
                return None
            self._load(self.chunks.pop())

    def take(self, now_ms: int) -> list[K]:
        """Hand out the live entries due at or before ``now_ms``, in order."""
        entries = self.entries
        lim = (now_ms + 1) << _SEQ_BITS
        out: list[K] = []
        while True:
            pos, keys = self.pos, self.keys
            j = bisect_left(self.stamps, lim, pos)
            self.pos = j
            if entries.removed == self.skipped:  # nothing removed from keys[pos:] (nor later chunks)
                out += keys[pos:j]
            else:
                for i in range(pos, j):
                    key = keys[i]
                    if key in entries:
                        out.append(key)
                    else:
                        self.skipped += 1
            if j < len(keys) or not self.chunks:
                break
            self._load(self.chunks.pop())  # the next window may hold due entries too
        entries.taken = lim
        return out

    def purge(self, where: dict[K, _Bucket[K]]) -> None:
        """The run is used up: its handed-out keys still here leave the key index."""
        _drain(map(where.pop, self.entries))


class HierarchicalWheel(Generic[K]):
    """Timers keyed by any hashable (task ids); ``advance(now_ms)`` hands out the due keys in order.

    Keys are unique: adding a present key moves it. ``now_ms`` passed to :meth:`advance` should not
    go backwards; an earlier value than a previous call's is treated as the current tick.
    """

    __slots__ = (
        "_buckets",
        "_count",
        "_cur",
        "_levels",
        "_limits",
        "_near",
        "_near_end",
        "_near_heap",
        "_nl",
        "_over",
        "_over_mark",
        "_queue",
        "_rebase_at",
        "_runs",
        "_seq",
        "_size",
        "_spans",
        "_tick",
        "_where",
        "_window0",
    )

    def __init__(
        self,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        start_ms: int = 0,
        horizon_ms: int = DEFAULT_HORIZON_MS,
    ) -> None:
        """``start_ms`` is the current time; levels are added until they cover ``horizon_ms`` ahead."""
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        levels = levels_for(tick_ms, wheel_size, horizon_ms)
        self._tick = tick_ms
        self._size = wheel_size
        self._levels = levels
        self._nl = levels + 1  # bucket id multiplier; level == levels marks the overflow set
        self._spans: tuple[int, ...] = tuple(tick_ms * wheel_size**lv for lv in range(levels))
        self._limits: list[int] = []
        self._cur = 0
        self._near_end = 0
        self._where: dict[K, _Bucket[K]] = {}
        self._count = 0
        self._buckets: dict[int, _Bucket[K]] = {}
        self._queue: list[int] = []
        self._near: _Bucket[K] = _Bucket()
        self._near_heap: list[tuple[int, K]] = []
        self._over: _Bucket[K] = _Bucket()
        self._over_mark: int | None = None
        self._runs: list[_Run[K]] = []
        self._seq = 0
        self._window0 = tick_ms * wheel_size  # the span of level 0, and of a level-1 bucket
        self._cur = start_ms - start_ms % tick_ms
        self._near_end = self._cur + tick_ms
        self._rebase_at = 0
        self._set_limits()

    # -- queries ---------------------------------------------------------------------------------

    @property
    def tick_ms(self) -> int:
        return self._tick

    @property
    def wheel_size(self) -> int:
        return self._size

    @property
    def levels(self) -> int:
        """Number of wheel levels (the overflow set not counted)."""
        return self._levels

    @property
    def current_ms(self) -> int:
        """Start of the current tick: the last ``advance`` time (or ``start_ms``) rounded down."""
        return self._cur

    @property
    def overflow_count(self) -> int:
        """Timers beyond the top level's window, waiting in the overflow set."""
        return len(self._over)

    def level_span_ms(self, level: int) -> int:
        """Width of one bucket at ``level``."""
        return self._spans[level]

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        return self.due_of(cast(K, key)) is not None

    def due_of(self, key: K) -> int | None:
        """The due time ``key`` was added with, or ``None`` when it is not pending."""
        b = self._where.get(key)
        if b is None or (b.taken is not None and b[key] < b.taken):
            return None
        return b[key] >> _SEQ_BITS

    def next_deadline(self) -> int | None:
        """Earliest instant at which :meth:`advance` returns something or opens a bucket; ``None`` if empty.

        Sleeping until then misses nothing. It may be in the past (a timer added already overdue):
        advance now.
        """
        heap, near = self._near_heap, self._near
        while heap and near.get(heap[0][1]) != heap[0][0]:
            heappop(heap)
        best = heap[0][0] >> _SEQ_BITS if heap else None
        used_up = False
        for run in self._runs:
            head = run.stamps[run.pos] >> _SEQ_BITS if run.keys[run.pos] in run.entries else run.head()
            if head is None:
                used_up = True
            elif best is None or head < best:
                best = head
        if used_up:
            self._drop_used_runs()
        queue, nl, buckets = self._queue, self._nl, self._buckets
        while queue:
            bid = queue[0]
            if buckets.get(bid):
                break
            if bid % nl == self._levels:
                if bid // nl == self._over_mark:
                    if self._over:
                        break
                    self._over_mark = None
            else:
                buckets.pop(bid, None)
            heappop(queue)
        if queue:
            start = queue[0] // nl
            if best is None or start < best:
                best = start
        return best

    def distribution(self, level: int) -> list[BucketStat]:
        """Occupancy of ``level``'s ``wheel_size`` windows from the current one (heatmap row).

        Level 0's first window is the current tick, including overdue timers; a level's first
        window includes its current bucket when it has been reached and opened as a run.
        """
        if not 0 <= level < self._levels:
            raise ValueError(f"level must be in 0..{self._levels - 1}, got {level}")
        span = self._spans[level]
        base = self._cur - self._cur % span
        counts = [0] * self._size
        nl = self._nl
        for bid, b in self._buckets.items():
            if b and bid % nl == level:
                i = (bid // nl - base) // span
                counts[min(max(i, 0), self._size - 1)] += len(b)
        if level == 0:
            counts[0] += len(self._near)
        counts[0] += sum(run.live() for run in self._runs if run.level == level)
        return [BucketStat(base + i * span, span, c) for i, c in enumerate(counts)]

    # -- updates ---------------------------------------------------------------------------------

    def add(self, key: K, due_ms: int) -> None:
        """Schedule ``key`` at ``due_ms`` (moving it if present); an overdue time fires next advance."""
        where = self._where
        old = where.get(key)
        if old is None:
            self._count += 1
        elif old.taken is None or old[key] >= old.taken:
            del old[key]  # pending: move it
            old.removed += 1
        else:
            del old[key]  # handed out already: a stale entry
            self._count += 1
        seq = self._seq
        self._seq = seq + 1
        stamp = (due_ms << _SEQ_BITS) + seq
        # Inlined _place for the common case (levels 0 and 1): add is the hot path of a rebuild.
        if self._near_end <= due_ms:
            limits = self._limits
            if due_ms < limits[0]:
                level = 0
            elif self._levels > 1 and due_ms < limits[1]:
                level = 1
            else:
                self._place(key, stamp, due_ms)
                return
            span = self._spans[level]
            bid = (due_ms - due_ms % span) * self._nl + level
            b = self._buckets.get(bid)
            if b is None:
                b = self._buckets[bid] = _Bucket()
                heappush(self._queue, bid)
            b[key] = stamp
            where[key] = b
        else:
            self._near[key] = stamp
            heappush(self._near_heap, (stamp, key))
            where[key] = self._near

    def remove(self, key: K) -> bool:
        """Forget ``key``; ``False`` if it was not pending. O(1)."""
        b = self._where.pop(key, None)
        if b is None:
            return False
        stale = b.taken is not None and b[key] < b.taken  # handed out already
        del b[key]
        if stale:
            return False
        b.removed += 1
        self._count -= 1
        return True

    def advance(self, now_ms: int) -> list[K]:
        """Move the clock to ``now_ms``; return every key due at or before it, in due order.

        Ties come out in ``add`` order. Each non-empty bucket whose start has been reached is
        opened once (O(n log n) for its n timers); empty ticks cost nothing.
        """
        if now_ms < self._near_end or self._near:
            return self._advance(now_ms)
        queue = self._queue
        if queue and queue[0] < (now_ms + 1) * self._nl:
            return self._advance(now_ms)
        # The busy leader's common case, inlined: a new tick, nothing in the old one, no bucket to
        # open, at most one open run with something due.
        self._to_tick(now_ms - now_ms % self._tick)
        run = None
        lim = (now_ms + 1) << _SEQ_BITS
        for r in self._runs:
            if r.stamps[r.pos] < lim:
                if run is not None:
                    return self._take_runs(now_ms, [], False)  # two runs to merge
                run = r
        if run is None:
            return []
        pos, keys = run.pos, run.keys
        if run.entries.removed != run.skipped:  # some of keys[pos:] were removed
            return self._take_runs(now_ms, [], False)
        j = bisect_left(run.stamps, lim, pos)
        if j == len(keys) and run.chunks:  # the next window may hold due entries too
            return self._take_runs(now_ms, [], False)
        run.pos = j
        run.entries.taken = lim
        self._count -= j - pos
        if j == len(keys):
            self._drop_used_runs()
        return keys[pos:j]

    def _to_tick(self, target: int) -> None:
        """Make ``target`` (a tick's start) the current tick, nothing left to open before it."""
        self._cur = target
        self._near_end = target + self._tick
        if target >= self._rebase_at:
            self._set_limits()
        else:
            self._limits[0] = target + self._window0

    def _advance(self, now_ms: int) -> list[K]:
        """The general case of :meth:`advance`; ``_take_runs`` counts what it hands out."""
        due_lim = (now_ms + 1) << _SEQ_BITS  # stamp < due_lim  <=>  due <= now_ms
        where = self._where
        out: list[tuple[int, K]] = []  # (stamp, key): stamps are unique, so keys are never compared
        merge = False  # out may hold more than one sorted sequence
        if now_ms >= self._near_end:
            # A new tick: everything in the old current tick is due.
            near = self._near
            if near:
                out.extend(zip(near.values(), near.keys()))
                _drain(map(where.pop, near))
                self._near = _Bucket()
                self._near_heap = []
                merge = True
            queue = self._queue
            target = now_ms - now_ms % self._tick
            if queue and queue[0] < (now_ms + 1) * self._nl:
                self._reach(now_ms, target, due_lim, out)
                merge = True
            else:
                self._to_tick(target)
        else:
            heap, near = self._near_heap, self._near
            while heap and heap[0][0] < due_lim:
                item = heappop(heap)
                if near.get(item[1]) == item[0]:
                    del near[item[1]]
                    del where[item[1]]
                    out.append(item)
        return self._take_runs(now_ms, out, merge)

    def _take_runs(self, now_ms: int, out: list[tuple[int, K]], merge: bool) -> list[K]:
        """Add the due entries of the open runs to ``out``; return all of it as keys in due order."""
        lim = (now_ms + 1) << _SEQ_BITS
        due = [run for run in self._runs if run.stamps[run.pos] < lim]
        if not due:
            if merge and len(out) > 1:
                out.sort()
            self._count -= len(out)
            return list(map(_second, out))
        if not out and len(due) == 1:
            run = due[0]  # alone: its keys come out in order as they are
            keys = run.take(now_ms)
            if run.pos == len(run.keys):
                self._drop_used_runs()
            self._count -= len(keys)
            return keys
        for run in due:
            keys = run.take(now_ms)
            out.extend(zip(map(run.entries.__getitem__, keys), keys))
        self._drop_used_runs()
        if len(out) > 1:
            out.sort()
        self._count -= len(out)
        return list(map(_second, out))

    def _drop_used_runs(self) -> None:
        """Close the runs with nothing pending left; their stale keys leave the index."""
        keep = []
        for run in self._runs:
            if run.pos < len(run.keys) or run.head() is not None:  # head() opens the next window
                keep.append(run)
            else:
                run.purge(self._where)
        self._runs = keep

    # -- internals -------------------------------------------------------------------------------

    def _set_limits(self) -> None:
        """Per level, the first instant beyond its window; level 0's alone moves every tick."""
        cur, size = self._cur, self._size
        self._limits = [cur - cur % span + span * size for span in self._spans]
        self._rebase_at = cur - cur % self._window0 + self._window0

    def _reach(self, now_ms: int, target: int, due_lim: int, out: list[tuple[int, K]]) -> None:
        """Open every bucket whose start is <= ``now_ms`` and move the clock to ``target``."""
        queue, nl, levels, buckets, where = self._queue, self._nl, self._levels, self._buckets, self._where
        bid_lim = (now_ms + 1) * nl
        reached: list[tuple[int, _Bucket[K]]] = []
        near = self._near
        while queue and queue[0] < bid_lim:
            bid = heappop(queue)
            if bid == target * nl:
                # The level-0 bucket of the new current tick becomes the near set as it is.
                near = buckets.pop(bid, near)
            elif bid % nl == levels:
                if bid // nl == self._over_mark:
                    self._over_mark = None
                    if self._over:
                        reached.append((bid, self._over))
                        self._over = _Bucket()
            else:
                b = buckets.pop(bid, None)
                if b:
                    reached.append((bid, b))
        self._cur = target
        self._near_end = target + self._tick
        self._set_limits()
        if near:
            heap = sorted(zip(near.values(), near.keys()))
            i = bisect_left(heap, (due_lim,))
            if i:
                out.extend(heap[:i])
                for _, key in heap[:i]:
                    del near[key]
                    del where[key]
                del heap[:i]
            self._near = near
            self._near_heap = heap  # sorted, hence a heap
        spans = self._spans
        for bid, b in reached:
            level = bid % nl
            if level == levels:
                self._cascade(b, due_lim, out)
            elif bid // nl + spans[level] <= now_ms + 1:
                out.extend(zip(b.values(), b.keys()))
                _drain(map(where.pop, b))
            elif len(b) > _CHUNK_MIN:
                # Sorting a big bucket in one go misses the cache on every comparison (1.1 us per
                # timer at 270,000): it is sorted window by window of the level below instead.
                self._runs.append(_Run(b, level, spans[level - 1] if level else self._tick))
            else:
                # Sorted once and read in order, rather than cascaded entry by entry to finer levels.
                self._runs.append(_Run(b, level))

    def _cascade(self, b: _Bucket[K], due_lim: int, out: list[tuple[int, K]]) -> None:
        """Hand out the due timers of the reached overflow set, re-place the rest (inlined ``_place``)."""
        where, near, near_heap = self._where, self._near, self._near_heap
        near_end, limits, spans, nl = self._near_end, self._limits, self._spans, self._nl
        buckets, queue = self._buckets, self._queue
        nlimits = len(limits)
        for key, stamp in b.items():
            if stamp < due_lim:
                out.append((stamp, key))
                del where[key]
                continue
            due = stamp >> _SEQ_BITS
            if due < near_end:
                near[key] = stamp
                heappush(near_heap, (stamp, key))
                where[key] = near
                continue
            level = 0
            while level < nlimits and due >= limits[level]:
                level += 1
            if level == nlimits:
                self._place(key, stamp, due)
                continue
            span = spans[level]
            bid = (due - due % span) * nl + level
            nb = buckets.get(bid)
            if nb is None:
                nb = buckets[bid] = _Bucket()
                heappush(queue, bid)
            nb[key] = stamp
            where[key] = nb

    def _place(self, key: K, stamp: int, due: int) -> None:
        """Put a timer (not in any bucket) where it belongs relative to the current tick."""
        if due < self._near_end:
            self._near[key] = stamp
            heappush(self._near_heap, (stamp, key))
            self._where[key] = self._near
            return
        for level, limit in enumerate(self._limits):
            if due < limit:
                span = self._spans[level]
                bid = (due - due % span) * self._nl + level
                b = self._buckets.get(bid)
                if b is None:
                    b = self._buckets[bid] = _Bucket()
                    heappush(self._queue, bid)
                b[key] = stamp
                self._where[key] = b
                return
        self._over[key] = stamp
        self._where[key] = self._over
        # The top level takes ``due`` once its current bucket start is > due - size * span.
        span = self._spans[-1]
        mark = -((self._size * span - 1 - due) // span) * span
        if self._over_mark is None or mark < self._over_mark:
            self._over_mark = mark
            heappush(self._queue, mark * self._nl + self._levels)
