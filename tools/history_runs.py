"""The runs behind issue #57's "Must show": a nightly history of the embedded default on this machine, made here.

Usage (from the repository root, at normal priority; resumable: a finished sweep is kept):

    python tools/history_runs.py OUT [--runs 14] [--slow-from 8] [--delay-ms 7] [--repeats 3]
                                     [--concurrency 1,2] [--num-prompts 16] [--more-unchanged K] [--dry-run]

It makes two histories of ``--runs`` default sweeps (``dflashbench sweep -o OUT/<name> --no-report --repeats N
--label ...``), sharing their first ``--slow-from - 1`` runs:

- ``OUT/u01`` ... ``OUT/u<runs>``: unchanged code, every run the embedded default (``suites/demo.toml``);
- ``OUT/s<slow-from>`` ... ``OUT/s<runs>``: the same suite plus ``[extra_args] dflash = ["--test-step-delay-ms",
  "<delay>"]``: the reference server sleeps after every DFlash step (AR and EAGLE-3 untouched), so that DFlash's
  TPOT rises by about 20 %. The delay is a means, not the slowdown: it adds ``delay / step`` to a DFlash step,
  and a step of the embedded pair at c=1 takes ~11 ms on an idle core but ~30 ms on this shared 2-core machine
  with a dozen other processes running (DFlash's per-user rate ~250 tok/s at tau ~7.7). 3.5 ms gave x1.01 over
  AR's own TPOT change there (one run, docs/measurements/2026-11-27-history); 7 ms (the default) is about 20 %
  at that step time (``tools/gate_power.py`` measured x1.15 at 3 ms and x1.33 at 5 ms on a quieter machine).
  Pick it for the machine as it is: about 0.2 x DFlash's step (TPOT p50 x tau) in an unslowed calibration run
  (docs/measurements/2026-11-27-history2: 4 ms against steps of 17-25 ms).

The order in time: u01..u<slow-from - 1>, then the slowed s<slow-from>..s<runs>, then the unchanged
u<slow-from>..u<runs> (the slowed history first: on a shared machine whose sweeps take 4-6 minutes the whole set
may not finish in one sitting). The slowed history is u01..u<slow-from - 1> + s<slow-from>..s<runs>
(``dflashbench history OUT/u0[1-7] OUT/s*``); the unchanged one is u01..u<runs>. Every sweep carries
``--label night=<i>`` and ``--label history=<u|s>`` (what a CI job would label with its own commit), and the
log of each sweep is ``OUT/<name>.log``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "suites" / "demo.toml"


def _run_dir(folder: Path) -> Path | None:
    runs = sorted(p for p in folder.glob("*/") if (p / "points.jsonl").is_file()) if folder.is_dir() else []
    return runs[-1] if runs else None


def _complete(folder: Path) -> bool:
    run = _run_dir(folder)
    return run is not None and json.loads((run / "manifest.json").read_text()).get("status") == "complete"


def slowed_suite(out: Path, delay_ms: str) -> Path:
    """The demo suite with DFlash's server sleeping ``delay_ms`` after every step (the suite's name and version
    kept: the same setting, slower code)."""
    path = out / f"demo-dflash-delay-{delay_ms}ms.toml"
    path.write_text(DEMO.read_text() + f'\n[extra_args]\ndflash = ["--test-step-delay-ms", "{delay_ms}"]\n')
    return path


def plan(runs: int, slow_from: int, more_unchanged: int = 0) -> list[tuple[str, int, str]]:
    """(folder name, night, history) in the order the sweeps run."""
    order = [(f"u{i:02d}", i, "u") for i in range(1, slow_from)]
    order += [(f"s{i:02d}", i, "s") for i in range(slow_from, runs + 1)]
    return order + [(f"u{i:02d}", i, "u") for i in range(slow_from, runs + 1 + more_unchanged)]


def sweep_argv(out: Path, name: str, night: int, history: str, repeats: int, suite: Path | None,
               labels: bool, extra: list[str]) -> list[str]:  # fmt: skip
    argv = [sys.executable, "-m", "dflashbench", "sweep", "-o", str(out / name), "--no-report",
            "--repeats", str(repeats), *extra]  # fmt: skip
    argv += ["--suite", str(suite)] if suite else []
    argv += ["--label", f"night={night}", "--label", f"history={history}"] if labels else []
    return argv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=14)
    ap.add_argument("--slow-from", type=int, default=8)
    ap.add_argument("--delay-ms", default="7")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--more-unchanged", type=int, default=0,
                    help="unchanged runs past --runs (u<runs+1>..), for the false-alarm resampling's pool")
    ap.add_argument("--concurrency", help="sweep --concurrency for every sweep (default: the suite's)")
    ap.add_argument("--num-prompts", help="sweep --num-prompts for every sweep (default: the suite's)")
    ap.add_argument("--no-labels", action="store_true", help="for a dflashbench without sweep --label")
    ap.add_argument("--dry-run", action="store_true", help="print the sweeps, run none")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    suite = slowed_suite(args.out, args.delay_ms)
    extra = (["--concurrency", args.concurrency] if args.concurrency else []) + \
        (["--num-prompts", args.num_prompts] if args.num_prompts else [])  # fmt: skip
    for name, night, history in plan(args.runs, args.slow_from, args.more_unchanged):
        folder = args.out / name
        if _complete(folder):
            print(f"{name}: kept ({_run_dir(folder)})", flush=True)
            continue
        cmd = sweep_argv(args.out, name, night, history, args.repeats, suite if history == "s" else None,
                         not args.no_labels, extra)  # fmt: skip
        print(f"{name}: {' '.join(cmd[1:])}", flush=True)
        if args.dry_run:
            continue
        start = time.monotonic()
        with (args.out / f"{name}.log").open("w") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, check=False).returncode
        print(f"{name}: exit {rc} in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
