"""From sweep points to answers: Pareto frontiers, matched-interactivity interpolation, the three speedups,
tau per category, and the open-loop points beside them (measured beside published: :mod:`dflashbench.plan.published`).

Pure functions over the ``points`` DataFrame of one or more runs (one row per :class:`PointSummary`); no
I/O, no plotting. The definitions are those of docs/metrics.md:

- *single-stream speedup* = TPOT(AR) / TPOT(method) at concurrency 1 (the DFlash paper's number);
- *speedup at matched concurrency* = per-user tok/s(method) / per-user tok/s(AR) at the same concurrency
  (NVIDIA's SPEED-Bench tables);
- *speedup at matched interactivity* = throughput/GPU(method) / throughput/GPU(AR) at the same per-user
  tok/s, both read off their Pareto frontiers by log-log interpolation; outside a frontier's measured range
  the value is "not reached" (``None`` with the reason), never extrapolated (NVIDIA's "15x" figure).

These read the closed-loop points only (a fixed number of streams, ``sweep --concurrency``). An open-loop
point (``sweep --request-rate``) has no concurrency of its own (its ``concurrency`` is the cap on requests in
flight, or 0): it is compared with AR at the same arrival rate (:func:`open_loop_speedups`), never on the
concurrency ladder. :func:`open_loop_mask` says which points are which, for every reader.

Points are compared within one *setting*: the same backend, model, workload and category (:data:`SETTING`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

# x of the Pareto plot and every per-user reading of the verdict: tokens/s seen by one user, pooled over a point's
# observed requests (sum of tokens / sum of decode time; metrics.per_user_tok_per_s_pooled). The mean of 1/TPOT
# (NVIDIA's statistic, MEAN_INTERACTIVITY) stays beside it in the tables: a few tiny TPOTs dominate it.
INTERACTIVITY = "per_user_tok_per_s_pooled"
MEAN_INTERACTIVITY = "per_user_tok_per_s_mean"
THROUGHPUT = "throughput_tok_per_s_per_gpu"  # y of the Pareto plot: system tokens/s per GPU
SETTING: tuple[str, ...] = ("backend", "model", "workload", "category")
BASELINE = "ar"
_REL_TOL = 1e-9


def method_label(method: str) -> str:
    """The method's name as reports print it, from its record (``DFlash``, ``n-gram``); another name as given."""
    from dflashbench.methods import label

    return label(method)


def method_sort_key(method: str) -> tuple[int, str]:
    """The records' order (``dflashbench/data/methods.toml``: AR, EAGLE-3, DFlash, DFlash2, MTP, n-gram, suffix), then
    any other name."""
    from dflashbench.methods import records

    order = [m.value for m in records()]
    return (order.index(method) if method in order else len(order), method)


def request_rate(extra: object) -> float | None:
    """The target arrival rate (requests/s) of an open-loop point, from its ``extra["load"]`` (as
    :func:`dflashbench.run.load_summary.load_extra` writes it); ``None`` for a closed-loop point."""
    load = extra.get("load") if isinstance(extra, dict) else None
    return finite_number(load.get("request_rate")) if isinstance(load, dict) else None


def open_loop_mask(points: pd.DataFrame) -> pd.Series:
    """True for each open-loop point (``sweep --request-rate``), False for a closed-loop one: the one test
    every closed-loop analysis and the report use to tell them apart."""
    if points.empty or "extra" not in points.columns:
        return pd.Series(False, index=points.index, dtype=bool)
    return pd.Series([request_rate(e) is not None for e in points["extra"]], index=points.index, dtype=bool)


def trace_replay_mask(points: pd.DataFrame) -> pd.Series:
    """True for each trace-replay point (``sweep --trace``: open loop on a trace's own arrivals), which is read
    on its own (:mod:`dflashbench.measure.trace_readings`), not beside the rate points."""
    if points.empty or "extra" not in points.columns:
        return pd.Series(False, index=points.index, dtype=bool)
    return pd.Series([isinstance(e, dict) and (e.get("load") or {}).get("arrivals") == "trace" for e in points["extra"]],
                     index=points.index, dtype=bool)  # fmt: skip


def closed_loop(points: pd.DataFrame) -> pd.DataFrame:
    """The closed-loop points: what the speedups, Pareto frontiers, SLO reading and verdict read."""
    return points[~open_loop_mask(points)] if not points.empty else points


def load_label(concurrency: object, extra: object = None) -> str:
    """How a point's load reads in tables: ``"4"`` (concurrency) or ``"20/s"`` (open loop, ``"20/s ≤8"`` with
    a cap on requests in flight)."""
    rate = request_rate(extra)
    if rate is None:
        return str(concurrency) if concurrency is None else str(int(concurrency))
    cap = (extra.get("load") or {}).get("max_concurrency") if isinstance(extra, dict) else None
    return f"{rate:g}/s" + (f" ≤{int(cap)}" if cap else "")


def usable_points(points: pd.DataFrame) -> pd.DataFrame:
    """Finished points only (``status == "ok"``); a re-measured point (same setting, method and load: the
    concurrency, and for an open-loop point its arrival rate; e.g. from a later run) replaces the earlier one."""
    if points.empty:
        return points
    df = points
    if "status" in df.columns:
        df = df[df["status"].fillna("ok") == "ok"]
    rates = [request_rate(e) for e in df["extra"]] if "extra" in df.columns else [None] * len(df)
    df = df.assign(_rate=[-1.0 if r is None else r for r in rates])
    key = [c for c in (*SETTING, "method", "concurrency", "_rate") if c in df.columns]
    return with_interactivity(df.drop_duplicates(subset=key, keep="last").drop(columns="_rate").reset_index(drop=True))


def with_interactivity(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with :data:`INTERACTIVITY` readable on every row: a row written before the pooled rate existed
    (no ``timing_requests`` either; the report recomputes such rows from ``requests.jsonl`` where it can) falls
    back to its mean of 1/TPOT. A row whose latency was not measured keeps ``None``."""
    if points.empty or MEAN_INTERACTIVITY not in points.columns:
        return points
    legacy = points["timing_requests"].isna() if "timing_requests" in points.columns else pd.Series(True, index=points.index)
    legacy &= points[INTERACTIVITY].isna() if INTERACTIVITY in points.columns else True
    filled = {}
    for suffix in ("", "_sd", "_ci_lo", "_ci_hi"):  # the value, and its interval over repeats (dflashbench.measure.repeats)
        if MEAN_INTERACTIVITY + suffix in points.columns:
            own = points.get(INTERACTIVITY + suffix, pd.Series(math.nan, index=points.index))
            filled[INTERACTIVITY + suffix] = own.where(~legacy, points[MEAN_INTERACTIVITY + suffix])
    filled[STATISTIC] = [MEAN_OF_RECIPROCAL if old else POOLED for old in legacy]  # what the column holds, said
    return points.assign(**filled)


STATISTIC, POOLED, MEAN_OF_RECIPROCAL = "interactivity_statistic", "pooled", "mean of 1/TPOT"


def interactivity_statistic(points: pd.DataFrame) -> str:
    """What the per-user figure of ``points`` is (:func:`with_interactivity`): pooled, the mean of 1/TPOT (a run
    written before the pooled rate existed), or both, said so (an axis or a caption names it)."""
    found = set(points[STATISTIC]) if STATISTIC in points.columns and not points.empty else {POOLED}
    if found == {POOLED}:
        return "pooled: tokens after the first ÷ decode time"
    if found == {MEAN_OF_RECIPROCAL}:
        return "mean of 1/TPOT: these points carry no pooled rate"
    return "pooled; the mean of 1/TPOT where a point carries no pooled rate"


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
    df = (with_interactivity(points) if x == INTERACTIVITY else points).copy()
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
    "statistic", "speedup",
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
    for setting, group in _settings(usable_points(closed_loop(points))):
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
    for setting, group in _settings(usable_points(closed_loop(points))):
        for method in _subjects(group, baseline):
            for concurrency in sorted(group.loc[group["method"] == method, "concurrency"]):
                base = _row_at(group, baseline, concurrency)
                if base is None:
                    continue
                mine = _row_at(group, method, concurrency)
                a, b = finite_number(base.get(INTERACTIVITY)), finite_number(mine.get(INTERACTIVITY))
                statistic = MEAN_OF_RECIPROCAL if MEAN_OF_RECIPROCAL in (base.get(STATISTIC), mine.get(STATISTIC)) \
                    else POOLED  # fmt: skip
                rows.append({**setting, "method": method, "baseline": baseline, "concurrency": int(concurrency),
                             "baseline_per_user_tok_per_s": a, "method_per_user_tok_per_s": b, "statistic": statistic,
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
    for setting, group in _settings(usable_points(closed_loop(points))):
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


# --- open loop ------------------------------------------------------------------------------------------

OPEN_LOOP_COLUMNS = (
    *SETTING, "method", "request_rate", "max_concurrency", "achieved_rate_per_s", "throughput_tok_per_s_per_gpu",
    "ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "goodput_req_per_s", "good_share", "slo", "throughput_speedup",
    "goodput_speedup",
)  # fmt: skip


def goodput_of(extra: object) -> dict:
    """A point's goodput figures (``extra["goodput"]``: slo, good, requests, good_share, goodput_req_per_s), or {}."""
    gp = extra.get("goodput") if isinstance(extra, dict) else None
    return gp if isinstance(gp, dict) else {}


def slo_text(slo: object) -> str | None:
    """``{"ttft_s": 2, "tpot_s": 0.05}`` -> ``"ttft_s ≤ 2, tpot_s ≤ 0.05"``."""
    return ", ".join(f"{k} ≤ {v:g}" for k, v in slo.items()) if isinstance(slo, dict) and slo else None


def open_loop_speedups(points: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """One row per setting x method x arrival rate over the open-loop points: target and achieved rate,
    throughput, latency, goodput under the sweep's ``--goodput`` SLO, and the method's throughput and goodput
    over ``baseline``'s at the same rate (and the same cap on requests in flight)."""
    df = usable_points(points)
    df = df[open_loop_mask(df) & ~trace_replay_mask(df)] if not df.empty else df  # traces: report/trace.py
    rows = []
    for setting, group in _settings(df):
        loads = {}
        for rec in group.to_dict("records"):
            load = rec["extra"]["load"]
            key = (round(float(load["request_rate"]), 9), int(rec.get("concurrency") or 0))
            loads.setdefault(key, {})[rec["method"]] = rec
        for (rate, cap), by_method in sorted(loads.items()):
            base = by_method.get(baseline)
            for method in sorted(by_method, key=method_sort_key):
                rec = by_method[method]
                gp, load = goodput_of(rec.get("extra")), rec["extra"]["load"]
                row = {**setting, "method": method, "request_rate": rate, "max_concurrency": cap or None,
                       "achieved_rate_per_s": finite_number(load.get("achieved_rate_per_s")),
                       **{c: finite_number(rec.get(c)) for c in (THROUGHPUT, "ttft_s_p50", "ttft_s_p99", "tpot_s_p50")},
                       "goodput_req_per_s": finite_number(gp.get("goodput_req_per_s")),
                       "good_share": finite_number(gp.get("good_share")), "slo": slo_text(gp.get("slo"))}  # fmt: skip
                for col, value in (("throughput_speedup", THROUGHPUT), ("goodput_speedup", "goodput_req_per_s")):
                    mine = row[value]
                    theirs = None if base is None or method == baseline else (
                        finite_number(base.get(value)) if value == THROUGHPUT  # goodput: only under the same SLO
                        else finite_number(goodput_of(base.get("extra")).get(value))
                        if goodput_of(base.get("extra")).get("slo") == gp.get("slo") else None)  # fmt: skip
                    row[col] = mine / theirs if mine is not None and theirs else None
                rows.append(row)
    return _table(rows, OPEN_LOOP_COLUMNS)


def per_concurrency_per_user(points: pd.DataFrame) -> pd.Series:
    """vLLM plot_pareto's per-user figure: system throughput / concurrency (report.summary.PER_USER_DEFINITION)."""
    tput = pd.to_numeric(points.get("throughput_tok_per_s"), errors="coerce")  # the system's, as vLLM's
    conc = pd.to_numeric(points.get("concurrency"), errors="coerce")
    return tput / conc


# -- points and their requests read together, for every reader (the report, the verdict) --------------------
def request_latencies(points: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per measured, successful request: backend, method, workload, concurrency, ttft_s, tpot_s
    (the definitions of :mod:`dflashbench.measure.metrics`), joined to its point by (run_id, point_id). The
    concurrency is the point's: a run from before request rows recorded it holds a client process's share of the
    streams there."""
    columns = ["backend", "method", "workload", "concurrency", "category", "ttft_s", "tpot_s"]
    if requests.empty or points.empty or "point_id" not in points.columns:
        return pd.DataFrame(columns=columns)
    where = points.drop_duplicates(["run_id", "point_id"])[
        ["run_id", "point_id", "backend", "method", "workload", "concurrency"]
    ]
    from dflashbench.measure import metrics, observability
    from dflashbench.measure.request_index import index_of

    rows = []
    for r in index_of(requests).measured():
        tpot = metrics.tpot_s(r) if observability.timing_observable(r) else None  # a burst has no TPOT
        rows.append({"run_id": r.run_id, "point_id": r.point_id, "category": r.category,
                     "ttft_s": metrics.ttft_s(r), "tpot_s": tpot})  # fmt: skip
    if not rows:
        return pd.DataFrame(columns=columns)
    return pd.DataFrame(rows).merge(where, on=["run_id", "point_id"], how="inner")[columns]


def with_latency_rule(points: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """``points`` with the rows written before observable timing was recorded (no ``timing_requests``)
    recomputed from their requests (:func:`metrics.latency_fields`: TPOT, ITL, ICL and per-user rates from the
    requests whose per-token timing was observable, or not measured), so an old run re-reported follows today's
    definitions. Rows averaged over repeats, and rows whose requests are not stored, are left as they are."""
    if points.empty or requests.empty or "point_id" not in requests.columns or "point_id" not in points.columns:
        return points
    legacy = points["timing_requests"].isna() if "timing_requests" in points.columns else \
        pd.Series(True, index=points.index)  # fmt: skip
    if not legacy.any():
        return points
    from dflashbench.measure import metrics
    from dflashbench.measure.request_index import index_of

    index = index_of(requests)
    updates = {}
    for idx, row in points[legacy].iterrows():
        rs = index.of(str(row.get("run_id")), str(row.get("point_id")))
        repeats = finite_number(row.get("n_repeats"))
        if not rs or (repeats is not None and repeats > 1):
            continue
        updates[idx] = metrics.latency_fields([r for r in rs if row.get("category") in ("all", r.category)])
    if not updates:
        return points
    fresh = pd.DataFrame.from_dict(updates, orient="index")
    out = points.copy()
    for col in fresh.columns:
        column = out[col].astype(object) if col in out.columns else pd.Series(None, index=out.index, dtype=object)
        column.loc[fresh.index] = fresh[col]
        out[col] = pd.to_numeric(column, errors="coerce") if col != "latency_not_measured_reason" else column
    return out


def closed_loop_requests(raw: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """``requests`` less those of open-loop points (``raw``: every repeat's own point row, as requests carry
    their repeat's point id)."""
    if requests.empty or raw.empty or "point_id" not in requests.columns or "point_id" not in raw.columns:
        return requests
    opened = raw[open_loop_mask(raw)]
    open_ids = set(zip(opened["run_id"].astype(str), opened["point_id"].astype(str), strict=True))
    if not open_ids:
        return requests
    keep = [(str(r), str(p)) not in open_ids for r, p in zip(requests["run_id"], requests["point_id"], strict=True)]
    return requests[keep]


def with_tput_per_c(usable: pd.DataFrame) -> pd.DataFrame:
    """The points table's rows with vLLM's per-user reading (throughput / concurrency) beside ours."""
    return usable.assign(_tput_per_c=per_concurrency_per_user(usable)) if not usable.empty else usable


def machine_label(manifest: dict) -> str:
    """Where a run ran, short: ``1 × NVIDIA H100 80GB HBM3``, ``CPU`` (with the engine build where named)."""
    gpu = manifest.get("gpu") if isinstance(manifest.get("gpu"), dict) else {}
    where = f"{gpu.get('gpu_count')} × {gpu.get('gpu')}" if gpu.get("gpu_count") and gpu.get("gpu") else "CPU"
    engine = manifest.get("engine") if isinstance(manifest.get("engine"), dict) else {}
    return where + (f", {engine['distribution']} {engine['version']}" if engine.get("distribution") and
                    engine.get("version") else "")  # fmt: skip


def distinct_settings(runs: Sequence) -> dict[str, str]:
    """run_id -> the backend label its points carry in this report, so that no reading, table row or frontier mixes
    two runs' points (issue #53: one setting, one run, or side by side): the backend itself; ``backend on <machine>``
    where runs of one backend ran on different machines (two GPUs, two engine builds); ``backend · <run-id>`` where
    two runs on one machine measured the same setting (backend, model, workload), each then its own setting, read
    from its own records."""
    def backend(run) -> str:
        found = run.points["backend"].dropna().astype(str) if "backend" in run.points.columns else pd.Series([])
        return str(run.manifest.get("backend") or (found.iloc[0] if not found.empty else ""))

    def where(run) -> set[tuple[str, ...]]:
        pts = run.points
        cols = ["backend", "model", "workload"]
        return set(pts[cols].astype(str).itertuples(index=False, name=None)) if not pts.empty and set(cols) <= set(
            pts.columns) else set()  # fmt: skip

    machines: dict[str, set[str]] = {}
    for run in runs:
        machines.setdefault(backend(run), set()).add(machine_label(run.manifest))
    labels = {}
    for run in runs:
        label = f"{backend(run)} on {machine_label(run.manifest)}" if len(machines.get(backend(run), ())) > 1 else ""
        twins = [o for o in runs if o is not run and machine_label(o.manifest) == machine_label(run.manifest)
                 and where(o) & where(run)]  # fmt: skip
        labels[run.run_id] = f"{label or backend(run)} · {run.run_id}" if twins else label
    return labels


def relabel(frame: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    if frame.empty or "backend" not in frame.columns or not any(labels.values()):
        return frame
    new = [labels.get(str(r)) or b for r, b in zip(frame["run_id"], frame["backend"], strict=True)]
    return frame.assign(backend=new)


def resumed_points(manifest: dict) -> frozenset[str]:
    """The point ids a resumed run measured in a later sitting (``resumes[].points_to_run``)."""
    out: set[str] = set()
    for resume in manifest.get("resumes") or []:
        if isinstance(resume, dict):
            out |= {str(p) for p in resume.get("points_to_run") or []}
    return frozenset(out)


def with_energy(matched: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """The matched-concurrency table with each side's energy per token and GPU-seconds per million output tokens,
    where NVML measured energy (category "all" rows; a category share has no throughput of its own)."""
    if matched.empty or "energy_j_per_tok" not in points.columns:
        return matched
    usable = usable_points(points)
    at = {(r["backend"], r["model"], r["workload"], r["category"], r["method"], int(r["concurrency"])): r
          for r in usable.to_dict("records")}  # fmt: skip
    cols: dict[str, list] = {k: [] for k in ("method_j_per_tok", "baseline_j_per_tok", "method_gpu_s_per_mtok",
                                             "baseline_gpu_s_per_mtok")}  # fmt: skip
    for r in matched.to_dict("records"):
        for side, method in (("method", r["method"]), ("baseline", r.get("baseline") or BASELINE)):
            p = at.get((r["backend"], r["model"], r["workload"], r["category"], method, int(r["concurrency"])), {})
            energy = finite_number(p.get("energy_j_per_tok")) if r["category"] == "all" else None
            cols[f"{side}_j_per_tok"].append(energy)
            cols[f"{side}_gpu_s_per_mtok"].append(gpu_s_per_mtok(p) if energy is not None else None)
    return matched.assign(**cols)


def device_unit(points: pd.DataFrame) -> str:
    """"GPU" when every point ran on GPUs, else "device" (a CPU run counts as one device, see
    :func:`dflashbench.measure.metrics.per_device`), so nothing says "per GPU" of a run that had none."""
    if points.empty or "num_gpus" not in points.columns:
        return "GPU"
    gpus = pd.to_numeric(points["num_gpus"], errors="coerce")
    return "GPU" if bool((gpus > 0).all()) else "device"


def throughput_points(points: pd.DataFrame) -> pd.DataFrame:
    """Points whose throughput means serving throughput: category slices of mixed runs dropped."""
    usable = usable_points(points)
    if usable.empty:
        return usable
    return usable[~category_share_mask(usable)].reset_index(drop=True)


def category_share_mask(points: pd.DataFrame) -> pd.Series:
    """True for a category row that is a slice of a mixed point: its point (same run and ``point_id``) also
    has an "all" row with more requests. Such a row's throughput is the category's share of a mixed run (its
    tokens over the whole run's window), not what the category would get served alone, so it must stay out
    of throughput figures. A category measured on its own (the "all" row holds the same requests) is kept."""
    if points.empty or "point_id" not in points.columns:
        return pd.Series(False, index=points.index, dtype=bool)
    keys = list(zip(points.get("run_id", pd.Series("", index=points.index)), points["point_id"], strict=True))
    alls = {k: n for k, cat, n in zip(keys, points["category"], points["num_requests"], strict=True) if cat == "all"}
    out = []
    for k, cat, n in zip(keys, points["category"], points["num_requests"], strict=True):
        total = alls.get(k)
        out.append(bool(cat != "all" and total is not None and _num(total) > _num(n)))
    return pd.Series(out, index=points.index, dtype=bool)


def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def gpu_s_per_mtok(point: Mapping) -> float | None:
    """GPU-seconds per million output tokens: 1e6 ÷ throughput per GPU (tokens/s)."""
    tput = finite_number(point.get("throughput_tok_per_s_per_gpu"))
    return 1e6 / tput if tput else None


def raw_points(runs: Sequence) -> pd.DataFrame:
    """Every repeat's own row of ``runs`` (``Run.repeat_points``; a run without repeats: its points)."""
    frames = [r.repeat_points if getattr(r, "repeat_points", None) is not None else r.points for r in runs]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def planned_not_measured(points: pd.DataFrame, grid: Iterable) -> list[str]:
    """The grid's point ids (a manifest's ``grid``) no row of ``points`` measured. Both sides are read by one
    parser (:meth:`~dflashbench.types.PointKey.parse`), so a round is compared with a round; a repeat's point
    without its round counts too (a grid of older runs listed points, not rounds)."""
    from dflashbench.types import PointKey

    ids = points["point_id"].dropna() if not points.empty and "point_id" in points.columns else []
    keys = {PointKey.parse(str(pid)) or str(pid) for pid in ids}
    keys |= {k.base for k in keys if isinstance(k, PointKey)}
    return sorted(str(p) for p in grid if (PointKey.parse(str(p)) or str(p)) not in keys)


def unmeasured(points: pd.DataFrame, requests: pd.DataFrame, grid: Iterable, run_id: str) -> list[tuple[dict, str]]:
    """Every point of a run the verdict cannot read, as (its row, why): ``status`` (failed or degraded: its row's
    status says), ``empty`` (ok, but no request of it in the requests table), ``dropped`` (planned in ``grid``, not
    in ``points``: a row made from its id, ``trace`` set where its load is a trace's)."""
    from dflashbench.measure.request_index import index_of
    from dflashbench.types import PointKey

    alls = points[points["category"] == "all"] if not points.empty and "category" in points.columns else points
    index = index_of(requests) if not requests.empty else None
    out: list[tuple[dict, str]] = []
    for rec in alls.to_dict("records") if not alls.empty else []:
        if str(rec.get("status") or "ok") != "ok":
            out.append((rec, "status"))
        elif index is not None and not index.of(run_id, str(rec.get("point_id")), failed=True):
            out.append((rec, "empty"))
    model = str(alls["model"].iloc[0]) if not alls.empty and "model" in alls.columns else None
    for pid in planned_not_measured(points, grid):
        if (key := PointKey.parse(pid)) is not None:
            out.append(({"run_id": run_id, "method": key.method, "workload": key.workload, "model": model,
                         "concurrency": key.streams, "point_id": pid, "dropped_trace": key.load.startswith("t")},
                        "dropped"))  # fmt: skip
    return out


def prompt_lengths(points: pd.DataFrame, requests: pd.DataFrame) -> tuple[int, float, float] | None:
    """The prompts of ``points``' requests: how many distinct prompts (a prompt sent again to fill the streams,
    ``<id>~<k>``, once) and the median prompt and output tokens of their measured requests; ``None`` where the
    requests do not say."""
    import statistics

    if requests.empty or "point_id" not in points.columns or "prompt_tokens" not in requests.columns:
        return None
    ids = set(zip(points["run_id"].astype(str), points["point_id"].astype(str), strict=True))
    mine = requests[[(str(r), str(p)) in ids for r, p in zip(requests["run_id"], requests["point_id"], strict=True)]]
    mine = mine[mine["warmup"] != True] if "warmup" in mine.columns else mine  # noqa: E712
    ins = pd.to_numeric(mine["prompt_tokens"], errors="coerce").dropna()
    outs = pd.to_numeric(mine["output_tokens"], errors="coerce").dropna()
    if ins.empty or outs.empty:
        return None
    return mine["request_id"].astype(str).str.split("~").str[0].nunique(), statistics.median(ins), statistics.median(outs)


def energy_ratios(points: pd.DataFrame, method: str, loads: Sequence[int], baseline: str = BASELINE) -> list[float]:
    """``method``'s energy per output token over ``baseline``'s at each of ``loads`` (NVML's, category "all"
    points); [] unless every load has both."""
    at = {(r["method"], int(r["concurrency"])): finite_number(r.get("energy_j_per_tok"))
          for r in points[points["category"] == "all"].to_dict("records")} if not points.empty else {}  # fmt: skip
    found = [(at.get((method, c)), at.get((baseline, c))) for c in loads]
    return [a / b for a, b in found if a and b] if all(a and b for a, b in found) and found else []
