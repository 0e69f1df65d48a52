"""`dflashbench bench pair` mechanics on a tiny random pair (the shipped pair's numbers are in MAKING.md)."""

import json

from typer.testing import CliRunner

from dflashbench.bench.pair import PairBenchConfig, format_report, run_pair_bench
from dflashbench.cli import app
from dflashbench.reference.tiny import write_tiny_pair


def test_bench_pair_reports_every_category_and_checks_losslessness(tmp_path):
    target, draft = write_tiny_pair(tmp_path / "pair", block_size=8)
    result = run_pair_bench(PairBenchConfig(str(target), str(draft), num_prompts=3, max_new_tokens=12))
    summary = result.summary()
    assert set(summary) == {"math", "code", "writing", "all"}
    assert result.all_lossless and summary["all"]["lossless"] == 3
    assert summary["all"]["ar_tpot_ms"] > 0 and summary["all"]["speedup"] > 0
    report = format_report(result)
    assert "lossless: DFlash greedy == AR greedy on every prompt" in report and "block 8" in report


def test_bench_pair_cli_writes_json_and_accepts_a_smaller_block(tmp_path):
    target, draft = write_tiny_pair(tmp_path / "pair", block_size=8)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["bench", "pair", "--model", str(target), "--draft", str(draft),
                                      "--num-prompts", "2", "--max-new-tokens", "8", "--block-size", "4",
                                      "--json", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["block_size"] == 4 and data["all_lossless"] and len(data["prompts"]) == 2
    bad = CliRunner().invoke(app, ["bench", "pair", "--model", str(target), "--draft", str(draft), "--block-size", "1"])
    assert bad.exit_code == 2 and "--block-size" in bad.output
