"""Recompute the committed verdicts' figures from each run folder's own files, with pandas and numpy only (no
dflashbench import), and set them beside `dflashbench report RUN --format json` (the report's own readings).

    .venv/bin/python docs/measurements/2026-11-29-verdict-review/recompute.py > /tmp/recompute.txt

Request latency = last_token_ns - sent_ns, TTFT = first_token_ns - sent_ns, over measured (not warm-up), ok requests;
a ratio is a ratio of sums over the prompts both points ran, paired by (request_id, turn, repeat); its interval a
2,000-resample percentile bootstrap over the pairs, each log side widened by 1.96 x hypot(drift_sd, run_to_run_sd)
(docs/metrics.md, "The noise rule", item 3); drift_sd is recomputed from probes.jsonl by the variogram rule the docs
describe (1.4826 x median |log s[i+k] - log s[i]|, less twice the probe's own noise, the largest lag among a load's
points), run_to_run_sd from dflashbench/data/launch_noise.toml.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[3]
EX = ROOT / "results" / "examples"
RUNS = ["demo-20261127-075225-b7da", "demo-20261123-120110-e69c", "gpu-embedded-20261123-093322-08e0",
        "demo-20261125-024540-6b40", "demo-lengths-20261125-192240-20db", "demo-20261127-053618-7ae2"]
TRACE = "trace-demo-20261125-182837-c938"


def load(run: str):
    d = EX / run
    pts = pd.read_json(d / "points.jsonl", lines=True)
    req = pd.read_json(d / "requests.jsonl", lines=True, dtype=False)
    req["method"] = req.point_id.str.split(":").str[1]
    req["workload"] = req.point_id.str.split(":").str[2]
    req["e2e_s"] = (req.last_token_ns - req.sent_ns) / 1e9
    req["ttft_s"] = (req.first_token_ns - req.sent_ns) / 1e9
    req["repeat"] = req["repeat"].fillna(0) if "repeat" in req else 0
    req["turn"] = req["turn"].fillna(0)
    return pts, req, json.loads((d / "manifest.json").read_text())


def paired(req, m, base, c, fig="e2e_s", cat=None, seed=0):
    q = req[(~req.warmup) & (req.ok == True)]  # noqa: E712
    if cat:
        q = q[q.category == cat]
    key = ["request_id", "turn", "repeat"]
    j = q[(q.method == m) & (q.concurrency == c)][key + [fig]].merge(
        q[(q.method == base) & (q.concurrency == c)][key + [fig]], on=key, suffixes=("_m", "_b"))
    x, y = j[fig + "_m"].to_numpy(), j[fig + "_b"].to_numpy()
    idx = np.random.default_rng(seed).integers(0, len(x), (2000, len(x)))
    lo, hi = np.percentile(x[idx].sum(1) / y[idx].sum(1), [2.5, 97.5])
    return x.sum() / y.sum(), lo, hi, len(j)


def widen(v, lo, hi, *sds):
    e = 1.96 * math.hypot(*sds)
    return v * math.exp(-math.hypot(math.log(v / lo), e)), v * math.exp(math.hypot(math.log(hi / v), e))


def drift_by_lag(run: str):
    p = EX / run / "probes.jsonl"
    if not p.exists():
        return None, []
    P = sorted((json.loads(s) for s in p.read_text().splitlines()), key=lambda r: r["t_ns"])
    logs = np.log([r["seconds"] for r in P])
    spreads = []
    for r in P:
        t = np.log(r["trials_s"])
        spreads.append(1.2533 * 1.4826 * np.median(abs(t - np.median(t))) / math.sqrt(len(t)))
    noise = float(np.median(spreads))
    out = []
    for k in range(1, len(logs)):
        d = logs[k:] - logs[:-k]
        if len(d) < 3:
            d = np.concatenate([logs[j:] - logs[:-j] for j in range(k, len(logs))])
        out.append(math.sqrt(max(0.0, (1.4826 * np.median(abs(d))) ** 2 - 2 * noise ** 2)))
    return P, out


def load_drift(run: str, c: int, P, by_lag):
    """The largest drift between any two of the load's points (docs/metrics.md, "Intervals"); 0 where a load's
    points share one reading (measured together)."""
    if P is None:
        return 0.0
    idx = [i for i, r in enumerate(P) if r["at"].startswith("before ") and r["at"].endswith(f":c{c}")
           or (" & " in r["at"] and f":c{c} " in r["at"] + " ")]
    if len(idx) <= 1:
        return 0.0
    return max(by_lag[abs(a - b) - 1] for a in idx for b in idx if a < b)


def main() -> None:
    r2r = tomllib.loads((ROOT / "dflashbench/data/launch_noise.toml").read_text())
    for run in RUNS:
        pts, req, man = load(run)
        js = Path(f"/tmp/verdict-review-{run}.json")
        subprocess.run([str(ROOT / ".venv/bin/dflashbench"), "report", str(EX / run), "--format", "json", "-o", str(js)],
                       check=True, capture_output=True)
        J = {(r["figure"], r["method"], r["baseline"], r["concurrency"], r["category"]): r
             for r in json.loads(js.read_text())["readings"]}
        P, by_lag = drift_by_lag(run)
        term = r2r.get(man["backend"], {}).get("run_speedup_log_sd", 0.0)
        print(f"===== {run} (backend {man['backend']}, run-to-run sd {term or 'none'})")
        q = req[(~req.warmup) & (req.ok == True)]  # noqa: E712
        key = ["request_id", "turn", "repeat", "concurrency", "workload"]
        sha = "output_sha256" if q.get("output_sha256") is not None and q.output_sha256.notna().any() else None
        for m in sorted(set(q.method) - {"ar"}):
            j = q[q.method == m][key + ["output_tokens"] + ([sha] if sha else [])].merge(
                q[q.method == "ar"][key + ["output_tokens"] + ([sha] if sha else [])], on=key)
            same = (j[sha + "_x"] == j[sha + "_y"]) if sha else (j.output_tokens_x == j.output_tokens_y)
            print(f"  lossless {m}: {int(same.sum())}/{len(j)} ({'sha256' if sha else 'token counts only'})")
        lows = q[(q.method == "ar") & (q.concurrency == q.concurrency.min())]
        print(f"  prompts {q.request_id.nunique()}, median in {lows.prompt_tokens.median()}, "
              f"median out {lows.output_tokens.median()}")
        a = pts[pts.category == "all"]
        for _, p in a.iterrows():
            prec = (p.extra or {}).get("precision") or {}
            hw = max((prec.get("half_width") or {"-": float("nan")}).values())
            print(f"  point {p.point_id}: status {p.status}, thr {p.throughput_tok_per_s:.1f}, tau {p.tau:.3f}, "
                  f"energy {p.energy_j_per_tok}, gpu util {p.gpu_util_pct_mean}, precision {prec.get('reason')} "
                  f"max half-width {hw:.3f}")
        for cat in ["all", *sorted(set(q.category))]:
            for (fig, m, b, c, cc), r in sorted(J.items(), key=lambda kv: (kv[0][4], kv[0][0], kv[0][1], kv[0][3])):
                if cc != cat or fig not in ("latency", "ttft"):
                    continue
                v, lo, hi, n = paired(req, m, b, c, "e2e_s" if fig == "latency" else "ttft_s", None if cat == "all" else cat)
                dr = load_drift(run, c, P, by_lag)
                wl, wh = widen(v, lo, hi, dr, term or 0.0)
                rep = r["interval"] or [float("nan")] * 2
                agree = "ok" if (wl < 1 < wh) == (rep[0] < 1 < rep[1]) and abs(v - r["value"]) < 1e-9 else "DIFFERS"
                print(f"  {cat:8} {fig:8} {m:6}/{b:6} c={c:<2} mine {v:.3f} [{wl:.2f}-{wh:.2f}] n={n} drift_sd={dr:.3f} | "
                      f"report {r['value']:.3f} [{rep[0]:.2f}-{rep[1]:.2f}] {r['verdict']} {agree}")
    # the trace run: its readings are not in --format json (readings: []), so recompute from requests alone
    pts, req, man = load(TRACE)
    q = req[(~req.warmup) & (req.ok == True)].copy()  # noqa: E712
    q["speed"] = q.point_id.str.extract(r"x(\d+\.\d+)$")[0].astype(float)
    q["late_ms"] = (q.sent_ns - q.queued_ns) / 1e6  # queued_ns is the due time on the trace's clock
    print(f"===== {TRACE}")
    for pid, g in q.groupby("point_id"):
        s = g.sort_values("sent_ns")
        rate = (len(s) - 1) / ((s.sent_ns.iloc[-1] - s.sent_ns.iloc[0]) / 1e9)
        print(f"  {pid}: sent {len(s)}, achieved {rate:.3f}/s, late p50 {s.late_ms.median():.2f} ms, "
              f"p99 {np.percentile(s.late_ms, 99):.2f} ms, max {s.late_ms.max():.2f} ms")
    for content in ("workloads", "random"):
        for sp in (1.0, 2.0):
            g = q[(q.workload == content) & (q.speed == sp)]
            j = g[g.method == "dflash"][["trace_index", "e2e_s"]].merge(g[g.method == "ar"][["trace_index", "e2e_s"]],
                                                                       on="trace_index")
            x, y = j.e2e_s_x.to_numpy(), j.e2e_s_y.to_numpy()
            idx = np.random.default_rng(0).integers(0, len(x), (2000, len(x)))
            lo, hi = np.percentile(x[idx].sum(1) / y[idx].sum(1), [2.5, 97.5])
            wl, wh = widen(x.sum() / y.sum(), lo, hi, 0.072)
            d = g[g.method == "dflash"]
            print(f"  {content} {sp}x: DFlash/AR latency {x.sum() / y.sum():.3f} [{wl:.2f}-{wh:.2f}] n={len(j)}, "
                  f"delivered tau {(d.output_tokens - 1).sum() / d.spec_verify_steps.sum():.3f}, "
                  f"median in {g.prompt_tokens.median()}, out {g.output_tokens.median()}")
    for _, p in pts.iterrows():
        gp, tr = p.extra["goodput"], p.extra["trace"]
        print(f"  {p.point_id}: goodput {gp['goodput_req_per_s']:.3f}/s ({gp['good']}/{gp['requests']}, slo {gp['slo']}), "
              f"inputs within 10% {tr['lengths']['input_within_10pct']:.2f}, p90 target {tr['lengths']['input_target_p90']}"
              f" -> sent {tr['lengths']['input_sent_p90']}, pool {tr['pool']}")


if __name__ == "__main__":
    sys.exit(main())
