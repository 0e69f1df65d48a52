"""Which of ``compare``'s moves are beyond noise: each gated figure tested on the two runs' own requests
(:mod:`dflashbench.measure.noise`), and the tests corrected together (Holm).

A move past its threshold is a regression only when its test rejects "no change" after the correction. A tail
quantile that too few requests support is shown but not gated (:func:`~dflashbench.measure.noise.requests_for_quantile`
names how many a gate on it needs). Per-token figures (TPOT, ITL, per-user rate) use only requests whose
per-token timing was observable (:mod:`dflashbench.measure.observability`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from dflashbench.measure import metrics, noise, observability
from dflashbench.types import RequestResult

RULE = (f"noise rule: a move past its gate fails only when a one-sided test on the two runs' requests says it "
        f"is beyond noise (throughput and tau: bootstrap over requests, {noise.N_RESAMPLES} resamples, throughput "
        f"with the runs' drift, the robust spread of all gated points' moves, added; latency "
        f"and per-user rate: Mann-Whitney U), Holm-corrected at {noise.ALPHA:.0%} over every gated test; a tail "
        f"quantile is gated only with {noise.TAIL_REQUESTS}+ requests beyond it")  # fmt: skip

_QUANTILE = re.compile(r"^(?P<family>[a-z_]+?)_(?:p(?P<q>\d+)|mean)$")


def _itl_median_s(r: RequestResult) -> float | None:
    gaps = metrics.itl_s(r)
    return float(pd.Series(gaps).median()) if gaps else None


# Per-request values of each per-request figure; the timed ones need observable per-token timing.
PER_REQUEST: dict[str, Callable[[RequestResult], float | None]] = {
    "ttft_s": metrics.ttft_s, "e2e_s": metrics.e2e_s, "tpot_s": metrics.tpot_s, "itl_s": _itl_median_s,
    "per_user_tok_per_s": metrics.per_user_tok_per_s,
}  # fmt: skip
TIMED = frozenset({"tpot_s", "itl_s", "per_user_tok_per_s"})


@dataclass(frozen=True, slots=True)
class NoiseTest:
    """A figure's test: ``p`` (one-sided, before correction), or ``None`` with why it is not gated."""

    p: float | None
    not_gated: str = ""


def _results(frame: pd.DataFrame) -> list[RequestResult]:
    rows = frame[(~frame["warmup"].astype(bool)) & frame["ok"].astype(bool)] if not frame.empty else frame
    return [RequestResult.from_dict(r) for r in rows.to_dict("records")]


def point_requests(requests: pd.DataFrame, point: pd.Series) -> list[RequestResult]:
    """The measured, successful requests of ``point`` (its category's share where it is a category row)."""
    if requests.empty or "point_id" not in requests.columns:
        return []
    rows = requests[requests["point_id"] == point.get("point_id")]
    if str(point.get("category") or "all") != "all" and "category" in rows.columns:
        rows = rows[rows["category"] == point["category"]]
    return _results(rows)


def _ratio_terms(metric: str, reqs: list[RequestResult]) -> list[tuple[float, float]]:
    """(numerator, denominator) per request of a ratio-of-sums figure: tau = (accepted + steps) / steps; a
    closed loop's throughput ~ streams x tokens / time in flight (the constant factor cancels in the ratio)."""
    if metric == "tau":
        return [(r.spec_accepted_tokens + r.spec_verify_steps, r.spec_verify_steps) for r in reqs
                if r.spec_verify_steps and r.spec_accepted_tokens is not None]  # fmt: skip
    return [(r.output_tokens, e2e) for r in reqs if (e2e := metrics.e2e_s(r))]


def _log_ratio(base: float, new: float) -> float | None:
    return math.log(new / base) if base > 0 and new > 0 else None


def drift_of(metric: str, pairs: list[tuple[float | None, float | None]]) -> float:
    """The drift between the two runs of a throughput figure, from its (base, new) values over the gated points
    (:func:`dflashbench.measure.noise.drift_sd`); 0 for any other figure (tau does not drift with the machine; latency
    tails are tested on the requests alone)."""
    if not metric.startswith("throughput_tok_per_s"):
        return 0.0
    return noise.drift_sd([r for b, n in pairs if b is not None and n is not None and (r := _log_ratio(b, n))
                           is not None])  # fmt: skip


def test_move(metric: str, direction: str, base: float, new: float, base_reqs: list[RequestResult],
              new_reqs: list[RequestResult], drift: float = 0.0) -> NoiseTest | None:  # fmt: skip
    """The test of ``metric`` moving from ``base`` to ``new`` the ``direction`` way ("drop" or "rise"), from
    the two points' requests, with the runs' throughput ``drift`` (:func:`drift_of`) added to its noise;
    ``None`` where no request-level test applies (the threshold alone judges)."""
    if metric.startswith("throughput_tok_per_s") or metric == "tau":
        ratio = _log_ratio(base, new)
        terms = [_ratio_terms(metric, reqs) for reqs in (base_reqs, new_reqs)]
        if ratio is None or min(map(len, terms)) < 2:
            return None
        null = noise.bootstrap_null(*(tuple(zip(*t, strict=True)) for t in terms))
        return NoiseTest(noise.p_worse_with_drift(ratio, null, direction, drift)) if len(null) else None
    m = _QUANTILE.match(metric)
    if m is None or m["family"] not in PER_REQUEST:
        return None
    family, q = m["family"], (int(m["q"]) / 100 if m["q"] else None)
    value = PER_REQUEST[family]
    timed = family in TIMED
    samples = [[v for r in reqs if (not timed or observability.timing_observable(r) is not False)
                and (v := value(r)) is not None] for reqs in (base_reqs, new_reqs)]  # fmt: skip
    if min(map(len, samples)) < 2:
        return None
    if q is not None and q > 0.5:
        need = noise.requests_for_quantile(q)
        if min(map(len, samples)) < need:
            return NoiseTest(None, f"p{m['q']} of {min(map(len, samples))} requests: a gate needs {need}")
    return NoiseTest(noise.mann_whitney_p_worse(samples[0], samples[1], direction))
