"""No logic written twice in ``molens/``: no run of statements of six or more (nested ones counted)
stands twice, alike but for names and values, in the bodies of its functions.

What counts is logic, not declarations: a class body outside its methods (enum members, fields,
messages) is not read, nor is a statement that only keeps a value (``self.x = x``, ``x = 3``), and a literal is one
statement however many lines it spans (the OpenAPI document, a schema). A shape is the statement's
syntax tree with every name, attribute and constant replaced by its kind, so ``a.b(c)`` and
``x.y(z)`` are alike. The places that repeat a shape on purpose are listed in ``ON_PURPOSE`` with
the reason; a pair found that is not listed fails the test, naming both places.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_WEIGHT = 6
"""Statements a run must hold (each nested statement counted) to be reported."""

ON_PURPOSE = {
    frozenset({"molens/schedule/wheel.py:HierarchicalWheel.add", "molens/schedule/wheel.py:HierarchicalWheel._place"}):
        "add inlines _place's bucket insertion for levels 0 and 1: it is the hot path of a wheel rebuild",
    frozenset({"molens/node.py:Node._close_all", "molens/raft/transport.py:Endpoint._teardown"}):
        "close-and-forget of optional parts, in the order each object needs, each its own close call",
}


def _shape(node: ast.AST, memo: dict[int, str]) -> str:
    """The statement's tree with every name, attribute, argument and keyword name reduced to ``_``
    and every constant to its type."""
    done = memo.get(id(node))
    if done is not None:
        return done
    if isinstance(node, ast.Constant):
        return f"C:{type(node.value).__name__}"
    parts = [type(node).__name__]
    for field, value in ast.iter_fields(node):
        if field in ("ctx", "type_comment", "kind"):
            continue
        if isinstance(value, list):
            parts.append("[" + ",".join(_shape(v, memo) if isinstance(v, ast.AST) else "_" for v in value) + "]")
        elif isinstance(value, ast.AST):
            parts.append(_shape(value, memo))
        else:
            parts.append("_" if isinstance(value, str) else repr(value))
    out = memo[id(node)] = "(" + " ".join(parts) + ")"
    return out


def _weight(stmt: ast.stmt) -> int:
    return sum(isinstance(n, ast.stmt) for n in ast.walk(stmt))


def _keeps_a_value(stmt: ast.stmt) -> bool:
    """``target = name/constant/attribute`` (annotated or not): state being set, not logic."""
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        value = stmt.value
        return value is None or isinstance(value, ast.Name | ast.Constant | ast.Attribute)
    return isinstance(stmt, ast.Pass)


def _blocks(tree: ast.Module) -> Iterator[tuple[str, list[ast.stmt]]]:
    """Every statement list inside a function body, with the function's qualified name."""

    def walk(node: ast.AST, qual: str, in_function: bool) -> Iterator[tuple[str, list[ast.stmt]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{qual}{child.name}.", False)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{qual}{child.name}"
                yield name, child.body
                yield from _nested(child, name)
            elif not in_function:
                yield from walk(child, qual, in_function)

    def _nested(fn: ast.AST, name: str) -> Iterator[tuple[str, list[ast.stmt]]]:
        """The blocks inside ``fn``: of its compound statements, handlers and nested functions (a
        class defined in it is declarations: its body is passed over, its methods are not)."""
        for node in ast.walk(fn):
            if node is fn or isinstance(node, ast.ClassDef):
                continue
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    yield name, block

    yield from walk(tree, "", False)


def repeated_runs(root: Path) -> dict[frozenset[str], tuple[str, str, int]]:
    """Pairs of functions sharing a run of statements of the same shape of ``MIN_WEIGHT`` or more:
    ``{frozenset({"path:func", "path:func"}): ("path:line", "path:line", weight)}``."""
    seqs: list[tuple[str, str, list[ast.stmt], list[str]]] = []
    memo: dict[int, str] = {}
    for path in sorted((root / "molens").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), rel)
        for qual, block in _blocks(tree):
            kept = [s for s in block if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            seqs.append((rel, qual, kept, [_shape(s, memo) for s in kept]))
    starts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for si, (_, _, stmts, shapes) in enumerate(seqs):
        for i, sh in enumerate(shapes):
            if not _keeps_a_value(stmts[i]):
                starts[sh].append((si, i))
    found: dict[frozenset[str], tuple[str, str, int]] = {}
    for places in starts.values():
        if len(places) < 2:
            continue
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (sa, ia), (sb, ib) = places[a], places[b]
                rel_a, qual_a, stmts_a, shapes_a = seqs[sa]
                rel_b, qual_b, stmts_b, shapes_b = seqs[sb]
                if stmts_a[ia] is stmts_b[ib]:
                    continue
                if ia > 0 and ib > 0 and shapes_a[ia - 1] == shapes_b[ib - 1] and not _keeps_a_value(stmts_a[ia - 1]):
                    continue  # not where the run starts: counted from its start
                weight, k = 0, 0
                while ia + k < len(shapes_a) and ib + k < len(shapes_b) and shapes_a[ia + k] == shapes_b[ib + k]:
                    s = stmts_a[ia + k]
                    if stmts_b[ib + k] is s or (sa == sb and ia + k >= ib > ia):
                        break  # a run overlapping itself
                    if not _keeps_a_value(s):
                        weight += _weight(s)
                    k += 1
                if weight >= MIN_WEIGHT:
                    key = frozenset({f"{rel_a}:{qual_a}", f"{rel_b}:{qual_b}"})
                    if len(key) == 2 or sa != sb:
                        here = (f"{rel_a}:{stmts_a[ia].lineno}", f"{rel_b}:{stmts_b[ib].lineno}", weight)
                        if key not in found or found[key][2] < weight:
                            found[key] = here
    return found


def test_no_function_repeats_another_s_logic() -> None:
    found = repeated_runs(ROOT)
    unexplained = {k: v for k, v in found.items() if k not in ON_PURPOSE}
    assert not unexplained, "logic written twice (fold it into one function, or say why in ON_PURPOSE):\n" + "\n".join(
        f"  {a} ~ {b} ({w} statements)" for a, b, w in sorted(unexplained.values())
    )
    stale = [sorted(k) for k in ON_PURPOSE if k not in found]
    assert not stale, f"ON_PURPOSE lists pairs that no longer repeat: {stale}"


def test_the_check_finds_a_repeat_and_passes_over_declarations(tmp_path: Path) -> None:
    pkg = tmp_path / "molens"
    pkg.mkdir()
    body = """
    total = 0
    seen = 0
    for item in items:
        seen += 1
        if item.ok:
            total += item.size
        else:
            log.warning("bad %s", item)
    return total, seen
"""
    (pkg / "a.py").write_text("def count(items):" + body + "\n\nclass E:\n    A = 1\n    B = 2\n    C = 3\n")
    (pkg / "b.py").write_text("def tally(things):" + body.replace("item", "thing").replace("size", "n")
                              + "\n\nclass F:\n    X = 1\n    Y = 2\n    Z = 3\n")
    (pkg / "c.py").write_text("def init(self, a, b, c, d, e, f):\n" + "".join(
        f"    self.{v} = {v}\n" for v in "abcdef") + "\n\ndef init2(self, u, v, w, x, y, z):\n" + "".join(
        f"    self.{v} = {v}\n" for v in "uvwxyz"))
    nested = "def outer(rows):\n    def inner(items):" + body.replace("\n    ", "\n        ") + "\n    return inner(rows)\n"
    (pkg / "d.py").write_text(nested)  # a copy inside a nested function is found too
    found = repeated_runs(tmp_path)
    assert set(found) == {
        frozenset({"molens/a.py:count", "molens/b.py:tally"}),
        frozenset({"molens/a.py:count", "molens/d.py:outer"}),
        frozenset({"molens/b.py:tally", "molens/d.py:outer"}),
    }, found
