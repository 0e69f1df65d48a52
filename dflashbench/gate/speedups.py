"""The speedups ``compare`` gates: each method's per-user rate over another's at the same load, in one run.

A speedup is what a DFlash user guards (the verdict leads with it): every method over AR, and DFlash over every
other method (:func:`gated_pairs`; with AR, EAGLE-3 and DFlash: DFlash and EAGLE-3 over AR and DFlash over EAGLE-3),
at each concurrency (or arrival rate) both were measured at, as the ratio of the pooled per-user
rates (``per_user_tok_per_s_pooled``: tokens after the first over decode time, summed over the point's requests;
the matched-concurrency speedup of :func:`dflashbench.measure.analysis.matched_concurrency_speedups`). Its two
points were measured in the same run, so whatever the machine did between the runs cancels in it; what is left
is the drift between the two points' moments (docs/metrics.md, "The noise rule"), least where the sweep
interleaved the methods. A one-method regression moves that method's speedups, whatever the machine did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from dflashbench.measure.analysis import BASELINE, INTERACTIVITY, method_label, method_sort_key
from dflashbench.measure.readings import pivot_of

SPEEDUP = "speedup"  # the gated metric's name (--max-drop speedup=5%)


def gated_pairs(methods) -> list[tuple[str, str]]:
    """(method, over) of the speedups gated among ``methods``: each method over AR, then DFlash (DFlash2 without it)
    over each other method but AR. N methods besides AR give N + (N - 1) pairs a load, not every pair (N(N+1)/2):
    each more speedup widens the family every gated figure is corrected in, and so what a gate can see."""
    ms = sorted(set(methods), key=method_sort_key)
    others = [m for m in ms if m != BASELINE]
    pivot = pivot_of(others)
    return ([(m, BASELINE) for m in others] if BASELINE in ms else []) + [(pivot, m) for m in others if m != pivot
                                                                          and pivot is not None]  # fmt: skip


@dataclass(frozen=True)
class Speedup:
    """One speedup of one run: ``method``'s point over ``over``'s at the same backend, workload, category and
    load; ``value`` their per-user rates' ratio (``None`` where either is missing)."""

    key: tuple  # (backend, "dflash/ar", workload, category, load): compare's key, the pair in the method's place
    method: pd.Series
    over: pd.Series
    value: float | None

    @property
    def label(self) -> str:
        """``"DFlash vs AR speedup at c=2"``"""
        return speedup_label(self.key)


def pair_name(method: str, over: str) -> str:
    return f"{method}/{over}"


def load_at(load: str) -> str:
    """``"c=2"`` for a concurrency, the load's own text otherwise (an arrival rate, a trace speed)."""
    return f"c={load}" if load.replace(".", "", 1).isdigit() else load


def speedup_label(key: tuple) -> str:
    method, over = str(key[1]).split("/", 1)
    return f"{method_label(method)} vs {method_label(over)} speedup at {load_at(str(key[-1]))}"


def _rate(row: pd.Series) -> float | None:
    v = _number(row, INTERACTIVITY)
    return v if v is not None and v > 0 else None


def speedups(points: Mapping[tuple, pd.Series]) -> dict[tuple, Speedup]:
    """Every gated pair's speedup among ``points`` (compare's key -> row, finished points only)."""
    out = {}
    pairs = gated_pairs(str(key[1]) for key in points)
    for key, row in points.items():
        for method, over in pairs:
            if str(key[1]) != method:
                continue
            other = points.get((key[0], over, *key[2:]))
            if other is None:
                continue
            a, b = _rate(row), _rate(other)
            sp_key = (key[0], pair_name(method, over), *key[2:])
            out[sp_key] = Speedup(sp_key, row, other, a / b if a is not None and b is not None else None)
    return out


def repeated(sp: Speedup) -> bool:
    """Whether either point of ``sp`` holds several repeats (``--repeats``): its noise is then the repeats'."""
    return any((_number(row, "n_repeats") or 1) > 1 for row in (sp.method, sp.over))


def repeats_interval(sp: Speedup) -> tuple[float, float] | None:
    """The speedup's 95 % interval from its two points' repeat intervals (``<rate>_ci_lo`` / ``_ci_hi``), their
    log half-widths added in quadrature (the rounds' drift is in each); ``None`` where a point has none."""
    if sp.value is None:
        return None
    halves = []
    for row in (sp.method, sp.over):
        value, lo, hi = (_number(row, f"{INTERACTIVITY}{s}") for s in ("", "_ci_lo", "_ci_hi"))
        if not (value and lo and hi and lo > 0 and hi > 0):
            return None
        halves.append(max(math.log(value / lo), math.log(hi / value), 0.0))
    half = math.hypot(*halves)
    return sp.value * math.exp(-half), sp.value * math.exp(half)


def _number(row: pd.Series, name: str) -> float | None:
    try:
        v = float(row.get(name))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
