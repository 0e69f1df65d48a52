"""``dflashbench history``: many runs as series, their changes found with their confidence (``gate/history.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dflashbench.cli.common import STR, one_of
from dflashbench.errors import UserError


def history(
    runs: Annotated[list[Path], typer.Argument(help="Run directories, or folders holding them (results/), any mix.")],
    recent: Annotated[
        int, typer.Option("--recent", min=1, metavar="K", help="Exit 1 when a regression's first run is among "
                          "the newest K runs of its series.")
    ] = 3,
    by: Annotated[
        str, typer.Option("--by", parser=one_of("--by", ("time", "commit")), metavar=STR,
                          help="Order the runs by their start time, or by their commit's place in --repo's history "
                          "(the GITHUB_SHA a sweep recorded, or its --label commit=SHA).")
    ] = "time",
    repo: Annotated[
        Path | None, typer.Option("--repo", help="The git checkout whose history orders the runs (--by commit).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the history here, in the format its suffix names: "
                                  ".html (the page: one small plot per series), .md or .txt (the summary). Refused "
                                  "over a link, a pipe, a device or a folder, as report -o is.")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", parser=one_of("--format", ("text", "md")), metavar=STR,
                          help="text or md (Markdown, e.g. for a CI summary or a pull request comment).")
    ] = "text",
    summary: Annotated[
        Path | None, typer.Option("--summary", help="Also append the Markdown summary to this file "
                                  "($GITHUB_STEP_SUMMARY).")
    ] = None,
    html_link: Annotated[
        str | None, typer.Option("--html-link", help="Link the Markdown summary to the HTML page at this path or URL "
                                 "(default: -o's path).")
    ] = None,
    no_index: Annotated[
        bool, typer.Option("--no-index", help="Read every run from its files; neither read nor write the folders' "
                           "index of run summaries.")
    ] = False,
    mark: Annotated[
        list[str] | None, typer.Option("--mark", metavar="RUN", help="Ring this run on the page's plots and in its "
                                       "tables: a run's folder or its run id, e.g. a pull request's run (repeatable; "
                                       "one not read is named in the notes).")
    ] = None,
    mark_label: Annotated[
        str, typer.Option("--mark-label", help="What a marked run is, in the plots' legend.")
    ] = "marked run",
    noise_profile_out: Annotated[
        Path | None, typer.Option("--noise-profile-out", help="Write the run-to-run term the series show as a noise "
                                  "profile (for compare --noise-profile): a CI's gate learns its runner's noise from "
                                  "its own accepted runs.")
    ] = None,
) -> None:
    """Many runs as one series per gated figure of compare (each speedup per pair and load; per-user rate,
    throughput, tau and TTFT p99 per method and load; one set per setting), with the points where a series'
    level changed, each with its size, interval, first run and p-value, and drifts as trends.

    Exit 0 no regression among the newest --recent runs; 1 a regression whose first run is among them; 2 unusable
    input; 3 cannot judge (a recent change the machine's speed explains, or a series too short or too noisy)."""
    from dflashbench.gate.history import history_of
    from dflashbench.gate.history_output import format_markdown, format_text, output_format, write_output

    if repo is not None and by != "commit":
        raise UserError("--repo orders runs by commit: add --by commit")
    out_format = output_format(out) if out is not None else None  # before the runs are read: a refused -o costs nothing
    result = history_of(list(runs), recent=recent, order=by, repo=repo, use_index=not no_index)
    result.mark_label = " ".join(mark_label.split())[:80] or "marked run"
    result.mark(mark or [])
    link = html_link or (str(out) if out_format == "html" else None)
    if out is not None:
        write_output(result, out, html_link=html_link, fmt=out_format)
    typer.echo(format_markdown(result, link) if fmt == "md" else format_text(result))
    if out is not None:
        typer.echo(f"history {'page' if out_format == 'html' else 'summary'} written to {out}")
    if summary is not None:
        try:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(format_markdown(result, link))
        except OSError as exc:
            raise UserError(f"cannot write --summary {summary}: {exc.strerror or exc}") from None
    if noise_profile_out is not None:
        from dflashbench.gate.calibrate import history_profiles
        from dflashbench.measure import noise_model

        found = history_profiles(result)
        if not found:
            raise UserError("--noise-profile-out: no series of a speedup or a speed figure with two successive runs "
                            "to read a run-to-run term from; give more runs")  # fmt: skip
        noise_model.write_profile(noise_profile_out, found, made_by="dflashbench history",
                                  runs=[r.path for r in result.runs])  # fmt: skip
        typer.echo(f"noise profile written to {noise_profile_out}")
    raise typer.Exit(result.exit_code)
