"""Repeated points (``dflashbench sweep --repeats N``): their ids, collapsing repeat rows into one row per
point with intervals, and paired speedup intervals.

A sweep with ``repeats = N > 1`` measures every grid point N times, in rounds: round r runs every method's
points before round r + 1, so slow drift of the machine hits every method alike. Each repeat is its own row
in ``points.jsonl`` (``repeat`` = r, point id ``<point>/r<r>``). :func:`aggregate_repeats` collapses them when a
run is loaded (:func:`dflashbench.run.store.load_run`), so every analysis keeps seeing one row per point:

- every float metric (throughput, per-user tok/s, TTFT/TPOT/ITL percentiles, tau, energy, ...) is the mean
  over the repeats that finished ``ok``, with ``<metric>_sd`` (sample sd), ``<metric>_ci_lo`` and
  ``<metric>_ci_hi`` (95% t-interval, :func:`dflashbench.measure.stats.t_interval`) beside it and ``n_repeats``;
- ``num_requests``, ``num_errors`` and ``output_tokens`` are totals over those repeats;
- everything else (ids, text, ``extra``, ``num_graded`` / ``num_correct``) comes from the first repeat that
  finished: the representative whose requests the report's agreement and latency figures read. Graded counts
  are not summed because the repeats re-ask the same prompts: pooled, they would make the accuracy test
  look more certain than it is;
- a repeat that failed or is degraded stays in the frame as its own row, before the aggregated one, so the
  report lists it and ``--resume`` redoes it; the aggregated row is what analysis and ``compare`` read.

A run without repeats (no row with ``repeat`` > 0) loads unchanged: no new columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pandas as pd

from dflashbench.measure import stats
from dflashbench.types import PointKey, PointSummary

SUMMED = ("num_requests", "num_errors", "output_tokens")
# Every float figure of a point gets an interval: compare gates any numeric field by name.
METRICS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PointSummary) if str(f.type) == "float | None")
CI_SUFFIXES = ("_sd", "_ci_lo", "_ci_hi")
_KEY_FALLBACK = ("backend", "method", "workload", "category", "concurrency")


def base_point_id(point_id: str) -> str:
    """``reference:ar:synthetic:c1/r2`` -> ``reference:ar:synthetic:c1`` (:meth:`~dflashbench.types.PointKey.split_round`,
    for ids of any shape)."""
    return PointKey.split_round(point_id)[0]


def _group_keys(points: pd.DataFrame) -> pd.Series:
    """One key per point (its repeats share it): run id, the point id without its repeat suffix, category.
    Rows without a point id (hand-made frames) fall back to the point's coordinates."""
    def key(row) -> tuple:
        pid = row.get("point_id")
        where = base_point_id(str(pid)) if isinstance(pid, str) and pid else tuple(row.get(c) for c in _KEY_FALLBACK)
        return (row.get("run_id"), where, row.get("category"))

    return pd.Series([key(r) for r in points.to_dict("records")], index=points.index, dtype=object)


def _is_ok(frame: pd.DataFrame) -> pd.Series:
    if "status" not in frame.columns:
        return pd.Series(True, index=frame.index)
    return frame["status"].fillna("ok") == "ok"


def _repeat_order(group: pd.DataFrame) -> pd.DataFrame:
    if "repeat" not in group.columns:
        return group
    return group.assign(_r=pd.to_numeric(group["repeat"], errors="coerce").fillna(0)).sort_values(
        "_r", kind="stable").drop(columns="_r")  # fmt: skip


def _collapse(ok: pd.DataFrame) -> dict:
    """One row from a point's finished repeats (see the module docstring for which column gets what)."""
    row = dict(ok.iloc[0])
    for metric in METRICS:
        if metric not in ok.columns:
            continue
        found = stats.t_interval(ok[metric])
        row[metric] = None if found is None else found.mean
        row[f"{metric}_sd"] = None if found is None else found.sd
        row[f"{metric}_ci_lo"] = None if found is None else found.lo
        row[f"{metric}_ci_hi"] = None if found is None else found.hi
    for col in SUMMED:
        if col in ok.columns:
            row[col] = int(pd.to_numeric(ok[col], errors="coerce").fillna(0).sum())
    if "accepted_per_pos_rate" in ok.columns:
        rates = [tuple(r) for r in ok["accepted_per_pos_rate"] if isinstance(r, list | tuple) and r]
        if rates and len({len(r) for r in rates}) == 1:
            row["accepted_per_pos_rate"] = tuple(stats.mean_sd(col)[0] for col in zip(*rates, strict=True))
    row["n_repeats"] = len(ok)
    if "point_id" in ok.columns:
        row["repeat_point_ids"] = [str(p) for p in ok["point_id"]]
    return row


def aggregate_repeats(points: pd.DataFrame) -> pd.DataFrame:
    """One row per point (run, point id without repeat suffix, category): the mean of its finished repeats
    with ``<metric>_sd``, ``<metric>_ci_lo``, ``<metric>_ci_hi`` and ``n_repeats`` beside it; repeats not
    ``ok`` kept as their own rows just before it. Points appear in the order of their first row. A frame with
    no row of a repeat round after the first is returned as it is."""
    if points.empty or "repeat" not in points.columns:
        return points
    if not (pd.to_numeric(points["repeat"], errors="coerce").fillna(0) > 0).any():
        return points  # measured once (or only round 0 so far): nothing to collapse
    members: dict[tuple, list] = {}  # key -> row labels, in order of first appearance
    for label, key in _group_keys(points).items():
        members.setdefault(key, []).append(label)
    ok = _is_ok(points)
    rows: list[dict] = []
    for labels in members.values():
        group = _repeat_order(points.loc[labels])
        finished = group[ok[group.index]]
        rows += [dict(r) for _, r in group[~ok[group.index]].iterrows()]
        if not finished.empty:
            rows.append(_collapse(finished))
    out = pd.DataFrame.from_records(rows)
    for col in ("n_repeats", *(f"{m}{s}" for m in METRICS if m in points.columns for s in CI_SUFFIXES)):
        if col not in out.columns:
            out[col] = None
    return out


# -- paired speedup intervals ------------------------------------------------------------------------------
def rounds(raw: pd.DataFrame) -> list[int]:
    """The repeat rounds present among finished rows (``[0]`` for a run without repeats)."""
    if raw is None or raw.empty:
        return []
    col = raw["repeat"] if "repeat" in raw.columns else pd.Series(0, index=raw.index)
    return sorted({int(r) for r in pd.to_numeric(col, errors="coerce").fillna(0)})


def paired_speedups(table: pd.DataFrame, raw: pd.DataFrame, compute: Callable[[pd.DataFrame], pd.DataFrame],
                    key: Sequence[str], value: str = "speedup") -> pd.DataFrame:  # fmt: skip
    """``table`` (a speedup table computed from aggregated points) with ``<value>_ci_lo``, ``<value>_ci_hi``
    and ``<value>_n_pairs`` added: ``compute`` is run again on each repeat round's rows of ``raw`` alone, so
    each round gives one method-vs-baseline ratio measured in the same round (paired), and the interval is
    :func:`dflashbench.measure.stats.ratio_interval` over those ratios (t on log ratios). Rows with fewer than two
    rounds get no interval."""
    out = table.copy()
    lo, hi, n = f"{value}_ci_lo", f"{value}_ci_hi", f"{value}_n_pairs"
    out[lo], out[hi], out[n] = None, None, 0
    if table.empty or raw is None or raw.empty or len(rounds(raw)) < 2:
        return out
    repeat = pd.to_numeric(raw["repeat"], errors="coerce").fillna(0).astype(int)
    per_round: dict[tuple, dict[int, float]] = {}
    for r in rounds(raw):
        found = compute(raw[(repeat == r).to_numpy()])
        for rec in found.to_dict("records"):
            per_round.setdefault(_key(rec, key), {})[r] = rec.get(value)
    los, his, ns = [], [], []
    for rec in out.to_dict("records"):
        ratios = stats.finite(per_round.get(_key(rec, key), {}).values())
        found = stats.ratio_interval(ratios)
        los.append(None if found is None else found.lo)
        his.append(None if found is None else found.hi)
        ns.append(0 if found is None else found.n)
    return out.assign(**{lo: los, hi: his, n: ns})


def _key(rec: dict, key: Sequence[str]) -> tuple:
    out = []
    for k in key:
        v = rec.get(k)
        out.append(round(float(v), 9) if isinstance(v, float) else v)  # targets: float keys compared rounded
    return tuple(out)


# -- the sweep's closing lines -------------------------------------------------------------------------------
def summary_lines(raw: pd.DataFrame) -> list[str]:
    """What a repeated sweep prints at the end: per point (category "all") the throughput mean, 95% interval
    and sd/mean over its repeats, then each speculative method's single-stream speedup over AR with its paired
    interval."""
    from dflashbench.measure import analysis

    agg = aggregate_repeats(raw)
    if agg.empty or "n_repeats" not in agg.columns:
        return []
    agg = analysis.usable_points(agg[agg["category"] == "all"])
    lines = []
    for rec in agg.to_dict("records"):
        n = rec.get("n_repeats")
        mean, sd = rec.get("throughput_tok_per_s"), rec.get("throughput_tok_per_s_sd")
        lo, hi = rec.get("throughput_tok_per_s_ci_lo"), rec.get("throughput_tok_per_s_ci_hi")
        if mean is None or pd.isna(mean):
            continue
        spread = (f", 95% CI [{lo:.1f}, {hi:.1f}], sd/mean {sd / mean:.1%}"
                  if sd is not None and not pd.isna(sd) and mean else "")  # fmt: skip
        load = analysis.load_label(rec["concurrency"], rec.get("extra"))
        load = load if analysis.request_rate(rec.get("extra")) is not None else f"c={load}"  # a rate: "20/s"
        lines.append(f"repeats: {rec['method']} {rec['workload']} {load}: throughput "
                     f"{mean:.1f} tok/s over {int(n)} repeat(s){spread}")  # fmt: skip
    single = paired_speedups(analysis.single_stream_speedups(agg), raw, analysis.single_stream_speedups,
                             (*analysis.SETTING, "method"))  # fmt: skip
    for rec in single.to_dict("records"):
        if rec.get("speedup") is None or pd.isna(rec.get("speedup")):
            continue
        ci = rec.get("speedup_ci_lo")
        interval = (f", 95% CI [{ci:.2f}, {rec['speedup_ci_hi']:.2f}] over {rec['speedup_n_pairs']} paired rounds"
                    if ci is not None and not pd.isna(ci) else "")  # fmt: skip
        lines.append(f"repeats: {analysis.method_label(rec['method'])} single-stream speedup over AR "
                     f"({rec['workload']}): {rec['speedup']:.2f}x{interval}")  # fmt: skip
    return lines


def with_repeat_goodput(points: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    """``points`` with each repeated point's goodput (``extra["goodput"]``) the mean over its finished repeats.

    A repeated point's row (:func:`dflashbench.measure.repeats.aggregate_repeats`) holds the mean of every numeric field
    but the first repeat's ``extra``, so its goodput would be one repeat's beside a throughput averaged over all;
    the repeats' own rows (``raw``: ``Run.repeat_points``, listed in ``repeat_point_ids``) give the mean.
    """
    from dflashbench.measure.analysis import goodput_of

    if points.empty or raw is None or raw.empty or "repeat_point_ids" not in points.columns:
        return points
    by_id = {(str(r.get("run_id")), str(r.get("point_id")), str(r.get("category"))): goodput_of(r.get("extra"))
             for r in raw.to_dict("records")}  # fmt: skip
    extras = []
    for rec in points.to_dict("records"):
        extra, ids = rec.get("extra"), rec.get("repeat_point_ids")
        gp = goodput_of(extra)
        found = [by_id.get((str(rec.get("run_id")), str(i), str(rec.get("category")))) for i in ids] \
            if gp and isinstance(ids, list) and len(ids) > 1 else []
        found = [f for f in found if f and f.get("slo") == gp.get("slo") and f.get("goodput_req_per_s") is not None]
        if len(found) > 1:
            extra = {**extra, "goodput": {**gp, "goodput_req_per_s": _mean(found, "goodput_req_per_s"),
                                          "good_share": _mean(found, "good_share"), "repeats": len(found)}}  # fmt: skip
        extras.append(extra)
    return points.assign(extra=extras)


def _mean(rows: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def matched_interactivity_ci(df: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    """The band's matched-interactivity table (``df``) with each row's paired interval over the repeat rounds of
    ``raw`` (every round's own rows): each round's frontiers read at the same per-user tok/s as the table's rows."""
    from dflashbench.measure.analysis import SETTING, matched_interactivity_speedups

    targets = sorted({float(v) for v in df["per_user_tok_per_s"].dropna()}) if not df.empty else []
    return paired_speedups(df, raw, lambda sub: matched_interactivity_speedups(sub, targets),
                           (*SETTING, "method", "per_user_tok_per_s"))  # fmt: skip
