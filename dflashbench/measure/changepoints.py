"""Where a series of runs changes level, and how sure that is: the maths of ``dflashbench history``.

A series is one gated figure of ``compare`` over many runs, on the log scale (a speedup, a rate, tau, a p99
latency: all positive, and a move of the same share weighs the same at any level). Each run brings its own
noise: the sd of its figure from its own intervals (the noise rule of docs/metrics.md: the repeats' rounds, or
the requests and the machine's drift). The method, in four steps:

1. **Noise.** Run *i* has variance ``s_i^2 + tau^2``: its own ``s_i^2`` (from its own intervals; floored at half
   the series' median, so that no run whose few rounds happened to agree outweighs the rest), plus ``tau^2``, the
   run-to-run noise its own intervals do not hold (a server launch, the machine's mood on that night), read from
   the series itself: from the mean of the squared successive differences once the largest 20 % of them are left
   out (so that one step or one wild run barely moves it), less the runs' own share (:func:`excess_variance`).
   A run far off both runs beside it, the same way, is **wild** (:func:`wild_runs`): it is named, and weighed as
   far off as it is.
2. **Candidates: PELT** (Killick, Fearnhead & Eckley 2012, J. Am. Stat. Assoc. 107:1590) on the weighted cost
   ``sum w_i (y_i - mean_w)^2``, ``w_i = 1 / var_i`` (minus twice the Gaussian log-likelihood of a segment's
   level), each change costing a penalty, by default :data:`PENALTY` ``= 2 ln n`` (BIC: a change adds a level
   and a location), segments of at least :data:`MIN_SEGMENT` runs, so **one run alone is never a change**.
   With equal weights this is ruptures' ``Pelt(model="l2")``; ``tests/measure/test_changepoints.py`` checks
   it against ruptures' own results on the same series (a fixture made by ruptures 1.1.10, which is not a
   dependency of dflashbench: it has no weighted cost, and this is 60 lines).
3. **Is anything there: one p-value per series, one rule per family.** A series' statistic is its largest
   split gain (the drop of the weighted cost the best split gives, a weighted two-sample z^2) and its slope's z^2,
   combined as the smaller of their two p-values (min-p, calibrated on the same orders). Its null: the same
   statistic in :data:`N_PERMS` **random orders of the runs**, each run with its weight (a permutation test, as
   Otava's E-divisive uses): under no change the runs are exchangeable, so the p-value holds whatever their
   noise's shape; a machine that went quiet for a few runs is in every order alike. (The weights' ``tau`` is read
   from the order as measured, a small departure from exactness: 3,000 simulated unchanged series passed at
   4.7 % where the level was 5 %.) One wild run is in every order too, so it is not a change. The family is every series of one setting read
   together (``history`` reads 15 to 45): its runs are shuffled as a whole, and **Westfall and Young's step-down
   min-p rule** (:func:`step_down`) holds the chance that an unchanged history shows anything at all at
   :data:`FAMILY_ALPHA` = 5 %, the series that move together (a method's rate and throughput) counting as about
   one. Each series that passes is tested further at the level it passed at. The price: with ``n`` runs a step
   in the newest ``k`` lands at an end in ``2 / C(n, k)`` of the orders, so it needs enough runs behind it
   (:meth:`Fit.smallest_p`; 3 newest of 14 runs: 0.55 %; of 20: 0.18 %).
4. **Changes**, as Apache Otava (formerly Hunter) prunes E-divisive's candidates: each PELT candidate is tested
   on the runs between its neighbours (its split's gain against the largest gain of random orders of those
   runs), the weakest dropped and the rest tested again until every one left has ``p`` within the series' level.
   Each change gets its **size** (the two levels' ratio with a 95 % interval) and the **interval of its first
   run**: the splits whose cost is within the chi-square(1) 95 % quantile (3.84) of the best (a
   profile-likelihood set; approximate, as change-point locations are not regular parameters).
5. **Drift**: the slope per run on the log scale, weighted least squares, its p-value from the same orders.
   Where one straight line explains the whole series better than its steps (penalised cost, the slope paying
   the same penalty as one change), the drift is reported as a **trend with its slope**, not as steps.

Why this and not the first method (a Gaussian null simulated per series at p <= 0.001, the run that matters most
left out of each test): on the runs measured here (docs/measurements/2026-11-27-history, the development data)
it alarmed in 12 % of shuffled unchanged 14-run histories, since its null trusted ``tau`` as read from 14 runs
and a normal shape, and the leave-one-out guard, tested against a null without it, lifted the slowdown's p from
0.0002 to 0.003 and lost it. Here the guard is not needed (every order holds the same wild run), and the family
rule, not a small per-series alpha, is what keeps a history of many series quiet.

Everything is pure numpy and deterministic (fixed seeds: per family, and per series for its sub-range tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dflashbench.measure.family import step_down

FAMILY_ALPHA = 0.05  # per reading of a setting's series: the chance that an unchanged history shows anything
MIN_SEGMENT = 2  # runs; one run is never a level of its own
N_PERMS = 10_000  # random orders of the runs per test
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
    pair = np.mean(own_var[..., 1:] + own_var[..., :-1], axis=-1)
    return np.maximum(0.0, (smallest.mean(axis=-1) / target - pair) / 2)


WILD_SD = 4.0  # a run this many sds off both runs beside it, the same way, is wild


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


def weigh(y: np.ndarray, own_var: np.ndarray) -> np.ndarray:
    """Each run's variance as weighed, along the last axis of ``y`` (one series, or many orders of its runs, with
    ``own_var`` in the same order): its own plus ``tau^2`` read from that order; where nothing is left, the
    spread; a wild run's (:func:`wild_runs`) widened by how far off it is."""
    tau2 = excess_variance(y, own_var) if y.shape[-1] > 1 else np.zeros(y.shape[:-1])
    var = own_var + np.asarray(tau2)[..., None]
    spread = np.maximum(np.var(y, axis=-1, keepdims=True), 1e-12)
    var = np.where(np.all(var > 0, axis=-1, keepdims=True), var, spread)  # no own noise and none between runs
    if y.shape[-1] >= 3:
        mid, before, after = y[..., 1:-1], y[..., :-2], y[..., 2:]
        a = (mid - before) / np.sqrt(var[..., 1:-1] + var[..., :-2])
        b = (mid - after) / np.sqrt(var[..., 1:-1] + var[..., 2:])
        wild = (np.minimum(np.abs(a), np.abs(b)) > WILD_SD) & (a * b > 0)
        var = var.copy()
        var[..., 1:-1] += np.where(wild, np.square(mid - (before + after) / 2), 0.0)  # weighs as far off as it is
    return var


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
    p: float  # the change's p-value (random orders of the runs; or Student's t-test where they cannot resolve it)
    test: str = "orders"  # "orders" (the permutation test) or "t-test" (too few runs for random orders: step 6)

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
    null_q: float | None = None  # the (1 - floor_level) quantile of the largest split gain of the noise, reordered
    wild: tuple[int, ...] = ()  # runs far off both their neighbours on each side: one bad night, weighed down
    p_screen: float | None = None  # the series' own p-value of "a step or a drift" (None: too short, constant)
    level: float | None = None  # the level the family's step-down rule let it be tested at (None: it did not pass)
    family: int = 1  # how many series were read together
    floor_level: float | None = None  # the family's first step-down level: what a change alone in it must reach

    def smallest_p(self, recent: int) -> float:
        """The smallest p-value a step in the newest ``recent`` runs can reach, however large: in random orders
        of ``n`` runs the same ``recent`` runs land at one end or the other in ``2 / C(n, recent)`` of them."""
        return min(1.0, 2.0 / math.comb(self.n, recent)) if 0 < recent < self.n else 1.0

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


def _p_of(null: np.ndarray, observed: float) -> float:
    """A permutation p-value: the share of the orders (the observed one counted among them) whose statistic is at
    least the observed one."""
    return float((1 + np.sum(null >= observed * (1 - 1e-12))) / (1 + len(null)))


def _share_at_least(stat: np.ndarray) -> np.ndarray:
    """Each order's p-value among the orders: the share of them whose statistic is at least its own."""
    ranked = np.sort(stat)
    return (len(stat) - np.searchsorted(ranked, stat * (1 - 1e-12), side="left")) / len(stat)


def _share_at_most(p: np.ndarray) -> np.ndarray:
    """Each order's p-value of p-values: the share of the orders whose p-value is at most its own."""
    ranked = np.sort(p)
    return np.searchsorted(ranked, p * (1 + 1e-9), side="right") / len(p)


class _Orders:
    """Random orders of runs ``[a, b)`` (each run's value with its weight): the null every p-value here is read
    from. Under no change the runs are exchangeable, and the observed order is one of these alike. ``idx``: the
    orders (rows of run indices into ``[a, b)``), drawn here from ``seed`` where not given."""

    def __init__(self, y: np.ndarray, w: np.ndarray, a: int, b: int, n_perms: int, seed: int, min_size: int,
                 idx: np.ndarray | None = None):  # fmt: skip
        m = b - a
        if idx is None:
            idx = np.random.default_rng(seed).permuted(np.tile(np.arange(m), (n_perms, 1)), axis=1)
        ys, ws = y[a:b][idx], w[a:b][idx]  # each run keeps its weight as the series was read
        self.gain = _gains(_Cumulative(ys, ws, squares=False), 0, m, min_size).max(axis=-1)
        self.z2: np.ndarray | None = None
        if m >= 2 * min_size + 1:
            slope, var, _ = _slope(ys, ws, 0, m)
            self.z2 = slope**2 / var

    def screen(self, gain: float, z2: float | None) -> np.ndarray:
        """The p-value of "a step or a drift" of the series as read (first) and of each random order after it:
        the smaller of the two tests' p-values (split gain, slope), calibrated on the same orders (min-p), so that
        testing both costs nothing beyond what it does. Every p-value here is a share of the ``B + 1`` orders,
        the observed one among them: the family's step-down rule compares them across series."""
        gains = np.concatenate([[gain], self.gain])
        if self.z2 is None or z2 is None:
            return _share_at_least(gains)
        smallest = np.minimum(_share_at_least(gains), _share_at_least(np.concatenate([[z2], self.z2])))
        return _share_at_most(smallest)


@dataclass
class _Prepared:
    """One series on the log scale with its weights: what its tests need."""

    y: np.ndarray
    own: np.ndarray
    tau2: float
    w: np.ndarray
    wild: tuple[int, ...]
    seed: int
    orders: dict[tuple[int, int], _Orders] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.y)

    def null(self, a: int, b: int, n_perms: int, min_size: int) -> _Orders:
        if (a, b) not in self.orders:
            self.orders[(a, b)] = _Orders(self.y, self.w, a, b, n_perms, self.seed + 7919 * a + b, min_size)
        return self.orders[(a, b)]


def _prepare(values: Sequence[float], own_sd: Sequence[float | None] | None, seed: int) -> _Prepared | Fit:
    arr = np.asarray(values, dtype=float)
    if np.any(~(arr > 0)) or not np.all(np.isfinite(arr)):
        raise ValueError("a series' values must be positive and finite (they are read on the log scale)")
    y = np.log(arr)
    n = len(y)
    if n == 0 or np.ptp(y) == 0:
        return Fit(n, levels=tuple(y.tolist()), constant=True, sd=tuple([0.0] * n))
    own = own_variance(own_sd if own_sd is not None else [None] * n)
    tau2 = float(excess_variance(y, own)) if n > 1 else 0.0
    base = own + tau2
    if not np.all(base > 0):
        base = np.full(n, max(float(np.var(y)), 1e-12))
    return _Prepared(y, own, tau2, 1.0 / weigh(y, own), wild_runs(y, base), seed)


def _statistics(s: _Prepared, min_size: int) -> tuple[float, float | None]:
    """The series' largest split gain and its slope's z^2 (``None`` where too short for a slope)."""
    gain = float(_gains(_Cumulative(s.y, s.w), 0, s.n, min_size).max())
    if s.n < 2 * min_size + 1:
        return gain, None
    slope, var, _ = _slope(s.y, s.w, 0, s.n)
    return gain, float(slope**2 / var)


def _joint_orders(positions: Sequence[Sequence[int]], n_perms: int, seed: int) -> list[np.ndarray]:
    """The same random orders of the family's runs, as each series' own run indices (a series holds the runs at
    ``positions``: in each order, its runs in the order they land)."""
    total = max((max(p) for p in positions if len(p)), default=-1) + 1
    perms = np.random.default_rng(seed).permuted(np.tile(np.arange(total), (n_perms, 1)), axis=1)
    out = []
    for pos in positions:
        local = np.full(total, -1)
        local[np.asarray(pos, dtype=int)] = np.arange(len(pos))
        mapped = local[perms]
        out.append(mapped[mapped >= 0].reshape(n_perms, len(pos)))
    return out


def _change(s: _Prepared, cum: _Cumulative, a: int, k: int, b: int, n_perms: int, min_size: int) -> Change:
    gains = _gains(cum, a, b, min_size)
    js = np.arange(a + min_size, b - min_size + 1)
    inside = js[gains >= float(gains.max()) - CHI2_1_95]
    w1, w2 = float(cum.sums(a, k)[0]), float(cum.sums(k, b)[0])
    move = float(cum.mean(k, b) - cum.mean(a, k))
    observed = float(gains[k - a - min_size])
    p = _p_of(s.null(a, b, n_perms, min_size).gain, observed)
    return Change(k, int(inside.min()), int(inside.max()), a, b, move, math.sqrt(1 / w1 + 1 / w2), p)


def _prune(s: _Prepared, cum: _Cumulative, cps: list[int], level: float, n_perms: int,
           min_size: int) -> list[Change]:  # fmt: skip
    """Otava's pruning: test each candidate between its neighbours, drop the weakest above ``level``, again."""
    cps = list(cps)
    while cps:
        bounds = [0, *cps, s.n]
        found = [_change(s, cum, bounds[i], bounds[i + 1], bounds[i + 2], n_perms, min_size) for i in range(len(cps))]
        worst = max(range(len(found)), key=lambda i: found[i].p)
        if found[worst].p <= level:
            return found
        del cps[worst]
    return []


def _trend(s: _Prepared, cum: _Cumulative, changes: list[Change], beta: float, level: float, n_perms: int,
           min_size: int) -> Trend | None:  # fmt: skip
    """The whole series' slope, where it is beyond noise and one line (one penalty) fits it better than the
    steps found (one penalty each)."""
    n = s.n
    if n < 2 * min_size + 1:
        return None
    slope, var, line_cost = (float(v) for v in _slope(s.y, s.w, 0, n))
    bounds = [0, *(c.index for c in changes), n]
    steps_cost = sum(float(cum.cost(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)) + beta * len(changes)
    if line_cost + beta >= steps_cost:
        return None
    null = s.null(0, n, n_perms, min_size).z2
    p = _p_of(null, slope**2 / var) if null is not None else 1.0
    return Trend(0, n, slope, math.sqrt(var), p) if p <= level else None


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b): its continued fraction (modified Lentz), on the side of
    ``x`` where it converges fast (``I_x(a, b) = 1 - I_{1-x}(b, a)``)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300

    def guard(v: float) -> float:
        return v if abs(v) > tiny else tiny

    c, d = 1.0, 1.0 / guard(1.0 - (a + b) * x / (a + 1))
    h = d
    for m in range(1, 500):
        even = m * (b - m) * x / ((a - 1 + 2 * m) * (a + 2 * m))
        d, c = 1.0 / guard(1.0 + even * d), guard(1.0 + even / c)
        h *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1 + 2 * m))
        d, c = 1.0 / guard(1.0 + odd * d), guard(1.0 + odd / c)
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    return front * h / a


def student_p(a: np.ndarray, b: np.ndarray) -> float:
    """Student's two-sided t-test of two samples' means, their variance pooled (``n_a + n_b - 2`` degrees of
    freedom): under no change the runs are alike, one variance for both sides; the test Apache Otava (formerly
    Hunter) applies to a change point's two sides."""
    na, nb = len(a), len(b)
    df = na + nb - 2
    pooled = (float(np.var(a, ddof=1)) * (na - 1) + float(np.var(b, ddof=1)) * (nb - 1)) / df
    diff = float(np.mean(b) - np.mean(a))
    se2 = pooled * (1 / na + 1 / nb)
    if se2 <= 0:
        return 0.0 if diff else 1.0
    return _betainc(df / 2, 0.5, df / (df + diff * diff / se2))  # P(|T_df| >= |t|)


RESCUE_SIDE = 3  # runs on each side, at least, for the t-test of step 6 (two runs' variance is too loose)


def order_floor(n: int, k: int) -> float:
    """The smallest p-value random orders of ``n`` runs give a split of ``k`` against ``n - k`` runs, however large
    the step: the same ``k`` runs land at one end or the other in ``2 / C(n, k)`` of the orders."""
    return min(1.0, 2.0 / math.comb(n, min(k, n - k)))


def _rescue(s: _Prepared, cum: _Cumulative, family: int, floor_level: float | None, min_size: int) -> Change | None:
    """Step 6 of the method, for a series whose best split random orders cannot resolve: where the smallest p-value
    the orders could give that split (:func:`order_floor`) is above the level a change alone in the family must
    reach, and the series sits at that floor (every run of one side beyond every run of the other), the split is
    tested by Student's t-test of its two sides' log values (Apache Otava's test of a change point; three runs a
    side at least, :data:`RESCUE_SIDE`) at
    :data:`FAMILY_ALPHA` divided by the family's series and by the splits searched (Bonferroni: the best of them
    was chosen), and only where the two levels also differ beyond the runs' own noise (their variances plus the
    run-to-run term, as weighed) at that level. The orders say the runs are as apart as they can be; the tests, how
    far. Returns that change, or ``None``."""
    n = s.n
    if floor_level is None or n < 2 * RESCUE_SIDE:
        return None
    gains = _gains(cum, 0, n, min_size)
    k = int(np.argmax(gains)) + min_size
    if min(k, n - k) < RESCUE_SIDE or order_floor(n, k) <= floor_level:
        return None  # too few runs a side for the t-test; or the orders could have resolved it: their verdict stands
    before, after = s.y[:k], s.y[k:]
    if not (before.min() > after.max() or before.max() < after.min()):
        return None  # not even at the orders' floor (each side's runs all beyond the other's): nothing to rescue
    splits = n - 2 * min_size + 1
    found = _change(s, cum, 0, k, n, N_PERMS, min_size)
    # and beyond the runs' own noise: the two weighted levels' difference against its sd from each run's own
    # variance plus the run-to-run term (the noise rule's reading of a run), two-sided normal; the larger p counts
    p_own = math.erfc(abs(found.log_move) / found.log_move_sd / math.sqrt(2)) if found.log_move_sd > 0 else 0.0
    p = min(1.0, max(student_p(before, after), p_own) * splits * max(family, 1))
    if p > FAMILY_ALPHA:
        return None
    return Change(found.index, found.lo, found.hi, 0, n, found.log_move, found.log_move_sd, p, "t-test")


def _steps_of(s: _Prepared, cum: _Cumulative, candidates: list[int], changes: list[Change]) -> list[Change]:
    """The step model the line is weighed against: PELT's candidates (a change that did not pass its test still
    fits the series as a step), or the changes found where those are more."""
    if len(changes) >= len(candidates):
        return changes
    bounds = [0, *candidates, s.n]
    return [Change(k, k, k, a, b, 0.0, 0.0, 1.0) for a, k, b in zip(bounds, bounds[1:], bounds[2:], strict=False)]


def _finish(s: _Prepared, p_screen: float | None, level: float | None, family: int, floor_level: float | None,
            pen: float | None, n_perms: int, min_size: int) -> Fit:  # fmt: skip
    n, w, y = s.n, s.w, s.y
    sd = tuple(np.sqrt(1.0 / w).tolist())
    if n < 2 * min_size:
        return Fit(n, tau=math.sqrt(s.tau2), sd=sd, levels=tuple([float(np.average(y, weights=w))] * n),
                   wild=s.wild, family=family)  # fmt: skip
    cum = _Cumulative(y, w)
    beta = penalty(n) if pen is None else float(pen)
    changes, trend = [], None
    candidates = pelt(y, w, beta, min_size)
    if level is not None:
        changes = _prune(s, cum, candidates, level, n_perms, min_size)
    if not changes:
        rescued = _rescue(s, cum, family, floor_level, min_size)
        changes = [rescued] if rescued is not None else []
    if level is not None or changes:
        # a step is preferred over a trend where both fit: the line must beat PELT's own steps (its candidates,
        # tested or not) by the same penalised cost (BIC: a slope pays what a change pays)
        trend = _trend(s, cum, _steps_of(s, cum, candidates, changes), beta, level or FAMILY_ALPHA, n_perms, min_size)
        if trend is not None:
            changes = []
    bounds = [0, *(c.index for c in changes), n]
    levels = np.concatenate([np.full(b - a, float(cum.mean(a, b))) for a, b in zip(bounds, bounds[1:], strict=False)])
    if trend is not None:
        x = np.arange(n, dtype=float)
        xm = float(np.average(x, weights=w))
        levels = float(np.average(y, weights=w)) + trend.slope * (x - xm)
    # the step the newest runs could show: the largest split gain of the series' noise (what its fitted levels
    # leave) in random orders, at the family's first level
    noise = _Orders(y - levels, w, 0, n, n_perms, s.seed + 1, min_size).gain
    null_q = float(np.quantile(noise, 1 - floor_level)) if floor_level else None
    return Fit(n, changes, trend, math.sqrt(s.tau2), sd, tuple(levels.tolist()), null_q=null_q, wild=s.wild,
               p_screen=p_screen, level=level, family=family, floor_level=floor_level)  # fmt: skip


def detect_family(series: Sequence[tuple[Sequence[float], Sequence[float | None] | None]], *,
                  positions: Sequence[Sequence[int]] | None = None, alpha: float = FAMILY_ALPHA,
                  pen: float | None = None, min_size: int = MIN_SEGMENT, n_perms: int = N_PERMS,
                  seeds: Sequence[int] | None = None, seed: int = 0) -> list[Fit]:  # fmt: skip
    """Read a family of series (``(values, own_sd)`` each: values > 0 in run order, each run's own sd of its log or
    ``None``; ``positions``: each series' runs as indices into the family's runs, in order, where a series lacks
    some; by default every series holds the same runs): each series' p-value of a step or a drift over the same
    random orders of the runs, the family's step-down rule at ``alpha`` (:func:`step_down`), and the changes or
    trend of each series that passed, tested at the level it passed at (module docstring)."""
    seeds = list(seeds) if seeds is not None else list(range(len(series)))
    if positions is None:
        lengths = {len(values) for values, _ in series}
        if len(lengths) > 1:
            raise ValueError("series of different lengths: give each one's positions among the family's runs")
        positions = [range(len(values)) for values, _ in series]
    prepared = [_prepare(values, own, sd) for (values, own), sd in zip(series, seeds, strict=True)]
    testable = [isinstance(s, _Prepared) and s.n >= 2 * min_size for s in prepared]
    orders = _joint_orders([pos for pos, ok in zip(positions, testable, strict=True) if ok], n_perms, seed)
    p_orders: list[np.ndarray | None] = [None] * len(prepared)
    for i, idx in zip([i for i, ok in enumerate(testable) if ok], orders, strict=True):
        s = prepared[i]
        s.orders[(0, s.n)] = _Orders(s.y, s.w, 0, s.n, n_perms, 0, min_size, idx=idx)
        p_orders[i] = s.orders[(0, s.n)].screen(*_statistics(s, min_size))
    p_screen = [None if p is None else float(p[0]) for p in p_orders]
    levels, first = step_down(p_orders, alpha)
    family = sum(testable)
    return [s if isinstance(s, Fit) else _finish(s, p, level, family, first, pen, n_perms, min_size)
            for s, p, level in zip(prepared, p_screen, levels, strict=True)]  # fmt: skip


def detect(values: Sequence[float], own_sd: Sequence[float | None] | None = None, *, pen: float | None = None,
           alpha: float = FAMILY_ALPHA, min_size: int = MIN_SEGMENT, n_perms: int = N_PERMS, seed: int = 0) -> Fit:  # fmt: skip
    """Read one series, a family of one (:func:`detect_family`)."""
    return detect_family([(values, own_sd)], alpha=alpha, pen=pen, min_size=min_size, n_perms=n_perms, seeds=[seed])[0]
