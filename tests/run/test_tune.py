"""`dflashbench tune` end to end on the reference backend with the embedded pair, as small as proves it: two Ks, two
loads, two prompts. The grid and the check are real sweeps (real servers on loopback); what is asserted is the
mechanism (the files, their schemas, the check's loads, the report's section), never a speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from measure.test_speculation_profile import specdec_reader
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.reference.draft_length import DraftSchedule

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # about a minute: two small sweeps


def invoke(*args: str):
    return CliRunner().invoke(app, ["tune", *args])


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    result = invoke("--method", "dflash", "--k", "1,7", "--concurrency", "1,2", "--num-prompts", "2", "-o", str(out))
    assert result.exit_code == 0, result.output
    (folder,) = out.glob("tune-dflash-*")
    return folder, result.output


def test_tune_writes_the_schedule_for_each_engine(tuned):
    folder, output = tuned
    data = json.loads((folder / "schedule.json").read_text())
    schedule = DraftSchedule.parse(data["num_speculative_tokens_per_batch_size"])
    assert data["method"] == "dflash" and schedule.ranges[0][0] == 1 and {k for _, _, k in schedule.ranges} <= {1, 2, 3, 4, 5, 6, 7}
    engines = data["engines"]
    assert engines["reference"] == ["--num-speculative-tokens-per-batch-size", schedule.to_json()]
    assert engines["vllm"]["--speculative-config"]["num_speculative_tokens_per_batch_size"] == schedule.to_list()
    assert "speculative_config" in engines["trtllm"] or "smallest batch size" in engines["trtllm"]["refused"]
    assert [r["concurrency"] for r in engines["sglang"]["fixed K per load range"]] == [[lo, hi] for lo, hi, _ in schedule.ranges]
    assert f"schedule: {schedule.describe()}" in output


def test_tune_fits_predicts_and_holds_out(tuned):
    folder, output = tuned
    tune = json.loads((folder / "tune.json").read_text())
    assert len(tune["hold_out"]["cells"]) == 4 and tune["hold_out"]["summary"]["median_abs_error"] >= 0
    assert {(p["k"], p["concurrency"]) for p in tune["predictions"]} == {(k, c) for k in range(1, 8) for c in (1, 2)}
    assert all(p["per_user_ci"][0] <= p["per_user"] <= p["per_user_ci"][1] for p in tune["predictions"])
    assert [c["concurrency"] for c in tune["choices"]] == [1, 2]
    assert {b["concurrency"] for b in tune["recommended_vs_best_measured"]} == {1, 2}
    assert "hold-out (each measured (K, load) predicted by fits that left it out, 4 points): median error" in output


def test_the_check_measures_the_schedule_beside_the_fixed_k_on_both_sides_of_each_threshold(tuned):
    from dflashbench.measure.tune_fit import threshold_loads
    from dflashbench.run.store import load_run

    folder, output = tuned
    schedule = DraftSchedule.parse(json.loads((folder / "schedule.json").read_text())["num_speculative_tokens_per_batch_size"])
    check = load_run(folder / "check").points
    alls = check[check["category"] == "all"]
    want = {1, 2, *threshold_loads(schedule)}
    for method in ("dflash", "dflash-tuned"):
        assert set(alls[alls["method"] == method]["concurrency"]) == want
    gains = json.loads((folder / "tune.json").read_text())["gains"]
    assert {g["concurrency"] for g in gains} == want and all(g["tuned"] == "dflash-tuned" for g in gains)
    assert "check c=1: dflash-tuned over dflash: per user" in output


def test_the_profile_passes_specdec_benchs_checks_and_the_report_has_the_section(tuned):
    folder, output = tuned
    profile = json.loads((folder / "speculation_profile.json").read_text())
    specdec_reader(profile)
    assert profile["num_speculative_tokens"] == 7 and profile["accept_length_model"] == "chain_analytic"
    assert set(profile["accept_length_by_k"]) == {"1", "7"}
    html = (folder / "report.html").read_text()
    assert 'id="draft-length"' in html and "tau three ways" in html and "Tuned schedule over the fixed K" in html


def test_a_profile_from_elsewhere_predicts_without_measuring(tuned, tmp_path):
    """--from reads the grid already measured, --profile takes acceptance from the profile: the same predictions
    within 1 % (the profile rounds to six digits), and nothing is swept."""
    folder, _ = tuned
    before = {(p["k"], p["concurrency"]): p["per_user"] for p in json.loads((folder / "tune.json").read_text())["predictions"]}
    result = invoke("--method", "dflash", "--k", "1,7", "--concurrency", "1,2", "--from", str(folder), "--profile",
                    str(folder / "speculation_profile.json"), "--no-check", "--no-report", "-o", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "run directory:" not in result.output  # no sweep ran
    (again,) = tmp_path.glob("tune-dflash-*")
    assert not (again / "grid").exists() and json.loads((again / "tune.json").read_text())["grid"] == str(folder / "grid")
    after = {(p["k"], p["concurrency"]): p["per_user"] for p in json.loads((again / "tune.json").read_text())["predictions"]}
    assert after.keys() == before.keys()
    assert all(after[key] == pytest.approx(before[key], rel=0.01) for key in before)


def test_the_dry_run_says_what_it_measures_and_launches_nothing(tmp_path):
    result = invoke("--method", "eagle3", "--concurrency", "1,4", "--dry-run", "--assume-user-tok-per-s", "200",
                    "-o", str(tmp_path))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tune eagle3: K 1, 2, 3, 5, 7 x load 1, 4: 10 grid points, one server per K" in result.output
    assert "server for eagle3-k7:" in result.output and "duration:" in result.output
    assert "then the check: eagle3 at its own K beside eagle3-tuned" in result.output
    assert not list(Path(tmp_path).iterdir())
    bad = invoke("--method", "ar", "--dry-run")
    assert bad.exit_code == 2 and "unknown method 'ar' for tune" in bad.output
    slo = invoke("--objective", "goodput", "--slo", "ttft_p99=2s", "--dry-run")
    assert slo.exit_code == 2 and "tune predicts TPOT" in slo.output
