"""``python -m mooncat_checkpoint``: the ``mooncat-checkpoint`` CLI."""

from __future__ import annotations

import sys

from mooncat_checkpoint.cli import main

sys.exit(main())
