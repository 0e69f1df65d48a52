"""The tables of docs/measurements/2026-11-29-dry-run/README.md (issue #63's "Must show"), from dry runs in-process:

- every registry model x {1xh100, 8xh100, 8xb200} on vLLM: the duration the dry run prints, or why it refuses;
- the rate estimator against every published rate it holds (dflashbench/data/decode_rates.toml): fitted and
  held-out rows, measured, estimated, ratio, and the band the dry run prints;
- the memory plan against every public vLLM log of a registry model (tools/memory_vs_logs.py), all held out;
- the activation peak for MoE logs outside the registry, before and with the experts' workspaces;
- the headline dry run's line count at 100 columns, with and without --verbose.

No GPU, no network (HF_HUB_OFFLINE=1). Run from the checkout:

    HF_HUB_OFFLINE=1 .venv/bin/python tools/dry_run_tables.py > /tmp/tables.md
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from typer.testing import CliRunner  # noqa: E402

from dflashbench.cli import app  # noqa: E402
from dflashbench.plan import decode_rate as dr  # noqa: E402
from dflashbench.plan.models import registry  # noqa: E402

HERE = Path(__file__).resolve().parents[1] / "docs/measurements/2026-11-29-dry-run"
GPUS = ("1xh100", "8xh100", "8xb200")
HEADLINE = ["sweep", "--backend", "vllm", "--model", "gpt-oss-120b", "--gpu", "8xh100", "--dry-run"]


def _cell(output: str) -> str:
    lines = output.splitlines()
    duration = next((ln for ln in lines if ln.startswith("duration: ")), None)
    refused = next((ln.strip() for ln in lines if ln.strip().startswith(("refused", "error:"))), None)
    if refused:
        return refused.replace("|", "/")[:160]
    if duration:
        return duration.removeprefix("duration: ").replace("|", "/")
    return "(no duration line)"


def durations() -> list[str]:
    out = ["| model | " + " | ".join(GPUS) + " |", "|---|" + "---|" * len(GPUS)]
    runner = CliRunner()
    for entry in registry().models:
        cells = [_cell(runner.invoke(app, ["sweep", "--backend", "vllm", "--model", entry.name, "--gpu", g,
                                           "--dry-run"]).output) for g in GPUS]  # fmt: skip
        out.append(f"| {entry.name} | " + " | ".join(cells) + " |")
    return out


def estimator() -> list[str]:
    c = dr.constants()
    band = dr.held_out_band()
    out = [f"Fitted: {c.describe()}. Band printed: {band.describe()}.", "",
           "| role | figure | GPU x tp | engine | c | measured | estimated | measured / estimated |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for check in dr.checks():
        f = check.figure
        out.append(f"| {f.role} | {f.id} | {f.gpu} x {f.tp} | {f.engine} | {f.concurrency} | {f.measured:.2f} {f.unit} "
                   f"| {check.estimated:.2f} | {check.ratio:.2f} |")  # fmt: skip
    return out


def memory() -> list[str]:
    """tools/memory_vs_logs.py's table: the memory plan against every public vLLM log of a registry model the project
    holds. Every row is held out: the plan's estimated terms are fitted on logs of models outside the registry only
    (dflashbench/plan/budget_terms.py), none on these."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("memory_vs_logs", Path(__file__).with_name("memory_vs_logs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    found = module.rows()
    kv = [abs(r["plan_kv_gib"] / r["kv_gib"] - 1) for r in found
          if r.get("plan_kv_gib") is not None and r.get("kv_gib") and abs(r["kv_gib"]) >= 5]  # fmt: skip
    return [f"All {len(found)} rows held out (no estimated term was fitted on a registry model's log). KV memory, plan "
            f"against log, where the log's KV is 5 GiB or more: worst {max(kv):.1%}, mean {sum(kv) / len(kv):.1%}.",
            "", module.table(found)]  # fmt: skip


def moe_activation() -> list[str]:
    """The activation peak the plan takes for MoE logs outside the registry, with and without the experts'
    workspaces (dflashbench/plan/budget_terms.py), against the peak each log reports."""
    import tomllib

    from dflashbench.plan import budget_terms as bt

    rows = tomllib.loads((HERE / "moe_activation_logs.toml").read_text())["logs"]
    out = ["| model | tp | logged GiB | sampler alone (before) | ratio | sampler + workspaces (now) | ratio |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    ratios = []
    for r in rows:
        shape = bt.MoeShape(r["experts_per_token"], r["intermediate_size"], r["hidden_size"])
        before = bt.activation("vllm", r["vocab_size"], 8192, 1024, True, "0.19.0").gib
        now = bt.activation("vllm", r["vocab_size"], 8192, 1024, True, "0.19.0", shape, r["tp"]).gib
        logged = r["logged_gib"] if "logged_high_gib" not in r else (r["logged_gib"] + r["logged_high_gib"]) / 2
        shown = f"{r['logged_gib']}" + (f"–{r['logged_high_gib']}" if "logged_high_gib" in r else "")
        ratios.append(now / logged)
        out.append(f"| {r['model']} | {r['tp']} | {shown} | {before:.2f} | x{before / logged:.2f} | {now:.2f} | "
                   f"x{now / logged:.2f} |")  # fmt: skip
    return [f"All {len(rows)} held out (the term is read from vLLM's source, not fitted): plan over log x"
            f"{min(ratios):.2f} to x{max(ratios):.2f}. Rows: `moe_activation_logs.toml`.", "", *out]


def screen(width: int = 100) -> list[str]:
    runner = CliRunner()
    out = []
    for extra in ([], ["--verbose"]):
        text = runner.invoke(app, [*HEADLINE, *extra]).output
        rows = sum(max(1, -(-len(line) // width)) for line in text.splitlines())
        out.append(f"- `dflashbench {' '.join([*HEADLINE, *extra])}`: {len(text.splitlines())} lines, {rows} screen "
                   f"lines at {width} columns")  # fmt: skip
    return out


def main() -> int:
    print("## Durations (vLLM, the default suite)\n")
    print("\n".join(durations()))
    print("\n## The rate estimator against published rates\n")
    print("\n".join(estimator()))
    print("\n## The memory plan against public logs\n")
    print("\n".join(memory()))
    print("\n## MoE activation peaks against logs\n")
    print("\n".join(moe_activation()))
    print("\n## The headline dry run on a screen\n")
    print("\n".join(screen()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
