"""``compare``'s output: the text table and the Markdown summary (a CI job summary), each opening with what the
reader needs first: how the runs' settings differ, trust flags, the gates and the noise they were judged
against, the machine's change; then the table, regressions first, each gated figure with the smallest move that
would have failed it ("fails at"); and the verdict line, which names each regression (a speedup by its methods:
"DFlash vs AR speedup at c=2 fell 28 %") and, on a pass, the moves the gates could have seen."""

from __future__ import annotations

from dflashbench.gate.compare import (
    CANNOT_JUDGE,
    EXIT_CANNOT_JUDGE,
    NA,
    NOISE,
    OK,
    REGRESSION,
    SHOWN,
    TOO_FEW,
    WEAK_FACTOR,
    Comparison,
    Row,
    format_amount,
)
from dflashbench.gate.speedups import SPEEDUP, speedup_label
from dflashbench.measure import noise


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def _fmt_change(row: Row) -> str:
    if row.base is None or row.new is None:
        return "—"
    rel = row.change
    if row.is_speedup:  # a ratio: its relative move says it
        return f"{rel * 100:+.1f}%" if rel is not None else "—"
    return f"{row.new - row.base:+.4g}" + (f" ({rel * 100:+.1f}%)" if rel is not None else "")


def fails_at(row: Row) -> str:
    """The smallest move that would have failed ``row``'s gate: ``-12%`` (a drop), ``+25%`` (a rise), ``-0.31``;
    ``—`` where the row had no test to size it (no threshold, or no requests to test: a cell is never empty, so a
    script that splits the table keeps its columns)."""
    if row.detectable is None or row.threshold is None:
        return "—"
    sign = "-" if row.threshold.direction == "drop" else "+"
    return sign + format_amount(row.threshold, row.detectable)


_ORDER = {REGRESSION: 0, CANNOT_JUDGE: 1, NOISE: 2, OK: 3, TOO_FEW: 4, NA: 5, SHOWN: 6}
HEADER = ["backend", "method", "workload", "category", "conc. or rate", "metric", "BASE", "NEW", "change", "limit",
          "fails at", "verdict"]  # fmt: skip


def _cells(comparison: Comparison) -> list[list[str]]:
    """Regressions first (missing and failed points, then metric regressions), then the rest in key order;
    speedups after the points."""
    rows = [[*map(str, k), "(point)", "ok", "missing", "not in NEW", "must be measured", "—", REGRESSION]
            for k in comparison.only_in_base]  # fmt: skip
    rows += [[*map(str, k), "(point)", "ok", "failed", reason, "must finish", "—", REGRESSION]
             for k, reason in comparison.failed_in_new]  # fmt: skip
    ordered = sorted(comparison.rows, key=lambda r: _ORDER.get(r.verdict, 9))  # stable: key order within
    rows += [[*map(str, r.key), r.metric, _fmt(r.base), _fmt(r.new), _fmt_change(r), r.limit, fails_at(r), r.verdict]
             for r in ordered]  # fmt: skip
    return rows


def _point(key: tuple) -> str:
    """``"dflash synthetic c=4"``: a point's method, workload, category (other than all) and load."""
    where = " ".join(str(v) for v in key[1:3]) + (f" {key[3]}" if str(key[3]) != "all" else "")
    load = str(key[-1])
    return f"{where} {'c=' + load if load.isdigit() else load}"


def _figure(row: Row) -> str:
    """``"DFlash vs AR speedup at c=2"``, ``"throughput_tok_per_s of dflash synthetic c=4"``."""
    if row.is_speedup:
        return speedup_label(row.key)
    return f"{row.metric} of {_point(row.key)}"


def _points_text(keys: list, what: str) -> str:
    """``"2 point(s) missing from NEW (dflash synthetic c=1, dflash synthetic c=2)"``: the first few named."""
    named = ", ".join(_point(k) for k in keys[:MAX_NAMED]) + (", …" if len(keys) > MAX_NAMED else "")
    return f"{len(keys)} point(s) {what} ({named})"


def regression_text(row: Row) -> str:
    """``"DFlash vs AR speedup at c=2 fell 28% (a drop of 12% or more would have failed)"``"""
    rel = row.change
    moved = "fell" if rel is not None and rel < 0 else "rose"
    size = f" {abs(rel) * 100:.0f}%" if rel is not None else ""
    could = f" (a {'drop' if row.threshold.direction == 'drop' else 'rise'} of {format_amount(row.threshold, row.detectable)} " \
            "or more would have failed)" if row.detectable is not None and row.threshold else ""  # fmt: skip
    return f"{_figure(row)} {moved}{size}{could}"


def detectable_summary(comparison: Comparison) -> str:
    """Per gated metric, the range of moves its tests could have seen: ``speedup -9–14%, throughput -20–35%``."""
    parts = []
    for metric in dict.fromkeys(r.metric for r in comparison.rows if r.detectable is not None):
        rows = [r for r in comparison.rows if r.metric == metric and r.detectable is not None]
        sizes = sorted(r.detectable for r in rows)
        t = rows[0].threshold
        sign = "-" if t.direction == "drop" else "+"
        lo, hi = format_amount(t, sizes[0]), format_amount(t, sizes[-1])
        parts.append(f"{metric} {sign}{lo}" + (f" to {sign}{hi}" if hi != lo else ""))
    return "; ".join(parts)


def gates_line(comparison: Comparison) -> str:
    if not comparison.thresholds:
        return "gates: none (--no-default-gates); missing and failed points still fail"
    line = "gates: " + ", ".join(f"{t.metric} {t.describe()}" for t in comparison.thresholds)
    if any(t.metric == SPEEDUP for t in comparison.thresholds):
        line += ("\nspeedup: a method's pooled per-user rate over another's at the same load, in one run (DFlash "
                 "vs AR, EAGLE-3 vs AR, DFlash vs EAGLE-3)")  # fmt: skip
    if comparison.tests:
        from dflashbench.gate.compare_noise import RULE

        line += f"\n{RULE} ({comparison.tests} tests); category 'all' gated, the per-category rows shown"
        level = (f" (p <= {comparison.family_level:.2g}, where {noise.ALPHA:g} / {comparison.tests} would be "
                 "Holm's)") if comparison.family_level else ""  # fmt: skip
        line += ("\nfails at: the smallest move the wrong way that would have failed the gate (past its threshold, "
                 f"and beyond noise at the family's first step{level})")  # fmt: skip
    for text in comparison.drift:
        line += f"\n{text}"
    if comparison.machine is not None:
        line += f"\nmachine: {comparison.machine.text}" + ("" if comparison.machine.changed else ": unchanged")
    return line


def context_lines(comparison: Comparison) -> list[str]:
    """First in the output: how the runs' setting differs (exit 2 with --strict), then the trust flags."""
    flags = [f"trust: {t}" for t in comparison.trust]
    if not comparison.context:
        return flags
    head = "the runs differ in setting" + (" (--strict: exit 2)" if comparison.strict else "")
    return [f"warning: {head}: " + "; ".join(comparison.context), *flags]


MAX_NAMED = 4  # regressions named in the verdict line; the table lists them all


def verdict_line(comparison: Comparison) -> str:
    """One line: how many regressions over how many points and speedups, each named (the first few), or the
    moves the gates could have seen; "cannot judge" where only the machine's change explains the failures."""
    failing = comparison.regressions
    n = len(failing) + len(comparison.failed_in_new) + len(comparison.only_in_base)
    speedups = sum(r.is_speedup for r in comparison.rows)
    over = f"{comparison.common} common point(s)" + (f" and {speedups} speedup(s)" if speedups else "")
    gated = ", ".join(f"{t.metric} {t.describe()}" for t in comparison.thresholds) or "nothing"
    if n:
        named = [_points_text(keys, what) for keys, what in ((comparison.only_in_base, "missing from NEW"),
                                                             ([k for k, _ in comparison.failed_in_new],
                                                              "failed in NEW")) if keys]  # fmt: skip
        named += [regression_text(r) for r in sorted(failing, key=lambda r: not r.is_speedup)[:MAX_NAMED]]
        more = f"; and {len(failing) - MAX_NAMED} more" if len(failing) > MAX_NAMED else ""
        tested = f"; {comparison.pairing}" if comparison.pairing else ""
        return f"{n} regression(s) over {over}: " + "; ".join(named) + more + f"; gated: {gated}{tested}"
    tested = f"; {comparison.pairing}" if comparison.pairing else ""
    if comparison.cannot_judge:
        why = "a run-level shift (every method moved, the probe flat)" if comparison.shift is not None else \
            "the machine's change"  # fmt: skip
        return (f"cannot judge (exit 3): {len(comparison.cannot_judge)} figure(s) past their gate, all explained by "
                f"{why}; over {over}; gated: {gated}{tested}")  # fmt: skip
    could = detectable_summary(comparison)
    if comparison.exit_code == EXIT_CANNOT_JUDGE:  # a weak pass: no failure, and no evidence either
        return (f"weak pass (exit {EXIT_CANNOT_JUDGE}): no regression over {over}, but {len(comparison.weak)} gated "
                f"figure(s) could not have failed on a move of {WEAK_FACTOR:g}x their threshold (--accept-weak "
                f"accepts it); gated: {gated}" + (f"; would have failed at: {could}" if could else "") + tested)  # fmt: skip
    return f"no regression over {over}; gated: {gated}" + (f"; would have failed at: {could}" if could else "") + tested


def format_text(comparison: Comparison) -> str:
    rows = _cells(comparison)
    widths = [max(len(c) for c in col) for col in zip(HEADER, *rows, strict=True)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    out = [verdict_line(comparison), "",  # the answer first; the table after (and the answer again, last)
           *context_lines(comparison), gates_line(comparison), "", line(HEADER), line(["-" * w for w in widths]),
           *map(line, rows), ""]  # fmt: skip
    out += [f"warning: {w}" for w in comparison.warnings]
    out.append(verdict_line(comparison))
    return "\n".join(out)


def format_markdown(comparison: Comparison, report_link: str | None = None) -> str:
    """Opens with the verdict (and a link to the HTML report where one is named), then the gates, warnings
    and the table, regressions first."""
    from dflashbench.report.render import md_escape

    mark = {0: "✅", EXIT_CANNOT_JUDGE: "⚠️"}.get(comparison.exit_code, "❌")
    out = ["### dflashbench compare", "", f"**{mark} {md_escape(verdict_line(comparison))}**", ""]
    if report_link:
        out += [f"Full report: [{md_escape(report_link)}]({report_link.replace(' ', '%20').replace(')', '%29')})", ""]
    out += [f"> {md_escape(c)}" for c in context_lines(comparison)]
    out += ["  \n".join(md_escape(part) for part in gates_line(comparison).splitlines()), ""]  # one line each
    out += [f"> warning: {md_escape(w)}" for w in comparison.warnings]
    out += ["", "| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    out += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in _cells(comparison)]
    return "\n".join(out) + "\n"



COMPARISON_SCHEMA, COMPARISON_VERSION = "dflashbench.comparison", 1


def comparison_document(comparison: Comparison) -> dict:
    """The comparison as data (docs/readings.md, "compare --format json"): the exit code and verdict line, every row
    (its key, figure, both values, the move, the gate, "fails at", the verdict), what the tests were paired on, the
    run-to-run term and drift each run was judged with, a run-level shift, the warnings and trust flags."""
    import math

    def num(v):
        return v if isinstance(v, (int, float)) and math.isfinite(v) else None

    rows = [{"backend": str(r.key[0]), "subject": str(r.key[1]), "workload": str(r.key[2]), "category": str(r.key[3]),
             "load": str(r.key[-1]), "metric": r.metric, "base": num(r.base), "new": num(r.new), "change": num(r.change),
             "gate": r.limit or None, "fails_at": num(r.detectable), "verdict": r.verdict or "shown"}
            for r in comparison.rows]  # fmt: skip
    rows += [{"backend": str(k[0]), "subject": str(k[1]), "workload": str(k[2]), "category": str(k[3]),
              "load": str(k[-1]), "metric": "(point)", "verdict": REGRESSION, "gate": "must be measured",
              "why": "missing from NEW"} for k in comparison.only_in_base]  # fmt: skip
    rows += [{"backend": str(k[0]), "subject": str(k[1]), "workload": str(k[2]), "category": str(k[3]),
              "load": str(k[-1]), "metric": "(point)", "verdict": REGRESSION, "gate": "must finish", "why": why}
             for k, why in comparison.failed_in_new]  # fmt: skip
    shift = comparison.shift
    return {"schema": COMPARISON_SCHEMA, "version": COMPARISON_VERSION, "exit_code": comparison.exit_code,
            "verdict": verdict_line(comparison), "tests": comparison.tests, "family_level": comparison.family_level,
            "paired": comparison.pairing or None,
            "noise": list(comparison.drift),
            "machine": comparison.machine.text if comparison.machine is not None else None,
            "run_level_shift": None if shift is None else {"log_move": shift.log_move, "by_method": dict(
                shift.by_method), "own": list(shift.own), "text": shift.text},
            "rows": rows, "warnings": list(comparison.warnings), "trust": list(comparison.trust),
            "context": list(comparison.context)}  # fmt: skip


def format_json(comparison: Comparison) -> str:
    import json

    return json.dumps(comparison_document(comparison), indent=1, ensure_ascii=False)
