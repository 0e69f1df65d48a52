"""``--budget``: a sweep planned to fit a time budget (docs/metrics.md, "Sizing a point"). Before the run, the
tightest precision whose planned duration fits the budget at the slow end of the per-user rate is found
(:func:`dflashbench.plan.precision_plan.budget_precision`) and becomes the suite's ``precision`` (the looser of
the two where the suite asks for one too); the dry run and the console say which, and which points' prompts run
out before it. The rate is the one the dry run's estimate uses: ``--assume-user-tok-per-s``, else a published
figure's for the model; without either the budget cannot be planned, and the sweep says how to give one. While
the sweep runs, :class:`Pacer` re-plans from the pace measured so far and prints the time left."""

from __future__ import annotations

import threading
import time

from dflashbench.errors import UserError
from dflashbench.plan.grid import SweepContext
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
    from dflashbench.plan.published import published_user_rate

    budget_s = budget_seconds(suite)
    if assume_rate is not None:
        rate, source = assume_rate[0], "--assume-user-tok-per-s"
    elif (found := published_user_rate(ctx.pair.target)) is not None:
        rate, source = found[0], f"a published figure ({found[2]})"
    else:
        from dflashbench.embedded import name_of

        raise UserError(f"--budget {suite.budget}: no published per-user rate for {name_of(ctx.pair.target)} to plan with; give "
                        "--assume-user-tok-per-s N (tok/s per user your GPUs reach), or size points with --precision")  # fmt: skip
    planner = Planner(ctx)
    from dflashbench.plan.pace import method_rates
    from dflashbench.plan.wall_time import estimate

    rates = method_rates(ctx.pair.target, list(suite.methods), assume_rate)  # each method's own, as the dry run's

    def duration_at(p: float) -> float:  # the wall time as placed, at the slow end of the rates
        if rates is None or ctx.placement is None:
            return planner.seconds(ctx.grid, p, rate)
        return estimate(ctx.grid, planner.sizes, suite.model_copy(update={"precision": p}), planner.traces, rates,
                        ctx.placement, ctx.backend_name).placed_s[1]  # fmt: skip

    found_p = budget_precision(duration_at, budget_s)
    if found_p is None:
        floor = duration_at(0.5)
        raise UserError(f"--budget {suite.budget}: the points' floors alone take about {human_duration(floor)} at "
                        f"{rate:g} tok/s/user ({source}); give a larger budget, fewer concurrencies or workloads")  # fmt: skip
    chosen = max(found_p, suite.precision or 0.0)
    ctx.suite = suite.model_copy(update={"precision": chosen})
    how = "as placed, at the rates below" if rates is not None else f"at {rate:g} tok/s/user ({source})"
    return (f"budget {human_duration(budget_s)}: ±{found_p:.1%} is the tightest precision that fits it (about "
            f"{human_duration(duration_at(found_p))} {how})"
            + (f"; the suite's ±{suite.precision:.1%} is looser and kept" if chosen > found_p else ""))  # fmt: skip


class Pacer:
    """The sweep's pace while it runs: after each point, the time left at the pace measured so far (each point's
    planned cost, :func:`dflashbench.plan.plan_size.run_size` at a nominal rate, scaled by how long the finished
    ones took against their plan), and with a budget, the precision the points left can still afford: where that
    is looser than the current one, the remaining points aim for it, said before they start.

    The ETA follows the placement (:mod:`dflashbench.plan.placement`): side by side, the points left cost the
    schedule the dry run simulates (a load's points at once, each method on its servers, at each method's planned
    rate where one is known), and the pace is the wall time since the first load started over the schedule's
    planned time for the points done; otherwise points go one after another and their costs add up."""

    NOMINAL_TOK_PER_S = 100.0  # any rate: the measured pace scales it

    def __init__(self, ctx: SweepContext, todo: list, budget_s: float | None) -> None:
        self.ctx, self.budget_s, self.start = ctx, budget_s, time.monotonic()
        self.left = list(todo)
        self.todo = list(todo)
        self.planner = Planner(ctx)
        self.spent_plan = self.spent_s = 0.0
        self._mark, self.warned = self.start, False
        self._first: float | None = None
        self._lock = threading.Lock()  # side by side, points end in threads of their own
        placement = ctx.placement
        self.side = placement is not None and placement.mode == "side"
        self.servers = {m: max(placement.count(m), 1) for m in ctx.suite.methods} if self.side else {}
        self.rates = self._rates() if self.side else None

    def _rates(self):
        from dflashbench.plan.pace import Rates, method_rates

        found = method_rates(self.ctx.pair.target, list(self.ctx.suite.methods), None)
        nominal = (self.NOMINAL_TOK_PER_S, self.NOMINAL_TOK_PER_S)
        return found or Rates({m.value: nominal for m in self.ctx.suite.methods}, 0.0, ("nominal",))

    def mark(self) -> None:
        """A point (side by side: a load) starts now (its servers are up: their start is not the points' pace)."""
        self._mark = time.monotonic()
        if self._first is None:
            self._first = self._mark

    def cost(self, points: list, precision: float | None) -> float:
        if not self.side:
            return self.planner.seconds(points, precision, self.NOMINAL_TOK_PER_S)
        from dflashbench.plan.placement import simulate
        from dflashbench.plan.wall_time import cell_seconds, cells

        suite = self.ctx.suite.model_copy(update={"precision": precision})
        secs = []
        for c in cells(points):
            by_id = cell_seconds(c, self.planner.sizes, suite, self.planner.traces, self.rates, 0)
            secs.append({p.method: by_id[p.point_id] for p in c})
        return simulate(secs, self.servers).end_s

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
            self.spent_plan += self.cost([point], precision)
            self.spent_s += now - self._mark
        if not self.left or self.spent_plan <= 0:
            return []
        pace = self.spent_s / self.spent_plan  # the points' own seconds per planned second
        lines = []
        if self.budget_s is not None:
            remaining_s = self.budget_s - elapsed
            found = budget_precision(lambda p: pace * self.cost(self.left, p), max(remaining_s, 1.0))
            if found is not None and (precision is None or found > precision * 1.05):
                self.ctx.suite = self.ctx.suite.model_copy(update={"precision": found})
                lines.append(f"budget: {human_duration(max(remaining_s, 0))} left at the pace so far: the "
                             f"{len(self.left)} point(s) left ({self.left[0].point_id} …) now aim for ±{found:.1%}"
                             + (f" instead of ±{precision:.1%}" if precision is not None else ""))  # fmt: skip
            elif found is None and not self.warned:
                self.warned = True  # said once: every later point would say it again
                lines.append(f"budget: {human_duration(max(remaining_s, 0))} left; the {len(self.left)} point(s) "
                             "left need more than that even at their floors: the sweep will run over")  # fmt: skip
        left_s = pace * self.cost(self.left, self.ctx.suite.precision)
        lines.append(f"ETA: about {human_duration(left_s)} for the {len(self.left)} point(s) left, at the pace "
                     f"so far ({human_duration(elapsed)} elapsed)" + (", side by side" if self.side else ""))  # fmt: skip
        return lines
