import pytest
from report.factory import point, write_run
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.compare import compare_points, parse_threshold


def run_with(root, name, *, throughput=100.0, tau=4.0, ttft=0.20, workload="synthetic", failed_c4=False):
    points = [point("ar", c, 50 / c**0.2, 50 * c**0.8, ttft_s_p99=ttft, run_id=name, workload=workload)
              for c in (1, 4)]  # fmt: skip
    points += [point("dflash", 1, 150, throughput, tau=tau, ttft_s_p99=ttft, run_id=name, workload=workload)]
    if failed_c4:
        points.append(point("dflash", 4, None, None, status="failed", failure_reason="server died (exit -9)",
                            run_id=name, workload=workload))  # fmt: skip
    else:
        points.append(
            point("dflash", 4, 120, throughput * 3, tau=tau, ttft_s_p99=ttft, run_id=name, workload=workload)
        )
    return write_run(root, points, run_id=name)


def invoke(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args)])


@pytest.fixture
def base(tmp_path):
    return run_with(tmp_path, "base")


def test_improvement_passes(tmp_path, base):
    new = run_with(tmp_path, "new", throughput=130.0, tau=4.5, ttft=0.15)
    result = invoke(
        base, new, "--max-drop", "throughput=5%", "--max-drop", "tau=0.2", "--max-rise", "ttft_s_p99=10%"
    )
    assert result.exit_code == 0, result.output
    assert "no regression over 4 common point(s)" in result.output
    assert "REGRESSION" not in result.output
    assert "+30.0%" in result.output  # the throughput change is shown


def test_throughput_drop_beyond_threshold_fails(tmp_path, base):
    new = run_with(tmp_path, "new", throughput=90.0)
    result = invoke(base, new, "--max-drop", "throughput=5%")
    assert result.exit_code == 1
    assert "2 regression(s)" in result.output  # both dflash points lost 10%
    lines = [ln for ln in result.output.splitlines() if "REGRESSION" in ln]
    assert len(lines) == 2 and all("dflash" in ln and "-10.0%" in ln for ln in lines)


def test_drop_within_threshold_passes(tmp_path, base):
    new = run_with(tmp_path, "new", throughput=95.0)  # exactly 5 % down: not beyond
    assert invoke(base, new, "--max-drop", "throughput=5%").exit_code == 0


def test_absolute_tau_threshold(tmp_path, base):
    assert invoke(base, run_with(tmp_path, "ok", tau=3.85), "--max-drop", "tau=0.2").exit_code == 0
    assert invoke(base, run_with(tmp_path, "bad", tau=3.7), "--max-drop", "tau=0.2").exit_code == 1


def test_latency_rise_fails(tmp_path, base):
    new = run_with(tmp_path, "new", ttft=0.25)
    result = invoke(base, new, "--max-rise", "ttft_s_p99=10%")
    assert result.exit_code == 1
    assert "+25.0%" in result.output


def test_point_that_failed_in_new_is_a_regression(tmp_path, base):
    new = run_with(tmp_path, "new", failed_c4=True)
    result = invoke(base, new, "--max-drop", "throughput=5%")
    assert result.exit_code == 1
    assert "server died (exit -9)" in result.output
    assert result.output.startswith("1 regression(s) over 3 common point(s) and 1 speedup(s): 1 point(s) failed in NEW (dflash "
                                    "synthetic c=4); gated: "), result.output  # named on the verdict line


def test_runs_with_no_points_in_common_are_unusable(tmp_path, base):
    other = run_with(tmp_path, "other", workload="gsm8k")
    result = invoke(base, other, "--max-drop", "throughput=5%")
    assert result.exit_code == 2
    assert "no finished point in common" in result.output


def test_unreadable_run_is_unusable(tmp_path, base):
    result = invoke(base, tmp_path / "missing")
    assert result.exit_code == 2
    assert "not a directory" in result.output
    broken = run_with(tmp_path, "broken")
    (broken / "points.jsonl").write_text('{"backend": \nnot json\n{"x": 1}\n')
    assert invoke(base, broken).exit_code == 2


@pytest.mark.parametrize("bad", ["throughput>5%", "throughput=", "throughput=five", "speed=5%", "=5%"])
def test_bad_threshold_syntax_is_unusable(base, bad):
    result = invoke(base, base, "--max-drop", bad)
    assert result.exit_code == 2
    assert "--max-drop" in result.output and bad in result.output


def test_markdown_output_and_summary_file(tmp_path, base):
    new = run_with(tmp_path, "new", throughput=90.0)
    summary = tmp_path / "summary.md"
    result = invoke(base, new, "--max-drop", "throughput=5%", "--format", "md", "--summary", summary)
    assert result.exit_code == 1
    text = summary.read_text()
    assert text.startswith("### dflashbench compare")
    assert "| backend | method |" in text and "| REGRESSION |" in text
    assert text in result.output


def test_thresholds_parse_relative_and_absolute():
    t = parse_threshold("throughput=5%", "drop")
    assert (t.metric, t.amount, t.relative) == ("throughput_tok_per_s", 0.05, True)
    t = parse_threshold(" tau = 0.2 ", "drop")
    assert (t.metric, t.amount, t.relative) == ("tau", 0.2, False)


def test_unmeasured_metric_is_not_judged(tmp_path):
    import pandas as pd

    base = pd.DataFrame([point("ar", 1, 50, 50).to_dict()])
    new = pd.DataFrame([point("ar", 1, 50, 50).to_dict()])
    result = compare_points(base, new, [parse_threshold("tau=0.2", "drop")])  # AR points here carry no tau
    assert [r.verdict for r in result.rows if r.metric == "tau"] == ["n/a"]
    assert result.exit_code == 0
