"""The leader's near-term window: a :class:`~molens.schedule.wheel.HierarchicalWheel` holding only the timers
due within ``horizon_ms``, topped up in slices from the ``due`` index (``docs/architecture.md#near-term-window``).

The ``due`` index (``(due_ms, key)`` in order) stays the truth. The window keeps one boundary,
``start``: every entry of the index ordered before it is in the wheel (or already handed out), none
at or after it is. So

- a wheel effect ``add(key, due)`` of an applied entry goes into the wheel when ``(due, key) < start``,
  and otherwise only takes the key out of the wheel (the index has it; a slice reads it later);
- :meth:`HorizonWheel.load` reads the next slice, ``(due, key) >= start`` and ``due < now + horizon``,
  at most ``slice_limit`` entries (one cursor range read), adds them and moves ``start`` past them.

Effects that reach the wheel after a slice was read from a newer state of the index (the store
applies before the leader's wheel hears of it) are still right: each effect is the last word on its
key up to its entry, the rule above files it on the same side of ``start`` as the index does, and a
later effect of the same key (on its way too) corrects an earlier one. A key the wheel hands out
that the index no longer holds at that time is refused by the state machine when dispatched.

Worked example (horizon 10 s, slices of at most 2)::

    index: (1000, a) (4000, b) (4000, c) (30000, d)        now = 0, start = (0, "")
    load -> reads a, b (full slice) -> start = (4000, "b\\0")
    load -> reads c (short slice)   -> start = (10000, "")       wheel: a b c
    add(e, 9000)  -> wheel          add(f, 12000) -> index only (a slice reads it once now + 10 s > 12 s)

A new key (an entry that created its task: no wheel can hold it yet) due at or after the window's
:class:`Reach` need not be sent to the wheel at all: a load raises the reach to the instant it reads
up to *before* it reads, and ``start`` never passes the reach, so such a key is either read by a
load that read the index after its entry committed, or filed behind ``start`` by the rule above,
where its add would only have taken out a key the wheel does not hold. The thread that routes the
effects of applied entries reads the reach after they committed (``molens.actors.supervisor``).
Most tasks are due beyond the horizon, so most creates never reach the wheel's mailbox.

Pure: no clock, no disk; the read is a function the caller passes in.
"""

from __future__ import annotations

from collections.abc import Callable

from molens.schedule.wheel import HierarchicalWheel

ReadSlice = Callable[[tuple[int, str], int, int], list[tuple[int, str]]]
"""``read(start, until_ms, limit)``: up to ``limit`` entries ``(due_ms, key)`` of the due index with
``(due_ms, key) >= start`` and ``due_ms < until_ms``, in index order."""

DEFAULT_SLICE_LIMIT = 4096
TOP_UP_PARTS = 16
"""The window is topped up once ``horizon_ms / TOP_UP_PARTS`` of it has passed."""


class Reach:
    """How far a window has read the due index, or is reading it now (see the module doc): shared
    between the window's thread, which only raises it, and the one that routes applied effects."""

    __slots__ = ("ms",)

    def __init__(self) -> None:
        self.ms = 0

    def wants(self, due_ms: int, new: bool) -> bool:
        """Whether an add of a key due at ``due_ms`` must reach the window (``new``: its entry made
        the key)."""
        return not new or due_ms < self.ms


class HorizonWheel:
    """Timers due within ``horizon_ms`` of now, the rest left in the due index (see the module doc)."""

    __slots__ = ("horizon_ms", "loaded", "max_size", "reach", "slice_limit", "slices", "start", "top_up_ms", "wheel")

    def __init__(self, tick_ms: int, now_ms: int, horizon_ms: int, slice_limit: int = DEFAULT_SLICE_LIMIT,
                 reach: Reach | None = None) -> None:
        if horizon_ms < tick_ms:
            raise ValueError(f"horizon_ms must be >= tick_ms, got {horizon_ms} < {tick_ms}")
        if slice_limit < 1:
            raise ValueError(f"slice_limit must be >= 1, got {slice_limit}")
        self.wheel: HierarchicalWheel[str] = HierarchicalWheel(tick_ms=tick_ms, start_ms=now_ms)
        self.horizon_ms = horizon_ms
        self.slice_limit = slice_limit
        self.top_up_ms = max(tick_ms, horizon_ms // TOP_UP_PARTS)
        self.start: tuple[int, str] = (0, "")
        """Entries of the index before this are in the wheel (or handed out); none from it on."""
        self.reach = reach if reach is not None else Reach()
        """Never before ``start``; raised before each read of the index to what it reads up to."""
        self.slices = 0
        self.loaded = 0
        self.max_size = 0
        """The most timers the wheel has held at once (after a load or an add)."""

    def __len__(self) -> int:
        return len(self.wheel)

    @property
    def loaded_until_ms(self) -> int:
        """Every timer due before this instant is in the wheel (or handed out)."""
        return self.start[0]

    # -- the loader ------------------------------------------------------------------------------

    def load_wanted(self, now_ms: int) -> bool:
        """Whether the window has fallen ``top_up_ms`` behind ``now_ms + horizon_ms``."""
        return self.start[0] <= now_ms + self.horizon_ms - self.top_up_ms

    def next_load_ms(self) -> int:
        """The instant from which :meth:`load_wanted` holds."""
        return self.start[0] - self.horizon_ms + self.top_up_ms

    def load(self, read: ReadSlice, now_ms: int) -> int:
        """Read one slice of the index into the wheel; returns how many timers it read."""
        until = max(now_ms + self.horizon_ms, self.start[0])
        if until > self.reach.ms:
            self.reach.ms = until  # before the read: see the module doc
        rows = read(self.start, until, self.slice_limit)
        add = self.wheel.add
        for due_ms, key in rows:
            add(key, due_ms)
        if len(rows) >= self.slice_limit:
            last_due, last_key = rows[-1]
            self.start = (last_due, last_key + "\x00")  # the least key after last_key
        else:
            self.start = (until, "")
        self.slices += 1
        self.loaded += len(rows)
        self._note_size()
        return len(rows)

    # -- effects ---------------------------------------------------------------------------------

    def add(self, key: str, due_ms: int) -> None:
        """An applied entry set ``key`` due at ``due_ms``: into the wheel inside the window, else out."""
        if (due_ms, key) < self.start:
            self.wheel.add(key, due_ms)
            self._note_size()
        else:
            self.wheel.remove(key)

    def remove(self, key: str) -> None:
        self.wheel.remove(key)

    def requeue(self, key: str, due_ms: int) -> None:
        """Put back a key the wheel handed out (its index entry is inside the window already)."""
        self.wheel.add(key, due_ms)
        self._note_size()

    def advance(self, now_ms: int) -> list[str]:
        return self.wheel.advance(now_ms)

    def next_deadline(self) -> int | None:
        return self.wheel.next_deadline()

    def _note_size(self) -> None:
        n = len(self.wheel)
        if n > self.max_size:
            self.max_size = n


__all__ = ["DEFAULT_SLICE_LIMIT", "HorizonWheel", "Reach", "ReadSlice"]
