"""What the report adds for repeated points (``sweep --repeats``): error bars on the Pareto figure and a 95%
interval column beside each speedup.

Error bars are the points' own 95% t-intervals over their repeats (``<metric>_ci_lo`` / ``_ci_hi`` from
:func:`dflashbench.measure.repeats.aggregate_repeats`), on both axes. A speedup's interval is paired: the speedup is
computed again within each repeat round (method and AR measured in the same round), and the interval is a
t-interval on the log of those per-round ratios (:func:`dflashbench.measure.repeats.paired_speedups`). Points and
speedups measured once get neither: one measurement says nothing about its own noise.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from dflashbench.measure import analysis
from dflashbench.measure.analysis import INTERACTIVITY, THROUGHPUT, with_interactivity

CI_COLUMN = "speedup_ci_text"


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


def with_text(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its interval as text (:data:`CI_COLUMN`)."""
    if df.empty or "speedup_ci_lo" not in df.columns:
        return df
    texts = []
    for lo, hi in zip(df["speedup_ci_lo"], df["speedup_ci_hi"], strict=True):
        lo, hi = analysis.finite_number(lo), analysis.finite_number(hi)
        texts.append(None if lo is None or hi is None else f"[{lo:.2f}×, {hi:.2f}×]")
    return df.assign(**{CI_COLUMN: texts})


def ci_spec(df: pd.DataFrame) -> list[tuple[str, str, Callable]]:
    """The interval column of a speedup table, where any row has one."""
    if CI_COLUMN not in df.columns or not df[CI_COLUMN].notna().any():
        return []
    kinds = set(df["speedup_ci_kind"].dropna()) if "speedup_ci_kind" in df.columns else {"repeats"}
    label = "95% CI (" + ", ".join(sorted({"repeats": "paired repeats", "requests": "bootstrap over requests"}
                                          .get(k, k) for k in kinds or {"repeats"})) + ")"  # fmt: skip
    return [(label, CI_COLUMN, lambda v: "—" if v is None or v != v else str(v))]
