"""Every speedup the verdict decides on, with the interval it is decided on (docs/metrics.md, "The noise rule").

A speedup table (single-stream or matched concurrency, with the requests' or the repeats' interval already set by
:mod:`.request_ci` and :mod:`.intervals`) gains, per row:

- ``decision_lo`` / ``decision_hi``: the decision interval. With repeats, the repeats' interval (it holds the
  drift between rounds). Without, the requests' interval widened by the machine's drift between the two points
  (:func:`dflashbench.measure.drift.drift_between`, from the run's speed-probe readings), as
  :func:`dflashbench.measure.noise.decision_interval` does it; a run from before the probe keeps the requests'
  interval and says drift is not in it;
- ``decision``: :func:`dflashbench.measure.noise.decide` of it (faster, slower, not distinguishable, no interval);
- ``covers``: what the interval holds, in the words the reader sees beside it;
- ``why``: where there is no interval, why (no stored requests, a figure from part of them, too few).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from dflashbench.measure import drift, noise
from dflashbench.measure.analysis import SETTING, usable_points
from dflashbench.report.request_ci import REPEATS, REQUESTS
from dflashbench.types import ProbeReading

REQUESTS_ONLY = "requests only: drift not measured"
ACROSS_RUNS = "requests only: the two points are in different runs, whose drift is not measured here"
COLUMNS = ("decision_lo", "decision_hi", "decision", "covers", "why")


def repeats_covers(n: int) -> str:
    return f"paired repeats ({n} rounds): the drift between rounds included"


def drift_covers(sd_log: float) -> str:
    return f"requests and the machine's drift between the points (speed probe ±{drift.pct(sd_log)})"


def _point(points: pd.DataFrame, setting: dict, method: str, concurrency: int) -> tuple[str, str] | None:
    """(run_id, point_id) of a setting's point, the last measured (as :func:`usable_points` keeps it)."""
    mask = (points["method"] == method) & (points["concurrency"] == concurrency)
    for key in SETTING:
        mask &= points[key] == setting[key]
    rows = points[mask]
    if rows.empty or "point_id" not in rows.columns:
        return None
    rec = rows.iloc[-1]
    return str(rec.get("run_id")), str(rec["point_id"])


def point_drift(probes: Mapping[str, Sequence[ProbeReading]], a: tuple[str, str] | None,
                b: tuple[str, str] | None) -> tuple[float | None, str]:  # fmt: skip
    """The machine's 1-sd drift (log) between two points of a run and the words for what an interval widened by
    it covers; ``(None, why)`` where it is not measured. Where a run has CPU and GPU probes, the larger drift
    (either can move a point)."""
    if a is None or b is None:
        return None, REQUESTS_ONLY
    if a[0] != b[0]:
        return None, ACROSS_RUNS
    readings = probes.get(a[0]) or ()
    found = [d for kind in sorted({r.kind for r in readings})
             if (d := drift.drift_between(readings, a[1], b[1], kind)) is not None]  # fmt: skip
    if not found:
        return None, REQUESTS_ONLY
    sd = max(found)
    return sd, drift_covers(sd)


def decide_row(value: float | None, ci: tuple[float, float] | None, kind: str | None, n_pairs: int,
               drift_sd: float | None, drift_words: str) -> tuple[tuple[float, float] | None, str, str]:  # fmt: skip
    """(decision interval, decision, what it covers) of one ratio."""
    if ci is None or value is None:
        return None, noise.NO_INTERVAL, ""
    if kind == REPEATS:
        return ci, noise.decide(ci), repeats_covers(n_pairs)
    interval = noise.decision_interval(value, ci, drift_sd)
    return interval, noise.decide(interval), drift_words


def _num(v) -> float | None:
    v = pd.to_numeric(v, errors="coerce")
    return None if pd.isna(v) else float(v)


def with_decisions(df: pd.DataFrame, points: pd.DataFrame, probes: Mapping[str, Sequence[ProbeReading]],
                   kind: str, baseline: str = "ar") -> pd.DataFrame:  # fmt: skip
    """``df`` (``kind`` "single" or "matched") with :data:`COLUMNS` (module docstring)."""
    if df.empty:
        return df.assign(**{c: None for c in COLUMNS})
    usable = usable_points(points) if not points.empty else points
    out = {c: [] for c in COLUMNS}
    for rec in df.to_dict("records"):
        value = _num(rec.get("speedup"))
        lo, hi = _num(rec.get("speedup_ci_lo")), _num(rec.get("speedup_ci_hi"))
        ci = (lo, hi) if lo is not None and hi is not None else None
        ci_kind = rec.get("speedup_ci_kind") or (REPEATS if ci is not None else None)
        setting = {k: rec[k] for k in SETTING}
        c = 1 if kind == "single" else int(rec["concurrency"])
        sd, words = (None, "")
        if ci is not None and ci_kind == REQUESTS and not usable.empty:
            sd, words = point_drift(probes, _point(usable, setting, rec["method"], c),
                                    _point(usable, setting, baseline, c))  # fmt: skip
        interval, decision, covers = decide_row(value, ci, ci_kind, int(_num(rec.get("speedup_n_pairs")) or 0), sd,
                                                words or REQUESTS_ONLY)  # fmt: skip
        why = rec.get("speedup_ci_why") if interval is None else None
        out["decision_lo"].append(None if interval is None else interval[0])
        out["decision_hi"].append(None if interval is None else interval[1])
        out["decision"].append(decision if value is not None else None)
        out["covers"].append(covers or None)
        out["why"].append(why if isinstance(why, str) else ("no interval" if interval is None and value else None))
    # what the tables show: the interval decided on, and the decision beside it
    texts = [None if lo is None else f"[{lo:.2f}×, {hi:.2f}×]" for lo, hi in zip(out["decision_lo"], out["decision_hi"],
                                                                                 strict=True)]  # fmt: skip
    return df.assign(**out, speedup_ci_text=texts)


TTFT_COLUMNS = ("backend", "model", "workload", "method", "concurrency", "method_p50_s", "baseline_p50_s", "ratio",
                "decision_lo", "decision_hi", "decision", "covers")  # fmt: skip


def _point_terms(requests: pd.DataFrame, point: tuple[str, str] | None, term) -> dict[str, tuple[float, float]]:
    """request id -> ``term(request)`` (a (numerator, denominator) pair, or None to skip) over the point's measured,
    successful requests."""
    from dflashbench.measure.request_index import index_of

    if point is None:
        return {}
    return {r.request_id: t for r in index_of(requests).of(point[0], point[1]) if (t := term(r)) is not None}


def _ttft_term(r) -> tuple[float, float] | None:
    """(TTFT, 1): the mean TTFT is a ratio of sums, as :func:`noise.ratio_ci` brackets."""
    from dflashbench.measure import metrics

    t = metrics.ttft_s(r)
    return None if t is None else (t, 1.0)


def _throughput_term(r) -> tuple[float, float] | None:
    """(tokens, time in flight): a closed loop's throughput is streams x tokens / time in flight, so at one
    concurrency the ratio of two points' throughputs is the ratio of these sums (the streams cancel)."""
    from dflashbench.measure import metrics

    t = metrics.e2e_s(r)
    return None if not t else (float(r.output_tokens), t)


def pair_readings(points: pd.DataFrame, requests: pd.DataFrame, probes: Mapping[str, Sequence[ProbeReading]],
                  term, baseline: str = "ar", methods: Sequence[str] | None = None) -> pd.DataFrame:  # fmt: skip
    """Per setting (category "all"), method and concurrency both it and ``baseline`` were measured at: the ratio of
    the two points' ``term`` sums over their requests, its decision interval (paired by prompt, widened by the
    drift between the points) and decision; ``method_row`` / ``baseline_row`` the points themselves."""
    usable = usable_points(points) if not points.empty else points
    rows = []
    alls = usable[usable["category"] == "all"] if not usable.empty else usable
    for key, group in alls.groupby(["backend", "model", "workload"], sort=True) if not alls.empty else []:
        setting = {**dict(zip(("backend", "model", "workload"), key, strict=True)), "category": "all"}
        base = group[group["method"] == baseline]
        chosen = methods if methods is not None else sorted(set(group["method"]) - {baseline, "ar"})
        for method in [m for m in chosen if m in set(group["method"])]:
            for c in sorted(set(group.loc[group["method"] == method, "concurrency"]) & set(base["concurrency"])):
                a, b = _point(group, setting, method, int(c)), _point(group, setting, baseline, int(c))
                sides = [_point_terms(requests, p, term) for p in (b, a)]
                ratio, ci = noise.ratio_of_sums(*sides), noise.ratio_ci(*sides)
                sd, words = point_drift(probes, a, b)
                interval = noise.decision_interval(ratio, ci, sd)
                mine, theirs = (group[(group["method"] == m) & (group["concurrency"] == c)].iloc[-1].to_dict()
                                for m in (method, baseline))  # fmt: skip
                rows.append({**{k: setting[k] for k in ("backend", "model", "workload")}, "method": method,
                             "baseline": baseline, "concurrency": int(c), "ratio": ratio,
                             "decision_lo": None if interval is None else interval[0],
                             "decision_hi": None if interval is None else interval[1],
                             "decision": noise.decide(interval), "covers": words if interval else None,
                             "method_row": mine, "baseline_row": theirs})  # fmt: skip
    return pd.DataFrame(rows, columns=["backend", "model", "workload", "method", "baseline", "concurrency", "ratio",
                                       "decision_lo", "decision_hi", "decision", "covers", "method_row",
                                       "baseline_row"])  # fmt: skip


def ttft_readings(points: pd.DataFrame, requests: pd.DataFrame, probes: Mapping[str, Sequence[ProbeReading]],
                  baseline: str = "ar") -> pd.DataFrame:  # fmt: skip
    """Per setting, speculative method and concurrency both were measured at (category "all"): each side's TTFT
    p50 (the points' own), the ratio of mean TTFTs over the points' requests, its decision interval (requests
    paired by prompt, widened by the drift between the points) and decision (above 1: a longer wait)."""
    found = pair_readings(points, requests, probes, _ttft_term, baseline,
                          methods=None if points.empty else sorted(set(points["method"]) - {baseline}))  # fmt: skip
    if found.empty:
        return pd.DataFrame(columns=list(TTFT_COLUMNS))
    return found.assign(method_p50_s=[_num(r.get("ttft_s_p50")) for r in found["method_row"]],
                        baseline_p50_s=[_num(r.get("ttft_s_p50")) for r in found["baseline_row"]])[list(TTFT_COLUMNS)]


def throughput_readings(points: pd.DataFrame, requests: pd.DataFrame, probes: Mapping[str, Sequence[ProbeReading]],
                        baseline: str = "ar", methods: Sequence[str] | None = None) -> pd.DataFrame:  # fmt: skip
    """Each method's throughput over ``baseline``'s at the same concurrency, decided (:func:`_throughput_term`)."""
    return pair_readings(points, requests, probes, _throughput_term, baseline, methods)
