"""One point of ``dflashbench sweep --endpoint URL``, run by the sweep's own code: what the load-generator
benchmarks measure (``bench loadgen --overhead``, ``bench peers``), so their figures are the ones a user's sweep
gets (issue #44: a benchmark that drove the client alone measured a third of what the sweep added).

The suite is the one a user would write for the pace-exact stand-in (:data:`SUITE`: the endpoint read as vLLM,
``ar``, the synthetic workload's prompts, one concurrency, ``rounds`` requests per stream, no warm-up); it is
resolved by the sweep's :func:`~dflashbench.run.sweep.prepare`, the run directory made by its books
(:func:`~dflashbench.run.run_books.create_store`, in a temporary folder), the load generator set up as the sweep
sets it up (:func:`~dflashbench.run.point.loadgen_config`), and the point run by
:func:`~dflashbench.run.point.measure_point`: the server's counters and latency histograms scraped before and
after, NVML telemetry sampled where there is a GPU, every result annotated and appended to ``requests.jsonl`` as
it arrives, the progress bar drawn (on a terminal-like console that writes to nowhere, so it costs what it costs a
user at a terminal), the summary rows written. Nothing of it is switched off for the benchmark.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dflashbench.types import PointSummary, RequestResult


def suite_table(concurrency: int, *, rounds: int, max_tokens: int, processes: int | str = "auto") -> dict:
    """The suite of one benchmark point, as a user would write it for the stand-in."""
    return {"name": "bench-sweep-point", "version": 1, "backend": "vllm", "methods": ["ar"], "model": "standin",
            "concurrency": [concurrency], "num_prompts": concurrency, "warmup_requests": 0, "max_tokens": max_tokens,
            "requests_per_stream": rounds, "timeout_s": 300, "client_processes": processes,
            "workloads": [{"name": "synthetic"}]}  # fmt: skip


@dataclass
class SweepPoint:
    """What the sweep's point left: its "all" row (``extra["client"]``: the client's own cost) and its requests
    as ``requests.jsonl`` holds them."""

    row: PointSummary
    results: list[RequestResult]


def run_sweep_point(base_url: str, concurrency: int, *, rounds: int, max_tokens: int, processes: int | str = "auto",
                    store_text: bool = True, console=None) -> SweepPoint:  # fmt: skip
    """One point against the server at ``base_url``, by the sweep's own code (module docstring); its progress bar
    drawn on ``console`` (a rich ``Console``; default: a terminal's, writing to nowhere)."""
    from rich.console import Console

    from dflashbench.backends.endpoint import EndpointBackend, check_endpoint, pick_model_name
    from dflashbench.plan.suites import parse_suite
    from dflashbench.run.point import ServerTarget, loadgen_config, measure_point
    from dflashbench.run.run_books import close_store, create_store, final_status, new_manifest
    from dflashbench.run.store import RunStore
    from dflashbench.run.sweep import SweepConfig, prepare

    suite = parse_suite(suite_table(concurrency, rounds=rounds, max_tokens=max_tokens, processes=processes),
                        source="dflashbench.bench.sweep_point")  # fmt: skip
    ctx = prepare(SweepConfig(suite=suite, endpoint=base_url, store_text=store_text, methods_given=True))
    served = check_endpoint(ctx.endpoint, ctx.api_key)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="dflashbench-bench-") as tmp, open(os.devnull, "w") as nowhere:
        store: RunStore = create_store(ctx, new_manifest(ctx, api_key_env=None, store_text=store_text),
                                       out_dir=Path(tmp), run_id=None, echo=lines.append)  # fmt: skip
        rows: list[PointSummary] = []
        try:
            model, _ = pick_model_name(served, [ctx.pair.target], ctx.endpoint, named=False)
            lg = loadgen_config(ctx, ctx.endpoint, model, store_text)
            target = ServerTarget(EndpointBackend(ctx.backend_name), ctx.endpoint, lg)
            console = console or Console(file=nowhere, force_terminal=True, width=120)  # a terminal's, to nowhere
            rows.append(measure_point(ctx, store, ctx.grid[0], target, lines.append, True, progress_console=console))
        finally:
            close_store(store, rows, final_status(rows) if rows else "failed", None if rows else "the point raised")
        if rows[0].status == "failed":
            raise RuntimeError(f"the benchmark's sweep point failed: {rows[0].failure_reason}")
        results = [RequestResult.from_dict(json.loads(line))
                   for line in (store.run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]  # fmt: skip
    return SweepPoint(row=rows[0], results=results)
