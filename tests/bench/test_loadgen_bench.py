"""`dflashbench bench loadgen`: the stand-in server as a separate process, the real load generator, shards."""

import json

from typer.testing import CliRunner

from dflashbench.cli import app


def test_bench_loadgen_reports_trials_and_best(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, [
        "bench", "loadgen", "--pace-ms", "5", "--tokens-per-chunk", "2", "--max-tokens", "20", "--rounds", "1",
        "--concurrency", "2,4", "--processes", "1,2", "--tolerance", "0.5", "--json", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["config"]["true_itl_ms"] == 2.5  # 5 ms per chunk of 2 tokens
    trials = data["trials"]
    assert {(t["processes"], t["concurrency"]) for t in trials} == {(1, 2), (1, 4), (2, 2), (2, 4)}
    for t in trials:
        assert t["errors"] == 0 and t["requests"] == t["concurrency"] and t["tokens"] == 20 * t["concurrency"]
        assert t["client_cpu_us_per_tok"] > 0 and t["server_late_ms_mean"] is not None
        assert abs(t["itl_ms_mean"] - 2.5) / 2.5 < 0.5
    assert "1 proc x     2 streams" in result.output and "2 proc x     4 streams" in result.output
    assert "best with 1 client process(es): 4 streams" in result.output
