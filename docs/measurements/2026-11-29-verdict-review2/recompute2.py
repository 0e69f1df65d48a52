"""Recompute a run's verdict figures from its own files (requests.jsonl, points.jsonl, manifest.json).

python recompute2.py RUN [RUN...]
Per point vs AR at the same load/workload/category: ratio of summed request times (sent to last token) and of summed
TTFT over prompts both ran, paired by (request_id, occurrence); a bootstrap 95% interval on the requests alone; the
points' own throughput ratio; lossless (same output sha256 or token ids, else same token count); per-category ratios;
mean tokens in/out; tau per point.
"""
import json
import sys

import numpy as np
import pandas as pd


def load(run):
    r = pd.read_json(f"{run}/requests.jsonl", lines=True)
    r = r[~r.warmup.astype(bool)].copy()
    p = pd.read_json(f"{run}/points.jsonl", lines=True)
    p = p[p.category == "all"] if "category" in p else p
    if "repeat" not in r:
        r["repeat"] = 0
    r["e2e"] = (r.last_token_ns - r.sent_ns) / 1e9
    r["ttft"] = (r.first_token_ns - r.sent_ns) / 1e9
    parts = r.point_id.str.split(":")
    r["method"] = parts.str[1]
    r["load"] = parts.str[3]
    r["wl"] = parts.str[2]
    r["occ"] = r.groupby(["point_id", "request_id", "repeat"]).cumcount()
    return r, p


def boot(a, b, n=4000, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    x = a[idx].sum(1) / b[idx].sum(1)
    return np.percentile(x, [2.5, 97.5]), np.std(np.log(x))


def goodput(req, point):
    """Requests meeting ttft <= 1 s and tpot <= 0.05 s (the trace suite's --goodput) per second of the point."""
    tpot = ((req.last_token_ns - req.first_token_ns) / 1e9 / (req.output_tokens - 1).clip(lower=1))
    tpot = tpot.where(req.output_tokens > 1, 0)
    return ((req.ttft <= 1) & (tpot <= 0.05)).sum() / point.duration_s.iloc[0]


def main(run):
    r, p = load(run)
    print("==", run)
    print("points:", len(p), "failed:", int((p.status != "ok").sum()), "requests:", len(r), "failed:",
          int((~r.ok.astype(bool)).sum()))
    print("tokens in/out (mean, AR points):", r[r.method == "ar"].prompt_tokens.mean().round(1),
          r[r.method == "ar"].output_tokens.mean().round(1), "median", r[r.method == "ar"].prompt_tokens.median(),
          r[r.method == "ar"].output_tokens.median(), "prompts:", r.request_id.nunique())
    for (wl, load_), g in r.groupby(["wl", "load"]):
        ar = g[g.method == "ar"]
        for m in sorted(set(g.method) - {"ar"}):
            x = g[g.method == m].merge(ar, on=["request_id", "occ", "repeat"], suffixes=("", "_ar"))
            x = x[x.ok.astype(bool) & x.ok_ar.astype(bool)]
            lat = x.e2e.sum() / x.e2e_ar.sum()
            ci, sd = boot(x.e2e.values, x.e2e_ar.values)
            tt = x.ttft.sum() / x.ttft_ar.sum()
            pm = p[(p.point_id == g[g.method == m].point_id.iloc[0])]
            pa = p[(p.point_id == ar.point_id.iloc[0])]
            thr = pm.throughput_tok_per_s.iloc[0] / pa.throughput_tok_per_s.iloc[0]
            if "output_sha256" in x and x.output_sha256.notna().all():
                same = (x.output_sha256 == x.output_sha256_ar).sum(); how = "sha"
            else:
                same = (x.output_tokens == x.output_tokens_ar).sum(); how = "count"
            cats = {c: round(h.e2e.sum() / h.e2e_ar.sum(), 3) for c, h in x.groupby("category")}
            gp = goodput(g[g.method == m], pm) / goodput(ar, pa)
            print(f"{wl} {load_} {m}/ar: goodput (ttft <= 1 s, tpot <= 0.05 s) {gp:.2f}")
            print(f"{wl} {load_} {m}/ar: lat {lat:.3f} req-ci [{ci[0]:.3f}-{ci[1]:.3f}] sd {sd:.3f} ttft {tt:.3f} "
                  f"thr {thr:.2f} pairs {len(x)} lossless {same}/{len(x)} ({how}) tau {pm.tau.iloc[0]} cats {cats}")
        ms = sorted(set(g.method) - {"ar"})
        for i, a in enumerate(ms):
            for b in ms[i + 1:]:
                x = g[g.method == b].merge(g[g.method == a], on=["request_id", "occ", "repeat"], suffixes=("", "_o"))
                cats = {c: round(h.e2e.sum() / h.e2e_o.sum(), 3) for c, h in x.groupby("category")}
                print(f"{wl} {load_} {b}/{a}: lat {x.e2e.sum() / x.e2e_o.sum():.3f} cats {cats}")


if __name__ == "__main__":
    for run in sys.argv[1:]:
        main(run)
