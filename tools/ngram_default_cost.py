"""What n-gram would cost the embedded default (issue #56): the default sweep against the same sweep with ``ngram``
added to its methods, paired and interleaved (A B, B A, A B ...), on this machine.

Usage (from the repository root, at normal priority):

    python tools/ngram_default_cost.py sweeps OUT [--pairs 3]
    python tools/ngram_default_cost.py judge OUT [--md FILE]

``sweeps`` runs, per pair, ``dflashbench sweep -o OUT/<arm>-<i>`` (arm ``default``) and ``dflashbench sweep --method
ar,dflash,eagle3,ngram -o OUT/<arm>-<i>`` (arm ``ngram``) as a user runs them (the report included), timing each
whole process; a finished sweep already in OUT is kept with its recorded time (``OUT/times.jsonl``).

``judge`` prints each sweep's wall time, the median per arm and the median of the pairs' ratios (ngram / default);
then, per arm, the gate's "fails at" between every ordered pair of its sweeps (``compare``'s default gates, in
process): the smallest drop of DFlash's speedups over AR that would have failed (median and range over the pairs
and the speedups), the number of gated tests (Holm's family) and the pairs' exit codes (all should pass: they are
unchanged sweeps). n-gram joins the default only if the wall time rises by at most 10 % and "fails at" does not
worsen (issue #56).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = {"default": [], "ngram": ["--method", "ar,dflash,eagle3,ngram"]}


def _run_dir(folder: Path) -> Path | None:
    runs = sorted(p for p in folder.glob("*/") if (p / "points.jsonl").is_file()) if folder.is_dir() else []
    return runs[-1] if runs else None


def _times(out: Path) -> dict[str, dict]:
    path = out / "times.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return {r["name"]: r for r in rows}


def sweeps(out: Path, pairs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = _times(out)
    for i in range(1, pairs + 1):
        order = ("default", "ngram") if i % 2 else ("ngram", "default")
        for arm in order:
            name = f"{arm}-{i}"
            if name in done and done[name]["exit"] == 0:
                print(f"{name}: kept ({done[name]['wall_s']:.0f} s)", flush=True)
                continue
            argv = [sys.executable, "-m", "dflashbench", "sweep", "-o", str(out / name), *ARMS[arm]]
            print(f"{name}: {' '.join(argv[1:])}", flush=True)
            with (out / f"{name}.log").open("w") as log:
                start = time.perf_counter()
                rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, check=False).returncode
                wall_s = time.perf_counter() - start
            with (out / "times.jsonl").open("a") as fh:
                fh.write(json.dumps({"name": name, "arm": arm, "pair": i, "wall_s": wall_s, "exit": rc}) + "\n")
            print(f"{name}: exit {rc}, {wall_s:.0f} s", flush=True)


def _fails_at(base: Path, new: Path) -> tuple[list[float], int, int]:
    """DFlash-over-AR speedups' detectable drops, the number of gated tests, the exit code."""
    from dflashbench.gate import compare as cmp

    result = cmp.compare_runs(base, new, cmp.effective_thresholds([]))
    found = [r.detectable for r in result.rows
             if r.metric == "speedup" and r.key[1] == "dflash/ar" and r.detectable is not None]  # fmt: skip
    gated = sum(1 for r in result.rows if r.threshold is not None and r.detectable is not None)
    return found, gated, result.exit_code


def judge(out: Path, md: Path | None) -> str:
    times = [t for t in _times(out).values() if t["exit"] == 0]
    lines = [f"# n-gram in the embedded default: cost on this machine ({out})", "",
             "| sweep | wall s |", "|---|---|"]  # fmt: skip
    lines += [f"| {t['name']} | {t['wall_s']:.0f} |" for t in sorted(times, key=lambda t: (t["pair"], t["arm"]))]
    by = {(t["arm"], t["pair"]): t["wall_s"] for t in times}
    ratios = [by["ngram", p] / by["default", p] for (a, p) in by if a == "ngram" and ("default", p) in by]
    lines.append("")
    for arm in ARMS:
        walls = [w for (a, _), w in by.items() if a == arm]
        if walls:
            lines.append(f"- {arm}: median {statistics.median(walls):.0f} s (range {min(walls):.0f}-{max(walls):.0f},"
                         f" {len(walls)} sweeps)")  # fmt: skip
    if ratios:
        lines.append(f"- wall time, ngram / default, paired: median {statistics.median(ratios):.2f} "
                     f"(range {min(ratios):.2f}-{max(ratios):.2f}, {len(ratios)} pairs)")  # fmt: skip
    shares = []  # within a run (its points interleaved: the machine's mood hits every method alike)
    for t in sorted(times, key=lambda t: t["pair"]):
        run = _run_dir(out / t["name"]) if t["arm"] == "ngram" else None
        if run is not None:
            import pandas as pd

            pts = pd.read_json(run / "points.jsonl", lines=True)
            d = pts[pts["category"] == "all"].groupby("method")["duration_s"].sum()
            shares.append(d.get("ngram", 0.0) / (d.sum() - d.get("ngram", 0.0)))
    if shares:
        lines.append(f"- within each ngram sweep, its n-gram points took {min(shares):.2f}-{max(shares):.2f}x the time "
                     f"of the other methods' points together ({len(shares)} sweeps; the points are interleaved, so "
                     "the machine's load between sweeps cancels)")  # fmt: skip
    lines += ["", "## the gate between unchanged sweeps of one arm (every ordered pair)", "",
              "| arm | pairs | exits | gated tests | DFlash vs AR speedup: fails at, median (range) |", "|---|---|---|---|---|"]  # fmt: skip
    for arm in ARMS:
        runs = [r for t in sorted(times, key=lambda t: t["pair"]) if t["arm"] == arm
                and (r := _run_dir(out / t["name"])) is not None]  # fmt: skip
        drops, gated, exits = [], set(), []
        for base, new in itertools.permutations(runs, 2):
            found, m, rc = _fails_at(base, new)
            drops += found
            gated.add(m)
            exits.append(rc)
        if drops:
            lines.append(f"| {arm} | {len(exits)} | {','.join(map(str, exits))} | {'/'.join(map(str, sorted(gated)))} | "
                         f"-{statistics.median(drops) * 100:.0f}% (-{min(drops) * 100:.0f}% to -{max(drops) * 100:.0f}%) |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    if md is not None:
        md.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    s = sub.add_parser("sweeps")
    s.add_argument("out", type=Path)
    s.add_argument("--pairs", type=int, default=3)
    j = sub.add_parser("judge")
    j.add_argument("out", type=Path)
    j.add_argument("--md", type=Path)
    args = ap.parse_args()
    if args.step == "sweeps":
        sweeps(args.out, args.pairs)
    else:
        print(judge(args.out, args.md), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
