"""``sweep``: the main job, concurrency x method on a backend, every result recorded as it is measured."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import (
    ENGINE,
    LIMITS,
    LOAD,
    OUTPUT,
    RUN,
    IntList,
    MethodList,
    int_list,
    methods_of,
    one_of,
)
from dflashbench.errors import UserError

NOT_STARTED = "server did not start"  # the failure reason of a point whose server never answered (run/sweep.py)


def sweep(
    # What to run
    suite: Annotated[
        str | None,
        typer.Option(metavar="NAME", rich_help_panel=RUN,
                     help="Suite name or file. Default: demo (reference), default (engines)."),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(metavar="NAME", rich_help_panel=RUN,
                     help="reference, vllm, sglang or trtllm (with --endpoint: its counters' kind)."),
    ] = None,
    method: Annotated[
        MethodList | None,
        typer.Option(parser=methods_of("--method", arms=True), metavar="LIST", rich_help_panel=RUN,
                     help="Methods, e.g. ar,eagle3,dflash."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(metavar="NAME", rich_help_panel=RUN,
                     help="Target: a registry name (models list), HF id or folder."),
    ] = None,
    schedule: Annotated[
        Path | None,
        typer.Option(metavar="FILE", rich_help_panel=RUN,
                     help="Run METHOD-tuned on this schedule file."),
    ] = None,
    unlisted_model: Annotated[
        bool,
        typer.Option("--unlisted-model", rich_help_panel=RUN,
                     help="--endpoint: send --model's name though /v1/models does not list it."),
    ] = False,
    draft: Annotated[
        str | None,
        typer.Option(metavar="ID", rich_help_panel=RUN,
                     help="Draft, or per method: dflash=ID,eagle3=ID."),
    ] = None,
    num_draft_tokens: Annotated[
        str | None,
        typer.Option(metavar="METHOD=K", rich_help_panel=RUN,
                     help="Draft tokens a step, e.g. mtp=3."),
    ] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(metavar="URL", rich_help_panel=RUN,
                     help="A running server to measure; repeat for replicas."),
    ] = None,
    data: Annotated[
        str | None, typer.Option(metavar="PATH", rich_help_panel=RUN, help="Local copy of the dataset, as published.")
    ] = None,
    num_prompts: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=RUN, help="Prompts per workload.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(metavar="N", rich_help_panel=RUN, help="Seed for prompt sampling and arrivals.")
    ] = None,
    # Load shape
    concurrency: Annotated[
        IntList | None,
        typer.Option(parser=int_list("--concurrency", "1,2,4"), metavar="LIST", rich_help_panel=LOAD,
                     help="Concurrency levels, e.g. 1,2,4."),
    ] = None,
    requests_per_stream: Annotated[
        int | None,
        typer.Option(min=1, metavar="N", rich_help_panel=LOAD, help="Requests per stream, at least (default 4)."),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option(min=1, max=100, metavar="N", rich_help_panel=LOAD,
                     help="Measure every point N times, in rounds."),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(metavar="LIST", rich_help_panel=LOAD, help="Open-loop arrival rates, requests/s: 1,2,4."),
    ] = None,
    arrivals: Annotated[
        str | None, typer.Option(metavar="KIND", rich_help_panel=LOAD, help="poisson (default) or constant.")
    ] = None,
    burstiness: Annotated[
        float | None, typer.Option(metavar="X", rich_help_panel=LOAD, help="Poisson gamma shape (1 = Poisson).")
    ] = None,
    max_concurrency: Annotated[
        int | None,
        typer.Option(min=1, metavar="N", rich_help_panel=LOAD,
                     help="Open loop: cap on requests in flight (default: half the open-file limit)."),
    ] = None,
    goodput: Annotated[
        str | None, typer.Option(metavar="SLO", rich_help_panel=LOAD, help="Goodput SLO (s): ttft_s=2")
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(metavar="SLO", rich_help_panel=LOAD,
                     help="Percentile SLO: tpot_p90=20ms"),
    ] = None,
    client_processes: Annotated[
        str | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Client processes: a number, or auto.")
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(metavar="DUR", rich_help_panel=LOAD,
                     help="Fit the sweep in this time: 2h, 90m (the tightest precision that fits)."),
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(metavar="PCT", rich_help_panel=LOAD,
                     help="Stop each closed-loop point once its figures' 95% intervals are within this half-width: "
                          "5% or 0.05 (suite key precision). Prompts go in a seeded order stratified by category; "
                          "the workload's prompts (or --num-prompts) stay the ceiling. docs/metrics.md."),
    ] = None,
    trace: Annotated[
        str | None,
        typer.Option(metavar="TRACE", rich_help_panel=LOAD,
                     help="Replay a trace's arrivals and lengths with real prompts: azure-code, azure-conv, "
                          "mooncake-conv, or an Azure CSV / Mooncake JSONL file. Replaces the suite's "
                          "concurrency and rate points unless those flags are given too. docs/traces.md."),
    ] = None,
    trace_window: Annotated[
        str | None, typer.Option(metavar="DUR", rich_help_panel=LOAD, help="Trace: its first stretch, e.g. 10m, 90s.")
    ] = None,
    trace_speed: Annotated[
        str | None,
        typer.Option(metavar="LIST", rich_help_panel=LOAD, help="Trace: time runs this much faster, e.g. 1,2."),
    ] = None,
    trace_scale: Annotated[
        str | None,
        typer.Option(metavar="X", rich_help_panel=LOAD,
                     help="Trace: input lengths times X (small models), or input=X,output=Y."),
    ] = None,
    trace_content: Annotated[
        str | None,
        typer.Option(metavar="LIST", rich_help_panel=LOAD,
                     help="Trace: workloads (real prompts, default), random (random tokens), or both."),
    ] = None,
    # Engine and parallelism
    tp: Annotated[
        int | None,
        typer.Option(metavar="N", rich_help_panel=ENGINE, help="Tensor parallel (default: the memory plan)."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(metavar="[N]xGPU", rich_help_panel=ENGINE,
                     help="GPUs: 8xh100, h100 (one), 2x8xb200 (2 nodes)."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(parser=one_of("--cluster", ("local", "slurm", "k8s")), metavar="KIND", rich_help_panel=ENGINE,
                     help="local, slurm or k8s (docs/cluster.md)."),
    ] = None,
    dp: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=ENGINE, help="Data parallel size.")] = None,
    ep: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=ENGINE, help="Expert parallel size.")] = None,
    engine_cpus: Annotated[
        str | None,
        typer.Option(metavar="CPUS", rich_help_panel=ENGINE,
                     help="Engine CPUs: auto, none, 0-2 or ar=0,dflash=1; client keeps the rest."),
    ] = None,
    interleave: Annotated[
        str | None,
        typer.Option(parser=one_of("--interleave", ("auto", "side", "turns", "point", "on", "off")), metavar="HOW",
                     rich_help_panel=ENGINE,
                     help="A load's methods: side, turns, point, off (auto picks)."),
    ] = None,
    # Output
    output: Annotated[
        Path, typer.Option("-o", "--output", metavar="DIR", rich_help_panel=OUTPUT, help="Folder for run directories.")
    ] = Path("results"),
    no_report: Annotated[
        bool, typer.Option("--no-report", rich_help_panel=OUTPUT, help="Write no HTML report.")
    ] = False,
    no_store_text: Annotated[
        bool, typer.Option("--no-store-text", rich_help_panel=OUTPUT, help="Keep no output text (privacy).")
    ] = False,
    label: Annotated[
        list[str] | None,
        typer.Option("--label", metavar="KEY=VALUE", rich_help_panel=OUTPUT,
                     help="A label kept in the manifest."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", rich_help_panel=OUTPUT, help="Print the plan and its size; launch nothing.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", rich_help_panel=OUTPUT, help="Dry run: each point and request.")
    ] = False,
    show_commands: Annotated[
        bool, typer.Option("--show-commands", rich_help_panel=OUTPUT,
                           help="Dry run: full commands."),
    ] = False,
    assume_user_tok_per_s: Annotated[
        str | None,
        typer.Option(metavar="RATE", rich_help_panel=OUTPUT, help="tok/s per user to plan at (default: estimated)."),
    ] = None,
    # Limits and reliability
    resume: Annotated[
        Path | None, typer.Option(metavar="RUN", rich_help_panel=LIMITS, help="Finish a broken run's points.")
    ] = None,
    request_timeout: Annotated[
        float | None, typer.Option(metavar="S", rich_help_panel=LIMITS, help="Seconds per request (default 600).")
    ] = None,
    ready_timeout: Annotated[
        float | None,
        typer.Option(metavar="S", rich_help_panel=LIMITS, help="Seconds for a server to load (default 1800)."),
    ] = None,
    max_error_rate: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, metavar="X", rich_help_panel=LIMITS,
                     help="Failed share that marks a point degraded (0.1)."),
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(metavar="VAR", rich_help_panel=LIMITS, help="Environment variable with the API key.")
    ] = None,
) -> None:
    """Sweep concurrency x method on a backend and record everything (no arguments: the embedded demo).

    Exit 0: all ok; 1: a point failed or is degraded (--resume redoes it); 2: bad input; 130/143: interrupted.

    Every option in detail: docs/sweep.md.
    """
    from dflashbench.cli.sweep_report import report_and_verdict
    from dflashbench.plan.plan_size import parse_rate
    from dflashbench.run.sweep import SweepConfig, run_sweep
    from dflashbench.run.sweep_console import redacting

    overrides = dict(backend=backend, methods=method, model=model, draft=draft, num_draft_tokens=num_draft_tokens,
                     concurrency=concurrency,
                     num_prompts=num_prompts, data=data, tp=tp, dp=dp, ep=ep, seed=seed,
                     requests_per_stream=requests_per_stream, repeats=repeats, max_error_rate=max_error_rate,
                     timeout_s=request_timeout, ready_timeout_s=ready_timeout, client_processes=client_processes, precision=precision, budget=budget,
                     engine_cpus=engine_cpus, interleave=interleave, request_rate=request_rate, arrivals=arrivals, burstiness=burstiness, max_concurrency=max_concurrency,
                     goodput=goodput, slo=slo, trace=trace, trace_window=trace_window, trace_speed=trace_speed,
                     trace_scale=trace_scale, trace_content=trace_content, cluster=cluster)  # fmt: skip
    endpoints = list(endpoint or [])
    shown = dict(verbose=verbose, show_commands=show_commands, assume_user_tok_per_s=None
                 if assume_user_tok_per_s is None else parse_rate(assume_user_tok_per_s))  # what a dry run shows  # fmt: skip
    labels = parse_labels(label or ())
    if resume is not None and labels:
        raise UserError("--label names a new run; a resumed run keeps the labels its manifest holds: drop --label")
    if resume is not None:
        from dflashbench.plan.suite_overrides import RESUMABLE, flag_for

        fixed = [flag_for(k) for k, v in overrides.items()
                 if v is not None and k not in RESUMABLE] + (["--suite"] if suite is not None else []) \
            + (["--gpu"] if gpu is not None else []) + (["--unlisted-model"] if unlisted_model else []) \
            + (["--schedule"] if schedule is not None else [])  # fmt: skip
        if fixed:
            raise UserError(f"--resume continues a run with what defines its measurement; drop {', '.join(fixed)}. "
                            f"It may change only the operational limits {', '.join(map(flag_for, RESUMABLE))} (and give "
                            "--endpoint again for credentials the manifest does not keep)")  # fmt: skip
        config = SweepConfig(suite=None, out_dir=output, resume=resume, dry_run=dry_run, api_key_env=api_key_env,
                             store_text=not no_store_text, endpoints=tuple(endpoints),
                             resume_changes={k: overrides[k] for k in RESUMABLE if overrides[k] is not None},
                             **shown)  # fmt: skip
    else:
        from dflashbench.plan.draft_lengths import parse_flag
        from dflashbench.plan.suite_overrides import suite_from_flags

        # an --endpoint must serve the model a user named; one not named is whatever the server serves
        model_given = model is not None or suite is not None
        resolved = suite_from_flags(suite, overrides, served=bool(endpoints))
        if schedule is not None:  # a tuned schedule beside the method's fixed K (dflashbench tune)
            from dflashbench.plan.tune_grid import with_schedule

            resolved = with_schedule(resolved, schedule)
        config = SweepConfig(suite=resolved, out_dir=output, endpoint=endpoints[0] if endpoints else None,
                             endpoints=tuple(endpoints), dry_run=dry_run, api_key_env=api_key_env,
                             methods_given=method is not None, store_text=not no_store_text,
                             gpu=gpu, model_given=model_given, unlisted_model=unlisted_model, labels=labels,
                             flagged_draft_lengths=frozenset(parse_flag(num_draft_tokens)) if num_draft_tokens else
                             frozenset(),
                             **shown)  # fmt: skip
    outcome = run_sweep(config, echo=typer.echo)
    if not config.dry_run and outcome.run_dir is not None:
        # the report and its verdict come from the run's files, redacted as they were written: a key that is a word
        # (a workload's name, say) is not taken out of them again (dflashbench.redact, words=False)
        report_and_verdict(outcome.run_dir, not no_report, redacting(typer.echo, words=False))
    failed = [p for p in outcome.failed if p.status == "failed"]
    unstarted = [p for p in failed if (p.failure_reason or "").startswith(NOT_STARTED)]
    if failed and len(unstarted) == len(failed):  # --resume starts the same server again: not always a fix
        typer.echo(f"{len(failed)} point(s) failed: their server did not start (why: above, and its log in "
                   f"{outcome.run_dir}). --resume starts it again with the same model, engine and arguments: once "
                   f"the cause is outside the run (an install, free memory, a longer --ready-timeout), fix it and "
                   f"run dflashbench sweep --resume {outcome.run_dir}; a wrong model or argument needs a new run",
                   err=True)  # fmt: skip
    elif failed:
        typer.echo(f"{len(failed)} point(s) failed; finish them with: dflashbench sweep --resume {outcome.run_dir}",
                   err=True)  # fmt: skip
    if outcome.degraded:
        typer.echo(f"{len(outcome.degraded)} point(s) degraded (more failed requests than max_error_rate allows; "
                   f"their figures are kept, marked degraded): "
                   f"{', '.join(p.point_id for p in outcome.degraded)}; run them again with: dflashbench sweep "
                   f"--resume {outcome.run_dir}", err=True)  # fmt: skip
    if outcome.failed:
        raise typer.Exit(1)


_LABEL = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$")


def parse_labels(texts) -> tuple[tuple[str, str], ...]:
    """``--label KEY=VALUE`` options as (key, value) pairs, in order; a key given twice keeps its last value."""
    found: dict[str, str] = {}
    for text in texts:
        m = _LABEL.match(text.strip())
        if m is None:
            raise UserError(f"bad --label {text!r}: expected KEY=VALUE, the key of letters, digits, '_', '.' or '-' "
                            "(e.g. --label commit=3f2a9c1)")  # fmt: skip
        found[m.group(1)] = m.group(2).strip()
    return tuple(found.items())
