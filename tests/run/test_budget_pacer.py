"""Issue #45's budget while the sweep runs (dflashbench.run.budget.Pacer): after each point, the time left at the
pace the finished points measured, and where a budget will not hold, the precision the points left can still
afford (said before they start). A real context of the embedded default (a dry run's plan), the clock stepped."""

from __future__ import annotations

import pytest

from dflashbench.plan.suites import load_suite
from dflashbench.run import budget
from dflashbench.run.sweep import SweepConfig, prepare


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(budget.time, "monotonic", c)
    return c


def _ctx(**keys):
    suite = load_suite("demo").model_copy(update=keys)
    return prepare(SweepConfig(suite=suite, dry_run=True))


def test_the_time_left_follows_the_pace_the_points_measured(clock):
    ctx = _ctx()
    pacer = budget.Pacer(ctx, list(ctx.grid), budget_s=None)
    first = ctx.grid[0]
    plan_s = pacer.cost([first], ctx.suite.precision)
    clock.now += 5.0  # servers starting: not the points' pace
    pacer.mark()
    clock.now += 2 * plan_s  # the point took twice its plan
    lines = pacer.after(first)
    assert len(lines) == 1 and lines[0].startswith("ETA: about ") and "for the 8 point(s) left" in lines[0]
    left_s = 2 * pacer.cost(ctx.grid[1:], ctx.suite.precision)
    assert budget.human_duration(left_s) in lines[0]


def test_a_budget_that_will_not_hold_loosens_the_points_left_and_says_so(clock):
    ctx = _ctx(budget="1h")
    before, first = ctx.suite.precision, ctx.grid[0]
    probe = budget.Pacer(ctx, list(ctx.grid), budget_s=None)
    pace = 30.0 / probe.cost([first], before)  # the first point takes 30 s
    # a budget 10 % short of what the points left would take at that pace with the current precision
    budget_s = 30.0 + 0.9 * pace * probe.cost(ctx.grid[1:], before)
    pacer = budget.Pacer(ctx, list(ctx.grid), budget_s=budget_s)
    pacer.mark()
    clock.now += 30.0
    lines = pacer.after(first)
    assert ctx.suite.precision is not None and ctx.suite.precision > before, lines
    assert lines[0].startswith("budget: ") and "left at the pace so far: the 8 point(s) left" in lines[0]
    assert f"now aim for ±{ctx.suite.precision:.1%} instead of ±{before:.1%}" in lines[0]
    assert pace * pacer.cost(ctx.grid[1:], ctx.suite.precision) <= budget_s - 30.0  # the new plan fits
    # a budget already spent: said once, not at every point
    pacer.mark()
    clock.now += 120.0
    said = [pacer.after(p) for p in ctx.grid[1:3]]
    assert sum("the sweep will run over" in line for lines in said for line in lines) == 1


def test_each_method_is_re_planned_at_its_own_measured_pace(clock):
    """Issue #63: the ETA re-plans from the first measured points, each method at its own pace (AR measured 2x its
    plan, DFlash 0.5x), a method not yet measured at the pace of every point so far."""
    ctx = _ctx()
    pacer = budget.Pacer(ctx, list(ctx.grid), budget_s=None)
    ar = next(p for p in ctx.grid if p.method.value == "ar")
    dflash = next(p for p in ctx.grid if p.method.value == "dflash")
    for point, factor in ((ar, 2.0), (dflash, 0.5)):
        pacer.mark()
        clock.now += factor * pacer.cost([point], ctx.suite.precision)
        lines = pacer.after(point)
    left = [p for p in ctx.grid if p not in (ar, dflash)]
    overall = pacer.spent_s / pacer.spent_plan
    planned = pacer.planned_by_point(left, ctx.suite.precision)  # a load's points sized together, as the sweep does
    want = sum({"ar": 2.0, "dflash": 0.5}.get(p.method.value, overall) * planned[p.point_id] for p in left)
    assert pacer.left_s(left, ctx.suite.precision) == pytest.approx(want)
    assert budget.human_duration(want) in lines[-1] and "each of ar, dflash at its own" in lines[-1]
