"""What the report says about trace replays (``sweep --trace``): the verdict on the traffic, a section with each
method against AR at each speed, how faithfully the schedule was sent, how the content was chosen and how well its
lengths matched, and acceptance on real against random content.

Plain data for the templates; the figures are :mod:`dflashbench.measure.trace_readings`'. Reached from
:func:`dflashbench.report.model.build` through :func:`sections`, :func:`tables` and :func:`verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    fmt_num,
    fmt_tau,
    fmt_text,
)
from dflashbench.workloads.traces import fmt_duration


def _ms(v) -> str:
    return "—" if _missing(v) else f"{float(v):,.1f}"


def _s_ms(v) -> str:
    return "—" if _missing(v) else f"{float(v) * 1e3:,.1f}"


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
            ("TTFT p50 ms", "ttft_s_p50", _s_ms), ("TTFT p99 ms", "ttft_s_p99", _s_ms),
            ("TTFT p99 vs AR", "_ttft_x", fmt_text), ("TPOT p50 ms", "tpot_s_p50", _s_ms),
            ("TPOT p99 ms", "tpot_s_p99", _s_ms), ("TPOT p50 vs AR", "_tpot_x", fmt_text),
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


def acceptance_lines(df: pd.DataFrame) -> list[str]:
    """Per trace and speculative method: tau on the workloads' prompts against tau on random tokens of the same
    lengths (where both ran), and with and without the text past the EOS."""
    out = []
    spec = df[df["method"] != BASELINE] if not df.empty else df
    for (trace, method), g in spec.groupby(["trace", "method"], sort=False) if not spec.empty else []:
        real, rand = g[g["content"] == "workloads"], g[g["content"] == "random"]
        parts = []
        if not real.empty and real["tau"].notna().any():
            parts.append(f"tau {real['tau'].mean():.2f} on real prompts"
                         + (f" ({real['tau_to_eos'].mean():.2f} without the text past the EOS)"
                            if real["tau_to_eos"].notna().any() else ""))  # fmt: skip
        if not rand.empty and rand["tau"].notna().any():
            parts.append(f"{rand['tau'].mean():.2f} on random tokens of the same lengths"
                         + (f" ({rand['tau_to_eos'].mean():.2f} without)" if rand["tau_to_eos"].notna().any() else ""))
        if parts:
            counters = " (the engine's counters over each point)" if (g["tau_source"] == "counters").any() else ""
            out.append(f"{method_label(str(method))} on {trace}: " + " against ".join(parts) + counters)
    return out


def verdict_lines(df: pd.DataFrame) -> list[str]:
    """"On this traffic (azure-code, first 10 min, 2×), DFlash meets the SLO for 97 % of requests against AR's 81 %,
    at 2.10× the goodput [1.8–2.4]" per trace x speed x content x speculative method; without an SLO, TTFT and TPOT
    against AR's."""
    out = []
    for rec in df.to_dict("records") if not df.empty else []:
        if rec["method"] == BASELINE:
            continue
        base = df[(df["method"] == BASELINE) & (df["trace"] == rec["trace"]) & (df["speed"] == rec["speed"])
                  & (df["content"] == rec["content"]) & (df["workload"] == rec["workload"])]  # fmt: skip
        if base.empty:
            continue
        b = base.iloc[0].to_dict()
        where = f"On this traffic ({_traffic(rec)}{', random-token content' if rec['content'] == 'random' else ''}), "
        who = method_label(str(rec["method"]))
        if not _missing(rec.get("good_share")) and not _missing(b.get("good_share")):
            text = (f"{where}{who} meets the SLO ({rec['slo']}) for {_pct(rec['good_share'])} of requests against AR's "
                    f"{_pct(b['good_share'])}")  # fmt: skip
            gx = _x_ci("goodput_x", "goodput_x_lo", "goodput_x_hi")(rec)
            text += f", at {gx} the goodput" if gx != "—" else ""
        else:
            text = (f"{where}{who} has TTFT p99 {_x_ci('ttft_p99_x', 'ttft_p99_x_lo', 'ttft_p99_x_hi')(rec)} and TPOT "
                    f"p50 {_x_ci('tpot_p50_x', 'tpot_p50_x_lo', 'tpot_p50_x_hi')(rec)} AR's (no SLO: --goodput "
                    "ttft_s=…,tpot_s=… reads the share meeting it)")  # fmt: skip
        out.append(text + ".")
    return out


@dataclass
class TraceSection(Section):
    """The report's trace section, holding the verdict's lines on the replayed traffic."""

    verdict: list[str] = field(default_factory=list)


def sections(every: pd.DataFrame, requests: pd.DataFrame, unit: str) -> list[TraceSection]:
    """The trace section, with its verdict lines (none without a trace point): what
    :func:`dflashbench.report.model.build` adds to a report."""
    usable = every[trace_replay_mask(every)] if not every.empty else every
    if "status" in usable.columns:
        usable = usable[usable["status"].fillna("ok") == "ok"]
    if usable.empty:
        return []
    df = trace_readings.trace_table(usable, requests)
    return [TraceSection("trace", "Trace replay",
                         "Production traffic replayed: a public trace's arrival times and lengths (sweep --trace), "
                         "with real prompts chosen for its lengths, so acceptance is that of real text.",
                         tables=[replay_table(df, unit), schedule_table(df),
                                 content_table(usable[usable["category"] == "all"])],
                         verdict=[*verdict_lines(df), *acceptance_lines(df)])]  # fmt: skip


def tables(all_sections: list[Section]) -> list[Table]:
    """The trace section's tables (for the report's headline: the Markdown report shows those)."""
    return [t for s in all_sections if isinstance(s, TraceSection) for t in s.tables]


def verdict(all_sections: list[Section]) -> list[str]:
    """The verdict's lines on replayed traffic."""
    return [line for s in all_sections if isinstance(s, TraceSection) for line in s.verdict]
