"""A family of tests corrected together: Westfall and Young's step-down min-p rule over the tests' p-values in the
same random draws of their null, and those draws for tests whose null is resampled requests plus a drift.

Why not Holm's rule: Holm holds the family-wise error rate whatever the tests' dependence, by treating every test
as if it could fail alone. The figures a gate tests move together: a point's throughput and its pooled per-user
rate are read from the same requests, and a speedup from two points' requests. Drawn from their joint null (the
same resample of the requests for every test; Westfall & Young 1993, *Resampling-Based Multiple Testing*, ch. 2,
step-down min-p), such tests count as about one, and the family's level is what their dependence allows, never
below Holm's where the tests are independent. ``history`` (:mod:`dflashbench.measure.changepoints`) uses the rule
over random orders of its runs; ``compare`` (:mod:`dflashbench.gate.compare_judge`) over draws of its tests' nulls.

Pure numpy, deterministic (the draws' seed is fixed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Joint draws of a compare's tests under no change: enough for the family's level (near 0.05 / m) to rest on
# hundreds of draws below it.
DRAWS = 50_000


def step_down(p_orders: Sequence[np.ndarray | None], alpha: float) -> tuple[list[float | None], float | None]:
    """Westfall and Young's step-down min-p rule over a family: the level each test passed at, ``None`` for
    those that did not pass and those not made. ``p_orders[i]``: test ``i``'s p-value as observed (first), then in
    each of the same draws of the family's null (for ``history``, the runs shuffled as a whole, so the orders keep
    the series' correlation). Like Holm's rule it holds the chance of any false finding in the family at
    ``alpha``; unlike it, tests that move together (a method's rate and throughput) count as about one, not two.
    Step ``i`` compares the ``i``-th smallest p-value with the ``alpha`` quantile of the smallest p-value among the
    tests not yet passed; the level it passed at is that quantile (Holm's ``alpha / (m - i)`` where the tests are
    independent). Also returns the first step's level (the strictest, what a change alone in the family must
    reach)."""
    p_screen = [None if p is None else float(p[0]) for p in p_orders]
    made = [i for i, p in enumerate(p_screen) if p is not None]
    order = sorted(made, key=lambda i: p_screen[i])
    levels: list[float | None] = [None] * len(p_screen)
    if not order:
        return levels, None
    smallest = np.full(len(p_orders[order[0]]), np.inf)
    floors, first = {}, None
    for i in reversed(order):  # the smallest p-value over each tail of the order, in every draw
        smallest = np.minimum(smallest, p_orders[i])
        floors[i] = smallest.copy()
    for i in order:
        ranked = np.sort(floors[i])
        k = int(math.floor(alpha * len(ranked) + 1e-9))  # at most this many draws at or below the level
        distinct = np.unique(ranked[:k]) if k >= 1 else np.zeros(0)
        within = distinct[np.searchsorted(ranked, distinct * (1 + 1e-9), side="right") <= k]
        level = float(within.max()) if len(within) else 0.0
        first = level if first is None else first
        if p_screen[i] > level * (1 + 1e-9):
            break
        levels[i] = level
    return levels, first


def worse_shares(values: np.ndarray, worse: str) -> np.ndarray:
    """Each draw's p-value among ``values`` (one test's draws under no change, log ratios NEW / BASE): the share of
    the draws at least as far the ``worse`` way ("drop": as low or lower; "rise": as high or higher)."""
    s = np.asarray(values, dtype=float) * (1.0 if worse == "drop" else -1.0)
    return np.searchsorted(np.sort(s), s, side="right") / len(s)


def drift_spread(df: float | None, draws: int, rng: np.random.Generator) -> np.ndarray:
    """A drift's standardized draws: Student-t with ``df`` degrees of freedom (a term read from few runs), normal
    where ``None``."""
    if df is not None and math.isfinite(df):
        return rng.standard_t(df, draws)
    return rng.standard_normal(draws)


def null_draws(null: np.ndarray, pick: np.ndarray, drift_sd: float, spread: np.ndarray) -> np.ndarray:
    """One test's draws under no change: its resampled requests' deviation in draw ``pick[j]`` (the same resample
    index in every test of the family, so tests on the same requests keep their dependence) plus a drift of
    ``drift_sd`` (log, 1 sd) times ``spread`` (:func:`drift_spread`): one spread for the tests whose drift is one
    (a point's figures: the same moment, launch and server), its own for each other test, the drifts' dependence
    between them not modelled, which leaves the level where independent tests put it."""
    base = np.asarray(null, dtype=float)[pick % len(null)]
    return base + drift_sd * spread if drift_sd > 0 else base
