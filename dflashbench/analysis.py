"""From sweep points to answers: Pareto frontiers, matched-interactivity interpolation, the three speedup
tables, tau per category, and measured beside published figures.

Pure functions over the ``points`` DataFrame of one or more runs (one row per :class:`PointSummary`); no
I/O, no plotting. The definitions are DESIGN.md's:

- *single-stream speedup* = TPOT(AR) / TPOT(method) at concurrency 1 (the DFlash paper's number);
- *speedup at matched concurrency* = per-user tok/s(method) / per-user tok/s(AR) at the same concurrency
  (NVIDIA's SPEED-Bench tables);
- *speedup at matched interactivity* = throughput/GPU(method) / throughput/GPU(AR) at the same per-user
  tok/s, both read off their Pareto frontiers by log-log interpolation; outside a frontier's measured range
  the value is "not reached" (``None`` with the reason), never extrapolated (NVIDIA's "15x" figure).

Points are compared within one *setting*: the same backend, model, workload and category (:data:`SETTING`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

INTERACTIVITY = "per_user_tok_per_s_mean"  # x of the Pareto plot: tokens/s seen by one user
THROUGHPUT = "throughput_tok_per_s_per_gpu"  # y of the Pareto plot: system tokens/s per GPU
SETTING: tuple[str, ...] = ("backend", "model", "workload", "category")
BASELINE = "ar"
METHOD_ORDER: tuple[str, ...] = ("ar", "eagle3", "dflash")
METHOD_LABELS = {"ar": "AR", "eagle3": "EAGLE-3", "dflash": "DFlash"}
_REL_TOL = 1e-9


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_sort_key(method: str) -> tuple[int, str]:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def usable_points(points: pd.DataFrame) -> pd.DataFrame:
    """Finished points only (``status == "ok"``); a re-measured point (same setting, method and concurrency,
    e.g. from a later run) replaces the earlier one."""
    if points.empty:
        return points
    df = points
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    key = [c for c in (*SETTING, "method", "concurrency") if c in df.columns]
    return df.drop_duplicates(subset=key, keep="last").reset_index(drop=True)


def _num(value) -> float | None:
    """A finite float, or None for null / NaN / non-numbers (never 0 standing in for unknown)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


# --- Pareto frontier and interpolation --------------------------------------------------------------


def pareto_frontier(points: pd.DataFrame, x: str = INTERACTIVITY, y: str = THROUGHPUT) -> pd.DataFrame:
    """The non-dominated points of (x, y), both to be maximised, sorted by x ascending (so y descends).

    A point is dominated when another has x and y at least as large and one of them larger. Points with a
    missing or non-positive x or y are left out; of exact duplicates one is kept.
    """
    df = points.copy()
    df[x] = pd.to_numeric(df[x], errors="coerce")
    df[y] = pd.to_numeric(df[y], errors="coerce")
    df = df[(df[x] > 0) & (df[y] > 0)]
    # Walk from the largest x down: a point survives when it beats every y seen so far (all of which
    # belong to points with x at least as large); ties on x are broken by the larger y coming first.
    df = df.sort_values([x, y], ascending=[False, False], kind="mergesort")
    keep, best_y = [], -math.inf
    for idx, y_val in zip(df.index, df[y], strict=True):
        if y_val > best_y:
            keep.append(idx)
            best_y = y_val
    return df.loc[keep].sort_values(x, kind="mergesort").reset_index(drop=True)


@dataclass(frozen=True, slots=True)
class Reading:
    """A value read off a frontier, or ``None`` with the reason it could not be."""

    value: float | None
    reason: str | None = None

    @property
    def reached(self) -> bool:
        return self.value is not None


def interpolate_frontier(
    frontier: pd.DataFrame, at: float, x: str = INTERACTIVITY, y: str = THROUGHPUT
) -> Reading:
    """y on ``frontier`` (as :func:`pareto_frontier` returns it) at x = ``at``, linear in log-log space
    between the two neighbouring frontier points. Outside the measured x range: not reached, never
    extrapolated."""
    if frontier.empty:
        return Reading(None, "no measured points")
    xs = [float(v) for v in frontier[x]]
    ys = [float(v) for v in frontier[y]]
    lo, hi = xs[0], xs[-1]
    if at > hi * (1 + _REL_TOL):
        return Reading(None, f"not reached: fastest measured is {hi:.4g} tok/s/user")
    if at < lo * (1 - _REL_TOL):
        return Reading(None, f"not reached: slowest measured is {lo:.4g} tok/s/user (needs more concurrency)")
    for i, xi in enumerate(xs):
        if math.isclose(at, xi, rel_tol=_REL_TOL):
            return Reading(ys[i])
        if xi > at:
            x0, x1, y0, y1 = xs[i - 1], xi, ys[i - 1], ys[i]
            t = (math.log(at) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return Reading(math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0))))
    return Reading(ys[-1])  # unreachable: at == hi is caught by isclose above


# --- grouping helpers -------------------------------------------------------------------------------


def _settings(points: pd.DataFrame) -> Iterable[tuple[dict, pd.DataFrame]]:
    """(setting as a dict, its points) for every setting present, in a stable order."""
    if points.empty:
        return
    for key, group in points.groupby(list(SETTING), sort=True, dropna=False):
        yield dict(zip(SETTING, key, strict=True)), group


def _methods(group: pd.DataFrame) -> list[str]:
    return sorted(set(group["method"]), key=method_sort_key)


def _row_at(group: pd.DataFrame, method: str, concurrency: int) -> pd.Series | None:
    rows = group[(group["method"] == method) & (group["concurrency"] == concurrency)]
    return None if rows.empty else rows.iloc[-1]


def _table(rows: list[dict], columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


# --- the three speedups -----------------------------------------------------------------------------

SINGLE_STREAM_COLUMNS = (*SETTING, "method", "statistic", "ar_tpot_s", "method_tpot_s", "speedup")
MATCHED_CONCURRENCY_COLUMNS = (
    *SETTING, "method", "concurrency", "ar_per_user_tok_per_s", "method_per_user_tok_per_s", "speedup",
)  # fmt: skip
MATCHED_INTERACTIVITY_COLUMNS = (
    *SETTING, "method", "per_user_tok_per_s", "ar_throughput_per_gpu", "method_throughput_per_gpu",
    "speedup", "note",
)  # fmt: skip


def _tpot_pair(ar: pd.Series, other: pd.Series) -> tuple[str, float | None, float | None]:
    """Mean TPOT on both sides where both have it (the paper's statistic), else the median on both."""
    for column, statistic in (("tpot_s_mean", "mean"), ("tpot_s_p50", "p50")):
        a, b = _num(ar.get(column)), _num(other.get(column))
        if a is not None and b is not None:
            return statistic, a, b
    return "p50", _num(ar.get("tpot_s_p50")), _num(other.get("tpot_s_p50"))


def single_stream_speedups(points: pd.DataFrame) -> pd.DataFrame:
    """TPOT(AR) / TPOT(method) at concurrency 1, per setting and non-AR method."""
    rows = []
    for setting, group in _settings(usable_points(points)):
        ar = _row_at(group, BASELINE, 1)
        if ar is None:
            continue
        for method in _methods(group):
            other = _row_at(group, method, 1)
            if method == BASELINE or other is None:
                continue
            statistic, a, b = _tpot_pair(ar, other)
            speedup = a / b if a is not None and b else None
            rows.append({**setting, "method": method, "statistic": statistic, "ar_tpot_s": a,
                         "method_tpot_s": b, "speedup": speedup})  # fmt: skip
    return _table(rows, SINGLE_STREAM_COLUMNS)


def matched_concurrency_speedups(points: pd.DataFrame) -> pd.DataFrame:
    """per-user tok/s(method) / per-user tok/s(AR) at every concurrency both were measured at."""
    rows = []
    for setting, group in _settings(usable_points(points)):
        for method in _methods(group):
            if method == BASELINE:
                continue
            mine = group[group["method"] == method].sort_values("concurrency")
            for concurrency in mine["concurrency"]:
                ar = _row_at(group, BASELINE, concurrency)
                if ar is None:
                    continue
                a = _num(ar.get(INTERACTIVITY))
                b = _num(_row_at(group, method, concurrency).get(INTERACTIVITY))
                rows.append({**setting, "method": method, "concurrency": int(concurrency),
                             "ar_per_user_tok_per_s": a, "method_per_user_tok_per_s": b,
                             "speedup": b / a if a and b is not None else None})  # fmt: skip
    return _table(rows, MATCHED_CONCURRENCY_COLUMNS)


def matched_interactivity_speedups(
    points: pd.DataFrame, targets: Sequence[float] | None = None
) -> pd.DataFrame:
    """throughput/GPU(method) / throughput/GPU(AR) at the same per-user tok/s, both interpolated along their
    Pareto frontiers.

    ``targets``: the per-user tok/s values to read at (e.g. an interactivity band's edges). ``None``: at
    each point of the method's own frontier, i.e. "what would AR give at the interactivity this point
    delivers". A side that does not reach a target gets ``None`` and the reason in ``note``.
    """
    rows = []
    for setting, group in _settings(usable_points(points)):
        methods = _methods(group)
        if BASELINE not in methods:
            continue
        ar_front = pareto_frontier(group[group["method"] == BASELINE])
        for method in methods:
            if method == BASELINE:
                continue
            front = pareto_frontier(group[group["method"] == method])
            at_values = list(targets) if targets is not None else [float(v) for v in front[INTERACTIVITY]]
            for at in at_values:
                ar_read = interpolate_frontier(ar_front, at)
                mine = interpolate_frontier(front, at)
                notes = [f"{method_label(m)} {r.reason}" for m, r in ((BASELINE, ar_read), (method, mine))
                         if not r.reached]  # fmt: skip
                speedup = mine.value / ar_read.value if mine.reached and ar_read.reached else None
                rows.append({**setting, "method": method, "per_user_tok_per_s": float(at),
                             "ar_throughput_per_gpu": ar_read.value, "method_throughput_per_gpu": mine.value,
                             "speedup": speedup, "note": "; ".join(notes) or None})  # fmt: skip
    return _table(rows, MATCHED_INTERACTIVITY_COLUMNS)


# --- acceptance ---------------------------------------------------------------------------------------

TAU_COLUMNS = (*SETTING, "method", "tau", "tau_min", "tau_max", "num_points", "accepted_per_pos_rate")


def tau_by_category(points: pd.DataFrame) -> pd.DataFrame:
    """tau per setting and speculative method, pooled over the concurrency points.

    Pooled as tokens over verification steps: with n_i output tokens and tau_i at point i, the point took
    n_i / tau_i steps, so tau = sum(n_i) / sum(n_i / tau_i). Per-position acceptance rates are pooled with
    the same step weights. AR (tau = 1 by definition) is left out.
    """
    rows = []
    for setting, group in _settings(usable_points(points)):
        for method in _methods(group):
            if method == BASELINE:
                continue
            mine = group[group["method"] == method]
            taus, steps, tokens, per_pos = [], [], [], []
            for _, row in mine.iterrows():
                tau = _num(row.get("tau"))
                if tau is None or tau <= 0:
                    continue
                n = _num(row.get("output_tokens")) or 0.0
                taus.append(tau)
                tokens.append(n)
                steps.append(n / tau)
                rates = row.get("accepted_per_pos_rate")
                per_pos.append(tuple(rates) if isinstance(rates, list | tuple) else ())
            if not taus:
                continue
            pooled = sum(tokens) / sum(steps) if sum(steps) > 0 else sum(taus) / len(taus)
            rows.append({**setting, "method": method, "tau": pooled, "tau_min": min(taus),
                         "tau_max": max(taus), "num_points": len(taus),
                         "accepted_per_pos_rate": _pool_rates(per_pos, steps)})  # fmt: skip
    return _table(rows, TAU_COLUMNS)


def _pool_rates(per_pos: list[tuple[float, ...]], steps: list[float]) -> tuple[float, ...]:
    """Step-weighted mean of per-position acceptance rates; a position counts only points that report it."""
    width = max((len(r) for r in per_pos), default=0)
    out = []
    for pos in range(width):
        pairs = [
            (r[pos], w) for r, w in zip(per_pos, steps, strict=True) if len(r) > pos and r[pos] is not None
        ]
        total = sum(w for _, w in pairs)
        out.append(
            sum(v * w for v, w in pairs) / total if total > 0 else sum(v for v, _ in pairs) / len(pairs)
        )
    return tuple(out)


# --- measured beside published ------------------------------------------------------------------------

# Published metric name -> the measured table it is read from. Names are those of suites/published/*.toml.
PUBLISHED_METRICS = {
    "speedup_single_stream": "single_stream",
    "speedup_matched_concurrency": "matched_concurrency",
    "tau": "tau",
}
PUBLISHED_COLUMNS = (
    "source", "model", "engine", "hardware", "task", "method", "metric", "published", "measured",
    "ratio", "measured_in", "note",
)  # fmt: skip


def normalize_name(text: str) -> str:
    """Case- and punctuation-free: "MATH-500" == "math500", "MT-Bench" == "mt_bench"."""
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def measured_vs_published(points: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Each published figure beside the matching measurement, with measured / published.

    A published ``task`` matches a measured workload (category "all") or a measured category, compared
    without case or punctuation, and ``method`` must match. "speedup_single_stream" is read from
    :func:`single_stream_speedups`, "speedup_matched_concurrency" from :func:`matched_concurrency_speedups`
    (at the figure's ``concurrency`` column where it has one, else 1), "tau" from :func:`tau_by_category`.
    Other metrics are left out. A task "Average" is the mean of the
    measured values of the other tasks of the same source, method and metric that were matched. The
    published model, engine and hardware are shown as they are: they rarely equal the measured ones, and the
    reader should see that.
    """
    if published is None or published.empty:
        return _table([], PUBLISHED_COLUMNS)
    tables = {
        "single_stream": single_stream_speedups(points),
        "matched_concurrency": matched_concurrency_speedups(points),
        "tau": tau_by_category(points),
    }
    rows, averages = [], []
    for _, fig in published.iterrows():
        row = {k: fig.get(k) for k in ("source", "model", "engine", "hardware", "task", "method", "metric")}
        row["published"] = _num(fig.get("value"))
        kind = PUBLISHED_METRICS.get(str(fig.get("metric")))
        if kind is None:
            continue
        if normalize_name(fig.get("task", "")) == "average":
            averages.append(row)
            continue
        concurrency = _num(fig.get("concurrency")) if "concurrency" in fig.index else None
        measured, where = _lookup(
            tables[kind], str(fig.get("task")), str(fig.get("method")), kind, concurrency
        )
        rows.append(_with_ratio(row, measured, where))
    for row in averages:
        same = [r["measured"] for r in rows
                if (r["source"], r["method"], r["metric"]) == (row["source"], row["method"], row["metric"])
                and r["measured"] is not None]  # fmt: skip
        measured = sum(same) / len(same) if same else None
        rows.append(_with_ratio(row, measured, f"mean of {len(same)} matched tasks" if same else None))
    return _table(rows, PUBLISHED_COLUMNS)


def _lookup(
    table: pd.DataFrame, task: str, method: str, kind: str, concurrency: float | None
) -> tuple[float | None, str | None]:
    if table.empty:
        return None, None
    value_col = "tau" if kind == "tau" else "speedup"
    df = table[table["method"] == method]
    if kind == "matched_concurrency":
        df = df[df["concurrency"] == int(concurrency or 1)]
    want = normalize_name(task)
    by_workload = df[(df["workload"].map(normalize_name) == want) & (df["category"] == "all")]
    by_category = df[df["category"].map(normalize_name) == want]
    for hits in (by_workload, by_category):
        hits = hits[hits[value_col].notna()]
        if not hits.empty:
            hit = hits.iloc[0]
            where = f"{hit['backend']} / {hit['model']} / {hit['workload']} / {hit['category']}"
            return float(hit[value_col]), where
    return None, None


def _with_ratio(row: dict, measured: float | None, where: str | None) -> dict:
    published = row["published"]
    ratio = measured / published if measured is not None and published else None
    return {**row, "measured": measured, "ratio": ratio, "measured_in": where,
            "note": None if measured is not None else "not measured in these runs"}  # fmt: skip
