"""The verdict in a terminal (issues #27, #53): a sweep and `dflashbench report` end with the report's own verdict
lines, answer first, and append them to $GITHUB_STEP_SUMMARY when it is set."""

from __future__ import annotations

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report import load_model
from dflashbench.report.console import (
    NOTHING_TO_COMPARE,
    closing_lines,
    step_summary_markdown,
    verdict_lines,
    wrap,
)

from .conftest import sample_points
from .factory import write_run


def test_verdict_lines_are_the_reports_own_answer_first(sample_run):
    report = load_model([sample_run], with_figures=False)
    lines = verdict_lines(report)
    assert lines[0] == report.verdict.lines[0] and lines[0].startswith("Serve DFlash at c=1")
    assert lines[1:] == ["  " + ln for ln in report.verdict.lines[1:]]  # the rest indented under the answer
    assert closing_lines(report) == lines  # nothing before it: warnings and notes are in the report


def test_a_run_without_a_comparison_says_so(tmp_path):
    only_ar = write_run(tmp_path, [p for p in sample_points("ar") if p.method == "ar"], run_id="ar")
    assert verdict_lines(load_model([only_ar], with_figures=False))[0] == NOTHING_TO_COMPARE


def test_wrap_keeps_continuations_under_their_line():
    assert wrap(["  DFlash vs AR: single-stream 2.74× · matched concurrency 3.08–3.46×"], 40) == [
        "  DFlash vs AR: single-stream 2.74× ·", "    matched concurrency 3.08–3.46×"]  # fmt: skip
    assert wrap(["x" * 100], None) == ["x" * 100]  # a log has no width: lines stay whole


def test_report_command_ends_with_the_verdict_and_writes_the_step_summary(sample_run, tmp_path, monkeypatch):
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    verdict = verdict_lines(load_model([sample_run], with_figures=False))
    assert result.output.rstrip("\n").splitlines()[-len(verdict):] == verdict
    written = summary.read_text()
    assert written.startswith("earlier step\n### dflashbench verdict — run-a\n")  # appended, never replaced
    assert written.endswith(step_summary_markdown(verdict, "dflashbench verdict — run-a"))
    assert f"**{verdict[0]}**" in written


def test_a_step_summary_that_cannot_be_written_costs_a_note(sample_run, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder: cannot be opened for appending
    result = CliRunner().invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0 and f"note: $GITHUB_STEP_SUMMARY {tmp_path} not written" in result.output
