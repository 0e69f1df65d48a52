"""The verdict in a terminal (issue #27): the lines a sweep and `dflashbench report` end with render the report's
own verdict block, and go to $GITHUB_STEP_SUMMARY when it is set."""

from __future__ import annotations

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report import load_model
from dflashbench.report.console import (
    closing_lines,
    lossless_line,
    step_summary_markdown,
    verdict_lines,
    wrap,
)
from dflashbench.report.summary import NOTHING_TO_COMPARE

from .conftest import sample_points
from .factory import write_run


def test_verdict_lines_render_the_reports_verdict(sample_run):
    report = load_model([sample_run], with_figures=False)
    block = report.verdict
    lines = verdict_lines(block)
    assert lines[0] == f"Verdict, measured on {block.hardware}:"
    (dflash,) = block.methods
    single = f"{dflash.single_x:.2f}×"
    assert [c for c, _ in dflash.matched_x] == [2, 4, 8]  # one c=1 figure in the verdict: the single-stream one
    # the same numbers as the report's own line, in fewer words, each with its decision (or none)
    assert f"single-stream {single}" in block.lines[0] and f"single-stream {single} [3.00–3.00] faster" in lines[1]
    assert lines[1].startswith("  DFlash vs AR: ") and len(lines[1]) < len(block.lines[0])
    assert all(f"{x:.2f}× (no interval) at c={c}" in lines[1] for c, x in dflash.matched_x)
    rd = dflash.interactivity
    assert f"matched interactivity {rd.ratio_min:.2f}–{rd.ratio:.2f}× (read off the curves, no interval)" in lines[1]
    # then TTFT, the SLO reading, the answer, and the lossless check last
    s = block.settings[0]
    assert lines[2:-1] == ["  " + ln for ln in [*s.ttft, *s.slo, s.answer]]
    assert lines[-2].startswith("  Serve DFlash here at c=1 (")
    assert lines[-1] == "  " + lossless_line(block.checks) and lines[-1].startswith("  lossless: DFlash token counts")
    assert closing_lines(report)[-len(lines):] == lines  # the verdict comes last


def test_a_run_without_a_comparison_says_so(tmp_path):
    only_ar = write_run(tmp_path, [p for p in sample_points("ar") if p.method == "ar"], run_id="ar")
    lines = verdict_lines(load_model([only_ar], with_figures=False).verdict)
    assert lines[1:] == ["  " + NOTHING_TO_COMPARE, "  lossless: not checked (needs greedy AR and the method on the "
                                                      "same prompts)"]  # fmt: skip


def test_wrap_keeps_continuations_under_their_line():
    assert wrap(["  DFlash vs AR: single-stream 2.74× · matched concurrency 3.08–3.46×"], 40) == [
        "  DFlash vs AR: single-stream 2.74× ·", "    matched concurrency 3.08–3.46×"]  # fmt: skip
    assert wrap(["x" * 100], None) == ["x" * 100]  # a log has no width: lines stay whole


def test_report_command_ends_with_the_verdict_and_writes_the_step_summary(sample_run, tmp_path, monkeypatch):
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = CliRunner().invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    verdict = verdict_lines(load_model([sample_run], with_figures=False).verdict)
    assert result.output.rstrip("\n").splitlines()[-len(verdict):] == verdict
    written = summary.read_text()
    assert written.startswith("earlier step\n### dflashbench verdict — run-a\n")  # appended, never replaced
    assert written.endswith(step_summary_markdown(verdict, "dflashbench verdict — run-a"))
    assert "- DFlash vs AR: single-stream" in written


def test_a_step_summary_that_cannot_be_written_costs_a_note(sample_run, tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder: cannot be opened for appending
    result = CliRunner().invoke(app, ["report", str(sample_run), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0 and f"note: $GITHUB_STEP_SUMMARY {tmp_path} not written" in result.output
