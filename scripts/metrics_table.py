#!/usr/bin/env python3
"""Writes the metrics table of docs/observability.md from the code (``molens.web.metrics.catalogue``).

``scripts/metrics_table.py`` rewrites the table between its markers; ``--check`` only says whether it
is up to date (exit 1 when not). tests/unit/test_metrics_table.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from molens.web.metrics import catalogue

DOC = Path(__file__).resolve().parent.parent / "docs" / "observability.md"
START = "<!-- metrics table: written by scripts/metrics_table.py from molens/web/metrics.py -->"
END = "<!-- end of metrics table -->"


def table() -> str:
    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for f in catalogue():
        labels = ", ".join(f"`{x}`" for x in f.labels) or "-"
        rows.append(f"| `{f.name}` | {f.type} | {labels} | {f.help.replace('|', '/')} |")
    return "\n".join(rows)


def with_table(doc: str) -> str:
    """``doc`` with the text between the markers replaced by :func:`table`."""
    head, sep, rest = doc.partition(START)
    _old, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC}: the markers {START!r} and {END!r} are missing")
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is not up to date")
    args = ap.parse_args(argv)
    doc = DOC.read_text()
    new = with_table(doc)
    if args.check:
        if new != doc:
            print(f"{DOC}: the metrics table differs from the code; run scripts/metrics_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
