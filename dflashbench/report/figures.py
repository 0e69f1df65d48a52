"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no pyplot state, no display)
and returned as PNG ``data:`` URIs so the HTML needs no file beside it and fetches nothing.

Every function takes analysis tables or run frames and returns a :class:`Figure`, or ``None`` when there
is nothing to draw (the report then leaves the figure out rather than drawing an empty frame).
"""

from __future__ import annotations

import base64
import functools
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import matplotlib
import pandas as pd
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from dflashbench.measure import analysis
from dflashbench.measure.analysis import (
    INTERACTIVITY,
    THROUGHPUT,
    method_label,
    method_sort_key,
    with_interactivity,
)
from dflashbench.types import PointKey

METHOD_COLORS = {"ar": "#6b6b6b", "eagle3": "#e07b00", "dflash": "#1f5fbf", "dflash2": "#2a9d55", "mtp": "#b8336a",
                 "ngram": "#7a4fbf", "suffix": "#8c6d1f"}  # one each: a figure with every method tells them apart
OTHER_COLORS = ("#2a9d55", "#b8336a", "#7a4fbf", "#8c6d1f")
BACKEND_MARKERS = ("o", "s", "^", "D", "v", "P")
BACKEND_LINES = ("-", "--", ":", "-.")
DPI = 96


@dataclass(frozen=True, slots=True)
class Figure:
    """One rendered figure: what it shows (``title``, ``alt``) and the PNG as a ``data:`` URI."""

    title: str
    alt: str
    data_uri: str
    width: int
    height: int


def literal_text(fn: Callable) -> Callable:
    """Draw with mathtext off: a "$" in a model, workload or category name is text, not a formula (an
    unbalanced one would make matplotlib raise)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with matplotlib.rc_context({"text.parse_math": False}):
            return fn(*args, **kwargs)

    return wrapper


def _png(fig: MplFigure, title: str, alt: str) -> Figure:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    width, height = (round(v * DPI) for v in fig.get_size_inches())
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return Figure(title=title, alt=alt, data_uri=uri, width=width, height=height)


def png(fig: MplFigure, title: str, alt: str) -> Figure:
    """A drawn figure as a :class:`Figure` (PNG ``data:`` URI), for pages other than the report (``history``)."""
    return _png(fig, title, alt)


def method_color(method: str) -> str:
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return OTHER_COLORS[sum(map(ord, method)) % len(OTHER_COLORS)]  # stable across processes, unlike hash()


def _series_label(backend: str, method: str, model: str, backends: int, models: int) -> str:
    parts = [method_label(method)]
    if backends > 1:
        parts.insert(0, backend)
    if models > 1:
        parts.append(f"({model})")
    return " · ".join(parts)


def _style(backend: str, backends: Sequence[str]) -> tuple[str, str]:
    i = list(backends).index(backend)
    return BACKEND_MARKERS[i % len(BACKEND_MARKERS)], BACKEND_LINES[i % len(BACKEND_LINES)]


@literal_text
def pareto_figure(
    points: pd.DataFrame, workload: str, category: str, band: tuple[float, float] | None = None,
    unit: str = "GPU",
) -> Figure | None:
    """Throughput per GPU against tokens/s per user on log-log axes: every measured point faint, each
    (backend, method) frontier drawn through its non-dominated points (a straight segment on these axes is
    exactly the log-log interpolation the matched-interactivity readings use), concurrency written beside each
    point, and the interactivity ``band`` shaded when given. ``unit`` "device" for a run with no GPU."""
    df = analysis.usable_points(points)
    df = df[(df["workload"] == workload) & (df["category"] == category)]
    df = df[
        pd.to_numeric(df[INTERACTIVITY], errors="coerce").gt(0)
        & pd.to_numeric(df[THROUGHPUT], errors="coerce").gt(0)
    ]
    if df.empty:
        return None
    backends = sorted(set(df["backend"]))
    models = set(df["model"])
    fig = MplFigure(figsize=(8.5, 5.2))
    ax = fig.add_subplot()
    series = df.groupby(["backend", "model", "method"], sort=False)
    for (backend, model, method), group in sorted(
        series, key=lambda kv: (kv[0][0], kv[0][1], method_sort_key(kv[0][2]))
    ):
        color = method_color(method)
        marker, line = _style(backend, backends)
        front = analysis.pareto_frontier(group)
        ax.scatter(group[INTERACTIVITY], group[THROUGHPUT], color=color, marker=marker, alpha=0.3, s=28)
        draw_error_bars(ax, group, color)
        ax.plot(front[INTERACTIVITY], front[THROUGHPUT], color=color, linestyle=line, marker=marker,
                label=_series_label(backend, method, model, len(backends), len(models)))  # fmt: skip
        for _, row in group.iterrows():
            ax.annotate(f"c={int(row['concurrency'])}", (row[INTERACTIVITY], row[THROUGHPUT]),
                        textcoords="offset points", xytext=(5, 4), fontsize=8, color=color)  # fmt: skip
    if band is not None:
        ax.axvspan(band[0], band[1], color="#f2c14e", alpha=0.25, label=f"{band[0]:g}–{band[1]:g} tok/s/user")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers at 1-2-5 steps: mathtext is off here (literal_text)
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"interactivity: output tokens/s per user ({analysis.interactivity_statistic(df)}), log scale")
    ax.set_ylabel(("throughput per GPU" if unit == "GPU" else "throughput per device (1 CPU, no GPU)")
                  + " (output tokens/s), log scale")  # fmt: skip
    ax.set_title(f"Latency–throughput Pareto: {workload} / {category}")
    ax.grid(True, which="both", alpha=0.3)
    ax.margins(0.12)
    ax.legend(fontsize=8)
    alt = (f"Pareto plot for workload {workload}, category {category}: throughput per {unit} against tokens/s per "
           f"user (log-log) for {', '.join(sorted({method_label(m) for m in df['method']}))}.{error_bar_note(df)}")  # fmt: skip
    return _png(fig, f"Pareto frontier — {workload} / {category}", alt)


def _grouped_bars(ax, table: pd.DataFrame, value: str, series_cols: Sequence[str], label_fn) -> bool:
    """Bars of ``value`` per category (x), one bar per distinct ``series_cols`` tuple. False if nothing."""
    table = table[table[value].notna()]
    if table.empty:
        return False
    categories = list(dict.fromkeys(table["category"]))
    keys = sorted({tuple(r) for r in table[list(series_cols)].itertuples(index=False)},
                  key=lambda k: (method_sort_key(k[series_cols.index("method")]), k))  # fmt: skip
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        sel = table[(table[list(series_cols)] == pd.Series(key, index=list(series_cols))).all(axis=1)]
        heights = [sel.loc[sel["category"] == c, value].iloc[0] if (sel["category"] == c).any() else math.nan
                   for c in categories]  # fmt: skip
        method = key[series_cols.index("method")]
        shade = 1.0 - 0.5 * (i % 3) / 3
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(categories))]
        bars = ax.bar(xs, heights, width=width, color=method_color(method), alpha=shade, label=label_fn(key))
        # more than a few bars per group: labels stand upright, or neighbouring labels run into each other
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2, rotation=90 if len(keys) > 2 else 0)
    ax.set_xticks(range(len(categories)), categories)
    ax.margins(y=0.15)  # room above the tallest bar for its label
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return True


@literal_text
def speedup_figure(single: pd.DataFrame, matched: pd.DataFrame, workload: str) -> Figure | None:
    """Speedup over AR per category: single-stream (left) and at matched concurrency (right)."""
    single = single[single["workload"] == workload]
    matched = matched[matched["workload"] == workload]
    if single["speedup"].notna().sum() == 0 and matched["speedup"].notna().sum() == 0:
        return None
    multi = single["backend"].nunique() > 1 or matched["backend"].nunique() > 1
    fig = MplFigure(figsize=(11, 4.6))
    ax1, ax2 = fig.subplots(1, 2)
    drawn = _grouped_bars(ax1, single, "speedup", ["backend", "method"],
                          lambda k: f"{k[0]} · {method_label(k[1])}" if multi else method_label(k[1]))  # fmt: skip
    ax1.set_title("single-stream: TPOT(AR) / TPOT(method), c=1" if drawn else "single-stream: no c=1 pair")
    drawn = _grouped_bars(ax2, matched, "speedup", ["backend", "method", "concurrency"],
                          lambda k: (f"{k[0]} · " if multi else "") + f"{method_label(k[1])} c={k[2]}")  # fmt: skip
    ax2.set_title("matched concurrency: per-user tok/s ratio" if drawn else "matched concurrency: no pairs")
    for ax in (ax1, ax2):
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("speedup over AR (×)")
    fig.suptitle(f"Speedup over AR per category — {workload}")
    return _png(
        fig,
        f"Speedup per category — {workload}",
        f"Bar charts of speedup over AR per category for {workload}",
    )


@literal_text
def tau_figure(tau: pd.DataFrame, workload: str) -> Figure | None:
    """tau per category (left) and per-position acceptance rate (right)."""
    tau = tau[tau["workload"] == workload]
    if tau.empty:
        return None
    multi = tau["backend"].nunique() > 1
    fig = MplFigure(figsize=(11, 4.6))
    ax1, ax2 = fig.subplots(1, 2)
    _grouped_bars(ax1, tau, "tau", ["backend", "method"],
                  lambda k: f"{k[0]} · {method_label(k[1])}" if multi else method_label(k[1]))  # fmt: skip
    ax1.set_ylabel("τ: tokens per verification step")
    ax1.set_title("acceptance length τ per category")
    drew_positions = False
    categories = list(dict.fromkeys(tau["category"]))
    for _, row in tau.iterrows():
        rates = row["accepted_per_pos_rate"] or ()
        if not rates:
            continue
        drew_positions = True
        label = f"{method_label(row['method'])} · {row['category']}" + (
            f" · {row['backend']}" if multi else ""
        )
        style = BACKEND_LINES[categories.index(row["category"]) % len(BACKEND_LINES)]  # the method keeps its colour
        ax2.plot(range(1, len(rates) + 1), rates, marker=".", label=label, color=method_color(row["method"]),
                 linestyle=style)  # fmt: skip
    if drew_positions:
        ax2.xaxis.get_major_locator().set_params(integer=True)
        ax2.set_xlabel("draft position")
        ax2.set_ylabel("acceptance rate (per verification step)")
        ax2.set_ylim(0, 1.02)
        ax2.grid(True, alpha=0.3)
        ax2.legend(fontsize=7)
        ax2.set_title("per-position acceptance")
    else:
        ax2.set_axis_off()
        ax2.text(0.5, 0.5, "per-position acceptance not reported by this engine", ha="center", va="center")
    fig.suptitle(f"Acceptance — {workload}")
    return _png(fig, f"τ per category — {workload}", f"Acceptance length tau per category for {workload}")


@literal_text
def decomposition_figure(decomp: pd.DataFrame, workload: str) -> Figure | None:
    """Per speculative method against AR: its τ, its step-cost ratio and the speedup they give (τ ÷ cost) against
    concurrency, with the measured speedup as points; the speedup crosses 1 where the cost catches up with τ."""
    df = decomp[(decomp["workload"] == workload) & (decomp["baseline"] == "ar")] if not decomp.empty else decomp
    df = df[df["predicted"].notna()] if not df.empty else df
    if df.empty:
        return None
    fig = MplFigure(figsize=(11, 4.6))
    ax1, ax2 = fig.subplots(1, 2)
    for (backend, method), g in df.groupby(["backend", "method"], sort=False):
        g = g.sort_values("concurrency")
        color = method_color(str(method))
        name = method_label(str(method)) + (f" · {backend}" if df["backend"].nunique() > 1 else "")
        ax1.plot(g["concurrency"], g["tau"], marker="o", color=color, label=f"{name}: τ")
        ax1.plot(g["concurrency"], g["cost_ratio"], marker="s", linestyle="--", color=color,
                 label=f"{name}: step cost ÷ AR's")  # fmt: skip
        ax2.plot(g["concurrency"], g["predicted"], linestyle="--", color=color, label=f"{name}: τ ÷ cost")
        ax2.plot(g["concurrency"], g["measured"], marker="o", linestyle="none", color=color, label=f"{name}: measured")
    cs = sorted({int(c) for c in df["concurrency"]})
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(cs, [str(c) for c in cs])  # the concurrencies swept, as numbers (mathtext is off)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("concurrency (log scale)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax2.axhline(1.0, color="#444", linewidth=0.8)
    ax1.set_title("τ (tokens per step) and step-cost ratio")
    ax2.set_title("speedup over AR: τ ÷ step cost, and measured")
    fig.suptitle(f"Why it pays — {workload}")
    return _png(fig, f"acceptance over step cost — {workload}",
                f"Tau and step-cost ratio against concurrency, and the speedup they give, for {workload}")


@literal_text
def latency_figure(latencies: pd.DataFrame, workload: str) -> Figure | None:
    """TTFT and TPOT distributions per (backend, method, concurrency) as box plots.

    ``latencies``: one row per measured, successful request with backend, method, workload, concurrency,
    ttft_s and tpot_s."""
    df = latencies[latencies["workload"] == workload]
    if df.empty:
        return None
    multi = df["backend"].nunique() > 1
    groups = sorted(df.groupby(["backend", "method", "concurrency"]),
                    key=lambda kv: (kv[0][0], method_sort_key(kv[0][1]), kv[0][2]))  # fmt: skip
    labels = [(f"{b}\n" if multi else "") + f"{method_label(m)}\nc={c}" for (b, m, c), _ in groups]
    colors = [method_color(m) for (_, m, _), _ in groups]
    fig = MplFigure(figsize=(11, 4.8))
    axes = fig.subplots(1, 2)
    for ax, column, name in ((axes[0], "ttft_s", "TTFT"), (axes[1], "tpot_s", "TPOT")):
        data = [[v * 1000 for v in g[column].dropna()] for _, g in groups]
        if not any(data):
            ax.set_axis_off()
            continue
        box = ax.boxplot(
            [d or [math.nan] for d in data], tick_labels=labels, patch_artist=True, showfliers=True
        )
        for patch, color in zip(box["boxes"], colors, strict=True):
            patch.set_facecolor(color)
            patch.set_alpha(0.45)
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} per request")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Latency distributions — {workload}")
    return _png(fig, f"TTFT and TPOT distributions — {workload}",
                f"Box plots of time to first token and time per output token for {workload}")  # fmt: skip


@literal_text
def telemetry_figure(telemetry: pd.DataFrame, run_id: str) -> Figure | None:
    """GPU power and utilisation over the run, from its NVML samples (:mod:`dflashbench.telemetry`:
    ``unix_s``, ``gpu``, ``power_w``, ``gpu_util_pct``, ``point_id``). Each sweep point is its own line in its
    method's colour, labelled with its concurrency, so the time between points (server launches, a resumed
    run's pause) is a gap and not a line drawn across it."""
    if telemetry is None or telemetry.empty:
        return None
    # unix_s spans the whole run; t_s restarts with every point's sampler, so it is only a fallback.
    time_col = next((c for c in ("unix_s", "t_s") if c in telemetry.columns), None)
    panels = [(c, label) for c, label in (("power_w", "power (W)"), ("gpu_util_pct", "GPU utilisation (%)"))
              if c in telemetry.columns and pd.to_numeric(telemetry[c], errors="coerce").notna().any()]  # fmt: skip
    if time_col is None or not panels:
        return None
    df = telemetry.copy()
    t = pd.to_numeric(df[time_col], errors="coerce")
    df["_t"] = t - t.min()
    df["_point"] = df["point_id"] if "point_id" in df.columns else ""
    df["_gpu"] = df["gpu"] if "gpu" in df.columns else 0
    gpus = df["_gpu"].nunique()
    fig = MplFigure(figsize=(11, 4.2))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (column, label) in zip(axes, panels, strict=True):
        seen: set[str] = set()
        for (point, gpu), g in df.groupby(["_point", "_gpu"], sort=False):
            g = g.sort_values("_t")
            method, conc = _point_method_concurrency(str(point))
            name = method_label(method) + (f" (GPU {gpu})" if gpus > 1 else "")
            y = pd.to_numeric(g[column], errors="coerce")
            ax.plot(g["_t"], y, linewidth=1, color=method_color(method), label=None if name in seen else name)
            seen.add(name)
            if conc and y.notna().any():
                ax.annotate(f"c={conc}", (g["_t"].iloc[0], y.max()), fontsize=6, va="bottom", alpha=0.7)
        ax.set_xlabel("time since the run's first sample (s)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"GPU telemetry — {run_id}")
    return _png(fig, f"GPU telemetry — {run_id}", f"GPU power and utilisation over time for run {run_id}")


def _point_method_concurrency(point_id: str) -> tuple[str, str]:
    """``reference:dflash:synthetic:c4`` -> (``dflash``, ``4``); other loads and shapes -> (the id, "")."""
    key = PointKey.parse(point_id)
    if key is None or key.streams is None:
        return point_id or "samples", ""
    return key.method, str(key.streams)


# -- sweep --repeats: each point's 95% t-intervals over its repeats (measure/repeats.aggregate_repeats) as error
# bars on both axes; a point measured once gets none (one measurement says nothing about its own noise) ----------
def _repeated(df: pd.DataFrame) -> pd.DataFrame:
    """Rows measured more than once that carry both axes' intervals."""
    df = with_interactivity(df)
    cols = [f"{m}_ci_{e}" for m in (INTERACTIVITY, THROUGHPUT) for e in ("lo", "hi")]
    if "n_repeats" not in df.columns or any(c not in df.columns for c in cols):
        return df.iloc[0:0]
    n = pd.to_numeric(df["n_repeats"], errors="coerce").fillna(0)
    return df[(n > 1) & df[cols].notna().all(axis=1)]


# A t-interval over 2-3 noisy repeats often reaches below zero; on log axes a bar to zero (or below) would
# stretch the axis without end, so a bar's lower end stops at this share of the point's own value.
LOW_FLOOR = 0.1


def _cut(rows: pd.DataFrame, metric: str) -> pd.Series:
    """Whether each row's interval on ``metric`` reaches below :data:`LOW_FLOOR` of its mean."""
    return pd.to_numeric(rows[f"{metric}_ci_lo"]) < LOW_FLOOR * pd.to_numeric(rows[metric], errors="coerce")


def draw_error_bars(ax, group: pd.DataFrame, color: str) -> int:
    """Draw 95% interval bars (x: per-user tok/s, y: throughput per GPU) on ``ax`` for the repeated points of
    ``group``, lower ends cut at :data:`LOW_FLOOR` of the point's value; returns how many points got bars."""
    rows = _repeated(group)
    if rows.empty:
        return 0
    x, y = (pd.to_numeric(rows[c], errors="coerce") for c in (INTERACTIVITY, THROUGHPUT))
    span = lambda m, mid: [(mid - pd.to_numeric(rows[f"{m}_ci_lo"]).clip(lower=LOW_FLOOR * mid)).clip(lower=0),  # noqa: E731
                           (pd.to_numeric(rows[f"{m}_ci_hi"]) - mid).clip(lower=0)]  # fmt: skip
    ax.errorbar(x, y, xerr=span(INTERACTIVITY, x), yerr=span(THROUGHPUT, y), fmt="none", ecolor=color,
                elinewidth=1, capsize=3, alpha=0.7)  # fmt: skip
    return len(rows)


def error_bar_note(df: pd.DataFrame) -> str:
    """The sentence a figure's alt text and caption gain when it has error bars, else ""."""
    rows = _repeated(df)
    if rows.empty:
        return ""
    counts = sorted({int(n) for n in rows["n_repeats"]})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    cut = int((_cut(rows, INTERACTIVITY) | _cut(rows, THROUGHPUT)).sum())
    note = (f" {cut} interval(s) reach below {LOW_FLOOR:.0%} of their point's value; their bars stop there."
            if cut else "")  # fmt: skip
    return f" Error bars: 95% t-intervals over {n} repeats of each point.{note}"
