"""`dflashbench bench loadgen --overhead`: a small table, end to end (the stand-in and the client processes
are real processes on loopback)."""

import json

import pytest
from typer.testing import CliRunner

from dflashbench.bench.overhead import OverheadCell, format_table, summarize
from dflashbench.cli import app

pytestmark = pytest.mark.timeout(300)


def cell(procs, conc, repeat, ttft):
    return OverheadCell(processes=procs, concurrency=conc, repeat=repeat, requests=8, errors=0, server_requests=8,
                        ttft_overhead_ms=ttft / 2,
                        client_ttft_ms_mean=ttft + 50, server_ttft_ms_mean=50.0, ttft_ms_p50=ttft,
                        ttft_ms_p99=ttft * 2, itl_ms_mean=10.1, itl_err_pct=1.0, itl_err_vs_server_pct=0.5, server_late_ms_mean=0.5, busy_share_max=0.1,
                        wall_s=1.0, loop_lag_ms_p99=1.0)  # fmt: skip


def test_summary_is_the_median_and_range_over_repeats():
    rows = summarize([cell(1, 4, 0, 3.0), cell(1, 4, 1, 9.0), cell(1, 4, 2, 4.0), cell(2, 4, 0, 2.0)])
    one = rows[0]
    assert (one["processes"], one["repeats"], one["ttft_ms_p50"], one["ttft_ms_p50_range"]) == (1, 3, 4.0, [3.0, 9.0])
    assert rows[1]["repeats"] == 1
    assert "4.0 [3.0-9.0]" in format_table(rows)


def test_overhead_table_from_the_command_line(tmp_path):
    out = tmp_path / "o.json"
    result = CliRunner().invoke(app, ["bench", "loadgen", "--overhead", "--concurrency", "4,8", "--processes", "1,2",
                                      "--pace-ms", "20", "--max-tokens", "3", "--rounds", "1", "--json", str(out)],
                                catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "client TTFT overhead" in result.output and "TTFT p50 ms" in result.output
    data = json.loads(out.read_text())
    assert [(r["concurrency"], r["processes"]) for r in data["table"]] == [(4, 1), (4, 2), (8, 1), (8, 2)]
    assert "TTFT overhead ms" in result.output
    for c in data["cells"]:
        assert c["errors"] == 0 and c["requests"] == c["concurrency"]
        assert c["server_requests"] == c["requests"]  # the stand-in's own count: no completion besides the client's
        # the stand-in's own TTFT is its 50 ms wait (read off its /metrics), and what it runs late on a busy machine;
        # the client's adds loopback and itself
        assert 49.9 <= c["server_ttft_ms_mean"] < 80.0
        assert c["client_ttft_ms_mean"] > c["server_ttft_ms_mean"]
        assert c["ttft_overhead_ms"] == pytest.approx(c["client_ttft_ms_mean"] - c["server_ttft_ms_mean"])
        assert 0 < c["ttft_overhead_ms"] < 500
        # the stand-in's own ITL (made-time gaps, from its /metrics) is near its 20 ms pace; the client's error
        # against it is what the client adds
        assert c["itl_err_vs_server_pct"] is not None and 0 <= c["itl_err_vs_server_pct"] < 50
    assert data["config"]["pace_ms"] == 20.0 and data["config"]["max_tokens"] == 3
    assert data["config"]["true_ttft_ms"] == 50.0


def test_auto_processes_resolve_per_streams_count():
    from dflashbench.bench.overhead import resolve_processes
    from dflashbench.load.loadgen_procs import AUTO_STREAMS_PER_PROCESS

    assert resolve_processes(["auto"], AUTO_STREAMS_PER_PROCESS) == [1]
    assert resolve_processes(["auto", 1], AUTO_STREAMS_PER_PROCESS) == [1]  # once each
    assert resolve_processes(["auto"], AUTO_STREAMS_PER_PROCESS * 2)[0] == min(2, __import__("os").cpu_count())
    assert resolve_processes([1, 2], 1024) == [1, 2]


def test_processes_option_takes_counts_or_auto():
    runner = CliRunner()
    bad = runner.invoke(app, ["bench", "loadgen", "--overhead", "--processes", "0"])
    assert bad.exit_code != 0 and "counts of 1 or more, or auto" in bad.output
    only_overhead = runner.invoke(app, ["bench", "loadgen", "--processes", "auto", "--concurrency", "1"])
    assert only_overhead.exit_code != 0 and "only with --overhead" in only_overhead.output
