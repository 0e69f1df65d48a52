"""Per point of each run directory given: throughput, energy per token, mean power, GPU utilisation, and the
energy cross-check (NVML's energy counter against the integral of the sampled power), with the telemetry's
actual sampling interval. Used by tools/gpu-checks.sh; any run directory works."""

from __future__ import annotations

import sys

from dflashbench.run.store import load_run


def facts(run_dir: str) -> str:
    run = load_run(run_dir)
    gpu = run.manifest.get("gpu", {})
    lines = [f"{run.run_dir.name}: {gpu.get('gpu_count')} x {gpu.get('gpu')}, driver {gpu.get('driver')}, "
             f"CUDA {gpu.get('cuda_driver')}",
             f"{'method':<7} {'c':>3} {'tok/s':>8} {'J/tok':>7} {'W':>6} {'util%':>6} {'counter J':>10} "
             f"{'integral J':>10} {'ratio':>6} {'samples':>7} {'gap ms':>7}"]  # fmt: skip
    gaps = run.telemetry.groupby("point_id")["t_s"].diff().groupby(run.telemetry["point_id"]).median() \
        if len(run.telemetry) else {}
    for p in run.points[run.points["category"] == "all"].itertuples():
        e = (p.extra or {}).get("energy") or {}
        counter, integral = e.get("energy_j"), e.get("power_integral_j")
        ratio = f"{integral / counter:.3f}" if counter and integral else "-"
        gap = gaps.get(p.point_id) if hasattr(gaps, "get") else None
        lines.append(f"{p.method:<7} {p.concurrency:>3} {p.throughput_tok_per_s:>8.1f} {_f(p.energy_j_per_tok, 3):>7} "
                     f"{_f(p.mean_power_w):>6} {_f(p.gpu_util_pct_mean):>6} {_f(counter):>10} {_f(integral):>10} "
                     f"{ratio:>6} {e.get('samples', '-'):>7} {_f(gap * 1e3 if gap else None):>7}")  # fmt: skip
    return "\n".join(lines)


def _f(value, digits: int = 1) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


if __name__ == "__main__":
    print("\n\n".join(facts(d) for d in sys.argv[1:]))
