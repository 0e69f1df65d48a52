"""Issue #32: a `compare` gate that tells noise from a regression: the tests on the requests (checked against
scipy), the family's correction, tails too thin to gate, a real slowdown that fails, runs that differ in setting,
and one model given two ways."""

import json
import shutil

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.compare import model_identity
from dflashbench.measure import noise

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("shift", [0.0, 0.3, -0.5])
def test_mann_whitney_matches_scipy_one_sided_with_ties(shift):
    rng = np.random.default_rng(1)
    base = np.round(rng.normal(1.0, 0.4, 40), 1)  # rounded: ties
    new = np.round(rng.normal(1.0 + shift, 0.4, 35), 1)
    for worse, alternative in (("rise", "greater"), ("drop", "less")):
        ours = noise.mann_whitney_p_worse(base, new, worse)
        ref = stats.mannwhitneyu(new, base, alternative=alternative, method="asymptotic", use_continuity=True).pvalue
        assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12), worse


def test_a_tail_quantile_needs_ten_requests_beyond_it():
    assert (noise.requests_for_quantile(0.99), noise.requests_for_quantile(0.9), noise.requests_for_quantile(0.5)) \
        == (1000, 100, 20)  # fmt: skip


def test_bootstrap_null_is_centred_and_a_big_drop_is_beyond_it():
    rng = np.random.default_rng(2)
    tokens, secs = rng.integers(50, 100, 64).astype(float), rng.uniform(0.5, 1.0, 64)
    null = noise.bootstrap_null((tokens, secs), (tokens, secs))
    assert abs(np.median(null)) < 0.01 and 0.01 < null.std() < 0.2
    assert noise.bootstrap_p_worse(np.log(0.7), null, "drop") < 0.001  # 30% slower: far outside
    assert noise.bootstrap_p_worse(np.log(0.99), null, "drop") > 0.2  # 1%: inside


def test_the_runs_drift_widens_the_noise_and_a_shift_of_all_points_stays_beyond_it():
    from dflashbench.gate.compare_noise import fallback_drift, moves_with_machine

    rng = np.random.default_rng(3)
    tokens, secs = rng.integers(90, 100, 64).astype(float), rng.uniform(0.95, 1.0, 64)  # requests alike
    null = noise.bootstrap_null((tokens, secs), (tokens, secs))
    # nine points of three methods that scatter +-5% between two runs of one commit: the robust spread reads it
    scatter = [0.03, -0.05, 0.06, 0.01, -0.02, 0.04, -0.06, 0.0, 0.02]
    methods = ["ar", "dflash", "eagle3"] * 3
    sd = fallback_drift(list(zip(methods, scatter, strict=True)))
    assert 0.02 < sd < 0.08
    assert moves_with_machine("throughput_tok_per_s") and not moves_with_machine("tau")  # tau: no drift
    assert noise.drift_sd(scatter[:4]) == 0.0  # too few points to tell drift
    # a 5.5% drop (past a 5% gate): beyond the requests' own noise, inside the runs' drift
    assert noise.bootstrap_p_worse(np.log(0.945), null, "drop") < 0.01
    assert noise.p_worse_with_drift(np.log(0.945), null, "drop", sd) > 0.05
    # every point 30% slower: they move together, the spread stays small and the drop is far beyond it
    together = fallback_drift([(m, np.log(0.7) + x / 10) for m, x in zip(methods, scatter, strict=True)])
    assert together < 0.01 and noise.p_worse_with_drift(np.log(0.7), null, "drop", together) < 0.001
    # a rise is never a drop
    assert noise.p_worse_with_drift(np.log(1.2), null, "drop", sd) > 0.99


def test_one_model_given_two_ways_is_one_model():
    assert model_identity("/home/u/src/dflashbench/dflashbench/embedded/target") == \
        model_identity("dflashbench/embedded/target") == "embedded/target"  # fmt: skip
    assert model_identity("qwen3-8b") == model_identity("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert model_identity("/a/b/models/my-model") == model_identity("/c/models/my-model") == "models/my-model"


SUITE = """
name = "noise"
backend = "reference"
methods = ["ar"]
model = "embedded"
concurrency = [1]
num_prompts = 12
requests_per_stream = 1
warmup_requests = 1
max_tokens = 48
[[workloads]]
name = "synthetic"
"""


def _sweep(tmp_path, name, delay_ms=None):
    suite = tmp_path / f"{name}.toml"
    suite.write_text(SUITE + (f'[extra_args]\nar = ["--test-step-delay-ms", "{delay_ms}"]\n' if delay_ms else ""))
    out = tmp_path / name
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def test_a_real_slowdown_fails_and_other_hardware_is_named_first(tmp_path):
    """The reference server with a sleep after every decode step (AR's step is ~4-15 ms here; +40 ms is several
    times slower: beyond the drift the speed probe reads on a busy shared machine, ±100 % at worst) fails the
    default gates. (Unchanged reruns: tests/gate/test_compare_sweeps.py.)"""
    base, slow = _sweep(tmp_path, "base"), _sweep(tmp_path, "slow", delay_ms=40)
    runner = CliRunner()
    # a run against itself: nothing moved, but 12 requests a point could not have seen a drop of 2x a 5 % gate,
    # so the pass is weak (exit 3) unless accepted
    same = runner.invoke(app, ["compare", str(base), str(base)])
    assert same.exit_code == 3 and same.output.splitlines()[-1].startswith("weak pass (exit 3)"), same.output
    assert runner.invoke(app, ["compare", str(base), str(base), "--accept-weak"]).exit_code == 0
    result = runner.invoke(app, ["compare", str(base), str(slow)])
    assert result.exit_code == 1, result.output
    row = next(ln for ln in result.output.splitlines() if "throughput_tok_per_s" in ln and " all " in ln)
    assert row.endswith("REGRESSION"), row
    assert "a move past its gate fails only when" in result.output
    assert "family-wise" in result.output and "min-p" in result.output
    assert "p99 of 12 requests: a gate needs 1000" in result.output  # the thin tail is shown, not gated

    # a run on other hardware: named first; --strict makes it unusable input
    other = tmp_path / "other"
    shutil.copytree(base, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["gpu"] = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
    (other / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["compare", str(base), str(other), "--accept-weak"])
    assert result.exit_code == 0, result.output
    assert result.output.split("\n\n", 1)[1].startswith("warning: the runs differ in setting: hardware: BASE no NVIDIA "
                                                        "GPU, NEW NVIDIA H100")  # after the verdict line  # fmt: skip
    assert runner.invoke(app, ["compare", str(base), str(other), "--strict", "--accept-weak"]).exit_code == 2


def test_an_engine_from_another_venv_is_started_by_python_not_a_path():
    from dflashbench.paths import portable, portable_tree

    argv = ["/opt/venvs/vllm-cpu/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"]
    assert portable_tree(argv)[0] == "python" and portable_tree(argv)[1:] == argv[1:]
    assert portable("/usr/local/bin/python3.12") == "python" and portable("python-dotenv") == "python-dotenv"


def test_a_fresh_run_keeps_no_path_of_the_machine(tmp_path, monkeypatch):
    """Issue #32 item 6: a run made in a temporary folder names neither that folder nor the virtualenv (nor the
    checkout) in its manifest, its points or its report; the embedded pair is named by its place in the project."""
    import sys
    from pathlib import Path

    import dflashbench

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results"
    suite = tmp_path / "tiny.toml"
    suite.write_text(SUITE.replace('methods = ["ar"]', 'methods = ["ar", "dflash"]').replace("num_prompts = 12",
                                                                                            "num_prompts = 2"))
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(out)])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    checkout = str(Path(dflashbench.__file__).resolve().parent.parent)
    texts = {p.name: p.read_text() for p in [run / "manifest.json", run / "points.jsonl",
                                             *(tmp_path / "reports").glob("*.html")]}  # fmt: skip
    assert len(texts) == 3
    for name, text in texts.items():
        for machine_path in (str(tmp_path), sys.prefix, checkout):
            assert machine_path not in text, (name, machine_path)
    manifest = json.loads(texts["manifest.json"])
    assert manifest["model"] == "dflashbench/embedded/target" and manifest["servers"]["ar"]["argv"][0] == "python"
