"""``history``'s output: the Markdown summary (for ``$GITHUB_STEP_SUMMARY`` and a pull request comment) and the
text beside it, both leading with the changes found; and the self-contained HTML page, one small plot per series
with its changes marked and each run one click away.

The Markdown goes through :func:`dflashbench.report.render.md_escape` cell by cell; the HTML through Jinja2 with
autoescape (``history.html.j2``), plots as PNG ``data:`` URIs, no script, the report's Content-Security-Policy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dflashbench.gate.history import MACHINE, REGRESSION, Finding, History, Series
from dflashbench.gate.history_read import RunSummary
from dflashbench.measure import changepoints as cp


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def _p(p: float) -> str:
    return f"p < {1 / cp.N_PERMS:.0e}".replace("e-0", "e-") if p <= 1.5 / cp.N_PERMS else f"p = {p:.2g}"


def _run_name(series: Series, i: int) -> str:
    run = series.runs[i]
    return f"run {i + 1} ({run.run_id})"


def change_words(series: Series, finding: Finding) -> str:
    """``DFlash vs AR speedup at c=1 fell 17% [11%–23%] (3.2 -> 2.6 x) from run 8 (demo-...; first run in runs
    8–8), p < 1e-4; engine ..., commit ..., drafter ...``"""
    c = finding.change
    lo, hi = c.ratio_ci
    way = "fell" if c.log_move < 0 else "rose"
    shares = sorted(abs(math.expm1(math.log(v))) * 100 for v in (lo, hi))
    size = f"{abs(math.expm1(c.log_move)) * 100:.0f}% [{shares[0]:.0f}%–{shares[1]:.0f}%]"
    where = f"runs {c.lo + 1}–{c.hi + 1}" if c.hi > c.lo else f"run {c.lo + 1}"
    first = series.runs[c.index]
    what = [f"engine {first.marks.get('engine')}", f"dflashbench {first.marks.get('dflashbench')}",
            f"drafter {first.marks.get('drafters')}"]  # fmt: skip
    if first.marks.get("commit"):
        what.insert(0, f"commit {str(first.marks['commit'])[:12]}" + (f" ({first.marks['ref']})" if first.marks.get("ref") else ""))
    machine = f"; {finding.machine}" if finding.machine else ""
    return (f"{series.label} {way} {size} ({_fmt(finding.before)} → {_fmt(finding.after)} {series.unit}".rstrip()
            + f") from {_run_name(series, c.index)} (first run within {where}), {_p(c.p)}; "
            + ", ".join(what) + machine)


def trend_words(series: Series) -> str:
    t = series.fit.trend
    lo, hi = math.expm1(t.slope - 1.959964 * t.slope_sd), math.expm1(t.slope + 1.959964 * t.slope_sd)
    return (f"{series.label} drifts {t.per_run * 100:+.1f}% per run [{lo * 100:+.1f}%, {hi * 100:+.1f}%] over runs "
            f"{t.start + 1}–{t.stop}, {_p(t.p)}")


@dataclass(frozen=True)
class Lines:
    """The summary's parts, in the order a reader needs them."""

    headline: str
    regressions: list[str]
    other_changes: list[str]
    machine: list[str]
    trends: list[str]
    noisy: list[str]
    notes: list[str]
    method: str


def trend_regression_words(series: Series) -> str:
    """``DFlash vs AR speedup at c=1 drifts -3.1% per run [...] over runs 1–10, p = 0.001: a regression, over its
    newest 5 runs the trend moves it -14.6% (2.9 -> 2.5), past its gate (max drop 5%)``"""
    return f"{trend_words(series)}: a regression, {series.trend_regression}"


def lines_of(history: History) -> Lines:
    regressions = [change_words(s, f) + (" **(recent)**" if f.recent else "") for s, f in history.regressions]
    regressions += [trend_regression_words(s) + " **(recent)**" for s in history.trend_regressions]
    other = [f"{change_words(s, f)} ({f.kind})" for s, f in history.findings if f.kind not in (REGRESSION, MACHINE)]
    machine = [f"{change_words(s, f)}: the machine's speed explains it" for s, f in history.findings
               if f.kind == MACHINE]  # fmt: skip
    trends = [trend_words(s) for s in history.trends if not s.trend_machine and not s.trend_regression]
    machine += [f"{trend_words(s)}; {s.trend_machine}" for s in history.trends if s.trend_machine]
    several = len({s.setting for s in history.series}) > 1  # name the setting only where there are several
    noisy = [f"{s.label}{f' ({s.setting})' if several else ''}: {s.noisy}" for s in history.series if s.noisy]
    n_runs = len(history.runs)
    code = history.exit_code
    verdict = {0: "no recent regression", 1: "REGRESSION among the newest runs", 3: "cannot judge"}.get(code, "")
    by_trend = len(history.trend_regressions)  # a trend's regression is over the newest runs by its definition
    recent_reg = sum(f.recent for _, f in history.regressions) + by_trend
    reading = history.reading
    apart = [f"{len(reading.skipped)} folder(s) skipped"] * bool(reading.skipped) + \
        [f"{len(reading.folded)} run(s) found in several folders, counted once"] * bool(reading.folded)  # fmt: skip
    n_runs = f"{n_runs} runs" + (f" ({'; '.join(apart)}: see the notes)" if apart else "")
    n_reg = len(history.regressions) + by_trend
    headline = (f"dflashbench history: {verdict} (exit {code}). {n_runs}, {len(history.series)} series, "
                f"{len(history.findings)} change(s) found, {len(history.trends)} trend(s); {n_reg} regression(s)"
                + (f" ({by_trend} of them a trend past its gate)" if by_trend else "")
                + f", {recent_reg} among the newest {history.recent} runs")  # fmt: skip
    notes = list(history.notes) + [f"skipped {s}" for s in reading.skipped] + reading.folded + reading.index_notes
    method = (f"Change points: PELT on each series' log values, each run weighed by its own noise plus the "
              f"run-to-run noise the series shows (penalty {cp.PENALTY}, segments of {cp.MIN_SEGMENT}+ runs), each "
              f"series tested against {cp.N_PERMS:,} random orders of its runs, a step-down rule over the series "
              f"holding the chance of any false finding at {cp.FAMILY_ALPHA:.0%} (changes pruned as Otava does at "
              f"the level each series passed at); a change is a regression past compare's default gate; runs ordered by {history.order}")  # fmt: skip
    return Lines(headline, regressions, other, machine, trends, noisy, notes, method)


def format_markdown(history: History, html_link: str | None = None) -> str:
    from dflashbench.report.render import md_escape

    lines = lines_of(history)
    out = [f"### {md_escape(lines.headline)}", ""]
    for title, items in (("Regressions", lines.regressions), ("Trends", lines.trends),
                         ("Other changes", lines.other_changes), ("Explained by the machine's speed", lines.machine),
                         ("Cannot judge (too few runs or too noisy)", lines.noisy), ("Notes", lines.notes)):  # fmt: skip
        if items:
            out += [f"**{title}**", ""] + [f"- {md_escape(i).replace(chr(92) + '*' + chr(92) + '*', '**')}"
                                           for i in items] + [""]  # fmt: skip
    if not history.findings and not history.trends:
        out += [f"No change point in any of the {len(history.series)} series.", ""]
    out += [f"<sub>{md_escape(lines.method)}</sub>", ""]
    if html_link:
        out += [f"The plots: [{md_escape(Path(html_link).name)}]({html_link})", ""]
    return "\n".join(out)


def format_text(history: History) -> str:
    lines = lines_of(history)
    out = [lines.headline, ""]
    for title, items in (("regressions", lines.regressions), ("trends", lines.trends),
                         ("other changes", lines.other_changes), ("explained by the machine's speed", lines.machine),
                         ("cannot judge", lines.noisy), ("notes", lines.notes)):  # fmt: skip
        if items:
            out += [f"{title}:"] + [f"  - {i.replace('**', '')}" for i in items] + [""]
    if not history.findings and not history.trends:
        out += [f"no change point in any of the {len(history.series)} series", ""]
    out.append(lines.method)
    return "\n".join(out)


# -- the page -------------------------------------------------------------------------------------------------------
# Each figure's axis: its name with its unit, and the factor from the stored value (seconds: TTFT in ms)
AXES = {"speedup": ("speedup (×)", 1.0), "per_user_tok_per_s_pooled": ("per-user rate (tok/s per user)", 1.0),
        "throughput_tok_per_s": ("throughput (tok/s)", 1.0), "tau": ("tau (tokens / verify step)", 1.0),
        "ttft_s_p99": ("TTFT p99 (ms)", 1000.0)}  # fmt: skip
MAX_TICKS = 10  # run labels under a plot; the rest of the runs are unlabelled ticks between them


def _started(run: RunSummary):
    import datetime

    try:
        at = datetime.datetime.fromisoformat(str(run.started_at))
    except ValueError:
        return None
    return at.astimezone(datetime.UTC) if at.tzinfo else at


def run_labels(runs: list[RunSummary], order: str) -> tuple[list[str], str]:
    """Each run's label under the plots and the axis' name: its commit (the first 7 characters) where the runs are
    ordered by commit; else its start in UTC, the day (``11-27``) where no two runs share one, else with the time."""
    if order == "commit":
        return [str(r.commit or "?")[:7] for r in runs], "commit (in the repository's order)"
    starts = [_started(r) for r in runs]
    days = [s.date() for s in starts if s is not None]
    by_day = len(set(days)) == len(days)
    fmt = "%m-%d" if by_day else "%m-%d %H:%M"
    return [s.strftime(fmt) if s is not None else "?" for s in starts], \
        f"run start, UTC ({'month-day' if by_day else 'month-day hour:minute'})"  # fmt: skip


def figure_of(series: Series, order: str = "time", marked: frozenset[str] | set[str] = frozenset(),
              mark_label: str = "marked run"):  # fmt: skip
    """One series' plot (a matplotlib Figure): each run at its place in the order (1, 2, ...: changes are found by
    place) labelled by its date or commit, its value with its 95 % interval, the fitted levels, each change's
    first-run interval shaded, a dotted line where the engine, dflashbench or a drafter changed, the ``marked`` runs
    ringed; the figure's unit on the y axis (TTFT in ms)."""
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.ticker import NullFormatter

    name, scale = AXES.get(series.figure, (series.figure + (f" ({series.unit})" if series.unit else ""), 1.0))
    fig = MplFigure(figsize=(4.2, 2.6))
    ax = fig.add_subplot()
    n = len(series.values)
    x = list(range(1, n + 1))
    values = [v * scale for v in series.values]
    sd = series.fit.sd if series.fit is not None and series.fit.sd else [0.0] * n
    lo = [v * math.exp(-1.959964 * s) for v, s in zip(values, sd, strict=True)]
    hi = [v * math.exp(1.959964 * s) for v, s in zip(values, sd, strict=True)]
    ax.vlines(x, lo, hi, color="#b8c4d6", linewidth=2, zorder=1)
    ax.plot(x, values, "o", color="#1f5fbf", markersize=3.5, zorder=3)
    if series.fit is not None and series.fit.levels:
        ax.plot(x, [math.exp(v) * scale for v in series.fit.levels], "-", color="#6b6b6b", linewidth=1, zorder=2,
                drawstyle="steps-mid" if series.fit.trend is None else "default")  # fmt: skip
    for f in series.findings:
        c = f.change
        color = "#c0392b" if f.kind == REGRESSION else "#e07b00" if f.kind == MACHINE else "#2a9d55"
        ax.axvspan(c.lo + 0.5, c.hi + 1.5, color=color, alpha=0.18, zorder=0)
        ax.axvline(c.index + 0.5, color=color, linewidth=1.2)
    for i, _ in series.marks:
        ax.axvline(i + 0.5, color="#7a4fbf", linewidth=0.8, linestyle=":")
    ringed = [i for i, r in enumerate(series.runs) if r.run_id in marked]
    if ringed:
        ax.plot([x[i] for i in ringed], [values[i] for i in ringed], "o", mfc="none", mec="#c0392b", markersize=8,
                markeredgewidth=1.5, zorder=4, label=mark_label)  # fmt: skip
        ax.legend(fontsize=6, loc="best", frameon=False)
    labels, axis = run_labels(series.runs, order)
    step = max(1, math.ceil(n / MAX_TICKS))
    shown = sorted(set(range(0, n, step)) | set(ringed))
    ax.set_xticks([x[i] for i in shown], [labels[i] for i in shown], rotation=40, ha="right", fontsize=6)
    ax.set_xticks(x, minor=True)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(0.5, n + 0.5)
    ax.set_xlabel(axis, fontsize=7)
    ax.set_ylabel(name, fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(series.label, fontsize=9)
    return fig


def _plot(series: Series, order: str = "time", marked: frozenset[str] | set[str] = frozenset(),
          mark_label: str = "marked run"):  # fmt: skip
    from dflashbench.report.figures import literal_text, png

    @literal_text
    def draw():
        fig = figure_of(series, order, marked, mark_label)
        n = len(series.values)
        return png(fig, series.label, f"{series.label} over {n} runs, with 95% intervals"
                   + "".join(f"; a change from run {f.change.index + 1}" for f in series.findings)
                   + "".join(f"; {mark_label}: run {i + 1}" for i, r in enumerate(series.runs) if r.run_id in marked))  # fmt: skip

    return draw()


def _href(target: str, page_dir: Path) -> str:
    """A link from the page to ``target`` (a run's report, or its folder), relative where both are local."""
    try:
        return Path(os.path.relpath(Path(target).resolve(), page_dir.resolve())).as_posix()
    except ValueError:  # another drive
        return Path(target).resolve().as_uri()


def page_model(history: History, page: Path, link: Callable[[RunSummary], str] | None = None) -> dict:
    """What the page shows. ``link``: each run's href (default: its report where the sweep wrote one, else its
    folder, relative to the page where both are local; a page kept apart from its runs links to what is kept
    beside it instead)."""
    lines = lines_of(history)
    page_dir = page.parent
    link = link or (lambda r: _href(r.report or r.path, page_dir))
    cards = []
    for s in history.series:
        runs = [{"n": i + 1, "id": r.run_id, "href": link(r),
                 "changed": any(f.change.index == i for f in s.findings), "marked": r.run_id in history.marked,
                 "title": f"{r.run_id} · {r.started_at} · {s.values[i]:.4g}"} for i, r in enumerate(s.runs)]  # fmt: skip
        cards.append({"label": s.label, "setting": s.setting,
                      "figure": _plot(s, history.order, history.marked, history.mark_label), "runs": runs,
                      "findings": [change_words(s, f) + f" ({f.kind})" for f in s.findings],
                      "trend": (trend_regression_words(s) if s.trend_regression else trend_words(s)
                                + (f"; {s.trend_machine}" if s.trend_machine else ""))
                      if s.fit is not None and s.fit.trend else "",
                      "marks": [f"run {i + 1}: {text}" for i, text in s.marks], "noisy": s.noisy,
                      "regression": any(f.kind == REGRESSION for f in s.findings) or bool(s.trend_regression)})  # fmt: skip
    cards.sort(key=lambda c: (not c["regression"], not c["findings"] and not c["trend"]))
    return {"title": "dflashbench history", "lines": lines, "cards": cards, "mark_label": history.mark_label,
            "runs": [{"n": i + 1, "id": r.run_id, "started": r.started_at, "setting": r.setting_key,
                      "href": link(r), "status": r.status, "marked": r.run_id in history.marked,
                      "commit": r.marks.get("commit") or "", "labels": ", ".join(f"{k}={v}" for k, v in r.labels.items())}
                     for i, r in enumerate(history.runs)]}  # fmt: skip


# -- the output file (-o) ---------------------------------------------------------------------------------------------
PAGE = "history page"
PAGE_SUFFIXES = {"html": "html", "htm": "html", "md": "md", "markdown": "md", "txt": "text", "text": "text"}


def output_format(page: Path) -> str:
    """``history -o PAGE``'s format from its suffix (.html, .md, .txt; none: HTML), and the path checked as
    ``report -o`` checks its own (:func:`dflashbench.report.check_output`: a symbolic link, a named pipe, a device or
    a folder is refused): called before the runs are read, so a refused path costs nothing."""
    from dflashbench.report import check_output, suffix_format

    fmt = suffix_format(page, PAGE_SUFFIXES, "history writes HTML (.html), Markdown (.md) or text (.txt)")
    check_output(page, PAGE, "history.html")
    return fmt or "html"


def write_output(history: History, page: Path, html_link: str | None = None,
                 link: Callable[[RunSummary], str] | None = None, fmt: str | None = None) -> Path:  # fmt: skip
    """Write ``history`` to ``page`` in ``fmt`` (default: the format its suffix names, :func:`output_format`): the
    HTML page, or the Markdown (linking ``html_link``) or text summary. Written as ``report`` writes
    (:func:`dflashbench.report.write_checked`): the path checked again just before, the text written beside it and
    renamed over it."""
    from dflashbench.report import write_checked

    fmt = fmt or output_format(page)
    if fmt == "html":
        from dflashbench.report.render import render_template

        text = render_template("history.html.j2", page=page_model(history, page, link))
    else:
        text = format_markdown(history, html_link) if fmt == "md" else format_text(history) + "\n"
    return write_checked(page, text, PAGE, "history.html")


def write_html(history: History, page: Path, echo: Callable[[str], None] | None = None,
               link: Callable[[RunSummary], str] | None = None) -> Path:  # fmt: skip
    """The HTML page at ``page`` (:func:`write_output`)."""
    return write_output(history, page, link=link, fmt="html")
