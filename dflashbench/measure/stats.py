"""Small-sample statistics for repeated points: mean, sample standard deviation, 95% t-intervals, and
intervals on paired ratios. Pure functions over plain numbers; no pandas, no scipy.

Why a table and not scipy: scipy is not a runtime dependency of dflashbench (only of its tests), and a
95% interval over a handful of repeats needs one quantile per degree of freedom. :data:`T_975` holds the
two-sided 95% quantiles t_{0.975, df} of Student's t-distribution for df 1..30, 40, 60, 120, to six
decimals as ``scipy.stats.t.ppf(0.975, df)`` (scipy 1.17) gives them; between tabulated df the quantile is
interpolated linearly in 1/df (the classical way to read a t-table; off by < 1e-3 against scipy, which the
tests check), and beyond 120 it tends to the normal quantile 1.959964.

Speedup intervals are *paired*: a method and its baseline measured in the same repeat round form one ratio;
the interval is a t-interval on the logarithms of the per-round ratios, exponentiated back. The log makes
the interval multiplicative (a 2x and a 0.5x speedup are equally far from 1), keeps it positive, and its
centre is the geometric mean of the ratios.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

LEVEL = 0.95  # every interval here is two-sided 95%
T_975: dict[int, float] = {
    1: 12.706205, 2: 4.302653, 3: 3.182446, 4: 2.776445, 5: 2.570582, 6: 2.446912, 7: 2.364624, 8: 2.306004,
    9: 2.262157, 10: 2.228139, 11: 2.200985, 12: 2.178813, 13: 2.160369, 14: 2.144787, 15: 2.131450,
    16: 2.119905, 17: 2.109816, 18: 2.100922, 19: 2.093024, 20: 2.085963, 21: 2.079614, 22: 2.073873,
    23: 2.068658, 24: 2.063899, 25: 2.059539, 26: 2.055529, 27: 2.051831, 28: 2.048407, 29: 2.045230,
    30: 2.042272, 40: 2.021075, 60: 2.000298, 120: 1.979930,
}  # fmt: skip
Z_975 = 1.959964  # the normal quantile: the limit as df grows


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: exact (to 6 decimals) for tabulated df, interpolated in 1/df between them."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df in T_975:
        return T_975[df]
    known = sorted(T_975)
    upper = next((d for d in known if d > df), None)
    lower = max(d for d in known if d < df)
    hi_q, hi_inv = (T_975[upper], 1 / upper) if upper is not None else (Z_975, 0.0)
    lo_q, lo_inv = T_975[lower], 1 / lower
    w = (1 / df - hi_inv) / (lo_inv - hi_inv)
    return hi_q + w * (lo_q - hi_q)


def finite(values: Iterable[object]) -> list[float]:
    """The finite numbers among ``values`` (None, NaN, infinities and non-numbers dropped)."""
    out = []
    for v in values:
        if v is None or isinstance(v, bool):
            continue
        try:
            x = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            out.append(x)
    return out


@dataclass(frozen=True, slots=True)
class Interval:
    """``mean`` of ``n`` values with their sample standard deviation ``sd`` and the 95% interval
    [``lo``, ``hi``]; ``sd``, ``lo`` and ``hi`` are None with fewer than two values (no spread to judge)."""

    mean: float
    n: int
    sd: float | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def half_width(self) -> float | None:
        return None if self.lo is None or self.hi is None else (self.hi - self.lo) / 2

    def contains(self, value: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= value <= self.hi


def mean_sd(values: Iterable[object]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1 in the denominator) of the finite values; the sd is None
    for fewer than two values, the mean None for none."""
    xs = finite(values)
    if not xs:
        return None, None
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def t_interval(values: Iterable[object]) -> Interval | None:
    """mean +- t_{0.975, n-1} * sd / sqrt(n) over the finite values; None when there are none."""
    xs = finite(values)
    mean, sd = mean_sd(xs)
    if mean is None:
        return None
    if sd is None:
        return Interval(mean=mean, n=len(xs))
    half = t_quantile_975(len(xs) - 1) * sd / math.sqrt(len(xs))
    return Interval(mean=mean, n=len(xs), sd=sd, lo=mean - half, hi=mean + half)


def ratio_interval(ratios: Iterable[object]) -> Interval | None:
    """The geometric mean of positive paired ratios and the 95% t-interval of their logarithms, mapped back
    (``sd`` is the sd of the log ratios). Non-positive ratios cannot be logged and are dropped."""
    logs = [math.log(r) for r in finite(ratios) if r > 0]
    found = t_interval(logs)
    if found is None:
        return None
    back = lambda v: None if v is None else math.exp(v)  # noqa: E731
    return Interval(mean=math.exp(found.mean), n=found.n, sd=found.sd, lo=back(found.lo), hi=back(found.hi))


def paired_ratios(numerator: dict[object, object], denominator: dict[object, object]) -> list[float]:
    """``numerator[k] / denominator[k]`` for every round ``k`` both have a finite value for (and the
    denominator is not zero): the pairs a paired interval is computed over."""
    out = []
    for k in numerator:
        if k not in denominator:
            continue
        a, b = finite([numerator[k]]), finite([denominator[k]])
        if a and b and b[0] != 0:
            out.append(a[0] / b[0])
    return out
