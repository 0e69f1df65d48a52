"""What the report says about trace replays (``sweep --trace``): the verdict on the traffic, a section with each
method against AR at each speed, how faithfully the schedule was sent, how the content was chosen and how well its
lengths matched, and acceptance on real against random content.

Plain data for the templates; the figures are :mod:`dflashbench.measure.trace_readings`'. Reached from
:func:`dflashbench.report.model.build` through :func:`sections`, :func:`tables` and :func:`verdict`.
"""

from __future__ import annotations

import pandas as pd

from dflashbench.measure import trace_readings
from dflashbench.measure.analysis import BASELINE, method_label, trace_replay_mask
from dflashbench.report.tables import (
    METHOD_SPEC,
    WHERE_SPEC,
    Section,
    Table,
    _missing,
    _rows,
    fmt_ms,
    fmt_num,
    fmt_tau,
    fmt_text,
)
from dflashbench.workloads.traces import fmt_duration


def _ms(v) -> str:
    return "—" if _missing(v) else f"{float(v):,.1f}"


def _pct(v) -> str:
    return "—" if _missing(v) else f"{float(v) * 100:.0f} %"


def _speed(v) -> str:
    return "—" if _missing(v) else f"{float(v):g}×"


def _x_ci(value: str, lo: str, hi: str):
    def cell(row) -> str:
        v, a, b = row.get(value), row.get(lo), row.get(hi)
        if _missing(v):
            return "—"
        return f"{float(v):.2f}×" + ("" if _missing(a) or _missing(b) else f" [{float(a):.2f}–{float(b):.2f}]")
    return cell


def _traffic(row: dict) -> str:
    """``azure-code, first 1 min, 2×``: the traffic a row was measured on."""
    window = row.get("window_s")
    span = "whole trace" if _missing(window) else f"first {fmt_duration(float(window))}"
    return f"{row.get('trace')}, {span}, {_speed(row.get('speed'))}"


def replay_table(df: pd.DataFrame, unit: str) -> Table:
    """Each method at each trace and speed, against AR on the same traffic (``df``: :func:`trace_readings.trace_table`)."""
    recs = df.to_dict("records")
    spec = [*METHOD_SPEC, ("traffic", "_traffic", fmt_text), ("content", "content", fmt_text),
            ("within SLO", "good_share", _pct), ("goodput req/s", "goodput_req_per_s", fmt_num),
            ("goodput vs AR", "_goodput_x", fmt_text), (f"tput/{unit}", "throughput_tok_per_s_per_gpu", fmt_num),
            ("TTFT p50 ms", "ttft_s_p50", fmt_ms), ("TTFT p99 ms", "ttft_s_p99", fmt_ms),
            ("TTFT p99 vs AR", "_ttft_x", fmt_text), ("TPOT p50 ms", "tpot_s_p50", fmt_ms),
            ("TPOT p99 ms", "tpot_s_p99", fmt_ms), ("TPOT p50 vs AR", "_tpot_x", fmt_text),
            ("tau", "_tau", fmt_text), ("tau to EOS", "tau_to_eos", fmt_tau), *WHERE_SPEC]  # fmt: skip
    view = pd.DataFrame([{**r, "_traffic": _traffic(r),
                          "_goodput_x": _x_ci("goodput_x", "goodput_x_lo", "goodput_x_hi")(r),
                          "_ttft_x": _x_ci("ttft_p99_x", "ttft_p99_x_lo", "ttft_p99_x_hi")(r),
                          "_tpot_x": _x_ci("tpot_p50_x", "tpot_p50_x_lo", "tpot_p50_x_hi")(r),
                          "_tau": fmt_tau(r.get("tau")) + (" (counters)" if r.get("tau_source") == "counters" else "")}
                         for r in recs])  # fmt: skip
    cols, rows = _rows(view, spec) if recs else ([h for h, _, _ in spec], [])
    slos = sorted({s for s in df["slo"] if isinstance(s, str)}) if not df.empty else []
    slo = (f"Within SLO and goodput: requests meeting every target of --goodput ({'; '.join(slos)}; seconds)." if slos
           else "No goodput: the sweep was run without --goodput.")  # fmt: skip
    return Table("Trace replay: each method against AR on the same traffic",
                 "Each request sent at its time in the trace (time running at the speed shown), with the trace's "
                 "output length (ignore_eos where the engine takes it) and a real prompt of about its input length. "
                 f"{slo} \"vs AR\": method ÷ AR at the same trace, speed and content, with its 95% interval from a "
                 "bootstrap over the trace's requests paired by row (lower is better for TTFT and TPOT). tau = "
                 "tokens committed per verification step; to EOS: through the first end of sequence, leaving out "
                 "the text generated past it; \"(counters)\": the engine's own counters over the point, where it "
                 "reports nothing per request (they also count drafts accepted past a max_tokens cut).", cols, rows,
                 "No trace point.")  # fmt: skip


def schedule_table(df: pd.DataFrame) -> Table:
    """How faithfully each point was sent: each send's lateness against its place in the trace."""
    spec = [*METHOD_SPEC, ("traffic", "_traffic", fmt_text), ("content", "content", fmt_text),
            ("requests", "requests", fmt_text), ("late p50 ms", "late_p50_ms", _ms), ("late p99 ms", "late_p99_ms", _ms),
            ("peak second: requests", "peak_requests", fmt_text), ("peak late p50 ms", "peak_late_p50_ms", _ms),
            ("peak late p99 ms", "peak_late_p99_ms", _ms)]  # fmt: skip
    view = pd.DataFrame([{**r, "_traffic": _traffic(r)} for r in df.to_dict("records")])
    cols, rows = _rows(view, spec) if not df.empty else ([h for h, _, _ in spec], [])
    return Table("Trace replay: the schedule as sent",
                 "Lateness = when a request left the client minus its time in the trace (at the point's speed): "
                 "the load generator's own accuracy. The peak second is the trace's busiest second at that speed.",
                 cols, rows, "No trace point.")  # fmt: skip


def content_table(points: pd.DataFrame) -> Table:
    """How the content was chosen and how well its lengths matched the trace's, per trace x content."""
    seen: dict = {}
    for rec in points.to_dict("records"):
        t = rec["extra"]["trace"]
        key = (t.get("trace"), t.get("window_s"), t.get("content"))
        lengths = t.get("lengths") or {}
        if key in seen and not lengths.get("input_counted"):
            continue
        seen[key] = {**t, **{f"_{k}": v for k, v in lengths.items()}}
    rows = []
    for t in seen.values():
        pool = ", ".join(f"{k} ({v})" for k, v in (t.get("pool") or {}).items()) if t.get("content") != "random" \
            else "random tokens of the same lengths"  # fmt: skip
        blocks = t.get("prefix_blocks") or {}
        fill = t.get("fill") or "none"
        if blocks:
            fill += f": {blocks.get('sent', 0):,} blocks of {blocks.get('block_tokens')} tokens, {blocks.get('shared', 0):,} shared"
        rows.append([fmt_text(t.get("trace")), fmt_text(t.get("content")), pool,
                     f"{t.get('sent')} of {t.get('rows')}", f"{t.get('skipped', 0)} skipped; {t.get('clipped_input', 0)} "
                     f"inputs, {t.get('clipped_output', 0)} outputs clipped (context {t.get('context_tokens') or '?'})",
                     f"input × {t.get('input_scale'):g}, output × {t.get('output_scale'):g}",
                     f"{fmt_num(t.get('_input_target_p50'), 0)} → {fmt_num(t.get('_input_sent_p50'), 0)}",
                     f"{fmt_num(t.get('_input_target_p10'), 0)}–{fmt_num(t.get('_input_target_p90'), 0)} → "
                     f"{fmt_num(t.get('_input_sent_p10'), 0)}–{fmt_num(t.get('_input_sent_p90'), 0)}",
                     _pct(t.get("_input_within_10pct")), _pct(t.get("_output_as_asked")), fill,
                     "on" if t.get("ignore_eos") else "off"])  # fmt: skip
    cols = ["trace", "content", "prompts from", "requests sent", "over the context", "length scale",
            "input p50 trace → sent", "input p10–p90 trace → sent", "inputs within 10 %", "outputs as long as asked",
            "fill", "ignore_eos"]
    return Table("Trace replay: content and lengths",
                 "Every trace request got the pool prompt nearest its input length (its trace length times the scale, "
                 "clipped to the model's context), drawn among the 4 nearest with the suite's seed; lengths counted "
                 "with the target's tokenizer, sent = the server's prompt_tokens. Fill \"context\" puts real text cut "
                 "from the pool before a short prompt, the same text wherever the trace's prefix blocks repeat; "
                 "without it a prompt is as long as it is. The traces carry no text (their publishers' privacy "
                 "rules).", cols, rows, "No trace point.")  # fmt: skip


def _x(rec: dict, name: str) -> str:
    return _x_ci(name, f"{name}_lo", f"{name}_hi")(rec)


def _content(rec: dict) -> str:
    """What the replay sent: ``48 synthetic[code] prompts, at 2% of the trace's input lengths``."""
    t = (rec.get("extra") or {}).get("trace") or {}
    pool = ", ".join(f"{n} {name}" for name, n in (t.get("pool") or {}).items()) or "the workloads'"
    scale = t.get("input_scale")
    lengths = (f"at {scale:.0%} of the trace's input lengths" if isinstance(scale, int | float) and scale != 1
               else "at the trace's input lengths")  # fmt: skip
    return f"{pool} prompts {lengths}"


def _gain(rec: dict) -> str:
    """A method against AR on one replay, oriented: better, worse or same, on goodput where an SLO was given, else
    on TTFT p99 and TPOT p50 (lower is better)."""
    if not _missing(rec.get("goodput_x")):
        lo, hi = rec.get("goodput_x_lo"), rec.get("goodput_x_hi")
        if _missing(lo) or _missing(hi):
            return "same" if abs(float(rec["goodput_x"]) - 1) < 1e-9 else "undecided"
        return "better" if lo > 1 else "worse" if hi < 1 else "same"
    lower = [name for name in ("ttft_p99_x", "tpot_p50_x") if not _missing(rec.get(f"{name}_hi")) and rec[f"{name}_hi"] < 1]
    higher = [name for name in ("ttft_p99_x", "tpot_p50_x") if not _missing(rec.get(f"{name}_lo")) and rec[f"{name}_lo"] > 1]
    return "better" if lower and not higher else "worse" if higher and not lower else "same"


def _said(rec: dict) -> str:
    """``goodput 1.00× [0.95–1.05]`` at one speed, or why no interval."""
    if not _missing(rec.get("goodput_x")):
        if _missing(rec.get("goodput_x_lo")):
            return (f"at {_speed(rec.get('speed'))} goodput {float(rec['goodput_x']):.2f}×, no interval (on each side "
                    "every request met the SLO, or none did)")
        return f"goodput {_x(rec, 'goodput_x')} at {_speed(rec.get('speed'))}"
    return f"TTFT p99 {_x(rec, 'ttft_p99_x')}, TPOT p50 {_x(rec, 'tpot_p50_x')} at {_speed(rec.get('speed'))}"


def verdict_lines_of(every: pd.DataFrame, requests: pd.DataFrame, manifests: dict) -> list[str]:
    """The verdict on replayed traffic (``sweep --trace``), answer first: per trace, what to serve on its real-length
    prompts (goodput against AR's on the same rows, paired), then what the content was and how random tokens fared,
    the lossless check on the same rows, and what it was measured on."""
    from dflashbench.measure.quality import agreement, outputs_by_point
    from dflashbench.report.summary import hardware_words

    usable = _usable_trace_points(every)
    if usable.empty:
        return []
    df = trace_readings.trace_table(usable, requests)
    alls = usable[usable["category"] == "all"]
    out = []
    for trace, g in df.groupby("trace", sort=False):
        real, rand = g[(g["content"] != "random") & (g["method"] != BASELINE)], g[(g["content"] == "random") & (g["method"] != BASELINE)]
        where = _traffic(g.iloc[0].to_dict()).rsplit(",", 1)[0]
        gains = {m: [(_gain(r), r) for r in mg.to_dict("records")] for m, mg in real.groupby("method", sort=False)}
        serve = [m for m, rs in gains.items() if rs and all(k == "better" for k, _ in rs)]
        said = "; ".join(f"{method_label(m)} " + ", ".join(_said(r) for _, r in rs) for m, rs in gains.items())
        head = (f"Serve {' or '.join(method_label(m) for m in serve)}" if serve else "Serve AR") + f" on {where} "
        out.append(head + f"at {', '.join(sorted({_speed(s) for s in real['speed']}))} ({said}).")
        first = alls[[isinstance(e, dict) and (e.get("trace") or {}).get("trace") == trace for e in alls["extra"]]]
        line = f"Content: {_content(first.iloc[0].to_dict())}" if not first.empty else ""
        if not rand.empty:
            line += ("; on random tokens of the same lengths " + "; ".join(f"{method_label(m)} " + ", ".join(
                _said(r) for r in mg.to_dict("records")) for m, mg in rand.groupby("method", sort=False)))  # fmt: skip
        taus = [f"{method_label(m)} τ {mg['tau'].mean():.2f} on the prompts against "
                f"{rand.loc[rand['method'] == m, 'tau'].mean():.2f} on random tokens"
                for m, mg in real.groupby("method", sort=False) if mg["tau"].notna().any() and not rand.empty
                and rand.loc[rand["method"] == m, "tau"].notna().any()]  # fmt: skip
        out.append(line + (f" ({'; '.join(taus)})" if taus else "") + ".")
        pairs = _lossless_pairs(first, outputs_by_point(first, requests))
        if pairs:
            found = {m: agreement(p) for m, p in pairs.items()}
            out.append("Lossless on the same rows: " + "; ".join(
                f"{method_label(m)} {'identical to' if a.exact == a.compared else 'NOT identical to'} AR on "
                f"{a.exact}/{a.compared} requests" for m, a in found.items()) + " (greedy, full text).")  # fmt: skip
        runs = [manifests[r] for r in dict.fromkeys(first["run_id"].astype(str)) if r in manifests]
        out.append(f"Measured on {hardware_words(runs, first)}; intervals: a bootstrap over the trace's rows, paired.")
    return out


def _lossless_pairs(points: pd.DataFrame, outputs: dict) -> dict:
    """method -> (AR's output, the method's) over the same trace rows, at every speed and content both replayed."""
    from dflashbench.measure.quality import pair_outputs

    by_load: dict = {}
    for rec in points.to_dict("records"):
        t = rec["extra"]["trace"]
        by_load.setdefault((t.get("speed"), t.get("content")), {})[rec["method"]] = rec
    out: dict = {}
    for by_method in by_load.values():
        base = by_method.get(BASELINE)
        for m, rec in by_method.items():
            if base is None or m == BASELINE:
                continue
            records = [outputs.get((str(p["run_id"]), str(p["point_id"])), []) for p in (base, rec)]
            out.setdefault(m, []).extend(pair_outputs(*records))
    return {m: p for m, p in out.items() if p}


def _usable_trace_points(every: pd.DataFrame) -> pd.DataFrame:
    """The trace replay's points that finished (status ok)."""
    usable = every[trace_replay_mask(every)] if not every.empty else every
    if "status" in usable.columns:
        usable = usable[usable["status"].fillna("ok") == "ok"]
    return usable


def sections(every: pd.DataFrame, requests: pd.DataFrame, unit: str) -> list[Section]:
    """The trace section (none without a trace point): what :func:`dflashbench.report.model.build` adds."""
    usable = _usable_trace_points(every)
    if usable.empty:
        return []
    df = trace_readings.trace_table(usable, requests)
    return [Section("trace", "Trace replay",
                         "Production traffic replayed: a public trace's arrival times and lengths (sweep --trace), "
                         "with prompts chosen for its lengths.",
                         tables=[replay_table(df, unit), schedule_table(df),
                                 content_table(usable[usable["category"] == "all"])])]  # fmt: skip


def tables(all_sections: list[Section]) -> list[Table]:
    """The trace section's tables (for the report's headline: the Markdown report shows those)."""
    return [t for s in all_sections if s.id == "trace" for t in s.tables]
