"""What the report says about load shape: the open-loop points (``sweep --request-rate``) in their own table,
and a warning where the client itself may have set the pace (``extra["client"]``).

An open-loop point sends requests at scheduled arrival times whatever the server's pace (like ``vllm bench
serve --request-rate``), so it answers "at this traffic, how fast and how many requests within the SLO",
which is compared method against AR at the same rate, never on the concurrency ladder.
"""

from __future__ import annotations

import pandas as pd

from dflashbench.measure import analysis
from dflashbench.measure.trace_readings import RATE_TOLERANCE, schedule_kept
from dflashbench.report.tables import (
    CATEGORY_SPEC,
    METHOD_SPEC,
    WHERE_SPEC,
    Table,
    _rows,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_text,
    fmt_x,
)

MAX_NAMED = 6  # points named in the client-overhead warning before "and N more"


def _rate(v) -> str:
    return "—" if v is None or v != v else f"{float(v):g}/s"


def _achieved(row) -> str:
    """The achieved rate, flagged where it is more than 5 % short of the target (the schedule was not kept)."""
    v = row.get("achieved_rate_per_s")
    if v is None or v != v:
        return "—"
    kept = schedule_kept(analysis.finite_number(row.get("request_rate")), float(v), over=False)
    return f"{float(v):.2f}/s" + (" ⚠ not kept" if kept is False else "")


def open_loop_table(df: pd.DataFrame, unit: str = "GPU") -> Table:
    """``df`` from :func:`analysis.open_loop_speedups` (category shares of mixed runs already left out)."""
    slos = sorted({s for s in df["slo"] if isinstance(s, str)}) if not df.empty else []
    view = df.assign(_achieved=[_achieved(r) for r in df.to_dict("records")]) if not df.empty else df
    cols, rows = _rows(view, [*CATEGORY_SPEC, *METHOD_SPEC, ("target rate", "request_rate", _rate),
                              ("achieved rate", "_achieved", fmt_text),
                            ("goodput req/s", "goodput_req_per_s", fmt_num), ("goodput vs AR", "goodput_speedup", fmt_x),
                            (f"tput/{unit}", "throughput_tok_per_s_per_gpu", fmt_num),
                            ("tput vs AR", "throughput_speedup", fmt_x), ("within SLO", "good_share", fmt_pct),
                            ("TTFT p50 ms", "ttft_s_p50", fmt_ms), ("TTFT p99 ms", "ttft_s_p99", fmt_ms),
                            ("TPOT p50 ms", "tpot_s_p50", fmt_ms), ("max in flight", "max_concurrency", fmt_text),
                            *WHERE_SPEC])  # fmt: skip
    slo = (f" Goodput = requests meeting every target of the sweep's --goodput SLO ({'; '.join(slos)}; seconds) per "
           "second of the point, as vllm bench serve --goodput counts it (with repeats: the mean over them)." if slos
           else " No goodput: the sweep was run without --goodput.")  # fmt: skip
    return Table("Open-loop points",
                 "Requests sent at scheduled arrival times (sweep --request-rate), whatever the server's pace; "
                 "each method against AR at the same target rate (\"vs AR\": method ÷ AR). Achieved rate = "
                 f"(arrivals − 1) ÷ the time from the first to the last; more than {RATE_TOLERANCE:.0%} short of the "
                 "target (\"not kept\"), the point did not carry the traffic asked (a Poisson schedule's own rate "
                 "is the target's on average only: above it by chance)." + slo + " These points stay out of the "
                 "concurrency-based speedups, the Pareto frontier and the SLO reading above.",
                 cols, rows, "No open-loop point.")  # fmt: skip


def client_findings(points: pd.DataFrame) -> tuple[list[str], list[str]]:
    """What the client's own cost says about the timings (:func:`dflashbench.measure.client_load.client_problem`),
    per point (category "all"): a warning naming the points whose client may have set the pace itself (busy
    >= 90%, or a busy process's event loop lagging over half the gap between chunks), and a note naming those whose loop
    lagged while the client was nearly idle (a shared CPU: scheduling noise, not client overhead)."""
    from dflashbench.measure.client_load import client_problem

    if points.empty or "extra" not in points.columns:
        return [], []
    found: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
    for rec in points[points["category"] == "all"].to_dict("records"):
        client = (rec.get("extra") or {}).get("client") if isinstance(rec.get("extra"), dict) else None
        gap = analysis.finite_number(rec.get("icl_s_p50")) or analysis.finite_number(rec.get("itl_s_p50"))
        problem = client_problem(client, gap)  # the gap between chunks the client timestamps
        if problem:
            found[problem[0]].append((point_where(rec), problem[1]))
    lead = {True: "Client overhead at {n} point(s) ({names}): the client may have set the pace itself; first: {why}.",
            False: "Timing noise at {n} point(s) ({names}): {why}."}  # fmt: skip
    said = {kind: [lead[kind].format(n=len(rows), names=_names([w for w, _ in rows]), why=rows[0][1])] if rows else []
            for kind, rows in found.items()}  # fmt: skip
    return said[True], said[False]


def point_where(rec: dict) -> str:
    """A point as notes name it: ``DFlash gsm8k c=4`` or ``AR gsm8k 2/s``."""
    load = analysis.load_label(rec.get("concurrency"), rec.get("extra"))
    return f"{analysis.method_label(str(rec['method']))} {rec['workload']} " + (
        load if analysis.request_rate(rec.get("extra")) is not None else f"c={load}")


def point_notes(points: pd.DataFrame) -> list[str]:
    """Each point's own notes (``extra["notes"]``: a counter reset that left tau unmeasured, counters that could
    not be read), one line per point, so the report says why its tau cell is empty."""
    if points.empty or "extra" not in points.columns:
        return []
    out = []
    for rec in points[points["category"] == "all"].to_dict("records"):
        notes = (rec.get("extra") or {}).get("notes") if isinstance(rec.get("extra"), dict) else None
        if notes:
            repeat = analysis.finite_number(rec.get("repeat"))
            where = point_where(rec) + (f" (round {int(repeat) + 1})" if repeat else "")
            out.append(f"{where}: {'; '.join(map(str, notes))}")
    return out


def _names(where: list[str]) -> str:
    return ", ".join(where[:MAX_NAMED]) + (f" and {len(where) - MAX_NAMED} more" if len(where) > MAX_NAMED else "")

