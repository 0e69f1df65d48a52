"""``--budget``: a sweep planned to fit a time budget (docs/metrics.md, "Sizing a point"). Before the run, the
tightest precision whose planned duration fits the budget at the slow end of the per-user rate is found
(:func:`dflashbench.plan.precision_plan.budget_precision`) and becomes the suite's ``precision`` (the looser of
the two where the suite asks for one too); the dry run and the console say which, and which points' prompts run
out before it. The rates are the dry run's (:func:`dflashbench.plan.pace.method_rates`: ``--assume-user-tok-per-s``,
the embedded pair's measured ones, else each method's estimate for the model, GPUs, engine and tp); a model with
none (its shape unknown) cannot be planned, and the sweep says how to give one. While the sweep runs,
:class:`Pacer` re-plans from the points measured so far, each method at its own pace, and prints the time left."""

from __future__ import annotations

import threading
import time

from dflashbench.errors import UserError
from dflashbench.plan.grid import SweepContext
from dflashbench.plan.pace import sweep_rates as plan_rates
from dflashbench.plan.plan_size import duration_s, human_duration, run_size
from dflashbench.plan.precision_plan import budget_precision
from dflashbench.workloads.traces import parse_duration


class Planner:
    """How long a set of the sweep's points is planned to take: :func:`dflashbench.plan.plan_size.run_size` over
    the sweep's workloads and traces (read once), at a precision and a per-user rate."""

    def __init__(self, ctx: SweepContext) -> None:
        from dflashbench.run.sweep_console import trace_sizes, workload_sizes

        self.suite, self.sizes, self.traces = ctx.suite, workload_sizes(ctx), trace_sizes(ctx.traces)

    def seconds(self, points: list, precision: float | None, tok_per_s: float) -> float:
        per_stream = self.suite.requests_per_stream_at if self.suite.slo else self.suite.requests_per_stream
        size = run_size(points, self.sizes, per_stream, self.suite.warmup_requests, self.traces,
                        precision=precision)  # fmt: skip
        return duration_s(size, tok_per_s)


def budget_seconds(suite) -> float | None:
    """The suite's ``budget`` in seconds, or ``None`` without one."""
    return parse_duration(suite.budget, "--budget") if suite.budget is not None else None


def apply_budget(ctx: SweepContext, assume_rate: tuple[float, float] | None) -> str | None:
    """Set ``ctx.suite.precision`` from the suite's ``budget``; returns the line saying what it chose (``None``
    without a budget)."""
    suite = ctx.suite
    if suite.budget is None:
        return None
    budget_s = budget_seconds(suite)
    rates = plan_rates(ctx, assume_rate)
    if rates is None:
        from dflashbench.embedded import name_of

        raise UserError(f"--budget {suite.budget}: no per-user rate for {name_of(ctx.pair.target)} to plan with: its "
                        "layers and parameters are not known here (not in the model registry, no config.json read); "
                        "give --assume-user-tok-per-s N (tok/s per user your GPUs reach), or size points with "
                        "--precision")  # fmt: skip
    planner = Planner(ctx)
    from dflashbench.plan.placement import place_endpoint
    from dflashbench.plan.wall_time import estimate

    placement = ctx.placement or place_endpoint(suite.methods)

    def duration_at(p: float) -> float:  # the wall time as placed, at the slow end of the rates
        return estimate(ctx.grid, planner.sizes, suite.model_copy(update={"precision": p}), planner.traces, rates,
                        placement, ctx.backend_name).placed_s[1]  # fmt: skip

    found_p = budget_precision(duration_at, budget_s)
    if found_p is None:
        floor = duration_at(0.5)
        raise UserError(f"--budget {suite.budget}: the points' floors alone take about {human_duration(floor)} at the "
                        f"slow end of the rates ({rates.headline()}); give a larger budget, fewer concurrencies or "
                        "workloads, or --assume-user-tok-per-s where your GPUs are faster")  # fmt: skip
    chosen = max(found_p, suite.precision or 0.0)
    ctx.suite = suite.model_copy(update={"precision": chosen})
    return (f"budget {human_duration(budget_s)}: ±{found_p:.1%} is the tightest precision that fits it (about "
            f"{human_duration(duration_at(found_p))} as placed, at the slow end of the {rates.basis} rates below)"
            + (f"; the suite's ±{suite.precision:.1%} is looser and kept" if chosen > found_p else ""))  # fmt: skip


class Pacer:
    """The sweep's pace while it runs: after each point, the time left re-planned from the points measured so far,
    and with a budget, the precision the points left can still afford: where that is looser than the current one,
    the remaining points aim for it, said before they start.

    Every point's planned cost is its seconds at the rates the dry run plans with (each method's own per-user rate
    at its load: :func:`plan_rates`, else a nominal one). Once a method's first point is measured, that method's
    points left are re-planned at its own measured pace (its points' seconds over their plan); a method not yet
    measured takes the pace of every point so far. Side by side (:mod:`dflashbench.plan.placement`), the points left
    cost the schedule the dry run simulates, and the pace is the wall time since the first load started over the
    schedule's planned time for the points done."""

    NOMINAL_TOK_PER_S = 100.0  # where no rate is known: the measured pace scales it

    def __init__(self, ctx: SweepContext, todo: list, budget_s: float | None) -> None:
        self.ctx, self.budget_s, self.start = ctx, budget_s, time.monotonic()
        self.left = list(todo)
        self.todo = list(todo)
        self.planner = Planner(ctx)
        self.spent_plan = self.spent_s = 0.0
        self.by_method: dict = {}  # method -> [seconds measured, seconds planned] of its finished points
        self._mark, self.warned = self.start, False
        self._first: float | None = None
        self._lock = threading.Lock()  # side by side, points end in threads of their own
        placement = ctx.placement
        self.side = placement is not None and placement.mode == "side"
        self.rates = self._rates()

    def _rates(self):
        from dflashbench.plan.pace import flat

        found = None
        try:
            found = plan_rates(self.ctx, None)
        except UserError:
            found = None
        nominal = (self.NOMINAL_TOK_PER_S, self.NOMINAL_TOK_PER_S)
        return found or flat(self.ctx.suite.methods, nominal, "nominal: no rate known; the measured pace scales it")

    def mark(self) -> None:
        """A point (side by side: a load) starts now (its servers are up: their start is not the points' pace)."""
        self._mark = time.monotonic()
        if self._first is None:
            self._first = self._mark

    def planned_by_point(self, points: list, precision: float | None) -> dict[str, float]:
        """Each point's planned seconds at the planned rates (a load's points sized together, as the sweep does)."""
        from dflashbench.plan.wall_time import cell_seconds, cells

        suite = self.ctx.suite.model_copy(update={"precision": precision})
        out: dict[str, float] = {}
        for c in cells(points):
            out.update(cell_seconds(c, self.planner.sizes, suite, self.planner.traces, self.rates, 0))
        return out

    def cost(self, points: list, precision: float | None) -> float:
        """Planned seconds of ``points`` at the planned rates (side by side: the simulated schedule's)."""
        if not self.side:
            return sum(self.planned_by_point(points, precision).values())
        from dflashbench.plan.placement import side_seconds
        from dflashbench.plan.wall_time import cells

        by_id = self.planned_by_point(points, precision)
        return side_seconds([{p.method: by_id[p.point_id] for p in c} for c in cells(points)], self.ctx.placement)

    def pace_of(self, method) -> float:
        """Measured seconds per planned second: ``method``'s own once one of its points finished, else every
        finished point's."""
        spent, planned = self.by_method.get(method, (0.0, 0.0))
        if planned > 0:
            return spent / planned
        return self.spent_s / self.spent_plan if self.spent_plan > 0 else 1.0

    def left_s(self, points: list, precision: float | None) -> float:
        """The points left re-planned at the measured paces (side by side: the schedule at the overall pace)."""
        if self.side:
            return self.pace_of(None) * self.cost(points, precision)
        by_id = self.planned_by_point(points, precision)
        return sum(self.pace_of(p.method) * by_id[p.point_id] for p in points)

    def after(self, point) -> list[str]:
        """Lines to print once ``point`` finished (none while nothing is measured, or once every point is)."""
        with self._lock:
            return self._after(point)

    def _after(self, point) -> list[str]:
        precision = self.ctx.suite.precision
        self.left = [p for p in self.left if p.point_id != point.point_id]
        now = time.monotonic()
        elapsed = now - self.start
        if self.side:
            self.spent_plan = self.cost(self.todo, precision) - self.cost(self.left, precision)
            self.spent_s = now - (self._first if self._first is not None else self.start)
        else:
            planned, spent = self.cost([point], precision), now - self._mark
            self.spent_plan += planned
            self.spent_s += spent
            done = self.by_method.setdefault(point.method, [0.0, 0.0])
            done[0] += spent
            done[1] += planned
        if not self.left or self.spent_plan <= 0:
            return []
        lines = []
        if self.budget_s is not None:
            remaining_s = self.budget_s - elapsed
            found = budget_precision(lambda p: self.left_s(self.left, p), max(remaining_s, 1.0))
            if found is not None and (precision is None or found > precision * 1.05):
                self.ctx.suite = self.ctx.suite.model_copy(update={"precision": found})
                lines.append(f"budget: {human_duration(max(remaining_s, 0))} left at the pace so far: the "
                             f"{len(self.left)} point(s) left ({self.left[0].point_id} …) now aim for ±{found:.1%}"
                             + (f" instead of ±{precision:.1%}" if precision is not None else ""))  # fmt: skip
            elif found is None and not self.warned:
                self.warned = True  # said once: every later point would say it again
                lines.append(f"budget: {human_duration(max(remaining_s, 0))} left; the {len(self.left)} point(s) "
                             "left need more than that even at their floors: the sweep will run over")  # fmt: skip
        left_s = self.left_s(self.left, self.ctx.suite.precision)
        measured = [m.value for m in self.by_method] if not self.side else []
        basis = (f", each of {', '.join(measured)} at its own" if measured else "") if not self.side else ", side by side"
        lines.append(f"ETA: about {human_duration(left_s)} for the {len(self.left)} point(s) left, at the pace "
                     f"so far{basis} ({human_duration(elapsed)} elapsed)")  # fmt: skip
        return lines
