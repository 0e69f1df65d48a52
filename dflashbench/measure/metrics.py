"""Metric definitions: pure functions from raw :class:`RequestResult` facts to numbers.

This module is the one place the definitions live (what they mean: docs/metrics.md). Every function
states its formula; ``None`` means "undefined / not measured" and is never replaced by 0.
Times are client ``perf_counter_ns`` values; results are in seconds.

Symbols, for one request ``r``: ``t_sent`` = ``r.sent_ns``, ``t_first`` / ``t_last`` = arrival of the
first / last chunk carrying output (``r.first_token_ns`` / ``r.last_token_ns``), ``n`` =
``r.output_tokens`` (the server's ``usage.completion_tokens`` where it reports one and it agrees with what was
streamed, else the streamed count: :mod:`dflashbench.load.usage_check`), ``c_i`` / ``k_i`` =
arrival time / token count of the i-th output chunk (``r.chunk_ns`` / ``r.chunk_tokens``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dflashbench.measure import observability
from dflashbench.types import AcceptCounters, Method, PointSummary, RequestResult

NS = 1e9


# -- per request --------------------------------------------------------------------------------------------
def ttft_s(r: RequestResult) -> float | None:
    """Time to first token: ``(t_first - t_sent) / 1e9``; ``None`` if no output chunk arrived."""
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.sent_ns) / NS


def e2e_s(r: RequestResult) -> float | None:
    """End-to-end latency: ``(t_last - t_sent) / 1e9``; ``None`` if no output chunk arrived."""
    if r.last_token_ns is None:
        return None
    return (r.last_token_ns - r.sent_ns) / NS


def tpot_s(r: RequestResult) -> float | None:
    """Time per output token after the first: ``TPOT = (E2E - TTFT) / (n - 1)``.

    Undefined (``None``, not 0) for ``n <= 1`` or when no output chunk arrived.
    """
    ttft, e2e = ttft_s(r), e2e_s(r)
    if ttft is None or e2e is None or r.output_tokens <= 1:
        return None
    return (e2e - ttft) / (r.output_tokens - 1)


def decode_s(r: RequestResult) -> float | None:
    """Decode time seen by the client: ``(t_last - t_first) / 1e9`` (``E2E - TTFT``); ``None`` if no output
    chunk arrived."""
    if r.first_token_ns is None or r.last_token_ns is None:
        return None
    return (r.last_token_ns - r.first_token_ns) / NS


def per_user_tok_per_s(r: RequestResult) -> float | None:
    """Interactivity, per request: ``1 / TPOT`` (tokens per second one user sees after the first token).

    ``None`` where TPOT is undefined or 0 (every token in one chunk: no decode time was observable).
    """
    tpot = tpot_s(r)
    if tpot is None or tpot <= 0:
        return None
    return 1.0 / tpot


def queue_s(r: RequestResult) -> float:
    """Client-side queueing: ``(t_sent - t_queued) / 1e9``, time between a request being due and being sent."""
    return (r.sent_ns - r.queued_ns) / NS


def itl_s(r: RequestResult) -> list[float]:
    """Inter-token latencies, per *token*: a chunk ``i >= 1`` carrying ``k_i`` tokens contributes ``k_i``
    gaps of ``(c_i - c_{i-1}) / k_i``.

    The first chunk contributes none (its tokens arrive at TTFT). A chunk reported with ``k_i = 0`` tokens
    adds no gap; its time is carried into the next chunk that does carry tokens. So the gaps sum to
    ``t_last - t_first`` and there are ``n - k_0`` of them (``n`` = the sum of chunk token counts).
    Timing chunks as if each were one token is the peer-tool bug this avoids: under speculative decoding a
    chunk holds a whole verification step's tokens.
    """
    gaps: list[float] = []
    if not r.chunk_ns:
        return gaps
    prev = r.chunk_ns[0]
    for t, k in zip(r.chunk_ns[1:], r.chunk_tokens[1:], strict=True):
        if k <= 0:
            continue
        gaps.extend([(t - prev) / NS / k] * k)
        prev = t
    return gaps


def icl_s(r: RequestResult) -> list[float]:
    """Inter-chunk latencies: ``c_i - c_{i-1}`` for every pair of consecutive output chunks (what peer tools
    call "ITL"); kept separately from the per-token :func:`itl_s`."""
    return [(b - a) / NS for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]


# -- per point -----------------------------------------------------------------------------------------------
def measured(results: Iterable[RequestResult]) -> list[RequestResult]:
    """The measured window: every result that is not a warm-up request."""
    return [r for r in results if not r.warmup]


def window_s(results: Sequence[RequestResult], busy_only: bool = False) -> float | None:
    """Measured duration: ``max(t_last) - min(t_sent)`` (last response minus first request), over the
    measured results (warm-up excluded); the end counts successful requests only. ``None`` if none finished.

    ``busy_only``: the time at least one of the point's requests was in flight (the union of their sent-to-last-
    token spans), for a point sent in waves taken in turn with other methods' (:mod:`dflashbench.run.turns`): the
    other methods' waves are not this point's time. A closed loop's streams leave no gap, so the two agree there."""
    rs = measured(results)
    ends = [r.last_token_ns for r in rs if r.ok and r.last_token_ns is not None]
    if not rs or not ends:
        return None
    if not busy_only:
        return (max(ends) - min(r.sent_ns for r in rs)) / NS
    spans = sorted((r.sent_ns, r.last_token_ns) for r in rs if r.ok and r.last_token_ns is not None)
    total, (lo, hi) = 0, spans[0]
    for a, b in spans[1:]:
        if a > hi:
            total, lo, hi = total + hi - lo, a, b
        else:
            hi = max(hi, b)
    return (total + hi - lo) / NS


def throughput_tok_per_s(results: Sequence[RequestResult], busy_only: bool = False) -> float | None:
    """System output throughput: ``sum(n over successful measured requests) / window_s``."""
    dur = window_s(results, busy_only)
    if not dur or dur <= 0:
        return None
    return sum(r.output_tokens for r in measured(results) if r.ok) / dur


def per_device(value: float | None, num_gpus: int) -> float | None:
    """``value / num_gpus``. A run on no GPU (the reference backend on a CPU) counts as one device, so
    ``per_device(x, 0) == x``; ``manifest.json`` and ``PointSummary.num_gpus`` say which it was."""
    if value is None:
        return None
    return value / max(num_gpus, 1)


def per_user_tok_per_s_pooled(results: Iterable[RequestResult]) -> float | None:
    """Per-user tok/s pooled over requests: ``sum(n - 1) / sum(E2E - TTFT)`` over successful requests with
    ``n > 1``, i.e. 1 / (token-weighted mean TPOT). Unlike the mean of 1/TPOT, one request with a tiny TPOT
    cannot dominate it: it adds its tokens and its (small) decode time, no more. ``None`` without any decode
    time."""
    tokens = 0
    seconds = 0.0
    for r in results:
        d = decode_s(r)
        if r.ok and r.output_tokens > 1 and d is not None:
            tokens += r.output_tokens - 1
            seconds += d
    return tokens / seconds if seconds > 0 else None


def latency_fields(ok: Sequence[RequestResult]) -> dict:
    """A point's per-token latency figures from its successful requests, as :class:`PointSummary` fields:
    TPOT, ITL, ICL and the per-user rates from the requests whose timing was observable, or every one of them
    ``None`` when too few were (:mod:`dflashbench.measure.observability`), with the reason; and the observability
    figures themselves. A burst never becomes a TPOT of 0."""
    obs = observability.point_observability(ok)
    seen = observability.observed_requests(ok) if obs.measured else []
    tpots = [tpot_s(r) for r in seen]
    users = [per_user_tok_per_s(r) for r in seen]
    itls = [g for r in seen for g in itl_s(r)]
    icls = [g for r in seen for g in icl_s(r)]
    return dict(
        per_user_tok_per_s_mean=mean(users), per_user_tok_per_s_p50=percentile(users, 50),
        per_user_tok_per_s_p10=percentile(users, 10), per_user_tok_per_s_pooled=per_user_tok_per_s_pooled(seen),
        tpot_s_p50=percentile(tpots, 50), tpot_s_p99=percentile(tpots, 99), tpot_s_mean=mean(tpots),
        itl_s_p50=percentile(itls, 50), itl_s_p99=percentile(itls, 99),
        icl_s_p50=percentile(icls, 50), icl_s_p99=percentile(icls, 99),
        timing_requests=obs.requests, timing_observed_requests=obs.observed, timing_observed_share=obs.share,
        timing_observed_tokens_share=obs.tokens_share,
        latency_not_measured_reason=observability.not_measured_reason(obs) if ok else None,
    )  # fmt: skip


def tau(delta: AcceptCounters | None, method: Method | str) -> float | None:
    """Acceptance length over a window: ``tau = 1 + accepted_tokens / drafts`` from counter *deltas*
    (bonus token included; vLLM's formula, onto which every backend maps its counters).

    AR decoding: exactly ``1.0`` when the server reports no counters (or no drafts) - one token per
    target step. A speculative method with no counters or no drafts in the window: ``None`` (unknown).
    """
    is_ar = Method.parse(str(method)) is Method.AR
    if delta is None or delta.drafts <= 0:
        return 1.0 if is_ar else None
    return 1.0 + delta.accepted_tokens / delta.drafts


def acceptance_rate(delta: AcceptCounters | None) -> float | None:
    """Draft acceptance rate over a window: ``accepted_tokens / draft_tokens`` (``None`` without drafts,
    which includes AR)."""
    if delta is None or delta.draft_tokens <= 0:
        return None
    return delta.accepted_tokens / delta.draft_tokens


def accepted_per_pos_rate(delta: AcceptCounters | None) -> tuple[float, ...]:
    """Per-position acceptance: ``accepted_per_pos[i] / drafts`` (empty where not exposed)."""
    if delta is None or delta.drafts <= 0:
        return ()
    return tuple(a / delta.drafts for a in delta.accepted_per_pos)


def tau_from_requests(results: Iterable[RequestResult]) -> float | None:
    """tau pooled from per-request speculative stats (where the server reports them, e.g. the reference
    backend or SGLang's meta_info): ``1 + sum(accepted) / sum(verify steps)`` over successful requests;
    ``None`` if no request carried them."""
    steps = accepted = 0
    for r in results:
        if r.ok and r.spec_verify_steps and r.spec_accepted_tokens is not None:
            steps += r.spec_verify_steps
            accepted += r.spec_accepted_tokens
    return 1.0 + accepted / steps if steps else None


def accuracy(results: Iterable[RequestResult]) -> tuple[float | None, int, int]:
    """Task accuracy: ``(correct / graded, graded, correct)`` over successful requests the load generator
    graded against the workload's reference answer (``r.correct`` not ``None``; rules in
    :mod:`dflashbench.workloads.grading`). Failed requests are left out (they are counted as errors); the share is
    ``None`` when nothing was graded."""
    graded = [bool(r.correct) for r in results if r.ok and r.correct is not None]
    return (sum(graded) / len(graded) if graded else None), len(graded), sum(graded)


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with numpy's linear interpolation; ``None`` values are dropped;
    ``None`` if nothing is left."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q, method="linear"))


def mean(values: Iterable[float | None]) -> float | None:
    """Arithmetic mean, ``None`` values dropped; ``None`` if nothing is left."""
    arr = [v for v in values if v is not None]
    return float(np.mean(arr)) if arr else None


def _tokens_source(results: Sequence[RequestResult]) -> str:
    sources = {r.output_tokens_source for r in results}
    if not sources:
        return "server"
    return sources.pop() if len(sources) == 1 else "mixed:" + ",".join(sorted(sources))


def summarize_point(
    results: Iterable[RequestResult],
    counters_delta: AcceptCounters | None,
    *,
    run_id: str,
    point_id: str,
    backend: str,
    method: str,
    model: str,
    draft: str | None,
    workload: str,
    concurrency: int,
    num_gpus: int,
    category: str = "all",
    energy_j: float | None = None,
    mean_power_w: float | None = None,
    gpu_util_pct_mean: float | None = None,
    extra: dict | None = None,
    busy_only: bool = False,
) -> PointSummary:
    """One :class:`PointSummary` from a point's results (warm-up requests are dropped here). ``busy_only``: its
    duration and throughput over the time its own requests were in flight (:func:`window_s`).

    ``category="all"`` summarises every result; another category only that category's results. Latency
    figures come from successful requests; errors are counted in ``num_errors``. tau and the acceptance
    rate come from ``counters_delta`` (the server-wide counters over the measured window) for the "all"
    row; a per-category row uses per-request speculative stats where the server reports them, else
    ``None`` (AR: 1.0). Energy per token = ``energy_j / output_tokens`` ("all" rows only). TPOT, ITL, ICL
    and per-user tok/s come from the requests whose per-token timing was observable, or are ``None`` with
    ``latency_not_measured_reason`` (:func:`latency_fields`); TTFT and E2E from every successful request.
    """
    rows = measured(results)
    if category != "all":
        rows = [r for r in rows if r.category == category]
    ok = [r for r in rows if r.ok]
    ttfts = [ttft_s(r) for r in ok]
    e2es = [e2e_s(r) for r in ok]
    queues = [queue_s(r) for r in rows]
    output_tokens = sum(r.output_tokens for r in ok)
    throughput = throughput_tok_per_s(rows, busy_only)

    if category == "all":
        point_tau, rate, per_pos = tau(counters_delta, method), acceptance_rate(counters_delta), accepted_per_pos_rate(counters_delta)
        if point_tau is None:
            point_tau = tau_from_requests(ok)
    else:
        point_tau = 1.0 if Method.parse(method) is Method.AR else tau_from_requests(ok)
        rate, per_pos, energy_j = None, (), None
    energy_per_tok = energy_j / output_tokens if energy_j is not None and output_tokens > 0 else None
    share, graded, correct = accuracy(rows)
    checked = [r for r in ok if r.streamed_tokens is not None]  # dflashbench.load.usage_check
    return PointSummary(
        run_id=run_id,
        point_id=point_id,
        backend=backend,
        method=str(method),
        model=model,
        draft=draft,
        workload=workload,
        category=category,
        concurrency=concurrency,
        num_gpus=num_gpus,
        num_requests=len(rows),
        num_errors=len(rows) - len(ok),
        duration_s=window_s(rows, busy_only),
        output_tokens=output_tokens,
        throughput_tok_per_s=throughput,
        throughput_tok_per_s_per_gpu=per_device(throughput, num_gpus),
        ttft_s_p50=percentile(ttfts, 50),
        ttft_s_p99=percentile(ttfts, 99),
        ttft_s_mean=mean(ttfts),
        **latency_fields(ok),
        e2e_s_p50=percentile(e2es, 50),
        e2e_s_p99=percentile(e2es, 99),
        queue_s_p50=percentile(queues, 50),
        queue_s_p99=percentile(queues, 99),
        tau=point_tau,
        acceptance_rate=rate,
        accepted_per_pos_rate=per_pos,
        energy_j_per_tok=energy_per_tok,
        mean_power_w=mean_power_w if category == "all" else None,
        gpu_util_pct_mean=gpu_util_pct_mean if category == "all" else None,
        output_tokens_source=_tokens_source(ok),
        accuracy=share,
        num_graded=graded,
        num_correct=correct,
        usage_checked_requests=len(checked) if checked else None,
        usage_mismatch_requests=sum(r.usage_mismatch for r in checked) if checked else None,
        extra=dict(extra or {}),
    )
