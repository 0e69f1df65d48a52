"""The embedded default sized by precision against the same sweep sending every prompt (issue #45), paired:
``--pairs`` rounds, each one sweep of either kind back to back (the order alternating), on this machine.

Usage (from the repository root, at normal priority):

    python tools/sizing_ab.py OUT [--pairs 3]

"old" is suites/demo.toml without its ``precision`` key (every prompt); "new" is suites/demo.toml as it is.
Prints, per sweep, its wall time, its measured requests and the verdict's DFlash vs AR and EAGLE-3 vs AR
single-stream speedups with their intervals (the sweep's own console lines); then the medians and ranges.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

SPEEDUP = re.compile(r"(DFlash|EAGLE-3) vs AR: single-stream ([\d.]+)× \[([\d.]+)–([\d.]+)\]")


def suite_without_precision(out: Path) -> Path:
    text = Path("suites/demo.toml").read_text()
    kept = "\n".join(line for line in text.splitlines() if not line.startswith("precision"))
    assert "precision" not in tomllib.loads(kept)
    path = out / "demo-every-prompt.toml"
    path.write_text(kept + "\n")
    return path


def sweep(kind: str, suite: Path, out: Path) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "-o", str(out),
                           "--no-report"], capture_output=True, text=True, check=True)  # fmt: skip
    wall_s = time.perf_counter() - start
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    measured = sum(1 for line in (run / "requests.jsonl").read_text().splitlines()
                   if not json.loads(line).get("warmup"))  # fmt: skip
    found = {m[1]: (float(m[2]), float(m[3]), float(m[4])) for m in SPEEDUP.finditer(done.stdout)}
    return {"kind": kind, "wall_s": wall_s, "requests": measured, "speedups": found}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kinds = {"old": suite_without_precision(args.out), "new": Path("suites/demo.toml")}
    rows = []
    for i in range(args.pairs):
        for kind in (("old", "new") if i % 2 == 0 else ("new", "old")):
            row = sweep(kind, kinds[kind], args.out / f"{kind}-{i}")
            rows.append(row)
            sp = "; ".join(f"{m} {v:.2f}× [{lo:.2f}–{hi:.2f}] (±{(hi - lo) / 2 / v:.0%})"
                           for m, (v, lo, hi) in row["speedups"].items())  # fmt: skip
            print(f"pair {i} {kind}: {row['wall_s']:.0f} s, {row['requests']} requests; {sp}", flush=True)
    for kind in ("old", "new"):
        walls = [r["wall_s"] for r in rows if r["kind"] == kind]
        print(f"{kind}: wall median {statistics.median(walls):.0f} s (range {min(walls):.0f}–{max(walls):.0f})")
    ratios = [n["wall_s"] / o["wall_s"] for o, n in zip(rows[0::2], rows[1::2], strict=True)]
    ratios = [r if rows[2 * i]["kind"] == "old" else 1 / r for i, r in enumerate(ratios)]
    print(f"new / old wall time, paired: median {statistics.median(ratios):.2f} (range {min(ratios):.2f}–{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
