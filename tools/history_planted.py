"""``history`` on planted steps and drifts, laid on real runs' readings (issue #64's "Must show").

Usage (from the repository root):

    python tools/history_planted.py [--runs DIR]... [--trials 20] [--length 10] [--at 6] [--step 0.25]
                                    [--drift 0.03] [--recent 5] [--perms 10000] [--md FILE]

The readings: every run summary (``runs/<name>.json``: each gated figure with the run's own sd, as ``history``
reads a run) of the unchanged sweeps under ``--runs`` (default: the 20 unchanged runs u01-u20 of
docs/measurements/2026-11-27-history2, 27 sweeps of the embedded default made one after another on the quiet
machine, ``--repeats 3``, c=1, 16 prompts). Each trial is one history of ``--length`` runs: that many runs drawn
at random without replacement from the pool, in a random order (seeded by the trial's number), so its noise from
run to run is the machine's as measured. Three histories per trial:

- **step**: DFlash's readings from run ``--at`` on times ``1 - step`` (its pooled per-user rate, its throughput,
  and its speedups over AR and over EAGLE-3, whose numerator it is); AR's and EAGLE-3's readings, DFlash's tau and
  TTFT untouched (a slower step moves neither). Counted: a regression found in a DFlash figure whose first run is
  ``--at``, ``history`` exiting 1 with ``--recent``; any finding in a series without DFlash.
- **flat**: the same runs unplanted. Counted: any change or trend in any series.
- **drift**: DFlash's same readings of run ``i`` (0-based) times ``(1 - drift) ** i``. Counted: reported as a
  trend, and as a regression (exit 1) once it passes the gate.

Prints one line per trial and the counts; ``--md`` writes them too.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflashbench.gate import history as hist  # noqa: E402
from dflashbench.gate.history_output import change_words, trend_words  # noqa: E402
from dflashbench.gate.history_read import Reading, RunSummary  # noqa: E402

DEFAULT_RUNS = ROOT / "docs" / "measurements" / "2026-11-27-history2" / "runs"
TOUCHED = ("per_user_tok_per_s_pooled|dflash|", "throughput_tok_per_s|dflash|", "speedup|dflash/ar|",
           "speedup|dflash/eagle3|")  # fmt: skip


def pool(dirs: list[Path], prefix: str = "u") -> list[RunSummary]:
    """The run summaries of the unchanged runs (file names starting with ``prefix``) under ``dirs``."""
    fields = set(RunSummary.__dataclass_fields__)
    out = []
    for d in dirs:
        for f in sorted(d.glob(f"{prefix}*.json")):
            summary = json.loads(f.read_text())["summary"]
            out.append(RunSummary(**{k: v for k, v in summary.items() if k in fields}))
    return out


def touched(key: str) -> bool:
    return key.startswith(TOUCHED)


def draw(runs: list[RunSummary], length: int, seed: int) -> list[RunSummary]:
    rng = np.random.default_rng(seed)
    return [copy.deepcopy(runs[i]) for i in rng.permutation(len(runs))[:length]]


def plant(runs: list[RunSummary], factor_of) -> list[RunSummary]:
    """DFlash's touched readings of run ``i`` times ``factor_of(i)``; each run's own sd (log) kept."""
    out = []
    for i, run in enumerate(runs):
        run = copy.deepcopy(run)
        run.run_id = f"{run.run_id}-{i}"
        run.started_at = f"2026-12-{i + 1:02d}T02:17:00+00:00"
        for key, (value, sd) in list(run.figures.items()):
            if touched(key):
                run.figures[key] = [value * factor_of(i), sd]
        out.append(run)
    return out


def read(runs: list[RunSummary], recent: int, perms: int) -> hist.History:
    return hist.build(Reading(runs=runs), recent=recent, order="given", n_perms=perms)


def trial(runs, args, t: int) -> dict:
    drawn = draw(runs, args.length, seed=64_000 + t)
    at = args.at - 1
    step = read(plant(drawn, lambda i: 1 - args.step if i >= at else 1.0), args.recent, args.perms)
    flat = read(plant(drawn, lambda i: 1.0), args.recent, args.perms)
    drift = read(plant(drawn, lambda i: (1 - args.drift) ** i), args.recent, args.perms)
    dflash = [s for s in step.series if touched(f"{s.figure}|{s.subject}|")]
    found = [s for s in dflash if any(f.kind == hist.REGRESSION and f.change.index == at for f in s.findings)]
    others = [s.label for s in step.series if "dflash" not in s.subject and (s.findings or s.fit.trend)]
    flat_found = [s.label for s in flat.series if s.findings or (s.fit is not None and s.fit.trend)]
    drifted = [s for s in drift.series if touched(f"{s.figure}|{s.subject}|")]
    trends = [s for s in drifted if s.fit is not None and s.fit.trend is not None]
    headline = "speedup|dflash/ar|"
    return {"step_headline": any(s.figure + "|" + s.subject + "|" == headline for s in found),
            "drift_headline": any(s.figure + "|" + s.subject + "|" == headline for s in trends),
            "step_found": len(found), "step_series": len(dflash), "step_exit": step.exit_code,
            "step_others": others, "flat_found": flat_found, "flat_exit": flat.exit_code,
            "drift_trends": len(trends), "drift_series": len(drifted), "drift_exit": drift.exit_code,
            "drift_regressions": sum(bool(s.trend_regression) for s in drifted),
            "examples": ([change_words(s, f) for s in found[:1] for f in s.findings[:1]]
                         + [trend_words(s) for s in trends[:1]])}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, action="append", help="folder of run summaries (default: history2's)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--length", type=int, default=10)
    ap.add_argument("--at", type=int, default=6, help="the step's first run (1-based)")
    ap.add_argument("--step", type=float, default=0.25)
    ap.add_argument("--drift", type=float, default=0.03)
    ap.add_argument("--recent", type=int, default=5, help="history --recent (the workflow's RECENT)")
    ap.add_argument("--perms", type=int, default=10_000)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    runs = pool(args.runs or [DEFAULT_RUNS])
    lines = [f"# history on planted changes: {args.trials} histories of {args.length} runs drawn from {len(runs)} "
             f"unchanged sweeps; step -{args.step:.0%} at run {args.at}, drift -{args.drift:.0%} a run, "
             f"--recent {args.recent}", ""]  # fmt: skip
    totals = dict(step=0, exit1=0, others=0, flat=0, drift=0, drift_exit1=0, step_headline=0, drift_headline=0)
    for t in range(args.trials):
        r = trial(runs, args, t)
        totals["step"] += r["step_found"] == r["step_series"]
        totals["step_headline"] += r["step_headline"] and r["step_exit"] == 1
        totals["drift_headline"] += r["drift_headline"] and r["drift_exit"] == 1
        totals["exit1"] += r["step_exit"] == 1
        totals["others"] += bool(r["step_others"])
        totals["flat"] += not r["flat_found"]
        totals["drift"] += r["drift_trends"] == r["drift_series"]
        totals["drift_exit1"] += r["drift_exit"] == 1
        lines.append(f"- trial {t + 1}: step found at run {args.at} in {r['step_found']}/{r['step_series']} DFlash "
                     f"series, exit {r['step_exit']}, other series {r['step_others'] or 'none'}; flat: "
                     f"{r['flat_found'] or 'nothing'} (exit {r['flat_exit']}); drift: {r['drift_trends']}/"
                     f"{r['drift_series']} trends, {r['drift_regressions']} past the gate, exit {r['drift_exit']}")  # fmt: skip
        print(lines[-1], flush=True)
    n = args.trials
    lines += ["", f"- step found at run {args.at} in DFlash vs AR's speedup with exit 1: {totals['step_headline']} of {n}",
              f"- drift reported as a trend of DFlash vs AR's speedup with exit 1: {totals['drift_headline']} of {n}",
              f"- step found at run {args.at} in every DFlash series: {totals['step']} of {n}; exit 1: "
              f"{totals['exit1']} of {n}; a finding in a series without DFlash: {totals['others']} of {n}",
              f"- flat: nothing found in {totals['flat']} of {n}",
              f"- drift: every DFlash series a trend in {totals['drift']} of {n}; exit 1 (a trend past the gate): "
              f"{totals['drift_exit1']} of {n}", ""]  # fmt: skip
    text = "\n".join(lines)
    print(text[text.index("\n- step found at run"):])
    if args.md:
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
