"""Issue #53 item 4: an SLO percentile is read as asked or not at all, and ``sweep --slo`` (suite key ``slo``) records
it in the manifest, where ``report`` reads it, and sizes each point to support the percentile it names."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.plan.suite_overrides import apply_overrides
from dflashbench.plan.suites import load_suite

from .factory import point, request, write_run

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "results" / "examples" / "demo-20261123-120110-e69c"


def test_the_committed_demo_at_the_percentiles_asked_reads_no_point(tmp_path):
    """--slo tpot_p90=6ms,ttft_p99=30ms on the committed demo was read at p68 and said "DFlash 2.17× AR's best
    throughput within the SLO" although no point of any method was shown to pass at p90/p99: 32 requests support
    neither, so no point is read, and each says what it would need."""
    out = tmp_path / "slo.md"
    result = CliRunner().invoke(app, ["report", str(DEMO), "-o", str(out), "--slo", "tpot_p90=6ms,ttft_p99=30ms"])
    assert result.exit_code == 0, result.output
    md = out.read_text()
    table = md.split("### Best throughput within the SLO: TPOT p90 ≤ 6 ms, TTFT p99 ≤ 30 ms")[1].split("\n### ")[0]
    assert "No point was read at the percentiles asked: TPOT p90 needs at least 100 requests; this point has 32" in table
    assert "| method |" not in table  # no row of dashes standing for a reading
    line = md.split("\n### Within a latency SLO\n")[1].split("\n### ")[0]
    assert "no point of any method read: TPOT p90 needs at least 100 requests; a point has 32; TTFT p99 needs at least 1,000 requests" in line
    assert "p68" not in md and "AR's best throughput" not in line


def test_sweep_slo_sizes_the_points_and_is_recorded(tmp_path):
    suite = apply_overrides(load_suite("demo"), slo="tpot_p90=6ms")
    assert suite.slo_requests == 100 and suite.requests_per_stream_at(4) == 25 and suite.requests_per_stream_at(1) == 100
    assert apply_overrides(load_suite("demo")).requests_per_stream_at(4) == load_suite("demo").requests_per_stream_sent
    result = CliRunner().invoke(app, ["sweep", "--slo", "tpot_p90=6ms", "--dry-run", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "slo tpot_p90=6ms: at least 100 requests per closed-loop point" in text
    rows = [ln.split() for ln in result.output.splitlines() if ln.strip().startswith("synthetic ")]
    assert rows[0] == ["synthetic", "32", "96", "100"]  # 32 prompts, cycled to the 100 its p90 needs, every c
    assert [r[1:] for r in rows[1:]] == [[m, "100", "100", "100"] for m in ("ar", "dflash", "eagle3")]  # the plan
    bad = CliRunner().invoke(app, ["sweep", "--slo", "tpot=6", "--dry-run", "-o", str(tmp_path)])
    assert bad.exit_code == 2 and "bad --slo term 'tpot=6'" in bad.output


def test_report_reads_the_slo_the_sweep_recorded(tmp_path):
    tpot = {"ar": 0.010, "dflash": 0.010 / 3}
    points = [point(m, c, 1 / (tpot[m] * c), c / tpot[m], run_id="s") for m in tpot for c in (1, 2)]
    requests = [request(m, c, i, tpot_s=tpot[m] * c, run_id="s") for m in tpot for c in (1, 2) for i in range(40)]
    run = write_run(tmp_path, points, requests, run_id="s", manifest={"suite_config": {"slo": "tpot_p75=25ms"}})
    out = tmp_path / "r.md"
    assert CliRunner().invoke(app, ["report", str(run), "-o", str(out)]).exit_code == 0
    assert "Best throughput within the SLO: TPOT p75 ≤ 25 ms" in out.read_text()  # no --slo given: the sweep's
    other = tmp_path / "o.md"
    assert CliRunner().invoke(app, ["report", str(run), "-o", str(other), "--slo", "tpot_p50=25ms"]).exit_code == 0
    assert "Best throughput within the SLO: TPOT p50 ≤ 25 ms" in other.read_text()  # report --slo wins
