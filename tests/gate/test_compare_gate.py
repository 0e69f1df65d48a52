"""`dflashbench compare` as a gate CI can trust: default gates, missing and truncated runs fail, regressions
first, and the repeats hook (a move inside overlapping intervals is noise)."""

import pandas as pd
import pytest
from report.factory import point, write_run
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.compare import compare_points, effective_thresholds, parse_threshold, within_noise


def run_with(root, name, *, throughput=100.0, methods=("ar", "dflash"), tau=4.0):
    points = [point(m, c, 100 / c, throughput * c, tau=None if m == "ar" else tau, ttft_s_p99=0.2, run_id=name)
              for m in methods for c in (1, 2, 4)]  # fmt: skip
    return write_run(root, points, run_id=name)


def invoke(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args)])


@pytest.fixture
def base(tmp_path):
    return run_with(tmp_path, "base")


def test_default_gates_fail_a_20_percent_throughput_drop_and_are_printed(tmp_path, base):
    result = invoke(base, run_with(tmp_path, "new", throughput=80.0))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("6 regression(s)")  # the verdict leads, then the gates
    first = next(ln for ln in lines if ln.startswith("gates:"))
    assert first == ("gates: throughput_tok_per_s max drop 5% (default), per_user_tok_per_s_pooled max drop 5% "
                     "(default), speedup max drop 5% (default), tau max drop 0.2 (default), ttft_s_p99 max rise 20% "
                     "(default)")  # fmt: skip
    assert "6 regression(s)" in result.output


def test_user_threshold_replaces_the_default_of_its_metric_only(tmp_path, base):
    new = run_with(tmp_path, "new", throughput=80.0)
    result = invoke(base, new, "--max-drop", "throughput=25%")
    assert result.exit_code == 0, result.output
    assert "throughput_tok_per_s max drop 25%," in result.output and "tau max drop 0.2 (default)" in result.output
    assert invoke(base, run_with(tmp_path, "tau", tau=3.5), "--max-drop", "throughput=25%").exit_code == 1


def test_no_default_gates_gates_nothing_but_missing_points(tmp_path, base):
    assert invoke(base, run_with(tmp_path, "new", throughput=80.0), "--no-default-gates").exit_code == 0
    result = invoke(base, run_with(tmp_path, "ar-only", methods=("ar",)), "--no-default-gates")
    assert result.exit_code == 1


def test_a_missing_method_fails(tmp_path, base):
    result = invoke(base, run_with(tmp_path, "new", methods=("ar",)))
    assert result.exit_code == 1, result.output
    assert "3 of 6 point(s) of BASE are missing from NEW (method(s) dflash entirely)" in result.output
    # the verdict line names them (it read "3 regression(s) over 3 common point(s): ; gated: ..." before)
    assert result.output.startswith("3 regression(s) over 3 common point(s): 3 point(s) missing from NEW (dflash "
                                    "synthetic c=1, dflash synthetic c=2, dflash synthetic c=4); gated: "), result.output
    lines = result.output.splitlines()
    table = lines[lines.index(next(ln for ln in lines if ln.startswith("backend"))) + 2:]
    assert all("missing" in ln and "REGRESSION" in ln for ln in table[:3])  # listed first


def test_truncated_points_file_fails(tmp_path, base):
    new = run_with(tmp_path, "new")
    lines = (new / "points.jsonl").read_text().splitlines(keepends=True)
    (new / "points.jsonl").write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # cut mid-line
    result = invoke(base, new)
    assert result.exit_code == 1, result.output
    assert "4 of 6 point(s) of BASE are missing from NEW" in result.output


@pytest.mark.parametrize("side", ["new", "base"])
def test_a_run_with_an_empty_or_absent_points_file_or_no_run_is_unusable_input(tmp_path, base, side):
    """Issue #32: exit 2 (unusable input, as README says), naming which side and why; never a pass or a table."""
    new = run_with(tmp_path, "new")
    target = new if side == "new" else base
    (target / "points.jsonl").write_text("")
    args = (base, new)
    result = invoke(*args)
    assert result.exit_code == 2 and f"{side.upper()} {target}: points.jsonl is empty" in result.output, result.output
    (target / "points.jsonl").unlink()
    result = invoke(*args)
    assert result.exit_code == 2 and "is not a run directory: it has no points.jsonl" in result.output
    assert invoke(base, tmp_path / "nowhere").exit_code == 2


def test_regressions_come_first(tmp_path, base):
    new_points = [point(m, c, 100 / c, 100.0 * c * (0.5 if (m, c) == ("dflash", 4) else 1.0),
                        tau=None if m == "ar" else 4.0, ttft_s_p99=0.2, run_id="new")
                  for m in ("ar", "dflash") for c in (1, 2, 4)]  # fmt: skip
    result = invoke(base, write_run(tmp_path, new_points, run_id="new"))
    rows = [ln for ln in result.output.splitlines() if ln.startswith("reference")]
    assert "REGRESSION" in rows[0] and "dflash" in rows[0] and "-50.0%" in rows[0]
    assert not any("REGRESSION" in r for r in rows[1:])


def test_markdown_opens_with_the_verdict_and_links_the_report(tmp_path, base):
    result = invoke(base, run_with(tmp_path, "new", throughput=80.0), "--format", "md",
                    "--report-link", "reports/new.html")  # fmt: skip
    lines = result.output.splitlines()
    assert lines[0] == "### dflashbench compare"
    assert lines[2].startswith("**❌ 6 regression(s) over 6 common point(s)")
    assert lines[4] == "Full report: [reports/new.html](reports/new.html)"


def test_within_noise_needs_overlapping_intervals_on_both_sides():
    a = {"throughput_tok_per_s": 100.0, "throughput_tok_per_s_ci_lo": 90.0, "throughput_tok_per_s_ci_hi": 110.0}
    b = {"throughput_tok_per_s": 85.0, "throughput_tok_per_s_ci_lo": 80.0, "throughput_tok_per_s_ci_hi": 92.0}
    c = {"throughput_tok_per_s": 70.0, "throughput_tok_per_s_ci_lo": 65.0, "throughput_tok_per_s_ci_hi": 75.0}
    assert within_noise(pd.Series(a), pd.Series(b), "throughput_tok_per_s")
    assert not within_noise(pd.Series(a), pd.Series(c), "throughput_tok_per_s")
    assert not within_noise(pd.Series(a), pd.Series({"throughput_tok_per_s": 85.0}), "throughput_tok_per_s")
    assert not within_noise(pd.Series({"throughput_tok_per_s": 100.0}), pd.Series(b), "throughput_tok_per_s")


def test_a_drop_inside_repeat_intervals_is_noise_not_a_regression():
    def rows(tput, lo, hi):
        p = point("dflash", 1, 100.0, tput).to_dict()
        return pd.DataFrame([{**p, "throughput_tok_per_s_ci_lo": lo, "throughput_tok_per_s_ci_hi": hi}])

    gates = effective_thresholds([parse_threshold("throughput=5%", "drop")], use_defaults=False)
    noisy = compare_points(rows(100.0, 88.0, 112.0), rows(90.0, 80.0, 99.0), gates)
    assert [r.verdict for r in noisy.rows if r.metric == "throughput_tok_per_s"] == ["noise"]
    assert noisy.exit_code == 0 and any("noise" in w for w in noisy.warnings)
    real = compare_points(rows(100.0, 97.0, 103.0), rows(90.0, 88.0, 92.0), gates)
    assert real.exit_code == 1


def test_a_repeated_tail_quantile_is_gated_only_where_each_round_supports_it():
    """p99 of 2 requests a round is each round's slowest request: its rounds' interval cannot judge it (the rule
    for a point without rounds, per round), however far apart two runs' intervals fall."""
    def rows(p99, lo, hi, requests):
        p = point("dflash", 1, 100.0, 100.0).to_dict()
        return pd.DataFrame([{**p, "ttft_s_p99": p99, "ttft_s_p99_ci_lo": lo, "ttft_s_p99_ci_hi": hi,
                              "n_repeats": 3, "num_requests": 3 * requests}])  # fmt: skip

    gates = effective_thresholds([parse_threshold("ttft_s_p99=20%", "rise")], use_defaults=False)
    few = compare_points(rows(0.0155, 0.015, 0.016, 2), rows(0.0279, 0.027, 0.029, 2), gates)
    [row] = [r for r in few.rows if r.metric == "ttft_s_p99"]
    assert (row.verdict, row.limit) == ("not gated", "p99 of 2 requests a round: a gate needs 1000")
    assert few.exit_code == 0
    enough = compare_points(rows(0.0155, 0.015, 0.016, 1000), rows(0.0279, 0.027, 0.029, 1000), gates)
    assert [r.verdict for r in enough.rows if r.metric == "ttft_s_p99"] == ["REGRESSION"] and enough.exit_code == 1


def test_default_gates_parse():
    assert [(t.metric, t.direction, t.default) for t in effective_thresholds([])] == [
        ("throughput_tok_per_s", "drop", True), ("per_user_tok_per_s_pooled", "drop", True),
        ("speedup", "drop", True), ("tau", "drop", True), ("ttft_s_p99", "rise", True)]
