"""What the report says about trace replays (``sweep --trace``): the verdict on the traffic, a section with each
method against AR at each speed, how faithfully the schedule was sent, how the content was chosen and how well its
lengths matched, and acceptance on real against random content.

Plain data for the templates; the figures are :mod:`dflashbench.measure.trace_readings`'. Reached from
:func:`dflashbench.report.model.build` through :func:`sections`, :func:`tables` and :func:`verdict`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from dflashbench.measure import readings, trace_readings, verdict
from dflashbench.measure.analysis import BASELINE, method_label, trace_replay_mask
from dflashbench.measure.lossless import lossless_checks
from dflashbench.measure.noise import requests_for_quantile
from dflashbench.measure.trace_readings import RATE_TOLERANCE
from dflashbench.report.answer import _figures, _lossless, _run_term, not_measured
from dflashbench.report.summary import fmt_x
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
    x_iv,
)
from dflashbench.workloads.traces import fmt_duration


def _ms(v) -> str:
    return "—" if _missing(v) else f"{float(v):,.1f}"


def _pct(v) -> str:
    return "—" if _missing(v) else f"{float(v) * 100:.0f} %"


def _speed(v) -> str:
    return "—" if _missing(v) else f"{float(v):g}×"


def _traffic(row: dict) -> str:
    """``azure-code, first 1 min, 2×``: the traffic a row was measured on."""
    window = row.get("window_s")
    span = "whole trace" if _missing(window) else f"first {fmt_duration(float(window))}"
    return f"{row.get('trace')}, {span}, {_speed(row.get('speed'))}"


def _rate(row: dict, asked_word: str = "", flag: str = " ⚠ not kept") -> str:
    """``3.10/s of 3.15`` (achieved of asked), flagged where the schedule was not kept."""
    asked, got = row.get("asked_rate_per_s"), row.get("achieved_rate_per_s")
    if _missing(asked):
        return "—"
    said = f"{'?' if _missing(got) else f'{float(got):.2f}'}/s of {float(asked):.2f}{asked_word}"
    return said + (flag if row.get("kept") is False else "")


def replay_table(df: pd.DataFrame, unit: str) -> Table:
    """Each method at each trace and speed, against AR on the same traffic (``df``: :func:`trace_readings.trace_table`)."""
    recs = df.to_dict("records")
    spec = [*METHOD_SPEC, ("traffic", "_traffic", fmt_text), ("content", "content", fmt_text),
            ("arrivals sent", "_rate", fmt_text), ("requests vs AR", "_lat_x", fmt_text),
            ("within SLO", "good_share", _pct), ("goodput req/s", "goodput_req_per_s", fmt_num),
            ("goodput vs AR", "_goodput_x", fmt_text), (f"tput/{unit}", "throughput_tok_per_s_per_gpu", fmt_num),
            ("TTFT p50 ms", "ttft_s_p50", fmt_ms), ("TTFT p99 ms", "ttft_s_p99", fmt_ms),
            ("TTFT p50 vs AR", "_ttft_x", fmt_text), ("TPOT p50 ms", "tpot_s_p50", fmt_ms),
            ("TPOT p50 vs AR", "_tpot_x", fmt_text), ("τ delivered per step", "_tau", fmt_text),
            ("to EOS", "tau_to_eos", fmt_tau), ("τ, the counters'", "tau_counters", fmt_tau),
            *WHERE_SPEC]  # fmt: skip
    view = pd.DataFrame([{**r, "_traffic": _traffic(r), "_rate": _rate(r),
                          **{f"_{k}": x_iv(r, f"{n}_x") or "—" for k, n in (("lat_x", "latency"), ("goodput_x", "goodput"),
                                                                           ("ttft_x", "ttft_p50"), ("tpot_x", "tpot_p50"))},
                          "_tau": fmt_tau(r.get("tau")) + (" (counters)" if r.get("tau_source") == "counters" else ""),
                          "tau_counters": r.get("tau_counters")}
                         for r in recs])  # fmt: skip
    cols, rows = _rows(view, spec) if recs else ([h for h, _, _ in spec], [])
    slos = sorted({s for s in df["slo"] if isinstance(s, str)}) if not df.empty else []
    slo = (f"Within SLO and goodput: requests meeting every target of --goodput ({'; '.join(slos)}; seconds), read "
           "beside the verdict's reading, not deciding it." if slos
           else "No goodput: the sweep was run without --goodput.")  # fmt: skip
    return Table("Trace replay: each method against AR on the same traffic",
                 "Each request sent at its time in the trace (time running at the speed shown), with the trace's "
                 "output length (ignore_eos where the engine takes it) and a real prompt of about its input length. "
                 "Arrivals sent = the achieved rate ((requests − 1) ÷ the time from the first send to the last) of the "
                 f"rate asked (the trace's own at that speed); more than {RATE_TOLERANCE:.0%} off, the schedule was "
                 "not kept and the verdict does not decide there. \"requests vs AR\" is what the verdict decides on, "
                 "as on a closed loop: the method's requests' time ÷ AR's, on the trace rows both sent, with the noise "
                 f"rule's interval. {slo} Other \"vs AR\": method ÷ AR at the same trace, speed and content, 95% "
                 "interval from a bootstrap over the trace's rows, paired (lower is better for TTFT and TPOT). A p99 "
                 f"shows only over {requests_for_quantile(0.99):,} requests or more (the SLO reading's rule: fewer, it is their "
                 "maximum). τ delivered per step = the output's tokens after the first ÷ the verification steps, from the "
                 "requests; to EOS: through the first end of sequence, leaving out the text generated past it; \"(counters)\": "
                 "the engine's counters where it reports nothing per request. τ, the counters': 1 + accepted ÷ steps "
                 "over the point (the acceptance table's τ), which also counts drafts accepted past a stop or a "
                 "max_tokens cut the user never receives.",
                 cols, rows, "No trace point.")  # fmt: skip


def schedule_table(df: pd.DataFrame) -> Table:
    """How faithfully each point was sent: the rate achieved of the rate asked, and each send's lateness against
    its moment on the trace's clock."""
    spec = [*METHOD_SPEC, ("traffic", "_traffic", fmt_text), ("content", "content", fmt_text),
            ("requests", "requests", fmt_text), ("arrivals sent", "_rate", fmt_text), ("late p50 ms", "late_p50_ms", _ms),
            ("late p99 ms", "late_p99_ms", _ms), ("peak second: requests", "peak_requests", fmt_text),
            ("peak late p50 ms", "peak_late_p50_ms", _ms), ("peak late p99 ms", "peak_late_p99_ms", _ms)]  # fmt: skip
    view = pd.DataFrame([{**r, "_traffic": _traffic(r), "_rate": _rate(r)} for r in df.to_dict("records")])
    cols, rows = _rows(view, spec) if not df.empty else ([h for h, _, _ in spec], [])
    return Table("Trace replay: the schedule as sent",
                 "Lateness = when a request left the client minus its moment on the trace's clock (the point's start "
                 "+ its arrival ÷ the speed; each point, each repeat round and a resumed run start the trace's clock "
                 "anew): the load generator's own accuracy. Arrivals sent: the achieved rate of the rate asked. The "
                 "peak second is the trace's busiest second at that speed.", cols, rows, "No trace point.")  # fmt: skip


def content_table(points: pd.DataFrame) -> Table:
    """How the content was chosen and how well its lengths matched the trace's, per trace x content."""
    rows = []
    for t in trace_readings.contents(points):
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


def _content(rec: dict) -> str:
    """What the replay sent: ``48 synthetic[code] prompts, at 2% of the trace's input lengths``."""
    t = (rec.get("extra") or {}).get("trace") or {}
    pool = ", ".join(f"{n} {name}" for name, n in (t.get("pool") or {}).items()) or "the workloads'"
    scale = t.get("input_scale")
    lengths = (f"at {scale:.0%} of the trace's input lengths" if isinstance(scale, int | float) and scale != 1
               else "at the trace's input lengths")  # fmt: skip
    return f"{pool} prompts {lengths}"


def _random_goodput(g: pd.DataFrame) -> str:
    """``, goodput 0.56× and 0.15× AR's``: on random tokens, each method's (named where several) goodput against AR's at each speed, as the
    answer puts it beside the real prompts' (review 2026-11-29, X10)."""
    rand = g[(g["content"] == "random") & (g["method"] != BASELINE)].sort_values("speed")
    said = {m: " and ".join(fmt_x(v) for v in mg["goodput_x"]) + " AR's" for m, mg in rand.groupby("method", sort=False)
            if mg["goodput_x"].notna().all() and len(mg)}  # fmt: skip
    said = [f"goodput {v}" if len(said) == 1 else f"{method_label(m)}'s goodput {v}" for m, v in said.items()]
    return f", {'; '.join(said)}" if said else ""


def _lengths_words(points: pd.DataFrame, requests: pd.DataFrame) -> str:
    """`` (21% of inputs within 10% of it; median 32 in, 13 out)``: how well the real prompts' lengths matched
    the trace's (its content table's "inputs within 10 %") and the requests' median lengths (review 2026-11-29, X9
    and X13: the verdict read as if the lengths matched)."""
    from dflashbench.measure.analysis import prompt_lengths

    real = points[[((e or {}).get("trace") or {}).get("content") != "random" for e in points["extra"]]]
    within = [w for e in real["extra"] if (w := (((e or {}).get("trace") or {}).get("lengths") or {})
                                              .get("input_within_10pct")) is not None]  # fmt: skip
    found = prompt_lengths(real, requests) if not real.empty else None
    parts = ([f"{min(within):.0%} of inputs within 10% of it"] if within else []) + (
        [f"median {found[1]:,.0f} in, {found[2]:,.0f} out"] if found else [])  # fmt: skip
    return f" ({'; '.join(parts)})" if parts else ""


def _speeds(speeds) -> str:
    return ", ".join(_speed(s) for s in sorted(speeds))


def _answer(choices: dict, rows: dict, table: pd.DataFrame, where: str) -> str:
    """``Serve DFlash on azure-code, first 1 min at 1×, 2× (requests take 0.62× [0.50–0.75] and 0.45× [0.29–0.59] AR's
    time; goodput 1.01× and 1.00× [0.95–1.05] beside it)``."""
    groups: list[tuple[verdict.Choice, list[float]]] = []
    for speed, choice in sorted(choices.items()):
        if groups and groups[-1][0] == choice:
            groups[-1][1].append(speed)
        else:
            groups.append((choice, [speed]))
    parts = []
    for choice, speeds in groups:
        at = (f"on {where} at " if not parts else "at ") + _speeds(speeds)  # the first part names the traffic
        lat = {m: [rows[(m, BASELINE, s, readings.LATENCY)] for s in speeds if (m, BASELINE, s, readings.LATENCY) in rows]
               for m in {m for (m, b, _s, _f) in rows if b == BASELINE}}  # fmt: skip
        if choice.basis == readings.BETTER:
            m = choice.serve[0]
            said = _figures(lat[m], "requests take", " AR's time") if len(choice.serve) == 1 else \
                "each clearly better than AR, neither clearly better than the other"  # fmt: skip
            gp = [r for r in table[(table["method"] == m)].to_dict("records") if float(r["speed"]) in speeds
                  and not _missing(r.get("goodput_x"))] if len(choice.serve) == 1 else []  # fmt: skip
            beside = "; goodput " + " and ".join(x_iv(r, "goodput_x") for r in gp) + " AR's beside it" if gp else ""
            parts.append(f"{' or '.join(method_label(x) for x in choice.serve)} {at} ({said}{beside})")
        elif choice.basis in (readings.WORSE, verdict.NO_GAIN):
            why = "every method clearly worse" if choice.basis == readings.WORSE else "no clear gain"
            figs = "; ".join(_figures(rs, f"{method_label(m)}'s requests take", " AR's time") for m, rs in lat.items() if rs)
            parts.append(f"AR {at} ({why}" + (f": {figs}" if figs else "") + ")")
        else:
            whys = sorted({str(r["why"]) for rs in lat.values() for r in rs if r.get("why")})
            parts.append(f"nothing {at} ({'; '.join(whys) or 'no reading has an interval'})")
    return "Serve " + "; ".join(parts) + "." if parts else ""


def _random_words(rows: dict, speeds) -> str:
    """``DFlash's requests take 2.10× [1.90–2.35] AR's time at 1×, …``: on random tokens, the same reading."""
    out = []
    for m in sorted({m for (m, b, _s, _f) in rows if b == BASELINE}):
        at = [s for s in sorted(speeds) if (m, BASELINE, s, readings.LATENCY) in rows]
        if at:
            rs = [rows[(m, BASELINE, s, readings.LATENCY)] for s in at]
            out.append(_figures(rs, f"{method_label(m)}'s requests take", " AR's time") + f" at {_speeds(at)}")
    return "; ".join(out)


def _legend(g: pd.DataFrame, hardware: str, covers, launch: Sequence[str] = ()) -> str:
    """The last line: what it was measured on, the rates sent of those asked, the lateness, what the intervals
    cover (``launch``: the run-to-run term they hold, as the closed loop's legend says it)."""
    real = g[g["content"] != "random"]
    rates = []
    for speed, sg in real.groupby("speed", sort=True):
        low = sg.sort_values("achieved_rate_per_s", na_position="first").iloc[0].to_dict()
        rates.append(f"{_rate(low, ' asked', '')} at {_speed(speed)}" + (
            f" (more than {RATE_TOLERANCE:.0%} off: not decided)" if low.get("kept") is False else ""))
    late = g["late_p50_ms"].dropna(), g["late_p99_ms"].dropna()  # every point sent, random tokens too (review X11)
    lateness = (f"; each send {late[0].max():,.1f} ms late at the median, {late[1].max():,.1f} ms at p99 (the worst "
                "point), on the trace's clock" if not late[0].empty and not late[1].empty else "")  # fmt: skip
    covered = "; ".join([*dict.fromkeys(str(c) for c in covers if isinstance(c, str)),
                         *(f"widened by {w}" for w in launch)])  # fmt: skip
    return (f"Measured on {hardware}; arrivals sent (slowest method's) {', '.join(rates)}{lateness}; [lo–hi]: "
            "95% intervals, paired by trace row"
            + (f"; {covered}" if covered else "") + ".")


def verdict_lines_of(every: pd.DataFrame, requests: pd.DataFrame, manifests: dict,
                     probes: dict | None = None, terms: dict | None = None, ties: Sequence = (),
                     by_design: dict | None = None) -> list[str]:  # fmt: skip
    """The verdict on replayed traffic (``sweep --trace``), answer first: per trace, what to serve on its real-length
    prompts by the closed loop's own rule (request latency on the rows both methods were sent, paired, goodput beside
    it; a speed whose schedule was not kept is not decided), the points it could not measure, then what the content
    was and how random tokens fared, the lossless check on the same rows, and what it was measured on."""
    from dflashbench.report.summary import hardware_words
    from dflashbench.report.trust import _unmeasured_row

    usable = trace_readings.finished(every)
    failed = every[trace_replay_mask(every) & (every["status"].fillna("ok") != "ok")] \
        if not every.empty and "status" in every.columns else every.iloc[0:0]  # fmt: skip
    if usable.empty:
        lost = [_unmeasured_row(r) for r in failed[failed["category"] == "all"].to_dict("records")]
        return [f"Trace replay: not measured: {not_measured(lost)}."] if lost else []
    pairs = trace_readings.pair_readings(usable, requests, probes, terms)
    df = trace_readings.trace_table(usable, requests, pairs=pairs)
    alls = usable[usable["category"] == "all"]
    out = []
    for trace, g in df.groupby("trace", sort=False):
        where = _traffic(g.iloc[0].to_dict()).rsplit(",", 1)[0]
        mine = pairs[pairs["trace"] == trace]
        real, rand = mine[mine["content"] != "random"], mine[mine["content"] == "random"]
        choices, rows = trace_readings.choose(real)
        head = _answer(choices, rows, g[g["content"] != "random"], where) or f"Serve AR on {where}: no method beside it."
        lost = [_unmeasured_row(r) for r in failed.to_dict("records") if r.get("category") == "all"
                and ((r.get("extra") or {}).get("trace") or {}).get("trace") == trace]  # fmt: skip
        out.append(head + (f" Not measured: {not_measured(lost)}." if lost else ""))
        first = alls[[isinstance(e, dict) and (e.get("trace") or {}).get("trace") == trace for e in alls["extra"]]]
        line = f"Content: {_content(first.iloc[0].to_dict())}{_lengths_words(first, requests)}" if not first.empty \
            else ""  # fmt: skip
        if not rand.empty:
            line += "; on random tokens of the same lengths " + _random_words(trace_readings.choose(rand)[1], set(rand["speed"]))
            line += _random_goodput(g)
        taus = [f"{method_label(m)} τ {mg['tau'].mean():.2f} delivered per step against "
                f"{g.loc[(g['content'] == 'random') & (g['method'] == m), 'tau'].mean():.2f} on random tokens"
                for m, mg in g[(g["content"] != "random") & (g["method"] != BASELINE)].groupby("method", sort=False)
                if mg["tau"].notna().any() and g.loc[(g["content"] == "random") & (g["method"] == m), "tau"].notna().any()]
        out.append(line + (f" ({'; '.join(taus)})" if taus else "") + ".")
        checks = lossless_checks(first, requests, ties, by_design, load=_trace_load)
        if checks:  # the one lossless line (docs/metrics.md, "Lossless"), on the trace rows both were sent
            out.append(_lossless(checks, True)[1].replace("Lossless: ", "Lossless on the same rows: ", 1)
                       .replace("NOT lossless: ", "NOT lossless on the same rows: ", 1))  # fmt: skip
        runs = [manifests[r] for r in dict.fromkeys(first["run_id"].astype(str)) if r in manifests]
        out.append(_legend(g, hardware_words(runs, first), real["covers"], _run_term(real)))
    return out


def _trace_load(rec) -> tuple:
    """A trace point's load for the lossless check: its speed and content (AR's point of the same replay)."""
    t = (rec.get("extra") or {}).get("trace") or {}
    return t.get("speed"), t.get("content")


def sections(every: pd.DataFrame, requests: pd.DataFrame, unit: str, probes: dict | None = None,
             terms: dict | None = None) -> list[Section]:  # fmt: skip
    """The trace section (none without a trace point): what :func:`dflashbench.report.model.build` adds."""
    usable = trace_readings.finished(every)
    if usable.empty:
        return []
    df = trace_readings.trace_table(usable, requests,
                                    pairs=trace_readings.pair_readings(usable, requests, probes, terms))  # fmt: skip
    return [Section("trace", "Trace replay",
                         "Production traffic replayed: a public trace's arrival times and lengths (sweep --trace), "
                         "with prompts chosen for its lengths.",
                         tables=[replay_table(df, unit), schedule_table(df),
                                 content_table(usable[usable["category"] == "all"])])]  # fmt: skip


def tables(all_sections: list[Section]) -> list[Table]:
    """The trace section's tables (for the report's headline: the Markdown report shows those)."""
    return [t for s in all_sections if s.id == "trace" for t in s.tables]
