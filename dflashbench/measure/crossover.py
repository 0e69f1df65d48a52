"""Where a speculative method stops paying: the concurrency at which its ratio over a baseline crosses 1.

A ratio read at each swept concurrency (per-user speed at matched concurrency, or throughput) is interpolated
between the two neighbouring concurrencies where it changes side of 1, linearly in log(ratio) against log(c), as
the Pareto curves are read. Its interval comes from the points' own intervals: the crossing of their lower ends
and the crossing of their upper ends (a falling ratio crosses 1 earliest along its lower ends); an end that never
crosses inside the sweep is open ("below c=1", "beyond c=16"). Where the ratio never crosses 1 in the range swept,
that is said with the range, and where it is moving towards 1 the straight line through its last two points says
which concurrency a next sweep should reach (an aim, never a measurement). Pure functions; docs/metrics.md,
"Where it stops paying: the crossover".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CROSSES, NONE = "crosses", "no crossover"
MAX_AIM = 8  # an aim past this many times the top concurrency swept is no aim: the ratio moves too slowly


@dataclass(frozen=True)
class Crossover:
    """``kind`` CROSSES: the ratio crosses 1 at ``at`` (between ``between``), with ``lo`` / ``hi`` from the points'
    intervals (``None``: open past the sweep's end), ``pays_below`` when the method wins under it; NONE: it stays on
    one side (``above``: of 1) over ``swept``, and ``aim`` is where the last two points' line reaches 1, if it
    heads there."""

    kind: str
    swept: tuple[int, int]
    at: float | None = None
    lo: float | None = None
    hi: float | None = None
    between: tuple[int, int] | None = None
    pays_below: bool = True
    above: bool = True
    aim: float | None = None


def _cross(cs: Sequence[float], vs: Sequence[float]) -> tuple[float, int] | None:
    """The first crossing of 1 by the piecewise log-log line through (c, v): (c where it crosses, segment index)."""
    for i in range(len(cs) - 1):
        a, b = math.log(vs[i]), math.log(vs[i + 1])
        if a == 0:
            return cs[i], i
        if a * b < 0:
            t = a / (a - b)
            return math.exp(math.log(cs[i]) + t * (math.log(cs[i + 1]) - math.log(cs[i]))), i
    if vs and math.log(vs[-1]) == 0:
        return cs[-1], len(cs) - 1
    return None


def _end(cs: Sequence[float], vs: Sequence[float], falling: bool) -> float | None:
    """Where an interval end crosses 1: ``cs[0]`` if it starts on the far side already (it may cross at or before the
    first point; said as open), None if it never crosses inside the sweep."""
    if not vs:
        return None
    start_beyond = vs[0] <= 1.0 if falling else vs[0] >= 1.0
    if start_beyond:
        return -math.inf
    found = _cross(cs, vs)
    return found[0] if found else math.inf


def crossover(cs: Sequence[int], values: Sequence[float],
              intervals: Sequence[tuple[float, float] | None] | None = None) -> Crossover | None:  # fmt: skip
    """The crossover of ``values`` (ratios, one per concurrency in ``cs``, ascending); ``None`` with fewer than
    two positive values."""
    pts = [(float(c), float(v), (intervals or [None] * len(cs))[i]) for i, (c, v) in enumerate(zip(cs, values,
           strict=True)) if v is not None and v > 0 and math.isfinite(v)]  # fmt: skip
    if len(pts) < 2:
        return None
    c, v = [p[0] for p in pts], [p[1] for p in pts]
    swept = (int(c[0]), int(c[-1]))
    found = _cross(c, v)
    if found is None:
        above = v[-1] > 1
        heading = (v[-1] < v[-2]) if above else (v[-1] > v[-2])
        aim = None
        if heading and v[-1] != v[-2]:
            a, b = math.log(v[-2]), math.log(v[-1])
            steps = b / (a - b)  # how many of the last step's log-c widths the line needs to reach 1
            reach = steps * (math.log(c[-1]) - math.log(c[-2]))
            # a nearly flat ratio heads to 1 only very far out (past e^709 the float overflows): infinitely far then
            aim = math.exp(math.log(c[-1]) + reach) if reach < 700 else math.inf
        return Crossover(NONE, swept, above=above, aim=aim)
    at, i = found
    falling = v[i] > 1 if v[i] != 1 else v[min(i + 1, len(v) - 1)] < 1
    lows = [(iv[0] if iv else x) for x, iv in zip(v, [p[2] for p in pts], strict=True)]
    highs = [(iv[1] if iv else x) for x, iv in zip(v, [p[2] for p in pts], strict=True)]
    first, last = (lows, highs) if falling else (highs, lows)
    lo, hi = _end(c, first, falling), _end(c, last, falling)
    return Crossover(CROSSES, swept, at=at, lo=None if lo == -math.inf else lo, hi=None if hi == math.inf else hi,
                     between=(int(c[i]), int(c[min(i + 1, len(c) - 1)])), pays_below=falling)  # fmt: skip


def aim_concurrency(aim: float | None, swept_max: int) -> int | None:
    """The next power of two at or beyond ``aim`` (and past the sweep): the concurrency a next sweep should reach;
    ``None`` past :data:`MAX_AIM` times the top concurrency swept (a straight line so far out says nothing)."""
    if aim is None or not math.isfinite(aim) or aim <= swept_max or aim > MAX_AIM * swept_max:
        return None
    return 2 ** math.ceil(math.log2(aim))
