"""Issue #63, item 3: draft lengths as the engines' recipes set them, printed with their source; the flag, the
suite, the recipe, the drafter and the method's default in that order; compare flags a length that differs."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflashbench.cli import app
from dflashbench.errors import UserError
from dflashbench.gate.compare_drafts import draft_length_differences, server_draft_lengths
from dflashbench.plan.draft_lengths import parse_flag
from dflashbench.types import Method

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def dry(*args: str) -> str:
    result = CliRunner().invoke(app, ["sweep", "--dry-run", "--show-commands", *args])
    assert result.exit_code == 0, result.output
    return result.output


def spec_config(out: str, method: str) -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith(f"server for {method}: "))
    argv = shlex.split(line.split(": ", 1)[1])
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_qwen36_mtp_drafts_the_recipes_three_tokens_with_its_source():
    args = ("--backend", "vllm", "--model", "qwen3.6-35b-a3b", "--method", "ar,mtp", "--gpu", "8xh100")
    out = dry(*args)
    assert spec_config(out, "mtp")["num_speculative_tokens"] == 3
    assert "plan: draft tokens a step: mtp 3 from the engine recipe" in out
    verbose = dry(*args, "--verbose")
    assert ("plan: draft tokens a step: mtp 3 (recipe: the vllm recipe for the model: https://github.com/vllm-project/"
            "recipes/blob/8959cf6/models/Qwen/Qwen3.6-35B-A3B.yaml#L53") in verbose


def test_gpt_oss_120b_eagle3_runs_its_head_at_draft_tp_1():
    out = dry("--backend", "vllm", "--model", "gpt-oss-120b", "--gpu", "8xh100")
    config = spec_config(out, "eagle3")
    assert config["draft_tensor_parallel_size"] == 1 and config["num_speculative_tokens"] == 7
    assert "eagle3 7, draft tp 1, from the engine recipe" in out


def test_flag_over_suite_over_recipe_over_default(tmp_path):
    base = ("--backend", "vllm", "--model", "qwen3.6-35b-a3b", "--method", "ar,mtp", "--gpu", "8xh100")
    flagged = dry(*base, "--num-draft-tokens", "mtp=2")
    assert spec_config(flagged, "mtp")["num_speculative_tokens"] == 2 and "mtp 2 from the flag" in flagged
    suite = tmp_path / "k.toml"
    text = (ROOT / "suites" / "default.toml").read_text()
    text = text.replace('name = "default"', 'name = "k"', 1).replace('model = "qwen3-8b"', 'model = "qwen3.6-35b-a3b"', 1)
    suite.write_text(text + "\n[num_speculative_tokens]\nmtp = 4\n")
    base = ("--backend", "vllm", "--method", "ar,mtp", "--gpu", "8xh100")  # the suite's target: its lengths hold
    from_suite = dry("--suite", str(suite), *base)
    assert spec_config(from_suite, "mtp")["num_speculative_tokens"] == 4 and "mtp 4 from the suite" in from_suite
    both = dry("--suite", str(suite), *base, "--num-draft-tokens", "mtp=5")
    assert spec_config(both, "mtp")["num_speculative_tokens"] == 5 and "mtp 5 from the flag" in both
    # SGLang has no recipe in the registry: the method's default there, said
    sglang = dry("--backend", "sglang", "--model", "qwen3.6-35b-a3b", "--method", "ar,mtp", "--gpu", "8xh100")
    assert "mtp 1 from the method's default" in sglang


def test_the_flag_reads_method_k_pairs():
    assert parse_flag("mtp=3, eagle3=5") == {Method.MTP: 3, Method.EAGLE3: 5}
    for bad in ("mtp", "mtp=0", "ar=2", "nope=3", ""):
        with pytest.raises(UserError, match="--num-draft-tokens"):
            parse_flag(bad)


def _run_copy(tmp_path: Path, name: str, k: int) -> Path:
    src = ROOT / "results" / "examples" / "demo-20261125-024540-6b40"  # vLLM CPU build, eagle3 drafts 5
    dst = tmp_path / name
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    argv = manifest["servers"]["eagle3"]["argv"]
    i = argv.index("--speculative-config") + 1
    argv[i] = json.dumps({**json.loads(argv[i]), "num_speculative_tokens": k}, separators=(",", ":"))
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_compare_flags_a_draft_length_that_differs(tmp_path):
    base, new = _run_copy(tmp_path, "base", 5), _run_copy(tmp_path, "new", 7)
    read = json.loads((base / "manifest.json").read_text())
    assert server_draft_lengths(read) == {"dflash": "15", "eagle3": "5"}
    diff = draft_length_differences(read, json.loads((new / "manifest.json").read_text()))
    assert diff and diff[0].startswith("draft tokens of eagle3: BASE 5, NEW 7")
    out = CliRunner().invoke(app, ["compare", str(base), str(new)]).output
    assert "draft tokens of eagle3: BASE 5, NEW 7" in out, out
    same = CliRunner().invoke(app, ["compare", str(base), str(_run_copy(tmp_path, "same", 5))]).output
    assert "draft tokens of" not in same
