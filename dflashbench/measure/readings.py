"""Every ratio of two methods at one load, read on the prompts both ran (docs/metrics.md, "Pairs stay pairs").

Figures, method ÷ baseline, each a ratio of sums over the requests both points hold (paired by repeat round, prompt
id and occurrence, and turn: a prefix of one seeded order where a point was sized by precision): ``latency`` (mean
E2E, what a user waits for), ``ttft``, ``per_user`` (the pooled decode rate) and ``single`` (mean TPOT(baseline) ÷
mean TPOT(method)); and ``throughput``, the two points' own (output tokens ÷ the point's measured window, per device):
one figure per point, so it has no paired interval and decides nothing (the requests' tokens ÷ their time, paired,
would be the request latency's reading mirrored where both methods' outputs are as long). Decided on the noise
rule's interval: over two repeat rounds or more a t-interval on the log of the per-round ratios, else a paired
bootstrap over the common prompts widened by the machine's drift at the load (the same for every pair read there: a
drift term that widened one method's pairs alone would serve the method it spared) and by the run-to-run term of a
speedup (another launch of the same servers: :mod:`dflashbench.measure.noise_model`); a decision only the run-to-run
term undoes reads "not decided at this noise". Two rounds' t-interval (1 degree of freedom) is never used: wider
than the requests' own interval where the rounds differ by chance, narrower (0 wide for two equal rounds) where they
agree by chance; the requests of both rounds, paired, with the run-to-run term are read instead, and said; where the two rounds' own requests' intervals do not overlap (the rounds differ beyond their
requests), the interval is the span of both rounds' own intervals, so it holds each round, and it decides only where
each round alone decides alike (:func:`decided`). Pure functions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from dflashbench.measure import drift, metrics, noise, noise_model, observability, stats
from dflashbench.measure.analysis import BASELINE, method_label, method_sort_key, usable_points
from dflashbench.measure.request_index import index_of
from dflashbench.types import ProbeReading, RequestResult

LATENCY, THROUGHPUT, TTFT, PER_USER, SINGLE = "latency", "throughput", "ttft", "per_user", "single"
# Lower is better for a time; higher for a rate.
LOWER_IS_BETTER = frozenset({LATENCY, TTFT})
BETTER, WORSE, SAME, UNDECIDED = "better", "worse", "same", "undecided"  # a decision, oriented for the reader

REQUESTS_ONLY = "requests only: drift not measured"
# Two points read together (in turn, request by request or wave by wave, or side by side from one start): the
# machine's drift between them is zero by construction, not unmeasured (measure/drift.py, lag 0).
TOGETHER = "requests only: each pair measured together, in the same minutes"
TOO_FEW = "fewer than 2 prompts both methods ran"
POINTS_OWN = "the two points' own throughput: one figure each, no interval"
AT_THIS_NOISE = "not decided at this noise"  # decided on the requests and the drift, undone by the run-to-run term
# What a repeat run's interval is where not the rounds' t-interval (docs/metrics.md, "Intervals"): with 2 rounds whose
# t-interval is wider, both rounds' requests pooled with the run-to-run term; where the 2 rounds differ beyond their
# requests, the span of both rounds' own intervals.
POOLED_ROUNDS = "requests of both rounds, paired (their 1-df t-interval set aside)"
ROUNDS_APART = "the span of the 2 rounds' own intervals (they differ beyond their requests)"
CROSSES = " (crosses sittings)"


def _per_user(r: RequestResult) -> tuple[float, float] | None:
    d = metrics.decode_s(r)
    if r.output_tokens > 1 and d and d > 0 and observability.timing_observable(r) is not False:
        return r.output_tokens - 1.0, d
    return None


def _single(r: RequestResult) -> tuple[float, float] | None:
    found = _per_user(r)
    return None if found is None else (1.0, found[1] / found[0])  # 1 / TPOT: the sums give mean TPOTs


def _throughput(r: RequestResult) -> tuple[float, float] | None:
    t = metrics.e2e_s(r)
    return (float(r.output_tokens), t) if t else None


def _time_of(metric: Callable[[RequestResult], float | None]) -> Callable[[RequestResult], tuple[float, float] | None]:
    def term(r: RequestResult) -> tuple[float, float] | None:
        t = metric(r)
        return None if t is None else (t, 1.0)  # a mean time: sum(t) / n

    return term


TERMS: dict[str, Callable[[RequestResult], tuple[float, float] | None]] = {
    LATENCY: _time_of(metrics.e2e_s), THROUGHPUT: _throughput, TTFT: _time_of(metrics.ttft_s), PER_USER: _per_user,
    SINGLE: _single}  # fmt: skip


def key_of(r: RequestResult) -> tuple[int, str, int]:
    """What pairs a request with the other method's: its repeat round, its prompt and occurrence (a prompt sent again
    to fill the streams has its own id, ``<id>~<k>``) and its turn."""
    return (int(r.repeat or 0), str(r.request_id), int(r.turn or 0))


def terms(results: Iterable[RequestResult], figure: str) -> dict[tuple, tuple[float, float]]:
    """key -> (numerator, denominator) of ``figure`` over ``results`` that have one."""
    term = TERMS[figure]
    return {key_of(r): t for r in results if (t := term(r)) is not None}


terms_of = terms  # pair_readings' own parameter is named ``terms`` (the run-to-run terms)


@dataclass(frozen=True)
class Paired:
    """A ratio over the prompts both sides ran: ``value`` (method / baseline), the requests' 95 % interval ``ci``,
    ``common`` prompts, each side's own count, and per repeat round the round's own ratio."""

    value: float | None
    ci: tuple[float, float] | None
    common: int
    n_method: int
    n_base: int
    rounds: tuple[float, ...] = ()
    round_cis: tuple[tuple[float, float] | None, ...] = ()  # each round's own requests' 95 % interval (2 rounds)


def paired(base: Mapping[tuple, tuple[float, float]], method: Mapping[tuple, tuple[float, float]]) -> Paired:
    """:class:`Paired` of two sides' terms (:func:`terms`), on their common keys only; with exactly two repeat
    rounds, each round's own requests' interval too (:func:`decided` reads whether the rounds differ beyond them)."""
    common = [k for k in base if k in method]
    b, m = {k: base[k] for k in common}, {k: method[k] for k in common}
    by_round = sorted({k[0] for k in common})
    sides = [({k: b[k] for k in common if k[0] == r}, {k: m[k] for k in common if k[0] == r}) for r in by_round]
    per_round = tuple(v for bs, ms in sides if (v := noise.ratio_of_sums(bs, ms)) is not None) if len(sides) > 1 else ()
    cis = tuple(noise.ratio_ci(bs, ms) if len(bs) >= 2 else None for bs, ms in sides) if len(sides) == 2 else ()
    ci = noise.ratio_ci(b, m) if len(common) >= 2 else None
    return Paired(noise.ratio_of_sums(b, m) if common else None, ci, len(common), len(method), len(base), per_round,
                  cis)  # fmt: skip


def point_drift(probes: Sequence[ProbeReading], a: str, b: str) -> float | None:
    """The machine's 1-sd drift (log) between two points of one run, the larger of its probes' kinds."""
    found = [d for kind in sorted({r.kind for r in probes}) if (d := drift.drift_between(probes, a, b, kind)) is not None]
    return max(found) if found else None


@dataclass(frozen=True)
class Decision:
    """A reading's decision interval, what it covers, and its terms (log, 1 sd; ``None``: not in it): the requests',
    the drift's and the run-to-run term's, with that term's source; ``why``: a decision the run-to-run term undid
    (:data:`AT_THIS_NOISE`), or two rounds' interval set aside; ``rounds``: the rounds its t-interval rests on."""

    interval: tuple[float, float] | None
    covers: str = ""
    requests_sd: float | None = None
    drift_sd: float | None = None
    launch_sd: float | None = None
    launch_source: str | None = None
    why: str | None = None
    rounds: int = 0


def decided(p: Paired, drift_sd: float | None, run_term: noise_model.RunToRun | None = None) -> Decision:
    """The decision interval of a paired ratio and what it covers (module docstring). ``run_term``: the run's
    run-to-run term, whose speedup term widens a ratio of one round (another launch of the same servers)."""
    launch = run_term.sd(noise_model.SPEEDUP) if run_term is not None else None
    source = f"{run_term.source}" if launch else None
    if len(p.rounds) >= 2:
        found = stats.ratio_interval(list(p.rounds))
        if found is not None and found.lo is not None:
            single = noise_model.combined_interval(p.value, p.ci, drift_sd, launch)
            wider = single is not None and math.log(found.hi / found.lo) > math.log(single.interval[1] /
                                                                                     single.interval[0])  # fmt: skip
            if found.n >= 3:
                return _rounds_decision(found, run_term)
            apart = rounds_apart(p, drift_sd, launch)
            if apart is not None:  # the rounds differ beyond their own requests: an interval that holds both
                said = " and ".join(f"{v:.2f}×" for v in p.rounds)
                return Decision(apart, ROUNDS_APART, single.requests, single.drift or None, launch, source,
                                f"the 2 rounds differ beyond their own requests' intervals ({said}): the interval "
                                "spans both rounds' own, deciding only where each round alone decides alike",
                                found.n)  # fmt: skip
            # two rounds: a t-interval on 1 degree of freedom, wider than the requests themselves show where the
            # rounds differ by chance, narrower where they agree by chance (0 wide for two equal rounds): not read
            return Decision(single.interval, POOLED_ROUNDS, single.requests, single.drift or None, launch, source,
                            f"{found.n} rounds' t-interval (1 degree of freedom) set aside: "
                            + ("wider than the requests' own" if wider else "narrower than the requests' own"),
                            found.n)  # fmt: skip
    found = noise_model.combined_interval(p.value, p.ci, drift_sd, launch)
    if found is None:
        return Decision(None)
    if drift_sd:
        covers = f"requests and the machine's drift at the load (speed probe ±{drift.pct(drift_sd)})"
    else:
        covers = TOGETHER if drift_sd == 0.0 else REQUESTS_ONLY
    why = None
    if launch and noise.decide(found.without_launch) != noise.decide(found.interval):
        why = f"{AT_THIS_NOISE}: the run-to-run term ±{drift.pct(launch)} ({source}) holds 1"
    return Decision(found.interval, covers, found.requests, drift_sd, launch, source, why)


def _rounds_decision(found: stats.Interval, run_term: noise_model.RunToRun | None) -> Decision:
    """Three or more rounds: their t-interval (the drift between rounds in it), widened by the run-to-run term beyond
    the rounds' own spread: a launch moves all of a run's rounds alike, which no spread between them shows. That
    part is the measured speedup term less one round's sd (one calibration launch is one round), as ``compare``'s
    rounds test takes it (:func:`noise_model.beyond_rounds`); none with the project's default, measured on single
    runs of another machine. Without it, 4 unchanged ``--repeats 3`` runs' intervals covered the other runs' median
    in 83-86 % of readings (issue #62, docs/measurements/2026-11-29-sharp-gate)."""
    covers = f"paired repeats ({found.n} rounds): the drift between rounds included"
    beyond = noise_model.beyond_rounds(run_term, found.sd) if found.sd is not None else 0.0
    if not beyond:
        return Decision((found.lo, found.hi), covers, rounds=found.n)
    centre, half = math.log(found.mean), math.log(found.hi / found.lo) / 2
    wide = math.hypot(half, noise_model.Z_95 * beyond)
    interval = (math.exp(centre - wide), math.exp(centre + wide))
    source = run_term.source  # type: ignore[union-attr]
    why = None
    if noise.decide(interval) != noise.decide((found.lo, found.hi)):
        why = f"{AT_THIS_NOISE}: the run-to-run term beyond the rounds' spread ±{drift.pct(beyond)} ({source}) holds 1"
    return Decision(interval, f"{covers}, and the run-to-run term beyond the rounds' spread", None, None, beyond,
                    source, why, found.n)  # fmt: skip


def rounds_apart(p: Paired, drift_sd: float | None, launch: float | None) -> tuple[float, float] | None:
    """Two rounds whose own requests' intervals do not overlap: the span of both rounds' own intervals (each widened
    by the drift and the run-to-run term), which holds each round's ratio; ``None`` where the rounds agree within
    their requests (or a round has no interval)."""
    if len(p.rounds) != 2 or len(p.round_cis) != 2 or None in p.round_cis:
        return None
    (lo0, hi0), (lo1, hi1) = p.round_cis
    if max(lo0, lo1) <= min(hi0, hi1):
        return None
    own = [noise_model.combined_interval(v, ci, drift_sd, launch) for v, ci in zip(p.rounds, p.round_cis,
                                                                                   strict=True)]  # fmt: skip
    if None in own:
        return None
    return min(o.interval[0] for o in own), max(o.interval[1] for o in own)


def oriented(figure: str, decision: str) -> str:
    """``noise.decide``'s word for a ratio as the reader's: better, worse, same (not distinguishable), undecided."""
    if decision == noise.NO_INTERVAL or decision is None:
        return UNDECIDED
    if decision == noise.UNCLEAR:
        return SAME
    up = decision == noise.FASTER
    return BETTER if up != (figure in LOWER_IS_BETTER) else WORSE


COLUMNS = ("run_id", "backend", "model", "workload", "category", "method", "baseline", "concurrency", "figure", "value",
           "lo", "hi", "decision", "verdict", "covers", "why", "common", "n_method", "n_base", "requests_sd", "drift_sd",
           "launch_sd", "launch_source", "rounds", "speed")  # fmt: skip  # speed: a trace replay's (else None)


def pairs_of(methods: Iterable[str]) -> list[tuple[str, str]]:
    """Every pair read in a setting: each method over AR, then each two other methods, DFlash over every other one
    (what dflashbench answers: DFlash against each method a user weighs it against, issue #56), else the later one in
    the methods' order over the earlier."""
    ms = sorted(set(methods), key=method_sort_key)
    others = [m for m in ms if m != BASELINE]
    out = [(m, BASELINE) for m in others] if BASELINE in ms else []
    pivot = pivot_of(others)
    return out + [(a, b) if a == pivot else (b, a) for i, a in enumerate(others) for b in others[i + 1:]]


def pivot_of(methods: Iterable[str]) -> str | None:
    """The method the others are read against: DFlash, else DFlash2 (the method dflashbench benchmarks)."""
    found = set(methods)
    return next((m for m in ("dflash", "dflash2") if m in found), None)


def _results(requests: pd.DataFrame, row: Mapping, category: str) -> list[RequestResult]:
    """A usable point's measured requests: every repeat round's, its category's where the row is a category's."""
    ids = row.get("repeat_point_ids")
    ids = [str(i) for i in ids] if isinstance(ids, list) and ids else [str(row.get("point_id"))]
    index = index_of(requests)
    return [r for pid in ids for r in index.of(str(row.get("run_id")), pid, category)]


def _why_none(p: Paired, figure: str, sides: tuple[list[RequestResult], list[RequestResult]],
              rows: tuple[Mapping, Mapping] = ({}, {})) -> str:
    """Why a reading has no interval: a point that counts requests whose records ``requests.jsonl`` does not hold
    says so (the prompts ran; their records are missing); a per-token figure on requests whose timing the client
    could not see says so (not that too few prompts ran: they ran, their tokens came in bursts)."""
    lost = [(method_label(str(row.get("method"))), n) for side, row in zip(sides, rows, strict=True)
            if not side and (n := _count(row.get("num_requests")))]  # fmt: skip
    if len(lost) == 2:
        return "requests.jsonl holds none of either point's requests"
    if lost:
        return f"requests.jsonl holds none of {lost[0][0]}'s {lost[0][1]} requests"
    if figure in (PER_USER, SINGLE) and p.common < 2 and all(sides) and \
            any(observability.timing_observable(r) is False for side in sides for r in side):  # fmt: skip
        return "per-token timing not observable"
    return TOO_FEW if p.value is not None or p.common < 2 else "no requests"


def _count(v) -> int:
    f = finite(v)
    return int(f) if f else 0


def together(a: Mapping, b: Mapping) -> bool:
    """Two points that record being measured together (``extra["pairing"]``: in turn or side by side, each naming
    the other): their drift is zero by construction, whether or not the speed probe's readings were kept (review
    2026-11-29, probe p12: a run without probes.jsonl read "drift not measured")."""
    def pairing(r: Mapping) -> dict:
        extra = r.get("extra")
        found = extra.get("pairing") if isinstance(extra, dict) else None
        return found if isinstance(found, dict) else {}

    pa, pb = pairing(a), pairing(b)
    return bool(pa.get("mode")) and pa.get("mode") == pb.get("mode") and str(b.get("point_id")) in (pa.get("with") or ()) \
        and str(a.get("point_id")) in (pb.get("with") or ())  # fmt: skip


def load_drift(probes: Sequence[ProbeReading], point_ids: Sequence[str]) -> float | None:
    """The machine's drift at one load: the largest the probe measured between any two of the load's points (every
    pair read there carries it alike); ``None`` where the probe measured none."""
    found = [d for a, b in itertools.combinations(point_ids, 2) if (d := point_drift(probes, a, b)) is not None]
    return max(found) if found else None


def pair_readings(points: pd.DataFrame, requests: pd.DataFrame, probes: Mapping[str, Sequence[ProbeReading]],
                  figures: Sequence[str] = (LATENCY, THROUGHPUT, TTFT, PER_USER, SINGLE),
                  pairs: Callable[[Iterable[str]], list[tuple[str, str]]] = pairs_of,
                  categories: bool = False,
                  terms: Mapping[str, noise_model.RunToRun | None] | None = None,
                  sittings: Mapping[str, Iterable[str]] | None = None) -> pd.DataFrame:  # fmt: skip
    """Every reading (module docstring) of ``points``' closed-loop settings: per run, setting, pair of
    :func:`pairs_of`, concurrency both were measured at and figure (``single`` at c=1 only; ``throughput`` on whole
    points only: a category's share of a mixed point has no throughput of its own). ``categories``: also each
    category's readings inside the mixed points. ``terms``: each run's run-to-run term (run id -> term; none: no
    such term in the intervals). ``sittings``: each resumed run's points a later sitting measured (run id -> point
    ids); a reading whose two points were measured in different sittings has :data:`CROSSES` in ``covers`` (the
    machine's change between the sittings is not in its interval)."""
    usable = usable_points(points) if not points.empty else points
    if usable.empty or "point_id" not in usable.columns:
        return pd.DataFrame(columns=list(COLUMNS))
    alls = usable[usable["category"] == "all"]
    rows = []
    for key, group in alls.groupby(["run_id", "backend", "model", "workload"], sort=False):
        at = {(r["method"], int(r["concurrency"])): r for r in group.to_dict("records")}
        cats = ["all"]
        if categories:
            rs = index_of(requests).of(str(key[0]), str(group["point_id"].iloc[0]))
            cats += sorted({r.category for r in rs} - {"all"}) if len({r.category for r in rs}) > 1 else []
        run_probes = probes.get(str(key[0])) or ()
        run_term = (terms or {}).get(str(key[0]))
        at_load = {c: load_drift(run_probes, [str(r["point_id"]) for (_, cc), r in at.items() if cc == c])
                   for c in {c for _, c in at}}  # fmt: skip
        for method, base in pairs(group["method"]):
            for c in sorted({c for m, c in at if m == method} & {c for m, c in at if m == base}):
                mine, theirs = at[(method, c)], at[(base, c)]
                sd = at_load[c] if at_load[c] is not None or not together(mine, theirs) else 0.0
                later = {str(p) for p in (sittings or {}).get(str(key[0])) or ()}
                crosses = len({str(r["point_id"]).split("/r")[0] in later for r in (mine, theirs)}) == 2
                for category in cats:
                    sides = (_results(requests, theirs, category), _results(requests, mine, category))
                    for figure in figures:
                        if (figure == SINGLE and c != 1) or (figure == THROUGHPUT and category != "all"):
                            continue
                        if figure == THROUGHPUT:  # the points' own, beside the paired readings
                            rows.append(_points_own(key, method, base, c, mine, theirs))
                            continue
                        p = paired(terms_of(sides[0], figure), terms_of(sides[1], figure))
                        d = decided(p, sd, run_term)
                        interval = d.interval
                        decision = noise.decide(interval)
                        why = d.why if interval else _why_none(p, figure, sides, (theirs, mine))
                        rows.append({"run_id": key[0], "backend": key[1], "model": key[2], "workload": key[3],
                                     "category": category, "method": method, "baseline": base, "concurrency": c,
                                     "figure": figure, "value": p.value, "lo": interval[0] if interval else None,
                                     "hi": interval[1] if interval else None, "decision": decision,
                                     "verdict": oriented(figure, decision) if p.value is not None else UNDECIDED,
                                     "covers": (d.covers + CROSSES if crosses else d.covers) or None, "why": why, "common": p.common, "n_method": p.n_method,
                                     "n_base": p.n_base, "requests_sd": d.requests_sd, "drift_sd": d.drift_sd,
                                     "launch_sd": d.launch_sd, "launch_source": d.launch_source,
                                     "rounds": d.rounds})  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _points_own(key: tuple, method: str, base: str, c: int, mine: Mapping, theirs: Mapping) -> dict:
    """The throughput row of ``method`` over ``base`` at ``c`` (:func:`points_own`)."""
    return {**dict.fromkeys(COLUMNS), "run_id": key[0], "backend": key[1], "model": key[2], "workload": key[3],
            "category": "all", "method": method, "baseline": base, "concurrency": c, **points_own(mine, theirs)}  # fmt: skip


def points_own(mine: Mapping, theirs: Mapping) -> dict:
    """The throughput reading of point ``mine`` over point ``theirs``: the two points' own throughput per device
    (output tokens ÷ the point's measured window), no interval: one figure per point. The closed loop's and a trace
    pair's alike (:func:`dflashbench.measure.trace_readings.pair_readings`)."""
    a, b = (finite(r.get("throughput_tok_per_s_per_gpu")) or finite(r.get("throughput_tok_per_s")) for r in (mine, theirs))
    value = a / b if a and b else None
    return {"figure": THROUGHPUT, "value": value, "decision": noise.NO_INTERVAL, "verdict": UNDECIDED, "rounds": 0,
            "why": POINTS_OWN if value is not None else "no throughput measured at one of the points"}  # fmt: skip


def with_readings(df: pd.DataFrame, table: pd.DataFrame, figure: str) -> pd.DataFrame:
    """A speedup table (:func:`~dflashbench.measure.analysis.single_stream_speedups` or ``matched_concurrency_speedups``) with
    each row's speedup read on the prompts both methods ran, its decision interval, decision and what it covers,
    and how many prompts it rests on (``table``: :func:`pair_readings`); a row no reading covers keeps its
    points' ratio and says why it has no interval."""
    from dflashbench.measure.analysis import BASELINE as AR
    from dflashbench.measure.analysis import POOLED

    if df.empty:
        return df.assign(**dict.fromkeys(("decision_lo", "decision_hi", "decision", "covers", "why", "prompts")))
    at = {} if table.empty else {(r["backend"], r["model"], r["workload"], r["category"], r["method"], r["baseline"],
                                  int(r["concurrency"])): r for r in table[table["figure"] == figure].to_dict("records")}  # fmt: skip
    names = ("speedup", "decision_lo", "decision_hi", "decision", "covers", "why", "prompts", "statistic")
    cols: dict[str, list] = {c: [] for c in names}
    for rec in df.to_dict("records"):
        c = int(rec.get("concurrency", 1)) if rec.get("concurrency") == rec.get("concurrency") else 1
        r = at.get((rec["backend"], rec["model"], rec["workload"], rec["category"], rec["method"],
                    rec.get("baseline") or AR, c)) or {}  # fmt: skip
        if finite(r.get("value")) is not None:  # read on the requests both ran: the pooled rate
            said = (r["value"], r["lo"], r["hi"], r["decision"], r["covers"], r["why"],
                    f"{int(r['common'])} of {int(max(r['n_method'], r['n_base']))}", POOLED)  # fmt: skip
        else:  # the points' own ratio where there is one; why no interval: the reading's reason where it gave one
            ratio = rec.get("speedup") if finite(rec.get("speedup")) is not None else None
            why = r.get("why") if isinstance(r.get("why"), str) else "no requests both methods ran in one run"
            said = (ratio, None, None, "no interval" if ratio is not None or r else None, None, why, None,
                    rec.get("statistic"))  # fmt: skip
        for name, value in zip(names, said, strict=True):
            cols[name].append(value)
    if "statistic" not in df.columns or figure != PER_USER:
        cols.pop("statistic")
    return df.assign(**cols)



def finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
