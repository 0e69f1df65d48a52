"""The lines of the report's sections below the verdict: why a method pays (acceptance over step cost), the SLO
reading, energy and GPU time, draft lengths, published figures, open-loop points, points whose per-token latency
was not measured. The verdict (:mod:`.answer`) says what decides; these say the rest, each once.

Pure functions from the numbers :mod:`dflashbench.measure` computed to sentences.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence

import pandas as pd

from dflashbench.measure import analysis, observability
from dflashbench.measure.analysis import BASELINE, SETTING, method_label
from dflashbench.report.summary import fmt_x


def _pct_span(values: Sequence[float]) -> str:
    a, b = f"{min(values) * 100:+.1f}%", f"{max(values) * 100:+.1f}%"
    return a if a == b else f"{a} to {b}"


# Where the rest of the identity's error is no bigger than this, the engine's step clock against the client's
# explains it; past it the two do not count the same steps, and the check fails.
CLOCK_SHARE = 0.10


def explain_lines(decomp: pd.DataFrame, drafts: Mapping[str, int] | None = None) -> list[str]:
    """Per pair: at each concurrency, its own τ ratio over its own step-cost ratio and the speedup they give beside
    the measured one. On the engine's step time that is a check (what is off, and why); on the client's gaps
    between chunks it is an identity (the same clock as the speedup), said as such, not as a check."""
    out = []
    for (method, baseline), g in decomp.groupby(["method", "baseline"], sort=False) if not decomp.empty else []:
        rows = [r for r in g.sort_values("concurrency").to_dict("records") if _found([r], "predicted")]
        if not rows:
            continue
        verify = f"; {drafts[method] + 1} tokens verified per step" if drafts and method in drafts else ""
        engine = rows[0]["step_source"] == "engine"
        parts = [f"c={r['concurrency']}: τ {r['tau'] / r['tau_base']:.2f}× ÷ step cost {r['cost_ratio']:.2f}× = "
                 f"{fmt_x(r['predicted'])}" + (f" expected, {fmt_x(r['measured'])} measured" if engine else "")
                 for r in rows]  # fmt: skip
        pair = f"{method_label(method)} vs {method_label(baseline)}"
        clock = "the engine's own step time" if engine else "the client's gaps between chunks, one per step"
        text = f"Why, {pair} (step cost from {clock}{verify}): " + "; ".join(parts)
        errors, drafting, past, rest = (_found(rows, k) for k in ("error", "tau_drafting", "past_stop", "timing_error"))
        if drafting:  # a draft-free method: some steps drafted nothing; its τ here is over every step
            text += (f". {method_label(method)}'s τ is over every step it took ({rows[0]['tau']:.2f} tokens), not its "
                     f"τ over the steps that drafted ({drafting[0]:.2f}, the tables')")  # fmt: skip
        if not engine:
            text += (". On the client's clock this is an identity (tokens ÷ decode time either way), not a check: "
                     "it splits the speedup into acceptance and step cost")
        elif errors:
            text += f". The check is off by {_pct_span(errors)}"
            if past:
                text += f", of which {_pct_span(past)} is tokens accepted past a stop (τ counts them, the user does not)"
            if rest and max(abs(x) for x in rest) > CLOCK_SHARE:
                text += (f"; the rest, {_pct_span(rest)}, is more than the engine's clock against the client's "
                         "explains: the two do not count the same steps here, so the check fails")
            elif rest and max(abs(x) for x in rest) >= 0.001:
                text += f"; the rest, {_pct_span(rest)}, is the engine's step clock against the client's"
        left = [f"c={r['concurrency']} ({r['left_out'].removeprefix('left out: ')})" for r in
                g.sort_values("concurrency").to_dict("records") if isinstance(r.get("left_out"), str)]  # fmt: skip
        if left:
            text += ". Left out: " + "; ".join(left)
        out.append(text + ".")
    return out


def _found(rows: Sequence[Mapping], key: str) -> list[float]:
    """The values of ``key`` in ``rows`` that were measured (neither None nor NaN)."""
    return [r[key] for r in rows if r.get(key) is not None and r.get(key) == r.get(key)]


def slo_lines(within: pd.DataFrame, terms: Sequence) -> list[str]:
    """Each method's best throughput within the SLO as a ratio to AR's, where both are known; where a percentile
    could not be read as asked, the point it stopped at and why; where the SLO bound no point."""
    if within is None or within.empty or not terms or BASELINE not in set(within["method"]):
        return []
    rows = within.to_dict("records")
    base = next(r for r in rows if r["method"] == BASELINE)
    parts = []
    for rec in rows:
        name, ratio = method_label(rec["method"]), rec.get("ratio")
        if rec["method"] != BASELINE and ratio is not None and ratio == ratio:
            parts.append(f"{name} {fmt_x(ratio)} AR's best throughput ({name} at c={int(rec['concurrency'])}, AR at "
                         f"c={int(base['concurrency'])})")  # fmt: skip
        elif rec["method"] != BASELINE or rec.get("known") is False:
            parts.append(f"{name}: {rec.get('note') or 'no ratio'}")
    notes = {str(r.get("note")) for r in rows}
    if len(notes) == 1 and all(r.get("ratio") != r.get("ratio") or r.get("ratio") is None for r in rows):
        why = re.sub(r"^not read: at c=\d+ \([^)]*\) ", "", next(iter(notes))).replace("this point has", "a point has")
        parts = [f"no point of any method read: {why}"]  # one reason, said once
    line = f"Within the SLO ({', '.join(t.label for t in terms)}): " + "; ".join(parts)
    if any(r.get("ratio") == r.get("ratio") and r.get("ratio") is not None for r in rows):
        line += "; read off the points, no interval"
    tops = sorted({int(r["top_concurrency"]) for r in rows if r.get("top_concurrency") == r.get("top_concurrency")
                   and r.get("top_concurrency") is not None})  # fmt: skip
    if not any(bool(r.get("binds")) for r in rows) and all(r.get("known") is not False for r in rows):
        line += (f". The SLO bound no measured point: these are the top concurrencies swept (c={', '.join(map(str, tops))}),"
                 " not a limit the SLO set")  # fmt: skip
    return [line + "."]


def cost_lines(points: pd.DataFrame, gpu_hour_cost: float | None = None) -> list[str]:
    """Where NVML measured energy: per method, J/token and GPU-seconds per million output tokens at each
    concurrency (and money at ``gpu_hour_cost`` per GPU-hour)."""
    rows = points[points["category"] == "all"] if not points.empty else points
    if rows.empty or "energy_j_per_tok" not in rows.columns:
        return []
    energy = pd.to_numeric(rows["energy_j_per_tok"], errors="coerce")
    rows = rows[energy.notna() & (pd.to_numeric(rows.get("num_gpus"), errors="coerce").fillna(0) > 0)]
    out = []
    for method in sorted(set(rows["method"]), key=analysis.method_sort_key) if not rows.empty else []:
        parts = []
        for r in rows[rows["method"] == method].sort_values("concurrency").to_dict("records"):
            gs = analysis.gpu_s_per_mtok(r)
            money = f", {gs / 3600 * gpu_hour_cost:,.3g} at {gpu_hour_cost:g}/GPU-hour" if gs and gpu_hour_cost else ""
            parts.append(f"{float(r['energy_j_per_tok']):.3g} J/token" + (f", {gs:,.0f} GPU·s{money}" if gs else "")
                         + f" at c={int(r['concurrency'])}")  # fmt: skip
        out.append(f"Energy and GPU time per million output tokens (NVML), {method_label(method)}: " + "; ".join(parts))
    return out


def draft_length(manifest: Mapping, method: str) -> tuple[int, str] | None:
    """The draft length a method's server ran with, from its launch argv in the manifest: vLLM's
    ``--speculative-config`` JSON ``num_speculative_tokens`` (vllm/config/speculative.py), SGLang's
    ``--speculative-num-draft-tokens`` (sglang/srt/server_args.py), or a ``--num-speculative-tokens`` flag."""
    servers = manifest.get("servers") if isinstance(manifest.get("servers"), dict) else {}
    argv = [str(a) for a in ((servers.get(method) or {}).get("argv") or [])]
    for i, arg in enumerate(argv[:-1]):
        value = argv[i + 1]
        if arg == "--speculative-config":
            try:
                n = json.loads(value).get("num_speculative_tokens")
            except (ValueError, AttributeError):
                n = None
            if n:
                by_batch = "per_batch_size" in value  # a schedule: n is its longest K
                return int(n), "--speculative-config num_speculative_tokens" + (", the longest K by batch size" if by_batch else "")
        if arg in ("--speculative-num-draft-tokens", "--num-speculative-tokens") and value.isdigit():
            return int(value), arg
        if arg == "--num-speculative-tokens-per-batch-size":  # dflashbench serve's schedule (reference/draft_length.py)
            with contextlib.suppress(ValueError, TypeError, IndexError):
                return max((int(r[2]) for r in json.loads(value)), default=0), f"the longest K by batch size, {arg}"
    return None


def draft_lengths(manifests: Sequence[Mapping], points: pd.DataFrame) -> dict[str, tuple[int, str]]:
    """method -> (draft length, where it was read): the launch argv, else the positions the engine reported
    acceptance for."""
    out = {}
    rows = points[points["category"] == "all"] if not points.empty else points
    for method in sorted(set(rows["method"]) - {BASELINE}, key=analysis.method_sort_key) if not rows.empty else []:
        found = next((d for m in manifests if (d := draft_length(m, method))), None)
        if found is None:
            pos = [len(p) for p in rows.loc[rows["method"] == method, "accepted_per_pos_rate"]
                   if isinstance(p, list | tuple) and len(p)] if "accepted_per_pos_rate" in rows.columns else []  # fmt: skip
            found = (max(pos), "positions the engine reported acceptance for") if pos else None
        if found:
            out[method] = found
    return out


def draft_lines(manifests: Sequence[Mapping], points: pd.DataFrame) -> list[str]:
    parts = [f"{method_label(m)} {n} tokens per step ({where})" for m, (n, where) in draft_lengths(manifests, points).items()]
    return ["Draft length: " + "; ".join(parts) + "."] if parts else []


def published_lines(published: pd.DataFrame | None, key: Mapping) -> list[str]:
    """Each published figure matched to this setting, beside the measurement."""
    if published is None or published.empty or "measured_in" not in published.columns:
        return []
    where = f"{key['backend']} / {key['model']} / {key['workload']} /"
    out = []
    for r in published.to_dict("records"):
        if not isinstance(r.get("measured_in"), str) or not r["measured_in"].startswith(where) or r.get("measured") is None:
            continue
        metric = "τ" if r["metric"] == "tau" else str(r["metric"]).replace("speedup_", "speedup, ").replace("_", " ")
        shown = f"{r['bound']} {float(r['published']):.2f}" if isinstance(r.get("bound"), str) else f"{float(r['published']):.2f}"
        note = f"; {r['note']}" if isinstance(r.get("note"), str) and r["note"] else ""
        out.append(f"Published beside measured, {method_label(str(r['method']))} {metric} on {r['task']}: measured "
                   f"{float(r['measured']):.2f}, published {shown} ({r['source']}; {r.get('hardware') or 'hardware not stated'}"
                   f"{note})")  # fmt: skip
    return out


def open_loop_lines(table: pd.DataFrame) -> list[str]:
    """Per speculative method (category "all"): its goodput and throughput over AR's at each arrival rate."""
    rows = table[(table["category"] == "all") & (table["method"] != BASELINE)] if not table.empty else table
    lines = []

    def by_rate(g: pd.DataFrame, col: str) -> str:
        return ", ".join(f"{fmt_x(v)} at {r:g}/s" for r, v in zip(g["request_rate"], g[col], strict=True)
                         if v is not None and v == v)  # fmt: skip

    for key, g in rows.groupby([*SETTING, "method"], sort=False, dropna=False) if not rows.empty else []:
        goodput, tput = by_rate(g, "goodput_speedup"), by_rate(g, "throughput_speedup")
        slos = sorted({s for s in g["slo"] if isinstance(s, str)})
        parts = ([f"goodput {goodput} (SLO {'; '.join(slos)})"] if goodput else []) + ([f"throughput {tput}"] if tput else [])
        if parts:
            lines.append(f"{method_label(key[-1])} vs AR at the same arrival rate: " + " · ".join(parts))
    return lines


def timing_lines(points: pd.DataFrame) -> list[str]:
    """Per setting (category "all"): the points whose per-token latency was not measured, why, what that leaves
    out, the fix, and the engine's own TPOT there where it reported one."""
    if points.empty or "latency_not_measured_reason" not in points.columns:
        return []
    rows = points[points["latency_not_measured_reason"].notna() & (points["category"] == "all")]
    lines = []
    for _, g in rows.groupby(list(SETTING), sort=True, dropna=False) if not rows.empty else []:
        where = "; ".join(f"{method_label(m)} at c={', '.join(str(int(c)) for c in sorted(mg['concurrency']))}"
                          for m, mg in sorted(g.groupby("method"), key=lambda t: analysis.method_sort_key(t[0])))  # fmt: skip
        server = [f"{method_label(p['method'])} c={int(p['concurrency'])} {tp}" for p in g.to_dict("records")
                  if (tp := _server_tpot(p))]  # fmt: skip
        line = (f"Per-token latency not measured for {where}: {g['latency_not_measured_reason'].iloc[0]}. These points "
                "are left out of the per-user speedups, the Pareto curves and the matched-interactivity and SLO "
                f"readings (their throughput and request latency stand). Fix: {observability.FIX}.")  # fmt: skip
        lines.append(line + (" The engine's own histograms there: " + "; ".join(server) + "." if server else ""))
    return lines


def _server_tpot(point: dict) -> str | None:
    timing = (point.get("extra") or {}).get("server_timing") if isinstance(point.get("extra"), dict) else None
    tpot = (timing or {}).get("tpot_s") or {}
    mean_s = tpot.get("mean_s")
    return f"TPOT mean {mean_s * 1e3:,.2f} ms over {tpot.get('count')} requests" if mean_s is not None else None
