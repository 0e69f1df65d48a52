"""``bench drafting`` end to end on a tiny pair: every method lossless, tables printed, the curve measured."""

import json

import pytest
import torch
from typer.testing import CliRunner

from dflashbench.bench.drafting import DraftingBenchConfig, format_report, run_bench
from dflashbench.cli import app
from dflashbench.reference.eagle3.checkpoint import save_eagle3
from dflashbench.reference.target import load_target
from dflashbench.reference.tiny import tiny_eagle3, write_tiny_pair


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    root = tmp_path_factory.mktemp("trio")
    target_dir, draft_dir = write_tiny_pair(root, num_layers=4, block_size=4)
    save_eagle3(tiny_eagle3(load_target(target_dir), k=3, seed=3), root / "eagle3")
    return target_dir, draft_dir, root / "eagle3"


def test_run_bench_reports_every_method_and_the_curve(trio):
    cfg = DraftingBenchConfig(*trio, ks=[1, 3], num_prompts=3, max_new_tokens=8, repeats=2, curve=(1, 2, 4))
    before = torch.get_num_threads()
    result = run_bench(cfg)
    assert torch.get_num_threads() == before  # the bench restores the thread count it changed
    methods = [row["method"] for row in result["decoding"]]
    assert methods == ["ar", "dflash b4", "eagle3 k=1", "eagle3 k=3"]
    assert all(row["lossless"] for row in result["decoding"])
    ar = result["decoding"][0]
    assert (
        ar["tau"] == 1.0
        and ar["speedup"] == 1.0
        and set(ar["tau_by_category"]) == {"math", "code", "writing"}
    )
    assert [row["drafted"] for row in result["curve"]] == [1, 2, 4]
    assert all(row["dflash_s"] > 0 and row["eagle3_s"] > 0 for row in result["curve"])
    report = format_report(result)
    assert "eagle3 k=3" in report and "Drafting cost" in report and "per drafted token" in report
    json.dumps(result)  # the --json record is plain data


def test_bench_command_errors_are_one_line(trio, tmp_path):
    res = CliRunner().invoke(app, ["bench", "drafting", "--model", str(trio[0]), "--dflash", str(trio[1]),
                                   "--eagle3", str(tmp_path / "none"), "--k", "x"])  # fmt: skip
    assert res.exit_code == 2 and "expected comma-separated integers" in res.output
    res = CliRunner().invoke(app, ["bench", "drafting", "--model", str(trio[0]), "--dflash", str(trio[1]),
                                   "--eagle3", str(tmp_path / "none"), "--num-prompts", "1"])  # fmt: skip
    assert (
        res.exit_code == 2
        and "EAGLE-3 checkpoint:" in res.output
        and "not found" in res.output
        and res.output.count("\n") == 1
    )
