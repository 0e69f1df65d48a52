"""The committed example (a real run of the embedded default) still reads, reports and compares with today's code."""

from pathlib import Path

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.report import write_report

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = next((ROOT / "results" / "examples").glob("demo-*"))


def test_example_run_reports(tmp_path):
    text = write_report([EXAMPLE_RUN], tmp_path / "example.md", fmt="md").read_text()
    lines = text.splitlines()
    rows = [i for i, ln in enumerate(lines) if "| synthetic | all | DFlash |" in ln]
    assert rows, text[:2000]
    header = next(lines[i] for i in range(rows[0], -1, -1) if lines[i].startswith("| backend |"))
    cells = dict(zip(_cells(header), _cells(lines[rows[0]]), strict=True))  # the single-stream table's row
    assert float(cells["speedup"].rstrip("×")) > 1  # the shipped drafter beats AR in a single stream
    assert cells["agreement with AR"] == "100.0% (32/32)"  # the reference decoder is lossless
    assert (ROOT / "reports" / "example.html").is_file() and (ROOT / "reports" / "example.md").is_file()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_example_run_compared_with_itself_passes():
    result = CliRunner().invoke(app, ["compare", str(EXAMPLE_RUN), str(EXAMPLE_RUN), "--max-drop", "throughput=5%",
                                      "--max-drop", "tau=0.2", "--max-rise", "ttft_s_p99=10%"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "no regression over 36 common point(s)" in result.output
