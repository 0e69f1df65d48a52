"""The draft length that pays at each load: acceptance per draft position and step cost, fitted from a K x load grid,
and the per-user rate and throughput they predict for every K at every load. Pure functions over :class:`Cell`.

A decode step verifies K drafts for each of the B requests decoded together; a request's per-user rate is the tokens a
step delivers over the step's time, ``tau(K) / t(K, B)`` (docs/metrics.md, "Why it pays"). So two fits predict every
cell of the grid:

**Acceptance per draft position**, ``a_i`` = P(the first i drafts are all accepted) (specdec_bench's *marginal* rate;
``tau(K) = 1 + a_1 + ... + a_K``). It is a property of the drafter and the prompts, not of the load, so it is pooled
over every load: position i over every cell that verified at least i drafts, weighted by its verification steps. For a
drafter whose K-draft is a prefix of its K+1-draft (a chain: EAGLE-3, MTP, n-gram; and DFlash on the reference
decoder, which verifies the first K of its block) pooling over K is exact; an engine that re-plans a DFlash block
for each K may accept differently per K, which the hold-out check below shows. Past the longest K measured, the
last conditional rates' geometric mean extends it (said so: an extrapolation).

**Step cost**, the decode seconds per step as each request sees them, ``t = tau delivered / per-user rate`` (so other
requests' prefills interleaved with the decode count, as the user feels them), fitted as

    t(K, B) = c0 + c1 * B + c2 * B * K + c3 * K

a fixed cost per step (weights read once), the anchor verified for each request, each extra draft token verified for
each request (the term that makes deep drafts cost more at high load), and drafting that grows with K (an EAGLE-3 chain
runs K passes). Linear, because each term is a count of work that a memory-bound step does in proportion; fitted by
least squares on the relative error (a step at c=64 weighs as much as one at c=1), with every coefficient kept
non-negative (a cost that shrinks with work is a fit to noise: its term is dropped) and no more terms than the cells
can pin down (one load: no B terms). Its parameter covariance gives the intervals.

Predictions carry 95 % intervals from both fits (a parametric bootstrap: acceptance per position and the step-cost
coefficients drawn from their estimates' spread); they are the fits' uncertainty, not a new measurement's spread. The
hold-out check (:func:`hold_out`) predicts each measured cell from a fit that left it out and compares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dflashbench.reference.draft_length import DraftSchedule

FEATURES = ("fixed", "per_request", "per_draft_token", "per_draft")  # c0 + c1 B + c2 B K + c3 K
DRAWS = 2000  # parametric-bootstrap draws behind each interval
OBJECTIVES = ("per-user", "throughput", "goodput")


@dataclass(frozen=True)
class Cell:
    """One measured (K, load) point of a method, as the fits read it."""

    method: str
    k: int
    concurrency: int
    per_user: float | None  # pooled per-user tok/s (tokens after the first over decode time)
    throughput: float | None  # system tok/s
    tau: float | None  # tokens per verification step, bonus included (the engine's counting)
    tau_delivered: float | None  # tokens the user received per step (tau less what a stop cut off)
    drafts: float  # verification steps that drafted: the weight of its acceptance
    marginal: tuple[float, ...] = ()  # a_i per position from the engine's counters (len K), or empty
    per_user_ci: tuple[float, float] | None = None
    tpots: tuple[float, ...] = ()  # its requests' TPOTs (s), for a TPOT SLO
    point_id: str = ""
    run_id: str = ""

    @property
    def step_s(self) -> float | None:
        """Decode seconds per step as a request sees them: tau delivered over the per-user rate."""
        tau = self.tau_delivered or self.tau
        return tau / self.per_user if tau and self.per_user else None


# --------------------------------------------------------------------------------------------------- acceptance
@dataclass(frozen=True)
class AcceptanceFit:
    """``a_i`` per draft position (index 0 is position 1), pooled over loads, with standard errors."""

    method: str
    marginal: tuple[float, ...]
    se: tuple[float, ...]
    steps: tuple[float, ...] = ()  # verification steps behind each position
    tail_ratio: float | None = None  # the conditional rate assumed past the last position measured
    per_k: dict[int, float] = field(default_factory=dict)  # tau measured at each K, pooled over loads

    @property
    def positions(self) -> int:
        return len(self.marginal)

    def marginal_at(self, i: int, marginal: Sequence[float] | None = None) -> float:
        """``a_i`` (1-based), past the measured positions by the tail's geometric rate (0 without one)."""
        a = self.marginal if marginal is None else marginal
        if i <= len(a):
            return float(a[i - 1])
        if not a or self.tail_ratio is None:
            return 0.0
        return float(a[-1]) * self.tail_ratio ** (i - len(a))

    def tau(self, k: int, marginal: Sequence[float] | None = None) -> float:
        """Tokens per step at draft length ``k``: ``1 + sum(a_1..a_k)``."""
        return 1.0 + sum(self.marginal_at(i, marginal) for i in range(1, k + 1))

    @property
    def conditional(self) -> tuple[float, ...]:
        """P(draft i accepted | the drafts before it were): ``a_i / a_(i-1)``."""
        out, before = [], 1.0
        for a in self.marginal:
            out.append(a / before if before > 0 else 0.0)
            before = a
        return tuple(out)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws of the marginal vector from its estimates' spread, each kept a survival function."""
        mean, sd = np.asarray(self.marginal, float), np.asarray(self.se, float)
        draws = np.clip(rng.normal(mean, sd, size=(n, len(mean))), 0.0, 1.0)
        return np.minimum.accumulate(draws, axis=1)


def fit_acceptance(cells: Sequence[Cell]) -> AcceptanceFit | None:
    """Pool each position's acceptance over the cells that verified it (see the module docstring). Where no cell
    reports per-position acceptance (SGLang counts none), the positions between two measured Ks share the rise of tau
    between them equally (:func:`from_tau`); ``None`` without any tau either."""
    with_pos = [c for c in cells if c.marginal and c.drafts > 0]
    if not with_pos:
        return from_tau(cells)
    top = max(len(c.marginal) for c in with_pos)
    marginal, se, steps = [], [], []
    for i in range(top):
        rows = [(c.marginal[i], c.drafts) for c in with_pos if len(c.marginal) > i]
        w = np.asarray([d for _, d in rows], float)
        m = np.asarray([r for r, _ in rows], float)
        a = float((w * m).sum() / w.sum())
        binomial = a * (1 - a) / w.sum()  # steps as independent trials: the least the spread can be
        between = float((w * (m - a) ** 2).sum() / w.sum() / (len(m) - 1)) if len(m) > 1 else 0.0
        marginal.append(a)
        se.append(math.sqrt(max(binomial, between)))
        steps.append(float(w.sum()))
    marginal = [float(a) for a in np.minimum.accumulate(marginal)]  # a survival function cannot rise (mixing Ks can nudge it)
    per_k: dict[int, list[tuple[float, float]]] = {}
    for c in cells:
        if c.tau is not None and c.drafts > 0:
            per_k.setdefault(c.k, []).append((c.tau, c.drafts))
    taus = {k: sum(t * w for t, w in v) / sum(w for _, w in v) for k, v in sorted(per_k.items())}
    return AcceptanceFit(with_pos[0].method, tuple(marginal), tuple(se), tuple(steps), tail_ratio(marginal), taus)


def from_tau(cells: Sequence[Cell]) -> AcceptanceFit | None:
    """Acceptance per position from tau at each K alone: tau(K) = 1 + a_1 + ... + a_K, so the positions from one
    measured K to the next share the rise of tau between them equally (then kept non-increasing). Exact at the Ks
    measured, a straight line between them; its standard errors are those of the taus, spread over the positions."""
    per_k: dict[int, list[tuple[float, float]]] = {}
    for c in cells:
        if c.tau is not None and c.drafts > 0:
            per_k.setdefault(c.k, []).append((c.tau, c.drafts))
    if not per_k:
        return None
    taus = {k: sum(t * w for t, w in v) / sum(w for _, w in v) for k, v in sorted(per_k.items())}
    spread = {k: float(np.std([t for t, _ in v])) / math.sqrt(len(v)) if len(v) > 1 else 0.0 for k, v in per_k.items()}
    marginal, se, before_k, before_tau = [], [], 0, 1.0
    for k, tau in taus.items():
        share = max(tau - before_tau, 0.0) / (k - before_k)
        marginal += [min(share, 1.0)] * (k - before_k)
        se += [spread[k] / (k - before_k)] * (k - before_k)
        before_k, before_tau = k, tau
    marginal = [float(a) for a in np.minimum.accumulate(marginal)]
    steps = tuple(float(sum(w for kk, v in per_k.items() if kk > i for _, w in v)) for i in range(len(marginal)))
    method = next(c.method for c in cells)
    return AcceptanceFit(method, tuple(marginal), tuple(se), steps, tail_ratio(marginal), taus)


def tail_ratio(marginal: Sequence[float]) -> float | None:
    """The geometric mean of the last (up to three) conditional rates: how acceptance decays past the last position."""
    cond = [b / a for a, b in zip([1.0, *marginal], marginal, strict=False) if a > 0][-3:]
    cond = [c for c in cond if c > 0]
    return float(np.exp(np.mean(np.log(cond)))) if cond else None


# ---------------------------------------------------------------------------------------------------- step cost
@dataclass(frozen=True)
class StepCostFit:
    """``t(K, B) = sum(coef_j * feature_j(K, B))`` over the kept :data:`FEATURES`."""

    features: tuple[str, ...]
    coef: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...] | None  # None: exactly determined (no residual to read a spread from)
    rel_rmse: float | None
    cells: int

    def seconds(self, k: int, batch: int, coef: Sequence[float] | None = None) -> float:
        return float(np.dot(design(self.features, k, batch), self.coef if coef is None else coef))

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        mean = np.asarray(self.coef, float)
        if self.cov is None:
            return np.tile(mean, (n, 1))
        return rng.multivariate_normal(mean, np.asarray(self.cov, float), size=n, method="svd")

    def describe(self) -> str:
        """``t = 1.2 ms + 0.31 ms·B + 0.05 ms·B·K`` as a person reads it."""
        words = {"fixed": "", "per_request": "·B", "per_draft_token": "·B·K", "per_draft": "·K"}
        return "t = " + " + ".join(f"{c * 1e3:.3g} ms{words[f]}" for f, c in zip(self.features, self.coef, strict=True))


def design(features: Sequence[str], k: int, batch: int) -> np.ndarray:
    value = {"fixed": 1.0, "per_request": float(batch), "per_draft_token": float(batch * k), "per_draft": float(k)}
    return np.asarray([value[f] for f in features], float)


DROP_ORDER = ("per_draft", "per_request", "per_draft_token", "fixed")  # the term to give up first when cells are few


def fit_step_cost(cells: Sequence[Cell]) -> StepCostFit | None:
    """Least squares on relative error, terms dropped until the cells pin every one down (and leave a residual to read
    the spread from, where three terms or more would not) and none is negative; ``None`` with fewer than two cells
    that have a step time."""
    rows = [(c.k, c.concurrency, c.step_s) for c in cells if c.step_s and c.step_s > 0]
    if len(rows) < 2:
        return None
    t = np.asarray([s for _, _, s in rows], float)
    y = np.ones(len(rows))

    def matrix(names: Sequence[str]) -> np.ndarray:  # each row divided by its t: the fit's error is relative
        return np.stack([design(names, k, b) for k, b, _ in rows]) / t[:, None]

    features = list(FEATURES)
    while features:
        X = matrix(features)
        rank = np.linalg.matrix_rank(X)
        if rank < len(features) or (len(rows) <= len(features) and len(features) > 2):
            redundant = [f for f in DROP_ORDER if f in features and len(features) > 1 and
                         np.linalg.matrix_rank(matrix([g for g in features if g != f])) == rank]  # fmt: skip
            features.remove(redundant[0] if redundant and rank < len(features) else
                            next(f for f in DROP_ORDER if f in features))  # fmt: skip
            continue
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        if (coef < 0).any() and len(features) > 1:
            features.pop(int(np.argmin(coef)))  # a negative cost is noise fitted: drop that term
            continue
        resid = y - X @ coef
        dof = len(rows) - len(features)
        cov = None
        if dof > 0:
            sigma2 = float(resid @ resid) / dof
            cov = tuple(map(tuple, sigma2 * np.linalg.pinv(X.T @ X)))
        rmse = math.sqrt(float(resid @ resid) / len(rows))
        return StepCostFit(tuple(features), tuple(float(c) for c in coef), cov, rmse, len(rows))
    return None


# -------------------------------------------------------------------------------------------------- predictions
@dataclass(frozen=True)
class Calibration:
    """What turns tokens per step into what a user and the system receive: the share of accepted tokens delivered
    (not cut by a stop), and a closed loop's throughput over concurrency x per-user rate at each load (TTFT, queueing
    and prefill keep it below 1)."""

    delivered: float = 1.0
    duty: dict[int, float] = field(default_factory=dict)

    def duty_at(self, load: int) -> float:
        if not self.duty:
            return 1.0
        nearest = min(self.duty, key=lambda c: (abs(math.log(c) - math.log(load)), c))
        return self.duty[nearest]


def calibrate(cells: Sequence[Cell]) -> Calibration:
    pairs = [(c.tau_delivered, c.tau, c.drafts) for c in cells if c.tau_delivered and c.tau and c.drafts > 0]
    delivered = sum(d * w for d, _, w in pairs) / sum(t * w for _, t, w in pairs) if pairs else 1.0
    by_load: dict[int, list[float]] = {}
    for c in cells:
        if c.throughput and c.per_user:
            by_load.setdefault(c.concurrency, []).append(c.throughput / (c.concurrency * c.per_user))
    return Calibration(min(delivered, 1.0), {c: float(np.median(v)) for c, v in sorted(by_load.items())})


@dataclass(frozen=True)
class Prediction:
    k: int
    concurrency: int
    per_user: float
    per_user_ci: tuple[float, float]
    throughput: float
    throughput_ci: tuple[float, float]
    tau: float
    step_s: float
    beyond: str | None = None  # what the prediction extrapolates past, if anything


def predict(acc: AcceptanceFit, cost: StepCostFit, ks: Sequence[int], loads: Sequence[int],
            cal: Calibration | None = None, *, measured_ks: Sequence[int] = (), measured_loads: Sequence[int] = (),
            draws: int = DRAWS, seed: int = 0) -> list[Prediction]:  # fmt: skip
    """Per-user rate and throughput for every K at every load, with 95 % intervals (module docstring)."""
    cal = cal or Calibration()
    rng = np.random.default_rng(seed)
    top = max(max(ks, default=1), acc.positions)
    a_draws = _extended(acc, acc.draw(rng, draws), top)  # [draws, top]: each draw's a_1..a_top
    tau_draws = 1.0 + np.cumsum(a_draws, axis=1)  # [draws, top]: tau at K = column + 1
    c_draws = np.asarray(cost.draw(rng, draws))  # [draws, features]
    top_k = max(measured_ks, default=acc.positions)
    lo_load, hi_load = min(measured_loads, default=0), max(measured_loads, default=0)
    out = []
    for load in loads:
        duty = cal.duty_at(load)
        for k in ks:
            tau, step = acc.tau(k), cost.seconds(k, load)
            steps = c_draws @ design(cost.features, k, load)
            with np.errstate(divide="ignore", invalid="ignore"):
                users = cal.delivered * (tau_draws[:, k - 1] if k > 0 else np.ones(draws)) / steps
            users = users[np.isfinite(users) & (users > 0)]
            per_user = cal.delivered * tau / step if step > 0 else float("nan")
            lo, hi = (float(x) for x in np.percentile(users, [2.5, 97.5])) if len(users) else (per_user, per_user)
            ci = (min(lo, per_user), max(hi, per_user))  # clipped draws (a rate near 1) can skew it past the estimate
            beyond = [w for w, past in (("K past the positions measured", k > max(top_k, acc.positions)),
                                        ("a load past those measured", bool(measured_loads) and not lo_load <= load <= hi_load))
                      if past]  # fmt: skip
            out.append(Prediction(k, load, per_user, ci, per_user * load * duty, (ci[0] * load * duty, ci[1] * load * duty),
                                  tau, step, "; ".join(beyond) or None))  # fmt: skip
    return out


def _extended(acc: AcceptanceFit, draws: np.ndarray, top: int) -> np.ndarray:
    """Draws of ``a_1..a_top``: past the positions measured, each draw's last rate decays by the tail's ratio."""
    extra = top - draws.shape[1]
    if extra <= 0:
        return draws[:, :top]
    ratio = acc.tail_ratio or 0.0
    tail = draws[:, -1:] * ratio ** np.arange(1, extra + 1)[None, :]
    return np.concatenate([draws, tail], axis=1)


# ------------------------------------------------------------------------------------------------ recommendation
@dataclass(frozen=True)
class Choice:
    """The K recommended at one load, the objective's value there, and the next best K."""

    concurrency: int
    k: int
    value: float
    ci: tuple[float, float]
    runner_up: int | None = None
    note: str | None = None


def recommend(preds: Sequence[Prediction], objective: str = "per-user", tpot_limits: Sequence[tuple[float, float]] = (),
              tpot_spread: dict[float, float] | None = None, measured_ks: Sequence[int] = (),
              measured_best: Mapping[int, int] | None = None) -> list[Choice]:  # fmt: skip
    """The K that maximises ``objective`` at each load: the per-user rate, the throughput, or goodput (the throughput
    where every TPOT bound holds, ``tpot_limits`` as (percentile, seconds); a K's TPOT percentile is its predicted mean
    TPOT times the measured percentile-over-mean ratio ``tpot_spread[percentile]``). A K the grid did not measure
    (``measured_ks``) is recommended only where the fit puts it beyond the interval of the best measured K (at a
    measured load the K measured best there, ``measured_best``: load -> K; elsewhere the measured K the fit ranks
    first); inside it, the fit cannot tell them apart, and the measured K is kept
    (:func:`_measured_unless_clearly_beaten`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    out = []
    for load in sorted({p.concurrency for p in preds}):
        here = [p for p in preds if p.concurrency == load]
        note = None
        if objective == "per-user":
            scored = [(p.per_user, p.per_user_ci, p) for p in here]
        elif objective == "throughput":
            scored = [(p.throughput, p.throughput_ci, p) for p in here]
        else:
            ok = [p for p in here if all(1.0 / p.per_user * (tpot_spread or {}).get(q, 1.0) <= limit
                                         for q, limit in tpot_limits)]  # fmt: skip
            if not ok:
                ok, note = here, "no K meets the SLO here: the fastest per user instead"
                scored = [(p.per_user, p.per_user_ci, p) for p in ok]
            else:
                scored = [(p.throughput, p.throughput_ci, p) for p in ok]
        scored.sort(key=lambda s: (-s[0], s[2].k))
        best, kept = _measured_unless_clearly_beaten(scored, measured_ks, (measured_best or {}).get(load))
        note = "; ".join(n for n in (note, kept) if n) or None
        runner_up = next((s[2].k for s in scored if s[2].k != best[2].k), None)
        out.append(Choice(load, best[2].k, best[0], best[1], runner_up, note))
    return out


def _measured_unless_clearly_beaten(scored: Sequence[tuple[float, tuple[float, float], Prediction]],
                                    measured_ks: Sequence[int], best_here: int | None) -> tuple[tuple, str | None]:  # fmt: skip
    """The top of ``scored`` (value, interval, prediction; best first), unless it is a K the grid did not measure and
    the best measured K's interval reaches its value: then the measured K, and why. The best measured K is the one
    measured best at this load (``best_here``) where the grid measured the load, else the measured K the fit ranks
    first. Seen on vLLM's CPU build: a fit of 15 % rms put K 14 and K 11 a few percent above the measured K 15 at
    c=2 and c=4, and the check measured that schedule 7 % and 18 % slower (docs/measurements/2026-11-29-tune)."""
    top = scored[0]
    if not measured_ks or top[2].k in measured_ks:
        return top, None
    wanted = [best_here] if best_here is not None else measured_ks
    measured = next((s for s in scored if s[2].k in wanted), None)
    if measured is None or measured[1][1] < top[0]:
        return top, None
    gain = top[0] / measured[0] - 1 if measured[0] > 0 else math.inf
    return measured, (f"K {top[2].k}, not measured, is predicted {gain:+.1%} over the measured K {measured[2].k}, "
                      f"inside K {measured[2].k}'s interval: K {measured[2].k} kept")


def schedule_of(choices: Sequence[Choice]) -> DraftSchedule:
    """The choices as vLLM's ranges: consecutive loads with one K merged, the first from 1 (a load below the first
    chosen takes its K), each range up to the load before the next."""
    ordered = sorted(choices, key=lambda c: c.concurrency)
    ranges: list[list[int]] = []
    for i, c in enumerate(ordered):
        lo = 1 if i == 0 else c.concurrency
        if ranges and ranges[-1][2] == c.k:
            continue
        if ranges:
            ranges[-1][1] = lo - 1
        ranges.append([lo, c.concurrency, c.k])
    ranges[-1][1] = max(ordered[-1].concurrency, ranges[-1][0])
    return DraftSchedule(tuple((lo, hi, k) for lo, hi, k in ranges))


def threshold_loads(schedule: DraftSchedule) -> list[int]:
    """The loads on both sides of each boundary where the schedule changes K (a schedule has been reported to fall
    off a cliff just past a threshold: vllm-project/vllm#49548)."""
    out: set[int] = set()
    for (_, hi, _), (lo, _, _) in zip(schedule.ranges, schedule.ranges[1:], strict=False):
        out |= {hi, lo}
    return sorted(out)


# ---------------------------------------------------------------------------------------------------- hold-out
@dataclass(frozen=True)
class HeldOut:
    """One measured cell predicted by fits that left it out."""

    k: int
    concurrency: int
    measured: float
    predicted: float
    ci: tuple[float, float]

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def hold_out(cells: Sequence[Cell], *, draws: int = 400, seed: int = 0) -> list[HeldOut]:
    """Leave each cell out in turn, fit on the rest, predict its per-user rate: the prediction's error on points it
    did not fit. A cell whose removal leaves too little to fit is skipped."""
    out = []
    usable = [c for c in cells if c.per_user]
    for i, cell in enumerate(usable):
        rest = usable[:i] + usable[i + 1:]
        acc, cost = fit_acceptance(rest), fit_step_cost(rest)
        if acc is None or cost is None:
            continue
        (p,) = predict(acc, cost, [cell.k], [cell.concurrency], calibrate(rest), draws=draws, seed=seed)
        out.append(HeldOut(cell.k, cell.concurrency, cell.per_user, p.per_user, p.per_user_ci))
    return out


def error_summary(held: Sequence[HeldOut]) -> tuple[float, HeldOut] | None:
    """The median absolute error and the worst cell, or ``None`` with nothing held out."""
    if not held:
        return None
    worst = max(held, key=lambda h: abs(h.error))
    return float(np.median([abs(h.error) for h in held])), worst
