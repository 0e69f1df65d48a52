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


def finite_number(value) -> float | None:
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

SINGLE_STREAM_COLUMNS = (
    *SETTING, "method", "baseline", "statistic", "baseline_tpot_s", "method_tpot_s", "speedup",
)  # fmt: skip
MATCHED_CONCURRENCY_COLUMNS = (
    *SETTING, "method", "baseline", "concurrency", "baseline_per_user_tok_per_s", "method_per_user_tok_per_s",
    "speedup",
)  # fmt: skip
MATCHED_INTERACTIVITY_COLUMNS = (
    *SETTING, "method", "baseline", "per_user_tok_per_s", "baseline_throughput_per_gpu",
    "method_throughput_per_gpu", "speedup", "note",
)  # fmt: skip


def _subjects(group: pd.DataFrame, baseline: str) -> list[str]:
    """The methods to compare with ``baseline``: every other one but AR (AR is never the subject)."""
    return [m for m in _methods(group) if m not in (baseline, BASELINE)]


def _tpot_pair(base: pd.Series, other: pd.Series) -> tuple[str, float | None, float | None]:
    """Mean TPOT on both sides where both have it (the paper's statistic), else the median on both."""
    for column, statistic in (("tpot_s_mean", "mean"), ("tpot_s_p50", "p50")):
        a, b = finite_number(base.get(column)), finite_number(other.get(column))
        if a is not None and b is not None:
            return statistic, a, b
    return "p50", finite_number(base.get("tpot_s_p50")), finite_number(other.get("tpot_s_p50"))


def single_stream_speedups(points: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """TPOT(baseline) / TPOT(method) at concurrency 1, per setting and method."""
    rows = []
    for setting, group in _settings(usable_points(points)):
        base = _row_at(group, baseline, 1)
        if base is None:
            continue
        for method in _subjects(group, baseline):
            other = _row_at(group, method, 1)
            if other is None:
                continue
            statistic, a, b = _tpot_pair(base, other)
            rows.append({**setting, "method": method, "baseline": baseline, "statistic": statistic,
                         "baseline_tpot_s": a, "method_tpot_s": b,
                         "speedup": a / b if a is not None and b else None})  # fmt: skip
    return _table(rows, SINGLE_STREAM_COLUMNS)


def matched_concurrency_speedups(points: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """per-user tok/s(method) / per-user tok/s(baseline) at every concurrency both were measured at."""
    rows = []
    for setting, group in _settings(usable_points(points)):
        for method in _subjects(group, baseline):
            for concurrency in sorted(group.loc[group["method"] == method, "concurrency"]):
                base = _row_at(group, baseline, concurrency)
                if base is None:
                    continue
                a = finite_number(base.get(INTERACTIVITY))
                b = finite_number(_row_at(group, method, concurrency).get(INTERACTIVITY))
                rows.append({**setting, "method": method, "baseline": baseline, "concurrency": int(concurrency),
                             "baseline_per_user_tok_per_s": a, "method_per_user_tok_per_s": b,
                             "speedup": b / a if a and b is not None else None})  # fmt: skip
    return _table(rows, MATCHED_CONCURRENCY_COLUMNS)


def matched_interactivity_speedups(
    points: pd.DataFrame, targets: Sequence[float] | None = None, baseline: str = BASELINE
) -> pd.DataFrame:
    """throughput/GPU(method) / throughput/GPU(baseline) at the same per-user tok/s, both interpolated along
    their Pareto frontiers.

    ``targets``: the per-user tok/s values to read at (e.g. an interactivity band's edges). ``None``: at
    each point of the method's own frontier, i.e. "what would the baseline give at the interactivity this
    point delivers". A side that does not reach a target gets ``None`` and the reason in ``note``.
    """
    rows = []
    for setting, group in _settings(usable_points(points)):
        if baseline not in set(group["method"]):
            continue
        base_front = pareto_frontier(group[group["method"] == baseline])
        for method in _subjects(group, baseline):
            front = pareto_frontier(group[group["method"] == method])
            at_values = list(targets) if targets is not None else [float(v) for v in front[INTERACTIVITY]]
            for at in at_values:
                base_read, own = interpolate_frontier(base_front, at), interpolate_frontier(front, at)
                notes = [f"{method_label(m)} {r.reason}" for m, r in ((baseline, base_read), (method, own))
                         if not r.reached]  # fmt: skip
                rows.append({**setting, "method": method, "baseline": baseline, "per_user_tok_per_s": float(at),
                             "baseline_throughput_per_gpu": base_read.value, "method_throughput_per_gpu": own.value,
                             "speedup": own.value / base_read.value if own.reached and base_read.reached else None,
                             "note": "; ".join(notes) or None})  # fmt: skip
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
                tau = finite_number(row.get("tau"))
                if tau is None or tau <= 0:
                    continue
                n = finite_number(row.get("output_tokens")) or 0.0
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

# Published metric (suites/published/*.toml) -> how it is measured.
PUBLISHED_METRICS = (
    "speedup_single_stream", "speedup_matched_concurrency", "speedup_matched_interactivity", "tau",
)  # fmt: skip
PUBLISHED_COLUMNS = (
    "source", "model", "engine", "hardware", "task", "method", "baseline", "metric", "bound", "published",
    "measured", "ratio", "measured_in", "note",
)  # fmt: skip


def normalize_name(text: object) -> str:
    """Case- and punctuation-free: "MATH-500" == "math500", "MT-Bench" == "mt_bench"."""
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _workload_name(label: str) -> str:
    """A workload label's dataset name: "speed-bench/qualitative[coding]" -> "speedbench"."""
    return normalize_name(re.split(r"[/\[]", str(label), maxsplit=1)[0])


def _band(text: object) -> tuple[float, float] | None:
    m = re.fullmatch(r"\s*([0-9.]+)\s*-\s*([0-9.]+)\s*", str(text or ""))
    return (float(m.group(1)), float(m.group(2))) if m else None


def _text(value: object) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def measured_vs_published(points: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """Each published figure beside the matching measurement, with measured / published.

    A figure matches measured points of its ``method`` against its ``baseline`` (default AR) where its
    ``task`` names the measured workload (category "all") or a measured category - compared without case or
    punctuation - and, when the figure names a ``workload``, the measured workload is that dataset. Among
    matches, those on the figure's own model are preferred. Per metric:

    - "speedup_single_stream": :func:`single_stream_speedups`;
    - "speedup_matched_concurrency": :func:`matched_concurrency_speedups` at the figure's ``concurrency``,
      or the lowest measured one where the figure states none;
    - "speedup_matched_interactivity": :func:`matched_interactivity_speedups` at the middle of the figure's
      ``interactivity_tok_per_s`` band ("not reached" stays unmeasured, never extrapolated);
    - "tau": :func:`tau_by_category`.

    A task "Average" is the mean over the other tasks of the same source, method, baseline and metric, shown
    only when every one of them was measured. A model or engine unlike the published one is named in the note.
    """
    if published is None or published.empty:
        return _table([], PUBLISHED_COLUMNS)
    usable = usable_points(points)
    tables: dict[tuple, pd.DataFrame] = {}

    def table(metric: str, baseline: str, band: tuple[float, float] | None) -> pd.DataFrame:
        key = (metric, baseline, band)
        if key not in tables:
            if metric == "speedup_single_stream":
                tables[key] = single_stream_speedups(usable, baseline)
            elif metric == "speedup_matched_concurrency":
                tables[key] = matched_concurrency_speedups(usable, baseline)
            elif metric == "speedup_matched_interactivity":
                mid = [(band[0] + band[1]) / 2] if band else []
                tables[key] = matched_interactivity_speedups(usable, mid, baseline)
            else:
                tables[key] = tau_by_category(usable)
        return tables[key]

    rows, averages = [], []
    for fig in published.to_dict("records"):
        row = {k: _text(fig.get(k)) for k in ("source", "model", "engine", "hardware", "task", "method", "metric")}
        row.update(baseline=_text(fig.get("baseline")) or BASELINE, bound=_text(fig.get("bound")),
                   published=finite_number(fig.get("value")))  # fmt: skip
        if row["metric"] not in PUBLISHED_METRICS:
            rows.append(_with_ratio(row, None, None, "a metric dflashbench does not measure"))
        elif normalize_name(row["task"]) == "average":
            averages.append(row)
        else:
            band = _band(fig.get("interactivity_tok_per_s"))
            if row["metric"] == "speedup_matched_interactivity" and band is None:
                rows.append(_with_ratio(row, None, None, "the figure names no interactivity band"))
                continue
            candidates = _matching(table(row["metric"], row["baseline"], band), fig)
            measured, where, why, hit = _pick(candidates, row["metric"], finite_number(fig.get("concurrency")),
                                              row["model"])  # fmt: skip
            rows.append(_with_ratio(row, measured, where, why, _unlike(row, hit)))
    for row in averages:  # the published average is over all its tasks: a subset's mean is another number
        group = [r for r in rows if all(r[k] == row[k] for k in ("source", "method", "baseline", "metric"))]
        same = [r["measured"] for r in group if r["measured"] is not None]
        if group and len(same) == len(group):
            unlike = "; ".join(dict.fromkeys(r["note"] for r in group if r["note"])) or None
            rows.append(_with_ratio(row, sum(same) / len(same), f"mean of all {len(same)} tasks", None, unlike))
        else:
            rows.append(_with_ratio(row, None, None, f"not shown: {len(same)} of {len(group)} tasks measured, and "
                                    "the published average is over all of them"))  # fmt: skip
    return _table(rows, PUBLISHED_COLUMNS)


def _unlike(row: dict, hit: pd.Series | None) -> str | None:
    """The ways a measurement differs from the published setting (model, engine), for the note."""
    if hit is None:
        return None
    out = []
    if row["model"] and not _same_model(hit["model"], row["model"]):
        out.append(f"different model: measured {str(hit['model']).rstrip('/').rsplit('/', 1)[-1]}, published {row['model']}")
    if row["engine"] and normalize_name(hit["backend"]) not in normalize_name(row["engine"]):
        out.append(f"different engine: measured {hit['backend']}, published {row['engine']}")
    return "; ".join(out) or None


def _matching(table: pd.DataFrame, fig: dict) -> pd.DataFrame:
    """Rows of a measured table for the figure's method, task and (if named) workload."""
    if table.empty:
        return table
    df = table[table["method"] == fig.get("method")]
    task = normalize_name(fig.get("task"))
    workloads = df["workload"].map(_workload_name)
    if _text(fig.get("workload")):
        return df[(workloads == normalize_name(fig["workload"])) & (df["category"].map(normalize_name) == task)]
    by_workload = df[(workloads == task) & (df["category"] == "all")]
    return by_workload if not by_workload.empty else df[df["category"].map(normalize_name) == task]


def _same_model(measured: object, published: str | None) -> bool:
    """"Qwen/Qwen3-8B" matches "qwen3-8b" and "/models/Qwen3-8B": the last path part, normalized."""
    last = lambda m: normalize_name(str(m).rstrip("/").rsplit("/", 1)[-1])  # noqa: E731
    return published is not None and last(measured) == last(published)


def _pick(candidates: pd.DataFrame, metric: str, concurrency: float | None, model: str | None):
    """(measured value, where it was measured, why there is none) from the matching rows."""
    if metric == "speedup_matched_concurrency" and not candidates.empty:
        wanted = int(concurrency) if concurrency is not None else int(candidates["concurrency"].min())
        candidates = candidates[candidates["concurrency"] == wanted]
    if candidates.empty:
        return None, None, None, None
    own_model = candidates[candidates["model"].map(lambda m: _same_model(m, model))]
    candidates = own_model if not own_model.empty else candidates
    value_col = "tau" if metric == "tau" else "speedup"
    valued = candidates[candidates[value_col].notna()]
    hit = (valued if not valued.empty else candidates).iloc[0]
    where = f"{hit['backend']} / {hit['model']} / {hit['workload']} / {hit['category']}"
    if metric == "speedup_matched_concurrency":
        where += f" / c={int(hit['concurrency'])}"
    elif metric == "speedup_matched_interactivity":
        where += f" / at {hit['per_user_tok_per_s']:g} tok/s/user"
    if valued.empty:
        return None, where, _text(hit.get("note")), hit
    return float(hit[value_col]), where, None, hit


def _with_ratio(row: dict, measured: float | None, where: str | None, why: str | None = None,
                unlike: str | None = None) -> dict:  # fmt: skip
    published = row["published"]
    ratio = measured / published if measured is not None and published else None
    note = "; ".join(n for n in ((why or "not measured in these runs") if measured is None else None, unlike) if n)
    note = note or None
    return {**row, "measured": measured, "ratio": ratio, "measured_in": where, "note": note}
