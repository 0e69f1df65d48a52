"""What the report says about load shape: the open-loop points (``sweep --request-rate``) in their own table,
and a warning where the client itself may have set the pace (``extra["client"]``).

An open-loop point sends requests at scheduled arrival times whatever the server's pace (like ``vllm bench
serve --request-rate``), so it answers "at this traffic, how fast and how many requests within the SLO",
which is compared method against AR at the same rate, never on the concurrency ladder.
"""

from __future__ import annotations

import pandas as pd

from dflashbench import analysis
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


def _achieved(v) -> str:
    return "—" if v is None or v != v else f"{float(v):.2f}/s"


def open_loop_table(df: pd.DataFrame, unit: str = "GPU") -> Table:
    """``df`` from :func:`analysis.open_loop_speedups` (category shares of mixed runs already left out)."""
    slos = sorted({s for s in df["slo"] if isinstance(s, str)}) if not df.empty else []
    cols, rows = _rows(df, [*CATEGORY_SPEC, *METHOD_SPEC, ("target rate", "request_rate", _rate),
                            ("achieved rate", "achieved_rate_per_s", _achieved),
                            ("goodput req/s", "goodput_req_per_s", fmt_num), ("goodput vs AR", "goodput_speedup", fmt_x),
                            (f"tput/{unit}", "throughput_tok_per_s_per_gpu", fmt_num),
                            ("tput vs AR", "throughput_speedup", fmt_x), ("within SLO", "good_share", fmt_pct),
                            ("TTFT p50 ms", "ttft_s_p50", fmt_ms), ("TTFT p99 ms", "ttft_s_p99", fmt_ms),
                            ("TPOT p50 ms", "tpot_s_p50", fmt_ms), ("max in flight", "max_concurrency", fmt_text),
                            *WHERE_SPEC])  # fmt: skip
    slo = (f" Goodput = requests meeting every target of the sweep's --goodput SLO ({'; '.join(slos)}; seconds) per "
           "second of the point, as vllm bench serve --goodput counts it." if slos
           else " No goodput: the sweep was run without --goodput.")  # fmt: skip
    return Table("Open-loop points",
                 "Requests sent at scheduled arrival times (sweep --request-rate), whatever the server's pace; "
                 "each method against AR at the same target rate (\"vs AR\": method ÷ AR). Achieved rate = "
                 "(arrivals − 1) ÷ the time from the first to the last." + slo + " These points stay out of the "
                 "concurrency-based speedups, the Pareto frontier and the SLO reading above.",
                 cols, rows, "No open-loop point.")  # fmt: skip


def client_warnings(points: pd.DataFrame) -> list[str]:
    """One warning naming the points (category "all") whose client was busy enough to set the pace itself
    (:func:`dflashbench.loadgen_procs.client_note`: a process busy ≥ 90% of the point, or event-loop lag p99
    above half the ITL p50), with the first such point's reason."""
    from dflashbench.loadgen_procs import client_note

    if points.empty or "extra" not in points.columns:
        return []
    flagged = []
    for rec in points[points["category"] == "all"].to_dict("records"):
        client = (rec.get("extra") or {}).get("client") if isinstance(rec.get("extra"), dict) else None
        note = client_note(client, analysis.finite_number(rec.get("itl_s_p50")))
        if note:
            load = analysis.load_label(rec.get("concurrency"), rec.get("extra"))
            where = f"{analysis.method_label(str(rec['method']))} {rec['workload']} " + (
                load if analysis.request_rate(rec.get("extra")) is not None else f"c={load}")
            flagged.append((where, note))
    if not flagged:
        return []
    names = ", ".join(w for w, _ in flagged[:MAX_NAMED]) + (f" and {len(flagged) - MAX_NAMED} more"
                                                             if len(flagged) > MAX_NAMED else "")  # fmt: skip
    return [f"Client overhead at {len(flagged)} point(s) ({names}): the client may have set the pace itself; "
            f"first: {flagged[0][1]}."]
