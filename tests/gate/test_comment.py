"""The pull request comment (dflashbench/gate/comment.py): at most 65,536 characters at any suite size, BASE named
first, one line per gated speedup, the rest folded.

"At GPU scale": two synthetic runs holding every point of a suite's grid, written through the real RunStore
(tests/report/factory.py): every method x workload x category (category ``all`` and each category the workload's
prompts carry) x concurrency (points alone: no requests, so no noise test narrows a gate); NEW has DFlash's rates
20 % lower, so each of its figures and speedups is a regression, the lines as long as they get. Run with ``-s`` to see the sizes."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from report.factory import point, write_run

from dflashbench.gate import comment as pr
from dflashbench.gate import compare as cmp

ROOT = Path(__file__).resolve().parents[2]
# the categories each workload's rows carry (dflashbench/workloads/: GSM8K one, MATH-500 its seven subjects,
# HumanEval one, SPEED-Bench's qualitative split eleven)
CATEGORIES = {"gsm8k": ["math"], "humaneval": ["code"],
              "math500": ["algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                          "number_theory", "prealgebra", "precalculus"],
              "speed-bench": ["coding", "humanities", "math", "multilingual", "qa", "rag", "reasoning", "roleplay",
                              "stem", "summarization", "writing"]}  # fmt: skip
RATES = {"ar": 80.0, "eagle3": 150.0, "dflash": 240.0}


def grid_runs(root: Path, methods, workloads, loads, factor: float = 0.8) -> tuple[Path, Path]:
    """BASE and NEW holding every point of the grid (module docstring); NEW's rates times ``factor``."""
    runs = []
    for side, f in (("base", 1.0), ("new", factor)):
        points = []
        for m in methods:
            for w in workloads:
                for cat in ["all", *CATEGORIES.get(w, [w])]:
                    for c in loads:
                        rate = RATES[m] * (f if m == "dflash" else 1.0)
                        points.append(point(m, c, rate, rate * c, backend="vllm", model="Qwen/Qwen3-8B", workload=w,
                                            category=cat, run_id=side, tau=1.0 if m == "ar" else 3.5,
                                            ttft_s_p99=0.2))  # fmt: skip
        manifest = {"config": {"backend": "vllm"}, "backend": "vllm", "run_id": side,
                    "started_at": "2026-11-28T02:17:00+00:00", "labels": {"commit": f"{side}0123456789abcdef"},
                    "versions": {"vllm": "0.32.0"}}  # fmt: skip
        runs.append(write_run(root / side, points, manifest=manifest, run_id=side))
    return runs[0], runs[1]


def _suite(name: str) -> dict:
    return tomllib.loads((ROOT / "suites" / f"{name}.toml").read_text())


def _render(base: Path, new: Path, **kw) -> str:
    result = cmp.compare_runs(base, new, cmp.effective_thresholds([], use_defaults=True))
    kw.setdefault("marker", "<!-- dflashbench-gpu-comment -->")
    return pr.render(result, pr.RunInfo.read(base), pr.RunInfo.read(new),
                     base_why="nightly run 41 on main, compare passed", built="vLLM from this pull request",
                     link="https://github.com/o/r/actions/runs/1", **kw)  # fmt: skip


@pytest.mark.parametrize("suite", ["ci", "default"])
def test_the_comment_at_gpu_scale_fits_githubs_limit(tmp_path, suite):
    spec = _suite(suite)
    workloads = [w["name"] for w in spec["workloads"]]
    base, new = grid_runs(tmp_path, spec["methods"], workloads, spec["concurrency"])
    history = "### dflashbench history: cannot judge\n\n" + "\n".join(f"- series {i}: too short" for i in range(2000))
    text = _render(base, new, extras=[("history", history)])
    n_points = len(spec["methods"]) * sum(1 + len(CATEGORIES[w]) for w in workloads) * len(spec["concurrency"])
    alone = _render(base, new)
    print(f"\n{suite}: {n_points} points a run; comment {pr.size(alone):,} bytes ({len(alone):,} characters) with "
          f"compare's result alone, {pr.size(text):,} with a 2,000-line history folded in")
    assert pr.size(alone) <= pr.LIMIT
    assert pr.size(text) <= pr.LIMIT and len(text) <= 65_536
    lines = text.splitlines()
    assert lines[0] == "<!-- dflashbench-gpu-comment -->"
    assert sum(line.startswith("#") for line in lines) == 1  # one heading: history's own is made bold
    assert lines[3].startswith("**BASE** `base`") and "base01234567" in lines[3] and "compare passed" in lines[3]
    assert lines[4].startswith("**NEW** `new`") and "vLLM from this pull request" in lines[4]
    pairs, n_loads = 3, len(spec["concurrency"])
    speedups = [line for line in lines if line.startswith("- ") and " speedup at " in line]
    assert len(speedups) == pairs * n_loads * len(workloads)  # category all: one line per gated speedup
    assert all("**regression**" in line for line in speedups if line.startswith("- DFlash"))
    assert all(line.endswith(" ok") for line in speedups if line.startswith("- EAGLE-3 vs AR"))
    assert text.index("**Gated speedups**") < text.index("<details>") < text.index("**history**")


def test_any_size_is_cut_to_the_limit_with_a_link(tmp_path):
    """A grid far beyond any suite (3 methods x 40 workloads x 24 loads): still within the limit, the speedups
    above the fold capped, the rest cut with a pointer to the artifact."""
    workloads = [f"w{i}" for i in range(40)]
    base, new = grid_runs(tmp_path, ["ar", "eagle3", "dflash"], workloads, list(range(1, 25)))
    text = _render(base, new)
    assert pr.size(text) <= pr.LIMIT
    assert f"and {3 * 24 * 40 - pr.MAX_SPEEDUP_LINES} more below" in text
    assert "more line(s) cut to keep within GitHub's comment limit: see [the run's artifacts](https://" in text
    assert text.rstrip().endswith("</details>")


def test_equal_bullets_are_grouped_and_the_builds_compared():
    assert pr.grouped(["a", "b", "a", "a"]) == ["a (×3)", "b"]
    base = pr.RunInfo("b", "abc", "2026-11-27", "vllm 0.31.0", "0.1.0 @aaa", "dflash: z-lab/x")
    new = pr.RunInfo("n", "def", "2026-11-28", "vllm 0.32.0", "0.1.0 @aaa", "dflash: ./drafter")
    assert pr.differences(base, new) == ["engine: BASE vllm 0.31.0 → NEW vllm 0.32.0",
                                         "drafters: BASE dflash: z-lab/x → NEW dflash: ./drafter"]  # fmt: skip


def test_a_marker_that_is_not_an_html_comment_is_refused(tmp_path):
    from dflashbench.errors import UserError

    base, new = grid_runs(tmp_path, ["ar", "dflash"], ["gsm8k"], [1], factor=1.0)
    with pytest.raises(UserError, match="--comment-marker"):
        _render(base, new, marker="dflashbench")


def test_compare_writes_the_comment_from_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from dflashbench.cli import app

    base, new = grid_runs(tmp_path, ["ar", "eagle3", "dflash"], ["gsm8k"], [1, 8], factor=0.7)
    (tmp_path / "history.md").write_text("### dflashbench history: no recent regression\n\n- ok\n")
    out = tmp_path / "comment.md"
    res = CliRunner().invoke(app, ["compare", str(base), str(new), "--comment", str(out), "--comment-built",
                                   "dflashbench from this pull request", "--comment-extra", str(tmp_path / "history.md"),
                                   "--comment-extra", str(tmp_path / "absent.md")])  # fmt: skip
    assert res.exit_code == 1, res.output
    text = out.read_text()
    assert text.startswith(pr.DEFAULT_MARKER + "\n### dflashbench: ❌") and "**history**" in text
    assert "DFlash vs AR speedup at c=8 (gsm8k)" in text and json.dumps(text)  # plain text, any size


def test_the_comment_says_which_run_to_run_term_judged(tmp_path):
    """The Noise line above the fold: the runner's own term where a profile was given (its sizes and where it came
    from), the project's default said to be wide and not this machine's, or none for a backend never measured."""
    from dflashbench.measure import noise_model

    base, new = grid_runs(tmp_path, ["ar", "dflash"], ["gsm8k"], [1], factor=1.0)
    never = pr.noise_line(cmp.compare_runs(base, new, cmp.effective_thresholds([], use_defaults=True)))
    assert never.startswith("**Noise**: no run-to-run term known for this backend")  # vllm: none in launch_noise.toml
    profile = tmp_path / "noise-profile.json"
    term = noise_model.RunToRun("vllm", {"speedup": noise_model.Term(0.0198, 14), "absolute": noise_model.Term(0.03)},
                                noise_model.HISTORY, "dflashbench history: 8 runs")  # fmt: skip
    noise_model.write_profile(profile, [term], made_by="dflashbench history")
    result = cmp.compare_runs(base, new, cmp.effective_thresholds([], use_defaults=True), noise_profile=profile)
    line = pr.noise_line(result)
    assert line.startswith("**Noise**: the run-to-run term from history (speedup ±2.0%, absolute ±3.0%")
    assert "dflashbench history: 8 runs" in line and "not this machine's" not in line
    text = pr.render(result, pr.RunInfo.read(base), pr.RunInfo.read(new))
    assert text.index("**Gated speedups**") < text.index(line) < text.index("<details>")
    default = noise_model.project_default("reference")
    result.terms = (default, default)
    line = pr.noise_line(result)
    assert line.startswith("**Noise**: the run-to-run term the project's default (speedup ±7.5%")
    assert "not this machine's, and wide" in line and "--noise-profile-out" in line
