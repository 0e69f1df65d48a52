"""Which of ``compare``'s moves are beyond noise: each gated figure tested on the two runs' own requests
(:mod:`dflashbench.measure.noise`) with the machine's drift the noise rule measures (docs/metrics.md, "The
noise rule"), the tests corrected together (:func:`correct_family`: step-down min-p over joint draws of their
nulls), and what each test could have seen.

A move past its threshold is a regression only when its test rejects "no change" after the correction. A tail
quantile that too few requests support is shown but not gated (:func:`~dflashbench.measure.noise.requests_for_quantile`
names how many a gate on it needs). Per-token figures (TPOT, ITL, per-user rate) use only requests whose
per-token timing was observable (:mod:`dflashbench.measure.observability`).

The drift each test adds to its requests' noise:

- a **speedup** (two points of one run): in each run, the drift between its two points' moments, from the run's
  speed probe (:func:`dflashbench.measure.drift.drift_between`);
- an **absolute speed figure** (throughput, per-user rate; a point of NEW against the same point of BASE):
  :func:`absolute_drift`, which says what it rests on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dflashbench.gate.speedups import Speedup
from dflashbench.measure import (
    cross_pairs,
    drift,
    family,
    launch_noise,
    metrics,
    noise,
    observability,
    request_terms,
)
from dflashbench.measure.request_index import index_of
from dflashbench.types import PointKey, ProbeReading, RequestResult

RULE = (f"noise rule (docs/metrics.md): a move past its gate fails only when a one-sided test on the two runs' "
        f"requests says it is beyond noise: throughput, per-user rate, tau and speedups by a bootstrap over "
        f"requests ({noise.N_RESAMPLES} resamples; where both runs sent the same requests, paired across the runs: the "
        f"prompt mix cancels; else each run's own, a speedup paired by prompt within each run), the speed figures "
        f"with the machine's drift and the run-to-run term added; with repeat rounds in both runs, a speedup by a "
        f"t-test on its per-round "
        f"ratios against the rounds' noise pooled over every speedup, a point by its repeats' 95% intervals not "
        f"overlapping; latency by Mann-Whitney U; corrected together at {noise.ALPHA:.0%} family-wise "
        f"(Westfall-Young step-down min-p over {family.DRAWS} joint draws of the tests' nulls: figures read from the "
        f"same requests count as about one; an exact figure, with no spread, outside it); a tail quantile is gated "
        f"only with {noise.TAIL_REQUESTS}+ requests beyond it")  # fmt: skip

_QUANTILE = re.compile(r"^(?P<family>[a-z_]+?)_(?:p(?P<q>\d+)|mean)$")
# Figures that move with the machine's speed: their test carries the drift; the rest (tau, accuracy) do not.
SPEED_FIGURES = ("throughput_tok_per_s", "per_user_tok_per_s", "goodput")
RATIO_OF_SUMS = ("throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_pooled")


def moves_with_machine(metric: str) -> bool:
    """Whether ``metric`` moves with the machine's speed (a drift and a machine change apply to it)."""
    family = _QUANTILE.match(metric)
    return metric.startswith(SPEED_FIGURES) or bool(family and family["family"] in PER_REQUEST)


def _itl_median_s(r: RequestResult) -> float | None:
    gaps = metrics.itl_s(r)
    return float(pd.Series(gaps).median()) if gaps else None


# Per-request values of each per-request figure; the timed ones need observable per-token timing.
PER_REQUEST: dict[str, Callable[[RequestResult], float | None]] = {
    "ttft_s": metrics.ttft_s, "e2e_s": metrics.e2e_s, "tpot_s": metrics.tpot_s, "itl_s": _itl_median_s,
    "per_user_tok_per_s": metrics.per_user_tok_per_s,
}  # fmt: skip
TIMED = frozenset({"tpot_s", "itl_s", "per_user_tok_per_s"})


@dataclass(frozen=True, eq=False)
class NoiseTest:
    """A figure's test: ``p`` (one-sided, before correction), or ``None`` with why it is not gated; with what it
    needs to say the smallest move it could have seen (:meth:`detectable`)."""

    p: float | None
    not_gated: str = ""
    worse: str = "drop"
    null: np.ndarray | None = None  # a bootstrap test's resampled deviations (log scale)
    drift_sd: float = 0.0  # the drift added to them (log scale, 1 sd)
    drift_df: float | None = None  # its degrees of freedom where part of it was estimated from few runs (else normal)
    base_sample: tuple[float, ...] = field(default=())  # a Mann-Whitney test's BASE values
    rounds: noise.RoundsNoise | None = None  # a repeat-rounds test's pooled noise, and its rounds (BASE, NEW)
    n_rounds: tuple[int, int] = (0, 0)
    paired: int = 0  # a test paired across runs: how many of the same requests it drew from (0: not paired)
    observed: float | None = None  # a paired test's log move (NEW / BASE) over those requests
    # tests with the same drift (a point's figures: one moment, launch and server) draw it once in the family's null
    drift_group: object = None

    @property
    def exact(self) -> bool:
        """A test of a figure with no spread under no change (tau where every prompt decodes alike in both runs):
        any move the worse way is real, so it costs the family nothing and stays outside it."""
        return (self.null is not None and len(self.null) > 0 and self.rounds is None and self.drift_sd <= 0
                and float(np.ptp(self.null)) == 0.0)  # fmt: skip

    def detectable(self, alpha: float) -> float | None:
        """The smallest move the worse way (a log ratio NEW / BASE) this test rejects at ``alpha``."""
        if self.rounds is not None:
            return self.rounds.detectable(*self.n_rounds, self.worse, alpha)
        if self.null is not None:
            return noise.min_detectable_log_move(self.null, self.worse, self.drift_sd, alpha, self.drift_df)
        if self.base_sample:
            return noise.min_detectable_log_shift(self.base_sample, self.worse, alpha)
        return None


def point_requests(requests: pd.DataFrame, point: pd.Series) -> list[RequestResult]:
    """The measured, successful requests of ``point`` (its category's share where it is a category row), from one
    run's requests (:mod:`dflashbench.measure.request_index`)."""
    return index_of(requests).of(None, point.get("point_id"), str(point.get("category") or "all"))


def per_user_terms(reqs: Sequence[RequestResult]) -> dict[str, tuple[float, float]]:
    """request id -> (tokens after the first, decode seconds): the terms of the pooled per-user rate, over requests
    whose timing was observable (:func:`dflashbench.measure.request_terms.per_user`)."""
    return {r.request_id: t for r in reqs if (t := request_terms.per_user(r)) is not None}


def tau_terms(reqs: Sequence[RequestResult]) -> dict[str, tuple[float, float]]:
    """request id -> (accepted + steps, steps): tau = tokens per verification step, a ratio of sums."""
    return {r.request_id: t for r in reqs if (t := request_terms.tau(r)) is not None}


def _ratio_terms(metric: str, reqs: list[RequestResult]) -> list[tuple[float, float]]:
    """(numerator, denominator) per request of a ratio-of-sums speed figure: a closed loop's throughput ~
    streams x tokens / time in flight (the constant factor cancels in the ratio); the pooled per-user rate =
    tokens after the first / decode time."""
    term = request_terms.per_user if metric == "per_user_tok_per_s_pooled" else request_terms.throughput
    return [t for r in reqs if (t := term(r)) is not None]


def _log_ratio(base: float, new: float) -> float | None:
    return math.log(new / base) if base > 0 and new > 0 else None


def test_move(metric: str, direction: str, base: float, new: float, base_reqs: list[RequestResult],
              new_reqs: list[RequestResult], drift_sd: float = 0.0) -> NoiseTest | None:  # fmt: skip
    """The test of ``metric`` moving from ``base`` to ``new`` the ``direction`` way ("drop" or "rise"), from
    the two points' requests, with the machine's ``drift_sd`` (log scale, 1 sd; :func:`absolute_drift`) added to a
    speed figure's noise; ``None`` where no request-level test applies (the threshold alone judges)."""
    if metric == "tau":  # no drift, and the same prompts decode alike in both runs: paired by prompt
        ratio = _log_ratio(base, new)
        null = noise.ratio_null(*(tau_terms(reqs) for reqs in (base_reqs, new_reqs)))
        if ratio is None or not len(null):
            return None
        return NoiseTest(noise.bootstrap_p_worse(ratio, null, direction), worse=direction, null=null)
    if metric in RATIO_OF_SUMS:
        ratio = _log_ratio(base, new)
        terms = [_ratio_terms(metric, reqs) for reqs in (base_reqs, new_reqs)]
        if ratio is None or min(map(len, terms)) < 2:
            return None
        null = noise.bootstrap_null(*(tuple(zip(*t, strict=True)) for t in terms))
        if not len(null):
            return None
        return NoiseTest(noise.p_worse_with_drift(ratio, null, direction, drift_sd), worse=direction, null=null,
                         drift_sd=drift_sd)  # fmt: skip
    m = _QUANTILE.match(metric)
    if m is None or m["family"] not in PER_REQUEST:
        return None
    family = m["family"]
    value = PER_REQUEST[family]
    timed = family in TIMED
    samples = [[v for r in reqs if (not timed or observability.timing_observable(r) is not False)
                and (v := value(r)) is not None] for reqs in (base_reqs, new_reqs)]  # fmt: skip
    if min(map(len, samples)) < 2:
        return None
    too_few = tail_too_few(metric, min(map(len, samples)))
    if too_few is not None:
        return too_few
    return NoiseTest(noise.mann_whitney_p_worse(samples[0], samples[1], direction), worse=direction,
                     base_sample=tuple(samples[0]))  # fmt: skip


def tail_too_few(metric: str, n_requests: float, what: str = "requests") -> NoiseTest | None:
    """A "not gated" test for a tail quantile (above the median) of ``n_requests`` requests, fewer than
    :func:`~dflashbench.measure.noise.requests_for_quantile` asks; ``None`` where the figure can be gated. A
    repeated point passes the requests of one round: each round's quantile is what its repeats average."""
    m = _QUANTILE.match(metric)
    if m is None or m["family"] not in PER_REQUEST or not m["q"] or int(m["q"]) <= 50:
        return None
    need = noise.requests_for_quantile(int(m["q"]) / 100)
    if n_requests >= need:
        return None
    return NoiseTest(None, f"p{m['q']} of {n_requests:g} {what}: a gate needs {need}")


def test_speedup(direction: str, base: Speedup, new: Speedup, requests: tuple[pd.DataFrame, pd.DataFrame],
                 drift_sd: float) -> NoiseTest | None:  # fmt: skip
    """The test of a speedup moving from BASE's to NEW's: each run's speedup resampled over its requests, paired
    by prompt inside the run (:func:`dflashbench.measure.noise.speedup_null`), with ``drift_sd``, the two runs'
    drift between the speedup's two points (:class:`RunNoise`), added. ``None`` without requests to resample."""
    ratio = _log_ratio(base.value, new.value) if base.value and new.value else None
    if ratio is None:
        return None
    sides = [tuple(per_user_terms(point_requests(reqs, row)) for row in (sp.over, sp.method))
             for sp, reqs in ((base, requests[0]), (new, requests[1]))]  # fmt: skip
    null = noise.speedup_null(sides[0], sides[1])
    if not len(null):
        return None
    return NoiseTest(noise.p_worse_with_drift(ratio, null, direction, drift_sd), worse=direction, null=null,
                     drift_sd=drift_sd)  # fmt: skip


# -- paired across runs: the same requests in both runs (measure/cross_pairs.py) ----------------------------------
MIN_PAIRED_SHARE = noise.MIN_PAIRED_SHARE  # pair across runs where this share of each side's requests pairs


def _paired_test(sides, direction: str, drift_sd: float, drift_df: float | None = None) -> NoiseTest | None:
    """The test of ``sum(sign * log R)`` over the requests every side holds (``sides``: (sign, key -> terms)), the
    keys resampled once for all sides; ``None`` where fewer than :data:`MIN_PAIRED_SHARE` of a side's requests pair
    (the runs sent different requests: the caller falls back to each run's own requests). The drift is Student-t
    with ``drift_df`` degrees of freedom where a run-to-run term in it was read from few runs."""
    largest = max(len(s) for _, s in sides)
    observed, null, m = cross_pairs.paired_null(sides)
    if observed is None or m < 2 or m < MIN_PAIRED_SHARE * largest or len(null) < noise.N_RESAMPLES // 2:
        return None
    return NoiseTest(noise.p_worse_with_drift(observed, null, direction, drift_sd, drift_df), worse=direction,
                     null=null, drift_sd=drift_sd, drift_df=drift_df, paired=m, observed=observed)  # fmt: skip


def test_move_paired(metric: str, direction: str, base_reqs: Sequence[RequestResult], new_reqs: Sequence[RequestResult],
                     drift_sd: float, drift_df: float | None = None) -> NoiseTest | None:  # fmt: skip
    """The test of a ratio-of-sums speed figure (throughput, pooled per-user rate) moving from BASE to NEW on the
    requests both runs sent (:mod:`dflashbench.measure.cross_pairs`): the prompt mix cancels, each request's timing
    jitter is resampled, and ``drift_sd`` (the machine's drift and the run-to-run term, log, 1 sd; ``drift_df`` its
    degrees of freedom) is added. ``None`` where the figure has no such test or the runs did not send the same
    requests."""
    if metric not in RATIO_OF_SUMS:
        return None
    term = request_terms.per_user if metric == "per_user_tok_per_s_pooled" else request_terms.throughput
    b, n = (cross_pairs.keyed(reqs, term) for reqs in (base_reqs, new_reqs))
    if min(len(b), len(n)) < 2:
        return None
    return _paired_test([(1.0, n), (-1.0, b)], direction, drift_sd, drift_df)


def test_speedup_paired(direction: str, base: Speedup, new: Speedup, requests: tuple[pd.DataFrame, pd.DataFrame],
                        drift_sd: float, drift_df: float | None = None) -> NoiseTest | None:  # fmt: skip
    """The test of a speedup moving from BASE's to NEW's on the requests all four points sent (the method's and the
    baseline's, in both runs): ``log S_new - log S_base`` resampled over those requests together, so neither the
    prompt mix nor tau's spread between prompts is left in it; ``drift_sd`` (each run's drift between its two points
    and the run-to-run term, log, 1 sd; ``drift_df`` its degrees of freedom) added. ``None`` where the four points
    did not send the same requests."""
    sides = []
    for sign, sp, reqs in ((1.0, new, requests[1]), (-1.0, base, requests[0])):
        method, over = (cross_pairs.keyed(point_requests(reqs, row), request_terms.per_user) for row in (sp.method, sp.over))
        sides += [(sign, method), (-sign, over)]
    if min(len(s) for _, s in sides) < 2:
        return None
    return _paired_test(sides, direction, drift_sd, drift_df)


def digested(requests: pd.DataFrame, rows: Sequence[pd.Series]) -> bool:
    """Whether every measured request of ``rows`` (one run's points) carries its prompt digest."""
    found = [r for row in rows for r in point_requests(requests, row)]
    return cross_pairs.digested(found)


def round_speedups(sp: Speedup, requests: pd.DataFrame, keys: set | None = None) -> dict[int, float]:
    """Each repeat round's speedup (round -> ratio): the method's and the baseline's pooled per-user rates over
    that round's requests, both points measured in the same round (paired: what moved the machine between
    rounds cancels). Rounds where either point has no observable timing are left out."""
    index = index_of(requests)
    if keys is None:
        method, over = ({round_: per_user_terms(index.of(None, point_id, str(row.get("category") or "all")))
                         for point_id, round_ in _rounds_of(row)} for row in (sp.method, sp.over))  # fmt: skip
    else:  # only the requests every round of both runs sent: each round's ratio over the same prompts
        method, over = ({round_: {k: t for k, t in cross_pairs.keyed(index.of(None, point_id, str(
            row.get("category") or "all")), request_terms.per_user).items() if k in keys}
            for point_id, round_ in _rounds_of(row)} for row in (sp.method, sp.over))  # fmt: skip
    found = {r: noise.ratio_of_sums(over[r], method[r]) for r in sorted(method) if r in over}
    return {r: v for r, v in found.items() if v}


def round_keys(sp: Speedup, requests: pd.DataFrame) -> list[set]:
    """The keys of the same requests (:mod:`dflashbench.measure.cross_pairs`) each round of ``sp``'s two points
    sent, one set per point and round; an empty set for a round whose requests carry no digest."""
    index = index_of(requests)
    out = []
    for row in (sp.method, sp.over):
        for point_id, _ in _rounds_of(row):
            reqs = index.of(None, point_id, str(row.get("category") or "all"))
            out.append(set(cross_pairs.keyed(reqs, request_terms.per_user)) if cross_pairs.digested(reqs) else set())
    return out


def _rounds_of(row: pd.Series) -> list[tuple[str, int]]:
    """(point id, round) of each finished repeat round of an aggregated point row (``repeat_point_ids``)."""
    ids = row.get("repeat_point_ids")
    rounds = [(str(p), PointKey.split_round(str(p))[1]) for p in (ids if isinstance(ids, list | tuple) else ())]
    return [(p, r) for p, r in rounds if r is not None]


def test_speedup_rounds(direction: str, base_logs: Sequence[float], new_logs: Sequence[float],
                        pooled: noise.RoundsNoise) -> NoiseTest:  # fmt: skip
    """The test of a speedup measured once per repeat round in both runs: the two runs' mean log per-round
    speedups against the rounds' noise pooled over every speedup of both runs (:class:`noise.RoundsNoise`)."""
    return NoiseTest(pooled.p_worse(base_logs, new_logs, direction), worse=direction, rounds=pooled,
                     n_rounds=(len(base_logs), len(new_logs)))  # fmt: skip


# -- the machine's drift, as each test needs it ------------------------------------------------------------------
class RunNoise:
    """One run's drift as the noise rule reads it from the run's speed probe (the GPU probe where the run has
    one, the engine computing there; else the CPU probe); ``measured`` False for a run without readings. And its
    ``launch``: the noise of a server launch the run did not measure (one launch per method), or ``None``."""

    def __init__(self, probes: Sequence[ProbeReading], launch: launch_noise.LaunchNoise | None = None):
        self.probes, self.launch = list(probes), launch
        self.launch_sd = launch_noise.log_sd(launch)
        self.kind = "gpu" if any(r.kind == "gpu" for r in self.probes) else "cpu"
        self.drift = drift.run_drift(self.probes, self.kind)

    @property
    def measured(self) -> bool:
        return self.drift is not None

    def between(self, point_a: str, point_b: str) -> float | None:
        """1-sd drift (log) between two points of the run; ``None`` where the probe did not measure it."""
        return drift.drift_between(self.probes, point_a, point_b, self.kind) if self.measured else None

    @property
    def level_sd(self) -> float | None:
        """1-sd deviation (log) of one moment's speed from the run's typical speed: the variogram's plateau (the
        drift between any two readings, ``overall``) over sqrt(2), a difference holding two deviations."""
        return self.drift.overall / math.sqrt(2) if self.drift is not None else None

    @property
    def probe_text(self) -> str:
        return self.drift.text if self.drift is not None else "drift not measured by a probe (no probes.jsonl)"

    @property
    def text(self) -> str:
        return self.probe_text + (f"; launch: {self.launch.text}" if self.launch is not None else "")


def speedup_drift(base: RunNoise, new: RunNoise, b: Speedup, n: Speedup, fallback: float) -> float:
    """The drift a speedup's move carries: each run's drift between the speedup's two points, from its probe
    (``fallback`` for a run without one, :func:`fallback_drift`), and the launch noise of each run's two servers
    where the run did not measure it (:mod:`dflashbench.measure.launch_noise`): four launches in all. Two points
    measured together (one probe reading before both: side by side or in turn) carry no drift between them, and
    of a launch only what two servers up at once showed (``together_log_sd``), since the launch term's size is the
    machine moving between launches minutes apart (docs/metrics.md, the noise rule)."""
    parts = []
    for run, sp in ((base, b), (new, n)):
        d = run.between(str(sp.method.get("point_id")), str(sp.over.get("point_id")))
        together = d == 0.0 and run.launch is not None and run.launch.together_log_sd is not None
        launch = run.launch.together_log_sd if together else run.launch_sd  # type: ignore[union-attr]
        parts += [d if d is not None else fallback / math.sqrt(2), launch * math.sqrt(2)]
    return math.hypot(*parts)


def fallback_drift(moves: Sequence[tuple[str, float | None]]) -> float:
    """The drift of a figure between two runs read from the gated points' own moves, for a run that has no
    probe: ``moves`` (group, log move), the group being a point's method (a speedup's pair); the robust spread
    of the moves after each group's own shift is taken out (:func:`dflashbench.measure.noise.drift_sd`), so one
    method's points moving together do not widen it."""
    kept = [(g, m) for g, m in moves if m is not None and math.isfinite(m)]
    return noise.drift_sd([m for _, m in kept], groups=[g for g, _ in kept])


def log_moves(pairs: Sequence[tuple[str, float | None, float | None]]) -> list[tuple[str, float | None]]:
    """(group, base, new) -> (group, log(new / base))."""
    return [(g, _log_ratio(b, n) if b is not None and n is not None else None) for g, b, n in pairs]


def correct_family(tests: Sequence[NoiseTest], alpha: float = noise.ALPHA, draws: int = family.DRAWS,
                   seed: int = 0) -> tuple[list[bool], float, int]:  # fmt: skip
    """Which of a comparison's ``tests`` reject "no change" with the family-wise error rate held at ``alpha``, the
    family's first-step level (what one figure moving alone must reach: its "fails at" is read there) and the
    family's size. Westfall and Young's step-down min-p rule (:func:`dflashbench.measure.family.step_down`) over
    ``draws`` joint draws of the tests' nulls: each bootstrap test's resampled requests in the same resample (tests
    of the same requests keep their dependence) plus its drift, drawn once for the tests of one
    :attr:`~NoiseTest.drift_group` (a point's throughput and per-user rate: their moves between unchanged runs
    correlate 0.98-1.00, docs/compare.md) and on its own otherwise; a test without such a null (repeat rounds,
    Mann-Whitney) as an independent uniform p-value. An :attr:`~NoiseTest.exact` test is outside the family: it
    rejects on any move the worse way."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, noise.N_RESAMPLES, draws)
    p_orders: list[np.ndarray | None] = []
    spreads: dict[object, np.ndarray] = {}
    for t in tests:
        if t.exact:
            p_orders.append(None)
            continue
        if t.null is not None and len(t.null) and t.rounds is None:
            group = t.drift_group if t.drift_group is not None else object()  # no group: a drift of its own
            if group not in spreads:
                spreads[group] = family.drift_spread(t.drift_df, draws, rng)
            shares = family.worse_shares(family.null_draws(t.null, pick, t.drift_sd, spreads[group]), t.worse)
        else:
            shares = rng.random(draws)
        p_orders.append(np.concatenate([[t.p], shares]))
    levels, first = family.step_down(p_orders, alpha)
    rejects = [t.p is not None and t.p < 1.0 if o is None else level is not None
               for t, o, level in zip(tests, p_orders, levels, strict=True)]  # fmt: skip
    return rejects, (first if first is not None else alpha), sum(o is not None for o in p_orders)
