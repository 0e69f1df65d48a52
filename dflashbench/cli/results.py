"""Reading finished runs: ``report`` (figures and tables as one HTML file) and ``compare`` (the regression
gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import STR, one_of
from dflashbench.errors import UserError

COMMENT = "Pull request comment"


def report(
    runs: Annotated[list[Path], typer.Argument(help="Run directories (results/<run-id>), e.g. one per engine.")],
    out: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Output file, .html or .md (the suffix picks the format). "
                     "Default: reports/<run-id>.html."),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="html: one self-contained file; md: a summary; json: every reading "
                                 "as data (docs/readings.md). Default: from -o.")
    ] = None,
    band: Annotated[
        str | None, typer.Option("--band", help="Interactivity band LO-HI in tok/s/user to shade and read at.")
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option("--slo", help="Latency SLO for the best-throughput-within-SLO table, e.g. "
                     "tpot_p90=20ms,ttft_p99=2s (metrics ttft, tpot, e2e). Default: ttft_p99=2s,tpot_p90=50ms."),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when a trust flag is raised (incomplete, resumed, dirty tree, ...).")
    ] = False,
    gpu_hour_cost: Annotated[
        float | None,
        typer.Option("--gpu-hour-cost", help="Price of one GPU-hour (any currency): adds the cost per million output "
                     "tokens beside the energy and GPU-seconds, where NVML measured."),
    ] = None,
    noise_profile: Annotated[
        Path | None, typer.Option("--noise-profile", help="The run-to-run term measured where the runs ran "
                                  "(dflashbench calibrate); default: the project's, measured on its own machine.")
    ] = None,
) -> None:
    """Figures, speedup tables and manifests of one or more runs, as one self-contained HTML file; the verdict
    is printed last (and appended to $GITHUB_STEP_SUMMARY when set)."""
    from dflashbench.cli.common import parse_band
    from dflashbench.report import check_output, format_for, load_model, write_report
    from dflashbench.report.console import print_closing

    if out is not None:
        check_output(out)  # before the runs are read and the figures drawn
    model = load_model(list(runs), with_figures=format_for(out, fmt) == "html", band=parse_band(band), slo=slo,
                       gpu_hour_cost=gpu_hour_cost, noise_profile=noise_profile)  # fmt: skip
    path = write_report(list(runs), out=out, fmt=fmt, report=model)
    typer.echo(f"report written to {path}")
    print_closing(model, typer.echo)
    if strict and model.trust:
        typer.echo(f"--strict: {len(model.trust)} trust flag(s) raised", err=True)
        raise typer.Exit(1)


def compare(
    base: Annotated[Path, typer.Argument(help="The baseline run directory.")],
    new: Annotated[Path, typer.Argument(help="The run to judge.")],
    max_drop: Annotated[
        list[str] | None,
        typer.Option("--max-drop", help="METRIC=AMOUNT, e.g. throughput=5% or tau=0.2 (repeatable); replaces "
                     "the default gate of that metric."),
    ] = None,
    max_rise: Annotated[
        list[str] | None, typer.Option("--max-rise", help="METRIC=AMOUNT, e.g. ttft_s_p99=10% (repeatable).")
    ] = None,
    no_default_gates: Annotated[
        bool, typer.Option("--no-default-gates", help="Gate only the metrics named by --max-drop/--max-rise "
                           "(defaults: throughput=5%, per_user_tok_per_s_pooled=5%, speedup=5%, tau=0.2 drop; "
                           "ttft_s_p99=20% rise).")
    ] = False,
    fmt: Annotated[
        str,
        typer.Option("--format", parser=one_of("--format", ("text", "md", "json")), metavar=STR,
                     help="text, md (Markdown, e.g. for a CI summary) or json (every row as data: docs/readings.md)."),
    ] = "text",
    summary: Annotated[
        Path | None, typer.Option("--summary", help="Also append the Markdown table to this file.")
    ] = None,
    all_categories: Annotated[
        bool, typer.Option("--all-categories", help="Gate every category's points, not only category 'all'.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 2 when the runs differ in hardware, suite, backend or versions.")
    ] = False,
    accept_weak: Annotated[
        bool, typer.Option("--accept-weak", help="Exit 0 on a weak pass: no failure, but a gated figure that could "
                           "not have seen a drop of twice its threshold (default: exit 3, no evidence; sweep both "
                           "runs with --repeats 3 for a sharper gate). The trust line stays.")
    ] = False,
    correct_for_probe: Annotated[
        bool, typer.Option("--correct-for-probe", help="Where the runs' speed probes say the machine changed speed, "
                           "divide NEW's speed figures by that change and judge them (default: a failure the change "
                           "explains is 'cannot judge', exit 3). Speedups are never corrected.")
    ] = False,
    report_link: Annotated[
        str | None, typer.Option("--report-link", help="Link the Markdown output to this HTML report (path or URL). "
                                 "Default: NEW's report where the sweep wrote one.")
    ] = None,
    noise_profile: Annotated[
        Path | None, typer.Option("--noise-profile", help="The run-to-run term measured where you run (dflashbench "
                                  "calibrate, or history --noise-profile-out); default: the project's, measured on "
                                  "its own machine.")
    ] = None,
    comment: Annotated[
        Path | None, typer.Option("--comment", rich_help_panel=COMMENT, help="Also write a pull request comment here: "
                                  "BASE first, one line per gated speedup, the rest folded; at most 65,536 characters "
                                  "at any suite size (docs/ci.md).")
    ] = None,
    comment_marker: Annotated[
        str, typer.Option("--comment-marker", rich_help_panel=COMMENT, help="The HTML comment that opens it, by which "
                          "a workflow finds its own comment to edit it in place.")
    ] = "<!-- dflashbench-comment -->",
    comment_base_why: Annotated[
        str, typer.Option("--comment-base-why", rich_help_panel=COMMENT, help="Why BASE is the baseline (one line).")
    ] = "",
    comment_built: Annotated[
        str, typer.Option("--comment-built", rich_help_panel=COMMENT, help="What NEW was built from (one line).")
    ] = "",
    comment_link: Annotated[
        str, typer.Option("--comment-link", rich_help_panel=COMMENT, help="Where the rest is: the job's artifacts.")
    ] = "",
    comment_extra: Annotated[
        list[Path] | None, typer.Option("--comment-extra", rich_help_panel=COMMENT, help="Markdown to fold into the "
                                        "comment after compare's own, e.g. history's summary (repeatable; a missing "
                                        "file is skipped).")
    ] = None,
) -> None:
    """Regression gate: align points and speedups, test each gated move against the runs' noise, print a table
    with the smallest move each gate could have seen.

    Default gates: throughput, pooled per-user rate and every speedup (DFlash vs AR, EAGLE-3 vs AR, DFlash vs
    EAGLE-3, per load, within one run) may drop 5%; tau 0.2; p99 TTFT may rise 20%.

    Exit 0 no regression; 1 regression (or a missing or failed point); 2 unusable input; 3 cannot judge: every
    failure is a speed figure that the machine's own change between the runs (their speed probes) explains, or a
    weak pass: nothing failed, but a gate could not have seen a drop of twice its threshold (--accept-weak: 0)."""
    from dflashbench.gate import compare as cmp
    from dflashbench.gate.compare_output import format_json, format_markdown, format_text

    thresholds = [cmp.parse_threshold(t, "drop") for t in max_drop or ()]
    thresholds += [cmp.parse_threshold(t, "rise") for t in max_rise or ()]
    result = cmp.compare_runs(base, new, cmp.effective_thresholds(thresholds, use_defaults=not no_default_gates),
                              all_categories=all_categories, strict=strict, accept_weak=accept_weak,
                              correct_for_probe=correct_for_probe, noise_profile=noise_profile)  # fmt: skip
    if report_link is None:
        from dflashbench.cli.sweep_report import report_path

        found = report_path(Path(new))
        report_link = str(found) if found.is_file() else None
    typer.echo(format_markdown(result, report_link) if fmt == "md" else format_json(result) if fmt == "json" else
               format_text(result))  # fmt: skip
    if comment is not None:
        from dflashbench.gate import comment as pr_comment

        extras = [(p.stem, p.read_text(encoding="utf-8")) for p in comment_extra or () if p.is_file()]
        pr_comment.write(comment, pr_comment.render(
            result, pr_comment.RunInfo.read(base), pr_comment.RunInfo.read(new), marker=comment_marker,
            base_why=comment_base_why, built=comment_built, link=comment_link, extras=extras))
    if summary is not None:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(format_markdown(result, report_link))
        except OSError as exc:
            raise UserError(f"cannot write --summary {summary}: {exc.strerror or exc}") from None
    raise typer.Exit(result.exit_code)
