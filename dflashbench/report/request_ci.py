"""Intervals from the requests: a 95 % interval on every speedup of a run without repeats.

A single-stream speedup is ``mean TPOT(AR) / mean TPOT(method)`` at c=1; a matched-concurrency one is the ratio
of the pooled per-user rates, ``sum(n - 1) / sum(decode time)``, at the same concurrency. Both are ratios of
sums over a point's requests, so a bootstrap over requests, paired by prompt (both methods ran the same prompts),
gives their interval (:func:`dflashbench.measure.noise.ratio_ci`). Per-token figures use only requests whose timing was
observable. Where the run has repeats, their interval (:mod:`.intervals`) is kept instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from dflashbench.measure import metrics, noise, observability
from dflashbench.measure.analysis import SETTING
from dflashbench.measure.request_index import index_of
from dflashbench.types import RequestResult

REPEATS, REQUESTS = "repeats", "requests"  # which interval a row shows (``speedup_ci_kind``)
# The requests' own ratio reproduces the point's figure when both read the same requests (rounding only). A
# figure computed from part of them (a steady window) is another statistic: the requests' spread placed around
# it would be too narrow for that part, so no interval is drawn from them (``speedup_ci_why`` says so).
MAX_MISMATCH = 0.01
NO_REQUESTS = "no stored requests and no repeats"
SUBSET = ("the figure rests on part of the point's requests, so their interval is not its own (the requests give "
          "{full:.2f}×)")
TOO_FEW = "fewer than 2 requests with observable timing on a side"


def _terms(reqs: Iterable[RequestResult], kind: str) -> dict[str, tuple[float, float]]:
    """request id -> (num, den) of the side's rate: single-stream 1 / TPOT; matched (n - 1) / decode time. A
    request id met twice (a point's repeats) keeps its last."""
    out = {}
    for r in reqs:
        if r.warmup or not r.ok or r.output_tokens <= 1 or observability.timing_observable(r) is False:
            continue
        decode = metrics.decode_s(r)
        if decode is None or decode <= 0:
            continue
        out[r.request_id] = (1.0, decode / (r.output_tokens - 1)) if kind == "single" else (r.output_tokens - 1.0,
                                                                                             decode)  # fmt: skip
    return out


def _point_requests(points: pd.DataFrame, requests: pd.DataFrame, setting: dict, method: str,
                    concurrency: int) -> list[RequestResult]:  # fmt: skip
    """The measured requests of the setting's points of ``method`` at ``concurrency`` (every repeat's), in stored
    order (:mod:`dflashbench.measure.request_index`)."""
    mask = (points["method"] == method) & (points["concurrency"] == concurrency)
    for key in SETTING:
        mask &= points[key] == setting[key]
    ids = {str(i) for i in points.loc[mask, "point_id"]}
    index = index_of(requests)
    return [r for run_id, point_id in index.by_point if point_id in ids
            for r in index.of(run_id, point_id, str(setting.get("category", "all")))]  # fmt: skip


def with_request_ci(df: pd.DataFrame, points: pd.DataFrame, requests: pd.DataFrame, kind: str,
                    baseline: str = "ar") -> pd.DataFrame:  # fmt: skip
    """``df`` (a single-stream or matched-concurrency speedup table) with ``speedup_ci_lo/_hi`` filled from the
    requests where repeats gave none, ``speedup_ci_kind`` saying which, and ``speedup_ci_why`` why a row has
    none."""
    if df.empty:
        return df
    df = df.copy()
    for col in ("speedup_ci_lo", "speedup_ci_hi", "speedup_ci_kind", "speedup_ci_why"):
        if col not in df.columns:
            df[col] = None
    df["speedup_ci_why"] = df["speedup_ci_why"].astype(object)
    if requests.empty or "point_id" not in points.columns or "point_id" not in requests.columns:
        for i, row in df.iterrows():
            if pd.isna(row["speedup_ci_lo"]) and pd.notna(row.get("speedup")):
                df.at[i, "speedup_ci_why"] = NO_REQUESTS
            elif pd.notna(row["speedup_ci_lo"]):
                df.at[i, "speedup_ci_kind"] = REPEATS
        return df
    df["speedup_ci_lo"] = df["speedup_ci_lo"].astype(object)
    df["speedup_ci_hi"] = df["speedup_ci_hi"].astype(object)
    for i, row in df.iterrows():
        if pd.notna(row["speedup_ci_lo"]) and pd.notna(row["speedup_ci_hi"]):
            df.at[i, "speedup_ci_kind"] = REPEATS
            continue
        if pd.isna(row.get("speedup")):
            continue
        setting, c = {k: row[k] for k in SETTING}, 1 if kind == "single" else int(row["concurrency"])
        sides = [_terms(_point_requests(points, requests, setting, m, c), kind) for m in (baseline, row["method"])]
        found, full = noise.ratio_ci(*sides), noise.ratio_of_sums(*sides)
        if found is None or full is None:
            df.at[i, "speedup_ci_why"] = TOO_FEW if any(sides) else NO_REQUESTS
            continue
        if abs(float(row["speedup"]) / full - 1) > MAX_MISMATCH:
            df.at[i, "speedup_ci_why"] = SUBSET.format(full=full)
            continue
        df.at[i, "speedup_ci_lo"], df.at[i, "speedup_ci_hi"] = found  # the same requests' own interval, unmoved
        df.at[i, "speedup_ci_kind"] = REQUESTS
    return df


def with_request_cis(single: pd.DataFrame, matched: pd.DataFrame, points: pd.DataFrame, requests: pd.DataFrame,
                     baseline: str = "ar") -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """The single-stream and matched-concurrency tables with request intervals where repeats gave none, and
    their interval text."""
    from dflashbench.report.intervals import with_text

    return (with_text(with_request_ci(single, points, requests, "single", baseline)),
            with_text(with_request_ci(matched, points, requests, "matched", baseline)))  # fmt: skip


def clear(lo: object, hi: object) -> bool:
    """Whether an interval excludes 1.0 (a win or a loss, not "no clear difference")."""
    return lo is not None and hi is not None and pd.notna(lo) and pd.notna(hi) and not (lo <= 1.0 <= hi)
