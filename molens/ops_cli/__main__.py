"""``python -m molens.ops_cli``: the ``molens`` command."""

import sys

from molens.ops_cli import main

sys.exit(main())
