"""tune's readings from runs' points and requests: each method's K arms (``dflash-k3``) as fit cells
(:mod:`dflashbench.measure.tune_fit`), the best K at each load with the hold-out check, the recommended K's measured
rate against the best measured K's, and a tuned schedule's measured gain over the method's fixed K beside it (a named
arm, ``dflash-tuned``, against the method itself, paired by prompt). What the report's "Draft length" section and
``dflashbench tune`` say; pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dflashbench.measure import acceptance, metrics, readings
from dflashbench.measure import tune_fit as tf
from dflashbench.measure.analysis import INTERACTIVITY, closed_loop, finite_number, usable_points
from dflashbench.measure.request_index import index_of
from dflashbench.reference.draft_length import DraftSchedule
from dflashbench.types import Method, RequestResult


def _arm(method: object) -> Method | None:
    try:
        return Method.parse(str(method))
    except ValueError:
        return None


def point_requests(requests: pd.DataFrame, row: dict) -> list[RequestResult]:
    """A point's measured requests, every repeat round's."""
    ids = row.get("repeat_point_ids")
    ids = [str(i) for i in ids] if isinstance(ids, list) and ids else [str(row.get("point_id"))]
    return [r for pid in ids for r in index_of(requests).of(str(row.get("run_id")), pid)]


def _rate_ci(results: Sequence[RequestResult], n: int = 1000, seed: int = 0) -> tuple[float, float] | None:
    """95 % bootstrap interval of the pooled per-user rate over the requests."""
    arr = np.asarray([t for r in results if (t := readings.TERMS[readings.PER_USER](r)) is not None], float)
    if len(arr) < 2:
        return None
    idx = np.random.default_rng(seed).integers(0, len(arr), size=(n, len(arr)))
    rates = arr[idx, 0].sum(1) / arr[idx, 1].sum(1)
    lo, hi = np.percentile(rates, [2.5, 97.5])
    return float(lo), float(hi)


def cells_of(points: pd.DataFrame, requests: pd.DataFrame) -> dict[str, list[tf.Cell]]:
    """Every ``-kN`` arm's closed-loop points (category all) as cells, by the arm's method."""
    usable = closed_loop(usable_points(points)) if not points.empty else points
    out: dict[str, list[tf.Cell]] = {}
    if usable.empty:
        return out
    for row in usable[usable["category"] == "all"].to_dict("records"):
        arm = _arm(row.get("method"))
        if arm is None or arm.arm_k is None:
            continue
        results = point_requests(requests, row)
        tau = finite_number(row.get("tau"))
        spec = [r for r in results if r.spec_verify_steps]
        drafts = float(sum(r.spec_verify_steps for r in spec)) or float(row.get("num_requests") or 0)
        marginal = tuple(float(x) for x in (row.get("accepted_per_pos_rate") or ())[: arm.arm_k])
        tpots = tuple(t for r in results if (t := metrics.tpot_s(r)) is not None)
        out.setdefault(arm.base.value, []).append(tf.Cell(
            arm.base.value, arm.arm_k, int(row["concurrency"]), per_user=finite_number(row.get(INTERACTIVITY)),
            throughput=finite_number(row.get("throughput_tok_per_s")), tau=tau,
            tau_delivered=acceptance.delivered_tau(results), drafts=drafts, marginal=marginal,
            per_user_ci=_rate_ci(results), tpots=tpots, point_id=str(row.get("point_id")),
            run_id=str(row.get("run_id"))))  # fmt: skip
    return out


def tpot_spread(cells: Sequence[tf.Cell], percentiles: Sequence[float]) -> dict[float, float]:
    """Each TPOT percentile over the mean TPOT, the median over the cells: how far a request's tail sits above the
    mean that the per-user rate predicts."""
    out = {}
    for q in percentiles:
        ratios = [float(np.percentile(c.tpots, q)) * c.per_user for c in cells if len(c.tpots) >= 2 and c.per_user]
        out[q] = float(np.median(ratios)) if ratios else 1.0
    return out


@dataclass(frozen=True)
class BestMeasured:
    """At a measured load: the recommended K's measured per-user rate over the best measured K's, paired by prompt."""

    concurrency: int
    recommended: int
    best: int
    ratio: float | None
    ci: tuple[float, float] | None
    recommended_measured: bool = True  # False: the fit recommends a K between the grid's; the check measures it

    @property
    def within(self) -> bool:
        """The recommended K is the best measured, or not told apart from it by the interval."""
        return self.recommended == self.best or (self.ci is not None and self.ci[0] <= 1.0 <= self.ci[1])


@dataclass(frozen=True)
class Gain:
    """A tuned arm's measured rate over the method's at one load, paired by prompt (95 % interval from the
    requests, and the drift between the two points where the run's speed probe read it)."""

    concurrency: int
    tuned: str
    fixed: str
    per_user: float | None
    per_user_ci: tuple[float, float] | None
    throughput: float | None
    throughput_ci: tuple[float, float] | None

    @property
    def slower(self) -> bool:
        """Slower per user than the fixed K by more than the interval."""
        return self.per_user_ci is not None and self.per_user_ci[1] < 1.0


@dataclass
class TuneReading:
    method: str
    objective: str
    cells: list[tf.Cell]
    acceptance: tf.AcceptanceFit | None = None
    cost: tf.StepCostFit | None = None
    calibration: tf.Calibration | None = None
    predictions: list[tf.Prediction] = field(default_factory=list)
    choices: list[tf.Choice] = field(default_factory=list)
    schedule: DraftSchedule | None = None
    held: list[tf.HeldOut] = field(default_factory=list)
    best: list[BestMeasured] = field(default_factory=list)
    why_not: str | None = None  # why there is no fit

    @property
    def measured_ks(self) -> list[int]:
        return sorted({c.k for c in self.cells})

    @property
    def measured_loads(self) -> list[int]:
        return sorted({c.concurrency for c in self.cells})


def tune_reading(cells: Sequence[tf.Cell], requests: pd.DataFrame | None = None, *, objective: str = "per-user",
                 ks: Sequence[int] | None = None, loads: Sequence[int] | None = None,
                 tpot_limits: Sequence[tuple[float, float]] = (), acc: tf.AcceptanceFit | None = None,
                 hold_out: bool = True) -> TuneReading:  # fmt: skip
    """Fit, predict every K in ``ks`` (default 1 to the longest measured) at every load in ``loads`` (default every
    integer up to the highest measured), recommend by ``objective``, hold out, and check the recommendation against
    the best measured K at each measured load. ``acc``: an acceptance fit from elsewhere (a speculation profile) in
    place of the cells' own."""
    cells = list(cells)
    method = cells[0].method if cells else (acc.method if acc else "")
    out = TuneReading(method, objective, cells)
    out.acceptance = acc or tf.fit_acceptance(cells)
    out.cost = tf.fit_step_cost(cells)
    if out.acceptance is None or out.cost is None:
        out.why_not = ("no per-position acceptance in these points (the engine exposes none)" if out.acceptance is None
                       else "fewer than two points with a per-user rate and tau: no step cost to fit")  # fmt: skip
        return out
    out.calibration = tf.calibrate(cells)
    ks = list(ks or range(1, max(out.measured_ks or [out.acceptance.positions]) + 1))
    loads = list(loads or range(1, max(out.measured_loads or [1]) + 1))
    out.predictions = tf.predict(out.acceptance, out.cost, ks, loads, out.calibration, measured_ks=out.measured_ks,
                                 measured_loads=out.measured_loads)  # fmt: skip
    spread = tpot_spread(cells, [q for q, _ in tpot_limits])
    out.choices = tf.recommend(out.predictions, objective, tpot_limits, spread, measured_ks=out.measured_ks,
                               measured_best=measured_best_k(cells, objective))  # fmt: skip
    out.schedule = tf.schedule_of(out.choices)
    out.held = tf.hold_out(cells) if hold_out else []
    if requests is not None:
        out.best = best_measured(cells, out.choices, requests)
    return out


def measured_best_k(cells: Sequence[tf.Cell], objective: str) -> dict[int, int]:
    """The K measured best at each measured load: by per-user rate, or by throughput for the throughput and goodput
    objectives (goodput's bound is the fit's to apply; a grid point's own TPOTs are too few to hold it)."""
    value = (lambda c: c.per_user) if objective == "per-user" else (lambda c: c.throughput)
    out: dict[int, tuple[float, int]] = {}
    for c in cells:
        v = value(c)
        if v and (c.concurrency not in out or v > out[c.concurrency][0]):
            out[c.concurrency] = (v, c.k)
    return {load: k for load, (_, k) in out.items()}


def best_measured(cells: Sequence[tf.Cell], choices: Sequence[tf.Choice], requests: pd.DataFrame) -> list[BestMeasured]:
    chosen = {c.concurrency: c.k for c in choices}
    best_at = measured_best_k(cells, "per-user")
    out = []
    for load in sorted({c.concurrency for c in cells}):
        here = {c.k: c for c in cells if c.concurrency == load and c.per_user}
        rec = chosen.get(load)
        if not here or rec is None:
            continue
        best = best_at[load]
        if rec not in here:  # a K the grid did not hold: said, not dropped (the check measures it)
            out.append(BestMeasured(load, rec, best, None, None, recommended_measured=False))
            continue
        sides = [_requests_of(requests, here[k]) for k in (best, rec)]
        p = readings.paired(readings.terms(sides[0], readings.PER_USER), readings.terms(sides[1], readings.PER_USER))
        out.append(BestMeasured(load, rec, best, p.value, p.ci))
    return out


def _requests_of(requests: pd.DataFrame, cell: tf.Cell) -> list[RequestResult]:
    return index_of(requests).of(cell.run_id, cell.point_id)


def gains(points: pd.DataFrame, requests: pd.DataFrame) -> list[Gain]:
    """Each named arm (``dflash-tuned``: a schedule) against its method, at every load both were measured at in one
    run: the per-user and throughput ratios, paired by prompt."""
    usable = closed_loop(usable_points(points)) if not points.empty else points
    out: list[Gain] = []
    if usable.empty:
        return out
    alls = usable[usable["category"] == "all"]
    for _, group in alls.groupby("run_id", sort=False):  # a gain pairs two points of one run
        at = {(str(r["method"]), int(r["concurrency"])): r for r in group.to_dict("records")}
        for (label, load), row in sorted(at.items()):
            arm = _arm(label)
            if arm is None or arm.variant is None or arm.arm_k is not None or (arm.base.value, load) not in at:
                continue
            fixed = at[(arm.base.value, load)]
            sides = (point_requests(requests, fixed), point_requests(requests, row))
            per_user = readings.paired(*(readings.terms(s, readings.PER_USER) for s in sides))
            tput = readings.paired(*(readings.terms(s, readings.THROUGHPUT) for s in sides))
            out.append(Gain(load, label, arm.base.value, per_user.value, per_user.ci, tput.value, tput.ci))
    return out


def tau_ways(points: pd.DataFrame, requests: pd.DataFrame) -> list[dict]:
    """tau three ways at each arm's point (:func:`dflashbench.measure.speculation_profile.tau_conventions`): per
    request, pooled per step, token-weighted, and the counters' own beside 1 + their per-position rates."""
    from dflashbench.measure.speculation_profile import tau_conventions

    usable = closed_loop(usable_points(points)) if not points.empty else points
    out = []
    if usable.empty:
        return out
    for row in usable[usable["category"] == "all"].to_dict("records"):
        arm = _arm(row.get("method"))
        if arm is None or arm.variant is None:
            continue
        t = tau_conventions(point_requests(requests, row), tuple(row.get("accepted_per_pos_rate") or ()),
                            finite_number(row.get("tau")))  # fmt: skip
        out.append({"method": arm.value, "concurrency": int(row["concurrency"]), "tau": t})
    return out
