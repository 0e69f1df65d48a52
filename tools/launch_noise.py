"""How fast one launch of a server runs against another on this machine (the launch noise of the noise rule,
docs/metrics.md; dflashbench/measure/launch_noise.py).

Usage (from the repository root, at normal priority):

    python tools/launch_noise.py OUT [--launches 8] [--backend reference]

Runs ``--launches`` small sweeps one after another (AR and DFlash on the embedded pair, c=1, 8 prompts of 32
tokens; each sweep launches each method's server once), then prints each launch's median TPOT per method, the
CPU speed probe's readings beside them, and the pooled spread of a launch's median TPOT around its method's
(log, 1 sd): the ``log_sd`` that dflashbench/data/launch_noise.toml records for the backend.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from dflashbench.measure.launch_noise import per_launch_log_sd
from dflashbench.types import PointKey

SUITE = """name = "launch-noise"
backend = "{backend}"
methods = ["ar", "dflash"]
model = "embedded"
concurrency = [1]
num_prompts = 8
requests_per_stream = 1
warmup_requests = 1
max_tokens = 32
[drafts]
dflash = "embedded"
[[workloads]]
name = "synthetic"
"""


def _tpot_ms(request: dict) -> float | None:
    n = request.get("output_tokens") or 0
    first, last = request.get("first_token_ns"), request.get("last_token_ns")
    return (last - first) / 1e6 / (n - 1) if n > 1 and first and last else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--launches", type=int, default=8)
    ap.add_argument("--backend", default="reference")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    suite = args.out / "suite.toml"
    suite.write_text(SUITE.format(backend=args.backend))
    by_method: dict[str, list[float]] = {}
    for i in range(args.launches):
        out = args.out / f"launch-{i}"
        subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "-o", str(out),
                        "--no-report"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        (run,) = [p for p in out.iterdir() if p.is_dir()]
        tpots: dict[str, list[float]] = {}
        for line in (run / "requests.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r.get("ok") and not r.get("warmup") and (t := _tpot_ms(r)) is not None:
                tpots.setdefault(PointKey.parse(r["point_id"]).method, []).append(t)
        probe = [round(json.loads(p)["seconds"] * 1e3, 1) for p in (run / "probes.jsonl").read_text().splitlines()]
        medians = {m: statistics.median(v) for m, v in tpots.items()}
        for m, v in medians.items():
            by_method.setdefault(m, []).append(v)
        print(f"launch {i}: " + ", ".join(f"{m} TPOT p50 {v:.3f} ms" for m, v in medians.items())
              + f"; CPU probe {probe} ms", flush=True)  # fmt: skip
    print(f"per-launch spread (log, 1 sd, pooled over {', '.join(by_method)}): {per_launch_log_sd(by_method):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
