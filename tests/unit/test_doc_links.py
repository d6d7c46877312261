"""Every `docs/*.md#anchor` link in the repository's docs resolves to a heading or an HTML anchor."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\(((?:[\w./-]*/)?([\w-]+\.md))?#([\w-]+)\)")


def _slug(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(_slug(line.lstrip("#")))
    return found


def _markdown_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in out.stdout.split()]


def test_every_link_into_benchmarks_md_resolves() -> None:
    anchors = _anchors(ROOT / "docs" / "benchmarks.md")
    dangling = []
    for md in _markdown_files():
        text = md.read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            target, name, anchor = match.group(1), match.group(2), match.group(3)
            points_here = name == "benchmarks.md" or (target is None and md.name == "benchmarks.md")
            if points_here and anchor not in anchors:
                dangling.append(f"{md.relative_to(ROOT)}: #{anchor}")
    assert dangling == []
