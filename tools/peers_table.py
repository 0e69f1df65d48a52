"""The ``bench peers`` table over several of its runs together: ``python tools/peers_table.py A.json B.json ...``.

Each file is what ``dflashbench bench peers --json`` (``nox -s peers -- --json FILE``) wrote; their runs are taken
together, each file's repeats numbered after the previous file's so that every repeat stays paired within its own
run, and the table is the one ``bench peers`` prints (:func:`dflashbench.bench.peers.summarize`), over all of them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dflashbench.bench.peers import PeerRun, format_table, summarize


def main(paths: list[str]) -> None:
    runs: list[PeerRun] = []
    for path in paths:
        got = [PeerRun(**r) for r in json.loads(Path(path).read_text())["runs"]]
        offset = 1 + max((r.repeat for r in runs), default=-1)
        runs += [PeerRun(**{**r.__dict__, "repeat": r.repeat + offset}) for r in got]
    print(f"{len(paths)} run(s) of bench peers together, {1 + max(r.repeat for r in runs)} paired repeats:")
    print(format_table(summarize(runs)))


if __name__ == "__main__":
    main(sys.argv[1:])
