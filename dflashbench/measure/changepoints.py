"""Where a series of runs changes level, and how sure that is: the maths of ``dflashbench history``.

A series is one gated figure of ``compare`` over many runs, on the log scale (a speedup, a rate, tau, a p99
latency: all positive, and a move of the same share weighs the same at any level). Each run brings its own
noise: the sd of its figure from its own intervals (the noise rule of docs/metrics.md: the repeats' rounds, or
the requests and the machine's drift). The method, in four steps:

1. **Noise.** Run *i* has variance ``s_i^2 + tau^2``: its own ``s_i^2`` (from its own intervals; floored at half
   the series' median, so that no run whose few rounds happened to agree outweighs the rest), plus ``tau^2``, the
   run-to-run noise its own intervals do not hold (a server launch, the machine's mood on that night), read from
   the series itself: from the mean of the squared successive differences once the largest 20 % of them are left
   out (so that one step or one wild run barely moves it), less the runs' own share (:func:`excess_variance`). A run far off both runs beside it, the same way, is **wild**
   (:func:`wild_runs`): it is named, and weighed as far off as it is.
2. **Candidates: PELT** (Killick, Fearnhead & Eckley 2012, J. Am. Stat. Assoc. 107:1590) on the weighted cost
   ``sum w_i (y_i - mean_w)^2``, ``w_i = 1 / var_i`` (minus twice the Gaussian log-likelihood of a segment's
   level), each change costing a penalty, by default :data:`PENALTY` ``= 2 ln n`` (BIC: a change adds a level
   and a location), segments of at least :data:`MIN_SEGMENT` runs, so **one run alone is never a change**.
   With equal weights this is ruptures' ``Pelt(model="l2")``; ``tests/measure/test_changepoints.py`` checks
   it against ruptures' own results on the same series (a fixture made by ruptures 1.1.10, which is not a
   dependency of dflashbench: it has no weighted cost, and this is 60 lines).
3. **Confidence: a p-value per change**, as Apache Otava (formerly Hunter) prunes E-divisive's candidates: each
   change is tested on the runs between its neighbours, and the weakest is dropped and the rest tested again
   until every one left has ``p <= alpha`` (:data:`ALPHA` = 0.001, Otava's default). The test statistic is
   the drop of the weighted cost the split gives (a weighted two-sample z^2), **with the one run that matters
   most left out**, so that no single run decides a change; its null is the largest drop any split of those runs
   gives in :data:`N_SIMS` simulated series of the same runs' noise with no change, ``tau`` estimated again from
   each: the p-value pays for having searched every split and for ``tau`` being read from the series. (It
   does not pay for ``tau`` being under-read by chance: with 14 runs whose own intervals miss most of the
   run-to-run noise, about 1 % of unchanged series show a change or a trend (4 of 380 simulated), against none
   of 380 where the runs' own intervals hold it; ``tests/measure/test_changepoints.py``.) Each change gets its **size** (the two
   levels' ratio with a 95 % interval) and the **interval of its first run**: the splits whose cost is within the
   chi-square(1) 95 % quantile (3.84) of the best (a profile-likelihood set; approximate, as change-point
   locations are not regular parameters).
4. **Drift**: a slope per run on the log scale, weighted least squares, tested the same way (simulated null).
   Where one straight line explains the whole series better than its steps (penalised cost, the slope paying
   the same penalty as one change), the drift is reported as a **trend with its slope**, not as steps.

Everything is pure numpy and deterministic (a fixed seed per series).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ALPHA = 0.001  # Apache Otava's default significance for a change point (apache/otava README, "p-value")
MIN_SEGMENT = 2  # runs; one run is never a level of its own
N_SIMS = 10_000
CHI2_1_95 = 3.841459  # 95 % quantile of chi-square with 1 degree of freedom
_OWN_FLOOR = 0.5  # a run's own variance is at least this share of the series' median own variance


def penalty(n: int) -> float:
    """PELT's default penalty per change for ``n`` runs: ``2 ln n`` (BIC; a change adds a level and a
    location), in the weighted cost's units (chi-square)."""
    return 2.0 * math.log(max(n, 2))


PENALTY = "2 ln n (BIC)"


# -- segment costs -------------------------------------------------------------------------------------------------
class _Cumulative:
    """Prefix sums of ``w``, ``w y`` and ``w y^2`` along the last axis: any segment's weighted cost in O(1)."""

    def __init__(self, y: np.ndarray, w: np.ndarray, squares: bool = True):
        def prefix(v: np.ndarray) -> np.ndarray:
            out = np.zeros((*v.shape[:-1], v.shape[-1] + 1))
            np.cumsum(v, axis=-1, out=out[..., 1:])
            return out

        self.w, self.wy = prefix(w), prefix(w * y)
        self.wyy = prefix(w * y * y) if squares else None

    def sums(self, a, b):
        a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))  # a split point against a segment's ends
        return self.w[..., b] - self.w[..., a], self.wy[..., b] - self.wy[..., a], self.wyy[..., b] - self.wyy[..., a]

    def cost(self, a, b):
        """``sum w (y - mean_w)^2`` over ``[a, b)``."""
        sw, swy, swyy = self.sums(a, b)
        return swyy - swy * swy / sw

    def mean(self, a, b):
        sw, swy, _ = self.sums(a, b)
        return swy / sw


def segment_cost(y: Sequence[float], w: Sequence[float], a: int, b: int) -> float:
    """The weighted cost of runs ``[a, b)``: ``sum w_i (y_i - mean_w)^2``."""
    return float(_Cumulative(np.asarray(y, float), np.asarray(w, float)).cost(a, b))


def pelt(y: Sequence[float], w: Sequence[float] | None = None, pen: float | None = None,
         min_size: int = MIN_SEGMENT) -> list[int]:  # fmt: skip
    """The changes (indices where a new level starts) minimising the weighted cost plus ``pen`` per change, every
    segment at least ``min_size`` long: PELT (exact, pruned optimal partitioning)."""
    y_arr = np.asarray(y, dtype=float)
    n = len(y_arr)
    if n < 2 * min_size:
        return []
    w_arr = np.ones(n) if w is None else np.asarray(w, dtype=float)
    beta = penalty(n) if pen is None else float(pen)
    cum = _Cumulative(y_arr, w_arr)
    best = np.full(n + 1, np.inf)
    best[0] = -beta  # F(0): the first segment pays no change
    last = np.zeros(n + 1, dtype=int)
    admissible = np.zeros(0, dtype=int)
    pending: list[tuple[int, np.ndarray]] = []  # (time from which it holds, starts pruned)
    for t in range(min_size, n + 1):
        s_new = t - min_size
        if s_new == 0 or s_new >= min_size:
            admissible = np.append(admissible, s_new)
        while pending and pending[0][0] <= t:
            admissible = np.setdiff1d(admissible, pending.pop(0)[1], assume_unique=True)
        totals = best[admissible] + cum.cost(admissible, t) + beta
        i = int(np.argmin(totals))
        best[t], last[t] = totals[i], admissible[i]
        # PELT's pruning (Killick et al.'s condition, K = 0): a start s with F(s) + C(s, t) > F(t) is never the
        # best start at any T from which t itself may start a segment (T >= t + min_size), since
        # C(s, T) >= C(s, t) + C(t, T); before then t is not admissible and s must stay
        pruned = admissible[totals - beta > best[t] + 1e-12 * abs(best[t])]
        if len(pruned):
            pending.append((t + min_size, pruned))
    changes, t = [], n
    while t > 0:
        t = int(last[t])
        if t > 0:
            changes.append(t)
    return sorted(changes)


# -- noise ---------------------------------------------------------------------------------------------------------
def own_variance(own_sd: Sequence[float | None]) -> np.ndarray:
    """Each run's own variance (log scale), floored at :data:`_OWN_FLOOR` of the series' median; a run without
    one gets the median."""
    vals = np.array([np.nan if s is None or not math.isfinite(s) else float(s) ** 2 for s in own_sd])
    known = vals[np.isfinite(vals)]
    med = float(np.median(known)) if len(known) else 0.0
    vals[~np.isfinite(vals)] = med
    return np.maximum(vals, _OWN_FLOOR * med)


_TRIM = 0.2  # the share of the largest successive differences left out of the noise estimate (a step, a wild run)


def _trimmed_chi2_mean(trim: float = _TRIM) -> float:
    """The mean of chi-square(1) below its ``1 - trim`` quantile: E[X; X <= q] = P(chi-square(3) <= q)."""
    from statistics import NormalDist

    q = NormalDist().inv_cdf(1 - trim / 2) ** 2
    below3 = math.erf(math.sqrt(q / 2)) - math.sqrt(2 * q / math.pi) * math.exp(-q / 2)
    return below3 / (1 - trim)


def excess_variance(y: np.ndarray, own_var: np.ndarray) -> np.ndarray:
    """``tau^2`` along the last axis of ``y`` (one series, or many simulated ones): the run-to-run variance beyond
    the runs' own. A successive difference ``d_i`` has variance ``v_i + v_{i+1} + 2 tau^2``; the mean of the
    squared differences, once its largest :data:`_TRIM` share is left out (a step or a wild run makes one or two
    large differences, which the trimming drops), is chi-square(1)'s trimmed mean times that variance; ``tau^2``
    is what is left beyond the runs' own variances (0 where they explain the differences). A moment estimate in
    closed form: the simulated nulls estimate it again for each of their series."""
    d2 = np.diff(y, axis=-1) ** 2
    m = d2.shape[-1]
    keep = max(1, int(round(m * (1 - _TRIM))))
    target = _trimmed_chi2_mean(1 - keep / m) if keep < m else 1.0
    smallest = d2 if keep == m else np.partition(d2, keep - 1, axis=-1)[..., :keep]
    pair = float(np.mean(own_var[..., 1:] + own_var[..., :-1]))
    return np.maximum(0.0, (smallest.mean(axis=-1) / target - pair) / 2)


WILD_SD = 4.0  # a run this many sds off both runs beside it, the same way, is wild


def _local_reference(y: np.ndarray, idx: Sequence[int]) -> np.ndarray:
    """The level a wild run stands off: the mean of the runs beside it."""
    return np.array([(y[i - 1] + y[i + 1]) / 2 for i in idx], dtype=float)


def wild_runs(y: np.ndarray, var: np.ndarray) -> tuple[int, ...]:
    """Runs that stand alone: off the run before and the run after by more than :data:`WILD_SD` sds of the
    difference, the same way. Two runs off together are a level of their own (a change, if it passes the test);
    the first and the newest run have one side and are never wild: the changes' test judges them, where no one
    run decides a change. One noisy run is not a change."""
    out = []
    for i in range(1, len(y) - 1):
        a = (y[i] - y[i - 1]) / math.sqrt(var[i] + var[i - 1])
        b = (y[i] - y[i + 1]) / math.sqrt(var[i] + var[i + 1])
        if min(abs(a), abs(b)) > WILD_SD and a * b > 0:
            out.append(i)
    return tuple(out)


# -- results -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """A change of level: runs ``index`` on (0-based) against the runs since the previous change."""

    index: int  # the first run of the new level
    lo: int  # the interval of that first run (inclusive): the splits within chi-square(1)'s 95 % of the best
    hi: int
    start: int  # the runs compared: [start, index) against [index, stop)
    stop: int
    log_move: float  # the new level over the old, log
    log_move_sd: float
    p: float  # the change's p-value (simulated null: no change between start and stop)

    @property
    def ratio(self) -> float:
        return math.exp(self.log_move)

    @property
    def ratio_ci(self) -> tuple[float, float]:
        h = 1.959964 * self.log_move_sd
        return math.exp(self.log_move - h), math.exp(self.log_move + h)


@dataclass(frozen=True)
class Trend:
    """A steady drift over runs ``[start, stop)``: ``slope`` log per run (``exp(slope) - 1`` per run)."""

    start: int
    stop: int
    slope: float
    slope_sd: float
    p: float

    @property
    def per_run(self) -> float:
        return math.expm1(self.slope)


@dataclass(frozen=True)
class Fit:
    """A series read: its changes (and, where one line explains it better, its trend instead), the noise it was
    read against, and the smallest step its newest runs could have shown."""

    n: int
    changes: list[Change] = field(default_factory=list)
    trend: Trend | None = None
    tau: float = 0.0  # the run-to-run sd beyond the runs' own (log)
    sd: tuple[float, ...] = ()  # each run's sd as weighed (log)
    levels: tuple[float, ...] = ()  # each run's fitted level (log): the segments' weighted means
    constant: bool = False  # every run the same value: nothing to find
    null_q: float | None = None  # the (1 - alpha) quantile of the whole series' largest split gain under no change
    wild: tuple[int, ...] = ()  # runs far off both their neighbours on each side: one bad night, weighed down

    def detectable(self, recent: int) -> float | None:
        """The smallest log step at the newest ``recent`` runs that would reach ``alpha`` on the whole series
        (``None`` where the series is too short to hold one)."""
        if self.null_q is None or recent < MIN_SEGMENT or self.n - recent < MIN_SEGMENT:
            return None
        w = 1.0 / np.square(np.asarray(self.sd))
        w1, w2 = float(w[: self.n - recent].sum()), float(w[self.n - recent:].sum())
        return math.sqrt(self.null_q * (1 / w1 + 1 / w2))


# -- the tests -----------------------------------------------------------------------------------------------------
def _gains(cum: _Cumulative, a: int, b: int, min_size: int) -> np.ndarray:
    """Cost drop of every allowed split ``j`` of ``[a, b)`` (``a + min_size <= j <= b - min_size``), along the
    leading axes; shape ``(..., splits)``: ``W1 W2 / (W1 + W2) (m1 - m2)^2``, the two sides' weights and weighted
    means."""
    j = slice(a + min_size, b - min_size + 1)
    w1 = cum.w[..., j] - cum.w[..., a, None]
    s1 = cum.wy[..., j] - cum.wy[..., a, None]
    w2 = cum.w[..., b, None] - cum.w[..., j]
    s2 = cum.wy[..., b, None] - cum.wy[..., j]
    return (s1 / w1 - s2 / w2) ** 2 * (w1 * w2 / (w1 + w2))


def _slope(y: np.ndarray, w: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least-squares slope over ``[a, b)``, its variance, and the fit's cost; along leading axes."""
    x = np.arange(a, b, dtype=float)
    ys, ws = y[..., a:b], w[..., a:b]
    sw = ws.sum(-1)
    xm = (ws * x).sum(-1) / sw
    ym = (ws * ys).sum(-1) / sw
    sxx = (ws * (x - xm[..., None]) ** 2).sum(-1)
    slope = (ws * (x - xm[..., None]) * (ys - ym[..., None])).sum(-1) / sxx
    resid = ys - ym[..., None] - slope[..., None] * (x - xm[..., None])
    return slope, 1.0 / sxx, (ws * resid**2).sum(-1)


class _Null:
    """Simulated series of the runs' noise with no change (``tau`` estimated again from each): the null every
    p-value here is read from."""

    def __init__(self, own_var: np.ndarray, tau2: float, n_sims: int, seed: int):
        rng = np.random.default_rng(seed)
        sims = rng.standard_normal((n_sims, len(own_var))) * np.sqrt(own_var + tau2)
        self.w = 1.0 / (own_var + excess_variance(sims, own_var)[:, None])
        self.y = sims
        self.cum = _Cumulative(sims, self.w, squares=False)

    def p_split(self, a: int, b: int, observed_gain: float, min_size: int) -> float:
        gains = _gains(self.cum, a, b, min_size).max(axis=-1)
        return float((1 + np.sum(gains >= observed_gain * (1 - 1e-12))) / (1 + len(gains)))

    def p_slope(self, a: int, b: int, observed_z2: float) -> float:
        slope, var, _ = _slope(self.y, self.w, a, b)
        z2 = slope**2 / var
        return float((1 + np.sum(z2 >= observed_z2 * (1 - 1e-12))) / (1 + len(z2)))

    def quantile(self, alpha: float, min_size: int) -> float:
        n = self.y.shape[1]
        return float(np.quantile(_gains(self.cum, 0, n, min_size).max(axis=-1), 1 - alpha))


def _change(y: np.ndarray, w: np.ndarray, cum: _Cumulative, null: _Null, a: int, k: int, b: int,
            min_size: int) -> Change:  # fmt: skip
    gains = _gains(cum, a, b, min_size)
    js = np.arange(a + min_size, b - min_size + 1)
    inside = js[gains >= float(gains.max()) - CHI2_1_95]
    w1, w2 = float(cum.sums(a, k)[0]), float(cum.sums(k, b)[0])
    move = float(cum.mean(k, b) - cum.mean(a, k))
    # no one run decides a change: its p-value is that of its gain with the run that matters most left out
    held = min(_gain_without(y, w, a, k, b, j) for j in range(a, b))
    return Change(k, int(inside.min()), int(inside.max()), a, b, move, math.sqrt(1 / w1 + 1 / w2),
                  null.p_split(a, b, held, min_size))  # fmt: skip


def _gain_without(y: np.ndarray, w: np.ndarray, a: int, k: int, b: int, j: int) -> float:
    """The cost drop of splitting ``[a, b)`` at ``k`` with run ``j`` left out (0 where a side is left empty)."""
    keep = np.ones(b - a, dtype=bool)
    keep[j - a] = False
    ys, ws = y[a:b][keep], w[a:b][keep]
    left = np.arange(a, b)[keep] < k
    if left.all() or not left.any():
        return 0.0
    w1, w2 = ws[left].sum(), ws[~left].sum()
    m1, m2 = (ws[left] * ys[left]).sum() / w1, (ws[~left] * ys[~left]).sum() / w2
    return float(w1 * w2 / (w1 + w2) * (m1 - m2) ** 2)


def detect(values: Sequence[float], own_sd: Sequence[float | None] | None = None, *, pen: float | None = None,
           alpha: float = ALPHA, min_size: int = MIN_SEGMENT, n_sims: int = N_SIMS, seed: int = 0) -> Fit:  # fmt: skip
    """Read one series (``values`` > 0, in run order; ``own_sd``: each run's own sd of its log, ``None`` where it
    has none): its changes with their p-values, or its trend (module docstring)."""
    arr = np.asarray(values, dtype=float)
    if np.any(~(arr > 0)) or not np.all(np.isfinite(arr)):
        raise ValueError("a series' values must be positive and finite (they are read on the log scale)")
    y = np.log(arr)
    n = len(y)
    if n == 0 or np.ptp(y) == 0:
        return Fit(n, levels=tuple(y.tolist()), constant=True, sd=tuple([0.0] * n))
    own = own_variance(own_sd if own_sd is not None else [None] * n)
    tau2 = float(excess_variance(y, own)) if n > 1 else 0.0
    var = own + tau2
    if not np.all(var > 0):  # no own noise and none between runs (two runs alike): the spread is all there is
        var = np.full(n, max(float(np.var(y)), 1e-12))
    wild = wild_runs(y, var)
    var[list(wild)] += np.square(y[list(wild)] - _local_reference(y, list(wild)))  # weighs as far off as it is
    w = 1.0 / var
    sd = tuple(np.sqrt(var).tolist())
    if n < 2 * min_size:
        return Fit(n, tau=math.sqrt(tau2), sd=sd, levels=tuple([float(np.average(y, weights=w))] * n), wild=wild)
    cum = _Cumulative(y, w)
    null = _Null(own, tau2, n_sims, seed)
    beta = penalty(n) if pen is None else float(pen)
    cps = pelt(y, w, beta, min_size)
    changes = _prune(y, w, cum, null, cps, n, alpha, min_size)
    trend = _trend(y, w, null, cum, changes, n, beta, alpha)
    if trend is not None:
        changes = []
    bounds = [0, *(c.index for c in changes), n]
    levels = np.concatenate([np.full(b - a, float(cum.mean(a, b))) for a, b in zip(bounds, bounds[1:], strict=False)])
    if trend is not None:
        x = np.arange(n, dtype=float)
        xm = float(np.average(x, weights=w))
        levels = float(np.average(y, weights=w)) + trend.slope * (x - xm)
    return Fit(n, changes, trend, math.sqrt(tau2), sd, tuple(levels.tolist()), null_q=null.quantile(alpha, min_size),
               wild=wild)


def _prune(y: np.ndarray, w: np.ndarray, cum: _Cumulative, null: _Null, cps: list[int], n: int, alpha: float,
           min_size: int) -> list[Change]:  # fmt: skip
    """Otava's pruning: test each candidate between its neighbours, drop the weakest above ``alpha``, again."""
    cps = list(cps)
    while cps:
        bounds = [0, *cps, n]
        found = [_change(y, w, cum, null, bounds[i], bounds[i + 1], bounds[i + 2], min_size)
                 for i in range(len(cps))]  # fmt: skip
        worst = max(range(len(found)), key=lambda i: found[i].p)
        if found[worst].p <= alpha:
            return found
        del cps[worst]
    return []


def _trend(y: np.ndarray, w: np.ndarray, null: _Null, cum: _Cumulative, changes: list[Change], n: int,
           beta: float, alpha: float) -> Trend | None:  # fmt: skip
    """The whole series' slope, where it is beyond noise and one line (one penalty) fits it better than the
    steps found (one penalty each)."""
    if n < 2 * MIN_SEGMENT + 1:
        return None
    slope, var, line_cost = (float(v) for v in _slope(y, w, 0, n))
    bounds = [0, *(c.index for c in changes), n]
    steps_cost = sum(float(cum.cost(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)) + beta * len(changes)
    if line_cost + beta >= steps_cost:
        return None
    p = null.p_slope(0, n, slope**2 / var)
    return Trend(0, n, slope, math.sqrt(var), p) if p <= alpha else None
