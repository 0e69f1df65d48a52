"""Reading two Pareto frontiers against each other so the answer is never just "—".

Where a method's and AR's frontiers overlap in interactivity (tokens/s per user), the matched-interactivity
ratio is read at every frontier point inside the overlap (the ratio of two log-log piecewise-linear curves
peaks at a breakpoint), never extrapolated. Where they do not overlap, one curve lies wholly to one side, and
a measured point still bounds the ratio:

- the method is faster per user everywhere (its slowest point is faster than AR's fastest): a reader who
  needs at least AR's best interactivity x_AR gets the method's slowest point, which meets that need, so the
  method gives **at least** y(method's slowest) / y(AR's fastest) times AR's throughput there;
- the method is slower per user everywhere: at the method's best interactivity AR's slowest point qualifies,
  so the method gives **at most** y(method's fastest) / y(AR's slowest) times AR's throughput there.

Each reading names the sweep that would turn the bound into a ratio. Pure functions over frontier frames
(as :func:`dflashbench.measure.analysis.pareto_frontier` returns them); no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from dflashbench.measure.analysis import INTERACTIVITY, THROUGHPUT, interpolate_frontier

_TOL = 1e-9
OVERLAP, ABOVE, BELOW, NO_DATA = "overlap", "above", "below", "no data"


@dataclass(frozen=True, slots=True)
class MatchedReading:
    """What the method gives relative to AR at matched interactivity.

    ``kind``: ``overlap`` (``ratio`` is the best measured ratio, at ``at_tok_per_s_user``, and ``ratio_min`` the
    worst, over ``overlap``), ``above`` (no overlap, the method faster per user everywhere: ``ratio`` is a
    lower bound), ``below`` (no overlap, slower everywhere: ``ratio`` is an upper bound) or ``no data``.
    ``beats_every_point``: with ``above``, the method's slowest point also out-produces AR's best
    throughput, so it beats every AR point on both axes.
    """

    kind: str
    ratio: float | None = None
    at_tok_per_s_user: float | None = None
    ratio_min: float | None = None
    overlap: tuple[float, float] | None = None
    beats_every_point: bool = False
    text: str = ""
    next_sweep: str | None = None
    curve: tuple[tuple[float, float], ...] = ()  # (tok/s/user, ratio) at every breakpoint of the overlap
    crossings: tuple[float, ...] = ()  # tok/s/user where the ratio crosses 1 (log-log between breakpoints)

    @property
    def bound(self) -> str:
        return {ABOVE: "≥", BELOW: "≤"}.get(self.kind, "")


def _front(df: pd.DataFrame) -> list[tuple[float, float, int | None]]:
    """(x, y, concurrency) of a frontier, x ascending."""
    conc = df["concurrency"] if "concurrency" in df.columns else [None] * len(df)
    return [(float(x), float(y), None if c is None or c != c else int(c))
            for x, y, c in zip(df[INTERACTIVITY], df[THROUGHPUT], conc, strict=True)]  # fmt: skip


def _c(c: int | None) -> str:
    return f"c={c}: " if c is not None else ""


def _n(v: float) -> str:
    return f"{v:,.1f}"


def read_matched(base_front: pd.DataFrame, front: pd.DataFrame, name: str, base_name: str = "AR",
                 unit: str = "GPU") -> MatchedReading:  # fmt: skip
    """The matched-interactivity reading of ``front`` (method ``name``) against ``base_front``."""
    if base_front.empty or front.empty:
        missing = base_name if base_front.empty else name
        return MatchedReading(NO_DATA, text=f"{missing} has no point with measured throughput and interactivity")
    a, m = _front(base_front), _front(front)
    lo, hi = max(a[0][0], m[0][0]), min(a[-1][0], m[-1][0])
    if lo <= hi * (1 + _TOL):
        xs = sorted({x for x, _, _ in a + m if lo * (1 - _TOL) <= x <= hi * (1 + _TOL)} | {lo, hi})
        ratios = []
        for x in xs:
            ra, rm = interpolate_frontier(base_front, x), interpolate_frontier(front, x)
            if ra.reached and rm.reached and ra.value > 0:
                ratios.append((rm.value / ra.value, x))
        if not ratios:  # pragma: no cover - an overlap always has both ends readable
            return MatchedReading(NO_DATA, text="no interactivity both curves reach")
        best, worst = max(ratios), min(ratios)
        curve = tuple(sorted((x, r) for r, x in ratios))
        span = f"{_n(lo)}–{_n(hi)} tok/s/user" if hi > lo * (1 + _TOL) else f"{_n(lo)} tok/s/user"
        if f"{worst[0]:.2f}" == f"{best[0]:.2f}":
            text = f"{name} gives {best[0]:.2f}× {base_name}'s throughput/{unit} over {span}, where both were measured"
        else:
            text = (f"{name} gives {worst[0]:.2f}× to {best[0]:.2f}× {base_name}'s throughput/{unit} over {span}, where "
                    f"both were measured ({worst[0]:.2f}× at {_n(worst[1])} tok/s/user, {best[0]:.2f}× at "
                    f"{_n(best[1])})")  # fmt: skip
        beyond = []
        if m[-1][0] > a[-1][0] * (1 + _TOL):
            beyond.append(f"above {_n(a[-1][0])} tok/s/user only {name} was measured")
        if a[-1][0] > m[-1][0] * (1 + _TOL):
            beyond.append(f"above {_n(m[-1][0])} tok/s/user only {base_name} was measured")
        if beyond:
            text += "; " + "; ".join(beyond)
        return MatchedReading(OVERLAP, best[0], best[1], worst[0], (lo, hi), text=text, curve=curve,
                              crossings=crossings_of(curve))
    if m[0][0] > a[-1][0]:
        (xa, ya, ca), (xm, ym, cm) = a[-1], m[0]
        best_a = max(a, key=lambda p: p[1])
        beats = ym >= best_a[1]
        ratio = ym / ya
        text = (f"{name} ≥ {ratio:.2f}× {base_name}'s throughput/{unit} at {base_name}'s best interactivity "
                f"({_n(xa)} tok/s/user): {name}'s slowest point ({_c(cm)}{_n(xm)} tok/s/user, {_n(ym)} tok/s) "
                f"is faster per user than {base_name}'s fastest ({_c(ca)}{_n(xa)} tok/s/user, {_n(ya)} tok/s)")
        if beats:
            text += (f" and out-produces {base_name}'s best throughput ({_c(best_a[2])}{_n(best_a[1])} tok/s): "
                     f"{name} beats {base_name} on both axes at every measured point")
        sweep = (f"curves do not overlap: sweep {name} to higher concurrency"
                 + (f" (beyond c={cm})" if cm is not None else "")
                 + f" until its per-user rate falls to {_n(xa)} tok/s/user or below, for a matched ratio")
        return MatchedReading(ABOVE, ratio, xa, beats_every_point=beats, text=text, next_sweep=sweep)
    (xa, ya, ca), (xm, ym, cm) = a[0], m[-1]
    ratio = ym / ya
    text = (f"{name} ≤ {ratio:.2f}× {base_name}'s throughput/{unit} at {name}'s best interactivity "
            f"({_n(xm)} tok/s/user): {name}'s fastest point ({_c(cm)}{_n(xm)} tok/s/user, {_n(ym)} tok/s) is "
            f"slower per user than {base_name}'s slowest ({_c(ca)}{_n(xa)} tok/s/user, {_n(ya)} tok/s)")
    sweep = (f"curves do not overlap: sweep {base_name} to higher concurrency"
             + (f" (beyond c={ca})" if ca is not None else "")
             + f" until its per-user rate falls to {_n(xm)} tok/s/user or below, for a matched ratio")
    return MatchedReading(BELOW, ratio, xm, text=text, next_sweep=sweep)


def crossings_of(curve: tuple[tuple[float, float], ...]) -> tuple[float, ...]:
    """Where a ratio curve ``(x, ratio)`` (x ascending) crosses 1: between two breakpoints on opposite sides,
    log(ratio) linear in log(x), as the frontiers themselves are read; a breakpoint exactly at 1 counts once."""
    out: list[float] = []
    for (x0, r0), (x1, r1) in zip(curve, curve[1:], strict=False):
        if r0 == 1.0:
            out.append(x0)
        elif (r0 - 1.0) * (r1 - 1.0) < 0:
            t = math.log(r0) / (math.log(r0) - math.log(r1))
            out.append(math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))
    if curve and curve[-1][1] == 1.0 and (not out or out[-1] != curve[-1][0]):
        out.append(curve[-1][0])
    return tuple(out)


def category_share_mask(points: pd.DataFrame) -> pd.Series:
    """True for a category row that is a slice of a mixed point: its point (same run and ``point_id``) also
    has an "all" row with more requests. Such a row's throughput is the category's share of a mixed run (its
    tokens over the whole run's window), not what the category would get served alone, so it must stay out
    of throughput figures. A category measured on its own (the "all" row holds the same requests) is kept."""
    if points.empty or "point_id" not in points.columns:
        return pd.Series(False, index=points.index, dtype=bool)
    keys = list(zip(points.get("run_id", pd.Series("", index=points.index)), points["point_id"], strict=True))
    alls = {k: n for k, cat, n in zip(keys, points["category"], points["num_requests"], strict=True) if cat == "all"}
    out = []
    for k, cat, n in zip(keys, points["category"], points["num_requests"], strict=True):
        total = alls.get(k)
        out.append(bool(cat != "all" and total is not None and _num(total) > _num(n)))
    return pd.Series(out, index=points.index, dtype=bool)


def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


# -- the answer: what to serve at each concurrency (docs/metrics.md, "The verdict's answer") -----------------
@dataclass(frozen=True, slots=True)
class Choice:
    """What to serve at one concurrency: ``serve`` the methods (one, or two the run cannot tell apart; ``("ar",)``
    where every method is clearly slower; ``()`` no choice), ``basis`` why: a decision of
    :func:`dflashbench.measure.noise.decide` ("faster", "slower", "not distinguishable", "no interval")."""

    serve: tuple[str, ...]
    basis: str


def choose(decisions: dict[str, dict[int, tuple[float, str]]], head_to_head: dict[int, str] | None = None,
           pair: tuple[str, str] = ("dflash", "eagle3")) -> dict[int, Choice]:  # fmt: skip
    """Per concurrency, from each speculative method's ``(ratio over AR, decision)`` there: the method clearly
    faster than AR (the largest ratio where several are; where the two of ``pair`` both are and their own
    comparison at that concurrency, ``head_to_head`` (decision of ``pair[0]`` over ``pair[1]``), is not decided,
    both); AR where every method is clearly slower; no choice where any method cannot be told from AR or has no
    interval. A ratio without an interval never chooses a method."""
    from dflashbench.measure.noise import FASTER, NO_INTERVAL, SLOWER, UNCLEAR

    out: dict[int, Choice] = {}
    for c in sorted({c for by_c in decisions.values() for c in by_c}):
        here = {m: by_c[c] for m, by_c in decisions.items() if c in by_c}
        faster = sorted((m for m, (_, d) in here.items() if d == FASTER), key=lambda m: -here[m][0])
        if faster:
            serve: tuple[str, ...] = (faster[0],)
            if len(faster) > 1 and set(faster[:2]) == set(pair):
                h2h = (head_to_head or {}).get(c)
                serve = (pair[0],) if h2h == FASTER else (pair[1],) if h2h == SLOWER else tuple(faster[:2])
            out[c] = Choice(serve, FASTER)
        elif all(d == SLOWER for _, d in here.values()):
            out[c] = Choice(("ar",), SLOWER)
        elif any(d == UNCLEAR for _, d in here.values()):
            out[c] = Choice((), UNCLEAR)
        else:
            out[c] = Choice((), NO_INTERVAL)
    return out

