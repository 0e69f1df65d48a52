"""``dflashbench`` with the stand-in backend registered: tests that need the sweep as a process of its own (to
SIGKILL it, to run two at once, to run it on a full filesystem) run ``python tests/standin_cli.py sweep ...``."""

import sys

from dflashbench.backends import BACKENDS
from dflashbench.cli import app

BACKENDS["standin"] = "dflashbench.bench.standin:StandinBackend"

if __name__ == "__main__":
    sys.exit(app())
