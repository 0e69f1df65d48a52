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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dflashbench.measure.analysis import (
    BASELINE,
    INTERACTIVITY,
    finite_number,
    interpolate_frontier,
    method_sort_key,
)
from dflashbench.measure.analysis import THROUGHPUT as PER_GPU
from dflashbench.measure.readings import (
    BETTER,
    LATENCY,
    LOWER_IS_BETTER,
    PER_USER,
    SAME,
    THROUGHPUT,
    UNDECIDED,
    WORSE,
)

_TOL = 1e-9
OVERLAP, ABOVE, BELOW, NO_DATA = "overlap", "above", "below", "no data"


@dataclass(frozen=True, slots=True)
class MatchedReading:
    """What the method gives relative to AR at matched interactivity.

    ``kind``: ``overlap`` (``ratio`` is the best measured ratio, at ``at_tok_per_s_user``, and ``ratio_min`` the
    worst, over ``overlap``), ``above`` (no overlap, the method faster per user everywhere: ``ratio`` is a
    lower bound), ``below`` (no overlap, slower everywhere: ``ratio`` is an upper bound) or ``no data``.
    ``beats_every_point``: with ``above``, the method's slowest point also out-produces AR's best
    throughput, so that point beats every AR point on both axes (the method's other points need not).
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
            for x, y, c in zip(df[INTERACTIVITY], df[PER_GPU], conc, strict=True)]  # fmt: skip


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
        if beats:  # that one point of the method beats every point of the baseline; the method's others need not
            text += (f" and out-produces {base_name}'s best throughput ({_c(best_a[2])}{_n(best_a[1])} tok/s): this "
                     f"{name} point beats every {base_name} point on both axes")
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


# -- the answer: what to serve at each load (docs/metrics.md, "The verdict's answer") -------------------------
# What a user waits for: the request itself, read on the prompts both methods ran. The requests' tokens ÷ their time
# would be the same reading mirrored (the outputs are as long), and the points' own throughput has no paired interval:
# it stands beside the answer (measure/readings.py), never a second vote.
WAITED_FOR = (LATENCY,)
MIXED = "mixed"  # one waited-for figure better, the other worse


def outcome(verdicts: Mapping[str, str]) -> str:
    """One pair at one load, from the reader's verdicts (:func:`dflashbench.measure.readings.oriented`) of the figures
    users wait for: better where one is clearly better and none clearly worse; worse the other way round; mixed
    where one is each; same where at least one was decided and none differs; undecided where none has an
    interval."""
    found = [verdicts.get(f, UNDECIDED) for f in WAITED_FOR]
    if BETTER in found:
        return MIXED if WORSE in found else BETTER
    if WORSE in found:
        return WORSE
    return SAME if SAME in found else UNDECIDED


def inverse(word: str) -> str:
    return {BETTER: WORSE, WORSE: BETTER}.get(word, word)


@dataclass(frozen=True, slots=True)
class Choice:
    """What to serve at one load: ``serve`` the methods (one, or several the run cannot tell apart; ``(baseline,)``
    where no method is clearly better), and ``basis``: :data:`BETTER` (each served method is clearly better than
    the baseline), :data:`WORSE` (every method is clearly worse), ``"no gain"`` (none is clearly better) or
    :data:`UNDECIDED` (no reading has an interval: nothing is chosen)."""

    serve: tuple[str, ...]
    basis: str


NO_GAIN = "no gain"


def choose(outcomes: Mapping[tuple[str, str], Mapping[int, str]], baseline: str = BASELINE) -> dict[int, Choice]:
    """Per load, from each pair's :func:`outcome` (``outcomes[(method, other)][c]``; a pair read one way stands for
    the other way inverted): the methods clearly better than ``baseline`` there that no other such method is
    clearly better than; the baseline where none is."""

    def of(a: str, b: str, c: int) -> str | None:
        if c in outcomes.get((a, b), {}):
            return outcomes[(a, b)][c]
        found = outcomes.get((b, a), {}).get(c)
        return None if found is None else inverse(found)

    loads = sorted({c for (_, b), by_c in outcomes.items() if b == baseline for c in by_c})
    methods = sorted({m for (m, b) in outcomes if b == baseline}, key=method_sort_key)
    out: dict[int, Choice] = {}
    for c in loads:
        here = {m: o for m in methods if (o := of(m, baseline, c)) is not None}
        better = [m for m, o in here.items() if o == BETTER]
        if better:
            best = [m for m in better if not any(of(o, m, c) == BETTER for o in better if o != m)]
            out[c] = Choice(tuple(best or better), BETTER)
        elif here and all(o == WORSE for o in here.values()):
            out[c] = Choice((baseline,), WORSE)
        elif all(o == UNDECIDED for o in here.values()):
            out[c] = Choice((), UNDECIDED)
        else:
            out[c] = Choice((baseline,), NO_GAIN)
    return out


# -- a point no method could have measured ---------------------------------------------------------------------
# AR commits one token per step (tau = 1 by definition); a little over 1 is rounding of the counters.
AR_TAU_MAX = 1.01
# A per-user rate falls or holds as concurrency rises (each step batches more requests). A point above both its
# neighbours by half again measured the machine, not the method: on the committed runs the largest rise of a point
# over both neighbours that is no fault is 1.34× (EAGLE-3 at c=2 in example-methods, a machine flagged for a
# slowdown), the fault 2.27× (AR at c=2 there: 196 tok/s/user against 87 at c=1 and 75 at c=4).
JUMP = 1.5
# τ follows the prompts, not the load: on every committed run each speculative method's τ is the same at every load
# (to 0.01; example-methods: EAGLE-3 5.19, DFlash 7.72, n-gram 2.24 at c=1, 2 and 4). A point whose τ is within
# TAU_SAME of another method's elsewhere, and more than TAU_SAME from its own elsewhere, is not its label's point.
TAU_SAME = 0.05


@dataclass(frozen=True, slots=True)
class Implausible:
    """A point whose figures no run of its method could give: ``why`` in words, with the figures."""

    run_id: str
    setting: tuple  # (backend, model, workload)
    method: str
    concurrency: int
    why: str


def implausible_points(points: pd.DataFrame) -> list[Implausible]:
    """The closed-loop points (category "all") that cannot be what their labels say: AR with τ above
    :data:`AR_TAU_MAX` (its labels swapped with a speculative method's, or a speculative server), and a per-user
    rate that jumps over both its neighbours' by more than :data:`JUMP`."""
    rows = points[points["category"] == "all"] if not points.empty and "category" in points.columns else points
    out: list[Implausible] = []
    if rows.empty or "concurrency" not in rows.columns:
        return out
    for (run, backend, model, workload, method), g in rows.groupby(["run_id", "backend", "model", "workload",
                                                                   "method"], sort=True):  # fmt: skip
        g = g.sort_values("concurrency").to_dict("records")
        where = (str(backend), str(model), str(workload))
        for r in g if method == BASELINE else ():
            tau = finite_number(r.get("tau"))
            if tau is not None and tau > AR_TAU_MAX:
                out.append(Implausible(str(run), where, method, int(r["concurrency"]), f"τ {tau:.2f}, where AR "
                                       "commits one token per step: not AR's point (labels swapped?)"))  # fmt: skip
        rates = [finite_number(r.get(INTERACTIVITY)) for r in g]
        for i in range(1, len(g) - 1):
            v, lo, hi = rates[i], rates[i - 1], rates[i + 1]
            if v and lo and hi and v > JUMP * max(lo, hi):
                out.append(Implausible(str(run), where, method, int(g[i]["concurrency"]),
                                       f"{v:,.0f} tok/s/user, above its neighbours' {lo:,.0f} and "
                                       f"{hi:,.0f}"))  # fmt: skip
    return out + _tau_swapped(rows)


def _near(a: float, b: float) -> bool:
    return abs(math.log(a / b)) <= math.log1p(TAU_SAME)


def _tau_swapped(rows: pd.DataFrame) -> list[Implausible]:
    """A speculative method's point whose τ is another method's (its τ elsewhere is steady, :data:`TAU_SAME`), or
    AR's one token per step: two points' labels swapped (review 2026-11-29, probes p02 and p02b). Read where a
    method was measured at 3 loads or more, so that its own τ elsewhere is two points that agree."""
    from dflashbench.measure.analysis import method_label

    out: list[Implausible] = []
    if "tau" not in rows.columns:
        return out
    for (run, backend, model, workload), g in rows.groupby(["run_id", "backend", "model", "workload"], sort=True):
        where = (str(backend), str(model), str(workload))
        taus = {m: {int(r["concurrency"]): t for r in mg.to_dict("records") if (t := finite_number(r.get("tau")))}
                for m, mg in g.groupby("method", sort=True)}  # fmt: skip
        for m, at in taus.items():
            if m == BASELINE or len(at) < 3:
                continue
            for c, tau in sorted(at.items()):
                rest = [t for cc, t in at.items() if cc != c]
                own = float(np.median(rest))
                if not all(_near(t, own) for t in rest) or _near(tau, own):
                    continue  # its τ elsewhere not steady, or this point's is its own
                if tau <= AR_TAU_MAX:
                    out.append(Implausible(str(run), where, m, c, f"τ {tau:.2f}, AR's one token per step (its own "
                                           f"{own:.2f} at its other loads): labels swapped?"))
                    continue
                for other, theirs in taus.items():
                    elsewhere = [t for cc, t in theirs.items() if cc != c]
                    if other != m and other != BASELINE and elsewhere and _near(tau, float(np.median(elsewhere))):
                        out.append(Implausible(str(run), where, m, c, f"τ {tau:.2f}, {method_label(other)}'s at its "
                                               f"other loads (its own {own:.2f}): labels swapped?"))  # fmt: skip
                        break
    return out


# -- where a method stops paying: the lowest of its crossings --------------------------------------------------
@dataclass(frozen=True, slots=True)
class Stop:
    """Where a method stops paying against its baseline: ``at`` the lowest concurrency where one of the figures
    crosses 1 (``figure`` names it), and every figure's own crossing (``None``: it does not cross in the sweep)."""

    at: float
    figure: str
    crossings: Mapping[str, float | None]


def stops_paying(readings: Sequence[Mapping]) -> Stop | None:
    """From one pair's readings (category "all"; each a row of
    :func:`dflashbench.measure.readings.pair_readings`): where the per-user, throughput and request-latency ratios
    cross 1 from paying to not (:func:`dflashbench.measure.crossover.crossover`, latency inverted so that above 1
    pays), and the lowest of the two read with an interval (per user, request latency; the points' own throughput
    has none, so its crossing stands beside them); ``None`` where neither does (it never paid, or never stops in the
    sweep)."""
    from dflashbench.measure.crossover import CROSSES, crossover

    found: dict[str, float | None] = {}
    for figure in (PER_USER, THROUGHPUT, LATENCY):
        rows = sorted((r for r in readings if r["figure"] == figure and r.get("value")), key=lambda r: r["concurrency"])
        flip = figure in LOWER_IS_BETTER
        values = [1 / r["value"] if flip else r["value"] for r in rows]
        ivs = [None if r.get("lo") is None or r.get("lo") != r.get("lo") else
               ((1 / r["hi"], 1 / r["lo"]) if flip else (r["lo"], r["hi"])) for r in rows]  # fmt: skip
        cross = crossover([int(r["concurrency"]) for r in rows], values, ivs)
        found[figure] = cross.at if cross is not None and cross.kind == CROSSES and cross.pays_below else None
    crossing = {f: a for f, a in found.items() if a is not None and f != THROUGHPUT}  # the points' own: no interval
    if not crossing:
        return None
    figure = min(crossing, key=lambda f: crossing[f])
    return Stop(crossing[figure], figure, found)


class Pair:
    """One pair's readings (:func:`dflashbench.measure.readings.pair_readings` rows) in one setting and category, by
    figure and load; ``skip``: loads where a point of the pair is implausible (:func:`implausible_points`), whose
    outcome is undecided."""

    def __init__(self, table: pd.DataFrame, method: str, baseline: str, category: str = "all", skip=frozenset()):
        mine = table[(table["method"] == method) & (table["baseline"] == baseline) & (table["category"] == category)] \
            if not table.empty else table  # fmt: skip
        self.rows = {(r["figure"], int(r["concurrency"])): r for r in mine.to_dict("records")}
        self.method, self.baseline, self.skip = method, baseline, frozenset(skip)

    def at(self, figure: str, c: int) -> dict | None:
        return self.rows.get((figure, c))

    def word(self, figure: str, c: int) -> str:
        return (self.at(figure, c) or {}).get("verdict", UNDECIDED)

    def outcome(self, c: int, figures: Sequence[str] = WAITED_FOR) -> str:
        return UNDECIDED if c in self.skip else outcome({f: self.word(f, c) for f in figures})

    @property
    def loads(self) -> list[int]:
        return sorted({c for _, c in self.rows})

    def paying(self) -> list[Mapping]:
        """The rows :func:`stops_paying` reads: every load but the skipped ones."""
        return [r for (_, c), r in self.rows.items() if c not in self.skip]


def matched_readings(points: pd.DataFrame) -> pd.DataFrame:
    """One row per setting x method (category rows included) with its :class:`MatchedReading`.
    Category rows that are a slice of a mixed run get no reading (their throughput is a share)."""
    from dflashbench.measure.analysis import (
        SETTING,
        category_share_mask,
        device_unit,
        method_label,
        pareto_frontier,
        usable_points,
    )

    usable = usable_points(points)
    unit = device_unit(usable)
    share = category_share_mask(usable)
    rows = []
    if usable.empty:
        return pd.DataFrame(columns=[*SETTING, "method", "reading", "share"])
    for key, group in usable.groupby(list(SETTING), sort=True, dropna=False):
        setting = dict(zip(SETTING, key, strict=True))
        if BASELINE not in set(group["method"]):
            continue
        is_share = bool(share.loc[group.index].any())
        base_front = pareto_frontier(group[group["method"] == BASELINE])
        for method in sorted(set(group["method"]) - {BASELINE}, key=method_sort_key):
            reading = None
            if not is_share:
                front = pareto_frontier(group[group["method"] == method])
                reading = read_matched(base_front, front, method_label(method), unit=unit)
            rows.append({**setting, "method": method, "reading": reading, "share": is_share})
    return pd.DataFrame(rows, columns=[*SETTING, "method", "reading", "share"])


# -- the matched-interactivity readings as table columns -------------------------------------------------------
def _x(v) -> str:
    return "—" if v is None or v != v else f"{float(v):.2f}×"


def span_x(lo: float | None, hi: float | None) -> str:
    """``0.66×–1.29×``; one figure where both ends round alike."""
    a, b = _x(lo), _x(hi)
    return a if a == b else f"{a}–{b}"


def crossings(rd: MatchedReading | None) -> str:
    """``DFlash gives more than AR above ≈211 tok/s/user, less below``; "" without a crossing."""
    if rd is None or not rd.crossings or not rd.curve:
        return ""
    at = ", ".join(f"≈{x:,.0f}" for x in rd.crossings)
    name = rd.text.split(" gives ", 1)[0] if " gives " in rd.text else "the method"
    more, less = ("above", "below") if rd.curve[-1][1] > 1 else ("below", "above")
    return f"{name} gives more than AR {more} {at} tok/s/user, less {less}"


SHARE_NOTE = ("left out: within a mixed run a category's throughput is its share of the run, not what it would "
              "get served alone; sweep the category on its own (a workload of that category only) for this reading")


def matched_summary_frame(readings: pd.DataFrame) -> pd.DataFrame:
    """The readings as table columns: the ratio's range where the curves overlap (never one best figure), a bound
    in a column of its own where they do not, where it was read, what it means."""
    out = []
    for r in readings.to_dict("records"):
        rd: MatchedReading | None = r["reading"]
        if rd is None:
            out.append({**r, "speedup_text": "not read", "kind": "category share", "at": None, "bound_text": None,
                        "crosses": None, "note": SHARE_NOTE})  # fmt: skip
            continue
        if rd.kind == OVERLAP:
            speed = span_x(rd.ratio_min, rd.ratio)
            bound = None
        else:
            speed = "— (no overlap)" if rd.ratio is not None else "—"
            bound = f"{rd.bound} {_x(rd.ratio)}" if rd.ratio is not None else None
        kind = {OVERLAP: "measured range (curves overlap)", ABOVE: "lower bound (no overlap)",
                BELOW: "upper bound (no overlap)"}.get(rd.kind, rd.kind)  # fmt: skip
        note = rd.text + (f". Next: {rd.next_sweep}" if rd.next_sweep else "")
        out.append({**r, "speedup_text": speed, "kind": kind, "at": rd.at_tok_per_s_user, "bound_text": bound,
                    "crosses": crossings(rd) or None, "note": note})  # fmt: skip
    from dflashbench.measure.analysis import SETTING

    return pd.DataFrame(out, columns=[*SETTING, "method", "speedup_text", "kind", "crosses", "bound_text", "at",
                                      "note"])  # fmt: skip


def decide(table: pd.DataFrame, category: str = "all", bad: Sequence[Implausible] = ()
           ) -> tuple[dict[tuple[str, str], Pair], dict[int, Choice]]:  # fmt: skip
    """One setting's answer: every pair of :func:`dflashbench.measure.readings.pairs_of` read in ``category`` of its
    readings ``table`` (a pair whose point is implausible at a load, ``bad``, undecided there), and what to serve
    at each load (:func:`choose`)."""
    from dflashbench.measure.readings import pairs_of

    mine = table[table["category"] == category] if not table.empty else table
    skip = lambda m: {i.concurrency for i in bad if i.method == m}  # noqa: E731
    pairs = {(m, b): Pair(mine, m, b, category, skip(m) | skip(b))
             for m, b in pairs_of({*mine["method"], *mine["baseline"]} if not mine.empty else ())}  # fmt: skip
    return pairs, choose({k: {c: p.outcome(c) for c in p.loads} for k, p in pairs.items()})
