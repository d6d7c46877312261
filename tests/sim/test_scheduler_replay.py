"""A scheduler seed replays the same in any process: what the simulation does (and so the failure a
printed replay command names) does not hang on the process's string hash seed. A flow's held fires
were once let go in the iteration order of a set of flow keys, which does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _summary(seed: int, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-m", "tests.sim.cli", "--scheduler", "--seed", str(seed)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith("ran ")]
    return re.sub(r" in [0-9.]+s \([0-9.]+ seeds/s\)", "", line)  # (the wall-clock time it took)


@pytest.mark.sim
@pytest.mark.parametrize("seed", [47000055, 47000244, 47000700])
def test_a_seed_does_the_same_under_two_string_hash_seeds(seed: int) -> None:
    assert _summary(seed, "1") == _summary(seed, "2")
