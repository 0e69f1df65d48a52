"""How much a speedup measured in the same minutes moves from run to run beyond its own requests' noise: the term the
noise rule adds for a speedup whose two points were measured together (``together_log_sd`` in
``dflashbench/data/launch_noise.toml``).

    python tools/paired_residual.py RUN RUN RUN [RUN ...]

The runs are unchanged sweeps of one setting made the same way (e.g. four default sweeps, in turn). For every speedup
``compare`` gates, its log over the runs has a sample variance (between runs); each run's bootstrap over its own
requests (paired by prompt, as ``compare`` draws it) has a variance of its own (within). What is left, between minus
the mean within, is what the requests do not show: each run's servers and moments. A speedup holds two servers'
launches, so the term per launch is that residual over sqrt(2). Pooled over the speedups (their variances averaged).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import numpy as np

from dflashbench.gate import compare as cmp
from dflashbench.gate.compare_noise import per_user_terms, point_requests
from dflashbench.gate.speedups import speedup_label, speedups
from dflashbench.measure import noise
from dflashbench.run.store import load_run


def main(argv: list[str]) -> None:
    runs = [Path(a) for a in argv]
    if len(runs) < 3:
        raise SystemExit("give at least 3 unchanged runs")
    per_run = []
    for run_dir in runs:
        run = load_run(run_dir)
        ok = run.points[(run.points["status"] != "failed") & (run.points["category"] == "all")]
        found = {}
        for key, sp in speedups(cmp._index(ok, str(run_dir))).items():
            if not sp.value:
                continue
            sides = tuple(per_user_terms(point_requests(run.requests, row)) for row in (sp.over, sp.method))
            null = noise.ratio_null(*sides)
            found[key] = (math.log(sp.value), float(np.var(null)) if len(null) else None)
        per_run.append(found)
    keys = sorted(set.intersection(*(set(r) for r in per_run)), key=cmp.key_order)
    print("speedup | sd between runs (log) | mean sd within a run (requests) | residual")
    between, within = [], []
    for key in keys:
        logs = [r[key][0] for r in per_run]
        inside = [r[key][1] for r in per_run if r[key][1] is not None]
        b, w = statistics.variance(logs), statistics.fmean(inside)
        between.append(b)
        within.append(w)
        print(f"{speedup_label(key)} | {math.sqrt(b):.3f} | {math.sqrt(w):.3f} | {math.sqrt(max(b - w, 0)):.3f}")
    b, w = statistics.fmean(between), statistics.fmean(within)
    residual = math.sqrt(max(b - w, 0.0))
    print(f"pooled over {len(keys)} speedups, {len(runs)} runs: between {math.sqrt(b):.3f}, within {math.sqrt(w):.3f}, "
          f"residual {residual:.3f} per speedup, {residual / math.sqrt(2):.3f} per launch")


if __name__ == "__main__":
    main(sys.argv[1:])
