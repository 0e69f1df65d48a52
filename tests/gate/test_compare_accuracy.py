"""`dflashbench compare --max-drop accuracy=...`: task accuracy gates like any metric, and a drop beyond noise is
named whether gated or not."""

from report.factory import point, write_run
from typer.testing import CliRunner

from dflashbench.cli import app


def run_with(root, name, correct: dict[str, int], graded: int = 64):
    points = [point(m, 1, 100.0, 100.0, run_id=name, workload="gsm8k", num_graded=graded, num_correct=k,
                    accuracy=k / graded) for m, k in correct.items()]  # fmt: skip
    return write_run(root, points, run_id=name)


def invoke(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args)])


def test_accuracy_drop_beyond_the_threshold_and_the_noise_fails(tmp_path):
    base = run_with(tmp_path, "base", {"ar": 50, "dflash": 50})
    new = run_with(tmp_path, "new", {"ar": 50, "dflash": 30})  # 78% -> 47%
    result = invoke(base, new, "--max-drop", "accuracy=0.05")
    assert result.exit_code == 1, result.output
    (line,) = [ln for ln in result.output.splitlines() if "REGRESSION" in ln]
    assert "dflash" in line and "accuracy" in line and "max drop 0.05" in line
    assert "warning: accuracy of reference / dflash / gsm8k / all / 1 fell beyond noise: 50/64 (78.1%) -> 30/64 " \
           "(46.9%)" in result.output  # fmt: skip


def test_small_accuracy_moves_pass_and_warn_of_nothing(tmp_path):
    base = run_with(tmp_path, "base", {"ar": 50, "dflash": 50})
    new = run_with(tmp_path, "new", {"ar": 51, "dflash": 48})  # 2 requests fewer right: within 5 points
    result = invoke(base, new, "--max-drop", "accuracy=5%", "--max-drop", "throughput=5%")
    assert result.exit_code == 0, result.output
    assert "fell beyond noise" not in result.output
    # ungated, accuracy is shown by default where the runs graded anything; a real drop is still named
    dropped = run_with(tmp_path, "dropped", {"ar": 50, "dflash": 20})
    result = invoke(base, dropped)
    assert result.exit_code == 0 and "accuracy" in result.output and "fell beyond noise" in result.output
