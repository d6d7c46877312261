"""What the ``molens`` command prints: aligned tables for people, or the API's JSON for scripts.

Three modes, chosen per call (``--json`` / ``--jsonl``, else a table):

- ``table``: a list is one header row and one row per item, columns padded to their widest cell;
  one object is ``field  value`` lines, epoch-ms times followed by their UTC reading.
- ``json``: exactly one JSON document on stdout: the object, or an array of every item.
- ``jsonl``: one compact JSON object per line: each item of a list, or the one object.

Messages for people (counts, prompts, errors) go to stderr, so stdout holds only the data.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO

Row = dict[str, Any]


class Mode(StrEnum):
    TABLE = "table"
    JSON = "json"
    JSONL = "jsonl"


def when(ms: Any) -> str:
    """Epoch ms as UTC ``2026-12-04 09:00:00.000Z``; ``-`` for none."""
    if isinstance(ms, bool) or not isinstance(ms, int):
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_CONTROLS[0x0A] = _CONTROLS[0x09] = " "
"""C0 and C1 control characters as ``\\xNN``, a newline or a tab as a space: text a callback receiver
wrote (``last_response``) must not reach the terminal as an escape sequence."""


def printable(text: str) -> str:
    """``text`` with its control characters shown, not sent to the terminal."""
    return text.translate(_CONTROLS)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return printable(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return printable(str(value))


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    value: Callable[[Row], Any]
    max_width: int = 60
    width: int = 0
    """Cells' fixed width in a table printed row by row."""

    def text(self, row: Row) -> str:
        s = cell(self.value(row))
        return s if len(s) <= self.max_width else s[: self.max_width - 1] + "…"


def col(header: str, key: str, *, time: bool = False, max_width: int = 60, width: int = 0) -> Column:
    """A column showing ``row[key]`` (an epoch-ms time read as UTC when ``time``)."""
    if time:
        return Column(header, lambda r: when(r.get(key)) if r.get(key) is not None else None, max_width,
                      max(width, len(header)))
    return Column(header, lambda r: r.get(key), max_width, max(width, len(header)))


class Printer:
    """Prints data on ``out`` and messages on ``err`` in one :class:`Mode`."""

    def __init__(self, mode: Mode, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.mode = mode
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def note(self, text: str) -> None:
        """A message for a person (stderr; printed in every mode)."""
        print(text, file=self.err, flush=True)

    def obj(self, obj: Row | list[Row], *, summary: Sequence[Column] | None = None) -> None:
        """One object (or a list, as one JSON document). In a table, ``summary`` (when given) is a
        one-row table instead of every field."""
        if self.mode is not Mode.TABLE:
            self._json(obj)
        elif isinstance(obj, list):
            self.table(obj, summary or ())
        elif summary is not None:
            self.table([obj], summary)
        else:
            self.fields(obj)

    def fields(self, obj: Row) -> None:
        width = max((len(k) for k in obj), default=0)
        for k, v in obj.items():
            text = cell(v)
            if k.endswith("_at") and isinstance(v, int) and not isinstance(v, bool):
                text = f"{v} ({when(v)})"
            print(f"{printable(k).ljust(width)}  {text}", file=self.out)
        self.out.flush()

    def items(self, rows: Iterable[Row], columns: Sequence[Column]) -> int:
        """A list; returns how many items it printed. ``jsonl`` prints each as it comes."""
        if self.mode is Mode.JSONL:
            n = 0
            for r in rows:
                self.line(r)
                n += 1
            return n
        got = list(rows)
        if self.mode is Mode.JSON:
            self._json(got)
        else:
            self.table(got, columns)
        return len(got)

    def line(self, row: Row) -> None:
        """One compact JSON line."""
        print(json.dumps(row, ensure_ascii=False, separators=(",", ":")), file=self.out, flush=True)

    def stream_header(self, columns: Sequence[Column]) -> None:
        """The header of a table printed row by row (:meth:`stream_row`), cells padded to fixed widths."""
        print("  ".join(c.header.ljust(c.width) for c in columns).rstrip(), file=self.out, flush=True)

    def stream_row(self, row: Row, columns: Sequence[Column]) -> None:
        print("  ".join(c.text(row).ljust(c.width) for c in columns).rstrip(), file=self.out, flush=True)

    def table(self, rows: Sequence[Row], columns: Sequence[Column]) -> None:
        cells = [[c.header for c in columns], *([c.text(r) for c in columns] for r in rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(), file=self.out)
        self.out.flush()

    def _json(self, value: Any) -> None:
        if self.mode is Mode.JSONL:
            print(json.dumps(value, ensure_ascii=False, separators=(",", ":")), file=self.out, flush=True)
        else:
            print(json.dumps(value, ensure_ascii=False, indent=2), file=self.out, flush=True)
