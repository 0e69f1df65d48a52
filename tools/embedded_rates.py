"""Write dflashbench/data/embedded_rates.toml: the embedded pair's per-user rates by method and concurrency, as the
committed demo runs measured them (category "all", the pooled per-user rate), for the dry run's duration of the
embedded demo (dflashbench/plan/pace.py). Run from the checkout:

    .venv/bin/python tools/embedded_rates.py

Each backend's run is named below; rerun this after committing a newer one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
RUNS = {  # backend -> committed run of the embedded demo suite on it
    "reference": "results/examples/demo-20261127-075225-b7da",
    "vllm": "results/examples/demo-20261125-024540-6b40",
}


def rates(run: Path) -> dict[str, dict[int, float]]:
    points = pd.read_json(run / "points.jsonl", lines=True)
    points = points[(points["category"] == "all") & (points["status"] == "ok")]
    column = "per_user_tok_per_s_pooled" if "per_user_tok_per_s_pooled" in points else "per_user_tok_per_s_mean"
    table = points.groupby(["method", "concurrency"])[column].median()
    out: dict[str, dict[int, float]] = {}
    for (method, c), value in table.items():
        out.setdefault(str(method), {})[int(c)] = round(float(value), 1)
    return out


def main() -> int:
    lines = ["# The embedded pair's per-user decode rates (tok/s per user) by method and concurrency, as committed demo",
             "# runs measured them (category 'all', pooled per-user rate, median over rounds). Written by",
             "# tools/embedded_rates.py; the dry run plans the embedded demo at these (dflashbench/plan/pace.py).", ""]
    for backend, rel in RUNS.items():
        run = ROOT / rel
        manifest = json.loads((run / "manifest.json").read_text())
        host = manifest.get("host", {}) or {}
        lines += [f"[{backend}]", f'run = "{rel}"',
                  f'machine = "{host.get("machine", "?")}, {host.get("cpu_count", "?")} CPU cores, no GPU"']
        for method, by_c in rates(run).items():
            shown = ", ".join(f'"{c}" = {v}' for c, v in sorted(by_c.items()))
            lines.append(f"{method} = {{ {shown} }}")
        lines.append("")
    target = ROOT / "dflashbench" / "data" / "embedded_rates.toml"
    target.write_text("\n".join(lines))
    print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
