"""How far a method's speedups move between unchanged runs, and what that leaves any single-run gate able to catch.

    python tools/speedup_spread.py RUN RUN RUN [RUN ...] [--rises 15,30] [--tests M]

The runs are unchanged sweeps of one setting (e.g. four default ``dflashbench sweep`` runs back to back). For every
speedup ``compare`` gates (:mod:`dflashbench.gate.speedups`: DFlash/AR, EAGLE-3/AR, DFlash/EAGLE-3 per load, the
pooled per-user rates' ratio), the sample sd of its log over the runs: the run-to-run noise of that figure on this
machine, whatever its cause. From it, the power of an ideal one-sided z-test that knows that sd exactly, comparing
one run against one other (the move's sd is sqrt(2) x sd), at Holm's first step (alpha / M, ``--tests``: the
family ``compare`` tested, read from a compare of the first two runs unless given) and at its last (alpha), against
a method's TPOT rising by each of ``--rises`` (its per-user speedup then falls by a factor 1 + rise). No gate that
holds its false alarms at alpha can do better on runs as noisy as these: the table is a bound, not a measurement of
``compare``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from scipy.stats import norm

from dflashbench.gate import compare as cmp
from dflashbench.gate.speedups import speedup_label, speedups
from dflashbench.measure import noise
from dflashbench.run.store import load_run


def run_speedups(run_dir: Path) -> dict[tuple, float]:
    """Each gated speedup of one run (category ``all``), as ``compare`` reads it."""
    points = load_run(run_dir).points
    ok = points[(points["status"] != "failed") & (points["category"] == "all")]
    return {k: s.value for k, s in speedups(cmp._index(ok, str(run_dir))).items() if s.value}


def power(log_move: float, sd_move: float, alpha: float) -> float:
    """P(a one-sided z-test at ``alpha`` rejects) for a true log move of ``log_move`` (negative: a drop)."""
    return float(norm.cdf(-log_move / sd_move - norm.ppf(1 - alpha)))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--rises", default="15,30", help="TPOT rises of one method to size the power for, in %%")
    ap.add_argument("--tests", type=int, help="the Holm family size M (default: a compare of the first two runs)")
    args = ap.parse_args(argv)
    if len(args.runs) < 3:
        raise SystemExit("give at least 3 unchanged runs: an sd from 2 is too rough to size anything")
    per_run = [run_speedups(r) for r in args.runs]
    keys = sorted(set.intersection(*(set(s) for s in per_run)), key=cmp.key_order)
    m = args.tests or cmp.compare_runs(args.runs[0], args.runs[1], cmp.effective_thresholds([])).tests
    rises = [float(x) / 100 for x in args.rises.split(",")]
    print(f"{len(args.runs)} unchanged runs; Holm family M = {m} (alpha {noise.ALPHA:g}: first step alpha/M, last alpha)")
    head = ["speedup", "values over the runs", "sd (log)"]
    head += [f"TPOT +{r * 100:.0f}%: power at alpha/M, alpha" for r in rises]
    print(" | ".join(head))
    sds = []
    for key in keys:
        logs = [math.log(s[key]) for s in per_run]
        sd = statistics.stdev(logs)
        sds.append(sd)
        cells = [speedup_label(key), ", ".join(f"{s[key]:.2f}" for s in per_run), f"{sd:.3f}"]
        for r in rises:
            move = -math.log1p(r)
            cells.append(f"{power(move, math.sqrt(2) * sd, noise.ALPHA / m):.0%}, "
                         f"{power(move, math.sqrt(2) * sd, noise.ALPHA):.0%}")  # fmt: skip
        print(" | ".join(cells))
    pooled = math.sqrt(statistics.fmean(s * s for s in sds))
    print(f"pooled sd (log) over the {len(keys)} speedups: {pooled:.3f}; an ideal test at alpha/M catches a TPOT rise "
          + ", ".join(f"of {r * 100:.0f}% {power(-math.log1p(r), math.sqrt(2) * pooled, noise.ALPHA / m):.0%} of the time"
                      for r in rises)
          + f"; to catch a 30% rise 95% of the time at alpha/M it needs an sd (log) of at most "
          f"{math.log1p(0.30) / (math.sqrt(2) * (norm.ppf(1 - noise.ALPHA / m) + norm.ppf(0.95))):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
