"""One request's terms of the ratio-of-sums figures: ``(numerator, denominator)``, or ``None`` where the request
has none. A figure over a set of requests is ``sum(numerators) / sum(denominators)``; the noise rule's tests
(:mod:`dflashbench.gate.compare_noise`), the stopping rule (:mod:`dflashbench.run.precision`) and the acceptance
slices (:mod:`dflashbench.measure.slices`) all resample or linearise these same terms."""

from __future__ import annotations

from dflashbench.measure import metrics, observability
from dflashbench.types import RequestResult


def per_user(r: RequestResult) -> tuple[float, float] | None:
    """Tokens after the first over decode seconds: the pooled per-user rate
    (:func:`dflashbench.measure.metrics.per_user_tok_per_s_pooled`), where the request's timing was observable."""
    d = metrics.decode_s(r)
    if r.output_tokens > 1 and d and d > 0 and observability.timing_observable(r) is not False:
        return r.output_tokens - 1.0, d
    return None


def throughput(r: RequestResult) -> tuple[float, float] | None:
    """Output tokens over time in flight: a closed loop's throughput up to its constant concurrency."""
    e2e = metrics.e2e_s(r)
    return (float(r.output_tokens), e2e) if e2e else None


def tau(r: RequestResult) -> tuple[float, float] | None:
    """Tokens committed over verification steps (``1 + accepted / steps``), where the server reported them."""
    if r.spec_verify_steps and r.spec_accepted_tokens is not None:
        return float(r.spec_accepted_tokens + r.spec_verify_steps), float(r.spec_verify_steps)
    return None
