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


@dataclass
class ServerMetrics:
    """Request-level counters and gauges the server keeps itself (spec-decode counters come from the engine)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    errors: int = 0
    running: int = 0
    waiting: int = 0
    queue_buckets: list[int] = field(default_factory=lambda: [0] * len(QUEUE_TIME_BUCKETS))
    queue_sum: float = 0.0
    queue_count: int = 0
    # when this server's counters began (a restart changes it): exposed as prometheus_client does, as
    # process_start_time_seconds and the spec-decode counters' _created samples
    created: float = field(default_factory=time.time)

    def observe_queue(self, seconds: float) -> None:
        self.queue_sum += seconds
        self.queue_count += 1
        for i, bound in enumerate(QUEUE_TIME_BUCKETS):
            if seconds <= bound:
                self.queue_buckets[i] += 1


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
        queue = self._family(HistogramMetricFamily, "vllm:request_queue_time_seconds",
                             "Histogram of time spent in WAITING phase for request.")
        buckets = [(repr(float(b)), n) for b, n in zip(QUEUE_TIME_BUCKETS, m.queue_buckets, strict=True)]
        queue.add_metric(values, [*buckets, ("+Inf", m.queue_count)], m.queue_sum)
        yield queue
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


def render_metrics(
    model_name: str, metrics: ServerMetrics, spec: Any | None, *, engine_index: str = "0"
) -> str:
    """Prometheus text exposition in vLLM's names (counters: ``# TYPE name counter`` + ``name_total``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot({"engine": engine_index, "model_name": model_name}, metrics, spec))
    return generate_latest(registry).decode()
