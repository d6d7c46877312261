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
import mooncat_checkpoint.backends.redis, mooncat_checkpoint.backends.postgres
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


MISSING = r"""
import sys
sys.path.insert(0, sys.argv[1])
from mooncat_checkpoint import BackendUnavailableError, SyncCheckpointClient
try:
    SyncCheckpointClient(sys.argv[2])
except BackendUnavailableError as e:
    print(e)
"""


def test_redis_and_postgresql_without_their_package_say_which_to_install() -> None:
    for url, package in (("redis://127.0.0.1:1/0", "pip install redis"),
                         ("postgresql://u:pw@127.0.0.1:1/db", "pip install 'psycopg[binary]'")):
        out = subprocess.run(
            [sys.executable, "-S", "-c", MISSING, str(ROOT), url], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        line = out.stdout.strip()
        assert package in line and "\n" not in line and "pw" not in line.replace("pip", ""), line


def test_the_cli_reports_a_missing_package_in_one_line_not_a_traceback() -> None:
    out = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "from mooncat_checkpoint.cli import main; sys.exit(main(sys.argv[2:]))", str(ROOT),
         "--url", "redis://127.0.0.1:1/0", "list", "ns"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and "pip install" in out.stderr, out.stderr
