"""`dflashbench workloads list|show`, and a missing dataset offline: a clear error saying how to provide it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.workloads import load_requests
from dflashbench.workloads.spec import WorkloadSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_workloads_list_names_every_workload():
    result = run("workloads", "list")
    assert result.exit_code == 0
    for name in ("gsm8k", "math500", "humaneval", "mbpp", "mt-bench", "aime25", "livecodebench", "speed-bench",
                 "synthetic"):  # fmt: skip
        assert f"\n{name} " in "\n" + result.output
    assert "nvidia/SPEED-Bench" in result.output and "throughput_32k" in result.output


def test_workloads_show_prints_exactly_the_requests():
    pytest.importorskip("pyarrow")
    data = str(FIXTURES / "nvidia--SPEED-Bench")
    result = run("workloads", "show", "speed-bench", "--data", data, "--category", "writing", "--max-tokens", "64")
    assert result.exit_code == 0, result.output
    assert result.output == (
        "--- [1/2] id=00000000000000000000000000000003 category=writing max_tokens=64 "
        'chat_template_kwargs={"enable_thinking": false}\n'
        "[user]\nWrite a haiku about autumn rain.\n"
        "--- [2/2] id=00000000000000000000000000000004 category=writing max_tokens=64 "
        'chat_template_kwargs={"enable_thinking": false}\n'
        "[user]\nDraft a two-paragraph cover letter for a librarian job.\n"
        "[user, turn 2, sent after the answer to turn 1]\nNow make it more formal.\n"
        "[user, turn 3, sent after the answer to turn 2]\nShorten it to one paragraph.\n"
    )


def test_workloads_show_json_matches_load_requests():
    pytest.importorskip("pyarrow")
    data = str(FIXTURES / "openai--gsm8k")
    result = run("workloads", "show", "gsm8k", "--data", data, "--num-prompts", "3", "--seed", "5", "--json")
    assert result.exit_code == 0, result.output
    shown = [json.loads(line) for line in result.output.splitlines()]
    expected = load_requests(WorkloadSpec(name="gsm8k"), num_prompts=3, seed=5, data=data)
    assert [s["id"] for s in shown] == [r.id for r in expected]
    assert [s["messages"] for s in shown] == [list(r.messages) for r in expected]
    assert {s["max_tokens"] for s in shown} == {2048}


def test_workloads_show_placeholder_error_is_one_line_with_exit_2():
    pytest.importorskip("pyarrow")
    result = run("workloads", "show", "speed-bench", "--data", str(FIXTURES / "nvidia--SPEED-Bench"))
    assert result.exit_code == 2
    assert "prepare_data.py --dataset speed --config qualitative" in result.output
    skipped = run("workloads", "show", "speed-bench", "--data", str(FIXTURES / "nvidia--SPEED-Bench"),
                  "--skip-placeholders")  # fmt: skip
    assert skipped.exit_code == 0 and skipped.output.count("--- [") == 6


def _offline_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def test_missing_dataset_offline_says_how_to_provide_it(tmp_path):
    pytest.importorskip("datasets")
    out = subprocess.run(
        [sys.executable, "-m", "dflashbench", "workloads", "show", "gsm8k", "--num-prompts", "2"],
        capture_output=True, text=True, env=_offline_env(tmp_path), timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    err = out.stderr.strip()
    assert err.startswith("error: dataset openai/gsm8k (config main, split test) is offline")
    assert "--data PATH" in err and "main/test-00000-of-00001.parquet" in err
    assert "datasets.load_dataset('openai/gsm8k', 'main', split='test')" in err
    assert "Traceback" not in out.stderr


def test_missing_livecodebench_offline_says_how_to_provide_it(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dflashbench", "workloads", "show", "livecodebench"],
        capture_output=True, text=True, env=_offline_env(tmp_path), timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "livecodebench/code_generation_lite file test.jsonl is offline" in out.stderr
    assert "hf download livecodebench/code_generation_lite test.jsonl" in out.stderr


def test_missing_datasets_package_says_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(UserError, match=r"needs the 'datasets' package: pip install 'dflashbench\[datasets\]'"):
        load_requests(WorkloadSpec(name="mbpp"), num_prompts=1, seed=0)
