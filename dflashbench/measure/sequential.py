"""Points sized by the precision they reach: the sequential stopping rule (docs/metrics.md, "Sizing a point").

A point's key figures are ratios of sums over its requests: throughput (tokens / time in flight), the pooled
per-user rate (tokens after the first / decode time), tau (tokens committed / verification steps), and for a
speculative method its pooled per-user rate over AR's on the same prompts. At checks 10 % of its requests apart
(:func:`next_check`) the point asks: is every figure's 95 % interval within ``precision`` of the figure (relative
half-width)? It stops at the first check where it is, once past its floors; it stops at its ceiling otherwise,
and says what it reached.

**The interval checked** is a t-interval on the linearised (Taylor) variance of a ratio estimator ``R = sum(x) / sum(y)``:
``var(log R) ~ sum_i (x_i / X - y_i / Y)^2``, summed per *cluster* before squaring (Woodruff 1971, "A simple
method for approximating the variance of a complicated estimate", JASA 66; the ratio estimator's form in
Lehtonen & Pahkinen, "Practical Methods for Design and Analysis of Complex Surveys", 2004, pp. 93-95). A
cluster is one round of the closed loop (c requests sent together share the machine's state at that moment),
so requests that move together are not counted as independent evidence. A paired ratio (method over AR) takes
the difference of the two sides' terms per prompt. Cheap enough to run every few requests, off the client's
event loop; the report's bootstrap interval agrees with it (tests/measure/test_sequential.py).

**The stopping rule** is Chow and Robbins' fixed-width sequential interval (Y. S. Chow and H. Robbins, "On the
asymptotic theory of fixed-width sequential confidence intervals for the mean", Ann. Math. Statist. 36 (1965)
457-462): stop at the first ``n >= n0`` with ``z^2 (v_n + 1 / n^2) <= d^2``, where ``v_n`` is the estimate's
variance at ``n`` (here on the log scale) and ``d`` the asked half-width; the ``1 / n^2`` term keeps an early,
luckily tight variance from stopping it. Its coverage tends to the nominal level as ``d`` shrinks; at the widths
used here it is measured by simulation, closed-loop rounds and prompts of different tau included
(tests/measure/test_sequential.py prints it).

**The noise rule** (docs/metrics.md): a paired ratio is also widened by the machine's drift between the two
points (``drift_sd_log``, :mod:`dflashbench.measure.drift`). Drift does not shrink with more requests: where
``1.96 x drift`` alone exceeds the asked half-width, the precision cannot be reached by sending more, and the
point stops at its floor saying so.

Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dflashbench.measure.stats import t_quantile_975

Z_95 = 1.959964


@dataclass(frozen=True, slots=True)
class Terms:
    """One figure's per-request terms: ``num[i] / den[i]`` summed is the figure; ``cluster[i]`` the request's
    round (requests of one round share its noise); ``key[i]`` its prompt (pairs a ratio with AR's)."""

    num: Sequence[float]
    den: Sequence[float]
    cluster: Sequence[int]
    key: Sequence[str] = ()


def _cluster_sums(values: np.ndarray, clusters: Sequence[int]) -> np.ndarray:
    _, inverse = np.unique(np.asarray(clusters), return_inverse=True)
    return np.bincount(inverse, weights=values)


def ratio_log_var(t: Terms) -> tuple[float, float, int] | None:
    """``(R, var(log R), clusters)`` of ``R = sum(num) / sum(den)``, the variance linearised and clustered;
    ``None`` with fewer than two clusters or an empty side."""
    x, y = np.asarray(t.num, dtype=float), np.asarray(t.den, dtype=float)
    if len(x) == 0 or x.sum() <= 0 or y.sum() <= 0:
        return None
    u = _cluster_sums(x / x.sum() - y / y.sum(), t.cluster)
    k = len(u)
    if k < 2:
        return None
    return float(x.sum() / y.sum()), float(k / (k - 1) * np.sum(u**2)), k


def paired_log_var(method: Terms, base: Terms) -> tuple[float, float, int] | None:
    """``(R_method / R_base, var(log of it), rounds)`` over the prompts both ran (each side's figure over its common
    prompts). The two sides' linearised terms are differenced per prompt, so the prompts' own spread cancels, and
    summed per round of the method's point before squaring: both points send the same prompts in the same order
    at the same concurrency, so a round of one holds the same prompts as the same round of the other, and each
    side's round-to-round noise stays in. ``None`` with fewer than two common prompts or rounds."""
    common = sorted(set(method.key) & set(base.key))
    if len(common) < 2:
        return None
    pos = {k: i for i, k in enumerate(common)}

    def per_prompt(t: Terms) -> tuple[np.ndarray, np.ndarray]:
        x, y = np.zeros(len(common)), np.zeros(len(common))
        for k, n, d in zip(t.key, t.num, t.den, strict=True):
            if k in pos:
                x[pos[k]] += n
                y[pos[k]] += d
        return x, y

    (xm, ym), (xb, yb) = per_prompt(method), per_prompt(base)
    if min(xm.sum(), ym.sum(), xb.sum(), yb.sum()) <= 0:
        return None
    unit = np.zeros(len(common), dtype=int)
    for k, c in zip(method.key, method.cluster, strict=True):
        if k in pos:
            unit[pos[k]] = c
    u = _cluster_sums((xm / xm.sum() - ym / ym.sum()) - (xb / xb.sum() - yb / yb.sum()), unit)
    k = len(u)
    if k < 2:
        return None
    return float((xm.sum() / ym.sum()) / (xb.sum() / yb.sum())), float(k / (k - 1) * np.sum(u**2)), k


def half_width(log_var: float, n: int, clusters: int, drift_sd_log: float = 0.0) -> float:
    """The relative half-width the rule checks: ``exp(sqrt((t v + 1/n^2) + (z drift)^2)) - 1`` on the log
    scale, ``t`` the 97.5 % t quantile with ``clusters - 1`` degrees of freedom (the variance is estimated from
    that many independent rounds: the normal quantile would stop early on a luckily small one), ``1/n^2``
    Chow and Robbins' guard, ``drift`` the noise rule's term."""
    t = t_quantile_975(max(clusters - 1, 1))
    return math.expm1(math.sqrt(t * t * (log_var + 1.0 / max(n, 1) ** 2) + (Z_95 * drift_sd_log) ** 2))


@dataclass(frozen=True, slots=True)
class Floors:
    """What a point sends whatever its precision: ``min_requests`` (k x c: every stream runs several, so the
    steady window holds; at least one full round), ``min_per_category`` of each category a mixed workload has,
    and ``ceiling`` (the workload's prompts, or ``--num-prompts``, or the plan's share of a budget)."""

    min_requests: int
    ceiling: int
    min_per_category: int = 0
    categories: tuple[str, ...] = ()


# The fewest rounds a point's interval is read from: below it the variance, estimated from that many rounds,
# is itself too noisy to stop on (a simulated closed loop stopped at 4 rounds covered 89 % instead of 95 %).
MIN_ROUNDS = 8


def floors_for(concurrency: int, per_stream: int, prompts: int, categories: Sequence[str] = (),
               min_per_category: int = 4) -> Floors:  # fmt: skip
    """A point's floors: ``per_stream`` requests per stream and at least :data:`MIN_ROUNDS` rounds;
    ``min_per_category`` per category; the ceiling is its prompts, never below the floor."""
    low = max(concurrency, 1) * max(per_stream, MIN_ROUNDS, 1)
    return Floors(min_requests=low, ceiling=max(prompts, low), min_per_category=min_per_category,
                  categories=tuple(dict.fromkeys(categories)))  # fmt: skip


CHECK_GROWTH = 1.1


def next_check(n: int, concurrency: int) -> int:
    """When to look again after a check at ``n`` requests: 10 % more requests, rounded up to a whole round of
    the streams (one round at the least). Looking after every request lets the rule stop on a lucky stretch: in
    the simulation (tests/measure/test_sequential.py) checks every two rounds covered 89 %, checks 5-10 % apart
    92-94 %, of a nominal 95 %."""
    c = max(concurrency, 1)
    return max(n + c, math.ceil(n * CHECK_GROWTH / c) * c)


@dataclass(frozen=True, slots=True)
class Figure:
    """A key figure at a check: its value, the variance of its log from the requests (``log_var``, over ``n``
    requests or prompts) and the machine's drift that the noise rule adds to it (paired ratios only)."""

    value: float
    log_var: float
    n: int
    clusters: int
    drift_sd_log: float = 0.0

    @classmethod
    def of(cls, found: tuple[float, float, int] | None, n: int, drift_sd_log: float = 0.0) -> Figure | None:
        """From :func:`ratio_log_var` / :func:`paired_log_var`'s answer (``None`` stays ``None``)."""
        return None if found is None else cls(found[0], found[1], n, found[2], drift_sd_log)

    @property
    def requests_half_width(self) -> float:
        return half_width(self.log_var, self.n, self.clusters)

    @property
    def half_width(self) -> float:
        return half_width(self.log_var, self.n, self.clusters, self.drift_sd_log)

    def drift_limited(self, precision: float) -> bool:
        """Whether the drift alone is wider than ``precision``: more requests cannot reach it."""
        return math.expm1(Z_95 * self.drift_sd_log) > precision

    def done(self, precision: float) -> bool:
        """Precise enough; a drift-limited figure once its requests' own part is within ``precision``."""
        width = self.requests_half_width if self.drift_limited(precision) else self.half_width
        return width <= precision


PRECISE, CEILING, UNREACHABLE = "precise", "ceiling", "precision below the machine's drift"


@dataclass(frozen=True, slots=True)
class Check:
    """One look at a point's precision: its figures and whether it stops (``reason``: :data:`PRECISE`,
    :data:`CEILING`, :data:`UNREACHABLE`, or ``""``: go on)."""

    n: int
    figures: Mapping[str, Figure]
    stop: bool
    reason: str
    precision: float

    @property
    def widest(self) -> tuple[str, float] | None:
        """The figure furthest from the precision, and its half-width (what a progress bar shows)."""
        if not self.figures:
            return None
        name = max(self.figures, key=lambda k: self.figures[k].half_width)
        return name, self.figures[name].half_width

    @property
    def drift_limited(self) -> tuple[str, ...]:
        return tuple(k for k, f in self.figures.items() if f.drift_limited(self.precision))


def check(n: int, figures: Mapping[str, Figure | None], precision: float, floors: Floors,
          per_category: Mapping[str, int] | None = None) -> Check:  # fmt: skip
    """Whether a point with ``n`` finished requests stops. ``figures``: each key figure, or ``None`` where it is
    not computable yet (that keeps the point going, up to its ceiling)."""
    known = {k: f for k, f in figures.items() if f is not None}
    if n >= floors.ceiling:
        return Check(n, known, True, CEILING, precision)
    counts = per_category or {}
    if n < floors.min_requests or any(counts.get(c, 0) < floors.min_per_category for c in floors.categories):
        return Check(n, known, False, "", precision)
    if len(known) < len(figures) or not all(f.done(precision) for f in known.values()):
        return Check(n, known, False, "", precision)
    limited = any(f.drift_limited(precision) for f in known.values())
    return Check(n, known, True, UNREACHABLE if limited else PRECISE, precision)


@dataclass(frozen=True)
class Reached:
    """What the points sized by precision reached: the half-width ``asked``, how many points and requests
    (``requests``: the fewest and the most), how many stopped for each reason (:data:`PRECISE`, :data:`CEILING`,
    :data:`UNREACHABLE`), and the widest interval each reached, from the narrowest point's to the widest's."""

    asked: float
    points: int
    requests: tuple[int, int]
    reasons: Mapping[str, int]
    widest: tuple[float, float]
    widths: tuple[float, ...] = ()  # each point's widest half-width, in the points' order


def reached(extras: Iterable) -> Reached | None:
    """:class:`Reached` of points' ``extra["precision"]`` records (category "all" rows); ``None`` where no point
    was sized by precision."""
    sized = [e["precision"] for e in extras if isinstance(e, dict) and isinstance(e.get("precision"), dict)
             and e["precision"].get("half_width")]  # fmt: skip
    if not sized:
        return None
    widths = [max(p["half_width"].values()) for p in sized]
    counts = [int(p.get("requests") or 0) for p in sized]
    reasons: dict[str, int] = {}
    for p in sized:
        reasons[str(p.get("reason"))] = reasons.get(str(p.get("reason")), 0) + 1
    return Reached(float(sized[0].get("asked") or 0), len(sized), (min(counts), max(counts)), reasons,
                   (min(widths), max(widths)), tuple(widths))  # fmt: skip
