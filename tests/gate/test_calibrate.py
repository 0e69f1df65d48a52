"""Issue #62: the run-to-run term measured where the user runs. ``calibrate`` reads k unchanged runs into a noise
profile (here edited copies of a committed example run, each launch planted with its own speed); ``history`` reads
the same term from a CI's series and writes it as a profile; ``compare --noise-profile`` judges with it and says so.
One real calibration (2 launches of a tiny demo on the reference backend) is marked slow."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
from cross_run_factory import EXAMPLE, digests, edited_copy
from history_factory import write_run
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.calibrate import calibrate_runs
from dflashbench.measure import noise_model as nm

# Each launch's own speed: every method of a launch by a common factor, DFlash's server by one more of its own.
COMMON = (1.0, 1.10, 0.92, 1.05, 0.97)
DFLASH = (1.0, 1.06, 0.95, 1.03, 0.98)


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    root = tmp_path_factory.mktemp("launches")
    prompts = digests(EXAMPLE)
    return [edited_copy(root / f"l{i}", prompts=prompts, jitter_sd=0.02, seed=i, quiet_probe=True,
                        scale={"ar": 1 / c, "eagle3": 1 / c, "dflash": 1 / (c * d)})
            for i, (c, d) in enumerate(zip(COMMON, DFLASH, strict=True))]  # fmt: skip


def test_calibration_reads_the_launches_own_speeds(launches):
    (profile,), lines = calibrate_runs(launches, "test")
    assert profile.backend == "reference" and profile.source == nm.MEASURED and "paired across runs" in profile.how
    logs_d = [math.log(d) for d in DFLASH]
    # DFlash's own factor moves its 6 speedups, EAGLE-3 vs AR's 3 not at all: pooled over the 9
    expected = statistics.stdev(logs_d) * math.sqrt(6 / 9)
    assert profile.sd(nm.SPEEDUP) == pytest.approx(expected, rel=0.35)
    # 3 loads x 2 free speedups (the third at a load is the other two's quotient) x 4
    assert profile.terms[nm.SPEEDUP].df == 3 * 2 * 4 and profile.terms[nm.SPEEDUP].runs == 5
    common = statistics.stdev(math.log(c) for c in COMMON)
    assert profile.sd(nm.RUN_LEVEL) == pytest.approx(common, rel=0.35)  # the whole launch faster or slower
    assert profile.sd(nm.POINT) < profile.sd(nm.RUN_LEVEL)
    assert any("DFlash vs AR speedup at c=1:" in line for line in lines)


def test_the_cli_writes_the_profile_compare_reads_and_names(tmp_path, launches):
    path = tmp_path / "profile.json"
    result = CliRunner().invoke(app, ["calibrate", *[a for run in launches[:4] for a in ("--from", str(run))],
                                      "--profile", str(path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(path.read_text())
    assert doc["schema"] == "dflashbench.noise-profile" and len(doc["runs"]) == 4 and doc["machine"]["gpu"]
    assert set(doc["backends"]["reference"]["terms"]) == {"speedup", "absolute", "run_level", "point"}
    result = CliRunner().invoke(app, ["compare", str(launches[0]), str(launches[0]), "--noise-profile", str(path)])
    assert "run-to-run term, measured here (dflashbench calibrate --from" in result.output, result.output
    bad = CliRunner().invoke(app, ["compare", str(launches[0]), str(launches[0]), "--noise-profile",
                                   str(tmp_path / "none.json")])  # fmt: skip
    assert bad.exit_code == 2 and "--noise-profile" in bad.output


def test_history_reads_the_same_term_from_a_series_and_writes_it(tmp_path):
    rng = np.random.default_rng(5)
    for night in range(1, 13):  # each night's DFlash its own speed: a run-to-run term of 0.05 on its speedups
        write_run(tmp_path / "runs", night, factor={"dflash": math.exp(rng.normal(0, 0.05))}, noise=0.01)
    path = tmp_path / "history-profile.json"
    result = CliRunner().invoke(app, ["history", str(tmp_path / "runs"), "--noise-profile-out", str(path)])
    assert "run-to-run term, from history" in result.output, result.output
    found = nm.read_profile(path)["reference"]
    assert found.source == nm.HISTORY and found.sd(nm.SPEEDUP) > found.sd(nm.ABSOLUTE) / 3
    assert 0.02 < found.sd(nm.SPEEDUP) < 0.08


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_real_calibration_of_two_tiny_launches(tmp_path):
    """Two launches of the embedded demo, 2 prompts at c=1 (about a minute each on a busy 2-core machine)."""
    result = CliRunner().invoke(app, ["calibrate", "-k", "2", "--num-prompts", "2", "--concurrency", "1", "-o",
                                      str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    profile = nm.read_profile(tmp_path / "noise-profile.json")["reference"]
    term = profile.terms[nm.SPEEDUP]
    # up to 3 speedups at c=1 (fewer where a busy machine left a point's per-token timing unobservable), 1 df each
    # free one: of 3 methods' speedups the third is the quotient of the other two
    assert term.runs == 2 and 1 <= term.readings <= 3 and term.df == min(term.readings, 2), term
    assert "paired across runs" in profile.how  # a fresh sweep records each request's prompt digest
