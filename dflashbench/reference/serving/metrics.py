"""The reference server's ``/metrics``: Prometheus text with vLLM's metric names, so the very parser that reads
vLLM (:mod:`dflashbench.backends.counters`) reads this server. Written with ``prometheus_client`` (as vLLM's is):
counters are exposed as ``name_total`` (with a ``name_created`` sample where a start time is given), histograms
as cumulative ``_bucket``/``_count``/``_sum``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

QUEUE_TIME_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Bounds of the per-token histograms, finer than a GPU engine needs: tiny models on a CPU take milliseconds per
# token, and the bucket holding a percentile is all a reader can recover from a histogram.
TOKEN_TIME_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2,
                      0.5, 1.0, 2.5)  # fmt: skip
REQUEST_TIME_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Buckets:
    """A histogram kept by hand (prometheus_client renders it): counts per bucket, their sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * len(self.bounds)

    def observe(self, seconds: float) -> None:
        self.total += seconds
        self.count += 1
        for i, bound in enumerate(self.bounds):
            if seconds <= bound:
                self.counts[i] += 1
                break

    def family(self, name: str, help_: str, labels: list[str], values: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, help_, labels=labels)
        cumulative, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            running += n
            cumulative.append((repr(float(bound)), running))
        family.add_metric(values, [*cumulative, ("+Inf", self.count)], self.total)
        return family


@dataclass
class ServerMetrics:
    """Request-level counters, gauges and latency histograms the server keeps itself (spec-decode counters come
    from the engine). The latency histograms carry vLLM's names and meanings (vllm/v1/metrics/loggers.py and
    stats.py), timed in the server's event loop as each step's tokens reach it: what the server saw, whatever the
    client sees."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    errors: int = 0
    running: int = 0
    waiting: int = 0
    queue: Buckets = field(default_factory=lambda: Buckets(QUEUE_TIME_BUCKETS))
    ttft: Buckets = field(default_factory=lambda: Buckets(tuple(sorted({*TOKEN_TIME_BUCKETS, *REQUEST_TIME_BUCKETS}))))
    itl: Buckets = field(default_factory=lambda: Buckets(TOKEN_TIME_BUCKETS))  # per step, as vLLM's
    tpot: Buckets = field(default_factory=lambda: Buckets(TOKEN_TIME_BUCKETS))  # per finished request
    e2e: Buckets = field(default_factory=lambda: Buckets(REQUEST_TIME_BUCKETS))
    # when this server's counters began (a restart changes it): exposed as prometheus_client does, as
    # process_start_time_seconds and the spec-decode counters' _created samples
    created: float = field(default_factory=time.time)

    def observe_queue(self, seconds: float) -> None:
        self.queue.observe(seconds)

    def observe_request(self, arrived: float, steps: list[tuple[float, int]]) -> None:
        """One finished request's timing: its arrival and (time, tokens) of each step, ``time.monotonic()``
        seconds. TTFT, ITL per step and E2E as vLLM counts them; TPOT = decode time / (tokens - 1)."""
        if not steps:
            return
        first, last = steps[0][0], steps[-1][0]
        self.ttft.observe(first - arrived)
        for (before, _), (now, _) in zip(steps, steps[1:], strict=False):
            self.itl.observe(now - before)
        tokens = sum(n for _, n in steps)
        if tokens > 1:
            self.tpot.observe((last - first) / (tokens - 1))
        self.e2e.observe(last - arrived)


class _Snapshot:
    """A prometheus_client collector over one read of the server's numbers (a fresh registry per scrape, so
    nothing is kept twice: the numbers live in :class:`ServerMetrics` and the engine)."""

    def __init__(self, base: dict[str, str], metrics: ServerMetrics, spec: Any | None) -> None:
        self.base, self.m, self.spec = base, metrics, spec

    def _family(self, kind, name: str, help_: str, extra: tuple[str, ...] = ()):
        return kind(name, help_, labels=[*self.base, *extra])

    def collect(self) -> Iterator[Metric]:
        m, values = self.m, list(self.base.values())
        start = GaugeMetricFamily("process_start_time_seconds",
                                  "Start time of the process since unix epoch in seconds.", value=m.created)
        yield start
        for name, help_, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", m.running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", m.waiting),
        ):
            gauge = self._family(GaugeMetricFamily, name, help_)
            gauge.add_metric(values, value)
            yield gauge
        for name, help_, value in (
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens),
            ("vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens),
            ("dflashbench:request_errors", "Requests that failed inside the engine (HTTP 500).", m.errors),
        ):
            counter = self._family(CounterMetricFamily, name, help_)
            counter.add_metric(values, value)
            yield counter
        success = self._family(CounterMetricFamily, "vllm:request_success",
                               "Count of successfully processed requests.", ("finished_reason",))
        for reason, n in m.finished.items():
            success.add_metric([*values, reason], n)
        yield success
        labels = list(self.base)
        for hist, name, help_ in (
            (m.queue, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
            (m.ttft, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
            (m.itl, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
            (m.tpot, "vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request."),
            (m.e2e, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
        ):
            yield hist.family(name, help_, labels, values)
        if self.spec is not None:
            yield from self._spec(values)

    def _spec(self, values: list[str]) -> Iterator[Metric]:
        spec, created = self.spec, self.m.created
        for name, help_, value in (
            ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", spec.num_drafts),
            ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", spec.num_draft_tokens),
            ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", spec.num_accepted_tokens),
        ):
            counter = self._family(CounterMetricFamily, name, help_)
            counter.add_metric(values, value, created=created)
            yield counter
        per_pos = self._family(CounterMetricFamily, "vllm:spec_decode_num_accepted_tokens_per_pos",
                               "Accepted tokens per draft position.", ("position",))
        for i, n in enumerate(spec.accepted_per_pos):
            per_pos.add_metric([*values, str(i)], n, created=created)
        yield per_pos
        steps = self._family(CounterMetricFamily, "dflashbench:spec_decode_steps",
                             "Verification steps by batch size and draft tokens verified (a draft-length schedule).",
                             ("batch_size", "draft_len"))  # fmt: skip
        for (batch, k), n in sorted(getattr(spec, "steps_by_draft_len", {}).items()):
            steps.add_metric([*values, str(batch), str(k)], n, created=created)
        yield steps


def render_metrics(
    model_name: str, metrics: ServerMetrics, spec: Any | None, *, engine_index: str = "0"
) -> str:
    """Prometheus text exposition in vLLM's names (counters: ``# TYPE name counter`` + ``name_total``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot({"engine": engine_index, "model_name": model_name}, metrics, spec))
    return generate_latest(registry).decode()
