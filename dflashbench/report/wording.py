"""The verdict's sentences: each reading with its decision and what its interval covers, the answer, and the
lines beside them (time to first token, the SLO, energy and GPU time, draft lengths, published figures).

Pure functions from the numbers :mod:`.summary` gathers to text; the rules behind the words are in
docs/metrics.md ("The noise rule", "The verdict's answer") and :data:`.summary.ANSWER_RULE`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd

from dflashbench.measure import analysis, noise, verdict
from dflashbench.measure.analysis import BASELINE, method_label

if TYPE_CHECKING:  # pragma: no cover
    from dflashbench.report.summary import MethodVerdict, Reading, SettingVerdict

WORDS = {noise.FASTER: "clearly faster", noise.SLOWER: "clearly slower", noise.UNCLEAR: "not distinguishable",
         noise.NO_INTERVAL: "no interval"}  # fmt: skip
SHORT = {noise.FASTER: "faster", noise.SLOWER: "slower", noise.UNCLEAR: "≈", noise.NO_INTERVAL: "no interval"}
LONGER = {noise.FASTER: "longer", noise.SLOWER: "shorter", noise.UNCLEAR: "not distinguishable",
          noise.NO_INTERVAL: "no interval"}  # fmt: skip  (a TTFT ratio above 1 is a longer wait)


def fmt_x(v) -> str:
    return "—" if v is None or v != v else f"{float(v):.2f}×"


def span_x(lo: float | None, hi: float | None) -> str:
    """``0.66×–1.29×``; one figure where both ends round alike."""
    a, b = fmt_x(lo), fmt_x(hi)
    return a if a == b else f"{a}–{b}"


def span(lo: float, hi: float, fmt: str = "{:,.0f}") -> str:
    """``157–399``; ``199`` where both ends print alike."""
    a, b = fmt.format(lo), fmt.format(hi)
    return a if a == b else f"{a}–{b}"


def concurrencies(cs: Sequence[int], measured: Sequence[int]) -> str:
    """``c=1–4`` for three or more neighbours on the ladder swept, else ``c=1, 2``."""
    cs = sorted(cs)
    ladder = sorted(set(measured) | set(cs))
    idx = [ladder.index(c) for c in cs]
    if len(cs) >= 3 and idx == list(range(idx[0], idx[0] + len(cs))):
        return f"c={cs[0]}–{cs[-1]}"
    return "c=" + ", ".join(map(str, cs))


def reading(r: Reading) -> str:
    """``1.22× [1.05–1.44] clearly faster``, or ``0.82× (no interval: why; decides nothing)``."""
    if r.interval is None:
        return f"{fmt_x(r.value)} (no interval: {r.why or 'none measured'}; decides nothing)"
    lo, hi = r.interval
    return f"{fmt_x(r.value)} [{lo:.2f}–{hi:.2f}] {WORDS[r.decision]}"


def _sittings(r: Reading) -> str:
    return " (crosses sittings)" if r.crosses_sittings else ""


_DRIFT = re.compile(r"^requests and the machine's drift between the points \(speed probe ±([0-9.]+)%\)$")


def covers_summary(readings: Sequence[Reading]) -> str:
    """What the intervals of a line cover, said once: ``requests only: drift not measured``, or the probe's drift
    as a range over the line's pairs of points."""
    found = list(dict.fromkeys(r.covers for r in readings if r.interval is not None and r.covers))
    drifts = [float(m.group(1)) for c in found if (m := _DRIFT.match(c))]
    if found and len(drifts) == len(found) and len(found) > 1:
        return (f"requests and the machine's drift between the points (speed probe "
                f"±{span(min(drifts), max(drifts), '{:.1f}')}%)")  # fmt: skip
    return "; ".join(found)


def crossings(rd: verdict.MatchedReading | None) -> str:
    """``DFlash gives more than AR above ≈211 tok/s/user, less below``; "" without a crossing."""
    if rd is None or not rd.crossings or not rd.curve:
        return ""
    at = ", ".join(f"≈{x:,.0f}" for x in rd.crossings)
    name = rd.text.split(" gives ", 1)[0] if " gives " in rd.text else "the method"
    more, less = ("above", "below") if rd.curve[-1][1] > 1 else ("below", "above")
    return f"{name} gives more than AR {more} {at} tok/s/user, less {less}"


def interactivity(rd: verdict.MatchedReading | None) -> str:
    if rd is None or rd.ratio is None:
        return "matched interactivity: not read"
    if rd.kind != verdict.OVERLAP:  # a bound is no measurement: said below the measured lines
        return "matched interactivity: the curves do not overlap (a bound, below)"
    lo, hi = rd.overlap or (rd.at_tok_per_s_user, rd.at_tok_per_s_user)
    cross = crossings(rd)
    return (f"matched interactivity {span_x(rd.ratio_min, rd.ratio)} over {span(lo, hi, '{:,.1f}')} tok/s/user"
            + (f", {cross}" if cross else "") + " (read off the curves: no interval, decides nothing)")


def method_line(label: str, readings: Sequence[Reading], single: Reading | None, statistic: str | None,
                rd: verdict.MatchedReading | None, blind_at_c1: bool, show_inter: bool) -> str:  # fmt: skip
    parts = []
    if single is not None:
        parts.append(f"single-stream {reading(single)} ({statistic} TPOT at c=1){_sittings(single)}")
    elif blind_at_c1:
        parts.append("single-stream: not measured (per-token timing not observable at c=1)")
    else:
        parts.append("single-stream: not measured (needs both at c=1)")
    past = [r for r in readings if r is not single]
    if past:
        parts.append("matched concurrency " + ", ".join(f"{reading(r)} at c={r.concurrency}{_sittings(r)}" for r in past))
    else:
        parts.append("matched concurrency: no concurrency past c=1 measured for both" if single is not None
                     else "matched concurrency: no concurrency measured for both")  # fmt: skip
    if show_inter:
        parts.append(interactivity(rd))
    covers = covers_summary(readings)
    return f"{label}: " + " · ".join(parts) + (f" · intervals: {covers}" if covers else "")


def matched_line(rd: verdict.MatchedReading) -> str:
    cross = crossings(rd)
    return rd.text + (f"; {cross}" if cross else "") + ". Read off the Pareto curves: no interval, so it decides nothing."


def bound_line(rd: verdict.MatchedReading, points: pd.DataFrame, method: str) -> str:
    """A bound, led by what it is, not by its figure: the curves do not overlap, so it compares two points at
    different loads; the equal-load figures are the matched-concurrency ones."""
    text = rd.text + "."
    if rd.next_sweep:
        text += f" {rd.next_sweep[0].upper()}{rd.next_sweep[1:]}."
    return ("The curves do not overlap, so this is a bound between points at different loads, not a measurement "
            f"(at equal load read matched concurrency): {text}")


def _measured_cs(points: pd.DataFrame) -> list[int]:
    rows = points[points["category"] == "all"] if "category" in points.columns else points
    return sorted({int(c) for c in rows["concurrency"]}) if not rows.empty else []


def _rates(points: pd.DataFrame, method: str, cs: Sequence[int]) -> str:
    rows = points[(points["method"] == method) & (points["concurrency"].isin(cs)) & (points["category"] == "all")]
    rates = pd.to_numeric(rows.get(analysis.INTERACTIVITY), errors="coerce").dropna()
    return f" ({span(rates.min(), rates.max())} tok/s/user)" if not rates.empty else ""


def answer(choices: Mapping[int, verdict.Choice], methods: Sequence[MethodVerdict], points: pd.DataFrame) -> str:
    """What to serve here, per concurrency range, then each method's readings grouped by what they decide."""
    if not choices:
        return "No answer here: AR and a speculative method were never measured at a common concurrency."
    measured = _measured_cs(points)
    groups: list[tuple[verdict.Choice, list[int]]] = []
    for c, choice in sorted(choices.items()):
        if groups and groups[-1][0] == choice:
            groups[-1][1].append(c)
        else:
            groups.append((choice, [c]))
    serve, rest = [], []
    by_method = {m.method: m for m in methods}
    for choice, cs in groups:
        where = concurrencies(cs, measured)
        if choice.basis == noise.FASTER and len(choice.serve) == 1:
            serve.append(f"{method_label(choice.serve[0])} at {where}{_rates(points, choice.serve[0], cs)}")
        elif choice.basis == noise.FASTER:
            names = " or ".join(method_label(m) for m in choice.serve)
            serve.append(f"{names} at {where} (each clearly faster than AR; their own comparison cannot tell them "
                         "apart)")  # fmt: skip
        elif choice.basis == noise.SLOWER:
            serve.append(f"AR at {where} (every method clearly slower)")
        elif choice.basis == noise.UNCLEAR:
            unclear = [method_label(m) for m, mv in by_method.items()
                       if any(r.concurrency in cs and r.decision == noise.UNCLEAR for r in mv.readings)]  # fmt: skip
            rest.append(f"at {where} the run cannot tell {' or '.join(unclear)} from AR")
        else:
            rest.append(f"at {where} nothing is decided (no interval)")
    if serve:
        text = "Serve " + "; ".join(serve).replace(" at ", " here at ", 1) + ("; " + "; ".join(rest) if rest else "") + "."
    else:
        text = "No method can be chosen here: " + "; ".join(rest) + "."
    details = [d for m in methods if (d := method_detail(m, measured))]
    covers = covers_summary([r for m in methods for r in m.readings])
    return " ".join([text, *details] + ([f"Intervals: {covers}."] if covers else []))


def method_detail(m: MethodVerdict, measured: Sequence[int] = ()) -> str:
    """``DFlash vs AR: clearly faster at c=1 (1.22×); not distinguishable at c=2 (1.01×); clearly slower at c=4
    (0.76×).`` A reading without an interval says why, once."""
    if not m.readings:
        return ""
    groups: dict[str, list[Reading]] = {}
    for r in m.readings:
        groups.setdefault(r.decision, []).append(r)
    parts = []
    for decision, rs in groups.items():
        cs = concurrencies([r.concurrency for r in rs], measured or [r.concurrency for r in m.readings])
        xs = ", ".join(fmt_x(r.value) for r in rs)
        if decision == noise.NO_INTERVAL:
            whys = "; ".join(dict.fromkeys(r.why or "none measured" for r in rs))
            parts.append(f"no interval at {cs} ({xs}: {whys}), so nothing decided there")
        else:
            parts.append(f"{WORDS[decision]} at {cs} ({xs})")
    return f"{m.label}: " + "; ".join(parts) + "."


def ttft_lines(df: pd.DataFrame) -> list[str]:
    """Per speculative method: its TTFT p50 against AR's at each concurrency (the mean's ratio where the points
    carry no p50), longer or shorter as decided on the mean TTFT's ratio and its decision interval."""
    if df is None or df.empty:
        return []
    out = []
    for method, g in df.groupby("method", sort=False):
        parts = []
        for r in g.sort_values("concurrency").to_dict("records"):
            said = LONGER.get(r["decision"], "no interval")
            if r["method_p50_s"] == r["method_p50_s"] and r["method_p50_s"] is not None and \
                    r["baseline_p50_s"] == r["baseline_p50_s"] and r["baseline_p50_s"] is not None:  # fmt: skip
                parts.append(f"{_ms(r['method_p50_s'])} vs {_ms(r['baseline_p50_s'])} ms at c={int(r['concurrency'])} ({said})")
            elif r["ratio"] is not None and r["ratio"] == r["ratio"]:
                parts.append(f"mean {fmt_x(r['ratio'])} AR's at c={int(r['concurrency'])} ({said})")
        if not parts:
            continue
        covers = "; ".join(dict.fromkeys(c for c in g["covers"] if isinstance(c, str)))
        out.append(f"Time to first token, {method_label(method)} vs AR (p50): " + ", ".join(parts)
                   + "; longer or shorter as decided on the mean TTFT's ratio and its interval"
                   + (f" ({covers})" if covers else ""))  # fmt: skip
    return out


def _ms(v) -> str:
    return "—" if v is None or v != v else f"{float(v) * 1000:,.1f}"


def slo_lines(within: pd.DataFrame, terms: Sequence) -> list[str]:
    """Each speculative method's best throughput within the SLO as a ratio to AR's, where both are known; the
    percentiles actually read where the points' requests support no higher; and where the SLO bound nothing."""
    if within is None or within.empty or not terms or BASELINE not in set(within["method"]):
        return []  # AR not run here: nothing to read a ratio against
    rows = within.to_dict("records")
    base = next(r for r in rows if r["method"] == BASELINE)
    parts = []
    for rec in rows:
        if rec["method"] == BASELINE:
            continue
        name, ratio = method_label(rec["method"]), rec.get("ratio")
        if ratio is not None and ratio == ratio:
            parts.append(f"{name} {fmt_x(ratio)} AR's best throughput ({name} at c={int(rec['concurrency'])}, AR at "
                         f"c={int(base['concurrency'])})")  # fmt: skip
        else:
            parts.append(f"{name}: {rec.get('note') or 'no ratio'}")
    if base.get("known") is False:
        parts.append(f"AR: {base['note']}")
    if not parts:
        return []
    line = f"Within the SLO ({', '.join(t.label for t in terms)}{_read_lower(rows, terms)}): " + "; ".join(parts)
    if any(r.get("ratio") == r.get("ratio") and r.get("ratio") is not None for r in rows):
        line += "; read, not decided (no interval)"
    tops = sorted({int(r["top_concurrency"]) for r in rows if r.get("top_concurrency") == r.get("top_concurrency")
                   and r.get("top_concurrency") is not None})  # fmt: skip
    if rows and not any(bool(r.get("binds")) for r in rows) and all(r.get("known") is not False for r in rows):
        line += (". The SLO bound no measured point of any method: these are the top concurrencies swept "
                 f"(c={', '.join(map(str, tops))}), not a limit the SLO set; sweep higher to find where it binds")
    return [line]


def _read_lower(rows: list[dict], terms: Sequence) -> str:
    """``; read at TTFT p68, TPOT p68: the most 32 requests per point support (10 beyond a percentile)``."""
    lower: dict[str, tuple[float, int]] = {}
    for r in rows:
        for t in terms:
            q, n = (r.get("read_at") or {}).get(t.text, (t.percentile, None)) if isinstance(r.get("read_at"), dict) \
                else (t.percentile, None)  # fmt: skip
            if q is not None and q != t.percentile:
                lower[t.text] = min(lower.get(t.text, (q, n)), (q, n))
    if not lower:
        return ""
    read = ", ".join(f"{t.metric.upper()} p{lower[t.text][0]:g}" for t in terms if t.text in lower)
    n = min(v[1] for v in lower.values() if v[1] is not None)
    return (f"; read at {read}: the most {n} requests per point support, 10 of them beyond the percentile as "
            "compare gates a tail")


def cost_lines(points: pd.DataFrame, gpu_hour_cost: float | None = None) -> list[str]:
    """Where NVML measured energy: per method, J/token and GPU-seconds per million output tokens at each
    concurrency (and money at ``gpu_hour_cost`` per GPU-hour), beside AR's at the same concurrency."""
    rows = points[points["category"] == "all"] if not points.empty else points
    if rows.empty or "energy_j_per_tok" not in rows.columns:
        return []
    energy = pd.to_numeric(rows["energy_j_per_tok"], errors="coerce")
    gpus = pd.to_numeric(rows.get("num_gpus"), errors="coerce").fillna(0)
    rows = rows[energy.notna() & (gpus > 0)]
    if rows.empty:
        return []
    out = []
    for method in sorted(set(rows["method"]), key=analysis.method_sort_key):
        mine = rows[rows["method"] == method].sort_values("concurrency")
        parts = []
        for r in mine.to_dict("records"):
            gs = gpu_s_per_mtok(r)
            money = f", {money_per_mtok(gs, gpu_hour_cost)}" if gs is not None and gpu_hour_cost else ""
            parts.append(f"{float(r['energy_j_per_tok']):.3g} J/token, {gs:,.0f} GPU·s{money} at c={int(r['concurrency'])}"
                         if gs is not None else f"{float(r['energy_j_per_tok']):.3g} J/token at c={int(r['concurrency'])}")
        out.append(f"Energy and GPU time per million output tokens (NVML), {method_label(method)}: " + "; ".join(parts))
    return out


def gpu_s_per_mtok(point: Mapping) -> float | None:
    """GPU-seconds per million output tokens: 1e6 ÷ throughput per GPU (tokens/s)."""
    tput = analysis.finite_number(point.get("throughput_tok_per_s_per_gpu"))
    return 1e6 / tput if tput else None


def money_per_mtok(gpu_s: float, gpu_hour_cost: float) -> str:
    return f"{gpu_s / 3600 * gpu_hour_cost:,.3g} per million tokens at {gpu_hour_cost:g}/GPU-hour"


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
                return int(n), "--speculative-config num_speculative_tokens"
        if arg in ("--speculative-num-draft-tokens", "--num-speculative-tokens") and value.isdigit():
            return int(value), arg
    return None


def draft_lines(manifests: Sequence[Mapping], points: pd.DataFrame) -> list[str]:
    """``Draft length: DFlash 15 tokens per step (--speculative-config num_speculative_tokens); EAGLE-3 5 (...)``;
    where the launch does not say, the positions the engine reported acceptance for."""
    parts = []
    rows = points[points["category"] == "all"] if not points.empty else points
    for method in sorted(set(rows["method"]) - {BASELINE}, key=analysis.method_sort_key):
        found = next((d for m in manifests if (d := draft_length(m, method))), None)
        if found is None:
            pos = [len(p) for p in rows.loc[rows["method"] == method, "accepted_per_pos_rate"]
                   if isinstance(p, list | tuple) and len(p)] if "accepted_per_pos_rate" in rows.columns else []  # fmt: skip
            found = (max(pos), "positions the engine reported acceptance for") if pos else None
        if found:
            parts.append(f"{method_label(method)} {found[0]} tokens per step ({found[1]})")
    return ["Draft length: " + "; ".join(parts)] if parts else []


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
        hardware = r.get("hardware") or "hardware not stated"
        out.append(f"Published beside measured, {method_label(str(r['method']))} {metric} on {r['task']}: measured "
                   f"{float(r['measured']):.2f}, published {shown} ({r['source']}; {hardware}{note})")  # fmt: skip
    return out


def comparison_rows(settings: Sequence[SettingVerdict]) -> list[list[str]]:
    """Several settings side by side: a header row, then per setting its label, where it was measured and each
    pair's readings with their decision (``c=1 1.22× faster · c=2 1.01× ≈``)."""
    pairs = list(dict.fromkeys(m.label for s in settings for m in [*s.methods, *s.head_to_head]))
    rows = [["setting", "measured on", *pairs]]
    for s in settings:
        by = {m.label: m for m in [*s.methods, *s.head_to_head]}
        cells = [" · ".join(f"c={r.concurrency} {fmt_x(r.value)} {SHORT[r.decision]}" for r in by[p].readings)
                 if p in by and by[p].readings else "—" for p in pairs]  # fmt: skip
        rows.append([s.label, s.hardware, *cells])
    return rows
