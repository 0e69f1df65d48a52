"""k unchanged launches of one setting, each a whole sweep in its own process (``dflashbench calibrate``; the
readings are turned into a noise profile by :mod:`dflashbench.gate.calibrate`).

Each launch is ``python -m dflashbench sweep ARGS -o OUT/launch-<i> --no-report``, run one after another in its own
process, as a user's sweeps are: every launch starts its servers afresh, so what one launch of the setting moves
against the next (the run-to-run term) is in the spread of their readings. A launch whose folder already holds a
complete run is kept, so an interrupted calibration goes on where it stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dflashbench.child_path import with_own_package
from dflashbench.errors import UserError


def run_of(folder: Path) -> Path | None:
    """The run directory a launch's folder holds (the newest), or ``None``."""
    runs = sorted(p for p in folder.glob("*/") if (p / "points.jsonl").is_file()) if folder.is_dir() else []
    return runs[-1] if runs else None


def complete(folder: Path) -> bool:
    run = run_of(folder)
    if run is None:
        return False
    try:
        return json.loads((run / "manifest.json").read_text(encoding="utf-8")).get("status") == "complete"
    except (OSError, ValueError):
        return False


def run_launches(out: Path, launches: int, sweep_args: Sequence[str], echo: Callable[[str], None] = print
                 ) -> tuple[list[Path], list[float]]:  # fmt: skip
    """Run ``launches`` sweeps with ``sweep_args`` into ``out/launch-<i>`` (each its own process, its output in
    ``out/launch-<i>.log``); the run directories and each launch's wall seconds (0 for one kept)."""
    if launches < 2:
        raise UserError(f"--launches {launches}: the run-to-run term needs 2 launches at least (4 or more: a term read "
                        "from 2 rests on 1 degree of freedom a reading)")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    runs, seconds = [], []
    for i in range(1, launches + 1):
        folder = out / f"launch-{i}"
        if complete(folder):
            echo(f"launch {i}/{launches}: kept ({run_of(folder)})")
            runs.append(run_of(folder))
            seconds.append(0.0)
            continue
        argv = [sys.executable, "-m", "dflashbench", "sweep", *sweep_args, "-o", str(folder), "--no-report"]
        log = out / f"launch-{i}.log"
        echo(f"launch {i}/{launches}: dflashbench sweep {' '.join(sweep_args)} -o {folder}")
        start = time.monotonic()
        with log.open("w", encoding="utf-8") as fh:
            rc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=False,
                                env=with_own_package(os.environ)).returncode  # fmt: skip
        seconds.append(time.monotonic() - start)
        if rc != 0 or not complete(folder):
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            raise UserError(f"calibrate: launch {i} exited {rc} without a complete run ({log}: "
                            f"{' | '.join(tail) or 'no output'}); the launches before it are kept: fix the cause and "
                            "run the same command again to go on")  # fmt: skip
        echo(f"launch {i}/{launches}: {seconds[-1]:.0f} s, {run_of(folder)}")
        runs.append(run_of(folder))
    return [r for r in runs if r is not None], seconds
