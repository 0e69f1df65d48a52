"""Issue #41: the gate on real sweeps of the reference server. Two unchanged runs pass both ways; a run with
DFlash alone slowed (the reference server's ``--test-step-delay-ms`` on the DFlash server only) fails against
each of them, named as DFlash's speedup over AR, while AR is untouched. The runs are interleaved (the reference
backend computes on the CPU) and carry their speed probe, so the speedup's noise is the drift the probe read
between its two points, measured seconds apart."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.gate.compare import compare_runs, effective_thresholds
from dflashbench.gate.compare_output import format_markdown

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.alone]  # two sweeps judged: by themselves

SUITE = """
name = "gate"
backend = "reference"
methods = ["ar", "dflash"]
model = "embedded"
concurrency = [1, 2]
num_prompts = 4
requests_per_stream = 1
warmup_requests = 1
max_tokens = 32
[drafts]
dflash = "embedded"
[[workloads]]
name = "synthetic"
"""
# A DFlash step of the embedded pair takes ~10 ms on one idle core: 500 ms more makes DFlash ~50 times slower, a
# regression beyond the drift of a busy shared machine (the probe read ±100 % between adjacent points at worst
# while the whole test suite ran beside other work), so the test does not flake under load.
DELAY_MS = 500


def _sweep(tmp_path, name: str, delay_ms: int | None = None):
    suite = tmp_path / f"{name}.toml"
    extra = f'[extra_args]\ndflash = ["--test-step-delay-ms", "{delay_ms}"]\n' if delay_ms else ""
    suite.write_text(SUITE + extra)
    out = tmp_path / name
    result = CliRunner().invoke(app, ["sweep", "--suite", str(suite), "-o", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def _compare(base, new, *args):
    return CliRunner().invoke(app, ["compare", str(base), str(new), *map(str, args)])


def test_unchanged_runs_pass_both_ways_and_a_slowed_drafter_fails_as_dflash_speedup(tmp_path):
    a, b, slow = _sweep(tmp_path, "a"), _sweep(tmp_path, "b"), _sweep(tmp_path, "slow", DELAY_MS)
    manifest = json.loads((a / "manifest.json").read_text())
    # in turn: one probe reading before each load's two points, and at the start and the end
    assert manifest["interleaved"] is True and manifest["probe"]["cpu"]["readings"] == 2 + 2
    assert manifest["placement"]["mode"] == "turns"
    order = [json.loads(line)["point_id"] for line in (a / "points.jsonl").read_text().splitlines()]
    assert [p.split(":")[1] for p in dict.fromkeys(order)] == ["ar", "dflash", "ar", "dflash"]  # interleaved

    # Unchanged, both ways, on the gates a one-method regression shows in (the speedups, tau). The absolute figures
    # of a point this small (4 requests, ~0.4 s) once in a while move 35-40 % at one point with the probe flat
    # (seen twice in 13 pairs: docs/measurements/2026-11-25-gate/): that limit is measured and written in the
    # noise rule, not asserted away here; the launch noise it adds is tested on hand-made runs
    # (tests/gate/test_compare_power.py).
    for base, new in ((a, b), (b, a)):
        result = _compare(base, new, "--no-default-gates", "--max-drop", "speedup=5%", "--max-drop", "tau=0.2",
                          "--accept-weak")  # 4 requests a point: a weak pass, accepted (exit 3 without the flag)
        assert result.exit_code == 0, result.output
        assert "speedup" in result.output and "drift, BASE: speed probe" in result.output
        # fresh sweeps record each request's prompt digest: paired across runs, the run-to-run term named (#62),
        # wherever a speedup was read in both runs (a busy machine can leave a point's per-token timing unobservable,
        # and its speedup then reads "—": nothing to pair)
        rows = [ln.split() for ln in result.output.splitlines() if ln.startswith("reference")]
        if any(r[1] == "dflash/ar" and r[-1] != "n/a" for r in rows):
            assert "run-to-run term, the project's default" in result.output, result.output
            assert "paired across runs: " in result.output, result.output
        else:
            assert "per-token latency not observable" in result.output, result.output

    for base in (a, b):
        result = _compare(base, slow)
        assert result.exit_code == 1, result.output
        verdict = result.output.splitlines()[-1]
        assert "speedup(s): DFlash vs AR speedup at c=" in verdict, verdict  # named first, as the speedup
        assert " fell " in verdict and "or more would have failed" in verdict
        rows = [ln.split() for ln in result.output.splitlines() if ln.startswith("reference")]
        speedups = [r for r in rows if r[1] == "dflash/ar"]
        assert len(speedups) == 2 and "REGRESSION" in {r[-1] for r in speedups}, speedups
        # each says the drop that would have failed it; one a loaded machine left untested (per-token timing not
        # observable there) says so with a dash, never an empty cell
        assert all(r[-2].startswith("-") for r in speedups if r[-1] == "REGRESSION")
        assert all(r[-2].startswith("-") or r[-2] == "—" for r in speedups), speedups

    md = compare_runs(a, slow, effective_thresholds([]))
    summary = format_markdown(md).splitlines()
    assert summary[2].startswith("**❌ ") and "DFlash vs AR speedup at c=" in summary[2]
    assert any(line.startswith("| backend |") and "| fails at |" in line for line in summary)
