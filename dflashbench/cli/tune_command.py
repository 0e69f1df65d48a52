"""``tune``: the draft length that pays at each load, measured on a K x load grid, predicted for the rest, and written
as the engines' own schedules (docs/tune.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import ENGINE, LOAD, OUTPUT, RUN, STR, IntList, int_list, method_of
from dflashbench.types import Method

TUNABLE = (Method.DFLASH, Method.DFLASH2, Method.EAGLE3, Method.MTP, Method.NGRAM)


def tune(
    method: Annotated[
        Method,
        typer.Option(parser=method_of("tune", TUNABLE), metavar=STR, rich_help_panel=RUN,
                     help="The method whose draft length to tune: dflash, dflash2, eagle3, mtp or ngram."),
    ] = Method.DFLASH,
    suite: Annotated[
        str | None, typer.Option(metavar="NAME", rich_help_panel=RUN,
                                 help="Suite name or file (its model, workloads, prompts, limits). Default as sweep's."),
    ] = None,
    backend: Annotated[str | None, typer.Option(metavar="NAME", rich_help_panel=RUN,
                                                help="reference (default), vllm, sglang or trtllm.")] = None,
    model: Annotated[str | None, typer.Option(metavar="NAME", rich_help_panel=RUN, help="Target model.")] = None,
    draft: Annotated[str | None, typer.Option(metavar="ID", rich_help_panel=RUN, help="The method's draft.")] = None,
    k: Annotated[
        IntList | None,
        typer.Option("--k", parser=int_list("--k", "1,3,7,15", minimum=1), metavar="LIST", rich_help_panel=RUN,
                     help="Draft lengths to measure, e.g. 1,3,7,15. Default: a ladder up to the drafter's limit."),
    ] = None,
    concurrency: Annotated[
        IntList | None,
        typer.Option(parser=int_list("--concurrency", "1,4,16", minimum=1), metavar="LIST", rich_help_panel=LOAD,
                     help="Loads to measure. Default: the suite's concurrency ladder."),
    ] = None,
    num_prompts: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=LOAD, help="Prompts per workload.")] = None,
    objective: Annotated[
        str, typer.Option(metavar="WHAT", rich_help_panel=RUN,
                          help="What the K per load maximises: per-user, throughput, or goodput (with --slo)."),
    ] = "per-user",
    slo: Annotated[str | None, typer.Option(metavar="TERMS", rich_help_panel=RUN,
                                            help="goodput's TPOT bound, e.g. tpot_p90=50ms.")] = None,
    check: Annotated[bool, typer.Option(rich_help_panel=RUN,
                                        help="Measure the tuned schedule beside the fixed K (threshold loads too).")] = True,
    check_repeats: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=RUN,
                                                      help="Repeat rounds of the check (default: the suite's).")] = None,
    profile: Annotated[
        Path | None, typer.Option(metavar="FILE", rich_help_panel=RUN,
                                  help="Acceptance from a speculation_profile.json measured elsewhere (specdec_bench's)."),
    ] = None,
    reuse: Annotated[
        Path | None, typer.Option("--from", metavar="FOLDER", rich_help_panel=RUN,
                                  help="An earlier tune folder: read its grid instead of measuring one."),
    ] = None,
    dry_run: Annotated[bool, typer.Option(rich_help_panel=OUTPUT, help="Say what it would measure, and how long.")] = False,
    assume_user_tok_per_s: Annotated[
        str | None, typer.Option(metavar="R", rich_help_panel=OUTPUT,
                                 help="A dry run's duration at this per-user rate (or LO-HI)."),
    ] = None,
    output: Annotated[Path, typer.Option("-o", "--output", metavar="DIR", rich_help_panel=OUTPUT,
                                         help="Where the tune folder goes.")] = Path("results"),
    no_report: Annotated[bool, typer.Option(rich_help_panel=OUTPUT, help="Write no HTML report.")] = False,
    tp: Annotated[int | None, typer.Option(metavar="N", rich_help_panel=ENGINE, help="Tensor parallel size.")] = None,
) -> None:
    """The draft length that pays at each load: a K x load grid measured, acceptance and step cost fitted, the best K
    per load predicted and checked, the schedule written for vLLM, TensorRT-LLM and SGLang (docs/tune.md)."""
    from dflashbench.plan.plan_size import parse_rate
    from dflashbench.plan.suite_overrides import suite_from_flags
    from dflashbench.run.tune_run import TuneConfig, run_tune, summary_lines

    base = suite_from_flags(suite, dict(backend=backend, methods=[method], model=model, draft=draft,
                                        num_prompts=num_prompts, tp=tp))  # fmt: skip
    cfg = TuneConfig(base=base, method=method, ks=tuple(k) if k else None,
                     loads=tuple(concurrency) if concurrency else None, objective=objective, slo=slo, out_dir=output,
                     dry_run=dry_run, check=check, check_repeats=check_repeats, profile=profile, reuse=reuse,
                     assume_user_tok_per_s=parse_rate(assume_user_tok_per_s) if assume_user_tok_per_s else None)  # fmt: skip
    out = run_tune(cfg, echo=typer.echo)
    if dry_run:
        return
    for line in summary_lines(out):
        typer.echo(line)
    runs = [p for p in (out.grid_run, out.check_run) if p is not None]
    if not no_report and runs and out.folder is not None:
        from dflashbench.report import write_report

        typer.echo(f"report: {write_report(runs, out=out.folder / 'report.html')}")
