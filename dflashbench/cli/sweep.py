"""``sweep``: the main job, concurrency x method on a backend, every result recorded as it is measured."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import STR, IntList, MethodList, int_list, methods_of
from dflashbench.errors import UserError

FLAGS = {"methods": "--method", "timeout_s": "--request-timeout", "ready_timeout_s": "--ready-timeout"}  # suite key: flag


def sweep(
    suite: Annotated[
        str | None,
        typer.Option(help="Suite name (suites/*.toml) or path. Default: demo on the reference backend, default "
                     "(real workloads, c=1..128) on vllm, sglang and trtllm."),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="reference, vllm, sglang, trtllm (with --endpoint: how to read its counters).")
    ] = None,
    method: Annotated[
        MethodList | None,
        typer.Option(parser=methods_of("--method"), metavar=STR, help="Methods, comma-separated: ar,eagle3,dflash."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Target model: a registry name (dflashbench models list, e.g. gpt-oss-120b), an HF id "
                     "or a local directory. Its published drafts come with it from the registry."),
    ] = None,
    draft: Annotated[
        str | None,
        typer.Option(help="Draft model (DFlash drafter / EAGLE-3 head), or dflash=P,eagle3=P. Default: the "
                     "registry's for --model."),
    ] = None,
    concurrency: Annotated[
        IntList | None,
        typer.Option(parser=int_list("--concurrency", "1,2,4"), metavar=STR,
                     help="Concurrency levels, comma-separated: 1,2,4."),
    ] = None,
    num_prompts: Annotated[int | None, typer.Option(help="Prompts per workload.")] = None,
    requests_per_stream: Annotated[
        int | None,
        typer.Option(min=1, help="A point sends at least concurrency x this many requests, reusing prompts when "
                     "the workload has fewer (suite default 4)."),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option(min=1, max=100, help="Measure every point N times (suite key repeats, default 1), in rounds: "
                     "round r runs every method before round r+1, so drift hits all alike. Launched servers are "
                     "relaunched each round (a server per method per round, which also captures launch-to-launch "
                     "variance); an --endpoint server is not. Each point then carries its mean, sd and 95% t-interval; "
                     "speedups a paired interval over the rounds."),
    ] = None,
    data: Annotated[str | None, typer.Option(help="Local dataset file or folder, in the dataset's own format.")] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(help="Benchmark an already-running OpenAI-compatible server at this URL. Give it more than "
                     "once for data-parallel replicas behind no router: requests go round-robin, results are "
                     "tagged with their endpoint, acceptance counters are summed."),
    ] = None,
    client_processes: Annotated[
        str | None,
        typer.Option(help="Client processes a point's streams are split over: a number, or auto (one per 128 "
                     "streams, at most one per CPU; measured with bench loadgen --overhead). Default: the suite's "
                     "client_processes, else auto."),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Open-loop points beside the concurrency points: arrival rates in requests per second, "
                     "comma-separated, e.g. 1,2,4 (point ids end in :r1.0)."),
    ] = None,
    arrivals: Annotated[
        str | None, typer.Option(help="Open-loop arrivals: poisson (default) or constant, seeded with --seed.")
    ] = None,
    burstiness: Annotated[
        float | None,
        typer.Option(help="Poisson arrivals: gamma shape as in vllm bench serve (1 = Poisson, < 1 burstier, > 1 "
                     "smoother; the mean rate is kept)."),
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(min=1, help="Open loop: at most this many requests in flight (later arrivals wait).")
    ] = None,
    goodput: Annotated[
        str | None,
        typer.Option(help="SLO for goodput, seconds: e.g. ttft_s=2,tpot_s=0.05 (also e2e_s). Goodput = requests "
                     "meeting every target per second, per point."),
    ] = None,
    tp: Annotated[
        int | None,
        typer.Option(help="Tensor parallel size passed to the engine. Default: from the registry's weight size "
                     "and the GPUs NVML sees."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="With --dry-run: plan for these GPUs instead of the ones here, e.g. h100, h200, b200, "
                     "gb200, b300, or 8xb200 (picks the recipe's architecture flags and tp)."),
    ] = None,
    dp: Annotated[int | None, typer.Option(help="Data parallel size passed to the engine.")] = None,
    ep: Annotated[int | None, typer.Option(help="Expert parallel size passed to the engine.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for prompt sampling.")] = None,
    resume: Annotated[
        Path | None, typer.Option(help="Continue a broken run: runs only its unfinished points.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the server command(s) and request plan; launch nothing.")
    ] = False,
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder for run directories.")] = Path("results"),
    api_key_env: Annotated[
        str | None,
        typer.Option(help="Environment variable holding the API key (default DFLASHBENCH_API_KEY, OPENAI_API_KEY)."),
    ] = None,
    report: Annotated[bool, typer.Option(help="Write the HTML report at the end.")] = True,
    max_error_rate: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="A point with a larger share of failed requests is marked degraded "
                     "and the sweep exits 1. Default: the suite's max_error_rate, else 0.1."),
    ] = None,
    store_text: Annotated[
        bool,
        typer.Option(help="Keep each request's output text (first 32,768 characters, with its length and hash) "
                     "and token ids in requests.jsonl, for agreement with AR. --no-store-text keeps none (privacy): "
                     "accuracy is still graded, agreement is not measured."),
    ] = True,
    request_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds one request (one turn, whole stream) may take before it fails. Default: the "
                     "suite's timeout_s, else 600."),
    ] = None,
    ready_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds a launched server may take to load and answer its health check. Default: the "
                     "suite's ready_timeout_s, else 1800."),
    ] = None,
) -> None:
    """The main job: sweep concurrency x method on a backend and record everything (no arguments: the demo).

    Exit status: 0 every point ok; 1 the run finished but some point failed or is degraded (finish or redo them
    with --resume); 2 nothing to run or it could not go on (bad input, the run directory in use by another
    sweep, a run file that cannot be written, e.g. disk full: what was written is kept); 130 on Ctrl-C, 143 on
    SIGTERM.
    """
    from dflashbench.sweep import SweepConfig, run_sweep

    overrides = dict(backend=backend, methods=method, model=model, draft=draft, concurrency=concurrency,
                     num_prompts=num_prompts, data=data, tp=tp, dp=dp, ep=ep, seed=seed,
                     requests_per_stream=requests_per_stream, repeats=repeats, max_error_rate=max_error_rate,
                     timeout_s=request_timeout, ready_timeout_s=ready_timeout, client_processes=client_processes,
                     request_rate=request_rate, arrivals=arrivals, burstiness=burstiness, max_concurrency=max_concurrency,
                     goodput=goodput)  # fmt: skip
    endpoints = list(endpoint or [])
    if resume is not None:
        given = [FLAGS.get(k, f"--{k.replace('_', '-')}") for k, v in overrides.items() if v is not None]
        if gpu is not None:
            given.append("--gpu")
        if given or endpoint or suite is not None:
            raise UserError(f"--resume continues a run with its own configuration; drop {', '.join(given) or '--suite/--endpoint'}")
        config = SweepConfig(suite=None, out_dir=output, resume=resume, dry_run=dry_run, api_key_env=api_key_env,
                             report=report, store_text=store_text)  # fmt: skip
    else:
        from dflashbench.cli.catalog import check_suite
        from dflashbench.suite_overrides import apply_overrides
        from dflashbench.suites import load_suite

        if suite is None:  # the embedded demo on the reference backend; real workloads on an engine
            suite = "demo" if backend in (None, "reference", "endpoint") else "default"
        loaded = load_suite(suite)
        if suite not in ("demo", "default"):  # a suite the user named: its errors name its file and key
            check_suite(loaded, loaded.source_file, overridden=frozenset(k for k, v in overrides.items() if v is not None))
        resolved = apply_overrides(loaded, **overrides)
        config = SweepConfig(suite=resolved, out_dir=output, endpoint=endpoints[0] if endpoints else None,
                             endpoints=tuple(endpoints), dry_run=dry_run, api_key_env=api_key_env, report=report,
                             methods_given=method is not None, store_text=store_text, gpu=gpu)  # fmt: skip
    outcome = run_sweep(config, echo=typer.echo)
    failed = [p for p in outcome.failed if p.status == "failed"]
    if failed:
        typer.echo(f"{len(failed)} point(s) failed; finish them with: dflashbench sweep --resume {outcome.run_dir}",
                   err=True)  # fmt: skip
    if outcome.degraded:
        typer.echo(f"{len(outcome.degraded)} point(s) degraded (more failed requests than max_error_rate allows; "
                   f"their figures are kept, marked degraded): "
                   f"{', '.join(p.point_id for p in outcome.degraded)}; run them again with: dflashbench sweep "
                   f"--resume {outcome.run_dir}", err=True)  # fmt: skip
    if outcome.failed:
        raise typer.Exit(1)
