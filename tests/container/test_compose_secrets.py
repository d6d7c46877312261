"""scripts/compose_secrets.py without Docker: the secrets are never readable by others, not even
between their creation and the final chmod."""

from __future__ import annotations

import os
import runpy
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from .engine import ROOT

SCRIPT = ROOT / "scripts" / "compose_secrets.py"


def test_the_token_and_secret_keys_are_0600_from_their_creation_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    before_chmod: dict[str, int] = {}
    real_chmod = Path.chmod

    def recording_chmod(self: Path, mode: int, **kw: Any) -> None:  # the mode each had until the script's chmod
        before_chmod[self.relative_to(out).as_posix()] = stat.S_IMODE(self.stat().st_mode)
        real_chmod(self, mode, **kw)

    monkeypatch.setattr(Path, "chmod", recording_chmod)
    monkeypatch.setattr(sys, "argv", ["compose_secrets.py", str(out)])
    old = os.umask(0o022)
    try:
        runpy.run_path(str(SCRIPT), run_name="compose_secrets")["main"]()
    finally:
        os.umask(old)
    files = {name: mode for name, mode in before_chmod.items() if (out / name).is_file()}
    assert sorted(files) == ["api_token", "n1.key_secret", "n2.key_secret", "n3.key_secret",
                             "public/n1.key", "public/n2.key", "public/n3.key"]
    assert files == dict.fromkeys(files, 0o600)
    assert before_chmod["public"] == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()} == {0o600}
