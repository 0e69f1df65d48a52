"""How many requests a point sized by precision plans to send, and the precision a time budget buys (the dry run;
docs/metrics.md, "Sizing a point"). Pure arithmetic over the rule of :mod:`dflashbench.measure.sequential`:

A figure whose requests spread with coefficient of variation ``kappa`` reaches a relative half-width ``p`` at
about ``n = (t x kappa / p)^2`` requests (``t`` the 97.5 % t quantile on the point's rounds). A point plans
``max(floor, min(n, ceiling))``: its floor (:func:`dflashbench.measure.sequential.floors_for`) and its ceiling
(the workload's prompts). ``kappa`` per method comes from measured runs (``dflashbench/data/request_spread.toml``,
which names them): the largest of the method's own figure and its ratio to AR's.

``--budget``: the precision every point can reach within the budget, by bisection on ``p`` (a point whose ceiling
comes first stops there: it reaches less, and the dry run names it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources

from dflashbench.measure import sequential as seq
from dflashbench.measure.stats import t_quantile_975


@dataclass(frozen=True)
class Spread:
    kappa: dict[str, float]  # a method's largest: its own figure's or its ratio to AR's
    paired: dict[str, float]  # a speculative method's ratio to AR's
    sources: tuple[str, ...]

    def of(self, method: str) -> float:
        return self.kappa.get(method, max(self.kappa.values()))


@functools.cache
def request_spread() -> Spread:
    """Each method's per-request spread (the data file's, read once: a budget's bisection plans the grid many
    times over)."""
    table = tomllib.loads(resources.files("dflashbench").joinpath("data", "request_spread.toml").read_text("utf-8"))
    paired = {m: float(v) for m, v in table.get("paired", {}).items()}
    kappa = {m: max(float(v), paired.get(m, 0.0)) for m, v in table["kappa"].items()}
    return Spread(kappa, paired, tuple(table.get("sources", ())))


def needed(kappa: float, precision: float, concurrency: int) -> int:
    """Requests a figure of spread ``kappa`` needs for the half-width ``precision`` (the t quantile on its rounds,
    found by iterating from the normal's)."""
    n = (seq.Z_95 * kappa / precision) ** 2
    for _ in range(4):
        rounds = max(math.ceil(n / max(concurrency, 1)), 2)
        n = (t_quantile_975(rounds - 1) * kappa / precision) ** 2
    return math.ceil(n)


def baseline_floors(floors: seq.Floors, paired: list[str], precision: float, concurrency: int) -> seq.Floors:
    """The floors of a load's first point (AR's, in the grid's order) where other methods follow it: every later
    point of the load sends the prompts it sent (:func:`dflashbench.run.point.load_prefix`), so it sends what the
    widest pair of the load is planned to need (the methods' paired spread from the data file), up to its ceiling.
    Without it AR, the steadiest figure, would stop first and leave every ratio of the load short of prompts."""
    spread = request_spread()
    kappa = max((spread.paired.get(m, spread.of(m)) for m in paired), default=0.0)
    want = min(needed(kappa, precision, concurrency), floors.ceiling) if kappa else 0
    return dataclasses.replace(floors, min_requests=max(floors.min_requests, want))


def planned_requests(prompts: int, concurrency: int, per_stream: int, precision: float, kappa: float) -> tuple[int, bool]:
    """``(requests, reaches)``: what the point plans to send, and whether it reaches ``precision`` by then."""
    floors = seq.floors_for(concurrency, per_stream, prompts)
    want = needed(kappa, precision, concurrency)
    return max(floors.min_requests, min(want, floors.ceiling)), want <= floors.ceiling


def reached(kappa: float, requests: int, concurrency: int) -> float:
    """The half-width ``requests`` give a figure of spread ``kappa``."""
    rounds = max(math.ceil(requests / max(concurrency, 1)), 2)
    return t_quantile_975(rounds - 1) * kappa / math.sqrt(max(requests, 1))


def budget_precision(duration_at, budget_s: float, lo: float = 0.005, hi: float = 0.5) -> float | None:
    """The tightest precision whose planned duration (``duration_at(p)`` seconds) fits ``budget_s``, by bisection
    on log p; ``None`` where even ``hi`` does not fit (the floors alone take longer)."""
    if duration_at(hi) > budget_s:
        return None
    if duration_at(lo) <= budget_s:
        return lo
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if duration_at(mid) <= budget_s else (mid, hi)
    return hi
