"""`dflashbench bench batching`: the engine loop in process, paired ratios to c=1, the losslessness check."""

import json

import pytest
from typer.testing import CliRunner

from dflashbench.bench.batching import (
    BatchingBenchConfig,
    BatchingBenchResult,
    LevelRun,
    format_report,
    paired_ratio,
    run_batching_bench,
    step_bound,
)
from dflashbench.cli import app
from dflashbench.reference.tiny import write_tiny_pair


def test_closed_loop_at_each_concurrency_is_lossless_and_reports_every_level(tmp_path):
    target, draft = write_tiny_pair(tmp_path / "pair", block_size=8)
    cfg = BatchingBenchConfig(str(target), str(draft), concurrency=(1, 3), num_prompts=5, max_new_tokens=12, rounds=2)
    result = run_batching_bench(cfg)
    assert [(r.round, r.method, r.concurrency) for r in result.runs] == [
        (0, "ar", 1), (0, "ar", 3), (0, "dflash", 1), (0, "dflash", 3),
        (1, "ar", 1), (1, "ar", 3), (1, "dflash", 1), (1, "dflash", 3)]  # fmt: skip
    assert result.lossless("ar") and result.lossless("dflash")
    for run in result.runs:
        assert all(run.outputs) and run.output_tokens == sum(map(len, run.outputs))
        assert max(run.step_s) <= run.concurrency and len(run.outputs) == 5 and run.prefill_s
    rows = {(r["method"], r["concurrency"]): r for r in result.summary()}
    assert set(rows) == {("ar", 1), ("ar", 3), ("dflash", 1), ("dflash", 3)}
    assert rows["ar", 1]["ratio_to_c1"] == 1.0 and rows["dflash", 3]["ratio_to_c1"] > 0
    assert rows["dflash", 3]["rounds"] == 2 and rows["dflash", 3]["step_ms_at_c"] > 0
    assert rows["ar", 1]["step_bound_to_c1"] == 1.0 and 0 < rows["dflash", 3]["step_bound_to_c1"] <= 3 * 1.5
    assert "dflash: lossless" in format_report(result)


def test_paired_ratio_is_the_median_of_per_round_ratios():
    assert paired_ratio([(100.0, 250.0), (200.0, 300.0), (50.0, 100.0)]) == 2.0
    assert paired_ratio([]) is None


def test_step_bound_is_concurrency_times_the_step_time_ratio_paired_per_round():
    assert step_bound([0.010, 0.011, 0.012], [0.020, 0.024], 4) == pytest.approx(4 * 0.011 / 0.022)
    assert step_bound([], [0.02], 4) is None and step_bound([0.01], [], 4) is None

    def run(c, round_, steps):
        return LevelRun("dflash", c, round_, 1.0, [0.1], steps, [[1]])

    # round 0: 2 * 10/16 = 1.25; round 1: 2 * 12/12 = 2.0; the c=2 run's ramp-down steps at B=1 do not count
    result = BatchingBenchResult(BatchingBenchConfig("m", methods=("dflash",), concurrency=(1, 2)), 1, [
        run(1, 0, {1: [0.010]}), run(2, 0, {2: [0.016], 1: [0.001]}),
        run(1, 1, {1: [0.012]}), run(2, 1, {2: [0.012]})])  # fmt: skip
    rows = {r["concurrency"]: r for r in result.summary()}
    assert rows[2]["step_bound_to_c1"] == pytest.approx((1.25 + 2.0) / 2) and rows[1]["step_bound_to_c1"] == 1.0
    assert "1.62x" in format_report(result)


def test_lossless_check_fails_when_a_batched_output_differs():
    def run(c, outputs):
        return LevelRun("ar", c, 0, 1.0, [0.1], {c: [0.01]}, outputs)

    result = BatchingBenchResult(BatchingBenchConfig("m", methods=("ar",), concurrency=(1, 2)), 1,
                                 [run(1, [[1, 2], [3]]), run(2, [[1, 2], [4]])])
    assert not result.lossless("ar")
    assert "NOT LOSSLESS" in format_report(result)


def test_cli_writes_json_and_rejects_bad_levels(tmp_path):
    target, draft = write_tiny_pair(tmp_path / "pair", block_size=4)
    out = tmp_path / "b.json"
    args = ["bench", "batching", "--model", str(target), "--draft", str(draft), "--num-prompts", "3",
            "--max-new-tokens", "6", "--rounds", "1"]
    result = CliRunner().invoke(app, [*args, "--concurrency", "2", "--method", "dflash", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["config"]["concurrency"] == [1, 2] and data["lossless"] == {"dflash": True}  # c=1 always runs
    assert [r["concurrency"] for r in data["summary"]] == [1, 2]
    for bad, flag in ((["--concurrency", "1,x"], "--concurrency"), (["--method", "eagle3"], "--method"),
                      (["--rounds", "0"], "--rounds")):
        res = CliRunner().invoke(app, [*args, *bad])
        assert res.exit_code != 0 and flag in res.output, res.output
