"""``--budget``: a sweep planned to fit a time budget (docs/metrics.md, "Sizing a point"). Before the run, the
tightest precision whose planned duration fits the budget at the slow end of the per-user rate is found
(:func:`dflashbench.plan.precision_plan.budget_precision`) and becomes the suite's ``precision`` (the looser of
the two where the suite asks for one too); the dry run and the console say which, and which points' prompts run
out before it. The rate is the one the dry run's estimate uses: ``--assume-user-tok-per-s``, else a published
figure's for the model; without either the budget cannot be planned, and the sweep says how to give one. Not
re-planned while the run goes (each point still stops by its own measured precision)."""

from __future__ import annotations

from dflashbench.errors import UserError
from dflashbench.plan.grid import SweepContext
from dflashbench.plan.plan_size import duration_s, human_duration, run_size
from dflashbench.plan.precision_plan import budget_precision
from dflashbench.workloads.traces import parse_duration


def apply_budget(ctx: SweepContext, assume_rate: tuple[float, float] | None) -> str | None:
    """Set ``ctx.suite.precision`` from the suite's ``budget``; returns the line saying what it chose (``None``
    without a budget)."""
    suite = ctx.suite
    if suite.budget is None:
        return None
    from dflashbench.measure.published import published_user_rate
    from dflashbench.run.sweep_console import trace_sizes, workload_sizes

    budget_s = parse_duration(suite.budget, "--budget")
    if assume_rate is not None:
        rate, source = assume_rate[0], "--assume-user-tok-per-s"
    elif (found := published_user_rate(ctx.pair.target)) is not None:
        rate, source = found[0], f"a published figure ({found[2]})"
    else:
        raise UserError(f"--budget {suite.budget}: no published per-user rate for {ctx.pair.target} to plan with; give "
                        "--assume-user-tok-per-s N (tok/s per user your GPUs reach), or size points with --precision")  # fmt: skip
    sizes, traces = workload_sizes(ctx), trace_sizes(ctx.traces)

    def duration_at(p: float) -> float:
        return duration_s(run_size(ctx.grid, sizes, suite.requests_per_stream, suite.warmup_requests, traces,
                                   precision=p), rate)  # fmt: skip

    found_p = budget_precision(duration_at, budget_s)
    if found_p is None:
        floor = duration_at(0.5)
        raise UserError(f"--budget {suite.budget}: the points' floors alone take about {human_duration(floor)} at "
                        f"{rate:g} tok/s/user ({source}); give a larger budget, fewer concurrencies or workloads")  # fmt: skip
    chosen = max(found_p, suite.precision or 0.0)
    ctx.suite = suite.model_copy(update={"precision": chosen})
    return (f"budget {human_duration(budget_s)}: ±{found_p:.1%} is the tightest precision whose plan fits it at "
            f"{rate:g} tok/s/user ({source}; about {human_duration(duration_at(found_p))})"
            + (f"; the suite's ±{suite.precision:.1%} is looser and kept" if chosen > found_p else ""))  # fmt: skip
