"""Open-loop arrival schedules: when each request of a ``--request-rate`` point becomes due.

Definitions follow the two peer tools (sources recorded here, as the project's rule asks):

- ``vllm bench serve`` (vllm/benchmarks/serve.py, ``get_request``): inter-arrival gaps are drawn from a gamma
  distribution with ``shape = burstiness`` and ``scale = 1 / (rate * burstiness)``, so the mean gap is always
  ``1 / rate``; ``burstiness = 1`` is the exponential distribution (a Poisson process), ``burstiness = inf`` a
  constant gap. The cumulative delays are then rescaled so the last request is due at ``n / rate`` ("to close
  the gap" between seeds), so the schedule's own rate is the target exactly. ``--max-concurrency`` is an
  ``asyncio.Semaphore`` around the send: a due request waits for a free slot and the schedule does not speed up
  to catch up (AIPerf documents the same "sleep-then-gate" pattern, docs/tutorials/request-rate-concurrency.md).
- GuideLLM (``guidellm benchmark --rate-type constant|poisson --rate R``, src/guidellm/__main__.py): ``constant``
  sends at a fixed interval ``1 / R``, ``poisson`` with exponential gaps of mean ``1 / R``.

Here ``constant`` and ``poisson`` are the two kinds (``poisson`` takes vLLM's optional burstiness), seeded with
the suite's seed so a schedule is reproducible. Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dflashbench.errors import UserError

KINDS = ("poisson", "constant")


def arrival_offsets_s(n: int, rate_per_s: float, kind: str = "poisson", *, seed: int = 0,
                      burstiness: float = 1.0) -> list[float]:  # fmt: skip
    """Seconds from the point's start at which each of ``n`` requests is due, non-decreasing.

    ``constant``: ``(i + 1) / rate``. ``poisson``: cumulative gamma(shape=burstiness, scale=1/(rate*burstiness))
    gaps, rescaled so the last is due at ``n / rate`` (vLLM's normalisation). ``rate = inf`` sends all at once."""
    if kind not in KINDS:
        raise UserError(f"arrivals {kind!r}: choose one of {', '.join(KINDS)}")
    if not rate_per_s > 0:
        raise UserError(f"request rate {rate_per_s!r}: give a rate above 0 requests per second")
    if not burstiness > 0:
        raise UserError(f"burstiness {burstiness!r}: give a factor above 0 (1 = Poisson)")
    if n <= 0:
        return []
    if math.isinf(rate_per_s):
        return [0.0] * n
    if kind == "constant" or math.isinf(burstiness):
        return [(i + 1) / rate_per_s for i in range(n)]
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=n)
    cum = np.cumsum(gaps)
    cum *= (n / rate_per_s) / cum[-1]
    return [float(x) for x in cum]


def achieved_rate_per_s(sent_ns: Sequence[int]) -> float | None:
    """Arrivals per second actually sent: ``(n - 1) / (t_last - t_first)`` over the send times (n - 1 gaps
    between n sends). ``None`` for fewer than two sends or a zero span."""
    if len(sent_ns) < 2:
        return None
    span_ns = max(sent_ns) - min(sent_ns)
    return (len(sent_ns) - 1) / (span_ns / 1e9) if span_ns > 0 else None


def parse_rates(text: str | Sequence[float]) -> list[float]:
    """``"2,4.5"`` -> ``[2.0, 4.5]``: positive, finite, no duplicates. An infinite rate (every request at once)
    is refused with the flag that does that: a closed loop, ``--concurrency N``."""
    items = [x.strip() for x in text.split(",") if x.strip()] if isinstance(text, str) else list(text)
    shown = ",".join(map(str, items))
    try:
        rates = [float(x) for x in items]
    except (TypeError, ValueError):
        raise UserError(f"--request-rate {shown}: expected numbers of requests per second like 2,4.5") from None
    bad = [r for r in rates if not r > 0 or math.isnan(r)]
    if bad:
        raise UserError(f"--request-rate {shown}: every rate must be above 0 requests per second (got {bad[0]:g})")
    if any(math.isinf(r) for r in rates):
        raise UserError(f"--request-rate {shown}: an infinite rate sends every request at once, which is a closed "
                        "loop: use --concurrency N (N requests in flight) instead, and finite rates here")  # fmt: skip
    if len(set(rates)) != len(rates):
        raise UserError(f"--request-rate {shown}: a rate is listed twice")
    return rates


def rate_label(rate_per_s: float) -> str:
    """The point-id part of a rate point: ``r4.0``, ``r0.5``, ``rinf``."""
    return "rinf" if math.isinf(rate_per_s) else f"r{float(rate_per_s)!r}"
