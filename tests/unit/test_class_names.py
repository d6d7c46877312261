"""One name per class: a class name read anywhere in ``molens/`` means one class, so a reader (or a
search) never lands on the wrong one. ``molens/client.py`` is left out: the client SDK's public
error and enum names mirror the server's on purpose (a caller catches the error the API names)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "molens"
MIRRORS_THE_SERVER = {PACKAGE / "client.py"}


def test_no_class_name_is_defined_twice_in_molens() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in MIRRORS_THE_SERVER:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert {name: places for name, places in where.items() if len(places) > 1} == {}
