"""A real engine's run, checked: ``python tests/engines/check_vllm_cpu.py VLLM_OUT REFERENCE_OUT``.

Run by the ``vllm-cpu`` nox session (part of the default ``nox`` run, so CI runs it) after dflashbench launched
vLLM's CPU build on the embedded pair (AR, EAGLE-3, DFlash at c=1, 2, 4, the demo prompts) and the reference
backend on the same prompts at c=1. Each folder holds the one run directory its sweep wrote. It prints what it
compared, and exits 1 when:

- a planned point is missing or not ``ok``;
- a speculative method's tau from vLLM's own counters differs from the reference decoder's on the same prompts
  by more than 5% (both greedy; vLLM computes in bf16 on the CPU, the reference in the checkpoints' dtypes);
- its per-position acceptance is not recorded;
- its outputs are not identical to AR's at the same concurrency (greedy: speculative decoding is lossless);
- the report does not render with its verdict, or ``compare`` of the run against itself does not exit 0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from dflashbench.measure.analysis import usable_points
from dflashbench.measure.quality import agreement_table
from dflashbench.run.store import load_run

TAU_TOLERANCE = 0.05
METHODS = ("ar", "dflash", "eagle3")
CONCURRENCY = (1, 2, 4)


def only_run(out: Path) -> Path:
    runs = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    if len(runs) != 1:
        raise SystemExit(f"{out}: expected one run directory, found {len(runs)}")
    return runs[0]


def all_rows(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["category"] == "all"]


def check(vllm_dir: Path, ref_dir: Path) -> list[str]:
    """The failures, as lines (empty: every check passed); prints what it compared as it goes."""
    failures: list[str] = []
    run, ref = load_run(vllm_dir), load_run(ref_dir)
    engine = run.manifest.get("engine") or {}
    print(f"engine: {engine.get('distribution')} {engine.get('version')} ({engine.get('build')} build); "
          f"cpus: {(run.manifest.get('cpus') or {}).get('engine')} engine, {(run.manifest.get('cpus') or {}).get('client')} client")  # fmt: skip
    if engine.get("build") != "CPU":
        failures.append(f"the run was not served by vLLM's CPU build: manifest engine {engine}")

    points = all_rows(run.points)
    planned = {(m, c) for m in METHODS for c in CONCURRENCY}
    seen = {(str(p.method), int(p.concurrency)): p for p in points.itertuples()}
    for key in sorted(planned):
        p = seen.get(key)
        if p is None:
            failures.append(f"point {key[0]} c={key[1]} is missing")
        elif p.status != "ok":
            failures.append(f"point {key[0]} c={key[1]} is {p.status}: {p.failure_reason}")

    ref_points = all_rows(ref.points)
    print(f"{'method':8} {'tau vLLM c=1':>13} {'tau reference':>14} {'diff':>7}  per-position acceptance (vLLM)")
    for method in METHODS[1:]:
        mine = points[(points["method"] == method) & (points["concurrency"] == 1)]
        theirs = ref_points[(ref_points["method"] == method) & (ref_points["concurrency"] == 1)]
        if mine.empty or theirs.empty or pd.isna(mine["tau"].iloc[0]) or pd.isna(theirs["tau"].iloc[0]):
            failures.append(f"{method}: no tau to compare (vLLM {mine['tau'].tolist()}, reference {theirs['tau'].tolist()})")
            continue
        tau, ref_tau = float(mine["tau"].iloc[0]), float(theirs["tau"].iloc[0])
        per_pos = list(mine["accepted_per_pos_rate"].iloc[0] or ())
        diff = tau / ref_tau - 1
        print(f"{method:8} {tau:13.2f} {ref_tau:14.2f} {diff:+7.1%}  {' '.join(f'{a:.2f}' for a in per_pos)}")
        if abs(diff) > TAU_TOLERANCE:
            failures.append(f"{method}: tau {tau:.2f} from vLLM's counters vs {ref_tau:.2f} from the reference "
                            f"decoder on the same prompts ({diff:+.1%}, tolerance {TAU_TOLERANCE:.0%})")  # fmt: skip
        if not per_pos:
            failures.append(f"{method}: no per-position acceptance recorded")
        for c in CONCURRENCY[1:]:
            row = points[(points["method"] == method) & (points["concurrency"] == c)]
            if row.empty or not list(row["accepted_per_pos_rate"].iloc[0] or ()):
                failures.append(f"{method} c={c}: no per-position acceptance recorded")

    agreement = agreement_table(usable_points(run.points), run.requests)
    agreement = agreement[(agreement["category"] == "all") & (agreement["method"] != "ar")]
    print("outputs identical to AR's (greedy):")
    for row in agreement.itertuples():
        print(f"  {row.method:7} c={row.concurrency}: {row.exact}/{row.compared}")
        if row.compared == 0 or row.exact != row.compared:
            failures.append(f"{row.method} c={row.concurrency}: {row.exact}/{row.compared} outputs identical to AR's")
    if set(agreement["method"]) != set(METHODS[1:]):
        failures.append(f"agreement with AR computed for {sorted(set(agreement['method']))} only")

    failures += check_report_and_compare(vllm_dir)
    return failures


def check_report_and_compare(run_dir: Path) -> list[str]:
    failures = []
    for fmt, marker in (("md", "**Measured on:**"), ("html", 'class="hardware"')):
        out = run_dir.parent / f"check-report.{fmt}"
        done = subprocess.run([sys.executable, "-m", "dflashbench", "report", str(run_dir), "-o", str(out)],
                              capture_output=True, text=True)  # fmt: skip
        text = out.read_text() if out.exists() else ""
        if done.returncode != 0 or "Verdict" not in text or marker not in text:
            failures.append(f"report --format {fmt} did not render with a verdict (exit {done.returncode}): "
                            f"{done.stderr.strip()[-300:]}")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "dflashbench", "compare", str(run_dir), str(run_dir)],
                          capture_output=True, text=True)  # fmt: skip
    print(f"compare RUN RUN: exit {done.returncode}")
    if done.returncode != 0:
        failures.append(f"compare of the run against itself exited {done.returncode}: {done.stdout[-500:]}")
    return failures


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    failures = check(only_run(Path(argv[0])), only_run(Path(argv[1])))
    for line in failures:
        print(f"FAIL: {line}")
    print("vLLM CPU run: " + ("all checks passed" if not failures else f"{len(failures)} check(s) failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
