"""mooncat_checkpoint needs nothing outside the standard library and ships its type information."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mooncat_checkpoint

ROOT = Path(__file__).resolve().parents[3]

PROBE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import mooncat_checkpoint, mooncat_checkpoint.cli, mooncat_checkpoint.backends.file
import mooncat_checkpoint.backends.sqlite, mooncat_checkpoint.backends.memory
outside = sorted(
    name for name in sys.modules
    if name.split(".")[0] not in sys.stdlib_module_names and name.split(".")[0] not in ("mooncat_checkpoint", "__main__")
)
print(",".join(outside))
"""


def test_imports_only_the_standard_library() -> None:
    # -S: no site-packages at all, so any third-party import would fail outright.
    out = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(ROOT)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_ships_py_typed() -> None:
    assert (Path(mooncat_checkpoint.__file__).parent / "py.typed").is_file()
