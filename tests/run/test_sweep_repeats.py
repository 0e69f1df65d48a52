"""`dflashbench sweep --repeats` with real server processes on loopback: the paced stand-in server for the
round order, the stored repeat rows and a resume that redoes only a missing repeat; the reference server
(bundled tiny models) for the whole path a user takes, report error bars and compare included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflashbench.backends import BACKENDS
from dflashbench.cli import app
from dflashbench.run.store import load_run

GSM8K = Path(__file__).parent.parent / "fixtures" / "datasets" / "openai--gsm8k"


@pytest.fixture(autouse=True)
def standin_backend(monkeypatch):
    monkeypatch.setitem(BACKENDS, "standin", "dflashbench.bench.standin:StandinBackend")


def standin_suite(tmp_path: Path, repeats: int) -> Path:
    path = tmp_path / "standin.toml"
    path.write_text(f"""
name = "standin-repeats"
backend = "standin"
methods = ["ar", "dflash"]
model = "standin-model"
concurrency = [1, 2]
num_prompts = 2
requests_per_stream = 1
warmup_requests = 0
max_tokens = 6
timeout_s = 20
repeats = {repeats}
[drafts]
dflash = "standin-draft"
[[workloads]]
name = "gsm8k"
data = "{GSM8K}"
""")
    return path


def sweep(*args):
    return CliRunner().invoke(app, ["sweep", *map(str, args)], catch_exceptions=False)


def _drop_point(run_dir: Path, point_id: str) -> None:
    """What a sweep killed during ``point_id`` leaves: no row of it anywhere."""
    for name in ("points.jsonl", "requests.jsonl"):
        path = run_dir / name
        keep = [line for line in path.read_text().splitlines() if json.loads(line)["point_id"] != point_id]
        path.write_text("".join(line + "\n" for line in keep))


def test_repeats_run_in_rounds_and_resume_redoes_only_the_missing_repeat(tmp_path):
    out = tmp_path / "results"
    first = sweep("--suite", standin_suite(tmp_path, repeats=2), "-o", out, "--no-report")
    assert first.exit_code == 0, first.output
    run_dir = next(out.iterdir())
    run = load_run(run_dir)

    raw = run.repeat_points
    # round 0 runs every method before round 1: drift hits both alike
    assert list(zip(raw["repeat"], raw["method"], raw["concurrency"], strict=True)) == [
        (r, m, c) for r in (0, 1) for m in ("ar", "dflash") for c in (1, 2)]  # fmt: skip
    assert list(raw["point_id"][:2]) == ["standin:ar:gsm8k:c1/r0", "standin:ar:gsm8k:c2/r0"]
    measured = run.requests[~run.requests["warmup"]]
    assert set(measured.loc[measured["point_id"].str.endswith("/r1"), "repeat"]) == {1}
    assert set(measured.loc[measured["point_id"].str.endswith("/r0"), "repeat"]) == {0}
    # a server per method per round
    assert first.output.count("server ready after") == 4, first.output
    # one row per point for analysis, with its interval
    assert len(run.points) == 4 and set(run.points["n_repeats"]) == {2}
    assert run.points["throughput_tok_per_s_ci_lo"].notna().all()
    assert (run.points["throughput_tok_per_s_ci_lo"] <= run.points["throughput_tok_per_s"]).all()
    assert "repeats: DFlash single-stream speedup over AR (gsm8k)" in first.output

    missing = "standin:dflash:gsm8k:c2/r1"
    before = {r["point_id"]: r["throughput_tok_per_s"] for r in raw.to_dict("records")}
    _drop_point(run_dir, missing)
    second = sweep("--resume", run_dir, "--no-report")
    assert second.exit_code == 0, second.output
    assert "7 point(s) done, 1 to run" in second.output
    assert second.output.count("server ready after") == 1 and second.output.count(" repeat ") == 1
    assert "[8/8] standin dflash gsm8k c=2 repeat 2/2" in second.output
    again = load_run(run_dir).repeat_points
    assert sorted(again["point_id"]) == sorted(before)
    kept = {r["point_id"]: r["throughput_tok_per_s"] for r in again.to_dict("records") if r["point_id"] != missing}
    assert kept == {k: v for k, v in before.items() if k != missing}  # earlier repeats untouched
    assert load_run(run_dir).manifest["resumes"][0]["points_to_run"] == [missing]


def test_repeats_flag_and_resume_refuse_bad_use(tmp_path):
    assert sweep("--repeats", "0", "--dry-run").exit_code == 2
    result = sweep("--resume", tmp_path, "--repeats", "3")
    assert result.exit_code == 2 and "--repeats" in result.output
    dry = sweep("--suite", standin_suite(tmp_path, repeats=3), "--dry-run", "--verbose")
    assert dry.exit_code == 0 and "every point measured 3 times" in dry.output
    assert "standin:dflash:gsm8k:c2/r2" in dry.output


REFERENCE_SUITE = """
name = "tiny-repeats"
backend = "reference"
methods = ["ar", "dflash"]
model = "embedded"
concurrency = [1, 2]
num_prompts = 2
requests_per_stream = 1
warmup_requests = 0
max_tokens = 8
timeout_s = 120
[drafts]
dflash = "embedded"
[[workloads]]
name = "synthetic"
"""


@pytest.mark.slow
@pytest.mark.alone  # two runs compared: by themselves (noxfile.py, the tests session)
@pytest.mark.timeout(900)
def test_reference_server_with_three_repeats_report_and_compare(tmp_path):
    """The reference server, launched per method per round; two runs of the same code: the report draws error
    bars and gives speedup intervals, and ``compare`` aligns one row per point and exits 0."""
    suite = tmp_path / "tiny.toml"
    suite.write_text(REFERENCE_SUITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    runs = []
    for name in ("base", "new"):
        done = subprocess.run([sys.executable, "-m", "dflashbench", "sweep", "--suite", str(suite), "--repeats", "3",
                               "-o", str(tmp_path / name)], capture_output=True, text=True, env=env, timeout=800)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        runs.append(next(p for p in (tmp_path / name).iterdir() if p.is_dir() and p.name != "reports"))
    run = load_run(runs[0])
    raw = run.repeat_points[run.repeat_points["category"] == "all"]
    assert len(raw) == 12 and set(raw["repeat"]) == {0, 1, 2}  # 2 methods x 2 concurrencies x 3 repeats
    points = run.points[run.points["category"] == "all"]
    assert len(points) == 4 and set(points["n_repeats"]) == {3}
    assert len(run.points) == len(run.repeat_points) / 3  # every category row collapsed too
    for metric in ("throughput_tok_per_s", "per_user_tok_per_s_mean", "tpot_s_p50", "ttft_s_p99"):
        # a figure of per-token timing is missing from a round whose chunks arrived in bursts (a busy machine:
        # its timing was not observable), and then so is its interval; every other interval is there
        every_round = raw.groupby(["method", "concurrency"])[metric].apply(lambda v: bool(v.notna().all()))
        for (method, conc), measured in every_round.items():
            row = points[(points["method"] == method) & (points["concurrency"] == conc)].iloc[0]
            if not measured:
                assert metric in ("per_user_tok_per_s_mean", "tpot_s_p50"), (metric, method, conc)
                continue
            assert pd.notna(row[f"{metric}_ci_lo"]) and pd.notna(row[f"{metric}_sd"]), (metric, method, conc)
            assert row[f"{metric}_ci_lo"] <= row[metric] <= row[f"{metric}_ci_hi"], (metric, method, conc)
    report = (tmp_path / "base" / "reports" / f"{runs[0].name}.html").read_text()
    assert "Error bars: 95% t-intervals over 3 repeats of each point." in report  # the Pareto figure's alt text
    assert "95% decision interval" in report and "paired repeats (3 rounds)" in report and "×, " in report

    compared = subprocess.run([sys.executable, "-m", "dflashbench", "compare", str(runs[0]), str(runs[1]),
                               "--accept-weak"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    # Unchanged code is never a regression (exit 1). On this shared 2-core machine a whole run can go 25 % slower
    # (another tenant) while the single-threaded probe moves under 1 %: then compare names the machine's change and
    # cannot judge (exit 3), which is its answer for a slower machine, not a failure of the gate. Rounds of 2 requests
    # a point cannot see a drop of 2x the 5 % gates: a weak pass, exit 3 by default, accepted here (--accept-weak).
    assert compared.returncode in (0, 3), compared.stdout + compared.stderr
    if compared.returncode == 3:
        assert "cannot judge" in compared.stdout and "machine: the CPU probe ran" in compared.stdout, compared.stdout
    assert f"over {len(run.points)} common point(s)" in compared.stdout  # one row per point and category, not 3
