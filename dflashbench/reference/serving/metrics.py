"""The reference server's ``/metrics``: Prometheus text with vLLM's metric names, so the very parser that reads
vLLM (:mod:`dflashbench.backends.counters`) reads this server."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

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


def _prom_labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}"


def render_metrics(
    model_name: str, metrics: ServerMetrics, spec: Any | None, *, engine_index: str = "0"
) -> str:
    """Prometheus text exposition in vLLM's names (counters: ``# TYPE name counter`` + ``name_total``)."""
    base = {"engine": engine_index, "model_name": model_name}
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, dict[str, str], float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for suffix, labels, value in samples:
            out.append(f"{name}{suffix}{_prom_labels({**base, **labels})} {float(value)!r}")

    out += ["# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {metrics.created!r}"]
    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           [("", {}, metrics.running)])
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [("", {}, metrics.waiting)])
    metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.",
           [("_total", {}, metrics.prompt_tokens)])
    metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
           [("_total", {}, metrics.generation_tokens)])
    metric("vllm:request_success", "counter", "Count of successfully processed requests.",
           [("_total", {"finished_reason": r}, n) for r, n in metrics.finished.items()])
    metric("dflashbench:request_errors", "counter", "Requests that failed inside the engine (HTTP 500).",
           [("_total", {}, metrics.errors)])
    cumulative = [("_bucket", {"le": repr(float(b))}, n) for b, n in zip(QUEUE_TIME_BUCKETS, metrics.queue_buckets, strict=True)]
    metric("vllm:request_queue_time_seconds", "histogram", "Histogram of time spent in WAITING phase for request.",
           [*cumulative, ("_bucket", {"le": "+Inf"}, metrics.queue_count),
            ("_count", {}, metrics.queue_count), ("_sum", {}, metrics.queue_sum)])
    if spec is not None:
        metric("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.",
               [("_total", {}, spec.num_drafts), ("_created", {}, metrics.created)])
        metric("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.",
               [("_total", {}, spec.num_draft_tokens)])
        metric("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
               [("_total", {}, spec.num_accepted_tokens)])
        metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
               "Accepted tokens per draft position.",
               [("_total", {"position": str(i)}, n) for i, n in enumerate(spec.accepted_per_pos)])
    return "\n".join(out) + "\n"  # fmt: skip
