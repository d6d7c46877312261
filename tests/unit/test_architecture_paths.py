"""Every backticked repository path that docs/architecture.md names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"`((?:molens|tests|scripts)/[\w./-]+)`")


def test_every_path_in_architecture_md_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = sorted({p for p in PATH.findall(text) if not (ROOT / p.rstrip("/")).exists()})
    assert missing == []
