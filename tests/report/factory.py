"""Hand-made runs for the analysis, report and compare tests, written through the real RunStore."""

from __future__ import annotations

from pathlib import Path

from dflashbench.run.store import RunStore
from dflashbench.types import PointSummary, RequestResult

_NULLABLE = (
    "duration_s", "throughput_tok_per_s", "throughput_tok_per_s_per_gpu", "per_user_tok_per_s_mean",
    "per_user_tok_per_s_p50", "per_user_tok_per_s_p10", "ttft_s_p50", "ttft_s_p99", "tpot_s_p50",
    "tpot_s_p99", "itl_s_p50", "itl_s_p99", "e2e_s_p50", "e2e_s_p99", "tau", "acceptance_rate",
    "energy_j_per_tok",
)  # fmt: skip


def point(
    method: str,
    concurrency: int,
    per_user: float | None = None,
    throughput: float | None = None,
    *,
    backend: str = "reference",
    model: str = "tiny",
    workload: str = "synthetic",
    category: str = "all",
    run_id: str = "run",
    **fields,
) -> PointSummary:
    """A PointSummary with only what a test names; everything else null (not measured).

    ``per_user`` is per_user_tok_per_s_mean and per_user_tok_per_s_pooled (what the verdict reads),
    ``throughput`` is throughput_tok_per_s_per_gpu (one GPU, so also throughput_tok_per_s). Every request's
    per-token timing counts as observed, as the sweep writes a point today (``timing_requests=None`` makes a row
    from before observable timing was recorded)."""
    values = dict.fromkeys(_NULLABLE)
    values.update(per_user_tok_per_s_mean=per_user, per_user_tok_per_s_pooled=per_user,
                  throughput_tok_per_s_per_gpu=throughput, throughput_tok_per_s=throughput,
                  timing_requests=8, timing_observed_requests=8, timing_observed_share=1.0,
                  timing_observed_tokens_share=1.0)  # fmt: skip
    values.update(fields)
    values.setdefault("output_tokens", 1000)
    values.setdefault("point_id", f"{backend}-{method}-{workload}-c{concurrency}")
    return PointSummary(
        run_id=run_id, backend=backend, method=method, model=model, draft=None, workload=workload,
        category=category, concurrency=concurrency, num_gpus=1, num_requests=8, num_errors=0, **values,
    )  # fmt: skip


def rate_point(method: str, rate: float, per_user: float | None = None, throughput: float | None = None, *,
               goodput_req_per_s: float | None = None, cap: int | None = None, slo: dict | None = None,
               client: dict | None = None, **kw) -> PointSummary:  # fmt: skip
    """An open-loop point (sweep --request-rate) as the sweep writes it: ``concurrency`` the cap or 0, the load
    in ``extra["load"]``, goodput in ``extra["goodput"]`` when given."""
    extra: dict = {"load": {"request_rate": rate, "arrivals": "poisson", "burstiness": 1.0, "max_concurrency": cap,
                            "arrived": 8, "achieved_rate_per_s": rate * 0.98}}  # fmt: skip
    if goodput_req_per_s is not None:
        extra["goodput"] = {"slo": slo or {"ttft_s": 2.0}, "good": 8, "requests": 8, "good_share": 1.0,
                            "goodput_req_per_s": goodput_req_per_s}  # fmt: skip
    if client is not None:
        extra["client"] = client
    kw.setdefault("point_id", f"{kw.get('backend', 'reference')}-{method}-{kw.get('workload', 'synthetic')}-r{rate:g}")
    return point(method, cap or 0, per_user, throughput, extra=extra, **kw)


def request(method: str, concurrency: int, i: int, *, ttft_s: float = 0.05, tpot_s: float = 0.01,
            tokens: int = 20, category: str = "math", ok: bool = True, error: str | None = None,
            run_id: str = "run") -> RequestResult:  # fmt: skip
    """A finished request with evenly spaced single-token chunks."""
    sent = 1_000_000_000 + i * 10_000_000
    first = sent + int(ttft_s * 1e9)
    chunks = tuple(first + int(k * tpot_s * 1e9) for k in range(tokens)) if ok else ()
    return RequestResult(
        run_id=run_id, point_id=f"reference-{method}-synthetic-c{concurrency}", request_id=f"r{i}",
        category=category, concurrency=concurrency, ok=ok, error=error, queued_ns=sent, sent_ns=sent,
        first_token_ns=first if ok else None, last_token_ns=chunks[-1] if ok else None,
        output_tokens=tokens if ok else 0, output_tokens_source="server", chunk_ns=chunks,
        chunk_tokens=(1,) * len(chunks),
    )  # fmt: skip


def write_run(root: Path, points, requests=(), *, manifest: dict | None = None, telemetry=(),
              run_id: str = "run") -> Path:  # fmt: skip
    """A run directory under ``root`` holding exactly these rows."""
    with RunStore.create(root, manifest or {"config": {"backend": "reference"}}, run_id=run_id) as store:
        for p in points:
            store.append_point(p)
        for r in requests:
            store.append_request(r)
        for sample in telemetry:
            store.append_telemetry(sample)
        return store.run_dir
