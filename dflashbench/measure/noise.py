"""Is a move between two runs beyond noise? The tests ``compare`` applies before it calls a move a regression.

Two single runs carry no run-to-run interval, but every request of both is in ``requests.jsonl``, so the noise
of each point's figure can be read from its own requests:

- a figure that is a ratio of sums over requests (throughput ~ tokens / time in flight; tau = tokens per
  verification step) gets a **bootstrap over requests**, each run's drawn on its own (:func:`bootstrap_null`
  says why not paired); the one-sided p-value is the share of resampled differences at least as bad as the one
  observed, under no change;
- a per-request distribution (TTFT, TPOT, ITL, E2E, per-user rate) gets the **Mann-Whitney U test** on the two
  runs' requests, one-sided, normal approximation with the tie correction;
- the tests over all gated points x metrics are corrected together (Westfall and Young's step-down min-p over
  joint draws of their nulls, :mod:`dflashbench.measure.family`), so the chance of any false alarm on an unchanged
  run stays at the family level (5 %).

Anchors read for the choice: google/benchmark ``tools/gbench/report.py`` runs a Mann-Whitney U test on the
repetitions of each benchmark (``calc_utest``, alpha 0.05) and says when there are too few repetitions for it;
pyperf ``compare_to`` reports "Not significant" from a t-test on the runs' values. Here the samples are the
requests, which every run has, so no repetitions are needed. Pure numpy; checked against scipy in the tests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

N_RESAMPLES = 2000
ALPHA = 0.05
# A quantile is supported by the data when at least this many requests lie beyond it: p99 of 32 requests is
# simply the largest one, and one slow request moves it by any amount.
TAIL_REQUESTS = 10


def requests_for_quantile(q: float, beyond: int = TAIL_REQUESTS) -> int:
    """Requests a ``q`` quantile needs before a gate on it can be trusted: ``beyond`` requests above it."""
    return math.ceil(beyond / (1.0 - q) - 1e-9) if q < 1 else math.inf


def _log_ratio_of_sums(num: np.ndarray, den: np.ndarray, idx: np.ndarray) -> np.ndarray:
    sx, sy = num[idx].sum(axis=1), den[idx].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(sx / sy)


def bootstrap_null(base: tuple[Sequence[float], Sequence[float]], new: tuple[Sequence[float], Sequence[float]],
                   n: int = N_RESAMPLES, seed: int = 0) -> np.ndarray:  # fmt: skip
    """Resampled deviations of ``log(R_new / R_base)`` around its value, where ``R = sum(num) / sum(den)`` over
    a run's requests (``base`` and ``new``: ``(num, den)``, one entry per request), each run's requests drawn
    on their own.

    Why not paired by prompt, although both runs sent the same prompts: a paired draw cancels the spread
    between prompts and leaves only the noise of sampling, which is far below the drift between two runs on
    one machine. Two back-to-back default sweeps on the 2-core CI machine differ by up to 8.3 % on a point
    whose paired interval was +-3 %: paired, an unchanged commit fails; unpaired, the prompts' spread stands
    in for that drift, and a 20 % drop of AR or EAGLE-3 still fails (tests/gate/test_compare_noise.py)."""
    bn, bd, nn, nd = (np.asarray(v, dtype=float) for v in (*base, *new))
    if min(len(bn), len(nn)) < 2 or min(bn.sum(), bd.sum(), nn.sum(), nd.sum()) <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(seed)
    b_idx = rng.integers(0, len(bn), size=(n, len(bn)))
    n_idx = rng.integers(0, len(nn), size=(n, len(nn)))
    null = (_log_ratio_of_sums(nn, nd, n_idx) - math.log(nn.sum() / nd.sum())) \
        - (_log_ratio_of_sums(bn, bd, b_idx) - math.log(bn.sum() / bd.sum()))  # fmt: skip
    return null[np.isfinite(null)]


def bootstrap_p_worse(observed_log_ratio: float, null: np.ndarray, worse: str) -> float:
    """One-sided p-value that NEW is worse than BASE by ``observed_log_ratio`` = log(new / base) only by chance:
    the share of resampled log ratios under no change (:func:`bootstrap_null`) at least as far in the
    ``worse`` direction ("drop" or "rise")."""
    if len(null) == 0:
        return 1.0
    hits = (null <= observed_log_ratio) if worse == "drop" else (null >= observed_log_ratio)
    return float((hits.sum() + 1) / (len(null) + 1))  # +1: a resampling p-value is never 0


# The fewest gated points whose moves can tell the machine's drift between two runs.
MIN_DRIFT_POINTS = 5


def drift_sd(log_ratios: Sequence[float], groups: Sequence[object] | None = None) -> float:
    """The drift between two runs of one figure, read from the runs' own moves (the noise rule's fallback where
    a run has no speed probe): the robust standard deviation (1.4826 x the median absolute deviation) of the log
    ratios new / base over the gated points; 0 with fewer than :data:`MIN_DRIFT_POINTS` points.

    Without ``groups``: around their median. With ``groups`` (each point's method, or a speedup's pair): each
    move less the mean move of the other points of its group, scaled by ``sqrt(1 - 1/k)`` for a group of k (the
    difference holds the others' mean too), so a group that moves together, a regression of one method, leaves
    the spread as it was, however large its move. A group of one says nothing of the spread and is left out."""
    x = [v for v in log_ratios if math.isfinite(v)]
    if groups is None:
        a = np.asarray(x, dtype=float)
        if len(a) < MIN_DRIFT_POINTS:
            return 0.0
        return float(1.4826 * np.median(np.abs(a - np.median(a))))
    by_group: dict[object, list[float]] = {}
    for g, v in zip(groups, log_ratios, strict=True):
        if math.isfinite(v):
            by_group.setdefault(g, []).append(v)
    residuals = []
    for values in by_group.values():
        k = len(values)
        if k < 2:
            continue
        total = sum(values)
        residuals += [(v - (total - v) / (k - 1)) * math.sqrt((k - 1) / k) for v in values]
    if len(residuals) < MIN_DRIFT_POINTS:
        return 0.0
    return float(1.4826 * np.median(np.abs(residuals)))


def p_worse_with_drift(observed_log_ratio: float, null: np.ndarray, worse: str, sd: float,
                       df: float | None = None) -> float:  # fmt: skip
    """:func:`bootstrap_p_worse` with the runs' drift added to the null: the chance that the requests' own noise
    plus a drift of ``sd`` (:func:`drift_sd`) moves the figure at least as far the ``worse`` way, averaged over the
    resampled null. The drift is normal where its size is known (``df`` None), and Student-t with ``df`` degrees of
    freedom where ``sd`` was estimated from few runs (:func:`satterthwaite_df`): a run-to-run term read from 4
    launches (3 df) may well be half its true size, and a normal drift would then fail unchanged runs far more
    often than the 5 % it promises."""
    if sd <= 0 or len(null) == 0:
        return bootstrap_p_worse(observed_log_ratio, null, worse)
    below = t_cdf((observed_log_ratio - null) / sd, df)
    return float(np.mean(below if worse == "drop" else 1 - below))  # P(null + drift <= observed), per resample


T_CDF_SERIES_DF = 120  # up to this many degrees of freedom the exact series; beyond, Fisher's normal transform


def t_cdf(x: np.ndarray, df: float | None) -> np.ndarray:
    """Student's t CDF at ``x`` with ``df`` degrees of freedom, exact for whole ``df`` (Abramowitz & Stegun 26.7.3
    and 26.7.4, the finite series in theta = arctan(x / sqrt(df)); a fractional ``df`` is rounded down, the wider
    tail); the normal CDF for ``df`` None. Above :data:`T_CDF_SERIES_DF` the series grows long, and the normal CDF
    at x (1 - 1/(4 df)) / sqrt(1 + x^2 / (2 df)) (Fisher's transform) is within 4 % of the tail's probability down
    to 1e-6, where the plain normal is off by 70 %. Vectorised over ``x``; checked against scipy in the tests (scipy
    is not a runtime dependency)."""
    x = np.asarray(x, dtype=float)
    if df is None or not math.isfinite(df):
        return _normal_cdf(x)
    if df > T_CDF_SERIES_DF:
        return _normal_cdf(x * (1 - 1 / (4 * df)) / np.sqrt(1 + x * x / (2 * df)))
    nu = max(1, int(df))
    theta = np.arctan(x / math.sqrt(nu))
    sin, cos2 = np.sin(theta), np.cos(theta) ** 2
    if nu % 2 == 0:  # A = sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(nu-2))
        term = np.ones_like(x)
        total = term.copy()
        for k in range(2, nu - 1, 2):
            term = term * cos2 * (k - 1) / k
            total += term
        signed_a = sin * total
    else:  # A = 2/pi (theta + sin(theta) (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(nu-2)))
        series = np.zeros_like(x)
        if nu > 1:
            term = np.cos(theta)
            series = term.copy()
            for k in range(3, nu - 1, 2):
                term = term * cos2 * (k - 1) / k
                series += term
        signed_a = 2 / math.pi * (theta + sin * series)
    return 0.5 * (1 + signed_a)  # A(x) = P(|T| <= |x|), signed with x


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def satterthwaite_df(parts: Sequence[tuple[float, float | None]]) -> float | None:
    """The degrees of freedom of a sum of independent variance terms (Welch-Satterthwaite): ``parts`` (sd, df),
    ``df`` None for a term whose size is known well (the probe's drift, read from many readings). ``None`` where
    every part is known, or where the estimated parts hold no variance: the sum is then normal."""
    total = sum(sd * sd for sd, _ in parts)
    uncertain = sum(sd**4 / df for sd, df in parts if df is not None and df > 0)
    if total <= 0 or uncertain <= 0:
        return None
    return total * total / uncertain


def mann_whitney_p_worse(base: Sequence[float], new: Sequence[float], worse: str) -> float:
    """One-sided Mann-Whitney U p-value that NEW's values lie above BASE's (``worse="rise"``) or below
    (``"drop"``) only by chance; normal approximation with the tie correction and a continuity correction."""
    a, b = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    values = np.concatenate([a, b])
    order = values.argsort(kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    uniq, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    mean_rank = np.bincount(inverse, weights=ranks) / counts  # ties share their mean rank
    ranks = mean_rank[inverse]
    u_new = ranks[n1:].sum() - n2 * (n2 + 1) / 2  # large when NEW's values are high
    mu = n1 * n2 / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (u_new - mu - 0.5) / math.sqrt(var) if worse == "rise" else (mu - u_new - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def min_detectable_log_shift(base: Sequence[float], worse: str, alpha: float) -> float | None:
    """The smallest shift (log scale: NEW = BASE's values x e^shift) that :func:`mann_whitney_p_worse` calls
    worse at ``alpha``, BASE's values standing for both runs: what a Mann-Whitney gate could have seen."""
    a = np.asarray(base, dtype=float)
    if len(a) < 2:
        return None
    sign = -1.0 if worse == "drop" else 1.0
    lo, hi = 0.0, 0.05
    while mann_whitney_p_worse(a, a * math.exp(sign * hi), worse) > alpha:
        lo, hi = hi, hi * 2
        if hi > 20:
            return sign * math.inf
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mann_whitney_p_worse(a, a * math.exp(sign * mid), worse) > alpha else (lo, mid)
    return sign * hi


# -- repeat rounds: a figure measured once per round, in both runs ------------------------------------------------
MIN_ROUNDS_DF = 8  # below this many degrees of freedom the t expansion below is too rough for the family's small alphas


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile at ``p`` with ``df`` degrees of freedom, by the Cornish-Fisher expansion about the
    normal quantile (Abramowitz & Stegun 26.7.5; within 1 % of the exact value from ``df`` >= 8 down to
    ``p`` = 1e-4, checked against scipy in the tests); the normal quantile for ``df`` = inf."""
    z = statistics.NormalDist().inv_cdf(p)
    if math.isinf(df):
        return z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def t_sf(t: float, df: float) -> float:
    """P(T > ``t``) for Student's t with ``df`` degrees of freedom: :func:`t_quantile` inverted by bisection
    on the probability (monotone), to 1e-12."""
    lo, hi = 1e-15, 1 - 1e-15
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_quantile(1 - mid, df) > t:  # the (1 - mid) quantile is above t: P(T > t) is more than mid
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class RoundsNoise:
    """The round-to-round noise of a log figure, pooled over every figure and both runs that have rounds:
    ``sd`` (log, 1 sd of one round) with ``df`` degrees of freedom."""

    sd: float
    df: int
    # Each run's shift beyond its rounds' spread (log, 1 sd): what moves every round of one run alike (a run faster in
    # all its rounds, the probe flat), which the rounds cannot show; 0 where none is known (noise_model.RunToRun).
    between: float = 0.0

    @classmethod
    def pooled(cls, groups: Sequence[Sequence[float]]) -> RoundsNoise | None:
        """From ``groups`` of one figure's per-round log values in one run: each group's deviations from its own
        mean, pooled. ``None`` without two rounds anywhere."""
        ss = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups if len(g) >= 2)
        df = sum(len(g) - 1 for g in groups if len(g) >= 2)
        return cls(math.sqrt(ss / df), df) if df > 0 else None

    def at_least(self, groups: Sequence[Sequence[float]]) -> RoundsNoise:
        """This noise for one figure whose own rounds (``groups``, each run's) spread wider than the pool: its own
        sd, where larger. The pool assumes every figure is as noisy as the others; a noisier one (a higher load, a
        figure of few requests) tested at the pool's sd would fail unchanged code more often than alpha."""
        own = RoundsNoise.pooled(groups)
        return RoundsNoise(own.sd, self.df, self.between) if own is not None and own.sd > self.sd else self

    def se(self, n_base: int, n_new: int) -> float:
        """The standard error of the difference of two runs' means over ``n_base`` and ``n_new`` rounds, each run's
        ``between`` term added (it does not shrink with more rounds)."""
        return math.sqrt(self.sd**2 * (1 / n_base + 1 / n_new) + 2 * self.between**2)

    def p_worse(self, base: Sequence[float], new: Sequence[float], worse: str) -> float:
        """One-sided p of NEW's mean log figure being worse ("drop": lower; "rise": higher) than BASE's: a
        two-sample t-test with this pooled noise."""
        diff = float(np.mean(new) - np.mean(base))
        se = self.se(len(base), len(new))
        if se <= 0:
            return 0.0 if (diff < 0 if worse == "drop" else diff > 0) else 1.0
        return t_sf(-diff / se if worse == "drop" else diff / se, self.df)

    def detectable(self, n_base: int, n_new: int, worse: str, alpha: float) -> float:
        """The smallest log move the worse way that :meth:`p_worse` rejects at ``alpha``."""
        sign = -1.0 if worse == "drop" else 1.0
        return sign * t_quantile(1 - alpha, self.df) * self.se(n_base, n_new)


def ratio_of_sums(base: dict, other: dict) -> float | None:
    """``R_other / R_base``, ``R = sum(num) / sum(den)`` over a side's requests: the figure :func:`ratio_ci`
    brackets; ``None`` where a side is empty or its rate is zero."""
    if not base or not other:
        return None
    (bn, bd), (on, od) = (np.asarray(list(s.values()), dtype=float).sum(0) for s in (base, other))
    return float((on / od) / (bn / bd)) if bd > 0 and od > 0 and bn > 0 else None


# Pair by prompt when at least this share of each side's requests has its prompt on the other side.
MIN_PAIRED_SHARE = 0.8


def resampled_ratios(base: dict, other: dict, n: int = N_RESAMPLES, seed: int = 0) -> np.ndarray | None:
    """Bootstrap resamples of ``R_other / R_base``, ``R = sum(num) / sum(den)`` over a side's requests; ``base``
    and ``other`` map a request id (the prompt) to ``(num, den)``. Paired by prompt where both sides ran the same
    prompts (the same prompts drawn for both: a speedup within one run compares methods on equal work, so the
    spread between prompts cancels), else each side drawn on its own. ``None`` with fewer than two requests a
    side."""
    common = [k for k in base if k in other]
    paired = len(common) >= 2 and len(common) >= MIN_PAIRED_SHARE * max(len(base), len(other))
    sides = [[base[k] for k in common], [other[k] for k in common]] if paired else [list(base.values()),
                                                                                  list(other.values())]  # fmt: skip
    if min(map(len, sides)) < 2:
        return None
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(s, dtype=float) for s in sides]
    idx_b = rng.integers(0, len(arrays[0]), size=(n, len(arrays[0])))
    idx_o = idx_b if paired else rng.integers(0, len(arrays[1]), size=(n, len(arrays[1])))
    r_b = arrays[0][idx_b, 0].sum(1) / arrays[0][idx_b, 1].sum(1)
    r_o = arrays[1][idx_o, 0].sum(1) / arrays[1][idx_o, 1].sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = r_o / r_b
    return ratios[np.isfinite(ratios) & (ratios > 0)]


def ratio_ci(base: dict, other: dict, level: float = 0.95, n: int = N_RESAMPLES,
             seed: int = 0) -> tuple[float, float] | None:  # fmt: skip
    """Percentile bootstrap interval of ``R_other / R_base`` (:func:`resampled_ratios`: paired by prompt where
    both sides ran the same prompts). ``None`` with fewer than two requests a side."""
    ratios = resampled_ratios(base, other, n, seed)
    if ratios is None or len(ratios) == 0:
        return None
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def ratio_null(base: dict, other: dict, n: int = N_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Resampled deviations of ``log(R_other / R_base)`` around its value (:func:`resampled_ratios`: paired by
    prompt where both sides ran the same prompts); empty where it cannot be resampled."""
    ratios, full = resampled_ratios(base, other, n, seed), ratio_of_sums(base, other)
    if ratios is None or full is None or len(ratios) < n // 2:
        return np.zeros(0)
    return np.log(ratios) - math.log(full)


def speedup_null(base_run: tuple[dict, dict], new_run: tuple[dict, dict], n: int = N_RESAMPLES,
                 seed: int = 0) -> np.ndarray:  # fmt: skip
    """Resampled deviations of ``log(S_new / S_base)`` around its value, where ``S`` is a speedup measured within
    one run (``(baseline side, method side)``, each a request id -> ``(num, den)`` map): each run's speedup
    resampled on its own (:func:`ratio_null`, paired by prompt inside the run). Empty where either run's speedup
    cannot be resampled."""
    logs = [ratio_null(*run, n=n, seed=seed + k) for k, run in enumerate((base_run, new_run))]
    m = min(map(len, logs))
    return logs[1][:m] - logs[0][:m] if m else np.zeros(0)


def min_detectable_log_move(null: np.ndarray, worse: str, sd: float, alpha: float,
                            df: float | None = None) -> float | None:  # fmt: skip
    """The smallest move the ``worse`` way ("drop" or "rise"; a log ratio, negative for a drop) whose one-sided
    p-value (:func:`p_worse_with_drift`) is at most ``alpha``: what this test could have seen at this noise.
    ``None`` where the null is empty."""
    if len(null) == 0:
        return None
    sign = -1.0 if worse == "drop" else 1.0
    lo, hi = 0.0, 0.05
    while p_worse_with_drift(sign * hi, null, worse, sd, df) > alpha:  # widen until the far end rejects
        lo, hi = hi, hi * 2
        if hi > 20:  # beyond e^20: nothing a test on this noise could see
            return sign * math.inf
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_worse_with_drift(sign * mid, null, worse, sd, df) > alpha else (lo, mid)
    return sign * hi


# -- the noise rule (docs/metrics.md, "The noise rule"): one interval for every decision ------------------------
Z_95 = 1.959964  # two-sided 95 % normal quantile
FASTER, SLOWER, UNCLEAR, NO_INTERVAL = "faster", "slower", "not distinguishable", "no interval"


def decision_interval(value: float | None, request_ci: tuple[float, float] | None,
                      drift_sd_log: float | None) -> tuple[float, float] | None:  # fmt: skip
    """The interval a ratio ``value`` is decided on: its requests' 95 % interval (``request_ci``, any shape,
    e.g. a percentile bootstrap) widened on the log scale by the machine's drift between the two measurements
    (``drift_sd_log``, 1 sd, :mod:`dflashbench.measure.drift`): each side's log half-width ``h`` becomes
    ``sqrt(h^2 + (1.96 x drift)^2)``, the two noises being independent. ``drift_sd_log`` ``None`` (not
    measured): the requests' interval as it is, and the reader is told drift is not in it. ``None`` where the
    requests give no interval: then nothing is decided."""
    if value is None or request_ci is None or not value > 0:
        return None
    lo, hi = request_ci
    if not (lo > 0 and hi > 0):
        return None
    if not drift_sd_log:
        return (lo, hi)
    d = Z_95 * drift_sd_log
    h_lo, h_hi = max(0.0, math.log(value / lo)), max(0.0, math.log(hi / value))
    return (value * math.exp(-math.hypot(h_lo, d)), value * math.exp(math.hypot(h_hi, d)))


def decide(interval: tuple[float, float] | None) -> str:
    """What a ratio's decision interval says: :data:`FASTER` (it lies above 1), :data:`SLOWER` (below 1),
    :data:`UNCLEAR` (it holds 1) or :data:`NO_INTERVAL` (none: never read as a win or a loss)."""
    if interval is None:
        return NO_INTERVAL
    lo, hi = interval
    if lo > 1.0:
        return FASTER
    if hi < 1.0:
        return SLOWER
    return UNCLEAR
