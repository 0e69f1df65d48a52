"""Was per-token timing observable? The burst rule, per request and per point (docs/metrics.md, "Observable
timing").

The client stamps every network read with ``perf_counter_ns`` (:mod:`dflashbench.load.loadgen`); the SSE events
found in one read share that stamp. When the client, the server's API process or the network falls behind the
engine, several steps' tokens wait in a buffer and reach the client in one read: they arrive *in a burst*, and
their stamps say when the client caught up, not when the engine made them. vLLM merges a request's pending
deltas when its consumer lags (``RequestOutputCollector.put`` in vllm/v1/engine/output_processor.py, read in
vllm 0.32.0), and SGLang's API process hands up to ``batch_notify_size`` (default 16) streaming notifications
to its event loop at once (sglang/srt/managers/tokenizer_manager.py, sglang 0.5.23): on a starved machine a
whole output can land in well under a millisecond. TPOT then collapses towards 0 and 1/TPOT explodes.

The rule, from arrival times only:

- a *burst token* is a token that arrived less than :data:`BURST_GAP_S` after the previous output chunk, or
  one of the extra tokens of the first chunk (``k_0 - 1``: they arrived together with the first token);
- a request's timing is *observable* when at most :data:`MAX_BURST_SHARE` of its tokens after the first are
  burst tokens;
- a point's latency metrics (TPOT, ITL, ICL, per-user tok/s) are *measured* when at least
  :data:`MIN_OBSERVED_SHARE` of its successful multi-token requests were observable; they then come from those
  requests only, and otherwise are ``None`` with the reason (:func:`not_measured_reason`).

A chunk that carries several tokens after a real gap (a speculative step, or an engine's stream interval) is
not a burst: its gap is measured, and ITL spreads it over its tokens. Pure functions; no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from dflashbench.types import RequestResult

# Chunks closer than this did not come from separate engine steps. Below: events that reach the client together
# are parsed from one network read and share its stamp (`python -m dflashbench.bench.bursts`: the largest gap
# inside a burst is 0.0 ms at 1, 16 and 64 streams on this 2-core machine). Above: the fastest decode steps of
# the engines dflashbench drives take milliseconds (the vLLM CPU build's AR step on the tiny embedded model:
# 3.5 ms p50; published GPU interactivity tops out near 1,000 tok/s/user, i.e. >= 1 ms per token), and a chunk
# gap is a whole step. 0.25 ms leaves a factor of 4 below the fastest step.
BURST_GAP_S = 250e-6
BURST_GAP_NS = int(BURST_GAP_S * 1e9)
# A request whose tokens mostly arrived in bursts has an ITL median that is an artefact of the burst (the gap
# floor), and a TPOT resting on fewer than half of its tokens' times. Real runs stay far below it: across 18
# runs of the embedded pair on this machine (reference backend and vLLM's CPU build, c = 1-4), no request
# passed 0.35.
MAX_BURST_SHARE = 0.5
# Dropping a share (1 - s) of a point's requests moves any percentile q of what is left to somewhere between the
# true percentiles q*s and q*s + (1 - s); at s = 0.9 a p50 stays within the true p45-p55. Below that the point
# says "not measured" rather than give percentiles of a biased sample.
MIN_OBSERVED_SHARE = 0.9

# What to do about it, in the words every reader (console, report) uses.
FIX = ("give the client cores of its own (a CPU engine: sweep --engine-cpus; else a less busy or separate client "
       "machine), spread the streams over more client processes (--client-processes), or raise the engine's stream "
       "interval (vLLM and SGLang --stream-interval, TensorRT-LLM stream_interval) so fewer, larger chunks reach "
       "the client")  # fmt: skip


def _token_chunks(r: RequestResult) -> list[tuple[int, int]]:
    """(arrival ns, tokens) of the chunks that carried tokens."""
    return [(t, k) for t, k in zip(r.chunk_ns, r.chunk_tokens, strict=False) if k > 0]


def streamed_tokens(r: RequestResult) -> int:
    """Tokens the request's output chunks carried (their ``chunk_tokens`` summed)."""
    return sum(k for _, k in _token_chunks(r))


def burst_tokens(r: RequestResult) -> int:
    """Tokens after the first whose arrival time carries no decode timing: ``k_0 - 1`` plus every token of a
    chunk that arrived less than :data:`BURST_GAP_S` after the previous chunk carrying tokens."""
    chunks = _token_chunks(r)
    if not chunks:
        return 0
    burst = chunks[0][1] - 1
    for (before, _), (t, k) in zip(chunks, chunks[1:], strict=False):
        if t - before < BURST_GAP_NS:
            burst += k
    return burst


def burst_share(r: RequestResult) -> float | None:
    """Burst tokens / tokens after the first; ``None`` for a failed request or one that streamed one token."""
    after_first = streamed_tokens(r) - 1
    if not r.ok or after_first < 1:
        return None
    return burst_tokens(r) / after_first


def timing_observable(r: RequestResult) -> bool | None:
    """Whether the request's per-token timing was observable (burst share at most :data:`MAX_BURST_SHARE`);
    ``None`` where there was no decode to observe (failed, or a single streamed token)."""
    share = burst_share(r)
    return None if share is None else share <= MAX_BURST_SHARE


def annotated(r: RequestResult) -> RequestResult:
    """``r`` with its verdict filled in (``timing_observable``, ``burst_tokens``), as ``requests.jsonl`` stores it."""
    observable = timing_observable(r)
    return dataclasses.replace(r, timing_observable=observable,
                               burst_tokens=burst_tokens(r) if observable is not None else None)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PointObservability:
    """How much of a point's per-token timing the client could see: ``requests`` successful requests with a
    decode (two or more streamed tokens), ``observed`` of them observable; ``tokens`` their tokens after the
    first, ``burst`` of those burst tokens."""

    requests: int
    observed: int
    tokens: int
    burst: int

    @property
    def share(self) -> float | None:
        """Observable requests / requests with a decode; ``None`` without any."""
        return self.observed / self.requests if self.requests else None

    @property
    def tokens_share(self) -> float | None:
        """Tokens whose arrival was observed / tokens after the first, over every request with a decode."""
        return 1 - self.burst / self.tokens if self.tokens else None

    @property
    def measured(self) -> bool:
        return self.requests > 0 and self.observed >= MIN_OBSERVED_SHARE * self.requests


def point_observability(results: Iterable[RequestResult]) -> PointObservability:
    """The figures over ``results`` (give the point's measured requests; failed ones are skipped)."""
    requests = observed = tokens = burst = 0
    for r in results:
        ok = timing_observable(r)
        if ok is None:
            continue
        requests += 1
        observed += ok
        tokens += streamed_tokens(r) - 1
        burst += burst_tokens(r)
    return PointObservability(requests, observed, tokens, burst)


def observed_requests(results: Iterable[RequestResult]) -> list[RequestResult]:
    """The requests whose timing was observable: what a point's TPOT, ITL and per-user rates are taken from."""
    return [r for r in results if timing_observable(r)]


def not_measured_reason(obs: PointObservability) -> str | None:
    """Why a point's per-token latency is not measured, in words (``None``: it is)."""
    if obs.measured:
        return None
    if obs.requests == 0:
        return "no successful request streamed more than one token, so there is no time per output token"
    unseen = obs.requests - obs.observed
    tokens = f"{1 - obs.tokens_share:.0%} of their tokens" if obs.tokens_share is not None else "their tokens"
    return (f"per-token timing not observable: {unseen} of {obs.requests} requests got most of their output in "
            f"bursts (chunks under {BURST_GAP_S * 1e3:g} ms apart; {tokens} overall), so the client could not "
            f"see when tokens were made; TPOT, ITL and per-user tok/s need {MIN_OBSERVED_SHARE:.0%} of requests "
            "observed")  # fmt: skip
